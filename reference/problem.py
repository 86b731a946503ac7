"""The decode problem: one step's inputs, their derived facts, and the validator.

A kernel cannot report bad input, so the host must: ``DecodeProblem.validate``
raises a named ``ProblemError`` subclass, with the offending index and value,
for every violation the contract lists. ``-1`` slots, future-block slots and
requests with ``seq_len`` 0 are valid input.

The validator also refuses what the reference cannot compute (scales whose
float32 constants leave the normal range, a problem with no rows). A valid
problem too large for the reference's memory is refused by the reference
itself (``check_reference_budget``), naming the size and the budget: the
problem is valid, a kernel may well run it, but it cannot be judged here.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from .formats import E2M1_MAX, E4M3_MAX, E4M3FN_TABLE, is_bf16
from .paged_cache import BLK, LAYOUTS, D, page_bytes, page_views, unswizzle_v_scales

HG = 16
_F32_TINY = float(np.finfo(np.float32).tiny)
_F32_MAX = float(np.finfo(np.float32).max)
_SCORE_LIMIT = 2.0**30
_SCALARS = ("num_kv_heads", "q_len", "sm_scale", "k_global_scale", "v_global_scale")
# The contract's largest slot count (CONTRACT.md section 3): the validator refuses more.
TOPK_MAX = 64


def row_positions(seq_lens, q_len: int) -> np.ndarray:
    """int64 ``[reqs * q_len]``: the token position of each query row (CONTRACT.md
    section 3): request ``r // q_len``'s last ``q_len`` positions, the row
    ``r % q_len``-th of them; negative for a padding row (a request shorter
    than ``q_len``). ``seq_lens``: int ``[reqs]``."""
    seq = np.asarray(seq_lens).astype(np.int64)
    r = np.arange(len(seq) * q_len)
    return seq[r // q_len] - q_len + r % q_len


LOG2E = 1.4426950408889634


def softmax_constant(sm_scale: float, k_global_scale: float) -> np.float32:
    """The seed kernel's score scale ``c = fp32(fp32(sm_scale * log2(e)) * k_global)``
    (float32 scalar): a fact of the problem the validator bounds and the emulation uses."""
    return np.float32(np.float32(sm_scale * LOG2E) * np.float32(k_global_scale))


class ProblemError(ValueError):
    """Base class of every invalid-input error the validator raises."""


class ShapeError(ProblemError):
    """An array has the wrong shape, dtype or rank, or sizes disagree."""


class HeadCountError(ProblemError):
    """H != 16 * Hkv."""


class QueryValueError(ProblemError):
    """A query value is not a finite bfloat16 value."""


class SeqLenError(ProblemError):
    """A negative seq_len, or one needing more blocks than the block table holds."""


class TopkIdError(ProblemError):
    """A top-k id below -1."""


class DuplicateSlotError(ProblemError):
    """The same valid block id twice in one (KV head, row) slot list."""


class PageIndexError(ProblemError):
    """A valid slot maps through the block table to a page outside the pool."""


class ScaleError(ProblemError):
    """A global scale or sm_scale that is not finite and > 0."""


class NaNScaleByteError(ProblemError):
    """An E4M3 NaN byte (0x7F / 0xFF) in a page slab that a valid slot reads."""


class ParameterError(ProblemError):
    """A scalar parameter out of range (q_len, num_kv_heads, layout)."""


class ReferenceBudgetError(MemoryError):
    """A valid problem whose reference computation needs more memory than the
    reference's budget (``reference_budget_bytes``); not a ``ProblemError``:
    the input is valid, only too large to judge on this machine."""


# The reference's memory budget: 8 GiB unless NVFP4_REFERENCE_BUDGET_GIB says otherwise.
BUDGET_ENV = "NVFP4_REFERENCE_BUDGET_GIB"
DEFAULT_BUDGET_GIB = 8.0


def reference_budget_bytes() -> int:
    """The memory budget of one reference computation, in bytes (``$NVFP4_REFERENCE_BUDGET_GIB``,
    default 8 GiB); a malformed value is a ValueError naming it."""
    raw = os.environ.get(BUDGET_ENV)
    try:
        gib = DEFAULT_BUDGET_GIB if raw is None else float(raw)
    except ValueError:
        raise ValueError(f"{BUDGET_ENV} = {raw!r} is not a number of GiB") from None
    if not gib > 0:
        raise ValueError(f"{BUDGET_ENV} = {raw!r} must be > 0")
    return int(gib * 2**30)


def check_reference_budget(what: str, problem: "DecodeProblem", nbytes: int) -> None:
    """Raise ``ReferenceBudgetError`` when ``what`` (the oracle, the emulation
    at some split count) needs ``nbytes`` for ``problem``, more than the budget."""
    budget = reference_budget_bytes()
    if nbytes > budget:
        raise ReferenceBudgetError(
            f"{what} needs about {nbytes / 2**30:.1f} GiB for this problem (rows {problem.rows}, "
            f"Hkv {problem.num_kv_heads}, TOPK {problem.TOPK}), over the reference's budget of "
            f"{budget / 2**30:.1f} GiB (set {BUDGET_ENV} to raise it); it cannot be judged here")


_LOW7, _ONES, _HIGH = (np.uint64(int.from_bytes(bytes([b]) * 8, "little")) for b in (0x7F, 0x01, 0x80))


def _may_hold_nan_byte(stored: np.ndarray, pairs: np.ndarray) -> bool:
    """Whether the scale bytes ``stored`` ``[pages, Hkv, 128, 8]`` (a pool view) of the
    (page, KV head) slabs ``pairs`` (int ``[n, 2]``) may hold an E4M3 NaN (0x7F or 0xFF).

    Exact where the pool's bytes are contiguous: each token's 8 bytes are read as
    one uint64 word, several times faster than gathering them one by one, and
    the V swizzle only moves bytes within a slab, so the swizzled bytes say as
    much. Over other pools it answers True, leaving the byte scan to decide.
    """
    if stored.strides[-1] != 1:
        return True
    words = stored.view(np.uint64)[pairs[:, 0], pairs[:, 1]]
    # A NaN byte becomes 0x00 and every other byte 0x01..0x7F: subtracting 0x01 from
    # each byte then borrows, setting a high bit, exactly where some byte is 0x00.
    x = (words & _LOW7) ^ _LOW7
    return bool(((x - _ONES) & _HIGH).any())


def _first(mask: np.ndarray):
    """Index tuple of the first True in ``mask``, or None (cheap when none is)."""
    if not mask.any():
        return None
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _kind(v) -> str:
    """Type of ``v`` for an error message, with dtype and shape for arrays."""
    if isinstance(v, np.ndarray):
        return f"ndarray of dtype {v.dtype} and shape {v.shape}"
    return type(v).__name__


def _idx(a) -> str:
    return "[" + ", ".join(str(int(i)) for i in a) + "]"


def read_slabs(valid: np.ndarray, pages: np.ndarray, num_pages: int) -> np.ndarray:
    """bool ``[num_pages, Hkv]``: the (page, KV head) slabs that some valid slot reads.

    valid: bool ``[Hkv, rows, TOPK]``; pages: integer ``[Hkv, rows, TOPK]``, the
    page of each valid slot (read only where ``valid``), as ``slot_pages`` gives.
    """
    heads = np.broadcast_to(np.arange(valid.shape[0])[:, None, None], valid.shape)
    read = np.zeros((num_pages, valid.shape[0]), bool)
    read[pages[valid], heads[valid]] = True
    return read


@dataclasses.dataclass(frozen=True, eq=False)
class DecodeProblem:
    """One sparse decode step.

    Fields (exact public names, built by users from their serving stack):

    - ``q``: float32 ``[rows, H, 128]``, bf16-representable values.
    - ``pool``: uint8 ``[num_pages, page_bytes(num_kv_heads)]``.
    - ``layout``: ``"token_rows"`` or ``"planar"``.
    - ``num_kv_heads``: Hkv, with ``H == 16 * Hkv``.
    - ``topk``: int32 ``[Hkv, rows, TOPK]`` logical block ids, ``-1`` empty.
    - ``block_table``: int32 ``[reqs, max_blocks]`` logical block -> page.
    - ``seq_lens``: int32 ``[reqs]``; ``rows == reqs * q_len``.
    - ``q_len``: rows per request.
    - ``sm_scale``, ``k_global_scale``, ``v_global_scale``: floats > 0.

    The five scalar parameters may be Python numbers, numpy scalars or 0-d
    numpy arrays; a numpy scalar or a 0-d array of a real numeric dtype is
    stored as the Python number it holds (``np.array(0.0125)`` becomes
    ``0.0125``, ``np.uint8(16)`` becomes ``16``: sizes computed from it must
    not wrap around in a narrow integer type).
    """

    q: np.ndarray
    pool: np.ndarray
    layout: str
    num_kv_heads: int
    topk: np.ndarray
    block_table: np.ndarray
    seq_lens: np.ndarray
    q_len: int
    sm_scale: float
    k_global_scale: float
    v_global_scale: float

    def __post_init__(self):
        # A 0-d array is a scalar to the user but not to isinstance checks, json or the
        # harness (which copies array fields as inputs): hold the number itself.
        for name in _SCALARS:
            v = getattr(self, name)
            if isinstance(v, (np.ndarray, np.generic)) and v.ndim == 0 and v.dtype.kind in "iuf":
                object.__setattr__(self, name, v.item())

    @property
    def rows(self) -> int:
        """Query rows: reqs * q_len."""
        return int(self.q.shape[0])

    @property
    def H(self) -> int:
        """Query heads: 16 * Hkv."""
        return int(self.q.shape[1])

    @property
    def reqs(self) -> int:
        """Requests (length of seq_lens)."""
        return int(self.seq_lens.shape[0])

    @property
    def TOPK(self) -> int:
        """Selection slots per (KV head, row)."""
        return int(self.topk.shape[2])

    @property
    def num_pages(self) -> int:
        """Pages in the pool."""
        return int(self.pool.shape[0])

    @property
    def positions(self) -> np.ndarray:
        """int64 ``[rows]``: each row's token position; negative marks a padding row."""
        return row_positions(self.seq_lens, self.q_len)

    @property
    def self_blocks(self) -> np.ndarray:
        """int64 ``[rows]``: the block holding each row's own position, -1 for padding rows."""
        pos = self.positions
        return np.where(pos >= 0, pos // BLK, -1)

    @property
    def valid_slots(self) -> np.ndarray:
        """bool ``[Hkv, rows, TOPK]``: ``0 <= id <= self_blk`` (padding rows: none)."""
        sb = self.self_blocks[None, :, None]
        return (self.topk >= 0) & (self.topk <= sb)

    def key_mask(self) -> np.ndarray:
        """bool ``[Hkv, rows, TOPK, 128]``: which key of each slot's block a row sees.

        Invalid slots see nothing; in the row's own block only offsets
        ``<= pos % 128`` are visible; earlier blocks are wholly visible.
        """
        diag = self.topk == self.self_blocks[None, :, None]
        pos = self.positions
        lim = np.where(pos >= 0, pos % BLK, -1)[None, :, None, None]
        off = np.arange(BLK)[None, None, None, :]
        return self.valid_slots[..., None] & (~diag[..., None] | (off <= lim))

    def slot_pages(self) -> np.ndarray:
        """int64 ``[Hkv, rows, TOPK]``: the page each valid slot reads, -1 elsewhere."""
        valid = self.valid_slots
        req = (np.arange(self.rows) // self.q_len)[None, :, None]
        req = np.broadcast_to(req, valid.shape)
        blk = np.where(valid, self.topk, 0)
        pages = self.block_table.astype(np.int64)[req, np.minimum(blk, self.block_table.shape[1] - 1)]
        return np.where(valid, pages, -1)

    def validate(self) -> "DecodeProblem":
        """Raise a ``ProblemError`` subclass for the first violation found; return self."""
        self._validate_types()
        self._validate_values()
        return self

    def _validate_types(self) -> None:
        if self.layout not in LAYOUTS:
            raise ParameterError(f"layout = {self.layout!r}, expected one of {LAYOUTS}")
        for name in ("num_kv_heads", "q_len"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or v < 1:
                raise ParameterError(f"{name} = {v!r} ({_kind(v)}), must be an integer >= 1")
        expect = {
            "q": (np.float32, 3),
            "pool": (np.uint8, 2),
            "topk": (np.int32, 3),
            "block_table": (np.int32, 2),
            "seq_lens": (np.int32, 1),
        }
        for name, (dt, nd) in expect.items():
            a = getattr(self, name)
            if not isinstance(a, np.ndarray):
                raise ShapeError(f"{name} must be a numpy array, got {type(a).__name__}")
            if a.dtype != dt or a.ndim != nd:
                raise ShapeError(
                    f"{name} must be {np.dtype(dt).name} with {nd} dims, got {a.dtype} {a.shape}"
                )
        hk = int(self.num_kv_heads)
        if self.q.shape[2] != D:
            raise ShapeError(f"q.shape = {self.q.shape}, head dim must be {D}")
        if self.H != HG * hk:
            raise HeadCountError(
                f"q has H = {self.H} heads but num_kv_heads = {hk} needs H = {HG} * {hk} = {HG * hk}"
            )
        if self.rows != self.reqs * self.q_len:
            raise ShapeError(
                f"q has {self.rows} rows but seq_lens has {self.reqs} requests x q_len "
                f"{self.q_len} = {self.reqs * self.q_len}"
            )
        if self.rows < 1:
            raise ShapeError(f"q has 0 rows (seq_lens has {self.reqs} requests): a problem needs at least one row")
        if self.topk.shape[0] != hk or self.topk.shape[1] != self.rows:
            raise ShapeError(
                f"topk.shape = {self.topk.shape}, expected [Hkv={hk}, rows={self.rows}, TOPK]"
            )
        if not 1 <= self.TOPK <= TOPK_MAX:
            raise ShapeError(f"topk.shape[2] = TOPK = {self.TOPK}, must be in 1..{TOPK_MAX}")
        if self.block_table.shape[0] != self.reqs or self.block_table.shape[1] < 1:
            raise ShapeError(
                f"block_table.shape = {self.block_table.shape}, expected [reqs={self.reqs}, max_blocks >= 1]"
            )
        if self.pool.shape[1] != page_bytes(hk) or self.pool.shape[0] < 1:
            raise ShapeError(
                f"pool.shape = {self.pool.shape}, expected [num_pages >= 1, page_bytes({hk}) = {page_bytes(hk)}]"
            )

    def _validate_values(self) -> None:
        for name in ("sm_scale", "k_global_scale", "v_global_scale"):
            v = getattr(self, name)
            if not isinstance(v, (float, int, np.floating, np.integer)) or isinstance(v, (bool, np.bool_)):
                raise ScaleError(f"{name} = {v!r} ({_kind(v)}) is not a real number; pass a float, "
                                 f"a numpy scalar or a 0-d numpy array")
            try:
                f = float(v)
            except OverflowError:
                raise ScaleError(f"{name} = {v!r} is too large for a float") from None
            if not (math.isfinite(f) and f > 0):
                raise ScaleError(f"{name} = {v!r}, must be finite and > 0")
            with np.errstate(over="ignore", under="ignore"):
                v32 = np.float32(f)
            # Subnormal is fine here (a subnormal v_global_scale gives subnormal outputs, which
            # the reference computes and the comparison handles); sm_scale and k_global_scale
            # are bounded through c below.
            if not np.isfinite(v32) or v32 <= 0:
                raise ScaleError(f"{name} = {v!r} is not a positive finite float32 (float32 value {float(v32)!r})")
        # The seed's constant c = fp32(fp32(sm_scale * log2 e) * fp32(k_global_scale)) scales every
        # score; outside the normal float32 range the kernel's arithmetic (and the emulation of it)
        # loses the scores to zero or infinity.
        with np.errstate(over="ignore", under="ignore"):
            c = softmax_constant(float(self.sm_scale), float(self.k_global_scale))
        if not (np.isfinite(c) and c >= _F32_TINY):
            raise ScaleError(f"c = fp32(sm_scale * log2(e) * k_global_scale) = {float(c)!r} (sm_scale = "
                             f"{self.sm_scale!r}, k_global_scale = {self.k_global_scale!r}) is outside the normal "
                             f"float32 range [{_F32_TINY:.3g}, {_F32_MAX:.3g}]")
        bad = _first(~np.isfinite(self.q) | ~is_bf16(self.q))
        if bad is not None:
            i = bad
            raise QueryValueError(
                f"q{_idx(i)} = {self.q[tuple(i)]!r} is not a finite bfloat16 value"
            )
        self._check_magnitudes()
        bad = _first(self.seq_lens < 0)
        if bad is not None:
            i = bad[0]
            raise SeqLenError(f"seq_lens[{i}] = {self.seq_lens[i]} is negative")
        need = -(-self.seq_lens.astype(np.int64) // BLK)
        bad = _first(need > self.block_table.shape[1])
        if bad is not None:
            i = bad[0]
            raise SeqLenError(
                f"seq_lens[{i}] = {self.seq_lens[i]} needs {need[i]} blocks but block_table "
                f"has {self.block_table.shape[1]} columns"
            )
        bad = _first(self.topk < -1)
        if bad is not None:
            i = bad
            raise TopkIdError(f"topk{_idx(i)} = {self.topk[tuple(i)]}, ids must be >= -1")
        valid = self.valid_slots
        self._check_duplicates(valid)
        pages = self.slot_pages()
        bad = _first(valid & ((pages < 0) | (pages >= self.num_pages)))
        if bad is not None:
            h, r, s = bad
            req = r // self.q_len
            blk = int(self.topk[h, r, s])
            raise PageIndexError(
                f"topk[{h}, {r}, {s}] = {blk} maps through block_table[{req}, {blk}] = "
                f"{pages[h, r, s]}, outside [0, {self.num_pages}) pages"
            )
        self._check_nan_scales(valid, pages)

    def _check_magnitudes(self) -> None:
        # Every dequantised K or V value is at most E2M1_MAX * E4M3 max = 2688 in magnitude,
        # so |s * c| <= sum_d |q_d| * 2688 * c. A float32 kernel subtracts its running max m
        # (rounded to float32) from s * c and takes exp2: above 2**30 half an ulp of m exceeds
        # 64 and exp2 of the rounding error alone can overflow. The output, up to
        # 2688 * v_global_scale, must stay finite too.
        kv_max = E2M1_MAX * E4M3_MAX
        q1 = np.abs(self.q.astype(np.float64)).sum(axis=-1)
        r, h = np.unravel_index(int(np.argmax(q1)), q1.shape)
        c = float(softmax_constant(self.sm_scale, self.k_global_scale))
        reach = float(q1[r, h]) * kv_max * c
        if not reach <= _SCORE_LIMIT:
            raise ScaleError(
                f"scores times c can reach {reach:.3g} (q[{r}, {h}] has sum |q| = {float(q1[r, h]):.3g}, "
                f"|K| <= {kv_max:g}, c = {c:.3g}; sm_scale = {self.sm_scale!r}, "
                f"k_global_scale = {self.k_global_scale!r}): over 2**30, where a float32 softmax's exp2 overflows")
        out = kv_max * float(self.v_global_scale)
        if not out <= _F32_MAX:
            raise ScaleError(f"v_global_scale = {self.v_global_scale!r}: outputs can reach {kv_max:g} * "
                             f"v_global_scale = {out:.3g}, over the float32 maximum")

    def _check_duplicates(self, valid: np.ndarray) -> None:
        ids = np.where(valid, self.topk.astype(np.int64), -1)
        order = np.argsort(ids, axis=-1, kind="stable")
        srt = np.take_along_axis(ids, order, axis=-1)
        dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
        bad = _first(dup)
        if bad is not None:
            h, r, j = bad
            first, second = sorted((int(order[h, r, j]), int(order[h, r, j + 1])))
            raise DuplicateSlotError(
                f"topk[{h}, {r}, {first}] and topk[{h}, {r}, {second}] both select valid "
                f"block {int(srt[h, r, j])}"
            )

    def _check_nan_scales(self, valid: np.ndarray, pages: np.ndarray) -> None:
        hk = int(self.num_kv_heads)
        pairs = np.argwhere(read_slabs(valid, pages, self.num_pages))
        if not len(pairs):
            return
        views = page_views(self.pool, self.layout, hk)
        for kind, stored, linear in (
            ("K", views.k_scale, lambda a: a),
            ("V", views.v_scale, unswizzle_v_scales),
        ):
            if not _may_hold_nan_byte(stored, pairs):
                continue
            sc = linear(stored[pairs[:, 0], pairs[:, 1]])
            bad = _first((sc & 0x7F) == 0x7F)
            if bad is not None:
                p, t, s = bad
                raise NaNScaleByteError(
                    f"page {pairs[p, 0]}, KV head {pairs[p, 1]}: {kind} scale of token {t}, "
                    f"group {s} is 0x{int(sc[p, t, s]):02X} (E4M3 NaN); a valid slot reads this page"
                )


# The slot-list domains a kernel can declare (``Capabilities.slot_lists``; CONTRACT.md section 3.1).
SLOT_LISTS = ("any", "compacted")


def compacted_counts(problem: DecodeProblem) -> np.ndarray:
    """int64 ``[rows]``: ``n = min(TOPK, self_blk + 1)``, the slots a compacted
    list fills for each row (0 for a padding row)."""
    return np.minimum(problem.TOPK, problem.self_blocks + 1)


def outside_slot_domain(problem: DecodeProblem, slot_lists: str = "any") -> str | None:
    """None when ``problem.topk`` is inside the slot-list domain ``slot_lists``
    (one of ``SLOT_LISTS``), otherwise why, naming the first ``(head, row, slot)``
    outside it. ``any``: every list. ``compacted``: per KV head h and row r,
    with ``n = compacted_counts(problem)[r]``, slots ``0..n-1`` hold ``n``
    distinct ids in ``[0, self_blk]`` in ascending order and slots ``n..TOPK-1``
    hold -1. The problem's arrays must have the validator's shapes."""
    if slot_lists not in SLOT_LISTS:
        raise ValueError(f"slot_lists = {slot_lists!r}, expected one of {SLOT_LISTS}")
    if slot_lists == "any":
        return None
    t = problem.topk.astype(np.int64)
    sb = problem.self_blocks[None, :, None]
    n = compacted_counts(problem)[None, :, None]
    s = np.arange(problem.TOPK)[None, None, :]
    prev = np.concatenate([np.full(t.shape[:2] + (1,), -1, np.int64), t[..., :-1]], axis=-1)
    head = s < n
    bad = _first((head & ((t < 0) | (t > sb) | (t <= prev))) | (~head & (t != -1)))
    if bad is None:
        return None
    h, r, k = bad
    v, nr, sbr = int(t[h, r, k]), int(n[0, r, 0]), int(sb[0, r, 0])
    if k >= nr:
        return (f"topk[{h}, {r}, {k}] = {v}: compacted lists hold -1 from slot n = {nr} on "
                f"(row {r}: position {int(problem.positions[r])}, n = min(TOPK, self_blk + 1))")
    return (f"topk[{h}, {r}, {k}] = {v}: compacted lists hold {nr} distinct ascending ids in "
            f"[0, {sbr}] in slots 0..{nr - 1} (row {r}: position {int(problem.positions[r])})")


# The block-scale domains a kernel can declare (``Capabilities.scale_sign``; CONTRACT.md section 2.7).
SCALE_SIGNS = ("any", "non-negative")


def outside_scale_domain(problem: DecodeProblem, scale_sign: str = "any") -> str | None:
    """None when every E4M3 block-scale byte a row reads is inside the scale domain
    ``scale_sign`` (one of ``SCALE_SIGNS``), otherwise why, naming the first one
    outside it: K scales before V scales, each in (page, KV head, token, group)
    order, with its byte and value. ``any``: every byte. ``non-negative``: no
    byte with its sign bit set, except 0x80 (negative zero), the domain of a
    kernel that reads a scale byte as its magnitude.

    A row reads the scale bytes of the keys it sees (``key_mask``): a key it
    does not see enters neither its scores nor its output, whatever its
    scale's sign (a NaN byte, which would leak through ``0 * NaN``, is the
    validator's matter). 0x80 is inside: its magnitude, +0, equals its value,
    -0, so a magnitude reader computes the same operands (signed zeros at
    most, which compare equal). The problem's arrays must have the
    validator's shapes.
    """
    if scale_sign not in SCALE_SIGNS:
        raise ValueError(f"scale_sign = {scale_sign!r}, expected one of {SCALE_SIGNS}")
    if scale_sign == "any":
        return None
    hk = int(problem.num_kv_heads)
    valid, pages = problem.valid_slots, problem.slot_pages()
    heads = np.broadcast_to(np.arange(hk)[:, None, None], valid.shape)
    # seen[page, head, token]: some row sees that key.
    seen = np.zeros((problem.num_pages, hk, BLK), bool)
    np.logical_or.at(seen, (pages[valid], heads[valid]), problem.key_mask()[valid])
    pairs = np.argwhere(seen.any(axis=-1))
    if not len(pairs):
        return None
    views = page_views(problem.pool, problem.layout, hk)
    for kind, stored, linear in (("K", views.k_scale, lambda a: a), ("V", views.v_scale, unswizzle_v_scales)):
        sc = linear(stored[pairs[:, 0], pairs[:, 1]])
        bad = _first(((sc & 0x80) != 0) & (sc != 0x80) & seen[pairs[:, 0], pairs[:, 1]][..., None])
        if bad is not None:
            p, t, g = bad
            b = int(sc[p, t, g])
            return (f"page {pairs[p, 0]}, KV head {pairs[p, 1]}: {kind} scale of token {t}, group {g} is "
                    f"0x{b:02X} ({float(E4M3FN_TABLE[b])!r}), negative; scale_sign=non-negative reads "
                    f"scale bytes as magnitudes")
    return None
