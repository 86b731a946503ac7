"""The tolerance model: the acceptance interval of every output element, derived term by term.

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
summation over every key: ``gamma = (2 * 128 * TOPK + 64) u``. A kernel of
the exact class that rounds P to bf16 (``Exact(p_bf16=True)``) has the same
gamma and the ``2**-8 (1 + 2**-7) A`` term: each ``bf16(p)`` is within a
relative ``2**-8`` of its float32 ``p`` whatever running max ``p`` is
relative to (one per 128 keys, a wave's, a split's: the later rescales by
``alpha`` keep a relative error relative), ``l`` is summed from unrounded
P, so the numerator moves by at most ``2**-8 A``; a ``p`` below 2**-126,
where bf16's error is absolute (at most 2**-134), lies inside term 4's
2**-126 per key. The split rule (CONTRACT.md section 6.4) enters no term:
every rule has ``S`` partials and ``TOPK`` blocks, and an emulated geometry
is emulated with its own rule.

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

6. Declared operands (oracle only; ``Exact(p_bf16, operands)``, CONTRACT.md
   section 7.1). A kernel whose K and V enter its dots as rounded operands
   ``k'``, ``v'`` (``bf16-folded``: ``bf16(e2m1 * bf16(fp32(e4m3 * g)))``;
   ``bf16-dequant``: ``bf16(fp32(fp32(e2m1 * e4m3) * g))``), the global
   scales folded in and applied nowhere else, is judged against the oracle
   computed on exactly those operands (``oracle_details(operands=...)``):
   each operand is a bf16 value, exact in float64, so its rounding is part
   of ``pre``, not of ``delta``. What is left is the exact class's float32
   chain on other inputs, and every term keeps its form with the units the
   kernel computes in: ``A = sum_k p_k |v'_k| / l`` and ``sum_k |v'_k|``
   (``v_global`` 1: the output is ``acc / l``, no later product, so term 4's
   ``(64 + 8 TOPK) v_global`` becomes ``64 + 8 TOPK``); the scores are
   ``q.k'`` (products of two bf16 values, exact in float32), scaled by
   ``c = softmax_constant(sm_scale, 1) = fp32(sm_scale log2 e)``, so term
   1's ``eta = 2 ln2 c 128 u max_k sum|q_d k'_d|``; gamma is the exact
   class's and P's rounding the same ``2**-8 (1 + 2**-7) A`` where
   ``p_bf16``; term 5 has ``k_global = v_global = 1``
   (``nvfp4_suite.reference.arrays.applied_global_scales`` is the one home
   of which scales a declaration applies after its dots). With
   power-of-two global scales (and no underflow) nothing rounds: the bf16
   operands are the exact products times ``g`` (at most 6 significant
   bits); otherwise the exact class's interval, whose ``pre`` holds the
   unrounded products, does not contain such a kernel
   (tests/test_thirdparty_bf16.py).

Then the same interval, ``rne(exact - delta) <= got <= rne(exact + delta)``,
which the old ``|got - exact| <= delta + ulp(|exact| + delta) / 2`` matched
except at binade edges.

The inputs. Against the oracle, ``A``, ``max_k sum|q_d k_d|`` and
``sum_k |v_k|`` enter ``delta`` only through terms that increase with them,
so an upper bound in place of any of them would keep ``delta`` a bound. The
oracle computes them exactly (``oracle_details``: two float64 GEMMs beside
its own two, over the keys each row sees, as its own are), because the
golden catalog stores intervals computed from them, and ``A`` itself. The
cheapest bounds, ``v_global max_k |v_k|`` for ``A`` and Hoelder's
``sum_d |q_d| max_k |k_d|`` for the score sum (one pass over V and K in place
of each GEMM), widen ``delta`` by a median 9x on generated problems (the
score bound alone, 2.3x) and move nearly every interval end: the exact class
would be judged that much more loosely to save two GEMMs.


No other tolerance constant exists in this package (``bias`` holds the
false-alarm probability of its statistical test, ``report`` and
``diagnosis`` decide only what a report says).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..arithmetic import SEED_GEOMETRY, Exact, Geometry, operands_of, p_rounded
from ..arrays import NUMPY, applied_global_scales
from ..emulate import F32_EPS, emulate_details
from ..formats import bf16_round
from ..oracle import oracle_details
from ..paged_cache import BLK, D
from ..problem import DecodeProblem, softmax_constant

P_BF16_REL = 2.0**-8 * (1 + 2.0**-7)
F64_EPS = 2.0**-53  # unit roundoff of float64 (term 5)


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



def gamma_emulated(problem: DecodeProblem, geometry: Geometry, splits: int) -> float:
    """Term 2's gamma for a kernel of ``geometry`` at ``splits`` (relative to ``A``)."""
    g = geometry
    return (64 + 2 * g.keys_per_max + 8 * problem.TOPK + 2 * g.streams + 2 * splits + g.lanes) * F32_EPS


def gamma_exact(problem: DecodeProblem, eps: float) -> float:
    """gamma of a summation over every key in any order, for unit roundoff ``eps``."""
    return (2 * BLK * problem.TOPK + 64) * eps


def oracle_noise(problem: DecodeProblem, magnitude, score_abs, abs_v_sum, *, operands: str = "exact") -> np.ndarray:
    """Term 5 of the module note: E, the bound on the distance from the oracle's
    float64 output to the real value, float64 ``[rows, H, 128]``.

    magnitude, abs_v_sum: float64 ``[rows, H, 128]``; score_abs: float64
    ``[rows, H]``; all three as ``nvfp4_suite.reference.oracle.oracle_details``
    returns them for ``operands`` (one of ``nvfp4_suite.reference.arithmetic.OPERANDS``).
    """
    kg, vg = applied_global_scales(problem, operands)
    kscale = problem.sm_scale * kg
    eta = (2 * kscale * (D + 1) * F64_EPS * np.asarray(score_abs, np.float64))[..., None]
    n_ops = 2 * BLK * problem.TOPK + 64
    under = 2.0**-1074 * (abs_v_sum + n_ops * vg + 1)
    return (gamma_exact(problem, F64_EPS) + 2 * eta) * magnitude + under


def _underflow(problem: DecodeProblem, abs_v_sum: np.ndarray, operands: str) -> np.ndarray:
    """Term 4 of the module note: U for each element (``v_global`` the scale applied
    after the PV sum for ``operands``)."""
    vg = applied_global_scales(problem, operands)[1]
    return 2.0**-125 * (abs_v_sum + (64 + 8 * problem.TOPK) * vg) + 2.0**-126


def interval_vs_emulation(problem: DecodeProblem, *, splits: int = 1,
                          geometry: Geometry = SEED_GEOMETRY, ops=NUMPY, pool=None) -> Interval:
    """The acceptance interval of every element against the emulation (module note);
    ops, pool: where the emulation runs (``nvfp4_suite.reference.arrays``)."""
    e = emulate_details(problem, splits=splits, geometry=geometry, ops=ops, pool=pool)
    return interval_from_emulation(problem, e, splits=splits, geometry=geometry)


def interval_from_emulation(problem: DecodeProblem, e, *, splits: int, geometry: Geometry) -> Interval:
    """The acceptance interval from an emulation ``e`` (an ``Emulation``, numpy
    arrays ``[rows, H, 128]``, from either reference) of ``problem`` at
    ``splits`` and ``geometry``."""
    gamma = gamma_emulated(problem, geometry, splits)
    eta = e.score_noise.astype(np.float64)[..., None]
    delta = e.flip_risk + (gamma + 2 * eta) * e.magnitude + _underflow(problem, e.abs_v_sum, operands_of(geometry))
    return _interval(e.pre_round.astype(np.float64), delta, shared=e.flip_risk)


def interval_vs_oracle(problem: DecodeProblem, *, p_bf16: bool | None = None,
                       geometry: Geometry | Exact | None = None, splits: int = 1, ops=NUMPY,
                       pool=None) -> Interval:
    """The acceptance interval of every element against the exact oracle (module note).

    p_bf16: the implementation rounds P to bf16 before the PV product (adds
    ``2**-8 (1 + 2**-7) A`` to ``delta``); None: as ``geometry`` says, False
    for the exact class. geometry None or an ``Exact``: the exact class's gamma;
    a ``Geometry``: its chain's. The oracle computes on the operands the
    declaration names (``operands_of``). ops, pool: where the oracle runs.
    """
    details = oracle_details(problem, ops=ops, pool=pool, operands=operands_of(geometry))
    return interval_from_oracle(problem, details, p_bf16=p_bf16, geometry=geometry, splits=splits)


def interval_from_oracle(problem: DecodeProblem, details, *, p_bf16: bool | None = None,
                         geometry: Geometry | Exact | None = None, splits: int = 1) -> Interval:
    """The acceptance interval from ``details``, the tuple ``oracle_details`` returns
    (from either reference) for ``problem``, computed on the operands ``geometry``
    names (``operands_of``); p_bf16, geometry: as for ``interval_vs_oracle``."""
    p_bf16 = resolve_p_bf16(p_bf16, geometry)
    operands = operands_of(geometry)
    out, _, mag, sabs, vsum = details
    # The kernel's score scale: its constant times the global scale it applies to the logits.
    c = float(softmax_constant(problem.sm_scale, applied_global_scales(problem, operands)[0]))
    eta = (2 * np.log(2) * c * D * F32_EPS * sabs)[..., None]
    if geometry is None or isinstance(geometry, Exact):
        gamma = gamma_exact(problem, F32_EPS)
    else:
        gamma = gamma_emulated(problem, geometry, splits)
    delta = (gamma + 2 * eta) * mag * (1 + P_BF16_REL) + (P_BF16_REL * mag if p_bf16 else 0.0)
    delta = delta + _underflow(problem, vsum, operands) + oracle_noise(problem, mag, sabs, vsum, operands=operands)
    return _interval(out, delta, shared=P_BF16_REL * mag if p_bf16 else 0.0)


def resolve_p_bf16(p_bf16: bool | None, geometry) -> bool:
    """``p_bf16``, or where None what ``geometry`` (None, ``Exact``, ``Geometry``)
    says (False for the exact class)."""
    return p_rounded(geometry) if p_bf16 is None else bool(p_bf16)


def backend_interval(problem: DecodeProblem, *, geometry: Geometry | Exact | None, splits: int = 1,
                     ops=NUMPY, pool=None) -> tuple[Interval, str]:
    """The interval for a problem and a declared arithmetic: ``(interval, against)``,
    the acceptance interval for a backend of ``geometry`` (the exact oracle's
    for None; for an ``Exact``, the exact oracle's on its declared operands, with
    P's bf16 rounding where ``p_bf16``; otherwise the emulation of that
    ``Geometry`` at ``splits``) and how reports name it, e.g. ``oracle`` or
    ``oracle (exact class, P in bf16, operands bf16-folded)``. ops, pool: where
    the references run (``nvfp4_suite.reference.arrays``)."""
    if geometry is None or isinstance(geometry, Exact):
        operands = operands_of(geometry)
        terms = ((", P in bf16" if p_rounded(geometry) else "")
                 + ("" if operands == "exact" else f", operands {operands}"))
        against = f"oracle (exact class{terms})" if terms else "oracle"
        return interval_vs_oracle(problem, geometry=geometry, ops=ops, pool=pool), against
    return (interval_vs_emulation(problem, splits=splits, geometry=geometry, ops=ops, pool=pool),
            f"emulation({geometry_name(geometry)}, splits={splits})")


def geometry_name(g: Geometry) -> str:
    """How reports name a geometry, e.g. ``32x8, P bf16`` or ``128x32, P bf16, split by position``."""
    return (f"{g.keys_per_max}x{g.keys_per_lane}{', P bf16' if g.p_bf16 else ''}"
            + (", split by position" if g.split_rule == "position" else ""))
