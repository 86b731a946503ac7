"""python -m vectors: exit codes, output, repro files."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from catalog_helpers import copy_catalog

from nvfp4_suite.vectors.catalog.lock import LOCK_NAME

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=ROOT, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600, stdin=subprocess.DEVNULL)


def test_check_emulate_passes_with_exit_0():
    r = _run("check", "--backend", "emulate", "--examples", "5", "--no-golden")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CONFORMANT: backend emulate" in r.stdout and "coverage over" in r.stdout


def test_unsupported_split_count_exits_2():
    r = _run("check", "--backend", "emulate", "--splits", "9", "--examples", "1")
    assert r.returncode == 2 and "--splits [9]: backend emulate supports" in r.stderr


def test_unknown_backend_exits_2():
    r = _run("check", "--backend", "nope", "--examples", "1")
    assert r.returncode == 2 and "unknown backend 'nope'" in r.stderr


def test_failing_backend_exits_1_saves_a_repro_and_replay_reproduces_it(tmp_path):
    env = {"NVFP4_REPRO_DIR": str(tmp_path), "PYTHONPATH": str(ROOT / "tests")}
    r = _run("check", "--backend", "nvfp4_suite.kernels.mutants:NumpyKernel", "--examples", "3", "--no-golden",
             env_extra=env)
    assert r.returncode == 0, r.stdout + r.stderr
    spec = "test_cli_helpers:HeadMod"
    helper = tmp_path / "test_cli_helpers.py"
    helper.write_text("from nvfp4_suite.kernels.mutants import NumpyKernel\n\n\n"
                      "def HeadMod():\n    return NumpyKernel('head_mod')\n")
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


def _replay_lines(text):
    return [ln.split("replay: ", 1)[1] for ln in text.splitlines() if ln.strip().startswith("replay: ")]


def test_failure_drawn_at_xcds_8_is_saved_and_replayed_as_printed(tmp_path, monkeypatch, capsys):
    from nvfp4_suite.vectors.catalog.casefile import load_case
    from nvfp4_suite.vectors.cli import main

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    spec = "nvfp4_suite.kernels.mutants:PlacementBug"
    assert main(["check", "--backend", spec, "--examples", "20", "--no-golden"]) == 1
    out = capsys.readouterr().out
    saved = [ln.split("saved: ", 1)[1] for ln in out.splitlines() if ln.startswith("saved: ")]
    assert len(saved) == 1
    _, meta, _ = load_case(saved[0])
    (launch,) = meta["launches"]
    assert launch["xcds"] == 8 and meta["backend"] == spec
    (cmd,) = _replay_lines(out)
    assert cmd == f"python -m nvfp4_suite.vectors replay {saved[0]} --backend {spec}"
    # The file names the launch; the backend, a module path, only the command does.
    assert main(shlex.split(cmd)[3:]) == 1
    assert f"splits={launch['splits']} xcds=8 layout=" in capsys.readouterr().out
    assert main(["replay", saved[0]]) == 2
    assert f"records backend {spec!r}, which is not a registered name" in capsys.readouterr().err
    assert main(["replay", saved[0], "--backend", spec, "--xcds", "0"]) == 0
    assert f"splits={launch['splits']} layout=" in capsys.readouterr().out


def test_golden_failure_replay_commands_run_as_printed(monkeypatch, capsys):
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.cli import main

    m = catalog.load_manifest()
    case = next(c for c in m["cases"] if c["result"] == "valid"
                and {"splits": 2, "xcds": 8, "order": None} in c["launches"])
    monkeypatch.setattr(catalog, "load_manifest", lambda **kw: {**m, "cases": [case]})
    assert main(["check", "--backend", "nvfp4_suite.kernels.mutants:PlacementBug", "--examples", "0"]) == 1
    out = capsys.readouterr().out
    hints = _replay_lines(out)
    assert "0 of 1 cases passed, 1 failed" in out and len(hints) == 1, out
    assert hints[0].endswith("--backend nvfp4_suite.kernels.mutants:PlacementBug --splits 1 --xcds 8"), hints
    assert main(shlex.split(hints[0])[3:]) == 1 and "xcds=8" in capsys.readouterr().out


def test_add_of_a_missing_file_exits_2(capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["add", "/nonexistent/x.npz", "--comment", "c", "--flags", "split-merge"]) == 2
    assert "no such case file" in capsys.readouterr().err


def test_list_with_an_unknown_flag_exits_2(capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["list", "--flag", "nosuchflag"]) == 2
    assert "unknown flag 'nosuchflag'" in capsys.readouterr().err


def test_replay_help_describes_every_argument():
    r = _run("replay", "--help")
    assert r.returncode == 0
    for arg in ("file", "--backend", "--splits", "--xcds", "--order"):
        line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith(arg))
        assert len(line.split()) > 1 or arg == "file", line


def test_a_reference_backend_run_ends_by_saying_how_to_check_your_kernel():
    r = _run("check", "--backend", "emulate", "--examples", "2", "--no-golden")
    assert r.returncode == 0 and "To check your kernel: python -m nvfp4_suite.vectors check --backend" in r.stdout


def test_ctrl_c_is_a_message_and_exit_2(monkeypatch, capsys):
    from nvfp4_suite.vectors import cli
    from nvfp4_suite.vectors.engine import check

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(check, "check_generated", interrupted)
    assert cli.main(["check", "--backend", "emulate", "--no-golden", "--examples", "3"]) == 2
    assert "interrupted: no verdict" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly_with_exit_2():
    # The reader closes its end before the command writes anything (``| head`` that exits early).
    p = subprocess.Popen([sys.executable, "-m", "nvfp4_suite.vectors", "list"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 2 and "Traceback" not in err, err


def test_a_backend_module_that_raises_on_import_is_a_setup_error(tmp_path):
    (tmp_path / "broken_kernel.py").write_text("raise RuntimeError('HIP runtime missing')\n")
    r = _run("check", "--backend", "broken_kernel:Backend", "--examples", "1", env_extra={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 2 and "HIP runtime missing" in r.stderr and "Traceback" not in r.stderr


def test_serving_shape_needs_generated_problems(capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["check", "--backend", "emulate", "--shape", "serving", "--examples", "0"]) == 2
    assert "--shape serving checks generated problems" in capsys.readouterr().err


def _case_file(path, meta, problem=None):
    """Save a small problem (default a valid one) with ``meta`` at ``path``."""
    from nvfp4_suite.reference.examples import random_problem
    from nvfp4_suite.vectors.catalog.casefile import save_case

    save_case(path, random_problem(6, reqs=2, topk=3) if problem is None else problem, meta=meta)
    return path


@pytest.mark.parametrize("spec", ["code:interact", "os:abort", "sys:exit", "this:x"])
def test_replay_never_loads_a_backend_a_file_names_unless_it_is_registered(tmp_path, spec):
    # In a subprocess: an import or call of what the file names would show as a
    # console, an abort (rc 134), exit 0 or the Zen of Python.
    path = _case_file(tmp_path / "case.npz", {"backend": spec, "launches": [{"splits": 1, "xcds": 0, "order": None}]})
    r = _run("replay", str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"records backend {spec!r}, which is not a registered name" in r.stderr
    assert "give --backend explicitly" in r.stderr and r.stdout == ""


def test_replay_uses_a_registered_backend_the_file_names(tmp_path, capsys):
    from nvfp4_suite.vectors.cli import main

    launch = {"splits": 2, "xcds": 0, "order": None}
    path = _case_file(tmp_path / "case.npz", {"backend": "emulate", "launches": [launch]})
    assert main(["replay", str(path)]) == 0
    assert "splits=2 layout=" in capsys.readouterr().out


def test_printed_replay_commands_run_as_printed_from_a_folder_named_like_a_shell_command(tmp_path, monkeypatch,
                                                                                        capsys):
    from nvfp4_suite.vectors.cli import main

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path / "my repro;touch pwned;x"))
    assert main(["check", "--backend", "nvfp4_suite.kernels.mutants:PlacementBug", "--examples", "20",
                 "--no-golden"]) == 1
    (cmd,) = _replay_lines(capsys.readouterr().out)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", PYTHONPATH=str(ROOT / "tests"))
    r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "FAIL" in r.stdout, cmd + "\n" + r.stdout + r.stderr
    assert not (tmp_path / "pwned").exists()


def test_replay_of_an_invalid_problem_naming_no_expected_error_is_exit_2_before_any_backend(tmp_path, monkeypatch,
                                                                                           capsys):
    from nvfp4_suite import kernels
    from nvfp4_suite.reference.examples import random_problem
    from nvfp4_suite.vectors.cli import main

    made = []
    monkeypatch.setitem(kernels._REGISTRY, "counting", lambda: made.append(1) or kernels.get_backend("emulate"))
    p = random_problem(6, reqs=2, topk=3)
    p.q[0, 0, 0] = np.nan
    path = _case_file(tmp_path / "case.npz", {"backend": "counting"}, problem=p)
    for args in (["replay", str(path)], ["replay", str(path), "--backend", "counting"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"{path}: its problem is invalid (QueryValueError: q[0, 0, 0]" in err and "no backend was run" in err
    assert made == []


def test_add_with_split_count_0_is_a_usage_error(tmp_path):
    r = _run("add", str(tmp_path / "x.npz"), "--comment", "c", "--flags", "split-merge", "--splits", "0")
    assert r.returncode == 2 and "split count 0: must be >= 1" in r.stderr and "Traceback" not in r.stderr


def _with_meta_text(src, dst, text):
    import io
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(text.encode(), np.uint8))
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.namelist():
            zout.writestr(item, buf.getvalue() if item == "meta.npy" else zin.read(item))
    return dst


@pytest.mark.parametrize("hostile", ["launches of the wrong type", "deeply nested JSON"])
def test_hostile_metadata_is_exit_2_in_replay_and_add(tmp_path, monkeypatch, hostile, capsys):
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.cli import main

    path = _case_file(tmp_path / "ok.npz", {"launches": 5})
    if hostile == "deeply nested JSON":
        path = _with_meta_text(path, tmp_path / "deep.npz", "[" * 100000 + "]" * 100000)
    # A catalog of its own, in case add got as far as writing.
    root = tmp_path / "cat"
    (root / "data").mkdir(parents=True)
    shutil.copy(catalog.HERE / "manifest.json", root / "manifest.json")
    monkeypatch.setattr(catalog, "HERE", root)
    for args in (["replay", str(path), "--backend", "emulate"],
                 ["add", str(path), "--comment", "c", "--flags", "split-merge"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert ("field 'meta.meta.launches' is a JSON int" in err if hostile.startswith("launches")
                else "not JSON this reader accepts (RecursionError)" in err), err
    assert not list((root / "data").iterdir())


# --- issue 20: every exit path, interruptions, hostile backends ------------------

HOSTILE = {"PYTHONPATH": str(ROOT / "tests")}


def test_a_backend_raising_systemexit_is_not_conformant_in_check_golden_check_generated_and_replay(tmp_path):
    # It made check and replay exit 0 with no verdict line.
    r = _run("check", "--backend", "hostile:ExitsOnCall", "--examples", "0", env_extra=HOSTILE)
    assert r.returncode == 1 and "NOT CONFORMANT: backend correct" in r.stdout, r.stdout + r.stderr
    assert "backend raised SystemExit: 0" in r.stdout
    env = dict(HOSTILE, NVFP4_REPRO_DIR=str(tmp_path))
    r = _run("check", "--backend", "hostile:ExitsOnCall", "--examples", "2", "--no-golden", env_extra=env)
    assert r.returncode == 1 and "NOT CONFORMANT" in r.stdout, r.stdout + r.stderr
    (saved,) = tmp_path.iterdir()
    # The file records a backend that is not a registered name: replay takes it from --backend.
    r = _run("replay", str(saved), "--backend", "hostile:ExitsOnCall", env_extra=env)
    assert r.returncode == 1 and "FAIL: backend raised SystemExit: 0" in r.stdout, r.stdout + r.stderr


def test_a_keyboardinterrupt_raised_by_backend_code_is_its_failure_not_an_interruption(tmp_path):
    r = _run("check", "--backend", "hostile:InterruptsOnCall", "--examples", "2", "--no-golden",
             env_extra=dict(HOSTILE, NVFP4_REPRO_DIR=str(tmp_path)))
    assert r.returncode == 1 and "backend raised KeyboardInterrupt" in r.stdout, r.stdout + r.stderr
    assert "interrupted" not in r.stderr


def test_a_backend_module_that_exits_0_on_import_is_exit_2(tmp_path):
    # A kernel module written as a script ("no CUDA device; skipping") gave exit 0.
    (tmp_path / "script_kernel.py").write_text("import sys\nprint('no CUDA device; skipping')\nsys.exit(0)\n")
    r = _run("check", "--backend", "script_kernel:Backend", "--examples", "1", env_extra={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 2 and "importing 'script_kernel' raised SystemExit: 0" in r.stderr, r.stderr


@pytest.mark.parametrize("spec, why", [("hostile:AvailableRaises", "available() raised RuntimeError: driver query"),
                                       ("hostile:AvailableExits", "available() raised SystemExit: 0")])
def test_an_available_that_raises_or_exits_is_exit_2_naming_it(spec, why):
    r = _run("check", "--backend", spec, "--examples", "1", env_extra=HOSTILE)
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_backend_name_with_newlines_and_escapes_cannot_forge_a_verdict_line():
    r = _run("check", "--backend", "hostile:EvilName", "--examples", "2", "--no-golden", env_extra=HOSTILE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "\x1b" not in r.stdout and "CONFORMANT: backend trusted" not in r.stdout.splitlines()
    assert r"CONFORMANT: backend 'x\nCONFORMANT: backend trusted\x1b[2K'; 2 generated problems" in r.stdout


def test_check_writes_no_hypothesis_folder_into_the_working_folder(tmp_path):
    r = _run("check", "--backend", "emulate", "--examples", "2", "--no-golden", cwd=tmp_path)
    assert r.returncode == 0 and list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_serving_shape_without_torch_is_exit_2_with_a_message(tmp_path):
    # A torch that cannot be imported, first on the path.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('No module named torch (test)')\n")
    r = _run("check", "--backend", "emulate", "--shape", "serving", "--examples", "1",
             env_extra={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 2 and "--shape serving needs torch" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_unusable_repro_folder_still_prints_the_minimised_report_and_says_why(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    r = _run("check", "--backend", "hostile:FlakyOnce", "--examples", "5", "--no-golden",
             env_extra=dict(HOSTILE, NVFP4_REPRO_DIR=str(blocker)))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "FLAKY FAILURE" in r.stdout and f"not saved: could not save it under {blocker}" in r.stdout


def test_an_intermittent_failure_is_a_flaky_verdict_with_both_results_a_repro_and_a_replay(tmp_path):
    # It was a 353-line FlakyFailure traceback with no verdict and nothing saved.
    r = _run("check", "--backend", "hostile:FlakyOnce", "--examples", "5", "--no-golden",
             env_extra=dict(HOSTILE, NVFP4_REPRO_DIR=str(tmp_path)))
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    out = r.stdout
    assert "FLAKY FAILURE (the same problem and launch failed once and passed when rerun)" in out
    assert "the failing run:" in out and "the rerun:" in out and "FLAKY FAILURE: backend" in out
    # The failure's part of the report (after the coverage table) fits a screen.
    assert len(out[out.index("FLAKY FAILURE"):].splitlines()) < 50
    (cmd,) = _replay_lines(out)
    (saved,) = tmp_path.iterdir()
    assert cmd == f"python -m nvfp4_suite.vectors replay {saved} --backend hostile:FlakyOnce"


def _start(*args, env_extra=None):
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "nvfp4_suite.vectors", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(p, text):
    """Read p's stderr until a line containing ``text``; the lines read."""
    seen = []
    for line in p.stderr:
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError("".join(seen))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interruption_while_minimising_saves_and_prints_the_smallest_failure_so_far(tmp_path, sig):
    p = _start("check", "--backend", "hostile:SlowWrong", "--examples", "5", "--no-golden",
               env_extra=dict(HOSTILE, NVFP4_REPRO_DIR=str(tmp_path)))
    _wait_for(p, "minimising...")
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, out + err
    assert f"FIRST FAILING PROBLEM (smallest found before the run stopped ({sig.name}); not fully minimised)" in out
    assert f"stopped early: {sig.name}" in out and "Traceback" not in err
    (saved,) = tmp_path.iterdir()
    assert f"saved: {saved}" in out


def test_an_interruption_with_no_failure_is_exit_2_after_the_golden_results(tmp_path):
    p = _start("check", "--backend", "hostile:Slow", "--examples", "0", env_extra=HOSTILE)
    _wait_for(p, "golden: [3/")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "interrupted (SIGTERM): no verdict" in err, out + err
    assert "golden vectors: " in out and "stopped early (SIGTERM)" in out


def test_check_piped_into_head_stops_when_its_reader_goes_away():
    import time

    p = _start("check", "--backend", "emulate", "--no-golden", "--examples", "100000")
    assert p.stdout.readline().startswith("backend: emulate")
    t0 = time.monotonic()
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 2 and time.monotonic() - t0 < 60 and "Traceback" not in err, err


def test_a_systemexit_from_backend_code_outside_its_call_is_exit_2_not_0():
    r = _run("check", "--backend", "hostile:ExitsOnName", "--examples", "1", env_extra=HOSTILE)
    assert r.returncode == 2 and "SystemExit(0) was raised during the run" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("spec", ["hostile:ZerosFirstTorch", "hostile:ZerosFirstGraph"])
def test_a_backend_reusing_one_torch_output_buffer_is_not_conformant(spec, tmp_path):
    # Zeros on every first launch, right on every second, in one CPU tensor: it was
    # CONFORMANT on every golden case and generated problem.
    pytest.importorskip("torch")
    r = _run("check", "--backend", spec, "--no-golden", "--examples", "3",
             env_extra=dict(HOSTILE, NVFP4_REPRO_DIR=str(tmp_path)))
    assert r.returncode == 1 and "NOT CONFORMANT" in r.stdout and "second run differs" in r.stdout, r.stdout


# --- project catalogs: a team's own cases, outside the installed suite -------

@pytest.fixture
def small_builtin(tmp_path, monkeypatch):
    """A built-in catalog of one valid and one invalid case (a copy, ``tmp_path/vectors``),
    so that a run over it and a project catalog takes seconds."""
    from nvfp4_suite.vectors import catalog

    m = catalog.load_manifest()
    chosen = [next(c for c in m["cases"] if c["result"] == r) for r in ("valid", "invalid")]
    here = copy_catalog(tmp_path, monkeypatch, chosen)
    monkeypatch.delenv("NVFP4_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    return here


def _repro(folder, seed=77):
    """A saved problem whose launch (splits 2, xcds 8) ``nvfp4_suite.kernels.mutants:PlacementBug`` fails."""
    from nvfp4_suite.kernels.protocol import Launch
    from nvfp4_suite.reference.examples import random_problem
    from nvfp4_suite.vectors.catalog.casefile import save_case

    src = folder / f"repro-{seed}.npz"
    save_case(src, random_problem(seed, reqs=2, topk=3), meta={"launches": [Launch(2, 8).to_json()]})
    return src


def _add_to(catalog_dir, src, name):
    from nvfp4_suite.vectors.cli import main

    return main(["add", str(src), "--comment", "found in production", "--flags", "split-merge", "--name", name,
                 "--catalog", str(catalog_dir)])


def _suite_catalog_bytes():
    """Every byte of the suite's own catalog (manifest and data) and the entries of
    its folder, but its lock file: present while any command reads the catalog
    (another test's, under pytest-xdist), removed by the last one."""
    here = ROOT / "vectors"
    return ((here / "manifest.json").read_bytes(),
            sorted(p.name for p in here.iterdir() if p.name not in ("__pycache__", LOCK_NAME)),
            {p.name: p.read_bytes() for p in (here / "data").iterdir()})


def test_add_from_a_project_dir_writes_there_leaves_the_suite_untouched_and_check_runs_it(tmp_path):
    proj = tmp_path / "my project"
    proj.mkdir()
    src = _repro(tmp_path)
    env = {"NVFP4_CATALOG": ""}  # unset: the default is ./nvfp4-catalog
    before = _suite_catalog_bytes()
    r = _run("add", str(src), "--comment", "found in production", "--flags", "split-merge", "--name", "prod-bug",
             cwd=proj, env_extra=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _suite_catalog_bytes() == before
    assert "check names it project:000-prod-bug" in r.stdout and "created the project catalog" in r.stderr
    assert sorted(p.name for p in (proj / "nvfp4-catalog").iterdir()) == ["data", "manifest.json"]
    assert [p.name for p in (proj / "nvfp4-catalog" / "data").iterdir()] == ["000-prod-bug.npz"]
    r = _run("check", "--backend", "emulate", "--examples", "0", cwd=proj, env_extra=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "catalog project (nvfp4-catalog, run because it exists: the default project catalog" in r.stdout
    last = r.stdout.splitlines()[-2]
    assert last.startswith("CONFORMANT") and "golden cases judged (0 failed), catalog project: 1 golden cases " \
        "judged (0 failed)" in last, r.stdout
    assert _suite_catalog_bytes() == before


def test_check_catalog_judges_the_added_case_and_a_failing_backend_fails_it(small_builtin, tmp_path, capsys):
    from nvfp4_suite.vectors.cli import main

    proj = tmp_path / "team cases"
    assert _add_to(proj, _repro(tmp_path), "prod-bug") == 0
    capsys.readouterr()
    assert main(["check", "--backend", "emulate", "--examples", "0", "--catalog", str(proj)]) == 0
    out = capsys.readouterr().out
    assert f"catalog {proj} (--catalog {proj}):" in out
    assert f"catalog {proj}: 1 golden cases judged (0 failed)" in out.splitlines()[-2]
    assert main(["check", "--backend", "nvfp4_suite.kernels.mutants:PlacementBug", "--examples", "0", "--catalog",
                 str(proj)]) == 1
    out = capsys.readouterr().out
    assert f"  {proj}:000-prod-bug FAIL at 1 of 2 launches [split-merge]" in out, out
    hint = next(h for h in _replay_lines(out) if str(proj) in h)
    assert main(shlex.split(hint)[3:]) == 1 and "xcds=8" in capsys.readouterr().out
    # Without --catalog, and no ./nvfp4-catalog here, only the built-in catalog runs.
    assert main(["check", "--backend", "emulate", "--examples", "0"]) == 0
    assert "catalog " not in capsys.readouterr().out


def test_two_catalogs_in_one_run_each_name_their_cases(small_builtin, tmp_path, capsys):
    from nvfp4_suite.vectors.cli import main

    a, b = tmp_path / "a", tmp_path / "b"
    assert _add_to(a, _repro(tmp_path, 77), "first") == 0 and _add_to(b, _repro(tmp_path, 78), "second") == 0
    capsys.readouterr()
    assert main(["check", "--backend", "nvfp4_suite.kernels.mutants:PlacementBug", "--examples", "0",
                 "--catalog", str(a), "--catalog", str(b), "--catalog", str(a)]) == 1
    out = capsys.readouterr().out
    assert f"  {a}:000-first FAIL" in out and f"  {b}:000-second FAIL" in out, out
    assert out.count(f"catalog {a} (") == 1  # a folder given twice runs once
    last = out.splitlines()[-1]
    assert f"catalog {a}: 1 golden cases judged (1 failed), catalog {b}: 1 golden cases judged (1 failed)" in last


def test_a_damaged_project_catalog_is_an_error_that_hides_no_other_verdict(small_builtin, tmp_path, capsys):
    from nvfp4_suite.vectors.cli import main

    proj = tmp_path / "proj"
    assert _add_to(proj, _repro(tmp_path), "prod-bug") == 0
    data = proj / "data" / "000-prod-bug.npz"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    capsys.readouterr()
    check = ["check", "--backend", "emulate", "--examples", "0", "--catalog", str(proj)]
    assert main(check) == 2
    out = capsys.readouterr().out
    assert "golden vectors: 2 of 2 cases passed" in out  # the built-in verdict, still shown
    assert f"  {proj}:000-prod-bug ERROR: {data}: sha256" in out, out
    assert out.splitlines()[-1].startswith("NO VERDICT (a catalog has unreadable cases): backend emulate; "
                                           "2 golden cases judged (0 failed), catalog")
    (proj / "manifest.json").write_text("{not json")
    assert main(check) == 2
    out = capsys.readouterr().out
    assert "golden vectors: 2 of 2 cases passed" in out
    assert f"  {proj}: ERROR: {proj / 'manifest.json'}: unreadable manifest" in out, out
    assert f"2 golden cases judged (0 failed), catalog {proj} unreadable; " in out.splitlines()[-1]
    # A failing backend is NOT CONFORMANT (exit 1) whatever else is unreadable.
    assert main(check[:2] + ["nvfp4_suite.kernels.mutants:PlacementBug"] + check[3:]) == 1
    assert "NOT CONFORMANT" in capsys.readouterr().out
    missing = tmp_path / "no-such-catalog"
    assert main(check[:-1] + [str(missing)]) == 2
    assert f"{missing / 'manifest.json'} is missing: not a catalog" in capsys.readouterr().out
    assert not missing.exists()


def test_list_verify_and_regen_take_a_project_catalog(small_builtin, tmp_path, capsys):
    from nvfp4_suite.vectors.cli import main

    proj = tmp_path / "proj"
    assert _add_to(proj, _repro(tmp_path, 77), "one") == 0 and _add_to(proj, _repro(tmp_path, 78), "two") == 0
    files = {p.name: p.read_bytes() for p in (proj / "data").iterdir()}
    manifest = (proj / "manifest.json").read_bytes()
    capsys.readouterr()
    assert main(["list", "--catalog", str(proj)]) == 0
    out = capsys.readouterr().out
    assert "  0  one " in out and "  1  two " in out and "found in production" in out
    assert main(["verify", "--catalog", str(proj)]) == 0 and "verify: OK" in capsys.readouterr().out
    assert main(["regen", "--check", "--catalog", str(proj)]) == 0
    assert "regen --check: OK (2 cases)" in capsys.readouterr().out
    assert main(["regen", "--catalog", str(proj)]) == 0 and "wrote 2 cases" in capsys.readouterr().out
    assert (proj / "manifest.json").read_bytes() == manifest
    assert {p.name: p.read_bytes() for p in (proj / "data").iterdir()} == files
    for cmd in ("list", "verify", "regen"):
        assert main([cmd, "--catalog", str(tmp_path / "nothing")]) == 2
        assert "is missing: not a catalog" in capsys.readouterr().err


# --- check/replay --json FILE: the machine-readable verdict -------------------

def _json_report(path):
    """The report at ``path``, checked against the schema file in the package."""
    import json

    from nvfp4_suite.vectors.cli import report

    data = json.loads(Path(path).read_text())
    assert report.validate(data, report.load_schema()) == []
    return data


def _timeless(text):
    """A report's text without the run's duration (the last field of the verdict line)."""
    return [ln.rsplit("; ", 1)[0] if ln.startswith(("CONFORMANT", "NOT CONFORMANT")) else ln
            for ln in text.splitlines()]


@pytest.fixture
def head_mod_fails(small_builtin, monkeypatch):
    """``small_builtin`` with its valid case replaced by one ``nvfp4_suite.kernels.mutants:numpy_head_mod`` fails."""
    from nvfp4_suite.vectors import catalog

    m = catalog.load_manifest()
    case = next(c for c in catalog.load_manifest(ROOT / "vectors" / "manifest.json")["cases"]
                if c["name"] == "no-valid-slot-rows")
    shutil.copy(ROOT / "vectors" / case["file"], small_builtin / case["file"])
    chosen = [case] + [c for c in m["cases"] if c["result"] == "invalid"]
    (small_builtin / "manifest.json").write_text(catalog.dump({**m, "cases": chosen}))
    return small_builtin


def test_json_report_of_a_failing_backend_lists_failing_cases_with_replay_commands_that_run(head_mod_fails, tmp_path,
                                                                                          capsys):
    import hashlib

    from nvfp4_suite.vectors.cli import main

    small_builtin = head_mod_fails

    args = ["check", "--backend", "nvfp4_suite.kernels.mutants:numpy_head_mod", "--examples", "0"]
    assert main(args) == 1
    plain = capsys.readouterr().out
    assert main(args + ["--json", str(tmp_path / "r.json")]) == 1
    assert _timeless(capsys.readouterr().out) == _timeless(plain)  # the text report is unchanged
    data = _json_report(tmp_path / "r.json")
    assert (data["verdict"], data["exit_code"], data["command"]) == ("NOT CONFORMANT", 1, "check")
    assert data["backend"]["spec"] == "nvfp4_suite.kernels.mutants:numpy_head_mod" and data["backend"]["arithmetic"]
    (cat,) = data["catalogs"]
    assert cat["label"] == "built-in"
    assert cat["manifest_sha256"] == hashlib.sha256((small_builtin / "manifest.json").read_bytes()).hexdigest()
    failed = [c for c in cat["cases"] if c["status"] == "FAIL"]
    assert failed and cat["counts"]["FAIL"] == len(failed) and len(cat["cases"]) == 2
    first = failed[0]["failures"][0]
    assert first["failing_elements"] > 0 and first["replay"] in _replay_lines(plain)
    run = subprocess.run([sys.executable, *shlex.split(first["replay"])[1:]], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "FAIL" in run.stdout, run.stdout + run.stderr
    # The same replay with --json: the launch's failing elements, counted the same way.
    assert main(shlex.split(first["replay"])[3:] + ["--json", str(tmp_path / "replay.json")]) == 1
    rep = _json_report(tmp_path / "replay.json")
    (launch,) = rep["replay"]["launches"]
    assert rep["verdict"] == "NOT CONFORMANT" and launch["status"] == "FAIL"
    assert launch["failing_elements"] == first["failing_elements"] and launch["launch"] == first["launch"]


def test_json_report_of_a_conformant_run_validates_with_golden_and_generated_parts(small_builtin, tmp_path, capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["check", "--backend", "emulate", "--examples", "2", "--seed", "5",
                 "--json", str(tmp_path / "r.json")]) == 0
    data = _json_report(tmp_path / "r.json")
    assert (data["verdict"], data["exit_code"], data["seed"], data["examples"]) == ("CONFORMANT", 0, 5, 2)
    assert data["catalogs"][0]["counts"]["PASS"] == 2 and data["generated"]["problems_run"] == 2
    assert data["generated"]["failing"] is None and sum(v["problems"] for v in data["generated"]["coverage"].values())


def test_json_report_is_written_for_an_interrupted_run_and_for_no_verdict(small_builtin, tmp_path, monkeypatch,
                                                                          capsys):
    from nvfp4_suite.vectors import cli
    from nvfp4_suite.vectors.engine import check

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(check, "check_generated", interrupted)
    assert cli.main(["check", "--backend", "emulate", "--examples", "3", "--json", str(tmp_path / "i.json")]) == 2
    data = _json_report(tmp_path / "i.json")
    assert data["verdict"] == "NO VERDICT" and data["interrupted"] and data["exit_code"] == 2
    assert data["catalogs"][0]["counts"]["PASS"] == 2
    assert cli.main(["check", "--no-golden", "--examples", "0", "--json", str(tmp_path / "n.json")]) == 2
    data = _json_report(tmp_path / "n.json")
    assert data["verdict"] == "NO VERDICT" and "nothing to check" in data["reason"]
    assert sorted(os.listdir(tmp_path)) == ["i.json", "n.json", "vectors"]  # no temporary file left


@pytest.mark.parametrize("where", ["missing folder/r.json", "-"])
def test_a_json_file_that_cannot_be_written_is_exit_2_naming_it_before_anything_runs(tmp_path, capsys, where):
    from nvfp4_suite.vectors.cli import main

    path = where if where == "-" else str(tmp_path / where)
    assert main(["check", "--backend", "emulate", "--json", path]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"--json {path}" in err and "nothing was run" in err


def test_json_report_of_a_generated_failure_names_its_size_saved_file_flakiness_and_replay(tmp_path, monkeypatch,
                                                                                          capsys):
    from nvfp4_suite.vectors.cli import main

    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path / "repro"))
    assert main(["check", "--backend", "hostile:FlakyOnce", "--examples", "5", "--no-golden",
                 "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    data = _json_report(tmp_path / "r.json")
    failing = data["generated"]["failing"]
    assert data["verdict"] == "FLAKY FAILURE" and data["catalogs"] == [] and failing["flaky"] is True
    assert Path(failing["saved"]).is_file() and [failing["replay"]] == _replay_lines(out)
    assert f"rows {failing['size']['rows']}, Hkv {failing['size']['kv_heads']}" in out


def test_the_readme_json_command_writes_a_report_that_validates(small_builtin, tmp_path, capsys):
    from nvfp4_suite.vectors.cli import main

    (line,) = [ln for ln in (ROOT / "README.md").read_text().splitlines() if "--json nvfp4-verdict.json" in ln]
    assert line.startswith("python -m nvfp4_suite.vectors check ")
    assert main(shlex.split(line)[3:]) == 0  # run in tmp_path (small_builtin's working folder)
    assert _json_report(tmp_path / "nvfp4-verdict.json")["verdict"] == "CONFORMANT"
