"""The seed's FlyDSL NVFP4 sparse decode kernel, made complete.

``compile_nvfp4_sparse_decode`` below is the seed (``../shared/seed``) with
its structure and arithmetic kept. The seed called helpers and constants it
did not define; they are written here, and the lane arithmetic they share
with the CPU tests lives in ``nvfp4_suite.kernels.flydsl.lanes`` (one source, traced here
and run on numpy there).

Where the seed could not work as written, and what changed:

- The wave merge and the split merge called ``fx.math.exp2``, which lowers to
  the ROCm device library (``__ocml_exp2_f32``); they call ``exp2`` (the
  hardware ``v_exp_f32``) like the block loop does.
- The K table: the seed loaded 512 words (two per scale byte) for a
  ``_k_bf16x8`` it did not include. This ``_k_bf16x8`` multiplies packed fp16
  pairs, so it needs one word per scale byte (the scale as an fp16 pair, see
  ``lanes.k_table``): the LDS table and its load hold 256 words.
- The wave merge staged all four waves' O in LDS (35,856 bytes with the
  rest), which lets only one workgroup onto a gfx942 CU (64 KiB of LDS).
  Wave 0 now keeps its own O in registers and LDS holds waves 1..3 (27,664
  bytes), so two workgroups fit on both targets; the merge adds the same
  values in the same order.

The seed's index expressions for the query and output words, its ``key_off``
and its ``dequant_k``/``dequant_v`` loops are the same arithmetic moved into
``lanes`` (``q_word``, ``out_word``, ``score_key``, ``dequant_k``,
``dequant_v``), so the CPU tests run the text the kernel is traced from.

Added: ``layout="planar"`` compiles a loader for the planar page layout
(vLLM's writer, FlashInfer's readers); the seed read ``token_rows`` only.

Importing this module needs FlyDSL; compiling needs ``ld.lld`` 19 or newer at
``$ROCM_PATH/llvm/bin/ld.lld``; running needs a ROCm GPU (gfx942 or gfx950).
"""

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import llvm
from flydsl._mlir.dialects import rocdl as rocdl_ods
from flydsl.expr import const_expr, range_constexpr
from flydsl.expr.typing import T
from flydsl.expr.typing import Vector as Vec
from flydsl.runtime.device import get_rocm_arch

from . import lanes
from .lanes import BLK, HG, KPW, LAYOUTS, NDT, NKS, NW, PART_F, RAW, D
from .mutants import MUTANTS
from .targets import Target, target

SC1 = 16  # buffer-op cache-policy bit that assembles to sc1 (system coherence across XCDs)
# The first 16 kernel-argument dwords preloaded into SGPRs; at most 256
# VGPR+AGPR per lane, so that two 4-wave workgroups fit on a CU.
PRELOAD_HINTS = {"llvm_options": {"amdgpu-kernarg-preload-count": 16}}
# CDNA buffer descriptor word 3: data format 32-bit float, num format 4 (raw 32-bit).
_RSRC_FLAGS = (7 << 12) | (4 << 15)


def _ir(x):
    """The MLIR value of a FlyDSL numeric, vector or plain value."""
    return fx.as_ir_value(x)


class _BufferOps:
    """Raw buffer loads and stores through a descriptor built from a 64-bit address.

    Offsets are in elements of the access type (the seed's convention); an
    access with ``mask`` false is sent past ``num_records``, where the
    hardware drops a store and returns zero for a load."""

    @staticmethod
    def create_buffer_resource_from_addr(addr, num_records_bytes):
        """Descriptor for ``num_records_bytes`` bytes (Int64) at ``addr`` (Int64)."""
        base = llvm.IntToPtrOp(ir.Type.parse("!llvm.ptr<1>"), _ir(fx.Int64(addr))).result
        return rocdl_ods.MakeBufferRsrcOp(
            ir.Type.parse("!llvm.ptr<8>"),
            base,
            _ir(fx.Int16(0)),
            _ir(fx.Int64(num_records_bytes)),
            _ir(fx.Int32(_RSRC_FLAGS)),
        ).result

    @staticmethod
    def _byte_offset(offset, elem_bytes, mask):
        off = fx.Int32(offset) * elem_bytes
        if mask is not None:
            off = mask.select(off, fx.Int32(0x7FFFFFFF))
        return _ir(off)

    @staticmethod
    def _aux(cache_modifier):
        if not cache_modifier:
            return None
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(32), cache_modifier)

    @classmethod
    def buffer_load(cls, rsrc, offset, vec_width=1, dtype=fx.Int32, cache_modifier=0):
        """Load ``vec_width`` elements of ``dtype`` at element ``offset``; an IR value."""
        elem = dtype.ir_type
        res = elem if vec_width == 1 else ir.VectorType.get([vec_width], elem)
        width = ir.IntegerType(elem).width if isinstance(elem, ir.IntegerType) else 32
        return rocdl_ods.RawPtrBufferLoadOp(
            res,
            rsrc,
            cls._byte_offset(offset, width // 8, None),
            _ir(fx.Int32(0)),
            aux=cls._aux(cache_modifier),
        ).result

    @classmethod
    def buffer_store(cls, data, rsrc, offset, mask=None, cache_modifier=0):
        """Store ``data`` (a 32-bit scalar or vector of them) at 32-bit-element ``offset``."""
        rocdl_ods.RawPtrBufferStoreOp(
            _ir(data),
            rsrc,
            cls._byte_offset(offset, 4, mask),
            _ir(fx.Int32(0)),
            aux=cls._aux(cache_modifier),
        )


buffer_ops = _BufferOps()


def global_i32_ptr(addr):
    """An int32 global pointer at ``addr`` (Int64), indexable for loads and stores."""
    ptr_t = fx.PointerType.get(T.i32, address_space=fx.AddressSpace.Global, alignment=4)
    return fx.inttoptr(ptr_t, fx.Int64(addr))


def _global_atomic_add(addr, value: int):
    """Atomically add ``value`` to the int32 at ``addr`` (device scope); the old value."""
    ptr = llvm.IntToPtrOp(ir.Type.parse("!llvm.ptr<1>"), _ir(fx.Int64(addr))).result
    old = llvm.AtomicRMWOp(
        llvm.AtomicBinOp.add,
        ptr,
        _ir(fx.Int32(value)),
        llvm.AtomicOrdering.monotonic,
        syncscope="agent",
        alignment=4,
    ).result
    return fx.Int32(old)


def bits(x):
    """The bit pattern of a Float32 as an Int32."""
    return fx.Float32(x).bitcast(fx.Int32)


def as_f32(x):
    """An Int32's bit pattern read as a Float32."""
    return fx.Int32(x).bitcast(fx.Float32)


def maxf_nn(a, b):
    """max for operands that are never NaN (``v_max_f32``; -inf is the identity)."""
    return fx.Float32(fx.maxnumf(fx.Float32(a), fx.Float32(b)))


def exp2(x):
    """2**x on the hardware instruction (``v_exp_f32``); exp2(-inf) = 0."""
    return fx.Float32(fx.rocdl.exp2(T.f32, _ir(fx.Float32(x))))


def xlane4(x, op):
    """``op`` over the 4 lanes ``n, n + 16, n + 32, n + 48`` (one head's lane groups),
    as ``(l0 op l1) op (l2 op l3)``, the result in all four."""
    y = op(fx.Float32(x), fx.Float32(x).shuffle_xor(16, 64))
    return op(y, fx.Float32(y).shuffle_xor(32, 64))


def pk_bf16(a, b):
    """Two Float32 rounded to bf16 (nearest even) packed in an Int32, ``a`` low."""
    pair = Vec.from_elements([fx.Float32(a), fx.Float32(b)], fx.Float32).to(fx.BFloat16)
    return fx.Int32(Vec(pair).bitcast(fx.Int32)[0])


class _GpuOps:
    """``lanes``'s floating-point operations as FlyDSL instructions for one target."""

    def __init__(self, tgt: Target):
        self.fnuz = tgt.fnuz

    def f32(self, v):
        return fx.Float32(v)

    def fmul(self, a, b):
        return fx.Float32(a) * fx.Float32(b)

    def bits(self, x):
        return bits(x)

    def from_bits(self, x):
        return as_f32(x)

    def select(self, cond, a, b):
        return cond.select(fx.Int32(a), b)

    @staticmethod
    def _f16x2(w):
        """An Int32 word viewed as its two fp16 halves, low first."""
        return Vec(Vec.from_elements([fx.Int32(w)], fx.Int32).bitcast(fx.Float16))

    def f16_lo(self, w):
        return fx.Float32(self._f16x2(w)[0].to(fx.Float32))

    def f16_hi(self, w):
        return fx.Float32(self._f16x2(w)[1].to(fx.Float32))

    def f16x2_mul(self, a, b):
        return fx.Int32(Vec(self._f16x2(a) * self._f16x2(b)).bitcast(fx.Int32)[0])

    def f32x2_to_f16x2(self, a, b):
        pair = Vec.from_elements([fx.Float32(a), fx.Float32(b)], fx.Float32).to(fx.Float16)
        return fx.Int32(Vec(pair).bitcast(fx.Int32)[0])

    def cvt_fp8x2_f32(self, word, hi):
        v = Vec(fx.rocdl.cvt_pk_f32_fp8(T.f32x2, _ir(fx.Int32(word)), hi), (2,), fx.Float32)
        return fx.Float32(v[0]), fx.Float32(v[1])


def _target() -> Target:
    """The record of the target FlyDSL compiles for; ValueError for one without a record."""
    return target(get_rocm_arch())




def compile_helpers(tgt: Target, layout: str, mutant: str | None = None):
    """The helpers for target ``tgt`` (``nvfp4_suite.kernels.flydsl.targets``) and page ``layout``
    (``token_rows`` or ``planar``); ``mutant`` one of ``MUTANTS`` or None."""
    ops = _GpuOps(tgt)
    if mutant == "fnuz_uncorrected":
        ops.fnuz = False

    def _k_bf16x8(word, scale_pair):
        return lanes.k_bf16x8(ops, fx.Int32(word), fx.Int32(scale_pair))

    def _v_bf16x8(word, sp):
        return lanes.v_bf16x8(ops, fx.Int32(word), sp)

    def cvt_fp8x2_f16(word, hi):
        return lanes.fp8x2_f16(ops, fx.Int32(word), hi)

    def mfma_16x16x32(a, b, c, swap):
        """C + A B for 16x16 tiles with K = 32; operands 4 Int32 (8 bf16) per lane.

        A target with the K = 32 form (gfx950): one ``v_mfma_f32_16x16x32_bf16``.
        With K = 16 (gfx942): two ``v_mfma_f32_16x16x16_bf16`` over each lane's
        first and last 4 values (both operands split alike, so the products
        pair up). ``swap``: the seed always passes False; no operand-swapped
        form exists here."""
        if swap:
            raise ValueError("mfma_16x16x32 has no swapped-operand form")
        if const_expr(tgt.mfma_bf16_k == 32):
            av = Vec(a).bitcast(fx.BFloat16)
            bv = Vec(b).bitcast(fx.BFloat16)
            return Vec(fx.rocdl.mfma_f32_16x16x32_bf16(T.f32x4, [av, bv, Vec(c), 0, 0, 0]))
        a64 = Vec(a).bitcast(fx.Int64)
        b64 = Vec(b).bitcast(fx.Int64)
        acc = Vec(c)
        for h in range(2):
            ah = Vec.from_elements([Vec(a64)[h]], fx.Int64).bitcast(fx.Int16)
            bh = Vec.from_elements([Vec(b64)[h]], fx.Int64).bitcast(fx.Int16)
            acc = Vec(fx.rocdl.mfma_f32_16x16x16bf16_1k(T.f32x4, [ah, bh, acc, 0, 0, 0]))
        return acc

    def kv_lane_loader(arg_cache, i32_page_byte, kvh, i32_hkv, w, n, g):
        """``load_block(page)``: the RAW words this lane needs of one page, at
        ``lanes.block_offsets`` for the layout, assembled by
        ``lanes.assemble_raw``."""
        k_data, k_scale, v_data, v_scale = lanes.block_offsets(kvh, i32_hkv, w, n, g, layout)
        if mutant == "v_scale_linear":
            v_scale = [lanes.page_byte(layout, i32_hkv, "v_scale", kvh, lanes.v_key(w, g, 4 * h),
                                       ((n // 2) // 4) * 4) // 4
                       for h in range(2)]

        def load_block(page):
            base = fx.Int64(arg_cache) + fx.Int64(page) * fx.Int64(i32_page_byte)
            rsrc = buffer_ops.create_buffer_resource_from_addr(base, fx.Int64(i32_page_byte))

            def word(off):
                return fx.Int32(buffer_ops.buffer_load(rsrc, off, vec_width=1, dtype=fx.Int32))

            kd = []
            for off in k_data:
                v = Vec(buffer_ops.buffer_load(rsrc, off, vec_width=4, dtype=fx.Int32))
                kd.append([fx.Int32(v[i]) for i in range_constexpr(4)])
            ks = [
                fx.Int16(buffer_ops.buffer_load(rsrc, off, vec_width=1, dtype=fx.Int16)).to(fx.Int32) & 0xFFFF
                for off in k_scale
            ]
            return lanes.assemble_raw(kd, ks, [word(o) for o in v_data], [word(o) for o in v_scale])

        return load_block

    return _k_bf16x8, _v_bf16x8, cvt_fp8x2_f16, mfma_16x16x32, kv_lane_loader


def compile_nvfp4_sparse_decode(splits: int = 1, topk: int = 16, xcds: int = 0, layout: str = "token_rows",
                                mutant: str | None = None):
    """Build the decode kernel for the target FlyDSL compiles for (``FLYDSL_GPU_ARCH``
    or the GPU present: gfx942 or gfx950).

    Args:
    splits: workgroups per (row, KV head), each over a contiguous share of
    the row's blocks.
    topk: top-k width (one lane per slot).
    xcds: if > 0, workgroup w runs on XCD w % xcds and a request's rows and
    a row's splits are placed on one XCD.
    layout: the page layout the loader reads, ``token_rows`` (the seed's) or
    ``planar``.
    mutant: None, or one of ``MUTANTS`` to build a kernel with that bug.

    Returns the ``@flyc.jit`` launcher ``launch(arg_q, arg_cache, arg_topk,
    arg_bt, arg_seq, arg_out, arg_ks, arg_vs, arg_lut, arg_part, arg_cnt,
    i64_part_bytes, i32_rows, i32_ql, i32_H, i32_hkv, i32_topk_hs, i32_bt_s,
    i32_page_b, f32_c, i32_grid_x, stream)``: device addresses (Int64) of the
    tensors ``nvfp4_suite.kernels.flydsl.backend.decode`` documents, their sizes and
    strides, ``f32_c = fp32(sm_scale * log2(e))``; with ``kernel_name``,
    ``compile_hints`` and ``shared`` (the LDS struct) attached.
    """
    if not (1 <= topk <= 64 and splits >= 1):
        raise ValueError(f"topk must be in 1..64 and splits >= 1, got topk={topk}, splits={splits}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"mutant must be one of {sorted(MUTANTS)} or None, got {mutant!r}")
    _k_bf16x8, _v_bf16x8, cvt_fp8x2_f16, mfma_16x16x32, kv_lane_loader = compile_helpers(_target(), layout, mutant)
    SPLITS, TOPK, XCDS = splits, topk, xcds
    # Split partials need sc1 unless all splits of a row run on one XCD.
    PART_SCOPE = 0 if XCDS or mutant == "partials_no_sc1" else SC1
    name = f"m3_nvfp4_sparse_decode_k{TOPK}_s{SPLITS}" + (f"_x{XCDS}" if XCDS else "")
    name += "_planar" if layout == "planar" else ""
    name += f"_{mutant}" if mutant else ""
    causal_slack = 1 if mutant == "causal_off_by_one" else 0

    @fx.struct
    class Shared:
        o: fx.Array[fx.Int32, (NW - 1) * NDT * 64 * 4, 16]
        ml: fx.Array[fx.Float32, NW * 2 * 64]
        lut: fx.Array[fx.Int32, 256]
        ticket: fx.Array[fx.Int32, 4]

    @flyc.kernel(name=name, known_block_size=[64 * NW, 1, 1])
    def kernel(
        i32_rows: fx.Int32,
        i32_ql: fx.Int32,  # rows per request
        i32_topk_hs: fx.Int32,  # topk stride over KV heads
        i32_bt_s: fx.Int32,
        i32_H: fx.Int32,
        i32_hkv: fx.Int32,
        arg_seq: fx.Int64,  # [reqs] int32
        arg_topk: fx.Int64,  # [Hkv, >= rows, TOPK] int32 blocks, -1 = none
        arg_bt: fx.Int64,  # [reqs, stride] int32
        arg_lut: fx.Int64,  # [256] int32 K table: scale byte -> fp16 pair
        arg_q: fx.Int64,  # [rows, H, 128] bf16
        arg_cache: fx.Int64,  # [pages, 2 * Hkv * 128 * 72] uint8 pages in `layout`
        arg_ks: fx.Int64,  # fp32 global K scale
        arg_vs: fx.Int64,  # fp32 global V scale
        arg_out: fx.Int64,  # [rows, H, 128] bf16
        arg_part: fx.Int64,  # [grid rows * Hkv, S, 64, PART_F] fp32
        arg_cnt: fx.Int64,  # [grid rows * Hkv] int32 tickets, zero
        i64_part_bytes: fx.Int64,
        i32_page_byte: fx.Int32,
        f32_c: fx.Float32,  # sm_scale * log2(e)
    ):
        smem = fx.SharedAllocator().allocate(Shared).peek()
        tx = fx.thread_idx.x
        bx, kvh = fx.block_idx.x, fx.block_idx.y
        lane = tx % 64
        w = fx.Int32(fx.rocdl.readfirstlane(T.i32, tx // 64))
        n, g = lane % 16, lane // 16
        topk = global_i32_ptr(arg_topk)
        bt = global_i32_ptr(arg_bt)
        seq_p = global_i32_ptr(arg_seq)
        f32p = fx.PointerType.get(T.f32, address_space=fx.AddressSpace.Global, alignment=4)
        c = f32_c * fx.Float32(fx.inttoptr(f32p, fx.Int64(arg_ks))[0])
        v_scale = fx.Float32(fx.inttoptr(f32p, fx.Int64(arg_vs))[0])
        neg_inf = fx.Float32(float("-inf"))
        lut_g = global_i32_ptr(arg_lut)
        smem.lut.ptr[tx] = fx.Int32(lut_g[tx])
        # grid.x is padded to XCDS x ql so a request's rows share an XCD.
        row = lanes.workgroup_row(bx, i32_ql, XCDS)
        row_ok = row < i32_rows
        rowc = row_ok.select(row, fx.Int32(0))
        req = rowc // i32_ql
        pos = fx.Int32(seq_p[req]) - i32_ql + rowc % i32_ql
        # Padding rows (seq_len 0 or past i32_rows) see nothing.
        pos = (row_ok & (pos >= 0)).select(pos, fx.Int32(-1))
        pos = fx.Int32(fx.rocdl.readfirstlane(T.i32, pos))
        req = fx.Int32(fx.rocdl.readfirstlane(T.i32, req))
        self_blk = (pos >= 0).select(pos // BLK, fx.Int32(-1))
        # Lane = top-k slot.
        slot_ok = lane < TOPK
        blk = fx.Int32(topk[kvh * i32_topk_hs + rowc * TOPK + slot_ok.select(lane, fx.Int32(0))])
        ok = slot_ok & (blk >= 0) & (blk <= self_blk)
        page = fx.Int32(bt[req * i32_bt_s + ok.select(blk, fx.Int32(0))])
        page = ok.select(page, fx.Int32(-1))
        blk = ok.select(blk, fx.Int32(-1))
        vmask = fx.Int64(fx.rocdl.ballot(T.i64, ok))
        n_v = fx.Int32(fx.math.ctpop(vmask).to(fx.Int32))
        if const_expr(SPLITS > 1):
            below = (fx.Int64(1) << fx.Int64(lane)) - fx.Int64(1)
            rank = fx.Int32(fx.math.ctpop(vmask & below).to(fx.Int32))
            chunk = (n_v + (SPLITS - 1)) // SPLITS
            lo = fx.block_idx.z * chunk
            vmask = fx.Int64(fx.rocdl.ballot(T.i64, ok & (rank >= lo) & (rank < lo + chunk)))
            n_v = fx.Int32(fx.math.ctpop(vmask).to(fx.Int32))
        lim = pos % BLK - w * KPW
        qr = buffer_ops.create_buffer_resource_from_addr(
            arg_q, num_records_bytes=fx.Int64(i32_rows) * fx.Int64(i32_H) * (D * 2)
        )
        q_row = (rowc * i32_H + kvh * HG) * (D // 2)
        qf = [
            fx.Vector(buffer_ops.buffer_load(qr, q_row + lanes.q_word(n, g, ks), vec_width=4, dtype=fx.Int32))
            for ks in range_constexpr(NKS)
        ]
        load_block = kv_lane_loader(arg_cache, i32_page_byte, kvh, i32_hkv, w, n, g)

        def dequant_k(raw):
            kf = lanes.dequant_k(raw, lambda sb: fx.Int32(smem.lut.ptr[sb]), _k_bf16x8)
            return [[Vec.from_elements(words, fx.Int32) for words in kst] for kst in kf]

        def dequant_v(raw):
            vf = lanes.dequant_v(raw, cvt_fp8x2_f16, _v_bf16x8)
            return [Vec.from_elements(words, fx.Int32) for words in vf]

        fx.gpu.barrier()  # LUT in LDS
        zero4 = Vec.filled(4, 0.0, fx.Float32)
        key_off = [lanes.score_key(g, st, e) for st in range_constexpr(2) for e in range_constexpr(4)]
        first = (n_v > 0).select(fx.Int32(fx.math.cttz(vmask).to(fx.Int32)), fx.Int32(0))

        def slot_at(mask):
            """The lowest slot left in ``mask``, the first one when empty."""
            return (mask != fx.Int64(0)).select(fx.Int32(fx.math.cttz(mask).to(fx.Int32)), first)

        def page_of(slot):
            pg = fx.Int32(fx.rocdl.readlane(T.i32, page, slot))
            return (pg >= 0).select(pg, fx.Int32(0))

        def attend(kf, vf, cur_blk, live, m_t, l_t, o_t):
            """Fold one block into (max, sum, O); a dead block is fully masked."""
            a = []
            for st in range_constexpr(2):
                acc = zero4
                for ks in range_constexpr(NKS):
                    acc = mfma_16x16x32(kf[st][ks], qf[ks], acc, False)
                a += [acc[e] for e in range_constexpr(4)]
            diag = cur_blk == self_blk
            dead = live == fx.Int32(0)
            a = [(dead | (diag & (key_off[i] > lim + causal_slack))).select(neg_inf, a[i])
                 for i in range_constexpr(8)]
            mx = a[0]
            for i in range_constexpr(1, 8):
                mx = maxf_nn(mx, a[i])
            # The running max is kept in scaled units (c > 0).
            m_new = maxf_nn(m_t, xlane4(mx, maxf_nn) * c)
            m_use = (m_new == neg_inf).select(fx.Float32(0.0), m_new)
            alpha = exp2(m_t - m_use)
            p = [exp2(fx.math.fma(x, c, -m_use)) for x in a]
            ps = p[0]
            for i in range_constexpr(1, 8):
                ps = ps + p[i]
            pf = Vec.from_elements(
                [pk_bf16(p[2 * j], p[2 * j + 1]) for j in range_constexpr(4)],
                fx.Int32,
            )
            av = Vec.filled(4, alpha, fx.Float32)
            o_t = [mfma_16x16x32(vf[dt], pf, o_t[dt] * av, False) for dt in range_constexpr(NDT)]
            return m_new, l_t * alpha + ps, o_t

        # Two blocks per iteration, the next pair's loads in flight; an odd last
        # block is masked.
        init = [vmask, neg_inf, fx.Float32(0.0)]
        init += [zero4 for _ in range_constexpr(NDT)]
        init += load_block(page_of(slot_at(vmask)))
        n_st = 3 + NDT
        results = init
        for _u, st_ in range(  # type: ignore[call-overload]
            fx.Index(0),
            fx.Index((n_v + 1) // 2),
            fx.Index(1),
            init=[fx.as_ir_value(x) for x in init],
        ):
            rem = fx.Int64(st_[0])
            m_t = fx.Float32(st_[1])
            l_t = fx.Float32(st_[2])
            o_t = [Vec(st_[3 + dt]) for dt in range_constexpr(NDT)]
            raw_a = [fx.Int32(st_[n_st + i]) for i in range_constexpr(RAW)]
            blk_a = fx.Int32(fx.rocdl.readlane(T.i32, blk, slot_at(rem)))
            rem_b = rem & (rem - fx.Int64(1))
            raw_b = load_block(page_of(slot_at(rem_b)))
            fx.rocdl.sched_barrier(0)
            kf_a = dequant_k(raw_a)
            vf_a = dequant_v(raw_a)
            rem_n = rem_b & (rem_b - fx.Int64(1))
            fx.rocdl.sched_barrier(0)
            raw_n = load_block(page_of(slot_at(rem_n)))
            fx.rocdl.sched_barrier(0)
            res = attend(kf_a, vf_a, blk_a, fx.Int32(1), m_t, l_t, o_t)
            m_t, l_t, o_t = res[0], res[1], res[2]
            blk_b = fx.Int32(fx.rocdl.readlane(T.i32, blk, slot_at(rem_b)))
            live_b = (rem_b != fx.Int64(0)).select(fx.Int32(1), fx.Int32(0))
            kf_b = dequant_k(raw_b)
            vf_b = dequant_v(raw_b)
            res = attend(kf_b, vf_b, blk_b, live_b, m_t, l_t, o_t)
            m_t, l_t, o_t = res[0], res[1], res[2]
            state = [rem_n, m_t, l_t] + o_t + raw_n
            results = yield [fx.as_ir_value(x) for x in state]

        def store_out(acc, inv):
            outr = buffer_ops.create_buffer_resource_from_addr(
                arg_out,
                num_records_bytes=fx.Int64(i32_rows) * fx.Int64(i32_H) * (D * 2),
            )
            o_row = (row * i32_H + kvh * HG) * (D // 2)
            for e in range_constexpr(4):
                val = Vec.from_elements(
                    [pk_bf16(acc[2 * j][e] * inv, acc[2 * j + 1][e] * inv) for j in range_constexpr(4)],
                    fx.Int32,
                )
                buffer_ops.buffer_store(val, outr, o_row + lanes.out_word(n, g, e), mask=row < i32_rows)

        # Combine the waves' partials in wave 0.
        o_lds = fx.logical_divide(
            fx.make_view(
                fx.recast_iter(fx.Int32, smem.o.ptr),
                fx.make_layout((NW - 1) * NDT * 64 * 4, 1),
            ),
            fx.make_layout(4, 1),
        )
        lds_atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Int32)
        ml = smem.ml.ptr
        ml[(w * 2) * 64 + lane] = fx.Float32(results[1])
        ml[(w * 2 + 1) * 64 + lane] = fx.Float32(results[2])
        # Wave 0 keeps its own O in registers: LDS for waves 1..3 only.
        if w > 0:
            for dt in range_constexpr(NDT):
                r = fx.make_rmem_tensor(fx.make_layout(4, 1), fx.Int32)
                r.store(Vec(results[3 + dt]).bitcast(fx.Int32))
                fx.copy(lds_atom, r, fx.slice(o_lds, (None, ((w - 1) * NDT + dt) * 64 + lane)))
        fx.gpu.barrier()
        if w == 0:
            ms = [fx.Float32(ml[(ww * 2) * 64 + lane]) for ww in range_constexpr(NW)]
            big = ms[0]
            for ww in range_constexpr(1, NW):
                big = maxf_nn(big, ms[ww])
            big_raw = big
            big = (big == neg_inf).select(fx.Float32(0.0), big)
            wt = [exp2(ms[ww] - big) for ww in range_constexpr(NW)]
            l_tot = fx.Float32(0.0)
            for ww in range_constexpr(NW):
                l_tot = l_tot + fx.Float32(ml[(ww * 2 + 1) * 64 + lane]) * wt[ww]
            l_tot = xlane4(l_tot, lambda x, y: x + y)
            acc = [zero4 for _ in range_constexpr(NDT)]
            for ww in range_constexpr(NW):
                wv = Vec.filled(4, wt[ww], fx.Float32)
                for dt in range_constexpr(NDT):
                    if const_expr(ww == 0):
                        o_w = Vec(results[3 + dt])
                    else:
                        r = fx.make_rmem_tensor(fx.make_layout(4, 1), fx.Int32)
                        fx.copy(
                            lds_atom,
                            fx.slice(o_lds, (None, ((ww - 1) * NDT + dt) * 64 + lane)),
                            r,
                        )
                        o_w = Vec(r.load()).bitcast(fx.Float32)
                    acc[dt] = acc[dt] + o_w * wv
            if const_expr(SPLITS > 1):
                tid = row * i32_hkv + kvh
                pr = buffer_ops.create_buffer_resource_from_addr(arg_part, num_records_bytes=i64_part_bytes)
                row_f = (tid * SPLITS + fx.block_idx.z) * 64 + lane
                for dt in range_constexpr(NDT):
                    buffer_ops.buffer_store(
                        acc[dt].bitcast(fx.Int32),
                        pr,
                        row_f * PART_F + dt * 4,
                        cache_modifier=PART_SCOPE,
                    )
                buffer_ops.buffer_store(
                    Vec.from_elements([bits(big_raw), bits(l_tot)], fx.Int32),
                    pr,
                    row_f * PART_F + NDT * 4,
                    cache_modifier=PART_SCOPE,
                )
                # The partial is stored before the ticket is taken.
                if const_expr(mutant != "ticket_no_wait"):
                    fx.rocdl.s_waitcnt(vmcnt=0)
                if lane == 0:
                    smem.ticket.ptr[0] = _global_atomic_add(arg_cnt + fx.Int64(tid) * 4, 1)
                fx.rocdl.s_waitcnt(lgkmcnt=0)
                if fx.Int32(fx.rocdl.readfirstlane(T.i32, fx.Int32(smem.ticket.ptr[0]))) == SPLITS - 1:
                    rows_f = [(tid * SPLITS + sp) * 64 + lane for sp in range_constexpr(SPLITS)]
                    mls = [
                        Vec(
                            buffer_ops.buffer_load(
                                pr,
                                rf * PART_F + NDT * 4,
                                vec_width=2,
                                dtype=fx.Int32,
                                cache_modifier=PART_SCOPE,
                            )
                        )
                        for rf in rows_f
                    ]
                    bigs = [as_f32(x[0]) for x in mls]
                    top = bigs[0]
                    for sp in range_constexpr(1, SPLITS):
                        top = maxf_nn(top, bigs[sp])
                    top = (top == neg_inf).select(fx.Float32(0.0), top)
                    if const_expr(mutant == "merge_no_rescale"):
                        ws = [fx.Float32(1.0) for _ in bigs]
                    else:
                        ws = [exp2(b - top) for b in bigs]
                    l_all = fx.Float32(0.0)
                    for sp in range_constexpr(SPLITS):
                        l_all = l_all + as_f32(mls[sp][1]) * ws[sp]
                    inv_all = (l_all > fx.Float32(0.0)).select(v_scale / l_all, fx.Float32(0.0))
                    acc_all = [zero4 for _ in range_constexpr(NDT)]
                    for sp in range_constexpr(SPLITS):
                        wv = Vec.filled(4, ws[sp], fx.Float32)
                        for dt in range_constexpr(NDT):
                            part = Vec(
                                buffer_ops.buffer_load(
                                    pr,
                                    rows_f[sp] * PART_F + dt * 4,
                                    vec_width=4,
                                    dtype=fx.Int32,
                                    cache_modifier=PART_SCOPE,
                                )
                            ).bitcast(fx.Float32)
                            acc_all[dt] = acc_all[dt] + part * wv
                    store_out(acc_all, inv_all)
                    if const_expr(mutant != "ticket_not_reset"):
                        if lane == 0:
                            global_i32_ptr(arg_cnt + fx.Int64(tid) * 4)[0] = fx.Int32(0)
            else:
                inv = (l_tot > fx.Float32(0.0)).select(v_scale / l_tot, fx.Float32(0.0))
                store_out(acc, inv)

    @flyc.jit
    def launch(
        arg_q: fx.Int64,
        arg_cache: fx.Int64,
        arg_topk: fx.Int64,
        arg_bt: fx.Int64,
        arg_seq: fx.Int64,
        arg_out: fx.Int64,
        arg_ks: fx.Int64,
        arg_vs: fx.Int64,
        arg_lut: fx.Int64,
        arg_part: fx.Int64,
        arg_cnt: fx.Int64,
        i64_part_bytes: fx.Int64,
        i32_rows: fx.Int32,
        i32_ql: fx.Int32,
        i32_H: fx.Int32,
        i32_hkv: fx.Int32,
        i32_topk_hs: fx.Int32,
        i32_bt_s: fx.Int32,
        i32_page_b: fx.Int32,
        f32_c: fx.Float32,
        i32_grid_x: fx.Int32,
        stream: fx.Stream,
    ):
        kernel(
            i32_rows,
            i32_ql,
            i32_topk_hs,
            i32_bt_s,
            i32_H,
            i32_hkv,
            arg_seq,
            arg_topk,
            arg_bt,
            arg_lut,
            arg_q,
            arg_cache,
            arg_ks,
            arg_vs,
            arg_out,
            arg_part,
            arg_cnt,
            i64_part_bytes,
            i32_page_b,
            f32_c,
        ).launch(
            grid=(i32_grid_x, i32_hkv, SPLITS),
            block=(64 * NW, 1, 1),
            stream=stream,
        )

    launch.kernel_name = name
    launch.compile_hints = PRELOAD_HINTS
    launch.shared = Shared
    return launch
