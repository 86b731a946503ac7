"""Blame the cause of a golden run's failures, not the cases' own targets.

A golden case carries the flags of the bug classes it was built for, but a
kernel that fails 33 cases may have one cause that none of those flags names
(a slot walk that assumes compacted slot lists fails every case whose lists
hold a -1 or a future id before a valid one, whatever the case targets).
This module looks at what the failing launches share:

- ``launch_features``: the facts of one (problem, launch) that kernels differ
  on (slot-list form, split count, layout, q_len, heads, placement...);
- ``shared_causes``: the features every failing launch has and some passing
  launch lacks, most telling first;
- ``class_shares``: each bug class ranked by the share of its judged cases
  that failed, not by raw count (a class with 2 of 2 failing says more than
  one with 5 of 30);
- ``diagnose``: every registered numpy mutant of the kernel's arithmetic run
  on the failing launches, its outputs compared with the kernel's element by
  element; the mutants that equal them bit for bit named, best first (see the
  section "diagnosis by outputs" for why outputs, and how it stays cheap).

``summary_lines`` renders them for the run report, above the per-class
lines: the mutant first, then the shared features, then the classes.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.problem import outside_scale_domain, outside_slot_domain
from nvfp4_suite.vectors.engine import declared

# The one feature of an invalid-input case's launch (what it asks of a kernel is a refusal).
INVALID = "invalid-input"

# Feature name -> the phrase a report says of a launch that has it.
FEATURES = {
    INVALID: "an invalid input that the host side must refuse with its ProblemError",
    "not-compacted": "a slot list outside the compacted domain (reference/CONTRACT.md 3.1)",
    "negative-scale": "a negative E4M3 block scale that a row reads (outside scale_sign=non-negative)",
    "invalid-before-valid": "a -1 or future slot before a valid slot in some slot list",
    "future-slot": "a future block id in some slot list",
    "minus-one-slot": "a -1 slot in some slot list",
    "row-without-work": "a row with no valid slot (or a padding row)",
    "splits>1": "more than one split",
    "xcds": "an XCD placement (xcds > 0)",
    "planar": "the planar page layout",
    "token_rows": "the token_rows page layout",
    "q_len>1": "q_len > 1",
    "hkv>1": "more than one KV head",
    "topk>32": "TOPK > 32",
    "odd-valid-count": "a slot list with an odd number of valid blocks",
    "partial-last-block": "a row whose own block is cut by the causal limit (position not at a block's end)",
}


def launch_features(problem: DecodeProblem, launch: Launch) -> frozenset[str]:
    """The ``FEATURES`` names that hold for ``launch`` on ``problem`` (a valid problem)."""
    valid = problem.valid_slots                       # [Hkv, rows, TOPK]
    ids = problem.topk
    out = set()
    if outside_slot_domain(problem, "compacted") is not None:
        out.add("not-compacted")
    if outside_scale_domain(problem, "non-negative") is not None:
        out.add("negative-scale")
    # An invalid slot before a valid one: the last valid slot lies after the first invalid one.
    topk = problem.TOPK
    idx = np.arange(topk)[None, None, :]
    last_valid = np.where(valid, idx, -1).max(axis=2)
    first_invalid = np.where(~valid, idx, topk).min(axis=2)
    if (first_invalid < last_valid).any():
        out.add("invalid-before-valid")
    sb = problem.self_blocks[None, :, None]
    if ((ids > sb) & (sb >= 0)).any():
        out.add("future-slot")
    if (ids == -1).any():
        out.add("minus-one-slot")
    counts = valid.sum(axis=2)
    if (counts == 0).any():
        out.add("row-without-work")
    if (counts % 2 == 1).any():
        out.add("odd-valid-count")
    pos = problem.positions
    if ((pos >= 0) & (pos % 128 != 127)).any():
        out.add("partial-last-block")
    if isinstance(launch.splits, int) and launch.splits > 1:
        out.add("splits>1")
    if launch.xcds:
        out.add("xcds")
    out.add(problem.layout)
    if problem.q_len > 1:
        out.add("q_len>1")
    if problem.num_kv_heads > 1:
        out.add("hkv>1")
    if topk > 32:
        out.add("topk>32")
    return frozenset(out)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One judged launch of one golden case: its case id and flags, its
    launch, its ``features`` (``launch_features``) and whether it failed."""

    case_id: int
    flags: tuple[str, ...]
    launch: Launch
    features: frozenset[str]
    failed: bool


@dataclasses.dataclass(frozen=True)
class Cause:
    """A feature every failing launch has: how many passing launches have it too."""

    feature: str
    failing: int
    passing_with: int
    passing: int

    def phrase(self) -> str:
        """``every failing launch (33) has ...; of the 80 passing launches, 3 have it``."""
        return (f"every failing launch ({self.failing}) has {FEATURES[self.feature]}; "
                f"of the {self.passing} passing launches, {self.passing_with} have it")


def shared_causes(outcomes: list[Outcome]) -> list[Cause]:
    """Features held by every failing launch and missing from at least one
    passing launch, ordered by how few passing launches hold them (the most
    telling first; ties in ``FEATURES`` order). Empty when nothing failed or
    nothing passed."""
    failing = [o for o in outcomes if o.failed]
    passing = [o for o in outcomes if not o.failed]
    if not failing or not passing:
        return []
    common = frozenset.intersection(*(o.features for o in failing))
    causes = [Cause(f, len(failing), sum(f in o.features for o in passing), len(passing))
              for f in common]
    causes = [c for c in causes if c.passing_with < c.passing]
    # Ties in the order of FEATURES: the input-domain facts before the launch's.
    order = list(FEATURES)
    return sorted(causes, key=lambda c: (c.passing_with / c.passing, order.index(c.feature)))


@dataclasses.dataclass(frozen=True)
class ClassShare:
    """A bug class's judged cases and how many of them failed."""

    flag: str
    failed: int
    judged: int

    @property
    def share(self) -> float:
        """Failed cases over judged cases."""
        return self.failed / self.judged


def class_shares(outcomes: list[Outcome]) -> list[ClassShare]:
    """Each flag of a failing case, ranked by the share of its judged cases
    that failed (then by count): a case fails when any of its launches does."""
    cases: dict[int, tuple[tuple[str, ...], bool]] = {}
    for o in outcomes:
        flags, failed = cases.get(o.case_id, (o.flags, False))
        cases[o.case_id] = (flags, failed or o.failed)
    failing_flags = sorted({f for fl, failed in cases.values() if failed for f in fl})
    shares = []
    for f in failing_flags:
        mine = [failed for fl, failed in cases.values() if f in fl]
        shares.append(ClassShare(f, sum(mine), len(mine)))
    return sorted(shares, key=lambda s: (-s.share, -s.failed, s.flag))


# --- diagnosis by outputs -------------------------------------------------------
#
# A failing run's likely bug is named by what the kernel returned, not by which
# launches failed: two bugs that fail the same launches (a shifted scale group
# and V scales read without the swizzle) return different outputs, and a
# record of failure patterns goes stale with every change of the catalog or a
# mutant, while the mutants themselves run wherever the suite is installed.

# A failing launch's output is kept for the diagnosis up to this many bytes (a
# golden case's is at most 192 KiB; a serving-size problem's, which is not
# diagnosed, may be far larger): the memory a run keeps stays bounded by its catalog.
KEEP_OUTPUT_BYTES = 1 << 20

# The first stage runs every candidate on this many failing launches (one per
# case while there are cases to spread over): about 30 mutants times 150
# launches would take minutes, 8 take seconds and already separate the few
# mutants worth running on every failing launch.
SAMPLE = 8
# Mutants the first stage keeps for the second (with every one tied with the best).
SURVIVORS = 3
# Causes named at most: each greedy round names the mutant that explains most
# of the failing launches the causes named so far leave unexplained.
ROUNDS = 3

# What a kernel did on an invalid input it failed to refuse, and what a mutant
# that refuses it does: outputs of an invalid input are never compared.
NOT_REFUSED = "did not raise the expected ProblemError"
REFUSED = "raised the expected ProblemError"
# A passing launch's ``Observed.did``: the kernel's output there is not kept.
PASSED = "passed"


@dataclasses.dataclass(frozen=True)
class Observed:
    """One failing launch as the diagnosis compares it.

    case: the case's id (-1 for a generated problem); flags: the case's bug
    classes; launch: as the kernel received it; problem: the problem, or the
    case file that holds it (loaded only when a mutant runs on it); did: what
    the kernel did, its output (float32 ``[rows, H, 128]``, as
    ``harness.run_case`` returns it) or a phrase (``raised ValueError``,
    ``returned no array``, ``NOT_REFUSED``); expected_error: the ProblemError
    an invalid input must raise (None: a valid problem)."""

    case: int
    flags: tuple[str, ...]
    launch: Launch
    problem: DecodeProblem | Path
    did: np.ndarray | str
    expected_error: str | None = None


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A registered mutant the diagnosis runs: its backend ``spec``, bug class
    and one-line description of its bug."""

    spec: str
    bug: str
    what: str

    def phrase(self) -> str:
        """``mutant v-scale-swizzle (V scales read linearly instead of swizzled; numpy_v_scale_linear)``."""
        return f"mutant {self.bug} ({self.what}; {self.spec.rpartition(':')[2]})"


def candidates(geometry) -> list[Candidate]:
    """The registered numpy mutants judged in arithmetic ``geometry`` (None:
    the exact class), in registry order. Only these compare meaningfully with a
    kernel judged there: a seed-geometry mutant's rounding is the seed's, so
    bit-for-bit agreement with an exact-class kernel would be chance, and the
    other way round. The Triton and FlyDSL mutants are left out: they need a
    GPU or the simulator (minutes), and each has a numpy twin of its class."""
    from nvfp4_suite import kernels
    from nvfp4_suite.vectors.catalog import bugs

    out = []
    for m in bugs.mutants("numpy"):
        if kernels.get_backend(m.spec).geometry == geometry:
            out.append(Candidate(m.spec, m.bug, _what(m.spec)))
    return out


def _what(spec: str) -> str:
    """A numpy mutant's own description (``kernels.mutants.BUGS`` or
    ``ROUNDING_BUGS``), else its bug class's (the placement mutants)."""
    from nvfp4_suite.kernels import mutants
    from nvfp4_suite.vectors.catalog import bugs

    attr = spec.rpartition(":")[2]
    for prefix, table in (("numpy_", mutants.BUGS), ("seed_", mutants.ROUNDING_BUGS)):
        if attr.startswith(prefix) and attr.removeprefix(prefix) in table:
            return table[attr.removeprefix(prefix)]
    return bugs.classes()[{m.spec: m.bug for m in bugs.MUTANTS}[spec]].description


def correct_kernel(geometry):
    """The correct implementation of arithmetic ``geometry`` the mutants were
    made from (``NumpyKernel()`` for the exact class, ``SeedKernel()`` for the
    seed's), or None: the yardstick a closest-but-unequal mutant must beat."""
    from nvfp4_suite.kernels import mutants
    from nvfp4_suite.reference import SEED_GEOMETRY

    if geometry is None:
        return mutants.NumpyKernel()
    return mutants.SeedKernel() if geometry == SEED_GEOMETRY else None


def agreement(kernel: np.ndarray | str, mutant: np.ndarray | str | None) -> tuple[bool, float]:
    """``(bit for bit, share of equal elements)`` of two outcomes of one launch:
    outputs (float32 arrays) agree element by element on their bits, any NaN
    equal to any NaN (a NaN's payload is no kernel's contract); a phrase
    (``raised ValueError``) agrees only with the same phrase; outputs of
    different shapes, or an output and a phrase, agree nowhere."""
    if isinstance(kernel, np.ndarray) and isinstance(mutant, np.ndarray):
        if kernel.shape != mutant.shape:
            return False, 0.0
        eq = (kernel.view(np.uint32) == mutant.view(np.uint32)) | (np.isnan(kernel) & np.isnan(mutant))
        return bool(eq.all()), float(eq.mean()) if eq.size else 1.0
    same = isinstance(kernel, str) and isinstance(mutant, str) and kernel == mutant
    return same, float(same)


def mutant_did(backend, problem: DecodeProblem, o: Observed) -> np.ndarray | str | None:
    """What ``backend`` (a mutant) does on ``o``'s launch of ``problem``, as
    ``Observed.did`` says it; None when its capabilities refuse the launch. A
    mutant without placement runs the launch without it: a placement moves
    work between workgroups, never the arithmetic of a correct kernel; a
    kernel's own split count (``auto``) is run at ``Launch.known_splits``, as
    it is judged."""
    from nvfp4_suite.vectors.engine.harness import BackendCrash, OutputTypeError, _call

    caps = backend.capabilities
    if o.expected_error:
        # As check.check_invalid judges a backend: the simplest launch, its error's class by name.
        try:
            _call(backend, problem, Launch().as_seen_by(caps))
        except BackendCrash as e:
            return REFUSED if type(e.error).__name__ == o.expected_error else NOT_REFUSED
        return NOT_REFUSED
    launch = Launch(splits=o.launch.known_splits, xcds=o.launch.xcds)
    if caps.refuses(problem, launch) and launch.xcds:
        launch = Launch(splits=launch.splits)
    if caps.refuses(problem, launch):
        return None
    try:
        got, _ = _call(backend, problem, launch)
    except BackendCrash as e:
        return f"raised {type(e.error).__name__}"
    return "returned no array" if isinstance(got, OutputTypeError) else got


@dataclasses.dataclass(frozen=True)
class Match:
    """A mutant named as a cause: the failing launches (indices into the
    diagnosed list) its outputs equal bit for bit, of ``of`` diagnosed, and
    the ids of their cases; the other survivors that equal exactly as many,
    as closely (``tied``)."""

    candidate: Candidate
    explained: frozenset[int]
    of: int
    cases: frozenset[int] = frozenset()
    tied: tuple[Candidate, ...] = ()

    def line(self) -> str:
        """``  cause: outputs equal those of mutant ... on 146 of 146 failing launches, bit for bit``."""
        tie = "; tied with " + ", ".join(c.phrase() for c in self.tied) if self.tied else ""
        return (f"  cause: outputs equal those of {self.candidate.phrase()} on {len(self.explained)} of "
                f"{self.of} failing launches, bit for bit{tie}")


@dataclasses.dataclass
class Diagnosis:
    """The mutants whose outputs agree best with a failing kernel's.

    matches: the causes named, best first (a greedy cover of the failing
    launches); of: failing launches diagnosed; unexplained: those no match
    equals; closest: ``(mutant, its mean share of equal elements, the correct
    implementation's)`` on the unexplained launches sampled, when one comes
    closer than the correct implementation; unkept: failing launches whose
    output was not kept (``KEEP_OUTPUT_BYTES``); no_candidates: why no mutant
    could be compared, or None; fits: the other exact-class declarations
    whose intervals hold every failing launch's output
    (``declared.fitting_declarations``), with ``declared`` the arithmetic the
    kernel was judged in."""

    matches: list[Match]
    of: int
    unexplained: int
    closest: tuple[Candidate, float, float] | None = None
    unkept: int = 0
    no_candidates: str | None = None
    fits: tuple[str, ...] = ()
    declared: Any = None

    @property
    def best(self) -> Match | None:
        """The first cause named, or None."""
        return self.matches[0] if self.matches else None

    def lines(self) -> list[str]:
        """The cause lines of a report, best first: one per mutant named, then
        what no mutant explains."""
        # A declaration the outputs fit comes first unless a mutant equals them bit for bit.
        fit = declared.line(self.declared, list(self.fits), self.of)
        first = [] if fit is None or self.matches else [fit]
        if self.no_candidates:
            return first + [f"  cause: {self.no_candidates}"]
        out = first + [m.line() for m in self.matches] + ([fit] if fit is not None and self.matches else [])
        if self.unexplained:
            rest = f"the other {self.unexplained} of" if self.matches else "any of the"
            line = f"  cause: no registered mutant's outputs equal the kernel's on {rest} {self.of} failing launches"
            if self.closest is not None:
                c, share, base = self.closest
                line += (f"; closest: {c.phrase()}, {share:.1%} of elements equal (the correct "
                         f"implementation: {base:.1%})")
            out.append(line)
        if self.unkept:
            out.append(f"  cause: {self.unkept} failing launches kept no output to compare (larger than "
                       f"{KEEP_OUTPUT_BYTES} bytes)")
        return out


def _spread(indices: list[int], observed: list[Observed], n: int) -> list[int]:
    """Up to ``n`` of ``indices``: one launch per case, evenly over the cases,
    then further launches while there are fewer cases than ``n``."""
    firsts: dict[int, int] = {}
    for i in indices:
        firsts.setdefault(observed[i].case, i)
    heads = list(firsts.values())
    if len(heads) >= n:
        return [heads[k * len(heads) // n] for k in range(n)]
    taken = set(heads)
    return heads + [i for i in indices if i not in taken][: n - len(heads)]


@dataclasses.dataclass
class _Score:
    """A mutant's agreement over some failing launches: those equal bit for
    bit, the summed share of equal elements, and how many it ran."""

    exact: set[int] = dataclasses.field(default_factory=set)
    share: float = 0.0
    ran: int = 0

    def rank(self) -> tuple[int, float]:
        """Sort key, best first: most launches bit for bit, then most elements equal."""
        return (-len(self.exact), -self.share)


def diagnose(observed: list[Observed], geometry, progress=None, unkept: int = 0,
             passing: list[Observed] | tuple[()] = ()) -> Diagnosis:
    """The mutants (``candidates(geometry)``) whose outputs agree best with the
    kernel's on the failing launches ``observed``, in greedy rounds: every
    candidate runs on ``SAMPLE`` launches spread over the cases, the
    ``SURVIVORS`` best (and any tied with the best) on every launch still
    unexplained, and the one that equals most bit for bit (then most elements)
    is named; the next round looks only at the launches it does not explain.
    A mutant whose capabilities refuse a launch is not run on it (it explains
    none of those). ``unkept``: failing launches left out for want of an output.

    Mutants that equal the kernel on exactly the same failing launches (one
    that never scans scale bytes for NaN and one that validates nothing, on
    a kernel failing only the NaN-scale inputs) are told apart on ``passing``,
    other launches of the kernel, first those of cases carrying the tied
    mutants' classes: the mutant that does what the kernel did there more
    often is the better fit. Where a passing launch's output was not kept
    (``did`` is ``PASSED``) the correct implementation's stands for it: the
    kernel passed it.

    Each mutant runs a launch on a fresh instance, twice when its first
    output disagrees, and either output counts: the kernel's output came
    after every launch before it (a kernel with dirty split tickets returns
    NaN from its second launch on), a history the diagnosis cannot replay.
    ``interrupts.Interrupted`` propagates (checked before every mutant launch)."""
    from nvfp4_suite import kernels
    from nvfp4_suite.vectors.catalog.casefile import load_case
    from nvfp4_suite.vectors.engine import interrupts

    problems: dict[Path, DecodeProblem] = {}

    def problem(o: Observed) -> DecodeProblem:
        if isinstance(o.problem, DecodeProblem):
            return o.problem
        if o.problem not in problems:
            problems[o.problem] = load_case(o.problem)[0]
        return problems[o.problem]

    cands = candidates(geometry)
    fits = tuple(_fitting(observed, geometry, problem))
    if not cands:
        return Diagnosis([], len(observed), len(observed), unkept=unkept, no_candidates=(
            f"no registered mutant of this arithmetic ({'exact' if geometry is None else geometry}) to "
            "compare outputs with"), fits=fits, declared=geometry)
    makers = {c.spec: functools.partial(kernels.get_backend, c.spec) for c in cands}
    makers[""] = functools.partial(correct_kernel, geometry)  # the yardstick
    done: dict[tuple[str, int], tuple] = {}
    # Failing launches first, then the passing ones (indices past len(observed)).
    every = list(observed) + list(passing)

    def agree(key: str, i: int, did) -> tuple[bool, float] | None:
        """``agreement`` of ``did`` with mutant ``key`` on launch ``i``, None where it cannot run it."""
        o = every[i]
        if (key, i) not in done:
            interrupts.stop_if_asked()
            backend = makers[key]()
            done[key, i] = (mutant_did(backend, problem(o), o),)
            if done[key, i][0] is not None and not agreement(did, done[key, i][0])[0]:
                done[key, i] += (mutant_did(backend, problem(o), o),)
        if done[key, i][0] is None:
            return None
        return max(agreement(did, got) for got in done[key, i])

    def score(key: str, indices: list[int], need: int = 0) -> _Score:
        """Mutant ``key``'s agreement over ``indices``; it stops as soon as it
        can no longer equal ``need`` launches bit for bit (it then ranks below
        the mutant that did, whatever the rest would say)."""
        s = _Score()
        for k, i in enumerate(indices):
            if len(s.exact) + len(indices) - k < need:
                break
            a = agree(key, i, every[i].did)
            if a is not None:
                s.ran += 1
                s.share += a[1]
                if a[0]:
                    s.exact.add(i)
        return s

    def correct_did(i: int) -> np.ndarray | str | None:
        """What the correct implementation does on launch ``i``."""
        o = every[i]
        if o.expected_error:
            return REFUSED
        if ("", i) not in done:
            interrupts.stop_if_asked()
            done["", i] = (mutant_did(makers[""](), problem(o), o),)
        return done["", i][0]

    def like_kernel(key: str, pool: list[int]) -> int:
        """Launches of ``pool`` (from ``passing``) where mutant ``key`` does what
        the kernel did: its output where kept, else (``PASSED``) what the correct implementation does."""
        n = 0
        for i in pool:
            did = every[i].did
            right = correct_did(i) if isinstance(did, str) and did == PASSED else did
            a = None if right is None else agree(key, i, right)
            n += bool(a and a[0])
        return n

    def untie(ranked: list[Candidate], full: dict) -> tuple[list[Candidate], dict]:
        """``ranked`` with the mutants tied with the best reordered by
        ``like_kernel``, and that count of each (empty: nothing to tell them apart by)."""
        tied = [c for c in ranked if full[c].rank() == full[ranked[0]].rank()]
        if not passing:
            return ranked, {}
        classes = {c.bug for c in tied}
        own = [i for i in range(len(observed), len(every)) if classes & set(every[i].flags)]
        pool = _spread(own, every, 2 * SAMPLE) + _spread(
            [i for i in range(len(observed), len(every)) if i not in own], every, SAMPLE)
        fit = {c: like_kernel(c.spec, pool) for c in tied}
        return sorted(tied, key=lambda c: -fit[c]) + ranked[len(tied):], fit

    matches: list[Match] = []
    closest = None
    remaining = list(range(len(observed)))
    while remaining and len(matches) < ROUNDS:
        left = [c for c in cands if all(c != m.candidate for m in matches)]
        if not left:
            break
        pick = _spread(remaining, every, SAMPLE)
        if progress:
            progress(f"  diagnosis: {len(left)} mutants on {len(pick)} of {len(remaining)} failing launches")
        first = {c: score(c.spec, pick) for c in left}
        ranked = sorted(left, key=lambda c: first[c].rank())  # stable: registry order breaks ties
        top = first[ranked[0]]
        if not top.exact:
            base = score("", pick)
            mean, base_mean = top.share / max(top.ran, 1), base.share / max(base.ran, 1)
            if mean > base_mean:
                closest = (ranked[0], mean, base_mean)
            break
        keep = [c for i, c in enumerate(ranked)
                if first[c].exact and (i < SURVIVORS or first[c].rank() == top.rank())]
        if progress:
            progress(f"  diagnosis: {len(keep)} mutants on {len(remaining)} failing launches")
        full: dict[Candidate, _Score] = {}
        for c in keep:  # the sample's best first: the others stop once they cannot equal it
            full[c] = score(c.spec, remaining, max((len(f.exact) for f in full.values()), default=0))
        ranked = sorted(keep, key=lambda c: full[c].rank())
        fit: dict[Candidate, int] = {}
        if len(ranked) > 1 and full[ranked[1]].rank() == full[ranked[0]].rank():
            ranked, fit = untie(ranked, full)
        best = ranked[0]
        tied = tuple(c for c in ranked[1:] if full[c].rank() == full[best].rank() and fit.get(c) == fit.get(best))
        matches.append(Match(best, frozenset(full[best].exact), len(observed),
                             frozenset(observed[i].case for i in full[best].exact), tied))
        remaining = [i for i in remaining if i not in full[best].exact]
    return Diagnosis(matches, len(observed), len(remaining), closest, unkept, fits=fits, declared=geometry)


def _fitting(observed: list[Observed], geometry, problem) -> list[str]:
    """``declared.fitting_declarations`` of the failing launches ``observed``
    (``problem``: loads an ``Observed``'s problem); none when some failing
    launch has no output array to judge (a crash, a refusal owed) or none has
    one kept: a declaration cannot make a crash right."""
    if not observed or any(not isinstance(o.did, np.ndarray) or o.expected_error for o in observed):
        return []  # decided before any case file is loaded
    return declared.fitting_declarations(
        geometry, [declared.Failing(problem(o), o.launch, o.did) for o in observed
                   if isinstance(o.did, np.ndarray)])


def observed_launches(golden) -> tuple[list[Observed], int, list[Observed]]:
    """The failing launches of ``golden`` (a ``check.GoldenRun``) the
    diagnosis can compare, how many more failed without a kept output, and
    the launches that passed (``did`` is ``PASSED``)."""
    out: list[Observed] = []
    passed: list[Observed] = []
    unkept = 0
    for c in golden.cases:
        failed = {f.launch: f for f in c.failures}
        for launch in c.ran:
            f = failed.get(launch)
            did = PASSED if f is None else NOT_REFUSED if c.expected_error else f.output
            if did is None:
                unkept += 1
                continue
            (passed if f is None else out).append(
                Observed(c.id, tuple(c.flags), launch, c.file, did, c.expected_error))
    return out, unkept, passed


def diagnose_golden(golden, geometry, progress=None) -> Diagnosis | None:
    """``diagnose`` over the failing launches of ``golden`` (a
    ``check.GoldenRun``) for a kernel judged in ``geometry``; None when none failed."""
    observed, unkept, passed = observed_launches(golden)
    if not observed and not unkept:
        return None
    return diagnose(observed, geometry, progress, unkept, passed)


def isolating_first(failed: list, diagnosis: Diagnosis | None) -> list:
    """``failed`` (``check.CaseResult`` list, in catalog order) with the case
    that best isolates the first cause first: of the cases with a launch whose
    outputs equal the best mutant's, the one with the fewest flags other than
    that mutant's class (then the first in catalog order); the others keep
    their order. Unchanged without a cause."""
    best = diagnosis.best if diagnosis is not None else None
    if best is None:
        return failed
    mine = [c for c in failed if c.id in best.cases]
    if not mine:
        return failed
    cause = best.candidate.bug
    pick = min(mine, key=lambda c: len(set(c.flags) - {cause}))
    return [pick] + [c for c in failed if c is not pick]


def summary_lines(outcomes: list[Outcome], diagnosis: Diagnosis | None = None) -> list[str]:
    """The cause summary of a golden run (printed above the per-case lines):
    the mutants whose outputs agree best (``diagnosis``, when the run was
    diagnosed), the features every failing launch shares, and the classes
    ranked by share. Empty when nothing failed."""
    if not any(o.failed for o in outcomes):
        return []
    lines = diagnosis.lines() if diagnosis is not None else []
    causes = shared_causes(outcomes)
    for c in causes[:3]:
        lines.append(f"  shared by the failures: {c.phrase()}")
    if not causes:
        lines.append("  shared by the failures: no feature common to every failing launch")
    shares = class_shares(outcomes)
    lines.append("  failing bug classes by share of their cases failed: "
                 + ", ".join(f"{s.flag} {s.failed}/{s.judged}" for s in shares))
    return lines
