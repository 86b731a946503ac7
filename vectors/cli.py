"""``python -m nvfp4_suite.vectors``: check a backend, replay a case, manage the catalog.

Exit codes: 0 conformant, 1 not conformant, 2 usage or setup error (also:
nothing was judged, an unreadable catalog or case file, an interrupted run
that found no failure). Exit 0 is reached only through a judged verdict:
whatever a backend raises or exits with is its failure, and anything else
that escapes a command ends it with 2. Ctrl-C and SIGTERM stop a run with
its evidence kept (``nvfp4_suite.vectors.interrupts`` tells them apart from a
backend's own ``KeyboardInterrupt``); so does stdout's reader going away.
The engine is ``nvfp4_suite.vectors.check``, the text ``nvfp4_suite.vectors.render``;
this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import ReferenceBudgetError
from nvfp4_suite.reference.arithmetic import arithmetic_name, parse_arithmetic

from . import catalog, export, interrupts, isolate
from . import report as jsonreport
from .check import (
    PREFERENCE,
    SetupError,
    Status,
    check_generated,
    check_golden,
    check_invalid,
    pick_backend,
    replay_launches,
    save_failing,
)
from .entry import reader_gone
from .harness import BackendCrash, run_case
from .io import CaseFileError, load_case
from .progress import Progress
from .render import failing_lines, generated_lines, golden_lines, shown

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


def _describe_backend(spec: str, b) -> str:
    c = b.capabilities
    parts = [f"arithmetic {arithmetic_name(b.geometry)}", f"layouts {list(c.layouts)}", f"splits {list(c.splits)}"]
    if c.xcds != (0,):
        parts.append(f"xcds {list(c.xcds)}")
    if c.orders:
        parts.append(f"{len(c.orders)} workgroup orders")
    if c.targets:
        parts.append(f"targets {list(c.targets)}")
    if getattr(b, "timeout", None) is not None:
        parts.append(f"isolated: each launch in a worker process, timeout {b.timeout:g} s")
    return f"backend: {shown(b.name)} (--backend {spec}; " + "; ".join(parts) + ")"


def _say(*lines: str) -> None:
    """Print report lines to stdout, or to stderr once stdout's reader is gone
    (the evidence of a stopped run still reaches the terminal)."""
    _clear_bar()
    out = sys.stderr if interrupts.reader_gone() else sys.stdout
    for line in lines:
        print(line, file=out)


def cmd_check(args) -> int:
    """``check``: golden vectors and generated problems against one backend."""
    if args.no_golden and args.examples == 0:
        raise SetupError("nothing to check: --no-golden with --examples 0")
    rec: jsonreport.Recorder = args.recorder
    rec.data.update(seed=args.seed, examples=args.examples)
    spec, backend = pick_backend(args.backend)
    backend = judged_in(backend, args.arithmetic)
    if args.shape == "serving":
        if args.json is not None:
            raise SetupError("--json: the report covers --shape small only (serving-size checks print text only)")
        return _check_serving(spec, backend, args)
    caps = backend.capabilities
    if args.splits:
        bad = [s for s in args.splits if s not in caps.splits]
        if bad:
            raise SetupError(f"--splits {bad}: backend {shown(backend.name)} supports {list(caps.splits)}")
    if not args.no_golden and not catalog.exists():
        raise SetupError(f"no golden vectors: {catalog.MANIFEST} is missing (reinstall the suite, or pass "
                         "--no-golden to check generated problems only)")
    backend = _isolated(spec, backend, args)
    rec.backend(spec, backend)
    timeout = getattr(backend, "timeout", None)
    name = shown(backend.name)
    print(_describe_backend(spec, backend))
    t0 = time.time()
    failed = errors = judged = 0
    summary = []
    stopped = None
    catalogs = [] if args.no_golden else _golden_catalogs(args.catalog)
    for root, why in catalogs:
        label = catalog.label(root)
        if label is not None:
            _say(f"catalog {label} ({why}):")
        try:
            if label is not None and not catalog.exists(root):
                raise CaseFileError(f"{root / 'manifest.json'} is missing: not a catalog "
                                    f"(`add --catalog {root}` creates one)")
            golden = check_golden(backend, progress=_progress, splits=args.splits,
                                  outside_domain=args.outside_domain, root=root, notice=_notice)
        except CaseFileError as e:
            if label is None:
                raise  # the built-in catalog: nothing to judge against, exit 2 as a setup error
            # Another catalog's damage is its own ERROR: the other catalogs' verdicts still stand.
            _say(f"  {label}: ERROR: {e}")
            rec.catalog(root, why, error=str(e))
            errors += 1
            summary.append(f"catalog {label} unreadable")
            continue
        _say(*golden_lines(golden, spec, timeout))
        rec.catalog(root, why, golden, spec=spec, timeout=timeout)
        failed += golden.count(Status.FAIL)
        errors += golden.count(Status.ERROR)
        judged += golden.judged
        summary.append(("" if label is None else f"catalog {label}: ")
                       + f"{golden.judged} golden cases judged ({golden.count(Status.FAIL)} failed"
                       + (f", {golden.count(Status.SKIP)} skipped" if golden.count(Status.SKIP) else "")
                       + (f", {golden.count(Status.ERROR)} unreadable" if golden.count(Status.ERROR) else "") + ")")
        if golden.stopped:
            stopped = golden.stopped
            break
    if args.examples > 0 and stopped is None:
        _say(f"generated problems: {args.examples} (seed {args.seed})")
        live = _live()  # on a terminal the bar moves at every problem and every second of minimising
        gen = check_generated(backend, args.examples, args.seed, args.splits, progress=_progress,
                              progress_every=1 if live else 10, shrink_report_s=1.0 if live else 10.0,
                              shrink_budget_s=getattr(backend, "shrink_budget_s", None))
        _say(*generated_lines(gen))
        judged += gen.n
        stopped = gen.stopped
        summary.append(f"{gen.n} generated problems")
        if gen.failing is not None:
            failed += 1
            saved, why = save_failing(spec, gen.failing)
            _say(*failing_lines(gen.failing, spec, saved, why, timeout))
            rec.generated(gen, spec, saved, why, timeout)
        else:
            rec.generated(gen, spec, None, None, timeout)
    took = f"{time.time() - t0:.1f} s"
    if stopped:
        summary.append(f"stopped early: {stopped}")
    if failed:
        _say(f"NOT CONFORMANT: backend {name}; {', '.join(summary)}; {took}")
        return 1
    _clear_bar()
    if stopped:
        print(f"\ninterrupted ({stopped}): no verdict; {', '.join(summary)}", file=sys.stderr)
        return 2
    if errors or not judged:
        why = (f"{'a' if len(catalogs) > 1 else 'the'} catalog has unreadable cases" if errors
               else "nothing was judged")
        rec.data["reason"] = why
        print(f"NO VERDICT ({why}): backend {name}; {', '.join(summary)}; {took}")
        return 2
    print(f"CONFORMANT: backend {name}; {', '.join(summary)}; {took}")
    if spec in REFERENCE_BACKENDS:
        print(f"This checked the suite's own {spec!r} backend. To check your kernel: "
              "python -m nvfp4_suite.vectors check --backend yourpkg.module:YourBackend (README, 'Writing a backend').")
    return 0


def _golden_catalogs(given) -> list:
    """``(folder, why)`` of each catalog ``check`` runs, in order, each once:
    the built-in one, then every ``--catalog`` value, or with none given the
    default project catalog folder when it exists (``why``: how it was chosen)."""
    if given:
        extra = [(catalog.resolve(g), f"--catalog {g}") for g in given]
    elif catalog.project_root().is_dir():
        why = (f"{catalog.project_root()}, run because it exists: the default project catalog, "
               f"${catalog.PROJECT_ENV} or ./{catalog.PROJECT_DEFAULT}; --catalog DIR chooses others")
        extra = [(catalog.project_root(), why)]
    else:
        extra = []
    out, seen = [], set()
    for root, why in [(catalog.HERE, "built-in")] + extra:
        key = catalog.HERE if catalog.is_builtin(root) else root.resolve()
        if key not in seen:
            seen.add(key)
            out.append((root, why))
    return out


def _check_serving(spec: str, backend, args) -> int:
    """``check --shape serving``: serving-size problems only (``nvfp4_suite.vectors.serving``)."""
    try:
        import torch  # noqa: F401 - the serving references run on torch

        from .serving import check_serving
    except ImportError as e:
        raise SetupError(f"--shape serving needs torch, which cannot be imported here ({e}); "
                         "install torch or check --shape small") from e

    if args.examples == 0:
        raise SetupError("--shape serving checks generated problems: give --examples > 0")
    print(_describe_backend(spec, backend))
    ok, lines = check_serving(backend, args.examples, args.seed, progress=_progress)
    _clear_bar()
    for line in lines:
        print(line)
    print(f"{'CONFORMANT' if ok else 'NOT CONFORMANT'}: backend {shown(backend.name)}; "
          f"{args.examples} serving-size problems")
    return 0 if ok else 1


def cmd_replay(args) -> int:
    """``replay FILE``: one case file against one backend, its report printed.

    Runs the launches the file records (a repro's failing launch, a golden
    case's list), with ``--splits``/``--xcds``/``--order`` overriding those fields.
    The file is data: its problem is validated before any backend is loaded
    (an invalid problem that names no expected error is a statement about the
    file, exit 2), and the backend it records is used only when it is a
    registered name; any other needs ``--backend``.
    """
    problem, meta, _ = load_case(args.file)
    expected_error = meta.get("expected_error")
    if not expected_error:
        try:
            problem.validate()
        except Exception as e:  # noqa: BLE001 - whatever the validator raises, nothing can be judged
            raise SetupError(f"{args.file}: its problem is invalid ({type(e).__name__}: {e}) and the file names no "
                             "expected error; no backend was run") from None
    spec = args.backend
    if spec is None:
        spec = meta.get("backend")
        if spec is None:
            raise SetupError(f"{args.file} records no backend: give --backend")
        if spec not in kernels.registered():
            raise SetupError(f"{args.file} records backend {spec!r}, which is not a registered name "
                             f"({', '.join(kernels.registered())}); a case file never chooses code to import: "
                             "give --backend explicitly (e.g. the one the printed replay command names)")
    spec, backend = pick_backend(spec)
    backend = _isolated(spec, backend, args)
    rec: jsonreport.Recorder = args.recorder
    rec.backend(spec, backend)
    launches: list[dict] = []
    rec.data["replay"] = jsonreport.replay_json(str(args.file), expected_error, launches)
    print(_describe_backend(spec, backend))
    if expected_error:
        ok, text = check_invalid(problem, expected_error, backend)
        print(text)
        launches.append({"launch": Launch().to_json(), "status": "PASS" if ok else "FAIL", "reason": None,
                         "failing_elements": None, "text": text})
        return 0 if ok else 1
    ok, ran = True, 0
    caps = backend.capabilities
    for launch in replay_launches(meta, caps, args.splits, args.xcds, args.order):
        why = caps.refuses(problem, launch)
        if why:
            print(f"{launch.describe(problem)}: SKIPPED: {why}")
            launches.append({"launch": launch.to_json(), "status": "SKIP", "reason": why, "failing_elements": None,
                             "text": f"SKIPPED: {why}"})
            continue
        ran += 1
        failing = None
        try:
            _, rep = run_case(backend, problem, launch)
            passed, text, failing = rep.passed, rep.details(), int(rep.n_fail)
        except BackendCrash as e:
            passed, text = False, f"FAIL: {e}"
        print(f"{launch.describe(problem)}: " + text)
        launches.append({"launch": launch.to_json(), "status": "PASS" if passed else "FAIL", "reason": None,
                         "failing_elements": failing, "text": text})
        ok &= passed
    if not ran:
        rec.data["reason"] = "no launch is inside the backend's capabilities"
        print(f"NO VERDICT: no launch of {args.file} is inside backend {shown(backend.name)}'s capabilities")
        return 2
    return 0 if ok else 1


def _notice(msg: str) -> None:
    _clear_bar()
    print(msg, file=sys.stderr, flush=True)


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


def _split_count(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"split count {n}: must be >= 1")
    return n


def cmd_bugs(args) -> int:
    """``bugs [--mutants ENGINE | --contract]``: the bug-class registry (``nvfp4_suite.vectors.bugs``)."""
    from . import bugs

    return bugs.run(args)


def add_arithmetic_option(parser: argparse.ArgumentParser) -> None:
    """``--arithmetic NAME``: judge the backend in the arithmetic NAME names instead
    of the one its ``geometry`` declares (reference/CONTRACT.md section 7.1)."""
    parser.add_argument("--arithmetic", metavar="NAME",
                        help="judge the backend in this arithmetic, not the one it declares: exact, exact-p-bf16, "
                             "seed or geometry:KxL[,p-bf16][,position] (reference/CONTRACT.md 7.1)")


class Declared:
    """A backend judged in another arithmetic than the one it declares: every
    attribute and the call are the backend's, ``geometry`` is the given one."""

    def __init__(self, backend, geometry):
        self._backend = backend
        self.geometry = geometry

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def __call__(self, problem, **launch):
        return self._backend(problem, **launch)


def judged_in(backend, name: str | None):
    """``backend``, or where ``name`` is given a ``Declared`` of it in the arithmetic
    ``name`` names (``parse_arithmetic``); SetupError for a name it does not read."""
    if name is None:
        return backend
    try:
        return Declared(backend, parse_arithmetic(name))
    except ValueError as e:
        raise SetupError(str(e)) from e


def _isolation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--isolate", action="store_true",
                   help="run each launch in a worker process: a crash, a hang past --timeout, a GPU fault or an "
                        "OOM kill is that launch's failure and the run goes on in a fresh worker")
    p.add_argument("--timeout", type=float, metavar="S",
                   help="seconds one launch may take in its worker (implies --isolate; default "
                        f"{isolate.DEFAULT_TIMEOUT_S:g}, {isolate.GPU_TIMEOUT_S:g} for GPU backends)")


def _isolated(spec: str, backend, args):
    """``backend`` behind a worker process when --isolate or --timeout asks for one."""
    if not (args.isolate or args.timeout is not None):
        return backend
    if args.timeout is not None and not args.timeout > 0:
        raise SetupError(f"--timeout {args.timeout:g}: must be > 0 seconds")
    return isolate.Isolated(spec, backend, args.timeout)


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
    c.add_argument("--examples", type=int, default=100, help="generated problems (default 100; 0 for none)")
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
    add_arithmetic_option(c)
    _isolation_args(c)
    _json_arg(c)
    c.set_defaults(fn=cmd_check)
    r = sub.add_parser("replay", help="run one case file (catalog or repro) against a backend",
                       description="Rerun a saved failure or a golden case file and print its report.")
    r.add_argument("file", help="a case file: .repro/*.npz or vectors/data/*.npz")
    r.add_argument("--backend", help=f"{backend_help}; default: the backend the file records")
    r.add_argument("--splits", type=int, help="this split count (default: the file's launches)")
    r.add_argument("--xcds", type=int, help="this XCD placement (default: the file's launches)")
    r.add_argument("--order", help="this workgroup order (default: the file's launches)")
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
    from . import bugs

    b = sub.add_parser("bugs", help="the bug classes: description, golden cases, mutants",
                       description=bugs.DESCRIPTION)
    bugs.add_arguments(b)
    b.set_defaults(fn=cmd_bugs)
    export.register(sub)  # export --layout FILE DIR, import --layout FILE DUMP OUT
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
    args.recorder = jsonreport.Recorder(args.cmd, list(sys.argv[1:] if argv is None else argv))
    if getattr(args, "examples", 0) < 0:
        print("error: --examples must be >= 0", file=sys.stderr)
        return 2
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
    """Run the command; with ``--json FILE``, FILE is checked writable first and
    written at the end whatever the exit code (exit 2 if it cannot be)."""
    path = getattr(args, "json", None)
    if path is not None:
        why = jsonreport.writable(path)
        if why:
            print(f"error: {why}; nothing was run", file=sys.stderr)
            return 2
    t0 = time.time()
    rc, reason, interrupted = _outcome(args)
    if path is not None:
        try:
            jsonreport.write(path, args.recorder.finish(rc, reason, interrupted, round(time.time() - t0, 3)))
        except OSError as e:
            print(f"error: --json {path}: the report could not be written ({e})", file=sys.stderr)
            return 2
    return rc


def _outcome(args) -> tuple[int, str | None, bool]:
    """``(exit code, why there is no verdict or None, whether an interruption ended it)`` of the command."""
    try:
        rc = args.fn(args)
        sys.stdout.flush()  # a reader that went away (`| head`) shows here, not at exit
        return rc, None, False
    except (SetupError, CaseFileError, ReferenceBudgetError) as e:
        _clear_bar()
        print(f"error: {e}", file=sys.stderr)
        return 2, f"error: {e}", False
    except KeyboardInterrupt as e:
        _clear_bar()
        why = e.reason if isinstance(e, interrupts.Interrupted) else "KeyboardInterrupt"
        print(f"\ninterrupted{f' ({e.reason})' if isinstance(e, interrupts.Interrupted) else ''}: no verdict",
              file=sys.stderr)
        return 2, f"interrupted ({why})", True
    except SystemExit as e:
        # Backend calls are guarded by the harness; this is code reached some
        # other way (a backend attribute, a factory at run time) ending the
        # process. It is never a verdict.
        print(f"error: SystemExit({e.code!r}) was raised during the run by code it called (a backend's "
              "attributes?); nothing was judged", file=sys.stderr)
        return 2, f"SystemExit({e.code!r}) raised during the run", False
    except BrokenPipeError:
        return reader_gone(), "stdout's reader went away", True
