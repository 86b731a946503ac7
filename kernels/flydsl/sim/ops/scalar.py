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
says, the two low address bits are ignored (SMEM is dword-aligned).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..program import Instr
from ..wave import LANES, SimError, Wave, op

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def _s32(x: int) -> int:
    """The 32-bit pattern ``x`` as a signed int."""
    x &= M32
    return x - (1 << 32) if x & 0x80000000 else x


def _s64(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def _sext(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def _scc(w: Wave, cond) -> None:
    w.scc = 1 if cond else 0


# ---- SOP2: two sources, one destination ------------------------------------------

def _sop2(width: int, fn, scc=None, w0: int | None = None, w1: int | None = None):
    """A handler for ``D = fn(S0, S1)`` on unsigned ints of ``width`` bits (the
    sources ``w0``/``w1`` bits, ``width`` unless given); ``scc(S0, S1,
    D_unmasked, w)`` gives SCC, or None when the op leaves SCC alone."""
    mask = (1 << width) - 1
    w0, w1 = w0 or width, w1 or width

    def handler(w: Wave, ins: Instr) -> None:
        a, b = w.sget(ins.ops[1], w0), w.sget(ins.ops[2], w1)
        r = fn(a, b, w)
        w.sset(ins.ops[0], r & mask, width)
        if scc is not None:
            _scc(w, scc(a, b, r, w))
    return handler


def _nonzero32(a, b, r, w):
    return r & M32 != 0


def _nonzero64(a, b, r, w):
    return r & M64 != 0


def _add_ovf_i32(a, b, r, w):
    # signed overflow: operands of one sign, result of the other
    return ((a ^ r) & (b ^ r)) >> 31 & 1


def _sub_ovf_i32(a, b, r, w):
    return ((a ^ b) & (a ^ r)) >> 31 & 1


_SOP2: dict[str, tuple[int, Callable[..., Any], Callable[..., Any] | None]] = {
    # arithmetic
    "s_add_u32": (32, lambda a, b, w: a + b, lambda a, b, r, w: r >> 32),
    "s_sub_u32": (32, lambda a, b, w: a - b, lambda a, b, r, w: b > a),
    "s_add_i32": (32, lambda a, b, w: a + b, _add_ovf_i32),
    "s_sub_i32": (32, lambda a, b, w: a - b, _sub_ovf_i32),
    "s_addc_u32": (32, lambda a, b, w: a + b + w.scc, lambda a, b, r, w: r >> 32),
    "s_subb_u32": (32, lambda a, b, w: a - b - w.scc, lambda a, b, r, w: r < 0),
    "s_min_i32": (32, lambda a, b, w: a if _s32(a) < _s32(b) else b, lambda a, b, r, w: _s32(a) < _s32(b)),
    "s_min_u32": (32, lambda a, b, w: min(a, b), lambda a, b, r, w: a < b),
    "s_max_i32": (32, lambda a, b, w: a if _s32(a) > _s32(b) else b, lambda a, b, r, w: _s32(a) > _s32(b)),
    "s_max_u32": (32, lambda a, b, w: max(a, b), lambda a, b, r, w: a > b),
    "s_mul_i32": (32, lambda a, b, w: a * b, None),
    "s_mul_hi_u32": (32, lambda a, b, w: (a * b) >> 32, None),
    "s_mul_hi_i32": (32, lambda a, b, w: (_s32(a) * _s32(b)) >> 32, None),
    "s_absdiff_i32": (32, lambda a, b, w: abs(_s32(a - b)), _nonzero32),  # |S0 - S1| of the wrapped difference
    "s_lshl1_add_u32": (32, lambda a, b, w: (a << 1) + b, lambda a, b, r, w: r >> 32),
    "s_lshl2_add_u32": (32, lambda a, b, w: (a << 2) + b, lambda a, b, r, w: r >> 32),
    "s_lshl3_add_u32": (32, lambda a, b, w: (a << 3) + b, lambda a, b, r, w: r >> 32),
    "s_lshl4_add_u32": (32, lambda a, b, w: (a << 4) + b, lambda a, b, r, w: r >> 32),
    # select (SCC unchanged)
    "s_cselect_b32": (32, lambda a, b, w: a if w.scc else b, None),
    "s_cselect_b64": (64, lambda a, b, w: a if w.scc else b, None),
    # shifts: the amount is S1[4:0] (32-bit) or S1[5:0] (64-bit); SCC = D != 0
    "s_lshl_b32": (32, lambda a, b, w: a << (b & 31), _nonzero32),
    "s_lshr_b32": (32, lambda a, b, w: a >> (b & 31), _nonzero32),
    "s_ashr_i32": (32, lambda a, b, w: _s32(a) >> (b & 31), _nonzero32),
    "s_lshl_b64": (64, lambda a, b, w: a << (b & 63), _nonzero64),
    "s_lshr_b64": (64, lambda a, b, w: a >> (b & 63), _nonzero64),
    "s_ashr_i64": (64, lambda a, b, w: _s64(a) >> (b & 63), _nonzero64),
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
    op(_name)(_sop2(_width, _fn, _scc_fn, *_NARROW.get(_name, (None, None))))


def _bfe(signed: bool, width: int):
    def handler(w: Wave, ins: Instr) -> None:
        a, b = w.sget(ins.ops[1], width), w.sget(ins.ops[2], 32)
        off, n = b & (width - 1), (b >> 16) & 0x7F
        if n >= width:
            raise SimError(f"{ins.base} field width {n} >= {width} is not defined by the ISA at {ins.where()}")
        src = (_s64(a) if width == 64 else _s32(a)) if signed else a
        r = (src >> off) & ((1 << n) - 1)
        if signed and n:
            r = _sext(r, n)
        r &= (1 << width) - 1
        w.sset(ins.ops[0], r, width)
        _scc(w, r != 0)
    return handler


op("s_bfe_u32")(_bfe(False, 32))
op("s_bfe_i32")(_bfe(True, 32))
op("s_bfe_u64")(_bfe(False, 64))
op("s_bfe_i64")(_bfe(True, 64))


# ---- SOPC: compares set SCC --------------------------------------------------

_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def _cmp(width: int, signed: bool, fn):
    conv = (_s64 if width == 64 else _s32) if signed else (lambda x: x)

    def handler(w: Wave, ins: Instr) -> None:
        _scc(w, fn(conv(w.sget(ins.ops[0], width)), conv(w.sget(ins.ops[1], width))))
    return handler


for _rel, _f in _CMP.items():
    op(f"s_cmp_{_rel}_i32")(_cmp(32, True, _f))
    op(f"s_cmp_{_rel}_u32")(_cmp(32, False, _f))
for _rel in ("eq", "lg"):
    op(f"s_cmp_{_rel}_u64")(_cmp(64, False, _CMP[_rel]))


def _bitcmp(width: int, bit: int):
    def handler(w: Wave, ins: Instr) -> None:
        x, n = w.sget(ins.ops[0], width), w.sget(ins.ops[1], 32) & (width - 1)
        _scc(w, (x >> n) & 1 == bit)
    return handler


op("s_bitcmp0_b32")(_bitcmp(32, 0))
op("s_bitcmp1_b32")(_bitcmp(32, 1))
op("s_bitcmp0_b64")(_bitcmp(64, 0))
op("s_bitcmp1_b64")(_bitcmp(64, 1))


# ---- SOP1: one source ----------------------------------------------------------

def _sop1(width_d: int, width_s: int, fn, scc=None):
    """``D = fn(S0)``; ``scc(S0, D)`` gives SCC, or None when SCC is left alone."""
    mask = (1 << width_d) - 1

    def handler(w: Wave, ins: Instr) -> None:
        a = w.sget(ins.ops[1], width_s)
        r = fn(a, w) & mask
        w.sset(ins.ops[0], r, width_d)
        if scc is not None:
            _scc(w, scc(a, r))
    return handler


def _ff1(x: int) -> int:
    """Index of the lowest set bit, -1 (0xffffffff) when none."""
    return (x & -x).bit_length() - 1 if x else -1


def _flbit(x: int, width: int) -> int:
    """Leading zeros counted from the MSB, -1 when none is set."""
    return width - x.bit_length() if x else -1


def _flbit_i32(x: int, width: int) -> int:
    """Leading bits equal to the sign bit, counted from the MSB; -1 for all zeros or all ones."""
    sign = x >> (width - 1)
    y = x ^ ((1 << width) - 1) if sign else x
    return width - y.bit_length() if y else -1


def _brev(x: int, width: int) -> int:
    return int(format(x, f"0{width}b")[::-1], 2)


def _nz(a, r):
    return r != 0


def _cmov(w: Wave, ins: Instr, width: int) -> None:
    if w.scc:
        w.sset(ins.ops[0], w.sget(ins.ops[1], width), width)


_SOP1: dict[str, tuple[int, int, Callable[..., Any], Callable[..., Any] | None]] = {
    "s_mov_b32": (32, 32, lambda a, w: a, None),
    "s_mov_b64": (64, 64, lambda a, w: a, None),
    "s_not_b32": (32, 32, lambda a, w: ~a, _nz),
    "s_not_b64": (64, 64, lambda a, w: ~a, _nz),
    "s_abs_i32": (32, 32, lambda a, w: abs(_s32(a)), _nz),
    "s_brev_b32": (32, 32, lambda a, w: _brev(a, 32), None),
    "s_brev_b64": (64, 64, lambda a, w: _brev(a, 64), None),
    "s_bcnt0_i32_b32": (32, 32, lambda a, w: 32 - a.bit_count(), _nz),
    "s_bcnt0_i32_b64": (32, 64, lambda a, w: 64 - a.bit_count(), _nz),
    "s_bcnt1_i32_b32": (32, 32, lambda a, w: a.bit_count(), _nz),
    "s_bcnt1_i32_b64": (32, 64, lambda a, w: a.bit_count(), _nz),
    "s_ff0_i32_b32": (32, 32, lambda a, w: _ff1(~a & M32), None),
    "s_ff0_i32_b64": (32, 64, lambda a, w: _ff1(~a & M64), None),
    "s_ff1_i32_b32": (32, 32, lambda a, w: _ff1(a), None),
    "s_ff1_i32_b64": (32, 64, lambda a, w: _ff1(a), None),
    "s_flbit_i32_b32": (32, 32, lambda a, w: _flbit(a, 32), None),
    "s_flbit_i32_b64": (32, 64, lambda a, w: _flbit(a, 64), None),
    "s_flbit_i32": (32, 32, lambda a, w: _flbit_i32(a, 32), None),
    "s_flbit_i32_i64": (32, 64, lambda a, w: _flbit_i32(a, 64), None),
    "s_sext_i32_i8": (32, 32, lambda a, w: _sext(a, 8), None),
    "s_sext_i32_i16": (32, 32, lambda a, w: _sext(a, 16), None),
}
for _name, (_wd, _ws, _fn1, _scc1) in _SOP1.items():
    op(_name)(_sop1(_wd, _ws, _fn1, _scc1))

op("s_cmov_b32")(lambda w, ins: _cmov(w, ins, 32))
op("s_cmov_b64")(lambda w, ins: _cmov(w, ins, 64))


def _bitset(bit: int, width: int):
    def handler(w: Wave, ins: Instr) -> None:
        d = w.sget(ins.ops[0], width)
        n = w.sget(ins.ops[1], 32) & (width - 1)
        w.sset(ins.ops[0], (d | 1 << n) if bit else (d & ~(1 << n)), width)
    return handler


op("s_bitset0_b32")(_bitset(0, 32))
op("s_bitset1_b32")(_bitset(1, 32))
op("s_bitset0_b64")(_bitset(0, 64))
op("s_bitset1_b64")(_bitset(1, 64))


# *_saveexec_b64: D = EXEC (the old value), EXEC = f(S0, EXEC), SCC = EXEC != 0.
# S0 is read before D is written, so ``s_and_saveexec_b64 s[0:1], s[0:1]`` works.
_SAVEEXEC = {
    "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
    "andn2": lambda s, e: s & ~e, "orn2": lambda s, e: s | ~e,
    "nand": lambda s, e: ~(s & e), "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e),
    "andn1": lambda s, e: ~s & e, "orn1": lambda s, e: ~s | e,
}


def _saveexec(fn):
    def handler(w: Wave, ins: Instr) -> None:
        src, old = w.sget(ins.ops[1], 64), w.exec_bits
        new = fn(src, old) & M64
        w.sset(ins.ops[0], old, 64)
        w.s[126], w.s[127] = new & M32, new >> 32
        _scc(w, new != 0)
    return handler


for _name, _f in _SAVEEXEC.items():
    op(f"s_{_name}_saveexec_b64")(_saveexec(_f))


# ---- SOPK: a 16-bit immediate ------------------------------------------------

def _simm16(ins: Instr, signed: bool = True) -> int:
    o = ins.ops[1]
    if o.kind != "const" or o.value is None:
        raise SimError(f"{ins.base} needs an integer immediate at {ins.where()}")
    return _sext(o.value, 16) if signed else o.value & 0xFFFF


@op("s_movk_i32")
def _movk(w: Wave, ins: Instr) -> None:
    w.sset(ins.ops[0], _simm16(ins) & M32)


@op("s_cmovk_i32")
def _cmovk(w: Wave, ins: Instr) -> None:
    if w.scc:
        w.sset(ins.ops[0], _simm16(ins) & M32)


@op("s_addk_i32")
def _addk(w: Wave, ins: Instr) -> None:
    a, b = w.sget(ins.ops[0]), _simm16(ins) & M32
    r = a + b
    w.sset(ins.ops[0], r & M32)
    _scc(w, _add_ovf_i32(a, b, r & M32, w))


@op("s_mulk_i32")
def _mulk(w: Wave, ins: Instr) -> None:
    w.sset(ins.ops[0], (w.sget(ins.ops[0]) * _simm16(ins)) & M32)


def _cmpk(signed: bool, fn):
    def handler(w: Wave, ins: Instr) -> None:
        a = w.sget(ins.ops[0])
        _scc(w, fn(_s32(a), _simm16(ins)) if signed else fn(a, _simm16(ins, signed=False)))
    return handler


for _rel, _f in _CMP.items():
    op(f"s_cmpk_{_rel}_i32")(_cmpk(True, _f))
    op(f"s_cmpk_{_rel}_u32")(_cmpk(False, _f))


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


@op("s_nop", "s_setprio", "s_sleep")
def _nothing(w: Wave, ins: Instr) -> None:
    """No hazards are modelled: nothing to do."""


@op("s_waitcnt")
def _waitcnt(w: Wave, ins: Instr) -> None:
    """Memory completes at once in this simulator: nothing to wait for; the
    memory-model check (if the launch attached one) marks what has completed."""
    order = w.group.memory.order
    if order is not None:
        order.waitcnt(w, ins)


# ---- SMEM ---------------------------------------------------------------------

_ACTIVE0 = np.zeros(LANES, bool)
_ACTIVE0[0] = True


def _smem_address(w: Wave, ins: Instr) -> int:
    base = w.sget(ins.ops[1], 64)
    off = 0
    if len(ins.ops) > 2:
        o = ins.ops[2]
        off = o.value if o.kind == "const" and o.value is not None else w.sget(o)
    off += ins.mods.get("offset", 0)
    return (base + off) & M64 & ~3


def _s_load(count: int):
    def handler(w: Wave, ins: Instr) -> None:
        d = ins.ops[0]
        if d.kind != "s" or d.count != count:
            raise SimError(f"{ins.base} needs {count} SGPRs as destination at {ins.where()}")
        addr = _smem_address(w, ins)
        data = w.group.memory.load(np.full(LANES, addr, np.uint64), 4 * count, _ACTIVE0, ins.where())
        w.s[d.index:d.index + count] = data[0].view(np.uint32)
    return handler


for _n, _name in ((1, "s_load_dword"), (2, "s_load_dwordx2"), (4, "s_load_dwordx4"),
                  (8, "s_load_dwordx8"), (16, "s_load_dwordx16")):
    op(_name)(_s_load(_n))
