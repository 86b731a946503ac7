"""The simulator's cross-lane instructions (ds_swizzle_b32, ds_bpermute_b32,
v_permlane16/32_swap_b32) against lane-by-lane models of the ISA's text and
LLVM's documented swizzle macros, with some lanes disabled."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from nvfp4_suite.kernels.flydsl.sim.launch import execute, make_test_wave
from nvfp4_suite.kernels.flydsl.sim.ops.xlane import swizzle_pattern
from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
from nvfp4_suite.kernels.flydsl.sim.wave import SimError, mask_to_int

LANES = 64
SENTINEL = 0xDEADBEEF


def _wave(rng, arch="gfx942", full=False):
    w = make_test_wave(arch)
    mask = np.ones(LANES, bool) if full else rng.random(LANES) < 0.7
    if not full:
        mask[0], mask[1] = True, False
    bits = mask_to_int(mask)
    w.s[126], w.s[127] = bits & 0xFFFFFFFF, bits >> 32
    w.v[:] = SENTINEL
    return w, mask


# ---- ds_swizzle_b32 --------------------------------------------------------------

# llvm-mc -mcpu=gfx942 -show-encoding: the pattern is the encoding's offset field (bytes 0..1)
LLVM_PATTERNS = {
    "swizzle(SWAP,16)": 0x401F, "swizzle(SWAP,1)": 0x041F, "swizzle(REVERSE,8)": 0x1C1F,
    "swizzle(BROADCAST,8,3)": 0x0078, "swizzle(QUAD_PERM,1,2,3,0)": 0x8039,
    'swizzle(BITMASK_PERM,"01pip")': 0x0907, 'swizzle(BITMASK_PERM,"10i01")': 0x1224,
}


def _parsed_offset(text: str):
    return parse_instruction(f"ds_swizzle_b32 v1, v2 offset:{text}").mods["offset"]


@pytest.mark.parametrize("text", sorted(LLVM_PATTERNS))
def test_swizzle_macro_converts_to_llvm_mc_encoding(text):
    assert swizzle_pattern(_parsed_offset(text)) == LLVM_PATTERNS[text]


LLVM_MC = shutil.which("llvm-mc") or "/usr/lib/llvm-22/bin/llvm-mc"


@pytest.mark.skipif(not os.path.exists(LLVM_MC), reason="llvm-mc not installed")
def test_swizzle_macros_match_llvm_mc_for_every_group_size():
    texts = [f"swizzle(SWAP,{n})" for n in (1, 2, 4, 8, 16)] + \
            [f"swizzle(REVERSE,{n})" for n in (2, 4, 8, 16, 32)] + \
            [f"swizzle(BROADCAST,{n},{n - 1})" for n in (2, 4, 8, 16, 32)] + \
            ["swizzle(QUAD_PERM,3,0,2,1)", 'swizzle(BITMASK_PERM,"ip01p")']
    src = "".join(f"ds_swizzle_b32 v1, v2 offset:{t}\n" for t in texts)
    out = subprocess.run([LLVM_MC, "-arch=amdgcn", "-mcpu=gfx942", "-show-encoding"], input=src,
                         capture_output=True, text=True, check=True).stdout
    encs = [ln.split("encoding: [")[1] for ln in out.splitlines() if "encoding:" in ln]
    for t, enc in zip(texts, encs, strict=True):
        b = [int(x, 16) for x in enc.rstrip("]").split(",")]
        assert swizzle_pattern(_parsed_offset(t)) == b[0] | b[1] << 8, t


def _macro_source(mode: str, args: list[int | str], i: int) -> int:
    """The lane that lane ``i`` reads, from LLVM's description of each swizzle macro."""
    if mode == "SWAP":
        return i ^ args[0]
    if mode == "REVERSE":
        n = args[0]
        return (i // n) * n + (n - 1 - i % n)
    if mode == "BROADCAST":
        n = args[0]
        return (i // n) * n + args[1]
    if mode == "QUAD_PERM":
        return (i // 4) * 4 + args[i % 4]
    bits = []  # BITMASK_PERM: per lane-id bit, most significant first
    for pos, ch in enumerate(args[0]):
        b = (i >> (4 - pos)) & 1
        bits.append({"0": 0, "1": 1, "p": b, "i": 1 - b}[ch])
    return (i & 32) | int("".join(map(str, bits)), 2)


MACROS = [("SWAP", [n]) for n in (1, 2, 4, 8, 16)] + [("REVERSE", [n]) for n in (2, 4, 8, 16, 32)] + \
         [("BROADCAST", [n, n // 2]) for n in (2, 4, 8, 16, 32)] + \
         [("QUAD_PERM", [3, 1, 0, 2]), ("QUAD_PERM", [0, 0, 0, 0]), ("BITMASK_PERM", ["pi01p"]),
          ("BITMASK_PERM", ["iiiii"])]


@pytest.mark.parametrize("mode,args", MACROS, ids=lambda x: str(x))
def test_swizzle_lane_reads_the_lane_its_macro_names(mode, args):
    rng = np.random.default_rng(1)
    w, mask = _wave(rng)
    w.v[108] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    w.v[109] = 7  # data0 is not the source: the address operand is
    text = ",".join([mode] + [f'"{a}"' if isinstance(a, str) else str(a) for a in args])
    execute(w, f"ds_swizzle_b32 v110, v108 offset:swizzle({text})")
    for i in range(LANES):
        j = _macro_source(mode, args, i)
        want = (int(w.v[108][j]) if mask[j] else 0) if mask[i] else SENTINEL
        assert int(w.v[110][i]) == want, (i, j)


def test_swizzle_numeric_patterns_follow_the_isa_bit_and_quad_modes():
    rng = np.random.default_rng(2)
    for pattern in list(rng.integers(0, 0x8000, 40)) + [0x8000 | int(p) for p in rng.integers(0, 256, 20)]:
        w, mask = _wave(rng)
        w.v[3] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
        execute(w, f"ds_swizzle_b32 v4, v3 offset:{int(pattern)}")
        for i in range(LANES):
            if pattern & 0x8000:
                j = (i & ~3) + ((pattern >> (2 * (i & 3))) & 3)
            else:
                a, o, x = pattern & 31, (pattern >> 5) & 31, (pattern >> 10) & 31
                j = (i & 32) + ((((i & 31) & a) | o) ^ x)
            want = (int(w.v[3][j]) if mask[j] else 0) if mask[i] else SENTINEL
            assert int(w.v[4][i]) == want


@pytest.mark.parametrize("offset", ["0xc000", "0xe01f", "0x8f1f", "swizzle(ROTATE,0,7)", "swizzle(FFT,31)"])
def test_swizzle_patterns_outside_the_cdna_description_are_refused(offset):
    w, _ = _wave(np.random.default_rng(3))
    with pytest.raises(SimError):
        execute(w, f"ds_swizzle_b32 v4, v3 offset:{offset}")


# ---- ds_bpermute_b32 -------------------------------------------------------------

@pytest.mark.parametrize("offset", [0, 4, 252, 65535])
def test_bpermute_reads_the_lane_its_byte_address_names(offset):
    rng = np.random.default_rng(offset)
    w, mask = _wave(rng)
    w.v[171] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)  # high bits and low 2 bits ignored
    w.v[171][:4] = [0xFFFFFFFF, 0xFFFFFFFC, 4, 1]
    w.v[108] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    execute(w, f"ds_bpermute_b32 v109, v171, v108 offset:{offset}")
    for i in range(LANES):
        j = ((int(w.v[171][i]) + offset) % 2 ** 32) // 4 % 64
        want = (int(w.v[108][j]) if mask[j] else 0) if mask[i] else SENTINEL
        assert int(w.v[109][i]) == want


def test_bpermute_may_write_its_own_address_register():
    rng = np.random.default_rng(5)
    w, mask = _wave(rng)
    w.v[40] = (LANES - 1 - np.arange(LANES)) * 4
    w.v[1] = np.arange(LANES) + 1000
    execute(w, "ds_bpermute_b32 v40, v40, v1")
    want = np.where(mask[::-1], 1000 + np.arange(LANES)[::-1], 0)
    np.testing.assert_array_equal(w.v[40][mask], want[mask])


# ---- v_permlane16_swap_b32 / v_permlane32_swap_b32 --------------------------------

def _isa_permlane_swap(vdst: list[int], vsrc: list[int], rows: int) -> None:
    """The CDNA4 ISA pseudo-code, statement by statement, on Python lists (one
    list per register: the same list twice when both operands are one register)."""
    if rows == 16:
        for pas in range(2):
            for lane in range(16):
                tmp = vsrc[pas * 32 + lane]
                vsrc[pas * 32 + lane] = vdst[pas * 32 + lane + 16]
                vdst[pas * 32 + lane + 16] = tmp
    else:
        for lane in range(32):
            tmp = vsrc[lane]
            vsrc[lane] = vdst[lane + 32]
            vdst[lane + 32] = tmp


@pytest.mark.parametrize("rows", [16, 32])
@pytest.mark.parametrize("same", [False, True])
def test_permlane_swap_matches_the_isa_pseudocode(rows, same):
    rng = np.random.default_rng(rows + same)
    w, _ = _wave(rng, "gfx950", full=True)
    w.v[88] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    w.v[89] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    dst = [int(x) for x in w.v[88]]
    src = dst if same else [int(x) for x in w.v[89]]
    want89 = [int(x) for x in w.v[89]]
    _isa_permlane_swap(dst, src, rows)
    execute(w, f"v_permlane{rows}_swap_b32_e32 v88, {'v88' if same else 'v89'}")
    assert [int(x) for x in w.v[88]] == dst
    assert [int(x) for x in w.v[89]] == (want89 if same else src)


@pytest.mark.parametrize("text", ["v_permlane16_swap_b32_e32 v1, v2", "v_permlane32_swap_b32_e32 v1, v2",
                                  "v_permlane16_swap_b32_e32 v3, v3", "v_permlane32_swap_b32_e32 v4, v4"])
def test_permlane_swaps_batched_core_matches_its_handler_on_every_wave(text):
    from sim_cores import assert_core_matches_handler

    assert_core_matches_handler(text, "gfx950")


def test_permlane16_swap_worked_example():
    """vdst = 100 + lane, vsrc = 200 + lane. Odd rows (16 lanes each) of vdst
    trade places with even rows of vsrc; vdst's even rows and vsrc's odd rows stay."""
    w, _ = _wave(np.random.default_rng(6), "gfx950", full=True)
    lane = np.arange(LANES)
    w.v[88], w.v[89] = 100 + lane, 200 + lane
    execute(w, "v_permlane16_swap_b32_e32 v88, v89")
    rows = lambda base, r: list(base + 16 * r + np.arange(16))  # noqa: E731
    dst = [list(w.v[88][16 * r:16 * r + 16]) for r in range(4)]
    src = [list(w.v[89][16 * r:16 * r + 16]) for r in range(4)]
    assert dst == [rows(100, 0), rows(200, 0), rows(100, 2), rows(200, 2)]
    assert src == [rows(100, 1), rows(200, 1), rows(100, 3), rows(200, 3)]


def test_permlane32_swap_worked_example():
    """vdst's upper 32 lanes trade places with vsrc's lower 32 lanes."""
    w, _ = _wave(np.random.default_rng(7), "gfx950", full=True)
    lane = np.arange(LANES)
    w.v[26], w.v[27] = 100 + lane, 200 + lane
    execute(w, "v_permlane32_swap_b32_e32 v26, v27")
    assert list(w.v[26]) == list(100 + lane[:32]) + list(200 + lane[:32])
    assert list(w.v[27]) == list(100 + lane[32:]) + list(200 + lane[32:])


def test_permlane_swap_refuses_partial_exec_and_gfx942():
    w, mask = _wave(np.random.default_rng(8), "gfx950")
    with pytest.raises(SimError, match="partial EXEC"):
        execute(w, "v_permlane16_swap_b32_e32 v1, v2")
    w, _ = _wave(np.random.default_rng(8), "gfx942", full=True)
    with pytest.raises(SimError, match="gfx942 has no permlane swap"):
        execute(w, "v_permlane32_swap_b32_e32 v1, v2")
