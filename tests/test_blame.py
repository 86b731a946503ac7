"""vectors/engine/blame.py: the cause summary of a golden run, and the diagnosis by outputs."""

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.catalog import bugs
from nvfp4_suite.vectors.engine import blame
from nvfp4_suite.vectors.engine.blame import Outcome


def _problem(topk_rows, seq_lens, q_len=1, hkv=1, layout="token_rows"):
    """A seeded problem whose slot lists are ``topk_rows`` ([Hkv, rows, TOPK])."""
    ids = np.asarray(topk_rows, np.int32)
    p = random_problem(0, reqs=len(seq_lens), num_kv_heads=hkv, topk=ids.shape[2],
                       q_len=q_len, seq_lens=list(seq_lens), layout=layout)
    return dataclasses.replace(p, topk=ids).validate()


def test_launch_features_name_each_slot_list_fact():
    # Row 0 at position 299 (self block 2): [-1, 0, 2] has -1 before valid ids; row 1 at 127: compacted.
    p = _problem([[[-1, 0, 2], [0, -1, -1]]], seq_lens=[300, 128])
    f = blame.launch_features(p, Launch(splits=2))
    assert {"not-compacted", "invalid-before-valid", "minus-one-slot", "splits>1", "token_rows", "odd-valid-count",
            "partial-last-block"} <= f
    assert "future-slot" not in f and "row-without-work" not in f and "hkv>1" not in f


def test_launch_features_see_future_ids_and_rows_without_work():
    # Row 0 at position 99 (self block 0): id 1 is a future block; row 1 has none valid.
    p = _problem([[[0, 1], [-1, -1]]], seq_lens=[100, 50])
    f = blame.launch_features(p, Launch())
    assert {"future-slot", "row-without-work", "minus-one-slot"} <= f
    assert "invalid-before-valid" not in f and "splits>1" not in f


def test_launch_features_compacted_lists_have_no_invalid_before_valid():
    p = _problem([[[0, 1, 2, -1], [0, -1, -1, -1]]], seq_lens=[384, 128])
    f = blame.launch_features(p, Launch())
    assert "invalid-before-valid" not in f and "future-slot" not in f and "not-compacted" not in f
    assert "partial-last-block" not in f  # both positions end a block (383, 127)


def _o(case, failed, *features, flags=("x",), splits=1):
    return Outcome(case, tuple(flags), Launch(splits=splits), frozenset(features), failed)


def test_shared_causes_are_the_features_every_failure_has_and_some_pass_lacks():
    outs = [_o(0, True, "hkv>1", "q_len>1"), _o(1, True, "hkv>1", "planar"), _o(2, False, "hkv>1", "q_len>1"),
            _o(3, False, "q_len>1")]
    causes = blame.shared_causes(outs)
    assert [c.feature for c in causes] == ["hkv>1"]
    assert (causes[0].failing, causes[0].passing_with, causes[0].passing) == (2, 1, 2)


def test_shared_causes_exclude_features_every_launch_has():
    outs = [_o(0, True, "planar"), _o(1, False, "planar")]
    assert blame.shared_causes(outs) == []


def test_shared_causes_rank_the_rarest_among_passing_launches_first():
    outs = [_o(0, True, "planar", "xcds"), _o(1, False, "planar"), _o(2, False, "planar"), _o(3, False, "xcds"),
            _o(4, False)]
    assert [c.feature for c in blame.shared_causes(outs)] == ["xcds", "planar"]


def test_shared_causes_of_equal_share_come_in_the_order_of_features():
    outs = [_o(0, True, "q_len>1", "invalid-before-valid"), _o(1, False)]
    assert [c.feature for c in blame.shared_causes(outs)] == ["invalid-before-valid", "q_len>1"]


def test_class_shares_rank_by_share_not_by_count():
    outs = ([_o(i, i < 5, flags=("big",)) for i in range(30)]
            + [_o(100 + i, True, flags=("small",)) for i in range(2)])
    shares = blame.class_shares(outs)
    assert [(s.flag, s.failed, s.judged) for s in shares] == [("small", 2, 2), ("big", 5, 30)]


def test_class_shares_count_a_case_once_whatever_its_launches():
    outs = [_o(0, True, splits=1), _o(0, False, splits=2), _o(1, False)]
    (s,) = blame.class_shares(outs)
    assert (s.failed, s.judged) == (1, 2)


def test_summary_lines_put_the_shared_cause_first_and_say_nothing_for_a_pass():
    outs = [_o(0, True, "invalid-before-valid", flags=("fnuz",)),
            _o(1, True, "invalid-before-valid", flags=("nibble-order",)),
            _o(2, False, flags=("fnuz",))]
    lines = blame.summary_lines(outs)
    assert lines[0].startswith("  shared by the failures: every failing launch (2) has a -1 or future slot")
    assert lines[-1] == "  failing bug classes by share of their cases failed: nibble-order 1/1, fnuz 1/2"
    assert blame.summary_lines([_o(0, False)]) == []


# --- the diagnosis by outputs ---------------------------------------------------------------------------------

NAN = np.float32(np.nan)


def test_agreement_is_bit_for_bit_with_any_nan_equal_to_any_nan():
    a = np.array([1.0, NAN, -0.0, 2.0], np.float32)
    quiet_other_payload = np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    assert blame.agreement(a, np.array([1.0, quiet_other_payload, -0.0, 2.0], np.float32)) == (True, 1.0)
    # +0 is not -0, bit for bit; one element of four differs.
    assert blame.agreement(a, np.array([1.0, NAN, 0.0, 2.0], np.float32)) == (False, 0.75)


def test_agreement_of_a_phrase_needs_the_same_phrase_and_of_shapes_the_same_shape():
    a = np.zeros((2, 3), np.float32)
    assert blame.agreement("raised IndexError", "raised IndexError") == (True, 1.0)
    assert blame.agreement("raised IndexError", "raised ValueError") == (False, 0.0)
    assert blame.agreement("raised IndexError", a) == (False, 0.0)
    assert blame.agreement(a, np.zeros((3, 2), np.float32)) == (False, 0.0)
    assert blame.agreement(a, None) == (False, 0.0)


def test_candidates_are_the_mutants_of_the_kernels_arithmetic():
    from nvfp4_suite.reference import SEED_GEOMETRY

    exact = {c.spec.rpartition(":")[2] for c in blame.candidates(None)}
    seed = {c.spec.rpartition(":")[2] for c in blame.candidates(SEED_GEOMETRY)}
    assert "numpy_v_scale_linear" in exact and not any(s.startswith("seed_") for s in exact)
    assert {"seed_output_truncated", "PlacementBug", "XcdRowMask"} <= seed and not any(s.startswith("numpy_")
                                                                                     for s in seed)


def test_a_kernel_of_another_arithmetic_is_told_no_mutant_compares():
    from nvfp4_suite.reference import SEED_GEOMETRY

    other = dataclasses.replace(SEED_GEOMETRY, p_bf16=not SEED_GEOMETRY.p_bf16)
    o = blame.Observed(0, (), Launch(), random_problem(0), np.zeros(1, np.float32))
    (line,) = blame.diagnose([o], other).lines()
    assert line.startswith("  cause: no registered mutant of this arithmetic"), line


def _observed(backend, problem, launch=None, case=0, flags=()):
    """What ``backend`` did on ``problem`` at ``launch`` (default splits 1), as the diagnosis sees a failing launch."""
    from nvfp4_suite.vectors.engine.harness import run_case

    launch = launch or Launch()
    got, _ = run_case(backend, problem, launch)
    return blame.Observed(case, flags, launch, problem, got)


def _one_element_off(o):
    """``o`` with its first output element replaced by a value no kernel computes."""
    did = o.did.copy()
    did.reshape(-1)[0] = 12345.0
    return dataclasses.replace(o, did=did)


def test_outputs_equal_to_no_mutant_name_none_and_no_closest_unless_closer_than_the_correct_one():
    # The correct outputs with one element off: no mutant equals them, and a mutant
    # can at best equal as many elements as the correct implementation (strictly
    # closer is needed to be named).
    from nvfp4_suite.kernels import mutants

    o = _one_element_off(_observed(mutants.NumpyKernel(), random_problem(3)))
    d = blame.diagnose([o], None)
    assert d.matches == [] and d.closest is None
    assert d.lines() == ["  cause: no registered mutant's outputs equal the kernel's on any of the 1 failing launches"]


def test_outputs_nearly_equal_to_a_mutants_name_it_closest_with_both_shares():
    from nvfp4_suite.kernels import mutants

    o = _one_element_off(_observed(mutants.NumpyKernel("v_scale_linear"), random_problem(3)))
    d = blame.diagnose([o], None)
    c, share, base = d.closest
    n = o.did.size
    assert d.matches == [] and c.spec == _spec("numpy_v_scale_linear") and share == (n - 1) / n and base < share
    assert "closest: mutant v-scale-swizzle (" in d.lines()[0]


def _spec(attr):
    return f"nvfp4_suite.kernels.mutants:{attr}"


# Every numpy mutant a conformance check can reject: the diagnosis must name each first, and alone.
DETECTABLE = [m for m in bugs.mutants("numpy") if not m.undetectable]


@functools.lru_cache(maxsize=None)
def _golden(spec):
    """The golden run of mutant ``spec`` on the cases of its own class (the cases built to show
    that bug: seconds, where the whole catalog takes a minute) and every invalid-input case
    (judged by a refusal, no oracle: they cost nothing, and they are what tells a kernel that
    skips one host-side check from one that skips them all), diagnosed."""
    from nvfp4_suite import kernels
    from nvfp4_suite.vectors.catalog import load_manifest
    from nvfp4_suite.vectors.engine.check import check_golden

    mutant = {m.spec: m for m in bugs.MUTANTS}[spec]
    backend = kernels.get_backend(spec)
    invalid = {c["id"] for c in load_manifest()["cases"] if c["result"] == "invalid"}
    run = check_golden(backend, cases={c["id"] for c in bugs.golden_cases(mutant.bug)} | invalid)
    run.diagnosis = blame.diagnose_golden(run, backend.geometry)
    return run


# The golden runs CI diagnoses: the pairs that tie on which launches fail (V scales read linearly
# or with the group shifted; a stray read's NaN and an overflow's), the two host-side validation
# mutants (judged by refusals: no oracle), the seed-geometry rounding mutants and the two placement
# mutants. Every other mutant's golden run (about 10 s each on 2 cores) runs with -m thorough.
CI_GOLDEN = {_spec(f"numpy_{b}") for b in ("v_scale_linear", "scale_group_shift", "masked_page_zero", "softmax_no_max",
                                           "nan_scale_unchecked", "unvalidated")} | {
    m.spec for m in DETECTABLE if not m.spec.rpartition(":")[2].startswith("numpy_")}


@pytest.mark.parametrize("spec", [
    pytest.param(m.spec, marks=() if m.spec in CI_GOLDEN else pytest.mark.thorough)
    for m in DETECTABLE], ids=lambda s: s.rpartition(":")[2])
def test_the_golden_runs_first_cause_line_names_the_mutant_itself_untied(spec):
    from nvfp4_suite.vectors.cli.render import golden_lines

    run = _golden(spec)
    mutant = {m.spec: m for m in bugs.MUTANTS}[spec]
    lines = golden_lines(run, spec)
    n = sum(len(c.failures) for c in run.cases)
    assert lines[1].startswith(f"  cause: outputs equal those of mutant {mutant.bug} (") and (
        f"; {spec.rpartition(':')[2]}) on {n} of {n} failing launches, bit for bit" in lines[1]), lines[:3]
    assert "tied" not in lines[1], lines[1]


# Mutants the generator cannot show: it draws valid problems, and these only mis-handle invalid ones.
INVALID_INPUT_ONLY = {m.spec for m in DETECTABLE
                      if all(c["result"] == "invalid" for c in bugs.golden_cases(m.bug))}


def test_only_the_host_side_validation_mutants_are_left_to_the_golden_diagnosis():
    assert INVALID_INPUT_ONLY == {_spec("numpy_nan_scale_unchecked"), _spec("numpy_unvalidated")}


# The minimised problems CI diagnoses: the ones whose first diagnosis tied (a stray read's NaN
# and an overflow's; an unwritten empty split and a dropped odd block) and one plain bug. Every
# other mutant's takes CI's budget (about 10 s each on 2 cores) and runs with -m thorough.
CI_MINIMISED = {_spec("numpy_masked_page_zero"), _spec("numpy_empty_split_unwritten"), _spec("numpy_head_mod")}


@pytest.mark.parametrize("spec", [
    pytest.param(m.spec, marks=() if m.spec in CI_MINIMISED else pytest.mark.thorough)
    for m in DETECTABLE if m.spec not in INVALID_INPUT_ONLY], ids=lambda s: s.rpartition(":")[2])
def test_the_minimised_generated_problems_diagnosis_names_the_mutant_itself_untied(spec):
    from nvfp4_suite import kernels
    from nvfp4_suite.vectors.cli.render import failing_lines
    from nvfp4_suite.vectors.engine.check import check_generated

    # 100 problems as the mutants' own tests draw (tests/test_mutants.py); a few seconds of
    # minimising: the diagnosis must hold for whatever problem minimising reached.
    gen = check_generated(kernels.get_backend(spec), examples=100, seed=1, shrink_budget_s=3.0)
    assert gen.failing is not None, f"{spec} passed 100 generated problems"
    lines = failing_lines(gen.failing, spec, None, "not saved in this test")
    assert lines[2].startswith("  cause: outputs equal those of mutant ") and (
        f"; {spec.rpartition(':')[2]}) on 1 of 1 failing launches, bit for bit" in lines[2]), lines[:4]
    assert "tied" not in lines[2], lines[2]


class _Both(str):
    """A bug name equal to each of two: ``NumpyKernel`` tests its bug with ``==`` and
    ``!=`` at each place one bug acts, so with this name it has both bugs."""

    def __new__(cls, a: str, b: str):
        s = super().__new__(cls, f"{a}+{b}")
        s.parts = (a, b)
        return s

    def __eq__(self, other):
        return other in self.parts

    def __ne__(self, other):
        return other not in self.parts

    __hash__ = str.__hash__


def _two_bugs(a: str, b: str):
    from nvfp4_suite.kernels import mutants

    k = mutants.NumpyKernel()
    k.bug, k.name = _Both(a, b), f"mutant:{a}+{b}"
    return k


def test_a_kernel_with_two_bugs_gets_both_named_each_on_the_launches_it_alone_explains():
    from nvfp4_suite.vectors.cli.render import golden_lines
    from nvfp4_suite.vectors.engine.check import check_golden

    # KV head h % Hkv (more than one KV head shows it) and pages always read in the
    # token_rows layout (a planar case shows it): the golden cases of either class,
    # no one of which shows both.
    kernel = _two_bugs("head_mod", "layout_token_rows")
    ids = {c["id"] for c in bugs.golden_cases("head-map") + bugs.golden_cases("layout")}
    run = check_golden(kernel, cases=ids)
    run.diagnosis = blame.diagnose_golden(run, None)
    lines = golden_lines(run, "two-bugs")
    named = [m.candidate.spec for m in run.diagnosis.matches]
    # Both named; which comes first is the one that explains more launches (checked below).
    assert sorted(named) == [_spec("numpy_head_mod"), _spec("numpy_layout_token_rows")], lines[:5]
    first, second = run.diagnosis.matches
    failing = sum(len(c.failures) for c in run.cases)
    # Together they explain every failing launch; the first the most of them.
    assert not first.explained & second.explained and len(first.explained | second.explained) == failing
    assert len(first.explained) >= len(second.explained) and not first.tied and not second.tied
    assert lines[1:3] == [first.line(), second.line()] and f"on {len(second.explained)} of {failing}" in lines[2]


def test_the_report_lists_first_the_failing_case_that_best_isolates_the_cause():
    from nvfp4_suite import kernels
    from nvfp4_suite.vectors.cli.render import golden_lines
    from nvfp4_suite.vectors.engine.check import check_golden

    # V scales read linearly fail these three; only v-scale-swizzle carries no other flag.
    names = ("first-slots-invalid", "no-valid-slot-rows", "v-scale-swizzle")
    ids = {c["id"] for c in bugs.golden_cases("first-invalid-nan") + bugs.golden_cases("v-scale-swizzle")
           if c["name"] in names}
    run = check_golden(kernels.get_backend(_spec("numpy_v_scale_linear")), cases=ids)
    run.diagnosis = blame.diagnose_golden(run, None)
    listed = [line.split()[1] for line in golden_lines(run, "m") if " FAIL at " in line]
    assert sorted(listed) == sorted(names) and listed[0] == "v-scale-swizzle", listed


def _case(cid, flags):
    from nvfp4_suite.vectors.engine.check import CaseResult

    return CaseResult(cid, f"c{cid}", list(flags), Path("x"))


def test_isolating_first_picks_the_explained_case_with_the_fewest_other_flags_and_keeps_the_rest_in_order():
    cand = blame.Candidate("m:a", "scale-group", "")
    d = blame.Diagnosis([blame.Match(cand, frozenset({0, 1, 2}), 4, frozenset({1, 2, 3}))], 4, 1)
    cases = [_case(0, ["scale-group"]), _case(1, ["scale-group", "fnuz", "layout"]), _case(2, ["fnuz", "x"]),
             _case(3, ["scale-group", "fnuz"])]
    # Case 0 has no other flag but the cause does not explain it; of 1, 2, 3, case 3 has one other flag.
    assert [c.id for c in blame.isolating_first(cases, d)] == [3, 0, 1, 2]
    assert blame.isolating_first(cases, None) == cases


def test_the_json_reports_blame_field_is_the_text_reports_cause_summary():
    from nvfp4_suite.vectors.cli.render import golden_lines
    from nvfp4_suite.vectors.engine.check import CatalogRun, CheckRun
    from nvfp4_suite.vectors.engine.config import CheckConfig

    golden = _golden(_spec("numpy_scale_group_shift"))
    run = CheckRun(CheckConfig(backend="m"), catalogs=[CatalogRun(Path("."), None, "built-in", golden)])
    text = golden_lines(golden, "m")
    assert run.blame_lines() == text[1:1 + len(run.blame_lines())] and run.blame_lines()[0].startswith("  cause: ")


def test_a_failing_launch_whose_output_was_too_large_to_keep_is_counted_not_compared():
    from nvfp4_suite.vectors.engine.check import GoldenRun, LaunchFailure, kept

    assert kept(np.zeros(blame.KEEP_OUTPUT_BYTES // 4 + 1, np.float32)) is None
    assert kept(None) == "returned no array"
    c = _case(0, ["x"])
    c.ran, c.failures = [Launch()], [LaunchFailure(Launch(), "report", output=None)]
    d = blame.diagnose_golden(GoldenRun([c]), None)
    assert (d.of, d.unkept) == (0, 1)
    assert d.lines() == [f"  cause: 1 failing launches kept no output to compare (larger than "
                         f"{blame.KEEP_OUTPUT_BYTES} bytes)"]
