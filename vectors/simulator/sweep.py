"""``python -m nvfp4_suite.vectors.simulator.sweep``: the full conformance check of the
simulated FlyDSL kernel (``flydsl-sim-gfx942``/``-gfx950``), spread over worker processes.

    python -m nvfp4_suite.vectors.simulator.sweep [--arch gfx950 --arch gfx942] [--golden [--case ID] [--splits N]]
        [--examples 200] [--seed 1] [--jobs N] [--shard-size 10]

For each target: every golden case (``--golden``) at every launch (split
count and XCD placement) its manifest lists, one task per case and split
count (``--splits``: only these), and ``--examples`` generated problems in
shards of ``--shard-size`` (each shard its own hypothesis seed, derived from
``--seed``, without shrinking: a failure is printed with its replay file).
Workers are processes (``--jobs``, default the CPU count; 1 runs in this
process); the compiled kernels are shared through the compile cache
(``nvfp4_suite.kernels.flydsl.sim.compile``), so a machine without FlyDSL runs
from a copied cache folder (``NVFP4_SIM_CACHE``). Prints a line per finished
task and a summary; exit 0 when everything conforms, 1 otherwise, 2 when
the kernel cannot be had here.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shlex
import sys
import time
from typing import Callable

from nvfp4_suite.kernels.flydsl.lanes import SPLITS
from nvfp4_suite.kernels.flydsl.sim.backend import FlydslSimBackend, sim_missing
from nvfp4_suite.kernels.flydsl.targets import ARCHS, add_arch_option
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.cli.progress import Progress
from nvfp4_suite.vectors.cli.render import golden_lines
from nvfp4_suite.vectors.cli.runner import guarded
from nvfp4_suite.vectors.engine.check import check_generated, check_golden
from nvfp4_suite.vectors.engine.harness import save_repro
from nvfp4_suite.vectors.engine.verdict import SetupError, Verdict, decide


def golden_task(arch: str, case_id: int, splits: int | None) -> tuple[bool, list[str], int]:
    """One golden case on ``arch`` (``splits``: only its launches with this split
    count; None for an invalid case, which runs the validator only):
    ``(conforms, report lines, wave-instructions simulated)``."""
    b = FlydslSimBackend(arch)
    run = check_golden(b, cases={case_id}, splits=None if splits is None else {splits})
    return run.ok, golden_lines(run, b.name)[1:], b.instructions


def generated_task(arch: str, examples: int, seed: int) -> tuple[bool, list[str], int]:
    """``examples`` generated problems on ``arch`` from hypothesis seed ``seed``,
    unshrunk: ``(conforms, report lines, wave-instructions simulated)``; a
    failure is saved as a repro file, its replay command printed."""
    b = FlydslSimBackend(arch)
    gen = check_generated(b, examples, seed, progress_every=10**9, shrink=False)
    # The shard draws what `check --seed <seed>` draws (nvfp4_suite.vectors.engine.strategies.run_generated).
    lines = [f"generated seed {seed}: {gen.n} problems, {gen.totals['elements']} elements, "
             f"max |diff|/bound {gen.totals['max_ratio']:.3g}; the same problems: "
             + shlex.join(["python", "-m", "nvfp4_suite.vectors", "check", "--backend", b.name, "--no-golden",
                           "--examples", str(examples), "--seed", str(seed)])]
    if gen.failing is not None:
        f = gen.failing
        path = save_repro(b.name, f.problem, f.launch, f.text)
        lines += [f.text, "saved: " + str(path) + "; replay: "
                  + shlex.join(["python", "-m", "nvfp4_suite.vectors", "replay", str(path), "--backend", b.name])]
    return gen.ok, lines, b.instructions


def tasks_for(arch: str, golden: bool, cases=None, splits=None, examples: int = 0, seed: int = 1,
              shard_size: int = 10) -> list[tuple[str, Callable[..., tuple[bool, list[str], int]], tuple]]:
    """The tasks of one target as ``(name, function, arguments)``: a golden task
    per case and split count of its manifest launches (``cases``, ``splits``:
    only these), a generated task per shard."""
    tasks: list[tuple[str, Callable[..., tuple[bool, list[str], int]], tuple]] = []
    if golden:
        for c in catalog.load_manifest()["cases"]:
            if cases and c["id"] not in cases:
                continue
            counts: list[int | None]
            if c["result"] == "valid":
                counts = [s for s in sorted({x.known_splits for x in catalog.launches(c)} & set(SPLITS))
                          if not splits or s in splits]
            else:
                counts = [None]
            tasks += [(f"{arch} golden case {c['id']} {c['name']}" + (f" splits {s}" if s else ""),
                       golden_task, (arch, c["id"], s)) for s in counts]
    for k in range(0, examples, shard_size):
        n = min(shard_size, examples - k)
        tasks.append((f"{arch} generated {k}..{k + n - 1}", generated_task, (arch, n, seed * 100_003 + k)))
    return tasks


def run_tasks(tasks, jobs: int, out=print, progress: Progress | None = None) -> tuple[list[str], int, float]:
    """Run ``tasks`` on ``jobs`` worker processes (1: in this process), printing a
    line per finished task through ``out`` (``progress``: a terminal's bar, which
    then shows the passing tasks' lines, the failing ones still printed): ``(names
    failed, wave-instructions, wall seconds)``."""
    # Most splits first: those tasks run longest, so the pool ends together.
    tasks = sorted(tasks, key=lambda t: -(t[2][2] or 0) if t[1] is golden_task else -8)
    t0 = time.perf_counter()
    failed, instructions = [], 0

    def report(done, name, result):
        nonlocal instructions
        ok, lines, n = result
        instructions += n
        line = f"[{done}/{len(tasks)} {time.perf_counter() - t0:6.0f}s] {'PASS' if ok else 'FAIL'} {name}"
        if progress is not None and ok:
            progress(line)
            return
        if progress is not None:
            progress.clear()
        out(line)
        if not ok:
            failed.append(name)
            out("    " + "\n    ".join(lines))

    if jobs <= 1:
        for done, (name, fn, a) in enumerate(tasks, 1):
            report(done, name, _guarded(fn, a))
    else:
        with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
            futures = {pool.submit(_guarded, fn, a): name for name, fn, a in tasks}
            for done, f in enumerate(concurrent.futures.as_completed(futures), 1):
                report(done, futures[f], f.result())
    return failed, instructions, time.perf_counter() - t0


def _guarded(fn, args) -> tuple[bool, list[str], int]:
    """``fn(*args)``; a task that raises is a failed one, reported by name."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - a crashed task is a failed one
        return False, [f"crashed: {type(e).__name__}: {e}"], 0


def main(argv=None) -> int:
    """The command line; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.vectors.simulator.sweep",
                                 description=__doc__.split("\n\n")[0])
    add_arch_option(ap)
    ap.add_argument("--golden", action="store_true", help="check every golden case")
    ap.add_argument("--case", type=int, action="append", help="only this golden case id (repeatable)")
    ap.add_argument("--splits", type=int, action="append", choices=SPLITS,
                    help="only golden launches with this split count (repeatable)")
    ap.add_argument("--examples", type=int, default=0, help="generated problems per target")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shard-size", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (1: this process)")
    args = ap.parse_args(argv)
    return guarded(lambda: _sweep(args))


def _sweep(args) -> Verdict:
    """The sweep ``args`` asks for, and its verdict (``verdict.decide`` over its tasks)."""
    archs = tuple(args.arch or ARCHS)
    if not args.golden and args.examples <= 0:
        raise SetupError("nothing to check: give --golden and/or --examples N")
    missing = sim_missing(archs)
    if missing:
        raise SetupError(missing)
    if args.case:
        known = {c["id"] for c in catalog.load_manifest()["cases"]}
        bad = sorted(set(args.case) - known)
        if bad:
            raise SetupError(f"--case {bad[0]}: no golden case has this id")
    tasks = [t for a in archs for t in tasks_for(a, args.golden, args.case, args.splits, args.examples, args.seed,
                                                  args.shard_size)]
    if not tasks:
        raise SetupError("nothing to check: no golden launch has the split counts chosen")
    bar = Progress(sys.stderr)
    failed, instructions, dt = run_tasks(tasks, max(1, args.jobs), out=lambda s: print(s, flush=True),
                                         progress=bar if bar.tty else None)
    bar.clear()
    print(f"{len(tasks) - len(failed)} of {len(tasks)} tasks conform; {instructions} wave-instructions simulated "
          f"in {dt:.0f} s ({instructions / max(dt, 1e-9):.0f} per second over {args.jobs} workers)")
    for name in failed:
        print(f"FAILED: {name}")
    verdict = decide(judged=len(tasks), failed=len(failed))
    print(f"{verdict.head()}: the simulator on {', '.join(archs)}")
    return verdict


if __name__ == "__main__":
    sys.exit(main())
