"""What the simulator's tests share: the compiled kernels the instruction-family
tests read (a fixed set of configurations on both targets, compiled on first
use and kept in the simulator's compile cache, which the compile-only resource
tests fill too), the backend module where the kernel can be had, and
hand-written kernels wrapped as a program."""

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


def sim_backend():
    """``nvfp4_suite.kernels.flydsl.sim.backend`` where the TOPK-16 kernel can be
    compiled or found cached; skips with the reason otherwise, unless
    ``NVFP4_REQUIRE_COMPILE=1`` (CI) makes that a failure."""
    from nvfp4_suite.kernels.flydsl.sim import backend

    why = backend.sim_missing(topks=(16,))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    return backend


def hand_kernel(body: str, arch: str = "gfx950", lds: int = 0, kernarg: int = 16):
    """``body`` (assembly lines of one kernel ``k`` for ``arch``) as a
    ``launch.Kernel``: ``lds`` bytes of LDS, ``kernarg`` bytes of kernel
    arguments (their address in ``s[0:1]``), the workgroup id in ``s2``."""
    from nvfp4_suite.kernels.flydsl.sim.launch import Kernel
    from nvfp4_suite.kernels.flydsl.sim.program import parse_program

    text = f"""\t.amdgcn_target "amdgcn-amd-amdhsa--{arch}"
\t.text
\t.globl\tk
k:
{body}
.Lfunc_end0:
\t.amdhsa_kernel k
\t\t.amdhsa_group_segment_fixed_size {lds}
\t\t.amdhsa_kernarg_size {kernarg}
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_system_sgpr_workgroup_id_x 1
\t\t.amdhsa_system_vgpr_workitem_id 0
\t.end_amdhsa_kernel
"""
    return Kernel(parse_program(text))
