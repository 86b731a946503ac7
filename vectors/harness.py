"""Running a backend on one problem the way the conformance checks do.

The output buffer (for backends that accept ``out=``) is pre-filled with NaN so
that a row the backend never stores shows up; each problem runs twice and the
two results must be bitwise equal (a split kernel that leaves its tickets
dirty fails the second run).

The backend never sees the caller's problem: each call gets a private copy of
every input array, compared byte for byte with the original afterwards. The
expectations come from the original, so a backend that overwrites its inputs
cannot move them, and any byte it changed fails the case by name. The copies
stay writable: torch warns on ``from_numpy`` of a read-only array (an error
under ``-W error``), and the comparison catches every write that read-only
flags would (``setflags(write=True)`` and writes through torch included).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path

import numpy as np

from reference import DecodeProblem
from reference.compare import Report, compare_backend_output


def _params(backend):
    try:
        return inspect.signature(backend.__call__).parameters
    except (TypeError, ValueError):
        return {}


def takes_xcds(backend) -> bool:
    """Whether ``backend.__call__`` takes ``xcds`` (FlyDSL's XCD placement)."""
    return "xcds" in _params(backend)


def _arrays(problem: DecodeProblem) -> list[str]:
    return [f.name for f in dataclasses.fields(problem) if isinstance(getattr(problem, f.name), np.ndarray)]


def private_copy(problem: DecodeProblem) -> DecodeProblem:
    """``problem`` with every input array copied (same dtype, shape and memory
    order, writable), for a backend to receive in place of the original."""
    return dataclasses.replace(problem, **{n: getattr(problem, n).copy(order="K") for n in _arrays(problem)})


def _bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def modified_inputs(original: DecodeProblem, seen: DecodeProblem) -> dict[str, int]:
    """Input arrays of ``seen`` (the copy a backend got) that no longer equal
    ``original``'s: name -> bytes changed (every byte when the backend replaced
    the array by one of another dtype or shape), in field order."""
    changed = {}
    for name in _arrays(original):
        a, b = getattr(original, name), np.asarray(getattr(seen, name))
        if a.dtype != b.dtype or a.shape != b.shape:
            n = max(a.nbytes, b.nbytes)
        else:
            n = int(np.count_nonzero(_bytes(a) != _bytes(b)))
        if n:
            changed[name] = n
    return changed


class BackendCrash(Exception):
    """The backend's own ``__call__`` raised ``original`` (a kernel failure,
    told apart from an error of the harness's conversion or comparison,
    which propagates unchanged)."""

    def __init__(self, backend_name: str, original: BaseException):
        super().__init__(f"backend {backend_name} raised {type(original).__name__}: {original}")
        self.original = original


def _invoke(backend, problem: DecodeProblem, **kw):
    """``backend(problem, **kw)``, anything it raises wrapped in ``BackendCrash``."""
    try:
        return backend(problem, **kw)
    except Exception as e:
        raise BackendCrash(getattr(backend, "name", repr(backend)), e) from e


def _call(backend, problem: DecodeProblem, splits: int, xcds: int) -> tuple[np.ndarray, dict[str, int]]:
    seen = private_copy(problem)
    params = _params(backend)
    kw = {"xcds": xcds} if "xcds" in params else {}
    if "out" in params:
        out = np.full((problem.rows, problem.H, 128), np.nan, np.float32)
        res = _invoke(backend, seen, splits=splits, out=out, **kw)
        got = out if res is None else np.asarray(res)
    else:
        got = np.asarray(_invoke(backend, seen, splits=splits, **kw))
    return got, modified_inputs(problem, seen)


def run_case(backend, problem: DecodeProblem, splits: int = 1, xcds: int = 0) -> tuple[np.ndarray, Report]:
    """Run ``backend`` twice on ``problem`` and compare; returns (first output, report).

    ``xcds`` reaches only backends whose ``__call__`` takes it (FlyDSL's XCD
    placement; it must not change the result). The report compares with the
    exact oracle (geometry None) or the emulation of the backend's geometry
    with the same ``splits``, both computed from ``problem`` itself, which the
    backend never sees (each run gets a ``private_copy``); input bytes a run
    changed are in ``report.modified_inputs``. The first output is as the
    backend returned it (float32 ``[rows, H, 128]`` when it conforms).
    Raises ``BackendCrash`` when the backend's ``__call__`` raises; an error
    of the harness itself propagates as raised.
    """
    first, changed = _call(backend, problem, splits, xcds)
    second, changed_again = _call(backend, problem, splits, xcds)
    report = compare_backend_output(problem, first, geometry=backend.geometry, splits=splits)
    a = np.asarray(first, np.float32)
    b = np.asarray(second, np.float32)
    if a.shape == b.shape:
        report.repeat_mismatch = int((a.view(np.uint32) != b.view(np.uint32)).sum())
    else:
        report.repeat_mismatch = int(a.size)
    report.modified_inputs = {n: max(changed.get(n, 0), changed_again.get(n, 0))
                              for n in _arrays(problem) if n in changed or n in changed_again}
    return first, report


def save_repro(backend_name: str, problem: DecodeProblem, splits: int, report_text: str, *, xcds: int) -> Path:
    """Write a failing problem to ``$NVFP4_REPRO_DIR`` (default ``.repro/``) as a case
    file named by its content hash; returns the path. Its meta holds the launch
    (``splits``, ``xcds``) that failed, which ``python -m vectors replay PATH``
    reruns; ``python -m vectors add PATH`` makes it a golden case."""
    from .io import save_case

    folder = Path(os.environ.get("NVFP4_REPRO_DIR", ".repro"))
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"incoming-{os.getpid()}.npz"
    meta = {"backend": backend_name, "splits": splits, "xcds": xcds, "report": report_text}
    digest = save_case(tmp, problem, meta=meta)
    path = folder / f"{backend_name.replace(':', '_')}-{digest[:12]}.npz"
    tmp.replace(path)
    return path
