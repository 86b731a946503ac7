"""Serving-size problems and their check on a GPU: ``python -m nvfp4_suite.vectors.engine.serving``.

The generated problems of ``nvfp4_suite.vectors.engine.strategies`` are small because the numpy
reference runs on the host. The bugs of a kernel at the shapes it serves live
elsewhere: grid and offset overflows, pools of many gigabytes, long block
tables, full TOPK 64, large Hkv. ``serving_problem`` builds such a step
(64-256 rows, Hkv up to 8, TOPK up to 64, q_len up to 4, pools of 10**4-10**5
pages, up to 8192 blocks a request), and ``check_serving`` judges a backend
on them with the torch references of ``nvfp4_suite.kernels.torch.reference`` (the
emulation of the backend's geometry, or the exact oracle for the exact
class) and ``nvfp4_suite.reference.compare``'s acceptance intervals, on the GPU when
torch sees one: seconds per problem where numpy takes minutes.

Every problem holds every slot state (valid, ``-1``, future ids whose block
table entries point at real pages of other requests), padding rows and
empty requests, rows with no valid slot, and slots whose pages lie at the top
of the pool: past 2**31 and 2**32 bytes when the pool is that large (the
first problem of a check always is). Unread slabs hold NaN scale bytes and
the tail of every request's last page past ``seq_len`` holds the largest
codes and scale 448, so a read of either moves the output.

Each problem runs through ``nvfp4_suite.vectors.engine.harness.run_case``, as every
check does: two calls on private copies of the inputs (the pool included:
gigabytes of host memory for a moment), compared byte for byte afterwards,
and the two outputs bitwise.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from nvfp4_suite.kernels.protocol import Launch, Limits
from nvfp4_suite.reference import LAYOUTS, DecodeProblem, bf16_round
from nvfp4_suite.reference.paged_cache import BLK, D, page_bytes, page_views
from nvfp4_suite.reference.problem import HG, TOPK_MAX, read_slabs, row_positions
from nvfp4_suite.vectors.catalog.cases import write_loud_tail
from nvfp4_suite.vectors.engine.strategies import SM_SCALE_FACTORS, compacted_slot_list, scale_bytes

ROWS = (64, 256)
MAX_KV_HEADS = 8
MAX_Q_LEN = 4
PAGES = (10**4, 10**5)
# Pools above this are not drawn (host and device memory, and the time to fill them).
MAX_POOL_BYTES = 6 * 2**30
FOUR_GIB = 2**32
# Context lengths in blocks (128 tokens): 32 Ki, 128 Ki and 1 Mi tokens.
MAX_BLOCKS = (256, 1024, 8192)
# Poison of unread slabs: E4M3 NaN scale bytes (and code -6).
POISON = 0xFF


@dataclasses.dataclass(frozen=True)
class Shape:
    """The structure of one serving problem (everything but the bytes).

    rows = reqs * q_len in ``ROWS``; num_kv_heads 1..8; topk 1..64; q_len 1..4;
    num_pages; max_blocks, block-table columns; layout; scale_regime
    ``plain``/``wide``; q_std; k_global, v_global.
    """

    reqs: int
    q_len: int
    num_kv_heads: int
    topk: int
    num_pages: int
    max_blocks: int
    layout: str
    scale_regime: str = "plain"
    q_std: float = 1.0
    k_global: float = 0.05
    v_global: float = 0.02

    @property
    def rows(self) -> int:
        """Query rows: reqs * q_len."""
        return self.reqs * self.q_len

    @property
    def pool_bytes(self) -> int:
        """Bytes of the pool."""
        return self.num_pages * page_bytes(self.num_kv_heads)


def draw_shape(rng: np.random.Generator, *, big_pool: bool | None = None, layouts=LAYOUTS,
               limits: Limits | None = None) -> Shape:
    """A serving shape from ``rng``. big_pool True: a pool above 4 GiB;
    None: drawn (one in two). layouts: the page layouts to draw from.
    limits: a backend's ``Limits``, whose KV heads, TOPK and q_len the shape
    keeps within (the rows are serving-size whatever ``limits.requests`` says:
    they are what this check is for)."""
    if big_pool is None:
        big_pool = bool(rng.integers(0, 2))
    most = limits or Limits(requests=ROWS[1], kv_heads=MAX_KV_HEADS, topk=TOPK_MAX, q_len=MAX_Q_LEN)
    q_len = min(int(rng.integers(1, MAX_Q_LEN + 1)), most.q_len)
    reqs = int(rng.integers(-(-ROWS[0] // q_len), ROWS[1] // q_len + 1))
    hk = min(int(rng.choice([4, 8])) if big_pool else int(rng.integers(1, MAX_KV_HEADS + 1)), most.kv_heads)
    topk = min(int(rng.choice([TOPK_MAX, TOPK_MAX, 33, 16, int(rng.integers(1, TOPK_MAX + 1))])), most.topk)
    pb = page_bytes(hk)
    cap = MAX_POOL_BYTES // pb
    if big_pool:
        pages = int(rng.integers(FOUR_GIB // pb + 8, cap + 1))
    else:
        pages = int(rng.integers(PAGES[0], min(PAGES[1], cap) + 1))
    return Shape(
        reqs=reqs, q_len=q_len, num_kv_heads=hk, topk=topk, num_pages=pages,
        max_blocks=int(rng.choice(MAX_BLOCKS)), layout=str(rng.choice(list(layouts))),
        scale_regime=str(rng.choice(["plain", "wide"])), q_std=float(rng.choice([0.5, 2.0, 16.0])),
        k_global=float(rng.choice([0.05, 0.5])), v_global=float(rng.choice([0.01, 1.0])),
    )


def _seq_lens(rng, shape: Shape) -> np.ndarray:
    """Context lengths up to the block table's width, with padding and empty requests."""
    top = shape.max_blocks * BLK
    s = rng.integers(1, top + 1, shape.reqs)
    # The longest request fills the table; special lengths at block edges.
    s[0] = top
    special = [0, 1, BLK - 1, BLK, BLK + 1, max(shape.q_len - 1, 0), top - 1]
    n = min(len(special), shape.reqs - 1)
    s[1:1 + n] = rng.permutation(special)[:n]
    return rng.permutation(s).astype(np.int32)


def _slot_list(rng, nvis: int, topk: int, mode: int, compacted: bool) -> np.ndarray:
    """One (KV head, row) slot list: distinct valid ids in 0..nvis-1 (the row's own
    block among them in most lists), ``-1`` and future ids, shuffled.
    mode 0: mixed; 1: valid slots only; 2: no valid slot. compacted: the
    compacted domain's list instead (``min(topk, nvis)`` distinct visible ids
    ascending, then -1: ``nvfp4_suite.reference.problem.outside_slot_domain``)."""
    if compacted:
        return compacted_slot_list(rng, nvis, topk)
    n_valid = 0 if mode == 2 or nvis == 0 else min(nvis, topk if mode == 1 else int(rng.integers(1, topk + 1)))
    valid = np.zeros(0, np.int64)
    if n_valid:
        valid = rng.choice(nvis, n_valid, replace=False)
        if nvis - 1 not in valid and rng.random() < 0.8:
            valid[0] = nvis - 1
    junk = topk - n_valid
    future = nvis + rng.integers(0, 8, junk)
    slots = np.concatenate([valid, np.where(rng.random(junk) < 0.5, -1, future)])
    return rng.permutation(slots).astype(np.int32)


def _top_pages(shape: Shape) -> list[int]:
    """Pages at the top of the pool and across the 2**31 and 2**32 byte offsets."""
    pb = page_bytes(shape.num_kv_heads)
    out = {shape.num_pages - 1, shape.num_pages - 2}
    for edge in (2**31, FOUR_GIB):
        for pg in (edge // pb, edge // pb + 1, -(-edge // pb)):
            out.add(pg)
    return sorted(p for p in out if 0 <= p < shape.num_pages)


def serving_problem(seed: int, shape: Shape | None = None, *, big_pool: bool | None = None,
                    layouts=LAYOUTS, limits: Limits | None = None, slot_lists: str = "any",
                    scale_sign: str = "any", sm_scale: float | None = None) -> DecodeProblem:
    """A valid serving-size ``DecodeProblem``, the same bytes for the same arguments.

    seed: of the numpy PCG64 stream every byte comes from. shape: the structure
    (default: ``draw_shape`` from the same stream, with ``big_pool``,
    ``layouts`` and ``limits``). slot_lists, scale_sign: the slot-list and
    scale-sign domains to draw in (``nvfp4_suite.reference.problem.SLOT_LISTS``,
    ``SCALE_SIGNS``); sm_scale: the softmax scale (None: drawn as the generated
    problems' is, ``strategies.SM_SCALE_FACTORS``). The
    problem's arrays: q float32 ``[rows, 16*Hkv, 128]``, pool uint8
    ``[num_pages, page_bytes]``, topk int32 ``[Hkv, rows, TOPK]``, block_table
    int32 ``[reqs, max_blocks]``, seq_lens int32 ``[reqs]``.
    """
    rng = np.random.default_rng(seed)
    if shape is None:
        shape = draw_shape(rng, big_pool=big_pool, layouts=layouts, limits=limits)
    hk, topk, q_len, rows = shape.num_kv_heads, shape.topk, shape.q_len, shape.rows
    seq_lens = _seq_lens(rng, shape)
    # Every column holds a real page (future slots must not be read, and reading one
    # reads a page of some other request); pages are shared across requests.
    block_table = rng.integers(0, shape.num_pages, (shape.reqs, shape.max_blocks)).astype(np.int32)
    block_table[rng.random(block_table.shape) < 0.05] = -1
    pos = row_positions(seq_lens, q_len)
    nvis = np.where(pos >= 0, pos // BLK + 1, 0)
    ids = np.empty((hk, rows, topk), np.int32)
    modes = rng.choice(3, (hk, rows), p=[0.8, 0.15, 0.05])
    for h in range(hk):
        for r in range(rows):
            ids[h, r] = _slot_list(rng, int(nvis[r]), topk, int(modes[h, r]), slot_lists == "compacted")
    valid = (ids >= 0) & (ids < nvis[None, :, None])
    # Valid slots of a few rows read the pages at the top of the pool.
    hs, rs, ss = np.nonzero(valid)
    for top, i in zip(_top_pages(shape), rng.choice(len(hs), min(len(hs), len(_top_pages(shape))), replace=False)):
        block_table[rs[i] // q_len, ids[hs[i], rs[i], ss[i]]] = top
    # A valid slot needs a page: the few -1 entries a valid slot reaches get one.
    req = np.broadcast_to((np.arange(rows) // q_len)[None, :, None], ids.shape)
    blk = np.where(valid, ids, 0)
    hole = valid & (block_table[req, blk] < 0)
    block_table[req[hole], blk[hole]] = rng.integers(0, shape.num_pages, int(hole.sum()))

    pool = np.full((shape.num_pages, page_bytes(hk)), POISON, np.uint8)
    views = page_views(pool, shape.layout, hk)
    pg, hd = np.nonzero(read_slabs(valid, block_table[req, blk], shape.num_pages))
    n = len(pg)
    views.k_data[pg, hd] = rng.integers(0, 256, (n, BLK, 64), dtype=np.uint8)
    views.v_data[pg, hd] = rng.integers(0, 256, (n, BLK, 64), dtype=np.uint8)
    for sc in (views.k_scale, views.v_scale):
        sc[pg, hd] = scale_bytes(rng, shape.scale_regime, (n, BLK, 8), scale_sign)
    write_loud_tail(pool, shape.layout, hk, block_table, seq_lens)
    q = bf16_round(rng.standard_normal((rows, HG * hk, D), dtype=np.float32) * np.float32(shape.q_std))
    if sm_scale is None:
        factors, weights = zip(*SM_SCALE_FACTORS.items())
        sm_scale = float(rng.choice(factors, p=np.array(weights) / sum(weights))) * D**-0.5
    return DecodeProblem(
        q=q, pool=pool, layout=shape.layout, num_kv_heads=hk, topk=ids, block_table=block_table,
        seq_lens=seq_lens, q_len=q_len, sm_scale=sm_scale, k_global_scale=shape.k_global,
        v_global_scale=shape.v_global,
    )


@st.composite
def serving_problems(draw, big_pool: bool | None = None) -> DecodeProblem:
    """Hypothesis strategy: ``serving_problem`` of a drawn seed (the structure and
    the bytes come from that seed's stream, so it shrinks only in the seed)."""
    return serving_problem(draw(st.integers(0, 2**32 - 1)), big_pool=big_pool)


def describe(p: DecodeProblem) -> str:
    """One phrase: the problem's serving-size facts."""
    pages = p.slot_pages()[p.valid_slots]
    top = (int(pages.max(initial=-1)) + 1) * p.pool.shape[1]
    return (f"rows {p.rows} (q_len {p.q_len}, {int((p.positions < 0).sum())} padding), Hkv {p.num_kv_heads}, "
            f"TOPK {p.TOPK}, {p.layout}, {p.num_pages} pages ({p.pool.nbytes / 2**30:.2f} GiB, "
            f"read up to byte {top:,}), {p.block_table.shape[1]} blocks a request, "
            f"{int(p.valid_slots.sum())} valid / {int((p.topk == -1).sum())} -1 / "
            f"{int(((p.topk >= 0) & ~p.valid_slots).sum())} future slots")


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def reference_interval(backend, problem: DecodeProblem, splits: int, *, device=None, pool=None):
    """The acceptance interval of ``backend``'s output from the torch references
    (``nvfp4_suite.kernels.torch.reference.backend_interval``): the emulation of its geometry
    at ``splits``, or the exact oracle (geometry None). Returns ``(Interval, against)``."""
    from nvfp4_suite.kernels.torch import reference as TR

    return TR.backend_interval(problem, geometry=backend.geometry, splits=splits, device=device, pool=pool)


@dataclasses.dataclass
class ServingRun:
    """The serving-size part of a check: ``n`` problems judged, ``failed`` of
    them failed, a ``lines`` entry per problem (its facts, report and
    timings), ``stopped`` (why the run ended early, or None), ``seconds``."""

    n: int = 0
    failed: int = 0
    lines: list[str] = dataclasses.field(default_factory=list)
    stopped: str | None = None
    seconds: float = 0.0


def check_serving(backend, examples: int, seed: int, progress=None, *, splits=None,
                  shape: Shape | None = None) -> ServingRun:
    """Check ``backend`` on ``examples`` serving-size problems (seeds ``seed*1000 + i``;
    the first with a pool above 4 GiB) drawn inside its capabilities: its page
    layouts, slot-list domain, KV heads, TOPK and q_len limits, split counts
    (``splits``: only these) and XCD placements; a declared ``cache_layout``
    is handed the pool re-packed, as every check does.
    shape: one fixed ``Shape`` for every problem instead (small ones for CPU tests).

    Each problem: the reference interval on the device (``reference_interval``),
    then ``nvfp4_suite.vectors.engine.harness.run_case`` with it (two calls, outputs
    bitwise equal, inputs unchanged), judged by ``nvfp4_suite.reference.compare``'s
    report. An interruption between problems ends the run with what it found.
    """
    import torch

    from nvfp4_suite.vectors.engine import interrupts
    from nvfp4_suite.vectors.engine.harness import BackendCrash, run_case

    dev = _device()
    caps = backend.capabilities
    rng = np.random.default_rng(seed)
    run = ServingRun()
    t_all = time.perf_counter()
    try:
        for i in range(examples):
            interrupts.stop_if_asked()
            t0 = time.perf_counter()
            problem = serving_problem(seed * 1000 + i, shape, big_pool=True if i == 0 else None,
                                      layouts=caps.layouts, limits=caps.limits, slot_lists=caps.slot_lists,
                                      scale_sign=caps.scale_sign, sm_scale=caps.sm_scale)
            t_gen = time.perf_counter() - t0
            launch = Launch(splits=int(rng.choice(splits or caps.splits)), xcds=int(rng.choice(caps.xcds)))
            if progress:
                progress(f"  serving {i + 1}/{examples}: {describe(problem)}, {launch.describe(problem)}")
            t0 = time.perf_counter()
            iv, against = reference_interval(backend, problem, launch.known_splits, device=dev)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_ref = time.perf_counter() - t0
            t0 = time.perf_counter()
            try:
                _, rep = run_case(backend, problem, launch, expected=(iv, against))
                text, ok = (rep.details() if not rep.passed else rep.summary()), rep.passed
            except BackendCrash as e:  # a crashing backend is a non-conformant one
                text, ok = f"FAIL: {e.details()}", False
            t_run = time.perf_counter() - t0
            run.n += 1
            run.failed += not ok
            run.lines.append(f"serving {i + 1}/{examples}: {describe(problem)}; {launch.describe()}\n  {text}\n"
                             f"  times: problem {t_gen:.1f} s, reference on {dev.type} {t_ref:.2f} s, backend "
                             f"(two guarded calls) {t_run:.2f} s")
            del problem
    except interrupts.Interrupted as e:
        run.stopped = e.reason
    run.seconds = time.perf_counter() - t_all
    return run


def _kernel_time(backend, problem: DecodeProblem, splits: int) -> float | None:
    """Seconds of the backend's kernel alone on device-resident inputs (CUDA events,
    median of 5), for the backends with a tensor entry point; else None."""
    import torch

    if not torch.cuda.is_available():
        return None
    decode: Callable[..., Any]  # the two backends' module-level decode(q, pool, ...)
    kw: dict[str, Any]
    if backend.name == "triton":
        from nvfp4_suite.kernels.triton.decode import decode
        kw = {"splits": splits}
    elif backend.name == "torch":
        from nvfp4_suite.kernels.torch.backend import decode
        kw = {}
    else:
        return None
    dev = torch.device("cuda")
    args = (torch.from_numpy(problem.q).to(dev).to(torch.bfloat16), torch.from_numpy(problem.pool).to(dev),
            torch.from_numpy(problem.topk).to(dev), torch.from_numpy(problem.block_table).to(dev),
            torch.from_numpy(problem.seq_lens).to(dev))
    kw.update(layout=problem.layout, num_kv_heads=problem.num_kv_heads, q_len=problem.q_len,
              sm_scale=problem.sm_scale, k_global_scale=problem.k_global_scale,
              v_global_scale=problem.v_global_scale)
    decode(*args, **kw)
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        decode(*args, **kw)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return sorted(ts)[2]


# The first problem of the benchmark: the smallest serving shape, where the numpy
# reference takes seconds rather than many minutes.
BENCH_SMALL = Shape(reqs=64, q_len=1, num_kv_heads=2, topk=16, num_pages=PAGES[0], max_blocks=MAX_BLOCKS[0],
                    layout="token_rows")


def bench(backend, examples: int, seed: int, numpy_examples: int = 1) -> list[str]:
    """Time per serving-size problem: the numpy reference interval (the first
    ``numpy_examples`` problems), the torch reference on the device, the backend
    call (host arrays in and out) and its kernel alone; and whether the two
    references' intervals are equal. Problem 1 is ``BENCH_SMALL``, the others are
    drawn (problem 2 with a pool above 4 GiB). Returns the table's lines."""
    import torch

    from nvfp4_suite.reference import compare

    dev = _device()
    rng = np.random.default_rng(seed)
    lines = [f"serving-size problems, backend {backend.name}, references on {dev.type}"
             f"{' (' + torch.cuda.get_device_name() + ')' if dev.type == 'cuda' else ''}",
             f"{'#':>2} {'rows':>4} {'Hkv':>3} {'TOPK':>4} {'q_len':>5} {'GiB':>5} {'splits':>6} | "
             f"{'numpy ref s':>11} {'torch ref s':>11} {'backend s':>9} {'kernel ms':>9} | intervals"]
    for i in range(examples):
        p = serving_problem(seed * 1000 + i, BENCH_SMALL if i == 0 else None, big_pool=True if i == 1 else None,
                            layouts=backend.capabilities.layouts)
        splits = int(rng.choice(backend.capabilities.splits))
        pool_ref = torch.from_numpy(p.pool).to(dev)
        reference_interval(backend, p, splits, device=dev, pool=pool_ref)  # warm-up (allocator, kernels)
        t0 = time.perf_counter()
        iv, _ = reference_interval(backend, p, splits, device=dev, pool=pool_ref)
        t_ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        backend(p, **Launch(splits=splits).kwargs(backend.capabilities))
        t_run = time.perf_counter() - t0
        t_k = _kernel_time(backend, p, splits)
        t_np, same = None, "-"
        if i < numpy_examples:
            t0 = time.perf_counter()
            iv_np, _ = compare.backend_interval(p, geometry=backend.geometry, splits=splits)
            t_np = time.perf_counter() - t0
            diff = sum(int((getattr(iv, f).view(np.uint32) != getattr(iv_np, f).view(np.uint32)).sum())
                       for f in ("lo", "hi", "nearest"))
            same = "equal" if diff == 0 else f"{diff} ends differ"
        lines.append(f"{i + 1:2d} {p.rows:4d} {p.num_kv_heads:3d} {p.TOPK:4d} {p.q_len:5d} "
                     f"{p.pool.nbytes / 2**30:5.2f} {splits:6d} | {'-' if t_np is None else f'{t_np:.2f}':>11} "
                     f"{t_ref:11.2f} {t_run:9.2f} "
                     f"{'-' if t_k is None else f'{t_k * 1e3:.2f}':>9} | {same}")
        del p, pool_ref
    return lines
