"""The decode problem: one step's inputs, their derived facts, and the validator.

A kernel cannot report bad input, so the host must: ``DecodeProblem.validate``
raises a named ``ProblemError`` subclass, with the offending index and value,
for every violation the contract lists. ``-1`` slots, future-block slots and
requests with ``seq_len`` 0 are valid input.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .formats import is_bf16
from .paged_cache import BLK, D, LAYOUTS, page_bytes, page_views, unswizzle_v_scales

HG = 16
_SCALARS = ("num_kv_heads", "q_len", "sm_scale", "k_global_scale", "v_global_scale")


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
    numpy arrays; a 0-d array of a real numeric dtype is stored as the Python
    number it holds (``np.array(0.0125)`` becomes ``0.0125``).
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
            if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iuf":
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
        r = np.arange(self.rows)
        return self.seq_lens.astype(np.int64)[r // self.q_len] - self.q_len + r % self.q_len

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
        if self.topk.shape[0] != hk or self.topk.shape[1] != self.rows:
            raise ShapeError(
                f"topk.shape = {self.topk.shape}, expected [Hkv={hk}, rows={self.rows}, TOPK]"
            )
        if not 1 <= self.TOPK <= 64:
            raise ShapeError(f"topk.shape[2] = TOPK = {self.TOPK}, must be in 1..64")
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
            if not (np.isfinite(v) and v > 0):
                raise ScaleError(f"{name} = {v!r}, must be finite and > 0")
            with np.errstate(over="ignore"):
                v32 = np.float32(v)
            if not np.isfinite(v32) or v32 <= 0:
                raise ScaleError(f"{name} = {v!r} is not a positive finite float32")
        bad = _first(~np.isfinite(self.q) | ~is_bf16(self.q))
        if bad is not None:
            i = bad
            raise QueryValueError(
                f"q{_idx(i)} = {self.q[tuple(i)]!r} is not a finite bfloat16 value"
            )
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
        heads = np.broadcast_to(np.arange(hk)[:, None, None], valid.shape)
        read = np.zeros((self.num_pages, hk), bool)
        read[pages[valid], heads[valid]] = True
        pairs = np.argwhere(read)
        if not len(pairs):
            return
        views = page_views(self.pool, self.layout, hk)
        for kind, stored, linear in (
            ("K", views.k_scale, lambda a: a),
            ("V", views.v_scale, unswizzle_v_scales),
        ):
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
