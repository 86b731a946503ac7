"""Rounding-bias statistics: whether outputs inside their intervals still round one way.

A kernel may stay inside every interval and still round one
way: where an interval holds two values (``pre`` within ``delta`` of a
midpoint), it may always take the one toward zero. ``Report`` counts, among
the outputs inside their interval or within one ulp of ``rne(pre)`` (an
output farther off is a wrong value, reported as such, not a rounding
direction), those that differ from ``rne(pre)`` (``n_off_nearest``), how
many of them lie toward zero and away from it (by magnitude), how many below
and above (by value), and the mean signed error in ulps (positive: away from
zero), over the elements whose ``rne(pre)`` is at least ``2**-125`` in
magnitude (below, flushing to zero is allowed by term 4 and is one-sided)
and whose ``pre`` lies farther from its nearest midpoint than the shared
part of ``delta`` (``Interval.shared``: one flipped ``bf16(p)`` moves every
dim of a (row, head) in the direction of its ``v``, which is the direction
of the output where that key dominates, so those elements deviate together,
not independently; against the oracle, P's bf16 rounding likewise). For a
correct kernel the side of a differing element is the side of
the midpoint nearest ``pre`` (a question of where ``pre`` falls within its
bf16 cell, far above float32 noise) combined with the sign of the kernel's
float32 deviation: the null hypothesis is that each differing element goes
either way with probability 1/2. Elements are not independent trials:
part of a correct kernel's float32 noise is common to a whole (row, head)
(the row sum ``l`` and the split-merge weights scale every dim alike), and
(row, head) groups holding the same ``pre`` values are one computation
repeated (equal heads, a pool that repeats its bytes). So the trials are
the distinct (row, head) groups with differing elements, each leaning the
way most of them go (a group split evenly on an axis is no trial on it).
Against the null hypothesis, ``t`` of ``k`` groups leaning one way has
probability at most
``exp(-k KL(t/k || 1/2))`` (the Chernoff bound of the binomial tail, exact
for any ``k``, no normal approximation), doubled for two sides and doubled
again for the two axes (toward/away from zero, below/above). A report fails
with a named verdict (``Report.bias``, e.g. "outputs rounded toward zero in
48% of elements") when that bound is below ``BIAS_ALPHA = 1e-9``, the
false-alarm probability per report: the threshold follows from ``k`` alone.
With every group leaning one way, ``k >= 32`` groups are needed; a tie
broken the wrong way in fewer groups is beyond any test that does not know
the kernel's float32 values.

"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .tolerance import Interval, _key

if TYPE_CHECKING:  # report.py imports this module: the name is for the annotation only
    from .report import Report

BIAS_ALPHA = 1e-9  # false-alarm probability of the bias verdict, per report


def bias_false_alarm(t: int, k: int) -> float:
    """Chernoff bound on ``P(T >= t)`` for ``T ~ Binomial(k, 1/2)``:
    ``exp(-k KL(t/k || 1/2))`` for ``t > k/2``, else 1 (see the module note)."""
    if k <= 0 or 2 * t <= k:
        return 1.0
    x = t / k
    kl = x * math.log(2 * x) + ((1 - x) * math.log(2 * (1 - x)) if x < 1 else 0.0)
    return math.exp(-k * kl)



BIAS_SIDES = ("toward zero", "away from zero", "down (toward -inf)", "up (toward +inf)")


def _rounding_stats(rep: Report, got: np.ndarray, iv: Interval, ok: np.ndarray) -> None:
    """Fill the rounding statistics and the bias verdict of ``rep`` (module note).

    Counted over finite bf16 outputs inside their interval or within one ulp
    of its nearest-even value (a value farther off is an error, and calling it
    "rounded toward zero" would be false) whose nearest-even value is at
    least ``2**-125`` in magnitude: below that, flushing
    subnormals to zero (term 4) is allowed and is one-sided by nature."""
    ok = ok & (np.abs(iv.nearest) >= 2.0**-125)
    ok = ok & iv.independent
    g = np.where(ok, got, np.float32(0))
    signed = (_key(g) - _key(iv.nearest)).astype(np.float64)  # in ulps, by value
    ok = ok & ((np.abs(signed) <= 1) | ((g >= iv.lo) & (g <= iv.hi)))
    outward = np.where(iv.nearest < 0, -signed, signed)  # positive: away from zero
    off = ok & (signed != 0)
    mag_g, mag_n = np.abs(g), np.abs(iv.nearest)
    sides = dict(zip(BIAS_SIDES, (off & (mag_g < mag_n), off & (mag_g > mag_n), off & (signed < 0),
                                  off & (signed > 0))))
    rep.n_off_nearest = int(off.sum())
    rep.n_toward_zero, rep.n_away_from_zero, rep.n_below, rep.n_above = (int(m.sum()) for m in sides.values())
    n_ok = rep.n_rounding = int(ok.sum())
    rep.mean_signed_ulp = float(outward[ok].sum() / n_ok) if n_ok else 0.0
    # The trials are (row, head) groups, not elements: part of a correct
    # kernel's float32 noise is common to a whole (row, head) (its row sum l,
    # the split-merge weights scale every dim alike), so its elements near a
    # midpoint move together. A group leans the way most of its off-nearest
    # outputs go; groups with equal unrounded values are one computation
    # repeated (equal heads, a pool that repeats its bytes) and count once.
    per_group = {side: m.sum(axis=2) for side, m in sides.items()}
    has = off.any(axis=2)
    net_out = (per_group["away from zero"] - per_group["toward zero"])[has]
    net_up = (per_group["up (toward +inf)"] - per_group["down (toward -inf)"])[has]
    values = np.ascontiguousarray(iv.pre[has]).view(np.dtype((np.void, 8 * iv.pre.shape[2])))[:, 0]
    first = np.unique(values, return_index=True)[1]
    net_out, net_up = net_out[first], net_up[first]
    rep.bias_counts = dict(zip(BIAS_SIDES, (int((net_out < 0).sum()), int((net_out > 0).sum()),
                                            int((net_up < 0).sum()), int((net_up > 0).sum()))))
    rep.bias_p, name, t, k = bias_verdict(rep.bias_counts)
    if rep.bias_p <= BIAS_ALPHA:
        n = int(sides[name].sum())
        rep.bias = (f"outputs rounded {name} in {100 * n / max(rep.n_elements, 1):.3g}% of elements "
                    f"({t} of the {k} (row, head) groups with outputs off nearest-even lean that way; "
                    f"chance under no bias <= {rep.bias_p:.2g})")


def bias_verdict(counts: dict) -> tuple[float, str, int, int]:
    """The rounding-bias test (module note) on ``counts``: for each of
    ``BIAS_SIDES``, how many trials (distinct (row, head) groups with outputs
    off nearest-even) lean that way. Returns ``(p, side, t, k)``: the bound on
    the chance, under no bias, of the most one-sided count (``t`` of the ``k``
    trials of that side's axis lean to ``side``), over two sides on each of two
    axes (toward/away from zero, down/up)."""
    best = (1.0, BIAS_SIDES[0], 0, 0)
    for axis in (BIAS_SIDES[:2], BIAS_SIDES[2:]):
        n = [int(counts.get(side, 0)) for side in axis]
        t, side = max(zip(n, axis))
        p = min(1.0, 4 * bias_false_alarm(t, sum(n)))
        if p < best[0]:
            best = (p, side, t, sum(n))
    return best

