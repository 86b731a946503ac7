"""The backend protocol: what an implementation under test declares and receives.

This module is the one description of the contract between the suite and a
backend. The "Writing a backend" section of ``docs/backends.md`` is generated
from it (``python -m nvfp4_suite.kernels.protocol`` prints that section; a test keeps
the page equal to it).

A backend declares what it supports in one ``Capabilities`` record; the
strategies draw only launches and problems inside it, and the harness passes
a ``Launch`` (one point of it) to every call. Nothing else about a backend is
inspected: not its call signature, not any other attribute.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import numpy as np

from nvfp4_suite.reference import LAYOUTS, DecodeProblem, Exact, Geometry
from nvfp4_suite.reference.layout import CacheLayout
from nvfp4_suite.reference.problem import SCALE_SIGNS, SLOT_LISTS, TOPK_MAX, outside_scale_domain, outside_slot_domain


@dataclasses.dataclass(frozen=True)
class Limits:
    """The largest problem a backend is given by the generated checks (each
    field a maximum; golden cases are run whatever their size). Backends that
    execute in Python (an interpreter, a simulator) declare small limits."""

    requests: int = 8
    kv_heads: int = 4
    topk: int = 64
    q_len: int = 4

    def __post_init__(self):
        # A limit outside what a valid problem can have would make the
        # strategies draw invalid problems that fail a correct backend.
        for field, most in (("requests", None), ("kv_heads", None), ("topk", TOPK_MAX), ("q_len", None)):
            v = getattr(self, field)
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) or v < 1 or (
                    most is not None and v > most):
                raise ValueError(f"Limits.{field} = {v!r}: must be " + (
                    f"an int in 1..{most} (TOPK_MAX, the contract's largest slot count)" if most
                    else "a positive int"))


# Backends that execute every instruction in Python (the Triton interpreter,
# the FlyDSL simulator): a generated problem must take seconds, not minutes.
INTERPRETED_LIMITS = Limits(requests=2, kv_heads=2, topk=8, q_len=2)

# The split count of a kernel that chooses its own (``Capabilities(splits=(AUTO_SPLITS,))``):
# it receives ``splits="auto"``, and launches are recorded and replayed so.
AUTO_SPLITS = "auto"

# Generated problems a check draws when not told how many: fewer for backends
# that declare ``interpreted`` (each problem takes seconds there, not milliseconds).
DEFAULT_EXAMPLES = 100
INTERPRETED_EXAMPLES = 8
# An isolated run stops minimising a failure after this many launch timeouts'
# worth of seconds: every try may meet the same hang.
SHRINK_BUDGET_TIMEOUTS = 10
# The launch timeout a GPU backend declares: its first launch of a shape compiles.
GPU_LAUNCH_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend supports, declared once.

    layouts: page layouts it reads (subset of ``nvfp4_suite.reference.LAYOUTS``).
    splits: split counts it runs (positive ints). xcds: XCD placements it
    accepts; ``(0,)`` means it has no placement parameter and never receives
    ``xcds``. orders: workgroup arrival orders it can be asked for (a
    simulator's scheduling); empty means it never receives ``order``.
    out: whether it accepts ``out=`` (a float32 ``[rows, H, 128]`` buffer,
    pre-filled with NaN by the harness, filled in place). targets: where it
    runs, for reports (``"numpy"``, ``"cuda"``, ``"gfx942"``...). limits: the
    largest generated problem it is given. slot_lists: its input domain of
    slot lists, ``"any"`` (-1 and future ids anywhere) or ``"compacted"``
    (``nvfp4_suite.reference.problem.outside_slot_domain``); golden cases
    outside it are skipped naming the axis. scale_sign: its input domain of
    block-scale bytes, ``"any"`` (the sign bit applies) or ``"non-negative"``
    (no byte a row reads has its sign bit set, as NVFP4 quantisers write
    them: the kernel may read the byte as a magnitude;
    ``nvfp4_suite.reference.problem.outside_scale_domain``). sm_scale: None
    (the kernel takes the problem's softmax scale) or the constant it
    hard-codes: generated problems then hold it, and golden cases with
    another are skipped naming the axis. cache_layout: None (it reads the
    canonical ``pool`` in ``problem.layout``) or the
    ``nvfp4_suite.reference.layout.CacheLayout`` it reads: it then receives a
    ``LaidOutProblem`` whose ``cache`` holds the pool re-packed into that
    layout, from either canonical layout (``layouts`` is then not consulted).
    interpreted: it executes every instruction in Python (an interpreter, a
    simulator): a check that is not told how many generated problems to draw
    draws ``INTERPRETED_EXAMPLES`` instead of ``DEFAULT_EXAMPLES``.
    launch_timeout_s: seconds one launch may take when a check runs it in a
    worker process (``--isolate``); a GPU backend whose first launch
    compiles declares more than the default. shrink_budget_s: seconds
    minimising a generated failure may take (None: until hypothesis is done;
    an isolated run stops after ``SHRINK_BUDGET_TIMEOUTS`` launch timeouts
    whichever is smaller).
    """

    layouts: tuple[str, ...] = LAYOUTS
    splits: tuple[int, ...] = (1,)
    xcds: tuple[int, ...] = (0,)
    orders: tuple[str, ...] = ()
    out: bool = False
    targets: tuple[str, ...] = ()
    limits: Limits = Limits()
    slot_lists: str = "any"
    scale_sign: str = "any"
    sm_scale: float | None = None
    cache_layout: CacheLayout | None = None
    interpreted: bool = False
    launch_timeout_s: float = 60.0
    shrink_budget_s: float | None = None

    def __post_init__(self):
        if not isinstance(self.interpreted, bool):
            raise ValueError(f"Capabilities.interpreted {self.interpreted!r}: must be True or False")
        for field in ("launch_timeout_s", "shrink_budget_s"):
            v = getattr(self, field)
            if v is None and field == "shrink_budget_s":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"Capabilities.{field} {v!r}: must be a number of seconds > 0")
        if self.slot_lists not in SLOT_LISTS:
            raise ValueError(f"Capabilities.slot_lists {self.slot_lists!r}: must be one of {SLOT_LISTS}")
        if self.scale_sign not in SCALE_SIGNS:
            raise ValueError(f"Capabilities.scale_sign {self.scale_sign!r}: must be one of {SCALE_SIGNS}")
        if self.sm_scale is not None and (isinstance(self.sm_scale, bool) or not isinstance(self.sm_scale, (
                int, float)) or not 0 < self.sm_scale < float("inf")):
            raise ValueError(f"Capabilities.sm_scale {self.sm_scale!r}: must be None or a finite float > 0")
        if self.cache_layout is not None and not isinstance(self.cache_layout, CacheLayout):
            raise ValueError(f"Capabilities.cache_layout is a {type(self.cache_layout).__name__}, not a "
                             "nvfp4_suite.reference.layout.CacheLayout")
        bad = [x for x in self.layouts if x not in LAYOUTS]
        if bad or not self.layouts:
            raise ValueError(f"Capabilities.layouts {self.layouts!r}: each must be one of {LAYOUTS}")
        if self.splits == (AUTO_SPLITS,):
            fields: tuple[str, ...] = ("xcds",)
        else:
            fields = ("splits", "xcds")
        for field in fields:
            vals = getattr(self, field)
            bad = [(i, v) for i, v in enumerate(vals) if not isinstance(v, (int, np.integer)) or v < 0
                   or (field == "splits" and v < 1)]
            if bad or not vals:
                i, v = bad[0] if bad else (0, None)
                raise ValueError(f"Capabilities.{field} {vals!r}: must be a non-empty tuple of "
                                 f"{'positive' if field == 'splits' else 'non-negative'} ints"
                                 + (f" (or ({AUTO_SPLITS!r},): the kernel chooses)" if field == "splits" else "")
                                 + f"; index {i} is {v!r}")

    def refuses(self, problem: DecodeProblem, launch: Launch) -> str | None:
        """None when ``launch`` on ``problem`` is inside these capabilities,
        otherwise why not (one phrase naming the offending value; an input
        outside the declared domain starts with the axis, see ``outside_domain``)."""
        why = self.refuses_launch(problem, launch)
        return why if why is not None else self.outside_domain(problem)

    def outside_domain(self, problem: DecodeProblem) -> str | None:
        """None when ``problem`` is inside the declared input domain, otherwise
        the first axis it leaves, then why: ``"outside slot_lists=compacted:
        topk[h, r, s] = ..."`` or ``"outside scale_sign=non-negative: page p,
        KV head h: K scale of token t, group g is 0x81 ..."``."""
        why = outside_slot_domain(problem, self.slot_lists)
        if why is not None:
            return f"outside slot_lists={self.slot_lists}: {why}"
        why = outside_scale_domain(problem, self.scale_sign)
        if why is not None:
            return f"outside scale_sign={self.scale_sign}: {why}"
        if self.sm_scale is not None and float(problem.sm_scale) != float(self.sm_scale):
            return (f"outside sm_scale={self.sm_scale!r}: the problem's sm_scale is {float(problem.sm_scale)!r} "
                    "(the kernel's softmax scale is a constant)")
        return None

    def refuses_launch(self, problem: DecodeProblem, launch: Launch) -> str | None:
        """``refuses`` without the input domain: the layout and the launch only."""
        if self.cache_layout is None and problem.layout not in self.layouts:
            return f"layout {problem.layout!r} not supported (supports {list(self.layouts)})"
        if launch.splits not in self.splits:
            return f"splits {launch.splits} not supported (supports {list(self.splits)})"
        if launch.xcds not in self.xcds:
            return f"xcds {launch.xcds} not supported (supports {list(self.xcds)})"
        if launch.order is not None and launch.order not in self.orders:
            return f"workgroup order {launch.order!r} not supported (supports {list(self.orders)})"
        return None


@dataclasses.dataclass(frozen=True)
class Launch:
    """How one problem is launched: the split count (``AUTO_SPLITS``: the kernel's own), the XCD placement (0: none)
    and the workgroup arrival order (None: the backend's own). The page layout
    is the problem's (``problem.layout``: the pool's bytes are laid out in it),
    so it travels with the problem and is printed beside the launch."""

    splits: int | str = 1
    xcds: int = 0
    order: str | None = None

    @property
    def known_splits(self) -> int:
        """The split count the suite judges this launch at: ``splits``, or 1 for a
        kernel's own (``AUTO_SPLITS``), which only an exact-class arithmetic judges:
        its interval does not depend on the split count."""
        return self.splits if isinstance(self.splits, int) else 1

    def kwargs(self, caps: Capabilities) -> dict:
        """The keyword arguments a backend with ``caps`` receives for this launch."""
        kw: dict[str, int | str] = {"splits": self.splits}
        if caps.xcds != (0,):
            kw["xcds"] = self.xcds
        if caps.orders:
            kw["order"] = self.order if self.order is not None else caps.orders[0]
        return kw

    def as_seen_by(self, caps: Capabilities) -> Launch:
        """This launch as a backend with ``caps`` receives it: the placement and
        the order dropped where it declares none (they never reach it), the
        split count ``"auto"`` where the kernel chooses its own."""
        return dataclasses.replace(self, xcds=self.xcds if caps.xcds != (0,) else 0,
                                   order=self.order if caps.orders else None,
                                   splits=AUTO_SPLITS if caps.splits == (AUTO_SPLITS,) else self.splits)

    def then(self, caps: Capabilities) -> Launch:
        """The launch of the harness's second run: the same, in the next declared
        workgroup order when the backend has orders (two arrival orders must
        give the same bits)."""
        if not caps.orders:
            return self
        cur = self.order if self.order is not None else caps.orders[0]
        return dataclasses.replace(self, order=caps.orders[(caps.orders.index(cur) + 1) % len(caps.orders)])

    def describe(self, problem: DecodeProblem | None = None) -> str:
        """``splits=2 xcds=8 order=reverse layout=planar`` (fields at their
        defaults left out, except splits)."""
        parts = [f"splits={self.splits}"]
        if self.xcds:
            parts.append(f"xcds={self.xcds}")
        if self.order is not None:
            parts.append(f"order={self.order}")
        if problem is not None:
            parts.append(f"layout={problem.layout}")
        return " ".join(parts)

    def to_json(self) -> dict:
        """The record as a JSON object (stored in repro files and the manifest)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Launch:
        """The record stored by ``to_json``; raises ValueError naming what is not a
        launch record: not an object, an unknown field, a field of the wrong type."""
        if not isinstance(d, dict):
            raise ValueError(f"{d!r} is not a launch record")
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"launch record has unknown fields {sorted(unknown)}")
        for k in ("splits", "xcds"):
            if k in d and not isinstance(d[k], int) and not (k == "splits" and d[k] == AUTO_SPLITS):
                raise ValueError(f"launch record field {k!r} is {d[k]!r}, not an int")
        if not isinstance(d.get("order"), (str, type(None))):
            raise ValueError(f"launch record field 'order' is {d['order']!r}, not a string or null")
        return cls(**d)


@runtime_checkable
class Backend(Protocol):
    """The protocol every implementation under test follows.

    name: str, how reports name it. geometry: the ``nvfp4_suite.reference.Geometry`` of its
    arithmetic, judged against the emulation of that geometry; or None for the
    exact class (at least float32, P unrounded, output rounded once to bf16),
    judged against the exact oracle; or ``nvfp4_suite.reference.Exact`` (the
    exact class with P rounded to bf16: ``EXACT_P_BF16``). capabilities: its ``Capabilities``.
    available(): None when usable on this machine, otherwise the reason.
    __call__(problem, **launch): the output for one launch; it receives
    ``splits`` always, ``xcds`` and ``order`` only when its capabilities
    declare them, ``out`` only when they declare ``out``. It returns the output
    (or None when it filled ``out``): bf16 values as float32, bfloat16 or
    float16 (float64 is refused: a report names it), ``[rows, H, 128]``, a
    numpy array or a dense torch tensor on any device that holds data. It must
    not modify ``problem``'s arrays (it gets private copies; a change fails the
    case) and must raise the named
    ``nvfp4_suite.reference.ProblemError`` subclass for invalid input.
    """

    name: str
    geometry: Geometry | Exact | None
    capabilities: Capabilities

    def available(self) -> str | None:
        """None when usable here, otherwise the reason."""

    def __call__(self, problem: DecodeProblem, *, splits: int = 1):
        """The bf16 output ``[rows, H, 128]`` of one launch."""


ATTRIBUTES = ("name", "geometry", "capabilities", "available")


def protocol_errors(obj) -> list[str]:
    """What ``obj`` lacks to be a Backend, one phrase per fault: a missing
    attribute, a ``name`` that is not a string, a ``geometry`` that is none of
    None, ``Exact`` or ``Geometry``, a ``capabilities`` that is not a
    ``Capabilities``, an ``available`` or an object that is not callable.
    Empty when it conforms. Reading an attribute may raise (a property):
    that propagates, for the caller to name."""
    errs = [f"missing attribute {a!r}" for a in ATTRIBUTES if not hasattr(obj, a)]
    if not callable(obj):
        errs.append("not callable (needs __call__(problem, *, splits=1, ...))")
    if hasattr(obj, "name") and not isinstance(obj.name, str):
        errs.append(f"name is a {type(obj.name).__name__} ({obj.name!r}), not a str")
    if hasattr(obj, "geometry") and not (obj.geometry is None or isinstance(obj.geometry, (Exact, Geometry))):
        errs.append(f"geometry is a {type(obj.geometry).__name__} ({obj.geometry!r}), not None, "
                    "nvfp4_suite.reference.Exact or nvfp4_suite.reference.Geometry")
    if hasattr(obj, "capabilities") and not isinstance(obj.capabilities, Capabilities):
        errs.append(f"capabilities is a {type(obj.capabilities).__name__}, not a nvfp4_suite.kernels.Capabilities")
    if hasattr(obj, "available") and not callable(obj.available):
        errs.append(f"available is a {type(obj.available).__name__}, not a method (available() -> None or a reason)")
    return errs


README_SECTION = """\
### Writing a backend

```python
from nvfp4_suite import kernels, reference

class Backend:
    name = "mykernel"
    geometry = reference.Geometry(keys_per_max=64, keys_per_lane=16, p_bf16=True)  # or None
    capabilities = kernels.Capabilities(splits=(1, 2, 4, 8), targets=("gfx950",))
    def available(self): return None            # or the reason it cannot run here
    def __call__(self, problem, *, splits=1):    # -> [rows, H, 128] bf16 values
        ...
```

A backend is any object with four attributes and a call (`nvfp4_suite.kernels.Backend`,
described once in `kernels/protocol.py`; this section is generated from it by
`python -m nvfp4_suite.kernels.protocol` and a test keeps the two equal). `problem` is a
`nvfp4_suite.reference.DecodeProblem` (numpy arrays named as in `reference/CONTRACT.md`).

- `name`: how reports name it.
- `geometry`: the `nvfp4_suite.reference.Geometry` of its arithmetic (it is then judged
  against the emulation of that geometry, to the last bf16 rounding), or
  `None` for the exact class (at least float32, P unrounded, output rounded
  once to bf16; judged against the exact oracle), or
  `nvfp4_suite.reference.EXACT_P_BF16` for the exact class with P rounded to
  bf16 before the PV product (`reference/CONTRACT.md` section 7.1).
- `capabilities`: a `nvfp4_suite.kernels.Capabilities` record declaring what it supports:
  `layouts` (page layouts it reads), `splits` (split counts), `xcds` (XCD
  placements; `(0,)` for none), `orders` (workgroup arrival orders it can be
  asked for; empty for none), `out` (whether it fills an `out=` buffer),
  `targets` (where it runs, for reports), `limits` (a `nvfp4_suite.kernels.Limits`:
  the largest generated problem it is given), `slot_lists` (its input domain:
  `"any"` or `"compacted"`, `reference/CONTRACT.md` section 3.1; `splits` is
  `("auto",)` for a kernel that chooses its own split count: it then receives
  `splits="auto"`, each case is launched once, and only an exact-class
  arithmetic can judge it),
  `scale_sign` (its block-scale domain: `"any"`, or `"non-negative"` for a
  kernel that reads a scale byte as a magnitude, section 2.7), `sm_scale`
  (None, or the softmax scale a kernel hard-codes: cases with another are
  skipped),
  `cache_layout` (None, or the `nvfp4_suite.reference.layout.CacheLayout` it
  reads: it then receives `problem.cache` in that layout, section 2.6),
  `interpreted` (it executes in Python: a check draws 8 generated problems
  unless told otherwise, not 100), `launch_timeout_s` (seconds one launch may
  take in an isolated run; default 60, GPU backends that compile on their
  first launch declare 300) and `shrink_budget_s` (seconds minimising a
  failure may take; None: no limit). The checks draw only what it declares;
  golden cases outside its domain are skipped, naming the axis. Nothing else
  about a backend is read: not its call signature, not any other attribute.
- `available()`: `None` when usable on this machine, otherwise the reason.
- `__call__(problem, *, splits, ...)`: the output of one launch. It always
  receives `splits`; `xcds`, `order` and `out` only when its capabilities
  declare them. It returns `[rows, H, 128]` bf16 values (a numpy array of
  float32, float16 or ml_dtypes bfloat16, or a dense torch tensor of float32,
  float16 or bfloat16 on any device that holds data; float64, sparse and
  `meta` tensors are refused by name), or `None` after filling `out`. The
  harness copies what it returns before the next launch, so a reused output
  buffer is fine.

The harness gives each call private copies of the problem's arrays and fails
a backend that changes them; it runs every launch twice (in two workgroup
orders where the backend has orders) and the results must be bitwise equal.
Invalid input must raise the `nvfp4_suite.reference.ProblemError` subclass the golden
case names. A launch (`nvfp4_suite.kernels.Launch`: splits, xcds, order, printed with
the problem's layout) is stored in every saved failure and replayed as it was.
"""


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.protocol",
                            description="Print docs/backends.md's 'Writing a backend' section, generated from this "
                                        "module (tests/test_protocol.py keeps the two equal).").parse_args()
    print(README_SECTION, end="")
