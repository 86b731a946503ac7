"""Where a check's wall time goes, for the judging benchmark.

``python -m nvfp4_suite.vectors bench`` (``vectors/cli/bench.py``) checks
the same seed's generated problems (drawn inside each backend's
capabilities: the same problems where those are the same) against each
backend named and prints, per backend, problems per second and the share of
wall time in each phase:

- ``launches``: the backend's two calls per launch (``harness._call``);
- ``references``: the exact oracle's or the emulation's interval
  (``compare.backend_interval``);
- ``judging``: comparing the output with that interval (``compare_with_interval``)
  and the repeat check;
- ``reporting``: rendering the run's text and building its JSON report;
- ``generation``: the rest of the check's wall time (drawing the problems,
  hypothesis's own work, the coverage table).

Its floor is the first backend named (by default ``emulate``, the seed
geometry's reference, whose interval is the emulation's), measured in the
same run: each backend's judging cost (references + judging, per problem) is
printed as a ratio to the floor's.

Timing is off unless ``recording`` is active; then ``timed`` blocks add their
wall time to the phase they name. A check outside the benchmark pays one
module-global lookup per block.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Iterator

PHASES = ("generation", "launches", "references", "judging", "reporting")

_active: dict[str, float] | None = None


@contextlib.contextmanager
def timed(phase: str) -> Iterator[None]:
    """Add the block's wall time to ``phase`` of the active recording (none: nothing)."""
    seconds = _active
    if seconds is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds[phase] += time.perf_counter() - start


@contextlib.contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Time the ``timed`` blocks run inside: yields ``{phase: seconds}`` (every
    name of ``PHASES`` but ``generation``, which the caller derives from its
    own wall time), filled as the blocks run. Not reentrant."""
    global _active
    if _active is not None:
        raise RuntimeError("phases.recording is already active")
    _active = {p: 0.0 for p in PHASES if p != "generation"}
    try:
        yield _active
    finally:
        _active = None


@dataclasses.dataclass(frozen=True)
class Timing:
    """One backend's check in the benchmark: its ``spec``, the arithmetic it was
    judged in, ``problems`` judged, ``wall`` seconds, ``seconds`` per phase of
    ``PHASES`` (generation: the wall time no other phase took) and whether
    the check passed (``ok``; a failing check stops at its first failure,
    unminimised, saved as ``saved``: a path, or None when it could not be),
    and where its references ran (``references``: ``host``, or the torch device's name)."""

    spec: str
    arithmetic: str
    problems: int
    wall: float
    seconds: dict[str, float]
    ok: bool
    saved: str | None = None
    references: str = "host"

    @property
    def judging_cost(self) -> float:
        """Seconds per problem of the suite's own judging: references and judging."""
        return (self.seconds["references"] + self.seconds["judging"]) / max(self.problems, 1)
