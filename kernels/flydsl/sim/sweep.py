"""``python -m nvfp4_suite.kernels.flydsl.sim.sweep``: the full conformance check of the
simulated FlyDSL kernel, spread over worker processes (the by-hand run).

    python -m nvfp4_suite.kernels.flydsl.sim.sweep [--arch gfx950 --arch gfx942] [--golden [--case ID]]
        [--examples 200] [--seed 1] [--jobs N] [--shard-size 10]

For each target: every golden case (``--golden``) at every split count and
XCD placement its manifest lists (a task per case and split count), and ``--examples`` generated problems in
shards of ``--shard-size`` (each shard its own hypothesis seed, derived from
``--seed``, without shrinking: a failure is printed with its replay file).
Workers are processes (``--jobs``, default the CPU count); the compiled
kernels are shared through the compile cache (``nvfp4_suite.kernels.flydsl.sim.compile``),
so a machine without FlyDSL runs from a copied cache folder
(``NVFP4_SIM_CACHE``). Prints a line per finished task and a summary;
exit 0 when everything conforms, 1 otherwise, 2 when the kernel cannot be
had here.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time

from ..lanes import SPLITS
from ..targets import ARCHS


def _golden_task(arch: str, case_id: int, splits: int | None) -> tuple[bool, list[str], int]:
    from nvfp4_suite.vectors.catalog import check_all

    from .backend import FlydslSimBackend

    b = FlydslSimBackend(arch)
    if splits is not None:
        b.splits = (splits,)
    ok, lines = check_all(b, cases={case_id}, spec=b.name)
    return ok, lines[1:], b.instructions


def _generated_task(arch: str, examples: int, seed: int) -> tuple[bool, list[str], int]:
    from nvfp4_suite.vectors.check import check_generated
    from nvfp4_suite.vectors.harness import save_repro

    from .backend import FlydslSimBackend

    b = FlydslSimBackend(arch)
    gen = check_generated(b, examples, seed, progress_every=10**9, shrink=False)
    # The shard draws what `check --seed <seed>` draws (nvfp4_suite.vectors.strategies.run_generated).
    lines = [f"generated seed {seed}: {gen.n} problems, {gen.totals['elements']} elements, max |diff|/bound "
             f"{gen.totals['max_ratio']:.3g}; the same problems: python -m nvfp4_suite.vectors check --backend "
             f"{b.name} --no-golden --examples {examples} --seed {seed}"]
    if gen.failing is not None:
        problem, launch, text = gen.failing
        path = save_repro(b.name, problem, launch, text)
        lines += [text, f"saved: {path}; replay: python -m nvfp4_suite.vectors replay {path} --backend {b.name}"]
    return gen.ok, lines, b.instructions


def main(argv=None) -> int:
    """The command line; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.flydsl.sim.sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", action="append", choices=ARCHS, help="target (repeatable; default both)")
    ap.add_argument("--golden", action="store_true", help="check every golden case")
    ap.add_argument("--case", type=int, action="append", help="only this golden case id (repeatable)")
    ap.add_argument("--examples", type=int, default=0, help="generated problems per target")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shard-size", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    from nvfp4_suite.vectors.catalog import load_manifest

    from .backend import sim_missing

    missing = sim_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    if not args.golden and args.examples <= 0:
        print("nothing to check: give --golden and/or --examples N", file=sys.stderr)
        return 2
    tasks = []
    for arch in args.arch or ARCHS:
        if args.golden:
            # One task per (case, split count): the largest cases take minutes each.
            for c in load_manifest()["cases"]:
                if args.case and c["id"] not in args.case:
                    continue
                splits = [s for s in c.get("splits", []) if s in SPLITS] if c["result"] == "valid" else [None]
                tasks += [(f"{arch} golden case {c['id']} {c['name']}" + (f" splits {s}" if s else ""),
                           _golden_task, (arch, c["id"], s)) for s in splits]
        for k in range(0, args.examples, args.shard_size):
            n = min(args.shard_size, args.examples - k)
            seed = args.seed * 100_003 + k
            tasks.append((f"{arch} generated {k}..{k + n - 1}", _generated_task, (arch, n, seed)))
    # Most splits first: those tasks run longest, so the pool ends together.
    tasks.sort(key=lambda t: -(t[2][2] or 0) if t[1] is _golden_task else -8)
    t0 = time.perf_counter()
    failed, done, instructions = [], 0, 0
    with concurrent.futures.ProcessPoolExecutor(max(1, args.jobs)) as pool:
        futures = {pool.submit(fn, *a): name for name, fn, a in tasks}
        for f in concurrent.futures.as_completed(futures):
            name = futures[f]
            done += 1
            try:
                ok, lines, n = f.result()
            except Exception as e:  # noqa: BLE001 - a crashed task is a failed one, reported by name
                ok, lines, n = False, [f"crashed: {type(e).__name__}: {e}"], 0
            instructions += n
            print(f"[{done}/{len(tasks)} {time.perf_counter() - t0:6.0f}s] {'PASS' if ok else 'FAIL'} {name}",
                  flush=True)
            if not ok:
                failed.append(name)
                print("    " + "\n    ".join(lines), flush=True)
    dt = time.perf_counter() - t0
    print(f"{len(tasks) - len(failed)} of {len(tasks)} tasks conform; {instructions} instructions simulated "
          f"in {dt:.0f} s ({instructions / max(dt, 1e-9):.0f} per second over {args.jobs} workers)")
    for name in failed:
        print(f"FAILED: {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
