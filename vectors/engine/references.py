"""Where a check computes its references: numpy on the host, or torch on the backend's GPU.

Every launch a check judges needs the acceptance interval of its declared
arithmetic (``nvfp4_suite.reference.compare.backend_interval``): the
emulation of its geometry, or the exact oracle. Both are written once over an
array namespace (``nvfp4_suite.reference.arrays``), so the same text runs in
numpy on the host or in torch on a GPU (``nvfp4_suite.kernels.torch.reference``).
For a backend that runs on a GPU, computing them there keeps a check's wall
time in the kernel under test instead of in host-side float64 work.

``choose`` decides once per check, from ``--references``:

- ``auto`` (the default): on the GPU when the backend declares a GPU target
  (``Capabilities.targets`` holds ``cuda`` or ``rocm``) and torch sees one;
  on the host otherwise.
- ``host``: numpy on the host, whatever the backend.
- ``device``: torch on the GPU; a setup error (exit 2) when torch sees none.

The acceptance intervals a verdict reads are equal on either side, except
where a float64 sum over keys, taken in another order by another BLAS, lands
within a few float64 ulps of a bf16 rounding midpoint
(``nvfp4_suite.kernels.torch.reference`` says why, and its tests check it). A
golden case's stored judgment is confirmed bit for bit: where the GPU's
interval differs from the stored one, the host's decides
(``nvfp4_suite.vectors.engine.check``), so a catalog never reads as drifted
because of where its references ran.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvfp4_suite.reference.compare import Interval

CHOICES = ("auto", "host", "device")
# Capabilities.targets that name a GPU torch can reach (ROCm builds of torch answer to "cuda").
GPU_TARGETS = ("cuda", "rocm")


@dataclasses.dataclass(frozen=True)
class References:
    """Where references run: ``device`` None for numpy on the host, else a torch
    device name (``"cuda"``)."""

    device: str | None = None

    @property
    def where(self) -> str:
        """How reports name it: ``host (numpy)`` or ``cuda (torch)``."""
        return "host (numpy)" if self.device is None else f"{self.device} (torch)"

    def interval(self, problem, geometry, splits: int) -> tuple[Interval, str]:
        """``(interval, against)`` of ``backend_interval`` for ``problem`` (a
        ``DecodeProblem``) in arithmetic ``geometry`` at ``splits``, computed
        here. The interval's arrays are numpy float32/float64 ``[rows, H, 128]``
        wherever they were computed."""
        # Imported here: the pytest plugin reads CHOICES when pytest starts, before any numpy work.
        if self.device is None:
            from nvfp4_suite.reference.compare import backend_interval

            return backend_interval(problem, geometry=geometry, splits=splits)
        from nvfp4_suite.kernels.torch import reference as torch_reference

        return torch_reference.backend_interval(problem, geometry=geometry, splits=splits, device=self.device)


HOST = References()


def gpu_reason() -> str | None:
    """None when torch imports and sees a GPU, else why not."""
    from nvfp4_suite.kernels.torch import reference as torch_reference

    why = torch_reference.available()
    if why is not None:
        return why
    return None if torch_reference.default_device() == "cuda" else "torch sees no GPU"


def choose(choice: str, capabilities) -> References:
    """The ``References`` of a check asked for ``choice`` (one of ``CHOICES``) on a
    backend of ``capabilities``. Raises ValueError naming ``choice`` when it is
    not one of them, or when ``device`` is asked for and no GPU is seen."""
    if choice not in CHOICES:
        raise ValueError(f"references {choice!r}: must be one of {', '.join(CHOICES)}")
    if choice == "host":
        return HOST
    if choice == "device":
        why = gpu_reason()
        if why is not None:
            raise ValueError(f"--references device: {why}")
        return References("cuda")
    # Asked only for a GPU backend: gpu_reason imports torch, seconds a check of a host backend need not pay.
    on_gpu = any(t in GPU_TARGETS for t in capabilities.targets)
    return References("cuda") if on_gpu and gpu_reason() is None else HOST
