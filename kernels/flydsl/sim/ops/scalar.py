"""Scalar ALU (SOP1/SOP2/SOPK/SOPC), control flow (SOPP) and scalar memory (SMEM).

Semantics follow the CDNA3/CDNA4 ISA guides (SCC as each op defines it;
the ones that leave SCC alone are listed as such below). Operands:

* 32-bit ops read one SGPR or a constant (``Operand.bits32``).
* 64-bit ops read an SGPR pair (``vcc``, ``exec``, ``s[4:5]``) or a
  constant: an inline integer (-16..64) sign-extends to 64 bits, an inline
  float is its double pattern, and a literal is the value LLVM printed
  (LLVM prints only what the hardware's 32-bit literal extension makes of
  it: a non-negative value zero-extended, a negative one sign-extended).
* SOPK's 16-bit immediate is sign-extended for the ``_i32`` forms and
  zero-extended for ``s_cmpk_*_u32``, whether LLVM prints it as ``0xe000``
  or as ``-8192``.

Execution: every ALU, compare and SOPK instruction is stated once, as numpy
over the waves of a view (``BatchView``, or a ``Wave`` as one): sources
read as uint64 ``[n]`` (32-bit values zero-extended, pairs joined; a
constant as ``[1]``), SCC the scalar file's ``SCC`` column. A scalar
instruction ignores EXEC, so its core runs for any EXEC, and the per-wave
handler is the same core over one wave (``wave.core_op``).

Control flow: a taken branch sets ``w.pc = ins.target`` (the launcher has
already advanced ``pc`` past the branch). ``s_endpgm`` ends the wave,
``s_barrier`` parks it (``state = "barrier"``) for the dispatcher to resume.
``s_waitcnt`` and ``s_nop`` do nothing: every memory operation of the
simulator completes at once and there are no hazards to wait out, so
neither has anything to do (likewise ``s_setprio``, ``s_sleep``); only the
memory-model check (``sim.memorder``) reads ``s_waitcnt``'s ``vmcnt``.

Scalar memory: ``s_load_dword[xN] sdst, sbase, offset`` reads ``N`` dwords
at the 64-bit address ``sbase + offset`` (offset an immediate, an SGPR or
``m0``, plus ``offset:`` when both are written) through the device memory,
so a read outside every allocation raises ``MemoryFault``. As the ISA
says, the two low address bits are ignored (SMEM is dword-aligned). A
batch of waves reads at once where every address lies in one allocation;
else each wave reads on its own.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..program import Instr, Operand
from ..wave import LANES, SCC, Core, SimError, Wave, batched, core_op, op

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF

# A source reader ``fn(view)``: uint64 ``[n]`` (or ``[1]`` for a constant).
Src = Callable[[Any], np.ndarray]


# ---- operands -------------------------------------------------------------------

def _src(o: Operand, width: int) -> Src:
    """The reader of scalar source ``o`` of ``width`` bits (32 or 64): an SGPR
    (a pair for 64) or a constant (inline integers sign-extended to 64)."""
    if o.kind == "s":
        i = o.index
        if width == 64:
            # A view of each row's pair as one uint64 (its two words adjacent: a
            # view, not a copy; a later write to the pair shows through it).
            return lambda w: w.sb[:, i:i + 2].view(np.uint64)[:, 0]
        return lambda w: w.sb[:, i].astype(np.uint64)
    if o.kind == "const":
        c = np.array([o.bits64 if width == 64 else o.bits32], np.uint64)
        c.flags.writeable = False
        return lambda w: c
    raise SimError(f"{o.text} is not a scalar source")


def _dst(o: Operand, width: int) -> Callable[[Any, np.ndarray], None]:
    """The writer ``fn(view, r)`` of a result (uint64 or int64 ``[n]`` or ``[1]``;
    its low ``width`` bits) to SGPR operand ``o``."""
    if o.kind != "s":
        raise SimError(f"{o.text} is not a scalar destination")
    i = o.index
    if width == 64:
        def put64(w, r: np.ndarray) -> None:
            sb = w.sb
            if type(sb) is np.ndarray:
                sb[:, i:i + 2].view(np.uint64)[:, 0] = r
            else:
                sb[:, i:i + 2] = np.ascontiguousarray(r, np.uint64).view(np.uint32).reshape(-1, 2)
        return put64

    def put32(w, r: np.ndarray) -> None:
        w.sb[:, i] = r & M32
    return put32


def _scc(w) -> np.ndarray:
    """uint64 ``[n]``: each wave's SCC (0 or 1)."""
    return w.sb[:, SCC].astype(np.uint64)


def _s32(x: np.ndarray) -> np.ndarray:
    """int64: the 32-bit patterns ``x`` as signed values."""
    return (x.astype(np.int64) & M32 ^ 0x80000000) - 0x80000000


def _s64(x: np.ndarray) -> np.ndarray:
    """int64: 64-bit patterns (uint64) as signed values."""
    return x.astype(np.int64)


def _u(r: np.ndarray) -> np.ndarray:
    """uint64: a result's bit pattern (int64 results wrap)."""
    return r if r.dtype == np.uint64 else r.astype(np.uint64)


def _bit_length(x: np.ndarray) -> np.ndarray:
    """uint64: the bit length of each uint64 ``x`` (0 for 0)."""
    for k in (1, 2, 4, 8, 16, 32):
        x = x | x >> k
    return np.bitwise_count(x).astype(np.uint64)


def _ff1(x: np.ndarray) -> np.ndarray:
    """uint64: the index of the lowest set bit of ``x``, 0xffffffff (-1) when none."""
    low = x & (~x + 1)
    return np.where(x == 0, np.uint64(M32), np.bitwise_count(low - 1).astype(np.uint64))


def _flbit(x: np.ndarray, width: int) -> np.ndarray:
    """Leading zeros counted from the MSB of a ``width``-bit ``x``, -1 when none is set."""
    return np.where(x == 0, np.uint64(M32), width - _bit_length(x))


def _flbit_i32(x: np.ndarray, width: int) -> np.ndarray:
    """Leading bits equal to the sign bit, counted from the MSB; -1 for all zeros or all ones."""
    y = np.where(x >> (width - 1) != 0, x ^ ((1 << width) - 1), x)
    return _flbit(y, width)


_REV8 = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], np.uint8)


def _brev(x: np.ndarray, width: int) -> np.ndarray:
    """Each uint64 ``x``'s low ``width`` bits reversed."""
    rev = np.ascontiguousarray(_REV8[np.ascontiguousarray(x, np.uint64).view(np.uint8).reshape(-1, 8)][:, ::-1])
    return rev.view(np.uint64)[:, 0] >> (64 - width)


# ---- SOP2: two sources, one destination ------------------------------------------

def _sop2(width: int, fn, scc=None, w0: int | None = None, w1: int | None = None):
    """The builder of ``D = fn(S0, S1, SCC)`` on uint64 sources of ``w0``/``w1``
    bits (``width`` unless given), ``width`` bits of the result kept; ``scc(S0,
    S1, D_unmasked)`` gives SCC, or None when the op leaves SCC alone."""
    def build(ins: Instr) -> Core:
        ra, rb = _src(ins.ops[1], w0 or width), _src(ins.ops[2], w1 or width)
        put = _dst(ins.ops[0], width)

        def core(w) -> None:
            a, b = ra(w), rb(w)
            r = fn(a, b, w)
            if scc is not None:
                c = scc(a, b, r)
                put(w, r)
                w.sb[:, SCC] = c
            else:
                put(w, r)
        return core
    return build


def _nonzero32(a, b, r):
    return r & M32 != 0


def _nonzero64(a, b, r):
    return _u(r) != 0


def _carry(a, b, r):
    return r >> 32 != 0


def _add_ovf_i32(a, b, r):
    # signed overflow: operands of one sign, result of the other
    return ((a ^ r) & (b ^ r)) >> 31 & 1 != 0


def _sub_ovf_i32(a, b, r):
    return ((a ^ b) & (a ^ r)) >> 31 & 1 != 0


_SOP2: dict[str, tuple[int, Callable[..., Any], Callable[..., Any] | None]] = {
    # arithmetic
    "s_add_u32": (32, lambda a, b, w: a + b, _carry),
    "s_sub_u32": (32, lambda a, b, w: a - b, _carry),
    "s_add_i32": (32, lambda a, b, w: a + b, _add_ovf_i32),
    "s_sub_i32": (32, lambda a, b, w: a - b, _sub_ovf_i32),
    "s_addc_u32": (32, lambda a, b, w: a + b + _scc(w), _carry),
    # a borrow wraps the uint64 difference past 32 bits, as a carry of the sum does
    "s_subb_u32": (32, lambda a, b, w: a - b - _scc(w), _carry),
    "s_min_i32": (32, lambda a, b, w: np.where(_s32(a) < _s32(b), a, b), lambda a, b, r: _s32(a) < _s32(b)),
    "s_min_u32": (32, lambda a, b, w: np.minimum(a, b), lambda a, b, r: a < b),
    "s_max_i32": (32, lambda a, b, w: np.where(_s32(a) > _s32(b), a, b), lambda a, b, r: _s32(a) > _s32(b)),
    "s_max_u32": (32, lambda a, b, w: np.maximum(a, b), lambda a, b, r: a > b),
    "s_mul_i32": (32, lambda a, b, w: a * b, None),
    "s_mul_hi_u32": (32, lambda a, b, w: (a * b) >> 32, None),
    "s_mul_hi_i32": (32, lambda a, b, w: (_s32(a) * _s32(b)) >> 32, None),
    "s_absdiff_i32": (32, lambda a, b, w: np.abs(_s32(a - b)), _nonzero32),  # |S0 - S1| of the wrapped difference
    "s_lshl1_add_u32": (32, lambda a, b, w: (a << 1) + b, _carry),
    "s_lshl2_add_u32": (32, lambda a, b, w: (a << 2) + b, _carry),
    "s_lshl3_add_u32": (32, lambda a, b, w: (a << 3) + b, _carry),
    "s_lshl4_add_u32": (32, lambda a, b, w: (a << 4) + b, _carry),
    # select (SCC unchanged)
    "s_cselect_b32": (32, lambda a, b, w: np.where(w.sb[:, SCC] != 0, a, b), None),
    "s_cselect_b64": (64, lambda a, b, w: np.where(w.sb[:, SCC] != 0, a, b), None),
    # shifts: the amount is S1[4:0] (32-bit) or S1[5:0] (64-bit); SCC = D != 0
    "s_lshl_b32": (32, lambda a, b, w: a << (b & 31), _nonzero32),
    "s_lshr_b32": (32, lambda a, b, w: a >> (b & 31), _nonzero32),
    "s_ashr_i32": (32, lambda a, b, w: _s32(a) >> (b & 31).astype(np.int64), _nonzero32),
    "s_lshl_b64": (64, lambda a, b, w: a << (b & 63), _nonzero64),
    "s_lshr_b64": (64, lambda a, b, w: a >> (b & 63), _nonzero64),
    "s_ashr_i64": (64, lambda a, b, w: _s64(a) >> (b & 63).astype(np.int64), _nonzero64),
    # bit-field mask (SCC unchanged)
    "s_bfm_b32": (32, lambda a, b, w: ((1 << (a & 31)) - 1) << (b & 31), None),
    "s_bfm_b64": (64, lambda a, b, w: ((1 << (a & 63)) - 1) << (b & 63), None),
    # 16-bit packs (SCC unchanged)
    "s_pack_ll_b32_b16": (32, lambda a, b, w: (a & 0xFFFF) | (b & 0xFFFF) << 16, None),
    "s_pack_lh_b32_b16": (32, lambda a, b, w: (a & 0xFFFF) | (b & 0xFFFF0000), None),
    "s_pack_hh_b32_b16": (32, lambda a, b, w: (a >> 16) | (b & 0xFFFF0000), None),
}
# the 32- and 64-bit bitwise ops: SCC = D != 0
for _name, _f in {
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "andn2": lambda a, b: a & ~b, "orn2": lambda a, b: a | ~b,
    "nand": lambda a, b: ~(a & b), "nor": lambda a, b: ~(a | b), "xnor": lambda a, b: ~(a ^ b),
}.items():
    _SOP2[f"s_{_name}_b32"] = (32, lambda a, b, w, f=_f: f(a, b), _nonzero32)
    _SOP2[f"s_{_name}_b64"] = (64, lambda a, b, w, f=_f: f(a, b), _nonzero64)

# the 64-bit ops whose shift amount or field sources are 32-bit (S1.u[5:0]; bfm: both)
_NARROW = {"s_lshl_b64": (64, 32), "s_lshr_b64": (64, 32), "s_ashr_i64": (64, 32), "s_bfm_b64": (32, 32)}
for _name, (_width, _fn, _scc_fn) in _SOP2.items():
    core_op(_name)(_sop2(_width, _fn, _scc_fn, *_NARROW.get(_name, (None, None))))


def _bfe(signed: bool, width: int):
    """The builder of ``s_bfe_*``: S1[4:0] (or [5:0]) the offset, S1[22:16] the width."""
    def build(ins: Instr) -> Core:
        ra, rb = _src(ins.ops[1], width), _src(ins.ops[2], 32)
        put = _dst(ins.ops[0], width)

        def core(w) -> None:
            a, b = ra(w), rb(w)
            off, n = (b & (width - 1)).astype(np.int64), ((b >> 16) & 0x7F).astype(np.int64)
            if (n >= width).any():
                raise SimError(f"{ins.base} field width {int(n.max())} >= {width} is not defined by the ISA "
                               f"at {ins.where()}")
            if signed:
                field = ((_s64(a) if width == 64 else _s32(a)) >> off) & ((1 << n) - 1)
                top = 1 << np.maximum(n - 1, 0)  # the field's sign bit, sign-extended below
                r = _u(np.where(n > 0, (field ^ top) - top, 0))
            else:
                r = (a >> off.astype(np.uint64)) & ((np.uint64(1) << n.astype(np.uint64)) - np.uint64(1))
            r = r & ((1 << width) - 1)
            put(w, r)
            w.sb[:, SCC] = r != 0
        return core
    return build


core_op("s_bfe_u32")(_bfe(False, 32))
core_op("s_bfe_i32")(_bfe(True, 32))
core_op("s_bfe_u64")(_bfe(False, 64))
core_op("s_bfe_i64")(_bfe(True, 64))


# ---- SOPC: compares set SCC --------------------------------------------------

_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def _cmp(width: int, signed: bool, fn):
    conv = (_s64 if width == 64 else _s32) if signed else (lambda x: x)

    def build(ins: Instr) -> Core:
        ra, rb = _src(ins.ops[0], width), _src(ins.ops[1], width)

        def core(w) -> None:
            w.sb[:, SCC] = fn(conv(ra(w)), conv(rb(w)))
        return core
    return build


for _rel, _f in _CMP.items():
    core_op(f"s_cmp_{_rel}_i32")(_cmp(32, True, _f))
    core_op(f"s_cmp_{_rel}_u32")(_cmp(32, False, _f))
for _rel in ("eq", "lg"):
    core_op(f"s_cmp_{_rel}_u64")(_cmp(64, False, _CMP[_rel]))


def _bitcmp(width: int, bit: int):
    def build(ins: Instr) -> Core:
        ra, rb = _src(ins.ops[0], width), _src(ins.ops[1], 32)

        def core(w) -> None:
            w.sb[:, SCC] = (ra(w) >> (rb(w) & (width - 1))) & 1 == bit
        return core
    return build


core_op("s_bitcmp0_b32")(_bitcmp(32, 0))
core_op("s_bitcmp1_b32")(_bitcmp(32, 1))
core_op("s_bitcmp0_b64")(_bitcmp(64, 0))
core_op("s_bitcmp1_b64")(_bitcmp(64, 1))


# ---- SOP1: one source ----------------------------------------------------------

def _sop1(width_d: int, width_s: int, fn, scc: bool = False):
    """The builder of ``D = fn(S0)``; ``scc``: SCC = D != 0 (else SCC is left alone)."""
    mask = (1 << width_d) - 1

    def build(ins: Instr) -> Core:
        ra, put = _src(ins.ops[1], width_s), _dst(ins.ops[0], width_d)

        def core(w) -> None:
            r = fn(ra(w))
            put(w, r)
            if scc:
                w.sb[:, SCC] = _u(r) & mask != 0
        return core
    return build


_SOP1: dict[str, tuple[int, int, Callable[..., Any], bool]] = {
    "s_mov_b32": (32, 32, lambda a: a, False),
    "s_mov_b64": (64, 64, lambda a: a, False),
    "s_not_b32": (32, 32, lambda a: ~a, True),
    "s_not_b64": (64, 64, lambda a: ~a, True),
    "s_abs_i32": (32, 32, lambda a: np.abs(_s32(a)), True),
    "s_brev_b32": (32, 32, lambda a: _brev(a, 32), False),
    "s_brev_b64": (64, 64, lambda a: _brev(a, 64), False),
    "s_bcnt0_i32_b32": (32, 32, lambda a: 32 - np.bitwise_count(a).astype(np.uint64), True),
    "s_bcnt0_i32_b64": (32, 64, lambda a: 64 - np.bitwise_count(a).astype(np.uint64), True),
    "s_bcnt1_i32_b32": (32, 32, lambda a: np.bitwise_count(a).astype(np.uint64), True),
    "s_bcnt1_i32_b64": (32, 64, lambda a: np.bitwise_count(a).astype(np.uint64), True),
    "s_ff0_i32_b32": (32, 32, lambda a: _ff1(~a & M32), False),
    "s_ff0_i32_b64": (32, 64, lambda a: _ff1(~a), False),
    "s_ff1_i32_b32": (32, 32, _ff1, False),
    "s_ff1_i32_b64": (32, 64, _ff1, False),
    "s_flbit_i32_b32": (32, 32, lambda a: _flbit(a, 32), False),
    "s_flbit_i32_b64": (32, 64, lambda a: _flbit(a, 64), False),
    "s_flbit_i32": (32, 32, lambda a: _flbit_i32(a, 32), False),
    "s_flbit_i32_i64": (32, 64, lambda a: _flbit_i32(a, 64), False),
    "s_sext_i32_i8": (32, 32, lambda a: ((a & 0xFF) ^ 0x80) - 0x80, False),
    "s_sext_i32_i16": (32, 32, lambda a: ((a & 0xFFFF) ^ 0x8000) - 0x8000, False),
}
for _name, (_wd, _ws, _fn1, _scc1) in _SOP1.items():
    core_op(_name)(_sop1(_wd, _ws, _fn1, _scc1))


def _cmov(width: int):
    """``s_cmov_b32/b64``: D = S0 where SCC is set."""
    def build(ins: Instr) -> Core:
        ra, rd, put = _src(ins.ops[1], width), _src(ins.ops[0], width), _dst(ins.ops[0], width)

        def core(w) -> None:
            put(w, np.where(w.sb[:, SCC] != 0, ra(w), rd(w)))
        return core
    return build


core_op("s_cmov_b32")(_cmov(32))
core_op("s_cmov_b64")(_cmov(64))


def _bitset(bit: int, width: int):
    def build(ins: Instr) -> Core:
        rd, rb, put = _src(ins.ops[0], width), _src(ins.ops[1], 32), _dst(ins.ops[0], width)

        def core(w) -> None:
            d, one = rd(w), np.uint64(1) << (rb(w) & (width - 1))
            put(w, d | one if bit else d & ~one)
        return core
    return build


core_op("s_bitset0_b32")(_bitset(0, 32))
core_op("s_bitset1_b32")(_bitset(1, 32))
core_op("s_bitset0_b64")(_bitset(0, 64))
core_op("s_bitset1_b64")(_bitset(1, 64))


# *_saveexec_b64: D = EXEC (the old value), EXEC = f(S0, EXEC), SCC = EXEC != 0.
# S0 is read before D is written, so ``s_and_saveexec_b64 s[0:1], s[0:1]`` works.
_SAVEEXEC = {
    "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
    "andn2": lambda s, e: s & ~e, "orn2": lambda s, e: s | ~e,
    "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
    "andn1": lambda s, e: ~s & e, "orn1": lambda s, e: ~s | e,
}
_EXEC = Operand("s", 126, 2, text="exec")


def _saveexec(fn):
    def build(ins: Instr) -> Core:
        ra, rexec = _src(ins.ops[1], 64), _src(_EXEC, 64)
        put, put_exec = _dst(ins.ops[0], 64), _dst(_EXEC, 64)

        def core(w) -> None:
            src, old = ra(w), rexec(w)
            new = fn(src, old)
            put(w, old)
            put_exec(w, new)
            w.sb[:, SCC] = new != 0
        return core
    return build


for _name, _f in _SAVEEXEC.items():
    core_op(f"s_{_name}_saveexec_b64")(_saveexec(_f))


# ---- SOPK: a 16-bit immediate ------------------------------------------------

def _simm16(ins: Instr, signed: bool = True) -> int:
    o = ins.ops[1]
    if o.kind != "const" or o.value is None:
        raise SimError(f"{ins.base} needs an integer immediate at {ins.where()}")
    return _sext16(o.value) if signed else o.value & 0xFFFF


def _sext16(x: int) -> int:
    x &= 0xFFFF
    return x - 0x10000 if x & 0x8000 else x


def _const(x: int) -> np.ndarray:
    """uint64 ``[1]``: the 64-bit pattern of the int ``x``."""
    return np.array([x & M64], np.uint64)


def _sopk(kind: str):
    def build(ins: Instr) -> Core:
        k = _simm16(ins)
        rd, put = _src(ins.ops[0], 32), _dst(ins.ops[0], 32)
        kk = _const(k)
        if kind == "movk":
            return lambda w: put(w, kk)
        if kind == "cmovk":
            return lambda w: put(w, np.where(w.sb[:, SCC] != 0, kk, rd(w)))
        if kind == "mulk":
            return lambda w: put(w, rd(w) * kk)
        kb = _const(k & M32)

        def addk(w) -> None:
            a = rd(w)
            r = a + kb
            put(w, r)
            w.sb[:, SCC] = _add_ovf_i32(a, kb, r)
        return addk
    return build


for _kind in ("movk", "cmovk", "addk", "mulk"):
    core_op(f"s_{_kind}_i32")(_sopk(_kind))


def _cmpk(signed: bool, fn):
    def build(ins: Instr) -> Core:
        k = _simm16(ins, signed)
        ra = _src(ins.ops[0], 32)
        conv = _s32 if signed else (lambda x: x)

        def core(w) -> None:
            w.sb[:, SCC] = fn(conv(ra(w)), k)
        return core
    return build


for _rel, _f in _CMP.items():
    core_op(f"s_cmpk_{_rel}_i32")(_cmpk(True, _f))
    core_op(f"s_cmpk_{_rel}_u32")(_cmpk(False, _f))


# ---- SOPP: program control -------------------------------------------------------

def _branch_if(cond):
    def handler(w: Wave, ins: Instr) -> None:
        if ins.target is None:
            raise SimError(f"{ins.base} without a resolved label at {ins.where()}")
        if cond(w):
            w.pc = ins.target
    return handler


def _vcc(w: Wave) -> int:
    return int(w.s[106]) | int(w.s[107])


op("s_branch")(_branch_if(lambda w: True))
op("s_cbranch_scc0")(_branch_if(lambda w: w.scc == 0))
op("s_cbranch_scc1")(_branch_if(lambda w: w.scc == 1))
op("s_cbranch_vccz")(_branch_if(lambda w: _vcc(w) == 0))
op("s_cbranch_vccnz")(_branch_if(lambda w: _vcc(w) != 0))
op("s_cbranch_execz")(_branch_if(lambda w: w.exec_bits == 0))
op("s_cbranch_execnz")(_branch_if(lambda w: w.exec_bits != 0))


@op("s_endpgm")
def _endpgm(w: Wave, ins: Instr) -> None:
    w.state = "end"


@op("s_barrier")
def _barrier(w: Wave, ins: Instr) -> None:
    w.state = "barrier"


_NOTHING = ("s_nop", "s_setprio", "s_sleep")


@op(*_NOTHING)
def _nothing(w: Wave, ins: Instr) -> None:
    """No hazards are modelled: nothing to do."""


@batched(*_NOTHING, exec_free=True)
def _nothing_decoder(ins: Instr) -> Core:
    """Nothing to do for any number of waves."""
    return lambda view: None


@op("s_waitcnt")
def _waitcnt(w: Wave, ins: Instr) -> None:
    """Memory completes at once in this simulator: nothing to wait for; the
    memory-model check (if the launch attached one) marks what has completed."""
    order = w.group.memory.order
    if order is not None:
        order.waitcnt(w, ins)


@batched("s_waitcnt", exec_free=True)
def _waitcnt_decoder(ins: Instr) -> Core:
    """``s_waitcnt`` for every wave of a view: the memory-model check's marks,
    wave by wave in arrival order (each wave's in its program order)."""
    def core(view) -> None:
        order = view.group.memory.order
        if order is not None:
            order.waitcnt_all(view.waves, ins)
    return core


# ---- SMEM ---------------------------------------------------------------------

_ACTIVE0 = np.zeros(LANES, bool)
_ACTIVE0[0] = True
_LOADS = {"s_load_dword": 1, "s_load_dwordx2": 2, "s_load_dwordx4": 4, "s_load_dwordx8": 8, "s_load_dwordx16": 16}


def _smem_form(ins: Instr) -> tuple[Src, Src | None, int]:
    """(base reader, offset reader or None, constant offset) of an SMEM load."""
    base, off, const = _src(ins.ops[1], 64), None, ins.mods.get("offset", 0)
    if len(ins.ops) > 2:
        o = ins.ops[2]
        if o.kind == "const" and o.value is not None:
            const += o.value
        else:
            off = _src(o, 32)
    return base, off, const


def _smem_address(w, ins: Instr) -> np.ndarray:
    """uint64 ``[n]``: each wave's dword-aligned address."""
    base, off, const = _smem_form(ins)
    addr = base(w) + _const(const)
    if off is not None:
        addr = addr + off(w)
    return addr & ~np.uint64(3)


def _s_load(w: Wave, ins: Instr) -> None:
    count = _LOADS[ins.base]
    d = ins.ops[0]
    if d.kind != "s" or d.count != count:
        raise SimError(f"{ins.base} needs {count} SGPRs as destination at {ins.where()}")
    addr = int(_smem_address(w, ins)[0])
    data = w.group.memory.load(np.full(LANES, addr, np.uint64), 4 * count, _ACTIVE0, ins.where())
    w.s[d.index:d.index + count] = data[0].view(np.uint32)


@batched(*_LOADS, exec_free=True)
def _s_load_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``s_load_dword*``: every wave's dwords at once
    where all lie in one allocation (read as each wave's handler would, in
    arrival order, the memory-model check not consulted); anything else is
    each wave's handler's."""
    count = _LOADS[ins.base]
    d = ins.ops[0]
    if d.kind != "s" or d.count != count:
        return None
    try:
        _smem_form(ins)
    except SimError:
        return None

    def core(view) -> bool | None:
        addrs, mem = _smem_address(view, ins), view.group.memory
        a = mem.span(addrs, 4 * count)
        if a is None:
            return False
        view.sb[:, d.index:d.index + count] = mem.load_waves(a, addrs, 4 * count, view.waves).view(np.uint32)
        return None
    return core


op(*_LOADS)(_s_load)
