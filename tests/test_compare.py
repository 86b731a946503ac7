"""reference.compare: ulp distance, bounds and the report."""

import numpy as np

import reference as R
from reference.formats import bf16_ulp
from reference.compare import (
    bound_vs_emulation,
    compare_with_emulation,
    compare_with_oracle,
    ulp_distance,
)
from reference.examples import random_problem


def test_ulp_distance_is_sign_aware_and_nan_aware():
    f = R.from_bf16_bits
    one, nxt = f(np.uint16(0x3F80)), f(np.uint16(0x3F81))
    assert ulp_distance(one, nxt) == 1
    assert ulp_distance(np.float32(0.0), np.float32(-0.0)) == 0
    # +smallest subnormal to -smallest subnormal: one step each side of zero.
    assert ulp_distance(f(np.uint16(0x0001)), f(np.uint16(0x8001))) == 2
    assert ulp_distance(np.float32(np.nan), one) == np.inf
    assert ulp_distance(np.float32(np.nan), np.float32(np.nan)) == 0


def test_bf16_ulp():
    assert bf16_ulp(1.0) == 2.0**-7 and bf16_ulp(1.5) == 2.0**-7 and bf16_ulp(2.0) == 2.0**-6
    assert bf16_ulp(0.0) == 2.0**-133 and bf16_ulp(2.0**-130) == 2.0**-133


def _problem():
    p = random_problem(3, reqs=3, q_len=2, num_kv_heads=2, topk=6, seq_lens=[400, 0, 129])
    return p


def test_emulation_compared_with_itself_passes_with_zero_ulp():
    p = _problem()
    rep = compare_with_emulation(p, R.emulate(p, splits=2), splits=2)
    assert rep.passed and rep.max_ulp == 0 and rep.n_elements == p.q.size


def test_one_element_off_by_many_ulps_fails_and_is_located():
    p = _problem()
    got = R.emulate(p).copy()
    exp, bound = bound_vs_emulation(p)
    r, h, d = 4, 20, 7  # row 4: request 2, position 127
    got[r, h, d] = R.bf16_round(got[r, h, d] + 40 * bound[r, h, d] + 1e-3)
    rep = compare_with_emulation(p, got)
    assert not rep.passed and rep.n_fail == 1
    w = rep.worst[0]
    assert (w.row, w.request, w.position, w.kv_head, w.head, w.dim) == (4, 2, 127, 1, 20, 7)
    assert "row 4 (request 2, position 127) KV head 1 head 20 dim 7" in rep.details()


def test_nan_where_zero_expected_fails():
    p = _problem()
    got = R.emulate(p).copy()
    assert np.all(got[2] == 0)  # request 1 is padding
    got[2, 0, 0] = np.nan
    rep = compare_with_emulation(p, got)
    assert not rep.passed and rep.nan_rows == [2] and rep.n_fail == 1


def test_nan_where_value_expected_and_unwritten_rows_are_reported():
    p = _problem()
    got = R.emulate(p).copy()
    got[0, 3, 3] = np.nan
    got[5] = np.nan
    rep = compare_with_emulation(p, got)
    assert rep.nan_rows == [0] and rep.unwritten_rows == [5]
    assert "1 rows not written" in rep.summary() and "1 rows with NaN" in rep.summary()


def test_non_bf16_values_and_wrong_shapes_fail():
    p = _problem()
    got = R.emulate(p).copy()
    got[0, 0, 0] = np.float32(got[0, 0, 0]) + np.float32(2.0**-30)
    rep = compare_with_emulation(p, got)
    assert rep.not_bf16 == 1 and not rep.passed
    rep = compare_with_emulation(p, got[:-1])
    assert not rep.passed and "output must be float32" in rep.summary()
    rep = compare_with_emulation(p, got.astype(np.float64))
    assert not rep.passed


def test_exact_class_passes_against_oracle_and_p_rounding_is_needed_for_the_seed():
    p = random_problem(9, reqs=4, q_len=2, num_kv_heads=2, topk=8)
    exact, _ = R.sparse_decode(p)
    assert compare_with_oracle(p, R.bf16_round(exact)).passed
    seed_out = R.emulate(p)
    assert compare_with_oracle(p, seed_out, p_bf16=True, geometry=R.SEED_GEOMETRY).passed
    # The exact-class bound does not cover bf16(P): the seed's output exceeds it.
    assert not compare_with_oracle(p, seed_out, p_bf16=False).passed


def test_p_kept_in_float32_is_caught_against_the_seed_emulation():
    p = random_problem(10, reqs=4, q_len=2, num_kv_heads=2, topk=8)
    g = R.Geometry(32, 8, p_bf16=False)
    assert not compare_with_emulation(p, R.emulate(p, geometry=g)).passed
