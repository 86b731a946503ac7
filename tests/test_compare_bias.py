"""nvfp4_suite.reference.compare.bias: the rounding statistics and the bias verdict."""

import numpy as np
from compare_helpers import small_problem, truncate

import nvfp4_suite.reference as R
from nvfp4_suite.reference.compare import (
    BIAS_ALPHA,
    bias_false_alarm,
    compare_with_emulation,
    compare_with_interval,
    compare_with_oracle,
    interval_vs_emulation,
    interval_vs_oracle,
)
from nvfp4_suite.reference.compare.tolerance import _interval
from nvfp4_suite.reference.examples import random_problem


def test_truncated_output_fails_against_the_emulation_with_a_toward_zero_verdict():
    p = small_problem()
    e = R.emulate_details(p)
    rep = compare_with_emulation(p, truncate(e.pre_round))
    assert not rep.passed and rep.n_fail > 0
    assert rep.bias and rep.bias.startswith("outputs rounded toward zero in ")
    assert rep.n_away_from_zero == 0 and rep.n_toward_zero == rep.n_off_nearest > 1000
    assert rep.mean_signed_ulp < -0.3
    assert "rounding bias: outputs rounded toward zero" in rep.summary()
    assert "rounding: " in rep.details()


def test_values_far_from_their_unrounded_value_are_errors_not_a_rounding_bias():
    # Half the heads halved: every one of their elements moves toward zero, by
    # hundreds of ulps. They fail as wrong values; none is a rounding of pre.
    p = small_problem()
    got = R.emulate(p).copy()
    got[:, 1::2] *= np.float32(0.5)
    rep = compare_with_emulation(p, got)
    assert rep.n_fail > 1000 and rep.bias is None and rep.n_off_nearest == 0
    assert rep.n_rounding > 0 and "rounding bias" not in rep.summary()

def test_truncated_exact_output_fails_against_the_oracle_with_a_toward_zero_verdict():
    p = random_problem(9, reqs=4, q_len=2, num_kv_heads=2, topk=8)
    exact, _ = R.sparse_decode(p)
    iv = interval_vs_oracle(p, p_bf16=False)
    assert np.array_equal(iv.pre, exact)
    assert compare_with_oracle(p, R.bf16_round(exact)).n_off_nearest == 0
    rep = compare_with_oracle(p, truncate(exact.astype(np.float32)))
    assert not rep.passed and rep.n_fail > 0 and "toward zero" in rep.bias


def test_bias_threshold_follows_from_the_count_alone():
    # All k off-nearest elements on one side: flagged from k = 32 on (4 tails at 1e-9).
    assert 4 * bias_false_alarm(31, 31) > BIAS_ALPHA >= 4 * bias_false_alarm(32, 32)
    assert bias_false_alarm(5, 10) == 1.0 and bias_false_alarm(0, 0) == 1.0
    # The Chernoff bound is an upper bound of the exact binomial tail.
    from math import comb

    for k, t in ((20, 15), (100, 70), (400, 230)):
        exact = sum(comb(k, i) for i in range(t, k + 1)) / 2**k
        assert exact <= bias_false_alarm(t, k) < 20 * exact


def test_balanced_off_nearest_elements_do_not_make_a_verdict():
    p = small_problem()
    iv = interval_vs_emulation(p)
    got = R.emulate(p).copy()
    two = np.argwhere(~iv.determined & iv.independent & (iv.nearest > 2.0**-100) & (iv.hi > iv.nearest)
                      & (iv.lo < iv.nearest))
    for i, idx in enumerate(two[:200]):
        got[tuple(idx)] = (iv.hi if i % 2 else iv.lo)[tuple(idx)]
    rep = compare_with_emulation(p, got)
    assert rep.passed and rep.bias is None and rep.n_off_nearest == min(200, len(two))
    # The same elements all moved one way (inside their intervals) fail on bias alone.
    got = R.emulate(p).copy()
    for idx in two[:200]:
        got[tuple(idx)] = iv.lo[tuple(idx)]
    rep = compare_with_emulation(p, got)
    assert rep.n_fail == 0 and not rep.passed and "toward zero" in rep.bias


def test_flushed_subnormal_outputs_are_left_out_of_the_bias_count():
    # Term 4 allows flushing subnormals to zero, which is one-sided: 213 flushed
    # outputs all toward zero would make a verdict (k >= 32) if they were counted.
    with np.errstate(over="ignore"):
        p = random_problem(4, reqs=2, q_len=1, topk=4, v_global_scale=2.0**-130)
    e = R.emulate_details(p)
    got = np.where(np.abs(e.out) < 2.0**-126, np.float32(0), e.out).astype(np.float32)
    assert np.count_nonzero(got != e.out) >= 32
    rep = compare_with_emulation(p, got)
    assert rep.passed and rep.n_off_nearest == 0, rep.details()


def test_a_flipped_p_moving_a_whole_head_one_way_is_not_a_rounding_bias():
    # Seen on the simulated FlyDSL kernel: float32 noise flipped bf16(p) of the
    # dominant key of one head, which moves every dim of that head toward zero
    # (the output follows that key's v); 33 elements crossed their midpoints
    # together. They are one shared event, not 33 independent ones.
    p = random_problem(3, reqs=2, q_len=1, topk=8, q_std=16.0, k_global_scale=2.0, invalid_fraction=0.0)
    iv = interval_vs_emulation(p)
    e = R.emulate_details(p)
    r, h = np.unravel_index(np.argmax(e.flip_risk.max(axis=2)), e.flip_risk.shape[:2])
    got = e.out.copy()
    moved = (iv.pre[r, h] - np.sign(iv.pre[r, h]) * iv.shared[r, h]).astype(np.float64)
    got[r, h] = R.bf16_round(moved)
    crossed = int(np.count_nonzero(got[r, h] != e.out[r, h]))
    assert crossed >= 32, "the problem must make a flip cross at least 32 midpoints"
    rep = compare_with_emulation(p, got)
    assert rep.passed and rep.bias is None, rep.details()


def _just_above_midpoints(shape, cell_of):
    """float64 values a hair above the midpoint of bf16 cell ``cell_of(r, h, d)``
    in [1, 2), and the cell's lower end (float32): the nearest-even rounding is
    the upper neighbour and the lower one lies inside a 1e-5 interval."""
    lower = 1.0 + np.fromfunction(cell_of, shape, dtype=np.int64) % 128 / 128.0
    return lower + 2.0**-8 + 1e-6, lower.astype(np.float32)


def test_the_bias_test_counts_distinct_row_head_groups_not_elements():
    p = small_problem()
    shape = R.emulate(p).shape

    def verdict(cell_of):
        pre, lower = _just_above_midpoints(shape, cell_of)
        rep = compare_with_interval(p, lower, _interval(pre, np.full(shape, 1e-5)), "synthetic")
        assert rep.n_fail == 0 and rep.n_toward_zero == lower.size
        return rep

    # Every element of every group toward zero, but every group equal: one trial.
    rep = verdict(lambda r, h, d: d)
    assert rep.bias_counts["toward zero"] == 1 and rep.passed and rep.bias is None
    # Distinct values within groups do not make more trials than there are groups:
    # 31 distinct groups (then repeats) are below the 32 a verdict needs.
    rep = verdict(lambda r, h, d: (r * shape[1] + h) % 31 + d)
    assert rep.bias_counts["toward zero"] == 31 and rep.passed and rep.bias is None
    # Every group distinct: a verdict.
    rep = verdict(lambda r, h, d: r * shape[1] + h + d)
    assert rep.bias_counts["toward zero"] == min(shape[0] * shape[1], 128) >= 32  # cells repeat after 128
    assert not rep.passed and rep.bias.startswith("outputs rounded toward zero in 100% of elements (")
