"""The simulator's scalar family: SOP1/SOP2/SOPK/SOPC against Python-int
arithmetic (results and SCC), one wave at a time and as batches of waves in
a launch's register files (consecutive rows and scattered ones), SOPP
control flow, and SMEM loads (one wave, and a batch)."""

import itertools
import random

import numpy as np
import pytest
from sim_kernels import compiled_kernels

import nvfp4_suite.kernels.flydsl.sim.ops.scalar  # noqa: F401  (registers the family)
from nvfp4_suite.kernels.flydsl.sim.launch import execute, make_test_wave
from nvfp4_suite.kernels.flydsl.sim.memory import Memory
from nvfp4_suite.kernels.flydsl.sim.program import NUM_SGPRS, parse_instruction, parse_program
from nvfp4_suite.kernels.flydsl.sim.wave import (
    BATCHED,
    OPS,
    SCC,
    BatchView,
    MemoryFault,
    SimError,
    Wave,
    decode_batched,
    exec_free,
    handler_for,
)

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
RNG = random.Random(20240607)

EDGE32 = [0, 1, 2, 3, 31, 32, 33, 63, 64, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, 0xFFFFFFFF]
VALS32 = EDGE32 + [RNG.getrandbits(32) for _ in range(12)]
PAIRS32 = list(itertools.product(VALS32, VALS32))
EDGE64 = [0, 1, 0xFFFFFFFF, 0x100000000, 0x1FFFFFFFF, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000,
          0xFFFFFFFF00000000, M64, 0x00000000FFFFFFFE]
VALS64 = EDGE64 + [RNG.getrandbits(64) for _ in range(8)]
PAIRS64 = list(itertools.product(VALS64, VALS64))


def sx(x, bits=32):
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def fits_i32(x):
    return -2**31 <= x < 2**31


def wave():
    return make_test_wave()


def set64(w, i, x):
    w.s[i], w.s[i + 1] = x & M32, x >> 32


def get64(w, i):
    return int(w.s[i]) | int(w.s[i + 1]) << 32


# name -> (a, b, scc_in) -> (D, SCC or None when SCC is left alone)
REF32 = {
    "s_add_u32": lambda a, b, c: (a + b, int(a + b > M32)),
    "s_sub_u32": lambda a, b, c: (a - b, int(b > a)),
    "s_add_i32": lambda a, b, c: (a + b, int(not fits_i32(sx(a) + sx(b)))),
    "s_sub_i32": lambda a, b, c: (a - b, int(not fits_i32(sx(a) - sx(b)))),
    "s_addc_u32": lambda a, b, c: (a + b + c, int(a + b + c > M32)),
    "s_subb_u32": lambda a, b, c: (a - b - c, int(b + c > a)),
    "s_min_i32": lambda a, b, c: (min(sx(a), sx(b)), int(sx(a) < sx(b))),
    "s_max_i32": lambda a, b, c: (max(sx(a), sx(b)), int(sx(a) > sx(b))),
    "s_min_u32": lambda a, b, c: (min(a, b), int(a < b)),
    "s_max_u32": lambda a, b, c: (max(a, b), int(a > b)),
    "s_mul_i32": lambda a, b, c: (sx(a) * sx(b), None),
    "s_mul_hi_u32": lambda a, b, c: ((a * b) >> 32, None),
    "s_mul_hi_i32": lambda a, b, c: ((sx(a) * sx(b)) >> 32, None),
    "s_lshl_b32": lambda a, b, c: (a << (b % 32), int((a << (b % 32)) & M32 != 0)),
    "s_lshr_b32": lambda a, b, c: (a >> (b % 32), int(a >> (b % 32) != 0)),
    "s_ashr_i32": lambda a, b, c: (sx(a) >> (b % 32), int(sx(a) >> (b % 32) != 0)),
    "s_and_b32": lambda a, b, c: (a & b, int(a & b != 0)),
    "s_or_b32": lambda a, b, c: (a | b, int(a | b != 0)),
    "s_xor_b32": lambda a, b, c: (a ^ b, int(a ^ b != 0)),
    "s_andn2_b32": lambda a, b, c: (a & (M32 - b), int(a & (M32 - b) != 0)),
    "s_orn2_b32": lambda a, b, c: (a | (M32 - b), int(a | (M32 - b) != 0)),
    "s_lshl1_add_u32": lambda a, b, c: (2 * a + b, int(2 * a + b > M32)),
    "s_lshl2_add_u32": lambda a, b, c: (4 * a + b, int(4 * a + b > M32)),
    "s_lshl3_add_u32": lambda a, b, c: (8 * a + b, int(8 * a + b > M32)),
    "s_lshl4_add_u32": lambda a, b, c: (16 * a + b, int(16 * a + b > M32)),
    "s_cselect_b32": lambda a, b, c: (a if c else b, None),
    "s_absdiff_i32": lambda a, b, c: (abs(sx(a - b)), int(abs(sx(a - b)) & M32 != 0)),
    "s_pack_ll_b32_b16": lambda a, b, c: ((a & 0xFFFF) + ((b & 0xFFFF) << 16), None),
    "s_pack_lh_b32_b16": lambda a, b, c: ((a & 0xFFFF) + (b >> 16 << 16), None),
    "s_pack_hh_b32_b16": lambda a, b, c: ((a >> 16) + (b >> 16 << 16), None),
}


@pytest.mark.parametrize("name", sorted(REF32))
def test_sop2_32bit_against_python_ints(name):
    w = wave()
    for (a, b), scc_in in itertools.product(PAIRS32, (0, 1)):
        w.s[10], w.s[11], w.s[5] = a, b, 0x12345678
        w.scc = scc_in
        execute(w, f"{name} s5, s10, s11")
        d, scc = REF32[name](a, b, scc_in)
        assert int(w.s[5]) == d & M32, (name, hex(a), hex(b), scc_in)
        assert w.scc == (scc_in if scc is None else scc), (name, hex(a), hex(b), scc_in)


def run_batch(text, rows, memory=None):
    """Execute ``text`` through its batched core for waves whose scalar files are
    ``rows`` (uint32 ``[n, 129]``, SCC last; changed in place): the first half
    as one view of consecutive rows, the rest as a view of every other row and
    the rows left, gathered (their gaps uneven where there are more than two)."""
    ins = parse_instruction(text)
    core = decode_batched(ins)
    assert core is not None and exec_free(ins), text
    half = len(rows) // 2
    with np.errstate(all="ignore"):
        odd = range(half + 1, len(rows), 2)
        for part in (range(half), odd, sorted(set(range(half, len(rows))) - set(odd))):
            if part:
                assert core(batch_view(rows, part, memory)) is None
    return rows


def batch_view(rows, ks, memory=None):
    """A ``BatchView`` of the waves whose scalar files are rows ``ks`` of ``rows``."""
    group = make_test_wave(memory=memory).group
    vfile = np.zeros((len(rows), 1, 1), np.uint32)
    return BatchView(rows, vfile, [Wave(group, 0, (rows, vfile, k)) for k in ks])


def scalar_rows(n, seed=0):
    """uint32 ``[n, 129]``: random SGPRs, SCC 0."""
    rows = np.random.default_rng(seed).integers(0, 2**32, (n, NUM_SGPRS + 1), dtype=np.uint64).astype(np.uint32)
    rows[:, SCC] = 0
    return rows


def test_the_scalar_alu_has_a_batched_core_for_any_exec():
    """Every registered scalar ALU, compare, SOPK and SMEM load mnemonic runs
    batched whatever EXEC holds: only branches, s_endpgm and s_barrier do not."""
    scalar = {n for n in OPS if n.startswith("s_")}
    assert scalar - set(BATCHED) == {"s_branch", "s_endpgm", "s_barrier"} | {
        n for n in scalar if n.startswith("s_cbranch")}


@pytest.mark.parametrize("name", sorted(REF32))
def test_sop2_32bit_batched_against_python_ints(name):
    cases = [(a, b, c) for (a, b), c in itertools.product(PAIRS32, (0, 1))]
    rows = scalar_rows(len(cases))
    rows[:, 10], rows[:, 11], rows[:, SCC] = np.array(cases, np.uint64).T.astype(np.uint32)
    run_batch(f"{name} s5, s10, s11", rows)
    for (a, b, c), row in zip(cases, rows):
        d, scc = REF32[name](a, b, c)
        assert int(row[5]) == d & M32 and int(row[SCC]) == (c if scc is None else scc), (name, hex(a), hex(b), c)


def test_add_sub_carry_chain_is_64_bit_arithmetic():
    w = wave()
    for x, y in PAIRS64:
        set64(w, 0, x)
        set64(w, 2, y)
        execute(w, "s_add_u32 s4, s0, s2")
        execute(w, "s_addc_u32 s5, s1, s3")
        assert get64(w, 4) == (x + y) & M64 and w.scc == int(x + y > M64)
        execute(w, "s_sub_u32 s4, s0, s2")
        execute(w, "s_subb_u32 s5, s1, s3")
        assert get64(w, 4) == (x - y) & M64 and w.scc == int(y > x)


REF64 = {
    "s_and_b64": lambda a, b, c: (a & b, True),
    "s_or_b64": lambda a, b, c: (a | b, True),
    "s_xor_b64": lambda a, b, c: (a ^ b, True),
    "s_andn2_b64": lambda a, b, c: (a & (M64 - b), True),
    "s_orn2_b64": lambda a, b, c: (a | (M64 - b), True),
    "s_nand_b64": lambda a, b, c: (M64 - (a & b), True),
    "s_nor_b64": lambda a, b, c: (M64 - (a | b), True),
    "s_xnor_b64": lambda a, b, c: (M64 - (a ^ b), True),
    "s_cselect_b64": lambda a, b, c: (a if c else b, False),
}


@pytest.mark.parametrize("name", sorted(REF64))
def test_sop2_64bit_on_sgpr_pairs(name):
    w = wave()
    for (a, b), scc_in in itertools.product(PAIRS64, (0, 1)):
        set64(w, 10, a)
        set64(w, 12, b)
        w.scc = scc_in
        execute(w, f"{name} s[20:21], s[10:11], s[12:13]")
        d, sets_scc = REF64[name](a, b, scc_in)
        assert get64(w, 20) == d & M64
        assert w.scc == (int(d & M64 != 0) if sets_scc else scc_in)


@pytest.mark.parametrize("name", sorted(REF64))
def test_sop2_64bit_batched_against_python_ints(name):
    cases = [(a, b, c) for (a, b), c in itertools.product(PAIRS64, (0, 1))]
    rows = scalar_rows(len(cases), 1)
    for k, (a, b, c) in enumerate(cases):
        rows[k, 10], rows[k, 11], rows[k, 12], rows[k, 13], rows[k, SCC] = a & M32, a >> 32, b & M32, b >> 32, c
    run_batch(f"{name} s[20:21], s[10:11], s[12:13]", rows)
    for (a, b, c), row in zip(cases, rows):
        d, sets_scc = REF64[name](a, b, c)
        assert int(row[20]) | int(row[21]) << 32 == d & M64
        assert int(row[SCC]) == (int(d & M64 != 0) if sets_scc else c)


@pytest.mark.parametrize("name,ref", [
    ("s_lshl_b64", lambda a, n: a << n), ("s_lshr_b64", lambda a, n: a >> n),
    ("s_ashr_i64", lambda a, n: sx(a, 64) >> n)])
def test_64bit_shifts_take_a_32bit_amount_modulo_64(name, ref):
    w = wave()
    for a, n in itertools.product(VALS64, [0, 1, 2, 8, 31, 32, 33, 63, 64, 65, 0xFFFFFFFF]):
        set64(w, 10, a)
        w.s[12], w.s[13] = n, 0xDEADBEEF  # s13 is not part of the amount
        execute(w, f"{name} s[20:21], s[10:11], s12")
        d = ref(a, n % 64) & M64
        assert get64(w, 20) == d and w.scc == int(d != 0)
    set64(w, 10, 0x1_0000_0001)
    execute(w, f"{name} s[20:21], s[10:11], 2")
    assert get64(w, 20) == ref(0x1_0000_0001, 2) & M64


def test_inline_constants_sign_extend_for_64bit_operands_and_literals_are_as_printed():
    w = wave()
    execute(w, "s_mov_b64 s[0:1], -1")
    assert get64(w, 0) == M64
    execute(w, "s_mov_b64 s[0:1], -16")
    assert get64(w, 0) == (-16) & M64
    execute(w, "s_mov_b64 s[0:1], 64")
    assert get64(w, 0) == 64
    execute(w, "s_mov_b64 s[0:1], 0x88")        # a literal
    assert get64(w, 0) == 0x88
    execute(w, "s_mov_b64 s[0:1], 0xffffffff")  # a literal LLVM prints zero-extended
    assert get64(w, 0) == 0xFFFFFFFF
    execute(w, "s_mov_b64 s[0:1], 1.0")         # inline float: the double's pattern
    assert get64(w, 0) == 0x3FF0000000000000
    set64(w, 2, 0x123456789ABCDEF7)
    execute(w, "s_and_b64 s[4:5], s[2:3], -16")
    assert get64(w, 4) == 0x123456789ABCDEF0
    execute(w, "s_mov_b32 s6, -1")
    execute(w, "s_mov_b32 s7, 0.5")
    execute(w, "s_mov_b32 s8, 0x4f7ffffe")
    assert [int(x) for x in w.s[6:9]] == [M32, 0x3F000000, 0x4F7FFFFE]
    w.scc = 1
    execute(w, "s_cselect_b64 s[20:21], -1, 0")
    assert get64(w, 20) == M64
    w.scc = 0
    execute(w, "s_cselect_b64 s[20:21], -1, 0")
    assert get64(w, 20) == 0


def test_special_registers_as_operands():
    w = wave()
    set64(w, 126, 0xF0F0F0F0_0F0F0F0F)
    set64(w, 0, 0xFFFF0000_FFFF0000)
    execute(w, "s_and_b64 vcc, exec, s[0:1]")
    assert get64(w, 106) == 0xF0F00000_0F0F0000 and w.scc == 1
    execute(w, "s_mov_b64 s[14:15], exec")
    assert get64(w, 14) == 0xF0F0F0F0_0F0F0F0F
    execute(w, "s_or_b64 exec, exec, s[0:1]")
    assert get64(w, 126) == 0xFFFFF0F0_FFFF0F0F
    assert w.exec_mask.sum() == bin(0xFFFFF0F0_FFFF0F0F).count("1")
    execute(w, "s_mov_b32 m0, 0x1234")
    assert int(w.s[124]) == 0x1234


def ff1(x):
    return (x & -x).bit_length() - 1 if x else -1


REF_SOP1 = {  # name -> (dst width, src width, fn, sets SCC = D != 0)
    "s_mov_b32": (32, 32, lambda a: a, False),
    "s_mov_b64": (64, 64, lambda a: a, False),
    "s_not_b32": (32, 32, lambda a: M32 - a, True),
    "s_not_b64": (64, 64, lambda a: M64 - a, True),
    "s_abs_i32": (32, 32, lambda a: abs(sx(a)), True),
    "s_brev_b32": (32, 32, lambda a: int(f"{a:032b}"[::-1], 2), False),
    "s_brev_b64": (64, 64, lambda a: int(f"{a:064b}"[::-1], 2), False),
    "s_bcnt1_i32_b32": (32, 32, lambda a: bin(a).count("1"), True),
    "s_bcnt1_i32_b64": (32, 64, lambda a: bin(a).count("1"), True),
    "s_bcnt0_i32_b64": (32, 64, lambda a: 64 - bin(a).count("1"), True),
    "s_ff1_i32_b32": (32, 32, ff1, False),
    "s_ff1_i32_b64": (32, 64, ff1, False),
    "s_ff0_i32_b64": (32, 64, lambda a: ff1(M64 - a), False),
    "s_flbit_i32_b32": (32, 32, lambda a: 32 - a.bit_length() if a else -1, False),
    "s_flbit_i32_b64": (32, 64, lambda a: 64 - a.bit_length() if a else -1, False),
    "s_sext_i32_i8": (32, 32, lambda a: sx(a, 8), False),
    "s_sext_i32_i16": (32, 32, lambda a: sx(a, 16), False),
}


@pytest.mark.parametrize("name", sorted(REF_SOP1))
def test_sop1_against_python_ints(name):
    wd, ws, fn, sets = REF_SOP1[name]
    w = wave()
    vals = VALS32 if ws == 32 else VALS64
    for a, scc_in in itertools.product(vals, (0, 1)):
        set64(w, 10, a) if ws == 64 else w.s.__setitem__(10, a)
        w.scc = scc_in
        dst = "s[20:21]" if wd == 64 else "s20"
        execute(w, f"{name} {dst}, s[10:11]" if ws == 64 else f"{name} {dst}, s10")
        d = fn(a) & ((1 << wd) - 1)
        assert (get64(w, 20) if wd == 64 else int(w.s[20])) == d, (name, hex(a))
        assert w.scc == (int(d != 0) if sets else scc_in)


@pytest.mark.parametrize("name", sorted(REF_SOP1))
def test_sop1_batched_against_python_ints(name):
    wd, ws, fn, sets = REF_SOP1[name]
    cases = [(a, c) for a, c in itertools.product(VALS32 if ws == 32 else VALS64, (0, 1))]
    rows = scalar_rows(len(cases), 2)
    for k, (a, c) in enumerate(cases):
        rows[k, 10], rows[k, 11], rows[k, SCC] = a & M32, a >> 32, c
    dst = "s[20:21]" if wd == 64 else "s20"
    run_batch(f"{name} {dst}, s[10:11]" if ws == 64 else f"{name} {dst}, s10", rows)
    for (a, c), row in zip(cases, rows):
        d = fn(a) & ((1 << wd) - 1)
        assert (int(row[20]) | (int(row[21]) << 32 if wd == 64 else 0)) == d, (name, hex(a))
        assert int(row[SCC]) == (int(d != 0) if sets else c)


def test_edge_cases_of_sop1():
    w = wave()
    set64(w, 0, 0)
    execute(w, "s_ff1_i32_b64 s2, s[0:1]")
    assert int(w.s[2]) == 0xFFFFFFFF
    set64(w, 0, 1 << 63)
    execute(w, "s_ff1_i32_b64 s2, s[0:1]")
    assert int(w.s[2]) == 63
    w.s[3] = 0x80000000
    execute(w, "s_abs_i32 s4, s3")
    assert int(w.s[4]) == 0x80000000 and w.scc == 1
    w.s[3] = 0
    execute(w, "s_abs_i32 s4, s3")
    assert int(w.s[4]) == 0 and w.scc == 0
    execute(w, "s_brev_b32 s59, 1")
    assert int(w.s[59]) == 0x80000000
    set64(w, 0, 0)
    execute(w, "s_bcnt1_i32_b64 s4, s[0:1]")
    assert int(w.s[4]) == 0 and w.scc == 0
    execute(w, "s_bcnt1_i32_b64 s4, exec")
    assert int(w.s[4]) == 64 and w.scc == 1


def test_cmov():
    w = wave()
    w.s[1], w.s[2] = 7, 9
    w.scc = 0
    execute(w, "s_cmov_b32 s1, s2")
    assert int(w.s[1]) == 7
    w.scc = 1
    execute(w, "s_cmov_b32 s1, s2")
    assert int(w.s[1]) == 9 and w.scc == 1


RELS = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


@pytest.mark.parametrize("rel", sorted(RELS))
@pytest.mark.parametrize("ty", ["i32", "u32"])
def test_s_cmp_32(rel, ty):
    w = wave()
    conv = sx if ty == "i32" else (lambda x: x)
    for a, b in PAIRS32:
        w.s[3], w.s[4] = a, b
        execute(w, f"s_cmp_{rel}_{ty} s3, s4")
        assert w.scc == int(RELS[rel](conv(a), conv(b))), (rel, ty, hex(a), hex(b))
    w.s[3] = M32
    execute(w, f"s_cmp_{rel}_{ty} s3, -1")
    assert w.scc == int(RELS[rel](0, 0))


@pytest.mark.parametrize("rel", sorted(RELS))
@pytest.mark.parametrize("ty", ["i32", "u32"])
def test_s_cmp_32_batched(rel, ty):
    conv = sx if ty == "i32" else (lambda x: x)
    rows = scalar_rows(len(PAIRS32), 3)
    rows[:, 3], rows[:, 4] = np.array(PAIRS32, np.uint64).T.astype(np.uint32)
    run_batch(f"s_cmp_{rel}_{ty} s3, s4", rows)
    for (a, b), row in zip(PAIRS32, rows):
        assert int(row[SCC]) == int(RELS[rel](conv(a), conv(b))), (rel, ty, hex(a), hex(b))


@pytest.mark.parametrize("rel", ["eq", "lg"])
def test_s_cmp_u64(rel):
    w = wave()
    for a, b in PAIRS64:
        set64(w, 40, a)
        set64(w, 42, b)
        execute(w, f"s_cmp_{rel}_u64 s[40:41], s[42:43]")
        assert w.scc == int(RELS[rel](a, b))
    for a in VALS64:
        set64(w, 40, a)
        execute(w, f"s_cmp_{rel}_u64 s[40:41], 0")
        assert w.scc == int(RELS[rel](a, 0))
        execute(w, f"s_cmp_{rel}_u64 s[40:41], -1")
        assert w.scc == int(RELS[rel](a, M64))


def test_bitcmp_bfe_bfm():
    w = wave()
    for a, n in itertools.product(VALS32, range(0, 40, 3)):
        w.s[1], w.s[2] = a, n
        execute(w, "s_bitcmp1_b32 s1, s2")
        assert w.scc == (a >> (n % 32)) & 1
        execute(w, "s_bitcmp0_b32 s1, s2")
        assert w.scc == 1 - ((a >> (n % 32)) & 1)
    for a, off, width in itertools.product(VALS32, [0, 1, 7, 16, 31], [0, 1, 5, 16, 31]):
        w.s[1], w.s[2] = a, off | width << 16
        field = (a >> off) & ((1 << width) - 1)
        execute(w, "s_bfe_u32 s3, s1, s2")
        assert int(w.s[3]) == field and w.scc == int(field != 0)
        execute(w, "s_bfe_i32 s3, s1, s2")
        sfield = (sx(a) >> off) & ((1 << width) - 1)
        expect = (sx(sfield, width) if width else 0) & M32
        assert int(w.s[3]) == expect and w.scc == int(expect != 0), (hex(a), off, width)
    w.s[2] = 32 << 16
    with pytest.raises(SimError, match="width 32"):
        execute(w, "s_bfe_u32 s3, s1, s2")
    execute(w, "s_bfm_b32 s4, 5, 3")
    assert int(w.s[4]) == 0b11111000
    execute(w, "s_bfm_b64 s[4:5], 40, 8")
    assert get64(w, 4) == ((1 << 40) - 1) << 8


SAVEEXEC = {"and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e,
            "andn2": lambda s, e: s & (M64 - e), "orn2": lambda s, e: s | (M64 - e),
            "andn1": lambda s, e: (M64 - s) & e}


@pytest.mark.parametrize("kind", sorted(SAVEEXEC))
def test_saveexec(kind):
    w = wave()
    for exec_, src in itertools.product(VALS64, VALS64):
        set64(w, 126, exec_)
        set64(w, 2, src)
        execute(w, f"s_{kind}_saveexec_b64 s[4:5], s[2:3]")
        new = SAVEEXEC[kind](src, exec_)
        assert get64(w, 4) == exec_          # sdst = old exec
        assert get64(w, 126) == new          # exec = f(src, exec)
        assert w.scc == int(new != 0)
        assert w.exec_mask.sum() == bin(new).count("1")


def test_and_saveexec_with_vcc_and_aliased_operands():
    w = wave()
    set64(w, 126, 0xFFFF)
    set64(w, 106, 0xFF00FF)
    execute(w, "s_and_saveexec_b64 s[12:13], vcc")
    assert get64(w, 12) == 0xFFFF and get64(w, 126) == 0xFF and w.scc == 1
    set64(w, 2, 0xF0)
    execute(w, "s_and_saveexec_b64 s[2:3], s[2:3]")  # S0 read before D is written
    assert get64(w, 2) == 0xFF and get64(w, 126) == 0xF0
    set64(w, 2, 0)
    execute(w, "s_and_saveexec_b64 s[4:5], s[2:3]")
    assert get64(w, 126) == 0 and w.scc == 0 and not w.exec_mask.any()


def test_sopk():
    w = wave()
    execute(w, "s_movk_i32 s1, 0x88")
    assert int(w.s[1]) == 0x88
    execute(w, "s_movk_i32 s1, 0x7fff")
    assert int(w.s[1]) == 0x7FFF
    execute(w, "s_movk_i32 s1, 0xe000")  # SIMM16 sign-extends
    assert int(w.s[1]) == 0xFFFFE000
    execute(w, "s_movk_i32 s1, -8192")
    assert int(w.s[1]) == 0xFFFFE000
    for a, k in itertools.product(VALS32, [0, 1, 0x7FFF, 0x8000, 0xE000, 0xFFFF]):
        w.s[2] = a
        execute(w, f"s_addk_i32 s2, {k:#x}")
        assert int(w.s[2]) == (a + sx(k, 16)) & M32
        assert w.scc == int(not fits_i32(sx(a) + sx(k, 16))), (hex(a), hex(k))
        w.s[2] = a
        w.scc = 1
        execute(w, f"s_mulk_i32 s2, {k:#x}")
        assert int(w.s[2]) == (a * sx(k, 16)) & M32 and w.scc == 1
        for rel, f in RELS.items():
            w.s[2] = a
            execute(w, f"s_cmpk_{rel}_i32 s2, {k:#x}")
            assert w.scc == int(f(sx(a), sx(k, 16)))
            execute(w, f"s_cmpk_{rel}_u32 s2, {k:#x}")
            assert w.scc == int(f(a, k))


BRANCHES = {  # mnemonic -> (setup that makes it taken, setup that makes it not taken)
    "s_branch": (lambda w: None, None),
    "s_cbranch_scc0": (lambda w: setattr(w, "scc", 0), lambda w: setattr(w, "scc", 1)),
    "s_cbranch_scc1": (lambda w: setattr(w, "scc", 1), lambda w: setattr(w, "scc", 0)),
    "s_cbranch_vccz": (lambda w: set64(w, 106, 0), lambda w: set64(w, 106, 1 << 40)),
    "s_cbranch_vccnz": (lambda w: set64(w, 106, 1 << 40), lambda w: set64(w, 106, 0)),
    "s_cbranch_execz": (lambda w: set64(w, 126, 0), lambda w: set64(w, 126, 1 << 63)),
    "s_cbranch_execnz": (lambda w: set64(w, 126, 1), lambda w: set64(w, 126, 0)),
}


@pytest.mark.parametrize("name", sorted(BRANCHES))
def test_branches_taken_and_not_taken(name):
    taken, not_taken = BRANCHES[name]
    w = wave()
    w.pc = 3
    taken(w)
    execute(w, f"{name} .L1", labels={".L1": 7})
    assert w.pc == 7 and w.state == "run"
    if not_taken is not None:
        w.pc = 3
        not_taken(w)
        execute(w, f"{name} .L1", labels={".L1": 7})
        assert w.pc == 4


def test_endpgm_barrier_and_no_ops():
    w = wave()
    w.s[5], w.scc = 77, 1
    before = (w.s.copy(), w.v.copy())
    for text in ("s_waitcnt vmcnt(0) lgkmcnt(0)", "s_waitcnt lgkmcnt(1)", "s_nop 5", "s_setprio 3", "s_sleep 1"):
        execute(w, text)
    assert (w.s == before[0]).all() and (w.v == before[1]).all() and w.scc == 1 and w.state == "run"
    assert w.pc == 5
    execute(w, "s_barrier")
    assert w.state == "barrier" and w.pc == 6
    w.state = "run"
    execute(w, "s_endpgm")
    assert w.state == "end"


def memory_with_words(n=64):
    mem = Memory()
    words = (np.arange(n, dtype=np.uint32) * 0x01010101) ^ np.uint32(0xA5A5A5A5)
    base = mem.alloc("buf", words)
    return mem, words, base


@pytest.mark.parametrize("count,suffix", [(1, ""), (2, "x2"), (4, "x4"), (8, "x8"), (16, "x16")])
def test_s_load_reads_memory(count, suffix):
    mem, words, base = memory_with_words()
    w = make_test_wave(memory=mem)
    set64(w, 0, base)
    dst = "s4" if count == 1 else f"s[4:{3 + count}]"
    execute(w, f"s_load_dword{suffix} {dst}, s[0:1], 0x8")
    assert list(w.s[4:4 + count]) == list(words[2:2 + count])
    w.s[30] = 0x20  # SGPR soffset
    execute(w, f"s_load_dword{suffix} {dst}, s[0:1], s30")
    assert list(w.s[4:4 + count]) == list(words[8:8 + count])
    set64(w, 0, base + 4 * (64 - count))  # the last dwords of the buffer
    execute(w, f"s_load_dword{suffix} {dst}, s[0:1], 0x0")
    assert list(w.s[4:4 + count]) == list(words[64 - count:])


def test_s_load_batched_reads_each_waves_address():
    """A batch of waves, each with its own base and SGPR offset, reads at once;
    where one wave's address is outside every allocation the core leaves the
    instruction to each wave's handler (which names the fault)."""
    mem, words, base = memory_with_words()
    rows = scalar_rows(10, 4)
    for k in range(10):
        rows[k, 0], rows[k, 1], rows[k, 30] = (base + 4 * k) & M32, (base + 4 * k) >> 32, 4 * (k % 3)
    run_batch("s_load_dwordx4 s[4:7], s[0:1], s30 offset:0x8", rows, mem)
    for k, row in enumerate(rows):
        first = k + k % 3 + 2
        assert list(row[4:8]) == list(words[first:first + 4])
    rows[7, 0] = (base + 4 * 62) & M32
    core = decode_batched(parse_instruction("s_load_dwordx4 s[4:7], s[0:1], 0x0"))
    assert core(batch_view(rows, range(10), mem)) is False


def test_s_load_faults_outside_the_allocation():
    mem, words, base = memory_with_words()
    w = make_test_wave(memory=mem)
    set64(w, 0, base)
    with pytest.raises(MemoryFault, match="past the end of buffer 'buf'"):
        execute(w, "s_load_dwordx4 s[4:7], s[0:1], 0xf8")  # straddles the end
    with pytest.raises(MemoryFault, match="s_load_dwordx16"):
        execute(w, "s_load_dwordx16 s[4:19], s[0:1], 0x100")
    set64(w, 0, base - 16)
    with pytest.raises(MemoryFault, match="before buffer 'buf'"):
        execute(w, "s_load_dword s4, s[0:1], 0x0")
    set64(w, 0, 0)
    with pytest.raises(MemoryFault):
        execute(w, "s_load_dwordx2 s[2:3], s[0:1], 0x78")


def test_s_load_ignores_the_two_low_address_bits():
    mem, words, base = memory_with_words()
    w = make_test_wave(memory=mem)
    set64(w, 0, base + 3)
    execute(w, "s_load_dword s4, s[0:1], 0x4")
    assert int(w.s[4]) == int(words[1])


def test_s_load_destination_must_match_the_width():
    mem, _, base = memory_with_words()
    w = make_test_wave(memory=mem)
    set64(w, 0, base)
    with pytest.raises(SimError):
        execute(w, "s_load_dwordx4 s[4:5], s[0:1], 0x0")


# ---- the compiled kernels ---------------------------------------------------

SCALAR_PREFIXES = ("s_",)


def _programs():
    return [parse_program(open(p).read()) for p in compiled_kernels()]


def test_every_scalar_mnemonic_of_the_compiled_kernels_has_a_handler():
    missing = set()
    for prog in _programs():
        for ins in prog.instrs:
            if ins.mnemonic.startswith(SCALAR_PREFIXES) and (OPS.get(ins.base) or OPS.get(ins.mnemonic)) is None:
                missing.add(ins.mnemonic)
    assert not missing, sorted(missing)


def test_every_scalar_instruction_of_the_compiled_kernels_executes():
    """Each distinct scalar instruction text runs on a wave of random SGPRs (SMEM
    bases pointed at a buffer) without an error, and writes only its destination."""
    seen = {}
    for prog in _programs():
        for ins in prog.instrs:
            if ins.mnemonic.startswith(SCALAR_PREFIXES):
                seen.setdefault(ins.text.split("//")[0].strip(), ins)
    rng = np.random.default_rng(1)
    mem = Memory()
    base = mem.alloc("kernarg", np.zeros(4096, np.uint8))
    for text, ins in sorted(seen.items()):
        w = make_test_wave(memory=mem)
        w.s[:] = rng.integers(0, 2**32, w.s.size, dtype=np.uint64).astype(np.uint32)
        if ins.base.startswith("s_load"):
            set64(w, ins.ops[1].index, base)
        w.pc = ins.index + 1
        before = w.s.copy()
        handler_for(ins)(w, ins)
        changed = set(np.nonzero(w.s != before)[0])
        d = ins.ops[0] if ins.ops and ins.ops[0].kind == "s" else None
        allowed = set(range(d.index, d.index + d.count)) if d is not None else set()
        if "saveexec" in ins.base:
            allowed |= {126, 127}
        if ins.base.startswith(("s_cmp", "s_cbranch", "s_branch")):
            allowed = set()
        assert changed <= allowed, (text, sorted(changed))
        if ins.target is not None and ins.base == "s_branch":
            assert w.pc == ins.target


def test_execute_parses_like_the_program():
    ins = parse_instruction("\ts_load_dwordx8 s[4:11], s[0:1], 0x8")
    assert handler_for(ins) is OPS["s_load_dwordx8"]
