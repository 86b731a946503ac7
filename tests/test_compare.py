"""nvfp4_suite.reference.compare: ulp distance, bounds and the report."""

import numpy as np
import pytest

import nvfp4_suite.reference as R
from nvfp4_suite.reference.formats import bf16_ulp
from nvfp4_suite.reference.compare import (
    compare_with_emulation,
    compare_with_oracle,
    oracle_noise,
    ulp_distance,
)
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.oracle import oracle_details
from nvfp4_suite.reference.paged_cache import D, dequantize, page_views, unswizzle_v_scales
from nvfp4_suite.reference.problem import HG


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


def _whole_ulp_bound(iv):
    """The old acceptance bound on ``|got - rne(pre)|``, ``delta + ulp(|pre| + delta)``:
    a whole ulp wider than the interval (the module note of ``compare.tolerance``)."""
    return iv.delta + bf16_ulp(np.abs(iv.pre) + iv.delta)


def test_emulation_compared_with_itself_passes_with_zero_ulp():
    p = _problem()
    rep = compare_with_emulation(p, R.emulate(p, splits=2), splits=2)
    assert rep.passed and rep.max_ulp == 0 and rep.n_elements == p.q.size


def test_one_element_off_by_many_ulps_fails_and_is_located():
    p = _problem()
    got = R.emulate(p).copy()
    bound = _whole_ulp_bound(interval_vs_emulation(p))
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
    assert "1 row not written" in rep.summary() and "1 row with NaN" in rep.summary()


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
    # p_bf16 defaults to what the geometry says.
    rep = compare_with_oracle(p, seed_out, geometry=R.SEED_GEOMETRY)
    assert rep.passed and rep.against == "oracle (geometry 32x8, splits=1, P in bf16)"
    # The exact-class bound does not cover bf16(P): the seed's output exceeds it.
    assert not compare_with_oracle(p, seed_out, p_bf16=False).passed
    rep = compare_with_oracle(p, seed_out)
    assert not rep.passed and rep.against == "oracle (exact class, P not rounded)"


def test_p_kept_in_float32_is_caught_against_the_seed_emulation():
    p = random_problem(10, reqs=4, q_len=2, num_kv_heads=2, topk=8)
    g = R.Geometry(32, 8, p_bf16=False)
    assert not compare_with_emulation(p, R.emulate(p, geometry=g)).passed


# --- the interval test and the rounding statistics ----------------------------------------

from nvfp4_suite.reference.compare import (  # noqa: E402
    BIAS_ALPHA,
    bf16_interval,
    bias_false_alarm,
    interval_vs_emulation,
    interval_vs_oracle,
)


def _truncate(x):
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def _step(x, n):
    """bf16 values moved by n ulps by value (positive values only here)."""
    return ((np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.int64) + n).astype(np.uint32) << 16


def test_interval_is_the_roundings_of_the_values_within_delta():
    p = _problem()
    iv = interval_vs_emulation(p, splits=2)
    e = R.emulate_details(p, splits=2)
    assert np.array_equal(iv.nearest, e.out) and np.array_equal(iv.pre, e.pre_round.astype(np.float64))
    lo, hi = bf16_interval(iv.pre, iv.delta)
    assert np.array_equal(lo, iv.lo) and np.array_equal(hi, iv.hi)
    assert np.all(iv.lo <= iv.nearest) and np.all(iv.nearest <= iv.hi)
    # Any value within delta rounds into the interval; the ends are such roundings.
    rng = np.random.default_rng(0)
    for t in (-1.0, -0.5, 0.0, 0.999, rng.uniform(-1, 1, iv.pre.shape)):
        y = R.bf16_round(iv.pre + t * iv.delta)
        assert np.all((iv.lo <= y) & (y <= iv.hi))
    assert np.array_equal(iv.lo, R.bf16_round(iv.pre - iv.delta)) or np.mean(
        iv.lo != R.bf16_round(iv.pre - iv.delta)) < 1e-6
    # One bf16 value exactly where no midpoint lies within delta of pre.
    ulp = bf16_ulp(iv.pre)
    nz = np.abs(iv.pre) >= 2.0**-120
    frac = np.abs(iv.pre) / ulp % 1.0
    far = nz & (np.abs(frac - 0.5) > iv.delta / ulp * 1.001) & (iv.delta < ulp / 4)
    assert far.any() and np.all(iv.determined[far]) and np.all(iv.lo[far] == iv.nearest[far])


def test_one_ulp_off_in_a_one_value_interval_fails_though_the_old_whole_ulp_bound_admitted_it():
    p = _problem()
    iv = interval_vs_emulation(p)
    old_bound = _whole_ulp_bound(iv)
    got = R.emulate(p).copy()
    idx = np.argwhere(iv.determined & (got > 0))[0]
    r, h, d = idx
    got[r, h, d] = _step(got[r, h, d], 1).view(np.float32)
    assert abs(float(got[r, h, d]) - float(iv.nearest[r, h, d])) <= old_bound[r, h, d]
    rep = compare_with_emulation(p, got)
    assert not rep.passed and rep.n_fail == 1 and rep.max_bound_ratio > 1
    w = rep.worst[0]
    assert (w.row, w.head, w.dim) == (r, h, d) and w.lo == w.hi == w.expected
    assert "allowed" in str(w) and rep.n_off_nearest == 1 and rep.bias is None


def test_the_other_value_of_a_two_value_interval_passes_and_is_counted():
    p = _problem()
    iv = interval_vs_emulation(p)
    got = R.emulate(p).copy()
    two = ~iv.determined & iv.independent & (iv.nearest > 2.0**-100)
    idx = np.argwhere(two & (iv.hi > iv.nearest))[0]
    got[tuple(idx)] = iv.hi[tuple(idx)]
    rep = compare_with_emulation(p, got)
    assert rep.passed, rep.details()
    assert rep.n_off_nearest == 1 and rep.n_away_from_zero == 1 and rep.n_above == 1
    assert rep.max_bound_ratio < 1 and rep.mean_signed_ulp > 0


def test_truncated_output_fails_against_the_emulation_with_a_toward_zero_verdict():
    p = _problem()
    e = R.emulate_details(p)
    rep = compare_with_emulation(p, _truncate(e.pre_round))
    assert not rep.passed and rep.n_fail > 0
    assert rep.bias and rep.bias.startswith("outputs rounded toward zero in ")
    assert rep.n_away_from_zero == 0 and rep.n_toward_zero == rep.n_off_nearest > 1000
    assert rep.mean_signed_ulp < -0.3
    assert "rounding bias: outputs rounded toward zero" in rep.summary()
    assert "rounding: " in rep.details()


def test_values_far_from_their_unrounded_value_are_errors_not_a_rounding_bias():
    # Half the heads halved: every one of their elements moves toward zero, by
    # hundreds of ulps. They fail as wrong values; none is a rounding of pre.
    p = _problem()
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
    rep = compare_with_oracle(p, _truncate(exact.astype(np.float32)))
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
    p = _problem()
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


# --- what a failing report says -------------------------------------------------------------

from nvfp4_suite.reference.compare import MAX_LISTED, NAN, NOT_BF16, OUTSIDE, UNWRITTEN, diagnose  # noqa: E402


def _garbage(shape, seed=0):
    return R.bf16_round(np.random.default_rng(seed).normal(0, 0.5, shape)).astype(np.float32)


def _head_scale_ulp(pre, r, h):
    """One bf16 ulp of the largest |pre| of (r, h), or of the whole output where that is 0."""
    s = np.abs(pre[r, h]).max() or np.abs(pre).max()
    return 2.0 ** (np.floor(np.log2(s)) - 7)


def test_a_non_bf16_output_fails_for_that_reason_and_no_distance_is_claimed_to_exceed_a_bound():
    p = _problem()
    e = R.emulate_details(p)
    iv = interval_vs_emulation(p)
    got = e.out.copy()
    pre = e.pre_round
    r, h, d = np.argwhere(~R.formats.is_bf16(pre) & (iv.lo < pre) & (pre < iv.hi))[0]
    got[r, h, d] = pre[r, h, d]
    rep = compare_with_emulation(p, got)
    assert rep.n_fail == rep.not_bf16 == 1 and rep.n_outside == 0
    w = rep.worst[0]
    assert w.reason == NOT_BF16 and w.error_ulps == 0
    assert "which is not a bf16 value (within the allowed" in str(w) and ">" not in str(w)
    assert "1 not bf16)" in rep.summary() and "outside" not in rep.summary()


def test_failures_are_ranked_by_error_at_their_heads_scale_and_the_summary_names_the_worst():
    p = _problem()
    e = R.emulate_details(p)
    got = e.out.copy()
    pre = e.pre_round.astype(np.float64)
    got[2, 0, 0] = 2.0**-20  # row 2 is padding: exactly 0 expected, the interval a few subnormals wide
    got[0, 1, 2] = R.bf16_round(np.float32(e.out[0, 1, 2] + 0.25))
    got[4, 7, 9] = R.bf16_round(np.float32(e.out[4, 7, 9] - 0.05))
    rep = compare_with_emulation(p, got)
    assert rep.n_fail == rep.n_outside == 3
    assert rep.max_bound_ratio > 1e20  # |got - pre| / reach, explosive where 0 is expected
    err = {(r, h, d): abs(float(got[r, h, d]) - pre[r, h, d]) / _head_scale_ulp(pre, r, h)
           for r, h, d in ((2, 0, 0), (0, 1, 2), (4, 7, 9))}
    ranked = sorted(err, key=err.get, reverse=True)
    assert [(w.row, w.head, w.dim) for w in rep.worst] == ranked
    assert ranked[-1] == (2, 0, 0)
    for w in rep.worst:
        assert np.isclose(w.error_ulps, err[w.row, w.head, w.dim], rtol=1e-12)
    zero = rep.worst[-1]
    assert zero.scale_of == "output" and str(zero).count("expected exactly 0, got 9.536743e-07") == 1
    top = rep.worst[0]
    assert f"worst error {top.error_ulps:.3g} ulp of {top.scale:.3g} (row {top.row} head {top.head} dim {top.dim})" \
        in rep.summary()
    assert "reach" not in rep.summary()


def test_an_exact_zero_expectation_is_listed_even_below_ten_larger_errors():
    p = _problem()
    got = R.emulate(p).copy()
    got[0] = _garbage(got[0].shape)
    got[3, 4, 5] = 2.0**-20  # row 3 is padding
    rep = compare_with_emulation(p, got)
    assert len(rep.worst) == MAX_LISTED
    assert [(w.row, w.head, w.dim) for w in rep.worst if w.pre == 0] == [(3, 4, 5)]
    assert "expected exactly 0, got" in rep.details()


def test_rows_never_written_and_nans_are_listed_once_and_the_report_fits_a_screen():
    p = _problem()
    got = R.emulate(p).copy()
    got[5] = np.nan
    got[0, 3, 3] = np.nan
    got[1] = _garbage(got[1].shape)
    rep = compare_with_emulation(p, got)
    reasons = [w.reason for w in rep.worst]
    assert reasons.count(UNWRITTEN) == 1 and reasons.count(NAN) == 1 and OUTSIDE in reasons
    assert len(rep.worst) == MAX_LISTED
    text = rep.details()
    assert len(text.splitlines()) <= 16, text
    assert "got NaN (the row was never written)" in text and "rows not written: 5" in text
    assert f"({100 * rep.n_fail / rep.n_elements:.3g}%: {rep.n_outside} outside their interval, 4097 NaN)" \
        in rep.summary()


# Synthetic failures built from a real problem's expected output (rows 2..3 are request 1, padding).

def _diagnosis(got):
    p = _problem()
    rep = compare_with_emulation(p, got)
    assert not rep.passed
    assert rep.diagnosis == diagnose(interval_vs_emulation(p).pre, got, ~_fail_mask(p, got), q_len=p.q_len)
    if rep.diagnosis:
        assert f"  diagnosis: {'; '.join(rep.diagnosis)}" in rep.details()
    return rep.diagnosis


def _fail_mask(p, got):
    iv = interval_vs_emulation(p)
    return ~((got >= iv.lo) & (got <= iv.hi) & R.formats.is_bf16(got))


def test_diagnosis_names_a_whole_head_wrong():
    got = R.emulate(_problem()).copy()
    got[:, 5] = _garbage(got[:, 5].shape)
    [d] = _diagnosis(got)
    assert d.startswith("wrong: head 5 (") and d.endswith("of those elements fail, every other element passes)")


def test_diagnosis_names_a_whole_kv_head_wrong():
    got = R.emulate(_problem()).copy()
    got[:, 16:32] = _garbage(got[:, 16:32].shape)
    [d] = _diagnosis(got)
    assert d.startswith("wrong: heads 16..31 (KV head 1) (")


def test_diagnosis_names_a_dim_tile_wrong():
    got = R.emulate(_problem()).copy()
    got[4, :, 32:48] = _garbage(got[4, :, 32:48].shape)
    [d] = _diagnosis(got)
    assert d.startswith("wrong: dims 32..47 (one 16-dim tile) of all heads of row 4 (")


def test_diagnosis_names_a_whole_request_wrong_and_where_zeros_were_expected():
    got = R.emulate(_problem()).copy()
    got[4:6] = _garbage(got[4:6].shape)
    assert _diagnosis(got)[0].startswith("wrong: all heads of rows 4..5 (request 2) (")
    got = R.emulate(_problem()).copy()
    got[2:4] = _garbage(got[2:4].shape)
    assert _diagnosis(got)[0].startswith("wrong (where exactly 0 is expected): all heads of rows 2..3 (request 1) (")


def test_diagnosis_names_swapped_rows_and_a_row_holding_anothers_output():
    e = R.emulate(_problem())
    got = e.copy()
    got[[0, 4]] = e[[4, 0]]
    assert "rows 0 and 4 swapped" in _diagnosis(got)
    got = e.copy()
    got[1] = e[5]
    assert "row 1 holds row 5's expected output" in _diagnosis(got)


def test_diagnosis_names_a_constant_factor_and_prints_it():
    pre = R.emulate_details(_problem()).pre_round.astype(np.float64)
    for c in (0.5, 0.75, 3.0):
        got = R.bf16_round(c * pre)
        [d] = _diagnosis(got)
        assert d.startswith(f"scaled by a constant: got = {c:.4g} x expected in "), d


def test_diagnosis_names_a_flipped_sign():
    got = -R.emulate(_problem())
    [d] = _diagnosis(got)
    assert d.startswith("sign flipped: got = -expected in "), d


def test_diagnosis_names_zeros_where_values_are_expected():
    got = R.emulate(_problem()).copy()
    got[0:2] = 0
    diag = _diagnosis(got)
    assert diag[0].startswith("wrong: all heads of rows 0..1 (request 0) (")
    assert diag[1].startswith("zeros where nonzero values are expected (")


def test_random_noise_failures_get_no_diagnosis():
    p = _problem()
    pre = R.emulate_details(p).pre_round.astype(np.float64)
    rng = np.random.default_rng(5)
    scale = np.abs(pre).max(axis=2, keepdims=True) + 0.1
    for rate in (0.002, 0.05, 0.5):
        hit = rng.random(pre.shape) < rate
        got = np.where(hit, R.bf16_round(pre + rng.normal(0, 1, pre.shape) * scale), R.bf16_round(pre))
        assert _diagnosis(got.astype(np.float32)) == [], rate
    # One-ulp errors on a random 1% of the elements.
    got = R.bf16_round(pre)
    hit = np.argwhere(rng.random(pre.shape) < 0.01)
    got[tuple(hit.T)] = _step(np.abs(got[tuple(hit.T)]), 1).view(np.float32) * np.sign(got[tuple(hit.T)])
    assert _diagnosis(got) == []


def test_diagnose_of_no_failure_is_empty():
    e = R.emulate(_problem())
    assert diagnose(e, e, np.ones(e.shape, bool)) == []


def _just_above_midpoints(shape, cell_of):
    """float64 values a hair above the midpoint of bf16 cell ``cell_of(r, h, d)``
    in [1, 2), and the cell's lower end (float32): the nearest-even rounding is
    the upper neighbour and the lower one lies inside a 1e-5 interval."""
    lower = 1.0 + np.fromfunction(cell_of, shape, dtype=np.int64) % 128 / 128.0
    return lower + 2.0**-8 + 1e-6, lower.astype(np.float32)


def test_the_bias_test_counts_distinct_row_head_groups_not_elements():
    from nvfp4_suite.reference.compare import compare_with_interval
    from nvfp4_suite.reference.compare.tolerance import _interval

    p = _problem()
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


def _oracle_in_extended_precision(p):
    """The oracle's output computed independently in np.longdouble (64-bit significand on
    x86): dot products, exp and sums 2**11 times finer than float64, and no float64
    subnormals. longdouble ``[rows, H, 128]``."""
    hk, rows, topk = p.num_kv_heads, p.rows, p.TOPK
    views = page_views(p.pool, p.layout, hk)
    mask = p.key_mask()
    pages = np.maximum(p.slot_pages(), 0)
    kscale = np.longdouble(p.sm_scale) * np.longdouble(p.k_global_scale)
    out = np.zeros((rows, hk * HG, D), np.longdouble)
    for h in range(hk):
        for r in range(rows):
            seen = mask[h, r].reshape(-1)
            if not seen.any():
                continue
            k = dequantize(views.k_data[pages[h, r], h], views.k_scale[pages[h, r], h], np.float64)
            v = dequantize(views.v_data[pages[h, r], h], unswizzle_v_scales(views.v_scale[pages[h, r], h]),
                           np.float64)
            k = k.reshape(-1, D)[seen].astype(np.longdouble)
            v = v.reshape(-1, D)[seen].astype(np.longdouble)
            q = p.q[r, HG * h:HG * (h + 1)].astype(np.longdouble)
            s = np.einsum("hd,kd->hk", q, k) * kscale
            w = np.exp(s - s.max(axis=1, keepdims=True))
            out[r, HG * h:HG * (h + 1)] = (np.einsum("hk,kd->hd", w, v) * np.longdouble(p.v_global_scale)
                                          / w.sum(axis=1, keepdims=True))
    return out


def test_the_oracle_lies_within_its_own_noise_bound_of_an_extended_precision_evaluation():
    """Term 5 (``oracle_noise``): with scores in the thousands a float64 score's own
    rounding moves ``exp`` far more than the summation's ``n * 2**-53`` (seed 3), and
    ``exp`` falls into float64's subnormals, where errors are absolute (seed 1)."""
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("np.longdouble is float64 on this platform: no finer evaluation to compare with")
    subnormal = 0
    for seed in (1, 3):
        p = random_problem(seed, reqs=2, num_kv_heads=1, topk=4, q_std=24.0, kv_std=4.0, sm_scale=1.0,
                           seq_lens=[500, 300])
        out, _, mag, sabs, vsum = oracle_details(p)
        err = np.abs(out.astype(np.longdouble) - _oracle_in_extended_precision(p)).astype(np.float64)
        bound = oracle_noise(p, mag, sabs, vsum)
        assert np.all(err <= bound), f"seed {seed}: {int((err > bound).sum())} elements beyond E"
        subnormal += int(((out != 0) & (np.abs(out) < 2.0**-1022)).sum())
    assert subnormal > 0, "no float64-subnormal output: the underflow part of E went untested"
