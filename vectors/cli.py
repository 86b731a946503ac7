"""``python -m vectors``: check a backend, replay a case, manage the catalog.

Exit codes: 0 conformant, 1 not conformant, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import kernels

from .harness import run_case, save_repro, takes_xcds
from .io import CaseFileError, load_case

PREFERENCE = ("flydsl", "triton", "torch", "emulate")


class SetupError(Exception):
    """Exit 2: an unknown or unavailable backend, or a bad argument."""


def pick_backend(spec: str | None):
    """The backend for ``spec``, or the best available one when None."""
    if spec is None:
        reasons = []
        for name in PREFERENCE:
            try:
                b = kernels.get_backend(name)
            except kernels.BackendError as e:
                reasons.append(f"{name}: {e}")
                continue
            why = b.available()
            if why is None:
                return b
            reasons.append(f"{name}: {why}")
        raise SetupError("no backend available:\n  " + "\n  ".join(reasons))
    try:
        b = kernels.get_backend(spec)
    except kernels.BackendError as e:
        raise SetupError(str(e)) from e
    why = b.available()
    if why is not None:
        raise SetupError(f"backend {b.name!r} is not available here: {why}")
    return b


def _progress(msg: str) -> None:
    end = "\r" if sys.stderr.isatty() else "\n"
    print(msg, file=sys.stderr, end=end, flush=True)


def check_generated(backend, examples: int, seed: int, splits_choice=None, progress_every: int = 10,
                    shrink: bool = True):
    """Run ``examples`` hypothesis-generated problems; returns (ok, stats, failure).

    shrink: minimise the first failing problem (off: stop at the first failure).
    stats: Counter of case class -> [problems, failures]. failure: None, or
    (problem, splits, text) of the minimised failing problem.
    """
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from .strategies import case_classes, problems_for, record_launch, xcds

    splits_opts = tuple(splits_choice or backend.splits)
    stats = collections.defaultdict(lambda: [0, 0])
    state = {"n": 0, "failing": None, "shrinking": False, "elements": 0, "max_ratio": 0.0, "max_ulp": 0.0,
             "rounding": collections.Counter()}

    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck), phases=phases)
    @given(problems_for(backend), st.sampled_from(splits_opts), xcds)
    def prop(problem, splits, xcds_):
        """One generated problem: run, compare, record coverage; raise on failure."""
        rep = None
        try:
            record_launch(problem, splits, xcds_)
            _, rep = run_case(backend, problem, splits, xcds_)
            ok, text = rep.passed, rep.details()
        except Exception as e:  # a crashing backend is a non-conformant one
            ok, text = False, f"backend raised {type(e).__name__}: {e}"
        if not state["shrinking"]:
            state["n"] += 1
            if rep is not None:
                state["elements"] += rep.n_elements
                state["max_ratio"] = max(state["max_ratio"], rep.max_bound_ratio)
                state["max_ulp"] = max(state["max_ulp"], rep.max_ulp)
                _add_rounding(state["rounding"], rep)
            launch = [f"splits={splits}"] + ([f"xcds={xcds_}"] if xcds_ else [])
            for c in case_classes(problem) + launch:
                stats[c][0] += 1
                stats[c][1] += 0 if ok else 1
            if state["n"] % progress_every == 0 or state["n"] == examples:
                _progress(f"  generated: {state['n']}/{examples} problems checked")
        if not ok:
            if not state["shrinking"]:
                _progress(f"  generated: failure at problem {state['n']}; minimising...")
            state["shrinking"] = True
            state["failing"] = (problem, splits, text, xcds_)
            raise AssertionError(text)

    try:
        prop()
        ok = True
    except AssertionError:
        ok = False
    stats["__totals__"] = {k: state[k] for k in ("n", "elements", "max_ratio", "max_ulp", "rounding")}
    return ok, stats, state["failing"]


_ROUNDING_FIELDS = ("n_elements", "n_determined", "n_off_nearest", "n_toward_zero", "n_away_from_zero",
                    "n_below", "n_above", "n_rounding")


def _add_rounding(acc: collections.Counter, rep) -> None:
    """Add one report's rounding statistics to the run's totals."""
    for f in _ROUNDING_FIELDS:
        acc[f] += getattr(rep, f)
    acc["signed_ulp_sum"] += rep.mean_signed_ulp * rep.n_rounding
    acc["bias_verdicts"] += rep.bias is not None


def rounding_lines(acc) -> list[str]:
    """The run's rounding statistics (totals of ``Report`` fields) as printed lines:
    the share checked to one bf16 value, off nearest-even counts, the mean signed
    error, and the bias verdict the totals would give as one report."""
    from reference.compare import BIAS_ALPHA, Report, bias_false_alarm

    if not acc or not acc["n_elements"]:
        return []
    r = Report(against="run", n_fail=0, max_ulp=0.0, worst=[], nan_rows=[], unwritten_rows=[], not_bf16=0,
               **{f: int(acc[f]) for f in _ROUNDING_FIELDS})
    r.mean_signed_ulp = acc["signed_ulp_sum"] / max(acc["n_rounding"], 1)
    lines = [f"  rounding: {r.rounding_summary()}"]
    sides = [("toward zero", r.n_toward_zero), ("away from zero", r.n_away_from_zero),
             ("down (toward -inf)", r.n_below), ("up (toward +inf)", r.n_above)]
    name, t = max(sides, key=lambda s: s[1])
    p = min(1.0, 4 * bias_false_alarm(t, r.n_off_nearest))
    if acc["bias_verdicts"]:
        lines.append(f"  rounding bias named in {acc['bias_verdicts']} problem(s)")
    if p <= BIAS_ALPHA:
        lines.append(f"  rounding anomaly over the run: outputs rounded {name} in "
                     f"{100 * t / r.n_elements:.3g}% of elements ({t} of the {r.n_off_nearest} off "
                     f"nearest-even; chance under no bias <= {p:.2g})")
    return lines


def _print_stats(stats) -> None:
    totals = stats.pop("__totals__", None)
    if totals:
        print(f"  {totals['n']} problems, {totals['elements']} output elements compared, "
              f"largest |got - pre|/reach {totals['max_ratio']:.3g}, largest bf16 ulp distance "
              f"{totals['max_ulp']:g} (large only where outputs cancel to near zero)")
        for line in rounding_lines(totals.get("rounding")):
            print(line)
    if not stats:
        return
    w = max(len(k) for k in stats)
    print(f"  {'case class':<{w}}  problems  failed")
    for k in sorted(stats):
        n, f = stats[k]
        print(f"  {k:<{w}}  {n:8d}  {f:6d}")


def cmd_check(args) -> int:
    """``check``: golden vectors and generated problems against one backend."""
    backend = pick_backend(args.backend)
    bad = [sp for sp in (args.splits or []) if sp not in backend.splits]
    if bad:
        raise SetupError(f"--splits {bad}: backend {backend.name} supports {list(backend.splits)}")
    print(f"backend: {backend.name} (geometry: {backend.geometry or 'exact class'}; splits {list(backend.splits)})")
    t0 = time.time()
    ok = True
    from . import catalog

    if not args.no_golden:
        if catalog.exists():
            g_ok, lines = catalog.check_all(backend, progress=_progress, spec=args.backend)
            ok &= g_ok
            for ln in lines:
                print(ln)
        else:
            print("golden vectors: none in this checkout (vectors/manifest.json missing)")
    if args.examples > 0:
        print(f"generated problems: {args.examples} (seed {args.seed})")
        g_ok, stats, failing = check_generated(backend, args.examples, args.seed, args.splits)
        _print_stats(stats)
        if failing is not None:
            problem, splits, text, xcds_ = failing
            path = save_repro(backend.name, problem, splits, text, xcds=xcds_)
            print("FIRST FAILING PROBLEM (minimised):")
            print(f"  rows {problem.rows}, Hkv {problem.num_kv_heads}, TOPK {problem.TOPK}, q_len {problem.q_len}, "
                  f"layout {problem.layout}, splits {splits}, xcds {xcds_}")
            print("  " + text.replace("\n", "\n  "))
            print(f"saved: {path}")
            print(f"replay: python -m vectors replay {path} --backend {args.backend or backend.name} "
                  f"--splits {splits} --xcds {xcds_}")
        ok &= g_ok
    print(f"{'CONFORMANT' if ok else 'NOT CONFORMANT'}: backend {backend.name}, {time.time() - t0:.1f} s")
    return 0 if ok else 1


def cmd_replay(args) -> int:
    """``replay FILE``: one case file against one backend, its report printed.

    Runs the split counts and the XCD placement the file records (a repro's
    failing launch; a golden case's split list, xcds 0), unless ``--splits`` or
    ``--xcds`` name others.
    """
    backend = pick_backend(args.backend)
    try:
        problem, meta, extra = load_case(args.file)
    except CaseFileError as e:
        raise SetupError(str(e)) from e
    from . import catalog

    expected_error = meta.get("expected_error")
    if expected_error:
        ok, text = catalog.check_invalid(problem, expected_error, backend)
        print(text)
        return 0 if ok else 1
    splits_list = [args.splits] if args.splits else meta.get("splits_list") or [meta.get("splits", 1)]
    xcds = args.xcds if args.xcds is not None else meta.get("xcds", 0)
    # The placement is named only where it reaches the backend.
    launch = f", xcds={xcds}" if takes_xcds(backend) else ""
    ok = True
    for s in splits_list:
        if s not in backend.splits:
            print(f"splits={s}: skipped, backend {backend.name} supports {list(backend.splits)}")
            continue
        _, rep = run_case(backend, problem, s, xcds)
        print(f"splits={s}{launch}: " + rep.details())
        ok &= rep.passed
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    ap = argparse.ArgumentParser(prog="python -m vectors", description="NVFP4 sparse decode conformance")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="golden vectors + generated problems against a backend")
    c.add_argument("--backend", help=f"registered name ({', '.join(kernels.registered())}) or module.path:attr; "
                                     f"default: the first available of {', '.join(PREFERENCE)}")
    c.add_argument("--examples", type=int, default=100, help="generated problems (default 100; 0 for none)")
    c.add_argument("--seed", type=int, default=0, help="seed of the generated problems")
    c.add_argument("--splits", type=int, action="append", help="only these split counts (repeatable)")
    c.add_argument("--no-golden", action="store_true", help="skip the golden vectors")
    c.set_defaults(fn=cmd_check)
    r = sub.add_parser("replay", help="run one case file (catalog or repro) against a backend")
    r.add_argument("file")
    r.add_argument("--backend")
    r.add_argument("--splits", type=int, help="this split count (default: the file's)")
    r.add_argument("--xcds", type=int, help="this XCD count (default: the file's, else 0)")
    r.set_defaults(fn=cmd_replay)
    from . import catalog

    catalog.add_subcommands(sub)
    return ap


def main(argv=None) -> int:
    """Entry point of ``python -m vectors``; returns the exit status."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if getattr(args, "examples", 0) < 0:
        print("error: --examples must be >= 0", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
