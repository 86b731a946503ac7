"""Backend ``torch``: vectorised torch on any device, the exact class.

Gathers the selected pages, dequantises exactly (two 256-entry tables: E2M1
byte pairs and E4M3 scales; every ``e2m1 * e4m3`` is exact in float32),
computes the masked softmax in float32 (TF32 off) and rounds the output once
to bf16. ``splits`` is accepted for every count and does not change the
result: the softmax is computed whole.
"""

from __future__ import annotations

import functools

import numpy as np

from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.formats import E4M3FN_TABLE, e2m1_decode
from nvfp4_suite.reference.paged_cache import (
    BLK,
    GROUP,
    PARTS,
    ROW_SCALES,
    V_SCALE_UNSWIZZLE,
    D,
    PageLayout,
    unpack_e2m1,
)
from nvfp4_suite.reference.problem import HG

from ..protocol import GPU_LAUNCH_TIMEOUT_S, Capabilities

try:
    import torch
except ImportError:  # the backend reports itself unavailable
    torch = None


@functools.lru_cache(maxsize=None)
def _tables(device):
    """On ``device``: byte -> its two E2M1 values (float32 ``[256, 2]``), E4M3 byte ->
    value (float32, NaN bytes read as 0: the validator rejects them in read pages),
    and the V-scale unswizzle permutation."""
    pairs = unpack_e2m1(np.arange(256, dtype=np.uint8)[:, None])
    scales = np.nan_to_num(E4M3FN_TABLE, nan=0.0)
    return (torch.from_numpy(e2m1_decode(pairs)).to(device), torch.from_numpy(scales).to(device),
            torch.from_numpy(V_SCALE_UNSWIZZLE.astype(np.int64)).to(device))


def page_views(pool, layout: str, hk: int):
    """K data, K scales, V data, V scales of every page: ``[pages, Hkv, 128, width]``
    uint8 strided views of the torch pool (uint8 ``[pages, page_bytes]``) at
    ``PageLayout``'s offsets, as ``nvfp4_suite.reference.paged_cache.page_views``."""
    lay = PageLayout(layout, hk)
    page_stride, byte_stride = pool.stride()
    views = []
    for part in PARTS:
        r = lay.rows(part)
        views.append(pool.as_strided(
            (pool.shape[0], hk, BLK, r.width),
            (page_stride, r.head_stride * byte_stride, r.row_stride * byte_stride, byte_stride),
            pool.storage_offset() + r.offset * byte_stride))
    return views


def decode(q, pool, topk, block_table, seq_lens, *, layout: str, num_kv_heads: int, q_len: int,
           sm_scale: float, k_global_scale: float, v_global_scale: float):
    """Sparse NVFP4 decode on torch tensors of one device (no validation: see ``TorchBackend``).

    q: bf16 ``[rows, H, 128]``; pool: uint8 ``[pages, page_bytes]``; topk: int32
    ``[Hkv, rows, TOPK]``; block_table: int32 ``[reqs, max_blocks]``; seq_lens:
    int32 ``[reqs]``. Returns bf16 ``[rows, H, 128]``.
    """
    dev = q.device
    hk, rows, tk = topk.shape
    pairs, scales, unsw = _tables(dev)
    kd, ks, vd, vs = page_views(pool, layout, hk)
    r = torch.arange(rows, device=dev)
    pos = seq_lens.long()[r // q_len] - q_len + r % q_len
    self_blk = torch.where(pos >= 0, torch.div(pos, BLK, rounding_mode="floor"), torch.full_like(pos, -1))
    ids = topk.long()
    valid = (ids >= 0) & (ids <= self_blk[None, :, None])
    req = (r // q_len)[None, :, None].expand_as(ids)
    col = torch.where(valid, ids, torch.zeros_like(ids)).clamp(max=block_table.shape[1] - 1)
    pages = torch.where(valid, block_table.long()[req, col], torch.zeros_like(ids))
    heads = torch.arange(hk, device=dev)[:, None, None].expand_as(ids)

    def deq(data, sc):
        """uint8 codes [..., 64] and linear scales [..., 8] -> float32 [..., 128]."""
        vals = pairs[data.long()].reshape(*data.shape[:-1], ROW_SCALES, GROUP)
        return (vals * scales[sc.long()][..., None]).reshape(*data.shape[:-1], D)

    k = deq(kd[pages, heads], ks[pages, heads])  # [Hkv, rows, TOPK, 128, 128]
    vsl = vs[pages, heads].reshape(hk, rows, tk, BLK * ROW_SCALES)[..., unsw].reshape(hk, rows, tk, BLK, ROW_SCALES)
    v = deq(vd[pages, heads], vsl)
    # Invalid slots were gathered from page 0, which may hold anything.
    k = torch.where(valid[..., None, None], k, torch.zeros((), device=dev))
    v = torch.where(valid[..., None, None], v, torch.zeros((), device=dev))
    off = torch.arange(BLK, device=dev)
    diag = ids == self_blk[None, :, None]
    lim = torch.where(pos >= 0, pos % BLK, torch.full_like(pos, -1))[None, :, None, None]
    see = valid[..., None] & (~diag[..., None] | (off <= lim))  # [Hkv, rows, TOPK, 128]
    qf = q.float().reshape(rows, hk, HG, D).permute(1, 0, 2, 3)  # [Hkv, rows, 16, D]
    k = k.reshape(hk, rows, tk * BLK, D)
    v = v.reshape(hk, rows, tk * BLK, D)
    s = torch.matmul(qf, k.transpose(-1, -2)) * (sm_scale * k_global_scale)
    see = see.reshape(hk, rows, 1, tk * BLK)
    s = s.masked_fill(~see, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    o = torch.matmul(p, v)
    o = torch.where(denom > 0, o * (v_global_scale / denom.clamp(min=1e-38)), torch.zeros_like(o))
    return o.permute(1, 0, 2, 3).reshape(rows, hk * HG, D).to(torch.bfloat16)


class TorchBackend:
    """``torch`` backend: exact class, every split count, CPU or CUDA."""

    name = "torch"
    geometry = None
    capabilities = Capabilities(splits=tuple(range(1, 9)), targets=("cpu", "cuda", "rocm"),
                                launch_timeout_s=GPU_LAUNCH_TIMEOUT_S)

    def __init__(self, device: str | None = None):
        self.device = device

    def available(self) -> str | None:
        """None when torch imports, else the reason."""
        if torch is None:
            return "torch is not installed (pip install -e '.[torch]')"
        return None

    def _device(self):
        if self.device:
            return torch.device(self.device)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        """float32 ``[rows, H, 128]`` holding the bf16 output; validates first."""
        problem.validate()
        dev = self._device()
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            out = decode(
                torch.from_numpy(problem.q).to(dev).to(torch.bfloat16),
                torch.from_numpy(problem.pool).to(dev),
                torch.from_numpy(problem.topk).to(dev),
                torch.from_numpy(problem.block_table).to(dev),
                torch.from_numpy(problem.seq_lens).to(dev),
                layout=problem.layout, num_kv_heads=problem.num_kv_heads, q_len=problem.q_len,
                sm_scale=problem.sm_scale, k_global_scale=problem.k_global_scale,
                v_global_scale=problem.v_global_scale,
            )
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        return out.float().cpu().numpy()
