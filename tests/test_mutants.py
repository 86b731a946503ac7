"""The suite catches every injected bug class and passes the correct kernel."""

import pytest

from vectors import catalog
from vectors.cli import check_generated
from mutants import BUGS, NumpyKernel


def test_correct_numpy_kernel_passes():
    ok, _, failing = check_generated(NumpyKernel(), examples=8, seed=1, shrink=False)
    assert ok, failing and failing[2]


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_every_mutant_is_caught(bug):
    k = NumpyKernel(bug)
    if catalog.exists():
        ok, _ = catalog.check_all(k, progress=None, stop_at_first=True)
        if not ok:
            return
    ok, _, failing = check_generated(k, examples=60, seed=1, shrink=False)
    assert not ok, f"mutant {bug} ({BUGS[bug]}) passed the check"
