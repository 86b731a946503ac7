"""Benchmark of the reference implementations against a float32 floor.

``python -m nvfp4_suite.reference.bench [--reps N] [--what oracle,emulate] [--reqs N]``

Builds the production-size step (64 requests, q_len 1, Hkv 4, TOPK 16, every
row sees 2048 keys, token_rows) and times each reference function against a
floor measured in the same run: a plain float32 softmax attention (two
batched einsum contractions) over the same number of keys, already
dequantised. Prints each time, its ratio to the floor, and the peak memory
numpy allocated. With ``oracle`` it then times the oracle on the same step
with 2 to 6 of the 16 slots of each (KV head, row) valid (as in generated
problems, where 17-32% are), against the same floor over exactly those
valid keys: the oracle's work should follow the keys a row sees, not TOPK.
Beside it, ``floor64-valid``: the same attention in float64 over the same
keys, already dequantised: what the oracle's float64 arithmetic costs
before it reads a byte of the cache (the rest of its time is gathering and
dequantising the valid blocks, and validating the problem).

The floor and the references call BLAS: with its default thread count, a
loaded machine moves the floor and the references differently and the ratios
with them. The first line says which thread count the run had
(``blas_threads``); set ``OPENBLAS_NUM_THREADS=1`` (and ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` for other builds) for ratios comparable between runs.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from typing import Callable

import numpy as np

from .formats import bf16_round
from .paged_cache import BLK, D, page_bytes, page_views
from .problem import HG, DecodeProblem


def production_problem(seed: int = 0, reqs: int = 64, num_kv_heads: int = 4, topk: int = 16,
                       valid: tuple[int, int] | None = None) -> DecodeProblem:
    """Production-size problem with random bytes: every row sees ``topk * 128`` keys,
    or with ``valid = (lo, hi)`` only the first ``n`` slots of each (KV head, row)
    hold a block id (``n`` drawn in ``lo..hi``), the rest ``-1``.

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
    if valid is not None:
        n = rng.integers(valid[0], valid[1] + 1, ids.shape[:2])
        ids[np.arange(topk) >= n[..., None]] = -1
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


def attention_floor(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Plain softmax attention in the operands' dtype (float32 for the floor,
    float64 for ``floor64-valid``): q ``[B,16,128]``, k/v ``[B,N,128]`` -> ``[B,16,128]``.

    ``optimize=True`` lets einsum hand each contraction to BLAS, as matmul would:
    a slower floor would flatter the ratios.
    """
    s = np.einsum("bhd,bkd->bhk", q, k, optimize=True) * np.float32(D**-0.5)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.einsum("bhk,bkd->bhd", s, v, optimize=True)


def valid_key_operands(p: DecodeProblem, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The floor's float32 operands over the keys the oracle reads: for each count
    ``c`` of valid slots, ``(q [n,16,128], k [n,c*128,128], v [n,c*128,128])`` for
    the ``n`` (KV head, row) pairs with that count (random K/V: the floor's time
    does not depend on the values)."""
    rng = np.random.default_rng(seed)
    count = p.valid_slots.sum(axis=-1).reshape(-1)
    q = p.q.reshape(p.rows, p.num_kv_heads, HG, D).transpose(1, 0, 2, 3).reshape(-1, HG, D)
    out = []
    for c in np.unique(count[count > 0]):
        sel = count == c
        shape = (int(sel.sum()), int(c) * BLK, D)
        out.append((q[sel], rng.standard_normal(shape, dtype=np.float32),
                    rng.standard_normal(shape, dtype=np.float32)))
    return out


# The variables BLAS builds read their thread count from, in the order they take precedence.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def blas_threads(environ=os.environ) -> str:
    """How many threads BLAS was told to use, for the benchmark's first line:
    the first of ``BLAS_THREAD_VARS`` set in ``environ``, or that none is."""
    for var in BLAS_THREAD_VARS:
        if environ.get(var):
            return f"BLAS threads: {var}={environ[var]}"
    return ("BLAS threads: the library's default (none of " + ", ".join(BLAS_THREAD_VARS)
            + " is set; set OPENBLAS_NUM_THREADS=1 for ratios comparable between runs)")


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
    ap.add_argument("--reqs", type=int, default=64, help="requests of the step (64: production size)")
    args = ap.parse_args(argv)
    print(blas_threads())
    print(f"building the production-size problem ({args.reqs} req x Hkv 4 x TOPK 16, 2048 keys a row)...",
          flush=True)
    p = production_problem(reqs=args.reqs)
    n_pairs, n_keys = p.rows * p.num_kv_heads, p.TOPK * BLK
    rng = np.random.default_rng(1)
    q32 = p.q.reshape(n_pairs, HG, D)
    k32 = rng.standard_normal((n_pairs, n_keys, D), dtype=np.float32)
    v32 = rng.standard_normal((n_pairs, n_keys, D), dtype=np.float32)
    floor, floor_peak = _timed(lambda: attention_floor(q32, k32, v32), args.reps)
    print(f"{'what':<13} {'seconds':>9} {'x floor':>8} {'peak MiB':>9}")
    print(f"{'floor':<13} {floor:9.3f} {1.0:8.2f} {floor_peak / 2**20:9.1f}   (K/V inputs: "
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
        print(f"{what:<13} {t:9.3f} {t / floor:8.2f} {peak / 2**20:9.1f}")
    whole = p.num_pages * p.num_kv_heads * 2 * BLK * D * 8
    print(f"(a float64 dequantised copy of the whole pool would be {whole / 2**20:.0f} MiB)")
    if "oracle" in whats:
        _valid_keys(args.reqs, args.reps)
    return 0


def _valid_keys(reqs: int, reps: int) -> None:
    """The oracle against the float32 floor over the same valid keys (module note)."""
    from .oracle import sparse_decode

    p = production_problem(reqs=reqs, valid=(2, 6))
    operands = valid_key_operands(p)
    keys = sum(k.shape[0] * k.shape[1] for _, k, _ in operands)
    print(f"the same step with 2..6 of 16 slots valid a row ({keys / (p.rows * p.num_kv_heads):.0f} "
          f"of 2048 keys a row on average):")
    floor, floor_peak = _timed(lambda: [attention_floor(*x) for x in operands], reps)
    print(f"{'floor-valid':<13} {floor:9.3f} {1.0:8.2f} {floor_peak / 2**20:9.1f}   (float32 einsum "
          f"over the valid keys only)")
    wide = [tuple(a.astype(np.float64) for a in x) for x in operands]
    t64, peak64 = _timed(lambda: [attention_floor(*x) for x in wide], reps)
    print(f"{'floor64-valid':<13} {t64:9.3f} {t64 / floor:8.2f} {peak64 / 2**20:9.1f}   (the same in float64, "
          f"operands already dequantised)")
    t, peak = _timed(lambda: sparse_decode(p), reps)
    print(f"{'oracle-valid':<13} {t:9.3f} {t / floor:8.2f} {peak / 2**20:9.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
