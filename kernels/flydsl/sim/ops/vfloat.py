"""Vector floating-point and conversion instructions (VOP1, VOP2, VOP3, VOP3P,
VOPC and their SDWA forms) of CDNA3 (gfx942) and CDNA4 (gfx950).

The kernel descriptor keeps denormals (``float_denorm_mode_32 = 3``,
``float_denorm_mode_16_64 = 3``), rounds to nearest even and sets
``ieee_mode``; numpy float32 arithmetic on x86 is exactly that, so the
single-rounding operations are numpy operations. Semantics follow the ISA
pseudo-code of AMD's CDNA3/CDNA4 documents; LLVM's assembler is the
authority on syntax. Decisions, and where hardware might differ:

- NaN results are quiet NaNs. Add, subtract and multiply (f32, packed f32,
  and ``v_pk_mul_f16``'s product) return their first NaN operand quieted
  (S0's, else S1's), and a NaN they make (inf - inf, 0 * inf) is numpy's
  default one; elsewhere the payload and sign are whatever numpy produces
  (hardware returns its own quieted NaN). Only ``v_max``/``v_min`` follow
  the pseudo-code bit for bit (a signalling NaN operand returns that NaN
  quieted, a quiet NaN operand is ignored).
- ``v_max_f32(+0, -0)`` is +0 and ``v_min_f32(+0, -0)`` is -0 in either
  operand order, as the CDNA4 pseudo-code says; ``v_max3``/``v_min3`` are two
  nested ``v_max``/``v_min`` (first S0 with S1, then with S2).
- ``v_fma_f32``, ``v_fmac_f32`` and ``v_div_fmas_f32`` round once: the
  product of two float32 is exact in float64, the float64 sum is rounded to
  odd (TwoSum gives its exact error), and rounding that to float32 is
  correct (53 >= 24 + 2 bits). ``nvfp4_suite.reference.emulate.fma_f32`` is also exact
  for float32 inputs but cannot take the post-scale of ``v_div_fmas``.
- ``v_exp_f32`` is float64 ``exp2`` rounded to float32 (correctly rounded
  unless the float64 value lies within about 2**-52 relative of a float32
  midpoint). Denormal results are kept. Hardware's v_exp_f32 is documented
  as approximate (about 1 ulp), and LLVM's own ``exp2`` lowering pre-scales
  inputs below -126, which suggests hardware flushes denormal results to 0:
  for the kernel that is a softmax weight below 2**-126, which no output
  can see. ``group.options["exp_ulps"] = k`` (a nonzero int) perturbs every
  finite nonzero result by k ulps on its bit pattern: k > 0 moves away from
  zero (saturating at infinity), k < 0 toward zero (saturating at a zero of
  the same sign); zeros, infinities and NaNs are left alone.
- ``v_rcp_f32`` is the correctly rounded 1/x (IEEE: 1/±0 = ±inf, 1/±inf =
  ±0, 1/denormal may overflow to inf); hardware is documented as 1 ulp.
- ``v_div_scale_f32`` follows the CDNA4 pseudo-code (the result is S0 when
  no branch assigns it; its ``1.0 / S1 == DENORM.f64`` branches cannot fire
  for float32 operands). ``v_div_fixup_f32`` follows it too, with
  ``UNDERFLOW_F32`` taken as a signed zero (the correctly rounded value in
  that branch) and one change: the text's ``exponent(S1) == 255 -> OVERFLOW``
  branch is unreachable (infinite and NaN S1 are handled before it), so the
  model tests the quotient S0 instead and returns a signed infinity; without
  that, quotients beyond about 2**190 (whose Newton-Raphson steps overflow
  to inf - inf = NaN) would come out NaN. ``v_div_fmas_f32``: the ISA text scales by 2**32 when VCC is
  set, which cannot undo ``v_div_scale``'s 2**64, so the division macro
  would be wrong. The model scales by 2**64 up when |S2| (the scaled
  quotient) >= 1, which is the case where only the denominator was scaled
  (quotient >= 2**95 before scaling), and by 2**-64 otherwise (the numerator
  was scaled because the quotient is denormal), with one rounding; the
  tests check that LLVM's fdiv sequence is then correctly rounded over the
  whole float32 range. Real hardware may choose the direction differently.
- ``v_cvt_u32_f32`` truncates toward zero, saturates (negative to 0, large
  and +inf to 0xffffffff) and turns NaN into 0. ``v_cvt_f32_u32`` rounds to
  nearest even.
- 16-bit results (``v_cvt_f16_f32``) zero the upper half of the register
  unless an SDWA destination select says otherwise; GFX9 hardware may
  preserve it (the kernel only reads the low half).
- ``v_cvt_f16_f32``, ``v_cvt_pk_f16_f32``, ``v_pk_mul_f16`` round to nearest
  even with fp16 denormals and overflow to inf; NaNs become quiet NaNs.
  ``v_cvt_pk_bf16_f32`` rounds to nearest even; a NaN keeps its sign and top
  payload bits with the quiet bit set.
- ``v_cvt_pk_f32_fp8`` reads E4M3FNUZ on gfx942 (bias 8, 0x80 the only NaN,
  no -0) and OCP E4M3FN on gfx950 (bias 7, 0x7f/0xff NaN, 0x80 = -0); NaN
  converts to 0x7fc00000 with the fp8 sign.
- Packed f32 ops (``v_pk_add/mul/fma_f32``): ``op_sel`` picks the 32-bit
  half of each source that feeds the low result, ``op_sel_hi`` (default all
  1) the half that feeds the high result, ``neg_lo``/``neg_hi`` negate the
  source of that result. The high dword of a constant operand is not
  modelled (SimError); LLVM always sets ``op_sel_hi`` to 0 for one.
  ``v_pk_mul_f16`` works the same way on 16-bit halves.
- Compare results written to VCC or an SGPR pair are 0 for inactive lanes.
- Not implemented (SimError): DPP, output modifiers (``mul:2``, ``mul:4``,
  ``div:2``), ``op_sel`` on anything but the packed ops and
  ``v_pack_b32_f16``, ``clamp`` on 16-bit results and compares, constants
  in the high half of packed sources, ``v_cmpx_*``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..program import SPECIAL_SGPRS, Instr, Operand
from ..wave import (
    LANES,
    SDWA_MODS,
    Core,
    Inline,
    SimError,
    Source,
    Wave,
    batched,
    check_form,
    mask_reader,
    op,
    plain_source,
    plain_text,
    put_mask,
    sdwa_source,
)

_VCC = Operand("s", *SPECIAL_SGPRS["vcc"], text="vcc")
_SIGN = np.uint32(0x80000000)
_MAG = np.uint32(0x7FFFFFFF)
_INF_BITS = 0x7F800000
_QNAN_BIT = np.uint32(0x00400000)
_MIN_NORMAL = np.float32(2.0 ** -126)
_TWO64 = 2.0 ** 64


# ---- form checking ---------------------------------------------------------------------------

def _validate(ins: Instr, nops: int, mods: frozenset, sdwa: bool) -> None:
    """SimError for an operand count, encoding or modifier the handler does not
    implement; remembered on ``ins`` once it passes."""
    name = ins.mnemonic
    check_form(ins, nops, mods, sdwa, "float ops")
    for o in ins.ops:
        if o.sext:
            raise SimError(f"{name}: sext() on a float operand {o.text} at {ins.where()}")
    ins.__dict__["_vfloat_ok"] = True


def _vop(*names: str, nops: int, mods: tuple = ("clamp",), sdwa: bool = False):
    """Register the decorated ``fn(w, ins)`` for ``names`` after a one-time
    validation of each instruction's form (see ``_validate``)."""
    allowed = frozenset(mods)

    def deco(fn):
        def handler(w: Wave, ins: Instr) -> None:
            if "_vfloat_ok" not in ins.__dict__:
                _validate(ins, nops, allowed, sdwa)
            fn(w, ins)
        handler.__name__, handler.__doc__ = fn.__name__, fn.__doc__
        op(*names)(handler)
        return fn
    return deco


def _f32(w: Wave, ins: Instr, i: int) -> np.ndarray:
    """Source ``ins.ops[i]`` as float32 ``[64]`` (abs/neg and SDWA select applied)."""
    x = w.vget_f32(ins, i)
    return x if x.shape == (LANES,) else np.broadcast_to(x, (LANES,))


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32).view(np.uint32)


def _exponent(x: np.ndarray) -> np.ndarray:
    """The biased exponent field (0 for zeros and denormals, 255 for inf/NaN)."""
    return ((_bits(x) >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32)


def _is_denorm(x: np.ndarray) -> np.ndarray:
    return (x != 0) & (np.abs(x) < _MIN_NORMAL)


def _clamp_f32(ins: Instr, x: np.ndarray) -> np.ndarray:
    """The ``clamp`` modifier of an f32 result (DX10 mode: NaN gives 0)."""
    if ins.mods.get("clamp"):
        return np.where(np.isnan(x), np.float32(0), np.clip(x, np.float32(0), np.float32(1)))
    return x


# ---- exact fused multiply-add ----------------------------------------------------------------

# A deliberate independent model: ``nvfp4_suite.reference.emulate`` has its own
# fused multiply-add, and this one is written apart from it on purpose (not
# imported). The simulator checks the compiled kernel against the reference,
# so a rounding mistake shared by both would hide itself. This one is tested
# against exact rational arithmetic (``tests/test_flydsl_sim_vfloat.py``).
def fma_f32(a, b, c, scale=None) -> np.ndarray:
    """float32 ``(a * b + c) * scale`` with one rounding; a, b, c float32, scale
    a float64 power of two per lane (or None for 1).

    The float32 product is exact in float64; the float64 sum is made
    round-to-odd with its exact TwoSum error, and a round-to-odd value with
    29 spare bits rounds to float32 (denormals included) exactly as the
    exact sum would. Scaling by a power of two in float64 is exact."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.asarray(a, np.float64) * np.asarray(b, np.float64)
        y = np.asarray(c, np.float64)
        s = x + y
        bb = s - x
        err = (x - (s - bb)) + (y - bb)
        inexact = np.isfinite(err) & (err != 0) & ((s.view(np.int64) & 1) == 0)
        if inexact.any():
            s = np.where(inexact, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        if scale is not None:
            s = s * scale
        return s.astype(np.float32)


# ---- f32 arithmetic ----------------------------------------------------------------------

def _any_nan(x: np.ndarray) -> bool:
    """Whether float ``x`` (any shape) holds a NaN: its sum of squares is NaN
    exactly then (no square is negative, so no inf - inf arises; an overflow
    is inf), and a dot product (BLAS) costs half of a ``minimum`` reduction
    on a batch's few waves."""
    flat = x.ravel()
    sq = flat.dot(flat)
    return sq != sq


def _first_nan(fn):
    """``fn(a, b)`` (a float32 add, subtract or multiply of S0 ``a`` and S1
    ``b``: arrays or scalars that broadcast) with a definite NaN: where an
    operand is NaN, the result is the first NaN operand (S0's, else S1's)
    with its quiet bit set. numpy leaves which of two NaN operands
    propagates to the loop it picks, and picks by the operands' strides and
    alignment, so the same lanes could give one NaN in a batch of waves and
    another alone. A NaN the operation makes (inf - inf, 0 * inf) stays
    numpy's default NaN."""
    def op(a, b) -> np.ndarray:
        r = fn(a, b)
        if not _any_nan(r):
            return r
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        quiet = np.uint32(0x00400000)
        return np.where(a != a, a.view(np.uint32) | quiet,
                        np.where(b != b, b.view(np.uint32) | quiet, r.view(np.uint32))).view(np.float32)
    return op


_ADD, _MUL = _first_nan(np.add), _first_nan(np.multiply)
_SUB, _SUBREV = _first_nan(np.subtract), _first_nan(lambda a, b: np.subtract(b, a))
# Each op, and the name a fused stretch calls it by (``_decoder``'s Inline form).
_BINARY = {
    "v_add_f32": (_ADD, "_ADD"),
    "v_sub_f32": (_SUB, "_SUB"),
    "v_subrev_f32": (_SUBREV, "_SUBREV"),
    "v_mul_f32": (_MUL, "_MUL"),
}


def _binary(fn):
    def h(w: Wave, ins: Instr) -> None:
        with np.errstate(all="ignore"):
            w.vset_f32(ins, fn(_f32(w, ins, 1), _f32(w, ins, 2)))
    return h


def _f32_reader(o: Operand):
    """A reader ``fn(view)`` of a float32 source with its ``abs`` then ``neg``
    applied (as bit operations, as ``Wave.vget_f32``): ``plain_source``'s
    shapes; None for an operand it does not read."""
    if not (o.abs or o.neg):
        return plain_source(o, as_f32=True)
    read = plain_source(dataclasses.replace(o, abs=False, neg=False))
    if read is None:
        return None
    keep, flip = np.uint32(0x7FFFFFFF if o.abs else 0xFFFFFFFF), np.uint32(0x80000000 if o.neg else 0)
    return lambda w: ((read(w) & keep) ^ flip).view(np.float32)


def _decoder(nsrc: int, compute, sdwa: bool, raw: bool = False, mods: tuple = ("clamp",), name: str = ""):
    """The batched decoder of an op writing ``compute(*sources)`` (float32, or
    uint32 bits) to its destination: sources as float32 with ``abs``/``neg``
    applied (uint32 without modifiers with ``raw``), readers and destination
    bound once, for the forms its handler accepts (``mods``, ``sdwa``)
    without ``clamp`` or an SDWA destination select. With ``name`` (what a
    fused stretch calls ``compute`` by), a form without modifiers records
    its ``Inline`` form: that call on the same sources' texts."""
    def decode(ins: Instr) -> Core | None:
        try:
            _validate(ins, nsrc + 1, frozenset(mods), sdwa)
        except SimError:
            return None
        if ins.ops[0].kind != "v" or ins.ops[0].count != 1 or ins.mods.get("clamp"):
            return None
        srcs = ins.ops[1:]
        readers: list
        if ins.enc == "sdwa":
            if set(ins.mods) - SDWA_MODS or ins.mods.get("dst_sel", "DWORD") != "DWORD" \
                    or any(o.kind != "v" for o in srcs):
                return None
            readers = [sdwa_source(o, ins.mods.get(f"src{k}_sel", "DWORD")) for k, o in enumerate(srcs)]
            if not raw and all(r is not None for r in readers):
                readers = [lambda w, r=r: r(w).view(np.float32) for r in readers]
        elif ins.enc in ("e32", "e64", "") and not ins.mods:
            readers = [plain_source(o) if raw else _f32_reader(o) for o in srcs]
        else:
            return None
        if any(r is None for r in readers):
            return None
        d = ins.ops[0].index
        if name and ins.enc != "sdwa":
            texts = tuple(t for o in srcs if (t := plain_text(o, as_f32=not raw)) is not None)
            if len(texts) == nsrc:
                # The readers above are these texts' (``_f32_reader`` without abs/neg is ``plain_source``).
                args = ", ".join("{" + "abc"[k] + "}" for k in range(nsrc))
                ins.__dict__["_inline"] = Inline(f"{name}({args}).view(np.uint32)", d, texts,
                                                 {"np": np, name: compute})
        if nsrc == 1:
            (ra,) = readers

            def core(w) -> None:
                w.vb[:, d] = compute(ra(w)).view(np.uint32)
        elif nsrc == 2:
            ra, rb = readers

            def core(w) -> None:
                w.vb[:, d] = compute(ra(w), rb(w)).view(np.uint32)
        else:
            ra, rb, rc = readers

            def core(w) -> None:
                w.vb[:, d] = compute(ra(w), rb(w), rc(w)).view(np.uint32)
        return core
    return decode


for _name, (_fn, _fn_name) in _BINARY.items():
    _vop(_name, nops=3, sdwa=True)(_binary(_fn))
    batched(_name)(_decoder(2, _fn, True, name=_fn_name))


@_vop("v_fma_f32", nops=4)
def _fma(w: Wave, ins: Instr) -> None:
    """D = S0 * S1 + S2, one rounding."""
    w.vset_f32(ins, fma_f32(_f32(w, ins, 1), _f32(w, ins, 2), _f32(w, ins, 3)))


@_vop("v_fmac_f32", nops=3)
def _fmac(w: Wave, ins: Instr) -> None:
    """D = S0 * S1 + D, one rounding."""
    d = w.v[ins.ops[0].index].view(np.float32)
    w.vset_f32(ins, fma_f32(_f32(w, ins, 1), _f32(w, ins, 2), d))


@batched("v_fmac_f32")
def _fmac_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_fmac_f32`` (e32/e64 without ``clamp``)."""
    try:
        _validate(ins, 3, frozenset({"clamp"}), False)
    except SimError:
        return None
    if ins.enc not in ("e32", "e64", "") or ins.mods or ins.ops[0].kind != "v" or ins.ops[0].count != 1:
        return None
    ra, rb = _f32_reader(ins.ops[1]), _f32_reader(ins.ops[2])
    if ra is None or rb is None:
        return None
    d = ins.ops[0].index

    def core(w) -> None:
        w.vb[:, d] = fma_f32(ra(w), rb(w), w.vb[:, d].view(np.float32)).view(np.uint32)
    return core


def _order_key(bits: np.ndarray) -> np.ndarray:
    """int32 keys ordered as the non-NaN floats of ``bits`` are, with -0 < +0."""
    i = bits.view(np.int32)
    return i ^ ((i >> 31) & np.int32(0x7FFFFFFF))


def _max2(a: np.ndarray, b: np.ndarray, want_max: bool) -> np.ndarray:
    """v_max_f32 / v_min_f32 in IEEE mode, per the CDNA4 pseudo-code: a
    signalling NaN operand (S0 first) returns it quieted, a quiet NaN operand
    is ignored, +0 is above -0."""
    pick = np.maximum if want_max else np.minimum
    r = pick(a, b)
    if not _any_nan(r):  # (pick propagates a NaN operand)
        # numpy's maximum/minimum order numbers as IEEE does; of two equal operands
        # they return one by their order, so the two orders differ only for zeros
        # of opposite signs, where the ISA wants +0 for max (the AND of the two
        # results' bits) and -0 for min (the OR).
        rb, sb = _bits(r), _bits(pick(b, a))
        return (np.bitwise_and(rb, sb, out=rb) if want_max else np.bitwise_or(rb, sb, out=rb)).view(np.float32)
    nan_a, nan_b = a != a, b != b
    ba, bb = _bits(a), _bits(b)
    ka, kb = _order_key(ba), _order_key(bb)
    r = np.where(ka >= kb if want_max else ka < kb, ba, bb)
    r = np.where(nan_b, ba, r)
    r = np.where(nan_a, bb, r)
    r = np.where(nan_b & ((bb & _QNAN_BIT) == 0), bb | _QNAN_BIT, r)
    r = np.where(nan_a & ((ba & _QNAN_BIT) == 0), ba | _QNAN_BIT, r)
    return r.view(np.float32)


def _minmax(want_max: bool, three: bool):
    def h(w: Wave, ins: Instr) -> None:
        r = _max2(_f32(w, ins, 1), _f32(w, ins, 2), want_max)
        if three:
            r = _max2(r, _f32(w, ins, 3), want_max)
        w.vset_f32(ins, r)
    return h


_vop("v_max_f32", nops=3, sdwa=True)(_minmax(True, False))
_vop("v_min_f32", nops=3, sdwa=True)(_minmax(False, False))
_vop("v_max3_f32", nops=4)(_minmax(True, True))
_vop("v_min3_f32", nops=4)(_minmax(False, True))
batched("v_max_f32")(_decoder(2, lambda a, b: _max2(a, b, True), True))
batched("v_min_f32")(_decoder(2, lambda a, b: _max2(a, b, False), True))
batched("v_max3_f32")(_decoder(3, lambda a, b, c: _max2(_max2(a, b, True), c, True), False))
batched("v_min3_f32")(_decoder(3, lambda a, b, c: _max2(_max2(a, b, False), c, False), False))
batched("v_fma_f32")(_decoder(3, fma_f32, False))


@_vop("v_exp_f32", nops=2, sdwa=True)
def _exp(w: Wave, ins: Instr) -> None:
    """D = 2**S0, float64 exp2 rounded to float32 (see the module note), with
    the optional ``exp_ulps`` perturbation."""
    with np.errstate(over="ignore"):
        r = np.exp2(_f32(w, ins, 1).astype(np.float64)).astype(np.float32)
    k = w.group.options.get("exp_ulps")
    if k:
        if not isinstance(k, int) or isinstance(k, bool):
            raise SimError(f"option exp_ulps must be an int, got {k!r}")
        b = r.view(np.uint32)
        mag = (b & _MAG).astype(np.int64)
        move = (mag != 0) & (mag < _INF_BITS)
        moved = (b & _SIGN) | np.clip(mag + k, 0, _INF_BITS).astype(np.uint32)
        r = np.where(move, moved, b).view(np.float32)
    w.vset_f32(ins, r)


@_vop("v_rcp_f32", nops=2, sdwa=True)
def _rcp(w: Wave, ins: Instr) -> None:
    """D = 1 / S0, correctly rounded."""
    with np.errstate(divide="ignore", over="ignore"):
        w.vset_f32(ins, np.float32(1) / _f32(w, ins, 1))


# ---- the division macro ------------------------------------------------------------------

def _div_scale_value(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``v_div_scale_f32`` on float32 sources of any (broadcastable) shapes: D
    (float32) and the post-scale flag (bool)."""
    e1, e2 = _exponent(s1), _exponent(s2)
    with np.errstate(all="ignore"):
        quot = s2 / s1
    zero = (s2 == 0) | (s1 == 0)
    rest = ~zero
    big = rest & (e2 - e1 >= 96)
    rest &= ~big
    den = rest & _is_denorm(s1)
    rest &= ~den
    qden = rest & _is_denorm(quot)
    rest &= ~qden
    tiny = rest & (e2 <= 23)
    up = (big & (s0 == s1)) | den | (qden & (s0 == s2)) | tiny
    with np.errstate(over="ignore"):
        scaled = (s0.astype(np.float64) * _TWO64).astype(np.float32)
    d = np.where(up, scaled, s0)
    return np.where(zero, np.float32(np.nan), d), big | qden


@_vop("v_div_scale_f32", nops=5)
def _div_scale(w: Wave, ins: Instr) -> None:
    """D = S0 scaled by 2**±64 where the Newton-Raphson division of S2 by S1
    would meet denormals; the SGPR-pair destination gets the post-scale flag."""
    d, flag = _div_scale_value(_f32(w, ins, 2), _f32(w, ins, 3), _f32(w, ins, 4))
    w.vset_f32(ins, d)
    w.mask_set(ins.ops[1], flag)


def _div_fmas_value(vcc: np.ndarray, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """``v_div_fmas_f32`` on float32 sources and the VCC lanes (bool) of any
    (broadcastable) shapes: float32."""
    scale = np.where(vcc, np.where(np.abs(s2) >= 1, _TWO64, 1 / _TWO64), 1.0)
    return fma_f32(s0, s1, s2, scale)


@_vop("v_div_fmas_f32", nops=4)
def _div_fmas(w: Wave, ins: Instr) -> None:
    """D = S0 * S1 + S2 with one rounding, post-scaled by 2**±64 in lanes where
    VCC is set (direction: see the module note)."""
    w.vset_f32(ins, _div_fmas_value(w.mask_get(_VCC), _f32(w, ins, 1), _f32(w, ins, 2), _f32(w, ins, 3)))


def _div_fixup_value(q: np.ndarray, den: np.ndarray, num: np.ndarray) -> np.ndarray:
    """``v_div_fixup_f32`` on float32 sources of any (broadcastable) shapes: float32."""
    neg = np.signbit(den) ^ np.signbit(num)
    sign = np.where(neg, _SIGN, np.uint32(0))
    inf_d, inf_n = np.isinf(den), np.isinf(num)
    zero_d, zero_n = den == 0, num == 0
    out = sign | (_bits(q) & _MAG)
    # The ISA text tests exponent(S1) == 255 here, which the infinity and NaN
    # cases above make unreachable; the quotient's exponent is what the macro
    # needs (a quotient that overflowed inside the Newton-Raphson steps).
    out = np.where(_exponent(q) == 255, sign | np.uint32(_INF_BITS), out)
    out = np.where((_exponent(num) - _exponent(den) < -150), sign, out)
    out = np.where(inf_d | zero_n, sign, out)
    out = np.where(zero_d | inf_n, sign | np.uint32(_INF_BITS), out)
    out = np.where((zero_d & zero_n) | (inf_d & inf_n), np.uint32(0xFFC00000), out)
    out = np.where(np.isnan(den), _bits(den) | _QNAN_BIT, out)
    out = np.where(np.isnan(num), _bits(num) | _QNAN_BIT, out)
    return out.view(np.float32)


@_vop("v_div_fixup_f32", nops=4)
def _div_fixup(w: Wave, ins: Instr) -> None:
    """D = the quotient S0 of S2 / S1 with the special cases of division applied."""
    w.vset_f32(ins, _div_fixup_value(_f32(w, ins, 1), _f32(w, ins, 2), _f32(w, ins, 3)))


batched("v_div_fixup_f32")(_decoder(3, _div_fixup_value, False))


def _vop3_readers(ins: Instr, nops: int, first: int) -> list | None:
    """float32 readers (``_f32_reader``) of ``ins.ops[first:]`` for the plain
    VOP3 form (no ``clamp``) with ``nops`` operands of a float op whose
    destination is one VGPR; None otherwise."""
    try:
        _validate(ins, nops, frozenset({"clamp"}), False)
    except SimError:
        return None
    if ins.enc not in ("e32", "e64", "") or ins.mods or ins.ops[0].kind != "v" or ins.ops[0].count != 1:
        return None
    readers = [_f32_reader(o) for o in ins.ops[first:]]
    return None if any(r is None for r in readers) else readers


@batched("v_div_fmas_f32")
def _div_fmas_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_div_fmas_f32`` (VCC read per wave)."""
    readers = _vop3_readers(ins, 4, 1)
    if readers is None:
        return None
    vcc, d = mask_reader(_VCC), ins.ops[0].index
    assert vcc is not None  # VCC is an SGPR pair

    def core(w) -> None:
        w.vb[:, d] = _div_fmas_value(vcc(w), *[r(w) for r in readers]).view(np.uint32)
    return core


@batched("v_div_scale_f32")
def _div_scale_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_div_scale_f32``: the flag to each wave's SGPR pair."""
    readers = _vop3_readers(ins, 5, 2)
    flag = ins.ops[1]
    if readers is None or flag.kind != "s" or flag.count != 2:
        return None
    d = ins.ops[0].index

    def core(w) -> None:
        value, up = _div_scale_value(*[r(w) for r in readers])
        w.vb[:, d] = value.view(np.uint32)
        put_mask(w, flag, up)
    return core


# ---- compares ----------------------------------------------------------------------------

_COMPARES = {
    "f": lambda a, b: np.zeros(LANES, bool),
    "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
    "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)),
    "ngt": lambda a, b: ~(a > b), "nle": lambda a, b: ~(a <= b),
    "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
    "tru": lambda a, b: np.ones(LANES, bool),
}


def _compare(fn):
    def h(w: Wave, ins: Instr) -> None:
        with np.errstate(invalid="ignore"):
            w.mask_set(ins.ops[0], fn(_f32(w, ins, 1), _f32(w, ins, 2)))
    return h


def _compare_decoder(fn):
    """The batched decoder of ``v_cmp_*_f32`` (e32/e64, ``abs``/``neg`` allowed):
    the compare of every wave's lanes to its SGPR-pair destination."""
    def decode(ins: Instr) -> Core | None:
        try:
            _validate(ins, 3, frozenset(), True)
        except SimError:
            return None
        d = ins.ops[0]
        if ins.enc not in ("e32", "e64", "") or ins.mods or d.kind != "s" or d.count != 2:
            return None
        ra, rb = _f32_reader(ins.ops[1]), _f32_reader(ins.ops[2])
        if ra is None or rb is None:
            return None

        def core(w) -> None:
            put_mask(w, d, fn(ra(w), rb(w)))
        return core
    return decode


for _cond, _fn in _COMPARES.items():
    _vop(f"v_cmp_{_cond}_f32", nops=3, mods=(), sdwa=True)(_compare(_fn))
    batched(f"v_cmp_{_cond}_f32")(_compare_decoder(_fn))


# ---- conversions -------------------------------------------------------------------------

@_vop("v_cvt_f32_u32", nops=2, sdwa=True)
def _cvt_f32_u32(w: Wave, ins: Instr) -> None:
    """D = float32(S0 as uint32), round to nearest even."""
    w.vset_f32(ins, np.broadcast_to(w.vget(ins, 1), (LANES,)).astype(np.uint32).astype(np.float32))


def _f32_to_u32(x: np.ndarray) -> np.ndarray:
    """uint32 of float32 ``x`` (any shape) truncated, saturating; NaN gives 0."""
    r = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=2.0 ** 32, neginf=0.0)), 0, 2.0 ** 32 - 1)
    return r.astype(np.uint32)


@_vop("v_cvt_u32_f32", nops=2, sdwa=True)
def _cvt_u32_f32(w: Wave, ins: Instr) -> None:
    """D = uint32(S0) truncated, saturating; NaN gives 0."""
    w.vset(ins, _f32_to_u32(_f32(w, ins, 1)))


batched("v_cvt_f32_u32")(_decoder(1, lambda x: x.astype(np.float32), True, raw=True))
batched("v_cvt_u32_f32")(_decoder(1, _f32_to_u32, True))
batched("v_rcp_f32")(_decoder(1, lambda x: np.float32(1) / x, True))


def _f16_source(w: Wave, ins: Instr, i: int) -> np.ndarray:
    """Source ``ins.ops[i]`` as fp16 bit patterns (uint16 ``[64]``): the low 16
    bits after the SDWA select, with abs/neg applied to the fp16 sign."""
    h = (np.broadcast_to(w.vget(ins, i), (LANES,)) & np.uint32(0xFFFF)).astype(np.uint16)
    o = ins.ops[i]
    if o.abs:
        h = h & np.uint16(0x7FFF)
    if o.neg:
        h = h ^ np.uint16(0x8000)
    return h


def _f16_round(x: np.ndarray, quiet: bool = False) -> np.ndarray:
    """uint16 fp16 bit patterns of float32 ``x`` (any shape): round to nearest
    even, fp16 denormals kept, overflow to infinity, NaNs quiet (``quiet``:
    ``x``'s NaNs are already, as ``_MUL``'s results are, so nothing is checked).
    An overflow warns unless the caller turned warnings off, as a launch does
    for its cores and handlers (an ``errstate`` here cost a third of a call)."""
    h = x.astype(np.float16).view(np.uint16)
    if quiet:
        return h
    # The conversion keeps a NaN's top payload bits (the quiet bit among them),
    # so only a signalling one needs its quiet bit set.
    if _any_nan(x):
        nan = x != x
        h[nan] |= np.uint16(0x0200)
    return h


def _to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> fp16 bits (uint32), round to nearest even, NaNs quiet (``_f16_round``)."""
    return _f16_round(np.asarray(x, np.float32)).astype(np.uint32)


# Every fp16 bit pattern's float32 value (exact; NaN payloads as numpy converts
# them): a gather is several times faster than numpy's element-wise conversion.
_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


def _f16_to_f32(h: np.ndarray) -> np.ndarray:
    """float32 of uint16 fp16 bit patterns ``h`` (any shape), exact."""
    return _F16_TO_F32.take(h)


def _f16_products(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint32 ``[n, 64]``: ``v_pk_mul_f16`` without selects or negations, lanes
    ``a``, ``b`` (uint32 ``[n, 64]``): each register's halves in order (low
    first) as fp16 ``[n, 128]``, their products rounded to fp16 the result's
    halves in place. The product of two fp16 values is exact in float32: one
    rounding."""
    prod = _MUL(_f16_to_f32(a.view(np.uint16)), _f16_to_f32(b.view(np.uint16)))
    return _f16_round(prod, quiet=True).view(np.uint32)


# The names the fp16 Inline texts use.
_F16_NAMES = {"np": np, "_f16_to_f32": _f16_to_f32, "_f16_products": _f16_products}


@_vop("v_cvt_f32_f16", nops=2, sdwa=True)
def _cvt_f32_f16(w: Wave, ins: Instr) -> None:
    """D = float32(S0.f16), exact."""
    w.vset_f32(ins, _f16_to_f32(_f16_source(w, ins, 1)))


_cvt_f32_f16_any = _decoder(
    1, lambda x: _f16_to_f32(x.astype(np.uint16)), True, raw=True)


@batched("v_cvt_f32_f16")
def _cvt_f32_f16_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_cvt_f32_f16``: a VGPR's low or (SDWA WORD_1)
    high half read in place as fp16 (every other half of its lanes), any other
    form it binds through its sources' readers."""
    core = _cvt_f32_f16_any(ins)
    o = ins.ops[1]
    sel = ins.mods.get("src0_sel", "DWORD") if ins.enc == "sdwa" else "DWORD"
    if core is None or o.kind != "v" or sel not in ("DWORD", "WORD_0", "WORD_1"):
        return core
    src, d = o.index, ins.ops[0].index
    text = _HALF_TEXT[sel == "WORD_1"]
    ins.__dict__["_inline"] = Inline(text, d, (Source("{r}", ("v", src)),), _F16_NAMES)
    fn = _HALF_FN[sel == "WORD_1"]

    def halves(w) -> None:
        w.vb[:, d] = fn(w.vb[:, src])
    return halves


# ``v_cvt_f32_f16`` of a VGPR's low or high half ({a}: its lanes, uint32 ``[n,
# 64]``) read in place as fp16 (every other half), the core's arithmetic and
# a fused stretch's.
_HALF_TEXT = {half: "_f16_to_f32({a}.view(np.uint16)[:, %d::2]).view(np.uint32)" % half for half in (0, 1)}
_HALF_FN = {half: eval("lambda a: " + text.format(a="a"), dict(_F16_NAMES)) for half, text in _HALF_TEXT.items()}


@_vop("v_cvt_f16_f32", nops=2, mods=(), sdwa=True)
def _cvt_f16_f32(w: Wave, ins: Instr) -> None:
    """D.f16 = S0 rounded to nearest even (upper half zero, see the module note)."""
    w.vset(ins, _to_f16_bits(_f32(w, ins, 1)))


batched("v_cvt_f16_f32")(_decoder(1, _to_f16_bits, True, mods=()))


@_vop("v_cvt_pk_f16_f32", nops=3, mods=())
def _cvt_pk_f16_f32(w: Wave, ins: Instr) -> None:
    """D = {f16(S1), f16(S0)}, round to nearest even."""
    w.vset(ins, _pack_halves(_f16_round, _f32(w, ins, 1), _f32(w, ins, 2)))


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns of float32 ``x`` (any shape), round to nearest
    even; NaN keeps sign and top payload bits with the quiet bit set."""
    b = _bits(x)
    out = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    if _any_nan(x):
        nan = x != x
        out[nan] = ((b[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def _pack_halves(round16, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint32: ``round16`` (float32 -> uint16 bit patterns) of ``a`` in the low
    half, of ``b`` in the high half (float32 ``a``, ``b`` of broadcastable
    shapes), both rounded in one call on an interleaved pair."""
    pair = np.empty(np.broadcast_shapes(np.shape(a), np.shape(b)) + (2,), np.float32)
    pair[..., 0] = a
    pair[..., 1] = b
    return round16(pair).view(np.uint32)[..., 0]


@_vop("v_cvt_pk_bf16_f32", nops=3, mods=())
def _cvt_pk_bf16_f32(w: Wave, ins: Instr) -> None:
    """D = {bf16(S1), bf16(S0)}, round to nearest even."""
    w.vset(ins, _pack_halves(_bf16_round, _f32(w, ins, 1), _f32(w, ins, 2)))


@_vop("v_pack_b32_f16", nops=3, mods=("op_sel",))
def _pack_b32_f16(w: Wave, ins: Instr) -> None:
    """D = {S1.f16, S0.f16}; ``op_sel`` bit i takes source i's high half."""
    sel = tuple(ins.mods.get("op_sel", (0, 0, 0))) + (0, 0, 0)
    if sel[2]:
        raise SimError(f"{ins.mnemonic}: destination op_sel not implemented at {ins.where()}")
    halves = []
    for i in (1, 2):
        x = np.broadcast_to(w.vget(ins, i), (LANES,)).astype(np.uint32)
        h = (x >> np.uint32(16 * sel[i - 1])) & np.uint32(0xFFFF)
        o = ins.ops[i]
        if o.abs:
            h = h & np.uint32(0x7FFF)
        if o.neg:
            h = h ^ np.uint32(0x8000)
        halves.append(h)
    w.vset(ins, halves[0] | (halves[1] << np.uint32(16)))


@batched("v_pack_b32_f16")
def _pack_b32_f16_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_pack_b32_f16`` without ``abs``/``neg``."""
    try:
        _validate(ins, 3, frozenset({"op_sel"}), False)
    except SimError:
        return None
    sel = tuple(ins.mods.get("op_sel", (0, 0, 0))) + (0, 0, 0)
    ra, rb = plain_source(ins.ops[1]), plain_source(ins.ops[2])
    if sel[2] or ra is None or rb is None or ins.ops[0].kind != "v":
        return None
    d, lo, hi = ins.ops[0].index, np.uint32(16 * sel[0]), np.uint32(16 * sel[1])
    half = np.uint32(0xFFFF)

    def core(w) -> None:
        w.vb[:, d] = ((ra(w) >> lo) & half) | (((rb(w) >> hi) & half) << np.uint32(16))
    return core


# A deliberate independent model of the fp8 bytes (not imported from
# ``nvfp4_suite.reference.formats``, which decodes the same bytes for the
# reference): what the hardware's conversion instruction returns is written
# here from the ISA's description of E4M3FNUZ and OCP E4M3FN, so a wrong table
# in the reference cannot make the simulated kernel agree with it. The
# simulator's tests compare it with ml_dtypes' conversion for all 256 bytes.
def _fp8_table(fnuz: bool) -> np.ndarray:
    """float32 bit patterns of the 256 E4M3FNUZ (``fnuz``) or OCP E4M3FN bytes."""
    out = np.zeros(256, np.uint32)
    bias = 8 if fnuz else 7
    for byte in range(256):
        sign, e, m = byte >> 7, (byte >> 3) & 0xF, byte & 7
        if (fnuz and byte == 0x80) or (not fnuz and e == 15 and m == 7):
            out[byte] = 0x7FC00000 | sign << 31
            continue
        mag = (m / 8) * 2.0 ** (1 - bias) if e == 0 else (1 + m / 8) * 2.0 ** (e - bias)
        out[byte] = np.array(-mag if sign else mag, np.float32).view(np.uint32)
    return out


_FP8 = {True: _fp8_table(True), False: _fp8_table(False)}


@_vop("v_cvt_pk_f32_fp8", nops=2, mods=(), sdwa=True)
def _cvt_pk_f32_fp8(w: Wave, ins: Instr) -> None:
    """D[0:1] = the two fp8 bytes of a 16-bit half of S0 (WORD_1 with SDWA's
    ``src0_sel:WORD_1``) as float32, low byte in D[0]."""
    if ins.enc == "sdwa":
        sel = ins.mods.get("src0_sel", "DWORD")
        if sel not in ("WORD_0", "WORD_1", "DWORD") or ins.mods.get("dst_sel", "DWORD") != "DWORD":
            raise SimError(f"{ins.mnemonic}: select {sel} / dst_sel not implemented at {ins.where()}")
    if ins.ops[0].kind != "v" or ins.ops[0].count != 2:
        raise SimError(f"{ins.mnemonic}: destination must be a VGPR pair at {ins.where()}")
    if ins.ops[1].neg or ins.ops[1].abs:
        raise SimError(f"{ins.mnemonic}: source modifiers not implemented at {ins.where()}")
    x = np.broadcast_to(w.vget(ins, 1), (LANES,)).astype(np.uint32)
    table = _FP8[w.group.target.fnuz]
    w.vset_regs(ins.ops[0], np.stack([table[x & np.uint32(0xFF)], table[(x >> np.uint32(8)) & np.uint32(0xFF)]]))


# ---- packed (VOP3P) ------------------------------------------------------------------------

def _pk_plan(ins: Instr, n: int) -> tuple:
    """Per source: (half for the low result, half for the high result, negate
    low, negate high), from ``op_sel``/``op_sel_hi``/``neg_lo``/``neg_hi``."""
    plan = ins.__dict__.get("_vfloat_pk")
    if plan is None:
        def mod(key, default):
            v = tuple(ins.mods.get(key, (default,) * n))
            return v + (default,) * (n - len(v))
        sel, sel_hi = mod("op_sel", 0), mod("op_sel_hi", 1)
        neg_lo, neg_hi = mod("neg_lo", 0), mod("neg_hi", 0)
        for i in range(n):
            o = ins.ops[i + 1]
            if o.neg or o.abs:
                raise SimError(f"{ins.mnemonic}: neg/abs on {o.text} (packed ops use neg_lo/neg_hi) at {ins.where()}")
            if o.kind == "const" and (sel[i] or sel_hi[i]):
                raise SimError(f"{ins.mnemonic}: the high half of constant {o.text} is not modelled at {ins.where()}")
        plan = tuple(zip(sel, sel_hi, neg_lo, neg_hi))
        ins.__dict__["_vfloat_pk"] = plan
    return plan


def _pk_f32_sources(w: Wave, ins: Instr, n: int) -> list[np.ndarray]:
    """Each source of a packed f32 op as float32 ``[2, 64]``: row 0 feeds the
    low result, row 1 the high result."""
    out = []
    for i, (sel, sel_hi, neg_lo, neg_hi) in enumerate(_pk_plan(ins, n)):
        o = ins.ops[i + 1]
        if o.kind == "const":
            words = np.full((2, LANES), o.bits32, np.uint32)
        elif o.kind == "v":
            words = w.v[o.index:o.index + 2]
        else:
            words = np.repeat(w.s[o.index:o.index + 2, None], LANES, axis=1)
        if o.kind != "const" and (sel, sel_hi) != (0, 1):
            words = words[[sel, sel_hi]]
        if neg_lo or neg_hi:
            words = words ^ np.array([[neg_lo << 31], [neg_hi << 31]], np.uint32)
        out.append(words.view(np.float32))
    return out


def _pk_f32(n: int, fn):
    def h(w: Wave, ins: Instr) -> None:
        if ins.ops[0].kind != "v" or ins.ops[0].count != 2:
            raise SimError(f"{ins.mnemonic}: destination must be a VGPR pair at {ins.where()}")
        # Both results in one [2, 64] operation: row 0 the low result, row 1 the high.
        src = _pk_f32_sources(w, ins, n)
        with np.errstate(all="ignore"):
            res = _clamp_f32(ins, fn(*src)).astype(np.float32, copy=False)
        w.vset_regs(ins.ops[0], res.view(np.uint32))
    return h


def _pk_f32_reader(o: Operand, sel: int, sel_hi: int, neg_lo: int, neg_hi: int):
    """A reader ``fn(view)`` of a packed f32 source, a VGPR or SGPR pair: float32
    rows ``[n, 2, 64]`` (row 0 feeds the low result, row 1 the high), or one
    row ``[n, 1, 64]``/``[n, 1, 1]`` that feeds both (views where nothing is
    negated)."""
    idx = o.index
    if (sel, sel_hi) == (0, 1):
        key: tuple = (slice(None), slice(idx, idx + 2))
    elif sel == sel_hi:
        key = (slice(None), idx + sel, None)
    else:
        key = (slice(None), [idx + sel, idx + sel_hi])
    if o.kind == "s":
        key += (None,)
    regs = "vb" if o.kind == "v" else "sb"
    if not (neg_lo or neg_hi):
        return lambda w: getattr(w, regs)[key].view(np.float32)
    neg = np.array([[neg_lo << 31], [neg_hi << 31]], np.uint32)
    return lambda w: (getattr(w, regs)[key] ^ neg).view(np.float32)


def _pk_inline(ins: Instr, plan: tuple, name: str, fn) -> Inline | None:
    """The ``Inline`` form of a packed f32 op (``_pk_plan``'s ``plan``; its
    core computes ``fn``, called ``name`` in a stretch): a statement per
    result VGPR, ``fn`` of the source registers its selects pick (an SGPR
    pair's register per wave, a constant's low word), the one that overwrites
    no source of the other first; None where each overwrites a source of the
    other, or a source is negated."""
    if any(neg_lo or neg_hi for _, _, neg_lo, neg_hi in plan):
        return None
    d, srcs = ins.ops[0].index, ins.ops[1:]
    # The sources of the low (half 0) and the high (half 1) result.
    texts = [tuple(t for o, p in zip(srcs, plan)
                   if (t := plain_text(dataclasses.replace(o, index=o.index + p[half]), as_f32=True)) is not None)
             for half in (0, 1)]
    reads = [{t.reg[1] for t in half if t.reg is not None and t.reg[0] == "v"} for half in texts]
    if len(texts[0]) < len(srcs) or (d + 1 in reads[0] and d in reads[1]):
        return None
    args = ", ".join("{" + "abc"[k] + "}" for k in range(len(srcs)))
    lo, hi = (Inline(f"{name}({args}).view(np.uint32)", d + half, texts[half], {"np": np, name: fn})
              for half in (0, 1))
    return dataclasses.replace(hi, then=lo) if d in reads[1] else dataclasses.replace(lo, then=hi)


def _pk_decoder(n: int, fn, mods: tuple, f16: bool = False, name: str = ""):
    """The batched decoder of a packed op (``_pk_f32``, or ``v_pk_mul_f16`` with
    ``f16``): each source's selects and negations bound as rows ``[2, ...]``
    (axis 1 of a view's ``[n, 2, 64]``), for the forms without ``clamp`` that
    read at least one VGPR (SGPRs and constants too for f32). With ``name``
    (what a fused stretch calls ``fn`` by), an f32 form records its ``Inline``
    form (``_pk_inline``: ``fn`` of one result's sources)."""
    def decode(ins: Instr) -> Core | None:
        try:
            _validate(ins, n + 1, frozenset(mods), False)
            plan = _pk_plan(ins, n)
        except SimError:
            return None
        dst = ins.ops[0]
        if ins.mods.get("clamp") or dst.kind != "v" or dst.count != (1 if f16 else 2):
            return None
        srcs = ins.ops[1:]
        if not any(o.kind == "v" for o in srcs) or (f16 and any(o.kind != "v" for o in srcs)):
            return None
        readers: list = []
        for o, (sel, sel_hi, neg_lo, neg_hi) in zip(srcs, plan):
            idx = o.index
            if f16:
                sh = np.array([[16 * sel], [16 * sel_hi]], np.uint32)
                neg16 = np.array([[0x8000 * neg_lo], [0x8000 * neg_hi]], np.uint16)

                def r(w, idx=idx, sh=sh, neg=neg16):
                    return _f16_to_f32((w.vb[:, idx, None] >> sh).astype(np.uint16) ^ neg)
                readers.append(r)
                continue
            if o.kind == "const":
                neg = np.array([[neg_lo << 31], [neg_hi << 31]], np.uint32)
                c = (np.full((2, LANES), o.bits32, np.uint32) ^ neg).view(np.float32)
                readers.append(lambda w, c=c: c)
                continue
            readers.append(_pk_f32_reader(o, sel, sel_hi, neg_lo, neg_hi))
        d = dst.index
        inline = _pk_inline(ins, plan, name, fn) if name else None
        if inline is not None:
            ins.__dict__["_inline"] = inline
        if f16 and all(p == (0, 1, 0, 0) for p in plan):
            ia, ib = srcs[0].index, srcs[1].index
            ins.__dict__["_inline"] = Inline("_f16_products({a}, {b})", d,
                                             (Source("{r}", ("v", ia)), Source("{r}", ("v", ib))), _F16_NAMES)

            def core(w) -> None:
                vb = w.vb
                vb[:, d] = _f16_products(vb[:, ia], vb[:, ib])
        elif f16:
            ra, rb = readers

            def core(w) -> None:
                # The product of two fp16 values is exact in float32: one rounding.
                r = _to_f16_bits(_MUL(ra(w), rb(w)))
                w.vb[:, d] = r[:, 0] | (r[:, 1] << np.uint32(16))
        elif n == 2:
            ra, rb = readers

            def core(w) -> None:
                w.vb[:, d:d + 2] = fn(ra(w), rb(w)).view(np.uint32)
        else:
            def core(w) -> None:
                w.vb[:, d:d + 2] = np.asarray(fn(*[r(w) for r in readers]), np.float32).view(np.uint32)
        return core
    return decode


_PK_MODS = ("op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp")
_vop("v_pk_add_f32", nops=3, mods=_PK_MODS)(_pk_f32(2, _ADD))
_vop("v_pk_mul_f32", nops=3, mods=_PK_MODS)(_pk_f32(2, _MUL))
_vop("v_pk_fma_f32", nops=4, mods=_PK_MODS)(_pk_f32(3, fma_f32))
batched("v_pk_add_f32")(_pk_decoder(2, _ADD, _PK_MODS, name="_ADD"))
batched("v_pk_mul_f32")(_pk_decoder(2, _MUL, _PK_MODS, name="_MUL"))
# No Inline form for the fma: fma_f32 is a dozen numpy operations, and twice
# that (a statement per result) costs more than the core's one pass over both
# results and the copies a stretch writes back and reloads around it.
batched("v_pk_fma_f32")(_pk_decoder(3, fma_f32, _PK_MODS))


@_vop("v_pk_mul_f16", nops=3, mods=_PK_MODS[:-1])
def _pk_mul_f16(w: Wave, ins: Instr) -> None:
    """D = {S0.hi * S1.hi, S0.lo * S1.lo} in fp16 (selects per op_sel/op_sel_hi,
    round to nearest even, fp16 denormals)."""
    factors = []
    for i, (sel, sel_hi, neg_lo, neg_hi) in enumerate(_pk_plan(ins, 2)):
        x = np.broadcast_to(w.vget(ins, i + 1), (LANES,)).astype(np.uint32)
        h = np.stack([x >> np.uint32(16 * sel), x >> np.uint32(16 * sel_hi)]).astype(np.uint16)
        if neg_lo or neg_hi:
            h ^= np.array([[0x8000 * neg_lo], [0x8000 * neg_hi]], np.uint16)
        factors.append(_f16_to_f32(h))
    # The product of two fp16 values is exact in float32, so this is one rounding.
    r = _to_f16_bits(_MUL(factors[0], factors[1]))
    w.vset(ins, r[0] | (r[1] << np.uint32(16)))


batched("v_pk_mul_f16")(_pk_decoder(2, None, _PK_MODS[:-1], f16=True))


# ---- batched forms of the exponential and the conversions ----------------------------------

def _exp_core(x: np.ndarray) -> np.ndarray:
    """float32 ``2**x``: float64 exp2 rounded once (``_exp`` without a perturbation).
    Cores run with floating-point warnings off (``launch``), so an overflow
    to inf sets no ``errstate`` here (whose entry and exit cost about what
    the conversion does on a batch's few waves)."""
    return np.exp2(x.astype(np.float64)).astype(np.float32)


_exp_plain = _decoder(1, _exp_core, True)


@batched("v_exp_f32")
def _exp_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_exp_f32``; a launch with the ``exp_ulps``
    perturbation leaves it to the handler."""
    core = _exp_plain(ins)
    if core is None:
        return None

    def run(w) -> bool | None:
        if w.group.options.get("exp_ulps"):
            return False
        return core(w)
    return run


batched("v_cvt_pk_f16_f32")(_decoder(2, lambda a, b: _pack_halves(_f16_round, a, b), False, mods=()))
batched("v_cvt_pk_bf16_f32")(_decoder(2, lambda a, b: _pack_halves(_bf16_round, a, b), False, mods=()))


@batched("v_cvt_pk_f32_fp8")
def _cvt_pk_f32_fp8_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_cvt_pk_f32_fp8`` (e32, or SDWA with a WORD select)."""
    o, d = ins.ops[1] if len(ins.ops) == 2 else None, ins.ops[0]
    if o is None or d.kind != "v" or d.count != 2:
        return None
    if ins.enc == "sdwa":
        sel = ins.mods.get("src0_sel", "DWORD")
        if set(ins.mods) - SDWA_MODS or sel not in ("WORD_0", "WORD_1", "DWORD") \
                or ins.mods.get("dst_sel", "DWORD") != "DWORD":
            return None
        read = sdwa_source(o, sel)
    elif ins.enc in ("e32", "e64", "") and not ins.mods:
        read = plain_source(o)
    else:
        return None
    if read is None:
        return None
    i = d.index

    def core(w) -> None:
        x = read(w)
        table = _FP8[w.group.target.fnuz]
        w.vb[:, i] = table[x & np.uint32(0xFF)]
        w.vb[:, i + 1] = table[(x >> np.uint32(8)) & np.uint32(0xFF)]
    return core
