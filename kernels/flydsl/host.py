"""Host-side facts of the seed's FlyDSL kernel that need neither torch nor a GPU.

The ROCm launch (``backend``), the compile-only resource check (``resources``)
and the simulator (``sim``) all use them, so they live here, below all three:
the launch plan (grid, workspace size, scalar arguments), the configurations
the kernel is built for (``TOPKS``, ``XCDS``), whether FlyDSL imports
(``flydsl_missing``), and the ``ROCM_PATH`` whose ``ld.lld`` links its code
objects (``rocm_path``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from nvfp4_suite.reference.paged_cache import page_bytes
from nvfp4_suite.reference.problem import LOG2E

from .lanes import PART_F, grid_x

# The TOPK widths the kernel is compiled for by the resource check and the
# simulator (a problem's slot lists are padded up to the next one; 33 an odd one).
TOPKS = (1, 16, 33, 64)
# XCD placements offered: none, and the 8 XCDs of MI300 (gfx942) and MI355 (gfx950).
XCDS = (0, 8)


def flydsl_missing() -> str | None:
    """None when FlyDSL and what it imports (its compiler imports torch) import,
    else the reason naming the missing module."""
    try:
        import flydsl  # noqa: F401
    except ImportError as e:
        return f"FlyDSL is not installed ({e}); pip install flydsl==0.5.0"
    try:
        import flydsl.compiler  # noqa: F401
    except ImportError as e:
        return f"FlyDSL's compiler cannot be imported ({e}); it needs torch (pip install torch)"
    return None


def require(cond: bool, what: str) -> None:
    """ValueError(``what``) unless ``cond``."""
    if not cond:
        raise ValueError(what)


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """What the host computes for one launch: ``grid`` (x, Hkv, splits), ``n``
    (partial/ticket slots: ``grid_x * Hkv`` when split, else 1), ``scalars``
    (the launcher's arguments after the 11 buffer addresses: ``i64_part_bytes,
    i32_rows, i32_ql, i32_H, i32_hkv, i32_topk_hs, i32_bt_s, i32_page_b, f32_c,
    i32_grid_x``)."""

    grid: tuple[int, int, int]
    n: int
    scalars: tuple


def launch_plan(rows: int, q_len: int, H: int, hkv: int, topk_hs: int, bt_stride: int, splits: int, xcds: int,
                sm_scale: float) -> LaunchPlan:
    """The grid, workspace size and scalar arguments of one launch (shared by the
    ROCm launch and the simulator's); ValueError when the partials overflow
    the kernel's 32-bit offsets."""
    gx = grid_x(rows, q_len, xcds)
    n = gx * hkv if splits > 1 else 1
    part_bytes = n * splits * 64 * PART_F * 4
    require(part_bytes < 2**31,
            f"split partials of {part_bytes} bytes exceed the kernel's 32-bit offsets; use fewer splits")
    scalars = (part_bytes, rows, q_len, H, hkv, topk_hs, bt_stride, page_bytes(hkv),
               float(np.float32(sm_scale * LOG2E)), gx)
    return LaunchPlan((gx, hkv, splits), n, scalars)


_LLD_CANDIDATES = [f"/usr/lib/llvm-{v}/bin/ld.lld" for v in range(25, 18, -1)] + \
    [f"ld.lld-{v}" for v in range(25, 18, -1)]


def _lld_version(path: str) -> int:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return 0
    m = re.search(r"LLD (\d+)", out)
    return int(m.group(1)) if m else 0


def rocm_path() -> tuple[str | None, str]:
    """``(ROCM_PATH to use, note)``; None with the reason when no ld.lld >= 19 is found.

    ``$ROCM_PATH/llvm/bin/ld.lld`` (default ``/opt/rocm``) when it is 19 or
    newer; else a Debian ``lld-19`` (or newer) reached through a folder with
    that link, made under the system's temporary directory."""
    current = os.environ.get("ROCM_PATH", "/opt/rocm")
    lld = os.path.join(current, "llvm", "bin", "ld.lld")
    if os.path.exists(lld) and _lld_version(lld) >= 19:
        return current, f"ld.lld from {current}"
    for cand in _LLD_CANDIDATES:
        found = cand if os.path.isabs(cand) else shutil.which(cand)
        if not found or not os.path.exists(found):
            continue
        version = _lld_version(found)
        if version >= 19:
            shim = Path(tempfile.gettempdir()) / f"nvfp4-rocm-shim-{version}"
            (shim / "llvm" / "bin").mkdir(parents=True, exist_ok=True)
            link = shim / "llvm" / "bin" / "ld.lld"
            if not link.exists():
                link.symlink_to(found)
            return str(shim), f"ld.lld {found} through {shim}"
    return None, ("no ld.lld >= 19: install Debian's lld-19 (apt-get install lld-19) or point "
                  "ROCM_PATH at a folder with llvm/bin/ld.lld")
