"""The check engine: golden vectors, generated problems and replays against one
backend, as results (``nvfp4_suite.vectors.cli`` prints them; tests and other tools call
these directly).

Verdict rules, shared by every entry point: a launch a backend's capabilities
do not cover is skipped and counted with its reason, never reported as a
pass; a case none of whose launches ran is SKIPPED; a case file that cannot
be read is an ERROR of the catalog, reported by case while the other cases
still run. Nothing judged means no verdict.
"""

from __future__ import annotations

import collections
import dataclasses
import shlex
import time
from pathlib import Path

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import ProblemError
from nvfp4_suite.reference.compare import backend_interval, describe_modified_inputs

from . import catalog, lock
from .harness import BackendCrash, modified_inputs, private_copy, run_case
from .io import CaseFileError

def indent(text: str, pad: str) -> str:
    """``text`` with ``pad`` before each of its lines."""
    return pad + text.replace("\n", "\n" + pad)


PREFERENCE = ("flydsl", "triton", "torch", "emulate")


class SetupError(Exception):
    """Exit 2: an unknown or unavailable backend, a bad argument, an unreadable catalog."""


def pick_backend(spec: str | None):
    """``(spec, backend)``: the backend for ``spec``, or the best available one
    (and its registered name) when None. Raises SetupError with the reasons."""
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
                return name, b
            reasons.append(f"{name}: {why}")
        raise SetupError("no backend available:\n  " + "\n  ".join(reasons))
    try:
        b = kernels.get_backend(spec)
    except kernels.BackendError as e:
        raise SetupError(str(e)) from e
    why = b.available()
    if why is not None:
        raise SetupError(f"backend {b.name!r} is not available here: {why}")
    return spec, b


def check_invalid(problem, expected_error: str, backend=None) -> tuple[bool, str]:
    """The validator (and the backend's host side, if given) must raise ``expected_error``;
    the backend gets a ``private_copy`` and must leave it as it was."""
    def raised(fn):
        """(exception class name or None, message) of calling fn."""
        try:
            fn()
        except ProblemError as e:
            return type(e).__name__, str(e)
        except Exception as e:  # noqa: BLE001 - any other exception is the wrong answer
            return type(e).__name__, str(e)
        return None, "no error raised"

    lines, ok = [], True
    who = [("reference validator", problem.validate)]
    seen = None
    if backend is not None:
        seen = private_copy(problem)
        who.append((f"backend {backend.name}", lambda: backend(seen, splits=1)))
    for name, fn in who:
        got, msg = raised(fn)
        good = got == expected_error
        ok &= good
        lines.append(f"{name}: {'PASS' if good else 'FAIL'}: expected {expected_error}, got {got}: {msg}")
    changed = {} if seen is None else modified_inputs(problem, seen)
    if changed:
        ok = False
        lines.append(f"backend {backend.name}: FAIL: {describe_modified_inputs(changed)}")
    return ok, "\n".join(lines)


@dataclasses.dataclass
class LaunchFailure:
    """One failing launch: its record, the report text, and the report (None for a crash)."""

    launch: Launch
    text: str
    report: object = None


@dataclasses.dataclass
class CaseResult:
    """One golden case against one backend.

    status: PASS (every launch run passed), FAIL, SKIP (no launch inside the
    backend's capabilities) or ERROR (the case file could not be read).
    ran: launches run; skipped: (launch, reason) pairs; failures: LaunchFailure
    list; error: the catalog's problem for ERROR (an unreadable file, or stored
    expectations the reference no longer reproduces)."""

    id: int
    name: str
    flags: list
    file: Path
    status: str = "PASS"
    ran: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)
    failures: list = dataclasses.field(default_factory=list)
    error: str | None = None
    expected_error: str | None = None
    catalog: str | None = None  # the catalog's label (catalog.label); None: the built-in one

    @property
    def tag(self) -> str:
        """How the report names the case: ``id name`` in the built-in catalog, ``LABEL:NNN-name`` in another."""
        return f"{self.id:3d} {self.name:<28}" if self.catalog is None else f"{self.catalog}:{self.id:03d}-{self.name}"


def _expected(backend, problem, extra, launch, cache: dict) -> tuple:
    """``(interval, against)`` for ``launch``, computed once per split count; for a
    geometry the case file stores a judgment of, first confirmed equal to the
    stored one bit for bit (a catalog the reference no longer reproduces raises
    CaseFileError: the backend must not be judged against a moved target)."""
    key = launch.splits
    if key not in cache:
        iv, against = backend_interval(problem, geometry=backend.geometry, splits=launch.splits)
        name = catalog.judgment_name(backend.geometry, launch.splits)
        if name is not None:
            bad = catalog.drift(problem, extra, name, iv)
            if bad:
                raise CaseFileError(f"stored expectations drifted from the reference: {bad}")
            against += " = stored expectations"
        cache[key] = (iv, against)
    return cache[key]


def check_case(backend, entry: dict, splits=None, root=None) -> CaseResult:
    """Run one manifest entry (of catalog ``root``, default the built-in one)'s
    launches that ``backend`` supports (``splits``: only launches with these
    split counts; the others are skipped as not selected)."""
    res = CaseResult(entry["id"], entry["name"], list(entry["flags"]), catalog._root(root) / entry["file"],
                     expected_error=entry.get("expected_error"), catalog=catalog.label(root))
    try:
        problem, _, extra = catalog.load_entry(entry, root)
    except CaseFileError as e:
        res.status, res.error = "ERROR", str(e)
        return res
    if entry["result"] == "invalid":
        good, text = check_invalid(problem, entry["expected_error"], backend)
        res.ran.append(Launch())
        if not good:
            res.status = "FAIL"
            res.failures.append(LaunchFailure(Launch(), text))
        return res
    caps = backend.capabilities
    cache = {}
    for launch in dict.fromkeys(x.as_seen_by(caps) for x in catalog.launches(entry)):
        why = caps.refuses(problem, launch)
        if splits and launch.splits not in splits:
            why = f"splits {launch.splits} not selected"
        if why:
            res.skipped.append((launch, why))
            continue
        res.ran.append(launch)
        try:
            expected = _expected(backend, problem, extra, launch, cache)
        except CaseFileError as e:
            res.status, res.error = "ERROR", str(e)
            return res
        try:
            _, rep = run_case(backend, problem, launch, expected)
        except BackendCrash as e:
            res.failures.append(LaunchFailure(launch, str(e)))
            continue
        if not rep.passed:
            res.failures.append(LaunchFailure(launch, rep.details(), rep))
    if res.failures:
        res.status = "FAIL"
    elif not res.ran:
        res.status = "SKIP"
    return res


@dataclasses.dataclass
class GoldenRun:
    """The golden check: one CaseResult per case chosen."""

    cases: list

    def count(self, status: str) -> int:
        """How many cases ended with ``status``."""
        return sum(c.status == status for c in self.cases)

    @property
    def judged(self) -> int:
        """Cases with at least one launch run."""
        return sum(c.status in ("PASS", "FAIL") for c in self.cases)

    @property
    def ok(self) -> bool:
        """No case failed or was unreadable, and at least one was judged."""
        return self.judged > 0 and not self.count("FAIL") and not self.count("ERROR")

    def text(self, spec: str = "BACKEND") -> str:
        """``lines`` joined."""
        return "\n".join(self.lines(spec))

    def lines(self, spec: str) -> list[str]:
        """The report: counts, failing classes, one representative report per
        failing class, replay commands (naming the backend by ``spec``), skips,
        unreadable cases."""
        out = []
        failed = [c for c in self.cases if c.status == "FAIL"]
        skipped = [c for c in self.cases if c.status == "SKIP"]
        errors = [c for c in self.cases if c.status == "ERROR"]
        partial = [c for c in self.cases if c.status in ("PASS", "FAIL") and c.skipped]
        out.append(f"golden vectors: {self.count('PASS')} of {len(self.cases)} cases passed, {len(failed)} failed, "
              f"{len(skipped)} skipped, {len(errors)} unreadable")
        if failed:
            classes = collections.Counter(f for c in failed for f in c.flags)
            out.append("  failing bug classes (cases): " + ", ".join(f"{k} ({n})" for k, n in classes.most_common()))
            shown = set()
            for c in failed:
                first = c.failures[0]
                new = [f for f in c.flags if f not in shown]
                out.append(f"  {c.tag} FAIL at {len(c.failures)} of {len(c.ran)} launches "
                      f"[{', '.join(c.flags)}]")
                if new:
                    shown.update(new)
                    out.append(f"      {first.launch.describe()}:")
                    out.append(indent(first.text, "        "))
                out.append(f"      replay: {replay_command(c.file, spec, first.launch)}")
        for c in errors:
            out.append(f"  {c.tag} ERROR: {c.error}")
        for c in skipped:
            reasons = sorted({why for _, why in c.skipped})
            out.append(f"  {c.tag} SKIPPED: {'; '.join(reasons)}")
        if partial:
            n = sum(len(c.skipped) for c in partial)
            reasons = collections.Counter(why for c in partial for _, why in c.skipped)
            out.append(f"  launches skipped in {len(partial)} cases that ran ({n} launches): "
                  + "; ".join(f"{why} ({k})" for why, k in reasons.most_common()))
        return out


def check_golden(backend, cases=None, progress=None, stop_at_first: bool = False, splits=None, *,
                 root=None, notice=None) -> GoldenRun:
    """Every case of catalog ``root`` (default: the built-in one; or those whose
    id is in ``cases``) against ``backend`` (``splits``: only launches with
    these split counts). Holds the catalog's shared lock throughout
    (``notice``: told if it waits), so an ``add`` or ``regen`` waits for it
    and it never reads a catalog half installed. Raises CaseFileError when
    the manifest itself cannot be read."""
    with lock.locked(catalog._root(root), exclusive=False, what="check", notice=notice):
        m = catalog.load_manifest(path=catalog._root(root) / "manifest.json")
        chosen = [c for c in m["cases"] if cases is None or c["id"] in cases]
        run = GoldenRun([])
        for i, c in enumerate(chosen):
            if progress:
                progress(f"  golden: [{i + 1}/{len(chosen)}] {c['name']}")
            run.cases.append(check_case(backend, c, splits, root))
            if stop_at_first and run.cases[-1].status == "FAIL":
                break
    return run


def replay_command(file, spec: str, launch: Launch | None = None) -> str:
    """The command that replays ``file`` against the backend loaded by ``spec``
    (``launch``: the one failing launch, else the file's own), each argument
    shell-quoted: it runs as printed whatever the folder's name."""
    cmd = f"python -m nvfp4_suite.vectors replay {shlex.quote(str(file))} --backend {shlex.quote(spec)}"
    if launch is not None:
        cmd += f" --splits {launch.splits} --xcds {launch.xcds}"
        if launch.order is not None:
            cmd += f" --order {shlex.quote(launch.order)}"
    return cmd


# --- generated problems -------------------------------------------------------

@dataclasses.dataclass
class GeneratedRun:
    """The generated check: ``n`` problems run, ``stats`` (coverage condition ->
    [problems, failures]), ``totals`` (elements, largest ratios, rounding
    counts), ``failing``: None or (minimised problem, launch, report text),
    ``coverage``: the run's ``nvfp4_suite.vectors.coverage.Coverage``."""

    ok: bool
    n: int
    stats: dict
    totals: dict
    failing: tuple | None = None
    coverage: object = None


def check_generated(backend, examples: int, seed: int, splits_choice=None, progress=None,
                    progress_every: int = 10, shrink: bool = True, shrink_report_s: float = 10.0) -> GeneratedRun:
    """Run ``examples`` hypothesis-generated problems and launches inside the
    backend's capabilities (``splits_choice``: only these split counts).

    shrink: minimise the first failing problem (off: stop at the first failure).
    progress: called with one line every ``progress_every`` problems and, while
    minimising (which can take minutes), at most every ``shrink_report_s``
    seconds with the tries so far and the smallest failing problem yet.
    """
    from .coverage import Coverage
    from .strategies import run_generated

    coverage = Coverage(backend.capabilities, splits_choice)
    state = {"n": 0, "failing": None, "shrinking": False, "elements": 0, "max_ratio": 0.0, "max_ulp": 0.0,
             "rounding": collections.Counter(), "tries": 0, "reported": 0.0}

    def prop(problem, launch):
        """One generated problem: run, compare, record coverage; raise on failure."""
        rep = None
        try:
            _, rep = run_case(backend, problem, launch)
            ok, text = rep.passed, rep.details()
        except BackendCrash as e:
            ok, text = False, str(e)
        if not state["shrinking"]:
            state["n"] += 1
            if rep is not None:
                state["elements"] += rep.n_elements
                state["max_ratio"] = max(state["max_ratio"], rep.max_bound_ratio)
                state["max_ulp"] = max(state["max_ulp"], rep.max_ulp)
                add_rounding(state["rounding"], rep)
            coverage.add(problem, launch, ok)
            if progress and (state["n"] % progress_every == 0 or state["n"] == examples):
                progress(f"  generated: {state['n']}/{examples} problems checked")
        elif state["shrinking"]:
            state["tries"] += 1
        if not ok:
            if not state["shrinking"] and progress:
                progress(f"  generated: failure at problem {state['n']}; minimising...")
            state["shrinking"] = True
            state["failing"] = (problem, launch, text)
        if state["shrinking"] and progress and time.monotonic() - state["reported"] >= shrink_report_s:
            state["reported"] = time.monotonic()
            small = state["failing"][0]
            progress(f"  minimising: {state['tries']} tries; smallest failing problem so far: rows {small.rows}, "
                     f"Hkv {small.num_kv_heads}, TOPK {small.TOPK}, q_len {small.q_len}")
        if not ok:
            raise AssertionError(text)

    try:
        run_generated(backend.capabilities, examples, seed, prop, splits_choice, shrink)
        ok = True
    except AssertionError:
        ok = False
    totals = {k: state[k] for k in ("elements", "max_ratio", "max_ulp", "rounding")}
    stats = {name: [coverage.reached[name], coverage.failed[name]] for name in coverage.reached}
    return GeneratedRun(ok, state["n"], stats, totals, state["failing"], coverage)


ROUNDING_FIELDS = ("n_elements", "n_determined", "n_off_nearest", "n_toward_zero", "n_away_from_zero",
                   "n_below", "n_above", "n_rounding")


def add_rounding(acc: collections.Counter, rep) -> None:
    """Add one report's rounding statistics to the run's totals."""
    for f in ROUNDING_FIELDS:
        acc[f] += getattr(rep, f)
    acc["signed_ulp_sum"] += rep.mean_signed_ulp * rep.n_rounding
    acc["bias_verdicts"] += rep.bias is not None
    for side, n in rep.bias_counts.items():
        acc[f"bias {side}"] += n


def rounding_lines(acc) -> list[str]:
    """The run's rounding statistics (totals of ``Report`` fields) as printed lines:
    the share checked to one bf16 value, off nearest-even counts, the mean signed
    error, and the bias verdict the totals would give as one report."""
    from nvfp4_suite.reference.compare import BIAS_ALPHA, BIAS_SIDES, Report, bias_verdict

    if not acc or not acc["n_elements"]:
        return []
    r = Report(against="run", n_fail=0, max_ulp=0.0, worst=[], nan_rows=[], unwritten_rows=[], not_bf16=0,
               **{f: int(acc[f]) for f in ROUNDING_FIELDS})
    r.mean_signed_ulp = acc["signed_ulp_sum"] / max(acc["n_rounding"], 1)
    lines = [f"  rounding: {r.rounding_summary()}"]
    # Problems are drawn independently, so their (row, head) groups add up as trials.
    p, name, t, k = bias_verdict({side: acc[f"bias {side}"] for side in BIAS_SIDES})
    if acc["bias_verdicts"]:
        lines.append(f"  rounding bias named in {acc['bias_verdicts']} problem(s)")
    if p <= BIAS_ALPHA:
        lines.append(f"  rounding anomaly over the run: outputs rounded {name} "
                     f"({t} of the {k} (row, head) groups with outputs off nearest-even lean that way; "
                     f"chance under no bias <= {p:.2g})")
    return lines


# --- replay -------------------------------------------------------------------

def replay_launches(meta: dict, caps, splits=None, xcds=None, order=None) -> list[Launch]:
    """The launches a case file records (a repro's failing launch, a golden
    case's list) as a backend with ``caps`` receives them, with the given
    fields overridden; duplicates removed."""
    if "launches" in meta:
        recorded = [Launch.from_json(x) for x in meta["launches"]]
    else:
        recorded = [Launch()]
    out = []
    for x in recorded:
        x = x.as_seen_by(caps)
        x = dataclasses.replace(
            x, **{k: v for k, v in (("splits", splits), ("xcds", xcds), ("order", order)) if v is not None})
        if x not in out:
            out.append(x)
    return out
