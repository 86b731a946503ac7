"""nvfp4_suite.reference.emulate: properties of the seed-geometry emulation."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nvfp4_suite.reference as R
from nvfp4_suite.reference.compare import compare_with_oracle, interval_vs_oracle
from nvfp4_suite.reference.emulate import exp2_f32, fma_f32, split_schedule
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.engine.strategies import problems


@given(problems(), st.integers(1, 8))
def test_emulation_is_within_the_exact_bound_of_the_oracle(p, splits):
    e = R.emulate(p, splits=splits)
    rep = compare_with_oracle(p, e, p_bf16=True, geometry=R.SEED_GEOMETRY, splits=splits)
    assert rep.passed, rep.details()


@given(problems(max_reqs=4))
def test_emulation_never_nan_and_empty_rows_exactly_zero(p):
    e = R.emulate_details(p, splits=3)
    assert not np.isnan(e.out).any()
    seen = p.key_mask().any(axis=(2, 3))  # [Hkv, rows]
    empty = np.repeat(~seen.T, 16, axis=1)  # [rows, H]
    assert np.all(e.out[empty] == 0) and not np.signbit(e.out[empty]).any()


@given(problems(max_reqs=4), st.integers(1, 8), st.integers(1, 8))
def test_every_split_count_lies_in_the_oracle_interval_for_p_in_bf16(p, s1, s2):
    # Each split count rescales P by its own running max, so bf16(P) rounds
    # differently: the outputs differ by P-rounding error, not float32 noise,
    # and each lies inside the exact oracle's interval that allows for it.
    for s in (s1, s2):
        iv = interval_vs_oracle(p, p_bf16=True, geometry=R.SEED_GEOMETRY, splits=s)
        out = R.emulate(p, splits=s)
        assert np.all((iv.lo <= out) & (out <= iv.hi))


@given(problems(max_reqs=4), st.integers(0, 5))
def test_splits_differing_only_by_empty_splits_are_bitwise_equal(p, extra):
    n = int(p.valid_slots.sum(axis=-1).max(initial=0))
    s = max(n, 1)
    a = R.emulate(p, splits=s)
    b = R.emulate(p, splits=s + extra)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_split_schedule_cuts_ranked_valid_slots_into_contiguous_chunks():
    valid = np.array([[False, True, True, False, True, True, True]])
    slots, T = split_schedule(valid, 2)
    assert T == 3
    assert slots[0, 0].tolist() == [1, 2, 4] and slots[0, 1].tolist() == [5, 6, -1]
    slots, T = split_schedule(valid, 8)
    assert T == 1 and slots[0, :, 0].tolist() == [1, 2, 4, 5, 6, -1, -1, -1]


def test_fma_f32_rounds_once():
    # a*b = 1 + 2**-24 + 2**-48 exactly; + 0 must round up to 1 + 2**-23 in one rounding
    # (float32(a*b) would land on the tie 1 + 2**-24 and round to even: 1).
    a = np.float32(1 + 2.0**-24 * 2)  # 1 + 2**-23
    b = np.float32(1 - 2.0**-24)
    exact = (1 + 2.0**-23) * (1 - 2.0**-24)  # = 1 + 2**-24 - 2**-47: just below the tie
    assert fma_f32(a, b, np.float32(0)) == np.float32(exact)
    x = np.float32(1 + 2.0**-23)
    y = np.float32(1 + 2.0**-23)  # x*y = 1 + 2**-22 + 2**-46
    assert fma_f32(x, y, np.float32(-1)) == np.float32(2.0**-22 + 2.0**-46)
    assert fma_f32(np.float32(-np.inf), np.float32(2), np.float32(-3)) == -np.inf


def test_exp2_f32_edges():
    assert exp2_f32(np.float32(-np.inf)) == 0
    assert exp2_f32(np.float32(0)) == 1
    assert exp2_f32(np.float32(200)) == np.inf


def test_emulation_of_one_key_is_its_value():
    p = random_problem(1, reqs=1, q_len=1, topk=1, seq_lens=[1])
    from nvfp4_suite.reference.paged_cache import dequantize_pages

    page = p.block_table[0, 0]
    _, v = dequantize_pages(p.pool, p.layout, 1, [page])
    want = R.bf16_round(np.float32(v[0, 0, 0]) * np.float32(p.v_global_scale))
    e = R.emulate(p)
    assert np.array_equal(e[0], np.broadcast_to(want, (16, 128)))


def test_geometry_rejects_impossible_shapes():
    with pytest.raises(ValueError):
        R.Geometry(keys_per_max=48)
    with pytest.raises(ValueError):
        R.Geometry(keys_per_max=32, keys_per_lane=12)
    with pytest.raises(ValueError, match="splits = 0"):
        R.emulate(random_problem(0), splits=0)


def test_other_geometry_without_p_rounding_is_within_the_exact_class_bound():
    p = random_problem(5, reqs=3, q_len=2, num_kv_heads=2, topk=8)
    g = R.Geometry(keys_per_max=128, keys_per_lane=32, p_bf16=False)
    e = R.emulate(p, splits=2, geometry=g)
    rep = compare_with_oracle(p, e, p_bf16=False, geometry=g, splits=2)
    assert rep.passed, rep.details()
    assert not np.array_equal(R.emulate(p, splits=2), e)


def test_emulation_validates_first():
    p = random_problem(2)
    with pytest.raises(R.ScaleError):
        R.emulate(dataclasses.replace(p, k_global_scale=0.0))
