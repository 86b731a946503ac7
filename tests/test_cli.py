"""python -m vectors: exit codes, output, repro files."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=ROOT, env_extra=None):
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "vectors", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_check_emulate_passes_with_exit_0():
    r = _run("check", "--backend", "emulate", "--examples", "5", "--no-golden")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CONFORMANT: backend emulate" in r.stdout and "case class" in r.stdout


def test_unsupported_split_count_exits_2():
    r = _run("check", "--backend", "emulate", "--splits", "9", "--examples", "1")
    assert r.returncode == 2 and "--splits [9]: backend emulate supports" in r.stderr


def test_unknown_backend_exits_2():
    r = _run("check", "--backend", "nope", "--examples", "1")
    assert r.returncode == 2 and "unknown backend 'nope'" in r.stderr


def test_failing_backend_exits_1_saves_a_repro_and_replay_reproduces_it(tmp_path):
    env = {"NVFP4_REPRO_DIR": str(tmp_path), "PYTHONPATH": str(ROOT / "tests")}
    r = _run("check", "--backend", "mutants:NumpyKernel", "--examples", "3", "--no-golden", env_extra=env)
    assert r.returncode == 0, r.stdout + r.stderr
    spec = "test_cli_helpers:HeadMod"
    helper = tmp_path / "test_cli_helpers.py"
    helper.write_text("from mutants import NumpyKernel\n\n\ndef HeadMod():\n    return NumpyKernel('head_mod')\n")
    env["PYTHONPATH"] += ":" + str(tmp_path)
    r = _run("check", "--backend", spec, "--examples", "20", "--no-golden", "--splits", "1", env_extra=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FIRST FAILING PROBLEM (minimised)" in r.stdout and "NOT CONFORMANT" in r.stdout
    saved = [ln.split("saved: ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("saved: ")]
    assert len(saved) == 1 and Path(saved[0]).is_file()
    r2 = _run("replay", saved[0], "--backend", spec, env_extra=env)
    assert r2.returncode == 1 and "FAIL" in r2.stdout
    r3 = _run("replay", saved[0], "--backend", "emulate", env_extra=env)
    assert r3.returncode == 0 and "PASS" in r3.stdout
