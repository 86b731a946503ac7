"""Running a backend on one problem and one launch the way the conformance checks do.

The backend receives what its ``Capabilities`` declare (``Launch.kwargs``);
an ``out=`` buffer, where declared, is pre-filled with NaN so that a row the
backend never stores shows up. Each launch runs twice (the second in the next
declared workgroup order, where the backend has orders) and the two results
must be bitwise equal (a split kernel that leaves its tickets dirty fails the
second run).

The backend never sees the caller's problem: each call gets a private copy of
every input array, compared byte for byte with the original afterwards. The
expectations come from the original, so a backend that overwrites its inputs
cannot move them, and any byte it changed fails the case by name. The copies
stay writable: torch warns on ``from_numpy`` of a read-only array (an error
under ``-W error``), and the comparison catches every write that read-only
flags would (``setflags(write=True)`` and writes through torch included).

Who failed is kept apart: anything raised inside the backend's call is a
``BackendCrash`` (the backend is not conformant), ``BaseException`` included:
a backend's own ``SystemExit`` or ``KeyboardInterrupt`` is its failure, never
the end of the run (only the user's interruption ends it, told apart by
``nvfp4_suite.vectors.engine.interrupts``); so is an error raised while its returned
tensor is read back (an asynchronous GPU fault surfaces there). An output of
the wrong type, dtype, layout or device is a failed report naming what was
returned; anything else raised here is the suite's own error and propagates.

Every output is copied before the next launch, whatever the container: a
backend that returns the same buffer each time (a CPU torch tensor, a
CUDA-graph static output) cannot overwrite its first result with its second
before the two are compared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import traceback
from pathlib import Path

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.compare import Interval, Report, compare_with_interval
from nvfp4_suite.reference.layout import present
from nvfp4_suite.vectors.engine import interrupts, phases
from nvfp4_suite.vectors.engine.references import HOST, References


class BackendCrash(Exception):
    """The backend's own call raised ``error`` on ``launch``."""

    # Frames of the backend's traceback a report shows (the innermost: where it raised).
    TRACE_FRAMES = 8

    def __init__(self, error: BaseException, launch: Launch):
        what = getattr(error, "kind", None) or type(error).__name__
        super().__init__(f"backend raised {what}" + (f": {error}" if str(error) else ""))
        self.error = error
        self.launch = launch

    def details(self) -> str:
        """The message and, where the error carries one, the innermost frames of
        its traceback (a crash is debugged from where it raised)."""
        tb = self.error.__traceback__
        if tb is None:
            return str(self)
        frames = traceback.format_tb(tb)[-self.TRACE_FRAMES:]
        return str(self) + "\nbackend traceback (innermost frames):\n" + "".join(frames).rstrip()


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


class OutputTypeError(TypeError):
    """A backend returned something that is not an output array (message names what)."""


_NUMPY_OK = ("float32", "float16", "bfloat16")


def to_output(x) -> np.ndarray:
    """A backend's returned output as a new float32 array (exact: every accepted
    dtype converts without rounding; always a copy, never a view of the
    backend's buffer). Accepts a numpy array of float32, float16 or ml_dtypes
    bfloat16, or a dense torch tensor of float32, float16 or bfloat16 on any
    device holding data (not ``meta``), with or without gradients. Raises
    ``OutputTypeError`` naming the type, dtype, layout or device of anything
    else (the shape is judged by the report)."""
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        import torch

        if not isinstance(x, torch.Tensor):
            raise OutputTypeError(f"backend returned a {type(x).__name__}, expected a tensor or numpy array")
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise OutputTypeError(f"backend returned a torch tensor of {x.dtype}; expected float32, float16 "
                                  "or bfloat16")
        if x.layout != torch.strided:
            raise OutputTypeError(f"backend returned a torch tensor with layout {x.layout}; expected a dense "
                                  "(torch.strided) tensor")
        if x.device.type == "meta":
            raise OutputTypeError("backend returned a torch tensor on the meta device, which holds no values")
        return x.detach().to("cpu", torch.float32, copy=True).numpy()
    if isinstance(x, np.ndarray):
        if x.dtype.name not in _NUMPY_OK:
            raise OutputTypeError(f"backend returned a numpy array of {x.dtype}; expected one of "
                                  f"{', '.join(_NUMPY_OK)} (bf16 values)")
        return np.array(x, dtype=np.float32, copy=True, subok=False)
    raise OutputTypeError(f"backend returned a {type(x).__module__}.{type(x).__qualname__}; expected a numpy "
                          "array or a torch tensor [rows, H, 128]")


def _call(backend, problem: DecodeProblem, launch: Launch):
    """(output as returned, or an OutputTypeError; input bytes changed) of one call."""
    caps = backend.capabilities
    seen = private_copy(problem)
    # The cache in the layout the backend declares (Capabilities.cache_layout), re-packed
    # from the canonical pool, bytes identical; unchanged when it declares none.
    seen = present(seen, caps.cache_layout)
    kw = launch.kwargs(caps)
    out = None
    if caps.out:
        out = kw["out"] = np.full((problem.rows, problem.H, 128), np.nan, np.float32)
    got: np.ndarray | OutputTypeError
    try:
        res = backend(seen, **kw)
        got = to_output(out if res is None and out is not None else res)
    except OutputTypeError as e:
        got = e
    except KeyboardInterrupt as e:
        if interrupts.from_user(e):
            raise
        raise BackendCrash(e, launch) from e
    except BaseException as e:  # noqa: BLE001 - whatever the backend raises is its own failure
        raise BackendCrash(e, launch) from e
    return got, modified_inputs(problem, seen)


def run_case(backend, problem: DecodeProblem, launch: Launch | None = None,
             expected: tuple[Interval, str] | None = None,
             references: References = HOST) -> tuple[np.ndarray | None, Report]:
    """Run ``backend`` twice on ``problem`` with ``launch`` and compare; returns
    (first output as float32 ``[rows, H, 128]`` or None when it was not an
    array, report).

    The launch must be inside ``backend.capabilities`` (ValueError otherwise,
    naming the refused value). The report compares with the exact oracle
    (geometry None) or the emulation of the backend's geometry with the same
    ``splits``, both computed from ``problem`` itself, which the backend never
    sees (each run gets a ``private_copy``); input bytes a run changed are in
    ``report.modified_inputs``. ``expected``: that ``(interval, against)``
    (``nvfp4_suite.reference.compare.backend_interval``) when the caller has it already;
    otherwise it is computed where ``references`` say.
    Raises ``BackendCrash`` when the backend raised.
    """
    launch = launch or Launch()
    caps = backend.capabilities
    why = caps.refuses(problem, launch)
    if why:
        raise ValueError(f"launch {launch.describe(problem)} is outside backend {backend.name}'s capabilities: {why}")
    with phases.timed("launches"):
        first, changed = _call(backend, problem, launch)
        second, changed_again = _call(backend, problem, launch.then(caps))
    if isinstance(first, OutputTypeError):
        against = "oracle" if backend.geometry is None else "emulation"
        report = Report(against, 0, 0, np.inf, [], [], [], 0, shape_error=str(first))
        first = None
    else:
        with phases.timed("references"):
            iv, against = expected or references.interval(problem, backend.geometry, launch.known_splits)
        with phases.timed("judging"):
            report = compare_with_interval(problem, first, iv, against, sentinel=backend.capabilities.out)
            if isinstance(second, OutputTypeError) or second.shape != first.shape:
                report.repeat_mismatch = int(first.size)
            else:
                report.repeat_mismatch = int((first.view(np.uint32) != second.view(np.uint32)).sum())
    report.modified_inputs = {n: max(changed.get(n, 0), changed_again.get(n, 0))
                              for n in _arrays(problem) if n in changed or n in changed_again}
    return first, report


# Where failing problems are saved unless $NVFP4_REPRO_DIR says otherwise.
REPRO_DEFAULT = ".repro"


def repro_folder() -> Path:
    """The folder failing problems are saved in: ``$NVFP4_REPRO_DIR``, else ``.repro``."""
    return Path(os.environ.get("NVFP4_REPRO_DIR", REPRO_DEFAULT))


def shown(name) -> str:
    """``name`` (a backend's, which it chose) safe to print on one line: as it
    is when it is a printable string, else its ``repr`` (newlines, escapes and
    other control characters written as backslash escapes)."""
    s = name if isinstance(name, str) else repr(name)
    return s if s.isprintable() else repr(s)


def save_repro(spec: str, problem: DecodeProblem, launch: Launch, report_text: str) -> Path:
    """Write a failing problem to ``$NVFP4_REPRO_DIR`` (default ``.repro/``) as a
    case file named by its content hash; returns the path. Its meta holds the
    backend ``spec`` (as given to ``--backend``) and the launch record that
    failed, which ``python -m nvfp4_suite.vectors replay PATH`` reruns (with no other
    argument only when ``spec`` is a registered backend name; else with ``--backend SPEC``,
    as the printed replay command gives it); ``python -m nvfp4_suite.vectors add PATH``
    makes it a golden case of the project's catalog. Raises OSError when the
    folder cannot hold it (a file, unwritable, not creatable), leaving no partial
    file behind; callers print the report anyway."""
    from nvfp4_suite.vectors.catalog.casefile import save_case

    folder = repro_folder()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"incoming-{os.getpid()}.npz"
    meta = {"backend": spec, "launches": [launch.to_json()], "report": report_text}
    try:
        digest = save_case(tmp, problem, meta=meta)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in spec)
        path = folder / f"{safe}-{digest[:12]}.npz"
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return path
