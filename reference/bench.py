"""Benchmark of the reference implementations against a float32 floor.

``python -m nvfp4_suite.reference.bench [--reps N] [--what oracle,emulate]``

Builds the production-size step (64 requests, q_len 1, Hkv 4, TOPK 16, every
row sees 2048 keys, token_rows) and times each reference function against a
floor measured in the same run: a plain float32 softmax attention (two
batched matmuls) over the same number of keys, already dequantised. Prints
each time, its ratio to the floor, and the peak memory numpy allocated.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from typing import Callable

import numpy as np

from .formats import bf16_round
from .paged_cache import BLK, D, page_bytes, page_views
from .problem import HG, DecodeProblem


def production_problem(seed: int = 0, reqs: int = 64, num_kv_heads: int = 4, topk: int = 16) -> DecodeProblem:
    """Production-size problem with random bytes: every row sees ``topk * 128`` keys.

    Codes are uniform; scale bytes are drawn from 0x30..0x40 (0.5..2), so the
    pool is valid without the cost of quantising float data.
    """
    rng = np.random.default_rng(seed)
    pages = reqs * topk
    pool = rng.integers(0, 256, (pages, page_bytes(num_kv_heads)), dtype=np.uint8)
    views = page_views(pool, "token_rows", num_kv_heads)
    for sc in (views.k_scale, views.v_scale):
        sc[...] = rng.integers(0x30, 0x41, sc.shape, dtype=np.uint8)
    block_table = rng.permutation(pages).reshape(reqs, topk).astype(np.int32)
    ids = np.stack([
        np.stack([rng.permutation(topk) for _ in range(reqs)]) for _ in range(num_kv_heads)
    ]).astype(np.int32)
    return DecodeProblem(
        q=bf16_round(rng.standard_normal((reqs, HG * num_kv_heads, D))),
        pool=pool,
        layout="token_rows",
        num_kv_heads=num_kv_heads,
        topk=ids,
        block_table=block_table,
        seq_lens=np.full(reqs, topk * BLK, np.int32),
        q_len=1,
        sm_scale=D**-0.5,
        k_global_scale=0.05,
        v_global_scale=0.05,
    )


def float32_floor(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Plain softmax attention in float32: q ``[B,16,128]``, k/v ``[B,N,128]``."""
    s = np.matmul(q, k.transpose(0, 2, 1)) * np.float32(D**-0.5)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


def _timed(fn, reps: int) -> tuple[float, int]:
    fn()
    best = np.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak


def main(argv=None) -> int:
    """Print the benchmark table of the reference functions against the float32 floor."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.reference.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions; the minimum is reported")
    ap.add_argument("--what", default="oracle,emulate", help="comma-separated: oracle, emulate")
    args = ap.parse_args(argv)
    print("building the production-size problem (64 req x Hkv 4 x TOPK 16, 2048 keys a row)...", flush=True)
    p = production_problem()
    n_pairs, n_keys = p.rows * p.num_kv_heads, p.TOPK * BLK
    rng = np.random.default_rng(1)
    q32 = p.q.reshape(n_pairs, HG, D)
    k32 = rng.standard_normal((n_pairs, n_keys, D), dtype=np.float32)
    v32 = rng.standard_normal((n_pairs, n_keys, D), dtype=np.float32)
    floor, floor_peak = _timed(lambda: float32_floor(q32, k32, v32), args.reps)
    print(f"{'what':<10} {'seconds':>9} {'x floor':>8} {'peak MiB':>9}")
    print(f"{'floor':<10} {floor:9.3f} {1.0:8.2f} {floor_peak / 2**20:9.1f}   (K/V inputs: "
          f"{(k32.nbytes + v32.nbytes) / 2**20:.0f} MiB, not counted)")
    whats = [w.strip() for w in args.what.split(",") if w.strip()]
    fn: Callable[[DecodeProblem], object]  # the reference timed: either one's output is discarded
    for what in whats:
        if what == "oracle":
            from .oracle import sparse_decode as fn
        elif what == "emulate":
            from .emulate import emulate as fn
        else:
            ap.error(f"--what: unknown {what!r}")
        t, peak = _timed(lambda: fn(p), args.reps)
        print(f"{what:<10} {t:9.3f} {t / floor:8.2f} {peak / 2**20:9.1f}")
    whole = p.num_pages * p.num_kv_heads * 2 * BLK * D * 8
    print(f"(a float64 dequantised copy of the whole pool would be {whole / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
