"""The compiled kernels the simulator's instruction-family tests read: a fixed
set of configurations on both targets, compiled on first use and kept in the
simulator's compile cache (the compile-only resource tests fill it too)."""

import functools
import os

import pytest

from nvfp4_suite.kernels.flydsl.targets import ARCHS

# Split merge, XCD placement, the planar loader, the odd and extreme TOPK widths.
CONFIGS = ((16, 2, 0, "token_rows"), (16, 8, 8, "planar"), (1, 1, 0, "token_rows"),
           (33, 4, 8, "token_rows"), (64, 8, 0, "token_rows"))


@functools.lru_cache(maxsize=None)
def _paths():
    from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing
    from nvfp4_suite.kernels.flydsl.sim.compile import CompileError, assembly_path

    why = sim_missing()
    if why:
        return why
    try:
        return tuple(str(assembly_path(a, *c)) for a in ARCHS for c in CONFIGS)
    except CompileError as e:
        return str(e)


def compiled_kernels() -> list[str]:
    """Paths of the assemblies of ``CONFIGS`` for gfx942 and gfx950 (``gfx942`` or
    ``gfx950`` in each name). Skips with the reason where they cannot be had,
    unless ``NVFP4_REQUIRE_COMPILE=1`` (CI) makes that a failure."""
    paths = _paths()
    if isinstance(paths, str):
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {paths}")
        pytest.skip(paths)
    return list(paths)
