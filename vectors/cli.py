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

from . import catalog, export
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
    if gen.stats:
        w = max(len(k) for k in gen.stats)
        print(f"  {'case class':<{w}}  problems  failed")
        for k in sorted(gen.stats):
            n, f = gen.stats[k]
            print(f"  {k:<{w}}  {n:8d}  {f:6d}")


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
    if not args.no_golden:
        golden = check_golden(backend, progress=_progress, splits=args.splits, outside_domain=args.outside_domain)
        for line in golden.lines(spec):
            print(line)
        failed += golden.count("FAIL")
        errors += golden.count("ERROR")
        judged += golden.judged
        summary.append(f"{golden.judged} golden cases judged ({golden.count('FAIL')} failed"
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
        why = "the catalog has unreadable cases" if errors else "nothing was judged"
        print(f"NO VERDICT ({why}): backend {backend.name}; {', '.join(summary)}; {took}")
        return 2
    print(f"CONFORMANT: backend {backend.name}; {', '.join(summary)}; {took}")
    if spec in REFERENCE_BACKENDS:
        print(f"This checked the suite's own {spec!r} backend. To check your kernel: "
              "python -m nvfp4_suite.vectors check --backend yourpkg.module:YourBackend (README, 'Writing a backend').")
    return 0


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
    """
    problem, meta, _ = load_case(args.file)
    spec = args.backend or meta.get("backend")
    if spec is None:
        raise SetupError(f"{args.file} records no backend: give --backend")
    spec, backend = pick_backend(spec)
    print(_describe_backend(spec, backend))
    expected_error = meta.get("expected_error")
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


def cmd_regen(args) -> int:
    """``regen [--check]``: rewrite the catalog, or compare a fresh regeneration byte for byte."""
    previous = catalog.load_manifest(versions=args.check) if catalog.exists() else None
    if args.check:
        if previous is None:
            raise SetupError("regen --check: no manifest to check against")
        n, bad = catalog.regen_differences(previous, _progress)
        for b in bad:
            print(f"regen --check: {b}")
        print(f"regen --check: {'OK' if not bad else 'FAILED'} ({n} cases)")
        return 1 if bad else 0
    manifest = catalog.regen_write(previous, _progress)
    size = sum(f.stat().st_size for f in catalog.DATA.iterdir())
    print(f"wrote {len(manifest['cases'])} cases, {size / 2**20:.2f} MiB")
    return 0


def cmd_verify(args) -> int:
    """``verify``: the reference reproduces every stored expectation (drift detector)."""
    bad = catalog.verify(_progress)
    for b in bad:
        print(f"verify: {b}")
    print(f"verify: {'OK' if not bad else 'FAILED'}")
    return 1 if bad else 0


def cmd_list(args) -> int:
    """``list [--flag F]``: one line per case and its comment."""
    m = catalog.load_manifest()
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
    """``add FILE --comment C --flags F..``: promote a case file into the catalog."""
    entry = catalog.add_case(args.file, comment=args.comment, flags=args.flags, name=args.name, splits=args.splits)
    print(f"added case {entry['id']} ({entry['file']}), result {entry['result']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.vectors", description="NVFP4 sparse decode conformance")
    sub = ap.add_subparsers(dest="cmd", required=True)
    backend_help = (f"registered name ({', '.join(kernels.registered())}) or module.path:attr")
    c = sub.add_parser("check", help="golden vectors + generated problems against a backend",
                       description="Run the golden vectors and generated problems against one backend.")
    c.add_argument("--backend", help=f"{backend_help}; default: the first available of {', '.join(PREFERENCE)}")
    c.add_argument("--examples", type=int, default=100, help="generated problems (default 100; 0 for none)")
    c.add_argument("--seed", type=int, default=0, help="seed of the generated problems")
    c.add_argument("--splits", type=int, action="append", help="only these split counts (repeatable)")
    c.add_argument("--no-golden", action="store_true", help="skip the golden vectors")
    c.add_argument("--outside-domain", action="store_true",
                   help="also run golden cases outside the backend's declared input domain and report what it "
                        "does there (information, not a verdict)")
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
    g.set_defaults(fn=cmd_regen)
    v = sub.add_parser("verify", help="recompute every stored expectation and compare (drift detector)")
    v.set_defaults(fn=cmd_verify)
    ls = sub.add_parser("list", help="list the golden cases")
    ls.add_argument("--flag", help="only cases with this bug-class flag")
    ls.set_defaults(fn=cmd_list)
    a = sub.add_parser("add", help="promote a saved case file (e.g. from .repro/) into the catalog")
    a.add_argument("file", help="the case file to promote")
    a.add_argument("--comment", required=True, help="what the case targets")
    a.add_argument("--flags", nargs="+", required=True, help="its bug-class flags (see `list`)")
    a.add_argument("--name", help="case name (default: the file's stem)")
    a.add_argument("--splits", type=int, nargs="+", help="split counts to store expectations for")
    a.set_defaults(fn=cmd_add)
    export.register(sub)  # [layout] export --layout FILE DIR, import --layout FILE DUMP OUT
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
