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


def bf16_to_f64(bits: np.ndarray) -> np.ndarray:
    """float64 values of bf16 bit patterns (uint, any shape): exact."""
    return (np.asarray(bits, np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


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
    the last axis; ``abs_sum`` the sums of their magnitudes, shaped as the
    result): float64 sums the element's (finite) terms exactly, in
    any order. With ``2**q`` the lowest set bit among the terms, every partial
    sum is a multiple of ``2**q``, so it is exact while the magnitudes add up
    to less than ``2**(q + 53)`` (the float64 ``abs_sum`` passes that bound
    exactly when the true one does: the bound is a float64 and rounding is
    monotone)."""
    finite = np.where(np.isfinite(terms), terms, 0.0)
    mant, exp = np.frexp(finite)
    ints = np.abs(mant * 2.0 ** 53).astype(np.int64)
    _, low = np.frexp((ints & -ints).astype(np.float64))
    lsb = np.where(finite != 0, exp - 54 + low, 1 << 20).min(axis=-1)
    _, top = np.frexp(abs_sum)
    return top <= lsb + 53


def mfma_f32_bf16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 ``[..., 16, 16]``: ``a @ b + c`` for float64 ``a [..., 16, K]``,
    ``b [..., K, 16]`` (bf16 values) and ``c [..., 16, 16]`` (fp32 values), each
    element rounded once (leading axes: independent MFMAs, one per wave).

    The float64 sum (any order) is within ``2 (K + 1) u sum|terms|`` of the exact
    sum; where that interval rounds to one fp32 value (almost always) that value
    is the answer. An element whose interval holds an fp32 rounding boundary
    is summed again exactly (``round_sum_to_f32``, unless ``float64_sum_is_exact``
    shows the float64 sum already is). So the result does not depend on the
    order numpy's matrix product adds in."""
    lead = a.shape[:-2]
    a, b = a.reshape(-1, 16, a.shape[-1]), b.reshape(-1, b.shape[-2], 16)
    c = np.broadcast_to(c, lead + (16, 16)).reshape(-1, 16, 16)
    with np.errstate(invalid="ignore", over="ignore"):
        s = a @ b + c
        abs_sum = np.abs(a) @ np.abs(b) + np.abs(c)
        out = s.astype(np.float32)
        bound = 2.0 * (a.shape[2] + 1) * _U * abs_sum
        lo = np.nextafter(s - bound, -np.inf).astype(np.float32)
        hi = np.nextafter(s + bound, np.inf).astype(np.float32)
        zero = abs_sum == 0
        doubt = np.isfinite(abs_sum) & (lo.view(np.uint32) != hi.view(np.uint32)) & ~zero
        # An exactly zero sum is -0 only when every term is: C's element -0 and every product too.
        out[zero] = np.float32(0.0)
        neg = zero & np.signbit(c)
        if neg.any():
            nn, ii, jj = np.nonzero(neg)
            out[nn, ii, jj] = np.where(np.signbit(a[nn, ii] * b[nn, :, jj]).all(axis=1), np.float32(-0.0),
                                       np.float32(0.0))
        if doubt.any():
            # The terms of the elements in doubt only (a few of the 256 as a
            # rule): each proven exact in float64 or summed exactly.
            nn, ii, jj = np.nonzero(doubt)
            terms = np.concatenate([a[nn, ii] * b[nn, :, jj], c[nn, ii, jj][:, None]], axis=1)
            d = ~float64_sum_is_exact(terms[:, None, :], abs_sum[nn, ii, jj][:, None])[:, 0]
            for m, i, j, t in zip(nn[d], ii[d], jj[d], terms[d].tolist()):
                out[m, i, j] = round_sum_to_f32(t)
    return out.reshape(lead + (16, 16))


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


def _mfma(w: Wave, ins: Instr, k: int) -> None:
    """``v_mfma_f32_16x16xK_bf16 D, A, B, C`` on the whole wave."""
    d, a, b, c = _checked(ins, k)
    if w.exec_bits != _ALL_LANES:
        raise SimError(f"{ins.mnemonic} with a partial EXEC ({w.exec_bits:#018x}) is not modelled at {ins.where()}")
    kl = k // 4

    def elements(o) -> np.ndarray:
        """float64 ``[64, KL]``: each lane's bf16 values of A or B, low halves first
        (a little-endian word's two 16-bit halves, read in memory order)."""
        halves = np.ascontiguousarray(w.v[o.index:o.index + o.count].T).view(np.uint16)
        return bf16_to_f64(halves.reshape(LANES, kl))

    amat = elements(a).reshape(4, 16, kl).transpose(1, 0, 2).reshape(16, k)
    bmat = elements(b).reshape(4, 16, kl).transpose(0, 2, 1).reshape(k, 16)
    if c.kind == "const":
        cmat = np.full((16, 16), np.uint32(c.bits32).view(np.float32), np.float64)
    else:
        cmat = w.v[c.index:c.index + 4].view(np.float32).reshape(4, 4, 16).transpose(1, 0, 2) \
            .reshape(16, 16).astype(np.float64)
    res = mfma_f32_bf16(amat, bmat, cmat).view(np.uint32)
    res = np.where(np.isnan(res.view(np.float32)), _QNAN, res)
    w.v[d.index:d.index + 4] = res.reshape(4, 4, 16).transpose(1, 0, 2).reshape(4, LANES)


def _layout(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Gather indices of the operand layout (module docstring): ``ab [16, K]``
    into an A or B register block read as uint16 halves (``[K/8 regs, 128]``,
    flattened), A's ``[i, k]`` and B's ``[k, i]``; ``cd [16, 16]`` into a C or D
    block of four registers (``[4, 64]``, flattened)."""
    kl = k // 4
    i, kk = np.meshgrid(np.arange(16), np.arange(k), indexing="ij")
    lane, e = 16 * (kk // kl) + i, kk % kl
    ab = (e // 2) * 2 * LANES + 2 * lane + e % 2
    r, j = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    cd = (r % 4) * LANES + 16 * (r // 4) + j
    return ab, cd


_LAYOUT = {16: _layout(16), 32: _layout(32)}


def _decoder(k: int):
    """The batched decoder of ``v_mfma_f32_16x16xK_bf16``: the operand layout
    bound as gather indices, one MFMA per wave of the view (the handler's
    checks first; a form it refuses is left to it)."""
    def decode(ins: Instr) -> Core | None:
        try:
            d, a, b, c = _checked(ins, k)
        except SimError:
            return None
        ab, cd = _LAYOUT[k]
        cconst = None if c.kind != "const" else np.full((16, 16), np.uint32(c.bits32).view(np.float32), np.float64)

        def core(w) -> None:
            if k == 32:
                _need_k32(w, ins)
            vb = w.vb
            n = vb.shape[0]
            amat = bf16_to_f64(vb[:, a.index:a.index + a.count].view(np.uint16).reshape(n, -1).take(ab, axis=1))
            bmat = bf16_to_f64(vb[:, b.index:b.index + b.count].view(np.uint16).reshape(n, -1).take(ab, axis=1))
            cmat = cconst if cconst is not None else \
                vb[:, c.index:c.index + 4].view(np.float32).reshape(n, -1).take(cd, axis=1).astype(np.float64)
            res = mfma_f32_bf16(amat, bmat.transpose(0, 2, 1), cmat).view(np.uint32)
            res = np.where(res.view(np.float32) != res.view(np.float32), _QNAN, res)
            out = np.empty((n, 4 * LANES), np.uint32)
            out[:, cd] = res
            vb[:, d.index:d.index + 4] = out.reshape(n, 4, LANES)
        return core
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
