"""Every ``python -m`` entry point of the suite: its ``--help``, and one real
small task (on a GPU, under ``-m gpu``, for those that need one; the no-GPU
path is then exit 2 with the reason). ``kernels.flydsl.sim.*`` are tested
beside the simulator (tests/test_flydsl_sim_*.py); the small tasks of
``kernels.flydsl.resources`` (tests/test_flydsl_resources.py),
``vectors.simulator.sweep`` and ``vectors.simulator.bench`` are
in their own test files (tests/test_sim_sweep.py, test_sim_bench.py).

Found with ``grep -rln "__main__" --include=*.py reference kernels vectors``;
``test_every_entry_point_is_listed_here`` keeps the list complete."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ENTRY_POINTS = {
    "nvfp4_suite.vectors": "vectors/__main__.py",
    "nvfp4_suite.vectors.simulator.sweep": "vectors/simulator/sweep.py",
    "nvfp4_suite.vectors.simulator.bench": "vectors/simulator/bench.py",
    "nvfp4_suite.vectors.simulator.coverage": "vectors/simulator/coverage.py",
    "nvfp4_suite.kernels.protocol": "kernels/protocol.py",
    "nvfp4_suite.kernels.bench": "kernels/bench.py",
    "nvfp4_suite.kernels.triton.sweep": "kernels/triton/sweep.py",
    "nvfp4_suite.kernels.flydsl.resources": "kernels/flydsl/resources.py",
    "nvfp4_suite.reference.bench": "reference/bench.py",
    "nvfp4_suite.kernels.torch.bench": "kernels/torch/bench.py",
}


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _m(module, *args, timeout=600, **env):
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=timeout)


# Modules run as `python -m` by the suite itself, never by a user: the isolation worker
# (started by nvfp4_suite.vectors.engine.isolate with a socket's file descriptor; tests/test_isolate.py runs it).
INTERNAL = {"vectors/engine/isolate.py"}


def test_every_entry_point_is_listed_here():
    found = {str(p.relative_to(ROOT)) for top in ("reference", "kernels", "vectors") for p in (ROOT / top).rglob("*.py")
             if (p.name == "__main__.py" or "__main__" in p.read_text()) and "flydsl/sim" not in p.as_posix()}
    assert found == set(ENTRY_POINTS.values()) | INTERNAL


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_describes_the_command(module):
    r = _m(module, "--help", timeout=120)
    assert r.returncode == 0 and r.stdout.startswith(f"usage: python -m {module}"), r.stdout + r.stderr
    description = r.stdout.split("\n\n")[1]
    assert not description.startswith(("options:", "positional arguments:")), f"{module} --help has no description"


def test_vectors_lists_the_cases_of_one_bug_class():
    r = _m("nvfp4_suite.vectors", "list", "--flag", "stale-tail", timeout=120)
    assert r.returncode == 0 and r.stdout.count("stale-tail") >= 2, r.stdout + r.stderr


def test_vectors_bugs_prints_the_triton_mutants():
    a = _m("nvfp4_suite.vectors", "bugs", "--mutants", "triton", timeout=120)
    assert a.returncode == 0
    assert a.stdout.split() == [f"nvfp4_suite.kernels.triton.decode:{name}"
                                for name in ("causal", "v_scale_linear", "minus_one", "merge_no_rescale")]


@pytest.mark.parametrize("argv", [["nvfp4_suite.vectors", "bugs"]])
def test_bugs_under_head_stops_quietly(argv):
    # `| head -1`: the reader takes one line and goes away while the command still writes.
    p = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().startswith("first-invalid-nan: ")
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) in (0, 2) and "Traceback" not in err and "BrokenPipeError" not in err, err


def test_mutant_specs_load_without_the_tests_folder_on_the_path(tmp_path):
    # From another directory, PYTHONPATH unset: the mutants are package code.
    case = ROOT / "vectors/data/010-stale-tail-127.npz"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", "replay", str(case), "--backend",
                        "nvfp4_suite.kernels.mutants:numpy_stale_tail", "--splits", "1"], cwd=tmp_path,
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1 and "backend: mutant:stale_tail" in r.stdout and "FAIL" in r.stdout, r.stdout + r.stderr


def test_serving_bench_times_one_problem_on_the_cpu():
    pytest.importorskip("torch")
    # The first bench problem is the small one (64 rows x Hkv 2 x TOPK 16): the numpy
    # reference, the torch reference and the torch backend, on the CPU; the two
    # references' intervals must be equal.
    r = _m("nvfp4_suite.vectors", "serving-bench", "--backend", "torch", "--examples", "1", "--numpy-examples", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    row = r.stdout.strip().splitlines()[-1].split()
    assert row[:4] == ["1", "64", "2", "16"] and row[-1] == "equal", r.stdout


def test_serving_refuses_an_unavailable_backend_with_exit_2():
    r = _m("nvfp4_suite.vectors", "check", "--shape", "serving", "--backend", "flydsl", "--examples", "1",
           timeout=120)
    assert r.returncode == 2 and "is not available here" in r.stderr, r.stdout + r.stderr
    r = _m("nvfp4_suite.vectors", "serving-bench", "--backend", "flydsl", "--examples", "1", timeout=120)
    assert r.returncode == 2 and "is not available here" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("old, new", [("serving", "check --shape serving"), ("signatures", "engine.blame"),
                                      ("bugs", "vectors bugs"), ("sim_sweep", "simulator.sweep"),
                                      ("io", "catalog.casefile")])
def test_an_old_module_path_is_refused_naming_its_new_home(old, new):
    r = _m(f"nvfp4_suite.vectors.{old}", "--help", timeout=120)
    assert r.returncode == 2 and f"nvfp4_suite.vectors.{old} has moved" in r.stderr and new in r.stderr, r.stderr
    r = _m("nvfp4_suite.vectors", timeout=120)  # the package itself still runs (usage error: no command)
    assert r.returncode == 2
    with pytest.raises(ModuleNotFoundError, match=f"use .*{new.split()[-1]}"):
        __import__(f"nvfp4_suite.vectors.{old}")


def test_protocol_prints_the_readme_section():
    from nvfp4_suite.kernels.protocol import README_SECTION

    r = _m("nvfp4_suite.kernels.protocol", timeout=120)
    assert r.returncode == 0 and r.stdout == README_SECTION


def test_reference_bench_times_both_references_against_the_floors():
    # 4 requests, not 64: the command's lines are under test here, not the speed.
    r = _m("nvfp4_suite.reference.bench", "--reps", "1", "--what", "emulate,oracle", "--reqs", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line.split()}
    assert float(lines["floor"][2]) == 1.0 and float(lines["emulate"][2]) > 0 and float(lines["oracle"][2]) > 0
    # The oracle on a step with 2..6 of 16 slots valid, against the floor over those keys alone.
    assert float(lines["floor-valid"][2]) == 1.0 and float(lines["oracle-valid"][2]) > 0
    assert float(lines["floor64-valid"][2]) > 0 and float(lines["oracle-arith"][2]) > 0
    keys = re.search(r"\((\d+) of 2048 keys a row on average\)", r.stdout)
    assert keys and 2 * 128 <= int(keys.group(1)) <= 6 * 128, r.stdout
    assert r.stdout.startswith("BLAS threads: "), r.stdout


@pytest.mark.parametrize("args, says", [(["--reps", "0"], "--reps 0"), (["--reqs", "0"], "--reqs 0"),
                                        (["--what", "oracle,emulat"], "unknown 'emulat'")])
def test_reference_bench_refuses_bad_options_with_exit_2(args, says):
    r = _m("nvfp4_suite.reference.bench", *args, timeout=120)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr


def _bench_rows(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in stdout.splitlines() if line.split()}


def test_torch_bench_times_the_references_on_the_cpu_device():
    pytest.importorskip("torch")
    r = _m("nvfp4_suite.kernels.torch.bench", "--device", "cpu", "--reps", "1", "--reqs", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("torch ") and " on cpu (the CPU); torch threads: " in r.stdout, r.stdout
    rows = _bench_rows(r.stdout)
    for what in ("floor", "oracle", "emulate", "floor-valid", "floor64-valid", "oracle-arith", "oracle-valid"):
        assert float(rows[what][2]) > 0 and rows[what][3] == "-", r.stdout  # no allocator count on the CPU
    assert float(rows["floor"][2]) == float(rows["floor-valid"][2]) == 1.0


def test_torch_bench_without_the_device_exits_2_with_the_reason():
    pytest.importorskip("torch")
    r = _m("nvfp4_suite.kernels.torch.bench", "--device", "mps", timeout=120)
    assert r.returncode == 2 and "runs on cpu or cuda" in r.stderr and "Traceback" not in r.stderr, r.stderr
    for bad in ("nonsense", ""):
        r = _m("nvfp4_suite.kernels.torch.bench", "--device", bad, timeout=120)
        assert r.returncode == 2 and f"--device {bad!r}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    if _cuda():
        r = _m("nvfp4_suite.kernels.torch.bench", "--device", "cuda:64", timeout=120)
        assert r.returncode == 2 and "CUDA/ROCm device(s)" in r.stderr, r.stderr
    else:
        r = _m("nvfp4_suite.kernels.torch.bench", "--device", "cuda", timeout=120)
        assert r.returncode == 2 and "no CUDA/ROCm device is visible" in r.stderr, r.stderr


@pytest.mark.gpu
def test_torch_bench_times_the_references_on_the_gpu():
    if not _cuda():
        pytest.skip("needs a CUDA or ROCm GPU")
    r = _m("nvfp4_suite.kernels.torch.bench", "--reps", "1", "--reqs", "8")
    assert r.returncode == 0 and " on cuda (" in r.stdout.splitlines()[0] and "TF32 matmul: " in r.stdout, \
        r.stdout + r.stderr
    rows = _bench_rows(r.stdout)
    assert float(rows["oracle-valid"][2]) > 0 and float(rows["oracle-valid"][3]) > 0, r.stdout  # device MiB
    assert float(rows["oracle-arith"][2]) > 0, r.stdout


def test_reference_bench_names_the_blas_thread_setting_it_ran_with():
    from nvfp4_suite.reference.bench import blas_threads

    assert blas_threads({"OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "1"}) == "BLAS threads: OPENBLAS_NUM_THREADS=1"
    assert blas_threads({"OMP_NUM_THREADS": "4"}) == "BLAS threads: OMP_NUM_THREADS=4"
    assert "the library's default" in blas_threads({}) and "OPENBLAS_NUM_THREADS=1" in blas_threads({})


@pytest.mark.parametrize("module", ["nvfp4_suite.kernels.bench", "nvfp4_suite.kernels.triton.sweep"])
def test_gpu_commands_without_a_gpu_exit_2_with_the_reason(module):
    if _cuda():
        pytest.skip("a GPU is present: the commands run (test_gpu_commands_run_small)")
    r = _m(module, timeout=120)
    assert r.returncode == 2 and "no CUDA/ROCm device" in r.stdout + r.stderr and "Traceback" not in r.stderr, \
        r.stdout + r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("args", [["nvfp4_suite.kernels.bench", "--topk", "16", "--reps", "1", "--calls", "1"],
                                  ["nvfp4_suite.kernels.triton.sweep", "--sizes", "64x1x1", "--deq", "1",
                                   "--warps", "4", "--splits", "1"]])
def test_gpu_commands_run_small(args):
    if not _cuda():
        pytest.skip("needs a CUDA or ROCm GPU")
    r = _m(*args)
    assert r.returncode == 0 and "FAILED" not in r.stdout and " us" in r.stdout, r.stdout + r.stderr


