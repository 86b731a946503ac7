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
- ``mutant_matches``: registered mutants whose recorded failure pattern on
  the catalog (``signatures.json``, written by ``python -m
  nvfp4_suite.vectors.engine.signatures``) is close to this run's.

``summary_lines`` renders the three for the run report, above the per-class
lines.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.problem import outside_scale_domain, outside_slot_domain

HERE = Path(__file__).resolve().parent.parent  # the package's vectors/ folder
SIGNATURES = HERE / "signatures.json"

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

# A mutant matches when the Jaccard index of its failing launches and the
# run's, over the launches the run judged, is at least this.
MATCH = 0.75


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


def signature_key(case_id: int, launch: Launch) -> tuple[int, int]:
    # Signatures are recorded per (case, split count): the mutants have no placement.
    return (case_id, launch.known_splits)


@dataclasses.dataclass(frozen=True)
class Match:
    """A registered mutant whose failure pattern is close to the run's."""

    spec: str
    bug: str
    what: str
    jaccard: float
    both: int
    mutant_only: int
    run_only: int


def load_signatures(path: Path = SIGNATURES) -> dict:
    """The recorded signatures: ``{"catalog": sha256 of the manifest, "mutants":
    {spec: {"bug", "what", "failing": [[case_id, splits], ...]}}}``; an empty
    record when the file is absent or unreadable (matching is then skipped)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"catalog": None, "mutants": {}}
    if not isinstance(data, dict) or not isinstance(data.get("mutants"), dict):
        return {"catalog": None, "mutants": {}}
    return data


def mutant_matches(outcomes: list[Outcome], signatures: dict) -> list[Match]:
    """Mutants whose failing (case, splits) set, restricted to what this run
    judged, has a Jaccard index >= ``MATCH`` with the run's failing set; best first."""
    judged = {signature_key(o.case_id, o.launch) for o in outcomes}
    failed = {signature_key(o.case_id, o.launch) for o in outcomes if o.failed}
    if not failed:
        return []
    out = []
    for spec, sig in signatures.get("mutants", {}).items():
        theirs = {tuple(x) for x in sig.get("failing", [])} & judged
        if not theirs:
            continue
        both = len(theirs & failed)
        j = both / len(theirs | failed)
        if j >= MATCH:
            out.append(Match(spec, sig.get("bug", "?"), sig.get("what", ""), j, both,
                             len(theirs - failed), len(failed - theirs)))
    return sorted(out, key=lambda m: (-m.jaccard, m.spec))


def current_signatures() -> dict:
    """The recorded signatures when they were recorded on the installed catalog
    (its manifest's sha256 matches), else an empty record: a pattern recorded
    on another catalog names nothing here."""
    import hashlib

    from nvfp4_suite.vectors import catalog

    sig = load_signatures()
    try:
        here = hashlib.sha256(catalog.MANIFEST.read_bytes()).hexdigest()
    except OSError:
        here = None
    return sig if sig["catalog"] == here else {"catalog": None, "mutants": {}}


def summary_lines(outcomes: list[Outcome], signatures: dict | None = None) -> list[str]:
    """The cause summary of a golden run (printed above the per-case lines):
    the shared features, a matching mutant (``signatures``, default
    ``current_signatures()``), and the classes ranked by share. Empty when
    nothing failed."""
    if not any(o.failed for o in outcomes):
        return []
    lines = []
    causes = shared_causes(outcomes)
    for c in causes[:3]:
        lines.append(f"  shared by the failures: {c.phrase()}")
    if not causes:
        lines.append("  shared by the failures: no feature common to every failing launch")
    for m in mutant_matches(outcomes, signatures if signatures is not None else current_signatures())[:2]:
        lines.append(f"  matches {m.bug} ({m.what}; mutant {m.spec}): {m.both} launches fail in both, "
                     f"{m.mutant_only} only in the mutant, {m.run_only} only here")
    shares = class_shares(outcomes)
    lines.append("  failing bug classes by share of their cases failed: "
                 + ", ".join(f"{s.flag} {s.failed}/{s.judged}" for s in shares))
    return lines
