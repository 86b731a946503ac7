"""Which other declaration a failing kernel's outputs fit.

A kernel of the exact class can fail only because it declares its arithmetic
wrongly: it dequantises K and V to bf16 before the dot products but declares
exact operands, or rounds P to bf16 but declares it unrounded. Its outputs
are then outside the declared interval yet inside the interval of the
declaration it really computes, and no bug class or mutant names that
(``blame`` names bugs, not declarations). ``fitting_declarations`` re-judges
the failing launches' outputs against every other declaration of the exact
class (``ALTERNATIVES``) and returns those that hold all of them; the report
names them first, since declaring one of them is the whole fix if it is what
the kernel computes.

Only exact-class declarations are tried: a kernel declared in a ``Geometry``
is judged against an emulation of its own reduction order, and the
neighbours of a geometry are not a short list.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem, Exact
from nvfp4_suite.reference.arithmetic import OPERANDS, Geometry, arithmetic_name
from nvfp4_suite.reference.compare import backend_interval, compare_with_interval

# Every declaration of the exact class (None: the exact class itself, P unrounded, exact operands).
ALTERNATIVES: tuple[Exact | None, ...] = (None,) + tuple(
    Exact(p, o) for p in (False, True) for o in OPERANDS if (p, o) != (False, "exact"))


@dataclasses.dataclass(frozen=True)
class Failing:
    """One failing launch whose output is kept: ``problem``, ``launch`` and the
    kernel's ``output`` (float32 ``[rows, H, 128]``)."""

    problem: DecodeProblem
    launch: Launch
    output: np.ndarray


def _holds(failing: Failing, arithmetic) -> bool:
    iv, against = backend_interval(failing.problem, geometry=arithmetic, splits=failing.launch.known_splits)
    rep = compare_with_interval(failing.problem, failing.output, iv, against)
    return rep.shape_error is None and rep.n_fail == 0


def fitting_declarations(declared, failing: list[Failing]) -> list[str]:
    """The names (``arithmetic_name``) of the exact-class declarations other than
    ``declared`` (None, an ``Exact`` or a ``Geometry``) whose intervals hold
    the output of every launch of ``failing``, in ``ALTERNATIVES`` order;
    empty when ``declared`` is a ``Geometry``, when nothing failed or when no
    alternative holds them all. Cost: an alternative is dropped at the first
    launch it does not hold, so a real bug costs about one oracle per
    alternative, a misdeclaration one per failing launch for the one that fits."""
    if isinstance(declared, Geometry) or not failing:
        return []
    candidates = [a for a in ALTERNATIVES if a != declared]
    for f in failing:
        candidates = [a for a in candidates if _holds(f, a)]
        if not candidates:
            break
    return [arithmetic_name(a) for a in candidates]


def line(declared, names: list[str], n: int) -> str | None:
    """The report's line for ``fitting_declarations``' ``names`` (``n`` failing
    launches), or None when there are none."""
    if not names:
        return None
    shown = " or ".join(names)
    return (f"  outputs fit another declaration: all {n} failing launches are inside the interval of "
            f"{shown} (declared: {arithmetic_name(declared)}); if that is what the kernel computes, "
            f"declare it (--arithmetic {names[0]} judges it so)")
