"""The NVFP4 paged KV cache: page layouts, V-scale swizzle, quantisation, readers.

A pool is a ``[num_pages, page_bytes]`` uint8 array. Each page holds, for
every KV head, 128 K rows and 128 V rows; a row is 64 bytes of E2M1 codes
(element ``2j`` in the low nibble of byte ``j``) and 8 E4M3FN scale bytes,
one per 16 consecutive head-dim values. K scales are stored linearly; V scales
are swizzled in groups of 4 tokens so that one 32-bit word holds one scale
group of 4 consecutive tokens (see ``swizzle_v_scales``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import numpy as np

from .formats import E2M1_MAGNITUDES, E2M1_MAX, E4M3FN_TABLE, e2m1_encode, e4m3fn_decode, e4m3fn_encode

D = 128
BLK = 128
GROUP = 16
ROW_DATA = D // 2
ROW_SCALES = D // GROUP
ROW_BYTES = ROW_DATA + ROW_SCALES

LAYOUTS: tuple[str, ...] = ("token_rows", "planar")
# The four kinds of row a page holds, per KV head and token.
PARTS: tuple[str, ...] = ("k_data", "k_scale", "v_data", "v_scale")

# Where each part's rows lie in a page of each layout, in bytes:
# (offset, offset per KV head, head stride, token stride). token_rows: slab h of
# [2*Hkv, 128, 72] holds K of head h, slab Hkv+h V of head h, each row 64 data
# bytes then 8 scale bytes. planar: K data [Hkv,128,64], K scales [Hkv,128,8],
# V data, V scales, one section after another. The one home of the page
# arithmetic: row_byte reads it, and nvfp4_suite.reference.layout builds its
# TOKEN_ROWS and PLANAR records from it.
ROWS: dict[str, dict[str, tuple[int, int, int, int]]] = {
    "token_rows": {
        "k_data": (0, 0, BLK * ROW_BYTES, ROW_BYTES),
        "k_scale": (ROW_DATA, 0, BLK * ROW_BYTES, ROW_BYTES),
        "v_data": (0, BLK * ROW_BYTES, BLK * ROW_BYTES, ROW_BYTES),
        "v_scale": (ROW_DATA, BLK * ROW_BYTES, BLK * ROW_BYTES, ROW_BYTES),
    },
    "planar": {
        "k_data": (0, 0, BLK * ROW_DATA, ROW_DATA),
        "k_scale": (0, BLK * ROW_DATA, BLK * ROW_SCALES, ROW_SCALES),
        "v_data": (0, BLK * ROW_BYTES, BLK * ROW_DATA, ROW_DATA),
        "v_scale": (0, BLK * (ROW_BYTES + ROW_DATA), BLK * ROW_SCALES, ROW_SCALES),
    },
}


def page_bytes(num_kv_heads: int) -> int:
    """Bytes of one page: K and V rows of 128 tokens for each KV head."""
    if num_kv_heads < 1:
        raise ValueError(f"num_kv_heads = {num_kv_heads}, must be >= 1")
    return 2 * num_kv_heads * BLK * ROW_BYTES


class PageViews(NamedTuple):
    """Four uint8 arrays, one per view of a page: k_data ``[pages, Hkv, 128, 64]``,
    k_scale ``[pages, Hkv, 128, 8]`` (linear), v_data ``[pages, Hkv, 128, 64]``,
    v_scale ``[pages, Hkv, 128, 8]``. Which order v_scale is in depends on who
    made it: ``page_views`` gives the stored (swizzled) bytes, ``read_pages``
    and ``nvfp4_suite.reference.layout.read`` linear ones,
    ``nvfp4_suite.reference.layout.views`` the declared layout's order.
    """

    k_data: np.ndarray
    k_scale: np.ndarray
    v_data: np.ndarray
    v_scale: np.ndarray


def _check_pool(pool: np.ndarray, num_kv_heads: int) -> None:
    if not isinstance(pool, np.ndarray) or pool.dtype != np.uint8 or pool.ndim != 2:
        raise ValueError(
            f"pool must be a 2-D uint8 numpy array [num_pages, page_bytes], got "
            f"{type(pool).__name__} {getattr(pool, 'dtype', None)} {getattr(pool, 'shape', None)}"
        )
    if pool.shape[1] != page_bytes(num_kv_heads):
        raise ValueError(
            f"pool.shape[1] = {pool.shape[1]}, expected page_bytes({num_kv_heads}) = "
            f"{page_bytes(num_kv_heads)}"
        )


def row_byte(layout: str, num_kv_heads, part: str, head, token):
    """Byte, within a page, where token ``token``'s row of ``part`` of KV head ``head`` starts.

    layout: one of ``LAYOUTS``; part: one of ``PARTS`` (for ``v_scale``,
    ``token`` is the stored row, after the swizzle). ``token_rows`` is the seed
    kernel's ``[2*Hkv, 128, 72]``: slab ``h`` holds K of head ``h``, slab
    ``Hkv+h`` V of head ``h``, each row 64 data bytes then 8 scale bytes.
    ``planar`` stores K data ``[Hkv,128,64]``, K scales ``[Hkv,128,8]``, V
    data ``[Hkv,128,64]`` and V scales ``[Hkv,128,8]`` one after another.

    Only ``+`` and ``*`` touch ``num_kv_heads``, ``head`` and ``token``, so
    they may be Python ints, numpy integers or the FlyDSL kernel's traced
    Int32 values (its loader addresses pages with this function). The
    arithmetic is ``ROWS``'s.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout = {layout!r}, expected one of {LAYOUTS}")
    if part not in PARTS:
        raise ValueError(f"part = {part!r}, expected one of {PARTS}")
    const, per_hkv, head_stride, token_stride = ROWS[layout][part]
    off = head * head_stride + token * token_stride
    o = const if per_hkv == 0 else num_kv_heads * per_hkv + const if const else num_kv_heads * per_hkv
    if isinstance(o, int):
        return off + o if o else off
    return o + off  # a traced offset goes first: the other side may be a plain int


class Rows(NamedTuple):
    """Where one part's rows lie in a page: token ``t``'s row of KV head ``h``
    is the ``width`` bytes from ``offset + h * head_stride + t * row_stride``."""

    offset: int
    head_stride: int
    row_stride: int
    width: int


def page_views(pool: np.ndarray, layout: str, num_kv_heads: int) -> PageViews:
    """The four storage views of ``pool`` (``[num_pages, page_bytes]`` uint8),
    at the byte offsets of ``row_byte`` (``PageLayout.rows``). Writing through
    a view writes the pool. ``v_scale`` is as stored: SWIZZLED (both canonical
    layouts); ``read_pages`` gives it linear, and a backend declaring its own
    ``nvfp4_suite.reference.layout.CacheLayout`` receives the order it declared.
    """
    _check_pool(pool, num_kv_heads)
    lay = PageLayout(layout, num_kv_heads)
    n, hk = pool.shape[0], num_kv_heads
    page_stride, byte_stride = pool.strides
    views = []
    for part in PARTS:
        r = lay.rows(part)
        views.append(np.lib.stride_tricks.as_strided(
            pool[:, r.offset:], shape=(n, hk, BLK, r.width),
            strides=(page_stride, r.head_stride * byte_stride, r.row_stride * byte_stride, byte_stride),
            writeable=True))
    return PageViews(*views)


def _swizzle_index() -> tuple[np.ndarray, np.ndarray]:
    r = np.arange(BLK)[:, None]
    c = np.arange(ROW_SCALES)[None, :]
    token = (r // 4) * 4 + c % 4
    scale = (r % 4) * 2 + c // 4
    return np.broadcast_to(token, (BLK, ROW_SCALES)), np.broadcast_to(scale, (BLK, ROW_SCALES))


# stored[r, c] holds linear[_SW_TOKEN[r, c], _SW_SCALE[r, c]].
_SW_TOKEN, _SW_SCALE = _swizzle_index()
# The same maps on the flattened 128 x 8 block, in both directions:
# stored.flat[i] = linear.flat[V_SCALE_SWIZZLE[i]], linear.flat[i] = stored.flat[V_SCALE_UNSWIZZLE[i]].
V_SCALE_SWIZZLE = (_SW_TOKEN * ROW_SCALES + _SW_SCALE).reshape(-1)
V_SCALE_UNSWIZZLE = np.argsort(V_SCALE_SWIZZLE)
V_SCALE_SWIZZLE.setflags(write=False)
V_SCALE_UNSWIZZLE.setflags(write=False)


def _permute_last_two(a: np.ndarray, flat: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.shape[-2:] != (BLK, ROW_SCALES):
        raise ValueError(f"V scales must be [..., {BLK}, {ROW_SCALES}], got {a.shape}")
    lead = a.shape[:-2]
    return np.take(a.reshape(lead + (-1,)), flat, axis=-1).reshape(a.shape)


def swizzle_v_scales(linear: np.ndarray) -> np.ndarray:
    """Linear V scales ``[..., 128, 8]`` -> stored (swizzled) order, same shape/dtype.

    Linear ``(t, s)`` goes to row ``(t//4)*4 + s//2``, column ``(s%2)*4 + t%4``.
    """
    return _permute_last_two(linear, V_SCALE_SWIZZLE)


def unswizzle_v_scales(stored: np.ndarray) -> np.ndarray:
    """Inverse of ``swizzle_v_scales``: stored ``[..., 128, 8]`` -> linear."""
    return _permute_last_two(stored, V_SCALE_UNSWIZZLE)


def pack_e2m1(codes: np.ndarray) -> np.ndarray:
    """Pack codes ``[..., 2n]`` (uint8, 0..15) into bytes ``[..., n]``, element 2j low."""
    c = np.asarray(codes).astype(np.uint8)
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_e2m1(data: np.ndarray) -> np.ndarray:
    """Unpack bytes ``[..., n]`` into codes ``[..., 2n]`` uint8 (low nibble first)."""
    d = np.asarray(data).astype(np.uint8)
    out = np.empty(d.shape[:-1] + (2 * d.shape[-1],), np.uint8)
    out[..., 0::2] = d & 0xF
    out[..., 1::2] = d >> 4
    return out


def quantize_nvfp4(x: np.ndarray, global_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Quantise rows of 128 values with the contract's recipe.

    x: float array ``[..., 128]``, finite. global_scale: float > 0.
    Returns ``(data uint8 [..., 64], scales uint8 [..., 8])`` with scales in
    linear order. Per 16-value group, in float32 as a GPU cache writer does:
    ``sf = e4m3fn(amax / (6 * global))`` (nearest even, saturating), then
    codes ``e2m1(x / (float(sf) * global))`` (a division, nearest, ties to
    even, saturating at 6); a group whose ``sf`` is 0 stores code 0.
    """
    a = np.asarray(x, dtype=np.float32)
    if a.shape[-1] != D:
        raise ValueError(f"quantize_nvfp4: last dim is {a.shape[-1]}, expected {D}")
    if not (np.isfinite(global_scale) and global_scale > 0):
        raise ValueError(f"quantize_nvfp4: global_scale = {global_scale}, must be finite and > 0")
    bad = np.argwhere(~np.isfinite(a))
    if bad.size:
        idx = [int(i) for i in bad[0]]
        raise ValueError(f"quantize_nvfp4: x{idx} = {a[tuple(idx)]} is not finite")
    g = np.float32(global_scale)
    grp = a.reshape(a.shape[:-1] + (ROW_SCALES, GROUP))
    amax = np.max(np.abs(grp), axis=-1)
    sf = e4m3fn_encode(amax / (np.float32(E2M1_MAX) * g))
    denom = (e4m3fn_decode(sf) * g)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(denom > 0, grp / np.where(denom > 0, denom, 1), 0).astype(np.float32)
    codes = e2m1_encode(scaled)
    codes = np.where(denom > 0, codes, 0).astype(np.uint8)
    return pack_e2m1(codes.reshape(a.shape)), sf


# Row 256 * scale byte + data byte: the byte's two elements (low nibble first),
# e2m1 * e4m3fn (1 MiB): a single gather of one row dequantises two float64
# elements, scale included. Each entry is the one float64 product the element
# is, exact (2 + 4 significant bits), so gathering it gives the bits
# multiplying would; NaN scale bytes give NaN.
DEQUANT_TABLE = np.ascontiguousarray(
    np.stack(
        [
            np.where(np.arange(256) & 0x8, -1.0, 1.0) * E2M1_MAGNITUDES[np.arange(256) & 0x7],
            np.where(np.arange(256) & 0x80, -1.0, 1.0) * E2M1_MAGNITUDES[(np.arange(256) >> 4) & 0x7],
        ],
        axis=-1,
    )[None, :, :]
    * E4M3FN_TABLE.astype(np.float64)[:, None, None]
).reshape(256 * 256, 2)
DEQUANT_TABLE.setflags(write=False)


def table_index(data: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Rows of a ``[65536, 2]`` byte table (``DEQUANT_TABLE``,
    ``nvfp4_suite.reference.arrays.operand_table``) for data bytes and their scale bytes.

    data: uint8 ``[..., 64]`` codes; scales: uint8 ``[..., 8]`` in linear order,
    scale ``j`` for data bytes ``8j .. 8j+7``. Returns uint16 ``[..., 64]``:
    ``256 * scale + byte``.
    """
    # uint16 is the cheapest index to build, and repeating each scale over its
    # group's 8 bytes first keeps the OR's inner loop long (a broadcast would
    # run it 8 elements at a time).
    idx = np.repeat(np.asarray(scales, np.uint8).astype(np.uint16) << 8, GROUP // 2, axis=-1)
    idx |= np.asarray(data, np.uint8)
    return idx


def table_rows(table: np.ndarray, index, out=None) -> np.ndarray:
    """``table[index]``: the rows of a float64 ``[n, 2]`` table (``DEQUANT_TABLE``,
    ``nvfp4_suite.reference.arrays.operand_table``) at integer ``index`` ``[...]``
    -> float64 ``[..., 2]``, written into ``out`` when given. Every index must be
    a row of the table: one that is not is clamped (unchecked, for speed)."""
    # An intp index takes numpy's fast path (take converts others more slowly);
    # mode="clip" skips the bounds-error handling and writes out unbuffered.
    return np.take(table, np.asarray(index).astype(np.intp, copy=False), axis=0, mode="clip", out=out)


def dequantize(data: np.ndarray, scales: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Rows of ``e2m1 * e4m3fn`` without the global scale, exact in float32 and float64.

    data: uint8 ``[..., 64]`` codes (element ``2j`` in the low nibble of byte
    ``j``); scales: uint8 ``[..., 8]`` in linear order (V scales unswizzled).
    Returns ``dtype`` ``[..., 128]``. NaN scale bytes give NaN in their group.
    One table gather (``DEQUANT_TABLE`` at ``table_index``).
    """
    lead = np.shape(data)[:-1]
    vals = table_rows(DEQUANT_TABLE, table_index(data, scales))
    return vals.reshape(lead + (D,)).astype(dtype, copy=False)


def write_pages(
    pool: np.ndarray,
    layout: str,
    num_kv_heads: int,
    k_data: np.ndarray,
    k_scale: np.ndarray,
    v_data: np.ndarray,
    v_scale: np.ndarray,
) -> None:
    """Store raw rows into every page of ``pool`` in place.

    k_data, v_data: uint8 ``[pages, Hkv, 128, 64]``; k_scale, v_scale: uint8
    ``[pages, Hkv, 128, 8]`` in linear order (V is swizzled here).
    """
    views = page_views(pool, layout, num_kv_heads)
    views.k_data[...] = k_data
    views.k_scale[...] = k_scale
    views.v_data[...] = v_data
    views.v_scale[...] = swizzle_v_scales(np.asarray(v_scale, dtype=np.uint8))


def read_pages(pool: np.ndarray, layout: str, num_kv_heads: int, pages=None) -> PageViews:
    """Raw rows of ``pages`` (int index array or None for all), V scales unswizzled.

    Returns uint8 copies: k_data/v_data ``[n, Hkv, 128, 64]``, k_scale/v_scale
    ``[n, Hkv, 128, 8]`` linear.
    """
    views = page_views(pool, layout, num_kv_heads)
    sel = slice(None) if pages is None else np.asarray(pages, dtype=np.int64)
    return PageViews(
        views.k_data[sel].copy(),
        views.k_scale[sel].copy(),
        views.v_data[sel].copy(),
        unswizzle_v_scales(views.v_scale[sel]),
    )


def dequantize_pages(
    pool: np.ndarray, layout: str, num_kv_heads: int, pages=None, dtype=np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """Dequantised K and V of ``pages`` without global scales.

    Returns ``(k, v)``, each ``dtype`` ``[n, Hkv, 128 tokens, 128 dims]``.
    """
    r = read_pages(pool, layout, num_kv_heads, pages)
    return dequantize(r.k_data, r.k_scale, dtype), dequantize(r.v_data, r.v_scale, dtype)


def build_pool(
    k: np.ndarray,
    v: np.ndarray,
    *,
    layout: str,
    k_global_scale: float,
    v_global_scale: float,
) -> np.ndarray:
    """Quantise float K/V ``[pages, Hkv, 128, 128]`` into a new pool.

    Returns uint8 ``[pages, page_bytes(Hkv)]`` in ``layout``.
    """
    k = np.asarray(k)
    v = np.asarray(v)
    if k.ndim != 4 or k.shape[2:] != (BLK, D) or v.shape != k.shape:
        raise ValueError(
            f"build_pool: k and v must both be [pages, Hkv, 128, 128], got {k.shape} and {v.shape}"
        )
    pages, hk = k.shape[:2]
    kd, ks = quantize_nvfp4(k, k_global_scale)
    vd, vs = quantize_nvfp4(v, v_global_scale)
    pool = np.zeros((pages, page_bytes(hk)), np.uint8)
    write_pages(pool, layout, hk, kd, ks, vd, vs)
    return pool


@dataclasses.dataclass(frozen=True)
class PageLayout:
    """A page layout bound to a KV-head count: ``PageLayout("planar", 4)``.

    name: ``"token_rows"`` or ``"planar"``; num_kv_heads: Hkv >= 1. Owns the
    byte arithmetic of a page (``row_byte``) as plain ints, for backends that
    address the pool themselves: ``rows(part)`` gives one part's offset and
    strides, ``page_bytes`` the page stride.
    """

    name: str
    num_kv_heads: int

    def __post_init__(self):
        if self.name not in LAYOUTS:
            raise ValueError(f"layout = {self.name!r}, expected one of {LAYOUTS}")
        page_bytes(self.num_kv_heads)

    @property
    def page_bytes(self) -> int:
        """Bytes of one page for this KV-head count (the pool's page stride)."""
        return page_bytes(self.num_kv_heads)

    def rows(self, part: str) -> Rows:
        """Offset, head stride, row stride and width, in bytes, of ``part``'s rows
        (one of ``PARTS``) in a page; ``row_byte`` read as an affine map."""
        at = functools.partial(row_byte, self.name, self.num_kv_heads, part)
        offset = at(0, 0)
        width = ROW_SCALES if part in ("k_scale", "v_scale") else ROW_DATA
        return Rows(offset, at(1, 0) - offset, at(0, 1) - offset, width)

    def views(self, pool: np.ndarray) -> PageViews:
        """The four storage views of ``pool``; see ``page_views``."""
        return page_views(pool, self.name, self.num_kv_heads)

    def empty_pool(self, num_pages: int) -> np.ndarray:
        """A zeroed uint8 pool ``[num_pages, page_bytes]``."""
        return np.zeros((num_pages, self.page_bytes), np.uint8)


def pool_from_codes(
    k_codes: np.ndarray,
    k_scale: np.ndarray,
    v_codes: np.ndarray,
    v_scale: np.ndarray,
    *,
    layout: str,
) -> np.ndarray:
    """A pool written from explicit E2M1 codes and E4M3 scale bytes.

    k_codes, v_codes: uint8 ``[pages, Hkv, 128, 128]`` (0..15);
    k_scale, v_scale: uint8 ``[pages, Hkv, 128, 8]`` linear. For hand-built
    cases whose values must be exact. Returns uint8 ``[pages, page_bytes]``.
    """
    k_codes = np.asarray(k_codes, np.uint8)
    if k_codes.ndim != 4 or k_codes.shape[2:] != (BLK, D):
        raise ValueError(f"pool_from_codes: k_codes must be [pages, Hkv, 128, 128], got {k_codes.shape}")
    pages, hk = k_codes.shape[:2]
    pool = np.zeros((pages, page_bytes(hk)), np.uint8)
    write_pages(
        pool, layout, hk, pack_e2m1(k_codes), k_scale, pack_e2m1(v_codes), v_scale
    )
    return pool
