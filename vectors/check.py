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
import os
import time
from pathlib import Path

import numpy as np

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem, ProblemError, ReferenceBudgetError
from nvfp4_suite.reference.compare import Interval, Report, backend_interval, describe_modified_inputs

from . import blame, catalog, interrupts, lock
from .coverage import Coverage
from .harness import BackendCrash, modified_inputs, private_copy, run_case, save_repro
from .io import CaseFileError
from .render import golden_lines, replay_command, shown  # noqa: F401 - replay_command: imported from here by callers
from .results import ROUNDING_FIELDS, Status  # noqa: F401 - Status: imported from here by callers

PREFERENCE = ("flydsl", "triton", "torch", "emulate")


class SetupError(Exception):
    """Exit 2: an unknown or unavailable backend, a bad argument, an unreadable catalog."""


def unavailable(backend) -> str | None:
    """None when ``backend.available()`` says it runs here, otherwise why not:
    its reason, or what went wrong asking (``available()`` raised, exited, or
    returned something that is neither None nor a non-empty reason). A backend
    that cannot run here is a setup error (exit 2), never a kernel verdict."""
    try:
        why = backend.available()
    except KeyboardInterrupt as e:
        if interrupts.from_user(e):
            raise
        return "available() raised KeyboardInterrupt"
    except BaseException as e:  # noqa: BLE001 - any failure to answer is "cannot run here"
        return f"available() raised {type(e).__name__}: {e}"
    if why is None:
        return None
    if not isinstance(why, str) or not why.strip():
        return f"available() returned {why!r}, neither None (usable) nor a reason"
    return why


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
            why = unavailable(b)
            if why is None:
                return name, b
            reasons.append(f"{name}: {why}")
        raise SetupError("no backend available:\n  " + "\n  ".join(reasons))
    try:
        b = kernels.get_backend(spec)
    except kernels.BackendError as e:
        raise SetupError(str(e)) from e
    why = unavailable(b)
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
        except KeyboardInterrupt as e:
            if interrupts.from_user(e):
                raise
            return type(e).__name__, str(e)
        except BaseException as e:  # noqa: BLE001 - any other exception (SystemExit too) is the wrong answer
            return type(e).__name__, str(e)
        return None, "no error raised"

    lines, ok = [], True
    who = [("reference validator", problem.validate)]
    seen = None
    if backend is not None:
        seen = private_copy(problem)
        who.append((f"backend {shown(backend.name)}", lambda: backend(seen, splits=1)))
    for name, fn in who:
        got, msg = raised(fn)
        good = got == expected_error
        ok &= good
        lines.append(f"{name}: {'PASS' if good else 'FAIL'}: expected {expected_error}, got {got}: {msg}")
    changed = {} if seen is None else modified_inputs(problem, seen)
    if changed:
        ok = False
        lines.append(f"backend {shown(backend.name)}: FAIL: {describe_modified_inputs(changed)}")
    return ok, "\n".join(lines)


@dataclasses.dataclass
class LaunchFailure:
    """One failing launch: its record, the report text, and the report (None
    for a crash or a failed invalid-input check, which have no report)."""

    launch: Launch
    text: str
    report: Report | None = None


@dataclasses.dataclass
class CaseResult:
    """One golden case against one backend.

    status: a ``Status``: PASS (every launch run passed), FAIL, SKIP (no launch
    inside the backend's capabilities) or ERROR (the case file could not be read).
    ran: launches run; skipped: (launch, reason) pairs; failures: LaunchFailure
    list; error: the catalog's problem for ERROR (an unreadable file, or stored
    expectations the reference no longer reproduces)."""

    id: int
    name: str
    flags: list
    file: Path
    status: Status = Status.PASS
    ran: list[Launch] = dataclasses.field(default_factory=list)
    skipped: list[tuple[Launch, str]] = dataclasses.field(default_factory=list)
    failures: list[LaunchFailure] = dataclasses.field(default_factory=list)
    error: str | None = None
    expected_error: str | None = None
    outside: list = dataclasses.field(default_factory=list)  # (launch, observation): --outside-domain
    # Launch -> the facts of the problem and launch a cause summary compares
    # (blame.launch_features), for every launch run.
    features: dict = dataclasses.field(default_factory=dict)
    catalog: str | None = None  # the catalog's label (catalog.label); None: the built-in one

    @property
    def tag(self) -> str:
        """How the report names the case: ``id name`` in the built-in catalog, ``LABEL:NNN-name`` in another."""
        return f"{self.id:3d} {self.name:<28}" if self.catalog is None else f"{self.catalog}:{self.id:03d}-{self.name}"


def _expected(backend, problem, extra, launch, cache: dict[int, tuple[Interval, str]]) -> tuple[Interval, str]:
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


def check_case(backend, entry: dict, splits=None, outside_domain: bool = False, root=None) -> CaseResult:
    """Run one manifest entry (of catalog ``root``, default the built-in one)'s
    launches that ``backend`` supports (``splits``: only launches with these
    split counts; the others are skipped as not selected; ``outside_domain``:
    launches skipped only for the input domain also run, their outcome kept in
    ``outside`` as information, never as a verdict)."""
    res = CaseResult(entry["id"], entry["name"], list(entry["flags"]), catalog._root(root) / entry["file"],
                     expected_error=entry.get("expected_error"), catalog=catalog.label(root))
    try:
        problem, _, extra = catalog.load_entry(entry, root)
    except CaseFileError as e:
        res.status, res.error = Status.ERROR, str(e)
        return res
    if entry["result"] == "invalid":
        good, text = check_invalid(problem, entry["expected_error"], backend)
        res.ran.append(Launch())
        res.features[Launch()] = frozenset({blame.INVALID})
        if not good:
            res.status = Status.FAIL
            res.failures.append(LaunchFailure(Launch(), text))
        return res
    caps = backend.capabilities
    cache: dict[int, tuple[Interval, str]] = {}
    for launch in dict.fromkeys(x.as_seen_by(caps) for x in catalog.launches(entry)):
        why = caps.refuses(problem, launch)
        if splits and launch.splits not in splits:
            why = f"splits {launch.splits} not selected"
        if why:
            res.skipped.append((launch, why))
            if outside_domain and why == caps.outside_domain(problem):
                res.outside.append((launch, observe_outside(backend, problem, launch)))
            continue
        res.ran.append(launch)
        res.features[launch] = blame.launch_features(problem, launch)
        try:
            expected = _expected(backend, problem, extra, launch, cache)
        except (CaseFileError, ReferenceBudgetError) as e:
            res.status, res.error = Status.ERROR, str(e)
            return res
        try:
            _, rep = run_case(backend, problem, launch, expected)
        except BackendCrash as e:
            res.failures.append(LaunchFailure(launch, e.details()))
            continue
        if not rep.passed:
            res.failures.append(LaunchFailure(launch, rep.details(), rep))
    if res.failures:
        res.status = Status.FAIL
    elif not res.ran:
        res.status = Status.SKIP
    return res


@dataclasses.dataclass
class GoldenRun:
    """The golden check: one CaseResult per case run; ``stopped``: None, or why
    the run ended before its last case (an interruption: ``SIGINT``,
    ``SIGTERM``, or stdout's reader gone), the cases run until then kept."""

    cases: list[CaseResult]
    stopped: str | None = None

    def count(self, status: Status) -> int:
        """How many cases ended with ``status``."""
        return sum(c.status == status for c in self.cases)

    @property
    def judged(self) -> int:
        """Cases with at least one launch run."""
        return sum(c.status in (Status.PASS, Status.FAIL) for c in self.cases)

    def outcomes(self) -> list[blame.Outcome]:
        """Every launch run, as the cause summary sees it (``blame.Outcome``)."""
        return [blame.Outcome(c.id, tuple(c.flags), launch, c.features[launch],
                              any(f.launch == launch for f in c.failures))
                for c in self.cases for launch in c.ran if launch in c.features]

    @property
    def ok(self) -> bool:
        """No case failed or was unreadable, at least one was judged, and the run was not stopped."""
        return self.judged > 0 and not self.count(Status.FAIL) and not self.count(Status.ERROR) and not self.stopped

    def text(self, spec: str = "BACKEND") -> str:
        """The report (``nvfp4_suite.vectors.render.golden_lines``) as one string."""
        return "\n".join(golden_lines(self, spec))


def check_golden(backend, cases=None, progress=None, stop_at_first: bool = False, splits=None,
                 outside_domain: bool = False, *, root=None, notice=None) -> GoldenRun:
    """Every case of catalog ``root`` (default: the built-in one; or those whose
    id is in ``cases``) against ``backend`` (``splits``: only launches with
    these split counts; ``outside_domain``: see ``check_case``). Holds the
    catalog's shared lock throughout (``notice``: told if it waits), so an
    ``add`` or ``regen`` waits for it and it never reads a catalog half
    installed. Raises CaseFileError when the manifest itself cannot be read.
    An ``interrupts.Interrupted`` (a signal while the CLI's handlers are
    installed, or stdout's reader going away, checked between cases) ends the
    run early with the cases run so far and ``stopped`` naming why; a plain
    KeyboardInterrupt propagates."""
    with lock.locked(catalog._root(root), exclusive=False, what="check", notice=notice):
        m = catalog.load_manifest(path=catalog._root(root) / "manifest.json")
        chosen = [c for c in m["cases"] if cases is None or c["id"] in cases]
        run = GoldenRun([])
        try:
            for i, c in enumerate(chosen):
                interrupts.stop_if_asked()
                if progress:
                    progress(f"  golden: [{i + 1}/{len(chosen)}] {c['name']}")
                run.cases.append(check_case(backend, c, splits, outside_domain, root))
                if stop_at_first and run.cases[-1].status == Status.FAIL:
                    break
        except interrupts.Interrupted as e:
            run.stopped = e.reason
    return run


def observe_outside(backend, problem, launch: Launch) -> str:
    """What ``backend`` does on ``problem`` outside its declared input domain, in
    words (crash, NaN, zeros, garbage, or agreeing with the exact reference);
    information only, never a verdict. The launch itself must be supported."""
    from .harness import OutputTypeError, _call  # the harness's one guarded call, without its judgement

    try:
        got, _ = _call(backend, problem, launch)
    except BackendCrash as e:
        return f"crash ({e})"
    if isinstance(got, OutputTypeError):
        return f"no output array ({got})"
    iv, _ = backend_interval(problem, geometry=None)
    if got.shape != iv.lo.shape:
        return f"output of shape {list(got.shape)}, expected {list(iv.lo.shape)}"
    n = got.size
    nan = int(np.isnan(got).sum())
    outside = int((~((got >= iv.lo) & (got <= iv.hi))).sum())
    rows = np.abs(got).reshape(problem.rows, -1).max(axis=1)
    zero_rows = int(((rows == 0) & (np.abs(iv.nearest).reshape(problem.rows, -1).max(axis=1) > 0)).sum())
    if outside == 0:
        return "agrees with the exact reference (every element inside its interval)"
    parts = [f"{outside} of {n} elements outside the exact reference's interval"]
    if nan:
        parts.append(f"NaN in {nan}")
    if zero_rows:
        parts.append(f"{zero_rows} rows zero where the reference is not")
    if outside > nan:
        parts.append(f"{outside - nan} finite elements off (garbage)")
    return "; ".join(parts)


# --- generated problems -------------------------------------------------------

@dataclasses.dataclass
class FailingProblem:
    """A generated problem that failed: the problem, its launch and the failing
    report's text. ``flaky_text``: for a flaky failure (the same problem and
    launch passed when run again), the rerun's report, else None.
    ``unfinished``: None, or why minimisation did not finish ("the run stopped
    (SIGTERM)", "the minimising budget of 10 s ran out"): this is then the
    smallest failing problem found until then (by ``problem_size``), not a
    minimal one."""

    problem: DecodeProblem
    launch: Launch
    text: str
    flaky_text: str | None = None
    unfinished: str | None = None


@dataclasses.dataclass
class GeneratedRun:
    """The generated check: ``n`` problems run, ``stats`` (coverage condition ->
    [problems, failures]), ``totals`` (elements, largest ratios, rounding
    counts), ``failing``: None or the ``FailingProblem``; ``stopped``: None, or
    why the run ended early (``SIGINT``, ``SIGTERM``, stdout's reader gone);
    ``coverage``: the run's ``nvfp4_suite.vectors.coverage.Coverage``."""

    ok: bool
    n: int
    stats: dict
    totals: dict
    failing: FailingProblem | None = None
    stopped: str | None = None
    coverage: Coverage | None = None


def problem_size(problem: DecodeProblem) -> tuple:
    """The order in which failing problems count as smaller: (query rows x KV
    heads x slots, pages, rows, KV heads, TOPK, q_len, total seq_len)."""
    return (problem.rows * problem.num_kv_heads * problem.TOPK, problem.num_pages, problem.rows,
            problem.num_kv_heads, problem.TOPK, problem.q_len, int(problem.seq_lens.astype("int64").sum()))


@dataclasses.dataclass
class _GeneratedState:
    """What ``check_generated``'s property keeps between hypothesis' calls.

    Until the first failure it counts the problems (``n``) and their totals
    (output elements compared, largest ratio and ulp distance, rounding
    counts); from then on hypothesis minimises and only ``tries`` counts.
    ``failing``: the smallest failing problem so far (by ``problem_size``),
    None until the first failure; ``since``: when that failure was seen, the
    start of the minimising budget; ``reported``: when the last minimising progress line
    was printed."""

    n: int = 0
    elements: int = 0
    max_ratio: float = 0.0
    max_ulp: float = 0.0
    rounding: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    failing: FailingProblem | None = None
    since: float = 0.0
    tries: int = 0
    reported: float = 0.0


class _OutOfTime(KeyboardInterrupt):
    """Raised inside a minimising try when ``shrink_budget_s`` has run out."""


def check_generated(backend, examples: int, seed: int, splits_choice=None, progress=None,
                    progress_every: int = 10, shrink: bool = True, shrink_report_s: float = 10.0,
                    shrink_budget_s: float | None = None) -> GeneratedRun:
    """Run ``examples`` hypothesis-generated problems and launches inside the
    backend's capabilities (``splits_choice``: only these split counts).

    shrink: minimise the first failing problem (off: stop at the first failure).
    shrink_budget_s: stop minimising after this many seconds (None: never); the
    smallest failing problem found until then is the result.
    progress: called with one line every ``progress_every`` problems and, while
    minimising (which can take minutes), at most every ``shrink_report_s``
    seconds with the tries so far and the smallest failing problem yet.

    A failure that does not repeat when hypothesis reruns it is a flaky
    failure (``failing.flaky_text``), never a traceback. An
    ``interrupts.Interrupted`` (a signal under the CLI's handlers, or stdout's
    reader going away) ends the run with what it found: ``stopped`` says why
    and ``failing`` keeps the smallest failing problem so far. No example
    database is used (nothing is written to the working folder).
    """
    # Flaky: what every hypothesis in the range raises for a failure that does not
    # repeat (6.108 and later raise its subclass FlakyFailure).
    from hypothesis.errors import Flaky

    from .strategies import run_generated

    coverage = Coverage(backend.capabilities, splits_choice)
    state = _GeneratedState()

    def over_budget() -> bool:
        return (state.failing is not None and shrink_budget_s is not None
                and time.monotonic() - state.since > shrink_budget_s)

    def prop(problem, launch):
        """One generated problem: run, compare, record coverage; raise on failure."""
        interrupts.stop_if_asked()
        if over_budget():
            # Minimising ran out of time: stop hypothesis at once (a KeyboardInterrupt
            # is the one exception it does not treat as a failure to minimise; letting
            # tries pass kept its shrinker drawing them for minutes). The smallest
            # failing problem so far is recorded.
            raise _OutOfTime()
        rep = None
        try:
            _, rep = run_case(backend, problem, launch)
            ok, text = rep.passed, rep.details()
        except BackendCrash as e:
            ok, text = False, e.details()
        if state.failing is None:  # still generating: minimising tries are not counted as problems
            state.n += 1
            if rep is not None:
                state.elements += rep.n_elements
                state.max_ratio = max(state.max_ratio, rep.max_bound_ratio)
                state.max_ulp = max(state.max_ulp, rep.max_ulp)
                add_rounding(state.rounding, rep)
            coverage.add(problem, launch, ok)
            if progress and (state.n % progress_every == 0 or state.n == examples):
                progress(f"  generated: {state.n}/{examples} problems checked")
        else:
            state.tries += 1
        if not ok:
            # Recorded before anything is printed: an interruption from here on keeps it.
            best = state.failing
            if best is None or problem_size(problem) <= problem_size(best.problem):
                state.failing = FailingProblem(problem, launch, text)
            if best is None:
                state.since = time.monotonic()
                if progress:
                    progress(f"  generated: failure at problem {state.n}; minimising...")
        if state.failing is not None and progress and time.monotonic() - state.reported >= shrink_report_s:
            state.reported = time.monotonic()
            small = state.failing.problem
            progress(f"  minimising: {state.tries} tries; smallest failing problem so far: rows {small.rows}, "
                     f"Hkv {small.num_kv_heads}, TOPK {small.TOPK}, q_len {small.q_len}")
        if not ok:
            raise AssertionError(text)

    stopped, cut = None, False
    try:
        run_generated(backend.capabilities, examples, seed, prop, splits_choice, shrink)
        interrupts.stop_if_asked()  # a signal whose exception hypothesis caught on the way
    except AssertionError:
        pass
    except Flaky:
        if state.failing is None:
            # No failure of the backend was recorded: what failed once was the
            # suite itself (an exception other than a verdict), which the
            # traceback must show.
            raise
        _rerun_flaky(backend, state.failing)
    except interrupts.Interrupted as e:
        stopped = e.reason
    except _OutOfTime:
        cut = True
    failing = state.failing
    if failing is not None and stopped:
        failing.unfinished = f"the run stopped ({stopped})"
    elif failing is not None and cut:
        failing.unfinished = f"the minimising budget of {shrink_budget_s:g} s ran out"
    totals = {"elements": state.elements, "max_ratio": state.max_ratio, "max_ulp": state.max_ulp,
              "rounding": state.rounding}
    stats = {name: [coverage.reached[name], coverage.failed[name]] for name in coverage.reached}
    return GeneratedRun(failing is None and stopped is None, state.n, stats, totals, failing, stopped, coverage)


def save_failing(spec: str, failing: FailingProblem) -> tuple:
    """``(path, None)`` of the saved repro of ``failing`` (both reports when it
    was flaky), or ``(None, why it could not be saved)``: the report is printed
    either way."""
    text = failing.text
    if failing.flaky_text is not None:
        text = f"FLAKY: failed once:\n{failing.text}\nthen passed:\n{failing.flaky_text}"
    try:
        return save_repro(spec, failing.problem, failing.launch, text), None
    except OSError as e:
        return None, f"could not save it under {os.environ.get('NVFP4_REPRO_DIR', '.repro')}: {e}"


def _rerun_flaky(backend, failing: FailingProblem) -> None:
    """Hypothesis saw ``failing`` fail, then pass: run it once more to record
    the passing report as ``flaky_text`` (a failure again leaves it a plain failure)."""
    try:
        _, rep = run_case(backend, failing.problem, failing.launch)
    except BackendCrash:
        return
    if rep.passed:
        failing.flaky_text = rep.details()
    else:
        failing.text = rep.details()




def add_rounding(acc: collections.Counter, rep) -> None:
    """Add one report's rounding statistics to the run's totals."""
    for f in ROUNDING_FIELDS:
        acc[f] += getattr(rep, f)
    acc["signed_ulp_sum"] += rep.mean_signed_ulp * rep.n_rounding
    acc["bias_verdicts"] += rep.bias is not None
    for side, n in rep.bias_counts.items():
        acc[f"bias {side}"] += n


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
