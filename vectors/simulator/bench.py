"""``python -m nvfp4_suite.vectors.simulator.bench``: the simulator's speed on the kernel,
with the golden catalog's time per target.

    python -m nvfp4_suite.vectors.simulator.bench [--arch gfx950] [--golden] [--examples N] [--jobs N]
        [--no-instructions]

Prints the tables of ``python -m nvfp4_suite.kernels.flydsl.sim.bench`` (per
instruction and per launch, each against a floor measured in the same run:
numpy's cheapest whole-wave operation, and ``nvfp4_suite.reference.emulate``);
``--golden`` adds, per target, the wall time of checking the whole golden
catalog at every launch (split count and XCD placement) its manifest lists
(``vectors.sim_sweep``'s golden tasks on ``--jobs`` processes), with the
wave-instructions simulated (per CPU second with ``--jobs 1``, per wall
second otherwise) and the verdict (a line per finished task on stderr);
``--examples N`` adds the same figures for ``N`` generated problems per
target (``vectors.sim_sweep``'s generated tasks, hypothesis seed 1). Exit 0,
or 1 when the catalog or a generated problem does not conform, 2 when the
kernel cannot be had here.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from nvfp4_suite.kernels.flydsl.sim import bench
from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing
from nvfp4_suite.kernels.flydsl.targets import ARCHS, add_arch_option
from nvfp4_suite.vectors.cli.runner import guarded
from nvfp4_suite.vectors.engine.verdict import SetupError
from nvfp4_suite.vectors.simulator.sweep import run_tasks, tasks_for


def main(argv=None) -> int:
    """The command line; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.vectors.simulator.bench",
                                 description=__doc__.split("\n\n")[0])
    add_arch_option(ap)
    ap.add_argument("--golden", action="store_true", help="also time the golden catalog per target")
    ap.add_argument("--case", type=int, action="append", help="with --golden: only this case id (repeatable)")
    ap.add_argument("--examples", type=int, default=0, help="also time N generated problems per target")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes for --golden/--examples")
    ap.add_argument("--no-instructions", action="store_true", help="skip the per-instruction table")
    args = ap.parse_args(argv)
    return guarded(lambda: _bench(args))


def _bench(args) -> int:
    """The timings ``args`` asks for; exit 1 when a timed check failed."""
    archs = list(args.arch or ARCHS)
    missing = sim_missing(tuple(archs))
    if missing:
        raise SetupError(missing)
    rc = bench.main(sum((["--arch", a] for a in archs), [])
                    + (["--no-instructions"] if args.no_instructions else []))
    if rc:
        return rc
    failed_any = False
    if args.golden:
        failed_any |= _timed_tasks("golden catalog, every launch its manifest lists",
                                   {a: tasks_for(a, True, args.case) for a in archs}, args.jobs)
    if args.examples:
        failed_any |= _timed_tasks(f"{args.examples} generated problems per target (seed 1)",
                                   {a: tasks_for(a, False, examples=args.examples) for a in archs}, args.jobs)
    return 1 if failed_any else 0


def _timed_tasks(title: str, tasks: dict, jobs: int) -> bool:
    """Run each target's ``tasks`` (arch -> ``sim_sweep`` tasks) on ``jobs``
    processes, printing a row per target; whether any failed."""
    print(f"{title} ({jobs} worker processes)")
    print(f"{'target':8} {'wall s':>8} {'cpu s':>8} {'tasks':>6} {'wave-instr':>12} {'wave-instr/s':>13}  verdict")
    failed_any = False
    for arch, arch_tasks in tasks.items():
        cpu0 = time.process_time()
        # The per-task lines (minutes of work) go to stderr, the table to stdout.
        failed, n, dt = run_tasks(arch_tasks, max(1, jobs), out=lambda s: print(s, file=sys.stderr, flush=True))
        # CPU seconds of this process: the work itself when --jobs 1 (a shared
        # machine slows the wall time), not counted for worker processes.
        cpu_s = time.process_time() - cpu0
        # Two decimals: one small generated problem can take under 0.05 s.
        cpu = f"{cpu_s:8.2f}" if jobs <= 1 else f"{'-':>8}"
        failed_any |= bool(failed)
        rate = n / max(cpu_s if jobs <= 1 else dt, 1e-9)  # the rate of the printed CPU seconds
        print(f"{arch:8} {dt:8.1f} {cpu} {len(arch_tasks):6d} {n:12d} {rate:13.0f}  "
              + ("CONFORMANT" if not failed else f"FAILED: {', '.join(failed)}"), flush=True)
    return failed_any


if __name__ == "__main__":
    sys.exit(main())
