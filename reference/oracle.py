"""The exact oracle: sparse decode attention in float64.

Dequantised K and V values (``e2m1 * e4m3``), or the rounded operands a
kernel declares (``nvfp4_suite.reference.arithmetic.OPERANDS``: bf16 values),
and bf16 queries are exact in float64; the only error left is float64
summation, ~1e-16 relative, which is what "exact" means here.
"""

from __future__ import annotations

import math

import numpy as np

from .arrays import NUMPY, ProblemArrays, applied_global_scales
from .paged_cache import BLK, D
from .problem import HG, DecodeProblem, check_reference_budget


def sparse_decode(problem: DecodeProblem, *, ops=NUMPY, pool=None,
                  operands: str = "exact") -> tuple[np.ndarray, np.ndarray]:
    """Exact sparse decode attention.

    Validates the problem first (raises ``ProblemError``). Returns
    ``(out, lse)``: ``out`` float64 ``[rows, H, 128]`` with ``v_global_scale``
    applied and not rounded to bf16; ``lse`` float64 ``[rows, H]``, natural log
    of the sum of ``exp(s_k)`` with ``s_k = q.k * sm_scale * k_global``.
    A row that sees no key gets exact zeros and ``lse = -inf``. ops: the array
    namespace to compute in (``nvfp4_suite.reference.arrays``), pool: the
    problem's pool already there, or None; the results are numpy arrays.
    operands: the K and V operands (``nvfp4_suite.reference.arithmetic.OPERANDS``):
    other than ``"exact"``, k and v are the rounded operands, which hold the
    global scales, and ``k_global`` and ``v_global`` above are 1
    (``nvfp4_suite.reference.arrays.applied_global_scales``).
    """
    r = _attend(problem, False, ops, pool, operands)
    return r[0], r[1]


def oracle_details(problem: DecodeProblem, *, ops=NUMPY, pool=None,
                   operands: str = "exact") -> tuple[np.ndarray, ...]:
    """``sparse_decode`` plus the tolerance model's inputs.

    Returns ``(out, lse, magnitude, score_abs, abs_v_sum)``: out/lse as
    ``sparse_decode``; magnitude float64 ``[rows, H, 128]`` =
    ``sum_k p_k |v_k| * v_global / l``; score_abs float64 ``[rows, H]`` = the
    largest ``sum_d |q_d k_d|`` over the keys the row sees (0 when none);
    abs_v_sum float64 ``[rows, H, 128]`` = ``sum_k |v_k| * v_global`` over them.
    ops, pool, operands: as for ``sparse_decode`` (v and k the operands, v_global
    and k_global as there).
    """
    return _attend(problem, True, ops, pool, operands)


def pairs_within(slots: int, nbytes: int, arrays: int = 1) -> int:
    """How many (row, KV head) pairs with ``slots`` valid slots fit ``nbytes`` at
    ``arrays`` float64 ``[slots * 128, 128]`` arrays a pair, or 1. The oracle's
    blocks count one (the K or V formed at once, within ``ops.block_bytes``);
    its chunks four (within ``ops.chunk_bytes``: a chunk's table indices,
    scores and buffer take less, its buffer most where a block is the whole
    chunk, as on a GPU)."""
    return max(1, nbytes // (arrays * slots * BLK * D * 8))


def _groups(problem: DecodeProblem, chunk_bytes: int):
    """The (row, KV head) pairs that see a key, in chunks of equal valid-slot count.

    Yields ``(sel, slots)``: int64 numpy ``[n]`` pair indices (pair-major, as
    ``ProblemArrays``) and int64 ``[n, c]`` the slot indices of each pair's
    ``c`` valid slots in slot order. One count per chunk, so no chunk carries
    padding and a pair's arithmetic does not depend on the others'. A chunk
    holds ``pairs_within(c, chunk_bytes, 4)`` pairs.
    """
    valid = problem.valid_slots.reshape(-1, problem.TOPK)
    count = valid.sum(axis=1)
    # A stable sort of "not valid" puts each pair's valid slots first, in slot order.
    order = np.argsort(~valid, axis=1, kind="stable")
    for c in np.unique(count[count > 0]):
        members = np.flatnonzero(count == c)
        step = pairs_within(int(c), chunk_bytes, 4)
        for lo in range(0, len(members), step):
            sel = members[lo : lo + step]
            yield sel, order[sel, :c]


def _blocks(ops, table, index, buf, step: int, keys: int):
    """Yields ``(lo, hi, x)``: the operands of pairs ``lo:hi`` (``step`` a block),
    ``x`` float64 ``[hi - lo, keys, 128]`` gathered from ``table`` at their rows
    of ``index`` (``[n, keys * 64]``) into ``buf`` (float64 ``[>= step * keys * 64, 2]``),
    which the next block overwrites."""
    n, row = index.shape
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        into = buf[: (hi - lo) * row].reshape(hi - lo, row, 2)
        yield lo, hi, ops.pair_rows(table, index[lo:hi], out=into).reshape(hi - lo, keys, D)


def _attend(problem: DecodeProblem, details: bool, ops, pool, operands: str):
    xp = ops.xp
    # The key mask (one byte per key, twice), out, lse and the details' float64 arrays.
    check_reference_budget("the oracle", problem, problem.num_kv_heads * problem.rows
                           * (2 * problem.TOPK * BLK + HG * (2 * D + 2) * 8 + D * 8))
    a = ProblemArrays(problem, ops, pool)
    P = a.P
    f64 = ops.float64
    kg, vg = applied_global_scales(problem, operands)
    kscale = problem.sm_scale * kg
    k_table, v_table = a.tables(operands)

    out = ops.zeros((P, HG, D), f64)
    lse = ops.full((P, HG), -math.inf, f64)
    if details:
        mag = ops.zeros((P, HG, D), f64)
        sabs = ops.zeros((P, HG), f64)
        vsum = ops.zeros((P, D), f64)
    # Only valid slots are gathered: work scales with the keys a row sees, not with
    # TOPK. A valid slot reads a checked slab (no NaN scale) and always shows at
    # least its block's first key, so a pair with a valid slot sees a key.
    for sel_np, slots_np in _groups(problem, ops.chunk_bytes):
        n, c = slots_np.shape
        keys = c * BLK
        sel, slots = ops.asarray(sel_np), ops.asarray(slots_np)
        hd = xp.broadcast_to(a.heads[sel][:, None], (n, c)).reshape(-1)
        row = keys * D // 2  # cache bytes, so table rows, of a pair's K (or V)
        k_index, v_index = (i.reshape(n, row) for i in a.kv_index(a.pages[sel[:, None], slots].reshape(-1), hd))
        q = a.q[sel]
        # Per key: the row's own block is cut at its position even though its slot is valid.
        see = a.mask[sel[:, None], slots].reshape(n, 1, keys)
        cut = ops.any(~see)
        # K and V are formed a block of pairs at a time into one reused buffer, and
        # each block's products are taken while it is still in cache. In numpy every
        # pair's arithmetic is one BLAS call whichever block it falls in, so blocks
        # change no bit (torch promises its numpy agreement only to rounding).
        step = min(n, pairs_within(c, ops.block_bytes))
        buf = ops.empty((step * row, 2), f64)
        s = ops.empty((n, HG, keys), f64)
        if details:
            sa = ops.empty((n, HG, keys), f64)
            aq = xp.abs(q)
        for lo, hi, k in _blocks(ops, k_table, k_index, buf, step, keys):
            xp.matmul(q[lo:hi], xp.swapaxes(k, 1, 2), out=s[lo:hi])
            if details:
                xp.matmul(aq[lo:hi], xp.swapaxes(xp.abs(k, out=k), 1, 2), out=sa[lo:hi])
        s *= kscale
        if cut:
            s = xp.where(see, s, -math.inf)
        m = ops.amax(s, -1)[..., None]
        # In place (both libraries): the chunk's largest temporaries are reused.
        s -= m
        p = xp.exp(s, out=s)
        denom = ops.sum(p, -1)[..., None]
        o = ops.empty((n, HG, D), f64)
        if details:
            mag_c = ops.empty((n, HG, D), f64)
            vsum_c = ops.empty((n, 1, D), f64)
            seen = ops.f64(see)
        for lo, hi, v in _blocks(ops, v_table, v_index, buf, step, keys):
            xp.matmul(p[lo:hi], v, out=o[lo:hi])
            if details:
                # Exact, not merely bounds: the golden catalog stores intervals (and
                # ``magnitude``) computed from them (tolerance.py's module note).
                av = xp.abs(v, out=v)
                xp.matmul(p[lo:hi], av, out=mag_c[lo:hi])
                xp.matmul(seen[lo:hi], av, out=vsum_c[lo:hi])
        o *= vg / denom
        out[sel] = o
        lse[sel] = (m + xp.log(denom))[..., 0]
        if details:
            mag_c *= vg / denom
            mag[sel] = mag_c
            vsum[sel] = vsum_c[:, 0] * vg
            sabs[sel] = ops.amax(xp.where(see, sa, 0.0) if cut else sa, -1)
    lse = a.back(lse[..., None])[..., 0]
    if not details:
        return a.back(out), lse
    return (a.back(out), lse, a.back(mag), a.back(sabs[..., None])[..., 0],
            a.back(xp.broadcast_to(vsum[:, None, :], (P, HG, D))))
