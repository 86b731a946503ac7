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
   result, itself within float64 noise of the real one: terms 1, 2 and 4 of
   the exact class with float64's roundoff ``e = 2**-53`` and its smallest
   subnormal, ``E = (gamma_e + 2 eta_e) A + U_e`` with
   ``gamma_e = (2 * 128 * TOPK + 64) e``, ``eta_e = 2 sm_scale k_global
   129 e max_k sum|q_d k_d|`` (the float64 dot product, then its product
   with ``sm_scale * k_global``; the 2: the score and the max) and ``U_e = 2**-1074 (sum_k |v_k| v_global +
   (2 * 128 * TOPK + 64) v_global + 1)``: with scores in the thousands
   ``exp`` falls into float64's subnormals, where an operation's error is
   absolute, up to 2**-1074, not relative (``oracle_noise``). E is about
   2**-29 of the float32 terms beside it, so it moves an interval only where
   an end lies that close to a bf16 midpoint; it is what two float64 evaluations
   of the oracle (numpy's, the GPU's in ``nvfp4_suite.kernels.torch``) may
   differ by, each within E of the real value. (The emulation's ``pre``
   needs no such term: it is the float32 value the emulated kernel holds,
   exactly.)

Then the same interval, ``rne(exact - delta) <= got <= rne(exact + delta)``,
which the old ``|got - exact| <= delta + ulp(|exact| + delta) / 2`` matched
except at binade edges.

Rounding bias. A kernel may stay inside every interval and still round one
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

No other tolerance constant exists in this module.

Reporting. What follows decides what a report says, never whether it
passes. Each failing element has one reason: NaN (in a row never written,
or not), not a bf16 value (a float32 value off the bf16 grid fails wherever
it lies, so its distance is no part of the reason), or outside its
interval. Failing elements are ranked by ``|got - pre|`` in bf16 ulps of
the largest ``|pre|`` of their (row, head) (of the whole output where that
(row, head) expects only zeros): one scale per softmax, so an error reads
the same wherever it sits in the head and an element whose ``pre`` is 0
(interval a few subnormals wide, ``|got - pre| / reach`` near 1e38) ranks
by how large its value is next to its neighbours'. A report lists
``MAX_LISTED`` elements, the worst first, with at least the worst of each
reason and of the failures where exactly 0 is expected; its summary names
the worst of them.

Diagnosis. ``diagnose`` names a failure's pattern where the evidence is
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


OUTSIDE = "outside"
NOT_BF16 = "not bf16"
NAN = "NaN"
UNWRITTEN = "unwritten"


@dataclasses.dataclass
class Mismatch:
    """One failing element and why it fails.

    reason: ``OUTSIDE`` (a bf16 value outside ``lo .. hi``, the bf16 values a
    correct kernel may give there; see the module note), ``NOT_BF16`` (a
    float32 value that is not a bf16 value, wherever it lies), ``NAN``, or
    ``UNWRITTEN`` (NaN in a row that holds no other value: never stored).
    expected: ``rne(pre)``; pre: the reference before its final rounding.
    bound: the reach of the interval on ``got``'s side (``_reach``); ulps:
    bf16 ulps from ``expected``. scale: the largest ``|pre|`` of the element's
    (row, head), or of the whole output where that (row, head) expects only
    zeros (``scale_of`` says which); error_ulps: ``|got - pre|`` in bf16 ulps
    of ``scale`` (``inf`` for NaN), the measure the report ranks by.
    """

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
    reason: str = OUTSIDE
    scale: float = math.nan
    scale_of: str = "head"
    error_ulps: float = math.nan

    def __str__(self) -> str:
        where = (f"row {self.row} (request {self.request}, position {self.position}) KV head {self.kv_head} "
                 f"head {self.head} dim {self.dim}")
        if self.pre == 0:
            expected = "expected exactly 0"
        else:
            expected = f"expected {self.expected:.7g} (unrounded {self.pre:.9g})"
        allowed = f"allowed {self.lo:.7g} .. {self.hi:.7g}"
        if self.reason == UNWRITTEN:
            return f"{where}: {expected}, got NaN (the row was never written)"
        if self.reason == NAN:
            return f"{where}: {expected}, got NaN"
        if self.reason == NOT_BF16:
            inside = self.lo <= self.got <= self.hi
            what = (f"got {self.got:.9g}, which is not a bf16 value "
                    f"({'within' if inside else 'and lies outside'} the {allowed})")
        else:
            what = f"got {self.got:.7g}, outside the {allowed}"
        of = "" if self.scale_of == "head" else " (the whole output's: this head expects only zeros)"
        return f"{where}: {expected}, {what}; error {self.error_ulps:.3g} ulp of {self.scale:.3g}{of}"


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

    against: "emulation(<geometry>, splits=S)" or "oracle (<class>)".
    n_elements, n_fail: elements compared and outside their interval (NaN and
    non-bf16 values included). max_ulp: the largest bf16 ulp distance from
    the nearest-even rounding of the reference (large near zero, where outputs
    are sums that cancel); max_bound_ratio: the largest ``|got - pre| / reach``,
    where reach is the distance from ``pre`` to the far edge of the interval's
    last rounding cell on ``got``'s side (< 1 exactly when inside the interval).
    n_outside, n_nan: of the n_fail, the finite bf16 values outside their
    interval and the NaNs (``not_bf16`` counts the rest). worst: up to
    ``MAX_LISTED`` mismatches, largest ``error_ulps`` first (``|got - pre|`` in
    bf16 ulps of the largest ``|pre|`` of the element's (row, head): a measure
    that does not explode where ``pre`` is 0 and the interval a few
    subnormals wide), with at least one of each failure reason present and
    one element at most from rows never written. diagnosis: the failure
    patterns ``diagnose`` recognises. repeat_mismatch: elements
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
    bf16 outputs inside their interval or within one ulp of its nearest-even
    value, which is at least 2**-125); bias_counts, the trials of the bias
    test (``bias_verdict``): for each side, the distinct (row, head) groups
    whose off-nearest outputs lean that way; bias_p, the bound on the chance of the
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
    bias_counts: dict = dataclasses.field(default_factory=dict)
    bias_p: float = 1.0
    bias: str | None = None
    n_outside: int = 0
    n_nan: int = 0
    diagnosis: list = dataclasses.field(default_factory=list)

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
                f"of {self.n_rounding} outputs near the unrounded value, {self.n_off_nearest} off nearest-even ({self.n_toward_zero} toward zero, "
                f"{self.n_away_from_zero} away; {self.n_below} below, {self.n_above} above), "
                f"mean signed error {self.mean_signed_ulp:+.3g} ulp")

    def summary(self) -> str:
        """One line: PASS/FAIL, counts by failure reason, the worst element, a rounding-bias verdict."""
        if self.shape_error:
            s = f"FAIL vs {self.against}: {self.shape_error}"
        elif self.n_fail:
            reasons = [(self.n_outside, "outside their interval"), (self.not_bf16, "not bf16"),
                       (self.n_nan, "NaN")]
            s = (f"FAIL vs {self.against}: {self.n_fail} of {self.n_elements} elements fail "
                 f"({100 * self.fail_fraction:.3g}%: {', '.join(f'{n} {why}' for n, why in reasons if n)})")
            finite = [m for m in self.worst if m.reason not in (NAN, UNWRITTEN)]
            if finite:
                w = finite[0]
                s += (f", worst error {w.error_ulps:.3g} ulp of {w.scale:.3g} "
                      f"(row {w.row} head {w.head} dim {w.dim})")
            s += self._extras()
        else:
            head = "PASS" if self.passed else "FAIL"
            s = (f"{head} vs {self.against}: 0/{self.n_elements} elements outside interval, "
                 f"max |got - pre|/reach {self.max_bound_ratio:.3g}, max {self.max_ulp:g} ulp") + self._extras()
        # Beside a shape error too: overwritten inputs are a failure of their own.
        if self.modified_inputs:
            s += f", {describe_modified_inputs(self.modified_inputs)}"
        return s

    def _extras(self) -> str:
        s = ""
        for n, what in ((len(self.unwritten_rows), "not written"), (len(self.nan_rows), "with NaN")):
            if n:
                s += f", {n} row{'s' if n > 1 else ''} {what}"
        if self.repeat_mismatch:
            s += f", second run differs in {self.repeat_mismatch} elements"
        if self.bias:
            s += f", rounding bias: {self.bias}"
        return s

    def details(self) -> str:
        """A screenful: the summary, a one-line diagnosis where ``diagnose`` recognises
        the pattern, the rounding statistics (where no element failed, or they make
        a verdict), rows not written or holding NaN, and the worst elements, one a line."""
        lines = [self.summary()]
        if self.diagnosis:
            lines.append(f"  diagnosis: {'; '.join(self.diagnosis)}")
        if not self.shape_error and (self.n_fail == 0 or self.bias):
            lines.append(f"  rounding: {self.rounding_summary()}")
        if self.unwritten_rows:
            lines.append(f"  rows not written: {_some(self.unwritten_rows)}")
        if self.nan_rows:
            lines.append(f"  rows with NaN: {_some(self.nan_rows)}")
        if self.worst:
            lines.append(f"  worst {len(self.worst)} of {self.n_fail} failing elements (error: |got - unrounded| "
                         f"in bf16 ulps of the largest |expected| of the element's row and head):")
            lines += [f"    {m}" for m in self.worst]
        return "\n".join(lines)


def _some(xs: list, n: int = 20) -> str:
    """The first ``n`` items of ``xs``, and how many more."""
    return ", ".join(map(str, xs[:n])) + (f" and {len(xs) - n} more" if len(xs) > n else "")


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


MAX_LISTED = 10  # elements a report lists
_CODES = {1: OUTSIDE, 2: NOT_BF16, 3: NAN, 4: UNWRITTEN}


def _scales(pre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per element of ``pre`` ``[rows, H, 128]``: the largest ``|pre|`` of its
    (row, head), or of the whole output where that is 0 (float64), and where
    the second was used (bool)."""
    head = np.abs(pre).max(axis=2, keepdims=True)
    whole = np.abs(pre).max(initial=0.0)
    return (np.broadcast_to(np.where(head > 0, head, whole), pre.shape),
            np.broadcast_to(head == 0, pre.shape))


_CAPS = {1: MAX_LISTED, 2: 3, 3: 3, 4: 1}  # elements listed per reason: one NaN or unrounded value is like the next


def _pick_worst(code: np.ndarray, err: np.ndarray, zero: np.ndarray) -> list[int]:
    """Flat indices of the elements to list (``code``: 0 passes, else a key of
    ``_CODES``; ``zero``: where exactly 0 is expected): the worst of each
    failure reason present and of the finite failures where 0 is expected,
    then the worst of the rest up to ``_CAPS`` per reason; largest ``err``
    first, ties by index."""
    code, err, zero = code.reshape(-1), err.reshape(-1), zero.reshape(-1)
    idx = np.flatnonzero(code)
    order = idx[np.argsort(-err[idx], kind="stable")]
    by_reason = {c: [int(i) for i in order[code[order] == c][:_CAPS[c]]] for c in _CODES}
    chosen = [ids[0] for ids in by_reason.values() if ids]
    at_zero = order[zero[order] & (code[order] <= 2)]
    if at_zero.size and int(at_zero[0]) not in chosen:
        chosen.append(int(at_zero[0]))
    rest = sorted((i for ids in by_reason.values() for i in ids[1:]), key=lambda i: (-err[i], i))
    rest = [i for i in rest if i not in chosen]
    return sorted(chosen + rest[:MAX_LISTED - len(chosen)], key=lambda i: (-err[i], i))


def _report(problem: DecodeProblem, got, iv: Interval, against: str) -> Report:
    shape = (problem.rows, problem.H, 128)
    got = np.asarray(got)
    if got.shape != shape or got.dtype != np.float32:
        return Report(against, 0, 0, np.inf, [], [], [], 0,
                      shape_error=f"output must be float32 {shape}, got {got.dtype} {got.shape}")
    nan = np.isnan(got)
    row_nan = nan.reshape(problem.rows, -1)
    unwritten_row = row_nan.all(axis=1)
    unwritten = [int(r) for r in np.flatnonzero(unwritten_row)]
    nan_rows = [int(r) for r in np.flatnonzero(row_nan.any(axis=1) & ~unwritten_row)]
    not_bf16 = ~is_bf16(got) & ~nan
    g64 = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        inside = (g64 >= iv.lo) & (g64 <= iv.hi)
        fail = nan | not_bf16 | ~inside
        reach = _reach(iv, g64)
        ratio = np.where(nan, np.inf, np.abs(g64 - iv.pre) / reach)
    ulps = ulp_distance(got, iv.nearest)
    outside = fail & ~nan & ~not_bf16
    worst, diagnosis = [], []
    if fail.any():
        # The reason an element fails: not being bf16 comes before the interval, whatever its distance.
        code = np.select([unwritten_row[:, None, None] & nan, nan, not_bf16, outside], [4, 3, 2, 1], 0)
        scale, whole = _scales(iv.pre)
        with np.errstate(invalid="ignore"):
            err = np.where(nan, np.inf, np.abs(g64 - iv.pre) / bf16_ulp(scale))
        pos = problem.positions
        for i in _pick_worst(code, err, iv.pre == 0):
            r, h, d = np.unravel_index(i, shape)
            worst.append(Mismatch(
                row=int(r), request=int(r // problem.q_len), position=int(pos[r]),
                kv_head=int(h // HG), head=int(h), dim=int(d), expected=float(iv.nearest[r, h, d]),
                got=float(got[r, h, d]), bound=float(reach[r, h, d]), ulps=float(ulps[r, h, d]),
                pre=float(iv.pre[r, h, d]), lo=float(iv.lo[r, h, d]), hi=float(iv.hi[r, h, d]),
                reason=_CODES[int(code[r, h, d])], scale=float(scale[r, h, d]),
                scale_of="output" if whole[r, h, d] else "head", error_ulps=float(err[r, h, d]),
            ))
        diagnosis = diagnose(iv.pre, got, ~fail, q_len=problem.q_len)
    rep = Report(
        against=against, n_elements=int(got.size), n_fail=int(fail.sum()),
        max_ulp=float(ulps.max(initial=0.0)), worst=worst, nan_rows=nan_rows,
        unwritten_rows=unwritten, not_bf16=int(not_bf16.sum()),
        max_bound_ratio=float(ratio.max(initial=0.0)),
        n_determined=int(iv.determined.sum()), n_outside=int(outside.sum()), n_nan=int(nan.sum()),
        diagnosis=diagnosis,
    )
    _rounding_stats(rep, got, iv, ~nan & ~not_bf16 & np.isfinite(got))
    return rep


# --- diagnosis ------------------------------------------------------------------

MIN_BLOCK = 16  # elements a wrong block must hold to be named (one 16-dim group of one head)
MIN_EVIDENCE = 16  # failing elements a value pattern (zeros, a constant factor) must rest on


def diagnose(expected, got, ok, *, q_len: int = 1) -> list[str]:
    """Name the pattern of a failure, where one is recognisable: one phrase per
    pattern found, ``[]`` for none (and for no failure).

    expected: float ``[rows, H, 128]``, the reference (before or after its
    final rounding); got: float32 ``[rows, H, 128]``, the output; ok: bool
    ``[rows, H, 128]``, True where the element passed. q_len: rows per
    request, to name requests.

    Patterns (module note, "Diagnosis"): the failures fill a block of (row,
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
    groups = {}
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
    holds = {}
    with np.errstate(invalid="ignore"):
        for r in bad:
            match = (np.abs(g[r] - e).max(axis=1) <= tol) & (tol > 0)
            match[r] = False
            if np.count_nonzero(match) == 1:
                holds[int(r)] = int(np.flatnonzero(match)[0])
    if not holds:
        return None
    said, phrases = set(), []
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


def _gamma_emulated(problem: DecodeProblem, geometry: Geometry, splits: int) -> float:
    g = geometry
    return (64 + 2 * g.keys_per_max + 8 * problem.TOPK + 2 * g.streams + 2 * splits + g.lanes) * F32_EPS


def _gamma_exact(problem: DecodeProblem, eps: float) -> float:
    """gamma of a summation over every key in any order, for unit roundoff ``eps``."""
    return (2 * BLK * problem.TOPK + 64) * eps


def oracle_noise(problem: DecodeProblem, magnitude, score_abs, abs_v_sum) -> np.ndarray:
    """Term 5 of the module note: E, the bound on the distance from the oracle's
    float64 output to the real value, float64 ``[rows, H, 128]``.

    magnitude, abs_v_sum: float64 ``[rows, H, 128]``; score_abs: float64
    ``[rows, H]``; all three as ``nvfp4_suite.reference.oracle.oracle_details``
    returns them.
    """
    kscale = problem.sm_scale * problem.k_global_scale
    eta = (2 * kscale * (D + 1) * F64_EPS * np.asarray(score_abs, np.float64))[..., None]
    n_ops = 2 * BLK * problem.TOPK + 64
    under = 2.0**-1074 * (abs_v_sum + n_ops * problem.v_global_scale + 1)
    return (_gamma_exact(problem, F64_EPS) + 2 * eta) * magnitude + under


def _underflow(problem: DecodeProblem, abs_v_sum: np.ndarray) -> np.ndarray:
    """Term 4 of the module note: U for each element."""
    return 2.0**-125 * (abs_v_sum + (64 + 8 * problem.TOPK) * problem.v_global_scale) + 2.0**-126


def interval_vs_emulation(problem: DecodeProblem, *, splits: int = 1,
                          geometry: Geometry = SEED_GEOMETRY) -> Interval:
    """The acceptance interval of every element against the emulation (module note)."""
    return interval_from_emulation(problem, emulate_details(problem, splits=splits, geometry=geometry),
                                   splits=splits, geometry=geometry)


def interval_from_emulation(problem: DecodeProblem, e, *, splits: int, geometry: Geometry) -> Interval:
    """The acceptance interval from an emulation ``e`` (an ``Emulation``, numpy
    arrays ``[rows, H, 128]``, from either reference) of ``problem`` at
    ``splits`` and ``geometry``."""
    gamma = _gamma_emulated(problem, geometry, splits)
    eta = e.score_noise.astype(np.float64)[..., None]
    delta = e.flip_risk + (gamma + 2 * eta) * e.magnitude + _underflow(problem, e.abs_v_sum)
    return _interval(e.pre_round.astype(np.float64), delta, shared=e.flip_risk)


def interval_vs_oracle(problem: DecodeProblem, *, p_bf16: bool | None = None, geometry: Geometry | None = None,
                       splits: int = 1) -> Interval:
    """The acceptance interval of every element against the exact oracle (module note).

    p_bf16: the implementation rounds P to bf16 before the PV product (adds
    ``2**-8 (1 + 2**-7) A`` to ``delta``); None: as ``geometry`` says, False
    for the exact class. geometry None: the exact class.
    """
    return interval_from_oracle(problem, oracle_details(problem), p_bf16=p_bf16, geometry=geometry, splits=splits)


def interval_from_oracle(problem: DecodeProblem, details, *, p_bf16: bool | None = None,
                         geometry: Geometry | None = None, splits: int = 1) -> Interval:
    """The acceptance interval from ``details``, the tuple ``oracle_details`` returns
    (from either reference) for ``problem``; p_bf16, geometry: as for
    ``interval_vs_oracle``."""
    p_bf16 = _p_bf16(p_bf16, geometry)
    out, _, mag, sabs, vsum = details
    c = float(kernel_constant(problem))
    eta = (2 * np.log(2) * c * D * F32_EPS * sabs)[..., None]
    gamma = _gamma_exact(problem, F32_EPS) if geometry is None else _gamma_emulated(problem, geometry, splits)
    delta = (gamma + 2 * eta) * mag * (1 + P_BF16_REL) + (P_BF16_REL * mag if p_bf16 else 0.0)
    delta = delta + _underflow(problem, vsum) + oracle_noise(problem, mag, sabs, vsum)
    return _interval(out, delta, shared=P_BF16_REL * mag if p_bf16 else 0.0)


def bound_vs_emulation(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY):
    """``(expected float32, bound float64)``, both ``[rows, H, 128]``: the emulation's
    output and a bound on ``|got - expected|`` that the interval implies
    (``delta + ulp(|pre| + delta)``). Not the acceptance test, which is the interval."""
    iv = interval_vs_emulation(problem, splits=splits, geometry=geometry)
    return iv.nearest, iv.delta + bf16_ulp(np.abs(iv.pre) + iv.delta)


def bound_vs_oracle(problem: DecodeProblem, *, p_bf16: bool | None = None, geometry: Geometry | None = None,
                    splits: int = 1):
    """``(exact float64, bound float64)``, both ``[rows, H, 128]``: a bound on
    ``|got - exact|`` that the interval implies (``delta + ulp(|exact| + delta) / 2``).
    Not the acceptance test, which is the interval.

    p_bf16, geometry: as for ``interval_vs_oracle``.
    """
    iv = interval_vs_oracle(problem, p_bf16=p_bf16, geometry=geometry, splits=splits)
    return iv.pre, iv.delta + bf16_ulp(np.abs(iv.pre) + iv.delta) / 2


def compare_with_emulation(problem: DecodeProblem, got, *, splits: int = 1,
                           geometry: Geometry = SEED_GEOMETRY) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with the emulation of ``geometry``."""
    iv = interval_vs_emulation(problem, splits=splits, geometry=geometry)
    return _report(problem, got, iv, f"emulation({_geom_name(geometry)}, splits={splits})")


def compare_with_oracle(problem: DecodeProblem, got, *, p_bf16: bool | None = None,
                        geometry: Geometry | None = None, splits: int = 1) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with the exact oracle.

    geometry: the implementation's (``Geometry``: its summation chain and
    whether it rounds P) or None for the exact class (at least float32 in any
    order, P not rounded). p_bf16: the implementation rounds P to bf16 before
    the PV product; None (the default) takes it from ``geometry``, False for
    the exact class. The seed kernel, or its emulation, is checked with
    ``compare_with_oracle(problem, out, geometry=SEED_GEOMETRY, splits=S)``;
    without the geometry it is judged as the exact class, whose interval
    does not cover bf16(P), and fails.
    """
    p_bf16 = _p_bf16(p_bf16, geometry)
    iv = interval_vs_oracle(problem, p_bf16=p_bf16, geometry=geometry, splits=splits)
    g = geometry
    cls = "exact class" if g is None else f"geometry {g.keys_per_max}x{g.keys_per_lane}, splits={splits}"
    return _report(problem, got, iv, f"oracle ({cls}, P {'in bf16' if p_bf16 else 'not rounded'})")


def _p_bf16(p_bf16: bool | None, geometry: Geometry | None) -> bool:
    """``p_bf16``, or where None what ``geometry`` says (False for the exact class)."""
    if p_bf16 is None:
        return geometry is not None and geometry.p_bf16
    return bool(p_bf16)


def backend_interval(problem: DecodeProblem, *, geometry: Geometry | None, splits: int = 1) -> tuple[Interval, str]:
    """``(interval, against)``: the acceptance interval for a backend of ``geometry``
    (the exact oracle's for None, otherwise the emulation of that geometry) and
    how reports name it."""
    if geometry is None:
        return interval_vs_oracle(problem, p_bf16=False), "oracle"
    return (interval_vs_emulation(problem, splits=splits, geometry=geometry),
            f"emulation({_geom_name(geometry)}, splits={splits})")


def compare_with_interval(problem: DecodeProblem, got, iv: Interval, against: str) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with a given interval (e.g. one
    read back from a golden case file); ``against`` names it in the report."""
    return _report(problem, got, iv, against)


def compare_backend_output(problem: DecodeProblem, got, *, geometry: Geometry | None, splits: int = 1) -> Report:
    """The right comparison for a backend: the exact oracle for geometry None,
    otherwise the emulation of its own geometry."""
    iv, against = backend_interval(problem, geometry=geometry, splits=splits)
    return _report(problem, got, iv, against)


def _geom_name(g: Geometry) -> str:
    return f"{g.keys_per_max}x{g.keys_per_lane}{', P bf16' if g.p_bf16 else ''}"
