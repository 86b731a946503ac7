"""Root pytest configuration: hypothesis profiles (the backends to check come
from the suite's pytest plugin, ``--nvfp4-backend``: nvfp4_suite/vectors/pytest_plugin.py).

Profiles: ``ci`` (derandomized, bounded, no deadline; chosen when CI is set),
``dev`` (the default elsewhere), ``thorough`` (many examples, for hand runs).
Select one with ``HYPOTHESIS_PROFILE=name``.
"""

import os

# Under pytest-xdist each worker is a process with a core of its own; torch's
# thread pool (a thread per core in every worker, and in the commands the
# tests run) oversubscribes the cores: on 2 cores the torch backend's golden
# test took 97 s instead of 10. One thread per worker, unless the caller chose.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Triton decides at import whether kernels are interpreted: on a machine with
# no GPU the triton backend can only run on the CPU interpreter.
if "TRITON_INTERPRET" not in os.environ:
    try:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
    except ImportError:
        pass

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci", derandomize=True, max_examples=30, deadline=None, suppress_health_check=_SLOW_OK,
    print_blob=True,
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile(
    "thorough", max_examples=3000, deadline=None, suppress_health_check=_SLOW_OK
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config):
    import sys
    from pathlib import Path

    # tests/mutants.py is a helper module, imported by name from the tests.
    sys.path.insert(0, str(Path(__file__).parent / "tests"))


@pytest.fixture
def one_cpu_thread():
    """torch limited to one CPU thread: two test workers share two cores in CI."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="session")
def flydsl_compiler():
    """The ``ROCM_PATH`` whose ``ld.lld`` links FlyDSL's compile-only code objects.
    Where FlyDSL or ``ld.lld`` >= 19 is missing the test skips with the reason,
    unless ``NVFP4_REQUIRE_COMPILE=1`` (set by ``.ci/run``) makes that a failure."""
    from nvfp4_suite.kernels.flydsl.host import flydsl_missing, rocm_path

    rocm, note = rocm_path()
    why = flydsl_missing() or (None if rocm else note)
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    return rocm
