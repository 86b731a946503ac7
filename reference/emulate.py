"""An emulation of the seed kernel's arithmetic, in numpy float32.

It reproduces the contract's steps 1-5, the wave merge and the split merge in
the stated order, so that it agrees with a correct kernel of the same
geometry to within float32 noise before the final bf16 rounding. Rounding
model:

- ``q . k`` and ``bf16(p) . v`` (the MFMAs): products are exact; the sum is
  formed in float64 and rounded once to float32 (the hardware sums in its own
  order; the difference is float32 noise, bounded in ``nvfp4_suite.reference.compare``).
- ``fma(s, c, -m)``: one rounding to float32, emulated exactly (float64
  sum rounded to odd, then to float32).
- ``exp2``: float64 ``exp2`` rounded to float32 (correctly rounded except
  within 2**-29 relative of a float32 midpoint; the hardware's v_exp_f32 is
  itself only 1 ulp accurate).
- every other operation: one float32 operation in the contract's order.

Alongside the output it returns two magnitudes per element that the
tolerance model needs (see ``Emulation``).

The text is written once over an array namespace (``ops``, see
``nvfp4_suite.reference.arrays``): numpy by default, torch on any device
through ``nvfp4_suite.kernels.torch.reference``, the same operations in the
same order.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from .arithmetic import SEED_GEOMETRY, Geometry
from .arrays import NUMPY, ProblemArrays
from .formats import bf16_rne_bits, bf16_ulp
from .paged_cache import D
from .problem import HG, DecodeProblem, check_reference_budget, softmax_constant

F32_EPS = 2.0**-24  # unit roundoff of float32


@dataclasses.dataclass(frozen=True)
class Emulation:
    """What ``emulate_details`` returns; every array is ``[rows, H, 128]``.

    out: float32 holding bf16 values, the kernel's output.
    pre_round: float32, the output before its final bf16 rounding.
    magnitude: float64 ``sum_k bf16(p_k) |v_k| * v_global / l`` through the same
      rescalings as the output (0 for rows that see nothing).
    flip_risk: float64, the same sum restricted to keys whose float32 ``p`` lies
      so close to a bf16 rounding midpoint that another correct kernel's float32
      noise could round it the other way, each weighted by one bf16 ulp of
      ``p`` instead of ``p`` (0 when P is not rounded).
    score_noise: float32 ``[rows, H]``: for each row and head, ``eta``, the
      relative float32 noise bound of ``p`` used for the flip test.
    abs_v_sum: float64 ``[rows, H, 128]``: ``sum_k |v_k| * v_global`` over the
      keys the row sees, unweighted (the scale of underflow errors).
    """

    out: np.ndarray
    pre_round: np.ndarray
    magnitude: np.ndarray
    flip_risk: np.ndarray
    score_noise: np.ndarray
    abs_v_sum: np.ndarray


def exp2_f32(x, ops=NUMPY):
    """float32 ``2**x`` for float32 x, via float64 (see the module note)."""
    with ops.errstate():
        return ops.f32(ops.xp.exp2(ops.f64(x)))


def fma_f32(a, b, c, ops=NUMPY):
    """float32 ``a * b + c`` with one rounding; a, b, c float32 (broadcast).

    ``a * b`` is exact in float64 (24 + 24 bits), so the float64 sum has one
    rounding; rounding that to float32 is right unless the float64 sum lies
    exactly on a float32 midpoint while being inexact. Only there is the
    exact error (TwoSum) used to break the tie in the right direction.
    """
    xp = ops.xp
    x = ops.f64(a) * ops.f64(b)
    y = ops.f64(c)
    with ops.errstate():
        s = xp.asarray(x + y)
    # A float32 midpoint has, below float32's 24 bits, a 1 followed by 28 zeros.
    tie = (ops.bits64(s) & 0x1FFFFFFF) == 0x10000000
    if ops.any(tie):
        xb, yb = xp.broadcast_to(x, s.shape)[tie], xp.broadcast_to(y, s.shape)[tie]
        st = s[tie]
        bb = st - xb
        err = (xb - (st - bb)) + (yb - bb)
        step = xp.where(err == 0, 0, xp.where((err > 0) == (st > 0), 1, -1))
        s[tie] = ops.from_bits64(ops.bits64(st) + step)
    return ops.f32(s)


def bf16_round_f32(x, ops=NUMPY):
    """float32 ``x`` -> its nearest-even bf16 values, still float32, NaN kept
    (``nvfp4_suite.reference.formats.bf16_round`` over ``ops``)."""
    r = ops.from_bits32(bf16_rne_bits(ops.bits32(x)))
    return ops.xp.where(ops.xp.isnan(x), x, r)


def _bf16_midpoint_distance(p, ops=NUMPY):
    """Relative distance from non-negative float32 ``p`` to the nearest bf16 rounding midpoint."""
    xp = ops.xp
    b = bf16_round_f32(p, ops)
    bits = ops.bits32(b) >> 16
    up = ops.f64(ops.from_bits32((bits + 1) << 16))
    down = ops.f64(ops.from_bits32(xp.where(bits > 0, bits - 1, 0) << 16))
    b64, p64 = ops.f64(b), ops.f64(p)
    d = xp.minimum(xp.abs(p64 - (b64 + up) / 2), xp.abs(p64 - (b64 + down) / 2))
    with ops.errstate():
        return xp.where(p64 > 0, d / p64, math.inf)


def kernel_constant(problem: DecodeProblem) -> np.float32:
    """``softmax_constant`` of a problem's ``sm_scale`` and ``k_global_scale``."""
    return softmax_constant(problem.sm_scale, problem.k_global_scale)


def split_schedule(valid, splits: int, ops=NUMPY, rule: str = "rank"):
    """The slots each (pair, split) attends, in order: the contract's split schedule.

    valid: bool ``[P, TOPK]``; splits: S >= 1; rule: ``"rank"`` (the valid
    slots ranked in slot order, split z taking ranks ``[z*chunk, (z+1)*chunk)``
    with ``chunk = ceil(n_valid / S)``) or ``"position"`` (split z taking the
    valid slots among positions ``[z*chunk, (z+1)*chunk)`` with
    ``chunk = ceil(TOPK / S)``), each split in slot order. Returns ``(slots, T)``:
    slots int64 ``[P, S, max(T, 1)]`` (-1 past a split's end), T the longest split.
    """
    xp = ops.xp
    P, K = valid.shape
    z = ops.arange(splits)[None, :, None]
    if rule == "rank":
        # Valid slots first, each group in slot order; split z starts at rank z * chunk.
        order = ops.argsort_stable(~valid, 1)
        n_valid = ops.sum(ops.astype(valid, ops.int64), 1)[:, None]
        chunk = -(-n_valid // splits)
        start = ops.arange(splits)[None, :] * chunk
        count = xp.where(n_valid - start < chunk, n_valid - start, chunk)
        count = xp.where(count > 0, count, 0)
    else:
        # Slots sorted by their split (invalid ones last), in slot order within it.
        chunk = -(-K // splits)
        split_of = ops.arange(K) // chunk
        order = ops.argsort_stable(xp.where(valid, split_of[None, :], splits), 1)
        mine = valid[:, None, :] & (split_of[None, None, :] == z)
        count = ops.sum(ops.astype(mine, ops.int64), 2)
        start = xp.cumsum(count, 1) - count
    T = int(ops.amax(ops.amax(count, 1), 0)) if P else 0
    t = ops.arange(max(T, 1))[None, None, :]
    rank = start[:, :, None] + t
    live = t < count[:, :, None]
    slot = ops.take_along_axis(order, xp.where(rank < K - 1, rank, K - 1).reshape(P, -1), 1).reshape(rank.shape)
    return xp.where(live, slot, -1), T


def _pairwise_sum(x):
    """Sum the last axis as ``(x0 + x1) + (x2 + x3)`` in float32, generalised to a power-of-two tree."""
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def emulate_details(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
                    ops=NUMPY, pool=None) -> Emulation:
    """The seed kernel's arithmetic with its tolerance inputs; see ``Emulation``.

    problem: a valid ``DecodeProblem`` (validated here). splits: >= 1. ops:
    the array namespace to compute in (``nvfp4_suite.reference.arrays``);
    pool: the problem's pool already in that namespace, or None. The result
    holds numpy arrays whatever ``ops`` is.
    """
    return _emulate(problem, splits, geometry, details=True, ops=ops, pool=pool)


def _emulate(problem: DecodeProblem, splits: int, geometry: Geometry, details: bool, *,
             exp2=None, p_round=None, ops=NUMPY, pool=None) -> Emulation:
    """The emulation; ``exp2`` and ``p_round`` (the rounding of P before the PV
    product, when the geometry rounds P; numpy functions of one float32 array)
    replace those two operations, for ``tests/mutants.py`` to model kernels
    that get them wrong; the output's own rounding is applied by callers of
    ``pre_round`` there."""
    if not isinstance(splits, (int, np.integer)) or splits < 1:
        raise ValueError(f"splits = {splits!r}, must be an integer >= 1")
    xp = ops.xp
    exp2 = exp2 or (lambda x: exp2_f32(x, ops))
    p_round = p_round or (lambda x: bf16_round_f32(x, ops))
    G = geometry
    # m, denom (per lane), numer: float32; Oabs, Fabs: float64 -- per (pair, split, stream, head).
    check_reference_budget(f"the emulation at splits={splits}", problem, problem.num_kv_heads * problem.rows
                           * int(splits) * G.streams * HG * (4 + 4 * G.lanes + D * 20))
    a = ProblemArrays(problem, ops, pool)
    topk = problem.TOPK
    S, W, KPW, L = int(splits), G.streams, G.keys_per_max, G.lanes
    c = float(kernel_constant(problem))
    vg = float(np.float32(problem.v_global_scale))
    f32, f64 = ops.float32, ops.float64
    P = a.P
    mask = a.mask.reshape(P, topk, W, KPW)
    slots, T = split_schedule(a.valid, S, ops, G.split_rule)

    m = ops.full((P, S, W, HG), -math.inf, f32)
    denom = ops.zeros((P, S, W, HG, L), f32)
    numer = ops.zeros((P, S, W, HG, D), f32)
    Oabs = ops.zeros((P, S, W, HG, D), f64)
    Fabs = ops.zeros((P, S, W, HG, D), f64)
    # Relative float32 noise bound of p for each (pair, head), grown as keys are seen.
    eta = ops.zeros((P, HG), f64)
    vsum = ops.zeros((P, D), f64)
    # (1 + 1e-6) covers the float64 rounding of this bound's own arithmetic.
    eta_scale = math.log(2) * c * 2 * D * F32_EPS
    # Steps over a bounded set of (pair, split) blocks keep temporaries small
    # enough for the allocator to reuse (large fresh arrays cost page faults).
    # Whole pairs per step (all their splits together): a pair's score-noise
    # bound at step t takes every split's block of that step.
    step_rows = max(1, ops.step_blocks // S)
    for t, lo in itertools.product(range(T), range(0, P, step_rows)):
        pi, zi = ops.nonzero(slots[lo : lo + step_rows, :, t] >= 0)
        if not len(pi):
            continue
        pi = pi + lo
        A = len(pi)
        sl = slots[pi, zi, t]
        k, v = a.kv(a.pages[pi, sl], a.heads[pi])
        k = k.reshape(A, W, KPW, D)
        v = v.reshape(A, W, KPW, D)
        qq = a.q[pi][:, None]  # [A, 1, 16, D]
        s = ops.f32(xp.matmul(qq, xp.swapaxes(k, -1, -2)))  # [A, W, 16, KPW]
        vis = mask[pi, sl][:, :, None, :]
        s = xp.where(vis, s, -math.inf)
        if details:
            # |s_kernel - s_emul| <= 128 * u * sum_d |q_d k_d| for any summation order;
            # max_s moves by the same, and both reach p through exp2(s*c - max*c).
            sabs = xp.matmul(xp.abs(qq), xp.swapaxes(xp.abs(k), -1, -2))
            sabs = ops.amax(xp.where(vis, sabs, 0.0), (1, 3))  # [A, 16]
            ops.scatter_max(eta, pi, sabs * eta_scale * (1 + 1e-6))

        mo = m[pi, zi]
        with ops.errstate():
            m_new = xp.maximum(mo, ops.f32(ops.f64(ops.amax(s, -1)) * c))
        m_use = xp.where(m_new == -math.inf, 0.0, m_new)
        alpha = exp2(mo - m_use)
        arg = fma_f32(s, c, -m_use[..., None], ops)
        p = exp2(arg)  # [A, W, 16, KPW]
        lanes = p.reshape(tuple(p.shape[:-1]) + (L, G.keys_per_lane))
        ps = lanes[..., 0]
        for i in range(1, G.keys_per_lane):
            ps = ps + lanes[..., i]
        denom[pi, zi] = denom[pi, zi] * alpha[..., None] + ps
        pb = p_round(p) if G.p_bf16 else p
        pv = xp.matmul(ops.f64(pb), v)  # [A, W, 16, D]
        numer[pi, zi] = ops.f32(ops.f64(numer[pi, zi] * alpha[..., None]) + pv)
        if details:
            va = xp.abs(v)
            ops.index_add(vsum, pi, xp.einsum("awk,awkd->ad", ops.f64(vis[:, :, 0, :]), va))
            a64 = ops.f64(alpha)[..., None]
            Oabs[pi, zi] = Oabs[pi, zi] * a64 + xp.matmul(ops.f64(pb), va)
            if G.p_bf16:
                # Per key, on top of the score noise: the roundings of max * c and of
                # the fma move the exponent by u * |value| on either side (2 ln2 u
                # relative in p per unit of exponent), and each side's exp2 adds up
                # to 2 u; 8 u covers the latter with room.
                with ops.errstate():
                    own = (2 * math.log(2) * ops.f64(xp.abs(arg) + xp.abs(m_use)[..., None]) + 8) * F32_EPS
                risk_eta = eta[pi][:, None, :, None] + own
                at_risk = (p > 0) & (_bf16_midpoint_distance(p, ops) <= risk_eta)
                fw = xp.where(at_risk, bf16_ulp(p, xp), 0.0)
                Fabs[pi, zi] = Fabs[pi, zi] * a64 + xp.matmul(fw, va)
        m[pi, zi] = m_new

    # Wave (stream) merge.
    big = m[:, :, 0]
    for w in range(1, W):
        big = xp.maximum(big, m[:, :, w])
    big_raw = big
    big = xp.where(big == -math.inf, 0.0, big)
    wt = exp2(m - big[:, :, None])  # [P, S, W, 16]
    l_lane = ops.zeros((P, S, HG, L), f32)
    acc = ops.zeros((P, S, HG, D), f32)
    acc_abs = ops.zeros((P, S, HG, D), f64)
    f_abs = ops.zeros((P, S, HG, D), f64)
    for w in range(W):
        wtw = wt[:, :, w, :, None]
        l_lane = l_lane + denom[:, :, w] * wtw
        acc = acc + numer[:, :, w] * wtw
        acc_abs = acc_abs + Oabs[:, :, w] * ops.f64(wtw)
        f_abs = f_abs + Fabs[:, :, w] * ops.f64(wtw)
    l_tot = _pairwise_sum(l_lane)  # [P, S, 16]

    if S == 1:
        l_all, acc_all, abs_all, f_all = l_tot[:, 0], acc[:, 0], acc_abs[:, 0], f_abs[:, 0]
    else:
        top = big_raw[:, 0]
        for z in range(1, S):
            top = xp.maximum(top, big_raw[:, z])
        top = xp.where(top == -math.inf, 0.0, top)
        ws = exp2(big_raw - top[:, None])  # [P, S, 16]
        l_all = ops.zeros((P, HG), f32)
        acc_all = ops.zeros((P, HG, D), f32)
        abs_all = ops.zeros((P, HG, D), f64)
        f_all = ops.zeros((P, HG, D), f64)
        for z in range(S):
            wz = ws[:, z, :, None]
            l_all = l_all + l_tot[:, z] * ws[:, z]
            acc_all = acc_all + acc[:, z] * wz
            abs_all = abs_all + acc_abs[:, z] * ops.f64(wz)
            f_all = f_all + f_abs[:, z] * ops.f64(wz)
    live = l_all > 0
    safe = xp.where(live, ops.f64(l_all), 1.0)
    inv = xp.where(live, ops.f32(vg / safe), 0.0)
    inv64 = xp.where(live, vg / safe, 0.0)
    pre = acc_all * inv[..., None]
    return Emulation(
        out=a.back(bf16_round_f32(pre, ops)),
        pre_round=a.back(pre),
        magnitude=a.back(abs_all * inv64[..., None]),
        flip_risk=a.back(f_all * inv64[..., None]),
        score_noise=a.back(ops.f32(eta)[..., None])[..., 0],
        abs_v_sum=a.back(xp.broadcast_to(vsum[:, None, :] * vg, (P, HG, D))),
    )


def emulate(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
            ops=NUMPY, pool=None) -> np.ndarray:
    """The seed kernel's output: float32 ``[rows, H, 128]`` holding bf16 values.

    problem: a valid ``DecodeProblem``; splits: split-KV count >= 1; geometry:
    the implementation's ``Geometry`` (default the seed's: 4 waves x 32 keys,
    8 keys summed per lane, P rounded to bf16); ops, pool: as for ``emulate_details``.
    """
    return _emulate(problem, splits, geometry, details=False, ops=ops, pool=pool).out
