"""The seed kernel's index arithmetic, line for line in numpy, for CPU checks.

Each function restates what the FlyDSL seed (``../shared/seed``) computes on
the GPU, with the seed's names, so that tests can check it against the
reference: the ballot/popcount selection of a split's slots and the
two-blocks-per-trip walk with its masked odd block. None of this runs the
kernel; it pins down what the kernel's integer logic must do. (The launch
mapping of workgroups to rows, the fp8 conversion and the lane arithmetic
the kernel is traced from are in ``nvfp4_suite.kernels.flydsl.lanes``.)
"""

from __future__ import annotations

import numpy as np


def _popcount(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.uint64)
    bits = np.unpackbits(x.view(np.uint8).reshape(x.shape + (8,)), axis=-1)
    return bits.sum(axis=-1).astype(np.int64)


def split_ballot(ids: np.ndarray, self_blk: int, splits: int, z: int) -> int:
    """The 64-bit ``vmask`` of split ``z`` for one (row, KV head).

    ids: int ``[TOPK]`` (TOPK <= 64), one per lane. Lane ``l`` is valid when
    ``l < TOPK`` and ``0 <= ids[l] <= self_blk``; with splits > 1, lane ranks
    are ``popcount(vmask & ((1 << l) - 1))`` and split ``z`` keeps ranks in
    ``[z * chunk, (z + 1) * chunk)``, ``chunk = ceil(n_v / splits)``.
    """
    lanes = np.arange(64)
    padded = np.full(64, -1, np.int64)
    padded[: len(ids)] = ids
    ok = (lanes < len(ids)) & (padded >= 0) & (padded <= self_blk)
    vmask = int(np.sum(np.where(ok, np.uint64(1) << lanes.astype(np.uint64), np.uint64(0)), dtype=np.uint64))
    if splits == 1:
        return vmask
    n_v = bin(vmask).count("1")
    below = (np.uint64(1) << lanes.astype(np.uint64)) - np.uint64(1)
    below[63] = np.uint64(2**63 - 1)
    rank = _popcount(np.uint64(vmask) & below)
    chunk = (n_v + splits - 1) // splits
    lo = z * chunk
    keep = ok & (rank >= lo) & (rank < lo + chunk)
    return int(np.sum(np.where(keep, np.uint64(1) << lanes.astype(np.uint64), np.uint64(0)), dtype=np.uint64))


def block_walk(vmask: int, first_valid: int) -> list[tuple[int, bool]]:
    """The seed's loop over one split's ``vmask``: ``(n_v + 1) // 2`` trips, each
    folding block ``a = slot_at(rem)`` (live) and ``b = slot_at(rem & (rem - 1))``,
    live only when that mask is non-zero. ``slot_at`` of an empty mask is
    ``first_valid``, the lowest lane of this split's ``vmask`` (0 when the split
    has none; the kernel computes it after the split ballot), so the dead odd
    block re-reads a page this split's first valid slot reads. Returns
    ``(slot, live)`` per block.
    """
    def slot_at(mask: int) -> int:
        return (mask & -mask).bit_length() - 1 if mask else first_valid

    out = []
    rem = vmask
    for _ in range((bin(vmask).count("1") + 1) // 2):
        rem_b = rem & (rem - 1)
        out.append((slot_at(rem), True))
        out.append((slot_at(rem_b), rem_b != 0))
        rem = rem_b & (rem_b - 1)
    return out

