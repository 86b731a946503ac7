"""The suite passes the correct kernels and catches every injected bug through
generated problems (tests/test_bugs.py shows each caught by the golden cases
of its own class). Rounding mutants that no check can catch in principle are
proved so here."""

import itertools

import numpy as np
import pytest

import nvfp4_suite.reference as R
from nvfp4_suite.kernels.mutants import BUGS, ROUNDING_BUGS, NumpyKernel, SeedKernel, bf16_half_away
from nvfp4_suite.reference.compare import compare_with_emulation, interval_vs_emulation
from nvfp4_suite.reference.emulate import _emulate
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.formats import E2M1_MAGNITUDES, e2m1_encode, e4m3fn_encode
from nvfp4_suite.reference.paged_cache import pack_e2m1, page_views, swizzle_v_scales, unswizzle_v_scales
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import bugs
from nvfp4_suite.vectors.catalog.casefile import load_case
from nvfp4_suite.vectors.engine.check import check_generated, check_golden

UNDETECTABLE = {m.spec.removeprefix("nvfp4_suite.kernels.mutants:seed_"): m.undetectable
                for m in bugs.mutants("numpy") if m.undetectable}
DETECTABLE = sorted(set(ROUNDING_BUGS) - set(UNDETECTABLE))
# Bugs that only invalid input shows (every golden case of their class is invalid):
# the generator draws valid problems.
INVALID_INPUT_ONLY = {m.spec.removeprefix("nvfp4_suite.kernels.mutants:numpy_") for m in bugs.mutants("numpy")
                      if all(c["result"] == "invalid" for c in bugs.golden_cases(m.bug))}


def test_correct_numpy_kernel_passes_golden_vectors_and_generated_problems():
    run = check_golden(NumpyKernel())
    assert run.ok, run.text()
    gen = check_generated(NumpyKernel(), examples=10, seed=1, shrink=False)
    assert gen.ok, gen.failing and gen.failing.text


def test_correct_seed_kernel_passes_golden_vectors_and_generated_problems():
    run = check_golden(SeedKernel())
    assert run.ok, run.text()
    gen = check_generated(SeedKernel(), examples=10, seed=1, shrink=False)
    assert gen.ok, gen.failing and gen.failing.text


def test_only_the_host_side_validation_mutants_need_invalid_input():
    assert INVALID_INPUT_ONLY == {"nan_scale_unchecked", "unvalidated"}


@pytest.mark.parametrize("bug", sorted(set(BUGS) - INVALID_INPUT_ONLY))
def test_every_mutant_is_caught_by_generated_problems(bug):
    # 100: the default check's count (a run stops at its first failure, so only a
    # mutant caught late pays for it); topk_first_32 needs a TOPK >= 33 problem with
    # a valid slot past the 32nd, drawn at seed 1 first at problem 61.
    assert not check_generated(NumpyKernel(bug), examples=100, seed=1, shrink=False).ok, \
        f"mutant {bug} ({BUGS[bug]}) passed 100 generated problems"


@pytest.mark.parametrize("bug", DETECTABLE)
def test_every_rounding_mutant_is_caught_by_generated_problems(bug):
    assert not check_generated(SeedKernel(bug), examples=60, seed=1, shrink=False).ok, \
        f"mutant {bug} ({ROUNDING_BUGS[bug]}) passed 60 generated problems"


def _golden_valid(limit=None):
    m = catalog.load_manifest()
    cases = [c for c in m["cases"] if c["result"] == "valid"][:limit]
    for c in cases:
        problem, _, _ = load_case(catalog.HERE / c["file"], sha256=c["sha256"])
        yield c, problem


# Eight V-scale pairs (key 0, key 1), one per 16-dim scale group, under which
# many E2M1 code pairs have a mean that is a bf16 tie.
TIE_SCALES = ((1.125, 20.0), (1.125, 30.0), (1.375, 28.0), (1.625, 28.0),
              (1.75, 40.0), (1.75, 60.0), (1.875, 18.0), (1.875, 28.0))


def _is_tie(x) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) & 0xFFFF) == 0x8000


def _tie_problem(reqs=40):
    """``reqs`` requests of two visible keys with equal scores (q = 0), v_global
    1: every output is the mean of the two keys' V values. Each scale group has
    its own pair of V scales (``TIE_SCALES``, rotated by request) and its dims
    cycle through code pairs whose mean is a bf16 tie (offset by request): each
    request's output is a different set of ties, so each is a trial of its own
    for the bias test (its 16 heads are one computation repeated)."""
    p = random_problem(0, reqs=reqs, q_len=1, num_kv_heads=1, topk=1, seq_lens=[2] * reqs, v_global_scale=1.0)
    p.q[...] = 0
    views = page_views(p.pool, p.layout, 1)
    pages = [int(p.block_table[r, 0]) for r in range(reqs)]
    assert len(set(pages)) == reqs
    mags = [float(m) for m in E2M1_MAGNITUDES if m > 0]
    # Per scale pair, up to 8 code pairs (key 0, key 1) whose means are distinct ties.
    tie_codes = {}
    for s0, s1 in TIE_SCALES:
        means = {}
        for c0, c1 in itertools.product(mags, mags):
            mean = (c0 * s0 + c1 * s1) / 2
            if _is_tie(mean) and np.float32(mean) == mean:
                means.setdefault(mean, (c0, c1))
        tie_codes[s0, s1] = [means[m] for m in sorted(means)[:8]]
    for r, page in enumerate(pages):
        scales = [TIE_SCALES[(g + r) % 8] for g in range(8)]
        codes = np.zeros((2, 128), np.float32)
        for g, pair in enumerate(scales):
            chosen = tie_codes[pair]
            for d in range(16):
                codes[:, 16 * g + d] = chosen[(d + r // 8) % len(chosen)]
        for key in (0, 1):
            views.v_data[page, 0, key] = pack_e2m1(e2m1_encode(codes[key]))
        lin = unswizzle_v_scales(views.v_scale[page, 0])
        lin[0] = e4m3fn_encode(np.array([s0 for s0, _ in scales], np.float32))
        lin[1] = e4m3fn_encode(np.array([s1 for _, s1 in scales], np.float32))
        views.v_scale[page, 0] = swizzle_v_scales(lin)
    return p


def test_half_away_rounding_is_undetectable_elementwise_at_every_tie():
    assert "output_half_away" in UNDETECTABLE
    ties_total = 0
    for c, p in _golden_valid():
        s = c["launches"][0]["splits"]
        iv = interval_vs_emulation(p, splits=s)
        pre = _emulate(p, s, R.SEED_GEOMETRY, False).pre_round
        got = bf16_half_away(pre)
        tie = (pre.view(np.uint32) & 0xFFFF) == 0x8000
        # It differs from nearest-even at ties only ...
        assert np.array_equal(got[~tie], R.bf16_round(pre)[~tie])
        # ... and there delta > 0 puts both neighbours in the interval, the rounding of
        # pre nudged either way by less than delta: a value a correct kernel may hold.
        assert np.all(iv.delta >= 2.0**-126)
        assert np.all((iv.lo[tie] <= np.minimum(got, iv.nearest)[tie])
                      & (np.maximum(got, iv.nearest)[tie] <= iv.hi[tie]))
        rep = compare_with_emulation(p, got, splits=s)
        assert rep.passed, rep.details()
        ties_total += int(tie.sum())
    # Too few ties for the bias verdict (it needs 32 (row, head) groups leaning one way).
    assert ties_total < 32


def test_half_away_rounding_is_named_by_the_bias_verdict_where_a_problem_has_enough_ties():
    p = _tie_problem()
    pre = _emulate(p, 1, R.SEED_GEOMETRY, False).pre_round
    assert np.all(_is_tie(pre)) and len({pre[r, 0].tobytes() for r in range(p.rows)}) == p.rows
    rep = compare_with_emulation(p, SeedKernel("output_half_away")(p))
    assert rep.n_fail == 0 and not rep.passed and rep.bias.startswith("outputs rounded away from zero in ")
    assert rep.bias_counts["away from zero"] == p.rows >= 32 and rep.bias_counts["toward zero"] == 0
    assert compare_with_emulation(p, SeedKernel()(p)).passed


def test_exp2_two_ulp_low_stays_within_delta_of_the_emulation():
    assert "exp2_low_2ulp" in UNDETECTABLE
    from nvfp4_suite.kernels.mutants import exp2_low_2ulp

    problems = [(c["launches"][-1]["splits"], p) for c, p in _golden_valid()]
    problems += [(s, random_problem(seed, reqs=3, q_len=2, num_kv_heads=2, topk=16)) for seed, s in ((1, 1), (2, 3))]
    worst = 0.0
    for s, p in problems:
        iv = interval_vs_emulation(p, splits=s)
        pre = _emulate(p, s, R.SEED_GEOMETRY, False, exp2=exp2_low_2ulp).pre_round.astype(np.float64)
        # Within delta of the emulation's unrounded value: inside the interval by construction.
        worst = max(worst, float(np.max(np.abs(pre - iv.pre) / iv.delta)))
        rep = compare_with_emulation(p, SeedKernel("exp2_low_2ulp")(p, splits=s), splits=s)
        assert rep.passed, rep.details()
    assert worst <= 1.0
