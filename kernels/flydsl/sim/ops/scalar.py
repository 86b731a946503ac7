"""Scalar ALU, scalar memory and program control (SOP1/SOP2/SOPC/SOPK/SOPP, SMEM).

Semantics from the CDNA3/CDNA4 ISA: 32-bit results wrap; SCC is set as each
instruction's definition says (carry/borrow for the unsigned add/sub, signed
overflow for ``s_add_i32``/``s_sub_i32``, result != 0 for the bitwise,
shift, ``abs`` and ``bcnt`` ops, unchanged for moves, ``cselect``,
``s_mul_*`` and ``s_movk``). 64-bit operands are SGPR pairs; inline integer
constants sign-extend to 64 bits. ``s_waitcnt`` and ``s_nop`` do nothing:
memory completes at once here and hazards are not modelled (hardware needs
the ``s_nop`` padding LLVM inserts; a missing one is not detected).
"""

from __future__ import annotations

import numpy as np

from ..wave import LANES, SimError, op

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def _s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def _s64(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def _binary(fn, width: int = 32, scc=None):
    """A handler for ``sdst = fn(a, b)``; ``scc(a, b, result)`` gives SCC (None: unchanged)."""
    mask = M32 if width == 32 else M64

    def h(w, ins):
        a = w.sget(ins.ops[1], width)
        b = w.sget(ins.ops[2], width)
        r = fn(a, b) & mask
        w.sset(ins.ops[0], r, width)
        if scc is not None:
            w.scc = int(bool(scc(a, b, r)))
    return h


def _nonzero(a, b, r):
    return r != 0


def _reg(names, fn, width=32, scc=None):
    op(*names)(_binary(fn, width, scc))


_reg(["s_and_b32"], lambda a, b: a & b, 32, _nonzero)
_reg(["s_or_b32"], lambda a, b: a | b, 32, _nonzero)
_reg(["s_xor_b32"], lambda a, b: a ^ b, 32, _nonzero)
_reg(["s_andn2_b32"], lambda a, b: a & ~b, 32, _nonzero)
_reg(["s_orn2_b32"], lambda a, b: a | ~b, 32, _nonzero)
_reg(["s_and_b64"], lambda a, b: a & b, 64, _nonzero)
_reg(["s_or_b64"], lambda a, b: a | b, 64, _nonzero)
_reg(["s_xor_b64"], lambda a, b: a ^ b, 64, _nonzero)
_reg(["s_andn2_b64"], lambda a, b: a & ~b, 64, _nonzero)
_reg(["s_orn2_b64"], lambda a, b: a | ~b, 64, _nonzero)
_reg(["s_add_u32"], lambda a, b: a + b, 32, lambda a, b, r: a + b > M32)
_reg(["s_sub_u32"], lambda a, b: a - b, 32, lambda a, b, r: b > a)
_reg(["s_add_i32"], lambda a, b: a + b, 32,
     lambda a, b, r: (_s32(a) >= 0) == (_s32(b) >= 0) and (_s32(r) >= 0) != (_s32(a) >= 0))
_reg(["s_sub_i32"], lambda a, b: a - b, 32,
     lambda a, b, r: (_s32(a) >= 0) != (_s32(b) >= 0) and (_s32(r) >= 0) != (_s32(a) >= 0))
_reg(["s_mul_i32"], lambda a, b: _s32(a) * _s32(b), 32)
_reg(["s_mul_hi_u32"], lambda a, b: (a * b) >> 32, 32)
_reg(["s_mul_hi_i32"], lambda a, b: (_s32(a) * _s32(b)) >> 32, 32)
_reg(["s_lshl_b32"], lambda a, b: a << (b & 31), 32, _nonzero)
_reg(["s_lshr_b32"], lambda a, b: a >> (b & 31), 32, _nonzero)
_reg(["s_ashr_i32"], lambda a, b: _s32(a) >> (b & 31), 32, _nonzero)
_reg(["s_lshl1_add_u32"], lambda a, b: (a << 1) + b, 32, lambda a, b, r: (a << 1) + b > M32)
_reg(["s_lshl2_add_u32"], lambda a, b: (a << 2) + b, 32, lambda a, b, r: (a << 2) + b > M32)
_reg(["s_lshl3_add_u32"], lambda a, b: (a << 3) + b, 32, lambda a, b, r: (a << 3) + b > M32)
_reg(["s_lshl4_add_u32"], lambda a, b: (a << 4) + b, 32, lambda a, b, r: (a << 4) + b > M32)
_reg(["s_min_i32"], lambda a, b: a if _s32(a) < _s32(b) else b, 32, lambda a, b, r: _s32(a) < _s32(b))
_reg(["s_max_i32"], lambda a, b: a if _s32(a) > _s32(b) else b, 32, lambda a, b, r: _s32(a) > _s32(b))
_reg(["s_min_u32"], lambda a, b: a if a < b else b, 32, lambda a, b, r: a < b)
_reg(["s_max_u32"], lambda a, b: a if a > b else b, 32, lambda a, b, r: a > b)
_reg(["s_bfe_u32"], lambda a, b: (a >> (b & 31)) & ((1 << ((b >> 16) & 0x7F)) - 1), 32, _nonzero)


@op("s_lshl_b64", "s_lshr_b64", "s_ashr_i64")
def _shift64(w, ins):
    a = w.sget(ins.ops[1], 64)
    n = w.sget(ins.ops[2]) & 63
    if ins.base == "s_lshl_b64":
        r = (a << n) & M64
    elif ins.base == "s_lshr_b64":
        r = a >> n
    else:
        r = (_s64(a) >> n) & M64
    w.sset(ins.ops[0], r, 64)
    w.scc = int(r != 0)


@op("s_addc_u32", "s_subb_u32")
def _carry(w, ins):
    a, b = w.sget(ins.ops[1]), w.sget(ins.ops[2])
    if ins.base == "s_addc_u32":
        full = a + b + w.scc
        w.scc = int(full > M32)
    else:
        full = a - b - w.scc
        w.scc = int(full < 0)
    w.sset(ins.ops[0], full & M32)


@op("s_cselect_b32", "s_cselect_b64")
def _cselect(w, ins):
    width = 64 if ins.base.endswith("64") else 32
    src = ins.ops[1] if w.scc else ins.ops[2]
    w.sset(ins.ops[0], w.sget(src, width), width)


@op("s_mov_b32", "s_mov_b64", "s_movk_i32")
def _mov(w, ins):
    if ins.base == "s_movk_i32":
        w.sset(ins.ops[0], _s32(((ins.ops[1].value & 0xFFFF) ^ 0x8000) - 0x8000))
        return
    width = 64 if ins.base.endswith("64") else 32
    w.sset(ins.ops[0], w.sget(ins.ops[1], width), width)


@op("s_addk_i32")
def _addk(w, ins):
    a = w.sget(ins.ops[0])
    k = ((ins.ops[1].value & 0xFFFF) ^ 0x8000) - 0x8000
    r = (a + k) & M32
    w.scc = int((_s32(a) >= 0) == (k >= 0) and (_s32(r) >= 0) != (_s32(a) >= 0))
    w.sset(ins.ops[0], r)


@op("s_mulk_i32")
def _mulk(w, ins):
    k = ((ins.ops[1].value & 0xFFFF) ^ 0x8000) - 0x8000
    w.sset(ins.ops[0], (_s32(w.sget(ins.ops[0])) * k) & M32)


@op("s_abs_i32")
def _abs(w, ins):
    r = abs(_s32(w.sget(ins.ops[1]))) & M32
    w.sset(ins.ops[0], r)
    w.scc = int(r != 0)


@op("s_not_b32", "s_not_b64")
def _not(w, ins):
    width = 64 if ins.base.endswith("64") else 32
    r = ~w.sget(ins.ops[1], width) & (M64 if width == 64 else M32)
    w.sset(ins.ops[0], r, width)
    w.scc = int(r != 0)


@op("s_brev_b32")
def _brev(w, ins):
    w.sset(ins.ops[0], int(f"{w.sget(ins.ops[1]):032b}"[::-1], 2))


@op("s_bcnt1_i32_b32", "s_bcnt1_i32_b64")
def _bcnt(w, ins):
    width = 64 if ins.base.endswith("64") else 32
    r = bin(w.sget(ins.ops[1], width)).count("1")
    w.sset(ins.ops[0], r)
    w.scc = int(r != 0)


@op("s_ff1_i32_b32", "s_ff1_i32_b64")
def _ff1(w, ins):
    width = 64 if ins.base.endswith("64") else 32
    x = w.sget(ins.ops[1], width)
    w.sset(ins.ops[0], ((x & -x).bit_length() - 1) & M32 if x else M32)


@op("s_sext_i32_i16", "s_sext_i32_i8")
def _sext(w, ins):
    bits = 16 if ins.base.endswith("16") else 8
    x = w.sget(ins.ops[1]) & ((1 << bits) - 1)
    w.sset(ins.ops[0], (x - (1 << bits) if x >> (bits - 1) else x) & M32)


@op("s_and_saveexec_b64", "s_or_saveexec_b64", "s_andn2_saveexec_b64", "s_xor_saveexec_b64")
def _saveexec(w, ins):
    src = w.sget(ins.ops[1], 64)
    old = w.exec_bits
    new = {"s_and_saveexec_b64": src & old, "s_or_saveexec_b64": src | old,
           "s_andn2_saveexec_b64": src & ~old & M64, "s_xor_saveexec_b64": src ^ old}[ins.base]
    w.sset(ins.ops[0], old, 64)
    w.s[126], w.s[127] = new & M32, new >> 32
    w.scc = int(new != 0)


_CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def _make_cmp(rel: str, kind: str):
    width = 64 if kind == "u64" else 32
    conv = _s32 if kind == "i32" else (lambda x: x)

    def h(w, ins):
        w.scc = int(_CMP[rel](conv(w.sget(ins.ops[0], width)), conv(w.sget(ins.ops[1], width))))
    return h


for _rel in _CMP:
    for _kind in ("i32", "u32"):
        op(f"s_cmp_{_rel}_{_kind}")(_make_cmp(_rel, _kind))
for _rel in ("eq", "lg"):
    op(f"s_cmp_{_rel}_u64")(_make_cmp(_rel, "u64"))


def _make_cmpk(rel: str, kind: str):
    def h(w, ins):
        k = ins.ops[1].value & 0xFFFF
        a = w.sget(ins.ops[0])
        if kind == "i32":
            a, k = _s32(a), (k ^ 0x8000) - 0x8000
        w.scc = int(_CMP[rel](a, k))
    return h


for _rel in _CMP:
    for _kind in ("i32", "u32"):
        op(f"s_cmpk_{_rel}_{_kind}")(_make_cmpk(_rel, _kind))


# ---- program control -----------------------------------------------------------

def _branch_if(cond):
    def h(w, ins):
        if cond(w):
            w.pc = ins.target
    return h


op("s_branch")(_branch_if(lambda w: True))
op("s_cbranch_scc0")(_branch_if(lambda w: w.scc == 0))
op("s_cbranch_scc1")(_branch_if(lambda w: w.scc == 1))
op("s_cbranch_vccz")(_branch_if(lambda w: int(w.s[106]) == 0 and int(w.s[107]) == 0))
op("s_cbranch_vccnz")(_branch_if(lambda w: int(w.s[106]) != 0 or int(w.s[107]) != 0))
op("s_cbranch_execz")(_branch_if(lambda w: w.exec_bits == 0))
op("s_cbranch_execnz")(_branch_if(lambda w: w.exec_bits != 0))


@op("s_endpgm")
def _endpgm(w, ins):
    w.state = "end"


@op("s_barrier")
def _barrier(w, ins):
    w.state = "barrier"


@op("s_waitcnt", "s_nop", "s_setprio", "s_sleep")
def _nothing(w, ins):
    """Memory completes at once and hazards are not modelled: nothing to wait for."""


# ---- scalar memory -------------------------------------------------------------

_LOAD_DWORDS = {"s_load_dword": 1, "s_load_dwordx2": 2, "s_load_dwordx4": 4, "s_load_dwordx8": 8,
                "s_load_dwordx16": 16}
_ONE_LANE = np.zeros(LANES, bool)
_ONE_LANE[0] = True


@op(*_LOAD_DWORDS)
def _s_load(w, ins):
    n = _LOAD_DWORDS[ins.base]
    sdst, sbase, off = ins.ops[0], ins.ops[1], ins.ops[2]
    if off.kind == "const":
        offset = off.value
    elif off.kind == "s":
        offset = w.sget(off)
    else:
        raise SimError(f"unsupported s_load offset {off.text} at {ins.where()}")
    if set(ins.mods) - {"glc"}:
        raise SimError(f"unsupported s_load modifiers {sorted(ins.mods)} at {ins.where()}")
    # SMEM ignores the low two address bits: loads are dword aligned.
    addr = (w.sget(sbase, 64) + offset) & ~3 & M64
    data = w.group.memory.load(np.full(LANES, addr, np.uint64), 4 * n, _ONE_LANE, ins.where())[0]
    w.s[sdst.index:sdst.index + n] = data.view(np.uint32)
