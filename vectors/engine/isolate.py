"""Each launch in a worker process: a backend that crashes, hangs, faults the
GPU or is killed for memory fails that launch, and the run goes on.

``Worker(spec, timeout)`` is the call of a backend whose every launch is sent
to a worker process that loaded ``spec`` itself
(``nvfp4_suite.kernels.get_backend``); an isolated
``nvfp4_suite.vectors.engine.config.Subject`` calls through it. The harness
treats it like any call, so what goes wrong in the worker is the
backend's failure of that launch, with the replay command the report
prints:

- it raises (anything, ``SystemExit`` included): ``backend raised <its type>: <message>``;
- no result within ``timeout`` seconds: ``LaunchTimeout``, the worker killed;
- the worker dies (``os.abort``, a segfault, a GPU fault that ends the
  process, the OOM killer's SIGKILL, ``os._exit``): ``WorkerDied`` naming the
  signal or exit status.

After a timeout or a death the next call starts a fresh worker. The worker
returns the output already converted to float32 (``harness.to_output``) and
any input array the backend changed, which is written back into the copy the
harness gave, so the harness's checks (unwritten rows, modified inputs,
repeat runs) judge an isolated backend exactly as an in-process one.

Workers are fresh interpreters (``python -m nvfp4_suite.vectors.engine.isolate``,
safe after CUDA is initialised in the parent, and independent of how the
parent was started: no re-import of a caller's script as multiprocessing's
spawn does), given the parent's ``sys.path`` and talking over a socket pair
with pickled messages. They ignore SIGINT: Ctrl-C interrupts the run in the
parent, which ends them.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

import numpy as np

# Loading the backend in a fresh worker (imports, device initialisation).
START_TIMEOUT_S = 300.0


class LaunchTimeout(Exception):
    """The launch gave no result within the timeout; its worker was killed."""


class WorkerDied(Exception):
    """The worker process ended during the launch without a result."""


class Raised(Exception):
    """The backend raised in its worker; ``kind`` is the exception's type name."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _ended(code: int | None) -> str:
    """How a worker with exit code ``code`` ended, in words."""
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        note = " (the kernel's OOM killer sends it, as can another process)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{note}"
    return f"exited with status {code} without returning a result"


class Worker:
    """The calls of the backend loaded from ``spec``, each sent to a worker
    process that loaded it itself; ``timeout``: seconds a launch may take."""

    def __init__(self, spec: str, timeout: float):
        self.spec = spec
        self.timeout = float(timeout)
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        mine, theirs = socket.socketpair()
        self._proc = subprocess.Popen([sys.executable, "-m", "nvfp4_suite.vectors.engine.isolate",
                                       str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        parent = self._conn = Connection(mine.detach())
        parent.send((list(sys.path), self.spec))
        if not parent.poll(START_TIMEOUT_S):
            self.close()
            raise LaunchTimeout(f"the worker did not load backend {self.spec!r} within {START_TIMEOUT_S:g} s")
        try:
            msg = parent.recv()
        except (EOFError, OSError):
            code = self._reap()
            raise WorkerDied(f"the worker loading backend {self.spec!r} {_ended(code)}") from None
        if msg[0] != "ready":
            self.close()
            raise Raised(msg[1], f"loading backend {self.spec!r} in the worker: {msg[2]}")

    def _reap(self) -> int | None:
        assert self._proc is not None, "_reap follows _start"
        try:
            code = self._proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        self.close()
        return code

    def close(self) -> None:
        """End the worker, if any (the next call starts a fresh one)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            if self._conn is not None:  # None when the worker started but its connection was not made
                self._conn.close()
        self._proc = self._conn = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the daemon worker ends with us
            pass

    def __call__(self, problem, **kw):
        """The output of one launch in the worker (float32 numpy), or the exception
        naming what went wrong there. Input arrays the backend changed in the
        worker are written back into ``problem``; a filled ``out`` into ``out``."""
        from nvfp4_suite.vectors.engine.harness import OutputTypeError

        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()
        try:
            self._conn.send(("call", problem, kw))
        except (BrokenPipeError, OSError):
            code = self._reap()
            raise WorkerDied(f"the worker {_ended(code)} before the launch") from None
        if not self._conn.poll(self.timeout):
            self.close()
            raise LaunchTimeout(f"no result within {self.timeout:g} s (--timeout); the worker was killed")
        try:
            msg = self._conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            raise WorkerDied(f"the worker process {_ended(code)} during the launch") from None
        kind = msg[0]
        if kind == "raised":
            raise Raised(msg[1], msg[2])
        changed = msg[2]
        for name, arr in changed.items():
            mine = getattr(problem, name)
            if isinstance(mine, np.ndarray) and mine.shape == arr.shape and mine.dtype == arr.dtype:
                np.copyto(mine, arr)
            else:
                object.__setattr__(problem, name, arr)
        if kind == "output_type":
            raise OutputTypeError(msg[1])
        out = msg[1]
        if out is not None and kw.get("out") is not None and out.shape == kw["out"].shape:
            np.copyto(kw["out"], out)
        return out


def _worker(conn: Connection) -> None:
    """The worker's loop: receive the parent's ``sys.path`` and the spec, load
    it, then run each call sent and answer ("ok", float32 output, changed
    inputs), ("output_type", message, changed inputs) or ("raised", type name,
    message)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path, spec = conn.recv()
    sys.path[:] = path
    from nvfp4_suite import kernels
    from nvfp4_suite.vectors.engine.harness import OutputTypeError, _arrays, to_output

    try:
        backend = kernels.get_backend(spec)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which names it
        conn.send(("raised", type(e).__name__, str(e)))
        return
    conn.send(("ready",))
    while True:
        try:
            _, problem, kw = conn.recv()
        except (EOFError, OSError):
            return
        before = {n: getattr(problem, n).copy() for n in _arrays(problem)}
        answer: tuple  # (kind, details...): the parent reads it by kind
        try:
            res = backend(problem, **kw)
            out = kw.get("out")
            answer = ("ok", to_output(out if res is None and out is not None else res))
        except OutputTypeError as e:
            answer = ("output_type", str(e))
        except BaseException as e:  # noqa: BLE001 - whatever the backend raises is its failure, named in the parent
            answer = ("raised", type(e).__name__, str(e))
        changed = {}
        for n, a in before.items():
            b = np.asarray(getattr(problem, n))
            if b.shape != a.shape or b.dtype != a.dtype or b.tobytes() != a.tobytes():
                changed[n] = b
        conn.send((*answer, changed) if answer[0] != "raised" else answer)


if __name__ == "__main__":
    _worker(Connection(int(sys.argv[1])))
