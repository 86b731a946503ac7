"""The seed kernel's index arithmetic, line for line in numpy, for CPU checks.

Each function restates what the FlyDSL seed (``../shared/seed``) computes on
the GPU, with the seed's names, so that tests can check it against the
reference: the launch mapping of workgroups to rows (with XCD padding), the
ballot/popcount selection of a split's slots, the two-blocks-per-trip walk
with its masked odd block. None of this runs the kernel; it pins down what
the kernel's integer logic must do. (The fp8 conversion and the lane
arithmetic the kernel is built from are in ``kernels.flydsl.lanes``.)
"""

from __future__ import annotations

import numpy as np


BLK = 128


def grid_x(rows: int, q_len: int, xcds: int) -> int:
    """Workgroups along x: ``rows``, or with ``xcds > 0`` rows padded up to a
    multiple of ``xcds * q_len`` (so a request's rows can share an XCD)."""
    if xcds <= 0:
        return rows
    unit = xcds * q_len
    return -(-rows // unit) * unit


def workgroup_row(bx: np.ndarray, q_len: int, xcds: int) -> np.ndarray:
    """Row served by workgroup ``bx`` (int array): the seed's
    ``((slot // ql) * XCDS + xcd) * ql + slot % ql`` with ``xcd = bx % XCDS``,
    ``slot = bx // XCDS``; the identity without XCDs. Rows ``>= rows`` store nothing."""
    bx = np.asarray(bx, np.int64)
    if xcds <= 0:
        return bx
    xcd = bx % xcds
    slot = bx // xcds
    return ((slot // q_len) * xcds + xcd) * q_len + slot % q_len


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
    """The seed's loop over ``vmask``: ``(n_v + 1) // 2`` trips, each folding block
    ``a = slot_at(rem)`` (live) and ``b = slot_at(rem & (rem - 1))``, live only
    when that mask is non-zero. ``slot_at`` of an empty mask is ``first_valid``
    (the row's first valid lane over all splits, 0 if none), so a dead block
    still reads a page a valid slot reads. Returns ``(slot, live)`` per block.
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

