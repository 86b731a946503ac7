"""Every selected backend (``--backend``, default all registered) on generated
problems and launches inside its declared capabilities, compared with the right
reference. A failure saves one repro file: the minimised problem's."""

import pytest
from hypothesis import settings

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import INTERPRETED_LIMITS
from nvfp4_suite.vectors.check import replay_command
from nvfp4_suite.vectors.harness import BackendCrash, run_case, save_repro
from nvfp4_suite.vectors.strategies import run_generated


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


def check_backend(backend, spec: str, examples: int, seed: int = 0) -> None:
    """Run ``examples`` generated problems drawn from ``seed`` (the same as
    ``check --no-golden --examples N --seed S``); on failure save the
    minimised one (only it: hypothesis replays the minimal example last) and
    fail with its report and replay command."""
    last = {}

    def prop(problem, launch):
        try:
            _, rep = run_case(backend, problem, launch)
            ok, text = rep.passed, rep.details()
        except BackendCrash as e:
            ok, text = False, str(e)
        if not ok:
            last.update(problem=problem, launch=launch, text=text)
            raise AssertionError(text)

    try:
        run_generated(backend.capabilities, examples, seed, prop)
    except AssertionError:
        path = save_repro(spec, last["problem"], last["launch"], last["text"])
        pytest.fail(f"{last['launch'].describe(last['problem'])}: {last['text']}\nsaved: {path}\n"
                    f"replay: {replay_command(path, spec)}")


def test_backend_conforms_on_generated_problems(backend, backend_spec, request):
    # Interpreted backends (Triton's CPU interpreter, the FlyDSL simulator) are slow: fewer problems (5: as many
    # with work as the 8 drawn before the strategies gave nearly every problem work, issue 25).
    small = backend.capabilities.limits == INTERPRETED_LIMITS
    # --hypothesis-seed S draws what `check --seed S` draws; by default seed 0, check's default.
    seed = int(request.config.getoption("hypothesis_seed") or 0)
    check_backend(backend, backend_spec, 5 if small else settings().max_examples, seed)


def test_a_failure_saves_one_repro_however_many_shrink_steps_it_took(tmp_path, monkeypatch):
    from mutants import NumpyKernel

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as e:
        check_backend(NumpyKernel("head_mod"), "mutants:HeadMod", 20)
    saved = list(tmp_path.glob("*.npz"))
    assert len(saved) == 1 and f"saved: {saved[0]}" in str(e.value)
    assert f"replay: python -m nvfp4_suite.vectors replay {saved[0]} --backend mutants:HeadMod" in str(e.value)
