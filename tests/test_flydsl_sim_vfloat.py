"""The simulator's vector floating-point and conversion family against
independent models: float64 arithmetic then one rounding (innocuous double
rounding for + - * / of float32), exact rationals for fma, integer bit models
for fp16, ml_dtypes for bf16 and fp8, Python integers for the integer
conversions. Every test runs with part of EXEC off and checks that inactive
lanes keep their value."""

from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from sim_kernels import compiled_kernels

from nvfp4_suite.kernels.flydsl.sim.launch import execute, make_test_wave
from nvfp4_suite.kernels.flydsl.sim.ops import vfloat
from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
from nvfp4_suite.kernels.flydsl.sim.wave import OPS, SimError, UnknownInstruction, handler_for

# The models compute with NaNs and infinities on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

EXEC_LO, EXEC_HI = 0x0FF0FFF0, 0x3FFFFFFC  # lanes 0-3, 16-19, 28-33, 62, 63 off
ACTIVE = ((np.uint64(EXEC_LO | EXEC_HI << 32) >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(bool)
SENTINEL = 0xDEADBEEF
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0 ** -149, -(2.0 ** -149),
                     2.0 ** -126, 3.4028235e38, -3.4028235e38, 1e-40, 0.5, 1.5, 65504.0], np.float32)
SNAN = np.uint32(0x7FA00000)


def wave(arch: str = "gfx950", **options):
    """A test wave with the partial EXEC of this file."""
    w = make_test_wave(arch, options=options or None)
    w.s[126], w.s[127] = EXEC_LO, EXEC_HI
    return w


def put(w, reg: int, values) -> None:
    """Write 64 values (float32 or uint32 bit patterns) to v[reg]."""
    a = np.asarray(values)
    w.v[reg] = a.view(np.uint32) if a.dtype == np.float32 else a.astype(np.uint32)


def run(w, text: str, dst: int) -> np.ndarray:
    """Execute ``text`` with v[dst] preset to the sentinel; the inactive lanes must
    keep it. Returns the uint32 bits of v[dst]."""
    w.v[dst] = SENTINEL
    execute(w, text)
    assert (w.v[dst][~ACTIVE] == SENTINEL).all(), "an inactive lane was written"
    return w.v[dst].copy()


def rand_f32(rng, n: int = 64, wide: bool = True) -> np.ndarray:
    """float32 values: uniformly random bit patterns (every exponent, NaNs,
    denormals) or moderate magnitudes."""
    if wide:
        return rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(np.float32)


def mixed(rng) -> np.ndarray:
    """64 float32 lanes: the special values then random ones."""
    x = rand_f32(rng, 64, wide=bool(rng.integers(2)))
    x[:len(SPECIALS)] = rng.permutation(SPECIALS)
    return x


def same_f32(got_bits: np.ndarray, want: np.ndarray) -> None:
    """Active lanes equal bit for bit, except that any NaN matches any NaN."""
    got = got_bits.view(np.float32)[ACTIVE]
    want = np.asarray(want, np.float32)[ACTIVE]
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), (got[np.isnan(got) != nan], want[np.isnan(got) != nan])
    bad = got.view(np.uint32)[~nan] != want.view(np.uint32)[~nan]
    assert not bad.any(), (got[~nan][bad], want[~nan][bad])


def f64_round(x) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(x, np.float64).astype(np.float32)


# ---- exact rational rounding to float32 (the fma model) ------------------------------------

def round_f32(q: Fraction) -> np.float32:
    """The float32 nearest to the rational ``q``, ties to even, overflow to inf."""
    if q == 0:
        return np.float32(0.0)
    sign = -1 if q < 0 else 1
    a = abs(q)
    if a >= Fraction(2 ** 128 - 2 ** 103):
        return np.float32(sign * np.inf)
    e = max(math.floor(math.log2(a.numerator) - math.log2(a.denominator)) + 1, -125)
    while Fraction(2) ** e <= a:
        e += 1
    while e > -125 and Fraction(2) ** (e - 1) > a:
        e -= 1
    # a < 2**e; float32 spacing there is 2**(e - 24), never below 2**-149.
    unit = Fraction(2) ** (max(e, -125) - 24)
    n, rem = divmod(a, unit)
    n = int(n)
    if rem > unit / 2 or (rem == unit / 2 and n % 2):
        n += 1
    return np.float32(sign * float(n * unit))


def fma_model(a, b, c) -> np.ndarray:
    out = np.empty(len(a), np.float32)
    for i, (x, y, z) in enumerate(zip(a, b, c)):
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            with np.errstate(all="ignore"):
                out[i] = np.float32(np.float64(x) * np.float64(y) + np.float64(z))
            continue
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        r = round_f32(exact)
        if exact == 0:
            # IEEE: an exact zero sum is +0 unless both addends are -0 (or x*y, z are both negative zeros).
            r = np.float32(-0.0) if (np.signbit(np.float32(x) * np.float32(y)) and np.signbit(z)) else np.float32(0.0)
        out[i] = r
    return out


# ---- f32 arithmetic ----------------------------------------------------------------------

@pytest.mark.parametrize("name,fn", [
    ("v_add_f32", lambda a, b: a + b), ("v_sub_f32", lambda a, b: a - b),
    ("v_subrev_f32", lambda a, b: b - a), ("v_mul_f32", lambda a, b: a * b)])
def test_binary_f32_is_float64_op_rounded_once(name, fn):
    rng = np.random.default_rng(1)
    for _trial in range(30):
        w = wave()
        a, b = mixed(rng), rng.permutation(mixed(rng))
        put(w, 2, a)
        put(w, 3, b)
        want = f64_round(fn(a.astype(np.float64), b.astype(np.float64)))
        same_f32(run(w, f"{name}_e32 v1, v2, v3", 1), want)
        same_f32(run(w, f"{name}_e64 v1, v2, v3", 1), want)


def test_e64_source_modifiers_and_sgpr_source():
    rng = np.random.default_rng(2)
    w = wave()
    a, b = mixed(rng), mixed(rng)
    put(w, 2, a)
    w.s[7] = np.float32(-3.25).view(np.uint32)
    put(w, 3, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same_f32(run(w, "v_add_f32_e64 v1, -|v2|, |v3|", 1), f64_round(-np.abs(a64) + np.abs(b64)))
    same_f32(run(w, "v_mul_f32_e64 v1, s7, -v3", 1), f64_round(-3.25 * -b64))
    same_f32(run(w, "v_mul_f32_e32 v1, s7, v3", 1), f64_round(-3.25 * b64))
    literal = np.float64(np.uint32(0x4F7FFFFE).view(np.float32))
    same_f32(run(w, "v_mul_f32_e32 v1, 0x4f7ffffe, v3", 1), f64_round(literal * b64))
    same_f32(run(w, "v_add_f32_e32 v1, 0, v3", 1), f64_round(0.0 + b64))
    clamped = f64_round(a64 + b64)
    clamped = np.where(np.isnan(clamped), 0, np.clip(clamped, 0, 1)).astype(np.float32)
    same_f32(run(w, "v_add_f32_e64 v1, v2, v3 clamp", 1), clamped)


@pytest.mark.parametrize("text", ["v_add_f32_e64 v1, v2, v3 mul:2", "v_mul_f32_e64 v1, v2, v3 div:2",
                                  "v_add_f32_dpp v1, v2, v3 row_shl:1 row_mask:0xf bank_mask:0xf",
                                  "v_exp_f32_e64 v1, v2 mul:4", "v_fma_f32 v1, v2, v3, v4 mul:2",
                                  "v_cvt_f16_f32_e64 v1, v2 clamp", "v_pk_mul_f16 v1, v2, v3 clamp",
                                  "v_pk_add_f32 v[0:1], v[2:3], 1.0", "v_pk_add_f32 v[0:1], -v[2:3], v[4:5]",
                                  "v_pack_b32_f16 v1, v2, v3 op_sel:[0,0,1]",
                                  "v_cvt_pk_f32_fp8_sdwa v[0:1], v2 src0_sel:BYTE_1"])
def test_unimplemented_forms_raise(text):
    with pytest.raises(SimError):
        execute(wave(), text)


def test_fma_and_fmac_round_once_like_exact_rationals():
    rng = np.random.default_rng(3)
    for trial in range(25):
        w = wave()
        a, b = mixed(rng), mixed(rng)
        if trial % 2:
            # c close to -a*b: cancellation, tiny and denormal results, midpoint ties.
            c = (-(a.astype(np.float64) * b.astype(np.float64))).astype(np.float32)
            c = np.where(rng.integers(0, 2, 64) == 1, np.nextafter(c, np.float32(0)), c)
        else:
            c = mixed(rng) * np.float32(2.0) ** rng.integers(-60, 60, 64).astype(np.float32)
        put(w, 2, a)
        put(w, 3, b)
        put(w, 4, c)
        want = fma_model(a, b, c)
        same_f32(run(w, "v_fma_f32 v1, v2, v3, v4", 1), want)
        put(w, 5, c)
        w.v[5][~ACTIVE] = SENTINEL
        execute(w, "v_fmac_f32_e32 v5, v2, v3")
        assert (w.v[5][~ACTIVE] == SENTINEL).all()
        same_f32(w.v[5], want)
    w = wave()
    put(w, 2, np.full(64, 3.0, np.float32))
    put(w, 3, np.full(64, 0.25, np.float32))
    same_f32(run(w, "v_fma_f32 v1, -v2, v3, 1.0", 1), np.full(64, 0.25, np.float32))


def test_fma_ties_and_double_rounding_traps():
    """Cases where a float64 sum would round to a float32 midpoint: one rounding
    must still give the exactly-rounded value."""
    one_ulp = np.float32(2.0 ** -23)
    a = np.full(64, 1.0 + 2.0 ** -12, np.float32)
    b = np.full(64, 1.0 + 2.0 ** -12, np.float32)  # a*b = 1 + 2**-11 + 2**-24: a float32 midpoint
    c = np.float32(2.0 ** -60) * np.where(np.arange(64) % 2, 1, -1).astype(np.float32)
    c[:8] = 0
    c[8:16] = np.float32(2.0 ** -149)
    c[16:24] = -one_ulp / 2
    w = wave()
    put(w, 2, a)
    put(w, 3, b)
    put(w, 4, c)
    same_f32(run(w, "v_fma_f32 v1, v2, v3, v4", 1), fma_model(a, b, c))


def _max_model(a: float, b: float, want_max: bool) -> np.uint32:
    """v_max/v_min per the ISA pseudo-code, one lane, on bit patterns."""
    ab, bb = np.float32(a).view(np.uint32), np.float32(b).view(np.uint32)
    def snan(bits):
        return np.isnan(np.uint32(bits).view(np.float32)) and not (bits & 0x400000)

    if snan(ab):
        return ab | np.uint32(0x400000)
    if snan(bb):
        return bb | np.uint32(0x400000)
    if np.isnan(a):
        return bb
    if np.isnan(b):
        return ab
    if a == 0 and b == 0:
        pos_a = not np.signbit(a)
        return (ab if pos_a else bb) if want_max else (bb if pos_a else ab)
    if want_max:
        return ab if a >= b else bb
    return ab if a < b else bb


@pytest.mark.parametrize("name,want_max", [("v_max_f32", True), ("v_min_f32", False)])
def test_max_min_follow_ieee_mode_nan_and_signed_zero_rules(name, want_max):
    rng = np.random.default_rng(4)
    vals = np.concatenate([SPECIALS, [SNAN.view(np.float32), np.float32(-0.0), np.float32(0.0)]])
    pairs = [(x, y) for x in vals for y in vals]
    for start in range(0, len(pairs), 64):
        chunk = pairs[start:start + 64]
        chunk += [(np.float32(1), np.float32(2))] * (64 - len(chunk))
        a = np.array([p[0] for p in chunk], np.float32)
        b = np.array([p[1] for p in chunk], np.float32)
        w = wave()
        put(w, 2, a)
        put(w, 3, b)
        want = np.array([_max_model(x, y, want_max) for x, y in zip(a, b)], np.uint32)
        got = run(w, f"{name}_e32 v1, v2, v3", 1)
        assert (got[ACTIVE] == want[ACTIVE]).all()
    # max3/min3: nested, checked on random and special operands.
    for _trial in range(10):
        a, b, c = mixed(rng), mixed(rng), mixed(rng)
        c[5] = SNAN.view(np.float32)
        w = wave()
        put(w, 2, a)
        put(w, 3, b)
        put(w, 4, c)
        got = run(w, f"{name.replace('_f32', '3_f32')} v1, v2, v3, v4", 1)
        want = [_max_model(_max_model(x, y, want_max).view(np.float32), z, want_max) for x, y, z in zip(a, b, c)]
        assert (got[ACTIVE] == np.array(want, np.uint32)[ACTIVE]).all()


def test_max_of_plus_and_minus_zero_is_plus_zero_in_both_orders():
    w = wave()
    put(w, 2, np.where(np.arange(64) % 2, 0.0, -0.0).astype(np.float32))
    put(w, 3, np.where(np.arange(64) % 2, -0.0, 0.0).astype(np.float32))
    assert (run(w, "v_max_f32_e32 v1, v2, v3", 1)[ACTIVE] == 0).all()
    assert (run(w, "v_min_f32_e32 v1, v2, v3", 1)[ACTIVE] == 0x80000000).all()


@pytest.mark.parametrize("name", ["v_max_f32_e32", "v_min_f32_e32", "v_max3_f32", "v_min3_f32"])
@pytest.mark.parametrize("full", [False, True])
def test_max_min_without_nans_order_by_value_and_zeros_by_sign(name, full):
    """No NaN among the operands (the common path): the larger (smaller) value;
    of two zeros +0 (-0) when either is; with part of EXEC off (the handler)
    and every lane on (the batched core)."""
    rng = np.random.default_rng(8)
    pool = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 2.0 ** -149, -(2.0 ** -149), 3.4028235e38, 0.5],
                    np.float32)
    want_max = "max" in name
    for _trial in range(6):
        x, y, z = (rng.choice(pool, 64) for _ in range(3))
        w = wave()
        if full:
            w.s[126] = w.s[127] = 0xFFFFFFFF
        put(w, 2, x)
        put(w, 3, y)
        put(w, 4, z)
        three = name in ("v_max3_f32", "v_min3_f32")
        text = f"{name} v1, v2, v3" + (", v4" if three else "")
        if full:
            execute(w, text)
            got = w.v[1].copy()
        else:
            got = run(w, text, 1)
        for i in range(64):
            ops = [x[i], y[i]] + ([z[i]] if three else [])
            best = ops[0]
            for v in ops[1:]:
                if (v > best) if want_max else (v < best):
                    best = v
                elif v == best == 0:
                    best = np.float32(0.0) if (want_max and not (np.signbit(v) and np.signbit(best))) or \
                        (not want_max and not (np.signbit(v) or np.signbit(best))) else np.float32(-0.0)
            if full or ACTIVE[i]:
                assert int(got[i]) == int(np.float32(best).view(np.uint32)), (name, ops, got[i])


# ---- exp / rcp -----------------------------------------------------------------------------

def exp2_model(x: np.ndarray) -> np.ndarray:
    out = []
    for v in x.astype(np.float64):
        if np.isnan(v):
            out.append(np.nan)
        elif v > 200:
            out.append(np.inf)
        elif v < -200:
            out.append(0.0)
        else:
            out.append(math.pow(2.0, v))
    return f64_round(out)


def test_exp_is_exp2_correctly_rounded_with_denormals_kept():
    rng = np.random.default_rng(5)
    for _trial in range(20):
        x = (rng.uniform(-160, 130, 64)).astype(np.float32)
        x[4:10] = [-np.inf, np.inf, np.nan, -140.0, 0.0, -149.0]
        w = wave()
        put(w, 2, x)
        got = run(w, "v_exp_f32_e32 v1, v2", 1)
        same_f32(got, exp2_model(x))
    g = got.view(np.float32)
    assert g[4] == 0 and g[5] == np.inf and np.isnan(g[6])
    assert g[7].view(np.uint32) == 1 << 9  # 2**-140 is a denormal, not flushed


@pytest.mark.parametrize("k", [1, -1, 3, -2, 1 << 31, -(1 << 31)])
def test_exp_ulps_moves_finite_nonzero_results_k_steps(k):
    x = np.linspace(-30, 30, 64).astype(np.float32)
    x[4:12] = [-np.inf, np.inf, np.nan, 127.5, -149.0, -200.0, -148.0, 1.0]
    base_w, pert_w = wave(), wave(exp_ulps=k)
    put(base_w, 2, x)
    put(pert_w, 2, x)
    base = run(base_w, "v_exp_f32_e32 v1, v2", 1)
    got = run(pert_w, "v_exp_f32_e32 v1, v2", 1)
    bf = base.view(np.float32)
    moved = np.isfinite(bf) & (bf != 0)
    want = np.where(moved, np.clip(base.astype(np.int64) + k, 0, 0x7F800000), base).astype(np.uint32)
    assert (got[ACTIVE] == want[ACTIVE]).all()
    assert got[8] == (min(1 + k, 0x7F800000) if k > 0 else 0)  # 2**-149 steps toward zero and stops there
    if abs(k) == 1 << 31:  # saturation: at infinity going up, at zero going down
        assert (got[moved & ACTIVE] == (0x7F800000 if k > 0 else 0)).all()


def test_rcp_is_correctly_rounded_reciprocal():
    rng = np.random.default_rng(6)
    for _trial in range(20):
        x = mixed(rng)
        w = wave()
        put(w, 2, x)
        with np.errstate(divide="ignore"):
            want = f64_round(1.0 / x.astype(np.float64))
        same_f32(run(w, "v_rcp_f32_e32 v1, v2", 1), want)


# ---- the fdiv expansion, as LLVM emitted it ------------------------------------------------

_CHAIN = {"v_div_scale_f32", "v_rcp_f32", "v_fma_f32", "v_fmac_f32", "v_mul_f32", "v_div_fmas_f32", "v_div_fixup_f32"}


def fdiv_sequences(paths):
    """Per compiled kernel (``paths``), the first fdiv expansion: its instructions (only the
    mnemonics of the macro, from the denominator's v_div_scale_f32 to
    v_div_fixup_f32)."""
    seqs = []
    for path in paths:
        lines = open(path).read().splitlines()
        for i, ln in enumerate(lines):
            if "v_div_scale_f32" not in ln:
                continue
            first = parse_instruction(ln)
            if first.ops[2].text != first.ops[3].text:
                continue
            body = []
            for ln2 in lines[i:]:
                s = ln2.strip()
                if not s.startswith("v_"):
                    continue
                ins = parse_instruction(ln2)
                if ins.base in _CHAIN:
                    body.append(ln2.strip())
                if ins.base == "v_div_fixup_f32":
                    break
            seqs.append((path.rsplit("/", 1)[-1], body))
            break
    return seqs


def _set_operand(w, text: str, values: np.ndarray) -> None:
    o = parse_instruction(f"v_mov_b32 v0, {text}").ops[1]
    if o.kind == "s":
        w.s[o.index] = values[0].view(np.uint32)
    else:
        put(w, o.index, values)


def test_llvm_fdiv_expansion_of_every_compiled_kernel_is_correctly_rounded():
    seqs = fdiv_sequences(compiled_kernels())
    assert seqs
    for name, body in seqs:
        _check_fdiv_sequence(name, body)


def _check_fdiv_sequence(name, body):
    scale = parse_instruction(body[0])
    fixup = parse_instruction(body[-1])
    assert scale.base == "v_div_scale_f32" and fixup.base == "v_div_fixup_f32"
    num_text, den_text = scale.ops[4].text, scale.ops[2].text
    dst = fixup.ops[0].index
    rng = np.random.default_rng(7)
    for trial in range(120):
        w = wave()
        den = mixed(rng) if trial % 3 else rand_f32(rng)
        num = np.full(64, rand_f32(rng, 1, wide=trial % 2 == 0)[0], np.float32)
        if trial < len(SPECIALS):
            num[:] = SPECIALS[trial]
        if trial % 5 == 4:
            # Quotients near overflow, near and inside the denormal range.
            den = (num.astype(np.float64) / (2.0 ** rng.uniform(-160, 140, 64))).astype(np.float32)
            den[den == 0] = np.float32(2.0 ** -149)
        if num_text.startswith("s") and den_text.startswith("s"):
            pytest.skip("both operands scalar")
        _set_operand(w, num_text, num)
        _set_operand(w, den_text, den)
        w.v[dst] = SENTINEL
        for text in body:
            execute(w, text)
        with np.errstate(all="ignore"):
            want = f64_round(num.astype(np.float64) / den.astype(np.float64))
        assert (w.v[dst][~ACTIVE] == SENTINEL).all()
        same_f32(w.v[dst], want)


def test_div_scale_writes_its_sgpr_pair_and_div_fmas_reads_vcc():
    w = wave()
    den = np.full(64, 2.0 ** -60, np.float32)
    num = np.full(64, 2.0 ** 100, np.float32)  # exponent gap >= 96: scale the denominator
    num[:32] = 1.0
    put(w, 2, den)
    put(w, 3, num)
    got = run(w, "v_div_scale_f32 v1, s[4:5], v2, v2, v3", 1)
    flag = int(w.s[4]) | int(w.s[5]) << 32
    want_flag = int(np.sum((ACTIVE & (np.arange(64) >= 32)).astype(np.uint64) << np.arange(64, dtype=np.uint64)))
    assert flag == want_flag
    assert (got.view(np.float32)[ACTIVE & (np.arange(64) >= 32)] == np.float32(16.0)).all()
    assert (got.view(np.float32)[ACTIVE & (np.arange(64) < 32)] == np.float32(2.0 ** -60)).all()
    w.s[106], w.s[107] = w.s[4], w.s[5]
    put(w, 4, np.full(64, 0.0, np.float32))
    put(w, 5, np.full(64, 3.0, np.float32))
    got = run(w, "v_div_fmas_f32 v1, v4, v4, v5", 1).view(np.float32)
    assert (got[ACTIVE & (np.arange(64) >= 32)] == np.float32(3.0 * 2.0 ** 64)).all()
    assert (got[ACTIVE & (np.arange(64) < 32)] == 3.0).all()


def test_div_fixup_special_cases():
    cases = [  # (quotient, denominator, numerator, expected)
        (5.0, 0.0, 0.0, np.nan), (5.0, np.inf, -np.inf, np.nan), (5.0, -0.0, 3.0, -np.inf),
        (5.0, 2.0, np.inf, np.inf), (5.0, np.inf, 3.0, 0.0), (5.0, -2.0, 0.0, -0.0),
        (5.0, np.nan, 1.0, np.nan), (5.0, 1.0, np.nan, np.nan), (5.0, -2.0, 3.0, -5.0),
        (-5.0, -2.0, -3.0, 5.0), (1.0, 2.0 ** 121, 2.0 ** -30, 0.0)]
    w = wave()
    q, d, n, want = (np.array([c[k] for c in cases] * 5 + [cases[-2][k]] * (64 - 5 * len(cases)), np.float32)
                     for k in range(4))
    put(w, 2, q)
    put(w, 3, d)
    put(w, 4, n)
    same_f32(run(w, "v_div_fixup_f32 v1, v2, v3, v4", 1), want)


# ---- compares ------------------------------------------------------------------------------

_CMP_MODEL = {
    "f": lambda a, b: False, "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "lg": lambda a, b: a < b or a > b, "ge": lambda a, b: a >= b,
    "o": lambda a, b: not (math.isnan(a) or math.isnan(b)), "u": lambda a, b: math.isnan(a) or math.isnan(b),
    "nge": lambda a, b: not a >= b, "nlg": lambda a, b: not (a < b or a > b), "ngt": lambda a, b: not a > b,
    "nle": lambda a, b: not a <= b, "neq": lambda a, b: not a == b, "nlt": lambda a, b: not a < b,
    "tru": lambda a, b: True,
}


@pytest.mark.parametrize("cond", sorted(_CMP_MODEL))
def test_float_compares_follow_unordered_semantics(cond):
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0 ** -149], np.float32)
    a = np.repeat(vals, 8)
    b = np.tile(vals, 8)
    w = wave()
    put(w, 2, a)
    put(w, 3, b)
    w.s[20] = a[10].view(np.uint32)
    want = np.array([_CMP_MODEL[cond](float(x), float(y)) for x, y in zip(a, b)]) & ACTIVE
    execute(w, f"v_cmp_{cond}_f32_e32 vcc, v2, v3")
    got = (int(w.s[106]) | int(w.s[107]) << 32)
    assert got == int(np.sum(want.astype(np.uint64) << np.arange(64, dtype=np.uint64)))
    execute(w, f"v_cmp_{cond}_f32_e64 s[8:9], -v2, |v3|")
    want = np.array([_CMP_MODEL[cond](-float(x), abs(float(y))) for x, y in zip(a, b)]) & ACTIVE
    assert (int(w.s[8]) | int(w.s[9]) << 32) == int(np.sum(want.astype(np.uint64) << np.arange(64, dtype=np.uint64)))
    execute(w, f"v_cmp_{cond}_f32_e64 s[8:9], s20, v3")
    want = np.array([_CMP_MODEL[cond](float(a[10]), float(y)) for y in b]) & ACTIVE
    assert (int(w.s[8]) | int(w.s[9]) << 32) == int(np.sum(want.astype(np.uint64) << np.arange(64, dtype=np.uint64)))


# ---- integer conversions ---------------------------------------------------------------------

def test_cvt_f32_u32_rounds_to_nearest_even():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    x[:6] = [0, 1, 2 ** 32 - 1, 2 ** 24 + 1, 2 ** 24 + 3, 2 ** 31 + 2 ** 7]
    w = wave()
    put(w, 2, x)
    want = np.array([float(int(v)) for v in x]).astype(np.float32)  # Python int -> double exact, one rounding
    same_f32(run(w, "v_cvt_f32_u32_e32 v1, v2", 1), want)
    w.s[18] = 12345
    same_f32(run(w, "v_cvt_f32_u32_e32 v1, s18", 1), np.full(64, 12345.0, np.float32))


def test_cvt_u32_f32_truncates_and_saturates_nan_to_zero():
    rng = np.random.default_rng(10)
    x = mixed(rng)
    x[16:24] = [4294967040.0, 4294967296.0, -0.9, 0.9999, 2.5, 1e20, -1e20, 16777217.0]
    w = wave()
    put(w, 2, x)
    want = []
    for v in x.astype(np.float64):
        if math.isnan(v) or v <= 0:
            want.append(0)
        elif v >= 2 ** 32:
            want.append(2 ** 32 - 1)
        else:
            want.append(int(v))
    got = run(w, "v_cvt_u32_f32_e32 v1, v2", 1)
    assert (got[ACTIVE] == np.array(want, np.uint64).astype(np.uint32)[ACTIVE]).all()


# ---- fp16 ------------------------------------------------------------------------------------

def f16_decode(h: int) -> float:
    """An fp16 bit pattern's value (Python floats; NaN for NaN)."""
    s, e, m = h >> 15, (h >> 10) & 31, h & 1023
    if e == 31:
        v = math.inf if m == 0 else math.nan
    elif e == 0:
        v = m * 2.0 ** -24
    else:
        v = (1024 + m) * 2.0 ** (e - 25)
    return -v if s else v


def f16_encode(x: float) -> int:
    """float -> fp16 bits with round to nearest even, denormals and overflow to
    inf, from integer arithmetic on the exact value (NaN -> 0x7e00)."""
    if math.isnan(x):
        return 0x7E00
    s = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isinf(x):
        return s | 0x7C00
    q = abs(Fraction(x))
    if q == 0:
        return s
    unit_exp = -24
    while q >= Fraction(2) ** (unit_exp + 11):
        unit_exp += 1
    n, rem = divmod(q, Fraction(2) ** unit_exp)
    n = int(n)
    half = Fraction(2) ** unit_exp / 2
    if rem > half or (rem == half and n % 2):
        n += 1
    if n == 2048:
        n, unit_exp = 1024, unit_exp + 1
    if unit_exp > 5:
        return s | 0x7C00
    if n < 1024:
        return s | n
    return s | ((unit_exp + 25) << 10) | (n - 1024)


F16_ALL = np.arange(65536, dtype=np.uint32)
F16_VALUES = np.array([f16_decode(int(h)) for h in F16_ALL], np.float64)


def test_cvt_f32_f16_exhaustive_low_and_high_half():
    want = F16_VALUES.astype(np.float32)
    w = wave()
    for start in range(0, 65536, 64):
        h = F16_ALL[start:start + 64]
        put(w, 2, h | (((h * 7) & 0xFFFF) << 16))
        same_f32(run(w, "v_cvt_f32_f16_e32 v1, v2", 1), want[start:start + 64])
        put(w, 3, ((h * 3) & 0xFFFF) | (h << 16))
        same_f32(run(w, "v_cvt_f32_f16_sdwa v1, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1", 1),
                 want[start:start + 64])


def test_f16_to_f32_table_is_exact_for_every_pattern():
    """The gather every fp16 source goes through, against the integer decode:
    values exact, a NaN's sign and payload moved to the top of float32's."""
    got = vfloat._f16_to_f32(F16_ALL.astype(np.uint16)).view(np.uint32)
    finite = ~np.isnan(F16_VALUES)
    assert (got[finite] == F16_VALUES[finite].astype(np.float32).view(np.uint32)).all()
    h = F16_ALL[~finite]
    assert (got[~finite] == ((h >> 15) << 31 | 0x7F800000 | (h & 0x3FF) << 13)).all()


def test_f16_round_on_a_strided_sample_of_every_float32_pattern():
    """float32 -> fp16 (``_f16_round``) on every 65537th float32 bit pattern
    shifted through 16 offsets (about a million, every exponent) against
    numpy's float64 -> fp16 conversion of the same (exact) values, a separate
    routine; NaNs keep their sign and top payload bits (1 where those are all
    0, as numpy's conversion keeps a NaN one) and come out quiet."""
    for off in range(0, 65537, 4099):
        bits = (np.arange(off, 1 << 32, 65537, dtype=np.uint64)).astype(np.uint32)
        x = bits.view(np.float32)
        got = vfloat._f16_round(x)
        nan = np.isnan(x)
        assert (got[~nan] == x[~nan].astype(np.float64).astype(np.float16).view(np.uint16)).all(), off
        payload = bits[nan] >> 13 & 0x3FF
        want_nan = (bits[nan] >> 16 & 0x8000) | 0x7E00 | np.where(payload == 0, 1, payload)
        assert (got[nan] == want_nan).all(), off


def f16_dense_inputs() -> np.ndarray:
    """float32 inputs for fp16 rounding: every finite fp16 value, the midpoints
    between neighbours and their float32 neighbours, beyond the overflow
    threshold, fp16 denormals' midpoints, tiny values, NaN and infinities."""
    finite = np.unique(np.abs(F16_VALUES[np.isfinite(F16_VALUES)]))
    mids = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    extra = np.array([65504.0, 65519.99, 65520.0, 65536.0, 1e6, 2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -26,
                      1e-30, 0.0, np.inf, np.nan], np.float32)
    xs = np.concatenate([finite.astype(np.float32), mids, np.nextafter(mids, np.float32(0)),
                         np.nextafter(mids, np.float32(np.inf)), extra])
    return np.concatenate([xs, -xs])


def test_cvt_f16_f32_rounds_to_nearest_even_with_denormals_and_overflow():
    xs = f16_dense_inputs()
    xs = np.concatenate([xs, np.zeros(-len(xs) % 64, np.float32)])
    want = np.array([f16_encode(float(v)) for v in xs], np.uint32)
    w = wave()
    for start in range(0, len(xs), 64):
        put(w, 2, xs[start:start + 64])
        got = run(w, "v_cvt_f16_f32_e32 v1, v2", 1)
        exp = want[start:start + 64]
        nan = np.isnan(xs[start:start + 64])
        assert (got[ACTIVE & ~nan] == exp[ACTIVE & ~nan]).all()
        g = got[ACTIVE & nan]
        assert (((g >> 10) & 31) == 31).all() and (g & 0x3FF).all() and (g >> 16 == 0).all()


def test_cvt_f16_round_trip_of_every_fp16_value_is_exact():
    w = wave()
    for start in range(0, 65536, 64):
        h = F16_ALL[start:start + 64]
        put(w, 2, h)
        execute(w, "v_cvt_f32_f16_e32 v3, v2")
        got = run(w, "v_cvt_f16_f32_e32 v1, v3", 1)
        finite = ~np.isnan(F16_VALUES[start:start + 64])
        assert (got[ACTIVE & finite] == h[ACTIVE & finite]).all()


def test_cvt_pk_f16_f32_and_pack_b32_f16():
    rng = np.random.default_rng(11)
    a, b = mixed(rng), mixed(rng)
    w = wave()
    put(w, 2, a)
    put(w, 3, b)
    def enc(xs):
        return np.array([f16_encode(float(v)) for v in xs], np.uint32)

    got = run(w, "v_cvt_pk_f16_f32 v1, v2, v3", 1)
    ok = ACTIVE & ~np.isnan(a) & ~np.isnan(b)
    assert (got[ok] == (enc(a) | enc(b) << 16)[ok]).all()
    x = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    y = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    put(w, 2, x)
    put(w, 3, y)
    lo, hi = x & 0xFFFF, y & 0xFFFF
    assert (run(w, "v_pack_b32_f16 v1, v2, v3", 1)[ACTIVE] == (lo | hi << 16)[ACTIVE]).all()
    got = run(w, "v_pack_b32_f16 v1, v2, -v3 op_sel:[1,0]", 1)
    assert (got[ACTIVE] == ((x >> 16) | ((hi ^ 0x8000) << 16))[ACTIVE]).all()
    got = run(w, "v_pack_b32_f16 v1, |v2|, v3 op_sel:[0,1,0]", 1)
    assert (got[ACTIVE] == ((lo & 0x7FFF) | (y >> 16 << 16))[ACTIVE]).all()


def test_pk_mul_f16_rounds_each_half_once():
    rng = np.random.default_rng(12)
    enc = np.vectorize(lambda v: f16_encode(float(v)), otypes=[np.uint32])
    for text, sel, sel_hi, neg_lo, neg_hi in [
            ("v_pk_mul_f16 v1, v2, v3", (0, 0), (1, 1), (0, 0), (0, 0)),
            ("v_pk_mul_f16 v1, v2, v3 op_sel:[1,0] op_sel_hi:[0,1] neg_lo:[0,1] neg_hi:[1,0]",
             (1, 0), (0, 1), (0, 1), (1, 0))]:
        for _trial in range(6):
            x = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
            y = rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
            w = wave()
            put(w, 2, x)
            put(w, 3, y)
            got = run(w, text, 1)
            srcs = (x, y)
            def half(s, i, neg, srcs=srcs):
                return np.array([f16_decode(int((v >> (16 * s[i])) & 0xFFFF) ^ (0x8000 if neg[i] else 0))
                                 for v in srcs[i]])
            with np.errstate(invalid="ignore"):
                lo = half(sel, 0, neg_lo) * half(sel, 1, neg_lo)
                hi = half(sel_hi, 0, neg_hi) * half(sel_hi, 1, neg_hi)
            for res, part in ((lo, got & 0xFFFF), (hi, got >> 16)):
                nan = np.isnan(res)
                assert (part[ACTIVE & ~nan] == enc(res)[ACTIVE & ~nan]).all()
                assert (((part[ACTIVE & nan] >> 10) & 31) == 31).all()


def test_pk_mul_f16_batched_every_fp16_pattern():
    """The core over 512 waves holding every fp16 pattern once, times fp16
    specials and rounding cases, against the float64 product (exact) rounded
    to fp16 by numpy's double-to-half conversion; NaNs quiet."""
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave, decode_batched

    n = 512
    sfile, vfile = np.zeros((n, 129), np.uint32), np.zeros((n, 8, 64), np.uint32)
    vfile[:, 2] = np.arange(1 << 16, dtype=np.uint16).view(np.uint32).reshape(n, 64)
    group = make_test_wave("gfx942").group
    view = BatchView(sfile, vfile, [Wave(group, 0, (sfile, vfile, k)) for k in range(n)])
    core = decode_batched(parse_instruction("v_pk_mul_f16 v1, v2, v3"))
    x = vfile[:, 2].view(np.float16).astype(np.float64)
    named = [int(np.float16(m).view(np.uint16)) for m in (1.0, -1.0, 0.5, 3.0, 1 + 2.0 ** -10, 1 / 3, 2.0 ** -14,
                                                            2.0 ** -24, 65504.0, np.inf, -0.0, np.nan)]
    # And a strided sample of every pattern (each sign, exponent, denormals, NaNs).
    for mbits in named + list(range(0, 1 << 16, 251)) + [0x7C01, 0xFE01]:
        m = np.uint16(mbits).view(np.float16)
        vfile[:, 3] = mbits | mbits << 16
        with np.errstate(all="ignore"):
            core(view)
            want = (x * np.float64(np.float16(m))).astype(np.float16).view(np.uint16)
        got = vfile[:, 1].view(np.uint16)
        nan = (want & 0x7C00) == 0x7C00
        nan &= (want & 0x3FF) != 0
        assert (got[~nan] == want[~nan]).all(), m
        assert ((got[nan] & 0x7E00) == 0x7E00).all(), m


# ---- bf16 and fp8 ------------------------------------------------------------------------------

def test_cvt_pk_bf16_f32_matches_ml_dtypes():
    rng = np.random.default_rng(13)
    for trial in range(20):
        a, b = mixed(rng), mixed(rng)
        # Exact bf16 midpoints and their neighbours.
        mid = ((rng.integers(0, 2 ** 16, 64).astype(np.uint32) << 16) | 0x8000).view(np.float32)
        if trial % 2:
            a = np.where(np.isfinite(mid), mid, a).astype(np.float32)
        w = wave()
        put(w, 2, a)
        put(w, 3, b)
        got = run(w, "v_cvt_pk_bf16_f32 v1, v2, -v3", 1)
        for part, src in ((got & 0xFFFF, a), (got >> 16, -b)):
            want = src.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
            nan = np.isnan(src)
            assert (part[ACTIVE & ~nan] == want[ACTIVE & ~nan]).all()
            p = part[ACTIVE & nan]
            assert (((p >> 7) & 0xFF) == 0xFF).all() and (p & 0x40).all()


@pytest.mark.parametrize("arch,dtype", [("gfx942", ml_dtypes.float8_e4m3fnuz), ("gfx950", ml_dtypes.float8_e4m3fn)])
def test_cvt_pk_f32_fp8_exhaustive(arch, dtype):
    all_bytes = np.arange(256, dtype=np.uint32)
    want = all_bytes.astype(np.uint8).view(dtype).astype(np.float32)
    for start in range(0, 256, 32):
        b0 = all_bytes[start:start + 32].repeat(2)
        b1 = np.roll(all_bytes, 77)[start:start + 32].repeat(2)
        w = wave(arch)
        put(w, 2, b0 | (b1 << 8) | (0xA5 << 16) | (0x3C << 24))
        w.v[34:36] = SENTINEL
        execute(w, "v_cvt_pk_f32_fp8_e32 v[34:35], v2")
        assert (w.v[34:36][:, ~ACTIVE] == SENTINEL).all()
        same_f32(w.v[34], want[b0])
        same_f32(w.v[35], want[b1])
        put(w, 3, 0x5A11 | (b0 << 16) | (b1 << 24))
        execute(w, "v_cvt_pk_f32_fp8_sdwa v[34:35], v3 src0_sel:WORD_1")
        same_f32(w.v[34], want[b0])
        same_f32(w.v[35], want[b1])
    # The codes whose meaning differs between the two formats.
    table = vfloat._FP8[arch == "gfx942"].view(np.float32)
    if arch == "gfx942":
        assert np.isnan(table[0x80]) and table[0x7F] == 240.0 and table[0x08] == 2.0 ** -7
    else:
        assert np.isnan(table[0x7F]) and np.isnan(table[0xFF]) and table[0x80].view(np.uint32) == 0x80000000
        assert table[0x7E] == 448.0


# ---- packed f32 --------------------------------------------------------------------------------

def _pk_reference(srcs, sel, sel_hi, neg_lo, neg_hi, fn):
    """(low, high) results of a packed f32 op from the source pairs, selects and negations."""
    def pick(i, s, neg):
        v = srcs[i][s].astype(np.float64)
        return -v if neg[i] else v
    n = len(srcs)
    lo = fn(*(pick(i, sel[i], neg_lo) for i in range(n)))
    hi = fn(*(pick(i, sel_hi[i], neg_hi) for i in range(n)))
    return lo, hi


@pytest.mark.parametrize("text,sel,sel_hi,neg_lo,neg_hi", [
    ("v_pk_mul_f32 v[50:51], v[60:61], v[70:71]", (0, 0), (1, 1), (0, 0), (0, 0)),
    ("v_pk_mul_f32 v[50:51], v[60:61], v[70:71] op_sel_hi:[1,0]", (0, 0), (1, 0), (0, 0), (0, 0)),
    ("v_pk_mul_f32 v[50:51], v[60:61], v[70:71] op_sel_hi:[0,1]", (0, 0), (0, 1), (0, 0), (0, 0)),
    ("v_pk_add_f32 v[50:51], v[60:61], v[70:71] op_sel:[1,0] neg_lo:[0,1] neg_hi:[0,1]",
     (1, 0), (1, 1), (0, 1), (0, 1)),
    ("v_pk_add_f32 v[50:51], v[60:61], v[70:71] op_sel_hi:[1,0] neg_lo:[0,1] neg_hi:[0,1]",
     (0, 0), (1, 0), (0, 1), (0, 1)),
    ("v_pk_fma_f32 v[50:51], v[60:61], v[70:71], v[80:81] op_sel_hi:[1,1,0] neg_lo:[0,0,1] neg_hi:[0,0,1]",
     (0, 0, 0), (1, 1, 0), (0, 0, 1), (0, 0, 1)),
    ("v_pk_fma_f32 v[50:51], v[60:61], v[70:71], v[80:81] op_sel:[0,0,1] neg_lo:[0,0,1] neg_hi:[0,0,1]",
     (0, 0, 1), (1, 1, 1), (0, 0, 1), (0, 0, 1)),
])
def test_packed_f32_selects_and_negations(text, sel, sel_hi, neg_lo, neg_hi):
    rng = np.random.default_rng(14)
    fma = "fma" in text
    regs = (60, 70, 80) if fma else (60, 70)
    for _trial in range(8):
        w = wave()
        srcs = []
        for r in regs:
            pair = np.stack([mixed(rng), mixed(rng)])
            w.v[r:r + 2] = pair.view(np.uint32)
            srcs.append(pair)
        w.v[50:52] = SENTINEL
        execute(w, text)
        assert (w.v[50:52][:, ~ACTIVE] == SENTINEL).all()
        if fma:
            lo_in = [srcs[i][sel[i]] * (-1 if neg_lo[i] else 1) for i in range(3)]
            hi_in = [srcs[i][sel_hi[i]] * (-1 if neg_hi[i] else 1) for i in range(3)]
            lo = fma_model(*[x.astype(np.float32) for x in lo_in])
            hi = fma_model(*[x.astype(np.float32) for x in hi_in])
        else:
            fn = (lambda a, b: a * b) if "mul" in text else (lambda a, b: a + b)
            with np.errstate(all="ignore"):
                lo, hi = _pk_reference(srcs, sel, sel_hi, neg_lo, neg_hi, fn)
            lo, hi = f64_round(lo), f64_round(hi)
        same_f32(w.v[50], lo)
        same_f32(w.v[51], hi)


def test_packed_add_of_inline_zero_reads_the_low_half_for_both_results():
    rng = np.random.default_rng(15)
    w = wave()
    pair = np.stack([mixed(rng), mixed(rng)])
    w.v[8:10] = pair.view(np.uint32)
    execute(w, "v_pk_add_f32 v[8:9], v[8:9], 0 op_sel_hi:[1,0]")
    same_f32(w.v[8], f64_round(pair[0].astype(np.float64) + 0.0))
    same_f32(w.v[9], f64_round(pair[1].astype(np.float64) + 0.0))


@pytest.mark.parametrize("text,order,reads", [
    # (result VGPRs in the order their statements run, the registers each reads)
    ("v_pk_mul_f32 v[4:5], v[4:5], s[2:3] op_sel_hi:[1,0]", (4, 5), ({"v4", "s2"}, {"v5", "s2"})),
    ("v_pk_mul_f32 v[4:5], s[2:3], v[6:7] op_sel:[1,0] op_sel_hi:[0,1]", (4, 5), ({"s3", "v6"}, {"s2", "v7"})),
    ("v_pk_mul_f32 v[2:3], v[2:3], v[4:5] op_sel_hi:[0,1]", (3, 2), ({"v2", "v4"}, {"v2", "v5"})),
    ("v_pk_add_f32 v[2:3], v[6:7], v[2:3] op_sel:[0,1]", (2, 3), ({"v6", "v3"}, {"v7", "v3"})),
    ("v_pk_add_f32 v[2:3], v[2:3], 1.0 op_sel_hi:[1,0]", (2, 3), ({"v2"}, {"v3"})),
    ("v_pk_fma_f32 v[2:3], v[4:5], v[6:7], v[8:9]", None, None),
    ("v_pk_mul_f32 v[2:3], v[2:3], v[4:5] op_sel:[1,0] op_sel_hi:[0,1]", None, None),
    ("v_pk_add_f32 v[2:3], v[4:5], v[6:7] neg_lo:[0,1] neg_hi:[0,1]", None, None),
    ("v_pk_mul_f32 v[2:3], v[4:5], v[6:7] clamp", None, None),
])
def test_a_packed_f32_inline_form_runs_no_result_statement_after_one_that_overwrote_its_source(text, order, reads):
    """``_pk_inline``: a statement per result VGPR, each calling the core's op on
    the registers the selects pick, the one whose result no other statement
    reads first; none where each result overwrites a source of the other,
    none with negations or ``clamp``, and none for the fma (left to the core)."""
    from nvfp4_suite.kernels.flydsl.sim.wave import decode_batched, inline_of

    ins = parse_instruction(text)
    assert (decode_batched(ins) is None) == ("clamp" in text)  # the handler clamps
    spec = inline_of(ins)
    if order is None:
        assert spec is None
        return
    parts = spec.parts()
    assert tuple(p.dest for p in parts) == order
    for p in parts:
        regs = {f"{t.reg[0]}{t.reg[1]}" for t in p.sources if t.reg is not None}
        assert regs == reads[p.dest - ins.ops[0].index]
        fn = {"mul": vfloat._MUL, "add": vfloat._ADD}[ins.base[5:8]]
        assert fn in p.namespace.values() and p.expr.startswith(next(k for k, v in p.namespace.items() if v is fn))
    for k, p in enumerate(parts):
        later = {t.reg for q in parts[k + 1:] for t in q.sources}
        assert ("v", p.dest) not in later


def test_any_nan_is_true_exactly_where_an_element_is_nan():
    """``_any_nan`` (a sum of squares) over arrays of every layout a core or a
    stretch gives it: NaNs of both kinds and signs anywhere are found; the
    values whose sum or squares would make a NaN or an infinity otherwise
    (+inf with -inf, squares beyond the float32 range, denormals) are not."""
    rng = np.random.default_rng(16)
    plain = np.array([np.inf, -np.inf, 3.4028235e38, -3.4028235e38, 1e30, 2.0 ** -149, -0.0, 0.0, 1.0, -2.5],
                     np.float32)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFA00001, 0x7FFFFFFF], np.uint32).view(np.float32)
    for shape in [(), (1, 1), (4, 64), (4, 2, 64), (3, 1, 1)]:
        for _trial in range(20):
            x = rng.choice(plain, shape).astype(np.float32)
            assert not vfloat._any_nan(x), (shape, x)
            if x.ndim == 3:
                assert not vfloat._any_nan(x[:, -1]) and not vfloat._any_nan(x.transpose(2, 0, 1))
            x = np.array(x)
            x.reshape(-1)[rng.integers(x.size)] = rng.choice(nans)
            assert vfloat._any_nan(x), shape
            if x.ndim == 3:
                assert vfloat._any_nan(x.transpose(2, 0, 1))


# ---- coverage of the compiled kernels ------------------------------------------------------------

_FAMILY = re.compile(r"^v_(cmp_\w+_f(16|32|64)|cvt_\w+|pack_b32_f16|pk_(add|mul|fma)_(f16|f32|bf16)"
                     r"|(add|sub|subrev|mul|fma|fmac|max|min|max3|min3|exp|rcp|div_scale|div_fmas|div_fixup)_f32)$")


def test_every_float_form_of_the_compiled_kernels_runs():
    """Each distinct float/conversion instruction text (registers renamed away)
    of every compiled kernel has a handler of this family and executes."""
    seen = {}
    for path in compiled_kernels():
        for ln in open(path):
            s = ln.strip()
            if not s.startswith("v_"):
                continue
            ins = parse_instruction(s)
            if _FAMILY.match(ins.base):
                seen.setdefault((ins.mnemonic, tuple(sorted(ins.mods))), (path, s))
    assert seen
    for (mnemonic, _), (path, text) in sorted(seen.items()):
        ins = parse_instruction(text)
        try:
            h = handler_for(ins)
        except UnknownInstruction:
            pytest.fail(f"no handler for {mnemonic} ({text}) from {path}")
        assert h.__module__ == vfloat.__name__, mnemonic
        w = wave("gfx942" if "gfx942" in path else "gfx950")
        execute(w, text)
    assert all(_FAMILY.match(n) for n in OPS if OPS[n].__module__ == vfloat.__name__)


def test_scalar_value_helpers_are_independent_of_struct_packing():
    """The fp16 test model agrees with CPython's own half packing where that is defined."""
    for v in (1.0, 65504.0, 2.0 ** -24, 3 * 2.0 ** -26, 0.1, -2.5, 65519.0):
        assert f16_encode(v) == struct.unpack("<H", struct.pack("<e", v))[0]


@pytest.mark.parametrize("text", ["v_cvt_pk_f16_f32 v1, v2, v3 clamp", "v_cvt_pk_bf16_f32 v1, v2, v3 clamp",
                                  "v_cvt_f16_f32_e64 v1, v2 clamp"])
def test_clamp_on_16_bit_results_is_refused_with_every_lane_on(text):
    """A full EXEC goes through the batched decoder first: it must not pass a
    form the handler refuses."""
    with pytest.raises(SimError, match="clamp"):
        execute(make_test_wave(), text)


@pytest.mark.parametrize("text", [
    "v_mul_f32_e64 v1, v1, s3", "v_add_f32_e32 v1, v2, v1", "v_sub_f32_e32 v1, s3, v1", "v_subrev_f32_e32 v1, v2, v1",
    "v_pk_mul_f32 v[4:5], v[4:5], s[2:3] op_sel_hi:[1,0]", "v_pk_add_f32 v[4:5], v[6:7], v[4:5]",
])
def test_a_nan_result_is_the_first_nan_operand_quieted_in_any_layout(text):
    """Every pair of NaN/number operands (signalling and quiet NaNs of both
    signs, and inf - inf or 0 * inf, which make numpy's default NaN): the
    handler on one wave and the core over consecutive, every-other and
    uneven rows give the first NaN operand with its quiet bit set (S0's,
    else S1's), whatever loop numpy picks for the layout."""
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave, decode_batched
    specials = np.array([0x7F800001, 0xFFA00001, 0x7FC00003, 0xFFC00000, 0x7F800000, 0xFF800000, 0, 0x3F800000],
                        np.uint32)
    pairs = np.stack(np.meshgrid(specials, specials, indexing="ij"), -1).reshape(-1, 2)  # 64: one per lane
    ins = parse_instruction(text)
    core, handler = decode_batched(ins), handler_for(ins)
    n = 6
    sfile = np.zeros((n, 129), np.uint32)
    vfile = np.zeros((n, 8, 64), np.uint32)
    sfile[:, 126:128] = 0xFFFFFFFF
    regs = ins.ops[1:]
    for k in range(n):
        lanes = np.roll(pairs, 7 * k, axis=0)  # each wave its own order; the SGPR a lane's S0 or S1 of wave k
        for j, o in enumerate(regs):
            vals = lanes[:, j]
            if o.kind == "v":
                vfile[k, o.index:o.index + o.count] = vals
            else:
                sfile[k, o.index:o.index + o.count] = vals[0]

    def expected(k):
        a = vfile[k, regs[0].index] if regs[0].kind == "v" else np.full(64, sfile[k, regs[0].index], np.uint32)
        b = vfile[k, regs[1].index] if regs[1].kind == "v" else np.full(64, sfile[k, regs[1].index], np.uint32)
        fa, fb = a.view(np.float32), b.view(np.float32)
        return np.where(fa != fa, a | 0x00400000, np.where(fb != fb, b | 0x00400000, 0))
    want = [expected(k) for k in range(n)]
    d = ins.ops[0].index
    group = make_test_wave().group
    with np.errstate(all="ignore"):
        s, v = sfile.copy(), vfile.copy()
        for k in range(n):
            handler(Wave(group, k, (s, v, k)), ins)
        results = [(v, range(n))]
        for rows in (list(range(n)), [0, 2, 4], [1, 3, 4, 5]):
            s, v = sfile.copy(), vfile.copy()
            core(BatchView(s, v, [Wave(group, k, (s, v, k)) for k in rows]))
            results.append((v, rows))
    made_any = False
    for v, rows in results:
        for k in rows:
            got, nan = v[k, d], want[k] != 0
            assert nan.any() and np.array_equal(got[nan], want[k][nan]), (text, rows, k)
            made = (got.view(np.float32) != got.view(np.float32)) & ~nan
            assert (got[made] == 0xFFC00000).all(), (text, rows, k)  # numpy's default NaN
            made_any |= bool(made.any())
    assert made_any  # inf - inf or 0 * inf came up
