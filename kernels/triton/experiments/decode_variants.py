"""Experiment record (issue 14): the Triton kernel with every variant measured on the
H200 behind constexpr knobs (DEQ 0 tables / 1 arithmetic / 2 fp8 conversion / 3 PTX
byte-permute tables, PREFETCH, KT 64 two-stream geometry, MAXNREG). Not a backend and
not imported by anything: kernels/triton/NOTES.md has the numbers; decode.py keeps the
variant that won. Its decode() takes deq=, prefetch=, kt=, maxnreg= (the sweep at that time passed them)."""


from __future__ import annotations

import functools
import os

import numpy as np

from reference import DecodeProblem, Geometry
from reference.emulate import softmax_constant
from reference.formats import E4M3FN_TABLE, e2m1_decode
from reference.paged_cache import page_bytes

try:
    import torch
    import triton
    import triton.language as tl
except ImportError:
    triton = None

# Measured on the H200: 8 warps are best up to ~64 programs per launch and within
# 5-10% of 4 warps above (kernels.bench --warps 4,8 prints the sweep).
NUM_WARPS = int(os.environ.get("NVFP4_TRITON_WARPS", "8"))
DEQ = int(os.environ.get("NVFP4_TRITON_DEQ", "1"))
PREFETCH = int(os.environ.get("NVFP4_TRITON_PREFETCH", "1"))
NUM_STAGES = int(os.environ.get("NVFP4_TRITON_STAGES", "1"))
KT = int(os.environ.get("NVFP4_TRITON_KT", "64"))
MAXNREG = int(os.environ.get("NVFP4_TRITON_MAXNREG", "0")) or None
# KT keys share a running max (one stream per KT-key slice of every block); l is a
# tree sum over those KT keys; P is rounded to bf16 before the PV product.
GEOMETRY = Geometry(keys_per_max=KT, keys_per_lane=KT, p_bf16=True)
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
    def _e2m1(n):
        """E2M1 codes (int32, 0..15) -> float32 value * 2**-14, exactly: the code's
        magnitude bits become an fp16 exponent and mantissa (code 1 an fp16 subnormal)."""
        h = ((n & 7) << 9) | ((n & 8) << 12)
        return h.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)

    @triton.jit
    def _e4m3(b):
        """E4M3FN bytes (int32) -> float32 value * 2**-8, exactly (0x7F/0xFF, NaN, come out
        finite: the validator rejects them in every slab a valid slot reads)."""
        h = ((b & 0x7F) << 7) | ((b & 0x80) << 8)
        return h.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)

    @triton.jit
    def _load_tile(pool_ptr, bt_ptr, req, bt_stride, blk, page_b, kvh, HKV, PLANAR: tl.constexpr, live, T0: tl.constexpr,
                   KT: tl.constexpr, MUTANT: tl.constexpr):
        """The raw bytes of keys T0 .. T0+KT-1 of one selected block: K and V data
        [KT, 64], scales [KT, 8] (V's unswizzled to linear order). ``live`` False:
        nothing is read (zeros)."""
        t = T0 + tl.arange(0, KT)
        jb = tl.arange(0, 64)
        sg = tl.arange(0, 8)
        page = tl.load(bt_ptr + req * bt_stride + blk, mask=live, other=0).to(tl.int64)
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
        kb = tl.load(pool_ptr + k_rows[:, None] + jb[None, :], mask=live, other=0)
        ksb = tl.load(pool_ptr + ks_rows[:, None] + sg[None, :], mask=live, other=0)
        vb = tl.load(pool_ptr + v_rows[:, None] + jb[None, :], mask=live, other=0)
        if MUTANT == 2:
            vs_off = t[:, None] * vs_row_bytes + sg[None, :]
        else:
            # Linear (t, s) is stored at row (t//4)*4 + s//2, column (s%2)*4 + t%4.
            r = (t[:, None] // 4) * 4 + sg[None, :] // 2
            cc = (sg[None, :] % 2) * 4 + t[:, None] % 4
            vs_off = r * vs_row_bytes + cc
        vsb = tl.load(pool_ptr + vs_base + vs_off, mask=live, other=0)
        return kb, ksb, vb, vsb

    # GPU-only dequantisation of 4 data bytes (8 E2M1 codes n0..n7, n_k in bits 4k..4k+3)
    # to 4 bf16 values times their group's scale: a byte permute picks the codes'
    # magnitudes as selectors into two 8-entry tables (low and high byte of the bf16
    # value), two more permutes interleave them into bf16 pairs, the sign bits are
    # shifted in, and one packed multiply applies the scale ($3 = {scale, scale}).
    # Each pair holds codes k and k+4, so one shift places both signs. Half A
    # yields (n0, n4), (n1, n5); half B (n2, n6), (n3, n7); joined, column p of every
    # 8 holds code 2 * (p % 4) + p // 4 (``_dperm``).
    _DEQ_ASM_HEAD = """{
    .reg .b32 s, lo, hi, t;
    prmt.b32 s, $2, 0, %s;
    and.b32 s, s, 0x7777;
    prmt.b32 lo, 0xC0800000, 0xC0804000, s;
    prmt.b32 hi, 0x3F3F3F00, 0x40404040, s;
    prmt.b32 $0, lo, hi, 0x6240;
    prmt.b32 $1, lo, hi, 0x7351;
    """
    _DEQ_ASM_A = tl.constexpr(_DEQ_ASM_HEAD % "0x0020" + """shl.b32 t, $2, 12;
    and.b32 t, t, 0x80008000;
    or.b32 $0, $0, t;
    shl.b32 t, $2, 8;
    and.b32 t, t, 0x80008000;
    or.b32 $1, $1, t;
    mul.rn.bf16x2 $0, $0, $3;
    mul.rn.bf16x2 $1, $1, $3;
    }""")
    _DEQ_ASM_B = tl.constexpr(_DEQ_ASM_HEAD % "0x0031" + """shl.b32 t, $2, 4;
    and.b32 t, t, 0x80008000;
    or.b32 $0, $0, t;
    and.b32 t, $2, 0x80008000;
    or.b32 $1, $1, t;
    mul.rn.bf16x2 $0, $0, $3;
    mul.rn.bf16x2 $1, $1, $3;
    }""")

    @triton.jit
    def _dperm(d, PERM: tl.constexpr):
        """The head-dim element that column d of a dequantised tile holds."""
        if PERM:
            return (d // 8) * 8 + 2 * (d % 4) + (d % 8) // 4
        else:
            return d

    @triton.jit
    def _dequant(b, sb, e2m1_ptr, e4m3_ptr, KT: tl.constexpr, DEQ: tl.constexpr, UPCAST: tl.constexpr):
        """Data bytes [KT, 64] and scale bytes [KT, 8] -> [KT, 128] exact values
        (bf16 on GPUs, float32 under the interpreter)."""
        if DEQ == 3 and not UPCAST:
            sc = (_e4m3(sb.to(tl.int32)) * 256.0).to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
            sc2 = tl.reshape(tl.broadcast_to((sc | (sc << 16))[:, :, None], [KT, 8, 8]), [KT, 64])
            xa = tl.inline_asm_elementwise(_DEQ_ASM_A, "=r,=r,r,r,r,r,r", [b, sc2], dtype=tl.bfloat16,
                                           is_pure=True, pack=4)
            xb = tl.inline_asm_elementwise(_DEQ_ASM_B, "=r,=r,r,r,r,r,r", [b, sc2], dtype=tl.bfloat16,
                                           is_pure=True, pack=4)
            return tl.reshape(tl.join(xa, xb), [KT, 128])
        b = b.to(tl.int32)
        sb = sb.to(tl.int32)
        if DEQ == 0:
            x = tl.reshape(tl.join(tl.load(e2m1_ptr + (b & 15)), tl.load(e2m1_ptr + (b >> 4))), [KT, 8, 16])
            sc = tl.load(e4m3_ptr + sb)[:, :, None]
        elif DEQ == 2 and not UPCAST:
            # GPU only: an E2M1 code moved into an E4M3 byte is its value * 2**-6;
            # the hardware's fp8 conversion then does the rest.
            lo = (((b & 7) << 2) | ((b & 8) << 4)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
            hi = (((b >> 2) & 0x1C) | (b & 0x80)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
            x = tl.reshape(tl.join(lo.to(tl.bfloat16), hi.to(tl.bfloat16)), [KT, 8, 16])
            sc = (sb.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32) * 64.0)[:, :, None]
        else:
            x = tl.reshape(tl.join(_e2m1(b & 15), _e2m1(b >> 4)), [KT, 8, 16])
            sc = (_e4m3(sb) * 4194304.0)[:, :, None]  # 2**22 undoes both offsets
        if not UPCAST:
            # e2m1 * e4m3 is exact in bf16: dequantise there, half the registers.
            x = x.to(tl.bfloat16)
            sc = sc.to(tl.bfloat16)
        return tl.reshape(x * sc, [KT, 128])

    @triton.jit
    def _tile_step(q, kb, ksb, vb, vsb, blk, self_blk, lim, c, m, l, acc, e2m1_ptr, e4m3_ptr, T0: tl.constexpr,
                   KT: tl.constexpr, DEQ: tl.constexpr, UPCAST: tl.constexpr, MUTANT: tl.constexpr):
        """Fold keys T0 .. T0+KT-1 of one block into their stream's online softmax."""
        t = T0 + tl.arange(0, KT)
        k = _dequant(kb, ksb, e2m1_ptr, e4m3_ptr, KT, DEQ, UPCAST)
        v = _dequant(vb, vsb, e2m1_ptr, e4m3_ptr, KT, DEQ, UPCAST)
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
        return m_new, l, acc

    @triton.jit
    def _decode_kernel(
        q_ptr, pool_ptr, topk_ptr, bt_ptr, seq_ptr, out_ptr, part_ptr, ml_ptr, e2m1_ptr, e4m3_ptr,
        rows, q_len, bt_stride, page_b, c, v_global, HKV, TOPK, SPLITS, PLANAR: tl.constexpr,
        SLOTS: tl.constexpr, UPCAST: tl.constexpr, MUTANT: tl.constexpr,
        DEQ: tl.constexpr, PREFETCH: tl.constexpr, KT: tl.constexpr,
    ):
        # Shapes and the layout are runtime values. Under the interpreter the slot loop
        # runs to the constexpr SLOTS (>= TOPK); on GPUs over this split's blocks only.
        # KT = 128: one running max per block. KT = 64: two streams (keys 0-63 and
        # 64-127 of every block), each with its own (m, l, acc), merged at the end.
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
        oki = ok_all.to(tl.int32)
        n_valid = tl.sum(oki, axis=0)
        chunk = (n_valid + SPLITS - 1) // SPLITS
        lo = z * chunk
        n_mine = tl.maximum(tl.minimum(chunk, n_valid - lo), 0)
        # Rank of each valid slot among the valid ones (slot order); block i of this
        # split is the valid slot of rank lo + i.
        sel = tl.where(ok_all, tl.cumsum(oki, axis=0) - oki, -1)

        PERM: tl.constexpr = DEQ == 3 and not UPCAST
        h = tl.arange(0, 16)
        d = _dperm(tl.arange(0, 128), PERM)
        q_off = (row * (HKV * 16) + kvh * 16 + h)[:, None] * 128 + d[None, :]
        q = tl.load(q_ptr + q_off)
        if UPCAST:
            q = q.to(tl.float32)

        m0 = tl.full([16], float("-inf"), tl.float32)
        l0 = tl.zeros([16], tl.float32)
        acc0 = tl.zeros([16, 128], tl.float32)
        m1 = m0
        l1 = l0
        acc1 = acc0
        T1: tl.constexpr = 64 if KT == 64 else 0
        if UPCAST:
            for i in range(SLOTS):
                if i < n_mine:
                    blk = tl.sum(tl.where(sel == lo + i, ids, 0), axis=0)
                    kb, ksb, vb, vsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, blk, page_b, kvh, HKV, PLANAR,
                                                  True, 0, KT, MUTANT)
                    m0, l0, acc0 = _tile_step(q, kb, ksb, vb, vsb, blk, self_blk, lim, c, m0, l0, acc0, e2m1_ptr,
                                              e4m3_ptr, 0, KT, DEQ, UPCAST, MUTANT)
                    if KT == 64:
                        kb, ksb, vb, vsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, blk, page_b, kvh, HKV,
                                                      PLANAR, True, T1, KT, MUTANT)
                        m1, l1, acc1 = _tile_step(q, kb, ksb, vb, vsb, blk, self_blk, lim, c, m1, l1, acc1,
                                                  e2m1_ptr, e4m3_ptr, T1, KT, DEQ, UPCAST, MUTANT)
        elif PREFETCH:
            # The next tile's bytes are requested before the current tile is computed.
            blk = tl.sum(tl.where(sel == lo, ids, 0), axis=0)
            kb, ksb, vb, vsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, blk, page_b, kvh, HKV, PLANAR,
                                          n_mine > 0, 0, KT, MUTANT)
            for i in range(n_mine):
                nblk = tl.sum(tl.where(sel == lo + i + 1, ids, 0), axis=0)
                if KT == 64:
                    hkb, hksb, hvb, hvsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, blk, page_b, kvh, HKV,
                                                      PLANAR, True, T1, KT, MUTANT)
                    m0, l0, acc0 = _tile_step(q, kb, ksb, vb, vsb, blk, self_blk, lim, c, m0, l0, acc0, e2m1_ptr,
                                              e4m3_ptr, 0, KT, DEQ, UPCAST, MUTANT)
                    kb, ksb, vb, vsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, nblk, page_b, kvh, HKV,
                                                  PLANAR, i + 1 < n_mine, 0, KT, MUTANT)
                    m1, l1, acc1 = _tile_step(q, hkb, hksb, hvb, hvsb, blk, self_blk, lim, c, m1, l1, acc1,
                                              e2m1_ptr, e4m3_ptr, T1, KT, DEQ, UPCAST, MUTANT)
                else:
                    nkb, nksb, nvb, nvsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, nblk, page_b, kvh, HKV,
                                                      PLANAR, i + 1 < n_mine, 0, KT, MUTANT)
                    m0, l0, acc0 = _tile_step(q, kb, ksb, vb, vsb, blk, self_blk, lim, c, m0, l0, acc0, e2m1_ptr,
                                              e4m3_ptr, 0, KT, DEQ, UPCAST, MUTANT)
                    kb, ksb, vb, vsb = nkb, nksb, nvb, nvsb
                blk = nblk
        else:
            for i in range(n_mine):
                blk = tl.sum(tl.where(sel == lo + i, ids, 0), axis=0)
                kb, ksb, vb, vsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, blk, page_b, kvh, HKV, PLANAR,
                                              True, 0, KT, MUTANT)
                m0, l0, acc0 = _tile_step(q, kb, ksb, vb, vsb, blk, self_blk, lim, c, m0, l0, acc0, e2m1_ptr,
                                          e4m3_ptr, 0, KT, DEQ, UPCAST, MUTANT)
                if KT == 64:
                    kb, ksb, vb, vsb = _load_tile(pool_ptr, bt_ptr, req, bt_stride, blk, page_b, kvh, HKV, PLANAR,
                                                  True, T1, KT, MUTANT)
                    m1, l1, acc1 = _tile_step(q, kb, ksb, vb, vsb, blk, self_blk, lim, c, m1, l1, acc1, e2m1_ptr,
                                              e4m3_ptr, T1, KT, DEQ, UPCAST, MUTANT)

        if KT == 64:
            # Stream merge (the emulation's wave merge): big = max m (0 if -inf),
            # weights exp2(m_w - big), sums in stream order.
            m = tl.maximum(m0, m1)
            big = tl.where(m == float("-inf"), 0.0, m)
            w0 = tl.exp2(m0 - big)
            w1 = tl.exp2(m1 - big)
            l = l0 * w0 + l1 * w1
            acc = acc0 * w0[:, None] + acc1 * w1[:, None]
        else:
            m = m0
            l = l0
            acc = acc0
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
           mutant: int = 0, out=None, num_warps: int = NUM_WARPS, deq: int | None = None,
           prefetch: int | None = None, num_stages: int | None = None, kt: int | None = None,
           maxnreg: int | None = None):
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
    kern = _decode_kernel[grid](
        q, pool, topk, block_table, seq_lens, out, part, ml, e2m1, e4m3,
        rows, q_len, block_table.shape[1], page_bytes(hk), c, float(np.float32(v_global_scale)),
        hk, tk, splits, int(layout == "planar"),
        SLOTS=tk if _interpret() else 64, UPCAST=_interpret(), MUTANT=mutant,
        DEQ=DEQ if deq is None else deq, PREFETCH=PREFETCH if prefetch is None else prefetch,
        KT=KT if kt is None else kt,
        num_warps=num_warps, num_stages=NUM_STAGES if num_stages is None else num_stages,
        **({} if _interpret() else {"maxnreg": MAXNREG if maxnreg is None else (maxnreg or None)}),
    )
    if splits > 1:
        _merge_kernel[(rows, hk)](part, ml, out, float(np.float32(v_global_scale)), hk, SPLITS=splits,
                                  UPCAST=_interpret(), MUTANT=mutant)
    decode.last_kernel = kern
    return out


class TritonBackend:
    """``triton`` backend: the kernel above, on CUDA/ROCm or the CPU interpreter."""

    name = "triton"
    geometry = GEOMETRY
    splits = tuple(range(1, 9))

    def __init__(self, mutant: str | None = None):
        if mutant is not None and mutant not in MUTANTS:
            raise ValueError(f"unknown mutant {mutant!r}; known: {sorted(MUTANTS)}")
        self.mutant = MUTANTS.get(mutant, 0)
        if mutant:
            self.name = f"triton-mutant:{mutant}"

    @property
    def interpreted(self) -> bool:
        """True when running on the CPU interpreter (slow: tests keep problems small)."""
        return _interpret()

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
