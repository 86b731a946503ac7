"""vectors/engine/declared.py: the other declarations a failing kernel's outputs fit.

The kernel is tests/thirdparty_bf16.py's model (bf16 operands after the global
scale's fold, P in bf16), on the golden cases where declaring its operands
wrongly fails it (split-rescale, large-logits)."""

import pytest
import thirdparty_bf16 as M

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import EXACT_P_BF16, SEED_GEOMETRY, Exact
from nvfp4_suite.reference.arithmetic import arithmetic_name
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog.casefile import load_case
from nvfp4_suite.vectors.engine import declared
from nvfp4_suite.vectors.engine.harness import run_case


def _case(name):
    entry = next(c for c in catalog.load_manifest()["cases"] if c["name"] == name)
    return load_case(catalog._root(None) / entry["file"])[0]


def _failing(kernel, names=("split-rescale", "large-logits")):
    out = []
    for name in names:
        problem = _case(name)
        got, rep = run_case(kernel, problem, Launch())
        assert not rep.passed, name  # the premise: declared so, it fails here
        out.append(declared.Failing(problem, Launch(), got))
    return out


def test_the_alternatives_are_every_exact_class_declaration_once():
    names = [arithmetic_name(a) for a in declared.ALTERNATIVES]
    assert len(names) == len(set(names)) == 6 and "exact" in names and "exact-p-bf16" in names


def test_a_kernel_declaring_exact_operands_fits_the_operands_it_computes_and_is_told_so():
    failing = _failing(M.Kernel(arithmetic=EXACT_P_BF16))
    names = declared.fitting_declarations(EXACT_P_BF16, failing)
    assert "exact-p-bf16,operands=bf16-folded" in names and "exact-p-bf16" not in names
    text = declared.line(EXACT_P_BF16, names, len(failing))
    assert "all 2 failing launches" in text and "declared: exact-p-bf16)" in text
    assert "--arithmetic exact-p-bf16,operands=" in text


def test_a_real_bug_fits_no_other_declaration():
    bug = sorted(M.BUGS)[0]
    kernel = M.Kernel(bug)
    failing = []
    for name in ("split-rescale", "large-logits", "scale-groups"):
        problem = _case(name)
        got, rep = run_case(kernel, problem, Launch())
        if not rep.passed:
            failing.append(declared.Failing(problem, Launch(), got))
    assert failing, f"bug {bug} fails none of the cases tried"
    assert declared.fitting_declarations(M.GEOMETRY, failing) == []
    assert declared.line(M.GEOMETRY, [], len(failing)) is None


@pytest.mark.parametrize("arithmetic", [SEED_GEOMETRY, Exact(True, "bf16-folded")])
def test_nothing_failing_or_a_geometry_declared_tries_nothing(arithmetic):
    assert declared.fitting_declarations(arithmetic, []) == []
    if arithmetic is SEED_GEOMETRY:
        failing = _failing(M.Kernel(arithmetic=EXACT_P_BF16), names=("split-rescale",))
        assert declared.fitting_declarations(SEED_GEOMETRY, failing) == []
