"""The judgement of an output against its acceptance interval, and the report's text.

What follows decides what a report says, never whether it
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

"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..formats import bf16_round, bf16_ulp, is_bf16
from ..problem import HG, DecodeProblem
from .bias import _rounding_stats
from .diagnosis import diagnose
from .tolerance import Interval, _midpoint


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
    correct kernel may give there; see ``nvfp4_suite.reference.compare.tolerance``), ``NOT_BF16`` (a
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

    Rounding statistics (``nvfp4_suite.reference.compare.bias``): n_determined, elements
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
                f"of {self.n_rounding} outputs near the unrounded value, {self.n_off_nearest} off nearest-even "
                f"({self.n_toward_zero} toward zero, "
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


def compare_with_interval(problem: DecodeProblem, got, iv: Interval, against: str, *,
                          sentinel: bool = False) -> Report:
    """The judgement of ``got`` (float32 ``[rows, H, 128]``) against ``iv`` (an
    ``Interval`` for ``problem``, e.g. from ``backend_interval`` or read back
    from a golden case file); ``against`` names the reference in the report.
    ``sentinel``: ``got`` is an ``out=`` buffer the harness pre-filled with NaN,
    so a row that is still all NaN was never written; otherwise the backend
    wrote every value it returned and such a row is a row of NaN."""
    shape = (problem.rows, problem.H, 128)
    got = np.asarray(got)
    if got.shape != shape or got.dtype != np.float32:
        return Report(against, 0, 0, np.inf, [], [], [], 0,
                      shape_error=f"output must be float32 {shape}, got {got.dtype} {got.shape}")
    nan = np.isnan(got)
    row_nan = nan.reshape(problem.rows, -1)
    unwritten_row = row_nan.all(axis=1) & sentinel
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
