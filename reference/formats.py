"""Pure-numpy codecs for the number formats of the NVFP4 cache.

E2M1 (fp4 codes), OCP E4M3FN (fp8 block scales), its gfx942 reading E4M3FNUZ,
and bfloat16 rounding. Every encoder rounds to nearest, ties to even, by
comparing the input (widened exactly to float64) with the exact midpoints
between neighbouring representable values; nothing here multiplies by a
reciprocal, because that moves values that sit exactly on a tie.
"""

from __future__ import annotations

import numpy as np

E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)
E2M1_MAX = 6.0
E4M3_MAX = 448.0

# Between magnitude i and i+1; a value equal to one of these is a tie.
_E2M1_MIDPOINTS = (E2M1_MAGNITUDES[:-1] + E2M1_MAGNITUDES[1:]) / 2


def _e4m3fn_table() -> np.ndarray:
    b = np.arange(256, dtype=np.int64)
    sign = np.where(b >> 7, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = b & 0x7
    mag = np.where(exp == 0, man * 2.0**-9, (1.0 + man / 8.0) * np.exp2(exp - 7.0))
    val = sign * mag
    val[(exp == 15) & (man == 7)] = np.nan
    return val.astype(np.float32)


E4M3FN_TABLE = _e4m3fn_table()
E4M3FN_TABLE.setflags(write=False)
# Bytes 0x00..0x7E in order are the non-negative finite values, increasing.
_E4M3_POSITIVE = E4M3FN_TABLE[:0x7F].astype(np.float64)
_E4M3_MIDPOINTS = (_E4M3_POSITIVE[:-1] + _E4M3_POSITIVE[1:]) / 2


def _round_to_grid(mag: np.ndarray, midpoints: np.ndarray) -> np.ndarray:
    """Index of the nearest grid value for non-negative ``mag``, ties to the even index.

    The grids here (E2M1 magnitudes, E4M3 bytes) put the even mantissa on even
    indices, so "even index" is IEEE's ties-to-even. Values past the last
    midpoint get the last index: saturation.
    """
    lo = np.searchsorted(midpoints, mag, side="left")
    tie = np.searchsorted(midpoints, mag, side="right") != lo
    return (lo + (tie & (lo % 2 == 1))).astype(np.uint8)


def _as_float64(x, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{what}: expected a real numeric array, got dtype {a.dtype}")
    a = a.astype(np.float64)
    bad = np.argwhere(np.isnan(a))
    if bad.size:
        idx = tuple(int(i) for i in bad[0])
        raise ValueError(f"{what}: input{list(idx)} is NaN; NaN has no encoding")
    return a


def e2m1_decode(codes) -> np.ndarray:
    """Decode E2M1 codes.

    codes: uint8 array of any shape; only the low 4 bits are read
    (``sign << 3 | magnitude index``). Returns float32 of the same shape;
    code 8 decodes to -0.0.
    """
    c = np.asarray(codes).astype(np.uint8) & 0xF
    mag = E2M1_MAGNITUDES.astype(np.float32)[c & 0x7]
    return np.where(c & 0x8, -mag, mag).astype(np.float32)


def e2m1_encode(x) -> np.ndarray:
    """Encode real values as E2M1 codes.

    x: float array of any shape (float32 or float64). Returns uint8 codes
    (0..15) of the same shape: nearest magnitude, ties to even, saturating at
    +-6 (infinities too); the sign bit follows the input's sign bit, so -0.0
    and negative values that round to zero give code 8. NaN raises ValueError.
    """
    a = _as_float64(x, "e2m1_encode")
    code = _round_to_grid(np.abs(a), _E2M1_MIDPOINTS)
    return np.where(np.signbit(a), code | 0x8, code).astype(np.uint8)


def e4m3fn_decode(b) -> np.ndarray:
    """Decode OCP E4M3FN bytes.

    b: uint8 array of any shape. Returns float32: bias 7, subnormals
    ``m * 2**-9``, 0x80 is -0.0, 0x7F and 0xFF are NaN, no infinities.
    """
    return E4M3FN_TABLE[np.asarray(b).astype(np.uint8)]


def e4m3fn_encode(x) -> np.ndarray:
    """Encode real values as OCP E4M3FN bytes.

    x: float array of any shape. Returns uint8 of the same shape: nearest,
    ties to even. Magnitudes above 448 (infinities included) saturate to
    +-448, which is what the hardware's saturating convert does (the format
    has no infinity, and a plain cast would give NaN). NaN encodes as 0x7F.
    -0.0 encodes as 0x80.
    """
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"e4m3fn_encode: expected a real numeric array, got dtype {a.dtype}")
    a = a.astype(np.float64)
    nan = np.isnan(a)
    code = _round_to_grid(np.abs(np.where(nan, 0.0, a)), _E4M3_MIDPOINTS)
    code = np.where(np.signbit(a), code | 0x80, code)
    return np.where(nan, np.uint8(0x7F), code).astype(np.uint8)


def e4m3fnuz_decode(b) -> np.ndarray:
    """Decode bytes as E4M3FNUZ, the reading of gfx942's fp8 converter.

    b: uint8 array of any shape. Returns float32: bias 8 (so an OCP E4M3FN
    byte reads as half its value), 0x80 is NaN, 0x7F is 240 and 0xFF -240.
    Kept to model the pitfall a kernel must correct on gfx942.
    """
    u = np.asarray(b).astype(np.uint8)
    exp = (u.astype(np.int64) >> 3) & 0xF
    man = u.astype(np.int64) & 0x7
    mag = np.where(exp == 0, man * 2.0**-10, (1.0 + man / 8.0) * np.exp2(exp - 8.0))
    val = np.where(u & 0x80, -mag, mag)
    val = np.where(u == 0x80, np.nan, val)
    return val.astype(np.float32)


def bf16_round(x) -> np.ndarray:
    """Round to bfloat16, nearest even, in one rounding; returned as float32.

    x: float32 or float64 array of any shape. float64 input is rounded
    directly (not through float32, which would round twice). Subnormals are
    rounded on bfloat16's subnormal grid (2**-133); values at or beyond the
    midpoint above the largest bfloat16 become infinities; NaN stays NaN.
    """
    a = np.asarray(x)
    if a.dtype == np.float32:
        r = bf16_rne_bits(a.view(np.uint32).astype(np.int64)).astype(np.uint32).view(np.float32)
        return np.where(np.isnan(a), a, r)
    with np.errstate(invalid="ignore"):
        a = a.astype(np.float64)
    finite = np.isfinite(a)
    safe = np.where(finite, a, 0.0)
    _, e = np.frexp(safe)
    # frexp gives |a| = m * 2**e with m in [0.5, 1): the leading bit is 2**(e-1)
    # and bfloat16 keeps 7 bits below it; below 2**-126 the grid stops shrinking.
    quantum = np.exp2(np.maximum(e - 1, -126) - 7.0)
    # a / quantum is exact (power-of-two scaling) and np.round is half-to-even.
    r = np.round(safe / quantum) * quantum
    with np.errstate(over="ignore"):
        out = np.where(finite, r, a).astype(np.float32)
    return out


def bf16_rne_bits(u):
    """float32 bit patterns -> those of their nearest-even bf16 value (NaN patterns
    are not kept: callers keep NaN). u: int64 array in ``[0, 2**32)``, numpy's or
    any library's (only ``+ & >>`` on it); returns the same kind.

    Integer round-to-nearest-even on the bit pattern: the carry into the
    exponent gives the right power of two or infinity, and the float32
    subnormal bits are bf16's subnormal grid. The one home of this trick for
    the references (numpy and, through ``nvfp4_suite.reference.arrays``,
    torch); Triton's kernel spells it in its own language.
    """
    return (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000


def bf16_bits(x) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of ``bf16_round(x)``; same shape as x."""
    return (bf16_round(x).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16_bits(bits) -> np.ndarray:
    """Float32 values of bfloat16 bit patterns. bits: uint16 array, any shape."""
    b = np.asarray(bits).astype(np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def is_bf16(x) -> np.ndarray:
    """Boolean mask, same shape as x: True where x (as float32) has a bfloat16 bit pattern."""
    a = np.asarray(x, dtype=np.float32)
    return (a.view(np.uint32) & 0xFFFF) == 0


def bf16_ulp(x, xp=np):
    """One bf16 ulp at ``|x|``: float64 array, same shape; 2**-133 (the
    subnormal step) below 2**-126 and at zero. ``xp``: the array library of
    ``x`` (numpy, or torch for the torch reference; the text is the same)."""
    a = xp.abs(xp.asarray(x, dtype=xp.float64))
    _, e = xp.frexp(a)
    return xp.where(a < 2.0**-126, 2.0**-133, xp.ldexp(xp.ones_like(a), e - 8))
