"""nvfp4_suite.kernels.flydsl.sim.bench: the per-instruction and per-launch
tables with their floors; ``--help``."""

import os
import subprocess
import sys

import pytest

from nvfp4_suite.kernels.flydsl.sim import bench
from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing
from nvfp4_suite.kernels.flydsl.targets import ARCHS


def test_help_runs_as_a_module():
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.sim.bench", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--arch" in r.stdout


@pytest.mark.parametrize("arch", ARCHS)
def test_every_bench_instruction_executes_on_its_target(arch):
    for text, where in bench.INSTRUCTIONS.items():
        if arch in where:
            assert bench.instruction_us(arch, text, n=3) > 0


def test_the_bench_prints_both_tables_with_their_floors(capsys):
    why = sim_missing(("gfx950",))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    assert bench.main(["--arch", "gfx950", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "floor: numpy" in out and "v_mfma_f32_16x16x32_bf16" in out and "best of 2 each" in out
    row = out.splitlines()[-1].split()
    assert row[0] == "gfx950" and float(row[2]) > 0  # the floor, in ms
    assert int(row[3]) > 10_000 and int(row[4]) >= int(row[3])  # steps, wave-instructions
    assert float(row[7]) == pytest.approx(float(row[1]) / float(row[2]) * 1e3, rel=0.05)  # x floor


def test_the_bench_refuses_fewer_than_one_round(capsys):
    assert bench.main(["--arch", "gfx950", "--rounds", "0"]) == 2
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err
