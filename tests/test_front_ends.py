"""Every front end (check, replay, the serving-size check, the pytest plugin)
gives the same verdict kind and exit code on the same hostile backends, and
writes the JSON report when asked: the verdict is the engine's, decided once
(``nvfp4_suite.vectors.engine.verdict.decide``), whoever asks."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference.examples import random_problem

ROOT = Path(__file__).resolve().parents[1]
TESTS = str(ROOT / "tests")


def _env(tmp_path):
    return dict(os.environ, PYTHONPATH=TESTS, NVFP4_REPRO_DIR=str(tmp_path / "repro"), CI="true")


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", *args], cwd=tmp_path, capture_output=True,
                          text=True, env=_env(tmp_path), timeout=900)


def _pytest(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "--rootdir", str(tmp_path), *args], cwd=tmp_path, capture_output=True, text=True,
                          env=_env(tmp_path), timeout=900)


def _repro(tmp_path):
    """A saved repro file for ``replay``: a problem whose slot lists hold a -1
    before valid slots (outside the compacted domain)."""
    from nvfp4_suite.vectors.engine.harness import save_repro

    p = random_problem(7, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200])
    p.topk[0, 0] = [-1, 0, 1, 2]
    old = os.environ.get("NVFP4_REPRO_DIR")
    os.environ["NVFP4_REPRO_DIR"] = str(tmp_path / "saved")
    try:
        return save_repro("hostile:Correct", p, Launch(), "x")
    finally:
        if old is None:
            del os.environ["NVFP4_REPRO_DIR"]
        else:
            os.environ["NVFP4_REPRO_DIR"] = old


def _front_ends(tmp_path, spec, serving_examples=0):
    """``{front end: (exit code, output, JSON report or None)}`` for ``spec``
    (``serving_examples``: problems the serving check asks for; a serving-size
    problem takes gigabytes, so only where the backend fails before one is built)."""
    out = {}
    j = tmp_path / "check.json"
    r = _cli(tmp_path, "check", "--backend", spec, "--no-golden", "--examples", "2", "--json", str(j))
    out["check"] = (r.returncode, r.stdout + r.stderr, json.loads(j.read_text()))
    j = tmp_path / "replay.json"
    r = _cli(tmp_path, "replay", str(_repro(tmp_path)), "--backend", spec, "--json", str(j))
    out["replay"] = (r.returncode, r.stdout + r.stderr, json.loads(j.read_text()))
    j = tmp_path / "serving.json"
    r = _cli(tmp_path, "check", "--shape", "serving", "--backend", spec, "--examples", str(serving_examples),
             "--json", str(j))
    out["serving"] = (r.returncode, r.stdout + r.stderr, json.loads(j.read_text()))
    r = _pytest(tmp_path, "--nvfp4-backend", spec, "--nvfp4-examples", "2", "-k", "generated or splits1")
    out["pytest"] = (r.returncode, r.stdout + r.stderr, None)
    return out


@pytest.mark.parametrize("spec, why", [
    ("hostile:StringGeometry", "geometry is a str ('seed'), not None, nvfp4_suite.reference.Exact or "
                               "nvfp4_suite.reference.Geometry"),
    ("hostile:RaisingCapabilities", "reading its attributes raised RuntimeError: capabilities not ready"),
])
def test_a_backend_that_breaks_the_protocol_is_no_verdict_exit_2_in_every_front_end(tmp_path, spec, why):
    for front, (rc, text, report) in _front_ends(tmp_path, spec, serving_examples=1).items():
        assert rc == 2, (front, text[-3000:])
        assert why in text, (front, text[-3000:])
        if report is not None:
            assert report["verdict"] == "NO VERDICT" and report["exit_code"] == 2 and why in report["reason"], front


def test_a_timeout_attribute_the_protocol_does_not_declare_changes_nothing_in_any_front_end(tmp_path):
    fronts = _front_ends(tmp_path, "hostile:TimeoutAttribute")
    for front in ("check", "replay", "pytest"):
        rc, text, report = fronts[front]
        assert rc == 0 and "isolated" not in text, (front, text[-3000:])
        if report is not None:
            assert report["verdict"] == "CONFORMANT" and report["backend"]["timeout_s"] is None, front
    # The serving check asked for no problem: nothing can be judged.
    rc, text, report = fronts["serving"]
    assert rc == 2 and report["verdict"] == "NO VERDICT" and "give --examples > 0" in report["reason"], text


def test_a_compacted_domain_backend_is_handed_only_compacted_slot_lists_by_every_front_end(tmp_path):
    fronts = _front_ends(tmp_path, "hostile:Compacted")
    rc, text, report = fronts["check"]
    assert rc == 0 and report["generated"]["problems_run"] == 2, text[-3000:]
    r = _cli(tmp_path, "check", "--backend", "hostile:Compacted", "--examples", "0")
    assert r.returncode == 0 and "SKIPPED: outside slot_lists=compacted" in r.stdout, r.stdout[-3000:]
    # The repro holds a -1 before valid slots: outside the domain, so nothing is judged.
    rc, text, report = fronts["replay"]
    assert rc == 2 and report["verdict"] == "NO VERDICT" and "outside slot_lists=compacted" in text, text
    rc, text, _ = fronts["pytest"]
    assert rc == 0 and " passed" in text and "handed slot lists outside" not in text, text[-3000:]


def test_the_serving_check_draws_inside_a_compacted_domain(tmp_path):
    pytest.importorskip("torch")
    import hostile

    from nvfp4_suite.vectors.engine import serving as S
    from nvfp4_suite.vectors.engine.config import Subject

    b = hostile.Compacted()
    small = S.Shape(reqs=3, q_len=2, num_kv_heads=1, topk=4, num_pages=200, max_blocks=12, layout="planar")
    run = S.check_serving(Subject("hostile:Compacted", b, b.geometry), 2, 0, shape=small)
    assert (run.n, run.failed) == (2, 0), "\n".join(run.lines)


def test_zero_work_is_no_verdict_exit_2_in_every_front_end(tmp_path):
    r = _cli(tmp_path, "check", "--backend", "hostile:Correct", "--no-golden", "--examples", "0")
    assert r.returncode == 2 and "nothing to check" in r.stderr
    r = _cli(tmp_path, "check", "--shape", "serving", "--backend", "hostile:Correct", "--examples", "0")
    assert r.returncode == 2 and "--shape serving checks generated problems" in r.stderr, r.stdout + r.stderr
    r = _cli(tmp_path, "replay", str(_repro(tmp_path)), "--backend", "hostile:Correct", "--splits", "2")
    assert r.returncode == 2 and "splits 2 not supported" in r.stdout, r.stdout + r.stderr
    # Only launches outside the backend's split counts selected: every test skips, nothing is judged.
    r = _pytest(tmp_path, "--nvfp4-backend", "hostile:Correct", "--nvfp4-examples", "0", "-k", "splits2")
    assert r.returncode == 2 and "nvfp4: NO VERDICT (nothing was judged): backend hostile:Correct" in r.stdout, \
        r.stdout[-3000:]


def test_an_unexpected_error_of_the_suite_is_suite_error_exit_3_with_its_traceback(tmp_path, monkeypatch, capsys):
    from nvfp4_suite.vectors.cli import main
    from nvfp4_suite.vectors.engine import check

    def broken(*a, **k):
        raise ZeroDivisionError("a bug of the suite")

    monkeypatch.setattr(check, "check_generated", broken)
    j = tmp_path / "v.json"
    assert main(["check", "--backend", "emulate", "--no-golden", "--examples", "1", "--json", str(j)]) == 3
    err = capsys.readouterr().err
    assert "SUITE ERROR: ZeroDivisionError: a bug of the suite" in err and "Traceback" in err
    report = json.loads(j.read_text())
    assert report["verdict"] == "SUITE ERROR" and report["exit_code"] == 3


def test_a_users_own_module_named_mutants_is_checked_as_any_other(tmp_path):
    (tmp_path / "mutants.py").write_text("from hostile import Correct as Mine\n")
    r = _cli(tmp_path, "check", "--backend", "mutants:Mine", "--no-golden", "--examples", "2")
    assert r.returncode == 0 and "CONFORMANT: backend correct" in r.stdout, r.stdout + r.stderr


def test_pytest_runs_a_project_catalog_case(tmp_path):
    from nvfp4_suite.vectors import catalog

    saved = _repro(tmp_path)
    env = _env(tmp_path)
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", "add", str(saved), "--comment", "prod bug",
                        "--flags", "minus-one", "--name", "prod-bug"], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and (tmp_path / catalog.PROJECT_DEFAULT / "manifest.json").is_file(), r.stderr
    r = _pytest(tmp_path, "--nvfp4-backend", "hostile:Correct", "--nvfp4-examples", "0", "-k", "project", "-rA")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "test_golden[hostile:Correct-project:000-prod-bug-splits1] PASSED" in r.stdout or \
        "PASSED nvfp4_suite::test_golden[hostile:Correct-project:000-prod-bug-splits1]" in r.stdout, r.stdout[-3000:]


def test_pytest_ends_with_the_cause_of_the_golden_failures_naming_the_mutant_first(tmp_path):
    spec = "nvfp4_suite.kernels.mutants:numpy_scale_group_shift"
    r = _pytest(tmp_path, "--nvfp4-backend", spec, "--nvfp4-examples", "0", "-k", "scale-groups")
    lines = r.stdout.splitlines()
    head = f"nvfp4: cause of backend {spec}'s golden failures:"
    assert r.returncode == 1 and head in lines, r.stdout + r.stderr
    cause = lines[lines.index(head) + 1]
    assert cause.startswith("  cause: outputs equal those of mutant scale-group (") and "numpy_scale_group_shift)" \
        in cause and "bit for bit" in cause, cause


def test_pytest_xdist_prints_the_cause_summary_of_every_workers_golden_failures(tmp_path):
    spec = "nvfp4_suite.kernels.mutants:numpy_scale_group_shift"
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q", "--rootdir",
                        str(tmp_path), "--nvfp4-backend", spec, "--nvfp4-examples", "0", "-k", "scale-groups"],
                       cwd=tmp_path, capture_output=True, text=True, env=_env(tmp_path), timeout=900)
    lines = r.stdout.splitlines()
    head = f"nvfp4: cause of backend {spec}'s golden failures:"
    assert r.returncode == 1 and head in lines, r.stdout + r.stderr
    failed = int(re.findall(r"(\d+) failed", r.stdout)[-1])
    cause = lines[lines.index(head) + 1]
    # Both workers' failing launches are counted: as many as the session's failed tests.
    assert cause.startswith("  cause: outputs equal those of mutant scale-group (") and (
        f"on {failed} of {failed} failing launches, bit for bit" in cause), (cause, failed)
