"""The array seam the reference's arithmetic is written over: one text for numpy and torch.

``nvfp4_suite.reference.emulate`` and ``nvfp4_suite.reference.oracle`` take an
``ops`` object and do every array operation through it, so the numpy
reference (``NUMPY``, the default) and the torch reference
(``nvfp4_suite.kernels.torch.reference.TorchOps``, CPU or CUDA) run the same
arithmetic text. An ``Ops`` names only what the two libraries spell
differently (dtypes, casts, reductions, scatters, bit casts, where arrays
live); operations spelt alike (``matmul``, ``where``, ``maximum``,
``exp2``, ``abs``, ``swapaxes``, ``einsum``...) are looked up on the library
module itself (``ops.xp``). This module imports numpy only: torch is reached
through the ``ops`` a caller passes.

Rules the shared text keeps so that both libraries give the same bits:
every float32 result is one IEEE float32 operation, or a float64 result
rounded once to float32 (``ops.f32``); values are cast explicitly before
mixing float32 and float64 (numpy and torch promote 0-d operands differently).
"""

from __future__ import annotations

import numpy as np

from .arithmetic import OPERANDS, operand_formula
from .formats import E4M3FN_TABLE, bf16_round, e2m1_decode
from .paged_cache import BLK, DEQUANT_TABLE, V_SCALE_UNSWIZZLE, D, page_views, table_index, table_rows
from .problem import HG, DecodeProblem


class NumpyOps:
    """numpy as the reference's array namespace (the source of truth)."""

    xp = np
    float32, float64, int64 = np.float32, np.float64, np.int64
    # (pair, split) blocks per emulation step, float64 bytes per oracle chunk:
    # working sets small enough for the allocator to reuse (large fresh arrays
    # cost page faults); float64 bytes of K (or V) the oracle forms at once:
    # small enough to stay in a core's cache while BLAS reads them. The results
    # do not depend on them.
    step_blocks = 16
    chunk_bytes = 16 * 2**20
    block_bytes = 2**20

    # --- placement and conversion ------------------------------------------
    def asarray(self, a, dtype=None):
        """numpy array ``a`` in this namespace (on its device), optionally cast."""
        return np.asarray(a) if dtype is None else np.asarray(a).astype(dtype)

    def to_numpy(self, a) -> np.ndarray:
        """An array of this namespace as a numpy array."""
        return np.asarray(a)

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def full(self, shape, value, dtype):
        return np.full(shape, value, dtype)

    def arange(self, n: int):
        return np.arange(n)

    def f32(self, a):
        """Round (float64) ``a`` once to float32."""
        return np.asarray(a, np.float64).astype(np.float32)

    def f64(self, a):
        return np.asarray(a).astype(np.float64)

    def astype(self, a, dtype):
        return a.astype(dtype)

    # --- reductions and index operations -----------------------------------
    def amax(self, a, axis):
        return a.max(axis=axis)

    def sum(self, a, axis):
        return a.sum(axis=axis)

    def any(self, a) -> bool:
        return bool(a.any())

    def any_of(self, a, axis):
        return a.any(axis=axis)

    def nonzero(self, a):
        return np.nonzero(a)

    def scatter_max(self, target, index, values) -> None:
        """``target[index[i]] = max(target[index[i]], values[i])`` in place, repeats allowed."""
        np.maximum.at(target, index, values)

    def index_add(self, target, index, values) -> None:
        """``target[index[i]] += values[i]`` in place, repeats allowed."""
        np.add.at(target, index, values)

    def argsort_stable(self, a, axis: int):
        return np.argsort(a, axis=axis, kind="stable")

    def take_along_axis(self, a, index, axis: int):
        return np.take_along_axis(a, index, axis=axis)

    def table_index(self, data, scales):
        """Rows ``256 * scale + byte`` of a ``[65536, 2]`` byte table
        (``nvfp4_suite.reference.paged_cache.DEQUANT_TABLE``, ``operand_table``):
        uint8 data ``[..., 64]``, scale bytes ``[..., 8]`` (scale ``j`` for bytes
        ``8j .. 8j+7``) -> integer ``[..., 64]`` in this namespace's cheapest
        index dtype (uint16 in numpy)."""
        return table_index(data, scales)

    def pair_rows(self, table, index, out=None):
        """``table[index]``: the rows of a float64 ``[n, 2]`` table at integer ``index``
        ``[...]`` -> ``[..., 2]``, written into ``out`` (float64 ``[..., 2]``) when
        given. Every index must be a row of the table: numpy clamps one that is not
        (``paged_cache.table_rows``) where torch raises."""
        return table_rows(table, index, out)

    # --- bit patterns --------------------------------------------------------
    def bits32(self, a):
        """float32 ``a`` -> its bit patterns as int64 in ``[0, 2**32)``."""
        return a.view(np.uint32).astype(np.int64)

    def from_bits32(self, bits):
        """int64 bit patterns in ``[0, 2**32)`` -> float32 values."""
        return np.asarray(bits).astype(np.uint32).view(np.float32)

    def bits64(self, a):
        """float64 ``a`` -> its bit patterns as int64 (a view: writes go through)."""
        return a.view(np.int64)

    def from_bits64(self, bits):
        return bits.view(np.float64)

    def errstate(self):
        """A context in which overflow, invalid and division by zero are silent."""
        return np.errstate(all="ignore")

    # --- the problem's storage -----------------------------------------------
    def page_views(self, pool, layout: str, num_kv_heads: int):
        """K data, K scales, V data, V scales ``[pages, Hkv, 128, width]`` of ``pool``."""
        return tuple(page_views(pool, layout, num_kv_heads))


NUMPY = NumpyOps()


def applied_global_scales(problem: DecodeProblem, operands: str = "exact") -> tuple[float, float]:
    """``(k, v)``: the global scales a kernel whose operands are ``operands`` (one of
    ``nvfp4_suite.reference.arithmetic.OPERANDS``) applies to the logits (``k``, times
    ``sm_scale``) and to the output (``v``) after its dots: the problem's global
    scales for ``"exact"`` operands, 1.0 where the operands hold them already."""
    if operands not in OPERANDS:
        raise ValueError(f"operands = {operands!r}, expected one of {OPERANDS}")
    if operands == "exact":
        return problem.k_global_scale, problem.v_global_scale
    return 1.0, 1.0


def operand_table(operands: str, global_scale: float, what: str = "global_scale") -> np.ndarray:
    """float64 ``[256 * 256, 2]``: row ``256 * s + b`` holds the operands of data byte
    ``b`` (its low nibble's first) in a group whose E4M3 scale byte is ``s``, as
    ``operand_formula(operands)`` forms them with ``g = fp32(global_scale)``, for
    ``operands`` other than ``"exact"`` (whose table is
    ``nvfp4_suite.reference.paged_cache.DEQUANT_TABLE``).

    Every operand is a function of one (code, scale byte) pair, so a gather from
    this table is the whole rounding text, the same for every array namespace.
    The products are exact in float64 (E2M1: 2 significant bits, E4M3: 4, a
    float32 ``g``: 24, bf16: 8) before the one rounding the formula names.
    NaN scale bytes give NaN (as in ``DEQUANT_TABLE``). Raises ValueError naming
    ``what`` (the global scale's name), its value and the scale byte when a
    finite scale byte's operand overflows to infinity (a ``g`` near the float32
    maximum over 448 * 6): the declared kernel cannot hold that cache.
    """
    g = np.float64(np.float32(global_scale))
    e2m1 = e2m1_decode(np.arange(16, dtype=np.uint8))[None, :]
    e4m3 = E4M3FN_TABLE.astype(np.float64)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        if operands == "bf16-folded":
            vals = bf16_round(e2m1 * bf16_round((e4m3 * g).astype(np.float32)).astype(np.float64))
        elif operands == "bf16-dequant":
            vals = bf16_round((e2m1 * e4m3 * g).astype(np.float32))
        else:
            raise ValueError(f"operands = {operands!r}, expected one of {OPERANDS[1:]} (exact ones are "
                             f"DEQUANT_TABLE's)")
    over = np.isinf(vals).any(axis=1)
    if over.any():
        s = int(np.argmax(over))
        raise ValueError(f"{what} = {global_scale!r}: operands {operands} = {operand_formula(operands)} of "
                         f"scale byte 0x{s:02X} ({float(E4M3FN_TABLE[s]):g}) overflow to infinity")
    # [scale byte, code] -> [scale byte, data byte, nibble]: low nibble first.
    pairs = np.stack([vals[:, np.arange(256) & 0xF], vals[:, np.arange(256) >> 4]], axis=-1)
    return np.ascontiguousarray(pairs.reshape(256 * 256, 2).astype(np.float64))


class ProblemArrays:
    """A validated problem's arrays in one namespace, pair-major: the (KV head,
    row) pairs flattened, ``P = Hkv * rows``. Built in numpy and moved once.

    q: float64 ``[P, 16, 128]``; valid: bool ``[P, TOPK]``; pages: int64
    ``[P, TOPK]`` (0 where invalid); heads: int64 ``[P]``; mask: bool
    ``[P, TOPK, 128]`` (the keys of each slot's block the row sees); views: the
    pool's four storage views.
    """

    def __init__(self, problem: DecodeProblem, ops=NUMPY, pool=None):
        problem.validate()
        self.problem, self.ops = problem, ops
        hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
        self.P = P = hk * rows
        self.views = ops.page_views(problem.pool if pool is None else pool, problem.layout, hk)
        self.valid = ops.asarray(problem.valid_slots.reshape(P, topk))
        self.pages = ops.asarray(np.maximum(problem.slot_pages(), 0).reshape(P, topk).astype(np.int64))
        self.heads = ops.asarray(np.repeat(np.arange(hk, dtype=np.int64), rows))
        self.mask = ops.asarray(problem.key_mask().reshape(P, topk, BLK))
        q = problem.q.reshape(rows, hk, HG, D).transpose(1, 0, 2, 3).reshape(P, HG, D)
        self.q = ops.asarray(np.ascontiguousarray(q), np.float64)
        self._unswizzle = ops.asarray(V_SCALE_UNSWIZZLE.astype(np.int64))
        self._tables: dict[str, tuple] = {}

    def tables(self, operands: str = "exact") -> tuple:
        """float64 ``[65536, 2]`` tables ``(K's, V's)`` in this namespace, indexed by
        ``kv_index``: for ``"exact"`` operands ``DEQUANT_TABLE`` (``e2m1 * e4m3``
        without the global scales), otherwise the rounded operands of ``operands``
        (one of ``nvfp4_suite.reference.arithmetic.OPERANDS``) with the global
        scales folded in (``operand_table``)."""
        if operands not in self._tables:
            if operands == "exact":
                table = self.ops.asarray(DEQUANT_TABLE)
                self._tables[operands] = (table, table)
            else:
                p = self.problem
                self._tables[operands] = (
                    self.ops.asarray(operand_table(operands, p.k_global_scale, "k_global_scale")),
                    self.ops.asarray(operand_table(operands, p.v_global_scale, "v_global_scale")))
        return self._tables[operands]

    def kv_index(self, pg, hd):
        """``(K, V)`` rows of ``tables`` for the blocks of pages ``pg`` and KV heads
        ``hd`` (int64 ``[A]``): each ``[A, 128, 64]``, one row per cache byte
        (``ops.table_index``; V scales unswizzled)."""
        kd, ks, vd, vs = self.views
        a = pg.shape[0]
        v_scale = vs[pg, hd].reshape(a, BLK * 8)[:, self._unswizzle].reshape(a, BLK, 8)
        return self.ops.table_index(kd[pg, hd], ks[pg, hd]), self.ops.table_index(vd[pg, hd], v_scale)

    def kv(self, pg, hd, operands: str = "exact"):
        """float64 ``(K, V)``, each ``[A, 128, 128]``: the blocks of pages ``pg`` for KV
        heads ``hd`` (int64 ``[A]``) as the operands ``operands`` names (``tables``)."""
        k_table, v_table = self.tables(operands)
        k_index, v_index = self.kv_index(pg, hd)
        a = pg.shape[0]
        return (self.ops.pair_rows(k_table, k_index).reshape(a, BLK, D),
                self.ops.pair_rows(v_table, v_index).reshape(a, BLK, D))

    def back(self, x) -> np.ndarray:
        """``[P, 16, n]`` pair-major -> numpy ``[rows, H, n]``."""
        p = self.problem
        x = self.ops.to_numpy(x)
        return x.reshape(p.num_kv_heads, p.rows, HG, -1).transpose(1, 0, 2, 3).reshape(p.rows, p.H, -1)
