"""What every command-line entry point of the suite does when its reader goes away.

``python -m nvfp4_suite.vectors ... | head -3``: once ``head`` has its lines
and exits, the next write raises ``BrokenPipeError``. A command stops there,
quietly: ``reader_gone`` points stdout at ``/dev/null`` so that Python's own
flush at exit raises no second error, and returns the exit status 2 (the
command did not finish saying what it had to say).
"""

from __future__ import annotations

import os
import sys


def reader_gone() -> int:
    """Silence stdout after a ``BrokenPipeError``; the exit status 2."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 2
