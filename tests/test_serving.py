"""nvfp4_suite.vectors.engine.serving: the serving-size problem family and its check.

CPU (CI): the drawn shapes stay in the serving ranges (no pool is built),
small problems of the same builder hold every slot state and are valid, the
check passes correct backends and fails a mutant and a backend that writes its
pool. ``gpu``: the serving-size check itself, torch and triton; ``rocm``:
the same for FlyDSL.
"""

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[torch]'")

from nvfp4_suite.kernels import (  # noqa: E402
    Capabilities,
    get_backend,
    mutants,  # noqa: E402
)
from nvfp4_suite.reference.paged_cache import BLK, page_bytes, page_views  # noqa: E402
from nvfp4_suite.vectors.catalog.cases import LOUD_SCALE  # noqa: E402
from nvfp4_suite.vectors.engine import serving as S  # noqa: E402

SMALL = S.Shape(reqs=5, q_len=2, num_kv_heads=2, topk=9, num_pages=400, max_blocks=40, layout="planar")
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU (torch.cuda)")


pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def test_drawn_shapes_stay_in_the_serving_ranges():
    rng = np.random.default_rng(0)
    seen_big = 0
    for i in range(400):
        sh = S.draw_shape(rng, big_pool=True if i % 4 == 0 else None)
        assert 64 <= sh.rows <= 256 and 1 <= sh.q_len <= 4
        assert 1 <= sh.num_kv_heads <= 8 and 1 <= sh.topk <= 64
        assert sh.max_blocks in S.MAX_BLOCKS and sh.pool_bytes <= S.MAX_POOL_BYTES
        if sh.pool_bytes > S.FOUR_GIB:
            seen_big += 1
        else:
            assert 10**4 <= sh.num_pages <= 10**5
    assert seen_big >= 100
    big = S.draw_shape(np.random.default_rng(1), big_pool=True)
    pb = page_bytes(big.num_kv_heads)
    assert big.pool_bytes > S.FOUR_GIB and max(S._top_pages(big)) * pb > S.FOUR_GIB


def test_same_seed_same_bytes_and_the_problem_is_valid():
    a, b = S.serving_problem(3, SMALL), S.serving_problem(3, SMALL)
    a.validate()
    for f in ("q", "pool", "topk", "block_table", "seq_lens"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert not np.array_equal(S.serving_problem(4, SMALL).topk, a.topk)


def test_small_problems_hold_every_slot_state_and_read_the_top_pages():
    p = S.serving_problem(11, dataclasses.replace(SMALL, reqs=12))
    valid, ids = p.valid_slots, p.topk
    assert valid.any() and (ids == -1).any() and ((ids >= 0) & ~valid).any()
    assert (p.positions < 0).any(), "no padding row"
    assert (~valid.any(axis=-1) & (p.positions >= 0)[None, :]).any(), "no live row without a valid slot"
    read = set(p.slot_pages()[valid].tolist())
    assert set(S._top_pages(SMALL)) <= read
    # Future slots mostly resolve to real pages: a kernel reading one reads data, not a fault.
    req = np.broadcast_to((np.arange(p.rows) // p.q_len)[None, :, None], ids.shape)
    fut = (ids >= 0) & ~valid & (ids < p.block_table.shape[1])
    assert (p.block_table[req[fut], ids[fut]] >= 0).mean() > 0.5


def test_unread_slabs_are_poisoned_and_last_pages_have_loud_tails():
    p = S.serving_problem(5, SMALL)
    v = page_views(p.pool, p.layout, p.num_kv_heads)
    read = np.zeros((p.num_pages, p.num_kv_heads), bool)
    heads = np.broadcast_to(np.arange(p.num_kv_heads)[:, None, None], p.topk.shape)
    read[p.slot_pages()[p.valid_slots], heads[p.valid_slots]] = True
    assert (v.k_scale[~read] == S.POISON).all()
    r = next(r for r, sl in enumerate(p.seq_lens) if sl % BLK)
    sl = int(p.seq_lens[r])
    last = p.block_table[r, sl // BLK]
    assert (v.k_scale[last, :, sl % BLK:] == LOUD_SCALE).all()


@pytest.mark.parametrize("name", ["torch", "emulate"])
def test_check_passes_correct_backends_on_small_shapes(name):
    run = S.check_serving(get_backend(name), 2, seed=1, shape=SMALL)
    assert (run.n, run.failed) == (2, 0), "\n".join(run.lines)


@pytest.mark.parametrize("bug", ["stale_tail", "v_scale_linear"])
def test_check_fails_a_mutant(bug):
    run = S.check_serving(mutants.NumpyKernel(bug), 1, seed=2, shape=SMALL)
    assert run.failed == 1 and "FAIL" in run.lines[0], "\n".join(run.lines)


class PoolWriter:
    """The torch backend, but it zeroes one page of the pool and empties every slot first."""

    name = "pool-writer"
    geometry = None
    capabilities = Capabilities(splits=(1,))

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        problem.pool[0] = 0
        problem.topk[problem.topk >= 0] = -1
        return get_backend("torch")(problem, splits=splits)


def test_check_names_the_inputs_a_backend_modified():
    run = S.check_serving(PoolWriter(), 1, seed=3, shape=SMALL)
    assert run.failed == 1
    assert "'pool' (" in run.lines[0] and "'topk' (" in run.lines[0], run.lines[0]


def test_bench_times_both_references_and_finds_their_intervals_equal():
    # The bench's first problem is its smallest (0.34 GiB); on the CPU the
    # kernel is not timed apart from the call.
    head, row = S.bench(get_backend("torch"), examples=1, seed=0, numpy_examples=1)[1:]
    assert head.split("|")[1].split() == ["numpy", "ref", "s", "torch", "ref", "s", "backend", "s", "kernel", "ms"]
    numpy_s, torch_s, call_s, kernel_ms = row.split("|")[1].split()
    assert row.split("|")[2].strip() == "equal", row
    assert float(numpy_s) > 0 and float(torch_s) > 0 and float(call_s) > 0
    if not torch.cuda.is_available():
        assert kernel_ms == "-"

def test_describe_names_the_serving_facts():
    text = S.describe(S.serving_problem(3, SMALL))
    for word in ("rows 10", "Hkv 2", "TOPK 9", "planar", "400 pages", "40 blocks", "valid", "future"):
        assert word in text


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("name", ["torch", "triton"])
def test_serving_size_check_passes_on_the_gpu(name):
    b = get_backend(name)
    if b.available():
        pytest.skip(f"{name}: {b.available()}")
    run = S.check_serving(b, 1, seed=0)
    print("\n".join(run.lines))
    assert (run.n, run.failed) == (1, 0), "\n".join(run.lines)


@pytest.mark.rocm
def test_serving_size_check_passes_on_rocm():
    b = get_backend("flydsl")
    if b.available():
        pytest.skip(f"flydsl: {b.available()}")
    run = S.check_serving(b, 2, seed=0)
    assert (run.n, run.failed) == (2, 0), "\n".join(run.lines)
