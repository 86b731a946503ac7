"""Deterministic construction of valid decode problems from a seed.

Used by the tests, the strategies, the golden vectors and the simulator benchmark.
Everything is drawn from ``numpy.random.Generator(PCG64(seed))``, whose
streams numpy keeps stable, and quantised with the integer/IEEE-exact codecs,
so the same arguments give the same bytes on every machine.
"""

from __future__ import annotations

import numpy as np

from .formats import bf16_round
from .paged_cache import BLK, D, build_pool
from .problem import HG, DecodeProblem, row_positions


def paged_block_table(seq_lens, rng, *, spare_pages: int, extra_cols: int) -> tuple[np.ndarray, int]:
    """A block table giving every request's blocks distinct pages of a shuffled pool.

    seq_lens: int ``[reqs]``; rng: numpy Generator. Returns ``(block_table int32
    [reqs, max_blocks], num_pages)``: ``max_blocks`` is the most blocks any
    request needs plus ``extra_cols`` (unused entries are -1); the pool has
    ``spare_pages`` pages that no request uses (at least one page in all).
    """
    nblk = -(-np.asarray(seq_lens).astype(np.int64) // BLK)
    max_blocks = max(1, int(nblk.max(initial=0)) + extra_cols)
    num_pages = max(1, int(nblk.sum()) + spare_pages)
    perm = rng.permutation(num_pages)
    block_table = np.full((len(nblk), max_blocks), -1, np.int32)
    at = 0
    for r, n in enumerate(nblk):
        block_table[r, :n] = perm[at : at + n]
        at += n
    return block_table, num_pages


def random_problem(
    seed: int,
    *,
    reqs: int = 2,
    q_len: int = 1,
    num_kv_heads: int = 1,
    topk: int = 8,
    layout: str = "token_rows",
    seq_lens=None,
    spare_pages: int = 2,
    q_std: float = 1.0,
    kv_std: float = 1.0,
    k_global_scale: float = 0.0125,
    v_global_scale: float = 0.02,
    sm_scale: float = D**-0.5,
    invalid_fraction: float = 0.25,
    shuffle_slots: bool = True,
) -> DecodeProblem:
    """A valid random ``DecodeProblem``.

    seq_lens: int sequence of length ``reqs`` or None (drawn in 0..1000).
    Each request's blocks map to distinct pages of a shuffled pool with
    ``spare_pages`` unused pages. Each (KV head, row) slot list holds distinct
    valid ids, with about ``invalid_fraction`` of the slots ``-1`` or future
    ids, in random order when ``shuffle_slots``.
    """
    rng = np.random.default_rng(seed)
    if seq_lens is None:
        seq_lens = rng.integers(0, 1000, reqs)
    seq_lens = np.asarray(seq_lens, np.int32)
    if seq_lens.shape != (reqs,):
        raise ValueError(f"seq_lens has shape {seq_lens.shape}, expected ({reqs},)")
    block_table, num_pages = paged_block_table(seq_lens, rng, spare_pages=spare_pages, extra_cols=1)
    rows = reqs * q_len
    H = HG * num_kv_heads
    q = bf16_round(rng.standard_normal((rows, H, D)) * q_std)
    k = rng.standard_normal((num_pages, num_kv_heads, BLK, D)) * kv_std
    v = rng.standard_normal((num_pages, num_kv_heads, BLK, D)) * kv_std
    pool = build_pool(
        k, v, layout=layout, k_global_scale=k_global_scale, v_global_scale=v_global_scale
    )
    ids = np.full((num_kv_heads, rows, topk), -1, np.int32)
    positions = row_positions(seq_lens, q_len)
    for r in range(rows):
        pos = int(positions[r])
        nvis = pos // BLK + 1 if pos >= 0 else 0
        for h in range(num_kv_heads):
            n_valid = min(nvis, topk)
            chosen = rng.permutation(nvis)[:n_valid] if nvis else np.zeros(0, np.int64)
            slots = np.full(topk, -1, np.int64)
            slots[:n_valid] = chosen
            junk = rng.random(topk) < invalid_fraction
            junk[: max(1, n_valid // 2)] = False
            future = nvis + rng.integers(0, 3, topk)
            slots = np.where(junk, np.where(rng.random(topk) < 0.5, -1, future), slots)
            if shuffle_slots:
                slots = rng.permutation(slots)
            ids[h, r] = slots
    return DecodeProblem(
        q=q,
        pool=pool,
        layout=layout,
        num_kv_heads=num_kv_heads,
        topk=ids,
        block_table=block_table,
        seq_lens=seq_lens,
        q_len=q_len,
        sm_scale=float(sm_scale),
        k_global_scale=float(k_global_scale),
        v_global_scale=float(v_global_scale),
    )

