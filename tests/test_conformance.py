"""Every selected backend (``--backend``, default all registered) on generated
problems at each of its split counts, compared with the right reference."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kernels
from vectors.harness import run_case
from vectors.strategies import problems


@pytest.fixture
def backend(backend_spec):
    try:
        b = kernels.get_backend(backend_spec)
    except kernels.BackendError as e:
        pytest.fail(str(e))
    why = b.available()
    if why is not None:
        pytest.skip(f"backend {backend_spec} unavailable: {why}")
    return b


def test_backend_conforms_on_generated_problems(backend):
    @given(problems(max_reqs=4), st.sampled_from(backend.splits))
    def prop(problem, splits):
        _, rep = run_case(backend, problem, splits)
        assert rep.passed, rep.details()

    prop()
