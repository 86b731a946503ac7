"""The conditions a generated problem can reach, and the coverage table of a run.

A condition is one situation a correct kernel must handle and a known bug
needs in order to show (a row's valid-slot count that is a multiple of the
split count, a K scale byte >= 0x80 at a visible key, a -1 slot before a
valid one...). ``CONDITIONS`` lists each with what it is and the minimum
share of generated problems that reach it (``min_share``): the strategies
(``nvfp4_suite.vectors.engine.strategies``) are shaped so that every condition a
backend's capabilities allow is drawn at least that often, and
``tests/test_coverage.py`` holds them to it over the CI draws
(``CI_DRAWS`` problems from ``CI_SEED``).

``Coverage`` counts, over one run, how many problems reached each condition
and how many of those failed; ``lines()`` is the table every ``check``
report prints, with a warning for each condition the backend allows that no
problem reached. Each generated problem is judged at one launch (run twice
by the harness); launch conditions (split counts, XCD placement) are
counted per problem like the others.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import numpy as np

from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.paged_cache import BLK, D, page_views, unswizzle_v_scales

# The CI draws the stated minimum shares are tested over (tests/test_coverage.py).
CI_DRAWS = 200
CI_SEED = 0

# A FlyDSL wave reads 32 of a block's 128 keys; on a diagonal block whose cut
# (pos % 128) is below 96 the last wave sees none of its keys.
WAVE_KEYS = 32

# E4M3FN scale-byte classes (the sign is bit 7; 0x7F and 0xFF are NaN, invalid where read).
SCALE_CLASSES = {
    "+0 (0x00)": lambda b: b == 0x00,
    "-0 (0x80)": lambda b: b == 0x80,
    "+subnormal (0x01-0x07)": lambda b: (b >= 0x01) & (b <= 0x07),
    "-subnormal (0x81-0x87)": lambda b: (b >= 0x81) & (b <= 0x87),
    "+normal (0x08-0x7D)": lambda b: (b >= 0x08) & (b <= 0x7D),
    "-normal (0x88-0xFD)": lambda b: (b >= 0x88) & (b <= 0xFD),
    "+448 (0x7E)": lambda b: b == 0x7E,
    "-448 (0xFE)": lambda b: b == 0xFE,
}


@dataclasses.dataclass(frozen=True)
class Condition:
    """One condition: its table ``name``, ``what`` it is, the stated minimum
    share of generated problems reaching it (``min_share``), and
    ``allowed(caps, splits)``: whether a backend with ``caps`` (judged at
    ``splits``, the split counts selected) can be given a problem reaching it."""

    name: str
    what: str
    min_share: float
    allowed: Callable[..., object] | None = None

    def allows(self, caps, splits) -> bool:
        """Whether the condition can occur for ``caps`` at split counts ``splits``."""
        return self.allowed is None or bool(self.allowed(caps, tuple(splits)))


def _any(caps, splits) -> bool:
    return caps.slot_lists == "any"


def _signed(caps, splits) -> bool:
    # A backend of the non-negative scale domain is drawn no sign bit.
    return caps.scale_sign == "any"


def _multi_split(caps, splits) -> bool:
    # A kernel choosing its own split count ("auto") shows the suite none.
    return any(isinstance(s, int) and s > 1 for s in splits)


def _loop_repeats(caps, splits) -> bool:
    # A split walks at most ceil(TOPK / splits) blocks: 3 or more need TOPK > 2 * splits.
    return any(isinstance(s, int) and 1 < s and 2 * s < caps.limits.topk for s in splits)


def _lim(field, least):
    return lambda caps, splits: getattr(caps.limits, field) >= least


def _both(*fs):
    return lambda caps, splits: all(f(caps, splits) for f in fs)


NO_WORK = "no valid slot in any row"
OTHER_SM_SCALE = "sm_scale != 128**-0.5"

_BASE = (
    Condition("has work", "some row has a valid slot (otherwise every output is zero)", 0.90),
    Condition(NO_WORK, "every row empty: every output must be exactly zero", 0.0),
    Condition("row with no valid slot", "a row (of a KV head) that sees no key, beside rows that do", 0.15),
    Condition("padding row", "a row whose position is negative (seq_len < q_len, or seq_len 0)", 0.10),
    Condition("q_len>1", "several query rows per request", 0.25, _lim("q_len", 2)),
    Condition("Hkv>1", "several KV heads", 0.25, _lim("kv_heads", 2)),
    Condition("Hkv>1, rows!=Hkv", "KV heads and rows differ in number (head-major top-k shows)", 0.10,
              _lim("kv_heads", 2)),
    Condition("diagonal block", "a valid slot selects the row's own block (the causal cut applies)", 0.60),
    Condition("diagonal block cut", "the own block is selected and pos % 128 < 127 (keys past the cut)", 0.55),
    Condition("earlier block, cut row", "a valid earlier block in a row whose own block is cut "
              "(earlier blocks are wholly visible)", 0.40),
    Condition("odd valid count", "a row with an odd number of valid slots", 0.50),
    Condition("-1 before valid", "a -1 slot before a row's first valid slot", 0.15, _both(_any, _lim("topk", 2))),
    Condition("-1 between valid", "a -1 slot between two valid slots", 0.10, _both(_any, _lim("topk", 3))),
    Condition("-1 after valid", "a -1 slot after a row's last valid slot", 0.20, _lim("topk", 2)),
    Condition("future before valid", "an id past the row's own block before its first valid slot", 0.15,
              _both(_any, _lim("topk", 2))),
    Condition("future between valid", "an id past the row's own block between two valid slots", 0.10,
              _both(_any, _lim("topk", 3))),
    Condition("future after valid", "an id past the row's own block after its last valid slot", 0.15,
              _both(_any, _lim("topk", 2))),
    Condition("valid slot index>=32", "a valid slot in lane 32 or above (TOPK >= 33)", 0.10, _lim("topk", 33)),
    Condition("|q| >= 16", "a large query element (peaked softmax, P underflows); logits themselves are "
              "not computed here", 0.20),
    Condition("unread slabs poisoned", "(page, KV head) slabs no valid slot reads hold NaN scale bytes", 0.20),
    Condition(OTHER_SM_SCALE, "a softmax scale other than 128 ** -0.5 (a kernel that ignores sm_scale shows)",
              0.30, lambda caps, splits: caps.sm_scale is None),
)

_LAUNCH = (
    Condition("splits>1", "a split-KV launch (partials merged; tickets reset between launches)", 0.50,
              _multi_split),
    Condition("valid count % splits == 0", "splits > 1 and a row's valid count is a multiple of it "
              "(an inclusive rank mask drops a block)", 0.15, _multi_split),
    Condition("valid count % splits != 0", "splits > 1 and a row's valid count is not a multiple of it", 0.30,
              _multi_split),
    Condition("split with no block", "splits > 1 and one split of a row with work gets no block", 0.10,
              _multi_split),
    Condition("two splits with blocks", "splits > 1 and two splits of a row get blocks (maxima rescaled)", 0.30,
              _multi_split),
    Condition("3+ blocks in a split, splits>1", "splits > 1 and a split walks 3 or more blocks: the "
              "block loop (two blocks per trip) takes its back edge in a split launch", 0.05, _loop_repeats),
    Condition("odd block count in a split", "a split walks an odd number of blocks "
              "(two per loop trip: the last one masked)", 0.50),
    Condition("first block of a wave fully masked", f"a split's first block is the row's own block cut "
              f"below key {128 - WAVE_KEYS}: a {WAVE_KEYS}-key wave starts on a fully masked block", 0.25),
    Condition("xcds>0", "an XCD placement", 0.30, lambda caps, splits: any(caps.xcds)),
    Condition("rows % (xcds*q_len) != 0", "the XCD grid is padded: pad rows must store nothing", 0.20,
              lambda caps, splits: any(caps.xcds)),
)

_SCALES = tuple(
    Condition(f"{kv} scale {cls}", f"a visible key has a {kv} scale byte {cls}",
              0.50 if cls.startswith("+normal") else 0.10, _signed if cls.startswith("-") else None)
    for kv in ("K", "V") for cls in SCALE_CLASSES
)

CONDITIONS = _BASE + _LAUNCH + _SCALES


def conditions_for(caps, splits=None) -> list[Condition]:
    """Every condition with a per-backend entry added: one per layout
    (``layout=X``) and per split count selected (``splits=N``, stated minimum
    a quarter of an even share); only those ``caps`` allows."""
    splits = tuple(splits or caps.splits)
    out = [c for c in CONDITIONS if c.allows(caps, splits)]
    out += [Condition(f"layout={x}", f"pages in the {x} layout", 0.5 / len(caps.layouts)) for x in caps.layouts]
    out += [Condition(f"splits={s}", f"launched with {s} splits", 0.25 / len(splits)) for s in splits]
    return out


def _order_flags(ids: np.ndarray, valid: np.ndarray, junk: np.ndarray) -> tuple[bool, bool, bool]:
    """Whether a ``junk`` slot lies before the first, between two, or after
    the last ``valid`` slot of some row (arrays ``[..., TOPK]``)."""
    idx = np.arange(ids.shape[-1])
    has = valid.any(axis=-1, keepdims=True)
    first = np.where(has, np.argmax(valid, axis=-1)[..., None], -1)
    last = np.where(has, ids.shape[-1] - 1 - np.argmax(valid[..., ::-1], axis=-1)[..., None], -1)
    before = (junk & (idx < first) & has).any()
    between = (junk & (idx > first) & (idx < last) & has).any()
    after = (junk & (idx > last) & has).any()
    return bool(before), bool(between), bool(after)


def problem_conditions(p: DecodeProblem) -> set[str]:
    """The problem conditions (``CONDITIONS``' names, and ``layout=X``) ``p`` reaches."""
    out = {f"layout={p.layout}"}
    valid = p.valid_slots
    pos = p.positions
    sb = p.self_blocks
    work = valid.any(axis=-1)
    out.add("has work" if work.any() else NO_WORK)
    if float(p.sm_scale) != D**-0.5:
        out.add(OTHER_SM_SCALE)
    if (~work).any() and work.any():
        out.add("row with no valid slot")
    if (pos < 0).any():
        out.add("padding row")
    if p.q_len > 1:
        out.add("q_len>1")
    if p.num_kv_heads > 1:
        out.add("Hkv>1")
        if p.rows != p.num_kv_heads:
            out.add("Hkv>1, rows!=Hkv")
    diag = valid & (p.topk == sb[None, :, None])
    cut = (pos >= 0) & (pos % BLK != BLK - 1)
    if diag.any():
        out.add("diagonal block")
    if (diag & cut[None, :, None]).any():
        out.add("diagonal block cut")
    if (valid & (p.topk < sb[None, :, None]) & cut[None, :, None]).any():
        out.add("earlier block, cut row")
    if (valid.sum(axis=-1) % 2 == 1).any():
        out.add("odd valid count")
    for name, junk in (("-1", p.topk == -1), ("future", (p.topk > sb[None, :, None]) & (sb[None, :, None] >= 0))):
        for where, hit in zip(("before", "between", "after"), _order_flags(p.topk, valid, junk)):
            if hit:
                out.add(f"{name} {where} valid")
    if valid[..., 32:].any():
        out.add("valid slot index>=32")
    if float(np.abs(p.q).max(initial=0)) >= 16:
        out.add("|q| >= 16")
    out |= _scale_conditions(p, valid)
    return out


def _scale_conditions(p: DecodeProblem, valid: np.ndarray) -> set[str]:
    out = set()
    views = page_views(p.pool, p.layout, p.num_kv_heads)
    pages = p.slot_pages()
    heads = np.broadcast_to(np.arange(p.num_kv_heads)[:, None, None], valid.shape)
    read = np.zeros((p.num_pages, p.num_kv_heads), bool)
    read[pages[valid], heads[valid]] = True
    if (~read).any() and (((views.k_scale[~read] & 0x7F) == 0x7F).any()):
        out.add("unread slabs poisoned")
    if not valid.any():
        return out
    keys = p.key_mask()[valid]                                     # [n, 128] visible keys of each valid slot
    pg, hd = pages[valid], heads[valid]
    for kv, sc in (("K", views.k_scale[pg, hd]), ("V", unswizzle_v_scales(views.v_scale[pg, hd]))):
        seen = sc[keys]                                           # [visible keys, 8] scale bytes
        for cls, test in SCALE_CLASSES.items():
            if test(seen).any():
                out.add(f"{kv} scale {cls}")
    return out


def valid_counts(p: DecodeProblem) -> np.ndarray:
    """int ``[Hkv, rows]``: each row's number of valid slots."""
    return p.valid_slots.sum(axis=-1)


def launch_conditions(p: DecodeProblem, launch) -> set[str]:
    """The launch conditions ``launch`` reaches on ``p`` (``splits=N`` included).
    Blocks are split as the contract's split-KV reference does: a row's valid
    slots, in slot order, in chunks of ``ceil(n / splits)``."""
    s = launch.splits
    out = {f"splits={s}"}
    if not isinstance(s, int):
        return out  # the kernel's own split count: nothing of the split axis is known
    valid = p.valid_slots
    n = valid.sum(axis=-1)
    work = n > 0
    if s > 1:
        out.add("splits>1")
        if (work & (n % s == 0)).any():
            out.add("valid count % splits == 0")
        if (work & (n % s != 0)).any():
            out.add("valid count % splits != 0")
    chunk = np.maximum(-(-n // s), 1)
    # rank of each valid slot among its row's valid slots, and the split it falls in
    rank = np.cumsum(valid, axis=-1) - 1
    split_of = np.where(valid, rank // chunk[..., None], -1)
    per_split = np.stack([(split_of == z).sum(axis=-1) for z in range(s)], axis=-1)   # [Hkv, rows, s]
    if s > 1 and (work[..., None] & (per_split == 0)).any():
        out.add("split with no block")
    if s > 1 and ((per_split > 0).sum(axis=-1) >= 2).any():
        out.add("two splits with blocks")
    if s > 1 and (per_split >= 3).any():
        out.add("3+ blocks in a split, splits>1")
    if (per_split % 2 == 1).any():
        out.add("odd block count in a split")
    pos = p.positions
    sb = p.self_blocks
    lim = np.where(pos >= 0, pos % BLK, BLK)
    starts = valid & (rank % chunk[..., None] == 0)                 # the first slot each split walks
    masked = starts & (p.topk == sb[None, :, None]) & (lim[None, :, None] < BLK - WAVE_KEYS)
    if masked.any():
        out.add("first block of a wave fully masked")
    if launch.xcds:
        out.add("xcds>0")
        if p.rows % (launch.xcds * p.q_len):
            out.add("rows % (xcds*q_len) != 0")
    return out


class Coverage:
    """The coverage of one run of generated problems against a backend with
    ``caps`` at split counts ``splits`` (default: all it declares)."""

    def __init__(self, caps, splits=None):
        self.conditions = conditions_for(caps, splits)
        self.reached = collections.Counter()
        self.failed = collections.Counter()
        self.n = 0

    def add(self, problem: DecodeProblem, launch, ok: bool = True) -> set[str]:
        """Count one judged problem (at ``launch``; ``ok``: it passed); returns its conditions."""
        got = problem_conditions(problem) | launch_conditions(problem, launch)
        self.n += 1
        self.reached.update(got)
        if not ok:
            self.failed.update(got)
        return got

    def never_reached(self) -> list[str]:
        """Conditions the backend allows that no problem reached (the no-work one excepted)."""
        return [c.name for c in self.conditions if not self.reached[c.name] and c.min_share > 0]

    def below_minimum(self) -> list[tuple[str, int, float]]:
        """``(name, problems, stated minimum share)`` for each condition reached
        less often than stated (meaningful over ``CI_DRAWS`` problems or more)."""
        return [(c.name, self.reached[c.name], c.min_share) for c in self.conditions
                if self.reached[c.name] < c.min_share * self.n]

    def lines(self) -> list[str]:
        """The coverage table: a line per condition (problems reaching it, their
        share, the stated minimum share, failures), then a warning per
        condition never reached."""
        if not self.n:
            return []
        w = max(len(c.name) for c in self.conditions)
        out = [f"  coverage over {self.n} problems (one launch each; min: the stated minimum share, "
               f"nvfp4_suite.vectors.engine.coverage):",
               f"  {'condition':<{w}}  problems  share   min  failed"]
        for c in self.conditions:
            k = self.reached[c.name]
            out.append(f"  {c.name:<{w}}  {k:8d}  {k / self.n:5.0%}  {c.min_share:4.0%}  {self.failed[c.name]:6d}")
        for name in self.never_reached():
            out.append(f"  warning: no problem reached '{name}', which this backend's capabilities allow "
                       f"(more --examples, or another --seed)")
        return out


# The conditions a bug class needs in order to show (any one of them): a
# generated problem that catches a mutant of the class reaches one, and the
# coverage table's "failed" column names it (tests/test_coverage.py).
# "large-logits" is absent: its condition is a logit past float32's exp
# range, which this module does not compute (it would cost the reference's
# work); its mutant is caught by large |q| and by wide scale bytes alike.
NEEDS = {
    # A split with no block walks only invalid slots: its first max is -inf too.
    "first-invalid-nan": ("-1 before valid", "future before valid", "row with no valid slot", "padding row",
                          "split with no block"),
    "empty-row": ("row with no valid slot", "padding row", "split with no block"),
    "split-merge": ("split with no block",),
    "split-rescale": ("two splits with blocks",),
    "ticket-reset": ("splits>1",),
    "minus-one": ("-1 before valid", "-1 between valid", "-1 after valid", "row with no valid slot"),
    "v-scale-swizzle": ("has work",),
    "v-scale-writer": ("has work",),
    "stale-tail": ("diagonal block cut",),
    "fnuz": ("has work",),
    "e4m3-special": tuple(f"{kv} scale {c}" for kv in "KV" for c in SCALE_CLASSES if "subnormal" in c or "0 (" in c),
    "nibble-order": ("has work",),
    "scale-group": ("has work",),
    "topk-major": ("Hkv>1, rows!=Hkv",),
    "head-map": ("Hkv>1",),
    "position": ("q_len>1",),
    "causal-earlier": ("earlier block, cut row",),
    "xcds": ("xcds>0",),
    "stray-read": ("unread slabs poisoned",),
    "layout": ("layout=planar",),
    "topk-wide": ("valid slot index>=32",),
    "odd-blocks": ("odd block count in a split",),
    "rounding": ("has work",),
    # Ignoring sm_scale shows only at another scale; squaring it (sm_scale_twice)
    # changes 128 ** -0.5 too, so any problem with work may show the class.
    "softmax-scale": (OTHER_SM_SCALE, "has work"),
}
