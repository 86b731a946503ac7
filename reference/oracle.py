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


def _groups(problem: DecodeProblem, chunk_bytes: int):
    """The (row, KV head) pairs that see a key, in chunks of equal valid-slot count.

    Yields ``(sel, slots)``: int64 numpy ``[n]`` pair indices (pair-major, as
    ``ProblemArrays``) and int64 ``[n, c]`` the slot indices of each pair's
    ``c`` valid slots in slot order. One count per chunk, so no chunk carries
    padding and a pair's arithmetic does not depend on the others'. A chunk's
    float64 working set (K, V and their absolute values) stays within
    ``chunk_bytes``, or is one pair's.
    """
    valid = problem.valid_slots.reshape(-1, problem.TOPK)
    count = valid.sum(axis=1)
    # A stable sort of "not valid" puts each pair's valid slots first, in slot order.
    order = np.argsort(~valid, axis=1, kind="stable")
    for c in np.unique(count[count > 0]):
        members = np.flatnonzero(count == c)
        step = max(1, chunk_bytes // (4 * int(c) * BLK * D * 8))
        for lo in range(0, len(members), step):
            sel = members[lo : lo + step]
            yield sel, order[sel, :c]


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
        sel, slots = ops.asarray(sel_np), ops.asarray(slots_np)
        hd = xp.broadcast_to(a.heads[sel][:, None], (n, c)).reshape(-1)
        k, v = a.kv(a.pages[sel[:, None], slots].reshape(-1), hd, operands)
        k = k.reshape(n, c * BLK, D)
        v = v.reshape(n, c * BLK, D)
        q = a.q[sel]
        # Per key: the row's own block is cut at its position even though its slot is valid.
        see = a.mask[sel[:, None], slots].reshape(n, 1, c * BLK)
        s = xp.matmul(q, xp.swapaxes(k, 1, 2)) * kscale
        cut = ops.any(~see)
        if cut:
            s = xp.where(see, s, -math.inf)
        m = ops.amax(s, -1)[..., None]
        # In place (both libraries): the chunk's largest temporaries are reused.
        s -= m
        p = xp.exp(s, out=s)
        denom = ops.sum(p, -1)[..., None]
        o = xp.matmul(p, v)
        o *= vg / denom
        out[sel] = o
        lse[sel] = (m + xp.log(denom))[..., 0]
        if details:
            # Exact, not merely bounds: the golden catalog stores intervals (and
            # ``magnitude``) computed from them (tolerance.py's module note).
            av = xp.abs(v)
            mag[sel] = xp.matmul(p, av) * (vg / denom)
            vsum[sel] = xp.matmul(ops.f64(see), av)[:, 0] * vg
            sa = xp.matmul(xp.abs(q), xp.swapaxes(xp.abs(k), 1, 2))
            sabs[sel] = ops.amax(xp.where(see, sa, 0.0) if cut else sa, -1)
    lse = a.back(lse[..., None])[..., 0]
    if not details:
        return a.back(out), lse
    return (a.back(out), lse, a.back(mag), a.back(sabs[..., None])[..., 0],
            a.back(xp.broadcast_to(vsum[:, None, :], (P, HG, D))))
