"""``python -m nvfp4_suite.kernels.flydsl.sim.bench``: how fast the simulator runs the kernel.

For each target it times one launch of a one-row, one-KV-head, 16-block
problem (TOPK 16, every slot valid; the issue's yardstick, goal under 2 s)
after a warm-up launch that parses the program, and prints the simulated
instructions per second. The floor, measured in the same run, is the same
problem through ``nvfp4_suite.reference.emulate`` (numpy, the seed's arithmetic): the
ratio says how many times slower executing the compiled kernel is than
emulating its arithmetic. ``--golden`` adds the time to check the whole
golden catalog per target (slow: minutes).
"""

from __future__ import annotations

import argparse
import sys
import time

from nvfp4_suite.reference import emulate
from nvfp4_suite.reference.examples import random_problem

from ..targets import ARCHS
from .backend import FlydslSimBackend, sim_missing


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None) -> int:
    """Print the benchmark table; exit 2 when the kernel cannot be compiled here."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.flydsl.sim.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", action="append", choices=ARCHS, help="target (repeatable; default both)")
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--golden", action="store_true", help="also time the golden catalog per target")
    args = ap.parse_args(argv)
    missing = sim_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    problem = random_problem(0, reqs=1, topk=16, seq_lens=[16 * 128], invalid_fraction=0.0)
    floor = min(_timed(lambda: emulate(problem, splits=args.splits)) for _ in range(3))
    print(f"problem: 1 row, Hkv 1, TOPK 16, 16 blocks, splits {args.splits}; "
          f"floor (nvfp4_suite.reference.emulate) {floor * 1e3:.1f} ms")
    print(f"{'target':8} {'launch s':>9} {'instructions':>13} {'instr/s':>10} {'x floor':>8}")
    for arch in args.arch or ARCHS:
        b = FlydslSimBackend(arch)
        b(problem, splits=args.splits)
        before = b.instructions
        t = min(_timed(lambda: b(problem, splits=args.splits)) for _ in range(2))
        n = (b.instructions - before) // 2
        print(f"{arch:8} {t:9.3f} {n:13d} {n / t:10.0f} {t / floor:8.1f}")
        if args.golden:
            from nvfp4_suite.vectors.catalog import check_all

            t0 = time.perf_counter()
            ok, _ = check_all(b)
            print(f"{arch:8} golden catalog: {'CONFORMANT' if ok else 'FAILED'} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
