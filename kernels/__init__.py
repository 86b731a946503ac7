"""Implementations under test, behind one protocol (``nvfp4_suite.kernels.protocol``).

A backend declares ``name``, ``geometry``, ``capabilities`` (a
``Capabilities`` record) and ``available()``, and is called with a problem and
one ``Launch``'s keyword arguments (see ``nvfp4_suite.kernels.protocol``).
``get_backend`` resolves a registered name (``reference``, ``emulate``,
``torch``, ``triton``, ``flydsl``, ``flydsl-sim-gfx942``,
``flydsl-sim-gfx950``) or ``package.module:attr`` naming any importable
object (or zero-argument factory) that follows the protocol.
"""

from __future__ import annotations

import importlib
from typing import Callable

from .protocol import Backend, Capabilities, Launch, Limits, protocol_errors


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
    try:
        errs = protocol_errors(obj)
    except Exception as e:  # noqa: BLE001 - an attribute (a property) that raises when read
        raise BackendError(f"{what}: reading its attributes raised {type(e).__name__}: {e}") from e
    if errs:
        raise BackendError(f"{what} does not follow nvfp4_suite.kernels.Backend (see kernels/protocol.py): "
                           f"{'; '.join(errs)}")
    return obj


def get_backend(spec: str) -> Backend:
    """A backend by registered name or ``module.path:attr``; raises BackendError
    (naming the spec and what went wrong) for anything that does not give one:
    an unknown name, a malformed spec, a module that fails to import (whatever
    it raises, ``SystemExit`` included: a kernel module written as a script
    that exits when it finds no device is not a backend here), a missing
    attribute, a factory that raises, a non-conforming object. Only
    ``KeyboardInterrupt`` passes through (Ctrl-C during a slow import)."""
    if spec in _REGISTRY:
        return _check(_make(_REGISTRY[spec], spec), spec)
    mod_name, sep, attr = spec.partition(":")
    if not sep:
        raise BackendError(f"unknown backend {spec!r}; registered: {', '.join(_REGISTRY)}; "
                           "or give module.path:attr")
    if not mod_name or not attr:
        raise BackendError(f"backend spec {spec!r}: expected module.path:attr with both parts non-empty")
    try:
        module = importlib.import_module(mod_name)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - any failure to import is a setup error, reported as such
        raise BackendError(f"cannot load backend {spec!r}: importing {mod_name!r} raised "
                           f"{type(e).__name__}: {e}") from e
    try:
        obj = getattr(module, attr)
    except AttributeError as e:
        raise BackendError(f"cannot load backend {spec!r}: module {mod_name!r} has no attribute {attr!r}") from e
    except Exception as e:  # noqa: BLE001 - a module __getattr__ that raises
        raise BackendError(f"cannot load backend {spec!r}: reading {attr!r} raised {type(e).__name__}: {e}") from e
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "available")):
        obj = _make(obj, spec)
    return _check(obj, spec)


def _make(factory: Callable[[], Backend], spec: str) -> Backend:
    try:
        return factory()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a factory that raises (or exits) is a setup error of that spec
        raise BackendError(f"cannot load backend {spec!r}: creating it raised {type(e).__name__}: {e}") from e


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

__all__ = ["Backend", "BackendError", "Capabilities", "Launch", "Limits", "get_backend", "register", "registered"]
