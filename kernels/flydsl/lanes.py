"""The FlyDSL kernel's lane arithmetic, one source for numpy and for the GPU.

Every function here is traced into the kernel by ``nvfp4_suite.kernels.flydsl.decode``
and run on numpy integers by the tests, so what the tests check is the text
the kernel is built from. The rules that make one text give the same bits in
both places: integers are combined only with ``+ * // % & | << >>`` on
non-negative values, every right shift is followed by a mask (FlyDSL's
``>>`` on Int32 is arithmetic, numpy's on uint32 is logical), and constants
stay below 2**31. Floating-point steps go through an ``ops`` object: the
kernel's FlyDSL operations on the GPU, ``NumpyOps`` (an exact model of the
same instructions, for gfx942 or gfx950) on the CPU.

The lane map, for wave ``w`` of 4 and lane ``(n, g) = (lane % 16, lane // 16)``:

- K operand (MFMA A, rows = keys): sub-tile ``st`` row ``n`` is key
  ``32w + 8(n // 4) + 4st + n % 4`` of the block; the lane holds head-dims
  ``32g + 8ks .. +7`` for k-step ``ks`` = bytes ``16g .. 16g + 15`` of the
  key's data row, and scale bytes ``2g, 2g + 1``.
- Q operand (MFMA B): head ``n``, the same dims, so the dot product pairs them.
- Scores (MFMA C): ``a[4st + e]`` is key ``8g + 4st + e`` of the wave's 32.
- V operand (MFMA A, rows = dims): tile ``dt`` row ``n`` is dim ``8n + dt``;
  the lane holds keys ``32w + 8g + j``, ``j = 0..7``, in the order P holds
  them. It loads data word ``n`` (bytes ``4n .. 4n + 3``) of 8 token rows and
  nibble-transposes them.
- Output (MFMA C): ``acc[dt][e]`` is dim ``32g + 8e + dt`` of head ``n``.
"""

from __future__ import annotations

import numpy as np

from nvfp4_suite.reference.formats import e4m3fn_decode, e4m3fnuz_decode

# BLK, LAYOUTS and HG are re-exported (`X as X`): decode.py and sim/backend.py take the
# kernel's geometry from this one module.
from nvfp4_suite.reference.paged_cache import BLK as BLK
from nvfp4_suite.reference.paged_cache import LAYOUTS as LAYOUTS
from nvfp4_suite.reference.paged_cache import D, row_byte
from nvfp4_suite.reference.problem import HG as HG  # query heads per KV head: the MFMA N dimension

NW = 4          # waves per workgroup
KPW = 32        # keys per wave and block
NKS = D // 32   # k-steps of the 16x16x32 score MFMA
NDT = D // 16   # 16-dim tiles of the output
RAW = 2 * 4 + 1 + NDT + 2   # words per lane per block: K data, K scales, V data, V scales
PART_F = 4 * NDT + 2        # floats per lane in a split partial: acc, then big and l
F16_UNIT = 2.0 ** 14        # e2m1 codes are built as e2m1 * 2**-14 in fp16
SPLITS = (1, 2, 4, 8)                   # split counts built, checked and offered


def grid_x(rows: int, q_len: int, xcds: int) -> int:
    """Workgroups along x (host side): ``rows``, or with ``xcds > 0`` rows padded up
    to a multiple of ``xcds * q_len`` (so a request's rows can share an XCD)."""
    if xcds <= 0:
        return rows
    unit = xcds * q_len
    return -(-rows // unit) * unit


def workgroup_row(bx, q_len, xcds: int):
    """Row served by workgroup ``bx`` of ``grid_x`` (the seed's XCD placement): with
    ``xcds > 0``, workgroup ``bx`` runs on XCD ``bx % xcds`` and serves row
    ``((slot // q_len) * xcds + xcd) * q_len + slot % q_len``, ``xcd = bx % xcds``,
    ``slot = bx // xcds``, so each request's rows share one XCD; without XCDs the
    identity. Rows ``>= rows`` are padding and store nothing."""
    if xcds <= 0:
        return bx
    xcd = bx % xcds
    slot = bx // xcds
    return ((slot // q_len) * xcds + xcd) * q_len + slot % q_len


def k_key(w, n, st):
    """Key (token of the block) in row ``n`` of K sub-tile ``st`` of wave ``w``."""
    return w * KPW + (n // 4) * 8 + st * 4 + n % 4


def k_data_byte(g):
    """First of the 16 data bytes lane group ``g`` loads from a K row."""
    return g * 16


def k_scale_byte(g):
    """First of the 2 scale bytes (groups ``2g, 2g + 1``) lane group ``g`` loads
    from a key's 8-byte scale row."""
    return g * 2


def k_scale_word(s0, s1):
    """The K scale word: byte ``2 * st + grp`` is key ``st``'s scale of group ``2g + grp``.

    s0, s1: the 16-bit scale loads of the lane's two keys, zero-extended."""
    return s0 | (s1 << 16)


def v_key(w, g, j):
    """Key of the ``j``-th V row lane group ``g`` of wave ``w`` loads."""
    return w * KPW + g * 8 + j


def v_data_byte(n):
    """Byte of the V data word lane ``n`` loads from every V row: dims ``8n .. 8n + 7``."""
    return n * 4


def v_scale_row(w, g, h, n):
    """Stored V scale row holding the 4 scales (tokens ``v_key(w, g, 4h) + 0..3``)
    of lane ``n``'s scale group ``n // 2`` (swizzle: row ``(t // 4) * 4 + s // 2``)."""
    return w * KPW + g * 8 + h * 4 + n // 4


def v_scale_byte(n):
    """Byte of that 8-byte scale row where the 4-token word starts (column ``(s % 2) * 4``)."""
    return ((n % 4) // 2) * 4


def q_word(n, g, ks):
    """First of the 4 words (8 bf16) of query head ``n`` (of the KV head's 16) that
    lane ``(n, g)`` loads for k-step ``ks``."""
    return n * (D // 2) + g * 16 + ks * 4


def score_key(g, st, e):
    """Key, within the wave's 32, of score ``a[4 st + e]`` in lane group ``g``
    (MFMA C row ``4g + e`` of sub-tile ``st``): the seed's ``key_off``."""
    return 8 * g + 4 * st + e


def out_word(n, g, e):
    """First of the 4 output words lane ``(n, g)`` stores for accumulator element ``e``
    (head ``n`` of the KV head's 16)."""
    return n * (D // 2) + g * 16 + e * 4


def page_byte(layout, hkv, part, kvh, t, col):
    """Byte of a page holding column ``col`` of token ``t``'s row of ``part`` of head ``kvh``:
    ``nvfp4_suite.reference.paged_cache.row_byte`` (part: ``k_data``, ``k_scale``, ``v_data``,
    ``v_scale``, V scales as stored, swizzled) plus ``col``."""
    return row_byte(layout, hkv, part, kvh, t) + col


def block_offsets(kvh, hkv, w, n, g, layout="token_rows"):
    """Where in a page the lane's loads start, in units of the load.

    Returns ``(k_data, k_scale, v_data, v_scale)``: 2 word offsets of 4-word K
    data loads (keys ``st = 0, 1``), 2 half-word offsets of the K scale pairs,
    8 word offsets of V data words (tokens ``j = 0..7``) and 2 word offsets of
    V scale words (``h = 0, 1``), in ``layout`` (see ``page_byte``)."""
    keys = [k_key(w, n, st) for st in range(2)]
    return (
        [page_byte(layout, hkv, "k_data", kvh, t, k_data_byte(g)) // 4 for t in keys],
        [page_byte(layout, hkv, "k_scale", kvh, t, k_scale_byte(g)) // 2 for t in keys],
        [page_byte(layout, hkv, "v_data", kvh, v_key(w, g, j), v_data_byte(n)) // 4 for j in range(8)],
        [page_byte(layout, hkv, "v_scale", kvh, v_scale_row(w, g, h, n), v_scale_byte(n)) // 4 for h in range(2)],
    )


def assemble_raw(k_data, k_scale, v_data, v_scale):
    """The RAW words the block loop carries, from the lane's loads.

    k_data: 2 lists of 4 words; k_scale: 2 zero-extended half-words; v_data: 8
    words (token rows); v_scale: 2 words. Order: K data of key 0 then key 1,
    the K scale word, the 8 nibble-transposed V words, the 2 V scale words."""
    return (list(k_data[0]) + list(k_data[1]) + [k_scale_word(k_scale[0], k_scale[1])]
            + nibble_transpose(v_data) + list(v_scale))


def nibble_transpose(words):
    """Transpose 8 words of 8 nibbles: nibble ``j`` of output ``t`` is nibble ``t`` of input ``j``.

    words: 8 integers (token rows' data words); returns 8 (one dim each, 8 tokens).
    Three butterfly stages swap 4-, 2- and 1-nibble blocks between words 4, 2, 1 apart.
    """
    out = list(words)
    for dist, mask in ((4, 0xFFFF), (2, 0x00FF00FF), (1, 0x0F0F0F0F)):
        bits = dist * 4
        for j in range(8):
            if j & dist:
                continue
            a, b = out[j], out[j + dist]
            out[j] = (a & mask) | ((b & mask) << bits)
            out[j + dist] = ((a >> bits) & mask) | (b - (b & mask))
    return out


def e2m1_pair_code(x):
    """Two E2M1 nibbles (bits 0-7 of ``x``, element 0 low) as an fp16 pair word.

    Each half is ``sign << 15 | magnitude << 9``: the code's two exponent bits
    and mantissa bit land in fp16's exponent and mantissa so the half equals
    ``e2m1 * 2**-14`` exactly, the subnormal 0.5 included (it becomes an fp16
    subnormal)."""
    return ((x & 0x7) << 9) | ((x & 0x8) << 12) | ((x & 0x70) << 21) | ((x & 0x80) << 24)


def f16x2_to_bf16x2(ops, prod):
    """An fp16 pair holding ``v * 2**-14`` to the bf16 pair of ``v``: widen, scale
    back, keep the upper halves (exact: the values carry at most 6 significant bits)."""
    lo = ops.fmul(ops.f16_lo(prod), ops.f32(F16_UNIT))
    hi = ops.fmul(ops.f16_hi(prod), ops.f32(F16_UNIT))
    return ((ops.bits(lo) >> 16) & 0xFFFF) | ((ops.bits(hi) >> 16) << 16)


def v_bf16x8(ops, word, sp):
    """Dequantise 8 V values, one dim of 8 tokens: 4 bf16-pair words.

    word: nibble-transposed V word (token ``j`` in nibble ``j``); sp: 4 fp16
    pairs, ``sp[j]`` the scales of nibbles ``2j, 2j + 1``."""
    return [
        f16x2_to_bf16x2(ops, ops.f16x2_mul(e2m1_pair_code(word >> (8 * j)), sp[j]))
        for j in range(4)
    ]


def k_bf16x8(ops, word, scale_pair):
    """Dequantise 8 K values of one scale group: 4 bf16-pair words.

    word: 8 nibbles (elements in nibble order); scale_pair: the K table entry,
    the group's E4M3FN scale as an fp16 pair, shared by all 8."""
    return v_bf16x8(ops, word, [scale_pair] * 4)


def fp8x2_f16(ops, word, hi):
    """Bytes ``2, 3`` (``hi``) or ``0, 1`` of ``word``, E4M3FN, as an exact fp16 pair.

    gfx950's converter reads E4M3FN. gfx942's reads E4M3FNUZ, which gives half
    the value, NaN for 0x80 and 240 for 0x7F: there the sign bits are cleared
    before converting, the magnitude doubled, the sign put back (0x80 becomes
    -0) and the NaN bytes 0x7F/0xFF made NaN again."""
    shift = 16 if hi else 0
    if not ops.fnuz:
        a, b = ops.cvt_fp8x2_f32(word, hi)
        return ops.f32x2_to_f16x2(a, b)
    a, b = ops.cvt_fp8x2_f32(word & 0x7F7F7F7F, hi)
    fixed = []
    for v, byte in ((a, (word >> shift) & 0xFF), (b, (word >> (shift + 8)) & 0xFF)):
        signed = ops.bits(ops.fmul(v, ops.f32(2.0))) | ((byte & 0x80) << 24)
        fixed.append(ops.from_bits(ops.select((byte & 0x7F) == 0x7F, 0x7FC00000, signed)))
    return ops.f32x2_to_f16x2(fixed[0], fixed[1])


def dequant_k(raw, lookup, k_bf16x8_):
    """The seed's ``dequant_k``: K operands ``kf[st][ks]`` (4 words, 8 bf16 each) of
    the lane's two keys, from RAW words ``raw`` (K data ``raw[0..7]``, scale word
    ``raw[8]``). lookup(scale byte) -> K table entry; k_bf16x8_(word, entry)."""
    kf = []
    for st in range(2):
        tabs = [lookup((raw[8] >> (8 * (2 * st + grp))) & 0xFF) for grp in range(2)]
        kf.append([k_bf16x8_(raw[st * 4 + ks], tabs[ks // 2]) for ks in range(NKS)])
    return kf


def dequant_v(raw, fp8x2_f16_, v_bf16x8_):
    """The seed's ``dequant_v``: V operands ``vf[dt]`` (4 words, 8 bf16 each) from the
    transposed words ``raw[9..16]`` and scale words ``raw[17], raw[18]``."""
    sp = [fp8x2_f16_(raw[17 + j // 2], j % 2 == 1) for j in range(4)]
    return [v_bf16x8_(raw[9 + dt], sp) for dt in range(NDT)]


def k_table() -> np.ndarray:
    """The K table: uint32 ``[256]``, entry ``b`` = E4M3FN byte ``b`` as an fp16 pair.

    Built from ``nvfp4_suite.reference.formats`` (exact: every E4M3FN value is an fp16),
    so the kernel's K scales need no fp8 conversion and no gfx942 correction."""
    half = e4m3fn_decode(np.arange(256)).astype(np.float16).view(np.uint16).astype(np.uint32)
    return half | (half << 16)


class NumpyOps:
    """The kernel's floating-point instructions on numpy uint32 words, bit-exact.

    fnuz: the modelled target's ``Target.fnuz`` (``nvfp4_suite.kernels.flydsl.targets``): whether
    its fp8 converter reads E4M3FNUZ (gfx942) rather than E4M3FN (gfx950).
    Packed fp16 products and their widening are IEEE with subnormals, as the
    kernel runs them (it asserts fp16 denormals are enabled in its code object)."""

    def __init__(self, fnuz: bool):
        self.fnuz = fnuz

    @staticmethod
    def _u32(x):
        return np.asarray(x).astype(np.uint32)

    def f32(self, v):
        return np.float32(v)

    def fmul(self, a, b):
        return (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(np.float32)

    def bits(self, x):
        return np.asarray(x, np.float32).view(np.uint32)

    def from_bits(self, x):
        return self._u32(x).view(np.float32)

    def select(self, cond, a, b):
        return np.where(cond, np.uint32(a), self._u32(b)).astype(np.uint32)

    def f16_lo(self, w):
        return (self._u32(w) & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)

    def f16_hi(self, w):
        return (self._u32(w) >> 16).astype(np.uint16).view(np.float16).astype(np.float32)

    def f16x2_mul(self, a, b):
        lo = (self.f16_lo(a) * self.f16_lo(b)).astype(np.float16)
        hi = (self.f16_hi(a) * self.f16_hi(b)).astype(np.float16)
        return self.f32x2_to_f16x2(lo, hi)

    def f32x2_to_f16x2(self, a, b):
        lo = np.asarray(a).astype(np.float16).view(np.uint16).astype(np.uint32)
        hi = np.asarray(b).astype(np.float16).view(np.uint16).astype(np.uint32)
        return lo | (hi << 16)

    def cvt_fp8x2_f32(self, word, hi):
        w = self._u32(word) >> (16 if hi else 0)
        decode = e4m3fnuz_decode if self.fnuz else e4m3fn_decode
        return decode(w & 0xFF).astype(np.float32), decode((w >> 8) & 0xFF).astype(np.float32)

