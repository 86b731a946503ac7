"""Vector floating-point arithmetic, compares and conversions.

The kernel descriptor asks for round to nearest even and denormals kept for
fp32 and fp16 (``float_denorm_mode_* 3``), IEEE mode on: numpy's float32 and
float16 arithmetic on x86 is exactly that, so the basic ops are numpy's.
Fused ops round once (``fma_f32``: the float64 product is exact and the rare
double-rounding tie is broken with the exact error). Decisions where
hardware is not, or not documented as, correctly rounded:

- ``v_exp_f32`` (2**x) is modelled correctly rounded (float64 ``exp2``
  rounded to float32; denormal results kept). AMD documents it as
  approximate (about 1 ulp). ``group.options["exp_ulps"] = k`` moves every
  finite non-zero result k ulps up (k > 0) or down, so a check can show that
  its tolerance holds for a kernel whose exp2 is off by that much.
- ``v_rcp_f32`` is modelled correctly rounded (hardware: about 1 ulp).
- ``v_div_scale_f32``/``v_div_fmas_f32``/``v_div_fixup_f32`` (LLVM's fdiv
  expansion): the path where no scaling is needed (no operand near the
  float32 range limits) is modelled exactly, and special operands (0, inf,
  NaN) give the IEEE quotient in ``v_div_fixup``; an operand range that needs
  the ISA's 2**64 scaling raises SimError instead of guessing.
- ``v_max_f32`` and ``v_max3_f32`` follow IEEE mode: a NaN operand is ignored
  (``fmax``); for ``max(+0, -0)`` numpy's ``fmax`` (first operand on equality) is
  used, where hardware may return either zero.
- NaN results carry numpy's payload; hardware's quiet NaN may differ in its
  payload bits (nothing in the suite reads them).
- fp16 results of VOP1/VOP3 (``v_cvt_f16_f32``) zero the register's upper half.
- fp8 (``v_cvt_pk_f32_fp8``): gfx942 reads E4M3FNUZ (bias 8, 0x80 NaN),
  gfx950 OCP E4M3FN (0x7F/0xFF NaN, 0x80 = -0), per ``group.target``.

An output modifier (``mul:``/``div:``) or an operand select this module does not
model raises SimError naming it.
"""

from __future__ import annotations

import numpy as np

from reference.emulate import fma_f32
from reference.formats import E4M3FN_TABLE, e4m3fnuz_decode

from ..program import Operand
from ..wave import SimError, op

_FNUZ_TABLE = e4m3fnuz_decode(np.arange(256, dtype=np.uint8))
_ALLOWED = {"clamp"}


def _check_mods(ins, allowed=_ALLOWED):
    extra = set(ins.mods) - allowed - {"dst_sel", "dst_unused", "src0_sel", "src1_sel"}
    if extra:
        raise SimError(f"{ins.mnemonic}: modifier(s) {sorted(extra)} not modelled at {ins.where()}")


def _f(w, ins, i):
    return w.vget_f32(ins, i)


def _binary(fn):
    def h(w, ins):
        _check_mods(ins)
        with np.errstate(all="ignore"):
            w.vset_f32(ins, fn(_f(w, ins, 1), _f(w, ins, 2)))
    return h


op("v_add_f32")(_binary(lambda a, b: a + b))
op("v_sub_f32")(_binary(lambda a, b: a - b))
op("v_subrev_f32")(_binary(lambda a, b: b - a))
op("v_mul_f32")(_binary(lambda a, b: a * b))
op("v_max_f32")(_binary(np.fmax))
op("v_min_f32")(_binary(np.fmin))


@op("v_max3_f32", "v_min3_f32")
def _minmax3(w, ins):
    _check_mods(ins)
    f = np.fmax if ins.base == "v_max3_f32" else np.fmin
    w.vset_f32(ins, f(f(_f(w, ins, 1), _f(w, ins, 2)), _f(w, ins, 3)))


@op("v_fma_f32")
def _fma(w, ins):
    _check_mods(ins)
    w.vset_f32(ins, fma_f32(_f(w, ins, 1), _f(w, ins, 2), _f(w, ins, 3)))


@op("v_fmac_f32")
def _fmac(w, ins):
    _check_mods(ins)
    acc = w.v[ins.ops[0].index].view(np.float32)
    w.vset_f32(ins, fma_f32(_f(w, ins, 1), _f(w, ins, 2), acc))


def _step_ulps(x: np.ndarray, k: int) -> np.ndarray:
    """Move finite non-zero float32 values k ulps away from zero (k < 0: toward it)."""
    bits = x.view(np.int32).astype(np.int64)
    move = np.isfinite(x) & (x != 0)
    stepped = np.where(move, bits + k, bits)
    # Never cross zero or leave the finite range: clamp to that sign's ends.
    mag = stepped & 0x7FFFFFFF
    ok = (stepped >= (bits & ~0x7FFFFFFF)) & (mag < 0x7F800000) & (mag > 0)
    return np.where(move & ok, stepped, bits).astype(np.int32).view(np.float32)


@op("v_exp_f32")
def _exp(w, ins):
    _check_mods(ins)
    x = _f(w, ins, 1)
    with np.errstate(over="ignore"):
        r = np.exp2(np.asarray(x, np.float64)).astype(np.float32)
    k = int(w.group.options.get("exp_ulps", 0))
    if k:
        r = _step_ulps(r, k)
    w.vset_f32(ins, r)


@op("v_rcp_f32")
def _rcp(w, ins):
    _check_mods(ins)
    with np.errstate(divide="ignore"):
        w.vset_f32(ins, (1.0 / np.asarray(_f(w, ins, 1), np.float64)).astype(np.float32))


def _exponent(x: np.ndarray) -> np.ndarray:
    return (x.view(np.uint32) >> 23) & 0xFF


@op("v_div_scale_f32")
def _div_scale(w, ins):
    """``v_div_scale_f32 vdst, sdst, s0, s1 (denominator), s2 (numerator)``: where no
    scaling is needed, vdst = s0 (NaN for a zero operand) and the lane's sdst bit is 0."""
    _check_mods(ins, set())
    s0, den, num = (np.broadcast_to(_f(w, ins, i), (64,)) for i in (2, 3, 4))
    e_den, e_num = _exponent(den).astype(np.int64), _exponent(num).astype(np.int64)
    zero = (den == 0) | (num == 0)
    special = zero | ~np.isfinite(den) | ~np.isfinite(num)
    # The ISA scales when the quotient nears overflow, the denominator is
    # denormal or so large its reciprocal is, the quotient is denormal, or the
    # numerator is tiny; this superset of those ranges is refused.
    needs = ~special & ((e_num - e_den >= 96) | (e_den == 0) | (e_den >= 253) | (e_num - e_den <= -125)
                        | (e_num <= 23))
    if (needs & w.exec_mask).any():
        lane = int(np.flatnonzero(needs & w.exec_mask)[0])
        raise SimError(f"v_div_scale_f32: lane {lane} divides {num[lane]!r} by {den[lane]!r}, a range that needs "
                       f"the ISA's 2**64 scaling, which the simulator does not model, at {ins.where()}")
    w.vset_f32(ins, np.where(zero, np.float32(np.nan), s0))
    w.mask_set(ins.ops[1], np.zeros(64, bool))


_VCC = Operand("s", 106, 2)


@op("v_div_fmas_f32")
def _div_fmas(w, ins):
    """fma(s0, s1, s2); a lane with VCC set (a scaled division) cannot occur,
    since v_div_scale_f32 refuses those ranges, and is refused here too."""
    _check_mods(ins)
    if (w.mask_get(_VCC) & w.exec_mask).any():
        raise SimError(f"v_div_fmas_f32 with VCC set (a scaled division) is not modelled at {ins.where()}")
    w.vset_f32(ins, fma_f32(_f(w, ins, 1), _f(w, ins, 2), _f(w, ins, 3)))


@op("v_div_fixup_f32")
def _div_fixup(w, ins):
    """``v_div_fixup_f32 vdst, quotient, denominator, numerator``: the IEEE
    quotient for special operands, otherwise the quotient with the sign of
    numerator / denominator."""
    _check_mods(ins)
    q, den, num = (np.broadcast_to(_f(w, ins, i), (64,)) for i in (1, 2, 3))
    special = (den == 0) | (num == 0) | ~np.isfinite(den) | ~np.isfinite(num)
    with np.errstate(all="ignore"):
        ieee = num / den
    neg = (den.view(np.uint32) ^ num.view(np.uint32)) >> 31
    signed = (np.abs(q).view(np.uint32) | (neg << 31).astype(np.uint32)).view(np.float32)
    w.vset_f32(ins, np.where(special, ieee, signed))


@op("v_cvt_f32_u32")
def _cvt_f32_u32(w, ins):
    _check_mods(ins)
    w.vset_f32(ins, np.asarray(w.vget(ins, 1), np.uint32).astype(np.float32))


@op("v_cvt_u32_f32")
def _cvt_u32_f32(w, ins):
    _check_mods(ins)
    x = np.asarray(_f(w, ins, 1), np.float64)
    r = np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), 0, 0xFFFFFFFF))
    w.vset(ins, r.astype(np.uint32))


def _f16_of(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint32) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16)


@op("v_cvt_f32_f16")
def _cvt_f32_f16(w, ins):
    _check_mods(ins)
    o = ins.ops[1]
    x = _f16_of(w.vget(ins, 1)).astype(np.float32)
    if o.abs:
        x = np.abs(x)
    if o.neg:
        x = -x
    w.vset_f32(ins, x)


def _to_f16_bits(x) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)


@op("v_cvt_f16_f32")
def _cvt_f16_f32(w, ins):
    _check_mods(ins)
    w.vset(ins, _to_f16_bits(_f(w, ins, 1)))


@op("v_cvt_pk_f16_f32")
def _cvt_pk_f16_f32(w, ins):
    _check_mods(ins)
    w.vset(ins, _to_f16_bits(_f(w, ins, 1)) | (_to_f16_bits(_f(w, ins, 2)) << np.uint32(16)))


def _bf16_bits_rne(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, nearest even; NaN stays a quiet NaN."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)
    nan = np.isnan(x)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint32), r) & np.uint32(0xFFFF)


@op("v_cvt_pk_bf16_f32")
def _cvt_pk_bf16_f32(w, ins):
    _check_mods(ins)
    a = np.broadcast_to(_f(w, ins, 1), (64,))
    b = np.broadcast_to(_f(w, ins, 2), (64,))
    w.vset(ins, _bf16_bits_rne(a) | (_bf16_bits_rne(b) << np.uint32(16)))


@op("v_pack_b32_f16")
def _pack(w, ins):
    _check_mods(ins, {"op_sel"})
    sel = ins.mods.get("op_sel", (0, 0, 0))
    if any(o.neg or o.abs for o in ins.ops[1:3]):
        raise SimError(f"v_pack_b32_f16 with neg/abs is not modelled at {ins.where()}")
    halves = []
    for i in (1, 2):
        x = np.asarray(w.vget(ins, i), np.uint32)
        halves.append((x >> np.uint32(16)) if sel[i - 1] else (x & np.uint32(0xFFFF)))
    w.vset(ins, halves[0] | (halves[1] << np.uint32(16)))


@op("v_cvt_pk_f32_fp8")
def _cvt_pk_f32_fp8(w, ins):
    """Two fp8 bytes (0, 1; or 2, 3 by SDWA WORD_1 / op_sel) into a register pair."""
    _check_mods(ins, {"op_sel"})
    x = np.broadcast_to(np.asarray(w.vget(ins, 1), np.uint32), (64,))
    if ins.mods.get("op_sel", (0,))[0]:
        x = x >> np.uint32(16)
    table = _FNUZ_TABLE if w.group.target.fp8_fnuz else E4M3FN_TABLE
    lo = table[(x & 0xFF).astype(np.intp)]
    hi = table[((x >> 8) & 0xFF).astype(np.intp)]
    dst = ins.ops[0]
    if dst.count != 2:
        raise SimError(f"v_cvt_pk_f32_fp8 needs a register pair destination at {ins.where()}")
    w.vset_regs(dst, np.stack([lo.view(np.uint32), hi.view(np.uint32)]))


# ---- packed math (VOP3P) -------------------------------------------------------

def _pk_sources(w, ins, n, width):
    """For each of ``n`` sources: (low-result operand, high-result operand) after
    op_sel / op_sel_hi / neg_lo / neg_hi. width 32: register pairs of float32;
    16: halves of one register as float16."""
    _check_mods(ins, {"op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp"})
    if ins.mods.get("clamp"):
        raise SimError(f"{ins.mnemonic} clamp is not modelled at {ins.where()}")
    op_sel = ins.mods.get("op_sel", (0,) * n)
    op_sel_hi = ins.mods.get("op_sel_hi", (1,) * n)
    neg_lo = ins.mods.get("neg_lo", (0,) * n)
    neg_hi = ins.mods.get("neg_hi", (0,) * n)
    out = []
    for i in range(n):
        o = ins.ops[i + 1]
        if o.neg or o.abs:
            raise SimError(f"{ins.mnemonic}: neg/abs on a packed source at {ins.where()}")
        if width == 32:
            if o.kind == "const":
                halves = [np.full(64, o.bits32, np.uint32)] * 2
            else:
                regs = w.vget_regs(Operand(o.kind, o.index, 2))
                halves = [regs[0], regs[1]]
            vals = [h.view(np.float32) for h in halves]
        else:
            x = np.broadcast_to(np.asarray(w.raw(o) if o.kind != "const" else np.uint32(o.bits16), np.uint32), (64,))
            vals = [_f16_of(x), _f16_of(x >> np.uint32(16))]
        lo = vals[op_sel[i]]
        hi = vals[op_sel_hi[i]]
        out.append((-lo if neg_lo[i] else lo, -hi if neg_hi[i] else hi))
    return out


def _pk32(fn, n):
    def h(w, ins):
        srcs = _pk_sources(w, ins, n, 32)
        with np.errstate(all="ignore"):
            lo = np.asarray(fn(*[s[0] for s in srcs]), np.float32)
            hi = np.asarray(fn(*[s[1] for s in srcs]), np.float32)
        dst = ins.ops[0]
        w.vset_regs(Operand("v", dst.index, 2), np.stack([lo.view(np.uint32), hi.view(np.uint32)]))
    return h


op("v_pk_mul_f32")(_pk32(lambda a, b: a * b, 2))
op("v_pk_add_f32")(_pk32(lambda a, b: a + b, 2))
op("v_pk_fma_f32")(_pk32(fma_f32, 3))


@op("v_pk_mul_f16")
def _pk_mul_f16(w, ins):
    """2 x fp16 products: exact in float32 (11 + 11 bits), rounded once to fp16."""
    (a_lo, a_hi), (b_lo, b_hi) = _pk_sources(w, ins, 2, 16)
    lo = _to_f16_bits(a_lo.astype(np.float32) * b_lo.astype(np.float32))
    hi = _to_f16_bits(a_hi.astype(np.float32) * b_hi.astype(np.float32))
    w.vset(ins, lo | (hi << np.uint32(16)))


# ---- compares ------------------------------------------------------------------

_FCMP = {
    "f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
    "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "lg": lambda a, b: (a < b) | (a > b), "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
}


def _fcmp(rel):
    def h(w, ins):
        _check_mods(ins, set())
        with np.errstate(invalid="ignore"):
            r = np.broadcast_to(_FCMP[rel](_f(w, ins, 1), _f(w, ins, 2)), (64,))
        w.mask_set(ins.ops[0], r)
    return h


for _rel in _FCMP:
    op(f"v_cmp_{_rel}_f32")(_fcmp(_rel))
