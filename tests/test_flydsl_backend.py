"""nvfp4_suite.kernels.flydsl.backend: the host side of the FlyDSL kernel.

What runs everywhere: the reasons ``available()`` gives, argument checks of
``decode`` before any launch, the workspace.
What runs only on a ROCm GPU (marker ``rocm``): the golden vectors and
generated problems at every split count and both XCD settings, and repeated
launches that must find the tickets back at zero.
"""

import types

import numpy as np
import pytest

from nvfp4_suite.kernels.flydsl import backend as FB
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.paged_cache import LAYOUTS

torch = pytest.importorskip("torch", reason="the FlyDSL host side takes torch tensors")


def _fake_torch(hip, available, arch="gfx942:sramecc+:xnack-"):
    props = types.SimpleNamespace(gcnArchName=arch)
    cuda = types.SimpleNamespace(is_available=lambda: available, current_device=lambda: 0,
                                 get_device_properties=lambda i: props)
    return types.SimpleNamespace(version=types.SimpleNamespace(hip=hip), cuda=cuda, __version__="x")


@pytest.mark.parametrize("hip, available, arch, words", [
    (None, False, "gfx942", "not a ROCm build"),
    ("6.4", False, "gfx942", "sees no ROCm GPU"),
    ("6.4", True, "gfx90a", "the GPU is gfx90a"),
])
def test_rocm_missing_names_what_is_missing(monkeypatch, hip, available, arch, words):
    monkeypatch.setattr(FB, "torch", _fake_torch(hip, available, arch))
    assert words in FB.rocm_missing()


@pytest.mark.parametrize("arch", ["gfx942:sramecc+:xnack-", "gfx950"])
def test_rocm_missing_is_none_on_the_targets(monkeypatch, arch):
    monkeypatch.setattr(FB, "torch", _fake_torch("6.4", True, arch))
    assert FB.rocm_missing() is None


def test_available_gives_a_reason_without_a_rocm_gpu():
    if torch.version.hip is not None and torch.cuda.is_available():
        pytest.skip("a ROCm GPU is present: availability is decided by the GPU's target")
    why = FB.FlydslBackend().available()
    assert why and ("ROCm" in why or "FlyDSL" in why)


def _args(p, **over):
    args = dict(
        q=torch.from_numpy(p.q).to(torch.bfloat16), pool=torch.from_numpy(p.pool),
        topk=torch.from_numpy(p.topk), block_table=torch.from_numpy(p.block_table),
        seq_lens=torch.from_numpy(p.seq_lens), num_kv_heads=p.num_kv_heads, q_len=p.q_len,
        sm_scale=p.sm_scale, k_global_scale=p.k_global_scale, v_global_scale=p.v_global_scale)
    args.update(over)
    return args


@pytest.mark.parametrize("change, words", [
    (lambda a: {"q": a["q"].float()}, "q must be contiguous bf16"),
    (lambda a: {"num_kv_heads": 1}, "num_kv_heads=1 needs H=16"),
    (lambda a: {"pool": a["pool"][:, :-8].contiguous()}, "pool must be contiguous uint8"),
    (lambda a: {"topk": a["topk"].long()}, "topk must be int32"),
    (lambda a: {"seq_lens": a["seq_lens"][:1]}, "rows=4 must equal reqs=1"),
    (lambda a: {"block_table": a["block_table"].long()}, "block_table must be int32"),
    (lambda a: {"v_global_scale": float("nan")}, "v_global_scale must be finite and > 0"),
    (lambda a: {"splits": 3}, "splits=3"),
    (lambda a: {"xcds": -1}, "xcds must be >= 0"),
    (lambda a: {"layout": "rows"}, "layout must be 'token_rows' or 'planar'"),
    (lambda a: {"out": torch.empty(1, dtype=torch.bfloat16)}, "out must be contiguous bf16"),
])
def test_decode_refuses_bad_arguments_by_name_before_launching(change, words):
    p = random_problem(4, reqs=2, q_len=2, num_kv_heads=2, topk=4)
    args = _args(p)
    args.update(change(args))
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        FB.decode(**args)


def test_workspace_keeps_one_zeroed_ticket_buffer_per_size():
    ws = FB.Workspace()
    t = ws.tickets("cpu", 6)
    assert t.dtype == torch.int32 and int(t.abs().sum()) == 0
    assert ws.tickets("cpu", 6) is t and ws.tickets("cpu", 7) is not t
    assert ws.partials("cpu", 6, 4).shape == (6, 4, 64, FB.PART_F)
    assert ws.table("cpu").dtype == torch.int32 and ws.table("cpu").shape == (256,)
    s = ws.scales("cpu", 0.5, 2.0)
    assert s.tolist() == [0.5, 2.0] and ws.scales("cpu", 0.5, 2.0) is s
    assert ws.scales("cpu", 0.25, 2.0).tolist() == [0.25, 2.0]


@pytest.fixture
def rocm_backend():
    b = FB.FlydslBackend()
    why = b.available()
    if why is not None:
        pytest.skip(f"needs a gfx942/gfx950 ROCm GPU with FlyDSL: {why}")
    return b


@pytest.mark.rocm
def test_flydsl_passes_every_golden_vector_at_every_split_and_placement(rocm_backend):
    from nvfp4_suite.vectors.engine.check import check_golden

    run = check_golden(rocm_backend)
    assert run.ok and run.count("PASS") == len(run.cases), run.text()


@pytest.mark.rocm
def test_flydsl_passes_generated_problems(rocm_backend):
    from nvfp4_suite.vectors.engine.check import check_generated

    gen = check_generated(rocm_backend, examples=300, seed=0)
    assert gen.ok, gen.failing.text if gen.failing else gen.stats


@pytest.mark.rocm
@pytest.mark.parametrize("xcds", [0, 8])
@pytest.mark.parametrize("splits", [2, 4, 8])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_repeated_split_launches_agree_and_leave_the_tickets_at_zero(rocm_backend, layout, splits, xcds):
    p = random_problem(11, reqs=5, q_len=3, num_kv_heads=2, topk=33, seq_lens=[900, 0, 4000, 129, 2],
                       layout=layout)
    first = rocm_backend(p, splits=splits, xcds=xcds)
    for _ in range(3):
        assert np.array_equal(rocm_backend(p, splits=splits, xcds=xcds).view(np.uint32), first.view(np.uint32))
    for key, t in rocm_backend.workspace._tickets.items():
        assert int(t.abs().sum()) == 0, key
