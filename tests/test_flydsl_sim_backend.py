"""nvfp4_suite.kernels.flydsl.sim.backend: the compiled FlyDSL kernel run by the simulator
(``flydsl-sim-gfx942``/``-gfx950``) against the emulation of its arithmetic.

This is the check of the suite's main kernel that a CPU can make. The CI
subset (a few minutes): for both targets, small generated problems at every
split count, both layouts, XCD placement 8, TOPK 1/33/64, q_len > 1 and Hkv
> 1; a golden subset; selected pages beyond 4 GiB of pool; ``v_exp_f32``
off by one ulp either way still inside the tolerance. The full catalog and hundreds of generated problems per target
are run by hand (``python -m nvfp4_suite.vectors check --backend flydsl-sim-gfx950``).
The kernel mutants are caught by golden cases of their own class in
``tests/test_bugs.py``.
Compiling needs FlyDSL and ``ld.lld`` >= 19: without them these tests skip
with the reason, unless ``NVFP4_REQUIRE_COMPILE=1`` (CI) makes that a failure.
"""

import os

import numpy as np
import pytest

from nvfp4_suite.kernels.flydsl.sim import backend as SB
from nvfp4_suite.kernels.flydsl.sim import compile as C
from nvfp4_suite.kernels.flydsl.sim.program import parse_program
from nvfp4_suite.kernels.flydsl.sim.wave import SimError
from nvfp4_suite.kernels.flydsl.targets import ARCHS
from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.paged_cache import page_bytes
from nvfp4_suite.vectors.engine.harness import run_case


@pytest.fixture(scope="module")
def toolchain():
    why = SB.sim_missing()
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)


def test_kernargs_are_packed_at_the_metadata_offsets_in_launch_order():
    text = """\t.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
\t.globl\tk
k:
\ts_endpgm
.Lfunc_end0:
\t.amdhsa_kernel k
\t\t.amdhsa_kernarg_size 24
\t.end_amdhsa_kernel
\t.amdgpu_metadata
  - .args:
      - .offset:         0
        .size:           4
      - .offset:         8
        .size:           8
      - .offset:         16
        .size:           4
    .name:           k
\t.end_amdgpu_metadata
"""
    prog = parse_program(text)
    seg = SB.pack_kernargs(prog, (1, 0, 2), [0x1122334455667788, 7, 1.5])
    assert len(seg) == 24
    assert int.from_bytes(seg[0:4], "little") == 7
    assert seg[8:16] == (0x1122334455667788).to_bytes(8, "little")
    assert np.frombuffer(seg[16:20], np.float32)[0] == 1.5
    with pytest.raises(SimError, match="3 kernel arguments"):
        SB.pack_kernargs(prog, (0, 1), [1, 2])


def _check(b, p: DecodeProblem, splits: int, xcds: int = 0):
    _, rep = run_case(b, p, Launch(splits, xcds))
    assert rep.passed, rep.details()
    return rep


CONFIGS = [  # (seed, splits, xcds, problem keywords): small, one trait each
    (2, 2, 0, dict(reqs=1, q_len=2, num_kv_heads=2, topk=8)),
    (3, 8, 0, dict(reqs=1, topk=33, seq_lens=[33 * 128 - 5])),
    (4, 1, 8, dict(reqs=1, q_len=3, topk=4, layout="planar")),
    (5, 4, 0, dict(reqs=2, topk=1)),
    (6, 2, 0, dict(reqs=1, topk=64, seq_lens=[40 * 128], invalid_fraction=0.5)),
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("seed, splits, xcds, kw", CONFIGS)
def test_the_simulated_kernel_matches_the_emulation_on_generated_problems(toolchain, arch, seed, splits, xcds, kw):
    _check(SB.FlydslSimBackend(arch), random_problem(seed, **kw), splits, xcds)


def test_selected_pages_beyond_4_gib_of_pool_are_read(toolchain):
    base = random_problem(8, reqs=1, topk=4, seq_lens=[4 * 128], spare_pages=0, invalid_fraction=0.0)
    pb = page_bytes(base.num_kv_heads)
    pages = (5 << 30) // pb + 4
    # np.zeros is not resident until written: only the pages used cost memory.
    pool = np.zeros((pages, pb), np.uint8)
    bt = base.block_table.copy()
    for j, page in enumerate(bt[0, :4]):
        pool[pages - 4 + j] = base.pool[page]
        bt[0, j] = pages - 4 + j
    far = DecodeProblem(**{**base.__dict__, "pool": pool, "block_table": bt})
    assert int(bt[0, 0]) * pb > 2**32
    b = SB.FlydslSimBackend("gfx950")
    # The harness copies a problem's arrays for each run (to catch a backend
    # that writes its inputs); a 5 GiB pool is called directly instead.
    _check(b, base, 1)
    assert np.array_equal(b(far, splits=1).view(np.uint32), b(base, splits=1).view(np.uint32))


@pytest.mark.parametrize("ulps", [-1, 1])
def test_the_tolerance_holds_when_exp2_is_off_by_one_ulp(toolchain, ulps):
    b = SB.FlydslSimBackend("gfx950", options={"exp_ulps": ulps})
    _check(b, random_problem(9, reqs=1, q_len=2, topk=8, seq_lens=[8 * 128]), 2)


def test_workgroup_orders_agree_bitwise_and_tickets_return_to_zero(toolchain):
    p = random_problem(11, reqs=1, num_kv_heads=2, topk=8)
    ws = SB.SimWorkspace()
    outs = [SB.run(p, "gfx950", splits=4, order=o, workspace=ws)["out"]
            for o in ("forward", "reverse", "shuffle:1", "shuffle:2")]
    for o in outs[1:]:
        assert np.array_equal(o.view(np.uint32), outs[0].view(np.uint32))
    assert not ws.tickets(2).any()


# --- availability: what a call needs, named when missing ------------------------

def _no_flydsl(monkeypatch, bundle=None):
    """No FlyDSL here, and ``bundle`` (None: no shipped archive) as the compiled bundle."""
    monkeypatch.setattr(SB, "flydsl_missing", lambda: "FlyDSL is not installed (test)")
    monkeypatch.setattr(C, "BUNDLE", bundle or C.BUNDLE.with_name("absent.tar.xz"))


def _fake_cache(folder, names):
    for n in names:
        (folder / f"{n}-fly0.0.s").write_text("")
        (folder / f"{n}-fly0.0.json").write_text('{"launch_args": []}')


def test_an_incomplete_compile_cache_is_unavailable_naming_the_missing_configurations(tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(tmp_path))
    _no_flydsl(monkeypatch)
    need = [C.stem("gfx950", t, s, x, lay) for t in SB.TOPK_BUCKETS for s in SB.SPLITS for x in SB.XCDS
            for lay in SB.LAYOUTS]
    _fake_cache(tmp_path, need[:-1])
    why = SB.FlydslSimBackend("gfx950").available()
    assert why is not None and "FlyDSL is not installed (test)" in why and need[-1] in why
    assert f"which lack 1 of the {len(need)}" in why
    _fake_cache(tmp_path, need[-1:])
    assert SB.FlydslSimBackend("gfx950").available() is None
    # The other target and a mutant need their own compiles.
    assert "which lack " in SB.FlydslSimBackend("gfx942").available()
    assert "which lack " in SB.FlydslSimBackend("gfx950", mutant="ticket_not_reset").available()


def test_without_flydsl_or_a_cache_the_shipped_bundle_makes_both_targets_available(tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(tmp_path))
    _no_flydsl(monkeypatch, bundle=C.BUNDLE)
    assert [SB.FlydslSimBackend(a).available() for a in ARCHS] == [None, None]
    assert not list(tmp_path.iterdir())  # looking copies nothing


def test_check_with_an_incomplete_cache_is_exit_2_with_the_reason_not_a_verdict(tmp_path, monkeypatch, capsys):
    from nvfp4_suite.vectors.cli import main

    monkeypatch.setenv("NVFP4_SIM_CACHE", str(tmp_path))
    _no_flydsl(monkeypatch)
    _fake_cache(tmp_path, [C.stem("gfx950", 16, 1, 0, "token_rows")])
    assert main(["check", "--backend", "flydsl-sim-gfx950", "--examples", "1"]) == 2
    err = capsys.readouterr()
    assert "not available here" in err.err and "which lack " in err.err
    assert "CONFORMANT" not in err.out + err.err


def test_flydsl_whose_compiler_cannot_import_is_missing_with_the_reason(monkeypatch):
    import sys

    from nvfp4_suite.kernels.flydsl import host

    pytest.importorskip("flydsl")
    monkeypatch.setitem(sys.modules, "flydsl.compiler", None)
    why = host.flydsl_missing()
    assert why is not None and "compiler" in why and "torch" in why


def test_the_simulator_and_the_resource_check_import_neither_torch_nor_vectors():
    import subprocess
    import sys

    code = ("import sys\n"
            "import nvfp4_suite.kernels.flydsl.sim.backend, nvfp4_suite.kernels.flydsl.sim.bench\n"
            "import nvfp4_suite.kernels.flydsl.resources, nvfp4_suite.kernels.flydsl.host\n"
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('nvfp4_suite.vectors', 'flydsl'))]\n"
            "print(bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
