"""Backend ``triton``: a portable Triton kernel for the NVFP4 sparse decode step.

One program per (row, KV head, split) walks the row's slots in order, reads
each selected page straight from the NVFP4 pool (either layout), dequantises
in registers and folds the block into an online softmax whose running max is
shared by all 128 keys of a block (``GEOMETRY``: keys_per_max 128, P rounded
to bf16 before the PV product). With splits > 1 each program stores its
partial ``(acc, m, l)`` and a second kernel merges them in split order, so no
ticket has to be reset between launches.

Under ``TRITON_INTERPRET=1`` (CPU) two things differ from GPUs (triton 3.6):
bf16 ``tl.dot`` operands multiply raw bits (triton-lang/triton#11584), so
there the operands are float32 (exact: every bf16 is a float32) with
``input_precision="ieee"``; and ``.to(tl.bfloat16)`` truncates instead of
rounding to nearest even, so there P and the output are rounded with integer
arithmetic on their bits first. On GPUs both stay the native bf16 paths.

``MUTANT`` (constexpr, 0 in the fast path) switches on one known bug, to show
that the suite catches it on real kernel arithmetic: 1 no causal cut,
2 V scales read linearly, 3 ``-1`` slots dereferenced, 4 split merge without
rescaling.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from reference import DecodeProblem, Geometry
from reference.emulate import softmax_constant
from reference.formats import E4M3FN_TABLE, e2m1_decode
from reference.paged_cache import page_bytes

from ..protocol import INTERPRETED_LIMITS, Capabilities

try:
    import torch
    import triton
    import triton.language as tl
except ImportError:
    triton = None

GEOMETRY = Geometry(keys_per_max=128, keys_per_lane=128, p_bf16=True)
# Measured on the H200: 8 warps are best up to ~64 programs per launch and within
# 5-10% of 4 warps above (kernels.bench --warps 4,8 prints the sweep).
NUM_WARPS = int(os.environ.get("NVFP4_TRITON_WARPS", "8"))
MUTANTS = {"causal": 1, "v_scale_linear": 2, "minus_one": 3, "merge_no_rescale": 4}


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


if triton is not None:

    @triton.jit
    def _bf16_rne(x):
        """float32 -> the nearest-even bf16 value, still float32 (interpreter path)."""
        u = x.to(tl.uint32, bitcast=True)
        r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
        return r.to(tl.float32, bitcast=True)

    @triton.jit
    def _decode_kernel(
        q_ptr, pool_ptr, topk_ptr, bt_ptr, seq_ptr, out_ptr, part_ptr, ml_ptr, e2m1_ptr, e4m3_ptr,
        rows, q_len, bt_stride, page_b, c, v_global, HKV, TOPK, SPLITS, PLANAR,
        SLOTS: tl.constexpr, UPCAST: tl.constexpr, MUTANT: tl.constexpr,
    ):
        # Shapes and the layout are runtime values; the slot loop's bound SLOTS
        # (>= TOPK) is a constexpr bucket, so few kernels are compiled.
        row = tl.program_id(0)
        kvh = tl.program_id(1)
        z = tl.program_id(2)
        req = row // q_len
        pos = tl.load(seq_ptr + req) - q_len + row % q_len
        self_blk = tl.where(pos >= 0, pos // 128, -1)
        lim = tl.where(pos >= 0, pos % 128, -1)
        slot_base = (kvh * rows + row) * TOPK
        j = tl.arange(0, 64)
        ids = tl.load(topk_ptr + slot_base + j, mask=j < TOPK, other=-1)
        ok_all = (ids >= 0) & (ids <= self_blk)
        if MUTANT == 3:
            ok_all = ok_all | ((ids == -1) & (pos >= 0))
        n_valid = tl.sum(ok_all.to(tl.int32), axis=0)
        chunk = (n_valid + SPLITS - 1) // SPLITS
        lo = z * chunk

        h = tl.arange(0, 16)
        d = tl.arange(0, 128)
        t = tl.arange(0, 128)
        jb = tl.arange(0, 64)
        sg = tl.arange(0, 8)
        q_off = (row * (HKV * 16) + kvh * 16 + h)[:, None] * 128 + d[None, :]
        q = tl.load(q_ptr + q_off)
        if UPCAST:
            q = q.to(tl.float32)

        m = tl.full([16], float("-inf"), tl.float32)
        l = tl.zeros([16], tl.float32)
        acc = tl.zeros([16, 128], tl.float32)
        rank = 0
        for i in range(SLOTS):
            blk = tl.load(topk_ptr + slot_base + i, mask=i < TOPK, other=-1)
            ok = (blk >= 0) & (blk <= self_blk)
            if MUTANT == 3:
                ok = ok | ((blk == -1) & (pos >= 0))
            mine = ok & (rank >= lo) & (rank < lo + chunk)
            rank += ok.to(tl.int32)
            if mine:
                page = tl.load(bt_ptr + req * bt_stride + blk).to(tl.int64)
                base = page * page_b
                if PLANAR != 0:
                    k_rows = base + (kvh * 128 + t) * 64
                    ks_rows = base + HKV * 128 * 64 + (kvh * 128 + t) * 8
                    v_rows = base + HKV * 128 * 72 + (kvh * 128 + t) * 64
                    vs_base = base + HKV * 128 * 136 + kvh * 128 * 8
                    vs_row_bytes = 8
                else:
                    k_rows = base + (kvh * 128 + t) * 72
                    ks_rows = k_rows + 64
                    v_rows = base + ((HKV + kvh) * 128 + t) * 72
                    vs_base = base + (HKV + kvh) * 128 * 72 + 64
                    vs_row_bytes = 72
                kb = tl.load(pool_ptr + k_rows[:, None] + jb[None, :]).to(tl.int32)
                ksb = tl.load(pool_ptr + ks_rows[:, None] + sg[None, :]).to(tl.int32)
                vb = tl.load(pool_ptr + v_rows[:, None] + jb[None, :]).to(tl.int32)
                if MUTANT == 2:
                    vs_off = t[:, None] * vs_row_bytes + sg[None, :]
                else:
                    # Linear (t, s) is stored at row (t//4)*4 + s//2, column (s%2)*4 + t%4.
                    r = (t[:, None] // 4) * 4 + sg[None, :] // 2
                    cc = (sg[None, :] % 2) * 4 + t[:, None] % 4
                    vs_off = r * vs_row_bytes + cc
                vsb = tl.load(pool_ptr + vs_base + vs_off).to(tl.int32)
                k = tl.reshape(tl.join(tl.load(e2m1_ptr + (kb & 15)), tl.load(e2m1_ptr + (kb >> 4))), [128, 8, 16])
                v = tl.reshape(tl.join(tl.load(e2m1_ptr + (vb & 15)), tl.load(e2m1_ptr + (vb >> 4))), [128, 8, 16])
                ksc = tl.load(e4m3_ptr + ksb)[:, :, None]
                vsc = tl.load(e4m3_ptr + vsb)[:, :, None]
                if not UPCAST:
                    # e2m1 * e4m3 is exact in bf16: dequantise there, half the registers.
                    k = k.to(tl.bfloat16)
                    v = v.to(tl.bfloat16)
                    ksc = ksc.to(tl.bfloat16)
                    vsc = vsc.to(tl.bfloat16)
                k = tl.reshape(k * ksc, [128, 128])
                v = tl.reshape(v * vsc, [128, 128])
                if UPCAST:
                    s = tl.dot(q, tl.trans(k), input_precision="ieee")
                else:
                    s = tl.dot(q, tl.trans(k.to(tl.bfloat16)))
                if MUTANT == 1:
                    vis = t >= 0
                else:
                    vis = (blk != self_blk) | (t <= lim)
                s = tl.where(vis[None, :], s, float("-inf"))
                mx = tl.max(s, axis=1)
                m_new = tl.maximum(m, mx * c)
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = tl.exp2(m - m_use)
                p = tl.exp2(tl.fma(s, c, -m_use[:, None]))
                l = l * alpha + tl.sum(p, axis=1)
                if UPCAST:
                    pv = tl.dot(_bf16_rne(p), v, input_precision="ieee")
                else:
                    pv = tl.dot(p.to(tl.bfloat16), v.to(tl.bfloat16))
                acc = acc * alpha[:, None] + pv
                m = m_new

        out_off = (row * (HKV * 16) + kvh * 16 + h)[:, None] * 128 + d[None, :]
        if SPLITS == 1:
            inv = tl.where(l > 0, v_global / tl.where(l > 0, l, 1.0), 0.0)
            res = acc * inv[:, None]
            if UPCAST:
                res = _bf16_rne(res)
            tl.store(out_ptr + out_off, res.to(tl.bfloat16))
        else:
            pid = (row * HKV + kvh) * SPLITS + z
            tl.store(part_ptr + (pid * 16 + h)[:, None] * 128 + d[None, :], acc)
            tl.store(ml_ptr + (pid * 16 + h) * 2, m)
            tl.store(ml_ptr + (pid * 16 + h) * 2 + 1, l)

    @triton.jit
    def _merge_kernel(part_ptr, ml_ptr, out_ptr, v_global, HKV, SPLITS: tl.constexpr,
                      UPCAST: tl.constexpr, MUTANT: tl.constexpr):
        row = tl.program_id(0)
        kvh = tl.program_id(1)
        h = tl.arange(0, 16)
        d = tl.arange(0, 128)
        pid0 = (row * HKV + kvh) * SPLITS
        top = tl.full([16], float("-inf"), tl.float32)
        for zz in range(SPLITS):
            top = tl.maximum(top, tl.load(ml_ptr + ((pid0 + zz) * 16 + h) * 2))
        top = tl.where(top == float("-inf"), 0.0, top)
        l_all = tl.zeros([16], tl.float32)
        acc = tl.zeros([16, 128], tl.float32)
        for zz in range(SPLITS):
            mz = tl.load(ml_ptr + ((pid0 + zz) * 16 + h) * 2)
            lz = tl.load(ml_ptr + ((pid0 + zz) * 16 + h) * 2 + 1)
            if MUTANT == 4:
                w = tl.where(mz == float("-inf"), 0.0, 1.0)
            else:
                w = tl.exp2(mz - top)
            l_all = l_all + lz * w
            acc = acc + tl.load(part_ptr + ((pid0 + zz) * 16 + h)[:, None] * 128 + d[None, :]) * w[:, None]
        inv = tl.where(l_all > 0, v_global / tl.where(l_all > 0, l_all, 1.0), 0.0)
        out_off = (row * (HKV * 16) + kvh * 16 + h)[:, None] * 128 + d[None, :]
        res = acc * inv[:, None]
        if UPCAST:
            res = _bf16_rne(res)
        tl.store(out_ptr + out_off, res.to(tl.bfloat16))


@functools.lru_cache(maxsize=None)
def _tables(device):
    """E2M1 code and E4M3 byte tables (float32) on ``device``; NaN bytes read as 0
    (the validator rejects them in every page a valid slot reads)."""
    e2m1 = e2m1_decode(np.arange(16, dtype=np.uint8))
    e4m3 = np.nan_to_num(E4M3FN_TABLE, nan=0.0)
    return torch.from_numpy(e2m1).to(device), torch.from_numpy(e4m3).to(device)


def decode(q, pool, topk, block_table, seq_lens, *, layout: str, num_kv_heads: int, q_len: int,
           sm_scale: float, k_global_scale: float, v_global_scale: float, splits: int = 1,
           mutant: int = 0, out=None, num_warps: int = NUM_WARPS):
    """Launch the Triton kernel on torch tensors of one device (no validation).

    q: bf16 ``[rows, H, 128]``; pool: uint8 ``[pages, page_bytes]``; topk: int32
    ``[Hkv, rows, TOPK]`` contiguous; block_table: int32 ``[reqs, max_blocks]``;
    seq_lens: int32 ``[reqs]``. Returns bf16 ``[rows, H, 128]`` (``out`` if given).
    """
    hk, rows, tk = topk.shape
    if not 1 <= tk <= 64:
        raise ValueError(f"TOPK = {tk}, the kernel supports 1..64")
    dev = q.device
    if out is None:
        out = torch.empty((rows, 16 * hk, 128), dtype=torch.bfloat16, device=dev)
    e2m1, e4m3 = _tables(dev)
    c = float(softmax_constant(sm_scale, k_global_scale))
    if splits > 1:
        part = torch.empty((rows * hk * splits * 16, 128), dtype=torch.float32, device=dev)
        ml = torch.empty((rows * hk * splits * 16, 2), dtype=torch.float32, device=dev)
    else:
        part = ml = out
    grid = (rows, hk, splits)
    _decode_kernel[grid](
        q, pool, topk, block_table, seq_lens, out, part, ml, e2m1, e4m3,
        rows, q_len, block_table.shape[1], page_bytes(hk), c, float(np.float32(v_global_scale)),
        hk, tk, splits, int(layout == "planar"),
        SLOTS=tk if _interpret() else max(16, 1 << (tk - 1).bit_length()), UPCAST=_interpret(), MUTANT=mutant,
        num_warps=num_warps,
    )
    if splits > 1:
        _merge_kernel[(rows, hk)](part, ml, out, float(np.float32(v_global_scale)), hk, SPLITS=splits,
                                  UPCAST=_interpret(), MUTANT=mutant)
    return out


class TritonBackend:
    """``triton`` backend: the kernel above, on CUDA/ROCm or the CPU interpreter."""

    name = "triton"
    geometry = GEOMETRY
    def __init__(self, mutant: str | None = None):
        if mutant is not None and mutant not in MUTANTS:
            raise ValueError(f"unknown mutant {mutant!r}; known: {sorted(MUTANTS)}")
        self.mutant = MUTANTS.get(mutant, 0)
        if mutant:
            self.name = f"triton-mutant:{mutant}"

    @property
    def capabilities(self) -> Capabilities:
        """Every layout and split count 1..8; on the CPU interpreter (slow) small generated problems."""
        if _interpret():
            return Capabilities(splits=tuple(range(1, 9)), targets=("cpu-interpreter",), limits=INTERPRETED_LIMITS)
        return Capabilities(splits=tuple(range(1, 9)), targets=("cuda", "rocm"))

    def available(self) -> str | None:
        """None with triton and a GPU (or TRITON_INTERPRET=1), else the reason."""
        if triton is None:
            return "triton or torch is not installed (pip install -e '.[triton]')"
        if not (_interpret() or torch.cuda.is_available()):
            return "no CUDA/ROCm device (set TRITON_INTERPRET=1 to run on the CPU interpreter)"
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        """float32 ``[rows, H, 128]`` holding the bf16 output; validates first."""
        problem.validate()
        dev = torch.device("cpu" if _interpret() else "cuda")
        out = decode(
            torch.from_numpy(problem.q).to(dev).to(torch.bfloat16),
            torch.from_numpy(problem.pool).to(dev),
            torch.from_numpy(np.ascontiguousarray(problem.topk)).to(dev),
            torch.from_numpy(problem.block_table).to(dev),
            torch.from_numpy(problem.seq_lens).to(dev),
            layout=problem.layout, num_kv_heads=problem.num_kv_heads, q_len=problem.q_len,
            sm_scale=problem.sm_scale, k_global_scale=problem.k_global_scale,
            v_global_scale=problem.v_global_scale, splits=splits, mutant=self.mutant,
        )
        return out.float().cpu().numpy()


def triton_mutant(name: str):
    """A factory for ``module:attr`` specs: ``kernels.triton.decode:causal`` etc."""
    return lambda: TritonBackend(name)


causal = triton_mutant("causal")
v_scale_linear = triton_mutant("v_scale_linear")
minus_one = triton_mutant("minus_one")
merge_no_rescale = triton_mutant("merge_no_rescale")
