"""nvfp4_suite.vectors.simulator.bench: the simulator's benchmark with the golden
catalog's time per target, run on one small case; ``--help``."""

import os
import subprocess
import sys

import pytest

from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.simulator import bench as sim_bench


def test_help_runs_as_a_module():
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors.simulator.bench", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--golden" in r.stdout


def test_the_bench_prints_launch_and_catalog_figures(capsys):
    why = sim_missing(("gfx950",))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    cid = next(c["id"] for c in catalog.load_manifest()["cases"] if c["name"] == "invalid-rows")
    assert sim_bench.main(["--arch", "gfx950", "--golden", "--case", str(cid), "--jobs", "1",
                           "--no-instructions"]) == 0
    out = capsys.readouterr().out
    assert "instr/s" in out and "wave-instr/s" in out and "x floor" in out
    row = next(line for line in out.splitlines() if line.startswith("gfx950") and "CONFORMANT" in line)
    assert row.split()[3] == "1"  # one task: the invalid case


def test_the_bench_times_generated_problems(capsys):
    why = sim_missing(("gfx950",))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    assert sim_bench.main(["--arch", "gfx950", "--examples", "1", "--jobs", "1", "--no-instructions"]) == 0
    out = capsys.readouterr().out
    assert "1 generated problems per target" in out
    row = next(line for line in out.splitlines() if line.startswith("gfx950") and "CONFORMANT" in line)
    assert row.split()[3] == "1" and float(row.split()[2]) > 0  # one task, its CPU seconds
