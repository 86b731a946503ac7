"""Progress of long runs on stderr: a live bar with an ETA on a terminal, the
plain lines elsewhere (CI logs, pipes, files).

The suite's long loops (golden cases, generated problems, minimising, the
catalog's regen and verify, the simulator sweep) report progress as text
lines such as ``"  golden: [3/83] name"``. ``Progress`` is the one callable
they are handed: when its stream is not a terminal it prints each line as
it is; on a terminal it redraws one line in place (``\\r``), reading the
``DONE/TOTAL`` count in the line to draw the bar, the percentage and the
time left. A line without a count (``minimising: 40 tries...``) is shown
with the seconds spent in it. The estimate is the mean time per step since
the stage began (a stage: the text before the count, and its total).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from typing import Callable, TextIO

COUNT = re.compile(r"(\d+)/(\d+)")
BAR_WIDTH = 24


def duration(seconds: float) -> str:
    """``seconds`` as ``42s``, ``3m05s`` or ``2h07m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """A progress callable: ``progress(line)`` prints ``line`` (not a terminal)
    or redraws the bar (a terminal). ``stream``: default stderr; ``tty``: force
    the choice (default ``stream.isatty()``); ``clock``: seconds, monotonic;
    ``columns``: the terminal's width (default: asked of the terminal)."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, columns: int | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.tty = _isatty(self.stream) if tty is None else tty
        self.clock = clock
        self.columns = columns
        self._shown = 0  # characters of the bar on the screen now
        self._stage: tuple | None = None  # (text before the count, total) or (text,) of the stage now
        self._since = 0.0
        self._first = 0

    def __call__(self, line: str) -> None:
        if not self.tty:
            print(line, file=self.stream, flush=True)
            return
        self._draw(self.bar(line))

    def bar(self, line: str) -> str:
        """The terminal's line for progress line ``line``: bar, percentage and
        ETA first (they survive a narrow terminal's cut), then the line itself."""
        now = self.clock()
        text = line.strip()
        m = COUNT.search(text)
        if m is None or int(m.group(2)) <= 0:
            stage = (text.split(":", 1)[0],)
            if stage != self._stage:
                self._stage, self._since = stage, now
            return f"{text}  ({duration(now - self._since)})"
        done, total = int(m.group(1)), int(m.group(2))
        key = (text[:m.start()], total)
        if key != self._stage or done < self._first:
            self._stage, self._since, self._first = key, now, done
        frac = min(done / total, 1.0)
        filled = int(frac * BAR_WIDTH)
        if done > self._first:
            eta = f"ETA {duration((now - self._since) / (done - self._first) * (total - done))}"
        else:
            eta = "ETA ?"
        return f"{frac:4.0%} |{'#' * filled}{'.' * (BAR_WIDTH - filled)}| {eta}  {text}"

    def _draw(self, text: str) -> None:
        width = (self.columns or shutil.get_terminal_size().columns) - 1
        text = text[:max(width, 1)]
        self.stream.write("\r" + text + " " * max(self._shown - len(text), 0))
        self.stream.flush()
        self._shown = len(text)

    def clear(self) -> None:
        """Erase the bar (before other output is written to the terminal)."""
        if self.tty and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
