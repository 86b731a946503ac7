"""Diagnosis: names the pattern of a failure, never whether it fails.

``diagnose`` names a failure's pattern where the evidence is
beyond what scattered failures make: the failures fill a block of (row,
head) units and dims (units with at least ``MIN_BLOCK / 2`` failing
elements; dims failing in at least half of those units; the block holds at
least ``MIN_BLOCK`` elements, at least 3/4 of them fail, at least 90% of
all failures lie in it, and it is not simply every unit that expects a
nonzero value: a head, a KV head, a row, a request or a dim tile wrong,
the failures outside it counted); a wrong row holds another
row's expected output (every element within 1/64 of that row's largest
value, exactly one such row: rows swapped); at least 90% of the failing
elements that expect nonzero hold 0; or, over the failing elements of at
least 1/8 of their head's scale (at least ``MIN_EVIDENCE``), 90% of
``got / expected`` lie within 1/32 of their median ``c``: sign flipped
(``c`` within 1/32 of -1) or scaled by ``c`` (``c`` farther than 1/16
from 1; bf16 rounding moves a ratio by 2**-8 at most).
"""

from __future__ import annotations

import numpy as np

from ..problem import HG

MIN_BLOCK = 16  # elements a wrong block must hold to be named (one 16-dim group of one head)
MIN_EVIDENCE = 16  # failing elements a value pattern (zeros, a constant factor) must rest on


def diagnose(expected, got, ok, *, q_len: int = 1) -> list[str]:
    """Name the pattern of a failure, where one is recognisable: one phrase per
    pattern found, ``[]`` for none (and for no failure).

    expected: float ``[rows, H, 128]``, the reference (before or after its
    final rounding); got: float32 ``[rows, H, 128]``, the output; ok: bool
    ``[rows, H, 128]``, True where the element passed. q_len: rows per
    request, to name requests.

    Patterns (module note): the failures fill a block of (row,
    head) units and dims: "wrong: dims 16..31 (one 16-dim tile) of heads 4, 7
    of rows 1, 3 (100% of those elements fail, every other element passes)";
    a row holding another row's expected output
    ("rows 2 and 3 swapped"); the failing elements hold 0 where nonzero is
    expected; or they are one constant ``c`` times their expected value
    ("sign flipped" for ``c = -1``).
    """
    expected = np.asarray(expected, np.float64)
    got = np.asarray(got, np.float64)
    fail = ~np.asarray(ok, bool)
    if not fail.any():
        return []
    found = [_block(expected, fail, q_len), _swapped_rows(expected, got, fail), _values(expected, got, fail)]
    return [f for f in found if f]


def _ranges(xs) -> str:
    """Sorted ints as ``0..3, 7, 9..10`` (at most 8 runs shown)."""
    runs, start = [], None
    for a, b in zip(xs, list(xs[1:]) + [None]):
        start = a if start is None else start
        if b != a + 1:
            runs.append(f"{start}..{a}" if a > start else f"{start}")
            start = None
    return ", ".join(runs[:8]) + (f" and {len(runs) - 8} more runs" if len(runs) > 8 else "")


def _heads_phrase(heads, n_heads: int) -> str:
    """``heads 16..31 (KV head 1)``; ``all heads`` when every head."""
    if len(heads) == n_heads:
        return "all heads"
    kv = sorted({int(h) // HG for h in heads})
    whole_kv = len(heads) == HG * len(kv)
    return (f"head{'s' if len(heads) > 1 else ''} {_ranges(heads)}"
            + (f" (KV head{'s' if len(kv) > 1 else ''} {_ranges(kv)})" if whole_kv else ""))


def _rows_phrase(rows, q_len: int) -> str:
    """``rows 2..3 (request 1)``; requests named where the rows are whole requests."""
    reqs = sorted({int(r) // q_len for r in rows})
    whole_req = q_len > 1 and len(rows) == q_len * len(reqs)
    return (f"row{'s' if len(rows) > 1 else ''} {_ranges(rows)}"
            + (f" (request{'s' if len(reqs) > 1 else ''} {_ranges(reqs)})" if whole_req else ""))


def _block(expected: np.ndarray, fail: np.ndarray, q_len: int) -> str | None:
    """The whole (row, head) units and dims the failures fill (module note):
    rows grouped by the heads wrong in them, at most 3 groups named."""
    n_rows, n_heads, n_dims = fail.shape
    per_unit = fail.reshape(-1, n_dims)
    units = per_unit.sum(axis=1) >= MIN_BLOCK // 2
    if not units.any():
        return None
    dims = per_unit[units].mean(axis=0) >= 0.5
    block = per_unit[units][:, dims]
    inside, total = int(block.sum()), int(fail.sum())
    # Every dim of every unit that expects a nonzero value: nothing to single out.
    everything = dims.all() and not np.any(expected.reshape(-1, n_dims)[~units])
    if block.size < MIN_BLOCK or block.mean() < 0.75 or inside < 0.9 * total or everything:
        return None
    units = units.reshape(n_rows, n_heads)
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in np.flatnonzero(units.any(axis=1)):
        groups.setdefault(tuple(np.flatnonzero(units[r])), []).append(int(r))
    where = []
    for heads, rows in list(groups.items())[:3]:
        all_rows = len(rows) == n_rows
        if len(heads) == n_heads:
            where.append("every row" if all_rows else f"all heads of {_rows_phrase(rows, q_len)}")
        else:
            where.append(_heads_phrase(heads, n_heads) + ("" if all_rows else f" of {_rows_phrase(rows, q_len)}"))
    if len(groups) > 3:
        where.append(f"{len(groups) - 3} more groups of rows")
    what = ""
    if not dims.all():
        d = np.flatnonzero(dims)
        tile = len(d) in (16, 32, 64) and d[0] % len(d) == 0 and d[-1] - d[0] == len(d) - 1
        what = f"dim{'s' if len(d) > 1 else ''} {_ranges(d)}" + (f" (one {len(d)}-dim tile)" if tile else "") + " of "
    cells = units[:, :, None] & dims
    zero = " (where exactly 0 is expected)" if not np.any(expected[cells]) else ""
    n = total - inside
    rest = "every other element passes" if not n else f"{n} other element{' fails' if n == 1 else 's fail'}"
    return f"wrong{zero}: {what}{'; '.join(where)} ({100 * block.mean():.3g}% of those elements fail, {rest})"


def _swapped_rows(expected: np.ndarray, got: np.ndarray, fail: np.ndarray) -> str | None:
    """Rows that hold another row's expected output (within 1/64 of that row's
    largest |value|, elementwise), named when exactly one other row matches;
    rows count as wrong when half their elements fail, and beyond 64 wrong
    rows none is examined (a bound on the cost)."""
    n_rows = fail.shape[0]
    bad = np.flatnonzero(fail.reshape(n_rows, -1).mean(axis=1) >= 0.5)
    if not bad.size or bad.size > 64:
        return None
    e, g = expected.reshape(n_rows, -1), got.reshape(n_rows, -1)
    tol = np.abs(e).max(axis=1) / 64
    holds: dict[int, int] = {}
    with np.errstate(invalid="ignore"):
        for b in bad:
            match = (np.abs(g[b] - e).max(axis=1) <= tol) & (tol > 0)
            match[b] = False
            if np.count_nonzero(match) == 1:
                holds[int(b)] = int(np.flatnonzero(match)[0])
    if not holds:
        return None
    said: set[int] = set()
    phrases: list[str] = []
    for r, other in holds.items():
        if r in said:
            continue
        if holds.get(other) == r:
            phrases.append(f"rows {r} and {other} swapped")
            said |= {r, other}
        else:
            phrases.append(f"row {r} holds row {other}'s expected output")
            said.add(r)
    return ", ".join(phrases[:4]) + (f" and {len(phrases) - 4} more" if len(phrases) > 4 else "")


def _values(expected: np.ndarray, got: np.ndarray, fail: np.ndarray) -> str | None:
    """Zeros where nonzero is expected, or ``got = c * expected`` across the failing
    elements (over those at least 1/8 of their (row, head)'s largest |expected|,
    where bf16 rounding moves the ratio by 2**-8 at most)."""
    nonzero = fail & (expected != 0)
    n = int(nonzero.sum())
    if n >= MIN_EVIDENCE:
        zeros = int((nonzero & (got == 0)).sum())
        if zeros >= 0.9 * n:
            return f"zeros where nonzero values are expected ({zeros} of the {n} failing elements that expect nonzero)"
    head = np.abs(expected).max(axis=2, keepdims=True)
    use = nonzero & np.isfinite(got) & (np.abs(expected) >= head / 8)
    if use.sum() < MIN_EVIDENCE:
        return None
    ratio = got[use] / expected[use]
    c = float(np.median(ratio))
    if c == 0 or np.mean(np.abs(ratio - c) <= abs(c) / 32) < 0.9:
        return None
    if abs(c + 1) <= 1 / 32:
        return f"sign flipped: got = -expected in {int(use.sum())} failing elements"
    if abs(c - 1) <= 1 / 16:
        return None
    return f"scaled by a constant: got = {c:.4g} x expected in {int(use.sum())} failing elements"
