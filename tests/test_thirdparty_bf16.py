"""The numpy model of issue 36's serving kernel (tests/thirdparty_bf16.py: bf16 operands
with the global scale folded in, scale bytes read as magnitudes) judged through
``nvfp4_suite.reference.compare`` in the arithmetic and the scale domain it declares.

Declared truly (``Exact(True, "bf16-folded")``) and on caches inside its scale
domain (``non-negative``) it is inside every interval; judged in the exact class on
a cache with non-power-of-two global scales it is not (declaring matters); on a
cache with negative scales a row reads it is not either (the domain matters); its
injected bugs fall outside its own declaration's interval.

Some problems here make P exact: a row that sees one key, or all-zero queries (every
score 0, so every ``p`` is 1 and ``bf16(p) == p``). There the model is a kernel of
the exact class with P unrounded, declared ``Exact(False, "bf16-folded")``, whose
interval is tight enough to see a single operand rounding.
"""

import dataclasses

import numpy as np
import pytest
import thirdparty_bf16 as M
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvfp4_suite.reference import Exact
from nvfp4_suite.reference.compare import backend_interval, compare_with_interval
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.paged_cache import page_views
from nvfp4_suite.reference.problem import outside_scale_domain
from nvfp4_suite.vectors.engine.strategies import problems

P_EXACT = Exact(False, "bf16-folded")  # the model's arithmetic where P is exact (module note)


def _non_negative(p):
    """``p`` with every scale byte's sign bit cleared (a quantiser's cache)."""
    pool = p.pool.copy()
    views = page_views(pool, p.layout, p.num_kv_heads)
    views.k_scale[...] &= 0x7F
    views.v_scale[...] &= 0x7F
    p = dataclasses.replace(p, pool=pool).validate()
    assert outside_scale_domain(p, "non-negative") is None
    return p


def _judge(p, got, arithmetic):
    return compare_with_interval(p, got, *backend_interval(p, geometry=arithmetic))


def _one_key(seed, kg=0.0125, vg=0.02):
    """Every row sees one key (position 0): p = 1."""
    return _non_negative(random_problem(seed, reqs=4, num_kv_heads=2, topk=4, seq_lens=[1, 1, 1, 1],
                                        k_global_scale=kg, v_global_scale=vg))


def _zero_queries(seed):
    """All-zero queries over a few hundred keys per row: every p = 1, the output a mean."""
    return _non_negative(random_problem(seed, reqs=2, q_len=2, num_kv_heads=2, topk=4, seq_lens=[300, 200],
                                        q_std=0.0, k_global_scale=0.0125, v_global_scale=0.05))


# --- declared truly ------------------------------------------------------------------

@settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_declared_truly_the_model_is_inside_its_interval_on_generated_problems(data):
    p = _non_negative(data.draw(problems(max_reqs=3, max_kv_heads=2, max_topk=16, max_q_len=2)))
    iv, against = backend_interval(p, geometry=M.GEOMETRY)
    assert against == "oracle (exact class, P in bf16, operands bf16-folded)"
    # The derivation's claim: the kernel's float32 value lies within delta of pre.
    y = M.run(p, pre_round=True).astype(np.float64)
    assert (np.abs(y - iv.pre) <= iv.delta).all()
    rep = compare_with_interval(p, M.run(p), iv, against)
    assert rep.passed, rep.details()


@pytest.mark.parametrize("seed", [0, 1])
def test_where_p_is_exact_the_model_is_inside_the_tight_interval_of_its_operands(seed):
    for p in (_one_key(seed), _zero_queries(seed)):
        got = M.run(p)
        for arithmetic in (P_EXACT, M.GEOMETRY):
            rep = _judge(p, got, arithmetic)
            assert rep.passed, rep.details()
    # Tight: with one key nearly every element is checked to one bf16 value (the operand).
    p = _one_key(seed)
    assert _judge(p, M.run(p), P_EXACT).n_determined > 0.9 * p.q.size


# --- declaring matters -----------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_the_exact_class_the_model_fails_with_the_catalogs_global_scales(seed):
    p = _one_key(seed)
    got = M.run(p)
    assert _judge(p, got, P_EXACT).passed
    rep = _judge(p, got, None)
    assert not rep.passed and rep.n_outside > 0, rep.summary()
    # The other declared form rounds differently, and is no home for it either.
    assert not _judge(p, got, Exact(False, "bf16-dequant")).passed


def test_with_power_of_two_global_scales_nothing_rounds_and_the_exact_class_holds_it():
    p = _one_key(3, kg=0.5, vg=2.0**-6)
    rep = _judge(p, M.run(p), None)
    assert rep.passed, rep.details()


def test_a_negative_scale_a_row_reads_puts_the_problem_outside_the_models_domain():
    p = random_problem(4, reqs=2, num_kv_heads=1, topk=4, seq_lens=[1, 1])
    pool = p.pool.copy()
    page = int(p.block_table[0, 0])
    page_views(pool, p.layout, 1).v_scale[page, 0] |= 0x80  # token 0 is the row's one key
    p = dataclasses.replace(p, pool=pool)
    assert outside_scale_domain(p, "non-negative").startswith(f"page {page}, KV head 0: V scale of token 0")
    # The oracle reads the sign, the model the magnitude: every output of row 0 changes sign.
    rep = _judge(p, M.run(p), P_EXACT)
    assert not rep.passed and {m.row for m in rep.worst} == {0}


# --- its bugs ----------------------------------------------------------------------

@pytest.mark.parametrize("bug", ["e2m1_sign_dropped", "global_twice"])
def test_gross_bugs_are_caught_on_generated_like_problems(bug):
    p = _non_negative(random_problem(5, reqs=2, q_len=2, num_kv_heads=2, topk=8))
    rep = _judge(p, M.run(p, bug), M.GEOMETRY)
    assert not rep.passed, bug


@pytest.mark.parametrize("bug, problem", [("fold_unrounded", _one_key), ("operand_f32", _zero_queries)])
def test_operand_rounding_bugs_are_caught_where_p_is_exact(bug, problem):
    # One key: the output is the operand itself (a missing bf16 of the product would be
    # restored by the output's rounding, hence the mean over many keys for operand_f32).
    p = problem(0)
    assert _judge(p, M.run(p), P_EXACT).passed
    rep = _judge(p, M.run(p, bug), P_EXACT)
    assert not rep.passed and rep.n_outside > 0, bug


# --- through the engine, as a backend ----------------------------------------------

@pytest.fixture(scope="module")
def declared_golden():
    """The golden run of the model declaring both axes (shared by the tests below)."""
    from nvfp4_suite.vectors.engine.check import check_golden

    return check_golden(M.Kernel())


def test_declaring_both_axes_the_model_is_conformant_on_the_golden_catalog_and_generated_problems(
        declared_golden):
    from nvfp4_suite.vectors.engine.check import check_generated

    run = declared_golden
    assert run.ok, run.text()
    # Whole cases skipped only for the scale domain: the four holding negative scales a row reads.
    skipped = {c.name: {why.split(":")[0] for _, why in c.skipped} for c in run.cases if c.status == "SKIP"}
    assert sorted(skipped) == ["e4m3-max", "e4m3-max-compacted", "e4m3-subnormal", "e4m3-subnormal-compacted"]
    assert all("outside scale_sign=non-negative" in w for w in skipped.values()), skipped
    # Each bug class keeps a case the kernel is judged on (the non-negative twins among them).
    judged = {f for c in run.cases if c.ran for f in c.flags}
    assert {"e4m3-special", "fnuz", "split-rescale", "large-logits"} <= judged
    assert {c.name for c in run.cases if c.status == "PASS"} >= {"e4m3-subnormal-nonneg", "e4m3-max-nonneg"}
    gen = check_generated(M.Kernel(), 12, 0)
    assert gen.ok and gen.n == 12, gen.failing and gen.failing.text


def test_declaring_any_scale_sign_the_model_fails_the_cases_with_negative_scales_and_the_report_says_why_first():
    from nvfp4_suite.vectors.engine.blame import summary_lines
    from nvfp4_suite.vectors.engine.check import check_golden

    # The negative-scale cases and their non-negative twins, which pass.
    run = check_golden(M.Kernel(scale_sign="any"), cases={12, 14, 83, 84})
    assert [c.status for c in run.cases] == ["FAIL", "FAIL", "PASS", "PASS"], run.text()
    shared = [line for line in summary_lines(run.outcomes()) if "shared by the failures" in line]
    assert "negative E4M3 block scale" in shared[0], shared


def test_declaring_exact_operands_the_model_fails_where_the_global_scales_round_and_is_told_its_operands_first(
        declared_golden):
    from nvfp4_suite.reference import EXACT_P_BF16
    from nvfp4_suite.vectors.engine.blame import diagnose_golden, summary_lines
    from nvfp4_suite.vectors.engine.check import check_golden

    ids = {c.id for c in declared_golden.cases if c.name in ("split-rescale", "large-logits", "scale-groups")}
    run = check_golden(M.Kernel(arithmetic=EXACT_P_BF16), cases=ids)
    assert [c.status for c in run.cases].count("FAIL") == 2 and len(run.cases) == 3, run.text()
    lines = summary_lines(run.outcomes(), diagnose_golden(run, EXACT_P_BF16))
    assert lines[0].startswith("  outputs fit another declaration:"), lines
    assert "exact-p-bf16,operands=bf16-folded" in lines[0] and "declared: exact-p-bf16)" in lines[0]


@pytest.mark.parametrize("bug", sorted(M.BUGS))
def test_each_injected_bug_is_caught_by_the_golden_catalog(bug, declared_golden):
    from nvfp4_suite.vectors.engine.check import check_golden

    run = check_golden(M.Kernel(bug), stop_at_first=True)
    assert any(c.status == "FAIL" for c in run.cases), run.text()
