"""nvfp4_suite.reference.layout: a cache layout as data, re-packed both ways with every byte kept."""

import dataclasses
import json
import tomllib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvfp4_suite.reference import layout as L
from nvfp4_suite.reference import paged_cache as PC
from nvfp4_suite.reference.examples import random_problem

# A kernel's K and V caches [pages, 128, Hkv, 72]: codes then scales in one row, V scales linear.
INTERLEAVED = L.CacheLayout(
    name="kv72",
    k_data=L.View("k_cache", 0, "9216*Hkv", "72*Hkv", 72),
    k_scale=L.View("k_cache", 64, "9216*Hkv", "72*Hkv", 72),
    v_data=L.View("v_cache", 0, "9216*Hkv", "72*Hkv", 72),
    v_scale=L.View("v_cache", 64, "9216*Hkv", "72*Hkv", 72),
)
# SEPARATE with the head and token strides exchanged: [pages, Hkv, 128, row].
HEAD_MAJOR = dataclasses.replace(
    L.SEPARATE, name="head-major",
    **{p: dataclasses.replace(getattr(L.SEPARATE, p), token=L.WIDTH[p], head=128 * L.WIDTH[p]) for p in L.PARTS})
ALL = (L.TOKEN_ROWS, L.PLANAR, L.SEPARATE, INTERLEAVED, HEAD_MAJOR,
       dataclasses.replace(L.SEPARATE, name="separate-swizzled", v_scale_order="swizzled"))


def _random_pool(seed, pages, hk):
    return np.random.default_rng(seed).integers(0, 256, (pages, PC.page_bytes(hk)), dtype=np.uint8)


@pytest.mark.parametrize("name", PC.LAYOUTS)
def test_canonical_layouts_are_records_giving_row_byte_for_every_head_token_and_part(name):
    for hk in range(1, 5):
        for part in L.PARTS:
            for h in range(hk):
                t = np.arange(128)
                assert np.array_equal(PC.row_byte(name, hk, part, h, t), L.CANONICAL[name].row_byte(hk, part, h, t))
        # Its views of a pool are page_views, byte for byte (V scales as stored, swizzled).
        pool = _random_pool(hk, 2, hk)
        for a, b in zip(L.views(name, {"pool": pool}, hk), PC.page_views(pool, name, hk)):
            assert np.array_equal(a, b)


@given(seed=st.integers(0, 2**32 - 1), hk=st.integers(1, 4), pages=st.integers(1, 3),
       src=st.sampled_from(PC.LAYOUTS), dst=st.sampled_from(ALL))
def test_pack_then_unpack_gives_the_pool_back_byte_for_byte(seed, hk, pages, src, dst):
    pool = _random_pool(seed, pages, hk)
    tensors = L.pack(pool, src, hk, dst)
    assert set(tensors) == set(dst.tensor_names())
    assert np.array_equal(L.unpack(tensors, dst, hk, src), pool)
    # Every value keeps its bytes: the linear rows read from either side are equal.
    for a, b in zip(L.read(dst, tensors, hk), PC.read_pages(pool, src, hk)):
        assert np.array_equal(a, b)


def test_views_are_in_the_declared_order_so_a_linear_layout_needs_no_unswizzle():
    pool = _random_pool(5, 3, 2)
    linear = PC.read_pages(pool, "token_rows", 2).v_scale
    sep = L.views(L.SEPARATE, L.pack(pool, "token_rows", 2, L.SEPARATE), 2)
    assert np.array_equal(sep.v_scale, linear)
    swz = L.views(ALL[-1], L.pack(pool, "token_rows", 2, ALL[-1]), 2)
    assert np.array_equal(swz.v_scale, PC.swizzle_v_scales(linear))
    # The separate layout is four [pages, 128, Hkv, row] arrays.
    t = L.pack(pool, "token_rows", 2, L.SEPARATE)
    assert np.array_equal(t["v_scales"].reshape(3, 128, 2, 8).transpose(0, 2, 1, 3), linear)
    assert np.array_equal(t["k_codes"].reshape(3, 128, 2, 64).transpose(0, 2, 1, 3),
                          PC.read_pages(pool, "token_rows", 2).k_data)


@pytest.mark.parametrize("lay", ALL, ids=lambda x: x.name)
def test_toml_and_json_files_give_the_same_record(lay, tmp_path):
    assert L.CacheLayout.from_data(tomllib.loads(lay.to_toml())) == lay
    assert L.CacheLayout.from_data(json.loads(lay.to_json())) == lay
    for suffix in (".toml", ".json"):
        L.save(lay, tmp_path / f"x{suffix}")
        assert L.load(tmp_path / f"x{suffix}") == lay


@pytest.mark.parametrize("text, want", [
    (0, (0, 0)), (72, (72, 0)), ("Hkv", (0, 1)), ("8192*Hkv", (0, 8192)), ("Hkv*8", (0, 8)),
    ("9216*Hkv+64", (64, 9216)), ("64 + 2*Hkv + Hkv", (64, 3)),
])
def test_affine_strides_parse(text, want):
    a = L.Affine.parse(text)
    assert (a.const, a.per_hkv) == want
    assert L.Affine.parse(a.to_data()) == a
    assert a.at(3) == want[0] + 3 * want[1]


@pytest.mark.parametrize("text", ["8192*H", "-4", "2**Hkv", 1.5, True, "Hkv-1"])
def test_a_bad_stride_is_refused_naming_it(text):
    with pytest.raises(L.LayoutError, match="stride|expected|term"):
        L.Affine.parse(text, "stride")


def _with(part, **kw):
    return dataclasses.replace(L.SEPARATE, **{part: dataclasses.replace(getattr(L.SEPARATE, part), **kw)})


@pytest.mark.parametrize("lay, msg", [
    (_with("k_scale", tensor="k_codes"), "page stride"),  # a second page stride for one tensor
    (_with("k_scale", tensor="k_codes", page="8192*Hkv"), "share byte"),  # overlaps the codes
    (_with("v_data", token=32), "share byte"),
    (_with("v_scale", offset=8), "reaches byte"),
])
def test_a_layout_whose_rows_overlap_or_leave_the_page_is_refused(lay, msg):
    with pytest.raises(L.LayoutError, match=msg):
        lay.check(2)


@pytest.mark.parametrize("change, msg", [
    ({"v_scale_order": "zigzag"}, "v_scale_order"),
    ({"scale_format": "e4m3fnuz"}, "scale_format"),
])
def test_unknown_order_or_scale_format_is_refused(change, msg):
    with pytest.raises(L.LayoutError, match=msg):
        dataclasses.replace(L.SEPARATE, **change)


@pytest.mark.parametrize("edit, msg", [
    (lambda d: d.pop("k_data"), "missing keys"),
    (lambda d: d.update(extra=1), "unknown keys"),
    (lambda d: d["v_scale"].pop("head"), "expected exactly"),
    (lambda d: d["v_scale"].update(tensor="v scales"), "tensor name"),
])
def test_a_malformed_layout_file_is_refused_naming_the_key(edit, msg, tmp_path):
    d = L.SEPARATE.to_data()
    edit(d)
    (tmp_path / "l.json").write_text(json.dumps(d))
    with pytest.raises(L.LayoutError, match=msg):
        L.load(tmp_path / "l.json")


def test_tensors_of_the_wrong_shape_are_refused():
    pool = _random_pool(1, 2, 1)
    t = L.pack(pool, "planar", 1, L.SEPARATE)
    t["v_scales"] = t["v_scales"][:, :-8]
    with pytest.raises(L.LayoutError, match="v_scales"):
        L.unpack(t, L.SEPARATE, 1)
    with pytest.raises(L.LayoutError, match="missing"):
        L.unpack({"k_codes": t["k_codes"]}, L.SEPARATE, 1)


def test_present_hands_the_cache_in_the_declared_layout_and_keeps_the_problem():
    p = random_problem(4, reqs=2, q_len=1, num_kv_heads=2, topk=4, seq_lens=[300, 200], layout="planar")
    assert L.present(p, None) is p
    seen = L.present(p, L.SEPARATE)
    assert isinstance(seen, L.LaidOutProblem) and seen.cache_layout == L.SEPARATE
    assert seen.pool is p.pool and seen.layout == "planar"
    for a, b in zip(seen.views(), PC.read_pages(p.pool, "planar", 2)):
        assert np.array_equal(a, b)
    seen.validate()


@pytest.mark.parametrize("canonical", PC.LAYOUTS)
def test_to_problem_rebuilds_the_problem_from_a_dump(canonical):
    p = random_problem(6, reqs=2, q_len=2, num_kv_heads=2, topk=4, seq_lens=[300, 200], layout=canonical)
    t = L.pack(p.pool, p.layout, 2, INTERLEAVED)
    back = L.to_problem(t, INTERLEAVED, q=p.q, topk=p.topk, block_table=p.block_table, seq_lens=p.seq_lens,
                        num_kv_heads=2, q_len=2, sm_scale=p.sm_scale, k_global_scale=p.k_global_scale,
                        v_global_scale=p.v_global_scale, canonical=canonical)
    assert np.array_equal(back.pool, p.pool) and back.layout == canonical
    back.validate()
