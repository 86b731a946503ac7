"""The vocabulary of check results that the engine (``check``) and the report
text (``render``) share: how a golden case ended, and which ``Report`` fields a
run's rounding statistics add up.
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """How one golden case ended (a ``str``: ``Status.PASS == "PASS"``)."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    ERROR = "ERROR"

    def __str__(self) -> str:
        return self.value


# The Report counts a run's rounding statistics add up (check.add_rounding, render.rounding_lines).
ROUNDING_FIELDS = ("n_elements", "n_determined", "n_off_nearest", "n_toward_zero", "n_away_from_zero",
                   "n_below", "n_above", "n_rounding")
