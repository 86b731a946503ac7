"""Every selected backend (``--backend``, default all registered) on generated
problems at each of its split counts, compared with the right reference."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels
from vectors.harness import run_case, save_repro
from vectors.strategies import problems, problems_for, record_launch, xcds


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


def test_backend_conforms_on_generated_problems(backend, backend_spec):
    # Interpreted backends (Triton's CPU interpreter, the FlyDSL simulator) are slow:
    # small problems, fewer of them.
    small = getattr(backend, "interpreted", False)
    strategy = problems_for(backend) if small else problems(max_reqs=4)
    examples = 8 if small else settings().max_examples

    @settings(max_examples=examples)
    @given(strategy, st.sampled_from(backend.splits), xcds)
    def prop(problem, splits, xcds_):
        record_launch(problem, splits, xcds_)
        _, rep = run_case(backend, problem, splits, xcds_)
        if not rep.passed:
            path = save_repro(backend.name, problem, splits, rep.details(), xcds=xcds_)
            pytest.fail(f"{rep.details()}\nsaved: {path}\nreplay: python -m vectors replay {path} "
                        f"--backend {backend_spec} --splits {splits} --xcds {xcds_}")

    prop()
