"""nvfp4_suite.reference.arithmetic: the declarations, and a kernel judged in each.

The third-party model (tests/thirdparty.py: P in bf16 relative to one max per
128 keys, split by slot position, otherwise float32; compacted slot lists and
four separate cache tensors, declared) is conformant
when it declares ``EXACT_P_BF16`` and not when it declares the exact class or
the seed's geometry; its injected bugs are caught under its declaration; a
kernel of a position-split geometry is judged against its own schedule.
"""

import dataclasses
import itertools

import numpy as np
import pytest
from thirdparty import BUGS, LAYOUT, ThirdPartyKernel

import nvfp4_suite.reference as R
from nvfp4_suite.kernels.mutants import bf16_truncate
from nvfp4_suite.kernels.protocol import Capabilities
from nvfp4_suite.reference import EXACT_P_BF16, SEED_GEOMETRY, Exact, Geometry, arithmetic_name, parse_arithmetic
from nvfp4_suite.reference.arithmetic import OPERANDS
from nvfp4_suite.reference.compare import compare_backend_output, interval_vs_oracle
from nvfp4_suite.reference.emulate import _emulate, split_schedule
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.layout import present
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog.cases import compact
from nvfp4_suite.vectors.cli import main
from nvfp4_suite.vectors.engine.check import check_generated, check_golden

POSITION = Geometry(32, 8, True, "position")


@pytest.mark.parametrize("arith", [None, EXACT_P_BF16, SEED_GEOMETRY, POSITION, Geometry(128, 32, True, "position"),
                                   Geometry(64, 16, False)]
                         + [Exact(p, o) for p in (False, True) for o in OPERANDS[1:]], ids=str)
def test_every_declaration_reads_back_from_its_name(arith):
    assert parse_arithmetic(arithmetic_name(arith)) == arith


def test_declared_operands_have_names_and_unknown_ones_are_refused():
    assert arithmetic_name(Exact(True, "bf16-folded")) == "exact-p-bf16,operands=bf16-folded"
    assert parse_arithmetic("exact,operands=bf16-dequant") == Exact(False, "bf16-dequant")
    # "exact" operands are the default and have one name only (no suffix).
    for bad in ("exact,operands=exact", "exact-p-bf16,operands=bf16", "exact,operands=bf16-folded,p-bf16"):
        with pytest.raises(ValueError, match="operands=OPERANDS"):
            parse_arithmetic(bad)
    with pytest.raises(ValueError, match="operands = 'fp16'"):
        Exact(True, "fp16")


def test_the_names_of_the_cli_and_unreadable_ones():
    assert arithmetic_name(Exact(False)) == "exact" and parse_arithmetic("exact") is None
    assert parse_arithmetic("geometry:128x32,position,p-bf16") == Geometry(128, 32, True, "position")
    for bad in ("bogus", "geometry:32x8,position,position", "geometry:32x8,p_bf16", "Exact"):
        with pytest.raises(ValueError, match="expected exact, exact-p-bf16"):
            parse_arithmetic(bad)
    with pytest.raises(ValueError, match="128 must divide"):
        parse_arithmetic("geometry:48x8")
    with pytest.raises(ValueError, match="split_rule"):
        Geometry(32, 8, True, "round-robin")


def _schedule_by_definition(valid, splits, rule):
    """Per split, the slots it walks in order, straight from CONTRACT.md section 6.4."""
    K = len(valid)
    if rule == "rank":
        ranked = [i for i in range(K) if valid[i]]
        chunk = -(-len(ranked) // splits)
        return [ranked[z * chunk:(z + 1) * chunk] for z in range(splits)]
    chunk = -(-K // splits)
    return [[i for i in range(z * chunk, min((z + 1) * chunk, K)) if valid[i]] for z in range(splits)]


@pytest.mark.parametrize("rule", ["rank", "position"])
def test_split_schedule_is_its_definition_for_every_slot_mask_of_seven_slots(rule):
    valid = np.array(list(itertools.product([False, True], repeat=7)))
    for splits in range(1, 9):
        slots, T = split_schedule(valid, splits, rule=rule)
        want = [_schedule_by_definition(list(v), splits, rule) for v in valid]
        assert T == max(len(chunk) for w in want for chunk in w)
        for row, w in enumerate(want):
            assert [[int(x) for x in slots[row, z] if x >= 0] for z in range(splits)] == w


class _Emulated:
    """The emulation of ``geometry``, declared as ``declared``; ``p_round`` replaces P's rounding."""

    capabilities = Capabilities(splits=tuple(range(1, 9)))
    name = "emulated"

    def __init__(self, geometry, declared, p_round=None):
        self.g, self.geometry, self.p_round = geometry, declared, p_round

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        return R.bf16_round(_emulate(problem, splits, self.g, False, p_round=self.p_round).pre_round)


def _position_problem():
    # Invalid slots at the front: rank and position schedules differ for every split count > 1.
    # Small scores keep the flip-risk term small, so P rounded relative to another
    # split's running max shows (with large scores most keys are at risk of a flip
    # and the two schedules' outputs lie within each other's intervals).
    p = random_problem(0, reqs=4, q_len=2, num_kv_heads=2, topk=16, seq_lens=[4000, 3000, 2500, 5000], q_std=0.1)
    topk = p.topk.copy()
    topk[..., :5] = -1
    return dataclasses.replace(p, topk=topk).validate()


def test_a_position_split_kernel_is_judged_against_its_own_schedule():
    p = _position_problem()
    for s in (2, 3):
        out = _Emulated(POSITION, POSITION)(p, splits=s)
        assert compare_backend_output(p, out, geometry=POSITION, splits=s).passed
        assert not compare_backend_output(p, out, geometry=SEED_GEOMETRY, splits=s).passed
    truncated = _Emulated(POSITION, POSITION, p_round=bf16_truncate)(p, splits=2)
    assert not compare_backend_output(p, truncated, geometry=POSITION, splits=2).passed


def test_the_thirdparty_model_is_conformant_when_it_declares_its_arithmetic():
    run = check_golden(ThirdPartyKernel())
    assert run.ok, run.text()
    gen = check_generated(ThirdPartyKernel(), examples=10, seed=1, shrink=False)
    assert gen.ok, gen.failing and gen.failing.text


def test_the_thirdparty_model_also_meets_its_whole_geometry_and_only_with_its_split_rule():
    # One max per 128 keys, l summed over them, P in bf16, split by position: the
    # emulation of that chain judges it to float32 noise; the rank rule does not fit.
    mine = Geometry(128, 128, True, "position")
    run = check_golden(ThirdPartyKernel(geometry=mine))
    assert run.ok, run.text()
    assert check_generated(ThirdPartyKernel(geometry=mine), examples=10, seed=1, shrink=False).ok
    wrong = ThirdPartyKernel(geometry=dataclasses.replace(mine, split_rule="rank"))
    assert not check_golden(wrong, cases=_cases("minus-one", "stale-tail")).ok


def _cases(*flags):
    return {c["id"] for c in catalog.load_manifest()["cases"] if set(flags) & set(c["flags"])}


@pytest.mark.parametrize("declared", [None, SEED_GEOMETRY], ids=["exact-class", "seed-geometry"])
def test_the_thirdparty_model_is_not_conformant_when_it_declares_another_arithmetic(declared):
    run = check_golden(ThirdPartyKernel(geometry=declared), cases=_cases("rounding", "large-logits"))
    assert not run.ok
    assert not check_generated(ThirdPartyKernel(geometry=declared), examples=10, seed=1, shrink=False).ok


@pytest.mark.parametrize("bug, flag", [("no_causal_cut", "stale-tail"), ("merge_no_rescale", "split-rescale"),
                                       ("head_mod", "head-map")])
def test_thirdparty_bugs_are_caught_under_its_declaration(bug, flag):
    assert bug in BUGS
    run = check_golden(ThirdPartyKernel(bug=bug), cases=_cases(flag), stop_at_first=True)
    assert any(c.status == "FAIL" for c in run.cases), f"{bug} passed every case flagged {flag}"


@pytest.mark.parametrize("seed, splits", [(0, 1), (1, 3), (2, 8)])
def test_the_p_rounding_term_bounds_an_independent_p_in_bf16_kernel_and_is_needed(seed, splits):
    p = compact(random_problem(seed, reqs=3, q_len=2, num_kv_heads=2, topk=8)).validate()
    pre = ThirdPartyKernel()(present(p, LAYOUT), splits=splits, pre_round=True).astype(np.float64)
    with_term = interval_vs_oracle(p, geometry=EXACT_P_BF16)
    assert np.all(np.abs(pre - with_term.pre) <= with_term.delta)
    without = interval_vs_oracle(p, p_bf16=False)
    assert np.any(np.abs(pre - without.pre) > without.delta)


def test_check_arithmetic_overrides_what_the_backend_declares(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    tail = ["--examples", "5", "--no-golden"]
    assert main(["check", "--backend", "thirdparty:ThirdPartyKernel", "--arithmetic", "exact-p-bf16", *tail]) == 0
    assert "arithmetic exact-p-bf16" in capsys.readouterr().out
    # The seed's arithmetic (the emulate backend, conformant as it declares itself:
    # tests/test_cli.py) judged as the exact class: P's rounding is outside it, on
    # golden cases (whatever hypothesis draws in this version).
    assert main(["check", "--backend", "emulate", "--arithmetic", "exact", "--examples", "0"]) == 1
    assert "NOT CONFORMANT" in capsys.readouterr().out
    assert main(["check", "--backend", "emulate", "--arithmetic", "geometry:48x8", *tail]) == 2
