"""Matrix fused multiply-add: ``v_mfma_f32_16x16x16_bf16`` (gfx942's ``_1k``
form) and ``v_mfma_f32_16x16x32_bf16`` (gfx950), ``D = A * B + C`` with A
16xK, B Kx16 in bf16 and C, D 16x16 in fp32.

Operand layout (CDNA3/CDNA4 ISA, AMD's matrix instruction calculator): with
``KL = K / 4`` bf16 values per lane, packed two per register (the lower
index in the low half), lane ``l`` holds ``A[l % 16][KL*(l//16) + e]`` and
``B[KL*(l//16) + e][l % 16]`` as its element ``e``; register ``r`` of C and
D in lane ``l`` is element ``[4*(l//16) + r][l % 16]``. A and B may be
VGPRs or AGPRs, C a 4-register tuple or a constant (every element the
constant's fp32 value), D four VGPRs or AGPRs.

Summation model: every element is ``sum_k A[i,k]*B[k,j] + C[i,j]`` computed
exactly and rounded once to fp32 (round to nearest even, denormal inputs
and results kept, overflow to infinity). Products of bf16 are exact in
float64, and the float64 sum has a known error bound: where the bound's
interval rounds to one fp32 value (the usual case) that is the answer; an
element whose interval could round to two fp32 values is summed again
exactly (``math.fsum``, unless its float64 sum is provably exact). Hardware adds in its own order and
precision, so it may differ from this by fp32 rounding noise (an ulp or so
where the sum cancels or lies near a rounding midpoint). An exactly zero
sum is -0 only when every term is -0 (hardware's sign of zero may differ).
NaN or infinite terms follow IEEE (inf - inf and inf * 0 give NaN); every
NaN result is the canonical quiet NaN 0x7FC00000, whatever the payloads of
the inputs (hardware's payload may differ).

Modifiers: ``cbsz``, ``abid`` and ``blgp`` (broadcast controls) must be 0,
and no ``neg``/``abs`` is accepted; anything else raises SimError. EXEC:
an MFMA works on the whole wave's registers at once, and the simulator has
not been able to confirm from the ISA what a partial EXEC does to it, so it
refuses one (SimError) instead of guessing; the kernel issues its MFMAs
with every lane enabled.

Groups: a fused stretch runs several MFMAs as one (``_Group``, after
``_parents``' rules): MFMAs that name no other's result, and chains whose C
is an earlier one's whole D (the kernel's accumulations over K and its PV
products). Each is computed exactly as alone (``mfma_group_f32_bf16``);
only the number of numpy calls changes.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..program import Instr
from ..wave import LANES, Core, SimError, Wave, batched, grouped, op

_ALL_LANES = (1 << LANES) - 1
_QNAN = np.uint32(0x7FC00000)
_U = 2.0 ** -53


def _bf16_lsb_table() -> np.ndarray:
    """int16 ``[65536]``: per bf16 bit pattern, the exponent of its lowest set
    bit (the value is an odd multiple of ``2**that``), ``_NO_LSB`` for zeros,
    infinities and NaNs."""
    bits = np.arange(1 << 16, dtype=np.int64)
    exp, man = (bits >> 7) & 0xFF, bits & 0x7F
    sig = np.where(exp > 0, man | 0x80, man)  # value = sig * 2**(max(exp, 1) - 134)
    ctz = np.log2(np.maximum(sig & -sig, 1)).astype(np.int64)  # exact: a power of two
    return np.where((sig == 0) | (exp == 0xFF), _NO_LSB, np.maximum(exp, 1) - 134 + ctz).astype(np.int16)


_NO_LSB = 10000  # above any lowest-bit exponent; the sum of two still fits int16
_BF16_LSB = _bf16_lsb_table()
# float64 [65536]: every bf16 bit pattern's value (exact; a few of them, the
# largest magnitudes, are looked up per MFMA group).
with np.errstate(invalid="ignore"):
    _BF16_F64 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
_MAG32 = np.uint32(0x7FFFFFFF)
_NEG_ZERO = np.uint32(0x80000000)


def round_sum_to_f32(terms: list[float]) -> np.float32:
    """The exact sum of finite float64 ``terms`` rounded once to fp32 (nearest,
    ties to even, subnormals kept, overflow to infinity); an exact 0 gives +0.

    ``math.fsum`` gives the exact sum rounded once to float64. Every fp32
    rounding boundary (a midpoint between neighbouring fp32 values, 2**128 -
    2**103 for overflow) is a float64, and rounding is monotone, so that sum
    lies on the same side of every boundary as the exact one, and rounds to
    the same fp32 value, unless it is a boundary itself: then the sign of the
    exact remainder (``fsum`` again, whose rounding keeps a sign) decides."""
    s = math.fsum(terms)
    if s == 0:
        return np.float32(0.0)
    f = np.float32(s)
    if np.float32(np.nextafter(s, -np.inf)) == np.float32(np.nextafter(s, np.inf)):
        return f  # not a boundary: both sides round to f
    rest = math.fsum(terms + [-s])
    if rest == 0:
        return f  # a tie: np.float32 rounds it to even
    return np.float32(np.nextafter(s, np.inf if rest > 0 else -np.inf))


def float64_sum_is_exact(terms: np.ndarray, abs_sum: np.ndarray) -> np.ndarray:
    """bool ``terms.shape[:-1]`` (``terms``: float64, the terms of each element on
    the last axis; ``abs_sum`` float64, the sums of their magnitudes computed in
    float64 in any order, shaped as the result): float64 sums the element's
    terms exactly, in any order (False for an element with a non-finite term).

    With ``abs_sum < 2**top``: where every term is a multiple of ``2**(top -
    53)`` (``fmod``, which is exact, says so), the true sum of magnitudes is
    below ``2**top`` too (a float64 sum of non-negative multiples of
    ``2**(top - 53)`` is exact until it reaches ``2**top``, a float64, and
    rounding is monotone beyond), so every partial sum of the terms is a
    multiple of ``2**(top - 53)`` below ``2**top`` in magnitude: a float64,
    exact."""
    _, top = np.frexp(abs_sum)
    unit = np.ldexp(1.0, top - 53)
    with np.errstate(invalid="ignore"):
        return (np.fmod(terms, unit[..., None]) == 0).all(axis=-1)


def mfma_group_f32_bf16(ab: np.ndarray, k: int, c: np.ndarray, parents: tuple[int | None, ...]) -> np.ndarray:
    """float32 ``[n, m, 16, 16]``: for each of ``n`` waves, ``m`` MFMAs ``A @ B +
    C`` of depth ``k`` where MFMA ``j``'s C is the result of MFMA
    ``parents[j]`` (an earlier one) or, where that is None, the next of
    ``c`` (uint32 ``[n or 1, r, 16, 16]``, any strides: the ``r`` such Cs in
    order, fp32 bit patterns), each element rounded once, every NaN the
    canonical 0x7FC00000. ``ab``: uint16 ``[n, m, 32 k]``, each MFMA's
    ``[k, 32]`` bf16 bit patterns, flattened: row ``kk`` holds column ``kk``
    of A (``A[0..15, kk]``) then row ``kk`` of B (``B[kk, 0..15]``). A's
    rows, C's and the result's are in the same order, whichever it is.

    Every product is formed in one matrix product; the accumulations, which
    round each result, run level by level (a level: the MFMAs whose parents
    are all in earlier levels), each as one float64 addition and a rounding
    where every sum is shown exact at once, else as ``_accumulate`` computes
    the level's MFMAs.

    The test for all at once, with ``low`` and ``big`` all the MFMAs'
    ``_extremes``: every product is a multiple of ``2**low``. Where every C
    of ``c`` is a multiple of ``2**unit``, ``unit <= low``, so is every
    result: the exact sum of such multiples, rounded to fp32, is itself
    where fp32's spacing there is below ``2**unit`` and a multiple of that
    spacing otherwise. A rounding grows a magnitude by at most ``2**-24`` of
    it, so every element's sum of magnitudes, at every MFMA (at most ``m``
    deep), is below ``most = (max|c| + m big) * (1 + (m + 2) 2**-23)`` (the
    last factor covers the float64 roundings of this too): with ``unit``
    its ``top - 53``, ``_shown_exact``'s argument holds for every MFMA. A
    result that overflows to an infinity is the model's too, and so is the
    infinity a later MFMA adds it to its finite products (IEEE). From
    ``2**-96`` on, ``top - 53 >= -149``, so no nonzero sum rounds to a zero.
    An exact zero sum is -0 only where every term is -0, so where no element
    of ``c`` is -0 no result is, and IEEE's float64 sums give +0 there too
    (+0 for an exact cancellation, and for -0 plus +0)."""
    n, m = ab.shape[:2]
    amat, bmat, s = _products(ab.reshape(n * m, 32 * k), k)
    amat, bmat, s = amat.reshape(n, m, 16, k), bmat.reshape(n, m, k, 16), s.reshape(n, m, 16, 16)
    low, big = _extremes(ab, k)
    out = np.empty((n, m, 16, 16), np.float32)
    levels = _levels(parents)
    most = (m * big + _largest(c)) * (1 + (m + 2) * 2.0 ** -23)
    if most >= 2.0 ** -96 and not (c == _NEG_ZERO).any() and _shown_exact(low, most, c, ab, k):
        with np.errstate(over="ignore"):  # an overflow to infinity is the model's (above)
            for mine, theirs in levels:
                out[:, mine] = s[:, mine] + (c.view(np.float32) if theirs is None else out[:, theirs])
        return out
    for mine, theirs in levels:
        # The level's MFMAs as n * len(mine) independent ones.
        cs = c if theirs is None else out[:, theirs].view(np.uint32)
        w = len(range(m)[mine]) if isinstance(mine, slice) else len(mine)
        sub = ab[:, mine].reshape(n * w, 32 * k)
        out[:, mine] = _accumulate(sub, k, amat[:, mine].reshape(n * w, 16, k), bmat[:, mine].reshape(n * w, k, 16),
                                   s[:, mine].reshape(n * w, 16, 16),
                                   np.broadcast_to(cs, (n, w, 16, 16)).reshape(n * w, 16, 16),
                                   *_extremes(sub, k)).reshape(n, w, 16, 16)
    return out


@functools.lru_cache(maxsize=None)
def _levels(parents: tuple[int | None, ...]) -> list[tuple]:
    """``mfma_group_f32_bf16``'s levels in order, each ``(mine, theirs)``: its
    MFMAs and their parents' (a slice where consecutive, else a list), or
    ``theirs`` None for the first level, the MFMAs whose C is given."""
    depth: list[int] = []
    for p in parents:
        depth.append(0 if p is None else depth[p] + 1)
    out = []
    for d in range(max(depth) + 1):
        mine = [j for j, dj in enumerate(depth) if dj == d]
        theirs = [p for p in (parents[j] for j in mine) if p is not None]  # all of them, from level 1 on
        out.append((_registers(mine), None if d == 0 else _registers(theirs)))
    return out


def _products(ab: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, sums)`` of ``n`` MFMAs (``ab``: uint16 ``[n, 32 k]``, rows as in
    ``mfma_group_f32_bf16``): A float64 ``[n, 16, k]`` and B ``[n, k, 16]``, their
    values (a transposed view of one gather, as BLAS takes it, and a view),
    and ``sums`` float64 ``[n, 16, 16]``, the float64 sums of each
    element's products."""
    n = ab.shape[0]
    # Widened to fp32 bit patterns and converted, exactly (NaNs may lose their
    # payloads: every NaN result is the canonical one). A gather from a table of
    # the 65536 values cost twice as much over a group's MFMAs, and missed the
    # caches between them.
    words = np.empty((n, k, 32), np.uint32)
    np.left_shift(ab.reshape(n, k, 32), 16, out=words, dtype=np.uint32)
    with np.errstate(invalid="ignore", over="ignore"):
        vals = words.view(np.float32).astype(np.float64)
        amat, bmat = vals[..., :16].swapaxes(1, 2), vals[..., 16:]
        return amat, bmat, amat @ bmat


def _extremes(ab: np.ndarray, k: int) -> tuple[int, float]:
    """``(low, big)`` of MFMAs of depth ``k`` (``ab``: uint16 ``[..., 32 k]``,
    ``mfma_group_f32_bf16``'s rows): a lower bound on the exponent of every
    product's lowest set bit, and ``k max|A| max|B|``, an upper bound on
    every element's sum of products' magnitudes (infinite or NaN where a
    value is). A bf16 of exponent field ``e`` is a multiple of ``2**(max(e, 1)
    - 134)`` (8 significant bits), a bound that grows with the magnitude,
    so the smallest nonzero magnitudes of A and of B give ``low`` (all of A
    or of B zero: a bound above any). Each reduction runs first across the
    MFMAs, element-wise (numpy's fast case), then over one MFMA's values."""
    x = ab.reshape(-1, 32 * k) & np.uint16(0x7FFF)
    top = np.maximum.reduce(np.maximum.reduce(x, axis=0).reshape(k, 32), axis=0).tolist()
    x -= np.uint16(1)  # a zero wraps to 0xFFFF: the smallest nonzero magnitude, less 1
    least = np.minimum.reduce(np.minimum.reduce(x, axis=0).reshape(k, 32), axis=0).tolist()
    low = sum(max((min(half) + 1) >> 7, 1) - 134 for half in (least[:16], least[16:]))
    return low, k * float(_BF16_F64[max(top[:16])]) * float(_BF16_F64[max(top[16:])])


def _largest(c: np.ndarray) -> float:
    """The largest magnitude of the fp32 bit patterns ``c`` (NaN where one is a
    NaN: bit patterns order magnitudes as their values, NaNs above)."""
    return float(np.array(np.maximum.reduce(c & _MAG32, axis=None), np.uint32).view(np.float32))


def _shown_exact(low: int, most: float, c: np.ndarray, ab: np.ndarray, k: int) -> bool:
    """Whether every element of MFMAs whose products are multiples of
    ``2**low``, whose sums of magnitudes are below ``most`` (float64) and
    whose C are the fp32 bit patterns ``c`` has an exact float64 sum (a
    sufficient condition). With ``top`` the exponent of ``most`` (all below
    ``2**top``; a non-finite one fails the test, and with it no term is
    infinite or NaN): where ``low >= top - 53`` and every nonzero C is at
    least ``2**(top - 30)`` in magnitude (so a multiple of ``2**(top -
    53)``, ``_c_fits``' argument), every term of every element is a
    multiple of ``2**(top - 53)``, and ``float64_sum_is_exact``'s argument
    applies to each element. Where ``low`` (``_extremes``', from the
    magnitudes) falls short, the products' actual lowest bits (``_lowest``
    of the MFMAs' ``ab``, uint16 ``[..., 32 k]``) may still reach it."""
    if not most < math.inf:
        return False
    unit = math.frexp(most)[1] - 53
    # C's smallest nonzero magnitude (bit patterns order them as their values;
    # a zero less 1 wraps to 2**32 - 1) against 2**(top - 30) as an fp32 bit
    # pattern, 0 where that is below the normal range.
    least = int(np.minimum.reduce((c & _MAG32) - np.uint32(1), axis=None)) + 1
    if least < max(unit + 23 + 127, 0) << 23:
        return False
    return low >= unit or _lowest(ab, k) >= unit


def _lowest(ab: np.ndarray, k: int) -> int:
    """The exponent of the lowest set bit of any of A's values plus that of any
    of B's over MFMAs of depth ``k`` (``ab``: uint16 ``[..., 32 k]``, as in
    ``mfma_group_f32_bf16``): a lower bound on every product's, above ``_extremes``'
    where the values have fewer than 8 significant bits (``_NO_LSB`` counts
    where A's or B's are all zero, infinite or NaN)."""
    lsb = np.minimum.reduce(_BF16_LSB.take(ab.reshape(-1, 32 * k), mode="clip"), axis=0)
    least = np.minimum.reduce(lsb.reshape(k, 32), axis=0).tolist()
    return min(least[:16]) + min(least[16:])


def _accumulate(ab: np.ndarray, k: int, amat: np.ndarray, bmat: np.ndarray, s: np.ndarray, c: np.ndarray,
                low: int, big: float) -> np.ndarray:
    """float32 ``[n, 16, 16]``: the results of ``n`` independent MFMAs (``ab``:
    uint16 ``[n, 32 k]``, rows as ``mfma_group_f32_bf16``'s) from their
    products (``_products``: ``amat``, ``bmat`` and the sums ``s``, which
    this adds C to in place), their C ``c`` (uint32 ``[n or 1, 16, 16]``)
    and ``_extremes``' ``low`` and ``big`` of ``ab``.

    Where every term of an element is a multiple of ``2**(top - 53)``,
    ``sum|terms| < 2**top``, the float64 sum is exact
    (``float64_sum_is_exact``'s argument) and rounding it is the answer. The
    usual case (the kernel's) is shown for all ``n`` MFMAs at once with one
    ``top``, from the largest magnitudes of A, B and C (``_shown_exact``);
    otherwise element by element, from the sums of magnitudes (a second
    matrix product), the lowest set bits of A's rows and B's columns (a
    product's is the sum of its factors') and C's size (``_c_fits``).
    Elsewhere the float64 sum (any order) is within ``bound = 2 (k + 1) u
    sum|terms|`` of the exact sum; where that interval rounds to one fp32
    value (almost always) that value is the answer. The test rounds ``s -/+
    2 bound``: the float64 rounding of those (at most ``u (|s| + 2 bound)``,
    below ``bound``) keeps them outside the interval, so the test is
    conservative. An element whose interval may hold an fp32 rounding
    boundary is shown exact by its own terms' lowest set bits, or else
    summed again exactly (``round_sum_to_f32``, unless
    ``float64_sum_is_exact`` shows the float64 sum already is). So the
    result does not depend on the order numpy's matrix product adds in."""
    with np.errstate(invalid="ignore", over="ignore"):
        cval = c.view(np.float32)
        s += cval
        out = s.astype(np.float32)
        # An exactly zero sum is -0 only when every term is: C's element -0 and
        # every product too. IEEE's float64 sum is right elsewhere (+0 for -0 plus
        # +0 and for an exact cancellation); where C is -0, it depends on how the
        # matrix product summed its zeros.
        neg = c == _NEG_ZERO
        if neg.any():
            neg = neg & (s == 0)
            if neg.any():
                nn, ii, jj = np.nonzero(neg)
                out[nn, ii, jj] = np.where(np.signbit(amat[nn, ii] * bmat[nn, :, jj]).all(axis=1),
                                           np.float32(-0.0), np.float32(0.0))
        if _shown_exact(low, big + _largest(c), c, ab, k):
            return out
        cmag = c & _MAG32
        abs_sum = np.abs(amat) @ np.abs(bmat)
        abs_sum += cmag.view(np.float32)
        _refine(out, ab, k, amat, bmat, s, abs_sum, cval.astype(np.float64))
    low_out = np.minimum.reduce(out, axis=None)  # NaN if any element is
    if low_out != low_out:
        out.view(np.uint32)[out != out] = _QNAN
    return out


def _refine(out: np.ndarray, ab: np.ndarray, k: int, amat: np.ndarray, bmat: np.ndarray, s: np.ndarray,
            abs_sum: np.ndarray, cval: np.ndarray) -> None:
    """``_accumulate``'s elements not shown exact at once, element by element
    (its docstring): ``out`` (float32 ``[n, 16, 16]``, the float64 sums
    rounded) corrected in place where the float64 sum ``s`` may round
    otherwise than the exact sum. ``amat`` float64 ``[n, 16, k]``, ``bmat``
    ``[n, k, 16]``, ``abs_sum`` as ``s`` (float64 ``[n, 16, 16]``), ``cval``
    float64 ``[n or 1, 16, 16]``."""
    n = ab.shape[0]
    cabs = np.abs(cval)
    # A's rows, then B's columns: [n, 32] (a minimum across rows of k, which
    # numpy does element-wise, several times faster than along rows).
    lows = np.minimum.reduce(_BF16_LSB.take(ab).reshape(n, k, 32), axis=1)
    # frexp's exponent less 53 (the exponent field less 1022 + 53) for the
    # positive normal sums; a zero or non-finite sum is not refined below,
    # so what this gives it does not matter.
    top = (abs_sum.view(np.int64) >> 52) - 1075
    exact = (lows[:, :16, None] + lows[:, None, 16:] >= top) & _c_fits(cabs, abs_sum)
    if exact.all():
        return
    wide = abs_sum * (4.0 * (k + 1) * _U)
    doubt = (s - wide).astype(np.float32).view(np.uint32) != (s + wide).astype(np.float32).view(np.uint32)
    doubt &= ~exact
    if not doubt.any():
        return
    # The elements in doubt, flat (e = 16 i + j), without the non-finite and zero sums.
    nn, e = np.nonzero(doubt.reshape(n, 256))
    sums_e = abs_sum.reshape(n, 256)[nn, e]
    keep = np.isfinite(sums_e) & (sums_e != 0)
    if not keep.all():
        nn, e, sums_e = nn[keep], e[keep], sums_e[keep]
    c_e = cval.reshape(-1, 256)[nn if cval.shape[0] > 1 else 0, e]
    c_e_abs = np.abs(c_e)
    # As above, each product's own lowest set bit (A's row i and B's column j
    # of each element gathered, [m, 2k]).
    lsb = _BF16_LSB.take(ab[nn[:, None], _FACTORS[k][e]])
    _, top = np.frexp(sums_e)
    exact = ((lsb[:, :k] + lsb[:, k:]).min(axis=1) >= top - 53) & _c_fits(c_e_abs, sums_e)
    if exact.all():
        return
    nn, ii, jj = nn[~exact], e[~exact] >> 4, e[~exact] & 15
    terms = np.concatenate([amat[nn, ii] * bmat[nn, :, jj], c_e[~exact, None]], axis=1)
    d = ~float64_sum_is_exact(terms, sums_e[~exact])
    for m, i, j, t in zip(nn[d], ii[d], jj[d], terms[d].tolist()):
        out[m, i, j] = round_sum_to_f32(t)


def _c_fits(cabs: np.ndarray, abs_sum: np.ndarray) -> np.ndarray:
    """bool: whether fp32 values of magnitude ``cabs`` (float64) are shown to
    be multiples of ``2**(top - 53)``, ``2**(top - 1) <= abs_sum < 2**top``
    (a sufficient condition): zero, or at least ``abs_sum * 2**-29``, so at
    least ``2**(top - 30)``. A normal fp32 is a multiple of its leading
    bit's ``2**-23``, so of ``2**(top - 53)``; a subnormal one of
    ``2**-149``, and it is below ``2**-126``, so ``top - 53 < -149``."""
    return (cabs == 0) | (cabs >= abs_sum * 2.0 ** -29)


def _factors(k: int) -> np.ndarray:
    """intp ``[256, 2k]``: for element ``16 i + j`` of an MFMA of depth ``k``, the
    positions in ``_accumulate``'s ``ab`` row of its factors, A's row i then B's
    column j."""
    i, j, kk = np.arange(16)[:, None, None], np.arange(16)[None, :, None], np.arange(k)
    return np.concatenate(np.broadcast_arrays(32 * kk + i, 32 * kk + 16 + j), axis=2).reshape(256, 2 * k)


_FACTORS = {16: _factors(16), 32: _factors(32)}


def _checked(ins: Instr, k: int) -> tuple:
    """``(D, A, B, C)`` of an MFMA of depth ``k``; SimError for a modifier or
    operand form not modelled."""
    dec = ins.__dict__.get("_mfma")
    if dec is None:
        bad = [m for m, v in ins.mods.items() if m not in ("cbsz", "abid", "blgp") or v != 0]
        if bad:
            raise SimError(f"{ins.mnemonic}: modifier {', '.join(bad)} not supported at {ins.where()}")
        if len(ins.ops) != 4 or any(o.neg or o.abs or o.sext for o in ins.ops):
            raise SimError(f"{ins.mnemonic}: expected D, A, B, C without modifiers at {ins.where()}")
        d, a, b, c = ins.ops
        regs = k // 8
        if d.kind != "v" or d.count != 4 or any(o.kind != "v" or o.count != regs for o in (a, b)) \
                or not (c.kind == "const" or (c.kind == "v" and c.count == 4)):
            raise SimError(f"{ins.mnemonic}: unsupported operand form at {ins.where()}")
        dec = ins.__dict__["_mfma"] = (d, a, b, c)
    return dec


def _layout(k: int) -> np.ndarray:
    """Gather indices of the operand layout (module docstring): ``[16, K]``
    into an A or B register block read as uint16 halves (``[K/8 regs, 128]``,
    flattened), A's ``[i, k]`` and B's ``[k, i]``."""
    kl = k // 4
    i, kk = np.meshgrid(np.arange(16), np.arange(k), indexing="ij")
    lane, e = 16 * (kk // kl) + i, kk % kl
    return (e // 2) * 2 * LANES + 2 * lane + e % 2


# A's rows in the order of D's registers: C's and D's four registers ([4, 64],
# flattened) hold the matrix element [4 * (l // 16) + r][l % 16] at 64 r + l,
# so the product of A's rows taken in this order (an involution) and B is D's
# registers as they lie, and C's registers are C in the same order.
_D_ROWS = 4 * (np.arange(16) % 4) + np.arange(16) // 4
_LAYOUT = {16: _layout(16), 32: _layout(32)}
# MFMAs per mfma_group_f32_bf16 call: its float64 temporaries (about 16 KiB each)
# stay small enough to be reused from the allocator and the caches; a launch's
# few hundred waves at once took several times longer (page faults).
_CHUNK = 64


def _core(ins: Instr, k: int) -> Core:
    """The core of ``v_mfma_f32_16x16xK_bf16`` (made once per instruction; SimError
    for a form ``_checked`` refuses): one MFMA per wave of the view, each
    wave's EXEC full (``_Group``)."""
    made = ins.__dict__.get("_mfma_core")
    if made is None:
        made = ins.__dict__["_mfma_core"] = _Group((ins,), k)
    return made


class _Group:
    """The core executing the MFMAs ``instrs`` of depth ``k`` (SimError for a form
    ``_checked`` refuses or a group ``_parents`` refuses), computing what they
    compute one after another, for every wave of a view at once
    (``mfma_group_f32_bf16``; ``wave.grouped``): ``core(view)`` runs them all;
    in a fused stretch ``take(j, view)`` reads MFMA ``j``'s A, B and (where
    not an earlier one's D) C at its place, and ``run(view, count)`` computes
    the first ``count`` taken and writes their Ds, each C that is an earlier
    one's D taken from its result. Chunks of at most ``_CHUNK`` MFMAs. The
    operand layout is bound as gather indices."""

    __slots__ = ("instrs", "k", "m", "parents", "_ab", "_blocks", "_ab_blocks", "_croot", "_cfixed", "_fixed",
                 "_finals", "_bits", "_cbits")

    def __init__(self, instrs: tuple[Instr, ...], k: int):
        decs = [_checked(ins, k) for ins in instrs]
        self.instrs, self.k, self.m = instrs, k, len(decs)
        self.parents = _parents(decs, instrs[0])
        regs = k // 8
        # Each MFMA's A (rows in D's order) and B halves in one gather from a
        # wave's whole register file (uint16 [512 regs * 128]) where the view has
        # it as an array; from its A and B blocks, concatenated, otherwise:
        # mfma_group_f32_bf16's [k, 32] (A's column kk, then B's row kk).
        at, bt = _LAYOUT[k][_D_ROWS].T, _LAYOUT[k].T
        self._ab = [np.concatenate([a.index * 2 * LANES + at, b.index * 2 * LANES + bt], axis=1).reshape(-1)
                    for _, a, b, _ in decs]
        self._ab_blocks = np.concatenate([at, regs * 2 * LANES + bt], axis=1).reshape(-1)
        self._blocks = [(slice(a.index, a.index + regs), slice(b.index, b.index + regs)) for _, a, b, _ in decs]
        # The Cs given (not an earlier one's D), in order: per MFMA, its place
        # among them and its first VGPR (None for a constant, whose fp32 value
        # is in every element of _cfixed, [1, r, 16, 16]: 0 where registers).
        roots = [c for (_, _, _, c), p in zip(decs, self.parents) if p is None]
        places = iter(range(len(roots)))
        self._croot = [None if p is not None else (next(places), None if c.kind == "const" else c.index)
                       for (_, _, _, c), p in zip(decs, self.parents)]
        self._fixed = all(c.kind == "const" for c in roots)
        cfixed = np.zeros((1, len(roots), 256), np.uint32)
        for j, c in enumerate(roots):
            if c.kind == "const":
                cfixed[0, j] = c.bits32
        self._cfixed: np.ndarray = cfixed.reshape(1, len(roots), 16, 16)
        # Per count of MFMAs run: those whose D no later one of them overwrites
        # (a key over the MFMAs) and their D VGPRs (a key over the registers).
        self._finals: dict[int, tuple] = {}
        for count in range(1, self.m + 1):
            finals = [j for j, (d, _, _, _) in enumerate(decs[:count])
                      if not any(d.index == later[0].index for later in decs[j + 1:count])]
            self._finals[count] = (_registers(finals), _registers([decs[j][0].index + r for j in finals
                                                                  for r in range(4)]), len(finals))

    def __call__(self, w) -> None:
        for j in range(self.m):
            self.take(j, w)
        self.run(w, self.m)

    def take(self, j: int, w) -> None:
        """Read MFMA ``j``'s A and B (and its C where given in registers) from the
        view ``w`` (every earlier one taken first, the first one starting over)."""
        vb = w.vb
        n = vb.shape[0]
        if j == 0:
            self._bits = np.empty((n, self.m, 32 * self.k), np.uint16)
            self._cbits = self._cfixed if self._fixed else \
                np.repeat(self._cfixed, n, axis=0)
        if type(vb) is np.ndarray:
            self._bits[:, j] = vb.reshape(n, -1).view(np.uint16).take(self._ab[j], axis=1)
        else:
            a, b = self._blocks[j]
            self._bits[:, j] = np.concatenate([vb[:, a], vb[:, b]], axis=1).view(np.uint16).reshape(n, -1) \
                .take(self._ab_blocks, axis=1)
        root = self._croot[j]
        if root is not None and root[1] is not None:
            self._cbits[:, root[0]] = vb[:, root[1]:root[1] + 4].reshape(n, 16, 16)

    def run(self, w, count: int) -> None:
        """Compute the first ``count`` MFMAs taken and write their Ds to ``w``."""
        if self.k == 32:
            _need_k32(w, self.instrs[0])
        vb = w.vb
        n = vb.shape[0]
        parents = self.parents[:count]
        bits, cbits = self._bits[:, :count], self._cbits[:, :parents.count(None)]
        step = max(1, _CHUNK // count)  # waves per chunk
        if n <= step:
            res = mfma_group_f32_bf16(bits, self.k, cbits, parents)
        else:
            res = np.empty((n, count, 16, 16), np.float32)
            for lo in range(0, n, step):
                res[lo:lo + step] = mfma_group_f32_bf16(bits[lo:lo + step], self.k,
                                                        cbits[lo:lo + step] if len(cbits) > 1 else cbits, parents)
        mine, d_at, nd = self._finals[count]
        vb[:, d_at] = res[:, mine].view(np.uint32).reshape(n, 4 * nd, LANES)


def _parents(decs: list[tuple], ins: Instr) -> tuple[int | None, ...]:
    """For each MFMA of ``decs`` (``_checked``'s, in program order), the earlier
    one whose D is its C, or None where no earlier one writes its C; SimError
    where an earlier one writes its A or B, or a part of its C (the last
    one to write any of it writes all of it otherwise: that one is its
    parent). ``ins``: the first, for the message."""
    def last_writer(j: int, o) -> int | None:
        # The last MFMA before j whose D holds any VGPR of operand o.
        regs = set(range(o.index, o.index + o.count))
        return next((p for p in range(j - 1, -1, -1) if regs & set(range(decs[p][0].index, decs[p][0].index + 4))),
                    None)

    parents: list[int | None] = []
    for j, (_, a, b, c) in enumerate(decs):
        if last_writer(j, a) is not None or last_writer(j, b) is not None:
            raise SimError(f"{ins.mnemonic}: a group whose MFMA {j} reads an earlier one's D as A or B "
                           f"at {ins.where()}")
        p = last_writer(j, c) if c.kind == "v" else None
        if p is not None and decs[p][0].index != c.index:
            raise SimError(f"{ins.mnemonic}: a group whose MFMA {j} reads part of an earlier one's D at {ins.where()}")
        parents.append(p)
    return tuple(parents)


def _fits(k: int):
    """``fits(group, ins)`` of ``wave.grouped`` for the MFMAs of depth ``k``:
    whether ``_parents`` takes ``group`` and ``ins`` (``ins``'s A and B no
    member's D, its C all of the last writer's D or none of any member's)."""
    def fits(group: tuple[Instr, ...], ins: Instr) -> bool:
        try:
            _parents([_checked(g, k) for g in group + (ins,)], ins)
        except SimError:
            return False
        return True
    return fits


def _registers(regs: list[int]) -> slice | list[int]:
    """A batched register key for the VGPRs ``regs`` in order: a slice where they
    are consecutive (a view, not a gather), else the list."""
    if regs and regs == list(range(regs[0], regs[0] + len(regs))):
        return slice(regs[0], regs[0] + len(regs))
    return regs


def _mfma(w: Wave, ins: Instr, k: int) -> None:
    """``v_mfma_f32_16x16xK_bf16 D, A, B, C`` on the whole wave (its core over the wave)."""
    core = _core(ins, k)
    if w.exec_bits != _ALL_LANES:
        raise SimError(f"{ins.mnemonic} with a partial EXEC ({w.exec_bits:#018x}) is not modelled at {ins.where()}")
    core(w)


def _decoder(k: int):
    """The batched decoder of ``v_mfma_f32_16x16xK_bf16`` (``_core``; a form the
    handler refuses is left to it)."""
    def decode(ins: Instr) -> Core | None:
        try:
            return _core(ins, k)
        except SimError:
            return None
    return decode


@op("v_mfma_f32_16x16x16_bf16")
def _mfma_16x16x16(w: Wave, ins: Instr) -> None:
    """gfx942 ``v_mfma_f32_16x16x16_bf16`` (A, B: 4 bf16 per lane in a register pair)."""
    _mfma(w, ins, 16)


@op("v_mfma_f32_16x16x32_bf16")
def _mfma_16x16x32(w: Wave, ins: Instr) -> None:
    """gfx950 ``v_mfma_f32_16x16x32_bf16`` (A, B: 8 bf16 per lane in four registers)."""
    _need_k32(w, ins)
    _mfma(w, ins, 32)


def _need_k32(w, ins: Instr) -> None:
    """SimError unless the target of ``w`` (a wave or a batch view) has the K = 32 bf16 MFMA."""
    tgt = w.group.target
    if tgt.mfma_bf16_k != 32:
        raise SimError(f"{ins.mnemonic} needs the K = 32 bf16 MFMA; {tgt.arch}'s widest is K = {tgt.mfma_bf16_k} "
                       f"at {ins.where()}")


batched("v_mfma_f32_16x16x16_bf16")(_decoder(16))
batched("v_mfma_f32_16x16x32_bf16")(_decoder(32))
grouped("v_mfma_f32_16x16x16_bf16", fits=_fits(16))(lambda instrs: _Group(instrs, 16))
grouped("v_mfma_f32_16x16x32_bf16", fits=_fits(32))(lambda instrs: _Group(instrs, 32))
