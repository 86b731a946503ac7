"""Run 6 experiment (kernels/triton/NOTES.md): the decode kernel with the products
transposed so that Triton emits wgmma (HGMMA) with the dequantised tile as the
register A operand: S^T = K . Q^T (M = 128 keys, N = 16 heads) and O^T = V^T . P
(M = 64 byte columns per nibble tile, N = 16, K = 128 keys); one running max per
head over the whole block (Geometry(128, 128)). Constexpr switches: KP (K's
columns permuted so that a thread's bytes of a key are contiguous, Q^T's rows
alike), VB (V behind the bf16 boundary: V^T goes through shared memory as bf16),
VT 2 / 3 (V's bytes / 16-bit words loaded transposed and dequantised in the
operand layout), VP (V^T's rows permuted so a thread's two rows are one byte
pair), SC64 (K scales as one 8-byte word), SCR (block ids compacted through
global scratch instead of a masked sum per block), U2 (two blocks per trip).
Not the backend: ``python -m nvfp4_suite.kernels.triton.sweep --module
nvfp4_suite.kernels.triton.decode_t --variants "VB=1,KP=1"`` times it.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from nvfp4_suite.reference import DecodeProblem, Geometry
from nvfp4_suite.reference.emulate import softmax_constant
from nvfp4_suite.reference.paged_cache import page_bytes

from ..protocol import INTERPRETED_LIMITS, Capabilities

try:
    import torch
    import triton
    import triton.language as tl
except ImportError:
    triton = None

# One warp per stream (STREAMS below). Measured on the H200 (kernels/triton/NOTES.md,
# run 5, before the V boundary): 8 warps on the same 4 streams took 533 us at
# 256 x 4 x TOPK 16 against 302 with 4.
NUM_WARPS = int(os.environ.get("NVFP4_TRITON_WARPS", "4"))
# Software-pipeline stages of the block loop: 3 for unsplit launches, 1 for split
# ones (measured on the H200, kernels/triton/NOTES.md run 5: unsplit, 3 stages
# 7-16 % faster than 1; with 2 splits 1 stage 17 % faster at 64 x 4, 4 % slower at
# 256 x 4); NVFP4_TRITON_STAGES sets one value for both.
NUM_STAGES = int(os.environ["NVFP4_TRITON_STAGES"]) if os.environ.get("NVFP4_TRITON_STAGES") else None


def default_stages(splits: int) -> int:
    """``num_stages`` of a launch with ``splits`` splits (``NUM_STAGES`` when set)."""
    if NUM_STAGES is not None:
        return NUM_STAGES
    return 3 if splits == 1 else 1


# Four streams per block (keys 32w .. 32w + 31 of every block in stream w), each with
# its own running max, l a sum over its 32 keys and its own accumulator, merged at
# the end; P is rounded to bf16 before the PV product. One running max over all 128
# keys (the previous kernel) passed 17 barriers per block (kernels/triton/NOTES.md).
GEOMETRY = Geometry(keys_per_max=128, keys_per_lane=128, p_bf16=True)
# Streams per block, the batch size of every product (one warp each at NUM_WARPS 4).
STREAMS = 128 // GEOMETRY.keys_per_max
MUTANTS = {"causal": 1, "v_scale_linear": 2, "minus_one": 3, "merge_no_rescale": 4}
# Dequantisation on GPUs: 1 arithmetic per element (``_e2m1``, ``_e4m3``), 2 the
# packed PTX of ``_DEQ_PTX``. The interpreter always takes 1.
DEQ = int(os.environ.get("NVFP4_TRITON_DEQ", "2"))
# DEQ 2 dequantises to value * 2**-7 (see _DEQ_PTX); the softmax constant and
# v_global_scale are multiplied by 2**7 to match, which changes no rounding:
# s * c and acc * (v_global / l) are the same real numbers.
DEQ2_SHIFT = 128.0


def _deq_ptx_pair(sel: str, lo: str, hi: str, scale: str) -> str:
    """The PTX for two of the four bytes (``prmt`` selector ``sel``): low nibbles
    to ``lo``, high to ``hi``, both times the scales ``scale``."""
    return (f"prmt.b32 t, $4, 0, {sel};\n"
            + "".join(f"and.b32 u, t, {mask};\nmul.lo.u32 u, u, {mul};\nand.b32 u, u, 0x81C081C0;\n"
                      f"mul.rn.bf16x2 {out}, u, {scale};\n"
                      for mask, mul, out in (("0x000F000F", 4160, lo), ("0x00F000F0", 260, hi))))


# Four data bytes (8 E2M1 codes, one 32-bit register) and their four scales (two
# bf16x2 registers, value * 2**119) -> the low-nibble values of the four bytes
# ($0, $1) and the high-nibble ones ($2, $3), bf16x2. For bytes b0, b1: prmt
# spreads them to the two 16-bit lanes; a nibble c, masked, times 64 * 65 lands
# its magnitude bits at bf16 bits 6-8 and its sign at bit 15 (the bits do not
# overlap): the bf16 value of code * 2**-126 (code 1, 0.5, is the subnormal
# 2**-127). One multiply by the scale gives value * 2**-7, exactly (at most 6
# significant bits, normal: 2**-17 .. 21). High nibbles: mask 0xF0, times 4 * 65.
_DEQ_PTX_TEXT = ("{\n.reg .b32 t, u;\n" + _deq_ptx_pair("0x4140", "$0", "$2", "$5")
                 + _deq_ptx_pair("0x4342", "$1", "$3", "$6") + "}")
# A bf16 value move the compiler cannot look through (not pure). Triton picks a
# product's operand layout (kWidth) from the narrowest type its operands were
# loaded as; through the dequantisation V's is uint8, which gave the PV product
# kWidth 8: P then went through shared memory and V's transposing ldmatrix had
# 4-way bank conflicts. Behind this move V counts as bf16 (kWidth 2): P stays in
# registers (the accumulator layout is the operand layout) and the conflicts go.
_BF16_BOUNDARY_TEXT = "mov.b32 $0, $1;"


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


if triton is not None:
    _DEQ_PTX = tl.constexpr(_DEQ_PTX_TEXT)
    _BF16_BOUNDARY = tl.constexpr(_BF16_BOUNDARY_TEXT)
    _DEQ_W_PTX = tl.constexpr("{\n.reg .b32 t, u;\n" + _deq_ptx_pair("0x4240", "$0", "$1", "$5")
                              + _deq_ptx_pair("0x4341", "$2", "$3", "$5") + "}")

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
    def _load_tile_t(pool_ptr, page, page_b, kvh, HKV, PLANAR: tl.constexpr, MUTANT: tl.constexpr,
                     SC64: tl.constexpr, VT: tl.constexpr):
        """The raw bytes of the 128 keys of one page, key t at row t: K and V data
        [128, 64], scales [128, 8] (V's unswizzled to linear order)."""
        t = tl.arange(0, 128)[:, None]
        jb = tl.arange(0, 64)[None, :]
        sg = tl.arange(0, 8)[None, :]
        base = page * page_b
        if PLANAR:
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
        kb = tl.load(pool_ptr + k_rows + jb)
        if SC64:
            w = tl.load((pool_ptr + ks_rows).to(tl.pointer_type(tl.uint64), bitcast=True))
            ksb = ((w >> (sg * 8).to(tl.uint64)) & 0xFF).to(tl.uint8)
        else:
            ksb = tl.load(pool_ptr + ks_rows + sg)
        if VT == 2:
            vb = tl.load(pool_ptr + tl.trans(v_rows) + tl.trans(jb))
        elif VT == 3:
            # Word jj (bytes 2jj, 2jj + 1) of key t at [jj, t].
            p16 = pool_ptr.to(tl.pointer_type(tl.uint16), bitcast=True)
            vb = tl.load(p16 + tl.trans(v_rows // 2) + tl.arange(0, 32)[:, None])
        else:
            vb = tl.load(pool_ptr + v_rows + jb)
        if MUTANT == 2:
            vs_off = t * vs_row_bytes + sg
        else:
            # Linear (t, s) is stored at row (t//4)*4 + s//2, column (s%2)*4 + t%4.
            r = (t // 4) * 4 + sg // 2
            cc = (sg % 2) * 4 + t % 4
            vs_off = r * vs_row_bytes + cc
        if VT >= 2:
            vsb = tl.load(pool_ptr + vs_base + tl.trans(vs_off))
        else:
            vsb = tl.load(pool_ptr + vs_base + vs_off)
        return kb, ksb, vb, vsb

    @triton.jit
    def _dequant_t(b, sb, UPCAST: tl.constexpr, DEQ: tl.constexpr):
        """Data bytes [128, 64] and scale bytes [128, 8] -> low and high nibble values
        [128, 64] (bf16 on GPUs, float32 under the interpreter)."""
        if DEQ == 2:
            sc = (_e4m3(sb.to(tl.int32)) * 1.7014118346046923e38).to(tl.bfloat16)
            sc = tl.reshape(tl.broadcast_to(sc[:, :, None], [128, 8, 8]), [128, 64])
            lo, hi = tl.inline_asm_elementwise(_DEQ_PTX, "=r,=r,=r,=r,r,r,r", [b, sc],
                                               dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
            return lo, hi
        b = b.to(tl.int32)
        sc = _e4m3(sb.to(tl.int32)) * 4194304.0
        sc = tl.reshape(tl.broadcast_to(sc[:, :, None], [128, 8, 8]), [128, 64])
        lo = _e2m1(b & 15)
        hi = _e2m1(b >> 4)
        if not UPCAST:
            lo = lo.to(tl.bfloat16)
            hi = hi.to(tl.bfloat16)
            sc = sc.to(tl.bfloat16)
        return lo * sc, hi * sc

    @triton.jit
    def _dequant_tt(b, sb, UPCAST: tl.constexpr, DEQ: tl.constexpr):
        """Data bytes [64, 128] (byte j of key t at [j, t]) and scale bytes [8, 128] ->
        low and high nibble values [64, 128]."""
        if DEQ == 2:
            sc = (_e4m3(sb.to(tl.int32)) * 1.7014118346046923e38).to(tl.bfloat16)
            sc = tl.reshape(tl.broadcast_to(sc[:, None, :], [8, 8, 128]), [64, 128])
            lo, hi = tl.inline_asm_elementwise(_DEQ_PTX, "=r,=r,=r,=r,r,r,r", [b, sc],
                                               dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
            return lo, hi
        b = b.to(tl.int32)
        sc = _e4m3(sb.to(tl.int32)) * 4194304.0
        sc = tl.reshape(tl.broadcast_to(sc[:, None, :], [8, 8, 128]), [64, 128])
        lo = _e2m1(b & 15)
        hi = _e2m1(b >> 4)
        if not UPCAST:
            lo = lo.to(tl.bfloat16)
            hi = hi.to(tl.bfloat16)
            sc = sc.to(tl.bfloat16)
        return lo * sc, hi * sc

    @triton.jit
    def _dequant_w(w, sb):
        """Words [32, 128] (bytes 2jj, 2jj + 1 of key t at [jj, t]) and scale bytes [8, 128]
        -> low and high nibble values [64, 128] bf16 * 2**-7, rows permuted: row
        16a + 8h + i is byte 16a + 2i + h."""
        sc = (_e4m3(sb.to(tl.int32)) * 1.7014118346046923e38).to(tl.bfloat16)
        sc = tl.reshape(tl.broadcast_to(sc[:, None, :], [8, 4, 128]), [32, 128])
        l0, h0, l1, h1 = tl.inline_asm_elementwise(_DEQ_W_PTX, "=r,=r,=r,=r,r,r", [w, sc],
                                                   dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16),
                                                   is_pure=True, pack=2)
        lo = tl.reshape(tl.permute(tl.reshape(tl.join(l0, l1), [4, 8, 128, 2]), (0, 3, 1, 2)), [64, 128])
        hi = tl.reshape(tl.permute(tl.reshape(tl.join(h0, h1), [4, 8, 128, 2]), (0, 3, 1, 2)), [64, 128])
        return lo, hi

    @triton.jit
    def _block_step_t(qe_t, qo_t, pool_ptr, page, page_b, kvh, HKV, blk, self_blk, lim, c, m, l, acc_e, acc_o,
                      PLANAR: tl.constexpr, UPCAST: tl.constexpr, MUTANT: tl.constexpr, DEQ: tl.constexpr,
                      SC64: tl.constexpr, VB: tl.constexpr, VT: tl.constexpr,
                      KP: tl.constexpr, VP: tl.constexpr):
        t = tl.arange(0, 128)[:, None]
        kb, ksb, vb, vsb = _load_tile_t(pool_ptr, page, page_b, kvh, HKV, PLANAR, MUTANT, SC64, VT)
        if MUTANT == 1:
            vl = 1000
        else:
            vl = tl.where(blk != self_blk, 1000, lim)
        k_lo, k_hi = _dequant_t(kb, ksb, UPCAST, DEQ)
        if KP:
            k_lo = tl.reshape(tl.permute(tl.reshape(k_lo, [128, 4, 4, 2, 2]), (0, 2, 3, 1, 4)), [128, 64])
            k_hi = tl.reshape(tl.permute(tl.reshape(k_hi, [128, 4, 4, 2, 2]), (0, 2, 3, 1, 4)), [128, 64])
        if UPCAST:
            s = tl.dot(k_hi, qo_t, tl.dot(k_lo, qe_t, input_precision="ieee"), input_precision="ieee")
        else:
            s = tl.dot(k_hi, qo_t, tl.dot(k_lo, qe_t))
        s = tl.where(t <= vl, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0) * c)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_use)
        p = tl.exp2(tl.fma(s, c, -m_use[None, :]))
        l = l * alpha + tl.sum(p, axis=0)
        if VT == 3:
            v_lo, v_hi = _dequant_w(vb, vsb)
        elif VT == 2:
            v_lo, v_hi = _dequant_tt(vb, vsb, UPCAST, DEQ)
            if VP:
                v_lo = tl.reshape(tl.permute(tl.reshape(v_lo, [4, 8, 2, 128]), (0, 2, 1, 3)), [64, 128])
                v_hi = tl.reshape(tl.permute(tl.reshape(v_hi, [4, 8, 2, 128]), (0, 2, 1, 3)), [64, 128])
        elif VT == 1:
            v_lo, v_hi = _dequant_tt(tl.trans(vb), tl.trans(vsb), UPCAST, DEQ)
        else:
            v_lo, v_hi = _dequant_t(vb, vsb, UPCAST, DEQ)
            v_lo = tl.trans(v_lo)
            v_hi = tl.trans(v_hi)
        if UPCAST:
            pb = _bf16_rne(p)
            acc_e = acc_e * alpha[None, :] + tl.dot(v_lo, pb, input_precision="ieee")
            acc_o = acc_o * alpha[None, :] + tl.dot(v_hi, pb, input_precision="ieee")
        else:
            if VB:
                v_lo = tl.inline_asm_elementwise(_BF16_BOUNDARY, "=r,r", [v_lo], dtype=tl.bfloat16, is_pure=False, pack=2)
                v_hi = tl.inline_asm_elementwise(_BF16_BOUNDARY, "=r,r", [v_hi], dtype=tl.bfloat16, is_pure=False, pack=2)
            pb = p.to(tl.bfloat16)
            acc_e = tl.dot(v_lo, pb, acc_e * alpha[None, :])
            acc_o = tl.dot(v_hi, pb, acc_o * alpha[None, :])
        return m_new, l, acc_e, acc_o

    @triton.jit
    def _scores_t(qe_t, qo_t, pool_ptr, page, page_b, kvh, HKV, blk, self_blk, lim, PLANAR: tl.constexpr,
                  MUTANT: tl.constexpr, DEQ: tl.constexpr):
        t = tl.arange(0, 128)[:, None]
        kb, ksb, vb, vsb = _load_tile_t(pool_ptr, page, page_b, kvh, HKV, PLANAR, MUTANT, 0, 0)
        if MUTANT == 1:
            vl = 1000
        else:
            vl = tl.where(blk != self_blk, 1000, lim)
        k_lo, k_hi = _dequant_t(kb, ksb, False, DEQ)
        k_lo = tl.reshape(tl.permute(tl.reshape(k_lo, [128, 4, 4, 2, 2]), (0, 2, 3, 1, 4)), [128, 64])
        k_hi = tl.reshape(tl.permute(tl.reshape(k_hi, [128, 4, 4, 2, 2]), (0, 2, 3, 1, 4)), [128, 64])
        s = tl.dot(k_hi, qo_t, tl.dot(k_lo, qe_t))
        return tl.where(t <= vl, s, float("-inf")), vb, vsb

    @triton.jit
    def _update_t(s, vb, vsb, c, m, l, acc_e, acc_o, DEQ: tl.constexpr):
        m_new = tl.maximum(m, tl.max(s, axis=0) * c)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_use)
        p = tl.exp2(tl.fma(s, c, -m_use[None, :]))
        l = l * alpha + tl.sum(p, axis=0)
        v_lo, v_hi = _dequant_t(vb, vsb, False, DEQ)
        v_lo = tl.inline_asm_elementwise(_BF16_BOUNDARY, "=r,r", [tl.trans(v_lo)], dtype=tl.bfloat16, is_pure=False, pack=2)
        v_hi = tl.inline_asm_elementwise(_BF16_BOUNDARY, "=r,r", [tl.trans(v_hi)], dtype=tl.bfloat16, is_pure=False, pack=2)
        pb = p.to(tl.bfloat16)
        acc_e = tl.dot(v_lo, pb, acc_e * alpha[None, :])
        acc_o = tl.dot(v_hi, pb, acc_o * alpha[None, :])
        return m_new, l, acc_e, acc_o

    @triton.jit
    def _decode_kernel(
        q_ptr, pool_ptr, topk_ptr, bt_ptr, seq_ptr, out_ptr, part_ptr, ml_ptr, scr_ptr,
        rows, q_len, bt_stride, page_b, c, v_global, HKV, TOPK, SPLITS, PLANAR: tl.constexpr,
        SLOTS: tl.constexpr, UPCAST: tl.constexpr, MUTANT: tl.constexpr, DEQ: tl.constexpr,
        W: tl.constexpr, SCR: tl.constexpr = 0, U2: tl.constexpr = 0, SC64: tl.constexpr = 0, VB: tl.constexpr = 0, VT: tl.constexpr = 0,
        KP: tl.constexpr = 0, VP: tl.constexpr = 0,
    ):
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
        sel = tl.where(ok_all, tl.cumsum(oki, axis=0) - oki, -1)

        h = tl.arange(0, 16)
        hrow = row * (HKV * 16) + kvh * 16 + h
        if KP:
            # Logical K column 16s + 8half + 2c + bit is byte 16c + 4s + 2half + bit.
            jq = 16 * ((j // 2) % 4) + 4 * (j // 16) + 2 * ((j // 8) % 2) + j % 2
        else:
            jq = j
        q_t = hrow[None, :] * 128 + 2 * jq[:, None]
        qe_t = tl.load(q_ptr + q_t)
        qo_t = tl.load(q_ptr + q_t + 1)
        if UPCAST:
            qe_t = qe_t.to(tl.float32)
            qo_t = qo_t.to(tl.float32)

        m = tl.full([16], float("-inf"), tl.float32)
        l = tl.zeros([16], tl.float32)
        acc_e = tl.zeros([64, 16], tl.float32)
        acc_o = tl.zeros([64, 16], tl.float32)
        if UPCAST:
            for i in range(SLOTS):
                if i < n_mine:
                    blk = tl.sum(tl.where(sel == lo + i, ids, 0), axis=0)
                    page = tl.load(bt_ptr + req * bt_stride + blk).to(tl.int64)
                    m, l, acc_e, acc_o = _block_step_t(qe_t, qo_t, pool_ptr, page, page_b, kvh, HKV, blk, self_blk,
                                                       lim, c, m, l, acc_e, acc_o, PLANAR, UPCAST, MUTANT, DEQ,
                                                       SC64, VB, VT, KP, VP)
        elif U2:
            # Two blocks per trip: both score tiles first, then the two updates in
            # order (the second a no-op of -inf scores when this split's count is odd).
            for i in range(0, n_mine, 2):
                two = i + 1 < n_mine
                blk1 = tl.sum(tl.where(sel == lo + i, ids, 0), axis=0)
                blk2 = tl.where(two, tl.sum(tl.where(sel == lo + i + 1, ids, 0), axis=0), blk1)
                page1 = tl.load(bt_ptr + req * bt_stride + blk1).to(tl.int64)
                page2 = tl.load(bt_ptr + req * bt_stride + blk2).to(tl.int64)
                s1, vb1, vsb1 = _scores_t(qe_t, qo_t, pool_ptr, page1, page_b, kvh, HKV, blk1, self_blk, lim,
                                          PLANAR, MUTANT, DEQ)
                s2, vb2, vsb2 = _scores_t(qe_t, qo_t, pool_ptr, page2, page_b, kvh, HKV, blk2, self_blk, lim,
                                          PLANAR, MUTANT, DEQ)
                s2 = tl.where(two, s2, float("-inf"))
                m, l, acc_e, acc_o = _update_t(s1, vb1, vsb1, c, m, l, acc_e, acc_o, DEQ)
                m, l, acc_e, acc_o = _update_t(s2, vb2, vsb2, c, m, l, acc_e, acc_o, DEQ)
        elif SCR:
            # The valid slots' block ids, compacted in rank order, through global scratch.
            scr = scr_ptr + ((row * HKV + kvh) * SPLITS + z) * 64
            tl.store(scr + sel, ids, mask=ok_all)
            tl.debug_barrier()
            for i in range(n_mine):
                blk = tl.load(scr + lo + i, cache_modifier=".cg")
                page = tl.load(bt_ptr + req * bt_stride + blk).to(tl.int64)
                m, l, acc_e, acc_o = _block_step_t(qe_t, qo_t, pool_ptr, page, page_b, kvh, HKV, blk, self_blk,
                                                   lim, c, m, l, acc_e, acc_o, PLANAR, UPCAST, MUTANT, DEQ,
                                                   SC64, VB, VT, KP, VP)
        else:
            for i in range(n_mine):
                blk = tl.sum(tl.where(sel == lo + i, ids, 0), axis=0)
                page = tl.load(bt_ptr + req * bt_stride + blk).to(tl.int64)
                m, l, acc_e, acc_o = _block_step_t(qe_t, qo_t, pool_ptr, page, page_b, kvh, HKV, blk, self_blk,
                                                   lim, c, m, l, acc_e, acc_o, PLANAR, UPCAST, MUTANT, DEQ,
                                                   SC64, VB, VT, KP, VP)

        # acc_e[j, h] is head h, dim 2j; acc_o[j, h] dim 2j + 1.
        if VP:
            # acc row 16w + 8h + i holds byte column 16w + 2i + h.
            jo = 16 * (j // 16) + 2 * (j % 8) + (j // 8) % 2
        else:
            jo = j
        d_e = hrow[None, :] * 128 + 2 * jo[:, None]
        if SPLITS == 1:
            inv = tl.where(l > 0, v_global / tl.where(l > 0, l, 1.0), 0.0)
            res_e = acc_e * inv[None, :]
            res_o = acc_o * inv[None, :]
            if UPCAST:
                res_e = _bf16_rne(res_e)
                res_o = _bf16_rne(res_o)
            tl.store(out_ptr + d_e, res_e.to(tl.bfloat16))
            tl.store(out_ptr + d_e + 1, res_o.to(tl.bfloat16))
        else:
            pid = (row * HKV + kvh) * SPLITS + z
            p_e = (pid * 16 + h)[None, :] * 128 + 2 * jo[:, None]
            tl.store(part_ptr + p_e, acc_e)
            tl.store(part_ptr + p_e + 1, acc_o)
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
def _sm_count(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def auto_splits(rows: int, num_kv_heads: int, topk: int, sms: int) -> int:
    """The split count the host picks when the caller passes ``splits=None``/``"auto"``.

    Enough programs to cover every SM once, ``ceil(sms / (rows * Hkv))``, rounded
    up to a power of two, at most 8 and at most TOPK / 16 (each split keeps at
    least sixteen blocks to spread its partial's write and read and the merge
    launch over). From the H200 measurements (kernels/triton/NOTES.md): at 256
    and 64 rows x Hkv 4 the unsplit launch was the fastest at TOPK 16 and 64 (2
    splits 25-60 % slower); at 16 x 1 and 1 x 1 splits of 8 blocks were slower than
    none (TOPK 16: 97-107 us against 42) while TOPK 64 gained from 4 (60 and 78 us
    against 134 and 139). On the H200 (132 SMs): 256 x 4 and 64 x 4 -> 1; 16 x 1
    -> 1 (TOPK 16) or 4 (TOPK 64).
    """
    want = -(-sms // max(1, rows * num_kv_heads))
    s = 1
    while s < want:
        s *= 2
    return max(1, min(s, 8, topk // 16))


def decode(q, pool, topk, block_table, seq_lens, *, layout: str, num_kv_heads: int, q_len: int,
           sm_scale: float, k_global_scale: float, v_global_scale: float, splits: int | str | None = 1,
           mutant: int = 0, out=None, num_warps: int = NUM_WARPS, num_stages: int | None = None,
           deq: int = DEQ, maxnreg: int | None = None, **variant):
    """Launch the Triton kernel on torch tensors of one device (no validation).

    q: bf16 ``[rows, H, 128]``; pool: uint8 ``[pages, page_bytes]``; topk: int32
    ``[Hkv, rows, TOPK]`` contiguous; block_table: int32 ``[reqs, max_blocks]``;
    seq_lens: int32 ``[reqs]``. ``splits``: an int >= 1, or None / ``"auto"`` for
    ``auto_splits``. ``num_warps``, ``num_stages`` (None: ``default_stages``),
    ``deq`` (``DEQ``) and ``maxnreg`` (a register cap, None for none) choose the
    compiled variant.
    Returns bf16 ``[rows, H, 128]`` (``out`` if given).
    """
    hk, rows, tk = topk.shape
    if not 1 <= tk <= 64:
        raise ValueError(f"TOPK = {tk}, the kernel supports 1..64")
    dev = q.device
    if splits is None or splits == "auto":
        splits = 1 if _interpret() else auto_splits(rows, hk, tk, _sm_count(dev))
    if num_stages is None:
        num_stages = default_stages(splits)
    if out is None:
        out = torch.empty((rows, 16 * hk, 128), dtype=torch.bfloat16, device=dev)
    c = float(softmax_constant(sm_scale, k_global_scale))
    vg = float(np.float32(v_global_scale))
    # DEQ 2 scales c and v_global by 2**7: far from float32's range (contract-valid
    # extremes beyond 2**100 take the arithmetic path).
    deq = 1 if _interpret() or max(c, vg) > 2.0**100 else deq
    if deq == 2:
        c, vg = c * DEQ2_SHIFT, vg * DEQ2_SHIFT
    if splits > 1:
        part = torch.empty((rows * hk * splits * 16, 128), dtype=torch.float32, device=dev)
        ml = torch.empty((rows * hk * splits * 16, 2), dtype=torch.float32, device=dev)
    else:
        part = ml = out
    grid = (rows, hk, splits)
    _decode_kernel[grid](
        q, pool, topk, block_table, seq_lens, out, part, ml,
        torch.empty((rows * hk * splits * 64,), dtype=torch.int32, device=dev) if variant.get("SCR") else ml,
        rows, q_len, block_table.shape[1], page_bytes(hk), c, vg,
        hk, tk, splits, layout == "planar",
        SLOTS=tk if _interpret() else 64, UPCAST=_interpret(), MUTANT=mutant, DEQ=deq, W=STREAMS,
        **variant, num_warps=num_warps, num_stages=num_stages, **({"maxnreg": maxnreg} if maxnreg else {}),
    )
    if splits > 1:
        _merge_kernel[(rows, hk)](part, ml, out, vg, hk, SPLITS=splits,
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
    """A factory for ``module:attr`` specs: ``nvfp4_suite.kernels.triton.decode:causal`` etc."""
    return lambda: TritonBackend(name)


causal = triton_mutant("causal")
v_scale_linear = triton_mutant("v_scale_linear")
minus_one = triton_mutant("minus_one")
merge_no_rescale = triton_mutant("merge_no_rescale")
