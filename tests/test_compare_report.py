"""nvfp4_suite.reference.compare.report: the judgement of an output and what a report says."""

import numpy as np
from compare_helpers import garbage, small_problem, whole_ulp_bound

import nvfp4_suite.reference as R
from nvfp4_suite.reference.compare import (
    MAX_LISTED,
    NAN,
    NOT_BF16,
    OUTSIDE,
    UNWRITTEN,
    compare_with_emulation,
    compare_with_interval,
    interval_vs_emulation,
    ulp_distance,
)
from nvfp4_suite.reference.formats import bf16_ulp


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


def test_emulation_compared_with_itself_passes_with_zero_ulp():
    p = small_problem()
    rep = compare_with_emulation(p, R.emulate(p, splits=2), splits=2)
    assert rep.passed and rep.max_ulp == 0 and rep.n_elements == p.q.size


def test_one_element_off_by_many_ulps_fails_and_is_located():
    p = small_problem()
    got = R.emulate(p).copy()
    bound = whole_ulp_bound(interval_vs_emulation(p))
    r, h, d = 4, 20, 7  # row 4: request 2, position 127
    got[r, h, d] = R.bf16_round(got[r, h, d] + 40 * bound[r, h, d] + 1e-3)
    rep = compare_with_emulation(p, got)
    assert not rep.passed and rep.n_fail == 1
    w = rep.worst[0]
    assert (w.row, w.request, w.position, w.kv_head, w.head, w.dim) == (4, 2, 127, 1, 20, 7)
    assert "row 4 (request 2, position 127) KV head 1 head 20 dim 7" in rep.details()


def test_nan_where_zero_expected_fails():
    p = small_problem()
    got = R.emulate(p).copy()
    assert np.all(got[2] == 0)  # request 1 is padding
    got[2, 0, 0] = np.nan
    rep = compare_with_emulation(p, got)
    assert not rep.passed and rep.nan_rows == [2] and rep.n_fail == 1


def test_nan_where_value_expected_and_unwritten_rows_are_reported():
    p = small_problem()
    got = R.emulate(p).copy()
    got[0, 3, 3] = np.nan
    got[5] = np.nan
    # An out= buffer the harness pre-filled with NaN: row 5 was never written.
    rep = compare_with_interval(p, got, interval_vs_emulation(p), "emulation", sentinel=True)
    assert rep.nan_rows == [0] and rep.unwritten_rows == [5]
    assert "1 row not written" in rep.summary() and "1 row with NaN" in rep.summary()


def test_a_returned_row_of_nan_is_a_row_with_nan_not_a_row_never_written():
    # A backend that returns its output wrote every value of it: NaN there is its own.
    p = small_problem()
    got = R.emulate(p).copy()
    got[5] = np.nan
    rep = compare_with_emulation(p, got)
    assert rep.nan_rows == [5] and rep.unwritten_rows == []
    assert "not written" not in rep.details() and "1 row with NaN" in rep.summary()


def test_non_bf16_values_and_wrong_shapes_fail():
    p = small_problem()
    got = R.emulate(p).copy()
    got[0, 0, 0] = np.float32(got[0, 0, 0]) + np.float32(2.0**-30)
    rep = compare_with_emulation(p, got)
    assert rep.not_bf16 == 1 and not rep.passed
    rep = compare_with_emulation(p, got[:-1])
    assert not rep.passed and "output must be float32" in rep.summary()
    rep = compare_with_emulation(p, got.astype(np.float64))
    assert not rep.passed


def _head_scale_ulp(pre, r, h):
    """One bf16 ulp of the largest |pre| of (r, h), or of the whole output where that is 0."""
    s = np.abs(pre[r, h]).max() or np.abs(pre).max()
    return 2.0 ** (np.floor(np.log2(s)) - 7)


def test_a_non_bf16_output_fails_for_that_reason_and_no_distance_is_claimed_to_exceed_a_bound():
    p = small_problem()
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
    p = small_problem()
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
    p = small_problem()
    got = R.emulate(p).copy()
    got[0] = garbage(got[0].shape)
    got[3, 4, 5] = 2.0**-20  # row 3 is padding
    rep = compare_with_emulation(p, got)
    assert len(rep.worst) == MAX_LISTED
    assert [(w.row, w.head, w.dim) for w in rep.worst if w.pre == 0] == [(3, 4, 5)]
    assert "expected exactly 0, got" in rep.details()


def test_rows_never_written_and_nans_are_listed_once_and_the_report_fits_a_screen():
    p = small_problem()
    got = R.emulate(p).copy()
    got[5] = np.nan
    got[0, 3, 3] = np.nan
    got[1] = garbage(got[1].shape)
    rep = compare_with_interval(p, got, interval_vs_emulation(p), "emulation", sentinel=True)
    reasons = [w.reason for w in rep.worst]
    assert reasons.count(UNWRITTEN) == 1 and reasons.count(NAN) == 1 and OUTSIDE in reasons
    assert len(rep.worst) == MAX_LISTED
    text = rep.details()
    assert len(text.splitlines()) <= 16, text
    assert "got NaN (the row was never written)" in text and "rows not written: 5" in text
    assert f"({100 * rep.n_fail / rep.n_elements:.3g}%: {rep.n_outside} outside their interval, 4097 NaN)" \
        in rep.summary()


# Synthetic failures built from a real problem's expected output (rows 2..3 are request 1, padding).
