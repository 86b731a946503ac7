"""Every registered backend on generated problems and launches inside its
declared capabilities, compared with the right reference, through the check
of the suite's pytest plugin (``nvfp4_suite.vectors.pytest_plugin``, which
``pytest --nvfp4-backend SPEC`` runs for any backend, golden cases included).
A failure saves one repro file: the minimised problem's."""

import pytest
from hypothesis import settings

from nvfp4_suite import kernels
from nvfp4_suite.vectors.pytest_plugin import (
    ConformanceFailure,
    check_generated_or_fail,
    default_examples,
    load_backend,
)


@pytest.mark.parametrize("spec", kernels.registered())
def test_backend_conforms_on_generated_problems(spec):
    backend, refusal = load_backend(spec)
    if backend is None:
        refusal()
    # The profile's count (CI: 30), fewer for interpreted backends (Triton's CPU interpreter, the FlyDSL simulator).
    check_generated_or_fail(backend, spec, min(settings().max_examples, default_examples(backend)))


def test_a_failure_saves_one_repro_however_many_shrink_steps_it_took(tmp_path, monkeypatch):
    from nvfp4_suite.kernels.mutants import NumpyKernel

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    with pytest.raises(ConformanceFailure) as e:
        check_generated_or_fail(NumpyKernel("head_mod"), "nvfp4_suite.kernels.mutants:HeadMod", 20)
    saved = list(tmp_path.glob("*.npz"))
    assert len(saved) == 1 and f"saved: {saved[0]}" in str(e.value)
    assert f"replay: python -m nvfp4_suite.vectors replay {saved[0]} --backend nvfp4_suite.kernels.mutants:HeadMod" in str(e.value)
