"""The exact oracle: sparse decode attention in float64.

Dequantised K and V values (``e2m1 * e4m3``) and bf16 queries are exact in
float64; the only error left is float64 summation, ~1e-16 relative, which is
what "exact" means here.
"""

from __future__ import annotations

import numpy as np

from .paged_cache import BLK, D, dequantize, page_views, unswizzle_v_scales
from .problem import HG, DecodeProblem, check_reference_budget

# Bound on the float64 working set of one chunk of (row, KV head) pairs.
_CHUNK_BYTES = 16 * 2**20


def sparse_decode(problem: DecodeProblem) -> tuple[np.ndarray, np.ndarray]:
    """Exact sparse decode attention.

    Validates the problem first (raises ``ProblemError``). Returns
    ``(out, lse)``: ``out`` float64 ``[rows, H, 128]`` with ``v_global_scale``
    applied and not rounded to bf16; ``lse`` float64 ``[rows, H]``, natural log
    of the sum of ``exp(s_k)`` with ``s_k = q.k * sm_scale * k_global``.
    A row that sees no key gets exact zeros and ``lse = -inf``.
    """
    r = _attend(problem, details=False)
    return r[0], r[1]


def oracle_details(problem: DecodeProblem) -> tuple[np.ndarray, ...]:
    """``sparse_decode`` plus the tolerance model's inputs.

    Returns ``(out, lse, magnitude, score_abs, abs_v_sum)``: out/lse as
    ``sparse_decode``; magnitude float64 ``[rows, H, 128]`` =
    ``sum_k p_k |v_k| * v_global / l``; score_abs float64 ``[rows, H]`` = the
    largest ``sum_d |q_d k_d|`` over the keys the row sees (0 when none);
    abs_v_sum float64 ``[rows, H, 128]`` = ``sum_k |v_k| * v_global`` over them.
    """
    return _attend(problem, details=True)


def _attend(problem: DecodeProblem, details: bool):
    problem.validate()
    hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
    # The key mask (one byte per key, twice), out, lse and the details' float64 arrays.
    check_reference_budget("the oracle", problem, hk * rows * (2 * topk * BLK + HG * (2 * D + 2) * 8 + D * 8))
    views = page_views(problem.pool, problem.layout, hk)
    mask = problem.key_mask()
    pages = np.maximum(problem.slot_pages(), 0)
    valid = problem.valid_slots.reshape(hk * rows, topk)
    # [Hkv, rows] pairs, flattened; each pair is one matrix problem of 16 heads.
    q = problem.q.astype(np.float64).reshape(rows, hk, HG, D).transpose(1, 0, 2, 3)
    q = q.reshape(hk * rows, HG, D)
    mask = mask.reshape(hk * rows, topk * BLK)
    pages = pages.reshape(hk * rows, topk)
    heads = np.repeat(np.arange(hk), rows)
    kscale = problem.sm_scale * problem.k_global_scale

    out = np.zeros((hk * rows, HG, D))
    lse = np.full((hk * rows, HG), -np.inf)
    if details:
        mag = np.zeros((hk * rows, HG, D))
        sabs = np.zeros((hk * rows, HG))
        vsum = np.zeros((hk * rows, D))
    live = np.flatnonzero(mask.any(axis=1))
    per_pair = 4 * topk * BLK * D * 8
    step = max(1, _CHUNK_BYTES // per_pair)
    for lo in range(0, len(live), step):
        sel = live[lo : lo + step]
        pg, hd = pages[sel], heads[sel][:, None]
        k = dequantize(views.k_data[pg, hd], views.k_scale[pg, hd], np.float64)
        v = dequantize(views.v_data[pg, hd], unswizzle_v_scales(views.v_scale[pg, hd]), np.float64)
        # Invalid slots were gathered from page 0, which may hold anything (even
        # NaN scales): their keys are masked, but 0 * NaN would still leak.
        dead = ~valid[sel]
        if dead.any():
            k[dead] = 0.0
            v[dead] = 0.0
        k = k.reshape(len(sel), topk * BLK, D)
        v = v.reshape(len(sel), topk * BLK, D)
        s = np.matmul(q[sel], k.transpose(0, 2, 1))
        s *= kscale
        sel_mask = mask[sel]
        if not sel_mask.all():
            np.copyto(s, -np.inf, where=~sel_mask[:, None, :])
        m = s.max(axis=-1, keepdims=True)
        s -= m
        p = np.exp(s, out=s)
        denom = p.sum(axis=-1, keepdims=True)
        o = np.matmul(p, v)
        o *= problem.v_global_scale / denom
        out[sel] = o
        lse[sel] = (m + np.log(denom))[..., 0]
        if details:
            mag[sel] = np.matmul(p, np.abs(v)) * (problem.v_global_scale / denom)
            sa = np.matmul(np.abs(q[sel]), np.abs(k).transpose(0, 2, 1))
            sabs[sel] = np.where(sel_mask[:, None, :], sa, 0.0).max(axis=-1)
            vsum[sel] = np.matmul(sel_mask[:, None, :].astype(np.float64), np.abs(v))[:, 0] * problem.v_global_scale
    out = out.reshape(hk, rows, HG, D).transpose(1, 0, 2, 3).reshape(rows, hk * HG, D)
    lse = lse.reshape(hk, rows, HG).transpose(1, 0, 2).reshape(rows, hk * HG)
    if not details:
        return out, lse
    mag = mag.reshape(hk, rows, HG, D).transpose(1, 0, 2, 3).reshape(rows, hk * HG, D)
    sabs = sabs.reshape(hk, rows, HG).transpose(1, 0, 2).reshape(rows, hk * HG)
    vsum = np.repeat(vsum.reshape(hk, rows, 1, D), HG, axis=2).transpose(1, 0, 2, 3).reshape(rows, hk * HG, D)
    return out, lse, mag, sabs, vsum
