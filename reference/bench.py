"""Benchmark of the reference implementations against a float32 floor.

``python -m nvfp4_suite.reference.bench [--reps N] [--what oracle,emulate] [--reqs N]``

Builds the production-size step (64 requests, q_len 1, Hkv 4, TOPK 16, every
row sees 2048 keys, token_rows) and times each reference function against a
floor measured in the same run: a plain float32 softmax attention (two
batched matmuls) over the same number of keys, already
dequantised. Prints each time, its ratio to the floor, and the peak memory
numpy allocated. With ``oracle`` it then times the oracle on the same step
with 2 to 6 of the 16 slots of each (KV head, row) valid (as in generated
problems, where 17-32% are), against the same floor over exactly those
valid keys: the oracle's work should follow the keys a row sees, not TOPK.
Beside it, two float64 rows over the same keys. ``floor64-valid``: the
floor in float64, its operands likewise already dequantised and read from
memory: the price of float64 against float32 arithmetic alone.
``oracle-arith``: the oracle's own float64 work in its chunks and blocks
(``oracle.pairs_within``), in its order (each block's K written into one
reused buffer and its scores taken, one softmax a chunk, then each block's
V and its products), with constants written where the oracle gathers its
operands from the dequantisation table, and nothing else: no validation, no
slot gathers, no table indices. The oracle costs this row plus those, so
the gap between this row and ``oracle-valid`` is what faster gathering or
validating could win; where this row alone is at or above a ratio, no such
work brings the oracle to it in this library on this machine.

``nvfp4_suite.kernels.torch.bench`` prints the same table computed on a
torch device (``Namespace`` is what differs).

The floor and the references call BLAS: with its default thread count, a
loaded machine moves the floor and the references differently and the ratios
with them. The first line says which thread count the run had
(``blas_threads``); set ``OPENBLAS_NUM_THREADS=1`` (and ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` for other builds) for ratios comparable between runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import tracemalloc
from typing import Any, Callable, Sequence

import numpy as np

from .arrays import NUMPY
from .formats import bf16_round
from .oracle import pairs_within
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
    float64 for the ``floor64`` rows): q ``[B,16,128]``, k/v ``[B,N,128]`` -> ``[B,16,128]``.

    Batched matmul, each contraction one BLAS call, and the normalisation on
    the output (16 x 128 a pair, not 16 x N): a slower floor would flatter the
    ratios. (``einsum`` with ``optimize=True`` costs the same in float32 and
    about a fifth more in float64.)
    """
    s = np.matmul(q, np.swapaxes(k, 1, 2))
    s *= s.dtype.type(D**-0.5)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    o = np.matmul(s, v)
    o /= s.sum(axis=-1, keepdims=True)
    return o


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


@dataclasses.dataclass(frozen=True)
class Namespace:
    """Where the benchmark computes: the floor and the references in one array library.

    header: the first line printed (what the timings depend on); floor:
    ``attention_floor``'s contract in this library; move: a numpy array to
    this library's, dtype kept; timed: ``(fn, reps) -> (best seconds, peak
    bytes or None)``; references: ``(what, problem) -> fn``, a call of the
    reference ``what`` (one of ``WHATS``) on ``problem`` with what it reads
    already in place, as a check has it; ops: the references' array namespace
    in this library (``nvfp4_suite.reference.arrays``), for ``oracle-arith``."""

    header: str
    floor: Callable
    move: Callable
    timed: Callable
    references: Callable[[str, DecodeProblem], Callable[[], object]]
    ops: Any


# The references the benchmark times.
WHATS = ("oracle", "emulate")


def _numpy_reference(what: str, p: DecodeProblem) -> Callable[[], object]:
    if what == "oracle":
        from .oracle import sparse_decode

        return lambda: sparse_decode(p)
    from .emulate import emulate

    return lambda: emulate(p)


def numpy_namespace() -> Namespace:
    """The references in numpy on the CPU; the floor as float32 BLAS matmuls."""
    return Namespace(blas_threads(), attention_floor, lambda a: a, _timed, _numpy_reference, NUMPY)


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options of every front end of this benchmark: ``--reps``, ``--what``, ``--reqs``."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions; the minimum is reported")
    ap.add_argument("--what", default="oracle,emulate", help="comma-separated: " + ", ".join(WHATS))
    ap.add_argument("--reqs", type=int, default=64, help="requests of the step (64: production size)")
    return ap


def report(ns: Namespace, args, ap: argparse.ArgumentParser) -> int:
    """Print the benchmark table for ``args`` (``parser``'s options) computed in ``ns``; returns 0."""
    whats = [w.strip() for w in args.what.split(",") if w.strip()]
    for what in whats:
        if what not in WHATS:
            ap.error(f"--what: unknown {what!r}")
    if args.reps < 1 or args.reqs < 1:
        ap.error(f"--reps {args.reps}, --reqs {args.reqs}: both must be at least 1")
    print(ns.header)
    print(f"building the production-size problem ({args.reqs} req x Hkv 4 x TOPK 16, 2048 keys a row)...",
          flush=True)
    p = production_problem(reqs=args.reqs)
    n_pairs, n_keys = p.rows * p.num_kv_heads, p.TOPK * BLK
    rng = np.random.default_rng(1)
    floor, floor_peak = _floor_time(ns, [(p.q.reshape(n_pairs, HG, D),
                                          rng.standard_normal((n_pairs, n_keys, D), dtype=np.float32),
                                          rng.standard_normal((n_pairs, n_keys, D), dtype=np.float32))],
                                    np.float32, args.reps)
    print(f"{'what':<13} {'seconds':>9} {'x floor':>8} {'peak MiB':>9}")
    print(f"{'floor':<13} {floor:9.4f} {1.0:8.2f} {_mib(floor_peak)}   (K/V inputs: "
          f"{2 * n_pairs * n_keys * D * 4 / 2**20:.0f} MiB, not counted)")
    for what in whats:
        t, peak = ns.timed(ns.references(what, p), args.reps)
        print(f"{what:<13} {t:9.4f} {t / floor:8.2f} {_mib(peak)}")
    whole = p.num_pages * p.num_kv_heads * 2 * BLK * D * 8
    print(f"(a float64 dequantised copy of the whole pool would be {whole / 2**20:.0f} MiB)")
    if "oracle" in whats:
        _valid_keys(ns, args.reqs, args.reps)
    return 0


def _floor_time(ns: Namespace, operands: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], dtype,
                reps: int) -> tuple[float, int | None]:
    """``ns.timed`` of the floor over each ``(q, k, v)`` of ``operands`` as ``dtype``
    in ``ns``; the moved copies are freed on return, before anything else is timed."""
    moved = [tuple(ns.move(a.astype(dtype, copy=False)) for a in x) for x in operands]
    return ns.timed(lambda: [ns.floor(*x) for x in moved], reps)


def _mib(peak: int | None) -> str:
    return f"{'-':>9}" if peak is None else f"{peak / 2**20:9.1f}"


def _valid_keys(ns: Namespace, reqs: int, reps: int) -> None:
    """The oracle against the float32 floor over the same valid keys (module note)."""
    p = production_problem(reqs=reqs, valid=(2, 6))
    operands = valid_key_operands(p)
    keys = sum(k.shape[0] * k.shape[1] for _, k, _ in operands)
    print(f"the same step with 2..6 of 16 slots valid a row ({keys / (p.rows * p.num_kv_heads):.0f} "
          f"of 2048 keys a row on average):")
    floor, floor_peak = _floor_time(ns, operands, np.float32, reps)
    print(f"{'floor-valid':<13} {floor:9.4f} {1.0:8.2f} {_mib(floor_peak)}   (the float32 floor "
          f"over the valid keys only)")
    t64, peak64 = _floor_time(ns, operands, np.float64, reps)
    print(f"{'floor64-valid':<13} {t64:9.4f} {t64 / floor:8.2f} {_mib(peak64)}   (the same in float64, "
          f"operands already dequantised)")
    ta, peaka = _oracle_arith_time(ns, operands, reps)
    print(f"{'oracle-arith':<13} {ta:9.4f} {ta / floor:8.2f} {_mib(peaka)}   (the oracle's float64 work alone: "
          f"no validation, gathers or table lookups)")
    t, peak = ns.timed(ns.references("oracle", p), reps)
    print(f"{'oracle-valid':<13} {t:9.4f} {t / floor:8.2f} {_mib(peak)}")


def _oracle_arith_time(ns: Namespace, operands: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
                       reps: int) -> tuple[float, int | None]:
    """``ns.timed`` of the oracle's float64 work over the pairs of ``operands`` (one
    valid-slot count each), chunk by chunk and block by block in the order
    ``nvfp4_suite.reference.oracle`` does it, with K and V blocks written as
    constants (values do not move the time) instead of gathered from its table."""
    ops, xp = ns.ops, ns.ops.xp
    f64 = ops.float64
    chunks = []
    for q, k, _ in operands:
        n, keys = k.shape[:2]
        per_chunk = pairs_within(keys // BLK, ops.chunk_bytes, 4)
        step = pairs_within(keys // BLK, ops.block_bytes)
        chunks += [(ns.move(q[lo:lo + per_chunk].astype(np.float64)), keys, step) for lo in range(0, n, per_chunk)]

    def run():
        # The oracle's text (oracle._attend) less its validation, gathers and bounds.
        for q, keys, step in chunks:
            n = q.shape[0]
            step = min(n, step)
            buf = ops.empty((step * keys, D), f64)
            s = ops.empty((n, HG, keys), f64)
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                k = buf[: (hi - lo) * keys].reshape(hi - lo, keys, D)
                k[...] = 0.5
                xp.matmul(q[lo:hi], xp.swapaxes(k, 1, 2), out=s[lo:hi])
            s *= D**-0.5
            m = ops.amax(s, -1)[..., None]
            s -= m
            p = xp.exp(s, out=s)
            denom = ops.sum(p, -1)[..., None]
            o = ops.empty((n, HG, D), f64)
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                v = buf[: (hi - lo) * keys].reshape(hi - lo, keys, D)
                v[...] = 0.25
                xp.matmul(p[lo:hi], v, out=o[lo:hi])
            o *= 1.0 / denom

    return ns.timed(run, reps)


def main(argv=None) -> int:
    """Print the benchmark table of the numpy references against the float32 floor."""
    ap = parser("python -m nvfp4_suite.reference.bench", __doc__.split("\n\n")[0])
    return report(numpy_namespace(), ap.parse_args(argv), ap)


if __name__ == "__main__":
    raise SystemExit(main())
