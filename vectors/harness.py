"""Running a backend on one problem the way the conformance checks do.

The output buffer (for backends that accept ``out=``) is pre-filled with NaN so
that a row the backend never stores shows up; each problem runs twice and the
two results must be bitwise equal (a split kernel that leaves its tickets
dirty fails the second run).
"""

from __future__ import annotations

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


def _call(backend, problem: DecodeProblem, splits: int, xcds: int) -> np.ndarray:
    params = _params(backend)
    kw = {"xcds": xcds} if "xcds" in params else {}
    if "out" in params:
        out = np.full((problem.rows, problem.H, 128), np.nan, np.float32)
        res = backend(problem, splits=splits, out=out, **kw)
        return out if res is None else np.asarray(res)
    return np.asarray(backend(problem, splits=splits, **kw))


def run_case(backend, problem: DecodeProblem, splits: int = 1, xcds: int = 0) -> tuple[np.ndarray, Report]:
    """Run ``backend`` twice on ``problem`` and compare; returns (first output, report).

    ``xcds`` reaches only backends whose ``__call__`` takes it (FlyDSL's XCD
    placement; it must not change the result). The report compares with the
    exact oracle (geometry None) or the emulation of the backend's geometry
    with the same ``splits``.
    """
    first = _call(backend, problem, splits, xcds)
    second = _call(backend, problem, splits, xcds)
    report = compare_backend_output(problem, first, geometry=backend.geometry, splits=splits)
    a = np.asarray(first, np.float32)
    b = np.asarray(second, np.float32)
    if a.shape == b.shape:
        report.repeat_mismatch = int((a.view(np.uint32) != b.view(np.uint32)).sum())
    else:
        report.repeat_mismatch = int(a.size)
    return first, report


def save_repro(backend_name: str, problem: DecodeProblem, splits: int, report_text: str) -> Path:
    """Write a failing problem to ``$NVFP4_REPRO_DIR`` (default ``.repro/``) as a case
    file named by its content hash; returns the path. ``python -m vectors replay
    PATH`` reruns it and ``python -m vectors add PATH`` makes it a golden case."""
    from .io import save_case

    folder = Path(os.environ.get("NVFP4_REPRO_DIR", ".repro"))
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"incoming-{os.getpid()}.npz"
    digest = save_case(tmp, problem, meta={"backend": backend_name, "splits": splits, "report": report_text})
    path = folder / f"{backend_name.replace(':', '_')}-{digest[:12]}.npz"
    tmp.replace(path)
    return path
