"""nvfp4_suite.vectors.simulator.sweep: the simulator's full check over worker
processes, run on one small golden case (valid and invalid) and one
generated problem; ``--help`` and the setup errors (exit 2); and the whole
golden catalog with 50 generated problems on both targets, in shards."""

import os
import subprocess
import sys

import pytest

from nvfp4_suite.kernels.flydsl.lanes import SPLITS
from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.simulator import sweep as sim_sweep


def _case_id(name: str) -> int:
    return next(c["id"] for c in catalog.load_manifest()["cases"] if c["name"] == name)


@pytest.fixture(scope="module")
def toolchain():
    why = sim_missing(("gfx950",))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)


def test_help_runs_as_a_module():
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors.simulator.sweep", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--golden" in r.stdout and "--examples" in r.stdout


def test_a_valid_golden_case_is_scheduled_per_split_count_and_conforms(toolchain, capsys):
    cid = _case_id("split-rescale")
    tasks = sim_sweep.tasks_for("gfx950", True, cases={cid})
    entry = next(c for c in catalog.load_manifest()["cases"] if c["id"] == cid)
    # Split counts outside the kernel's (3, 5, ...) are the backend's to refuse: no task.
    counts = sorted({x["splits"] for x in entry["launches"]} & set(SPLITS))
    assert len(counts) > 1 and [t[2] for t in tasks] == [("gfx950", cid, s) for s in counts]
    assert sim_sweep.main(["--golden", "--case", str(cid), "--splits", "2", "--arch", "gfx950", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert f"PASS gfx950 golden case {cid} split-rescale splits 2" in out and "1 of 1 tasks conform" in out


def test_an_invalid_golden_case_runs_the_validator_and_conforms(toolchain, capsys):
    cid = _case_id("invalid-rows")
    assert sim_sweep.tasks_for("gfx950", True, cases={cid}) == [
        (f"gfx950 golden case {cid} invalid-rows", sim_sweep.golden_task, ("gfx950", cid, None))]
    assert sim_sweep.main(["--golden", "--case", str(cid), "--arch", "gfx950", "--jobs", "1"]) == 0
    assert "1 of 1 tasks conform" in capsys.readouterr().out


def test_one_generated_problem_runs_and_conforms(toolchain, capsys):
    assert sim_sweep.main(["--examples", "1", "--arch", "gfx950", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "PASS gfx950 generated 0..0" in out and "1 of 1 tasks conform" in out


def test_tasks_on_worker_processes_each_report_their_verdict_by_name(toolchain):
    # --jobs above 1 (the default, and the README's --jobs 2): the tasks run on a process pool.
    tasks = sim_sweep.tasks_for("gfx950", True, cases={_case_id("split-rescale"), _case_id("invalid-rows")},
                                splits={2})
    lines: list[str] = []
    failed, instructions, _ = sim_sweep.run_tasks(tasks, 2, out=lines.append)
    assert failed == [] and instructions > 0 and len(tasks) == 2
    assert sorted(x.split("] ", 1)[1] for x in lines) == sorted(f"PASS {t[0]}" for t in tasks)


def test_a_failing_task_is_reported_by_name_with_its_lines(monkeypatch):
    lines = []
    failed, n, _ = sim_sweep.run_tasks([("broken task", lambda: 1 / 0, ())], 1, out=lines.append)
    assert failed == ["broken task"] and n == 0
    assert any("FAIL broken task" in x for x in lines) and any("ZeroDivisionError" in x for x in lines)


def test_nothing_to_check_and_an_unknown_case_are_exit_2(capsys):
    assert sim_sweep.main([]) == 2
    assert "nothing to check" in capsys.readouterr().err
    if sim_missing(("gfx950",)) is None:
        assert sim_sweep.main(["--golden", "--case", "9999", "--arch", "gfx950"]) == 2
        assert "9999" in capsys.readouterr().err


def test_on_a_terminal_passing_tasks_move_the_bar_and_failing_ones_are_still_printed():
    import io

    from nvfp4_suite.vectors.cli.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    bar, lines = Progress(Tty(), columns=200), []
    tasks = [("good task", lambda: (True, [], 5), ()), ("broken task", lambda: 1 / 0, ()),
             ("good too", lambda: (True, [], 2), ())]
    failed, n, _ = sim_sweep.run_tasks(tasks, 1, out=lines.append, progress=bar)
    assert failed == ["broken task"] and n == 7
    assert [x.split("] ", 1)[1] for x in lines if x.startswith("[")] == ["FAIL broken task"]
    drawn = bar.stream.getvalue()
    assert "33% |" in drawn and "PASS good task" in drawn and "100% |" in drawn and "PASS good too" in drawn


# CI: the whole golden catalog at every launch and placement its manifest
# lists, and 50 generated problems, through both simulator targets (about 460
# CPU seconds in all on CI's machine), in shards that pytest-xdist spreads over
# its workers: every SHARDS-th task of a target's list, so that each shard
# gets its share of the long splits-8 tasks.
SHARDS = 12


def _shard(tasks: list, k: int) -> list:
    """Shard ``k`` of a target's task list."""
    return tasks[k::SHARDS]


@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_the_whole_golden_catalog_and_generated_problems_conform_on_the_simulator(arch, shard):
    why = sim_missing((arch,))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    tasks = sim_sweep.tasks_for(arch, True, examples=50)
    lines: list[str] = []
    failed, instructions, _ = sim_sweep.run_tasks(_shard(tasks, shard), jobs=1, out=lines.append)
    assert failed == [] and instructions > 0, "\n".join(lines)


def test_the_shards_take_every_task_of_both_targets_once():
    for arch in ("gfx942", "gfx950"):
        tasks = sim_sweep.tasks_for(arch, True, examples=50)
        names = [t[0] for k in range(SHARDS) for t in _shard(tasks, k)]
        assert sorted(names) == sorted(t[0] for t in tasks) and len(set(names)) == len(tasks)
        assert sum(t[1] is sim_sweep.generated_task for t in tasks) == 5
        assert {t[2][1] for t in tasks if t[1] is sim_sweep.golden_task} == {
            c["id"] for c in catalog.load_manifest()["cases"]}
