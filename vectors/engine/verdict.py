"""The verdict: what a run of the suite concluded, decided in one place.

Every front end (the command line, the pytest plugin, ``replay``, the
serving-size check, the simulator's tools) hands its counts to ``decide`` and
renders the ``Verdict`` it returns; none derives a verdict of its own. The
kinds and their exit codes:

- ``CONFORMANT`` (0): something was judged and nothing failed;
- ``NOT CONFORMANT`` (1): a launch failed (a crash of the backend included);
- ``FLAKY FAILURE`` (1): a failure that did not repeat when rerun, and no other;
- ``NO VERDICT`` (2): nothing could be judged (a usage or setup error, a
  backend that cannot run here or does not follow the protocol, an
  unreadable catalog, nothing judged, an interruption before any failure);
- ``SUITE ERROR`` (3): the suite itself raised something it did not expect;
  the traceback is printed, and the run says nothing about the backend.

This module also holds the vocabulary the engine and the renderers share:
how one golden case ended (``Status``) and which ``Report`` counts a run's
rounding statistics add up (``ROUNDING_FIELDS``).
"""

from __future__ import annotations

import dataclasses
import enum


class _Named(str, enum.Enum):
    """A ``str`` enum printed as its value (``Kind.CONFORMANT == "CONFORMANT"``)."""

    def __str__(self) -> str:
        return self.value


class Kind(_Named):
    """The kind of a verdict."""

    CONFORMANT = "CONFORMANT"
    NOT_CONFORMANT = "NOT CONFORMANT"
    FLAKY = "FLAKY FAILURE"
    NO_VERDICT = "NO VERDICT"
    SUITE_ERROR = "SUITE ERROR"


EXIT_CODES = {Kind.CONFORMANT: 0, Kind.NOT_CONFORMANT: 1, Kind.FLAKY: 1, Kind.NO_VERDICT: 2, Kind.SUITE_ERROR: 3}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A run's conclusion: its ``kind``, why (``reason``: for NO VERDICT and
    SUITE ERROR, or why a run with a verdict stopped early), and whether an
    interruption (a signal, stdout's reader gone) ended the run."""

    kind: Kind
    reason: str | None = None
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        """The process exit status of this verdict (``EXIT_CODES``)."""
        return EXIT_CODES[self.kind]

    def head(self) -> str:
        """``NO VERDICT (nothing was judged)``: the kind, with the reason where it has one."""
        return f"{self.kind}" + (f" ({self.reason})" if self.reason and self.kind is not Kind.CONFORMANT else "")


class SetupError(Exception):
    """Nothing can be judged (NO VERDICT, exit 2): an unknown or unavailable
    backend, a bad argument, a backend that does not follow the protocol."""


def no_verdict(reason: str, interrupted: bool = False) -> Verdict:
    """The NO VERDICT verdict with ``reason``."""
    return Verdict(Kind.NO_VERDICT, reason, interrupted)


def decide(*, judged: int, failed: int, flaky: int = 0, errors: int = 0, stopped: str | None = None) -> Verdict:
    """The verdict of a run that judged ``judged`` things (golden cases,
    generated or serving problems, replayed launches), of which ``failed``
    failed; ``flaky`` of those failures did not repeat when rerun; ``errors``
    parts could not be read (a damaged catalog or case); ``stopped``: why the
    run ended early (an interruption), or None.

    A failure decides (NOT CONFORMANT, or FLAKY FAILURE when every failure
    was flaky) whatever else happened: its evidence stands. Otherwise an
    interruption, an unreadable part or nothing judged is NO VERDICT: a run
    never says CONFORMANT when it judged nothing."""
    if failed:
        kind = Kind.FLAKY if flaky == failed else Kind.NOT_CONFORMANT
        return Verdict(kind, None if stopped is None else f"stopped early: {stopped}", stopped is not None)
    if stopped is not None:
        return no_verdict(f"interrupted ({stopped})", interrupted=True)
    if errors:
        return no_verdict("a catalog has unreadable cases")
    if not judged:
        return no_verdict("nothing was judged")
    return Verdict(Kind.CONFORMANT)


class Status(_Named):
    """How one golden case ended."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    ERROR = "ERROR"


# The Report counts a run's rounding statistics add up (check.add_rounding, render.rounding_lines).
ROUNDING_FIELDS = ("n_elements", "n_determined", "n_off_nearest", "n_toward_zero", "n_away_from_zero",
                   "n_below", "n_above", "n_rounding")
