"""The simulator's vector integer / bit / compare / lane-mask family against
independent models: Python integers per lane, written from the ISA's
pseudo-code, never from the handlers. Every test runs with a partial EXEC and
checks that inactive lanes keep their value (and that masks written to SGPRs
hold 0 for them)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sim_cores import assert_core_matches_handler
from sim_kernels import compiled_kernels

import nvfp4_suite.kernels.flydsl.sim.ops.vint  # noqa: F401  (registers the family)
from nvfp4_suite.kernels.flydsl.sim.launch import execute, make_test_wave
from nvfp4_suite.kernels.flydsl.sim.program import NUM_SGPRS, parse_instruction
from nvfp4_suite.kernels.flydsl.sim.wave import OPS, BatchView, SimError, Wave, decode_batched

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
EDGES = [0, 1, 2, 31, 32, 33, 63, 64, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 0xFFFFFF, 0x1000000,
         0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, M32]


def s32(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def s64(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def rand_u32(rng: np.random.Generator, n: int = 64) -> np.ndarray:
    """Random uint32 lanes, about a third of them edge values."""
    x = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    pick = rng.random(n) < 0.35
    x[pick] = rng.choice(np.array(EDGES, np.uint32), int(pick.sum()))
    return x


def make_wave(rng: np.random.Generator, exec_bits: int | None = None):
    """A test wave with random VGPRs/SGPRs and a partial EXEC (lane 0 active,
    at least one lane inactive in each half)."""
    w = make_test_wave()
    for r in range(16):
        w.v[r] = rand_u32(rng)
    w.s[:100] = rand_u32(rng, 100)
    if exec_bits is None:
        exec_bits = int(rng.integers(0, 1 << 63, dtype=np.uint64)) | 1
        exec_bits &= ~((1 << 5) | (1 << 40))
    w.s[126], w.s[127] = exec_bits & M32, exec_bits >> 32
    return w


def active(w) -> list[bool]:
    bits = int(w.s[126]) | int(w.s[127]) << 32
    return [bool(bits >> i & 1) for i in range(64)]


def source_values(w, text: str) -> list[int]:
    """Per-lane 32-bit values of an operand as written (VGPR, SGPR or integer constant)."""
    t = text.strip()
    if t[0] == "v":
        return [int(x) for x in w.v[int(t[1:])]]
    if t[0] == "s":
        return [int(w.s[int(t[1:])])] * 64
    return [int(t, 0) & M32] * 64


def check_lanes(before: np.ndarray, after: np.ndarray, act: list[bool], expect: list[int], what: str) -> None:
    for i in range(64):
        want = expect[i] if act[i] else int(before[i])
        assert int(after[i]) == want, f"{what}: lane {i} ({'active' if act[i] else 'inactive'}) " \
                                      f"got {int(after[i]):#x}, want {want:#x}"


def mask_bits(w, index: int) -> int:
    return int(w.s[index]) | int(w.s[index + 1]) << 32


# ---- models ---------------------------------------------------------------------------

def bfrev(a: int) -> int:
    return int(f"{a:032b}"[::-1], 2)


def bfe_i32(a: int, b: int, c: int) -> int:
    width = c & 31
    field = (a >> (b & 31)) & ((1 << width) - 1)
    if width and field >> (width - 1) & 1:
        field -= 1 << width
    return field & M32


def perm_byte(data: int, sel: int) -> int:
    """One result byte of V_PERM_B32 from the 64-bit {src0, src1}, as the ISA's BYTE_PERMUTE."""
    byte = [(data >> (8 * i)) & 0xFF for i in range(8)]
    if sel >= 13:
        return 0xFF
    if sel == 12:
        return 0
    if sel >= 8:
        return 0xFF if byte[2 * (sel - 8) + 1] & 0x80 else 0
    return byte[sel]


def perm(a: int, b: int, c: int) -> int:
    data = a << 32 | b
    return sum(perm_byte(data, (c >> (8 * k)) & 0xFF) << (8 * k) for k in range(4))


UNARY = {
    "v_mov_b32": lambda a: a,
    "v_not_b32": lambda a: ~a & M32,
    "v_bfrev_b32": bfrev,
}
BINARY = {
    "v_add_u32": lambda a, b: (a + b) & M32,
    "v_sub_u32": lambda a, b: (a - b) & M32,
    "v_subrev_u32": lambda a, b: (b - a) & M32,
    "v_and_b32": lambda a, b: a & b,
    "v_or_b32": lambda a, b: a | b,
    "v_xor_b32": lambda a, b: a ^ b,
    "v_lshlrev_b32": lambda a, b: (b << (a % 32)) & M32,
    "v_lshrrev_b32": lambda a, b: b >> (a % 32),
    "v_ashrrev_i32": lambda a, b: (s32(b) >> (a % 32)) & M32,
    "v_min_i32": lambda a, b: min(s32(a), s32(b)) & M32,
    "v_max_i32": lambda a, b: max(s32(a), s32(b)) & M32,
    "v_min_u32": min,
    "v_max_u32": max,
    "v_mul_u32_u24": lambda a, b: (a % (1 << 24)) * (b % (1 << 24)) & M32,
}
BINARY_VOP3 = {
    "v_mul_lo_u32": lambda a, b: (a * b) & M32,
    "v_mul_hi_u32": lambda a, b: (a * b) >> 32,
    "v_bcnt_u32_b32": lambda a, b: (bin(a).count("1") + b) & M32,
}
TERNARY = {
    "v_add3_u32": lambda a, b, c: (a + b + c) & M32,
    "v_add_lshl_u32": lambda a, b, c: ((a + b) << (c % 32)) & M32,
    "v_lshl_add_u32": lambda a, b, c: ((a << (b % 32)) + c) & M32,
    "v_lshl_or_b32": lambda a, b, c: ((a << (b % 32)) | c) & M32,
    "v_and_or_b32": lambda a, b, c: (a & b) | c,
    "v_or3_b32": lambda a, b, c: a | b | c,
    "v_bfi_b32": lambda a, b, c: ((a & b) | (~a & c)) & M32,
    "v_bfe_u32": lambda a, b, c: (a >> (b % 32)) % (1 << (c % 32)),
    "v_bfe_i32": bfe_i32,
    "v_mad_u32_u24": lambda a, b, c: ((a % (1 << 24)) * (b % (1 << 24)) + c) & M32,
    "v_perm_b32": perm,
}


def run_model(rng, text: str, model, nsrc: int, dst: str = "v1") -> None:
    """Run ``text`` on a random wave and compare the destination with ``model``
    over the per-lane source values."""
    w = make_wave(rng)
    ins = parse_instruction(text)
    srcs = [source_values(w, o.text) for o in ins.ops[1:1 + nsrc]]
    before = w.v[int(dst[1:])].copy()
    act = active(w)
    execute(w, text)
    expect = [model(*(s[i] for s in srcs)) for i in range(64)]
    check_lanes(before, w.v[int(dst[1:])], act, expect, text)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("src", ["v2", "s7", "-2", "0x12345678", "64"])
def test_unary_ops_match_int_model(name, src):
    rng = np.random.default_rng(11)
    run_model(rng, f"{name}_e32 v1, {src}", UNARY[name], 1)
    run_model(rng, f"{name}_e64 v1, {src}", UNARY[name], 1)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("srcs", ["v2, v3", "s7, v3", "31, v3", "-16, v3", "0x87654321, v3", "v3, v3"])
def test_vop2_ops_match_int_model(name, srcs):
    rng = np.random.default_rng(12)
    for seed in range(3):
        run_model(np.random.default_rng(seed), f"{name}_e32 v1, {srcs}", BINARY[name], 2)
    run_model(rng, f"{name}_e32 v3, {srcs}", BINARY[name], 2, dst="v3")
    e64 = srcs.replace("0x87654321", "-7")
    run_model(rng, f"{name}_e64 v1, {e64}", BINARY[name], 2)
    run_model(rng, f"{name}_e64 v1, v2, s9", BINARY[name], 2)
    run_model(rng, f"{name}_e64 v1, 5, -3", BINARY[name], 2)


@pytest.mark.parametrize("name", sorted(BINARY_VOP3))
@pytest.mark.parametrize("srcs", ["v2, v3", "v2, s7", "s7, v3", "v2, 0", "-1, v3", "7, -9"])
def test_vop3_binary_ops_match_int_model(name, srcs):
    for seed in range(3):
        run_model(np.random.default_rng(seed), f"{name} v1, {srcs}", BINARY_VOP3[name], 2)


@pytest.mark.parametrize("name", sorted(TERNARY))
@pytest.mark.parametrize("srcs", ["v2, v3, v4", "s7, v3, v4", "v2, s7, v4", "v2, v3, s7", "v2, 16, 1",
                                  "v2, 7, v4", "-1, v3, 0", "v2, v2, v2"])
def test_vop3_ternary_ops_match_int_model(name, srcs):
    for seed in range(3):
        run_model(np.random.default_rng(seed), f"{name} v1, {srcs}", TERNARY[name], 3)


def test_bfe_edge_widths_and_offsets():
    """Every (offset, width) pair of the 5-bit fields on one value, plus ignored high bits."""
    w = make_wave(np.random.default_rng(3), exec_bits=M64)
    x = 0xB6E3_5A91
    w.v[2] = x
    w.v[3] = np.arange(64) | (np.arange(64) << 7)  # offsets with junk above bit 4
    for width in range(40):
        w.s[7] = width
        for name in ("v_bfe_u32", "v_bfe_i32"):
            execute(w, f"{name} v1, v2, v3, s7")
            for lane in range(64):
                off = lane
                want = TERNARY[name](x, off | off << 7, width)
                assert int(w.v[1, lane]) == want, (name, off, width)


# ---- v_perm_b32 ----------------------------------------------------------------------

@pytest.mark.parametrize("exec_bits", [None, M64])
def test_perm_every_selector_byte_in_every_position(exec_bits):
    """All 256 selector values in each of the 4 result bytes against the ISA's
    BYTE_PERMUTE (a partial EXEC: the handler; a full one: the batched core)."""
    rng = np.random.default_rng(5)
    w = make_wave(rng, exec_bits)
    act = active(w)
    for pos in range(4):
        for base in range(0, 256, 64):
            sel = (np.arange(base, base + 64, dtype=np.uint32) << np.uint32(8 * pos)) | np.uint32(0x0C0C0C0C
                                                                                                  & ~(0xFF << 8 * pos))
            w.v[4] = sel
            w.v[2], w.v[3] = rand_u32(rng), rand_u32(rng)
            w.v[2, :8] = [0x80C0E0F0, 0x7F7F7F7F, 0x80808080, 0, M32, 0x01800280, 0x80018002, 0x12345678]
            before = w.v[1].copy()
            execute(w, "v_perm_b32 v1, v2, v3, v4")
            expect = [perm(int(w.v[2, i]), int(w.v[3, i]), int(sel[i])) for i in range(64)]
            check_lanes(before, w.v[1], act, expect, f"v_perm_b32 byte {pos}")


@pytest.mark.parametrize("s0, s1, sel, folded", [
    # llc 22 -O2 (gfx942) constant-folds llvm.amdgcn.perm to these values.
    (0x80C0E0F0, 0x7F801234, 0x0C0D1080, 0x00FFFFFF),
    (0x80C0E0F0, 0x7F801234, 0x08090A0B, 0x0000FFFF),
    (0x11223344, 0x55667788, 0x00010607, 0x88772211),
])
def test_perm_agrees_with_llvm_constant_folding(s0, s1, sel, folded):
    w = make_test_wave()
    w.v[2], w.v[3], w.s[4] = s0, s1, sel
    execute(w, "v_perm_b32 v1, v2, v3, s4")
    assert (w.v[1] == folded).all()


# ---- v_bitop3_b32 --------------------------------------------------------------------

def bitop3_model(table: int, a: int, b: int, c: int) -> int:
    """Bit by bit: result bit j = table bit (a_j << 2 | b_j << 1 | c_j)."""
    out = 0
    for j in range(32):
        idx = (a >> j & 1) << 2 | (b >> j & 1) << 1 | (c >> j & 1)
        out |= (table >> idx & 1) << j
    return out


def test_bitop3_every_truth_table_matches_bitwise_model():
    rng = np.random.default_rng(9)
    for table in range(256):
        w = make_wave(rng)
        act = active(w)
        before = w.v[1].copy()
        execute(w, f"v_bitop3_b32 v1, v2, s7, v4 bitop3:{table:#x}" if table else "v_bitop3_b32 v1, v2, s7, v4")
        expect = [bitop3_model(table, int(w.v[2, i]), int(w.s[7]), int(w.v[4, i])) for i in range(64)]
        check_lanes(before, w.v[1], act, expect, f"bitop3:{table:#x}")


def test_bitop3_every_truth_tables_batched_core_matches_its_handler():
    """Each table's core (its text, ``_bitop3_text``) over several waves, with
    VGPR and SGPR sources, against the handler on each wave: the handler's
    own agreement with the bit-by-bit model is the test above."""
    forms = ("v_bitop3_b32 v1, v2, s7, v4", "v_bitop3_b32 v1, v1, v3, v5")
    for table in range(256):
        assert_core_matches_handler(f"{forms[table % 2]} bitop3:{table:#x}", "gfx950", seed=table, n=4)


def test_bitop3_texts_are_at_most_one_select_of_two_bit_functions():
    """The text of each table expands it on one source at most once: at most
    two two-bit functions and one select (no table needs more), and the
    tables of a single source or of two are that op alone."""
    from nvfp4_suite.kernels.flydsl.sim.ops.vint import _bitop3_text

    assert _bitop3_text(0xF0) == "{a}" and _bitop3_text(0x0F) == "~{a}" and _bitop3_text(0xCC) == "{b}"
    assert _bitop3_text(0xC8) == "({b} & ({a} | {c}))"
    assert _bitop3_text(0x88) == "({b} & {c})"
    assert max(_bitop3_text(t).count("&") + _bitop3_text(t).count("|") + _bitop3_text(t).count("^")
               for t in range(256)) <= 5


@pytest.mark.parametrize("text, formula", [
    # What llc 22 (-mcpu=gfx950 -O2) emits for these IR formulas; x, y, z are
    # the loaded values in v1, v2, v3. They fix the truth table's bit order:
    # a reversed order (src2 as the high index bit) would give 0xce, 0xa6, 0xdc.
    ("v_bitop3_b32 v5, v1, v3, v2 bitop3:0xdc", lambda x, y, z: (x & ~y) | z),
    ("v_bitop3_b32 v5, v1, v2, v3 bitop3:0xb4", lambda x, y, z: x ^ (y & ~z)),
    ("v_bitop3_b32 v5, v1, v3, v2 bitop3:0x32", lambda x, y, z: (x | y) & ~z),
    ("v_bitop3_b32 v5, v1, v3, v2 bitop3:0xce", lambda x, y, z: (~x & y) | z),
    ("v_bitop3_b32 v5, v1, v3, v2 bitop3:0x20", lambda x, y, z: x & y & ~z),
])
def test_bitop3_agrees_with_llvm_instruction_selection(text, formula):
    rng = np.random.default_rng(2)
    w = make_wave(rng, exec_bits=M64)
    execute(w, text)
    for i in range(64):
        x, y, z = (int(w.v[r, i]) for r in (1, 2, 3))
        assert int(w.v[5, i]) == formula(x, y, z) & M32


# ---- 64-bit results ------------------------------------------------------------------

def vals64(w, text: str) -> list[int]:
    t = text.strip()
    if t.startswith(("v[", "s[")):
        lo = int(t[2:].split(":")[0])
        if t[0] == "v":
            return [int(w.v[lo, i]) | int(w.v[lo + 1, i]) << 32 for i in range(64)]
        return [int(w.s[lo]) | int(w.s[lo + 1]) << 32] * 64
    return [int(t, 0) & M64] * 64


def check_pair(w, before, lo: int, act, expect, what):
    check_lanes(before[0], w.v[lo], act, [e & M32 for e in expect], what + " (low)")
    check_lanes(before[1], w.v[lo + 1], act, [e >> 32 for e in expect], what + " (high)")


@pytest.mark.parametrize("name, model", [
    ("v_lshlrev_b64", lambda s, x: (x << (s % 64)) & M64),
    ("v_lshrrev_b64", lambda s, x: x >> (s % 64)),
    ("v_ashrrev_i64", lambda s, x: (s64(x) >> (s % 64)) & M64),
])
@pytest.mark.parametrize("srcs", ["v2, v[4:5]", "v2, -1", "s7, v[4:5]", "v2, s[8:9]", "40, v[4:5]"])
def test_64bit_shifts_match_int_model(name, model, srcs):
    rng = np.random.default_rng(4)
    w = make_wave(rng)
    w.v[2, :8] = [0, 1, 31, 32, 33, 63, 64, 0xFFFFFFC1]
    act = active(w)
    sh, val = [t.strip() for t in srcs.split(",")]
    shifts, xs = source_values(w, sh), vals64(w, val)
    before = w.v[10:12].copy()
    execute(w, f"{name} v[10:11], {srcs}")
    check_pair(w, before, 10, act, [model(shifts[i], xs[i]) for i in range(64)], name)


@pytest.mark.parametrize("shift", [0, 1, 2, 3, 4])
def test_lshl_add_u64_matches_int_model(shift):
    rng = np.random.default_rng(6)
    w = make_wave(rng)
    w.v[2, :3], w.v[3, :3] = M32, M32
    act = active(w)
    a, c = vals64(w, "v[2:3]"), vals64(w, "s[8:9]")
    before = w.v[10:12].copy()
    execute(w, f"v_lshl_add_u64 v[10:11], v[2:3], {shift}, s[8:9]")
    check_pair(w, before, 10, act, [((a[i] << shift) + c[i]) & M64 for i in range(64)], "v_lshl_add_u64")


def test_lshl_add_u64_refuses_shift_above_4():
    w = make_test_wave()
    with pytest.raises(SimError, match="shift above 4"):
        execute(w, "v_lshl_add_u64 v[10:11], v[2:3], 5, s[8:9]")


def test_mad_u64_u32_carries_match_65bit_model():
    rng = np.random.default_rng(7)
    w = make_wave(rng)
    w.v[10, :6] = [M32, M32, 0, 1, 0x80000000, M32]
    w.s[12] = M32
    w.v[6, :6] = [M32, 0, M32, M32, 0, 1]
    w.v[7, :6] = [M32, 0, M32, M32, 0, 0]
    w.v[6, 6:40] = M32  # many carries among random lanes
    act = active(w)
    a, b, c = source_values(w, "v10"), source_values(w, "s12"), vals64(w, "v[6:7]")
    full = [a[i] * b[i] + c[i] for i in range(64)]
    assert any(f >> 64 for f, on in zip(full, act) if on)
    before = w.v[58:60].copy()
    execute(w, "v_mad_u64_u32 v[58:59], s[0:1], v10, s12, v[6:7]")
    check_pair(w, before, 58, act, [f & M64 for f in full], "v_mad_u64_u32")
    want = sum(1 << i for i in range(64) if act[i] and full[i] >> 64)
    assert mask_bits(w, 0) == want


def test_mad_u64_u32_with_inline_constant_addend():
    w = make_wave(np.random.default_rng(8), exec_bits=M64)
    execute(w, "v_mad_u64_u32 v[20:21], vcc, v2, v3, -1")
    for i in range(64):
        full = int(w.v[2, i]) * int(w.v[3, i]) + M64
        assert int(w.v[20, i]) | int(w.v[21, i]) << 32 == full & M64
    assert mask_bits(w, 106) == sum(1 << i for i in range(64) if (int(w.v[2, i]) * int(w.v[3, i])))


# ---- carry arithmetic ----------------------------------------------------------------

CARRY = {  # name: (uses carry in, model(a, b, cin) -> (result, carry out))
    "v_add_co_u32": (False, lambda a, b, c: ((a + b) & M32, (a + b) >> 32)),
    "v_addc_co_u32": (True, lambda a, b, c: ((a + b + c) & M32, (a + b + c) >> 32)),
    "v_sub_co_u32": (False, lambda a, b, c: ((a - b) & M32, int(b > a))),
    "v_subrev_co_u32": (False, lambda a, b, c: ((b - a) & M32, int(a > b))),
    "v_subb_co_u32": (True, lambda a, b, c: ((a - b - c) & M32, int(b + c > a))),
    "v_subbrev_co_u32": (True, lambda a, b, c: ((b - a - c) & M32, int(a + c > b))),
}


@pytest.mark.parametrize("name", sorted(CARRY))
@pytest.mark.parametrize("form", ["e32", "e64"])
def test_carry_ops_match_int_model(name, form):
    uses_cin, model = CARRY[name]
    rng = np.random.default_rng(10)
    w = make_wave(rng)
    w.v[3, :4] = [M32, 0, 1, 0x80000000]
    w.v[2, :4] = [1, 0, M32, 0x80000000]
    cin_reg = 106 if form == "e32" else 20
    # Equal operands with a carry in set: only the carry decides the borrow there.
    w.v[3, 4:8] = w.v[2, 4:8] if form == "e32" else w.s[9]
    # Sums of exactly 0xffffffff without a carry in: no carry out.
    w.v[3, 8:10] = M32 - (w.v[2, 8:10] if form == "e32" else w.s[9])
    w.s[cin_reg] = (int(w.s[cin_reg]) | 0xF0) & ~0x300
    w.s[126] |= 0x3F0
    act = active(w)
    cin = mask_bits(w, cin_reg)
    if form == "e32":
        text = f"{name}_e32 v1, vcc, v2, v3" + (", vcc" if uses_cin else "")
        out_reg = 106
    else:
        text = f"{name}_e64 v1, s[4:5], s9, v3" + (", s[20:21]" if uses_cin else "")
        out_reg = 4
    a = source_values(w, "v2" if form == "e32" else "s9")
    b = source_values(w, "v3")
    results = [model(a[i], b[i], cin >> i & 1 if uses_cin else 0) for i in range(64)]
    before = w.v[1].copy()
    execute(w, text)
    check_lanes(before, w.v[1], act, [r for r, _ in results], text)
    assert mask_bits(w, out_reg) == sum(1 << i for i in range(64) if act[i] and results[i][1])


# ---- compares ------------------------------------------------------------------------

RELS = {"lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ne": lambda a, b: a != b, "ge": lambda a, b: a >= b,
        "f": lambda a, b: False, "t": lambda a, b: True}


def cmp_expect(w, rel: str, ty: str, a: list[int], b: list[int]) -> int:
    conv = {"i32": s32, "u32": int, "i64": s64, "u64": int}[ty]
    act = active(w)
    return sum(1 << i for i in range(64) if act[i] and RELS[rel](conv(a[i]), conv(b[i])))


@pytest.mark.parametrize("rel", sorted(RELS))
@pytest.mark.parametrize("ty", ["i32", "u32"])
def test_vopc_32bit_writes_vcc_and_sgpr_pairs_with_inactive_lanes_zero(rel, ty):
    rng = np.random.default_rng(13)
    w = make_wave(rng)
    w.v[3, :8] = w.v[2, :8]  # equal lanes
    w.s[106] = w.s[107] = w.s[8] = w.s[9] = M32
    for text, out, a, b in [
        (f"v_cmp_{rel}_{ty}_e32 vcc, v2, v3", 106, "v2", "v3"),
        (f"v_cmp_{rel}_{ty}_e32 vcc, s7, v3", 106, "s7", "v3"),
        (f"v_cmp_{rel}_{ty}_e32 vcc, -5, v3", 106, "-5", "v3"),
        (f"v_cmp_{rel}_{ty}_e64 s[8:9], v2, v3", 8, "v2", "v3"),
        (f"v_cmp_{rel}_{ty}_e64 s[8:9], 0, v3", 8, "0", "v3"),
        (f"v_cmp_{rel}_{ty}_e64 s[8:9], v2, s7", 8, "v2", "s7"),
    ]:
        want = cmp_expect(w, rel, ty, source_values(w, a), source_values(w, b))
        execute(w, text)
        assert mask_bits(w, out) == want, text


@pytest.mark.parametrize("rel", sorted(RELS))
@pytest.mark.parametrize("ty", ["i64", "u64"])
def test_vopc_64bit_compares(rel, ty):
    w = make_wave(np.random.default_rng(14))
    w.v[4, :8], w.v[5, :8] = w.v[2, :8], w.v[3, :8]
    want = cmp_expect(w, rel, ty, vals64(w, "v[2:3]"), vals64(w, "v[4:5]"))
    execute(w, f"v_cmp_{rel}_{ty}_e64 s[8:9], v[2:3], v[4:5]")
    assert mask_bits(w, 8) == want


def test_cmpx_writes_both_vcc_and_exec():
    w = make_wave(np.random.default_rng(15))
    want = cmp_expect(w, "gt", "u32", source_values(w, "v2"), source_values(w, "v3"))
    execute(w, "v_cmpx_gt_u32_e32 vcc, v2, v3")
    assert mask_bits(w, 106) == want and mask_bits(w, 126) == want
    w2 = make_wave(np.random.default_rng(15))
    execute(w2, "v_cmpx_gt_u32_e64 s[10:11], v2, v3")
    assert mask_bits(w2, 10) == want and mask_bits(w2, 126) == want


def test_vopc_sdwa_applies_source_selects():
    w = make_wave(np.random.default_rng(16))
    lanes = np.arange(10, dtype=np.uint32)
    w.v[2, :10] = (w.v[2, :10] & np.uint32(0xFFFF)) | (lanes << np.uint32(16))
    w.v[3, :10] = (w.v[3, :10] & np.uint32(0xFFFFFF00)) | lanes
    w.v[3, 3] ^= 1
    a = [int(x) >> 16 for x in w.v[2]]
    b = [int(x) & 0xFF for x in w.v[3]]
    want = cmp_expect(w, "eq", "u32", a, b)
    assert want & 0x3F7 and not want & 0x8
    execute(w, "v_cmp_eq_u32_sdwa s[2:3], v2, v3 src0_sel:WORD_1 src1_sel:BYTE_0")
    assert mask_bits(w, 2) == want


# ---- v_cndmask_b32 -------------------------------------------------------------------

@pytest.mark.parametrize("text, mask", [
    ("v_cndmask_b32_e32 v1, v2, v3, vcc", 106),
    ("v_cndmask_b32_e32 v1, 0, v3, vcc", 106),
    ("v_cndmask_b32_e32 v1, -1, v3, vcc", 106),
    ("v_cndmask_b32_e32 v1, s7, v3, vcc", 106),
    ("v_cndmask_b32_e64 v1, v2, v3, s[8:9]", 8),
    ("v_cndmask_b32_e64 v1, 0, v3, s[8:9]", 8),
    ("v_cndmask_b32_e64 v1, 0, 1, vcc", 106),
    ("v_cndmask_b32_e64 v1, 0, 1, s[8:9]", 8),
    ("v_cndmask_b32_e64 v1, v2, s7, s[8:9]", 8),
])
def test_cndmask_selects_src1_where_mask_set(text, mask):
    w = make_wave(np.random.default_rng(17))
    ins = parse_instruction(text)
    a, b = source_values(w, ins.ops[1].text), source_values(w, ins.ops[2].text)
    m = mask_bits(w, mask)
    before = w.v[1].copy()
    act = active(w)
    execute(w, text)
    check_lanes(before, w.v[1], act, [b[i] if m >> i & 1 else a[i] for i in range(64)], text)


def test_cndmask_e64_abs_neg_act_on_the_sign_bit():
    w = make_wave(np.random.default_rng(18))
    m = mask_bits(w, 8)
    before, act = w.v[1].copy(), active(w)
    execute(w, "v_cndmask_b32_e64 v1, -v2, |v3|, s[8:9]")
    expect = [(int(w.v[3, i]) & 0x7FFFFFFF) if m >> i & 1 else int(w.v[2, i]) ^ 0x80000000 for i in range(64)]
    check_lanes(before, w.v[1], act, expect, "cndmask neg/abs")


# ---- SDWA ----------------------------------------------------------------------------

SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
       "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}


def sdwa_src(x: int, sel: str, sext: bool) -> int:
    shift, width = SEL[sel]
    f = (x >> shift) & ((1 << width) - 1)
    if sext and f >> (width - 1) & 1:
        f -= 1 << width
    return f & M32


def sdwa_dst(old: int, val: int, sel: str, unused: str) -> int:
    shift, width = SEL[sel]
    if width == 32:
        return val
    field = (val & ((1 << width) - 1)) << shift
    keep = old & ~(((1 << width) - 1) << shift) & M32
    if unused == "UNUSED_PRESERVE":
        return keep | field
    if unused == "UNUSED_SEXT" and val >> (width - 1) & 1:
        return field | (M32 & ~((1 << (shift + width)) - 1))
    return field


SDWA_CASES = [  # (op, src0 sext, src0_sel, src1 sext, src1_sel, dst_sel, dst_unused): from the .s files first
    ("v_lshlrev_b32", False, "DWORD", True, "WORD_1", "DWORD", "UNUSED_PAD"),
    ("v_lshlrev_b32", False, "DWORD", True, "BYTE_3", "DWORD", "UNUSED_PAD"),
    ("v_lshlrev_b32", False, "DWORD", False, "BYTE_0", "DWORD", "UNUSED_PAD"),
    ("v_lshlrev_b32", False, "DWORD", False, "BYTE_1", "DWORD", "UNUSED_PAD"),
    ("v_lshlrev_b32", False, "DWORD", False, "BYTE_2", "DWORD", "UNUSED_PAD"),
    ("v_lshlrev_b32", False, "DWORD", False, "BYTE_3", "DWORD", "UNUSED_PAD"),
    ("v_or_b32", False, "DWORD", False, "WORD_0", "DWORD", "UNUSED_PAD"),
    ("v_or_b32", False, "DWORD", False, "BYTE_3", "DWORD", "UNUSED_PAD"),
    ("v_or_b32", False, "BYTE_1", False, "BYTE_3", "WORD_1", "UNUSED_PAD"),
    ("v_or_b32", False, "WORD_1", False, "WORD_0", "WORD_1", "UNUSED_PRESERVE"),
    ("v_and_b32", True, "BYTE_2", False, "DWORD", "BYTE_1", "UNUSED_SEXT"),
    ("v_add_u32", True, "WORD_1", True, "WORD_0", "WORD_0", "UNUSED_PRESERVE"),
    ("v_lshrrev_b32", False, "BYTE_0", False, "WORD_1", "BYTE_3", "UNUSED_PRESERVE"),
    ("v_ashrrev_i32", False, "DWORD", True, "BYTE_3", "DWORD", "UNUSED_PAD"),
]


@pytest.mark.parametrize("case", SDWA_CASES, ids=lambda c: "-".join(str(x) for x in c))
def test_sdwa_binary_matches_bit_model(case):
    name, sx0, sel0, sx1, sel1, dsel, unused = case
    rng = np.random.default_rng(19)
    w = make_wave(rng)
    w.v[2, :8] = [0, 1, 7, 15, 16, 31, 33, 0xFFFF0008]
    a0 = "sext(v2)" if sx0 else "v2"
    a1 = "sext(v3)" if sx1 else "v3"
    text = (f"{name}_sdwa v1, {a0}, {a1} dst_sel:{dsel} dst_unused:{unused} "
            f"src0_sel:{sel0} src1_sel:{sel1}")
    act = active(w)
    before = w.v[1].copy()
    model = BINARY[name]
    expect = [sdwa_dst(int(before[i]), model(sdwa_src(int(w.v[2, i]), sel0, sx0),
                                            sdwa_src(int(w.v[3, i]), sel1, sx1)), dsel, unused)
              for i in range(64)]
    execute(w, text)
    check_lanes(before, w.v[1], act, expect, text)


@pytest.mark.parametrize("dsel, unused, sel", [("WORD_1", "UNUSED_PRESERVE", "BYTE_2"),
                                               ("WORD_1", "UNUSED_PAD", "WORD_1"),
                                               ("BYTE_0", "UNUSED_SEXT", "BYTE_3"), ("DWORD", "UNUSED_PAD", "WORD_1")])
def test_sdwa_mov_and_not_match_bit_model(dsel, unused, sel):
    for name in ("v_mov_b32", "v_not_b32"):
        w = make_wave(np.random.default_rng(20))
        act, before = active(w), w.v[1].copy()
        text = f"{name}_sdwa v1, v2 dst_sel:{dsel} dst_unused:{unused} src0_sel:{sel}"
        expect = [sdwa_dst(int(before[i]), UNARY[name](sdwa_src(int(w.v[2, i]), sel, False)), dsel, unused)
                  for i in range(64)]
        execute(w, text)
        check_lanes(before, w.v[1], act, expect, text)


def test_sdwa_cndmask_preserve():
    w = make_wave(np.random.default_rng(21))
    m = mask_bits(w, 106)
    act, before = active(w), w.v[1].copy()
    execute(w, "v_cndmask_b32_sdwa v1, v2, v3, vcc dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE "
               "src0_sel:WORD_0 src1_sel:BYTE_1")
    expect = [sdwa_dst(int(before[i]), sdwa_src(int(w.v[3, i]), "BYTE_1", False) if m >> i & 1
                       else sdwa_src(int(w.v[2, i]), "WORD_0", False), "WORD_1", "UNUSED_PRESERVE")
              for i in range(64)]
    check_lanes(before, w.v[1], act, expect, "cndmask sdwa")


# ---- lane masks and lane access ------------------------------------------------------

@pytest.mark.parametrize("exec_bits", [M64, 0x0000_0001_8000_0001, 0xF0F0_0000_0000_1234, 0xFFFF_FFFF_0000_0000])
def test_mbcnt_counts_mask_bits_below_each_lane(exec_bits):
    w = make_wave(np.random.default_rng(22), exec_bits=exec_bits)
    mask = 0x9234_5678_FEDC_BA98
    w.s[4], w.s[5] = mask & M32, mask >> 32
    before = w.v[1].copy()
    act = active(w)
    execute(w, "v_mbcnt_lo_u32_b32 v1, s4, 0")
    execute(w, "v_mbcnt_hi_u32_b32 v1, s5, v1")
    check_lanes(before, w.v[1], act, [bin(mask & ((1 << i) - 1)).count("1") for i in range(64)], "mbcnt")
    before6 = w.v[6].copy()
    execute(w, "v_mbcnt_lo_u32_b32 v6, -1, v3")
    check_lanes(before6, w.v[6], act, [(min(i, 32) + int(w.v[3, i])) & M32 for i in range(64)], "mbcnt_lo base")


@pytest.mark.parametrize("exec_bits, first", [(M64, 0), (0xFFFF_0000_0000_0000, 48), (1 << 63, 63), (0, 0),
                                              (0x10, 4)])
def test_readfirstlane_reads_lowest_active_lane(exec_bits, first):
    w = make_wave(np.random.default_rng(23), exec_bits=exec_bits)
    execute(w, "v_readfirstlane_b32 s3, v2")
    assert int(w.s[3]) == int(w.v[2, first])


def test_readlane_ignores_exec_and_wraps_lane_number():
    w = make_wave(np.random.default_rng(24), exec_bits=0x1)
    for lane in (0, 5, 40, 63, 64, 70, 0xFFFFFFFF):
        w.s[9] = lane
        execute(w, "v_readlane_b32 s3, v2, s9")
        assert int(w.s[3]) == int(w.v[2, lane % 64])
    execute(w, "v_readlane_b32 s3, v2, 7")
    assert int(w.s[3]) == int(w.v[2, 7])
    w.s[124] = 45
    execute(w, "v_readlane_b32 s3, v2, m0")
    assert int(w.s[3]) == int(w.v[2, 45])


def test_lane_reads_batched_each_wave_at_its_own_lane():
    """v_readfirstlane_b32 and v_readlane_b32 over a batch of waves (consecutive
    rows and scattered ones), each wave with its own EXEC and lane number."""
    rng = np.random.default_rng(26)
    n = 9
    sfile = rng.integers(0, 2**32, (n, NUM_SGPRS + 1), dtype=np.uint64).astype(np.uint32)
    vfile = rng.integers(0, 2**32, (n, 8, 64), dtype=np.uint64).astype(np.uint32)
    execs = [M64, 0xFFFF_0000_0000_0000, 1 << 63, 0, 0x10, 1 << 31, 1 << 32, 6, M64]
    for k, e in enumerate(execs):
        sfile[k, 126], sfile[k, 127], sfile[k, 9] = e & M32, e >> 32, [0, 5, 40, 63, 64, 70, M32, 7, 1][k]
    group = make_test_wave().group
    waves = [Wave(group, 0, (sfile, vfile, k)) for k in range(n)]
    first = [(e & -e).bit_length() - 1 if e else 0 for e in execs]
    for text, lane in (("v_readfirstlane_b32 s3, v2", lambda k: first[k]),
                       ("v_readlane_b32 s3, v2, s9", lambda k: int(sfile[k, 9]) % 64)):
        core = decode_batched(parse_instruction(text))
        # Consecutive rows, uneven gaps (gathered), every other row (a view), one wave.
        for part in (waves[:3], [waves[3], waves[4], waves[6]], waves[5:8:2], waves[8:]):
            core(BatchView(sfile, vfile, part))
        assert [int(sfile[k, 3]) for k in range(n)] == [int(vfile[k, 2, lane(k)]) for k in range(n)], text


def test_writelane_writes_one_lane_even_if_inactive():
    w = make_wave(np.random.default_rng(25), exec_bits=0x1)
    before = w.v[1].copy()
    w.s[2], w.s[3] = 0xDEADBEEF, 64 + 40
    execute(w, "v_writelane_b32 v1, s2, s3")
    expect = before.copy()
    expect[40] = 0xDEADBEEF
    assert (w.v[1] == expect).all()
    execute(w, "v_writelane_b32 v1, 5, 3")
    assert int(w.v[1, 3]) == 5


# ---- refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "v_mov_b32_dpp v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf",
    "v_add_u32_e64 v1, v2, v3 clamp",
    "v_mad_u64_u32 v[58:59], s[0:1], v10, s12, v[6:7] clamp",
    "v_add_co_u32_sdwa v1, vcc, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD",
    "v_and_b32_e64 v1, -v2, v3",
    "v_add3_u32 v1, v2, v3",
    "v_readlane_b32 s1, s2, 3",
])
def test_unimplemented_forms_raise(text):
    with pytest.raises(SimError):
        execute(make_test_wave(), text)


# ---- coverage of the compiled kernels ------------------------------------------------

_NOT_INTEGER = re.compile(r"f16|f32|f64|bf16|fp8|bf8|mfma|permlane|_pk_")


def _integer_lines() -> set[str]:
    """Every distinct vector-integer instruction line of the compiled kernels."""
    lines = set()
    for path in compiled_kernels():
        for line in open(path):
            m = re.match(r"\s+(v_\w+)", line)
            if m and not _NOT_INTEGER.search(m.group(1)):
                lines.add(line.split("//")[0].strip())
    return lines


def test_every_vector_integer_mnemonic_in_the_kernels_has_a_handler():
    seen = {parse_instruction(line).base for line in _integer_lines()}
    assert seen, "no vector integer mnemonics found"
    missing = sorted(n for n in seen if n not in OPS)
    assert not missing, missing


def test_every_vector_integer_instruction_form_in_the_kernels_executes():
    """Each distinct vector-integer line of the compiled kernels passes its
    handler's operand/modifier validation and runs on random registers."""
    lines = _integer_lines()
    rng = np.random.default_rng(26)
    w = make_wave(rng)
    w.v[:] = rng.integers(0, 1 << 32, w.v.shape, dtype=np.uint64).astype(np.uint32)
    for text in sorted(lines):
        execute(w, text)


@pytest.mark.parametrize("same", [True, False])
def test_perm_batched_with_a_scalar_selector_per_wave(same):
    """v_perm_b32's core over waves whose SGPR selectors pick data bytes only:
    one selector for all (one gather of byte columns) or one per wave."""
    rng = np.random.default_rng(6)
    n = 5
    sfile = np.zeros((n, NUM_SGPRS + 1), np.uint32)
    vfile = rng.integers(0, 2**32, (n, 8, 64), dtype=np.uint64).astype(np.uint32)
    sels = rng.integers(0, 8, (n, 4)) if not same else np.repeat(rng.integers(0, 8, (1, 4)), n, axis=0)
    sfile[:, 4] = (sels << np.array([0, 8, 16, 24])).sum(axis=1)
    group = make_test_wave().group
    waves = [Wave(group, 0, (sfile, vfile, k)) for k in range(n)]
    decode_batched(parse_instruction("v_perm_b32 v1, v2, v3, s4"))(BatchView(sfile, vfile, waves))
    for k in range(n):
        assert [int(x) for x in vfile[k, 1]] == [perm(int(a), int(b), int(sfile[k, 4]))
                                                 for a, b in zip(vfile[k, 2], vfile[k, 3])]


def test_cores_made_once_per_form_serve_only_that_form():
    # The integer decoders' cores are cached by form (mnemonic, operands,
    # modifiers): an instruction of the same form at another place shares the
    # core and gets its Inline form too; one operand, constant or select apart
    # gets its own, which computes its own result.
    from nvfp4_suite.kernels.flydsl.sim.wave import inline_of

    first = parse_instruction("v_add_u32_e32 v1, v2, v3", 4)
    again = parse_instruction("v_add_u32_e32 v1, v2, v3 ; elsewhere", 40)
    assert decode_batched(first) is decode_batched(again) is not None
    assert inline_of(again) is inline_of(first) is not None and again.__dict__["_vint_ok"]
    texts = ["v_add_u32_e32 v1, v2, v3", "v_add_u32_e32 v1, v2, v4", "v_add_u32_e32 v5, v2, v3",
             "v_sub_u32_e32 v1, v2, v3", "v_add_u32_e32 v1, 1, v3", "v_add_u32_e32 v1, 2, v3",
             "v_add_u32_e32 v1, 1.0, v3", "v_add_u32_e64 v1, s2, v3", "v_add_u32_e64 v1, s3, v3",
             "v_add_u32_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_1 src1_sel:DWORD",
             "v_add_u32_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD",
             "v_add_u32_sdwa v1, sext(v2), v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD"]
    rng = np.random.default_rng(5)
    base = make_wave(rng, exec_bits=M32 | M32 << 32)
    results = []
    for text in texts:
        ins = parse_instruction(text)
        core = decode_batched(ins)
        w, ref = make_test_wave(), make_test_wave()
        for x in (w, ref):
            x.v[:], x.s[:] = base.v, base.s
        core(w)
        OPS[ins.base](ref, ins)  # the handler, the meaning stated once
        assert (w.v == ref.v).all(), text
        results.append(w.v[[1, 5]].tobytes())
    assert len(set(results)) == len(texts)
    # A form the decoder refuses is refused again, and its handler still validates it.
    bad = "v_add_u32_e32 v1, v2, v3 clamp"
    assert decode_batched(parse_instruction(bad)) is None is decode_batched(parse_instruction(bad))
    assert "_vint_ok" not in parse_instruction(bad).__dict__
    with pytest.raises(SimError, match="clamp"):
        execute(make_test_wave(), bad)
