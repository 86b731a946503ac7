"""``bench``: the judging benchmark (``nvfp4_suite.vectors.engine.phases``).

``python -m nvfp4_suite.vectors bench [--backend SPEC]... [--examples N] [--seed S] [--references WHERE]``
checks the same seed's generated problems against each backend (default: ``emulate``,
the floor, then ``reference``, the exact class) and prints, per backend,
problems per second, the share of wall time per phase and the judging cost
per problem as a ratio to the first backend's, measured in the same run.
"""

from __future__ import annotations

import argparse
import time

from nvfp4_suite.vectors.cli import render, report
from nvfp4_suite.vectors.engine.phases import PHASES, Timing, recording, timed

DEFAULT_BACKENDS = ("emulate", "reference")


def time_check(spec: str, examples: int, seed: int, references: str = "auto") -> Timing:
    """Check ``examples`` generated problems (``seed``, no golden cases) against
    backend ``spec``, its references where ``references`` chooses
    (``check --references``), with its phases timed (a failure ends the check
    unminimised: minimising is not what is timed), then render the run's text and
    JSON report as ``check`` does (timed as ``reporting``; the output is
    discarded). Raises what ``check.run_check`` raises for a backend that
    cannot be judged (``SetupError``: NO VERDICT)."""
    from nvfp4_suite.reference.arithmetic import arithmetic_name
    from nvfp4_suite.vectors.engine.check import CheckRun, Hooks, run_check
    from nvfp4_suite.vectors.engine.config import CheckConfig
    from nvfp4_suite.vectors.engine.verdict import Kind, SetupError

    run = CheckRun(CheckConfig(backend=spec, golden=False, examples=examples, seed=seed, minimise=False,
                               references=references))
    with recording() as seconds:
        start = time.perf_counter()
        verdict = run_check(run, Hooks())
        with timed("reporting"):
            gen = run.generated
            if gen is not None and run.subject is not None:
                render.generated_lines(gen)
                if gen.failing is not None:
                    render.failing_lines(gen.failing, spec, run.saved, run.save_error, run.subject.timeout)
            render.verdict_line(run, verdict)
            report.build("check", [], run, verdict, None)
        wall = time.perf_counter() - start
    if run.subject is None or gen is None or verdict.kind is Kind.NO_VERDICT and not gen.n:
        raise SetupError(f"bench: backend {spec}: no generated problem was judged ({verdict.kind.value})")
    seconds = dict(seconds)
    seconds["generation"] = max(wall - sum(seconds.values()), 0.0)
    return Timing(spec, arithmetic_name(run.subject.geometry), gen.n, wall, seconds, gen.ok,
                  None if run.saved is None else str(run.saved), run.subject.references.device or "host")


def table(timings: list[Timing]) -> list[str]:
    """The benchmark's lines: a header, a row per ``Timing`` (the first is the
    floor) and a line saying what the ratio compares."""
    floor = timings[0]
    out = [f"{'backend':<24} {'arithmetic':<28} {'references':<14} {'problems/s':>10} "
           + " ".join(f"{p:>11}" for p in PHASES) + f" {'judging s/problem':>18} {'vs floor':>9}"]
    for t in timings:
        shares = " ".join(f"{100 * t.seconds[p] / t.wall:>10.1f}%" for p in PHASES)
        ratio = t.judging_cost / floor.judging_cost if floor.judging_cost > 0 else float("nan")
        note = "" if t.ok else "  (failed: the problems up to its first failure)"
        out.append(f"{t.spec:<24} {t.arithmetic:<28} {t.references:<14} {t.problems / t.wall:>10.2f} {shares} "
                   f"{t.judging_cost:>18.4f} {ratio:>8.2f}x{note}")
    out.append(f"judging = references + judging, per problem; floor: {floor.spec}, measured in this run")
    return out


def cmd_bench(args) -> int:
    """``bench``: ``time_check`` per backend of ``args.backend`` (default
    ``DEFAULT_BACKENDS``), each after an untimed one-problem warm-up, printed
    as ``table``; exit 0 (a benchmark judges nothing)."""
    specs = args.backend or list(DEFAULT_BACKENDS)
    if args.examples < 1:
        from nvfp4_suite.vectors.engine.verdict import SetupError

        raise SetupError(f"bench: --examples {args.examples}: give at least 1")
    print(f"judging benchmark: {args.examples} generated problems per backend, seed {args.seed}, "
          "no golden cases", flush=True)
    for spec in specs:  # untimed: imports, compiled kernels and caches would be charged to the first run
        time_check(spec, 1, args.seed, args.references)
    timings = []
    for spec in specs:
        t = time_check(spec, args.examples, args.seed, args.references)
        timings.append(t)
        print(f"  {spec}: {t.problems} problems in {t.wall:.1f} s", flush=True)
        if not t.ok:
            where = ("could not be saved" if t.saved is None
                     else f"saved, unminimised: {render.replay_command(t.saved, spec)}")
            print(f"  {spec} failed a generated problem ({where}); `check` minimises and reports it", flush=True)
    print(*table(timings), sep="\n")
    return 0


def register(sub, backend_help: str) -> argparse.ArgumentParser:
    """Add the ``bench`` command to the ``sub`` parsers; returns its parser, to
    which the command line adds the options it shares with ``check``
    (``--references``, applied to every backend)."""
    b = sub.add_parser("bench", help="where a check's time goes, per backend, against a floor measured in the run",
                       description="Check the same generated problems against each backend and print problems "
                                   "per second, the share of wall time in generation, launches, references, "
                                   "judging and reporting, and the judging cost per problem as a ratio to the "
                                   "first backend's (the floor).")
    b.add_argument("--backend", action="append", metavar="SPEC",
                   help=f"{backend_help} (repeatable; the first is the floor; default: "
                        f"{', '.join(DEFAULT_BACKENDS)})")
    b.add_argument("--examples", type=int, default=20, help="generated problems per backend (default 20)")
    b.add_argument("--seed", type=int, default=3, help="seed of the problems (default 3)")
    b.set_defaults(fn=cmd_bench)
    return b
