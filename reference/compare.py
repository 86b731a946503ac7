"""The tolerance model and the comparison report.

Notation: ``u = 2**-24`` (float32 unit roundoff); for an output element,
``A = sum_k p_k |v_k| * v_global / l`` (its *magnitude*: no result of a
weighted mean can move by more than a relative error of its weights times
``A``); ``ulp(x)`` one bf16 ulp at ``|x|``; ``TOPK`` the slot count; ``W``
streams (waves) and ``L`` lane partials per head of the geometry; ``S``
splits.

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

So with ``delta = F + (gamma + 2 eta) A + U``, the pre-rounding values differ by at
most ``delta``, and after both round to bf16:
``|got - expected| <= delta + ulp(|pre| + delta)``.

Against the exact oracle (``pre`` exact): the kernel's own float32 result is
within ``delta`` of exact, where now, for a kernel that rounds P to bf16,
``delta`` also holds ``2**-8 (1 + 2**-7) A`` (each ``bf16(p)`` is within a
relative half-ulp ``2**-8`` of ``p``; ``A`` with rounded weights is within
``2**-7`` of the exact one); then one rounding: ``+ ulp(|exact| + delta) / 2``.
For the exact class (geometry None: arithmetic at least float32 in an unknown
order, P unrounded) gamma covers a summation over every key:
``gamma = (2 * 128 * TOPK + 64) u``.

No other tolerance constant exists in this module.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .emulate import F32_EPS, SEED_GEOMETRY, Geometry, emulate_details, kernel_constant
from .formats import bf16_round, bf16_ulp, is_bf16
from .oracle import oracle_details
from .problem import HG, DecodeProblem

P_BF16_REL = 2.0**-8 * (1 + 2.0**-7)


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
    """One element outside its bound."""

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

    def __str__(self) -> str:
        return (
            f"row {self.row} (request {self.request}, position {self.position}) KV head {self.kv_head} "
            f"head {self.head} dim {self.dim}: expected {self.expected:.7g}, got {self.got:.7g}, "
            f"|diff| {abs(self.got - self.expected):.3g} > bound {self.bound:.3g} ({self.ulps:g} ulp)"
        )


def describe_modified_inputs(changed: dict) -> str:
    """``changed`` (input array name -> bytes changed) as one phrase, e.g.
    ``backend modified its input 'pool' (12 bytes changed)``."""
    parts = ", ".join(f"{name!r} ({n} bytes changed)" for name, n in changed.items())
    return f"backend modified its input{'s' if len(changed) > 1 else ''} {parts}"


@dataclasses.dataclass
class Report:
    """The result of comparing one output with its reference.

    against: "emulation(<geometry>, splits=S)" or "oracle".
    n_elements, n_fail: elements compared and outside their bound (NaN and
    non-bf16 values included). max_ulp: the largest bf16 ulp distance (large
    near zero, where outputs are sums that cancel); max_bound_ratio: the
    largest ``|diff| / bound`` (< 1 passes).
    worst: up to 10 mismatches, largest excess first. repeat_mismatch: elements
    whose bits differ between two runs of the same problem (set by the harness). nan_rows: rows holding a
    NaN though at least one element was written; unwritten_rows: rows wholly
    NaN (the harness pre-fills NaN, so such a row was never stored).
    modified_inputs: input array name -> bytes the backend changed in it (set
    by the harness; any entry fails, whatever the output).
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

    @property
    def passed(self) -> bool:
        """True when every element is within its bound, no run differed, the shape was right
        and the backend left its inputs as they were."""
        return (self.shape_error is None and self.n_fail == 0 and self.repeat_mismatch == 0
                and not self.modified_inputs)

    @property
    def fail_fraction(self) -> float:
        """Fraction of compared elements outside their bound."""
        return self.n_fail / max(self.n_elements, 1)

    def summary(self) -> str:
        """One line: PASS/FAIL, counts, the largest deviations."""
        if self.shape_error:
            s = f"FAIL vs {self.against}: {self.shape_error}"
        else:
            head = "PASS" if self.passed else "FAIL"
            s = (f"{head} vs {self.against}: {self.n_fail}/{self.n_elements} elements outside bound "
                 f"({100 * self.fail_fraction:.3g}%), max |diff|/bound {self.max_bound_ratio:.3g}, "
                 f"max {self.max_ulp:g} ulp")
            if self.unwritten_rows:
                s += f", {len(self.unwritten_rows)} rows not written"
            if self.nan_rows:
                s += f", {len(self.nan_rows)} rows with NaN"
            if self.not_bf16:
                s += f", {self.not_bf16} values not bf16"
            if self.repeat_mismatch:
                s += f", second run differs in {self.repeat_mismatch} elements"
        # Beside a shape error too: overwritten inputs are a failure of their own.
        if self.modified_inputs:
            s += f", {describe_modified_inputs(self.modified_inputs)}"
        return s

    def details(self) -> str:
        """The summary, then NaN/unwritten rows and the worst mismatches, one a line."""
        lines = [self.summary()]
        if self.unwritten_rows:
            lines.append(f"  rows not written: {self.unwritten_rows[:20]}")
        if self.nan_rows:
            lines.append(f"  rows with NaN: {self.nan_rows[:20]}")
        lines += [f"  {m}" for m in self.worst]
        return "\n".join(lines)


def _report(problem: DecodeProblem, got, expected, bound, against: str) -> Report:
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
    diff = np.abs(got.astype(np.float64) - expected)
    fail = nan | not_bf16 | ~(diff <= bound)
    ulps = ulp_distance(got, bf16_round(expected))
    worst = []
    if fail.any():
        excess = np.where(nan, np.inf, diff - bound)
        idx = np.argwhere(fail)
        order = np.argsort(-excess[fail], kind="stable")[:10]
        pos = problem.positions
        for r, h, d in idx[order]:
            worst.append(Mismatch(
                row=int(r), request=int(r // problem.q_len), position=int(pos[r]),
                kv_head=int(h // HG), head=int(h), dim=int(d), expected=float(expected[r, h, d]),
                got=float(got[r, h, d]), bound=float(bound[r, h, d]), ulps=float(ulps[r, h, d]),
            ))
    return Report(
        against=against, n_elements=int(got.size), n_fail=int(fail.sum()),
        max_ulp=float(ulps.max(initial=0.0)), worst=worst, nan_rows=nan_rows,
        unwritten_rows=unwritten, not_bf16=int(not_bf16.sum()),
        max_bound_ratio=float(np.where(nan, np.inf, diff / bound).max(initial=0.0)),
    )


def _gamma_emulated(problem: DecodeProblem, geometry: Geometry, splits: int) -> float:
    g = geometry
    return (64 + 2 * g.keys_per_max + 8 * problem.TOPK + 2 * g.streams + 2 * splits + g.lanes) * F32_EPS


def _underflow(problem: DecodeProblem, abs_v_sum: np.ndarray) -> np.ndarray:
    """Term 4 of the module note: U for each element."""
    return 2.0**-125 * (abs_v_sum + (64 + 8 * problem.TOPK) * problem.v_global_scale) + 2.0**-126


def bound_vs_emulation(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY):
    """``(expected float32, bound float64)``, both ``[rows, H, 128]``: see the module note."""
    e = emulate_details(problem, splits=splits, geometry=geometry)
    gamma = _gamma_emulated(problem, geometry, splits)
    eta = e.score_noise.astype(np.float64)[..., None]
    delta = e.flip_risk + (gamma + 2 * eta) * e.magnitude + _underflow(problem, e.abs_v_sum)
    pre = e.pre_round.astype(np.float64)
    return e.out, delta + bf16_ulp(np.abs(pre) + delta)


def bound_vs_oracle(problem: DecodeProblem, *, p_bf16: bool, geometry: Geometry | None = None, splits: int = 1):
    """``(exact float64, bound float64)``, both ``[rows, H, 128]``: see the module note.

    p_bf16: the implementation rounds P to bf16. geometry None: the exact class.
    """
    out, _, mag, sabs, vsum = oracle_details(problem)
    c = float(kernel_constant(problem))
    eta = (2 * np.log(2) * c * 128 * F32_EPS * sabs)[..., None]
    if geometry is None:
        gamma = (2 * 128 * problem.TOPK + 64) * F32_EPS
    else:
        gamma = _gamma_emulated(problem, geometry, splits)
    delta = (gamma + 2 * eta) * mag * (1 + P_BF16_REL) + (P_BF16_REL * mag if p_bf16 else 0.0)
    delta = delta + _underflow(problem, vsum)
    return out, delta + bf16_ulp(np.abs(out) + delta) / 2


def compare_with_emulation(problem: DecodeProblem, got, *, splits: int = 1,
                           geometry: Geometry = SEED_GEOMETRY) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with the emulation of ``geometry``."""
    expected, bound = bound_vs_emulation(problem, splits=splits, geometry=geometry)
    return _report(problem, got, expected.astype(np.float64), bound,
                   f"emulation({_geom_name(geometry)}, splits={splits})")


def compare_with_oracle(problem: DecodeProblem, got, *, p_bf16: bool = False,
                        geometry: Geometry | None = None, splits: int = 1) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with the exact oracle."""
    expected, bound = bound_vs_oracle(problem, p_bf16=p_bf16, geometry=geometry, splits=splits)
    return _report(problem, got, expected, bound, "oracle" + (" (P in bf16)" if p_bf16 else ""))


def compare_backend_output(problem: DecodeProblem, got, *, geometry: Geometry | None, splits: int = 1) -> Report:
    """The right comparison for a backend: the exact oracle for geometry None,
    otherwise the emulation of its own geometry."""
    if geometry is None:
        return compare_with_oracle(problem, got, p_bf16=False)
    return compare_with_emulation(problem, got, splits=splits, geometry=geometry)


def _geom_name(g: Geometry) -> str:
    return f"{g.keys_per_max}x{g.keys_per_lane}{', P bf16' if g.p_bf16 else ''}"
