"""Every selected backend (``--backend``, default all registered) on generated
problems and launches inside its declared capabilities, compared with the right
reference. A failure saves one repro file: the minimised problem's."""

import pytest
from hypothesis import given, settings

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import INTERPRETED_LIMITS
from nvfp4_suite.vectors.check import replay_command, unavailable
from nvfp4_suite.vectors.isolate import Isolated
from nvfp4_suite.vectors.harness import BackendCrash, run_case, save_repro
from nvfp4_suite.vectors.strategies import launches_for, problems_for, record_launch


@pytest.fixture
def backend(backend_spec, request):
    try:
        b = kernels.get_backend(backend_spec)
    except kernels.BackendError as e:
        pytest.fail(str(e))
    why = unavailable(b)
    if why is not None:
        pytest.skip(f"backend {backend_spec} unavailable: {why}")
    timeout = request.config.getoption("isolate_timeout")
    if request.config.getoption("isolate") or timeout is not None:
        b = Isolated(backend_spec, b, timeout)
        request.addfinalizer(b.close)
    return b


def check_backend(backend, spec: str, examples: int) -> None:
    """Run ``examples`` generated problems; on failure save the minimised one
    (only it: hypothesis replays the minimal example last) and fail with its
    report and replay command."""
    caps = backend.capabilities
    last = {}

    @settings(max_examples=examples)
    @given(problems_for(caps), launches_for(caps))
    def prop(problem, launch):
        record_launch(problem, launch)
        try:
            _, rep = run_case(backend, problem, launch)
            ok, text = rep.passed, rep.details()
        except BackendCrash as e:
            ok, text = False, str(e)
        if not ok:
            last.update(problem=problem, launch=launch, text=text)
            raise AssertionError(text)

    try:
        prop()
    except AssertionError:
        path = save_repro(spec, last["problem"], last["launch"], last["text"])
        pytest.fail(f"{last['launch'].describe(last['problem'])}: {last['text']}\nsaved: {path}\n"
                    f"replay: {replay_command(path, spec, timeout=getattr(backend, 'timeout', None))}")


def test_backend_conforms_on_generated_problems(backend, backend_spec):
    # Interpreted backends (Triton's CPU interpreter, the FlyDSL simulator) are slow: fewer problems.
    small = backend.capabilities.limits == INTERPRETED_LIMITS
    check_backend(backend, backend_spec, 8 if small else settings().max_examples)


def test_a_failure_saves_one_repro_however_many_shrink_steps_it_took(tmp_path, monkeypatch):
    from mutants import NumpyKernel

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as e:
        check_backend(NumpyKernel("head_mod"), "mutants:HeadMod", 20)
    saved = list(tmp_path.glob("*.npz"))
    assert len(saved) == 1 and f"saved: {saved[0]}" in str(e.value)
    assert f"replay: python -m nvfp4_suite.vectors replay {saved[0]} --backend mutants:HeadMod" in str(e.value)
