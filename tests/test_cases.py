"""nvfp4_suite.vectors.catalog.cases: the compacted slot-list cases keep the catalog as strong for a
kernel that declares ``slot_lists="compacted"`` as it is for one that takes any list.

Every bug class such a kernel can have keeps golden cases it runs (inside the
compacted domain, or invalid input, which every kernel's host side meets), and
every detectable numpy mutant of such a class fails one of those cases that
carries its flag (the proof ``tests/test_bugs.py`` gives for the whole catalog).
"""

import dataclasses
import functools

import pytest

from nvfp4_suite.kernels import get_backend
from nvfp4_suite.kernels.protocol import Capabilities, Launch, Limits
from nvfp4_suite.reference import SEED_GEOMETRY, emulate
from nvfp4_suite.reference.paged_cache import D
from nvfp4_suite.reference.problem import outside_slot_domain
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import bugs, cases
from nvfp4_suite.vectors.catalog.casefile import load_case
from nvfp4_suite.vectors.engine.check import check_generated, check_golden, check_invalid
from nvfp4_suite.vectors.engine.harness import BackendCrash, run_case

# Classes no compacted input can show: a compacted list never has an invalid slot before a valid one.
NOT_IN_DOMAIN = {"first-invalid-nan"}


@functools.lru_cache(maxsize=None)
def _runnable() -> tuple:
    """(entry, problem) of every case a compacted kernel runs, cheapest first."""
    out = []
    for c in catalog.load_manifest()["cases"]:
        p = load_case(catalog.HERE / c["file"], sha256=c["sha256"])[0]
        if c["result"] == "invalid" or outside_slot_domain(p, "compacted") is None:
            out.append((c, p))
    cost = lambda e: 0 if e[0]["result"] == "invalid" else e[1].rows * e[1].num_kv_heads * e[1].TOPK  # noqa: E731
    return tuple(sorted(out, key=cost))


def test_every_compacted_case_is_valid_and_inside_the_compacted_domain():
    built = [c for c in cases.CASES if c.name.endswith("-compacted")]
    assert len(built) >= 32
    for c in built:
        p = c.build().validate()
        assert outside_slot_domain(p, "compacted") is None, c.name
        twin = c.name.removesuffix("-compacted")
        assert any(x.name == twin for x in cases.CASES), c.name


def test_compact_keeps_the_valid_ids_that_fit_and_the_own_block():
    from nvfp4_suite.reference.examples import random_problem

    p = random_problem(9, reqs=3, q_len=2, num_kv_heads=2, topk=4, seq_lens=[1000, 300, 0])
    c = cases.compact(p)
    assert outside_slot_domain(c, "compacted") is None
    for h in range(2):
        for r in range(p.rows):
            sb, n = int(p.self_blocks[r]), int(min(4, p.self_blocks[r] + 1))
            kept = set(c.topk[h, r][c.topk[h, r] >= 0].tolist())
            valid = set(p.topk[h, r][p.valid_slots[h, r]].tolist())
            assert len(kept) == n
            if n:
                assert sb in kept
                assert valid <= kept if len(valid | {sb}) <= n else len(kept - valid - {sb}) == 0


def test_every_class_a_compacted_kernel_can_have_keeps_a_case_it_runs():
    flags = {f for c, _ in _runnable() for f in c["flags"]}
    assert flags == set(cases.FLAGS) - NOT_IN_DOMAIN


@pytest.mark.parametrize("spec", [m.spec for m in bugs.mutants("numpy")
                                  if not m.undetectable and m.bug not in NOT_IN_DOMAIN])
def test_each_numpy_mutant_fails_a_case_a_compacted_kernel_runs_carrying_its_flag(spec):
    mutant = next(m for m in bugs.MUTANTS if m.spec == spec)
    backend = get_backend(spec)
    caps = backend.capabilities
    for entry, problem in _runnable():
        if mutant.bug not in entry["flags"]:
            continue
        if entry["result"] == "invalid":
            if not check_invalid(problem, entry["expected_error"], backend)[0]:
                return
            continue
        for launch in dict.fromkeys(Launch.from_json(x).as_seen_by(caps) for x in entry["launches"]):
            if caps.refuses(problem, launch):
                continue
            try:
                _, rep = run_case(backend, problem, launch)
            except BackendCrash:
                return
            if not rep.passed:
                return
    pytest.fail(f"{spec} passed every case of class {mutant.bug} that a compacted kernel runs")


class _SeedIgnoringSmScale:
    """The seed's arithmetic with a hard-coded softmax scale of 128 ** -0.5 (issue 38's
    held-out kernel); ``declared``: whether it declares that constant."""

    name = "fixed-scale"
    geometry = SEED_GEOMETRY

    def __init__(self, declared: bool):
        self.capabilities = Capabilities(splits=(1,), targets=("numpy",), sm_scale=D**-0.5 if declared else None,
                                         limits=Limits(requests=2, kv_heads=2, topk=8, q_len=2))

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        return emulate(dataclasses.replace(problem, sm_scale=D**-0.5), splits=splits)


@pytest.mark.parametrize("declared", [False, True])
def test_a_kernel_with_a_hard_coded_softmax_scale_fails_unless_it_declares_it(declared):
    ids = {c["id"] for c in catalog.load_manifest()["cases"]
           if "softmax-scale" in c["flags"] and not c["name"].endswith("-compacted")}
    assert len(ids) == 2
    run = check_golden(_SeedIgnoringSmScale(declared), cases=ids | {26})
    statuses = [str(c.status) for c in run.cases]
    assert statuses == (["PASS", "SKIP", "SKIP"] if declared else ["PASS", "FAIL", "FAIL"]), run.text()
    if declared:
        assert all(any(why.startswith("outside sm_scale=") for _, why in c.skipped) for c in run.cases[1:])
    gen = check_generated(_SeedIgnoringSmScale(declared), 20, 0, shrink=False)
    assert gen.ok is declared, gen.failing and gen.failing.text
