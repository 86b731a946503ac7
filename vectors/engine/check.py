"""The check engine: golden vectors, generated problems, serving-size problems
and replays against one backend, as results; the verdict of each run from
``nvfp4_suite.vectors.engine.verdict.decide``. Front ends (the command line,
the pytest plugin) build a ``CheckConfig``, call ``run_check`` or
``run_replay``, and render what comes back.

Verdict rules, shared by every entry point: a launch a backend's capabilities
do not cover is skipped and counted with its reason, never reported as a
pass; a case none of whose launches ran is SKIPPED; a case file that cannot
be read is an ERROR of the catalog, reported by case while the other cases
still run. Nothing judged means no verdict.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem, ProblemError, ReferenceBudgetError
from nvfp4_suite.reference.compare import Interval, Report, backend_interval, describe_modified_inputs
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import lock
from nvfp4_suite.vectors.catalog.casefile import CaseFileError, load_case
from nvfp4_suite.vectors.engine import blame, interrupts
from nvfp4_suite.vectors.engine.config import CheckConfig, Subject, catalogs_for, examples_for, load_subject, owns
from nvfp4_suite.vectors.engine.coverage import Coverage
from nvfp4_suite.vectors.engine.harness import (
    BackendCrash,
    modified_inputs,
    private_copy,
    repro_folder,
    run_case,
    save_repro,
    shown,
)
from nvfp4_suite.vectors.engine.references import HOST, References
from nvfp4_suite.vectors.engine.verdict import ROUNDING_FIELDS, SetupError, Status, Verdict, decide


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
        # The simplest launch the backend takes (splits "auto" for a kernel choosing its own).
        kw = Launch().as_seen_by(backend.capabilities).kwargs(backend.capabilities)
        who.append((f"backend {shown(backend.name)}", lambda: backend(seen, **kw)))
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
    """One failing launch: its record, the report text, the report (None
    for a crash or a failed invalid-input check, which have no report) and,
    for the cause summary's diagnosis (``blame.diagnose``), what the backend
    did: its output (float32 ``[rows, H, 128]``, kept up to
    ``blame.KEEP_OUTPUT_BYTES``), ``raised NAME`` or ``returned no array``;
    None when not kept (an invalid input's refusal is judged, not its output)."""

    launch: Launch
    text: str
    report: Report | None = None
    output: np.ndarray | str | None = None


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


def _expected(backend, problem, extra, launch, cache: dict[int, tuple[Interval, str]],
              stored: bool, references: References = HOST) -> tuple[Interval, str]:
    """``(interval, against)`` for ``launch``, computed once per split count
    where ``references`` run. For a geometry the case stores a judgment of,
    that judgment is first confirmed equal to the reference's bit for bit: a
    catalog case must store it (``stored``), a replayed file is checked where
    it does; a file the reference no longer reproduces raises CaseFileError
    (the backend must not be judged against a moved target). Where a GPU's
    interval differs from the stored one, the host's is computed and decides
    (the catalog was built on a host; a GPU's float64 sums may round an end
    the other way, ``references``)."""
    key = launch.known_splits
    if key not in cache:
        iv, against = references.interval(problem, backend.geometry, key)
        name = catalog.judgment_name(backend.geometry, key)
        if name is not None and (stored or catalog.stored_interval(extra, name) is not None):
            bad = catalog.drift(problem, extra, name, iv)
            if bad and references.device is not None:
                iv, against = HOST.interval(problem, backend.geometry, key)
                bad = catalog.drift(problem, extra, name, iv)
            if bad:
                raise CaseFileError(f"stored expectations drifted from the reference: {bad}")
            against += " = stored expectations"
        cache[key] = (iv, against)
    return cache[key]


def case_launches(caps, entry: dict) -> list[Launch]:
    """The launches of manifest ``entry`` as a backend with ``caps`` receives
    them, duplicates removed, in order; an invalid-input case has one (its
    refusal, ``Launch()``). A sharded run assigns each of these to a shard."""
    if entry.get("expected_error"):
        return [Launch()]
    return list(dict.fromkeys(x.as_seen_by(caps) for x in catalog.launches(entry)))


def check_case(backend, entry: dict, splits=None, outside_domain: bool = False, root=None,
               launches: list[Launch] | None = None, references: References = HOST) -> CaseResult:
    """Run one manifest entry (of catalog ``root``, default the built-in one)'s
    launches that ``backend`` supports (``splits``: only launches with these
    split counts; the others are skipped as not selected; ``outside_domain``:
    launches skipped only for the input domain also run, their outcome kept in
    ``outside`` as information, never as a verdict; ``launches``: only these
    of ``case_launches``, a shard's share; None: all; ``references``: where the
    references run, ``nvfp4_suite.vectors.engine.references``)."""
    res = CaseResult(entry["id"], entry["name"], list(entry["flags"]), catalog._root(root) / entry["file"],
                     expected_error=entry.get("expected_error"), catalog=catalog.label(root))
    try:
        problem, _, extra = catalog.load_entry(entry, root)
    except CaseFileError as e:
        res.status, res.error = Status.ERROR, str(e)
        return res
    if launches is None:
        launches = case_launches(backend.capabilities, entry)
    return judge_case(backend, res, problem, extra, launches, splits, outside_domain, stored=True,
                      references=references)


def judge_case(backend, res: CaseResult, problem: DecodeProblem, extra: dict, launches: list[Launch],
               splits=None, outside_domain: bool = False, *, stored: bool,
               references: References = HOST) -> CaseResult:
    """Judge ``backend`` on ``problem`` at each of ``launches`` into ``res`` (a
    golden case or a replayed file; ``res.expected_error`` set: an invalid
    input, judged by its refusal): see ``check_case``; ``stored``: whether the
    file must store the judgment of the backend's geometry (``_expected``)."""
    if res.expected_error:
        good, text = check_invalid(problem, res.expected_error, backend)
        launch = Launch().as_seen_by(backend.capabilities)  # the simplest launch, as check_invalid made it
        res.ran.append(launch)
        res.features[launch] = frozenset({blame.INVALID})
        if not good:
            res.status = Status.FAIL
            res.failures.append(LaunchFailure(launch, text))
        return res
    caps = backend.capabilities
    cache: dict[int, tuple[Interval, str]] = {}
    for launch in launches:
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
            expected = _expected(backend, problem, extra, launch, cache, stored, references)
        except (CaseFileError, ReferenceBudgetError) as e:
            res.status, res.error = Status.ERROR, str(e)
            return res
        try:
            got, rep = run_case(backend, problem, launch, expected)
        except BackendCrash as e:
            res.failures.append(LaunchFailure(launch, e.details(), output=crashed(e)))
            continue
        if not rep.passed:
            res.failures.append(LaunchFailure(launch, rep.details(), rep, kept(got)))
    if res.failures:
        res.status = Status.FAIL
    elif not res.ran:
        res.status = Status.SKIP
    return res


def crashed(e: BackendCrash) -> str:
    """What a crashed launch did, as the diagnosis compares it: ``raised NAME``."""
    return f"raised {type(e.error).__name__}"


def kept(got: np.ndarray | None) -> np.ndarray | str | None:
    """A failing launch's output as kept for the diagnosis: the array up to
    ``blame.KEEP_OUTPUT_BYTES`` (else None), ``returned no array`` for None."""
    if got is None:
        return "returned no array"
    return got if got.nbytes <= blame.KEEP_OUTPUT_BYTES else None


@dataclasses.dataclass
class GoldenRun:
    """The golden check: one CaseResult per case run; ``stopped``: None, or why
    the run ended before its last case (an interruption: ``SIGINT``,
    ``SIGTERM``, or stdout's reader gone), the cases run until then kept;
    ``diagnosis``: the mutants whose outputs agree best with the failing
    launches' (``blame.diagnose_golden``), None until diagnosed."""

    cases: list[CaseResult]
    stopped: str | None = None
    diagnosis: blame.Diagnosis | None = None

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

    def text(self) -> str:
        """Each case that did not pass, one line (its status, the first failure,
        error or skip reason), then the counts: an assertion message for callers."""
        lines = []
        for c in self.cases:
            if c.status is Status.FAIL:
                lines.append(f"{c.tag} FAIL at {c.failures[0].launch.describe()}:\n{c.failures[0].text}")
            elif c.status is Status.ERROR:
                lines.append(f"{c.tag} ERROR: {c.error}")
            elif c.status is Status.SKIP:
                lines.append(f"{c.tag} skipped: {'; '.join(sorted({why for _, why in c.skipped}))}")
        lines.append(", ".join(f"{s.value} {self.count(s)}" for s in Status) + (
            f"; stopped: {self.stopped}" if self.stopped else ""))
        return "\n".join(lines)


def check_golden(backend, cases=None, progress=None, stop_at_first: bool = False, splits=None,
                 outside_domain: bool = False, *, root=None, notice=None,
                 shard: tuple[int, int] | None = None, references: References = HOST) -> GoldenRun:
    """Every case of catalog ``root`` (default: the built-in one; or those whose
    id is in ``cases``) against ``backend`` (``splits``: only launches with
    these split counts; ``outside_domain``: see ``check_case``). Holds the
    catalog's shared lock throughout (``notice``: told if it waits), so an
    ``add`` or ``regen`` waits for it and it never reads a catalog half
    installed. Raises CaseFileError when the manifest itself cannot be read.
    An ``interrupts.Interrupted`` (a signal while the CLI's handlers are
    installed, or stdout's reader going away, checked between cases) ends the
    run early with the cases run so far and ``stopped`` naming why; a plain
    KeyboardInterrupt propagates.

    ``shard`` ``(K, N)``: only the launches of share K (``sharded_launches``);
    a case none of whose launches is in it is not run, one with some of
    them is run at those and reported with them."""
    with lock.locked(catalog._root(root), exclusive=False, what="check", notice=notice):
        m = catalog.load_manifest(path=catalog._root(root) / "manifest.json")
        chosen = [c for c in m["cases"] if cases is None or c["id"] in cases]
        # A case none of whose launches is this shard's is not run (nor counted in the progress).
        todo = [(c, mine) for c, mine in zip(chosen, sharded_launches(backend.capabilities, chosen, shard))
                if mine is None or mine]
        run = GoldenRun([])
        try:
            for i, (c, mine) in enumerate(todo):
                interrupts.stop_if_asked()
                if progress:
                    progress(f"  golden: [{i + 1}/{len(todo)}] {c['name']}")
                run.cases.append(check_case(backend, c, splits, outside_domain, root, launches=mine,
                                            references=references))
                if stop_at_first and run.cases[-1].status == Status.FAIL:
                    break
        except interrupts.Interrupted as e:
            run.stopped = e.reason
    return run


def sharded_launches(caps, entries: list[dict], shard: tuple[int, int] | None) -> list[list[Launch] | None]:
    """Per manifest entry of ``entries`` (a catalog's cases, in order), the
    launches (``case_launches``) shard ``(K, N)`` judges: those whose place in
    the catalog's list of every case's launches, in order, ``owns`` assigns
    to it (round robin, so each shard gets about 1/N of the work and the
    shares are disjoint); ``None`` for every entry when ``shard`` is None
    (all launches). The list depends only on the manifest and the backend's
    capabilities, so every shard computes the same one."""
    if shard is None:
        return [None] * len(entries)
    out: list[list[Launch] | None] = []
    at = 0
    for entry in entries:
        launches = case_launches(caps, entry)
        out.append([x for j, x in enumerate(launches, at) if owns(shard, j)])
        at += len(launches)
    return out


def observe_outside(backend, problem, launch: Launch) -> str:
    """What ``backend`` does on ``problem`` outside its declared input domain, in
    words (crash, NaN, zeros, garbage, or agreeing with the exact reference);
    information only, never a verdict. The launch itself must be supported."""
    from nvfp4_suite.vectors.engine.harness import OutputTypeError, _call  # its guarded call, without judgement

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
    # What the backend did (``LaunchFailure.output``) and, once minimised, the
    # mutants whose outputs agree with it (``blame.diagnose``; None: not diagnosed).
    output: np.ndarray | str | None = None
    diagnosis: blame.Diagnosis | None = None


@dataclasses.dataclass
class GeneratedRun:
    """The generated check: ``n`` problems run, ``stats`` (coverage condition ->
    [problems, failures]), ``totals`` (elements, largest ratios, rounding
    counts), ``failing``: None or the ``FailingProblem``; ``stopped``: None, or
    why the run ended early (``SIGINT``, ``SIGTERM``, stdout's reader gone);
    ``coverage``: the run's ``nvfp4_suite.vectors.engine.coverage.Coverage``;
    ``judged``: for a sharded run, a ``Judged`` per problem counted, in draw
    order (what ``merge`` folds into the unsharded run's figures); None unsharded."""

    ok: bool
    n: int
    stats: dict
    totals: dict
    failing: FailingProblem | None = None
    stopped: str | None = None
    coverage: Coverage | None = None
    judged: list[Judged] | None = None


@dataclasses.dataclass(frozen=True)
class Judged:
    """One generated problem a sharded run counted: its ``index`` in the
    unsharded run's draw order (from 0), output ``elements`` compared, its
    largest bound ratio and ulp distance (None: a crash, no report), the
    coverage ``conditions`` it reached, and whether it ``failed``."""

    index: int
    elements: int
    max_ratio: float | None
    max_ulp: float | None
    conditions: tuple[str, ...]
    failed: bool


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
                    shrink_budget_s: float | None = None, shard: tuple[int, int] | None = None,
                    references: References = HOST) -> GeneratedRun:
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

    shard: ``(K, N)``: every problem of the unsharded run is drawn, but only
    those whose draw index ``config.owns`` gives to share K are judged
    (``run_generated``); a failure is minimised here, in the shard that found
    it; ``judged`` records each problem counted. None: all are judged.
    references: where the references run (``nvfp4_suite.vectors.engine.references``).
    """
    # Flaky: what every hypothesis in the range raises for a failure that does not
    # repeat (6.108 and later raise its subclass FlakyFailure).
    from hypothesis.errors import Flaky

    from nvfp4_suite.vectors.engine.strategies import run_generated

    coverage = Coverage(backend.capabilities, splits_choice)
    state = _GeneratedState()
    judged: list[Judged] | None = None if shard is None else []
    # The problems this run judges when none fails: a shard's are draws K-1, K-1+N, ... below examples.
    share = examples if shard is None else len(range(shard[0] - 1, examples, shard[1]))

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
            got, rep = run_case(backend, problem, launch, references=references)
            ok, text, did = rep.passed, rep.details(), kept(got)
        except BackendCrash as e:
            ok, text, did = False, e.details(), crashed(e)
        if state.failing is None:  # still generating: minimising tries are not counted as problems
            # run_generated judges a shard's draws K-1, K-1+N, ...: the n-th counted is draw n*N + K-1.
            index = state.n if shard is None else state.n * shard[1] + shard[0] - 1
            state.n += 1
            if rep is not None:
                state.elements += rep.n_elements
                state.max_ratio = max(state.max_ratio, rep.max_bound_ratio)
                state.max_ulp = max(state.max_ulp, rep.max_ulp)
                add_rounding(state.rounding, rep)
            reached = coverage.add(problem, launch, ok)
            if judged is not None:
                judged.append(Judged(index, 0 if rep is None else int(rep.n_elements),
                                     None if rep is None else float(rep.max_bound_ratio),
                                     None if rep is None else float(rep.max_ulp), tuple(sorted(reached)), not ok))
            if progress and (state.n % progress_every == 0 or state.n == share):
                progress(f"  generated: {state.n}/{share} problems checked")
        else:
            state.tries += 1
        if not ok:
            # Recorded before anything is printed: an interruption from here on keeps it.
            best = state.failing
            if best is None or problem_size(problem) <= problem_size(best.problem):
                state.failing = FailingProblem(problem, launch, text, output=did)
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
        run_generated(backend.capabilities, examples, seed, prop, splits_choice, shrink, shard=shard)
        interrupts.stop_if_asked()  # a signal whose exception hypothesis caught on the way
    except AssertionError:
        pass
    except Flaky:
        if state.failing is None:
            # No failure of the backend was recorded: what failed once was the
            # suite itself (an exception other than a verdict), which the
            # traceback must show.
            raise
        _rerun_flaky(backend, state.failing, references)
    except interrupts.Interrupted as e:
        stopped = e.reason
    except _OutOfTime:
        cut = True
    failing = state.failing
    if failing is not None and stopped:
        failing.unfinished = f"the run stopped ({stopped})"
    elif failing is not None and cut:
        failing.unfinished = f"the minimising budget of {shrink_budget_s:g} s ran out"
    if failing is not None and failing.flaky_text is None and failing.output is not None and not stopped:
        try:
            failing.diagnosis = diagnose_failing(backend, failing)
        except interrupts.Interrupted as e:
            stopped = e.reason
    totals = {"elements": state.elements, "max_ratio": state.max_ratio, "max_ulp": state.max_ulp,
              "rounding": state.rounding}
    stats = {name: [coverage.reached[name], coverage.failed[name]] for name in coverage.reached}
    return GeneratedRun(failing is None and stopped is None, state.n, stats, totals, failing, stopped, coverage,
                        judged)


# Split counts the minimised problem is also run at: two mutants can equal a tiny
# problem's one failing launch alike (a dropped odd block and an unwritten empty
# split did, on a one-block row), and another split count tells them apart.
OTHER_SPLITS = (1, 2, 3)


# Golden cases per tied class the backend also runs when the minimised
# problem leaves two mutants tied (NaN from a stray read and NaN from an
# overflowing exp look alike on one tiny problem; their own classes' cases do not).
TIE_CASES = 2


def diagnose_failing(backend, failing: FailingProblem) -> blame.Diagnosis:
    """The golden run's matching (``blame.diagnose``) on ``failing``'s one
    launch (its ``output`` must be kept); the backend's outputs on the same
    problem at the other ``OTHER_SPLITS`` it takes break ties between mutants
    that equal it there alike, and where a tie remains, its outputs on the
    first ``TIE_CASES`` golden cases of each tied mutant's class."""
    if failing.output is None:
        raise ValueError(f"failing problem at launch {failing.launch.describe()}: no output kept to diagnose")
    caps = backend.capabilities
    p = failing.problem
    observed = [blame.Observed(-1, (), failing.launch, p, failing.output)]
    others = []
    for n in OTHER_SPLITS:
        launch = Launch(splits=n)
        if launch == failing.launch or caps.refuses(p, launch):
            continue
        did = _did(backend, p, launch)
        if did is not None:
            others.append(blame.Observed(-1, (), launch, p, did))
    diagnosis = blame.diagnose(observed, backend.geometry, passing=others)
    best = diagnosis.best
    if best is None or not best.tied:
        return diagnosis
    classes = {best.candidate.bug, *(c.bug for c in best.tied)}
    return blame.diagnose(observed, backend.geometry, passing=others + _class_launches(backend, classes))


def _did(backend, problem: DecodeProblem, launch: Launch) -> np.ndarray | str | None:
    """What ``backend`` does on ``problem`` at ``launch``, as the diagnosis keeps it
    (``kept``: its output, or None when too large; ``crashed``: ``raised NAME``)."""
    try:
        return kept(run_case(backend, problem, launch)[0])
    except BackendCrash as e:
        return crashed(e)


def _class_launches(backend, classes: set[str]) -> list[blame.Observed]:
    """What ``backend`` does on the first launch it takes of the first
    ``TIE_CASES`` valid golden cases (built-in catalog) of each bug class in
    ``classes``: its output, ``raised NAME`` or ``returned no array``."""
    caps = backend.capabilities
    out: list[blame.Observed] = []
    taken = dict.fromkeys(classes, 0)
    for entry in catalog.load_manifest()["cases"]:
        mine = [f for f in entry["flags"] if taken.get(f, TIE_CASES) < TIE_CASES]
        if not mine or entry.get("expected_error"):
            continue
        problem = load_case(catalog.case_file(entry))[0]
        launch = next((x for x in case_launches(caps, entry) if not caps.refuses(problem, x)), None)
        if launch is None:
            continue
        did = _did(backend, problem, launch)
        if did is not None:
            out.append(blame.Observed(entry["id"], tuple(entry["flags"]), launch, problem, did))
            for f in mine:
                taken[f] += 1
    return out


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
        return None, f"could not save it under {repro_folder()}: {e}"


def _rerun_flaky(backend, failing: FailingProblem, references: References) -> None:
    """Hypothesis saw ``failing`` fail, then pass: run it once more (its references
    where the check's ran) to record the passing report as ``flaky_text`` (a
    failure again leaves it a plain failure)."""
    try:
        _, rep = run_case(backend, failing.problem, failing.launch, references=references)
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


# --- a whole run --------------------------------------------------------------

@dataclasses.dataclass
class Hooks:
    """How a run reports while it goes: ``progress`` (one line at a time: a
    bar on a terminal), ``notice`` (a line that must be seen, e.g. waiting
    for a catalog's lock), ``live`` (progress goes to a terminal, so it may
    be updated every second) and ``part`` (called with the run and the name of
    each part as it completes: ``backend``, ``catalog``, ``generated``,
    ``serving``, ``case``), so a front end can print as the run goes."""

    progress: Callable[[str], None] | None = None
    notice: Callable[[str], None] | None = None
    live: bool = False
    part: Callable[[Any, str], None] | None = None

    def done(self, run, name: str) -> None:
        """Tell ``part`` that ``name`` of ``run`` is complete."""
        if self.part is not None:
            self.part(run, name)


@dataclasses.dataclass
class CatalogRun:
    """One catalog of a check: its folder, ``label`` (None: the built-in
    one), how it was chosen (``why``), and its ``GoldenRun`` or the ``error``
    that made it unreadable."""

    root: Path
    label: str | None
    why: str
    golden: GoldenRun | None = None
    error: str | None = None


@dataclasses.dataclass
class CheckRun:
    """A check as it goes and as it ended: its ``config``, the ``subject``
    judged, each catalog's run, the generated part (and where its failing
    problem was saved, or why it was not), the serving-size part, the
    ``verdict`` (None until decided) and its seconds. A front end makes one
    and hands it to ``run_check``, so that what was done before an error is
    still there to report."""

    config: CheckConfig
    subject: Subject | None = None
    catalogs: list[CatalogRun] = dataclasses.field(default_factory=list)
    generated: GeneratedRun | None = None
    saved: Path | None = None
    save_error: str | None = None
    serving: Any = None  # nvfp4_suite.vectors.engine.serving.ServingRun
    verdict: Verdict | None = None
    seconds: float | None = None

    @property
    def stopped(self) -> str | None:
        """Why the run ended early, or None."""
        for g in [c.golden for c in self.catalogs] + [self.generated, self.serving]:
            if g is not None and g.stopped:
                return g.stopped
        return None

    def tally(self) -> dict:
        """The counts ``decide`` takes."""
        goldens = [c.golden for c in self.catalogs if c.golden is not None]
        gen, srv = self.generated, self.serving
        failing = gen is not None and gen.failing is not None
        return {"judged": sum(g.judged for g in goldens) + (gen.n if gen else 0) + (srv.n if srv else 0),
                "failed": sum(g.count(Status.FAIL) for g in goldens) + failing + (srv.failed if srv else 0),
                "flaky": int(failing and gen.failing.flaky_text is not None),  # type: ignore[union-attr]
                "errors": sum(g.count(Status.ERROR) for g in goldens) + sum(c.error is not None
                                                                           for c in self.catalogs),
                "stopped": self.stopped}

    def blame_lines(self) -> list[str]:
        """The cause summary of each catalog's golden run with failures (as its
        report prints it: ``blame.summary_lines``), a project catalog's under its label."""
        out = []
        for c in self.catalogs:
            lines = [] if c.golden is None else blame.summary_lines(c.golden.outcomes(), c.golden.diagnosis)
            out += ([f"catalog {c.label}:"] if lines and c.label is not None else []) + lines
        return out


def run_check(run: CheckRun, hooks: Hooks | None = None) -> Verdict:
    """Run the check ``run.config`` describes into ``run`` and decide its
    verdict (``verdict.decide``). Raises SetupError (NO VERDICT) before
    anything is judged for a configuration or backend that cannot be
    checked, CaseFileError for an unreadable built-in catalog; an
    interruption between cases or problems ends the run with what it found."""
    hooks = hooks or Hooks()
    config = run.config
    why = config.problems()
    if why:
        raise SetupError(why)
    if config.shape == "small" and config.golden and not catalog.exists():
        raise SetupError(f"no golden vectors: {catalog.MANIFEST} is missing (reinstall the suite, or pass "
                         "--no-golden to check generated problems only)")
    run.subject = subject = load_subject(config)
    hooks.done(run, "backend")
    t0 = time.time()
    examples = examples_for(config, subject)
    if config.shape == "serving":
        from nvfp4_suite.vectors.engine.serving import check_serving

        run.serving = check_serving(subject, examples, config.seed, splits=config.splits, progress=hooks.progress)
        hooks.done(run, "serving")
    for root, why in catalogs_for(config):
        cat = CatalogRun(root, catalog.label(root), why)
        run.catalogs.append(cat)
        try:
            if cat.label is not None and not catalog.exists(root):
                raise CaseFileError(f"{root / 'manifest.json'} is missing: not a catalog "
                                    f"(`add --catalog {root}` creates one)")
            cat.golden = check_golden(subject, progress=hooks.progress, splits=config.splits,
                                      outside_domain=config.outside_domain, root=root, notice=hooks.notice,
                                      shard=config.shard, references=subject.references)
            if not cat.golden.stopped:
                try:
                    cat.golden.diagnosis = blame.diagnose_golden(cat.golden, subject.geometry, hooks.progress)
                except interrupts.Interrupted as e:
                    cat.golden.stopped = e.reason
        except CaseFileError as e:
            if cat.label is None:
                raise  # the built-in catalog: nothing to judge against
            # Another catalog's damage is its own ERROR: the other catalogs' verdicts still stand.
            cat.error = str(e)
        hooks.done(run, "catalog")
        if run.stopped:
            break
    if config.shape == "small" and examples > 0 and run.stopped is None:
        run.generated = check_generated(
            subject, examples, config.seed, config.splits, progress=hooks.progress,
            progress_every=1 if hooks.live else 10, shrink_report_s=1.0 if hooks.live else 10.0,
            shrink=config.minimise, shrink_budget_s=subject.shrink_budget_s, shard=config.shard,
            references=subject.references)
        if run.generated.failing is not None:
            run.saved, run.save_error = save_failing(subject.spec, run.generated.failing)
        hooks.done(run, "generated")
    run.seconds = time.time() - t0
    run.verdict = decide(**run.tally())
    return run.verdict


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """One replay: the case ``file``, the ``backend`` spec (None: the one the
    file records, if it is a registered name), ``splits``/``xcds``/``order``
    overriding the file's launches, ``arithmetic``, isolation and
    ``references`` as for a check, ``json``."""

    file: str
    backend: str | None = None
    splits: int | None = None
    xcds: int | None = None
    order: str | None = None
    arithmetic: str | None = None
    isolate: bool = False
    timeout: float | None = None
    json: str | None = None
    references: str = "auto"


@dataclasses.dataclass
class ReplayRun:
    """A replay as it goes: its ``config``, the ``subject``, the file's case
    judged as a one-case catalog (``case``), the diagnosis of its failing
    launches (``blame.diagnose_golden``; None when none failed), the verdict."""

    config: ReplayConfig
    subject: Subject | None = None
    problem: DecodeProblem | None = None
    case: CaseResult | None = None
    diagnosis: blame.Diagnosis | None = None
    verdict: Verdict | None = None
    seconds: float | None = None

    def blame_lines(self) -> list[str]:
        """The cause lines of the replayed case's failures, as a golden run's (empty when none failed)."""
        return [] if self.diagnosis is None else self.diagnosis.lines()


def run_replay(run: ReplayRun, hooks: Hooks | None = None) -> Verdict:
    """Replay ``run.config.file``: the engine's check of that one case (its
    recorded launches, or those the config overrides). The file is data: its
    problem is validated before any backend is loaded (an invalid problem
    that names no expected error is exit 2), and the backend it records is
    used only when it is a registered name. Stored expectations, where the
    file holds them, are first confirmed against the reference."""
    from nvfp4_suite import kernels

    hooks = hooks or Hooks()
    config = run.config
    problem, meta, extra = load_case(config.file)
    run.problem = problem
    expected_error = meta.get("expected_error")
    if not expected_error:
        try:
            problem.validate()
        except Exception as e:  # noqa: BLE001 - whatever the validator raises, nothing can be judged
            raise SetupError(f"{config.file}: its problem is invalid ({type(e).__name__}: {e}) and the file names "
                             "no expected error; no backend was run") from None
    spec = config.backend
    if spec is None:
        spec = meta.get("backend")
        if spec is None:
            raise SetupError(f"{config.file} records no backend: give --backend")
        if spec not in kernels.registered():
            raise SetupError(f"{config.file} records backend {spec!r}, which is not a registered name "
                             f"({', '.join(kernels.registered())}); a case file never chooses code to import: "
                             "give --backend explicitly (e.g. the one the printed replay command names)")
    check_config = CheckConfig(backend=spec, arithmetic=config.arithmetic, isolate=config.isolate,
                               timeout=config.timeout, references=config.references)
    if check_config.problems():
        raise SetupError(check_config.problems())
    run.subject = subject = load_subject(check_config)
    hooks.done(run, "backend")
    t0 = time.time()
    res = CaseResult(-1, Path(config.file).name, [], Path(config.file), expected_error=expected_error,
                     catalog="replay")
    launches = replay_launches(meta, subject.capabilities, config.splits, config.xcds, config.order)
    run.case = judge_case(subject, res, problem, extra, launches, stored=False, references=subject.references)
    if res.status is Status.ERROR:
        raise CaseFileError(f"{config.file}: {res.error}")
    if res.failures:
        # The same matching as a golden run's: which registered mutant's outputs equal the kernel's here.
        run.diagnosis = blame.diagnose_golden(GoldenRun([res]), subject.geometry, hooks.progress)
    hooks.done(run, "case")
    run.seconds = time.time() - t0
    run.verdict = decide(judged=int(bool(res.ran)), failed=int(res.status is Status.FAIL))
    return run.verdict
