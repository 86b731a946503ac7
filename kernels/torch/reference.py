"""The seed-geometry emulation and the exact oracle in torch, for GPUs.

``nvfp4_suite.reference.emulate`` and ``nvfp4_suite.reference.oracle`` (numpy, the source of truth)
take minutes on a serving-size step; these run the same arithmetic on any
torch device, in the same order and the same precision (float64 where numpy
uses it, float32 elsewhere), so a check at serving size takes seconds.

What equals the numpy versions, and why:

- The emulation's float32 results (``out``, ``pre_round``, ``score_noise``)
  and ``abs_v_sum``: every float32 operation is the same IEEE operation in
  the same order; float64 -> float32 roundings round the same float64 values.
  Two steps could differ: a float64 dot product summed in another order
  (cuBLAS or MKL against numpy's BLAS) and the last bit of float64 ``exp2``.
  Both are exact or agree unless a float64 result lies within a few float64
  ulps of a float32 rounding boundary (about 2**-28 per rounding), as the
  golden catalog's note says of regeneration across machines.
- The float64 tolerance inputs (``magnitude``, ``flip_risk``) and the
  oracle's outputs: float64 sums over thousands of keys and float64 ``exp``
  differ in their last bits between BLAS and libm builds (numpy's own results
  move between machines the same way), so they agree to within float64
  rounding, not to the bit. What the verdict reads is the acceptance interval
  (``Interval.lo``, ``hi``, ``nearest``): bf16 roundings of those values,
  widened by one float64 ulp, equal unless an end lies within a few float64
  ulps of a bf16 rounding midpoint. tests/test_torch_reference.py checks the
  exact parts bit for bit and the float64 parts against the oracle's own
  noise bound (``nvfp4_suite.reference.compare`` term 5).

Every function takes a ``DecodeProblem`` (numpy), validates it, and returns
numpy arrays; ``device`` names the torch device (default: CUDA when torch sees
one, else the CPU); ``pool`` may pass the problem's pool already on that
device (uint8 ``[pages, page_bytes]``) so that a caller checking several
launches of one problem copies it once.
"""

from __future__ import annotations

import math

import numpy as np

from nvfp4_suite.reference import compare
from nvfp4_suite.reference.emulate import F32_EPS, SEED_GEOMETRY, Emulation, Geometry, kernel_constant
from nvfp4_suite.reference.paged_cache import BLK, D
from nvfp4_suite.reference.problem import HG, DecodeProblem

from .backend import _tables, _views

try:
    import torch
except ImportError:  # callers check ``available()``
    torch = None

# (pair, split) blocks per emulation step: bounds the float64 working set
# (about 1 MiB per block) on a GPU; the CPU takes fewer at a time.
_STEP_BLOCKS = {"cuda": 2048, "cpu": 64}
# Float64 bytes of one oracle chunk of (row, KV head) pairs.
_ORACLE_CHUNK_BYTES = {"cuda": 2 * 2**30, "cpu": 64 * 2**20}


def available() -> str | None:
    """None when torch imports, else the reason."""
    return None if torch is not None else "torch is not installed (pip install -e '.[torch]')"


def default_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


class _OnDevice:
    """A validated problem's tensors on one device: dequantisers, slot facts and the key mask."""

    def __init__(self, problem: DecodeProblem, device, pool=None):
        problem.validate()
        self.problem = problem
        dev = torch.device(device or default_device())
        hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
        if pool is None:
            pool = torch.from_numpy(problem.pool).to(dev)
        elif (tuple(pool.shape) != problem.pool.shape or pool.dtype != torch.uint8 or pool.device.type != dev.type
              or dev.index not in (None, pool.device.index)):
            raise ValueError(f"pool: expected uint8 {problem.pool.shape} on {dev}, got {pool.dtype} "
                             f"{tuple(pool.shape)} on {pool.device}")
        # "cuda" names the current device: work where the pool is.
        self.dev = dev = pool.device
        self.kd, self.ks, self.vd, self.vs = _views(pool, problem.layout, hk)
        pairs, scales, self.unsw = _tables(dev)
        self.pairs, self.scales = pairs.double(), scales.double()
        self.valid = torch.from_numpy(problem.valid_slots.reshape(hk * rows, topk)).to(dev)
        self.pages = torch.from_numpy(np.maximum(problem.slot_pages(), 0).reshape(hk * rows, topk)).to(dev)
        self.heads = torch.arange(hk, device=dev).repeat_interleave(rows)
        pos = torch.from_numpy(problem.positions).to(dev)
        ids = torch.from_numpy(problem.topk.astype(np.int64)).to(dev)
        self_blk = torch.where(pos >= 0, torch.div(pos, BLK, rounding_mode="floor"), -1)
        lim = torch.where(pos >= 0, pos % BLK, -1)[None, :, None, None]
        diag = (ids == self_blk[None, :, None])[..., None]
        off = torch.arange(BLK, device=dev)
        valid = torch.from_numpy(problem.valid_slots).to(dev)[..., None]
        # [Hkv*rows, TOPK, 128]: the keys of each slot's block a row sees.
        self.mask = (valid & (~diag | (off <= lim))).reshape(hk * rows, topk, BLK)
        self.q = (torch.from_numpy(problem.q).to(dev).double().reshape(rows, hk, HG, D)
                  .permute(1, 0, 2, 3).reshape(hk * rows, HG, D))

    def dequant(self, pg, hd, which: str):
        """float64 ``[A, 128, 128]``: K or V of pages ``pg`` and heads ``hd`` (int64 ``[A]``)."""
        if which == "k":
            data, sc = self.kd[pg, hd], self.ks[pg, hd]
        else:
            data = self.vd[pg, hd]
            sc = self.vs[pg, hd].reshape(len(pg), BLK * 8)[:, self.unsw].reshape(len(pg), BLK, 8)
        vals = self.pairs[data.long()].reshape(len(pg), BLK, 8, 16)
        # NaN scale bytes read as NaN (the torch backend's table holds 0 there).
        s = torch.where((sc & 0x7F) == 0x7F, math.nan, self.scales[sc.long()])
        return (vals * s[..., None]).reshape(len(pg), BLK, D)

    def back(self, x):
        """``[Hkv*rows, 16, n]`` pair-major -> numpy ``[rows, H, n]``."""
        p = self.problem
        hk, rows = p.num_kv_heads, p.rows
        return x.reshape(hk, rows, HG, -1).permute(1, 0, 2, 3).reshape(rows, hk * HG, -1).cpu().numpy()


def _exp2(x):
    """float32 ``2**x`` via float64, as ``nvfp4_suite.reference.emulate.exp2_f32``."""
    return torch.exp2(x.double()).float()


def _fma(a, c: float, b):
    """float32 ``a * c + b`` with one rounding, as ``nvfp4_suite.reference.emulate.fma_f32``."""
    x = a.double() * c
    y = b.double().expand_as(x)
    s = x + y
    bits = s.view(torch.int64)
    tie = (bits & 0x1FFFFFFF) == 0x10000000
    if bool(tie.any()):
        xb, yb, st = x[tie], y[tie], s[tie]
        bb = st - xb
        err = (xb - (st - bb)) + (yb - bb)
        step = torch.where(err == 0, 0, torch.where((err > 0) == (st > 0), 1, -1))
        s[tie] = (st.view(torch.int64) + step).view(torch.float64)
    return s.float()


def _as_f32(bits):
    """float32 values of int64 bit patterns in ``[0, 2**32)``."""
    return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)


def _u32(x):
    """The bit patterns of float32 ``x`` as int64 in ``[0, 2**32)``."""
    return x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def bf16_round(x):
    """float32 tensor -> nearest-even bf16 values, still float32 (``nvfp4_suite.reference.formats.bf16_round``)."""
    u = _u32(x)
    r = _as_f32((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000)
    return torch.where(torch.isnan(x), x, r)


def _bf16_ulp(x):
    """float64 one bf16 ulp at ``|x|`` (``nvfp4_suite.reference.formats.bf16_ulp``)."""
    a = x.double().abs()
    _, e = torch.frexp(a)
    return torch.where(a < 2.0**-126, 2.0**-133, torch.ldexp(torch.ones_like(a), e - 8))


def _midpoint_distance(p):
    """Relative distance from non-negative float32 ``p`` to its nearest bf16 rounding midpoint."""
    b = bf16_round(p)
    bits = _u32(b) >> 16
    up = _as_f32((bits + 1) << 16).double()
    down = _as_f32(torch.clamp(bits - 1, min=0) << 16).double()
    b64, p64 = b.double(), p.double()
    d = torch.minimum((p64 - (b64 + up) / 2).abs(), (p64 - (b64 + down) / 2).abs())
    return torch.where(p64 > 0, d / p64, math.inf)


def _split_schedule(valid, splits: int):
    """Slot order of each (pair, split), ``[P, S, T]`` (-1 past the end), and T;
    as ``nvfp4_suite.reference.emulate``: valid slots ranked in slot order, split z takes
    ranks ``[z*chunk, (z+1)*chunk)`` with ``chunk = ceil(n_valid / S)``."""
    P, K = valid.shape
    order = torch.sort((~valid).to(torch.uint8), dim=1, stable=True).indices
    n_valid = valid.sum(dim=1)
    chunk = -(-n_valid // splits)
    T = int(chunk.max()) if P else 0
    z = torch.arange(splits, device=valid.device)[None, :, None]
    t = torch.arange(max(T, 1), device=valid.device)[None, None, :]
    rank = z * chunk[:, None, None] + t
    live = (t < chunk[:, None, None]) & (rank < n_valid[:, None, None])
    slot = torch.gather(order, 1, torch.clamp(rank, max=K - 1).reshape(P, -1)).reshape(rank.shape)
    return torch.where(live, slot, -1), T


def _pairwise_sum(x):
    """Sum the last axis as ``(x0 + x1) + (x2 + x3)`` in float32 (power-of-two length)."""
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def emulate_details(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
                    device=None, pool=None) -> Emulation:
    """``nvfp4_suite.reference.emulate.emulate_details`` on a torch device: the same
    ``Emulation`` (numpy arrays, ``[rows, H, 128]``; score_noise ``[rows, H]``)."""
    if not isinstance(splits, (int, np.integer)) or splits < 1:
        raise ValueError(f"splits = {splits!r}, must be an integer >= 1")
    d = _OnDevice(problem, device, pool)
    dev, G = d.dev, geometry
    hk, rows = problem.num_kv_heads, problem.rows
    S, W, KPW, L = int(splits), G.streams, G.keys_per_max, G.lanes
    c = float(kernel_constant(problem))
    c32 = torch.tensor(c, dtype=torch.float32, device=dev)
    vg = np.float32(problem.v_global_scale)
    P = hk * rows
    slots, T = _split_schedule(d.valid, S)
    mask = d.mask.reshape(P, problem.TOPK, W, KPW)
    f32, f64 = torch.float32, torch.float64

    m = torch.full((P, S, W, HG), -math.inf, dtype=f32, device=dev)
    l = torch.zeros((P, S, W, HG, L), dtype=f32, device=dev)
    O = torch.zeros((P, S, W, HG, D), dtype=f32, device=dev)
    Oabs = torch.zeros((P, S, W, HG, D), dtype=f64, device=dev)
    Fabs = torch.zeros((P, S, W, HG, D), dtype=f64, device=dev)
    eta = torch.zeros((P, HG), dtype=f64, device=dev)
    vsum = torch.zeros((P, D), dtype=f64, device=dev)
    eta_scale = float(np.log(2) * c * 2 * D * F32_EPS)
    two_ln2 = float(2 * np.log(2))
    # Whole pairs per step (all their splits together), as in numpy: a pair's
    # score-noise bound at step t takes every split's block of that step.
    step_rows = max(1, _STEP_BLOCKS.get(dev.type, 64) // S)
    for t in range(T):
        for lo in range(0, P, step_rows):
            pi, zi = torch.nonzero(slots[lo:lo + step_rows, :, t] >= 0, as_tuple=True)
            if not len(pi):
                continue
            pi = pi + lo
            A = len(pi)
            sl = slots[pi, zi, t]
            pg, hd = d.pages[pi, sl], d.heads[pi]
            k = d.dequant(pg, hd, "k").reshape(A, W, KPW, D)
            v = d.dequant(pg, hd, "v").reshape(A, W, KPW, D)
            s = torch.matmul(d.q[pi][:, None], k.transpose(-1, -2)).float()  # [A, W, 16, KPW]
            vis = mask[pi, sl][:, :, None, :]
            s = torch.where(vis, s, -math.inf)
            sabs = torch.matmul(d.q[pi].abs()[:, None], k.abs().transpose(-1, -2))
            sabs_max = torch.where(vis, sabs, 0.0).amax(dim=(1, 3))  # [A, 16]
            eta.scatter_reduce_(0, pi[:, None].expand(-1, HG), sabs_max * eta_scale * (1 + 1e-6), reduce="amax")

            mo = m[pi, zi]
            m_new = torch.maximum(mo, s.amax(dim=-1) * c32)
            m_use = torch.where(m_new == -math.inf, 0.0, m_new)
            alpha = _exp2(mo - m_use)
            arg = _fma(s, c, -m_use[..., None])
            p = _exp2(arg)
            lanes = p.reshape(p.shape[:-1] + (L, G.keys_per_lane))
            ps = lanes[..., 0]
            for i in range(1, G.keys_per_lane):
                ps = ps + lanes[..., i]
            l[pi, zi] = l[pi, zi] * alpha[..., None] + ps
            pb = bf16_round(p) if G.p_bf16 else p
            pv = torch.matmul(pb.double(), v)
            O[pi, zi] = ((O[pi, zi] * alpha[..., None]).double() + pv).float()
            va = v.abs()
            vsum.index_add_(0, pi, torch.einsum("awk,awkd->ad", vis[:, :, 0, :].double(), va))
            a64 = alpha.double()[..., None]
            Oabs[pi, zi] = Oabs[pi, zi] * a64 + torch.matmul(pb.double(), va)
            if G.p_bf16:
                own = (two_ln2 * (arg.abs() + m_use.abs()[..., None]).double() + 8) * F32_EPS
                risk_eta = eta[pi][:, None, :, None] + own
                at_risk = (p > 0) & (_midpoint_distance(p) <= risk_eta)
                fw = torch.where(at_risk, _bf16_ulp(p), 0.0)
                Fabs[pi, zi] = Fabs[pi, zi] * a64 + torch.matmul(fw, va)
            m[pi, zi] = m_new

    # Stream (wave) merge.
    big = m[:, :, 0]
    for w in range(1, W):
        big = torch.maximum(big, m[:, :, w])
    big_raw = big
    big = torch.where(big == -math.inf, 0.0, big)
    wt = _exp2(m - big[:, :, None])  # [P, S, W, 16]
    l_lane = torch.zeros((P, S, HG, L), dtype=f32, device=dev)
    acc = torch.zeros((P, S, HG, D), dtype=f32, device=dev)
    acc_abs = torch.zeros((P, S, HG, D), dtype=f64, device=dev)
    f_abs = torch.zeros((P, S, HG, D), dtype=f64, device=dev)
    for w in range(W):
        wtw = wt[:, :, w, :, None]
        l_lane = l_lane + l[:, :, w] * wtw
        acc = acc + O[:, :, w] * wtw
        acc_abs = acc_abs + Oabs[:, :, w] * wtw.double()
        f_abs = f_abs + Fabs[:, :, w] * wtw.double()
    l_tot = _pairwise_sum(l_lane)  # [P, S, 16]

    if S == 1:
        l_all, acc_all, abs_all, f_all = l_tot[:, 0], acc[:, 0], acc_abs[:, 0], f_abs[:, 0]
    else:
        top = big_raw[:, 0]
        for z in range(1, S):
            top = torch.maximum(top, big_raw[:, z])
        top = torch.where(top == -math.inf, 0.0, top)
        ws = _exp2(big_raw - top[:, None])  # [P, S, 16]
        l_all = torch.zeros((P, HG), dtype=f32, device=dev)
        acc_all = torch.zeros((P, HG, D), dtype=f32, device=dev)
        abs_all = torch.zeros((P, HG, D), dtype=f64, device=dev)
        f_all = torch.zeros((P, HG, D), dtype=f64, device=dev)
        for z in range(S):
            wz = ws[:, z, :, None]
            l_all = l_all + l_tot[:, z] * ws[:, z]
            acc_all = acc_all + acc[:, z] * wz
            abs_all = abs_all + acc_abs[:, z] * wz.double()
            f_all = f_all + f_abs[:, z] * wz.double()
    live = l_all > 0
    safe = torch.where(live, l_all.double(), 1.0)
    inv = torch.where(live, (float(vg) / safe).float(), 0.0)
    inv64 = torch.where(live, float(vg) / safe, 0.0)
    pre = acc_all * inv[..., None]
    return Emulation(
        out=d.back(bf16_round(pre)),
        pre_round=d.back(pre),
        magnitude=d.back(abs_all * inv64[..., None]),
        flip_risk=d.back(f_all * inv64[..., None]),
        score_noise=d.back(eta[..., None].float())[..., 0],
        abs_v_sum=d.back((vsum * float(vg))[:, None, :].expand(P, HG, D)),
    )


def emulate(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
            device=None, pool=None) -> np.ndarray:
    """``nvfp4_suite.reference.emulate.emulate`` on a torch device: float32 ``[rows, H, 128]`` of bf16 values."""
    return emulate_details(problem, splits=splits, geometry=geometry, device=device, pool=pool).out


def oracle_details(problem: DecodeProblem, *, device=None, pool=None) -> tuple[np.ndarray, ...]:
    """``nvfp4_suite.reference.oracle.oracle_details`` on a torch device: ``(out, lse, magnitude,
    score_abs, abs_v_sum)``, float64 numpy arrays ``[rows, H, 128]`` (lse and
    score_abs ``[rows, H]``)."""
    d = _OnDevice(problem, device, pool)
    dev = d.dev
    hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
    P = hk * rows
    mask = d.mask.reshape(P, topk * BLK)
    kscale = problem.sm_scale * problem.k_global_scale
    vg = problem.v_global_scale
    f64 = torch.float64
    out = torch.zeros((P, HG, D), dtype=f64, device=dev)
    lse = torch.full((P, HG), -math.inf, dtype=f64, device=dev)
    mag = torch.zeros((P, HG, D), dtype=f64, device=dev)
    sabs = torch.zeros((P, HG), dtype=f64, device=dev)
    vsum = torch.zeros((P, D), dtype=f64, device=dev)
    live = torch.nonzero(mask.any(dim=1)).flatten()
    step = max(1, _ORACLE_CHUNK_BYTES.get(dev.type, 64 * 2**20) // (4 * topk * BLK * D * 8))
    for lo in range(0, len(live), step):
        sel = live[lo:lo + step]
        n = len(sel)
        pg = d.pages[sel].reshape(-1)
        hd = d.heads[sel][:, None].expand(n, topk).reshape(-1)
        dead = ~d.valid[sel].reshape(-1)[:, None, None]
        # Invalid slots were gathered from page 0, which may hold anything.
        k = torch.where(dead, 0.0, d.dequant(pg, hd, "k")).reshape(n, topk * BLK, D)
        v = torch.where(dead, 0.0, d.dequant(pg, hd, "v")).reshape(n, topk * BLK, D)
        s = torch.matmul(d.q[sel], k.transpose(1, 2)) * kscale
        see = mask[sel][:, None, :]
        s = torch.where(see, s, -math.inf)
        mx = s.amax(dim=-1, keepdim=True)
        p = torch.exp(s - mx)
        denom = p.sum(dim=-1, keepdim=True)
        out[sel] = torch.matmul(p, v) * (vg / denom)
        lse[sel] = (mx + torch.log(denom))[..., 0]
        mag[sel] = torch.matmul(p, v.abs()) * (vg / denom)
        sa = torch.matmul(d.q[sel].abs(), k.abs().transpose(1, 2))
        sabs[sel] = torch.where(see, sa, 0.0).amax(dim=-1)
        vsum[sel] = torch.matmul(see.double(), v.abs())[:, 0] * vg

    def back2(x):
        return x.reshape(hk, rows, HG).permute(1, 0, 2).reshape(rows, hk * HG).cpu().numpy()

    return (d.back(out), back2(lse), d.back(mag), back2(sabs), d.back(vsum[:, None, :].expand(P, HG, D)))


def sparse_decode(problem: DecodeProblem, *, device=None, pool=None) -> tuple[np.ndarray, np.ndarray]:
    """``nvfp4_suite.reference.oracle.sparse_decode`` on a torch device: ``(out, lse)`` float64."""
    r = oracle_details(problem, device=device, pool=pool)
    return r[0], r[1]


def interval_vs_emulation(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
                          device=None, pool=None) -> compare.Interval:
    """``nvfp4_suite.reference.compare.interval_vs_emulation`` from the torch emulation."""
    e = emulate_details(problem, splits=splits, geometry=geometry, device=device, pool=pool)
    return compare.interval_from_emulation(problem, e, splits=splits, geometry=geometry)


def interval_vs_oracle(problem: DecodeProblem, *, p_bf16: bool | None = None, geometry: Geometry | None = None,
                       splits: int = 1, device=None, pool=None) -> compare.Interval:
    """``nvfp4_suite.reference.compare.interval_vs_oracle`` from the torch oracle (p_bf16 None:
    as ``geometry`` says, False for the exact class)."""
    details = oracle_details(problem, device=device, pool=pool)
    return compare.interval_from_oracle(problem, details, p_bf16=p_bf16, geometry=geometry, splits=splits)


def backend_interval(problem: DecodeProblem, *, geometry: Geometry | None, splits: int = 1, device=None,
                     pool=None) -> tuple[compare.Interval, str]:
    """``nvfp4_suite.reference.compare.backend_interval`` with the torch references: ``(interval,
    against)`` for a backend of ``geometry`` (the exact oracle's for None,
    otherwise the emulation of that geometry at ``splits``)."""
    if geometry is None:
        return interval_vs_oracle(problem, p_bf16=False, device=device, pool=pool), "oracle"
    iv = interval_vs_emulation(problem, splits=splits, geometry=geometry, device=device, pool=pool)
    return iv, f"emulation({compare._geom_name(geometry)}, splits={splits})"


def compare_backend_output(problem: DecodeProblem, got, *, geometry: Geometry | None, splits: int = 1,
                           device=None, pool=None) -> compare.Report:
    """``nvfp4_suite.reference.compare.compare_backend_output`` with the torch references: the
    exact oracle for geometry None, otherwise the emulation of ``geometry``."""
    iv, against = backend_interval(problem, geometry=geometry, splits=splits, device=device, pool=pool)
    return compare.compare_with_interval(problem, got, iv, against)
