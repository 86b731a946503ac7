"""nvfp4_suite.reference.compare.tolerance: the acceptance interval, the exact class and P's rounding
against the oracle, and the oracle's own noise bound."""

import numpy as np
import pytest
from compare_helpers import small_problem, step, whole_ulp_bound

import nvfp4_suite.reference as R
from nvfp4_suite.reference.compare import (
    bf16_interval,
    compare_with_emulation,
    compare_with_oracle,
    interval_from_oracle,
    interval_vs_emulation,
    oracle_noise,
)
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.formats import bf16_ulp
from nvfp4_suite.reference.oracle import oracle_details
from nvfp4_suite.reference.paged_cache import D, dequantize, page_views, unswizzle_v_scales
from nvfp4_suite.reference.problem import HG


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


def test_interval_is_the_roundings_of_the_values_within_delta():
    p = small_problem()
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
    p = small_problem()
    iv = interval_vs_emulation(p)
    old_bound = whole_ulp_bound(iv)
    got = R.emulate(p).copy()
    idx = np.argwhere(iv.determined & (got > 0))[0]
    r, h, d = idx
    got[r, h, d] = step(got[r, h, d], 1).view(np.float32)
    assert abs(float(got[r, h, d]) - float(iv.nearest[r, h, d])) <= old_bound[r, h, d]
    rep = compare_with_emulation(p, got)
    assert not rep.passed and rep.n_fail == 1 and rep.max_bound_ratio > 1
    w = rep.worst[0]
    assert (w.row, w.head, w.dim) == (r, h, d) and w.lo == w.hi == w.expected
    assert "allowed" in str(w) and rep.n_off_nearest == 1 and rep.bias is None


def test_the_other_value_of_a_two_value_interval_passes_and_is_counted():
    p = small_problem()
    iv = interval_vs_emulation(p)
    got = R.emulate(p).copy()
    two = ~iv.determined & iv.independent & (iv.nearest > 2.0**-100)
    idx = np.argwhere(two & (iv.hi > iv.nearest))[0]
    got[tuple(idx)] = iv.hi[tuple(idx)]
    rep = compare_with_emulation(p, got)
    assert rep.passed, rep.details()
    assert rep.n_off_nearest == 1 and rep.n_away_from_zero == 1 and rep.n_above == 1
    assert rep.max_bound_ratio < 1 and rep.mean_signed_ulp > 0


def _oracle_in_extended_precision(p):
    """The oracle's output computed independently in np.longdouble (64-bit significand on
    x86): dot products, exp and sums 2**11 times finer than float64, and no float64
    subnormals. longdouble ``[rows, H, 128]``."""
    hk, rows = p.num_kv_heads, p.rows
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


def test_an_upper_bound_of_any_oracle_input_only_widens_the_interval():
    """The module note's "The inputs": ``delta`` increases with magnitude, score_abs and
    abs_v_sum, so a bound in place of an exact value keeps every interval containing the
    exact one (and magnitude and score_abs do move ends: the exact values are not idle)."""
    p = random_problem(19, reqs=3, q_len=2, num_kv_heads=2, topk=8)
    details = oracle_details(p)
    exact = interval_from_oracle(p, details)
    for i, name in ((2, "magnitude"), (3, "score_abs"), (4, "abs_v_sum")):
        bound = list(details)
        bound[i] = details[i] * 2
        iv = interval_from_oracle(p, tuple(bound))
        assert np.all(iv.delta >= exact.delta), name
        assert np.all(iv.lo <= exact.lo) and np.all(iv.hi >= exact.hi), name
        if name != "abs_v_sum":  # term 4's 2**-125 scale moves no end of these outputs
            assert np.any((iv.lo < exact.lo) | (iv.hi > exact.hi)), name
