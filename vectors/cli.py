"""``python -m nvfp4_suite.vectors``: check a backend, replay a case, manage the catalog.

Exit codes: 0 conformant, 1 not conformant, 2 usage or setup error (also:
nothing was judged, an unreadable catalog or case file, an interrupted run).
The engine is ``nvfp4_suite.vectors.check``; this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

from nvfp4_suite import kernels

from . import catalog
from .check import (PREFERENCE, indent, SetupError, check_golden, check_generated, check_invalid, pick_backend,
                    replay_command, replay_launches, rounding_lines)
from .harness import BackendCrash, run_case, save_repro
from .io import CaseFileError, load_case

REFERENCE_BACKENDS = ("emulate", "reference")


def _progress(msg: str) -> None:
    end = "\r" if sys.stderr.isatty() else "\n"
    print(msg, file=sys.stderr, end=end, flush=True)


def _describe_backend(spec: str, b) -> str:
    c = b.capabilities
    parts = [f"geometry {b.geometry or 'exact class'}", f"layouts {list(c.layouts)}", f"splits {list(c.splits)}"]
    if c.xcds != (0,):
        parts.append(f"xcds {list(c.xcds)}")
    if c.orders:
        parts.append(f"{len(c.orders)} workgroup orders")
    if c.targets:
        parts.append(f"targets {list(c.targets)}")
    return f"backend: {b.name} (--backend {spec}; " + "; ".join(parts) + ")"


def print_generated(gen, examples: int) -> None:
    """The generated part of a check report."""
    t = gen.totals
    note = "" if gen.ok else " (generation stops at the first failure)"
    print(f"  {gen.n} problems{note}, {t['elements']} output elements compared, "
          f"largest |got - pre|/reach {t['max_ratio']:.3g}, largest bf16 ulp distance "
          f"{t['max_ulp']:g} (large only where outputs cancel to near zero)")
    for line in rounding_lines(t.get("rounding")):
        print(line)
    for line in gen.coverage.lines() if gen.coverage else []:
        print(line)


def cmd_check(args) -> int:
    """``check``: golden vectors and generated problems against one backend."""
    if args.no_golden and args.examples == 0:
        raise SetupError("nothing to check: --no-golden with --examples 0")
    spec, backend = pick_backend(args.backend)
    if args.shape == "serving":
        return _check_serving(spec, backend, args)
    caps = backend.capabilities
    if args.splits:
        bad = [s for s in args.splits if s not in caps.splits]
        if bad:
            raise SetupError(f"--splits {bad}: backend {backend.name} supports {list(caps.splits)}")
    if not args.no_golden and not catalog.exists():
        raise SetupError(f"no golden vectors: {catalog.MANIFEST} is missing (reinstall the suite, or pass "
                         "--no-golden to check generated problems only)")
    print(_describe_backend(spec, backend))
    t0 = time.time()
    failed = errors = judged = 0
    summary = []
    catalogs = [] if args.no_golden else _golden_catalogs(args.catalog)
    for root, why in catalogs:
        name = catalog.label(root)
        if name is not None:
            print(f"catalog {name} ({why}):")
        try:
            if name is not None and not catalog.exists(root):
                raise CaseFileError(f"{root / 'manifest.json'} is missing: not a catalog "
                                    f"(`add --catalog {root}` creates one)")
            golden = check_golden(backend, progress=_progress, splits=args.splits, root=root, notice=_notice)
        except CaseFileError as e:
            if name is None:
                raise  # the built-in catalog: nothing to judge against, exit 2 as a setup error
            # Another catalog's damage is its own ERROR: the other catalogs' verdicts still stand.
            print(f"  {name}: ERROR: {e}")
            errors += 1
            summary.append(f"catalog {name} unreadable")
            continue
        for line in golden.lines(spec):
            print(line)
        failed += golden.count("FAIL")
        errors += golden.count("ERROR")
        judged += golden.judged
        summary.append(("" if name is None else f"catalog {name}: ")
                       + f"{golden.judged} golden cases judged ({golden.count('FAIL')} failed"
                       + (f", {golden.count('SKIP')} skipped" if golden.count("SKIP") else "")
                       + (f", {golden.count('ERROR')} unreadable" if golden.count("ERROR") else "") + ")")
    if args.examples > 0:
        print(f"generated problems: {args.examples} (seed {args.seed})")
        gen = check_generated(backend, args.examples, args.seed, args.splits, progress=_progress)
        print_generated(gen, args.examples)
        judged += gen.n
        summary.append(f"{gen.n} generated problems")
        if gen.failing is not None:
            failed += 1
            problem, launch, text = gen.failing
            path = save_repro(spec, problem, launch, text)
            print("FIRST FAILING PROBLEM (minimised):")
            print(f"  rows {problem.rows}, Hkv {problem.num_kv_heads}, TOPK {problem.TOPK}, q_len {problem.q_len}, "
                  f"launch {launch.describe(problem)}")
            print(indent(text, "  "))
            print(f"saved: {path}")
            print(f"replay: {replay_command(path, spec)}")
    took = f"{time.time() - t0:.1f} s"
    if failed:
        print(f"NOT CONFORMANT: backend {backend.name}; {', '.join(summary)}; {took}")
        return 1
    if errors or not judged:
        why = (f"{'a' if len(catalogs) > 1 else 'the'} catalog has unreadable cases" if errors
               else "nothing was judged")
        print(f"NO VERDICT ({why}): backend {backend.name}; {', '.join(summary)}; {took}")
        return 2
    print(f"CONFORMANT: backend {backend.name}; {', '.join(summary)}; {took}")
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
    from .serving import check_serving

    if args.examples == 0:
        raise SetupError("--shape serving checks generated problems: give --examples > 0")
    print(_describe_backend(spec, backend))
    ok, lines = check_serving(backend, args.examples, args.seed, progress=_progress)
    for line in lines:
        print(line)
    print(f"{'CONFORMANT' if ok else 'NOT CONFORMANT'}: backend {backend.name}; "
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
    print(_describe_backend(spec, backend))
    if expected_error:
        ok, text = check_invalid(problem, expected_error, backend)
        print(text)
        return 0 if ok else 1
    ok, ran = True, 0
    caps = backend.capabilities
    for launch in replay_launches(meta, caps, args.splits, args.xcds, args.order):
        why = caps.refuses(problem, launch)
        if why:
            print(f"{launch.describe(problem)}: SKIPPED: {why}")
            continue
        ran += 1
        try:
            _, rep = run_case(backend, problem, launch)
            passed, text = rep.passed, rep.details()
        except BackendCrash as e:
            passed, text = False, f"FAIL: {e}"
        print(f"{launch.describe(problem)}: " + text)
        ok &= passed
    if not ran:
        print(f"NO VERDICT: no launch of {args.file} is inside backend {backend.name}'s capabilities")
        return 2
    return 0 if ok else 1


def _notice(msg: str) -> None:
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
        for b in bad:
            print(f"regen --check: {b}")
        print(f"regen --check: {'OK' if not bad else 'FAILED'} ({n} cases)")
        return 1 if bad else 0
    manifest = catalog.regen_write(_progress, root=root, notice=_notice)
    size = sum(catalog.case_file(c, root).stat().st_size for c in manifest["cases"])
    print(f"wrote {len(manifest['cases'])} cases, {size / 2**20:.2f} MiB")
    return 0


def cmd_verify(args) -> int:
    """``verify [--catalog DIR]``: the reference reproduces every stored expectation (drift detector)."""
    bad = catalog.verify(_progress, root=_managed(args, "verify"), notice=_notice)
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.vectors", description="NVFP4 sparse decode conformance")
    sub = ap.add_subparsers(dest="cmd", required=True)
    backend_help = (f"registered name ({', '.join(kernels.registered())}) or module.path:attr")
    managed_help = (f"the catalog folder (default: '{catalog.BUILTIN}', the suite's own; a project catalog "
                    f"is e.g. ./{catalog.PROJECT_DEFAULT})")
    c = sub.add_parser("check", help="golden vectors + generated problems against a backend",
                       description="Run the golden vectors and generated problems against one backend.")
    c.add_argument("--backend", help=f"{backend_help}; default: the first available of {', '.join(PREFERENCE)}")
    c.add_argument("--examples", type=int, default=100, help="generated problems (default 100; 0 for none)")
    c.add_argument("--seed", type=int, default=0, help="seed of the generated problems")
    c.add_argument("--splits", type=int, action="append", help="only these split counts (repeatable)")
    c.add_argument("--no-golden", action="store_true", help="skip the golden vectors")
    c.add_argument("--catalog", action="append", metavar="DIR",
                   help="also run this project catalog's cases beside the built-in ones (repeatable); default: "
                        f"${catalog.PROJECT_ENV} or ./{catalog.PROJECT_DEFAULT} when that folder exists")
    c.add_argument("--shape", choices=("small", "serving"), default="small",
                   help="serving: serving-size problems only (64-256 rows, pools of 1e4-1e5 pages; "
                        "references on the backend's GPU when it has one); default small")
    c.set_defaults(fn=cmd_check)
    r = sub.add_parser("replay", help="run one case file (catalog or repro) against a backend",
                       description="Rerun a saved failure or a golden case file and print its report.")
    r.add_argument("file", help="a case file: .repro/*.npz or vectors/data/*.npz")
    r.add_argument("--backend", help=f"{backend_help}; default: the backend the file records")
    r.add_argument("--splits", type=int, help="this split count (default: the file's launches)")
    r.add_argument("--xcds", type=int, help="this XCD placement (default: the file's launches)")
    r.add_argument("--order", help="this workgroup order (default: the file's launches)")
    r.set_defaults(fn=cmd_replay)
    g = sub.add_parser("regen", help="regenerate every golden case (with --check: compare, change nothing)")
    g.add_argument("--check", action="store_true", help="regenerate in a temporary folder and compare bytes")
    g.add_argument("--catalog", default=catalog.BUILTIN, metavar="DIR", help=managed_help)
    g.set_defaults(fn=cmd_regen)
    v = sub.add_parser("verify", help="recompute every stored expectation and compare (drift detector)")
    v.add_argument("--catalog", default=catalog.BUILTIN, metavar="DIR", help=managed_help)
    v.set_defaults(fn=cmd_verify)
    ls = sub.add_parser("list", help="list the golden cases")
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
    if getattr(args, "examples", 0) < 0:
        print("error: --examples must be >= 0", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except (SetupError, CaseFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: no verdict", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, without a second
        # BrokenPipeError when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 2
