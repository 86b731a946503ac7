"""Vector integer, bit, integer-compare and lane-mask instructions (VOP1, VOP2,
VOP3, VOPC and their SDWA forms) of CDNA3 (gfx942) and CDNA4 (gfx950).

Semantics follow the ISA pseudo-code of AMD's CDNA3/CDNA4 documents; LLVM's
assembler (llvm-mc, llc 22) is the authority on operand order and syntax.
Decisions, and where hardware might differ:

- Shift amounts use the low 5 bits of the shift operand (6 for 64-bit
  shifts); ``*rev`` ops take the shift first (``v_lshlrev_b32 d, shift, x``).
  ``v_lshl_add_u64`` reads the low 3 bits of its shift as the ISA's
  pseudo-code does, but hardware only supports shifts 0..4 (LLVM selects it
  for no others), so a larger shift raises SimError instead of guessing.
- Carry and compare results written to an SGPR pair (VOPC, ``v_add_co_u32``,
  ``v_mad_u64_u32``'s carry) hold 0 for inactive lanes.
- ``v_cmpx_*`` writes the result both to its destination (VCC in the e32
  form) and to EXEC, as CDNA (GFX9) does; GFX10+ behaves differently.
- ``v_perm_b32`` selector bytes: 0..7 pick a byte of ``{src0, src1}`` (src1 is
  bytes 0..3), 8..11 replicate the sign bit of byte 1, 3, 5, 7, 12 gives 0x00
  and every value from 13 up to 255 gives 0xff (the ISA pseudo-code compares
  the whole byte, and LLVM's constant folding agrees).
- ``v_bitop3_b32``'s ``bitop3`` truth table is indexed by
  ``src0 << 2 | src1 << 1 | src2`` (LLVM picks 0xf0/0xcc/0xaa for src0/1/2);
  without the modifier the table is 0 and the result is 0.
- ``v_readfirstlane_b32`` reads the lowest active lane, lane 0 when EXEC is 0;
  ``v_readlane_b32``/``v_writelane_b32`` take the lane modulo 64 and ignore EXEC.
- ``v_cndmask_b32`` applies VOP3/SDWA ``abs``/``neg`` as bit operations on bit 31
  (what the float modifiers do to a 32-bit pattern); no other integer op
  accepts them.
- Not implemented (SimError): DPP forms, ``clamp`` on integer ops (saturating
  adds), SDWA forms of the carry ops (their sources sit at ``ops[2:]``, where
  ``Wave.vget`` would apply the wrong select), and any other modifier.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from ..program import SPECIAL_SGPRS, Instr, Operand
from ..wave import (
    LANES,
    SDWA_MODS,
    Core,
    Inline,
    Memo,
    SimError,
    Wave,
    batched,
    check_form,
    core_op,
    form_key,
    mask_reader,
    op,
    plain_source,
    plain_text,
    put_mask,
    sdwa_text,
)

_EXEC = Operand("s", *SPECIAL_SGPRS["exec"], text="exec")
_LANE = np.arange(LANES, dtype=np.uint64)
# Bits of the lanes below each lane, split in the halves mbcnt_lo / mbcnt_hi count.
_BELOW = (np.uint64(1) << _LANE) - np.uint64(1)
_BELOW_LO = (_BELOW & np.uint64(0xFFFFFFFF)).astype(np.uint32)
_BELOW_HI = (_BELOW >> np.uint64(32)).astype(np.uint32)
_REV8 = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], np.uint8)


def _validate(ins: Instr, nops: int, mods: frozenset, sdwa: bool, negabs: bool) -> None:
    """SimError for an operand count, encoding, modifier or source modifier the
    handler does not implement; remembered on ``ins`` once it passes."""
    name = ins.mnemonic
    check_form(ins, nops, mods, sdwa, "vector integer ops")
    for o in ins.ops:
        if (o.neg or o.abs) and not negabs:
            raise SimError(f"{name}: source modifier on {o.text} not implemented at {ins.where()}")
        if o.sext and ins.enc != "sdwa":
            raise SimError(f"{name}: sext() outside SDWA on {o.text} at {ins.where()}")
    ins.__dict__["_vint_ok"] = True


def _vop(*names: str, nops: int, mods: tuple = (), sdwa: bool = False, negabs: bool = False):
    """Register the decorated ``fn(w, ins)`` for ``names``, after a one-time
    validation of each instruction's form (see ``_validate``)."""
    allowed = frozenset(mods)

    def deco(fn):
        def handler(w: Wave, ins: Instr) -> None:
            if "_vint_ok" not in ins.__dict__:
                _validate(ins, nops, allowed, sdwa, negabs)
            fn(w, ins)
        handler.__name__, handler.__doc__ = fn.__name__, fn.__doc__
        op(*names)(handler)
        return fn
    return deco


def _lanes(x) -> np.ndarray:
    """A source as a uint32 ``[64]`` array (scalars broadcast), so that wrapping
    arithmetic never meets numpy's scalar overflow warnings."""
    if isinstance(x, np.ndarray) and x.ndim == 1:
        return x
    return np.full(LANES, x, np.uint32)


def _srcs(w: Wave, ins: Instr, first: int, n: int) -> list[np.ndarray]:
    """Sources ``ins.ops[first:first + n]`` as uint32 ``[64]`` arrays."""
    return [_lanes(w.vget(ins, i)) for i in range(first, first + n)]


def _i32(x: np.ndarray) -> np.ndarray:
    return x.view(np.int32)


def _sh5(x: np.ndarray) -> np.ndarray:
    return x & np.uint32(31)


def _u64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint64)


# ---- 32-bit results: name -> f(src0, ...) on uint32 [64] arrays or scalars -------------------

def _perm(s0, s1, sel) -> np.ndarray:
    """``v_perm_b32`` on sources of any (broadcastable) shapes: each result byte
    looked up in its lane's table of bytes (0..7 the bytes of ``{s0, s1}``, s1
    the low four; 8..11 the sign of bytes 1, 3, 5, 7 replicated; 12 zero; 13..15
    0xff; selectors above 15 read entry 15), the selector's bytes (a
    little-endian word's, in order) the indices."""
    s0, s1, sel = np.asarray(s0, np.uint32), np.asarray(s1, np.uint32), np.asarray(sel, np.uint32)
    shape = np.broadcast_shapes(s0.shape, s1.shape, sel.shape)
    data = np.empty(shape + (2,), np.uint32)
    data[..., 0], data[..., 1] = s1, s0
    table = data.view(np.uint8)
    first = int(sel.reshape(-1)[0])
    picks = [first >> shift & 0xFF for shift in (0, 8, 16, 24)]
    if max(picks) < 8 and (sel.ndim == 0 or (sel == first).all()):
        # One selector of data bytes for every lane (an SGPR or a constant, as
        # the kernel's): one gather of four byte columns.
        return table.take(picks, axis=-1).view(np.uint32)[..., 0]
    idx = np.ascontiguousarray(sel[..., None]).view(np.uint8)
    if not (idx < 8).all():
        # Selectors beyond the data bytes (rare in the kernel): the whole table.
        full = np.empty(shape + (16,), np.uint8)
        full[..., :8] = table
        full[..., 8:12] = (table[..., 1::2] >> 7) * np.uint8(0xFF)
        full[..., 12] = 0
        full[..., 13:] = 0xFF
        table, idx = full, np.minimum(idx, np.uint8(15))
    picked = np.take_along_axis(table, np.broadcast_to(idx, shape + (4,)), axis=-1)
    return picked.view(np.uint32)[..., 0]


def _bfe_i32(x: np.ndarray, off: np.ndarray, width: np.ndarray) -> np.ndarray:
    """``v_bfe_i32``: the ``width``-bit field at ``off``, sign-extended (width 0 gives 0)."""
    w = (width & np.uint32(31)).astype(np.int64)
    field = (x.astype(np.int64) >> _sh5(off).astype(np.int64)) & ((np.int64(1) << w) - 1)
    up = np.int64(64) - np.maximum(w, 1)
    signed = np.where(w == 0, 0, (field << up) >> up)
    return signed.astype(np.uint32)


def _bfrev(x: np.ndarray) -> np.ndarray:
    """``v_bfrev_b32``: bit 31-i of the result is bit i of ``x``."""
    rev = _REV8[np.ascontiguousarray(x).view(np.uint8).reshape(LANES, 4)[:, ::-1]]
    return np.ascontiguousarray(rev).view(np.uint32).reshape(LANES)


# Each op as the text of its arithmetic over its sources ``{a}``, ``{b}``, ``{c}``
# (uint32 ``[n, 64]`` or ``[64]`` arrays, ``[n, 1]`` SGPRs, numpy scalars; one
# at least an array), the one statement of its meaning: the handlers' and
# cores' function is the text as a lambda (``_op_fn``), and a fused stretch
# (``fuse``) inlines it. ``{out}`` sits after the last argument of the
# outermost call where that is a ufunc whose result is uint32, so that a
# fused stretch can write the destination without a temporary.
_UNARY_TEXT = {
    "v_mov_b32": "{a}",
    "v_not_b32": "np.invert({a}{out})",
    "v_bfrev_b32": "_bfrev({a})",
}

_BINARY_TEXT = {
    "v_add_u32": "np.add({a}, {b}{out})",
    "v_sub_u32": "np.subtract({a}, {b}{out})",
    "v_subrev_u32": "np.subtract({b}, {a}{out})",
    "v_and_b32": "np.bitwise_and({a}, {b}{out})",
    "v_or_b32": "np.bitwise_or({a}, {b}{out})",
    "v_xor_b32": "np.bitwise_xor({a}, {b}{out})",
    "v_lshlrev_b32": "np.left_shift({b}, _sh5({a}){out})",
    "v_lshrrev_b32": "np.right_shift({b}, _sh5({a}){out})",
    "v_ashrrev_i32": "(_i32({b}) >> _sh5({a}).astype(np.int32)).view(np.uint32)",
    "v_min_i32": "np.minimum(_i32({a}), _i32({b})).view(np.uint32)",
    "v_max_i32": "np.maximum(_i32({a}), _i32({b})).view(np.uint32)",
    "v_min_u32": "np.minimum({a}, {b}{out})",
    "v_max_u32": "np.maximum({a}, {b}{out})",
    "v_mul_lo_u32": "np.multiply({a}, {b}{out})",
    "v_mul_hi_u32": "((_u64({a}) * _u64({b})) >> np.uint64(32)).astype(np.uint32)",
    "v_mul_u32_u24": "np.multiply({a} & np.uint32(0xFFFFFF), {b} & np.uint32(0xFFFFFF){out})",
    "v_bcnt_u32_b32": "np.add(np.bitwise_count({a}).astype(np.uint32), {b}{out})",
}

_TERNARY_TEXT = {
    "v_add3_u32": "np.add({a} + {b}, {c}{out})",
    "v_add_lshl_u32": "np.left_shift({a} + {b}, _sh5({c}){out})",
    "v_lshl_add_u32": "np.add({a} << _sh5({b}), {c}{out})",
    "v_lshl_or_b32": "np.bitwise_or({a} << _sh5({b}), {c}{out})",
    "v_and_or_b32": "np.bitwise_or({a} & {b}, {c}{out})",
    "v_or3_b32": "np.bitwise_or({a} | {b}, {c}{out})",
    "v_bfi_b32": "np.bitwise_or({a} & {b}, ~{a} & {c}{out})",
    "v_bfe_u32": "((_u64({a}) >> _u64(_sh5({b}))) & ((np.uint64(1) << _u64(_sh5({c}))) - np.uint64(1))"
                 ").astype(np.uint32)",
    "v_bfe_i32": "_bfe_i32({a}, {b}, {c})",
    "v_mad_u32_u24": "np.add(({a} & np.uint32(0xFFFFFF)) * ({b} & np.uint32(0xFFFFFF)), {c}{out})",
    "v_perm_b32": "_perm({a}, {b}, {c})",
}


# The helpers the texts call whose results depend on their arguments alone.
_PURE = frozenset({"_sh5", "_i32", "_u64"})


def _op_fn(text: str, nsrc: int) -> Callable[..., Any]:
    """The function ``f(a[, b[, c]])`` an op's text states (see ``_UNARY_TEXT``)."""
    args = "abc"[:nsrc]
    return eval(f"lambda {', '.join(args)}: {text.format(out='', **{x: x for x in args})}", globals())


_UNARY = {name: _op_fn(t, 1) for name, t in _UNARY_TEXT.items()}
_BINARY = {name: _op_fn(t, 2) for name, t in _BINARY_TEXT.items()}
_TERNARY = {name: _op_fn(t, 3) for name, t in _TERNARY_TEXT.items()}

# VOP3-only binary ops: no e32 encoding, so no SDWA form either.
_VOP3_ONLY = {"v_mul_lo_u32", "v_mul_hi_u32", "v_bcnt_u32_b32"}


def _make(fn, nsrc: int):
    """The handler writing ``fn`` of the ``nsrc`` sources to the destination; at
    least one source is made an array so that wrapping arithmetic stays silent."""
    if nsrc == 1:
        def run(w: Wave, ins: Instr) -> None:
            w.vset(ins, fn(_lanes(w.vget(ins, 1))))
    elif nsrc == 2:
        def run(w: Wave, ins: Instr) -> None:
            a, b = w.vget(ins, 1), w.vget(ins, 2)
            if type(b) is not np.ndarray and type(a) is not np.ndarray:
                a = _lanes(a)
            w.vset(ins, fn(a, b))
    else:
        def run(w: Wave, ins: Instr) -> None:
            a, b, c = w.vget(ins, 1), w.vget(ins, 2), w.vget(ins, 3)
            if type(a) is not np.ndarray and type(b) is not np.ndarray and type(c) is not np.ndarray:
                a = _lanes(a)
            w.vset(ins, fn(a, b, c))
    return run


def _decoder(fn, text: str, nsrc: int, sdwa: bool, mods: frozenset = frozenset()):
    """The batched decoder of a ``_make`` op (``fn`` the function its ``text``
    states): a core with its sources' readers and its destination bound, for
    the forms without SDWA or modifiers (but ``mods``, which ``text`` already
    states) that read at least one VGPR; the
    instruction's ``Inline`` form recorded beside it (``wave.inline_of``).
    Made once per form in a process (``_FORMS``)."""
    def make(ins: Instr) -> tuple[Core | None, Inline | None, bool]:
        try:
            _validate(ins, nsrc + 1, mods, sdwa, False)
        except SimError:
            return None, None, False
        if ins.ops[0].kind != "v" or ins.ops[0].count != 1:
            return None, None, True
        if nsrc > 1 and not any(o.kind == "v" for o in ins.ops[1:]):
            return None, None, True  # scalar arithmetic would not wrap silently; the handler makes lanes
        if ins.enc == "sdwa":
            # Source selects bound; a destination select other than DWORD is the handler's.
            if set(ins.mods) - SDWA_MODS or ins.mods.get("dst_sel", "DWORD") != "DWORD":
                return None, None, True
            texts = [sdwa_text(o, ins.mods.get(f"src{k}_sel", "DWORD")) for k, o in enumerate(ins.ops[1:])]
        elif ins.enc in ("e32", "e64", "") and not set(ins.mods) - mods:
            texts = [plain_text(o) for o in ins.ops[1:]]
        else:
            return None, None, True
        sources = tuple(t for t in texts if t is not None)
        if len(sources) != len(texts):
            return None, None, True
        bound = [t.reader() for t in sources]
        d = ins.ops[0].index
        if nsrc == 1:
            (ra,) = bound

            def core(w) -> None:
                w.vb[:, d] = fn(ra(w))
        elif nsrc == 2:
            ra, rb = bound

            def core(w) -> None:
                w.vb[:, d] = fn(ra(w), rb(w))
        else:
            ra, rb, rc = bound

            def core(w) -> None:
                w.vb[:, d] = fn(ra(w), rb(w), rc(w))
        return core, Inline(text, d, sources, globals(), _PURE), True

    def decode(ins: Instr) -> Core | None:
        key = form_key(ins)
        core, inline, valid = _FORMS.get(key) or _FORMS.put(key, make(ins))
        # What ``make`` notes on the instruction, for this one too.
        if valid:
            ins.__dict__["_vint_ok"] = True
        if inline is not None:
            ins.__dict__["_inline"] = inline
        return core
    return decode


# The decoders' (core, Inline, form valid) by form (``wave.form_key``): the core
# binds the form's registers and constants and nothing of the instruction's
# place, so one serves every instruction of that form, in every kernel of the
# process. The kernels of both targets have fewer distinct forms than the bound.
_FORMS = Memo(1 << 14)


# Ops whose arithmetic lays the 64 lanes out itself (a per-lane byte table): no batched form.
_LANE_SHAPED = {"v_bfrev_b32"}

for _name, _fn in _UNARY.items():
    _vop(_name, nops=2, sdwa=True)(_make(_fn, 1))
    if _name not in _LANE_SHAPED:
        batched(_name)(_decoder(_fn, _UNARY_TEXT[_name], 1, True))
for _name, _fn in _BINARY.items():
    _vop(_name, nops=3, sdwa=_name not in _VOP3_ONLY)(_make(_fn, 2))
    batched(_name)(_decoder(_fn, _BINARY_TEXT[_name], 2, _name not in _VOP3_ONLY))
for _name, _fn in _TERNARY.items():
    _vop(_name, nops=4)(_make(_fn, 3))
    if _name not in _LANE_SHAPED:
        batched(_name)(_decoder(_fn, _TERNARY_TEXT[_name], 3, False))



# The 16 functions of two bits (x, y) by truth table (bit x << 1 | y), as text.
_TWO = ("np.uint32(0)", "~({x} | {y})", "(~{x} & {y})", "~{x}", "({x} & ~{y})", "~{y}", "({x} ^ {y})",
        "~({x} & {y})", "({x} & {y})", "~({x} ^ {y})", "{y}", "(~{x} | {y})", "{x}", "({x} | ~{y})",
        "({x} | {y})", "np.uint32(0xFFFFFFFF)")


def _bitop3_text(table: int) -> str:
    """The text of ``v_bitop3_b32``'s op over ``{a}``, ``{b}``, ``{c}`` (src0..2)
    for truth table ``table`` (bit ``a << 2 | b << 1 | c`` is the result's bit):
    the table expanded on each source in turn, ``(s & F1) | (~s & F0)`` with
    F1, F0 the two-bit functions of the others where ``s`` is 1 and 0, the
    shortest text of the three, simplified where F0 or F1 is constant or both
    are the same."""
    best = ""
    for s, x, y in (("a", "b", "c"), ("b", "a", "c"), ("c", "a", "b")):
        halves = [0, 0]
        for idx in range(8):
            bits = {"a": idx >> 2 & 1, "b": idx >> 1 & 1, "c": idx & 1}
            halves[bits[s]] |= (table >> idx & 1) << (bits[x] << 1 | bits[y])
        f0, f1 = (_TWO[h].format(x="{" + x + "}", y="{" + y + "}") for h in halves)
        v = "{" + s + "}"
        if halves[0] == halves[1]:
            text = f0
        elif halves[0] == 0:
            text = f"({v} & {f1})" if halves[1] != 15 else v
        elif halves[1] == 0:
            text = f"(~{v} & {f0})" if halves[0] != 15 else f"~{v}"
        elif halves[1] == 15:
            text = f"({v} | {f0})"
        elif halves[0] == 15:
            text = f"(~{v} | {f1})"
        else:
            text = f"(({v} & {f1}) | (~{v} & {f0}))"
        if not best or len(text) < len(best):
            best = text
    return best


@functools.lru_cache(maxsize=None)
def _bitop3(table: int) -> tuple[str, Callable[..., Any]]:
    """A truth table's text (``_bitop3_text``) and its function ``f(a, b, c)``
    (uint32 arrays), made once per table."""
    text = _bitop3_text(table)
    return text, _op_fn(text, 3)


@_vop("v_bitop3_b32", nops=4, mods=("bitop3",))
def bitop3_b32(w: Wave, ins: Instr) -> None:
    """``v_bitop3_b32 d, s0, s1, s2 bitop3:T``: bit j of d is bit
    ``s0[j] << 2 | s1[j] << 1 | s2[j]`` of the truth table T."""
    w.vset(ins, np.broadcast_to(_bitop3(ins.mods.get("bitop3", 0))[1](*_srcs(w, ins, 1, 3)), (LANES,)))

@batched("v_bitop3_b32")
def _bitop3_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_bitop3_b32``: its truth table's text (``_bitop3_text``) as a ternary op's."""
    text, fn = _bitop3(ins.mods.get("bitop3", 0))
    return _decoder(fn, text, 3, False, frozenset({"bitop3"}))(ins)


@_vop("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32", nops=3)
def mbcnt(w: Wave, ins: Instr) -> None:
    """``v_mbcnt_lo/hi_u32_b32 d, mask, base``: base + the number of set bits of
    the mask among the lanes below this one (lanes 0..31 / 32..63)."""
    mask, base = _srcs(w, ins, 1, 2)
    below = _BELOW_LO if ins.base == "v_mbcnt_lo_u32_b32" else _BELOW_HI
    w.vset(ins, np.bitwise_count(mask & below).astype(np.uint32) + base)


# ---- 64-bit results -----------------------------------------------------------------

_SHIFT64: dict[str, Callable[..., Any]] = {
    "v_lshlrev_b64": lambda s, x: x << s,
    "v_lshrrev_b64": lambda s, x: x >> s,
    "v_ashrrev_i64": lambda s, x: (x.view(np.int64) >> s.astype(np.int64)).view(np.uint64),
}


def _make_shift64(fn):
    def run(w: Wave, ins: Instr) -> None:
        shift = _u64(_lanes(w.vget(ins, 1)) & np.uint32(63))
        w.vset64(ins.ops[0], fn(shift, w.vget64(ins.ops[2])))
    return run


for _name, _fn in _SHIFT64.items():
    _vop(_name, nops=3)(_make_shift64(_fn))


@_vop("v_lshl_add_u64", nops=4)
def lshl_add_u64(w: Wave, ins: Instr) -> None:
    """``v_lshl_add_u64 d[2], s0[2], shift, s2[2]``: (s0 << shift) + s2, shift 0..4."""
    shift = _lanes(w.vget(ins, 2)) & np.uint32(7)
    if np.any(shift[w.exec_mask] > 4):
        raise SimError(f"v_lshl_add_u64: shift above 4 is unsupported by hardware at {ins.where()}")
    w.vset64(ins.ops[0], (w.vget64(ins.ops[1]) << _u64(shift)) + w.vget64(ins.ops[3]))


@_vop("v_mad_u64_u32", nops=5)
def mad_u64_u32(w: Wave, ins: Instr) -> None:
    """``v_mad_u64_u32 d[2], carry[2], s0, s1, s2[2]``: the 65-bit s0 * s1 + s2;
    its low 64 bits to d, bit 64 to the carry mask."""
    s0, s1 = _srcs(w, ins, 2, 2)
    prod = _u64(s0) * _u64(s1)  # < 2^64: exact
    total = prod + w.vget64(ins.ops[4])
    w.mask_set(ins.ops[1], total < prod)
    w.vset64(ins.ops[0], total)


# ---- carry arithmetic (e32: carry in/out in VCC; e64: any SGPR pair) -----------------------

def _carry_op(name: str, carry_in: bool, reverse: bool, subtract: bool):
    def run(w: Wave, ins: Instr) -> None:
        a, b = _srcs(w, ins, 2, 2)
        if reverse:
            a, b = b, a
        cin = w.mask_get(ins.ops[4]).astype(np.uint64) if carry_in else np.uint64(0)
        a64, b64 = _u64(a), _u64(b)
        if subtract:
            w.mask_set(ins.ops[1], b64 + cin > a64)
            res = a64 - b64 - cin
        else:
            res = a64 + b64 + cin
            w.mask_set(ins.ops[1], res > np.uint64(0xFFFFFFFF))
        w.vset(ins, (res & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    run.__doc__ = f"``{name} d, carry_out, s0, s1{', carry_in' if carry_in else ''}``."
    _vop(name, nops=5 if carry_in else 4)(run)


for _name, _cin, _rev, _sub in (("v_add_co_u32", False, False, False), ("v_addc_co_u32", True, False, False),
                                ("v_sub_co_u32", False, False, True), ("v_subrev_co_u32", False, True, True),
                                ("v_subb_co_u32", True, False, True), ("v_subbrev_co_u32", True, True, True)):
    _carry_op(_name, _cin, _rev, _sub)


# ---- compares ------------------------------------------------------------------------

_CMP: dict[str, Callable[..., Any]] = {
    "f": lambda a, b: np.zeros(LANES, bool), "lt": np.less, "eq": np.equal, "le": np.less_equal,
    "gt": np.greater, "ne": np.not_equal, "ge": np.greater_equal, "t": lambda a, b: np.ones(LANES, bool),
}


def _cmp_op(name: str, rel, ty: str, write_exec: bool):
    signed = ty[0] == "i"
    if ty.endswith("64"):
        def sources(w, ins):
            a, b = w.vget64(ins.ops[1]), w.vget64(ins.ops[2])
            return (a.view(np.int64), b.view(np.int64)) if signed else (a, b)
    else:
        def sources(w, ins):
            a, b = _srcs(w, ins, 1, 2)
            return (_i32(a), _i32(b)) if signed else (a, b)

    def run(w: Wave, ins: Instr) -> None:
        result = rel(*sources(w, ins))
        w.mask_set(ins.ops[0], result)
        if write_exec:
            w.mask_set(_EXEC, result)
    run.__doc__ = f"``{name} sdst, s0, s1``: per-lane {ty} compare{' (also to EXEC)' if write_exec else ''}."
    _vop(name, nops=3, sdwa=not ty.endswith("64"))(run)


for _rel, _fn in _CMP.items():
    for _ty in ("i32", "u32", "i64", "u64"):
        _cmp_op(f"v_cmp_{_rel}_{_ty}", _fn, _ty, False)
        _cmp_op(f"v_cmpx_{_rel}_{_ty}", _fn, _ty, True)


@_vop("v_cndmask_b32", nops=4, sdwa=True, negabs=True)
def cndmask_b32(w: Wave, ins: Instr) -> None:
    """``v_cndmask_b32 d, s0, s1, mask``: s1 where the mask bit is set, else s0."""
    a, b = _srcs(w, ins, 1, 2)
    a, b = _bitmods(a, ins.ops[1]), _bitmods(b, ins.ops[2])
    w.vset(ins, np.where(w.mask_get(ins.ops[3]), b, a))


def _bitmods(x: np.ndarray, o) -> np.ndarray:
    """``abs`` then ``neg`` of a source, as the bit operations they are on a 32-bit pattern."""
    if o.abs:
        x = x & np.uint32(0x7FFFFFFF)
    if o.neg:
        x = x ^ np.uint32(0x80000000)
    return x


# ---- lane access ---------------------------------------------------------------------

def _lane_pick(ins: Instr, o: Operand) -> Callable[[Any, Any], np.ndarray]:
    """``fn(view, lanes)``: source ``o`` of each wave at its lane ``lanes`` (intp
    ``[n]``): a VGPR's lane, an SGPR, or a constant (uint32 ``[n]`` or a scalar)."""
    i = o.index
    if o.kind == "v":
        return lambda w, lanes: np.take_along_axis(w.vb[:, i], lanes[:, None], axis=1)[:, 0]
    if o.kind == "s":
        return lambda w, lanes: w.sb[:, i]
    if o.kind == "const":
        c = np.uint32(o.bits32)
        return lambda w, lanes: c
    raise SimError(f"{o.text} is not a source operand at {ins.where()}")


def _sgpr_dest(ins: Instr) -> int:
    """The SGPR a lane read writes; SimError for any other destination."""
    d = ins.ops[0]
    if d.kind != "s":
        raise SimError(f"{d.text} is not a scalar destination at {ins.where()}")
    return d.index


@core_op("v_readfirstlane_b32")
def _readfirstlane_b32(ins: Instr) -> Core:
    """``v_readfirstlane_b32 sdst, vsrc``: the lowest active lane (lane 0 if EXEC is 0)."""
    _validate(ins, 2, frozenset(), False, False)
    d, pick = _sgpr_dest(ins), _lane_pick(ins, ins.ops[1])

    def core(w) -> None:
        exe = np.ascontiguousarray(w.sb[:, 126:128]).view(np.uint64)[:, 0]
        lowest = np.bitwise_count((exe & (~exe + np.uint64(1))) - np.uint64(1))  # 64 where EXEC is 0
        w.sb[:, d] = pick(w, np.where(exe == 0, 0, lowest).astype(np.intp))
    return core


@core_op("v_readlane_b32")
def _readlane_b32(ins: Instr) -> Core:
    """``v_readlane_b32 sdst, vsrc, lane``: lane (modulo 64) of vsrc, EXEC ignored."""
    _validate(ins, 3, frozenset(), False, False)
    src, sel = ins.ops[1], ins.ops[2]
    if src.kind != "v":
        raise SimError(f"v_readlane_b32: source {src.text} is not a VGPR at {ins.where()}")
    if sel.kind not in ("s", "const"):
        raise SimError(f"{sel.text} is not a scalar source at {ins.where()}")
    d, pick, lane = _sgpr_dest(ins), _lane_pick(ins, src), _lane_pick(ins, sel)

    def core(w) -> None:
        w.sb[:, d] = pick(w, (np.broadcast_to(lane(w, None), (w.sb.shape[0],)) & np.uint32(63)).astype(np.intp))
    return core


@_vop("v_writelane_b32", nops=3)
def writelane_b32(w: Wave, ins: Instr) -> None:
    """``v_writelane_b32 vdst, ssrc, lane``: write one lane (modulo 64), EXEC ignored."""
    dst = ins.ops[0]
    if dst.kind != "v":
        raise SimError(f"v_writelane_b32: destination {dst.text} is not a VGPR at {ins.where()}")
    w.v[dst.index, w.sget(ins.ops[2]) & 63] = w.sget(ins.ops[1])


# ---- batched forms of the mask and 64-bit ops ----------------------------------------------

def _source64(o: Operand):
    """A reader ``fn(view)`` of a 64-bit source as uint64 (``[n, 64]``, ``[n, 1]``
    or a constant, inline integers sign-extended); None for modifiers."""
    if o.neg or o.abs or o.sext:
        return None
    i = o.index
    if o.kind == "v" and o.count == 2:
        return lambda w: w.vb[:, i].astype(np.uint64) | w.vb[:, i + 1].astype(np.uint64) << np.uint64(32)
    if o.kind == "s" and o.count == 2:
        return lambda w: (w.sb[:, i].astype(np.uint64) | w.sb[:, i + 1].astype(np.uint64) << np.uint64(32))[:, None]
    if o.kind == "const":
        c = np.uint64(o.bits64)
        return lambda w: c
    return None


def _put64(w, d: int, value: np.ndarray) -> None:
    """Write uint64 ``[n, 64]`` to VGPR pair ``d`` of every wave (EXEC full)."""
    w.vb[:, d] = (value & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    w.vb[:, d + 1] = (value >> np.uint64(32)).astype(np.uint32)


def _plain_form(ins: Instr, nops: int) -> bool:
    """Whether ``ins`` is the plain (e32/e64, no modifier) form with ``nops`` operands
    that the handler accepts too."""
    return ins.enc in ("e32", "e64", "") and not ins.mods and len(ins.ops) == nops


def _cmp_decoder(rel, signed: bool):
    """The batched decoder of ``v_cmp_*_{i32,u32}`` (not ``v_cmpx``): the compare of
    every wave's lanes to its SGPR-pair destination."""
    def decode(ins: Instr) -> Core | None:
        if not _plain_form(ins, 3) or ins.ops[0].kind != "s" or ins.ops[0].count != 2:
            return None
        ra, rb = plain_source(ins.ops[1]), plain_source(ins.ops[2])
        if ra is None or rb is None:
            return None
        d = ins.ops[0]

        def core(w) -> None:
            a, b = ra(w), rb(w)
            put_mask(w, d, rel(_i32(a), _i32(b)) if signed else rel(a, b))
        return core
    return decode


for _rel in ("lt", "eq", "le", "gt", "ne", "ge"):
    for _ty in ("i32", "u32"):
        batched(f"v_cmp_{_rel}_{_ty}")(_cmp_decoder(_CMP[_rel], _ty[0] == "i"))


@batched("v_cndmask_b32")
def _cndmask_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_cndmask_b32`` without modifiers, its mask in an SGPR pair."""
    if not _plain_form(ins, 4):
        return None
    ra, rb, rm = plain_source(ins.ops[1]), plain_source(ins.ops[2]), mask_reader(ins.ops[3])
    if ra is None or rb is None or rm is None or ins.ops[0].kind != "v" or ins.ops[0].count != 1:
        return None
    d = ins.ops[0].index

    def core(w) -> None:
        w.vb[:, d] = np.where(rm(w), rb(w), ra(w))
    return core


def _shift64_decoder(fn):
    """The batched decoder of a 64-bit shift ``d[2], shift, x[2]`` (``_SHIFT64``)."""
    def decode(ins: Instr) -> Core | None:
        if not _plain_form(ins, 3) or ins.ops[0].kind != "v" or ins.ops[0].count != 2:
            return None
        rs, rx = plain_source(ins.ops[1]), _source64(ins.ops[2])
        if rs is None or rx is None:
            return None
        d = ins.ops[0].index

        def core(w) -> None:
            _put64(w, d, fn(_u64(rs(w) & np.uint32(63)), rx(w)))
        return core
    return decode


for _name, _fn in _SHIFT64.items():
    batched(_name)(_shift64_decoder(_fn))


@batched("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32")
def _mbcnt_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_mbcnt_lo/hi_u32_b32`` (plain sources, one at least a VGPR)."""
    if not _plain_form(ins, 3) or ins.ops[0].kind != "v" or ins.ops[0].count != 1:
        return None
    rm, rb = plain_source(ins.ops[1]), plain_source(ins.ops[2])
    if rm is None or rb is None:
        return None
    below = _BELOW_LO if ins.base == "v_mbcnt_lo_u32_b32" else _BELOW_HI
    d = ins.ops[0].index

    def core(w) -> None:
        w.vb[:, d] = np.bitwise_count(rm(w) & below).astype(np.uint32) + rb(w)
    return core


@batched("v_lshl_add_u64")
def _lshl_add_u64_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_lshl_add_u64``; a shift above 4 is left to the handler."""
    if not _plain_form(ins, 4) or ins.ops[0].kind != "v" or ins.ops[0].count != 2:
        return None
    ra, rs, rc = _source64(ins.ops[1]), plain_source(ins.ops[2]), _source64(ins.ops[3])
    if ra is None or rs is None or rc is None:
        return None
    d = ins.ops[0].index

    def core(w) -> bool | None:
        shift = rs(w) & np.uint32(7)
        if (shift > 4).any():
            return False
        _put64(w, d, (ra(w) << _u64(shift)) + rc(w))
        return None
    return core


@batched("v_mad_u64_u32")
def _mad_u64_u32_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``v_mad_u64_u32``: the carry mask to its SGPR pair."""
    if not _plain_form(ins, 5) or ins.ops[0].kind != "v" or ins.ops[0].count != 2:
        return None
    carry = ins.ops[1]
    ra, rb, rc = plain_source(ins.ops[2]), plain_source(ins.ops[3]), _source64(ins.ops[4])
    if ra is None or rb is None or rc is None or carry.kind != "s" or carry.count != 2:
        return None
    d = ins.ops[0].index

    def core(w) -> None:
        prod = _u64(ra(w)) * _u64(rb(w))
        total = prod + rc(w)
        put_mask(w, carry, total < prod)
        _put64(w, d, total)
    return core
