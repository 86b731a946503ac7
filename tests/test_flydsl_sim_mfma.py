"""The simulator's bf16 MFMA instructions against an exact rational matrix
product of the same ml_dtypes bfloat16/float32 values, rounded once to fp32
by a nearest-candidate search (not by the simulator's rounding code)."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from nvfp4_suite.kernels.flydsl.sim.launch import execute, make_test_wave
from nvfp4_suite.kernels.flydsl.sim.ops.mfma import float64_sum_is_exact
from nvfp4_suite.kernels.flydsl.sim.wave import SimError

LANES = 64
BF16 = ml_dtypes.bfloat16
SHAPES = {16: ("gfx942", "v_mfma_f32_16x16x16_bf16"), 32: ("gfx950", "v_mfma_f32_16x16x32_bf16")}
F32_OVERFLOW = Fraction(2) ** 128 - Fraction(2) ** 103  # halfway between FLT_MAX and 2**128


def _bits16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, BF16).view(np.uint16).astype(np.uint32)


def _pack(mat: np.ndarray, k: int, transpose: bool) -> np.ndarray:
    """uint32 ``[k/8, 64]`` registers holding A (``[16, k]``) or, with ``transpose``,
    B (``[k, 16]``): lane l has row/column l % 16, k from (k/4)*(l//16), two per register."""
    kl = k // 4
    bits = _bits16(mat.T if transpose else mat)  # [16, k]: row i (A) or column j (B)
    regs = np.zeros((kl // 2, LANES), np.uint32)
    for lane in range(LANES):
        for e in range(kl):
            v = int(bits[lane % 16, kl * (lane // 16) + e])
            regs[e // 2, lane] |= v << (16 * (e % 2))
    return regs


def _d_from_regs(regs: np.ndarray) -> np.ndarray:
    """float32 ``[16, 16]`` from D's registers: register r of lane l is D[4*(l//16) + r][l % 16]."""
    d = np.zeros((16, 16), np.uint32)
    for lane in range(LANES):
        for r in range(4):
            d[4 * (lane // 16) + r, lane % 16] = regs[r, lane]
    return d.view(np.float32)


def _c_regs(c: np.ndarray) -> np.ndarray:
    regs = np.zeros((4, LANES), np.uint32)
    cb = np.asarray(c, np.float32).view(np.uint32)
    for lane in range(LANES):
        for r in range(4):
            regs[r, lane] = cb[4 * (lane // 16) + r, lane % 16]
    return regs


def _round_f32(q: Fraction) -> np.float32:
    """``q`` to the nearest float32 (ties to an even significand), by comparing exact
    distances to the float32 neighbours of float(q)."""
    if abs(q) >= F32_OVERFLOW:
        return np.float32(np.inf if q > 0 else -np.inf)
    guess = np.float32(float(q))
    cands = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    cands = [c for c in cands if np.isfinite(c)]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - q), int(c.view(np.uint32)) & 1))
    return np.float32(0.0) if q == 0 else best


def _reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact ``a @ b + c`` per element, IEEE specials by float64 arithmetic."""
    af, bf, cf = (np.asarray(x).astype(np.float64) for x in (a, b, c))
    out = np.zeros((16, 16), np.float32)
    with np.errstate(invalid="ignore"):
        _fill_reference(out, af, bf, cf)
    return out


def _fill_reference(out, af, bf, cf):
    """Each element of ``af @ bf + cf`` (float64 arrays of exact values) into ``out``."""
    for i in range(16):
        for j in range(16):
            terms = [af[i, k] * bf[k, j] for k in range(af.shape[1])] + [cf[i, j]]
            if not all(np.isfinite(terms)):
                out[i, j] = np.float32(sum(terms))
            elif all(t == 0 for t in terms):
                out[i, j] = np.float32(-0.0 if all(np.signbit(terms)) else 0.0)
            else:
                out[i, j] = _round_f32(sum((Fraction(t) for t in terms), Fraction(0)))


def _run(k, a, b, c=None, dst="v[156:159]", c_text=None):
    """Run the K-wide MFMA on packed A, B (and C unless a constant ``c_text``); D as float32 [16, 16]."""
    arch, name = SHAPES[k]
    w = make_test_wave(arch)
    w.v[:] = 0xDEADBEEF
    ra, rb = _pack(a, k, False), _pack(b, k, True)
    n = ra.shape[0]
    w.v[44:44 + n], w.v[300:300 + n] = ra, rb  # B in AGPRs a44..
    if c_text is None:
        w.v[160:164] = _c_regs(c)
        c_text = "v[160:163]"
    execute(w, f"{name} {dst}, v[44:{43 + n}], a[44:{43 + n}], {c_text}")
    first = int(dst[dst.index("[") + 1:dst.index(":")]) + (256 if dst.startswith("a") else 0)
    return _d_from_regs(w.v[first:first + 4])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    both_nan = np.isnan(got) & np.isnan(want)
    assert (got.view(np.uint32)[np.isnan(got)] == 0x7FC00000).all()
    mism = ~both_nan & (got.view(np.uint32) != want.view(np.uint32))
    assert not mism.any(), list(zip(np.argwhere(mism)[:5].tolist(), got[mism][:5], want[mism][:5]))


@pytest.mark.parametrize("k", [16, 32])
def test_mfma_operand_layout_one_hot(k):
    """A one-hot A[i][kk] and B[kk][j] put their product 1 at D[i][j] only,
    in register i % 4 of lane j + 16 * (i // 4)."""
    rng = np.random.default_rng(k)
    for i, j, kk in [(0, 0, 0), (15, 15, k - 1)] + [tuple(rng.integers(0, (16, 16, k))) for _ in range(12)]:
        a = np.zeros((16, k), BF16)
        b = np.zeros((k, 16), BF16)
        a[i, kk], b[kk, j] = 1, 1
        arch, name = SHAPES[k]
        w = make_test_wave(arch)
        n = k // 8
        w.v[44:44 + n], w.v[194:194 + n] = _pack(a, k, False), _pack(b, k, True)
        execute(w, f"{name} v[156:159], v[44:{43 + n}], v[194:{193 + n}], 0")
        regs = w.v[156:160].view(np.float32)
        assert regs[i % 4, j + 16 * (i // 4)] == 1.0
        assert np.count_nonzero(regs) == 1


@pytest.mark.parametrize("k", [16, 32])
@pytest.mark.parametrize("seed", range(3))
def test_mfma_equals_exact_product_rounded_once(k, seed):
    rng = np.random.default_rng(seed)
    scale = lambda shape: np.exp2(rng.integers(-20, 20, shape))  # noqa: E731  wide exponent spread
    a = (rng.standard_normal((16, k)) * scale((16, k))).astype(BF16)
    b = (rng.standard_normal((k, 16)) * scale((k, 16))).astype(BF16)
    c = (rng.standard_normal((16, 16)) * scale((16, 16))).astype(np.float32)
    _same(_run(k, a, b, c), _reference(a, b, c))
    _same(_run(k, a, b, c, dst="a[0:3]"), _reference(a, b, c))


@pytest.mark.parametrize("k", [16, 32])
def test_mfma_special_values_propagate(k):
    rng = np.random.default_rng(7)
    pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895e38, -3.3895e38, 1e-38, 9.2e-41, -9.2e-41,
                     1.0, -2.5, 65504.0], np.float32).astype(BF16)
    a = rng.choice(pool, (16, k))
    b = rng.choice(pool, (k, 16))
    a[:4] = 1.0  # some rows finite to see overflow and denormal results, not only NaN
    b[:, :4] = rng.standard_normal((k, 4)).astype(BF16)
    c = rng.choice(pool.astype(np.float32), (16, 16))
    _same(_run(k, a, b, c), _reference(a, b, c))


def test_mfma_signed_zero_sums():
    a = np.full((16, 16), -0.0, BF16)
    b = np.ones((16, 16), BF16)
    got = _run(16, a, b, np.full((16, 16), -0.0, np.float32))
    assert np.signbit(got).all() and (got == 0).all()
    got = _run(16, a, b, np.zeros((16, 16), np.float32))
    assert not np.signbit(got).any()
    a[0, 0], b[0, 0], a[0, 1] = 1, 3, -3  # 3 - 3 + 0: an exact zero from cancellation is +0
    got = _run(16, a, b, np.full((16, 16), -0.0, np.float32))
    assert got[0, 0] == 0 and not np.signbit(got[0, 0])


@pytest.mark.parametrize("tail,want", [
    (2.0 ** -80, 1 + 2.0 ** -23),   # just above the midpoint 1 + 2**-24: rounds up
    (-2.0 ** -80, 1.0),             # just below it: rounds down
    (0.0, 1.0),                     # exactly on it: ties to even
])
def test_mfma_rounds_the_exact_sum_once_near_a_midpoint(tail, want):
    """A float64 sum would lose the 2**-80 and then tie to 1.0: the exact sum does not."""
    a = np.zeros((16, 32), BF16)
    b = np.zeros((32, 16), BF16)
    a[0, 0], b[0, 0] = 2.0 ** -12, 2.0 ** -12
    a[0, 1], b[1, 0] = np.sign(tail) * 2.0 ** -40 if tail else 0, 2.0 ** -40
    c = np.zeros((16, 16), np.float32)
    c[0, 0] = 1.0
    got = _run(32, a, b, c)
    assert got[0, 0] == np.float32(want)


@pytest.mark.parametrize("k", [16, 32])
def test_mfma_exactness_shortcut_stops_one_bit_short(k):
    """1 + 2**-24 + 2**-53: float64 ties that sum to 1 + 2**-24, then float32
    ties it to 1.0, where the exact sum is past the midpoint (1 + 2**-23). The
    terms' lowest bits (2**-53) are one below what makes a sum under 2 exact
    in float64 (2**-52), so the shortcut that skips the exact sum must not
    take this element (one that ignored the products' lowest bits would;
    ``test_shown_exact_stops_at_its_thresholds`` pins the threshold)."""
    a = np.zeros((16, k), BF16)
    b = np.zeros((k, 16), BF16)
    a[0, 0], b[0, 0] = 2.0 ** -12, 2.0 ** -12
    a[0, 1], b[1, 0] = 2.0 ** -26, 2.0 ** -27
    c = np.zeros((16, 16), np.float32)
    c[0, 0] = 1.0
    assert _run(k, a, b, c)[0, 0] == np.float32(1 + 2.0 ** -23)


@pytest.mark.parametrize("k", [16, 32])
def test_mfma_exactness_shortcut_needs_c_above_its_threshold(k):
    """1 + 2**-24 - 2**-30 from products plus C = 2**-30 + 2**-53 is 1 + 2**-24 +
    2**-53, past the midpoint (1 + 2**-23), where float64 ties it back to the
    midpoint and float32 to 1.0. Every product is a multiple of 2**-30, far
    above what the shortcut needs of the products; C (its lowest bit
    2**-53) is below the 2**(top - 30) that shows a C a multiple of
    2**(top - 53), so the shortcut for all elements at once must not take it
    (one that ignored C would; ``test_shown_exact_stops_at_its_thresholds``
    pins the threshold). Every other C is 0, so this C is the smallest."""
    a = np.zeros((16, k), BF16)
    b = np.zeros((k, 16), BF16)
    a[0, :3] = 1.0, 2.0 ** -12, -2.0 ** -15
    b[:3, 0] = 1.0, 2.0 ** -12, 2.0 ** -15
    c = np.zeros((16, 16), np.float32)
    c[0, 0] = np.float32(2.0 ** -30 + 2.0 ** -53)
    assert c[0, 0] == 2.0 ** -30 + 2.0 ** -53
    assert _run(k, a, b, c)[0, 0] == np.float32(1 + 2.0 ** -23)


def test_mfma_keeps_denormals():
    a = np.zeros((16, 16), BF16)
    b = np.zeros((16, 16), BF16)
    a[0, 0] = np.uint16(1).view(BF16)  # the smallest bf16 subnormal, 2**-133
    b[0, 0] = 1
    a[1, 0], b[0, 1] = 2.0 ** -70, 2.0 ** -70  # 2**-140: an fp32 subnormal result
    got = _run(16, a, b, c_text="0")
    assert got[0, 0] == np.float32(2.0 ** -133) and got[1, 1] == np.float32(2.0 ** -140)


def test_mfma_constant_c_and_c_aliasing_d():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((16, 32)).astype(BF16)
    b = rng.standard_normal((32, 16)).astype(BF16)
    _same(_run(32, a, b, c_text="1.0"), _reference(a, b, np.ones((16, 16), np.float32)))
    c = rng.standard_normal((16, 16)).astype(np.float32)
    _same(_run(32, a, b, c, dst="v[160:163]"), _reference(a, b, c))  # D is C's registers


def test_mfma_refuses_broadcast_modifiers_partial_exec_and_wrong_target():
    w = make_test_wave("gfx942")
    execute(w, "v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], 0 cbsz:0 abid:0 blgp:0")
    for mod in ("cbsz:1", "abid:1", "blgp:2"):
        with pytest.raises(SimError, match=mod.split(":")[0]):
            execute(w, f"v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], 0 {mod}")
    with pytest.raises(SimError):
        execute(w, "v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], 0")
    w.s[127] = 0
    with pytest.raises(SimError, match="partial EXEC"):
        execute(w, "v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], 0")


def test_float64_sums_called_exact_are_exact():
    """The fast path's claim, checked in rational arithmetic on terms whose
    exponents spread from a few places to far more than 53."""
    rng = np.random.default_rng(11)
    claimed = 0
    for spread in (2, 10, 30, 60, 120):
        terms = rng.standard_normal((16, 16, 33)).astype(BF16).astype(np.float64) \
            * np.exp2(rng.integers(-spread, spread + 1, (16, 16, 33)))
        terms[rng.random(terms.shape) < 0.1] = 0.0
        abs_sum = np.abs(terms).sum(axis=2)
        exact = float64_sum_is_exact(terms, abs_sum)
        s = terms.sum(axis=2)
        for i, j in zip(*np.nonzero(exact)):
            assert Fraction(float(s[i, j])) == sum((Fraction(float(t)) for t in terms[i, j]), Fraction(0))
        claimed += int(exact.sum())
        if spread == 2:
            assert exact.all()
        if spread == 120:
            assert not exact.all()
    assert claimed > 256


def _hard_cases(k: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(A, B, C) of MFMAs that take every path of the rounding: wide exponent
    spreads, sums that tie exactly (bf16 products plus fp32 C with a full
    significand, as the kernel's accumulation makes them), sums a hair off a
    midpoint, IEEE specials, signed zeros, denormals."""
    rng = np.random.default_rng(k)
    cases = []
    spread = lambda shape, e: np.exp2(rng.integers(-e, e + 1, shape))  # noqa: E731
    a = (rng.standard_normal((16, k)) * spread((16, k), 30)).astype(BF16)
    b = (rng.standard_normal((k, 16)) * spread((k, 16), 30)).astype(BF16)
    cases.append((a, b, (rng.standard_normal((16, 16)) * spread((16, 16), 30)).astype(np.float32)))
    a = rng.integers(-8, 9, (16, k)).astype(BF16)
    b = (rng.integers(-8, 9, (k, 16)) / 4).astype(BF16)
    cases.append((a, b, rng.uniform(-64, 64, (16, 16)).astype(np.float32)))  # many exact ties
    a, b, c = np.zeros((16, k), BF16), np.zeros((k, 16), BF16), np.ones((16, 16), np.float32)
    a[:, 0], b[0, :] = 2.0 ** -12, 2.0 ** -12  # 1 + 2**-24: a midpoint
    a[:8, 1], b[1, :] = 2.0 ** -40, rng.choice([-1.0, 1.0], 16) * 2.0 ** -40  # a hair above or below it
    cases.append((a, b, c))
    pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895e38, -3.3895e38, 9.2e-41, -9.2e-41, 1.0, -2.5],
                    np.float32)
    a, b = rng.choice(pool, (16, k)).astype(BF16), rng.choice(pool, (k, 16)).astype(BF16)
    a[:6], b[:, :6] = 1.0, rng.standard_normal((k, 6)).astype(BF16)
    cases.append((a, b, rng.choice(pool, (16, 16))))
    a, b = np.full((16, k), -0.0, BF16), rng.choice([0.0, 1.0, -1.0], (k, 16)).astype(BF16)
    a[8:, 0] = 1.0
    cases.append((a, b, rng.choice(np.array([0.0, -0.0], np.float32), (16, 16))))
    a = (rng.standard_normal((16, k)) * 2.0 ** -70).astype(BF16)  # fp32 denormal results
    cases.append((a, (rng.standard_normal((k, 16)) * 2.0 ** -60).astype(BF16), np.zeros((16, 16), np.float32)))
    return cases


@pytest.mark.parametrize("k", [16, 32])
def test_mfma_batched_over_waves_equals_exact(k):
    """One core call over several waves (consecutive rows, every other row, and
    rows with uneven gaps as a launch gathers them) gives each wave the exact
    product rounded once."""
    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave, decode_batched

    arch, name = SHAPES[k]
    cases = _hard_cases(k)
    group = make_test_wave(arch).group
    n = len(cases)
    sfile, vfile = np.zeros((n, 129), np.uint32), np.zeros((n, 512, 64), np.uint32)
    waves = [Wave(group, i, (sfile, vfile, i)) for i in range(n)]
    regs = k // 8
    for w, (a, b, c) in zip(waves, cases):
        w.v[44:44 + regs], w.v[300:300 + regs], w.v[160:164] = _pack(a, k, False), _pack(b, k, True), _c_regs(c)
    core = decode_batched(parse_instruction(f"{name} v[156:159], v[44:{43 + regs}], a[44:{43 + regs}], v[160:163]"))
    want = [_reference(a, b, c) for a, b, c in cases]
    with np.errstate(all="ignore"):
        core(BatchView(sfile, vfile, waves))
    for w, ref in zip(waves, want):
        _same(_d_from_regs(w.v[156:160]), ref)
    # Every other row (a view of the files), then uneven gaps (gathered and scattered).
    for rows in ([0, 2, 4], [0, 1, 3]):
        vfile[:, 156:160] = 0
        with np.errstate(all="ignore"):
            core(BatchView(sfile, vfile, [waves[i] for i in rows]))
        for i, (w, ref) in enumerate(zip(waves, want)):
            if i in rows:
                _same(_d_from_regs(w.v[156:160]), ref)
            else:
                assert not w.v[156:160].any()


@pytest.mark.parametrize("text", ["v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], a[6:7], v[8:11]",
                                  "v_mfma_f32_16x16x16_bf16 a[0:3], v[4:5], v[6:7], 0",
                                  "v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]"])
def test_mfma_core_over_more_waves_than_a_chunk_matches_each_wave(text):
    """A launch's hundreds of waves go through the product in chunks: each wave's
    result is its own MFMA's (the handler's, one wave at a time)."""
    from sim_cores import assert_core_matches_handler

    assert_core_matches_handler(text, "gfx950" if "x32" in text else "gfx942", n=70)


# ---- bounds and groups ------------------------------------------------------------------------

def _lsb_exponent(x: float) -> int:
    """The exponent of the lowest set bit of a finite nonzero float (x = odd * 2**e)."""
    num, den = abs(Fraction(x)).as_integer_ratio()
    return (num & -num).bit_length() - 1 - (den.bit_length() - 1)


def test_extremes_bound_every_bf16_values_lowest_bit_and_every_sum_of_magnitudes():
    """Exhaustive over the bf16 patterns as A's values (B all 1 + 2**-7, 8
    significant bits, then the pattern as B's): ``low`` is at most the lowest
    set bit of every product (found by exact rational arithmetic), reached
    where the value has 8 significant bits too, and ``big`` is k max|A|
    max|B|. On mixed values, ``low`` is at most every product's lowest bit
    and ``big`` at least every element's exact sum of magnitudes."""
    from nvfp4_suite.kernels.flydsl.sim.ops.mfma import _extremes

    k = 16
    other = 0x3F81  # 1 + 2**-7
    tight = 0
    for p in range(1 << 16):
        v = float(np.uint16(p).view(BF16))
        if not np.isfinite(v) or v == 0:
            continue
        prod = v * (1 + 2.0 ** -7)  # exact in float64
        for a_half, b_half in ((p, other), (other, p)):
            ab = np.empty((1, k, 32), np.uint16)
            ab[..., :16], ab[..., 16:] = a_half, b_half
            low, big = _extremes(ab.reshape(1, -1), k)
            assert low <= _lsb_exponent(prod), hex(p)
            assert big == k * abs(prod)
        tight += low == _lsb_exponent(prod)
    # Tight where the last significand bit is set: 254 normal exponents and the
    # subnormals, 64 significands each, both signs.
    assert tight == 2 * 254 * 64 + 2 * 64
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = (rng.standard_normal((16, k)) * np.exp2(rng.integers(-40, 40, (16, k)))).astype(BF16)
        b = (rng.standard_normal((k, 16)) * np.exp2(rng.integers(-40, 40, (k, 16)))).astype(BF16)
        a[rng.random(a.shape) < 0.2] = 0
        ab = np.concatenate([a.T, b], axis=1).view(np.uint16).reshape(1, -1)
        low, big = _extremes(ab, k)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        prods = [af[i, kk] * bf[kk, j] for i in range(16) for j in range(16) for kk in range(k)]
        assert low <= min(_lsb_exponent(x) for x in prods if x != 0)
        assert big >= max(sum(abs(Fraction(float(af[i, kk] * bf[kk, j]))) for kk in range(k))
                          for i in range(16) for j in range(16))


def test_shown_exact_stops_at_its_thresholds():
    """``_shown_exact``'s two thresholds, each at and one bit past: products'
    lowest bit ``low >= top - 53``, and every nonzero C at least ``2**(top -
    30)`` (here ``most`` is below 2, top 1); a non-finite ``most`` fails.
    Where ``low`` (from the magnitudes) falls short, the values' own lowest
    bits decide: ``AB``'s are 2**-54 (short), ``ONES``' 2**0."""
    from nvfp4_suite.kernels.flydsl.sim.ops.mfma import _shown_exact

    AB = np.full((1, 16 * 32), np.uint16(np.float32(2.0 ** -27).view(np.uint32) >> 16))
    ONES = np.full((1, 16 * 32), np.uint16(0x3F80))
    assert _shown_exact(-60, 1.5, np.zeros((1, 16, 16), np.uint32), ONES, 16)
    assert not _shown_exact(-60, 1.5, np.zeros((1, 16, 16), np.uint32), AB, 16)
    c = np.zeros((1, 16, 16), np.float32)
    c[0, 3, 4] = 2.0 ** -29
    bits = c.view(np.uint32)
    assert _shown_exact(-52, 1.5, bits, AB, 16) and not _shown_exact(-53, 1.5, bits, AB, 16)
    c[0, 3, 4] = np.nextafter(np.float32(2.0 ** -29), np.float32(0))
    assert not _shown_exact(-52, 1.5, bits, AB, 16)
    c[0, 3, 4] = -0.0  # zeros of either sign are multiples of anything
    assert _shown_exact(-52, 1.5, bits, AB, 16)
    assert not _shown_exact(-52, float("inf"), bits, AB, 16) and not _shown_exact(-52, float("nan"), bits, AB, 16)


def _group_reference(cases, parents):
    """Each MFMA's exact product rounded once (``_reference``), in order, C the
    given one's or the parent's result: float32 ``[m, 16, 16]``."""
    out = []
    given = iter(c for (_, _, c), p in zip(cases, parents) if p is None)
    for (a, b, _), p in zip(cases, parents):
        out.append(_reference(a, b, next(given) if p is None else out[p]))
    return np.stack(out)


def _ab(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``mfma_group_f32_bf16``'s ``[32 k]`` bits of A, B: row kk is A's column kk, then B's row kk."""
    return np.concatenate([np.asarray(a, BF16).T, np.asarray(b, BF16)], axis=1).view(np.uint16).reshape(-1)


@pytest.mark.parametrize("k", [16, 32])
@pytest.mark.parametrize("parents", [(None, 0, 1, 2), (None, None, 0, 1, 2, 3), (None, None, None),
                                     (None, 0, None, 2, 1)], ids=["chain", "two-chains", "independent", "mixed"])
@pytest.mark.parametrize("values", ["kernel", "hard"])
def test_a_group_of_mfmas_equals_each_exact_product_rounded_once_in_order(k, parents, values, monkeypatch):
    """``mfma_group_f32_bf16`` over two waves: each MFMA's result is its exact
    product plus its C (given, or its parent's result) rounded once. Values
    as the kernel's (bf16 within a few binades, fp32 C), which the shortcut for
    all at once takes, and the hard cases (ties, specials, signed zeros,
    spreads), which it must not (each MFMA then goes its own way)."""
    from nvfp4_suite.kernels.flydsl.sim.ops import mfma

    m = len(parents)
    rng = np.random.default_rng(m * k)
    waves = []
    for w in range(2):
        if values == "hard":
            hard = _hard_cases(k)
            cases = [hard[(w + j) % len(hard)] for j in range(m)]
        else:
            # Magnitudes within a few binades (no tiny values, whose low bits the
            # shortcut cannot cover), both signs.
            def mags(shape, lo, hi, dtype):
                return (rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(lo, hi, shape))).astype(dtype)
            cases = [(mags((16, k), -2, 2, BF16), mags((k, 16), -2, 2, BF16), mags((16, 16), -4, 4, np.float32))
                     for _ in range(m)]
        waves.append(cases)
    ab = np.stack([np.stack([_ab(a, b) for a, b, _ in cases]) for cases in waves])
    c = np.stack([np.stack([np.asarray(cc, np.float32) for (_, _, cc), p in zip(cases, parents) if p is None])
                  for cases in waves]).view(np.uint32)
    calls = []
    accumulate = mfma._accumulate
    monkeypatch.setattr(mfma, "_accumulate", lambda *a: calls.append(1) or accumulate(*a))
    with np.errstate(all="ignore"):
        got = mfma.mfma_group_f32_bf16(ab, k, c, parents)
        want = [_group_reference(cases, parents) for cases in waves]
    for w in range(2):
        for j in range(m):
            _same(got[w, j], want[w][j])
    assert bool(calls) == (values == "hard")  # the shortcut for all at once, or not


@pytest.mark.parametrize("k", [16, 32])
def test_a_group_keeps_signed_zeros_however_the_matrix_product_sums_zeros(k, monkeypatch):
    """A BLAS that starts its sums at +0 gives +0 where every product is -0
    (numpy's here happens not to). Two chains of two MFMAs, each second one's
    products all -0, so its result is -0 exactly where its C is:
    - C given -0 (in half the elements) and the first one's products all -0
      but in row 0 (so the sums' bound is not small);
    - C given +0 and the first one's products a tiny negative, whose sum
      rounds to -0 (below 2**-150).
    The shortcut for all at once must not take either (a -0 given; every
    sum below 2**-96), though each passes its other tests: with such a BLAS
    the float64 additions would give +0."""
    from nvfp4_suite.kernels.flydsl.sim.ops import mfma

    products = mfma._products

    def plus_zero_start(ab, k):
        amat, bmat, s = products(ab, k)
        return amat, bmat, 0.0 + s  # -0 + +0 is +0 (IEEE, round to nearest)
    monkeypatch.setattr(mfma, "_products", plus_zero_start)
    ones, neg0, tiny = np.ones((k, 16), BF16), np.full((16, k), -0.0, BF16), np.full((k, 16), 2.0 ** -80, BF16)
    row0 = neg0.copy()
    row0[0] = 1.0
    c_neg = np.where(np.arange(256).reshape(16, 16) % 2 == 0, -0.0, 0.0).astype(np.float32)
    for first, c, b2 in (((row0, ones), c_neg, ones), ((-tiny.T, tiny), np.zeros((16, 16), np.float32), tiny)):
        cases = [(first[0], first[1], c), (neg0, b2, None)]
        ab = np.stack([_ab(a, b) for a, b, _ in cases])[None]
        got = mfma.mfma_group_f32_bf16(ab, k, c.view(np.uint32)[None, None], (None, 0))
        want = _group_reference(cases, (None, 0))
        assert np.signbit(want[1]).any()
        for j in range(2):
            _same(got[0, j], want[j])


def test_a_chains_shortcut_bounds_its_sums_by_all_of_its_mfmas():
    """A chain of three whose third sum, 32 + 2**-19 + 2**-48, float64 ties down
    to the fp32 midpoint 32 + 2**-19 (and fp32 to 32), where the exact sum
    rounds up to 32 + 2**-18. Its terms' lowest bits (2**-48) would do for
    sums below 32, the bound one MFMA's operands give (16 max|A| max|B| =
    16): the shortcut for all at once must bound the chain's sums by all
    three (48), and so not take it."""
    from nvfp4_suite.kernels.flydsl.sim.ops import mfma

    k = 16
    ones_a, ones_b = np.zeros((16, k), BF16), np.zeros((k, 16), BF16)
    ones_a[0], ones_b[:, 0] = 1.0, 1.0  # element [0, 0]: 16
    a, b = np.zeros((16, k), BF16), np.zeros((k, 16), BF16)
    a[0, :3] = 2.0 ** -10, (1 + 2.0 ** -7) * 2.0 ** -17, -(1 + 2.0 ** -6) * 2.0 ** -17
    b[:3, 0] = 2.0 ** -9, (1 + 2.0 ** -7) * 2.0 ** -17, 2.0 ** -17  # 2**-19 + 2**-48
    c = np.zeros((16, 16), np.float32)
    cases = [(ones_a, ones_b, c), (ones_a, ones_b, None), (a, b, None)]
    got = mfma.mfma_group_f32_bf16(np.stack([_ab(x, y) for x, y, _ in cases])[None], k,
                                   c.view(np.uint32)[None, None], (None, 0, 1))
    want = _group_reference(cases, (None, 0, 1))
    assert want[2][0, 0] == np.float32(32 + 2.0 ** -18)
    for j in range(3):
        _same(got[0, j], want[j])


@pytest.mark.parametrize("k", [16, 32])
def test_a_chain_that_overflows_carries_the_infinity_on(k, monkeypatch):
    """2**64 * 2**64 = 2**128 rounds to +inf (and its negative to -inf); the next
    MFMA adds the opposite 2**128 to it, and IEEE keeps the infinity. Every
    term is a multiple of 2**128, so the shortcut for all at once takes the
    chain (no MFMA goes its own way), and its float64 additions give the
    model's results."""
    from nvfp4_suite.kernels.flydsl.sim.ops import mfma

    calls = []
    accumulate = mfma._accumulate
    monkeypatch.setattr(mfma, "_accumulate", lambda *a: calls.append(1) or accumulate(*a))
    cases = []
    for sign in (1.0, -1.0):
        a, b = np.zeros((16, k), BF16), np.zeros((k, 16), BF16)
        a[0, 0], a[1, 0], b[0, 0], b[0, 1] = 2.0 ** 64, 2.0 ** 64, sign * 2.0 ** 64, -sign * 2.0 ** 64
        cases.append((a, b, np.zeros((16, 16), np.float32) if sign > 0 else None))
    got = mfma.mfma_group_f32_bf16(np.stack([_ab(x, y) for x, y, _ in cases])[None], k,
                                   np.zeros((1, 1, 16, 16), np.uint32), (None, 0))
    want = _group_reference(cases, (None, 0))
    assert want[1][0, 0] == np.inf and want[1][1, 1] == -np.inf
    for j in range(2):
        _same(got[0, j], want[j])
    assert not calls


def _group_texts(k: int) -> dict[str, list[str]]:
    """Groups of MFMAs ``_parents`` takes, as a stretch holds them: a chain with
    a constant C first and a last D elsewhere; two interleaved chains; PV's
    independent ones (one B, C their own D); a mix whose last D holds the
    first one's A (read before it is written)."""
    r = k // 8
    name = SHAPES[k][1]

    def mf(d, a, b, c):
        return f"{name} v[{d}:{d + 3}], v[{a}:{a + r - 1}], v[{b}:{b + r - 1}], " + \
            (c if isinstance(c, str) else f"v[{c}:{c + 3}]")
    return {
        "chain": [mf(0, 100, 200, "0"), mf(0, 108, 208, 0), mf(0, 116, 216, 0), mf(4, 124, 224, 0)],
        "interleaved": [mf(0, 100, 200, "0"), mf(4, 108, 208, "1.0"), mf(0, 116, 216, 0), mf(4, 124, 224, 4),
                        mf(8, 132, 232, 4)],
        "pv": [mf(d, 100 + 8 * j, 200, d) for j, d in enumerate(range(0, 32, 4))],
        "mixed": [mf(0, 100, 200, 40), mf(4, 108, 208, 44), mf(0, 116, 216, 0), mf(100, 124, 224, 4)],
    }


@pytest.mark.parametrize("k", [16, 32])
@pytest.mark.parametrize("shape", ["chain", "interleaved", "pv", "mixed"])
@pytest.mark.parametrize("values", ["kernel", "hard"])
def test_a_group_core_leaves_every_register_its_members_cores_leave_one_after_another(k, shape, values):
    """The core of a group (``wave.grouped``) over waves in consecutive rows,
    every other row, uneven rows and more waves than a chunk holds, against
    the members' own cores run one after another (each shown exact above),
    on the kernel's kind of values and on the hard bit patterns."""
    from sim_cores import registers

    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave, decode_batched, grouping_of

    arch = SHAPES[k][0]
    instrs = tuple(parse_instruction(t) for t in _group_texts(k)[shape])
    grouping = grouping_of(instrs[0])
    assert grouping is not None
    for j in range(1, len(instrs)):
        assert grouping.fits(instrs[:j], instrs[j])
    group_core, cores = grouping.make(instrs), [decode_batched(ins) for ins in instrs]
    group = make_test_wave(arch).group
    rng = np.random.default_rng(k)
    n = 70
    sfile, vfile = registers(rng, n)
    if values == "kernel":
        # bf16 pairs of a few binades, both signs (no specials, no tiny values).
        sign = np.uint32(0x8000) * rng.integers(0, 2, vfile.shape, dtype=np.uint32)
        vfile[:] = ((rng.integers(0x3C00, 0x4100, vfile.shape, dtype=np.uint32) | sign) << 16) \
            | rng.integers(0x3C00, 0x4100, vfile.shape, dtype=np.uint32)
    for rows in (list(range(n)), list(range(0, 9, 2)), [0, 1, 5]):
        got_s, got_v, want_s, want_v = sfile.copy(), vfile.copy(), sfile.copy(), vfile.copy()
        with np.errstate(all="ignore"):
            for core in cores:
                core(BatchView(want_s, want_v, [Wave(group, i, (want_s, want_v, i)) for i in rows]))
            group_core(BatchView(got_s, got_v, [Wave(group, i, (got_s, got_v, i)) for i in rows]))
        assert np.array_equal(got_v, want_v), (shape, rows, np.argwhere(got_v != want_v)[:4].tolist())
        assert np.array_equal(got_s, want_s)


@pytest.mark.parametrize("texts,why", [
    (["v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], 0", "v_mfma_f32_16x16x16_bf16 v[8:11], v[2:3], v[6:7], 0"],
     "as A or B"),
    (["v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], 0", "v_mfma_f32_16x16x16_bf16 v[8:11], v[12:13], v[0:1], 0"],
     "as A or B"),
    (["v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], 0",
      "v_mfma_f32_16x16x16_bf16 v[8:11], v[12:13], v[14:15], v[2:5]"], "part of"),
    (["v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[6:7], 0", "v_mfma_f32_16x16x16_bf16 v[2:5], v[12:13], v[14:15], 0",
      "v_mfma_f32_16x16x16_bf16 v[8:11], v[12:13], v[14:15], v[0:3]"], "part of"),
])
def test_a_group_is_refused_where_an_mfma_reads_an_earlier_ones_result_but_as_its_whole_c(texts, why):
    """An MFMA that reads an earlier member's D as A or B, or a part of its C
    that an earlier one wrote (its last writer's D not all of it), does not
    fit the group, and a group holding it is refused."""
    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import grouping_of

    instrs = tuple(parse_instruction(t) for t in texts)
    grouping = grouping_of(instrs[0])
    assert all(grouping.fits(instrs[:j], instrs[j]) for j in range(1, len(instrs) - 1))
    assert not grouping.fits(instrs[:-1], instrs[-1])
    with pytest.raises(SimError, match=why):
        grouping.make(instrs)
