"""The tolerance model and the comparison report.

Notation: ``u = 2**-24`` (float32 unit roundoff); for an output element,
``A = sum_k p_k |v_k| * v_global / l`` (its *magnitude*: no result of a
weighted mean can move by more than a relative error of its weights times
``A``); ``ulp(x)`` one bf16 ulp at ``|x|``; ``rne(x)`` the nearest-even bf16
rounding of the real number ``x``; ``TOPK`` the slot count; ``W`` streams
(waves) and ``L`` lane partials per head of the geometry; ``S`` splits.

Against the emulation of the implementation's own geometry, the two differ
only by float32 noise before their final bf16 rounding:

1. Scores. Any summation order of ``q.k`` is within ``128 u sum|q_d k_d|``
   of the exact dot product; the emulation is within ``u |s|`` of it. Through
   ``p = exp2(s c - max c)`` that is a relative error in ``p`` of at most
   ``eta = 2 ln2 c 128 u max_k sum|q_d k_d|`` (the 2: ``s`` and the max).
   Numerator and denominator of the softmax both move, so ``2 eta A``.
2. Roundings in the chain. Per block: the PV sum and the ``l`` sum of
   ``K = keys_per_max`` terms each (any order: ``K u`` of their absolute sum),
   ``O * alpha`` and the add, ``l * alpha`` and the add, each ``exp2`` within
   2 u (v_exp_f32 is 1 ulp): ``(2K + 8) u`` for a block's own terms. Blocks
   compound only through the rescales, ``5 u`` per later block; then the W-way
   wave merge, the L-lane tree, the S-way split merge and the final
   ``acc * (v_global / l)``. Together at most
   ``gamma = (64 + 2 K + 8 TOPK + 2 W + 2 S + L) u`` relative to ``A``.
3. bf16(P). Where float32 ``p`` lies within its noise of a bf16 rounding
   midpoint, the other side may round it the other way: one bf16 ulp of
   ``p`` times ``|v|``. The emulation finds those keys and sums them
   (``Emulation.flip_risk``, F).

4. Underflow. With large logits ``p`` falls below 2**-126. A kernel may
   round it on the subnormal grid or flush it (and any subnormal partial) to
   zero: NVIDIA's ``ex2.approx.ftz`` and AMD's f32 denormal modes both do. Each
   key then moves by at most ``2**-126 |v_k|``, each float32 operation on a
   subnormal partial by ``2**-126``, and the final product once more. Since
   ``l >= 1/2`` (the key holding the running max has ``p`` near 1):
   ``U = 2**-125 (sum_k |v_k| + 64 + 8 TOPK) v_global + 2**-126``.

So with ``delta = F + (gamma + 2 eta) A + U``, the kernel's float32 value
before its final rounding, ``y``, satisfies ``|y - pre| <= delta``, where
``pre`` is the emulation's float32 value before its final rounding
(``Emulation.pre_round``, recomputed from the problem at check time; the
golden files store only the rounded output).

The acceptance test is the exact consequence. Both sides round once at the
end, to nearest even, and ``rne`` is monotone, so a correct kernel's output
``got = rne(y)`` lies in the interval

    ``rne(pre - delta) <= got <= rne(pre + delta)``

and every bf16 value of that interval is ``rne`` of some ``y`` within
``delta`` of ``pre`` (the interval's ends are; a value between two such is
``rne`` of a point between them). So this is exactly "``got`` is the
nearest-even rounding of some value within ``delta`` of ``pre``": no more is
admitted. Where ``delta`` is smaller than the distance from ``pre`` to the
nearest bf16 rounding midpoint, ``lo == hi == rne(pre)``: the element is
checked to exactly one bf16 value (``Report.n_determined``; a kernel that
rounds its output any other way than nearest-even is caught there). The ends
are computed in float64 and each widened by one float64 ulp outward
(``pre - delta`` and ``pre + delta`` are float64 roundings of reals), which
can change ``rne`` of an end only where that end lies within 2**-52 relative
of a midpoint. The old test ``|got - rne(pre)| <= delta + ulp(|pre| + delta)``
admitted any value up to a whole ulp beyond ``pre +- delta``: a truncating
kernel passed it everywhere.

Against the exact oracle (``pre`` exact): the kernel's own float32 result is
within ``delta`` of exact, where now, for a kernel that rounds P to bf16,
``delta`` also holds ``2**-8 (1 + 2**-7) A`` (each ``bf16(p)`` is within a
relative half-ulp ``2**-8`` of ``p``; ``A`` with rounded weights is within
``2**-7`` of the exact one), so ``delta = (gamma + 2 eta) A (1 + 2**-8 (1 + 2**-7))
+ [2**-8 (1 + 2**-7) A] + U + E``. For the exact class (geometry None:
arithmetic at least float32 in an unknown order, P unrounded) gamma covers a
summation over every key: ``gamma = (2 * 128 * TOPK + 64) u``.

5. The oracle's own noise (oracle only). ``pre`` is the oracle's float64
   result, itself within float64 summation noise of the real one: the same
   chain as the exact class with float64's roundoff,
   ``E = (2 * 128 * TOPK + 64) 2**-53 A``. (The emulation's ``pre`` needs no
   such term: it is the float32 value the emulated kernel holds, exactly.)

Then the same interval, ``rne(exact - delta) <= got <= rne(exact + delta)``,
which the old ``|got - exact| <= delta + ulp(|exact| + delta) / 2`` matched
except at binade edges.

Rounding bias. A kernel may stay inside every interval and still round one
way: where an interval holds two values (``pre`` within ``delta`` of a
midpoint), it may always take the one toward zero. ``Report`` counts the
elements whose output differs from ``rne(pre)`` (``n_off_nearest``), how
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
either way with probability 1/2, independently. Against it, ``t`` of ``k``
differing elements on one side has probability at most
``exp(-k KL(t/k || 1/2))`` (the Chernoff bound of the binomial tail, exact
for any ``k``, no normal approximation), doubled for two sides and doubled
again for the two axes (toward/away from zero, below/above). A report fails
with a named verdict (``Report.bias``, e.g. "outputs rounded toward zero in
48% of elements") when that bound is below ``BIAS_ALPHA = 1e-9``, the
false-alarm probability per report: the threshold follows from ``k`` alone.
With every differing element on one side, ``k >= 32`` is needed; a tie
broken the wrong way in fewer elements is beyond any test that does not
know the kernel's float32 values.

No other tolerance constant exists in this module.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .emulate import F32_EPS, SEED_GEOMETRY, Geometry, emulate_details, kernel_constant
from .formats import bf16_round, bf16_ulp, is_bf16
from .oracle import oracle_details
from .paged_cache import BLK, D
from .problem import HG, DecodeProblem

P_BF16_REL = 2.0**-8 * (1 + 2.0**-7)
F64_EPS = 2.0**-53  # unit roundoff of float64 (term 5)
BIAS_ALPHA = 1e-9  # false-alarm probability of the bias verdict, per report


def ulp_distance(a, b) -> np.ndarray:
    """bf16 ulps between ``a`` and ``b`` (float32 arrays of bf16 values, same shape).

    Sign-aware (``-0`` and ``+0`` are 0 apart; crossing zero counts the ulps on
    both sides); float64 result, ``inf`` where exactly one is NaN, 0 where both are.
    """
    def key(x):
        """bf16 bit patterns as integers ordered like the values (-0 == +0)."""
        bits = (bf16_round(np.asarray(x, np.float32)).view(np.uint32) >> 16).astype(np.int64)
        return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)

    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    na, nb = np.isnan(a), np.isnan(b)
    d = np.abs(key(np.where(na, 0, a)) - key(np.where(nb, 0, b))).astype(np.float64)
    d = np.where(na != nb, np.inf, d)
    return np.where(na & nb, 0.0, d)


@dataclasses.dataclass
class Mismatch:
    """One element outside its interval ``lo .. hi`` (the bf16 values a correct
    kernel may give there; see the module note)."""

    row: int
    request: int
    position: int
    kv_head: int
    head: int
    dim: int
    expected: float
    got: float
    bound: float
    ulps: float
    pre: float = math.nan
    lo: float = math.nan
    hi: float = math.nan

    def __str__(self) -> str:
        return (
            f"row {self.row} (request {self.request}, position {self.position}) KV head {self.kv_head} "
            f"head {self.head} dim {self.dim}: expected {self.expected:.7g} (unrounded {self.pre:.9g}), "
            f"got {self.got:.7g}, allowed {self.lo:.7g} .. {self.hi:.7g}, "
            f"|got - unrounded| {abs(self.got - self.pre):.3g} > reach {self.bound:.3g} ({self.ulps:g} ulp)"
        )


def describe_modified_inputs(changed: dict) -> str:
    """``changed`` (input array name -> bytes changed) as one phrase, e.g.
    ``backend modified its input 'pool' (12 bytes changed)``."""
    parts = ", ".join(f"{name!r} ({n} bytes changed)" for name, n in changed.items())
    return f"backend modified its input{'s' if len(changed) > 1 else ''} {parts}"


def bias_false_alarm(t: int, k: int) -> float:
    """Chernoff bound on ``P(T >= t)`` for ``T ~ Binomial(k, 1/2)``:
    ``exp(-k KL(t/k || 1/2))`` for ``t > k/2``, else 1 (see the module note)."""
    if k <= 0 or 2 * t <= k:
        return 1.0
    x = t / k
    kl = x * math.log(2 * x) + ((1 - x) * math.log(2 * (1 - x)) if x < 1 else 0.0)
    return math.exp(-k * kl)


@dataclasses.dataclass
class Report:
    """The result of comparing one output with its reference.

    against: "emulation(<geometry>, splits=S)" or "oracle".
    n_elements, n_fail: elements compared and outside their interval (NaN and
    non-bf16 values included). max_ulp: the largest bf16 ulp distance from
    the nearest-even rounding of the reference (large near zero, where outputs
    are sums that cancel); max_bound_ratio: the largest ``|got - pre| / reach``,
    where reach is the distance from ``pre`` to the far edge of the interval's
    last rounding cell on ``got``'s side (< 1 exactly when inside the interval).
    worst: up to 10 mismatches, largest excess first. repeat_mismatch: elements
    whose bits differ between two runs of the same problem (set by the harness). nan_rows: rows holding a
    NaN though at least one element was written; unwritten_rows: rows wholly
    NaN (the harness pre-fills NaN, so such a row was never stored).
    modified_inputs: input array name -> bytes the backend changed in it (set
    by the harness; any entry fails, whatever the output).

    Rounding statistics (module note, "Rounding bias"): n_determined, elements
    whose interval is one bf16 value; n_off_nearest, finite bf16 outputs other
    than the nearest-even rounding of ``pre``; of those n_toward_zero /
    n_away_from_zero (by magnitude) and n_below / n_above (by value);
    mean_signed_ulp, the mean of the ulps from that rounding (positive away
    from zero) over the n_rounding elements these statistics count (finite
    bf16 outputs whose nearest-even reference is at least 2**-125); bias_p, the bound on the chance of the
    most one-sided count under the null hypothesis; bias, the named verdict
    when ``bias_p <= BIAS_ALPHA`` (a failure), else None.
    """

    against: str
    n_elements: int
    n_fail: int
    max_ulp: float
    worst: list
    nan_rows: list
    unwritten_rows: list
    not_bf16: int
    max_bound_ratio: float = 0.0
    shape_error: str | None = None
    repeat_mismatch: int = 0
    modified_inputs: dict = dataclasses.field(default_factory=dict)
    n_determined: int = 0
    n_off_nearest: int = 0
    n_toward_zero: int = 0
    n_away_from_zero: int = 0
    n_below: int = 0
    n_above: int = 0
    mean_signed_ulp: float = 0.0
    n_rounding: int = 0
    bias_p: float = 1.0
    bias: str | None = None

    @property
    def passed(self) -> bool:
        """True when every element is within its interval, the rounding shows no
        systematic direction, no run differed, the shape was right and the
        backend left its inputs as they were."""
        return (self.shape_error is None and self.n_fail == 0 and self.repeat_mismatch == 0
                and not self.modified_inputs and self.bias is None)

    @property
    def fail_fraction(self) -> float:
        """Fraction of compared elements outside their interval."""
        return self.n_fail / max(self.n_elements, 1)

    def rounding_summary(self) -> str:
        """One phrase: how tightly the elements were checked and how the output rounds."""
        n = max(self.n_elements, 1)
        return (f"{100 * self.n_determined / n:.4g}% checked to one bf16 value; "
                f"{self.n_off_nearest} off nearest-even ({self.n_toward_zero} toward zero, "
                f"{self.n_away_from_zero} away; {self.n_below} below, {self.n_above} above), "
                f"mean signed error {self.mean_signed_ulp:+.3g} ulp")

    def summary(self) -> str:
        """One line: PASS/FAIL, counts, the largest deviations, a rounding-bias verdict."""
        if self.shape_error:
            s = f"FAIL vs {self.against}: {self.shape_error}"
        else:
            head = "PASS" if self.passed else "FAIL"
            s = (f"{head} vs {self.against}: {self.n_fail}/{self.n_elements} elements outside interval "
                 f"({100 * self.fail_fraction:.3g}%), max |got - pre|/reach {self.max_bound_ratio:.3g}, "
                 f"max {self.max_ulp:g} ulp")
            if self.unwritten_rows:
                s += f", {len(self.unwritten_rows)} rows not written"
            if self.nan_rows:
                s += f", {len(self.nan_rows)} rows with NaN"
            if self.not_bf16:
                s += f", {self.not_bf16} values not bf16"
            if self.repeat_mismatch:
                s += f", second run differs in {self.repeat_mismatch} elements"
            if self.bias:
                s += f", rounding bias: {self.bias}"
        # Beside a shape error too: overwritten inputs are a failure of their own.
        if self.modified_inputs:
            s += f", {describe_modified_inputs(self.modified_inputs)}"
        return s

    def details(self) -> str:
        """The summary, the rounding statistics, NaN/unwritten rows and the worst mismatches, one a line."""
        lines = [self.summary()]
        if not self.shape_error:
            lines.append(f"  rounding: {self.rounding_summary()}")
        if self.unwritten_rows:
            lines.append(f"  rows not written: {self.unwritten_rows[:20]}")
        if self.nan_rows:
            lines.append(f"  rows with NaN: {self.nan_rows[:20]}")
        lines += [f"  {m}" for m in self.worst]
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Interval:
    """The acceptance interval of every element (module note); each ``[rows, H, 128]``.

    pre: float64, the reference before its final rounding (the emulation's
    float32 value, or the exact oracle's). delta: float64, the bound on a
    correct kernel's distance from ``pre`` before its own rounding.
    nearest: float32 bf16 values, ``rne(pre)``. lo, hi: float32 bf16 values,
    ``rne(pre - delta)`` and ``rne(pre + delta)``, the ends widened outward by
    one float64 ulp. shared: float64, the part of ``delta`` whose cause is common
    to a whole (row, head) (a flipped ``bf16(p)``; P's bf16 rounding against
    the oracle), so that elements it can push across a midpoint do not deviate
    independently (left out of the bias count).
    """

    pre: np.ndarray
    delta: np.ndarray
    nearest: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    shared: np.ndarray | float = 0.0

    @property
    def determined(self) -> np.ndarray:
        """bool: the interval is exactly one bf16 value."""
        return _key(self.lo) == _key(self.hi)

    @property
    def independent(self) -> np.ndarray:
        """bool: ``pre`` lies farther from its nearest rounding midpoint than
        ``shared`` reaches, so a correct kernel's deviation across it would be
        float32 noise of its own, not a shared cause (a flipped ``bf16(p)`` moves
        every dim of a (row, head) the same way): the elements the bias count uses."""
        with np.errstate(invalid="ignore", over="ignore"):
            to_midpoint = np.minimum(_midpoint(self.nearest, 1) - self.pre, self.pre - _midpoint(self.nearest, -1))
        return ~(to_midpoint < self.shared)


def _key(x) -> np.ndarray:
    """bf16 values (float32) as integers ordered like the values, -0 == +0."""
    bits = (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.int64)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def _from_key(k) -> np.ndarray:
    """Inverse of ``_key`` (0 gives +0)."""
    k = np.asarray(k, np.int64)
    bits = np.where(k < 0, (-k) | 0x8000, k).astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32)


def bf16_interval(pre, delta) -> tuple[np.ndarray, np.ndarray]:
    """``(rne(pre - delta), rne(pre + delta))`` as float32 bf16 values, each end
    computed in float64 and widened outward by one float64 ulp (module note)."""
    pre = np.asarray(pre, np.float64)
    delta = np.asarray(delta, np.float64)
    lo = bf16_round(np.nextafter(pre - delta, -np.inf))
    hi = bf16_round(np.nextafter(pre + delta, np.inf))
    return lo, hi


def _interval(pre, delta, shared=0.0) -> Interval:
    lo, hi = bf16_interval(pre, delta)
    return Interval(pre=np.asarray(pre, np.float64), delta=np.asarray(delta, np.float64),
                    nearest=bf16_round(np.asarray(pre, np.float64)), lo=lo, hi=hi,
                    shared=np.asarray(shared, np.float64))


def _midpoint(x, step: int) -> np.ndarray:
    """float64 midpoint between bf16 values ``x`` and their next bf16 neighbour
    above (``step`` 1) or below (-1), infinities at the ends."""
    nxt = _from_key(np.clip(_key(x) + step, -0x7F80, 0x7F80))
    return (np.asarray(x, np.float64) + nxt.astype(np.float64)) / 2


def _reach(iv: Interval, got: np.ndarray) -> np.ndarray:
    """Distance from ``pre`` to the rounding-cell edge past ``hi`` (for got >= pre)
    or before ``lo`` (got < pre): ``|got - pre| / reach < 1`` exactly inside."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(got >= iv.pre, _midpoint(iv.hi, 1) - iv.pre, iv.pre - _midpoint(iv.lo, -1))


def _report(problem: DecodeProblem, got, iv: Interval, against: str) -> Report:
    shape = (problem.rows, problem.H, 128)
    got = np.asarray(got)
    if got.shape != shape or got.dtype != np.float32:
        return Report(against, 0, 0, np.inf, [], [], [], 0,
                      shape_error=f"output must be float32 {shape}, got {got.dtype} {got.shape}")
    nan = np.isnan(got)
    row_nan = nan.reshape(problem.rows, -1)
    unwritten = [int(r) for r in np.flatnonzero(row_nan.all(axis=1))]
    nan_rows = [int(r) for r in np.flatnonzero(row_nan.any(axis=1) & ~row_nan.all(axis=1))]
    not_bf16 = ~is_bf16(got) & ~nan
    g64 = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        inside = (g64 >= iv.lo) & (g64 <= iv.hi)
        fail = nan | not_bf16 | ~inside
        reach = _reach(iv, g64)
        ratio = np.where(nan, np.inf, np.abs(g64 - iv.pre) / reach)
    ulps = ulp_distance(got, iv.nearest)
    worst = []
    if fail.any():
        idx = np.argwhere(fail)
        order = np.argsort(-ratio[fail], kind="stable")[:10]
        pos = problem.positions
        for r, h, d in idx[order]:
            worst.append(Mismatch(
                row=int(r), request=int(r // problem.q_len), position=int(pos[r]),
                kv_head=int(h // HG), head=int(h), dim=int(d), expected=float(iv.nearest[r, h, d]),
                got=float(got[r, h, d]), bound=float(reach[r, h, d]), ulps=float(ulps[r, h, d]),
                pre=float(iv.pre[r, h, d]), lo=float(iv.lo[r, h, d]), hi=float(iv.hi[r, h, d]),
            ))
    rep = Report(
        against=against, n_elements=int(got.size), n_fail=int(fail.sum()),
        max_ulp=float(ulps.max(initial=0.0)), worst=worst, nan_rows=nan_rows,
        unwritten_rows=unwritten, not_bf16=int(not_bf16.sum()),
        max_bound_ratio=float(ratio.max(initial=0.0)),
        n_determined=int(iv.determined.sum()),
    )
    _rounding_stats(rep, got, iv, ~nan & ~not_bf16 & np.isfinite(got))
    return rep


def _rounding_stats(rep: Report, got: np.ndarray, iv: Interval, ok: np.ndarray) -> None:
    """Fill the rounding statistics and the bias verdict of ``rep`` (module note).

    Counted over finite bf16 outputs whose nearest-even reference is at least
    ``2**-125`` in magnitude: below that, flushing subnormals to zero (term 4)
    is allowed and is one-sided by nature."""
    ok = ok & (np.abs(iv.nearest) >= 2.0**-125)
    ok = ok & iv.independent
    g = np.where(ok, got, np.float32(0))
    signed = (_key(g) - _key(iv.nearest)).astype(np.float64)  # in ulps, by value
    outward = np.where(iv.nearest < 0, -signed, signed)  # positive: away from zero
    off = ok & (signed != 0)
    mag_g, mag_n = np.abs(g), np.abs(iv.nearest)
    rep.n_off_nearest = int(off.sum())
    rep.n_toward_zero = int((off & (mag_g < mag_n)).sum())
    rep.n_away_from_zero = int((off & (mag_g > mag_n)).sum())
    rep.n_below = int((off & (signed < 0)).sum())
    rep.n_above = int((off & (signed > 0)).sum())
    n_ok = rep.n_rounding = int(ok.sum())
    rep.mean_signed_ulp = float(outward[ok].sum() / n_ok) if n_ok else 0.0
    k = rep.n_off_nearest
    sides = [("toward zero", rep.n_toward_zero), ("away from zero", rep.n_away_from_zero),
             ("down (toward -inf)", rep.n_below), ("up (toward +inf)", rep.n_above)]
    # Two sides on each of two axes: four tails.
    name, t = max(sides, key=lambda s: s[1])
    rep.bias_p = min(1.0, 4 * bias_false_alarm(t, k))
    if rep.bias_p <= BIAS_ALPHA:
        rep.bias = (f"outputs rounded {name} in {100 * t / max(rep.n_elements, 1):.3g}% of elements "
                    f"({t} of the {k} off nearest-even; chance under no bias <= {rep.bias_p:.2g})")


def _gamma_emulated(problem: DecodeProblem, geometry: Geometry, splits: int) -> float:
    g = geometry
    return (64 + 2 * g.keys_per_max + 8 * problem.TOPK + 2 * g.streams + 2 * splits + g.lanes) * F32_EPS


def _gamma_exact(problem: DecodeProblem, eps: float) -> float:
    """gamma of a summation over every key in any order, for unit roundoff ``eps``."""
    return (2 * BLK * problem.TOPK + 64) * eps


def _underflow(problem: DecodeProblem, abs_v_sum: np.ndarray) -> np.ndarray:
    """Term 4 of the module note: U for each element."""
    return 2.0**-125 * (abs_v_sum + (64 + 8 * problem.TOPK) * problem.v_global_scale) + 2.0**-126


def interval_vs_emulation(problem: DecodeProblem, *, splits: int = 1,
                          geometry: Geometry = SEED_GEOMETRY) -> Interval:
    """The acceptance interval of every element against the emulation (module note)."""
    e = emulate_details(problem, splits=splits, geometry=geometry)
    gamma = _gamma_emulated(problem, geometry, splits)
    eta = e.score_noise.astype(np.float64)[..., None]
    delta = e.flip_risk + (gamma + 2 * eta) * e.magnitude + _underflow(problem, e.abs_v_sum)
    return _interval(e.pre_round.astype(np.float64), delta, shared=e.flip_risk)


def interval_vs_oracle(problem: DecodeProblem, *, p_bf16: bool, geometry: Geometry | None = None,
                       splits: int = 1) -> Interval:
    """The acceptance interval of every element against the exact oracle (module note).

    p_bf16: the implementation rounds P to bf16. geometry None: the exact class.
    """
    out, _, mag, sabs, vsum = oracle_details(problem)
    c = float(kernel_constant(problem))
    eta = (2 * np.log(2) * c * D * F32_EPS * sabs)[..., None]
    gamma = _gamma_exact(problem, F32_EPS) if geometry is None else _gamma_emulated(problem, geometry, splits)
    delta = (gamma + 2 * eta) * mag * (1 + P_BF16_REL) + (P_BF16_REL * mag if p_bf16 else 0.0)
    delta = delta + _underflow(problem, vsum) + _gamma_exact(problem, F64_EPS) * mag
    return _interval(out, delta, shared=P_BF16_REL * mag if p_bf16 else 0.0)


def bound_vs_emulation(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY):
    """``(expected float32, bound float64)``, both ``[rows, H, 128]``: the emulation's
    output and a bound on ``|got - expected|`` that the interval implies
    (``delta + ulp(|pre| + delta)``). Not the acceptance test, which is the interval."""
    iv = interval_vs_emulation(problem, splits=splits, geometry=geometry)
    return iv.nearest, iv.delta + bf16_ulp(np.abs(iv.pre) + iv.delta)


def bound_vs_oracle(problem: DecodeProblem, *, p_bf16: bool, geometry: Geometry | None = None, splits: int = 1):
    """``(exact float64, bound float64)``, both ``[rows, H, 128]``: a bound on
    ``|got - exact|`` that the interval implies (``delta + ulp(|exact| + delta) / 2``).
    Not the acceptance test, which is the interval.

    p_bf16: the implementation rounds P to bf16. geometry None: the exact class.
    """
    iv = interval_vs_oracle(problem, p_bf16=p_bf16, geometry=geometry, splits=splits)
    return iv.pre, iv.delta + bf16_ulp(np.abs(iv.pre) + iv.delta) / 2


def compare_with_emulation(problem: DecodeProblem, got, *, splits: int = 1,
                           geometry: Geometry = SEED_GEOMETRY) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with the emulation of ``geometry``."""
    iv = interval_vs_emulation(problem, splits=splits, geometry=geometry)
    return _report(problem, got, iv, f"emulation({_geom_name(geometry)}, splits={splits})")


def compare_with_oracle(problem: DecodeProblem, got, *, p_bf16: bool = False,
                        geometry: Geometry | None = None, splits: int = 1) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with the exact oracle."""
    iv = interval_vs_oracle(problem, p_bf16=p_bf16, geometry=geometry, splits=splits)
    return _report(problem, got, iv, "oracle" + (" (P in bf16)" if p_bf16 else ""))


def compare_backend_output(problem: DecodeProblem, got, *, geometry: Geometry | None, splits: int = 1) -> Report:
    """The right comparison for a backend: the exact oracle for geometry None,
    otherwise the emulation of its own geometry."""
    if geometry is None:
        return compare_with_oracle(problem, got, p_bf16=False)
    return compare_with_emulation(problem, got, splits=splits, geometry=geometry)


def _geom_name(g: Geometry) -> str:
    return f"{g.keys_per_max}x{g.keys_per_lane}{', P bf16' if g.p_bf16 else ''}"
