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
    assert bench.main(["--arch", "gfx950"]) == 0
    out = capsys.readouterr().out
    assert "floor: numpy" in out and "v_mfma_f32_16x16x32_bf16" in out
    row = out.splitlines()[-1].split()
    assert row[0] == "gfx950" and int(row[2]) > 10_000 and int(row[3]) >= int(row[2])  # steps, wave-instructions
