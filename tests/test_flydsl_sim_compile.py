"""nvfp4_suite.kernels.flydsl.sim.compile: the compile cache's names and lookup,
and its command line (``--help``, one configuration's path)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvfp4_suite.kernels.flydsl.sim import compile as C
from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing


def test_help_runs_as_a_module():
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.sim.compile", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--topk" in r.stdout


def test_a_cached_configuration_is_found_only_with_its_argument_order(tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(tmp_path))
    name = C.stem("gfx950", 16, 2, 8, "planar", "ticket_not_reset")
    assert name.startswith("gfx950-k16-s2-x8-planar-ticket_not_reset-")
    (tmp_path / f"{name}-fly9.s").write_text("")
    assert C.cached(name) is None
    (tmp_path / f"{name}-fly9.json").write_text('{"launch_args": [1, 0]}')
    assert C.cached(name) == tmp_path / f"{name}-fly9.s"
    assert C.arg_order(C.cached(name)) == [1, 0]


def test_the_command_prints_the_path_of_a_compiled_configuration():
    why = sim_missing(("gfx950",), topks=(16,))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.sim.compile", "--arch", "gfx950",
                        "--topk", "16", "--splits", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.name.startswith(C.stem("gfx950", 16, 1)) and "v_mfma" in path.read_text()
