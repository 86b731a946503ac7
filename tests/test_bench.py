"""vectors/cli/bench.py: the judging benchmark command."""

import subprocess
import sys

import pytest

from nvfp4_suite.vectors.cli import bench
from nvfp4_suite.vectors.engine.phases import PHASES, Timing
from nvfp4_suite.vectors.engine.verdict import SetupError


def _row(lines, spec):
    return next(line for line in lines if line.split()[0] == spec).split()


def test_the_documented_command_prints_a_row_per_default_backend_with_the_floor_at_one():
    # docs/gpus.md's command, with fewer problems.
    out = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", "bench", "--examples", "2"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("judging benchmark: 2 generated problems per backend, seed 3")
    emulate, reference = _row(lines, "emulate"), _row(lines, "reference")
    assert emulate[-1] == "1.00x" and emulate[1] == "seed"
    assert reference[1] == "exact" and float(reference[-1].rstrip("x")) > 0
    for row in (emulate, reference):
        assert row[2] == "host"
        shares = [float(x.rstrip("%")) for x in row[4:4 + len(PHASES)]]
        assert sum(shares) == pytest.approx(100, abs=0.5), row


def test_time_check_times_every_phase_and_counts_the_problems_judged():
    t = bench.time_check("emulate", 2, 3)
    assert t.problems == 2 and t.ok and t.arithmetic == "seed"
    assert set(t.seconds) == set(PHASES)
    assert all(t.seconds[p] > 0 for p in ("launches", "references", "judging", "reporting"))
    assert sum(t.seconds.values()) == pytest.approx(t.wall)


def test_a_failing_backend_is_timed_up_to_its_first_failure_unminimised_and_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    t = bench.time_check("nvfp4_suite.kernels.mutants:numpy_sm_scale_ignored", 20, 3)
    assert not t.ok and 1 <= t.problems < 20
    assert t.saved is not None and [str(p) for p in tmp_path.iterdir()] == [t.saved]
    assert "failed" in bench.table([t])[1]


def test_the_table_gives_each_backend_its_judging_cost_over_the_first_ones():
    def timing(spec, judging):
        return Timing(spec, "seed", 2, 4.0, {"generation": 0.0, "launches": 4.0 - judging, "references": 0.0,
                                              "judging": judging, "reporting": 0.0}, True)
    lines = bench.table([timing("a", 1.0), timing("b", 3.0)])
    assert _row(lines, "a")[-1] == "1.00x" and _row(lines, "b")[-1] == "3.00x"
    assert _row(lines, "b")[4 + PHASES.index("judging")] == "75.0%"


def test_a_backend_that_cannot_be_loaded_is_no_verdict_naming_it(capsys):
    out = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", "bench", "--examples", "1",
                          "--backend", "no.such.module:X"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "no.such.module" in out.stdout + out.stderr


def test_zero_examples_is_refused():
    class Args:
        backend, examples, seed = None, 0, 3
    with pytest.raises(SetupError, match="--examples 0"):
        bench.cmd_bench(Args())
