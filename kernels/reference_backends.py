"""The reference's own two backends: the exact oracle and the seed emulation."""

from __future__ import annotations

import numpy as np

from nvfp4_suite.reference import SEED_GEOMETRY, DecodeProblem, bf16_round, emulate, sparse_decode

from .protocol import Capabilities

CAPABILITIES = Capabilities(splits=tuple(range(1, 9)), targets=("numpy",))


class ReferenceBackend:
    """The exact oracle rounded once to bf16: the exact class (geometry None)."""

    name = "reference"
    geometry = None
    capabilities = CAPABILITIES

    def available(self) -> str | None:
        """Always usable: pure numpy."""
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        """float32 ``[rows, H, 128]`` bf16 values; ``splits`` does not change the result."""
        return bf16_round(sparse_decode(problem)[0])


class EmulateBackend:
    """The seed kernel's arithmetic (``nvfp4_suite.reference.emulate``), seed geometry."""

    name = "emulate"
    geometry = SEED_GEOMETRY
    capabilities = CAPABILITIES

    def available(self) -> str | None:
        """Always usable: pure numpy."""
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        """float32 ``[rows, H, 128]`` bf16 values of the seed's arithmetic with ``splits``."""
        return emulate(problem, splits=splits)
