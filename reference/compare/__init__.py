"""Judging an output: the acceptance interval of a declared arithmetic, and the report.

The public surface, by concern (each in its own module):

- ``tolerance``: the tolerance model and ``Interval``, with the term-by-term
  derivation of ``delta`` in its docstring. ``backend_interval(problem,
  geometry=..., splits=...)`` is the interval for a problem and a declared
  arithmetic (``interval_vs_emulation``, ``interval_vs_oracle`` and the
  ``interval_from_*`` forms that take precomputed references are its parts).
- ``report``: ``compare_with_interval(problem, got, interval, against)``, the
  judgement of an output against an interval, giving a ``Report`` of
  ``Mismatch`` lines.
- ``diagnosis``: ``diagnose``, naming a failure's pattern.
- ``bias``: the rounding-bias statistics a ``Report`` carries.

The three ``compare_*`` functions here are the two steps in one call.
"""

from __future__ import annotations

from ..arithmetic import SEED_GEOMETRY, Exact, Geometry
from ..problem import DecodeProblem
from .bias import BIAS_ALPHA, BIAS_SIDES, bias_false_alarm, bias_verdict
from .diagnosis import MIN_BLOCK, MIN_EVIDENCE, diagnose
from .report import (
    MAX_LISTED,
    NAN,
    NOT_BF16,
    OUTSIDE,
    UNWRITTEN,
    Mismatch,
    Report,
    compare_with_interval,
    describe_modified_inputs,
    ulp_distance,
)
from .tolerance import (
    F64_EPS,
    P_BF16_REL,
    Interval,
    backend_interval,
    bf16_interval,
    geometry_name,
    interval_from_emulation,
    interval_from_oracle,
    interval_vs_emulation,
    interval_vs_oracle,
    oracle_noise,
    resolve_p_bf16,
)

__all__ = [
    "BIAS_ALPHA", "BIAS_SIDES", "F64_EPS", "MAX_LISTED", "MIN_BLOCK", "MIN_EVIDENCE", "NAN", "NOT_BF16",
    "OUTSIDE", "P_BF16_REL", "UNWRITTEN", "Interval", "Mismatch", "Report", "backend_interval",
    "bf16_interval", "bias_false_alarm", "bias_verdict", "compare_backend_output", "compare_with_emulation",
    "compare_with_interval", "compare_with_oracle", "describe_modified_inputs", "diagnose", "geometry_name",
    "interval_from_emulation", "interval_from_oracle", "interval_vs_emulation", "interval_vs_oracle",
    "oracle_noise", "resolve_p_bf16", "ulp_distance",
]


def compare_with_emulation(problem: DecodeProblem, got, *, splits: int = 1,
                           geometry: Geometry = SEED_GEOMETRY) -> Report:
    """Compare ``got`` (float32 ``[rows, H, 128]``) with the emulation of ``geometry``."""
    iv = interval_vs_emulation(problem, splits=splits, geometry=geometry)
    return compare_with_interval(problem, got, iv, f"emulation({geometry_name(geometry)}, splits={splits})")


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
    p_bf16 = resolve_p_bf16(p_bf16, geometry)
    iv = interval_vs_oracle(problem, p_bf16=p_bf16, geometry=geometry, splits=splits)
    g = geometry
    cls = ("exact class" if g is None or isinstance(g, Exact)
           else f"geometry {g.keys_per_max}x{g.keys_per_lane}, splits={splits}")
    return compare_with_interval(problem, got, iv, f"oracle ({cls}, P {'in bf16' if p_bf16 else 'not rounded'})")


def compare_backend_output(problem: DecodeProblem, got, *, geometry: Geometry | None, splits: int = 1) -> Report:
    """The right comparison for a backend: the exact oracle for geometry None,
    otherwise the emulation of its own geometry."""
    iv, against = backend_interval(problem, geometry=geometry, splits=splits)
    return compare_with_interval(problem, got, iv, against)

