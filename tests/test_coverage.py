"""nvfp4_suite.vectors.engine.coverage: the conditions, their stated minimum shares
over the CI draws, and every registered numpy mutant caught by the generated
check alone within a stated budget, on a problem reaching a condition its
class needs.

Mutants covered here: every ``mutants:*`` spec of ``nvfp4_suite.vectors.catalog.bugs``
(numpy speed) except the undetectable ones and the two that only invalid
input shows (``numpy_nan_scale_unchecked``, ``numpy_unvalidated``: the
generator draws valid problems; golden invalid cases catch them,
tests/test_bugs.py). The Triton and FlyDSL mutants run on an interpreter or
a simulator here (minutes per problem) and are not run by this test.
"""

import dataclasses

import numpy as np
import pytest

from nvfp4_suite.kernels import get_backend
from nvfp4_suite.kernels.protocol import INTERPRETED_LIMITS, Capabilities, Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.catalog import bugs
from nvfp4_suite.vectors.engine.check import check_generated
from nvfp4_suite.vectors.engine.coverage import (
    CI_DRAWS,
    CI_SEED,
    NEEDS,
    NO_WORK,
    Coverage,
    conditions_for,
    launch_conditions,
    problem_conditions,
)
from nvfp4_suite.vectors.engine.strategies import run_generated

# Problems the generated check may need to catch each covered mutant (the CI profile's 30 examples).
BUDGET = 30
INVALID_ONLY = {"nvfp4_suite.kernels.mutants:numpy_nan_scale_unchecked",
                "nvfp4_suite.kernels.mutants:numpy_unvalidated"}
COVERED = [m for m in bugs.mutants("numpy") if not m.undetectable and m.spec not in INVALID_ONLY]


@dataclasses.dataclass(frozen=True)
class CompactedCaps(Capabilities):
    """A backend declaring compacted slot lists (the field issue 21 adds to Capabilities)."""

    slot_lists: str = "compacted"


CI_CAPS = {
    "default limits, splits 1-8": Capabilities(splits=tuple(range(1, 9))),
    "interpreted limits, splits 1,2,4,8, xcds 0,8": Capabilities(splits=(1, 2, 4, 8), xcds=(0, 8),
                                                                 limits=INTERPRETED_LIMITS),
    "compacted slot lists, splits 1,2,4,8": CompactedCaps(splits=(1, 2, 4, 8)),
}


@pytest.mark.parametrize("label", sorted(CI_CAPS))
def test_every_allowed_condition_is_drawn_at_least_as_often_as_stated_over_the_ci_draws(label):
    caps = CI_CAPS[label]
    cov = Coverage(caps)
    run_generated(caps, CI_DRAWS, CI_SEED, lambda p, launch: cov.add(p, launch), shrink=False)
    assert cov.n == CI_DRAWS
    assert cov.reached[NO_WORK] < 0.10 * cov.n, f"{cov.reached[NO_WORK]} of {cov.n} problems have no valid slot"
    assert not cov.below_minimum(), "\n".join(cov.lines())
    assert not cov.never_reached()


def test_conditions_the_domain_or_limits_exclude_are_not_listed():
    names = {c.name for c in conditions_for(CompactedCaps(splits=(1,)))}
    assert "-1 after valid" in names and "layout=planar" in names and "splits=1" in names
    assert not names & {"-1 before valid", "-1 between valid", "future before valid", "splits>1", "xcds>0"}
    small = {c.name for c in conditions_for(Capabilities(limits=INTERPRETED_LIMITS))}
    assert "valid slot index>=32" not in small and "q_len>1" in small


def test_conditions_of_a_hand_built_problem():
    p = random_problem(3, reqs=1, q_len=2, num_kv_heads=2, topk=6, seq_lens=[300])
    # positions 298, 299: own block 2, cut at offsets 42 and 43
    topk = np.array([[[-1, 2, 5, 0, -1, 1], [1, 0, 2, -1, -1, -1]],
                     [[-1, -1, -1, -1, -1, -1], [2, 9, 9, 9, 9, 9]]], np.int32)
    p = dataclasses.replace(p, topk=topk)
    got = problem_conditions(p)
    assert {"has work", "row with no valid slot", "q_len>1", "Hkv>1", "diagonal block", "diagonal block cut",
            "earlier block, cut row", "odd valid count", "-1 before valid", "-1 between valid", "-1 after valid",
            "future between valid", "future after valid"} <= got
    assert not got & {"padding row", "future before valid", NO_WORK, "valid slot index>=32"}
    # valid counts: head 0 rows 0 and 1: 3 (id 5 is a future block), head 1: 0 and 1
    two = launch_conditions(p, Launch(splits=2))
    assert {"splits=2", "splits>1", "valid count % splits != 0", "two splits with blocks",
            "odd block count in a split", "first block of a wave fully masked"} <= two
    three = launch_conditions(p, Launch(splits=3))
    assert "valid count % splits == 0" in three and "split with no block" in three
    assert "3+ blocks in a split, splits>1" not in two | three


def test_a_split_of_three_blocks_is_counted_only_in_a_split_launch():
    # One row of 5 valid slots (blocks 0..4 of its 5 visible): split 0 of 2 walks 3.
    p = random_problem(3, reqs=1, q_len=1, num_kv_heads=1, topk=6, seq_lens=[600])
    p = dataclasses.replace(p, topk=np.array([[[4, 0, -1, 1, 2, 3]]], np.int32))
    assert "3+ blocks in a split, splits>1" in launch_conditions(p, Launch(splits=2))
    assert "3+ blocks in a split, splits>1" not in launch_conditions(p, Launch(splits=1))
    assert "3+ blocks in a split, splits>1" not in launch_conditions(p, Launch(splits=3))
    # Allowed only where TOPK > 2 * some declared split count > 1.
    names = {c.name for c in conditions_for(Capabilities(splits=(1, 4, 8), limits=INTERPRETED_LIMITS))}
    assert "3+ blocks in a split, splits>1" not in names
    names = {c.name for c in conditions_for(Capabilities(splits=(1, 2), limits=INTERPRETED_LIMITS))}
    assert "3+ blocks in a split, splits>1" in names


@pytest.mark.parametrize("spec", [m.spec for m in COVERED])
def test_every_numpy_mutant_is_caught_by_the_generated_check_alone_on_a_condition_its_class_needs(spec):
    m = next(x for x in COVERED if x.spec == spec)
    gen = check_generated(get_backend(spec), BUDGET, CI_SEED, shrink=False)
    assert not gen.ok, f"{spec} passed {BUDGET} generated problems"
    assert gen.n <= BUDGET
    if m.bug not in NEEDS:  # large-logits: see coverage.NEEDS
        return
    caught = [c for c in NEEDS[m.bug] if gen.coverage.failed[c]]
    assert caught, (f"{spec} was caught at problem {gen.n} on a problem reaching none of {NEEDS[m.bug]}: "
                    f"{sorted(k for k, v in gen.coverage.failed.items() if v)}")


def test_every_bug_class_with_a_covered_mutant_names_the_conditions_it_needs():
    assert {m.bug for m in COVERED} - set(NEEDS) == {"large-logits"}
    known = {c.name for c in conditions_for(Capabilities(splits=(1, 2), xcds=(0, 8)))}
    for cls, needs in NEEDS.items():
        assert set(needs) <= known, (cls, set(needs) - known)


def test_the_coverage_table_warns_of_an_allowed_condition_never_reached():
    cov = Coverage(Capabilities(splits=(1, 2)))
    p = random_problem(1, reqs=1, topk=2, seq_lens=[5])
    cov.add(p, Launch(splits=1))
    text = "\n".join(cov.lines())
    assert "coverage over 1 problems" in text
    assert "warning: no problem reached 'splits=2'" in text and "warning: no problem reached 'q_len>1'" in text
    assert "warning: no problem reached 'splits=1'" not in text
