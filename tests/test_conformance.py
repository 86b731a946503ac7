"""Every registered backend on generated problems and launches inside its
declared capabilities, compared with the right reference, through the check
of the suite's pytest plugin (``nvfp4_suite.vectors.pytest_plugin``, which
``pytest --nvfp4-backend SPEC`` runs for any backend, golden cases included).
A failure saves one repro file: the minimised problem's."""

import pytest
from hypothesis import settings

from nvfp4_suite import kernels
from nvfp4_suite.vectors.engine.config import CheckConfig, Subject, default_examples, load_subject
from nvfp4_suite.vectors.engine.verdict import SetupError
from nvfp4_suite.vectors.pytest_plugin import ConformanceFailure, check_generated_or_fail


@pytest.mark.parametrize("spec", kernels.registered())
def test_backend_conforms_on_generated_problems(spec):
    try:
        subject = load_subject(CheckConfig(backend=spec))
    except SetupError as e:
        if "is not available here" not in str(e):
            raise
        pytest.skip(str(e))
    # The profile's count (CI: 30), fewer for interpreted backends (Triton's CPU interpreter, the FlyDSL simulator).
    check_generated_or_fail(subject, min(settings().max_examples, default_examples(subject.capabilities)))


def test_a_failure_saves_one_repro_however_many_shrink_steps_it_took(tmp_path, monkeypatch):
    from nvfp4_suite.kernels.mutants import NumpyKernel

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    backend = NumpyKernel("head_mod")
    with pytest.raises(ConformanceFailure) as e:
        check_generated_or_fail(Subject("mypkg:HeadMod", backend, backend.geometry), 20)
    saved = list(tmp_path.glob("*.npz"))
    assert len(saved) == 1 and f"saved: {saved[0]}" in str(e.value)
    assert f"replay: python -m nvfp4_suite.vectors replay {saved[0]} --backend mypkg:HeadMod" in str(e.value)
