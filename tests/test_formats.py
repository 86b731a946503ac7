"""nvfp4_suite.reference.formats against ml_dtypes: exhaustive on small domains, ties and
their neighbours, random values, and (``-m thorough``) every float32 pattern."""

import ml_dtypes
import numpy as np
import pytest

from nvfp4_suite.reference import formats as F
from nvfp4_suite.reference.paged_cache import quantize_nvfp4, unpack_e2m1

RNG_SEED = 20261202


def _same(a, b):
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    return np.array_equal(a.view(np.uint32), b.view(np.uint32)) or (
        np.array_equal(np.isnan(a), np.isnan(b))
        and np.array_equal(a[~np.isnan(a)].view(np.uint32), b[~np.isnan(b)].view(np.uint32))
    )


def _ml_e2m1(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF


def _ml_e4m3(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def _neighbours(x):
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore"):
        return np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])


# --- E2M1 -----------------------------------------------------------------

def test_e2m1_decode_every_code_matches_ml_dtypes():
    codes = np.arange(16, dtype=np.uint8)
    want = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    assert _same(F.e2m1_decode(codes), want)


def test_e2m1_decode_reads_low_nibble_only():
    codes = np.arange(256, dtype=np.uint8)
    assert _same(F.e2m1_decode(codes), F.e2m1_decode(codes & 0xF))


def test_e2m1_encode_roundtrips_every_code():
    codes = np.arange(16, dtype=np.uint8)
    assert np.array_equal(F.e2m1_encode(F.e2m1_decode(codes)), codes)


def test_e2m1_encode_ties_go_to_even_codes():
    # Midpoint -> the neighbour with the even magnitude index, worked out by hand.
    ties = {0.25: 0, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5.0: 6}
    x = np.array(list(ties), np.float32)
    want = np.array(list(ties.values()), np.uint8)
    assert np.array_equal(F.e2m1_encode(x), want)
    assert np.array_equal(F.e2m1_encode(-x), want | 0x8)
    assert np.array_equal(_ml_e2m1(x), want)


def test_e2m1_encode_matches_ml_dtypes_on_ties_and_neighbours():
    mids = (F.E2M1_MAGNITUDES[:-1] + F.E2M1_MAGNITUDES[1:]) / 2
    pts = np.concatenate([mids, F.E2M1_MAGNITUDES, [0.0, 1e-30, 1.4e-45, 6.5, 7.0, 1e30]])
    x = _neighbours(np.concatenate([pts, -pts]))
    assert np.array_equal(F.e2m1_encode(x), _ml_e2m1(x))


def test_e2m1_encode_matches_ml_dtypes_on_random_values():
    rng = np.random.default_rng(RNG_SEED)
    x = np.concatenate([
        rng.uniform(-7, 7, 500_000),
        rng.standard_normal(300_000) * 10.0 ** rng.integers(-3, 3, 300_000),
        rng.uniform(-7, 7, 200_000).astype(np.float16),
    ]).astype(np.float32)
    assert np.array_equal(F.e2m1_encode(x), _ml_e2m1(x))


def test_e2m1_encode_saturates_at_six():
    x = np.array([6.0, 6.5, 100.0, np.inf, -np.inf, -1e9], np.float32)
    assert np.array_equal(F.e2m1_encode(x), [7, 7, 7, 7, 15, 15])


def test_e2m1_encode_float64_input_rounds_once():
    # 2.5 + 2**-40 is above the tie: float64 says 3.0, a float32 detour says 2.0.
    assert F.e2m1_encode(np.float64(2.5 + 2.0**-40)) == 5


def test_e2m1_encode_rejects_nan_naming_index():
    with pytest.raises(ValueError, match=r"input\[1\] is NaN"):
        F.e2m1_encode(np.array([1.0, np.nan]))


# --- E4M3FN / FNUZ ----------------------------------------------------------

def test_e4m3fn_decode_every_byte_matches_ml_dtypes():
    b = np.arange(256, dtype=np.uint8)
    want = b.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert _same(F.e4m3fn_decode(b), want)


def test_e4m3fn_decode_special_bytes():
    d = F.e4m3fn_decode(np.array([0x7F, 0xFF, 0x80, 0x7E, 0x01, 0x08], np.uint8))
    assert np.isnan(d[0]) and np.isnan(d[1])
    assert d[2] == 0 and np.signbit(d[2])
    assert d[3] == 448.0 and d[4] == 2.0**-9 and d[5] == 2.0**-6


def test_e4m3fnuz_decode_every_byte_matches_ml_dtypes():
    b = np.arange(256, dtype=np.uint8)
    want = b.view(ml_dtypes.float8_e4m3fnuz).astype(np.float32)
    assert _same(F.e4m3fnuz_decode(b), want)


def test_e4m3fnuz_reads_every_ordinary_fn_byte_as_half():
    b = np.array([x for x in range(256) if x not in (0x00, 0x7F, 0x80, 0xFF)], np.uint8)
    assert np.array_equal(F.e4m3fnuz_decode(b) * 2, F.e4m3fn_decode(b))
    assert F.e4m3fnuz_decode(np.uint8(0x7F)) == 240.0
    assert np.isnan(F.e4m3fnuz_decode(np.uint8(0x80)))


def test_e4m3fn_encode_roundtrips_every_finite_byte():
    b = np.array([x for x in range(256) if x & 0x7F != 0x7F], np.uint8)
    assert np.array_equal(F.e4m3fn_encode(F.e4m3fn_decode(b)), b)


def test_e4m3fn_encode_matches_ml_dtypes_on_ties_neighbours_subnormals():
    pos = F.e4m3fn_decode(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)
    mids = (pos[:-1] + pos[1:]) / 2
    sub = np.arange(8) * 2.0**-9
    pts = np.concatenate([pos, mids, sub, sub / 2, [2.0**-10, 1e-30, 0.0]])
    x = _neighbours(np.concatenate([pts, -pts]))
    assert np.array_equal(F.e4m3fn_encode(x), _ml_e4m3(x))


def test_e4m3fn_encode_matches_ml_dtypes_on_random_values():
    rng = np.random.default_rng(RNG_SEED + 1)
    x = np.concatenate([
        rng.uniform(-460, 460, 400_000),
        rng.standard_normal(600_000) * 2.0 ** rng.integers(-12, 8, 600_000),
    ]).astype(np.float32)
    # ml_dtypes makes NaN of |x| >= 464 where we saturate (tested separately).
    x = x[np.abs(x) < 464]
    assert len(x) > 990_000
    assert np.array_equal(F.e4m3fn_encode(x), _ml_e4m3(x))


def test_e4m3fn_encode_saturates_and_maps_nan():
    x = np.array([464.0, 1e6, np.inf, -500.0, -np.inf, np.nan], np.float32)
    assert np.array_equal(F.e4m3fn_encode(x), [0x7E, 0x7E, 0x7E, 0xFE, 0xFE, 0x7F])
    assert F.e4m3fn_encode(np.float32(-0.0)) == 0x80


# --- bfloat16 ---------------------------------------------------------------

def test_bf16_round_keeps_every_bf16_pattern():
    bits = np.arange(2**16, dtype=np.uint16)
    vals = F.from_bf16_bits(bits)
    assert _same(F.bf16_round(vals), vals)
    fin = np.isfinite(vals)
    assert np.array_equal(F.bf16_bits(vals)[fin], bits[fin])


def test_bf16_round_matches_ml_dtypes_on_float32_ties_and_random():
    rng = np.random.default_rng(RNG_SEED + 2)
    bits = np.arange(2**16, dtype=np.uint32) << 16
    ties = (bits | 0x8000).view(np.float32)
    rand = rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([_neighbours(ties), rand])
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert _same(F.bf16_round(x), want)


def test_bf16_round_float64_is_one_rounding():
    # 1 + 2**-8 is the tie between 1 and 1 + 2**-7; a hair above it must go up,
    # though a float32 detour lands exactly on the tie and goes to even (down).
    x = np.float64(1.0 + 2.0**-8 + 2.0**-40)
    assert F.bf16_round(x) == np.float32(1.0 + 2.0**-7)
    assert F.bf16_round(np.float32(x)) == np.float32(1.0)


def test_bf16_round_overflow_and_subnormals():
    big = F.from_bf16_bits(np.uint16(0x7F7F)).astype(np.float64)
    ulp = 2.0 ** (127 - 7)
    assert F.bf16_round(big + ulp / 2) == np.inf
    assert F.bf16_round(big + ulp / 2 - ulp / 8) == np.float32(big)
    assert F.bf16_round(np.float64(2.0**-133 * 1.5)) == np.float32(2.0**-132)
    assert F.bf16_round(np.float64(2.0**-134)) == 0.0


# --- The tie tests must catch a reciprocal-multiply quantiser ----------------

def _recip_quantize(x, g):
    """A cache writer that multiplies by 1/(sf*g) instead of dividing: a known bug."""
    a = np.asarray(x, np.float32)
    grp = a.reshape(a.shape[:-1] + (8, 16))
    sf = F.e4m3fn_encode(np.max(np.abs(grp), -1) / (np.float32(6) * np.float32(g)))
    inv = (np.float32(1) / (F.e4m3fn_decode(sf) * np.float32(g)))[..., None]
    codes = F.e2m1_encode((grp * inv).astype(np.float32)).reshape(a.shape)
    return codes


def _tie_groups():
    """Groups whose elements sit exactly on E2M1 ties after the division.

    Returns (x [n, 128] float32, g, expected codes [n, 128]). Each group has its
    amax first so that the scale is fixed; ties are kept only where
    ``float32(x / denom)`` is exactly the tie, i.e. a correct divider sees a tie.
    """
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    want_tie = np.array([0, 2, 2, 4, 4, 6, 6], np.uint8)
    g = np.float32(0.1)
    xs, wants = [], []
    for amax in np.linspace(0.01, 40, 4001, dtype=np.float32):
        sf = F.e4m3fn_encode(amax / (np.float32(6) * g))
        denom = np.float32(F.e4m3fn_decode(sf) * g)
        if denom == 0:
            continue
        cand = (ties * denom).astype(np.float32)
        ok = ((cand / denom).astype(np.float32) == ties) & (cand <= amax)
        if not ok.any():
            continue
        row = np.zeros(16, np.float32)
        want = np.zeros(16, np.uint8)
        row[0] = amax
        want[0] = F.e2m1_encode(amax / denom)
        row[1 : 1 + ok.sum()] = cand[ok]
        want[1 : 1 + ok.sum()] = want_tie[ok]
        xs.append(np.tile(row, 8))
        wants.append(np.tile(want, 8))
    return np.array(xs), g, np.array(wants)


def test_quantize_nvfp4_rounds_exact_ties_to_even():
    x, g, want = _tie_groups()
    assert len(x) > 100
    data, _ = quantize_nvfp4(x, g)
    assert np.array_equal(unpack_e2m1(data), want)


def test_tie_check_catches_reciprocal_multiply_quantiser():
    x, g, want = _tie_groups()
    wrong = (_recip_quantize(x, g) != want).any(axis=-1)
    assert wrong.sum() > 0, "the reciprocal quantiser passed the tie check: the check is too weak"


# --- Every float32 bit pattern (hand runs: pytest -m thorough) ---------------

@pytest.mark.thorough
def test_every_float32_pattern_encodes_like_ml_dtypes():
    chunk = 2**24
    for start in range(0, 2**32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
        x = x[~np.isnan(x)]
        assert _same(F.bf16_round(x), x.astype(ml_dtypes.bfloat16).astype(np.float32)), hex(start)
        assert np.array_equal(F.e2m1_encode(x), _ml_e2m1(x)), hex(start)
        rng = np.abs(x) < 464
        assert np.array_equal(F.e4m3fn_encode(x[rng]), _ml_e4m3(x[rng])), hex(start)
        assert np.all((F.e4m3fn_encode(x[~rng]) & 0x7F) == 0x7E), hex(start)
