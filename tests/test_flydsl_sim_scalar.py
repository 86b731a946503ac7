"""kernels.flydsl.sim.ops.scalar: scalar ALU, SCC, branches and s_load against
Python-integer models of the ISA's definitions."""

import numpy as np
import pytest

from kernels.flydsl.sim.launch import execute, make_test_wave
from kernels.flydsl.sim.memory import Memory
from kernels.flydsl.sim.wave import MemoryFault

M32 = 0xFFFFFFFF
EDGES = [0, 1, 2, 31, 32, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, 0xFFFFFFFF, 0x12345678]
rng = np.random.default_rng(11)
PAIRS = [(a, b) for a in EDGES for b in EDGES] + [tuple(int(x) for x in rng.integers(0, 2**32, 2)) for _ in range(200)]


def s32(x):
    x &= M32
    return x - 2**32 if x >> 31 else x


def run2(text, a, b, scc=0):
    w = make_test_wave()
    w.s[2], w.s[3], w.scc = a, b, scc
    execute(w, text)
    return int(w.s[1]), w.scc


MODELS = {
    "s_add_u32": (lambda a, b: a + b, lambda a, b: int(a + b > M32)),
    "s_sub_u32": (lambda a, b: a - b, lambda a, b: int(b > a)),
    "s_add_i32": (lambda a, b: a + b, lambda a, b: int(not -2**31 <= s32(a) + s32(b) < 2**31)),
    "s_sub_i32": (lambda a, b: a - b, lambda a, b: int(not -2**31 <= s32(a) - s32(b) < 2**31)),
    "s_and_b32": (lambda a, b: a & b, lambda a, b: int(a & b != 0)),
    "s_xor_b32": (lambda a, b: a ^ b, lambda a, b: int(a ^ b != 0)),
    "s_lshl_b32": (lambda a, b: a << (b % 32), lambda a, b: int((a << (b % 32)) & M32 != 0)),
    "s_lshr_b32": (lambda a, b: a >> (b % 32), lambda a, b: int(a >> (b % 32) != 0)),
    "s_ashr_i32": (lambda a, b: s32(a) >> (b % 32), lambda a, b: int(s32(a) >> (b % 32) != 0)),
    "s_mul_i32": (lambda a, b: s32(a) * s32(b), None),
    "s_mul_hi_u32": (lambda a, b: (a * b) >> 32, None),
    "s_mul_hi_i32": (lambda a, b: (s32(a) * s32(b)) >> 32, None),
    "s_max_i32": (lambda a, b: max(s32(a), s32(b)), lambda a, b: int(s32(a) > s32(b))),
    "s_lshl4_add_u32": (lambda a, b: (a << 4) + b, lambda a, b: int((a << 4) + b > M32)),
    "s_lshl3_add_u32": (lambda a, b: (a << 3) + b, lambda a, b: int((a << 3) + b > M32)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_scalar_binary_op_matches_integer_model(name):
    value, scc = MODELS[name]
    for a, b in PAIRS:
        got, got_scc = run2(f"{name} s1, s2, s3", a, b, scc=1)
        assert got == value(a, b) & M32, (name, hex(a), hex(b))
        assert got_scc == (1 if scc is None else scc(a, b)), (name, hex(a), hex(b))


def test_addc_subb_chain_carries_through_scc():
    for a, b in PAIRS[:60]:
        for c in (0, 1):
            got, scc = run2("s_addc_u32 s1, s2, s3", a, b, scc=c)
            assert (got, scc) == ((a + b + c) & M32, int(a + b + c > M32))
            got, scc = run2("s_subb_u32 s1, s2, s3", a, b, scc=c)
            assert (got, scc) == ((a - b - c) & M32, int(a - b - c < 0))


def test_64_bit_ops_use_pairs_and_sign_extend_inline_constants():
    w = make_test_wave()
    w.s[4], w.s[5] = 0x80000001, 0x1
    execute(w, "s_lshl_b64 s[6:7], s[4:5], 2")
    assert (int(w.s[6]), int(w.s[7])) == (0x4, 0x6)
    execute(w, "s_mov_b64 s[8:9], -1")
    assert (int(w.s[8]), int(w.s[9])) == (M32, M32)
    execute(w, "s_cmp_lg_u64 s[4:5], 0")
    assert w.scc == 1
    execute(w, "s_and_b64 s[10:11], s[4:5], 0")
    assert w.scc == 0 and int(w.s[10]) == 0


def test_cselect_picks_by_scc_and_leaves_scc():
    w = make_test_wave()
    w.s[2], w.s[3], w.scc = 7, 9, 1
    execute(w, "s_cselect_b32 s1, s2, s3")
    assert int(w.s[1]) == 7 and w.scc == 1
    w.scc = 0
    execute(w, "s_cselect_b64 s[4:5], -1, 0")
    assert (int(w.s[4]), int(w.s[5])) == (0, 0)


def test_and_saveexec_returns_old_exec_and_masks_exec():
    w = make_test_wave()
    w.s[126], w.s[127] = 0xF0F0F0F0, 0x1
    w.s[4], w.s[5] = 0xFF00FF00, 0xFFFFFFFF
    execute(w, "s_and_saveexec_b64 s[2:3], s[4:5]")
    assert (int(w.s[2]), int(w.s[3])) == (0xF0F0F0F0, 0x1)
    assert w.exec_bits == (0xF000F000 | 1 << 32) and w.scc == 1
    assert w.exec_mask.sum() == 9


def test_bit_counts_find_first_and_reverse():
    w = make_test_wave()
    for x in [0, 1, 0x80000000, 0x00F00000_00000000, 0xFFFFFFFF_FFFFFFFF, 0x1234_5678_9ABC_DEF0]:
        w.s[4], w.s[5] = x & M32, x >> 32
        execute(w, "s_ff1_i32_b64 s1, s[4:5]")
        assert int(w.s[1]) == ((x & -x).bit_length() - 1 if x else -1) & M32
        execute(w, "s_bcnt1_i32_b64 s2, s[4:5]")
        assert int(w.s[2]) == bin(x).count("1") and w.scc == int(x != 0)
        execute(w, "s_brev_b32 s3, s4")
        assert int(w.s[3]) == int(f"{x & M32:032b}"[::-1], 2)


def test_movk_addk_sign_extend_16_bit_immediates():
    w = make_test_wave()
    execute(w, "s_movk_i32 s1, 0x8000")
    assert int(w.s[1]) == 0xFFFF8000
    w.s[2] = 5
    execute(w, "s_addk_i32 s2, 0xfffe")
    assert int(w.s[2]) == 3


def test_abs_and_compares():
    w = make_test_wave()
    w.s[1] = 0x80000000
    execute(w, "s_abs_i32 s2, s1")
    assert int(w.s[2]) == 0x80000000 and w.scc == 1
    w.s[3], w.s[4] = 0xFFFFFFFF, 1
    execute(w, "s_cmp_lt_i32 s3, s4")
    assert w.scc == 1
    execute(w, "s_cmp_ge_u32 s3, s4")
    assert w.scc == 1
    execute(w, "s_cmp_gt_i32 s3, 0")
    assert w.scc == 0


def test_branches_jump_only_when_their_condition_holds():
    labels = {".L1": 7}
    cases = [("s_branch .L1", {}, True),
             ("s_cbranch_scc1 .L1", {"scc": 1}, True), ("s_cbranch_scc1 .L1", {"scc": 0}, False),
             ("s_cbranch_scc0 .L1", {"scc": 0}, True), ("s_cbranch_vccnz .L1", {"vcc": 0}, False),
             ("s_cbranch_vccnz .L1", {"vcc": 1 << 40}, True), ("s_cbranch_execz .L1", {"exec": 0}, True),
             ("s_cbranch_execz .L1", {"exec": 1 << 63}, False)]
    for text, state, taken in cases:
        w = make_test_wave()
        w.pc = 3
        w.scc = state.get("scc", 0)
        vcc = state.get("vcc", 0)
        w.s[106], w.s[107] = vcc & M32, vcc >> 32
        if "exec" in state:
            w.s[126], w.s[127] = state["exec"] & M32, state["exec"] >> 32
        execute(w, text, labels)
        assert w.pc == (7 if taken else 4), text


def test_endpgm_and_barrier_change_wave_state():
    w = make_test_wave()
    execute(w, "s_barrier")
    assert w.state == "barrier"
    execute(w, "s_endpgm")
    assert w.state == "end"


def test_s_load_reads_allocated_memory_and_faults_outside_it():
    mem = Memory()
    data = np.arange(64, dtype=np.uint32)
    base = mem.alloc("args", data)
    w = make_test_wave(memory=mem)
    w.s[0], w.s[1] = base & M32, base >> 32
    execute(w, "s_load_dwordx8 s[4:11], s[0:1], 0x8")
    assert list(w.s[4:12]) == list(range(2, 10))
    execute(w, "s_load_dword s12, s[0:1], 0xfc")
    assert int(w.s[12]) == 63
    with pytest.raises(MemoryFault, match="past the end of buffer 'args'"):
        execute(w, "s_load_dwordx2 s[12:13], s[0:1], 0xfc")
