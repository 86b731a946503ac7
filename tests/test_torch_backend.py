"""nvfp4_suite.kernels.torch.backend: golden vectors, the tensor entry point, TF32 left alone."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[torch]'")

from nvfp4_suite.kernels import get_backend  # noqa: E402
from nvfp4_suite.kernels.torch.backend import decode  # noqa: E402
from nvfp4_suite.reference.examples import random_problem  # noqa: E402
from nvfp4_suite.vectors.engine.check import check_golden  # noqa: E402


def test_torch_backend_passes_every_golden_vector():
    run = check_golden(get_backend("torch"))
    assert run.ok and run.count("PASS") == len(run.cases), run.text()


def test_tensor_entry_point_matches_the_backend():
    # On the device the backend picks (CUDA where there is one): the entry point
    # takes that device's tensors, and both give the same bytes there.
    p = random_problem(21, reqs=3, q_len=2, num_kv_heads=2, topk=6, layout="planar")
    b = get_backend("torch")
    dev = b._device()
    out = decode(torch.from_numpy(p.q).to(dev).to(torch.bfloat16), *(torch.from_numpy(a).to(dev) for a in
                 (p.pool, p.topk, p.block_table, p.seq_lens)), layout=p.layout,
                 num_kv_heads=p.num_kv_heads, q_len=p.q_len, sm_scale=p.sm_scale,
                 k_global_scale=p.k_global_scale, v_global_scale=p.v_global_scale)
    assert out.dtype == torch.bfloat16 and out.device.type == dev.type
    assert np.array_equal(out.float().cpu().numpy(), b(p))


def test_backend_restores_the_tf32_setting():
    # Start from True: the backend switches TF32 off, so only a restore brings it back.
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        before = torch.backends.cuda.matmul.allow_tf32
        get_backend("torch")(random_problem(2))
        assert torch.backends.cuda.matmul.allow_tf32 == before
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
