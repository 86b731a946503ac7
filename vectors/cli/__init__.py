"""``python -m nvfp4_suite.vectors``: check a backend, replay a case, manage the catalog.

This module parses arguments, builds the engine's configuration
(``nvfp4_suite.vectors.engine.config.CheckConfig``), and prints what the
engine (``nvfp4_suite.vectors.engine.check``) returns through
``nvfp4_suite.vectors.cli.render``. Every command ends through
``nvfp4_suite.vectors.cli.runner``: its verdict's exit code (0 CONFORMANT, 1
NOT CONFORMANT or FLAKY FAILURE, 2 NO VERDICT, 3 SUITE ERROR), whatever
escaped it. Ctrl-C and SIGTERM stop a run with its evidence kept
(``nvfp4_suite.vectors.engine.interrupts``); so does stdout's reader going away.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import DEFAULT_EXAMPLES, INTERPRETED_EXAMPLES
from nvfp4_suite.reference.arithmetic import arithmetic_name
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import export
from nvfp4_suite.vectors.cli import bench, merge, render
from nvfp4_suite.vectors.cli import report as jsonreport
from nvfp4_suite.vectors.cli.progress import Progress
from nvfp4_suite.vectors.cli.runner import exit_code, outcome
from nvfp4_suite.vectors.engine import interrupts, references
from nvfp4_suite.vectors.engine.check import CheckRun, Hooks, ReplayConfig, ReplayRun, run_check, run_replay
from nvfp4_suite.vectors.engine.config import PREFERENCE, CheckConfig, parse_shard
from nvfp4_suite.vectors.engine.harness import shown
from nvfp4_suite.vectors.engine.verdict import Kind, SetupError, Verdict, decide

REFERENCE_BACKENDS = ("emulate", "reference")


_bar: Progress | None = None


def _progress(msg: str) -> None:
    """A progress line on stderr: a live bar on a terminal, the plain line elsewhere."""
    global _bar
    if _bar is None or _bar.stream is not sys.stderr:
        _bar = Progress(sys.stderr)
    _bar(msg)


def _live() -> bool:
    """Whether progress goes to a terminal (the bar is drawn, so it may be updated often)."""
    return _bar is not None and _bar.stream is sys.stderr and _bar.tty


def _clear_bar() -> None:
    """Erase the bar before a report line reaches the terminal."""
    if _bar is not None and _bar.stream is sys.stderr:
        _bar.clear()


def _say(*lines: str) -> None:
    """Print report lines to stdout, or to stderr once stdout's reader is gone
    (the evidence of a stopped run still reaches the terminal)."""
    _clear_bar()
    out = sys.stderr if interrupts.reader_gone() else sys.stdout
    for line in lines:
        print(line, file=out)


def _notice(msg: str) -> None:
    _clear_bar()
    print(msg, file=sys.stderr, flush=True)


def _describe_backend(subject) -> str:
    c = subject.capabilities
    parts = [f"arithmetic {arithmetic_name(subject.geometry)}", f"layouts {list(c.layouts)}",
             f"splits {list(c.splits)}" + (" (the kernel's own split count: the split axis is not exercised)"
                                           if c.splits == ("auto",) else " (the split axis is not exercised)"
                                           if c.splits == (1,) else "")]
    if c.slot_lists != "any":
        parts.append(f"slot lists {c.slot_lists}")
    if c.scale_sign != "any":
        parts.append(f"scale sign {c.scale_sign}")
    if c.sm_scale is not None:
        parts.append(f"sm_scale fixed at {c.sm_scale!r}")
    if c.cache_layout is not None:
        parts.append(f"cache layout {c.cache_layout.name}")
    if c.xcds != (0,):
        parts.append(f"xcds {list(c.xcds)}")
    if c.orders:
        parts.append(f"{len(c.orders)} workgroup orders")
    if c.targets:
        parts.append(f"targets {list(c.targets)}")
    if subject.references.device is not None:
        parts.append(f"references on {subject.references.where}")
    if subject.timeout is not None:
        parts.append(f"isolated: each launch in a worker process, timeout {subject.timeout:g} s")
    return f"backend: {shown(subject.name)} (--backend {subject.spec}; " + "; ".join(parts) + ")"


def _printing(run, part: str) -> None:
    """``Hooks.part`` of the command line: print each part of a run as it completes."""
    subject = run.subject
    if part == "backend":
        _say(_describe_backend(subject))
        if isinstance(run, CheckRun) and run.config.shard is not None:  # replay prints this part too
            k, n = run.config.shard
            _say(f"shard {k}/{n}: judging share {k} of {n} of the golden launches and of the "
                 f"generated problems; `merge` folds the {n} shards' --json reports into the campaign's verdict")
    elif part == "catalog":
        cat = run.catalogs[-1]
        if cat.label is not None:
            _say(f"catalog {cat.label} ({cat.why}):")
        if cat.error is not None:
            _say(f"  {cat.label}: ERROR: {cat.error}")
        else:
            _say(*render.golden_lines(cat.golden, subject.spec, subject.timeout))
    elif part == "generated":
        gen = run.generated
        _say(f"generated problems: {gen.n} (seed {run.config.seed})", *render.generated_lines(gen))
        if gen.failing is not None:
            _say(*render.failing_lines(gen.failing, subject.spec, run.saved, run.save_error, subject.timeout))
    elif part == "serving":
        _say(*run.serving.lines)
    elif part == "case":
        _say(*render.replay_lines(run.case, run.problem), *run.blame_lines())


def _hooks() -> Hooks:
    return Hooks(progress=_progress, notice=_notice, live=sys.stderr.isatty(), part=_printing)


def cmd_check(args) -> Verdict:
    """``check``: golden vectors and generated problems (or serving-size ones) against one backend."""
    config = CheckConfig(backend=args.backend, arithmetic=args.arithmetic,
                         catalogs=tuple(args.catalog) if args.catalog else None, golden=not args.no_golden,
                         examples=args.examples, seed=args.seed, splits=tuple(args.splits) if args.splits else None,
                         isolate=args.isolate, timeout=args.timeout, outside_domain=args.outside_domain,
                         shape=args.shape, json=args.json, shard=args.shard, references=args.references)
    if config.shape == "serving":
        try:
            import torch  # noqa: F401 - the serving references run on torch
        except ImportError as e:
            raise SetupError(f"--shape serving needs torch, which cannot be imported here ({e}); "
                             "install torch or check --shape small") from e
    run = args.run = CheckRun(config)
    verdict = run_check(run, _hooks())
    _clear_bar()
    if verdict.kind is Kind.NO_VERDICT and verdict.interrupted:
        print(f"\ninterrupted ({run.stopped}): no verdict; " + render.verdict_line(run, verdict).split("; ", 1)[1],
              file=sys.stderr)
    else:
        _say(render.verdict_line(run, verdict))
    spec = run.subject.spec if run.subject is not None else None
    if verdict.kind is Kind.CONFORMANT and spec in REFERENCE_BACKENDS:
        _say(f"This checked the suite's own {spec!r} backend. To check your kernel: "
             "python -m nvfp4_suite.vectors check --backend yourpkg.module:YourBackend (docs/backends.md).")
    return verdict


def cmd_replay(args) -> Verdict:
    """``replay FILE``: one case file against one backend, its report printed
    (the engine's check of a one-case catalog, ``check.run_replay``)."""
    run = args.run = ReplayRun(ReplayConfig(file=args.file, backend=args.backend, splits=args.splits, xcds=args.xcds,
                                            order=args.order, arithmetic=args.arithmetic, isolate=args.isolate,
                                            timeout=args.timeout, json=args.json, references=args.references))
    verdict = run_replay(run, _hooks())
    _say(render.verdict_line(run, verdict))
    return verdict


def cmd_merge(args) -> Verdict:
    """``merge REPORT.json...``: the JSON reports of a campaign's ``check --shard
    K/N`` runs folded into one run (``merge.load``, ``merge.fold``) and its
    verdict (``verdict.decide`` over the folded counts); shards of different
    runs, a doubled or a missing shard are refused (SetupError, NO VERDICT)."""
    merged = args.run = merge.fold(merge.load(args.reports))
    verdict = decide(**merged.tally())
    _say(*merge.lines(merged, verdict))
    return verdict


def _managed(args, what: str):
    """The folder of ``--catalog`` (default: the built-in catalog) for ``regen``,
    ``verify`` and ``list``; SetupError when a project folder is no catalog."""
    root = catalog.resolve(args.catalog)
    if not catalog.is_builtin(root) and not catalog.exists(root):
        raise SetupError(f"{what}: {root / 'manifest.json'} is missing: not a catalog "
                         f"(`add --catalog {root}` creates one)")
    return root


def cmd_regen(args) -> int:
    """``regen [--check] [--catalog DIR]``: rewrite a catalog, or compare a fresh regeneration byte for byte."""
    root = _managed(args, "regen")
    if args.check:
        if not catalog.exists(root):
            raise SetupError("regen --check: no manifest to check against")
        n, bad = catalog.regen_differences(_progress, root=root, notice=_notice)
        _clear_bar()
        for b in bad:
            print(f"regen --check: {b}")
        print(f"regen --check: {'OK' if not bad else 'FAILED'} ({n} cases)")
        return 1 if bad else 0
    manifest = catalog.regen_write(_progress, root=root, notice=_notice)
    _clear_bar()
    size = sum(catalog.case_file(c, root).stat().st_size for c in manifest["cases"])
    print(f"wrote {len(manifest['cases'])} cases, {size / 2**20:.2f} MiB")
    return 0


def cmd_verify(args) -> int:
    """``verify [--catalog DIR]``: the reference reproduces every stored expectation (drift detector)."""
    bad = catalog.verify(_progress, root=_managed(args, "verify"), notice=_notice)
    _clear_bar()
    for b in bad:
        print(f"verify: {b}")
    print(f"verify: {'OK' if not bad else 'FAILED'}")
    return 1 if bad else 0


def cmd_list(args) -> int:
    """``list [--flag F] [--catalog DIR]``: one line per case and its comment."""
    root = _managed(args, "list")
    m = catalog.load_manifest(root / "manifest.json")
    if args.flag and args.flag not in m["notes"]:
        raise SetupError(f"list: unknown flag {args.flag!r}; known: {', '.join(m['notes'])}")
    for c in m["cases"]:
        if args.flag and args.flag not in c["flags"]:
            continue
        res = c["result"] + (f" {c['expected_error']}" if c.get("expected_error") else "")
        print(f"{c['id']:3d}  {c['name']:<28} {res:<28} {','.join(c['flags'])}")
        print(f"     {c['comment']}")
    return 0


def cmd_add(args) -> int:
    """``add FILE --comment C --flags F.. [--catalog DIR]``: promote a case file into a
    catalog: the project's (default) or, explicitly, the built-in one."""
    root = catalog.project_root() if args.catalog is None else catalog.resolve(args.catalog)
    entry = catalog.add_case(args.file, comment=args.comment, flags=args.flags, name=args.name, splits=args.splits,
                             root=root, notice=_notice)
    print(f"added case {entry['id']} ({root / entry['file']}), result {entry['result']}")
    if not catalog.is_builtin(root):
        tag = f"{catalog.label(root)}:{entry['id']:03d}-{entry['name']}"
        print(f"check names it {tag}" + (" (it runs the default project catalog when that folder exists)"
                                         if catalog.label(root) == "project" else f" with --catalog {root}"))
    return 0


def _shard(text: str) -> tuple[int, int]:
    """``--shard K/N`` as ``(K, N)``; argparse names the bad value."""
    try:
        return parse_shard(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _split_count(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"split count {n}: must be >= 1")
    return n


def cmd_serving_bench(args) -> int:
    """``serving-bench``: time the references and a backend on serving-size problems
    (``nvfp4_suite.vectors.engine.serving.bench``)."""
    from nvfp4_suite.vectors.engine.config import load_subject
    from nvfp4_suite.vectors.engine.serving import bench

    subject = load_subject(CheckConfig(backend=args.backend))
    for line in bench(subject, args.examples, args.seed, args.numpy_examples):
        print(line, flush=True)
    return 0


def cmd_bugs(args) -> int:
    """``bugs [--mutants ENGINE | --contract]``: the bug-class registry (``nvfp4_suite.vectors.catalog.bugs``)."""
    from nvfp4_suite.vectors.catalog import bugs

    return bugs.run(args)


def add_arithmetic_option(parser: argparse.ArgumentParser) -> None:
    """``--arithmetic NAME``: judge the backend in the arithmetic NAME names instead
    of the one its ``geometry`` declares (reference/CONTRACT.md section 7.1)."""
    parser.add_argument("--arithmetic", metavar="NAME",
                        help="judge the backend in this arithmetic, not the one it declares: exact, exact-p-bf16, "
                             "seed or geometry:KxL[,p-bf16][,position] (reference/CONTRACT.md 7.1)")


def add_references_option(parser: argparse.ArgumentParser) -> None:
    """``--references WHERE``: where the references run
    (``nvfp4_suite.vectors.engine.references.choose``)."""
    parser.add_argument("--references", choices=references.CHOICES, default="auto",
                        help="where the references run: host (numpy), device (torch on the GPU), auto (the GPU "
                             "when the backend runs on one and torch sees it; default)")


def _isolation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--isolate", action="store_true",
                   help="run each launch in a worker process: a crash, a hang past --timeout, a GPU fault or an "
                        "OOM kill is that launch's failure and the run goes on in a fresh worker")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="seconds one launch may take in its worker (implies --isolate; default: the backend's "
                        "Capabilities.launch_timeout_s, 60 unless it declares more)")


def _json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE",
                   help=f"also write the verdict as JSON (schema {jsonreport.SCHEMA_NAME}, version "
                        f"{jsonreport.SCHEMA_VERSION}: nvfp4_suite/vectors/report.schema.json) to FILE, written "
                        "whatever the exit code; '-' is refused (stdout carries the text report)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.vectors", description="NVFP4 sparse decode conformance")
    sub = ap.add_subparsers(dest="cmd", required=True)
    backend_help = (f"registered name ({', '.join(kernels.registered())}) or module.path:attr")
    managed_help = (f"the catalog folder (default: '{catalog.BUILTIN}', the suite's own; a project catalog "
                    f"is e.g. ./{catalog.PROJECT_DEFAULT})")
    c = sub.add_parser("check", help="golden vectors + generated problems against a backend",
                       description="Run the golden vectors and generated problems against one backend. "
                                   "The generated problems' statistics line gives the largest |got - pre|/reach: "
                                   "pre is the reference's unrounded value of an output element and reach the "
                                   "distance from pre to the far edge of the acceptance interval's last bf16 "
                                   "rounding cell on got's side, so the ratio is below 1 exactly when the element "
                                   "is inside its interval (near 1: at the edge of what is accepted).")
    c.add_argument("--backend", help=f"{backend_help}; default: the first available of {', '.join(PREFERENCE)}")
    c.add_argument("--examples", type=int, default=None,
                   help=f"generated problems (default {DEFAULT_EXAMPLES}, {INTERPRETED_EXAMPLES} for a backend that "
                        "declares interpreted; 0 for none)")
    c.add_argument("--seed", type=int, default=0, help="seed of the generated problems")
    c.add_argument("--splits", type=int, action="append", help="only these split counts (repeatable)")
    c.add_argument("--no-golden", action="store_true", help="skip the golden vectors")
    c.add_argument("--outside-domain", action="store_true",
                   help="also run golden cases outside the backend's declared input domain and report what it "
                        "does there (information, not a verdict)")
    c.add_argument("--catalog", action="append", metavar="DIR",
                   help="also run this project catalog's cases beside the built-in ones (repeatable); default: "
                        f"${catalog.PROJECT_ENV} or ./{catalog.PROJECT_DEFAULT} when that folder exists")
    c.add_argument("--shape", choices=("small", "serving"), default="small",
                   help="serving: serving-size problems only (64-256 rows, pools of 1e4-1e5 pages; "
                        "references on the backend's GPU when it has one); default small")
    c.add_argument("--shard", type=_shard, metavar="K/N",
                   help="judge only share K of N of the campaign (round robin over each catalog's launches and "
                        "over the generated problems in draw order; the N shards together are the unsharded "
                        "run for the same seed); fold the shards' --json reports with `merge` (docs/campaigns.md)")
    add_references_option(c)
    add_arithmetic_option(c)
    _isolation_args(c)
    _json_arg(c)
    c.set_defaults(fn=cmd_check)
    mg = sub.add_parser("merge", help="fold the JSON reports of check --shard K/N runs into one verdict",
                        description="Fold the --json reports of the N shards of one check --shard K/N campaign "
                                    "into the unsharded run's verdict, counts and failing cases (docs/campaigns.md). "
                                    "Refuses (exit 2) shards of different runs (backend, arithmetic, seed, "
                                    "examples, suite version, shape, splits, catalogs), a doubled or missing "
                                    "shard, a file that is not a report of this schema version.")
    mg.add_argument("reports", nargs="+", metavar="REPORT.json", help="the shards' check --json reports")
    _json_arg(mg)
    mg.set_defaults(fn=cmd_merge)
    r = sub.add_parser("replay", help="run one case file (catalog or repro) against a backend",
                       description="Rerun a saved failure or a golden case file and print its report.")
    r.add_argument("file", help="a case file: .repro/*.npz or vectors/data/*.npz")
    r.add_argument("--backend", help=f"{backend_help}; default: the backend the file records")
    r.add_argument("--splits", type=int, help="this split count (default: the file's launches)")
    r.add_argument("--xcds", type=int, help="this XCD placement (default: the file's launches)")
    r.add_argument("--order", help="this workgroup order (default: the file's launches)")
    add_references_option(r)
    add_arithmetic_option(r)
    _isolation_args(r)
    _json_arg(r)
    r.set_defaults(fn=cmd_replay)
    g = sub.add_parser("regen", help="regenerate every golden case (with --check: compare, change nothing)",
                       description="Regenerate the golden catalog from the reference, deterministically: "
                                   "built-in cases rebuilt, promoted (`add`) cases kept with their expectations "
                                   "recomputed; written beside data/ and swapped in at the end (an interrupted run "
                                   "leaves the catalog as it was). With --check: regenerate in a temporary folder "
                                   "and compare byte for byte, changing nothing (exit 1 on a difference).")
    g.add_argument("--check", action="store_true", help="regenerate in a temporary folder and compare bytes")
    g.add_argument("--catalog", default=catalog.BUILTIN, metavar="DIR", help=managed_help)
    g.set_defaults(fn=cmd_regen)
    v = sub.add_parser("verify", help="recompute every stored expectation and compare (drift detector)",
                       description="Recompute every expectation stored in the golden catalog with the installed "
                                   "reference and compare bit for bit; exit 1 names each case that drifted.")
    v.add_argument("--catalog", default=catalog.BUILTIN, metavar="DIR", help=managed_help)
    v.set_defaults(fn=cmd_verify)
    ls = sub.add_parser("list", help="list the golden cases",
                        description="One line per golden case (id, name, expected result, bug-class flags) "
                                    "and its comment; --flag keeps the cases of one bug class (`bugs` lists them).")
    ls.add_argument("--flag", help="only cases with this bug-class flag")
    ls.add_argument("--catalog", default=catalog.BUILTIN, metavar="DIR", help=managed_help)
    ls.set_defaults(fn=cmd_list)
    a = sub.add_parser("add", help="promote a saved case file (e.g. from .repro/) into your project's catalog")
    a.add_argument("file", help="the case file to promote")
    a.add_argument("--comment", required=True, help="what the case targets")
    a.add_argument("--flags", nargs="+", required=True, help="its bug-class flags (see `list`)")
    a.add_argument("--name", help="case name (default: the file's stem)")
    a.add_argument("--splits", type=_split_count, nargs="+", help="split counts (>= 1) to store expectations for")
    a.add_argument("--catalog", metavar="DIR",
                   help=f"the project catalog folder to add to, created on first use; default ${catalog.PROJECT_ENV} "
                        f"or ./{catalog.PROJECT_DEFAULT}. '{catalog.BUILTIN}' (or the suite's vectors/ folder) adds "
                        "to the suite's own built-in catalog: for the suite's maintainers")
    a.set_defaults(fn=cmd_add)
    from nvfp4_suite.vectors.catalog import bugs

    b = sub.add_parser("bugs", help="the bug classes: description, golden cases, mutants",
                       description=bugs.DESCRIPTION)
    bugs.add_arguments(b)
    b.set_defaults(fn=cmd_bugs)
    sb = sub.add_parser("serving-bench", help="time the numpy reference, the torch reference and a backend on "
                                               "serving-size problems",
                        description="Per serving-size problem: the numpy reference's interval, the torch "
                                    "reference's on the device, the backend's call and its kernel alone, and "
                                    "whether the two references' intervals are equal (the check itself: "
                                    "check --shape serving).")
    sb.add_argument("--backend", default="triton", help=f"{backend_help} (default triton)")
    sb.add_argument("--examples", type=int, default=4, help="serving-size problems (default 4)")
    sb.add_argument("--seed", type=int, default=0, help="seed of the problems")
    sb.add_argument("--numpy-examples", type=int, default=1,
                    help="problems the numpy reference is timed on (minutes each; default 1)")
    sb.set_defaults(fn=cmd_serving_bench)
    export.register(sub)  # export --layout FILE DIR, import --layout FILE DUMP OUT
    add_references_option(bench.register(sub, backend_help))
    return ap


def console_main() -> int:
    """Entry point of the ``nvfp4-vectors`` script, the same as ``python -m
    nvfp4_suite.vectors``: the working directory is importable first, as
    ``python -m`` makes it, so ``--backend mypkg.mykernel:Backend`` finds the
    user's own package."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return main()


def main(argv=None) -> int:
    """Entry point of ``python -m nvfp4_suite.vectors``; returns the exit status."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.run = None
    with interrupts.installed(), tempfile.TemporaryDirectory(prefix="nvfp4-hypothesis-") as scratch:
        # Hypothesis keeps caches under .hypothesis/ in the working folder unless told
        # otherwise; a check writes nothing there (no example database either).
        os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", scratch)
        try:
            return _run(args)
        finally:
            if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") == scratch:
                del os.environ["HYPOTHESIS_STORAGE_DIRECTORY"]


def _run(args) -> int:
    """Run the command through the one runner; with ``--json FILE``, FILE is
    checked writable first and written at the end whatever the verdict (exit
    2 if it cannot be)."""
    path = getattr(args, "json", None)
    if path is not None:
        why = jsonreport.writable(path)
        if why:
            print(f"error: {why}; nothing was run", file=sys.stderr)
            return 2
    t0 = time.time()
    result = outcome(lambda: args.fn(args), before_print=_clear_bar)
    if path is not None:
        verdict = result if isinstance(result, Verdict) else Verdict(Kind.SUITE_ERROR, f"exit status {result}")
        seconds = round(time.time() - t0, 3)
        try:
            jsonreport.write(path, merge.merged_report(args.argv, args.run, verdict, seconds) if args.cmd == "merge"
                             else jsonreport.build(args.cmd, args.argv, args.run, verdict, seconds))
        except OSError as e:
            print(f"error: --json {path}: the report could not be written ({e})", file=sys.stderr)
            return 2
    return exit_code(result)
