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
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from .formats import bf16_round, bf16_ulp
from .paged_cache import BLK, D, dequantize, page_views, unswizzle_v_scales
from .problem import HG, DecodeProblem, check_reference_budget

LOG2E = 1.4426950408889634
_CHUNK_BLOCKS = 16
F32_EPS = 2.0**-24  # unit roundoff of float32


@dataclasses.dataclass(frozen=True)
class Geometry:
    """How a kernel cuts one 128-key block and rounds P.

    keys_per_max: keys that share one running max (the seed: a wave's 32);
    128 // keys_per_max independent streams are merged at the end like waves.
    keys_per_lane: keys a lane sums into its partial ``l`` per block, in order
    (the seed: 8); ``keys_per_max // keys_per_lane`` lane partials per head,
    added pairwise at the end. p_bf16: P rounded to bf16 before the PV product.
    """

    keys_per_max: int = 32
    keys_per_lane: int = 8
    p_bf16: bool = True

    def __post_init__(self):
        if BLK % self.keys_per_max or self.keys_per_max % self.keys_per_lane:
            raise ValueError(f"Geometry {self}: 128 must divide into keys_per_max, and that into keys_per_lane")
        lanes = self.keys_per_max // self.keys_per_lane
        if lanes & (lanes - 1):
            raise ValueError(f"Geometry {self}: lanes per head ({lanes}) must be a power of two")

    @property
    def streams(self) -> int:
        """Independent running-max streams per 128-key block (the seed's 4 waves)."""
        return BLK // self.keys_per_max

    @property
    def lanes(self) -> int:
        """Lane partial sums of l per head and stream."""
        return self.keys_per_max // self.keys_per_lane


SEED_GEOMETRY = Geometry(32, 8, True)


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


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def exp2_f32(x: np.ndarray) -> np.ndarray:
    """float32 ``2**x`` for float32 x, via float64 (see the module note)."""
    with np.errstate(over="ignore"):
        return np.exp2(np.asarray(x, np.float64)).astype(np.float32)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 ``a * b + c`` with one rounding; a, b, c float32 (broadcast).

    ``a * b`` is exact in float64 (24 + 24 bits), so the float64 sum has one
    rounding; rounding that to float32 is right unless the float64 sum lies
    exactly on a float32 midpoint while being inexact. Only there is the
    exact error (TwoSum) used to break the tie in the right direction.
    """
    x = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    y = np.asarray(c, np.float64)
    with np.errstate(invalid="ignore"):
        s = np.asarray(x + y)
    bits = s.view(np.int64)
    # A float32 midpoint has, below float32's 24 bits, a 1 followed by 28 zeros.
    tie = (bits & 0x1FFFFFFF) == 0x10000000
    if tie.any():
        xb, yb = np.broadcast_to(x, s.shape)[tie], np.broadcast_to(y, s.shape)[tie]
        st = s[tie]
        bb = st - xb
        err = (xb - (st - bb)) + (yb - bb)
        step = np.where(err == 0, 0, np.where((err > 0) == (st > 0), 1, -1))
        s[tie] = (st.view(np.int64) + step).view(np.float64)
    return s.astype(np.float32)


def _bf16_midpoint_distance(p: np.ndarray) -> np.ndarray:
    """Relative distance from non-negative float32 ``p`` to the nearest bf16 rounding midpoint."""
    b = bf16_round(p)
    bits = (b.view(np.uint32) >> 16).astype(np.int64)
    up = ((bits + 1) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    down = ((np.maximum(bits - 1, 0)) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    b64 = b.astype(np.float64)
    p64 = p.astype(np.float64)
    d = np.minimum(np.abs(p64 - (b64 + up) / 2), np.abs(p64 - (b64 + down) / 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p64 > 0, d / p64, np.inf)


def softmax_constant(sm_scale: float, k_global_scale: float) -> np.float32:
    """The kernel's ``c = fp32(fp32(sm_scale * log2(e)) * k_global)``."""
    return np.float32(np.float32(sm_scale * LOG2E) * np.float32(k_global_scale))


def kernel_constant(problem: DecodeProblem) -> np.float32:
    """``softmax_constant`` of a problem's ``sm_scale`` and ``k_global_scale``."""
    return softmax_constant(problem.sm_scale, problem.k_global_scale)


def split_schedule(valid: np.ndarray, splits: int):
    """The slots each (pair, split) attends, in order: the contract's split schedule.

    valid: bool ``[P, TOPK]``; splits: S >= 1. Valid slots are ranked in slot
    order; split z takes ranks ``[z*chunk, (z+1)*chunk)`` with
    ``chunk = ceil(n_valid / S)``. Returns ``(slots, T)``: slots int64
    ``[P, S, max(T, 1)]`` (-1 past a split's end), T the longest chunk.
    """
    P, K = valid.shape
    order = np.argsort(~valid, axis=1, kind="stable")
    n_valid = valid.sum(axis=1)
    chunk = -(-n_valid // splits)
    T = int(chunk.max(initial=0))
    z = np.arange(splits)[None, :, None]
    t = np.arange(max(T, 1))[None, None, :]
    rank = z * chunk[:, None, None] + t
    live = (t < chunk[:, None, None]) & (rank < n_valid[:, None, None])
    slot = np.take_along_axis(order, np.minimum(rank, K - 1).reshape(P, -1), axis=1).reshape(rank.shape)
    return np.where(live, slot, -1), T


def _pairwise_sum(x: np.ndarray) -> np.ndarray:
    """Sum the last axis as ``(x0 + x1) + (x2 + x3)``, generalised to a power-of-two tree."""
    while x.shape[-1] > 1:
        x = _f32(x[..., 0::2] + x[..., 1::2].astype(np.float64))
    return x[..., 0]


def emulate_details(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY) -> Emulation:
    """The seed kernel's arithmetic with its tolerance inputs; see ``Emulation``.

    problem: a valid ``DecodeProblem`` (validated here). splits: >= 1.
    """
    return _emulate(problem, splits, geometry, details=True)


def _emulate(problem: DecodeProblem, splits: int, geometry: Geometry, details: bool, *,
             exp2=exp2_f32, p_round=bf16_round) -> Emulation:
    """The emulation; ``exp2`` and ``p_round`` (the rounding of P before the PV
    product, when the geometry rounds P) replace those two operations, for
    ``tests/mutants.py`` to model kernels that get them wrong; the output's own
    rounding is applied by callers of ``pre_round`` there."""
    if not isinstance(splits, (int, np.integer)) or splits < 1:
        raise ValueError(f"splits = {splits!r}, must be an integer >= 1")
    problem.validate()
    G = geometry
    hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
    S, W, KPW, L = int(splits), G.streams, G.keys_per_max, G.lanes
    views = page_views(problem.pool, problem.layout, hk)
    c = kernel_constant(problem)
    vg = np.float32(problem.v_global_scale)

    valid = problem.valid_slots.reshape(hk * rows, topk)
    mask = problem.key_mask().reshape(hk * rows, topk, W, KPW)
    pages = np.maximum(problem.slot_pages(), 0).reshape(hk * rows, topk)
    heads = np.repeat(np.arange(hk), rows)
    q = problem.q.reshape(rows, hk, HG, D).transpose(1, 0, 2, 3).reshape(hk * rows, HG, D).astype(np.float64)
    slots, T = split_schedule(valid, S)
    P = hk * rows
    # m, l (per lane), O: float32; Oabs, Fabs: float64 -- per (pair, split, stream, head).
    check_reference_budget(f"the emulation at splits={S}", problem, P * S * W * HG * (4 + 4 * L + D * 20))

    m = np.full((P, S, W, HG), -np.inf, np.float32)
    l = np.zeros((P, S, W, HG, L), np.float32)
    O = np.zeros((P, S, W, HG, D), np.float32)
    Oabs = np.zeros((P, S, W, HG, D))
    Fabs = np.zeros((P, S, W, HG, D))
    # Relative float32 noise bound of p for each (pair, head), grown as keys are seen.
    eta = np.zeros((P, HG))
    vsum = np.zeros((P, D))
    # Steps over a bounded set of (pair, split) blocks keep temporaries small
    # enough for the allocator to reuse (large fresh arrays cost page faults).
    step_rows = max(1, _CHUNK_BLOCKS // S)
    for t, lo in itertools.product(range(T), range(0, P, step_rows)):
        pi, zi = np.nonzero(slots[lo : lo + step_rows, :, t] >= 0)
        if not len(pi):
            continue
        pi = pi + lo
        sl = slots[pi, zi, t]
        pg, hd = pages[pi, sl], heads[pi]
        k = dequantize(views.k_data[pg, hd], views.k_scale[pg, hd], np.float64)
        v = dequantize(views.v_data[pg, hd], unswizzle_v_scales(views.v_scale[pg, hd]), np.float64)
        k = k.reshape(len(pi), W, KPW, D)
        v = v.reshape(len(pi), W, KPW, D)
        qq = q[pi][:, None]  # [A, 1, 16, D]
        s = _f32(np.matmul(qq, k.transpose(0, 1, 3, 2)))  # [A, W, 16, KPW]
        vis = mask[pi, sl][:, :, None, :]
        s = np.where(vis, s, np.float32(-np.inf))
        if details:
            # |s_kernel - s_emul| <= 128 * u * sum_d |q_d k_d| for any summation order;
            # max_s moves by the same, and both reach p through exp2(s*c - max*c).
            sabs = np.matmul(np.abs(q[pi])[:, None], np.abs(k).transpose(0, 1, 3, 2))
            sabs = np.where(vis, sabs, 0.0).max(axis=(1, 3))  # [A, 16]
            # (1 + 1e-6) covers the float64 rounding of this bound's own arithmetic.
            np.maximum.at(eta, pi, np.log(2) * float(c) * 2 * D * F32_EPS * sabs * (1 + 1e-6))

        mo = m[pi, zi]
        mx = s.max(axis=-1)
        with np.errstate(invalid="ignore"):
            m_new = np.maximum(mo, _f32(mx.astype(np.float64) * c))
        m_use = np.where(m_new == -np.inf, np.float32(0), m_new)
        alpha = exp2(mo - m_use)
        arg = fma_f32(s, c, -m_use[..., None])
        p = exp2(arg)  # [A, W, 16, KPW]
        lanes = p.reshape(p.shape[:-1] + (L, G.keys_per_lane))
        ps = lanes[..., 0]
        for i in range(1, G.keys_per_lane):
            ps = _f32(ps + lanes[..., i].astype(np.float64))
        l[pi, zi] = _f32(_f32(l[pi, zi] * alpha[..., None]) + ps.astype(np.float64))
        pb = p_round(p) if G.p_bf16 else p
        pv = np.matmul(pb.astype(np.float64), v)  # [A, W, 16, D]
        O[pi, zi] = _f32(_f32(O[pi, zi] * alpha[..., None]).astype(np.float64) + pv)
        if details:
            va = np.abs(v)
            np.add.at(vsum, pi, np.einsum("awk,awkd->ad", vis[:, :, 0, :].astype(np.float64), va))
            Oabs[pi, zi] = Oabs[pi, zi] * alpha[..., None] + np.matmul(pb.astype(np.float64), va)
            if G.p_bf16:
                # Per key, on top of the score noise: the roundings of max * c and of
                # the fma move the exponent by u * |value| on either side (2 ln2 u
                # relative in p per unit of exponent), and each side's exp2 adds up
                # to 2 u; 8 u covers the latter with room.
                with np.errstate(invalid="ignore"):
                    own = (2 * np.log(2) * (np.abs(arg) + np.abs(m_use)[..., None]) + 8) * F32_EPS
                risk_eta = eta[pi][:, None, :, None] + own
                at_risk = (p > 0) & (_bf16_midpoint_distance(p) <= risk_eta)
                fw = np.where(at_risk, bf16_ulp(p), 0.0)
                Fabs[pi, zi] = Fabs[pi, zi] * alpha[..., None] + np.matmul(fw, va)
        m[pi, zi] = m_new

    # Wave (stream) merge.
    big = m[:, :, 0]
    for w in range(1, W):
        big = np.maximum(big, m[:, :, w])
    big_raw = big
    big = np.where(big == -np.inf, np.float32(0), big)
    wt = exp2(m - big[:, :, None])  # [P, S, W, 16]
    l_lane = np.zeros((P, S, HG, L), np.float32)
    acc = np.zeros((P, S, HG, D), np.float32)
    acc_abs = np.zeros((P, S, HG, D))
    f_abs = np.zeros((P, S, HG, D))
    for w in range(W):
        l_lane = _f32(l_lane + _f32(l[:, :, w] * wt[:, :, w, :, None]).astype(np.float64))
        acc = _f32(acc + _f32(O[:, :, w] * wt[:, :, w, :, None]).astype(np.float64))
        acc_abs += Oabs[:, :, w] * wt[:, :, w, :, None]
        f_abs += Fabs[:, :, w] * wt[:, :, w, :, None]
    l_tot = _pairwise_sum(l_lane)  # [P, S, 16]

    if S == 1:
        l_all, acc_all, abs_all, f_all = l_tot[:, 0], acc[:, 0], acc_abs[:, 0], f_abs[:, 0]
    else:
        top = big_raw[:, 0]
        for z in range(1, S):
            top = np.maximum(top, big_raw[:, z])
        top = np.where(top == -np.inf, np.float32(0), top)
        ws = exp2(big_raw - top[:, None])  # [P, S, 16]
        l_all = np.zeros((P, HG), np.float32)
        acc_all = np.zeros((P, HG, D), np.float32)
        abs_all = np.zeros((P, HG, D))
        f_all = np.zeros((P, HG, D))
        for z in range(S):
            l_all = _f32(l_all + _f32(l_tot[:, z] * ws[:, z]).astype(np.float64))
            acc_all = _f32(acc_all + _f32(acc[:, z] * ws[:, z, :, None]).astype(np.float64))
            abs_all += acc_abs[:, z] * ws[:, z, :, None]
            f_all += f_abs[:, z] * ws[:, z, :, None]
    with np.errstate(divide="ignore"):
        inv = np.where(l_all > 0, _f32(vg / l_all.astype(np.float64)), np.float32(0))
        inv64 = np.where(l_all > 0, float(vg) / l_all.astype(np.float64), 0.0)
    pre = _f32(acc_all * inv[..., None])
    out = bf16_round(pre)

    def back(x):
        """[Hkv*rows, 16, n] pair-major -> [rows, H, n]."""
        return x.reshape(hk, rows, HG, -1).transpose(1, 0, 2, 3).reshape(rows, hk * HG, -1)

    return Emulation(
        out=back(out),
        pre_round=back(pre),
        magnitude=back(abs_all * inv64[..., None]),
        flip_risk=back(f_all * inv64[..., None]),
        score_noise=back(eta[..., None].astype(np.float32))[..., 0],
        abs_v_sum=back(np.broadcast_to(vsum[:, None, :] * float(vg), (P, HG, D))),
    )


def emulate(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY) -> np.ndarray:
    """The seed kernel's output: float32 ``[rows, H, 128]`` holding bf16 values.

    problem: a valid ``DecodeProblem``; splits: split-KV count >= 1; geometry:
    the implementation's ``Geometry`` (default the seed's: 4 waves x 32 keys,
    8 keys summed per lane, P rounded to bf16).
    """
    return _emulate(problem, splits, geometry, details=False).out
