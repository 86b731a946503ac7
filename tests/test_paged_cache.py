"""nvfp4_suite.reference.paged_cache: layouts, the V-scale swizzle, quantisation, readers."""

import numpy as np
import pytest

from nvfp4_suite.reference import formats as F
from nvfp4_suite.reference import paged_cache as PC

RNG_SEED = 7


def test_page_bytes_matches_contract():
    assert PC.page_bytes(1) == 2 * 128 * 72
    assert PC.page_bytes(4) == 2 * 4 * 128 * 72
    with pytest.raises(ValueError, match="num_kv_heads = 0"):
        PC.page_bytes(0)


def test_token_rows_views_sit_at_the_seeds_offsets():
    hk, pages = 3, 2
    pool = np.zeros((pages, PC.page_bytes(hk)), np.uint8)
    v = PC.page_views(pool, "token_rows", hk)
    v.k_data[1, 2, 5, 7] = 1
    v.k_scale[1, 2, 5, 3] = 2
    v.v_data[0, 1, 127, 63] = 3
    v.v_scale[0, 0, 0, 0] = 4
    t = pool.reshape(pages, 2 * hk, 128, 72)
    assert t[1, 2, 5, 7] == 1 and t[1, 2, 5, 64 + 3] == 2
    assert t[0, hk + 1, 127, 63] == 3 and t[0, hk, 0, 64] == 4
    assert np.count_nonzero(pool) == 4


def test_planar_views_sit_at_the_contracts_offsets():
    hk, pages = 2, 2
    pool = np.zeros((pages, PC.page_bytes(hk)), np.uint8)
    v = PC.page_views(pool, "planar", hk)
    v.k_data[1, 1, 2, 3] = 1
    v.k_scale[1, 1, 2, 3] = 2
    v.v_data[1, 1, 2, 3] = 3
    v.v_scale[1, 1, 2, 3] = 4
    row = pool[1]
    base = (1 * 128 + 2)
    assert row[base * 64 + 3] == 1
    assert row[hk * 128 * 64 + base * 8 + 3] == 2
    assert row[hk * 128 * 72 + base * 64 + 3] == 3
    assert row[hk * 128 * 136 + base * 8 + 3] == 4
    assert np.count_nonzero(pool) == 4


@pytest.mark.parametrize("layout", PC.LAYOUTS)
@pytest.mark.parametrize("hk", [1, 2, 3])
def test_page_layout_rows_tile_every_byte_of_a_page_once(layout, hk):
    lay = PC.PageLayout(layout, hk)
    owner = np.zeros(lay.page_bytes, np.int64)
    h, t, c = np.meshgrid(np.arange(hk), np.arange(128), np.arange(64), indexing="ij")
    for part in PC.PARTS:
        r = lay.rows(part)
        cols = c[..., :r.width]
        at = r.offset + h[..., :r.width] * r.head_stride + t[..., :r.width] * r.row_stride + cols
        np.add.at(owner, at.ravel(), 1)
        # The strides restate row_byte exactly.
        for hh, tt in ((0, 0), (hk - 1, 127), (hk // 2, 77)):
            assert r.offset + hh * r.head_stride + tt * r.row_stride == PC.row_byte(layout, hk, part, hh, tt)
    assert np.all(owner == 1)


def test_page_layout_rows_hand_checked():
    # token_rows, Hkv 2: V of head 0 is slab 2 of 72-byte rows; its scales follow the 64 data bytes.
    assert PC.PageLayout("token_rows", 2).rows("v_scale") == (2 * 128 * 72 + 64, 128 * 72, 72, 8)
    # planar, Hkv 2: V scales start after 2 * 128 * (64 + 8 + 64) bytes.
    assert PC.PageLayout("planar", 2).rows("v_scale") == (2 * 128 * 136, 128 * 8, 8, 8)
    assert PC.PageLayout("planar", 2).rows("k_data") == (0, 128 * 64, 64, 64)
    with pytest.raises(ValueError, match="part = 'q'"):
        PC.row_byte("planar", 1, "q", 0, 0)
    with pytest.raises(ValueError, match="layout = 'rows'"):
        PC.row_byte("rows", 1, "k_data", 0, 0)


def test_views_of_a_strided_pool_write_the_pool():
    hk = 2
    big = np.zeros((3, 2 * PC.page_bytes(hk)), np.uint8)
    pool = big[:, ::2]  # every other byte: a non-contiguous pool
    for layout in PC.LAYOUTS:
        pool[...] = 0
        PC.page_views(pool, layout, hk).v_scale[2, 1, 5, 3] = 9
        assert pool[2, PC.row_byte(layout, hk, "v_scale", 1, 5) + 3] == 9
        assert np.count_nonzero(big) == 1


def test_views_reject_a_wrong_pool():
    with pytest.raises(ValueError, match="expected page_bytes"):
        PC.page_views(np.zeros((2, 100), np.uint8), "planar", 1)
    with pytest.raises(ValueError, match="layout = 'rows'"):
        PC.page_views(np.zeros((1, PC.page_bytes(1)), np.uint8), "rows", 1)


def test_v_scale_swizzle_hand_checked_positions():
    # linear (t, s) -> row (t//4)*4 + s//2, column (s%2)*4 + t%4; worked by hand:
    cases = {(0, 0): (0, 0), (1, 0): (0, 1), (3, 0): (0, 3), (0, 1): (0, 4),
             (2, 1): (0, 6), (0, 2): (1, 0), (0, 7): (3, 4), (5, 3): (5, 5),
             (127, 7): (127, 7), (126, 6): (127, 2)}
    for (t, s), (r, c) in cases.items():
        lin = np.zeros((128, 8), np.uint8)
        lin[t, s] = 1
        st = PC.swizzle_v_scales(lin)
        assert tuple(np.argwhere(st)[0]) == (r, c), (t, s)


def test_v_scale_swizzle_puts_one_scale_group_of_4_tokens_in_each_word():
    lin = (np.arange(128)[:, None] * 8 + np.arange(8)[None, :]).astype(np.uint16)
    st = PC.swizzle_v_scales(lin)
    words = st.reshape(32, 4, 2, 4)  # [token group, row in group, word, byte]
    for tg in range(32):
        for j in range(4):
            for w in range(2):
                s = 2 * j + w
                assert list(words[tg, j, w]) == [(4 * tg + i) * 8 + s for i in range(4)]


def test_v_scale_unswizzle_inverts_swizzle():
    rng = np.random.default_rng(RNG_SEED)
    a = rng.integers(0, 256, (3, 2, 128, 8), dtype=np.uint8)
    assert np.array_equal(PC.unswizzle_v_scales(PC.swizzle_v_scales(a)), a)
    assert not np.array_equal(PC.swizzle_v_scales(a), a)


def test_pack_unpack_nibble_order():
    codes = np.array([1, 2, 15, 0], np.uint8)
    assert list(PC.pack_e2m1(codes)) == [0x21, 0x0F]
    assert list(PC.unpack_e2m1(PC.pack_e2m1(codes))) == list(codes)


def test_quantize_roundtrip_of_representable_values_is_exact():
    rng = np.random.default_rng(RNG_SEED)
    codes = rng.integers(0, 16, (50, 128)).astype(np.uint8)
    codes[:, ::16] = 7  # every group's amax is 6 * 0.75 = 4.5
    x = F.e2m1_decode(codes) * np.float32(0.75)
    data, sf = PC.quantize_nvfp4(x, 0.125)
    # sf = 4.5 / (6 * 0.125) = 6, and x / (6 * 0.125) lands back on the codes.
    assert np.all(F.e4m3fn_decode(sf) == 6.0)
    assert np.array_equal(PC.dequantize(data, sf) * np.float32(0.125), x)


def test_dequantize_is_the_codecs_product_for_every_byte_and_scale_byte():
    data = np.broadcast_to(np.arange(256, dtype=np.uint8)[:, None, None], (256, 256, 64))
    scales = np.broadcast_to(np.arange(256, dtype=np.uint8)[None, :, None], (256, 256, 8))
    codes = PC.unpack_e2m1(data)
    want = F.e2m1_decode(codes).astype(np.float64) * np.repeat(F.e4m3fn_decode(scales).astype(np.float64), 16, -1)
    for dtype in (np.float32, np.float64):
        got = PC.dequantize(data, scales, dtype)
        assert got.dtype == dtype and got.shape == (256, 256, 128)
        np.testing.assert_array_equal(got, want.astype(dtype))  # NaN where the scale byte is NaN


def test_table_index_pairs_each_group_scale_with_its_own_eight_bytes():
    """Row ``256 * scale + byte`` for every data byte, each of the 8 groups of a row
    under its own scale byte (all 256 of them, in every group position)."""
    data = np.broadcast_to(np.arange(256, dtype=np.uint8).reshape(4, 64), (256, 4, 64))
    # Row r of block b: group j's scale is byte (b + 37 * j + r) % 256, distinct within a row.
    b, r, j = np.meshgrid(np.arange(256), np.arange(4), np.arange(8), indexing="ij")
    scales = ((b + 37 * j + r) % 256).astype(np.uint8)
    got = PC.table_index(data, scales)
    want = 256 * np.repeat(scales.astype(np.int64), 8, axis=-1) + data
    assert got.shape == (256, 4, 64) and np.array_equal(got, want)
    # Every (scale byte, data byte) pair, so every row of the table, is reached.
    assert np.array_equal(np.unique(got), np.arange(65536))


def test_quantize_error_within_half_step_per_group():
    rng = np.random.default_rng(RNG_SEED + 1)
    x = rng.standard_normal((400, 128)) * 10.0 ** rng.integers(-3, 3, (400, 1))
    g = 0.01
    data, sf = PC.quantize_nvfp4(x, g)
    deq = PC.dequantize(data, sf, np.float64) * np.float32(g)
    grp = x.reshape(400, 8, 16)
    err = np.abs(deq.reshape(400, 8, 16) - grp)
    scale = (F.e4m3fn_decode(sf).astype(np.float64) * np.float32(g))[..., None]
    # Below 6*scale the E2M1 grid step is at most 2*scale, so rounding moves a
    # value by at most one scale; above it (the E4M3 scale rounded down) the
    # value saturates to 6*scale, off by amax - 6*scale.
    amax = np.abs(grp).max(-1, keepdims=True)
    bound = np.maximum(scale, amax - 6 * scale) * (1 + 1e-6)
    assert np.all(err <= bound)


def test_quantize_zero_group_stores_zero_codes():
    x = np.zeros((1, 128))
    x[0, 16:32] = 1.0
    data, sf = PC.quantize_nvfp4(x, 1.0)
    assert sf[0, 0] == 0 and np.all(PC.unpack_e2m1(data)[0, :16] == 0)
    assert sf[0, 1] != 0


def test_quantize_rejects_non_finite_naming_index():
    x = np.zeros((2, 128))
    x[1, 5] = np.inf
    with pytest.raises(ValueError, match=r"x\[1, 5\] = inf"):
        PC.quantize_nvfp4(x, 1.0)
    with pytest.raises(ValueError, match="global_scale"):
        PC.quantize_nvfp4(np.zeros((1, 128)), 0.0)


def test_both_layouts_hold_identical_values():
    rng = np.random.default_rng(RNG_SEED + 2)
    k = rng.standard_normal((3, 2, 128, 128))
    v = rng.standard_normal((3, 2, 128, 128))
    got = [
        PC.dequantize_pages(PC.build_pool(k, v, layout=lay, k_global_scale=0.1, v_global_scale=0.2), lay, 2)
        for lay in PC.LAYOUTS
    ]
    a = PC.build_pool(k, v, layout="token_rows", k_global_scale=0.1, v_global_scale=0.2)
    b = PC.build_pool(k, v, layout="planar", k_global_scale=0.1, v_global_scale=0.2)
    assert not np.array_equal(a, b)
    assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1])


def test_build_pool_roundtrip_close_to_input():
    rng = np.random.default_rng(RNG_SEED + 3)
    k = rng.standard_normal((2, 1, 128, 128))
    pool = PC.build_pool(k, k, layout="planar", k_global_scale=0.01, v_global_scale=0.01)
    kk, vv = PC.dequantize_pages(pool, "planar", 1)
    assert np.array_equal(kk, vv)
    rel = np.abs(kk * 0.01 - k).max() / np.abs(k).max()
    assert rel < 0.25


def test_pool_from_codes_reads_back_codes_and_linear_scales():
    rng = np.random.default_rng(RNG_SEED + 4)
    kc = rng.integers(0, 16, (2, 2, 128, 128), dtype=np.uint8)
    vc = rng.integers(0, 16, (2, 2, 128, 128), dtype=np.uint8)
    ks = rng.integers(0, 0x7F, (2, 2, 128, 8), dtype=np.uint8)
    vs = rng.integers(0, 0x7F, (2, 2, 128, 8), dtype=np.uint8)
    for lay in PC.LAYOUTS:
        pool = PC.pool_from_codes(kc, ks, vc, vs, layout=lay)
        r = PC.read_pages(pool, lay, 2)
        assert np.array_equal(PC.unpack_e2m1(r.k_data), kc)
        assert np.array_equal(PC.unpack_e2m1(r.v_data), vc)
        assert np.array_equal(r.k_scale, ks) and np.array_equal(r.v_scale, vs)


def test_page_layout_object():
    lay = PC.PageLayout("planar", 2)
    pool = lay.empty_pool(3)
    assert pool.shape == (3, PC.page_bytes(2))
    assert lay.views(pool).v_scale.shape == (3, 2, 128, 8)
    with pytest.raises(ValueError):
        PC.PageLayout("nope", 1)


def test_the_cache_writer_and_page_decoder_are_exported_and_agree():
    import nvfp4_suite.reference as R

    for name in ("quantize_nvfp4", "dequantize", "dequantize_pages", "read_pages", "page_views", "PageViews",
                 "pool_from_codes", "swizzle_v_scales", "unswizzle_v_scales"):
        assert name in R.__all__ and getattr(R, name) is getattr(PC, name)
    rng = np.random.default_rng(RNG_SEED)
    k, v = rng.normal(0, 1, (2, 2, 2, 128, 128))
    pool = R.build_pool(k, v, layout="planar", k_global_scale=0.5, v_global_scale=0.25)
    kd, ks = R.quantize_nvfp4(k, 0.5)
    k_pages, v_pages = R.dequantize_pages(pool, "planar", 2)
    assert np.array_equal(k_pages, R.dequantize(kd, ks))
    assert np.array_equal(R.read_pages(pool, "planar", 2).k_data, kd)
    assert np.array_equal(v_pages, R.dequantize(*R.quantize_nvfp4(v, 0.25)))


@pytest.mark.parametrize("name", PC.LAYOUTS)
def test_page_layout_rows_are_the_layout_records_offsets_and_strides(name):
    from nvfp4_suite.reference import layout as L

    for hk in (1, 2, 5):
        lay = PC.PageLayout(name, hk)
        for part in PC.PARTS:
            v = L.CANONICAL[name].view(part)
            assert lay.rows(part) == PC.Rows(v.offset.at(hk), v.head.at(hk), v.token.at(hk), L.WIDTH[part])
            assert v.page.at(hk) == lay.page_bytes
