"""Telling the user's interruptions apart from a backend's own exceptions.

A ``KeyboardInterrupt`` may come from the user (Ctrl-C, or a CI timeout's
SIGTERM) or be raised by backend code itself (``raise KeyboardInterrupt`` in a
kernel's host code). The first ends the run as "interrupted"; the second is
the backend's failure. The two are told apart by who raised it: while
``installed()`` (the CLI installs it for the length of a command) SIGINT and
SIGTERM set a flag before raising ``KeyboardInterrupt``, so an interrupt with
the flag unset was raised by code, not by a signal. Without the handlers (a
library caller, pytest) every ``KeyboardInterrupt`` counts as the user's: one
cannot tell, and ending the run is the safe reading.

``reader_gone()`` says whether stdout is a pipe whose reader has closed
(``check ... | head -3``), so a long run can stop when nobody reads it.
"""

from __future__ import annotations

import contextlib
import gc
import select
import signal
import sys

_state = {"installed": False, "signal": None}


class Interrupted(KeyboardInterrupt):
    """The run was stopped from outside: ``reason`` is ``SIGINT``, ``SIGTERM``
    or "stdout's reader went away"."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _in_gc_callback(frame) -> bool:
    """Whether ``frame`` (where a signal arrived) runs inside a ``gc.callbacks``
    function (hypothesis registers one): Python prints and drops what such a
    callback raises ("Exception ignored in ..."), so the interruption must wait."""
    codes = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _handler(signum, frame):
    _state["signal"] = signum
    if _in_gc_callback(frame):
        return  # remembered: the next stop_if_asked raises it
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def installed():
    """SIGINT and SIGTERM raise ``Interrupted`` and are remembered, for the
    length of the block (the previous handlers are restored after it; outside
    the main thread, where handlers cannot be set, nothing changes)."""
    try:
        saved = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:
        yield
        return
    _state.update(installed=True, signal=None)
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        _state.update(installed=False, signal=None)


def from_user(error: BaseException) -> bool:
    """Whether ``error`` (a ``KeyboardInterrupt``) is the user's interruption
    rather than one raised by code: True when a signal arrived, or when no
    handler is installed (then one cannot tell)."""
    return isinstance(error, Interrupted) or not _state["installed"] or _state["signal"] is not None


def reader_gone() -> bool:
    """True when stdout is a pipe (or socket) whose reader has closed it."""
    try:
        fd = sys.stdout.fileno()
        p = select.poll()
        p.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def stop_if_asked() -> None:
    """Raise ``Interrupted`` when a signal arrived earlier (its exception may
    have been caught on the way by code that went on: it is raised again
    here, at the next problem or case) or when stdout's reader is gone
    (``reader_gone``: the run stops as if interrupted, its evidence saved,
    instead of computing results nobody will read)."""
    if _state["signal"] is not None:
        raise Interrupted(signal.Signals(_state["signal"]).name)
    if reader_gone():
        raise Interrupted("stdout's reader went away")
