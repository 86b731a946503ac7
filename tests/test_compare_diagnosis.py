"""nvfp4_suite.reference.compare.diagnosis: the failure patterns it names and those it does not."""

import numpy as np
from compare_helpers import garbage, small_problem, step

import nvfp4_suite.reference as R
from nvfp4_suite.reference.compare import (
    compare_with_emulation,
    diagnose,
    interval_vs_emulation,
)


def _diagnosis(got):
    p = small_problem()
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
    got = R.emulate(small_problem()).copy()
    got[:, 5] = garbage(got[:, 5].shape)
    [d] = _diagnosis(got)
    assert d.startswith("wrong: head 5 (") and d.endswith("of those elements fail, every other element passes)")


def test_diagnosis_names_a_whole_kv_head_wrong():
    got = R.emulate(small_problem()).copy()
    got[:, 16:32] = garbage(got[:, 16:32].shape)
    [d] = _diagnosis(got)
    assert d.startswith("wrong: heads 16..31 (KV head 1) (")


def test_diagnosis_names_a_dim_tile_wrong():
    got = R.emulate(small_problem()).copy()
    got[4, :, 32:48] = garbage(got[4, :, 32:48].shape)
    [d] = _diagnosis(got)
    assert d.startswith("wrong: dims 32..47 (one 16-dim tile) of all heads of row 4 (")


def test_diagnosis_names_a_whole_request_wrong_and_where_zeros_were_expected():
    got = R.emulate(small_problem()).copy()
    got[4:6] = garbage(got[4:6].shape)
    assert _diagnosis(got)[0].startswith("wrong: all heads of rows 4..5 (request 2) (")
    got = R.emulate(small_problem()).copy()
    got[2:4] = garbage(got[2:4].shape)
    assert _diagnosis(got)[0].startswith("wrong (where exactly 0 is expected): all heads of rows 2..3 (request 1) (")


def test_diagnosis_names_swapped_rows_and_a_row_holding_anothers_output():
    e = R.emulate(small_problem())
    got = e.copy()
    got[[0, 4]] = e[[4, 0]]
    assert "rows 0 and 4 swapped" in _diagnosis(got)
    got = e.copy()
    got[1] = e[5]
    assert "row 1 holds row 5's expected output" in _diagnosis(got)


def test_diagnosis_names_a_constant_factor_and_prints_it():
    pre = R.emulate_details(small_problem()).pre_round.astype(np.float64)
    for c in (0.5, 0.75, 3.0):
        got = R.bf16_round(c * pre)
        [d] = _diagnosis(got)
        assert d.startswith(f"scaled by a constant: got = {c:.4g} x expected in "), d


def test_diagnosis_names_a_flipped_sign():
    got = -R.emulate(small_problem())
    [d] = _diagnosis(got)
    assert d.startswith("sign flipped: got = -expected in "), d


def test_diagnosis_names_zeros_where_values_are_expected():
    got = R.emulate(small_problem()).copy()
    got[0:2] = 0
    diag = _diagnosis(got)
    assert diag[0].startswith("wrong: all heads of rows 0..1 (request 0) (")
    assert diag[1].startswith("zeros where nonzero values are expected (")


def test_random_noise_failures_get_no_diagnosis():
    p = small_problem()
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
    got[tuple(hit.T)] = step(np.abs(got[tuple(hit.T)]), 1).view(np.float32) * np.sign(got[tuple(hit.T)])
    assert _diagnosis(got) == []


def test_diagnose_of_no_failure_is_empty():
    e = R.emulate(small_problem())
    assert diagnose(e, e, np.ones(e.shape, bool)) == []
