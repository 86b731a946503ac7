"""``python -m nvfp4_suite.kernels.flydsl.sim.bench``: how fast the simulator runs the kernel.

Two tables, each against a floor measured in the same run:

- per instruction: the time of one execution of each of a few instructions
  the kernel is made of (the most frequent ALU forms, an SDWA form, the
  MFMA), on a wave with every lane active, in microseconds;
- per launch: one launch of a one-row, one-KV-head, 16-block problem (TOPK
  16, every slot valid) per target, after a warm-up launch that parses the
  program: seconds, instructions per second (simulator steps: one step
  executes one instruction for every wave it is issued to), wave-instructions
  per second (an instruction counted once per wave, as hardware counts them),
  and the ratio to the floor, the same problem through
  ``nvfp4_suite.reference.emulate`` (numpy, the seed's arithmetic); with
  ``--coverage``, also the launch with coverage recording on (``coverage``),
  timed in the same rounds, and its overhead over the launch without.

Times are CPU seconds of this process (``time.process_time``). A launch and
its floor are timed alternately, ``--rounds`` times each, and each figure is
the best of its rounds: a machine whose speed drifts (other processes, clock
changes) moves both alike, where a floor timed once before all the launches
moved the ratio by a third either way.

The golden catalog's time per target is measured by
``python -m nvfp4_suite.vectors.simulator.bench --golden``, which runs the check engine.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from nvfp4_suite.reference import emulate
from nvfp4_suite.reference.examples import random_problem

from ..targets import ARCHS, add_arch_option
from .backend import FlydslSimBackend, sim_missing
from .coverage import COLLECTOR
from .launch import make_test_wave
from .program import parse_instruction
from .wave import decode

# A few instructions the kernel is made of (its most frequent forms; the MFMA
# of each target), in the assembly syntax of its compiles.
INSTRUCTIONS = {
    "v_and_b32_e32 v1, 15, v0": ARCHS,
    "v_mul_f32_e32 v1, s3, v2": ARCHS,
    "v_pk_mul_f32 v[4:5], v[4:5], s[40:41] op_sel_hi:[1,0]": ARCHS,
    "v_lshlrev_b32_sdwa v3, v6, sext(v7) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:WORD_1": ARCHS,
    "v_exp_f32_e32 v8, v9": ARCHS,
    "v_mfma_f32_16x16x32_bf16 v[20:23], v[24:27], v[28:31], v[20:23]": ("gfx950",),
    "v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[28:29], v[20:23]": ("gfx942",),
}


def _timed(fn) -> float:
    """CPU seconds of this process spent in ``fn()``: the figures and their floors
    stay comparable on a machine other processes share."""
    t = time.process_time()
    fn()
    return time.process_time() - t


def bench_problem():
    """The benchmark's problem: 1 row, Hkv 1, TOPK 16, 16 blocks, every slot valid."""
    return random_problem(0, reqs=1, topk=16, seq_lens=[16 * 128], invalid_fraction=0.0)


def instruction_us(arch: str, text: str, n: int = 2000) -> float:
    """Microseconds per execution of instruction ``text`` on a full-EXEC wave of
    ``arch`` (registers filled with small random bf16/float32 bit patterns)."""
    w = make_test_wave(arch)
    rng = np.random.default_rng(0)
    w.v[:] = (rng.integers(0x3C00, 0x4000, w.v.shape, dtype=np.uint32) << 16) | \
        rng.integers(0x3C00, 0x4000, w.v.shape, dtype=np.uint32)
    w.s[:100] = 0x3F800000
    fn = decode(parse_instruction(text))  # as a launch executes it

    def loop():
        with np.errstate(all="ignore"):
            for _ in range(n):
                fn(w)
    return min(_timed(loop) for _ in range(3)) / n * 1e6


def launch_figures(arch: str, problem, splits: int = 1, rounds: int = 5, recorded: bool = False) -> dict:
    """One launch of ``problem`` on ``arch`` after a warm-up, and its floor
    (``reference.emulate`` of the same problem), timed alternately ``rounds``
    times: ``seconds`` and ``floor`` (the best of each), ``steps`` (simulator
    instruction steps) and ``wave_instructions`` of one launch; ``recorded``:
    also the launch with coverage recording on, in each round, as ``recorded_seconds``
    (the best; the collector's records are dropped after and its switch restored)."""
    b = FlydslSimBackend(arch)
    b(problem, splits=splits)
    launch, floor, with_records = [], [], []
    was = COLLECTOR.enabled
    try:
        for _ in range(rounds):
            floor.append(_timed(lambda: emulate(problem, splits=splits)))
            COLLECTOR.enabled = False
            before = (b.instructions, b.steps)
            launch.append(_timed(lambda: b(problem, splits=splits)))
            counts = (b.instructions - before[0], b.steps - before[1])
            if recorded:
                COLLECTOR.enabled = True
                with_records.append(_timed(lambda: b(problem, splits=splits)))
    finally:
        COLLECTOR.enabled = was
        if recorded:
            COLLECTOR.reset()
    out = {"seconds": min(launch), "floor": min(floor), "wave_instructions": counts[0], "steps": counts[1]}
    if recorded:
        out["recorded_seconds"] = min(with_records)
    return out


def main(argv=None) -> int:
    """Print the benchmark tables; exit 2 when the kernel cannot be had here."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.flydsl.sim.bench",
                                 description=__doc__.split("\n\n")[0])
    add_arch_option(ap)
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5, help="launches and floors timed alternately per target")
    ap.add_argument("--no-instructions", action="store_true", help="skip the per-instruction table")
    ap.add_argument("--coverage", action="store_true",
                    help="also time each launch with coverage recording on, and its overhead")
    args = ap.parse_args(argv)
    archs = args.arch or list(ARCHS)
    if args.rounds < 1:
        print(f"--rounds must be at least 1, got {args.rounds}", file=sys.stderr)
        return 2
    missing = sim_missing(tuple(archs))
    if missing:
        print(missing, file=sys.stderr)
        return 2
    problem = bench_problem()
    if not args.no_instructions:
        # The floor of an instruction: numpy's cheapest whole-wave operation.
        a, b = np.arange(64, dtype=np.uint32), np.arange(64, dtype=np.uint32)
        np_us = min(_timed(lambda: [np.bitwise_and(a, b) for _ in range(2000)]) for _ in range(3)) / 2000 * 1e6
        print(f"per instruction (us per execution, one full wave; floor: numpy uint32[64] & = {np_us:.2f} us)")
        print(f"{'target':8} {'us':>8} {'x floor':>8}  instruction")
        for arch in archs:
            for text, where in INSTRUCTIONS.items():
                if arch in where:
                    us = instruction_us(arch, text)
                    print(f"{arch:8} {us:8.2f} {us / np_us:8.1f}  {text}")
    print(f"per launch: 1 row, Hkv 1, TOPK 16, 16 blocks, splits {args.splits}; floor: "
          f"nvfp4_suite.reference.emulate, timed alternately with the launch, best of {args.rounds} each")
    print(f"{'target':8} {'launch s':>9} {'floor ms':>9} {'steps':>9} {'wave-instr':>11} {'instr/s':>10} "
          f"{'wave-instr/s':>13} {'x floor':>8}" + (f" {'recorded s':>10} {'overhead':>8}" if args.coverage else ""))
    for arch in archs:
        f = launch_figures(arch, problem, args.splits, args.rounds, recorded=args.coverage)
        t = f["seconds"]
        extra = (f" {f['recorded_seconds']:10.3f} {(f['recorded_seconds'] / t - 1) * 100:7.1f}%"
                 if args.coverage else "")
        print(f"{arch:8} {t:9.3f} {f['floor'] * 1e3:9.1f} {f['steps']:9d} {f['wave_instructions']:11d} "
              f"{f['steps'] / t:10.0f} {f['wave_instructions'] / t:13.0f} {t / f['floor']:8.1f}" + extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
