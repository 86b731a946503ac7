"""nvfp4_suite.vectors.engine.isolate: a crash, a hang, an abort or a SIGKILL in a
launch is that launch's named failure, and the run goes on in a fresh worker."""

import subprocess
import sys
from pathlib import Path

import hostile
import pytest

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.engine.config import Subject
from nvfp4_suite.vectors.engine.harness import BackendCrash, run_case

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, env_extra=None):
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=600)


def Isolated(spec, backend, timeout):
    """``backend`` judged in its own arithmetic, each launch in a worker process."""
    return Subject(spec, backend, backend.geometry, timeout)


def _p(hk=1):
    return random_problem(7, reqs=2, q_len=1, num_kv_heads=hk, topk=4, seq_lens=[300, 200])


def test_an_isolated_correct_backend_passes():
    b = Isolated("hostile:Correct", hostile.Correct(), timeout=60)
    try:
        _, rep = run_case(b, _p(), Launch())
        assert rep.passed and b.timeout == 60
    finally:
        b.close()


@pytest.mark.parametrize("spec, kind", [
    ("hostile:Hangs", "LaunchTimeout: no result within 1 s"),
    ("hostile:KillsItself", "WorkerDied: the worker process killed by SIGKILL"),
    ("hostile:AbortsOnTwoHeads", "WorkerDied: the worker process killed by SIGABRT"),
    ("hostile:ExitsOnCall", "backend raised SystemExit: 0"),
])
def test_each_fault_is_that_launchs_named_failure_and_the_next_launch_runs_in_a_fresh_worker(spec, kind):
    import importlib

    mod, attr = spec.split(":")
    b = Isolated(spec, getattr(importlib.import_module(mod), attr)(), timeout=1)
    try:
        with pytest.raises(BackendCrash, match=kind):
            run_case(b, _p(hk=2), Launch())
        if spec == "hostile:AbortsOnTwoHeads":
            # the same backend, a problem it handles: judged in a fresh worker
            _, rep = run_case(b, _p(hk=1), Launch())
            assert rep.passed
    finally:
        b.close()


def _clobber_topk():
    from test_harness import Clobber  # zeroes one input array in place

    return Clobber("topk")


def test_inputs_changed_in_the_worker_are_seen_by_the_harness():
    b = Isolated("test_isolate:_clobber_topk", _clobber_topk(), timeout=60)
    try:
        _, rep = run_case(b, _p(), Launch())
        assert not rep.passed and "topk" in rep.modified_inputs
    finally:
        b.close()


def test_the_isolated_launch_timeout_is_the_one_the_backend_declares_unless_the_check_names_one():
    from nvfp4_suite.kernels.protocol import GPU_LAUNCH_TIMEOUT_S
    from nvfp4_suite.vectors.engine.config import CheckConfig, load_subject

    assert load_subject(CheckConfig(backend="emulate", isolate=True)).timeout == 60
    assert load_subject(CheckConfig(backend="torch", isolate=True)).timeout == GPU_LAUNCH_TIMEOUT_S > 60
    assert load_subject(CheckConfig(backend="torch", timeout=7)).timeout == 7
    assert load_subject(CheckConfig(backend="torch")).timeout is None


def test_a_plain_timeout_attribute_of_a_backend_is_not_read(tmp_path):
    # Only Capabilities declare what the engine needs: an attribute of the same name changes nothing.
    r = _run("check", "--backend", "hostile:TimeoutAttribute", "--no-golden", "--examples", "1",
             "--json", str(tmp_path / "v.json"))
    assert r.returncode == 0 and "isolated" not in r.stdout, r.stdout + r.stderr
    import json

    assert json.loads((tmp_path / "v.json").read_text())["backend"]["timeout_s"] is None


def test_check_isolate_judges_a_hanging_backend_and_completes_the_run(tmp_path):
    r = _run("check", "--backend", "hostile:Hangs", "--isolate", "--timeout", "1", "--no-golden", "--examples", "2",
             env_extra={"NVFP4_REPRO_DIR": str(tmp_path)})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "isolated: each launch in a worker process, timeout 1 s" in r.stdout
    assert "backend raised LaunchTimeout: no result within 1 s (--timeout); the worker was killed" in r.stdout
    assert "NOT CONFORMANT: backend correct" in r.stdout
    assert "FIRST FAILING PROBLEM (smallest found before the minimising budget of 10 s ran out" in r.stdout
    (saved,) = tmp_path.iterdir()
    assert f"replay: python -m nvfp4_suite.vectors replay {saved} --backend hostile:Hangs --isolate --timeout 1" \
        in r.stdout
    (cmd,) = [ln.split("replay: ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("replay: ")]
    r = _run(*cmd.split()[3:])
    assert r.returncode == 1 and "LaunchTimeout" in r.stdout, r.stdout + r.stderr


def test_check_isolate_judges_every_golden_case_when_the_backend_aborts_on_some():
    r = _run("check", "--backend", "hostile:AbortsOnTwoHeads", "--isolate", "--examples", "0")
    assert r.returncode == 1, r.stdout + r.stderr
    head = next(ln for ln in r.stdout.splitlines() if ln.startswith("golden vectors: "))
    passed, total = (int(x) for x in head.split()[2:5:2])
    assert 0 < passed < total and "unreadable" in head, head
    assert "WorkerDied: the worker process killed by SIGABRT" in r.stdout
    assert "--backend hostile:AbortsOnTwoHeads --splits 1 --xcds 0 --isolate --timeout 60" in r.stdout


def test_replay_isolate_names_a_self_kill(tmp_path, monkeypatch):
    from nvfp4_suite.vectors.engine.harness import save_repro

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    path = save_repro("hostile:KillsItself", _p(), Launch(), "x")
    r = _run("replay", str(path), "--backend", "hostile:KillsItself", "--isolate", "--timeout", "30")
    assert r.returncode == 1 and "killed by SIGKILL" in r.stdout, r.stdout + r.stderr


def test_a_timeout_of_zero_is_a_usage_error():
    r = _run("check", "--backend", "emulate", "--timeout", "0", "--examples", "1")
    assert r.returncode == 2 and "--timeout 0: must be > 0" in r.stderr


def test_the_pytest_route_isolates_too_a_backend_that_kills_its_process_fails_its_test_only(tmp_path):
    # Without isolation the SIGKILL would end pytest itself, every result lost.
    import os

    env = dict(os.environ, NVFP4_REPRO_DIR=str(tmp_path), CI="true", HOSTILE_MARK=str(tmp_path / "killed"))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-p", "no:cacheprovider",
                        "tests/test_protocol.py", "--nvfp4-backend", "hostile:KillsItselfOnce", "--nvfp4-timeout", "30",
                        "-k", "not test_golden"],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 1 and "1 failed" in r.stdout and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert "backend raised WorkerDied: the worker process killed by SIGKILL" in r.stdout
    assert (tmp_path / "killed").exists()
