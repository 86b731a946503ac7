"""nvfp4_suite.vectors.engine.references: where a check's references run.

The choice (auto, host, device) is decided once, from the backend's declared
targets and whether torch sees a GPU; the torch path is exercised on the CPU
device here (the same text as on a GPU) and on CUDA under ``gpu``.
"""

import dataclasses

import numpy as np
import pytest

from nvfp4_suite.kernels.protocol import Capabilities
from nvfp4_suite.kernels.reference_backends import CAPABILITIES as NUMPY_CAPABILITIES
from nvfp4_suite.reference import SEED_GEOMETRY
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.engine import references as R
from nvfp4_suite.vectors.engine.check import check_case, check_generated
from nvfp4_suite.vectors.engine.config import CheckConfig, load_subject
from nvfp4_suite.vectors.engine.verdict import SetupError, Status

GPU_CAPS = Capabilities(splits=(1, 2), targets=("cuda",))


@pytest.fixture
def gpu_seen(monkeypatch):
    monkeypatch.setattr(R, "gpu_reason", lambda: None)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(R, "gpu_reason", lambda: "torch sees no GPU")


def test_host_is_numpy_whatever_the_backend(gpu_seen):
    assert R.choose("host", GPU_CAPS) == R.HOST and R.HOST.device is None
    assert R.HOST.where == "host (numpy)"


@pytest.mark.parametrize("targets, gpu, expected", [
    (("cuda",), True, "cuda"), (("cpu", "cuda", "rocm"), True, "cuda"), (("rocm",), True, "cuda"),
    (("cuda",), False, None), (("numpy",), True, None), (("gfx950",), True, None), ((), True, None),
])
def test_auto_runs_on_the_gpu_only_for_a_gpu_backend_when_torch_sees_one(monkeypatch, targets, gpu, expected):
    monkeypatch.setattr(R, "gpu_reason", lambda: None if gpu else "torch sees no GPU")
    assert R.choose("auto", Capabilities(targets=targets)).device == expected


def test_auto_for_a_host_backend_does_not_ask_torch(monkeypatch):
    def asked():
        raise AssertionError("gpu_reason called: torch imported for a host backend")

    monkeypatch.setattr(R, "gpu_reason", asked)
    assert R.choose("auto", NUMPY_CAPABILITIES) == R.HOST


def test_device_without_a_gpu_is_refused_naming_why(no_gpu):
    with pytest.raises(ValueError, match="--references device: torch sees no GPU"):
        R.choose("device", NUMPY_CAPABILITIES)


def test_device_with_a_gpu_runs_there_even_for_a_host_backend(gpu_seen):
    assert R.choose("device", NUMPY_CAPABILITIES) == R.References("cuda")


def test_an_unknown_choice_is_refused_by_name():
    with pytest.raises(ValueError, match="references 'gpu': must be one of auto, host, device"):
        R.choose("gpu", NUMPY_CAPABILITIES)


def test_the_config_refuses_an_unknown_choice_and_a_choice_for_serving_shapes():
    assert "--references 'gpu'" in CheckConfig(references="gpu").problems()
    assert "serving-size references always run in torch" in CheckConfig(references="host", shape="serving",
                                                                          examples=1).problems()
    assert CheckConfig(references="auto", shape="serving", examples=1).problems() is None


def test_the_subject_carries_the_choice_and_device_without_a_gpu_is_a_setup_error(no_gpu):
    assert load_subject(CheckConfig(backend="emulate")).references == R.HOST
    with pytest.raises(SetupError, match="torch sees no GPU"):
        load_subject(CheckConfig(backend="emulate", references="device"))


torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[torch]'")
# The torch path on the CPU device: the same text a GPU runs.
TORCH_CPU = R.References("cpu")


@pytest.mark.parametrize("geometry", [SEED_GEOMETRY, None], ids=["emulation", "oracle"])
def test_the_torch_interval_equals_the_host_interval_bit_for_bit(geometry):
    p = random_problem(5, reqs=3, num_kv_heads=2, topk=4)
    for splits in (1, 2):
        a, against_a = R.HOST.interval(p, geometry, splits)
        b, against_b = TORCH_CPU.interval(p, geometry, splits)
        assert against_a == against_b
        for end in ("lo", "hi", "nearest"):
            assert np.array_equal(getattr(a, end).view(np.uint32), getattr(b, end).view(np.uint32)), (splits, end)


def test_generated_problems_judged_with_torch_references_give_the_host_verdict():
    from nvfp4_suite.kernels.reference_backends import EmulateBackend

    host = check_generated(EmulateBackend(), 4, 7, shrink=False)
    in_torch = check_generated(EmulateBackend(), 4, 7, shrink=False, references=TORCH_CPU)
    assert host.ok and in_torch.ok and host.n == in_torch.n == 4 and host.totals == in_torch.totals


def test_an_exact_class_kernel_is_judged_alike_with_torch_references_passing_or_failing():
    from nvfp4_suite.kernels.mutants import NumpyKernel

    assert check_generated(NumpyKernel(), 4, 0, shrink=False, references=TORCH_CPU).ok
    gen = check_generated(NumpyKernel("v_scale_linear"), 6, 0, shrink=False, references=TORCH_CPU)
    assert not gen.ok and gen.failing is not None


def _stored_case() -> dict:
    """The first valid golden case (each stores the seed geometry's judgment at its launches' split counts)."""
    return next(c for c in catalog.load_manifest()["cases"] if not c.get("expected_error"))


def test_a_stored_judgment_the_device_rounds_otherwise_is_decided_by_the_host():
    """A GPU interval that differs from the stored one (a float64 sum rounded
    the other way) is not drift: the host's recomputed interval decides."""
    from nvfp4_suite.kernels.reference_backends import EmulateBackend

    @dataclasses.dataclass(frozen=True)
    class OneBf16UlpOff(R.References):
        def interval(self, problem, geometry, splits):
            iv, against = super().interval(problem, geometry, splits)
            hi = iv.hi.copy()
            first = int(np.flatnonzero(np.isfinite(hi))[0])
            hi.view(np.uint32).flat[first] += 1 << 16  # one bf16 ulp further from zero
            return dataclasses.replace(iv, hi=hi), against

    entry = _stored_case()
    res = check_case(EmulateBackend(), entry, references=OneBf16UlpOff("cpu"))
    assert res.status is Status.PASS, res.error
    # The same difference computed on the host is drift: the case file no longer matches.
    res = check_case(EmulateBackend(), entry, references=OneBf16UlpOff(None))
    assert res.status is Status.ERROR and "drifted" in res.error


@pytest.mark.gpu
def test_a_gpu_backend_checked_with_references_on_the_gpu_gets_the_host_verdict():
    from nvfp4_suite.vectors.engine.config import load_subject as load

    subject = load(CheckConfig(backend="triton"))
    assert subject.references == R.References("cuda")
    host = check_generated(subject, 10, 1, shrink=False)
    gpu = check_generated(subject, 10, 1, shrink=False, references=subject.references)
    assert host.ok and gpu.ok and host.n == gpu.n and host.totals["elements"] == gpu.totals["elements"]


def test_check_references_host_is_named_in_the_json_report(tmp_path):
    import json

    from nvfp4_suite.vectors.cli import main

    out = tmp_path / "r.json"
    assert main(["check", "--backend", "emulate", "--no-golden", "--examples", "2", "--references", "host",
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["backend"]["references"] == "host (numpy)"


def test_check_references_device_without_a_gpu_exits_2_naming_why(no_gpu, capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["check", "--backend", "emulate", "--no-golden", "--examples", "1", "--references", "device"]) == 2
    assert "--references device: torch sees no GPU" in capsys.readouterr().err


def test_bench_references_host_names_where_each_backend_s_references_ran(capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["bench", "--examples", "1", "--references", "host"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("emulate ", "reference "))]
    assert len(rows) == 2 and all(r.split()[2] == "host" for r in rows)


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU here: --references device is accepted")
def test_pytest_nvfp4_references_device_without_a_gpu_ends_the_session_with_exit_2(tmp_path):
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                        "--rootdir", str(tmp_path), "--nvfp4-backend", "emulate", "--nvfp4-examples", "1",
                        "--nvfp4-references", "device"], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, CI="true"), timeout=600)
    assert r.returncode == 2 and "--references device: torch sees no GPU" in r.stdout + r.stderr, r.stdout[-3000:]


@pytest.mark.gpu
def test_the_documented_gpu_bench_runs_with_references_on_the_host(capsys):
    from nvfp4_suite.vectors.cli import main

    argv = ["bench", "--backend", "emulate", "--backend", "triton", "--references", "host", "--examples", "2"]
    assert main(argv) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("emulate ", "triton "))]
    assert len(rows) == 2 and all(r.split()[2] == "host" for r in rows)


def test_replay_takes_references_as_check_does(tmp_path, no_gpu, capsys):
    import json

    from nvfp4_suite.vectors.cli import main

    case = str(catalog.case_file(_stored_case()))
    out = tmp_path / "r.json"
    assert main(["replay", case, "--backend", "emulate", "--references", "host", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["backend"]["references"] == "host (numpy)"
    capsys.readouterr()
    assert main(["replay", case, "--backend", "emulate", "--references", "device"]) == 2
    assert "--references device: torch sees no GPU" in capsys.readouterr().err
