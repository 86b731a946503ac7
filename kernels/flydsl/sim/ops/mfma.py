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
"""

from __future__ import annotations

import math

import numpy as np

from ..program import Instr
from ..wave import LANES, Core, SimError, Wave, batched, op

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
# float64 [65536]: every bf16 bit pattern's value (exact; a gather costs less
# than widening the patterns to fp32 and converting those).
with np.errstate(invalid="ignore"):
    _BF16_F64 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
_MAG32 = np.uint32(0x7FFFFFFF)


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


def mfma_f32_bf16(ab: np.ndarray, k: int, c: np.ndarray) -> np.ndarray:
    """float32 ``[n, 16, 16]``: ``A @ B + C`` of ``n`` independent MFMAs (one per
    wave) of depth ``k``, each element rounded once, every NaN the canonical
    0x7FC00000. ``ab``: uint16 ``[n, 32 k]``, each wave's ``[k, 32]`` bf16 bit
    patterns, flattened: row ``kk`` holds column ``kk`` of A (``A[0..15,
    kk]``) then row ``kk`` of B (``B[kk, 0..15]``); ``c``: uint32 ``[n or 1,
    16, 16]`` (any strides), C as fp32 bit patterns. A's rows, C's and the
    result's are in the same order, whichever it is.

    One matrix product gives the float64 sums and the sums of magnitudes
    (bf16 products are exact in float64). Where every term of an element is
    a multiple of ``2**(top - 53)``, ``sum|terms| < 2**top``, the float64 sum
    is exact (``float64_sum_is_exact``'s argument) and rounding it is the
    answer. The usual case (the kernel's) is shown for all ``n`` MFMAs at
    once with one ``top``, the largest sum of magnitudes' (``_all_exact``);
    otherwise element by element, from the lowest set bits of A's rows and
    B's columns (a product's is the sum of its factors') and C's size
    (``_c_fits``). Elsewhere the float64
    sum (any order) is within ``bound = 2 (k + 1) u sum|terms|`` of the
    exact sum; where that interval rounds to one fp32 value (almost always)
    that value is the answer. The test rounds ``s -/+ 2 bound``: the float64
    rounding of those (at most ``u (|s| + 2 bound)``, below ``bound``) keeps
    them outside the interval, so the test is conservative. An element whose
    interval may hold an fp32 rounding boundary is shown exact by its own
    terms' lowest set bits, or else summed again exactly
    (``round_sum_to_f32``, unless ``float64_sum_is_exact`` shows the float64
    sum already is). So the result does not depend on the order numpy's
    matrix product adds in."""
    n = ab.shape[0]
    # Values (row 0) and magnitudes (row 1) of A and B in float64: [2, n, k, 32],
    # of which A is [2, n, 16, k] (a transposed view, as BLAS takes it) and B
    # [2, n, k, 16]. (A gather from a table: uint16 indices cannot be out of range.)
    vals = np.empty((2, n, k, 32))
    _BF16_F64.take(ab.reshape(n, k, 32), out=vals[0], mode="clip")
    np.abs(vals[0], out=vals[1])
    with np.errstate(invalid="ignore", over="ignore"):
        amat, bmat = vals[..., :16].swapaxes(2, 3), vals[..., 16:]
        s, abs_sum = amat @ bmat
        cval = c.view(np.float32)
        s += cval
        cmag = c & _MAG32
        abs_sum += cmag.view(np.float32)
        out = s.astype(np.float32)
        # C's smallest magnitude (bit patterns order them as their values); where
        # it is not zero, no sum of magnitudes is (none is below its |C|).
        least = int(np.minimum.reduce(cmag, axis=None))
        if least == 0:
            # An exactly zero sum is -0 only when every term is: C's element -0 and every product too.
            if not abs_sum.all():
                zero = abs_sum == 0
                out[zero] = np.float32(0.0)
                neg = zero & np.signbit(cval)
                if neg.any():
                    nn, ii, jj = np.nonzero(neg)
                    out[nn, ii, jj] = np.where(np.signbit(amat[0, nn, ii] * bmat[0, nn, :, jj]).all(axis=1),
                                               np.float32(-0.0), np.float32(0.0))
            # The smallest nonzero one (a zero less 1 wraps to 2**32 - 1).
            np.subtract(cmag, 1, out=cmag)
            least = int(np.minimum.reduce(cmag, axis=None)) + 1
        if _all_exact(ab, abs_sum, least):
            return out
        _refine(out, ab, k, amat[0], bmat[0], s, abs_sum, cval.astype(np.float64))
    low = np.minimum.reduce(out, axis=None)  # NaN if any element is
    if low != low:
        out.view(np.uint32)[out != out] = _QNAN
    return out


def _all_exact(ab: np.ndarray, abs_sum: np.ndarray, c_least: int) -> bool:
    """Whether every element of ``mfma_f32_bf16``'s MFMAs has an exact float64
    sum, shown for them all at once (a sufficient condition; ``ab`` as there,
    ``abs_sum`` float64 ``[n, 16, 16]`` the float64 sums of magnitudes,
    ``c_least`` the bit pattern of C's smallest nonzero magnitude, 2**32
    where every C is zero).

    With ``top`` the exponent of the largest ``abs_sum`` (all below
    ``2**top``; a non-finite one fails the test, and with it every element
    is finite, no term infinite or NaN): a product's lowest set bit is at
    least the sum of the lowest over all of A's and over all of B's values,
    and a nonzero C of magnitude at least ``2**(top - 30)`` is a multiple of
    ``2**(top - 53)`` (``_c_fits``'s argument). Where both reach ``top -
    53``, every term of every element is a multiple of ``2**(top - 53)`` and
    ``float64_sum_is_exact``'s argument applies to each element."""
    most = float(np.maximum.reduce(abs_sum, axis=None))
    if not most < math.inf:
        return False
    unit = math.frexp(most)[1] - 53
    # [2, 16]: the lowest of A's rows and B's columns (a minimum across rows,
    # which numpy does element-wise, several times faster than along rows).
    low_a, low_b = np.minimum.reduce(_BF16_LSB.take(ab, mode="clip").reshape(-1, 2, 16), axis=0).tolist()
    if min(low_a) + min(low_b) < unit:
        return False
    # 2**(top - 30) as an fp32 bit pattern, 0 where that is below the normal range.
    return c_least >= max(unit + 23 + 127, 0) << 23


def _refine(out: np.ndarray, ab: np.ndarray, k: int, amat: np.ndarray, bmat: np.ndarray, s: np.ndarray,
            abs_sum: np.ndarray, cval: np.ndarray) -> None:
    """``mfma_f32_bf16``'s elements not shown exact at once, element by element
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
    positions in ``mfma_f32_bf16``'s ``ab`` of its factors, A's row i then B's
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
# Waves per mfma_f32_bf16 call: its float64 temporaries (about 16 KiB a wave)
# stay small enough to be reused from the allocator and the caches; a launch's
# few hundred waves at once took several times longer (page faults).
_CHUNK = 64


def _core(ins: Instr, k: int) -> Core:
    """The core of ``v_mfma_f32_16x16xK_bf16`` (made once per instruction; SimError
    for a form ``_checked`` refuses): the operand layout bound as gather
    indices, one MFMA per wave of the view, each wave's EXEC full."""
    made = ins.__dict__.get("_mfma_core")
    if made is not None:
        return made
    d, a, b, c = _checked(ins, k)
    ab = _LAYOUT[k]
    # A's (rows in D's order) and B's halves in one gather from a wave's whole
    # register file (uint16 [512 regs * 128]) where the view has it as an array;
    # from each block otherwise: mfma_f32_bf16's [k, 32] (A's column kk, then
    # B's row kk).
    at, bt = ab[_D_ROWS].T, ab.T
    ab_blocks = np.concatenate([at, a.count * 2 * LANES + bt], axis=1).reshape(-1)
    ab_file = np.concatenate([a.index * 2 * LANES + at, b.index * 2 * LANES + bt], axis=1).reshape(-1)
    cconst = None if c.kind != "const" else np.full((1, 16, 16), c.bits32, np.uint32)

    def core(w) -> None:
        if k == 32:
            _need_k32(w, ins)
        vb = w.vb
        n = vb.shape[0]
        if type(vb) is np.ndarray:
            bits = vb.reshape(n, -1).view(np.uint16).take(ab_file, axis=1)
        else:
            bits = np.concatenate([vb[:, a.index:a.index + a.count], vb[:, b.index:b.index + b.count]], axis=1) \
                .view(np.uint16).reshape(n, -1).take(ab_blocks, axis=1)
        cbits = cconst if cconst is not None else vb[:, c.index:c.index + 4].reshape(n, 16, 16)
        if n <= _CHUNK:
            res = mfma_f32_bf16(bits, k, cbits)
        else:
            res = np.empty((n, 16, 16), np.float32)
            for lo in range(0, n, _CHUNK):
                res[lo:lo + _CHUNK] = mfma_f32_bf16(bits[lo:lo + _CHUNK], k, cbits[lo:lo + _CHUNK] if cconst is None
                                                    else cbits)
        vb[:, d.index:d.index + 4] = res.view(np.uint32).reshape(n, 4, LANES)
    ins.__dict__["_mfma_core"] = core
    return core


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
