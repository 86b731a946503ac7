"""Implementations under test, behind one protocol.

A backend is any object with ``name``, ``geometry``, ``splits``,
``available()`` and ``__call__(problem, *, splits=1)`` (see ``Backend``).
``get_backend`` resolves a registered name (``reference``, ``emulate``,
``torch``, ``triton``, ``flydsl``, ``flydsl-sim-gfx942``,
``flydsl-sim-gfx950``) or ``package.module:attr`` naming any
importable object (or zero-argument factory) that follows the protocol.
"""

from __future__ import annotations

import importlib
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from reference import DecodeProblem, Geometry


@runtime_checkable
class Backend(Protocol):
    """The protocol every implementation under test follows.

    name: str. geometry: ``reference.Geometry`` of its arithmetic, or None for
    the exact class (at least float32, P unrounded, output rounded once to
    bf16; compared with the exact oracle). splits: the split counts it
    supports. available(): None when usable here, otherwise the reason.
    __call__(problem, *, splits=1): float32 ``[rows, H, 128]`` holding the
    bf16 output.
    """

    name: str
    geometry: Geometry | None
    splits: tuple[int, ...]

    def available(self) -> str | None:
        """None when usable here, otherwise the reason."""

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        """float32 ``[rows, H, 128]`` holding the bf16 output."""


class BackendError(Exception):
    """An unknown backend name or an object that does not follow the protocol."""


_REGISTRY: dict[str, Callable[[], Backend]] = {}


def register(name: str, factory: Callable[[], Backend]) -> None:
    """Register ``factory`` (zero-argument, returns a Backend) under ``name``."""
    _REGISTRY[name] = factory


def registered() -> list[str]:
    """Registered backend names, in registration order."""
    return list(_REGISTRY)


def _check(obj, what: str) -> Backend:
    missing = [a for a in ("name", "geometry", "splits", "available") if not hasattr(obj, a)]
    if missing or not callable(obj):
        raise BackendError(f"{what} does not follow kernels.Backend: missing {missing or ['__call__']}")
    return obj


def get_backend(spec: str) -> Backend:
    """A backend by registered name or ``module.path:attr``; raises BackendError."""
    if spec in _REGISTRY:
        return _check(_REGISTRY[spec](), spec)
    if ":" not in spec:
        raise BackendError(f"unknown backend {spec!r}; registered: {', '.join(_REGISTRY)}; "
                           "or give module.path:attr")
    mod_name, attr = spec.split(":", 1)
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise BackendError(f"cannot load backend {spec!r}: {e}") from e
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "available")):
        obj = obj()
    return _check(obj, spec)


def _lazy(module: str, attr: str) -> Callable[[], Backend]:
    def make():
        """Import the backend's module only when it is asked for."""
        return getattr(importlib.import_module(module, __name__), attr)()
    return make


register("reference", _lazy(".reference_backends", "ReferenceBackend"))
register("emulate", _lazy(".reference_backends", "EmulateBackend"))
register("torch", _lazy(".torch.backend", "TorchBackend"))
register("triton", _lazy(".triton.decode", "TritonBackend"))
register("flydsl", _lazy(".flydsl.backend", "FlydslBackend"))
register("flydsl-sim-gfx950", _lazy(".flydsl.sim.backend", "gfx950"))
register("flydsl-sim-gfx942", _lazy(".flydsl.sim.backend", "gfx942"))

__all__ = ["Backend", "BackendError", "get_backend", "register", "registered"]
