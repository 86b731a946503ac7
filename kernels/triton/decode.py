"""Backend ``triton``: a portable Triton kernel for the NVFP4 sparse decode step.

One program per (row, KV head, split) ranks the row's valid slots once and loops
over its own split's blocks only, reads each selected page straight from the
NVFP4 pool (either layout; 8-byte loads), dequantises by bit arithmetic, no
tables (on GPUs four bytes at a time in PTX, ``_DEQ_PTX``; under the
interpreter element by element, ``_e2m1``, ``_e4m3``) and folds the block into
four independent online softmaxes, one per 32-key quarter of every block, each
the batch index of a batched product that Triton gives a warp of its own, so no
running max, row sum or P tile crosses warps; the four are merged at the end
(``GEOMETRY``: keys_per_max 32, P rounded to bf16 before the PV product).
With splits > 1 each program stores its partial ``(acc, m, denom)`` and a second
kernel merges them in split order, so no ticket has to be reset between
launches. ``splits=None``/``"auto"`` lets the host pick (``auto_splits``).
kernels/triton/NOTES.md has the H200 measurements behind these choices.

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

from nvfp4_suite.reference import DecodeProblem, Geometry
from nvfp4_suite.reference.paged_cache import page_bytes
from nvfp4_suite.reference.problem import softmax_constant

from ..protocol import GPU_LAUNCH_TIMEOUT_S, INTERPRETED_LIMITS, Capabilities

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
# its own running max, denom a sum over its 32 keys and its own accumulator, merged at
# the end; P is rounded to bf16 before the PV product. One running max over all 128
# keys (the previous kernel) passed 17 barriers per block (kernels/triton/NOTES.md).
GEOMETRY = Geometry(keys_per_max=32, keys_per_lane=32, p_bf16=True)
# Streams per block, the batch size of every product (one warp each at NUM_WARPS 4).
STREAMS = 128 // GEOMETRY.keys_per_max
MUTANTS = {"causal": 1, "v_scale_linear": 2, "minus_one": 3, "merge_no_rescale": 4}
# Dequantisation on GPUs: 1 arithmetic per element (``_e2m1``, ``_e4m3``), 2 the
# packed PTX of ``_DEQ_PTX``. The interpreter always takes 1.
DEQ = int(os.environ.get("NVFP4_TRITON_DEQ", "2"))
# DEQ 2 dequantises to value * 2**-7 (see _DEQ_PTX); the softmax constant and
# v_global_scale are multiplied by 2**7 to match, which changes no rounding:
# s * c and acc * (v_global / denom) are the same real numbers.
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
    def _load_tile(pool_ptr, page, page_b, kvh, HKV, W: tl.constexpr, PLANAR: tl.constexpr,
                   MUTANT: tl.constexpr):
        """The raw bytes of the 128 keys of one page, key KW w + t (KW = 128 / W) at
        [w, t]: K and V data [W, KW, 64], scales [W, KW, 8] (V's unswizzled to linear
        order)."""
        KW: tl.constexpr = 128 // W
        t = (tl.arange(0, W) * KW)[:, None, None] + tl.arange(0, KW)[None, :, None]
        jb = tl.arange(0, 64)[None, None, :]
        sg = tl.arange(0, 8)[None, None, :]
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
        ksb = tl.load(pool_ptr + ks_rows + sg)
        vb = tl.load(pool_ptr + v_rows + jb)
        if MUTANT == 2:
            vs_off = t * vs_row_bytes + sg
        else:
            # Linear (t, s) is stored at row (t//4)*4 + s//2, column (s%2)*4 + t%4.
            r = (t // 4) * 4 + sg // 2
            cc = (sg % 2) * 4 + t % 4
            vs_off = r * vs_row_bytes + cc
        vsb = tl.load(pool_ptr + vs_base + vs_off)
        return kb, ksb, vb, vsb

    @triton.jit
    def _dequant(b, sb, W: tl.constexpr, UPCAST: tl.constexpr, DEQ: tl.constexpr):
        """Data bytes [W, KW, 64] and scale bytes [W, KW, 8] -> the exact values of the
        low and high nibbles (dims 2j and 2j+1), two [W, KW, 64] tiles: bf16 on GPUs,
        float32 under the interpreter. DEQ 1: arithmetic per element (``_e2m1``,
        ``_e4m3``); DEQ 2 (GPUs only): ``_DEQ_PTX`` on four bytes at a time, values
        times 2**-7."""
        KW: tl.constexpr = 128 // W
        if DEQ == 2:
            # e4m3 * 2**119 (exact in bf16, below its largest value): with the codes'
            # 2**-126 the products are the values * 2**-7, all normal bf16.
            sc = (_e4m3(sb.to(tl.int32)) * 1.7014118346046923e38).to(tl.bfloat16)
            sc = tl.reshape(tl.broadcast_to(sc[:, :, :, None], [W, KW, 8, 8]), [W, KW, 64])
            lo, hi = tl.inline_asm_elementwise(_DEQ_PTX, "=r,=r,=r,=r,r,r,r", [b, sc],
                                               dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
            return lo, hi
        b = b.to(tl.int32)
        sc = _e4m3(sb.to(tl.int32)) * 4194304.0  # 2**22 undoes both offsets
        sc = tl.reshape(tl.broadcast_to(sc[:, :, :, None], [W, KW, 8, 8]), [W, KW, 64])
        lo = _e2m1(b & 15)
        hi = _e2m1(b >> 4)
        if not UPCAST:
            # e2m1 * e4m3 is exact in bf16: dequantise there, half the registers.
            lo = lo.to(tl.bfloat16)
            hi = hi.to(tl.bfloat16)
            sc = sc.to(tl.bfloat16)
        return lo * sc, hi * sc

    @triton.jit
    def _block_step(q_e, q_o, pool_ptr, page, page_b, kvh, HKV, blk, self_blk, lim, c, m, denom, acc,
                    W: tl.constexpr, PLANAR: tl.constexpr, UPCAST: tl.constexpr, MUTANT: tl.constexpr,
                    DEQ: tl.constexpr):
        """Fold one 128-key block into W independent online softmaxes (m, denom [W, 16],
        acc [W, 16, 128] float32), stream w taking keys KW w .. KW w + KW - 1 as batch w
        of every product: Triton puts the batch dimension of a batched product across
        the warps, so each stream's max, sum and P stay inside one warp. The scores take
        even and odd head dims as two products (q_e, q_o [W, 16, 64] against K's low-
        and high-nibble tiles; interleaving K's tiles first cost a shuffle per value);
        V is interleaved into [W, KW, 128] for the PV product."""
        KW: tl.constexpr = 128 // W
        t = (tl.arange(0, W) * KW)[:, None, None] + tl.arange(0, KW)[None, None, :]
        kb, ksb, vb, vsb = _load_tile(pool_ptr, page, page_b, kvh, HKV, W, PLANAR, MUTANT)
        if MUTANT == 1:
            vl = 1000
        else:
            vl = tl.where(blk != self_blk, 1000, lim)
        k_lo, k_hi = _dequant(kb, ksb, W, UPCAST, DEQ)
        if UPCAST:
            s = tl.dot(q_o, tl.permute(k_hi, 0, 2, 1),
                       tl.dot(q_e, tl.permute(k_lo, 0, 2, 1), input_precision="ieee"), input_precision="ieee")
        else:
            s = tl.dot(q_o, tl.permute(k_hi, 0, 2, 1), tl.dot(q_e, tl.permute(k_lo, 0, 2, 1)))
        s = tl.where(t <= vl, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=2) * c)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_use)
        p = tl.exp2(tl.fma(s, c, -m_use[:, :, None]))
        denom = denom * alpha + tl.sum(p, axis=2)
        v_lo, v_hi = _dequant(vb, vsb, W, UPCAST, DEQ)
        v = tl.reshape(tl.join(v_lo, v_hi), [W, KW, 128])
        if UPCAST:
            pv = tl.dot(_bf16_rne(p), v, input_precision="ieee")
        else:
            v = tl.inline_asm_elementwise(_BF16_BOUNDARY, "=r,r", [v], dtype=tl.bfloat16, is_pure=False, pack=2)
            pv = tl.dot(p.to(tl.bfloat16), v)
        acc = acc * alpha[:, :, None] + pv
        return m_new, denom, acc

    @triton.jit
    def _decode_kernel(
        q_ptr, pool_ptr, topk_ptr, bt_ptr, seq_ptr, out_ptr, part_ptr, ml_ptr,
        rows, q_len, bt_stride, page_b, c, v_global, HKV, TOPK, SPLITS, PLANAR: tl.constexpr,
        SLOTS: tl.constexpr, UPCAST: tl.constexpr, MUTANT: tl.constexpr, DEQ: tl.constexpr,
        W: tl.constexpr,
    ):
        # Shapes are runtime values. Under the interpreter the slot loop runs to the
        # constexpr SLOTS (>= TOPK); on GPUs over this split's blocks only.
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

        h = tl.arange(0, 16)
        d = tl.arange(0, 128)
        q_row = (row * (HKV * 16) + kvh * 16 + h)[:, None] * 128 + 2 * tl.arange(0, 64)[None, :]
        q_e = tl.broadcast_to(tl.load(q_ptr + q_row)[None, :, :], [W, 16, 64])
        q_o = tl.broadcast_to(tl.load(q_ptr + q_row + 1)[None, :, :], [W, 16, 64])
        if UPCAST:
            q_e = q_e.to(tl.float32)
            q_o = q_o.to(tl.float32)

        m = tl.full([W, 16], float("-inf"), tl.float32)
        denom = tl.zeros([W, 16], tl.float32)
        acc = tl.zeros([W, 16, 128], tl.float32)
        if UPCAST:
            for i in range(SLOTS):
                if i < n_mine:
                    blk = tl.sum(tl.where(sel == lo + i, ids, 0), axis=0)
                    page = tl.load(bt_ptr + req * bt_stride + blk).to(tl.int64)
                    m, denom, acc = _block_step(q_e, q_o, pool_ptr, page, page_b, kvh, HKV, blk, self_blk,
                                                lim, c, m, denom, acc, W, PLANAR, UPCAST, MUTANT, DEQ)
        else:
            for i in range(n_mine):
                blk = tl.sum(tl.where(sel == lo + i, ids, 0), axis=0)
                page = tl.load(bt_ptr + req * bt_stride + blk).to(tl.int64)
                m, denom, acc = _block_step(q_e, q_o, pool_ptr, page, page_b, kvh, HKV, blk, self_blk,
                                            lim, c, m, denom, acc, W, PLANAR, UPCAST, MUTANT, DEQ)

        # Stream merge: each stream's (denom, acc) weighted by exp2(m_w - max_w m_w),
        # summed over the streams in any order (nvfp4_suite.reference.compare: 2 W u).
        big = tl.max(m, axis=0)
        wt = tl.exp2(m - tl.where(big == float("-inf"), 0.0, big)[None, :])
        l_all = tl.sum(denom * wt, axis=0)
        acc_all = tl.sum(acc * wt[:, :, None], axis=0)

        out_off = (row * (HKV * 16) + kvh * 16 + h)[:, None] * 128 + d[None, :]
        if SPLITS == 1:
            inv = tl.where(l_all > 0, v_global / tl.where(l_all > 0, l_all, 1.0), 0.0)
            res = acc_all * inv[:, None]
            if UPCAST:
                res = _bf16_rne(res)
            tl.store(out_ptr + out_off, res.to(tl.bfloat16))
        else:
            pid = (row * HKV + kvh) * SPLITS + z
            tl.store(part_ptr + (pid * 16 + h)[:, None] * 128 + d[None, :], acc_all)
            tl.store(ml_ptr + (pid * 16 + h) * 2, big)
            tl.store(ml_ptr + (pid * 16 + h) * 2 + 1, l_all)

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
           deq: int = DEQ, maxnreg: int | None = None):
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
    elif isinstance(splits, str):  # e.g. "4" from a command line: it compared as str > int below
        raise ValueError(f'splits = {splits!r}: an int >= 1, None or "auto"')
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
        rows, q_len, block_table.shape[1], page_bytes(hk), c, vg,
        hk, tk, splits, layout == "planar",
        SLOTS=tk if _interpret() else 64, UPCAST=_interpret(), MUTANT=mutant, DEQ=deq, W=STREAMS,
        num_warps=num_warps, num_stages=num_stages, **({"maxnreg": maxnreg} if maxnreg else {}),
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
        self.mutant = 0 if mutant is None else MUTANTS[mutant]
        if mutant:
            self.name = f"triton-mutant:{mutant}"

    @property
    def capabilities(self) -> Capabilities:
        """Every layout and split count 1..8; on the CPU interpreter (slow) small generated problems."""
        if _interpret():
            return Capabilities(splits=tuple(range(1, 9)), targets=("cpu-interpreter",), limits=INTERPRETED_LIMITS,
                                interpreted=True, launch_timeout_s=GPU_LAUNCH_TIMEOUT_S)
        return Capabilities(splits=tuple(range(1, 9)), targets=("cuda", "rocm"), launch_timeout_s=GPU_LAUNCH_TIMEOUT_S)

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
