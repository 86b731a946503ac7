"""The suite catches every injected bug class and passes the correct kernel,
through each of its two channels: the golden vectors and generated problems."""

import pytest

from mutants import BUGS, NumpyKernel
from vectors import catalog
from vectors.cli import check_generated


def test_correct_numpy_kernel_passes_golden_vectors_and_generated_problems():
    ok, lines = catalog.check_all(NumpyKernel())
    assert ok, "\n".join(lines)
    ok, _, failing = check_generated(NumpyKernel(), examples=10, seed=1, shrink=False)
    assert ok, failing and failing[2]


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_every_mutant_is_caught_by_the_golden_vectors(bug):
    ok, _ = catalog.check_all(NumpyKernel(bug), stop_at_first=True)
    assert not ok, f"mutant {bug} ({BUGS[bug]}) passed every golden vector"


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_every_mutant_is_caught_by_generated_problems(bug):
    ok, _, _ = check_generated(NumpyKernel(bug), examples=60, seed=1, shrink=False)
    assert not ok, f"mutant {bug} ({BUGS[bug]}) passed 60 generated problems"
