"""The catalog's lock: ``fcntl.flock`` on ``FOLDER/.lock``, so that commands
that change a catalog (``add``, ``regen``) run one at a time and commands
that read all of it (``check``'s golden run, ``verify``, ``regen --check``)
never see one half-done.

Writers take it exclusive, readers shared. A command that finds it held
waits, saying once who holds it, and gives up after ``timeout`` seconds with
``CatalogBusy`` (exit 2: nothing was changed). The lock file is removed by
the last holder, so a catalog folder at rest holds none; a waiter that
acquired a file removed meanwhile tries again on the new one. A reader of a
folder it cannot write (an installed suite) reads without a lock: no
command can change that folder either.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

from nvfp4_suite.vectors.catalog.casefile import CaseFileError

LOCK_NAME = ".lock"
# Long enough for a regeneration of the built-in catalog on a slow machine.
TIMEOUT_S = 900.0
_POLL_S = 0.05


class CatalogBusy(CaseFileError):
    """Another command held the catalog's lock for longer than the timeout."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        text = ""
    return text or "a command reading the catalog"


@contextlib.contextmanager
def locked(folder, *, exclusive: bool, what: str, timeout: float | None = None, notice=None):
    """Hold ``folder``'s lock (exclusive for ``what`` changes the catalog, else
    shared) for the ``with`` body. ``notice(msg)`` is told once when it has to
    wait; after ``timeout`` seconds (default ``TIMEOUT_S``) raises CatalogBusy."""
    path = Path(folder) / LOCK_NAME
    timeout = TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as e:
            if not exclusive and e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                yield
                return
            raise CaseFileError(f"{path}: cannot open the catalog's lock ({e.strerror})") from None
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > deadline:
                raise CatalogBusy(f"{folder}: the catalog is locked by {_holder(path)} for more than {timeout:g} s; "
                                  f"{what} gave up, nothing was changed") from None
            if not told and notice:
                notice(f"{what}: waiting for the catalog lock {path}, held by {_holder(path)} "
                       f"(giving up after {timeout:g} s)")
                told = True
            time.sleep(_POLL_S)
            continue
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed this file: lock the new one
    try:
        if exclusive:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} ({what})".encode())
        yield
    finally:
        # Remove the file only while holding it exclusively: a reader that is
        # not the last one fails the non-blocking upgrade and leaves it.
        try:
            if not exclusive:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink(missing_ok=True)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
