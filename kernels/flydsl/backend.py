"""Host side of the seed's FlyDSL kernel: backend ``flydsl`` and a torch entry point.

``FlydslBackend`` (registered as ``flydsl``) validates a ``DecodeProblem``,
moves it to the ROCm GPU and calls ``decode``, the entry point for serving
code, which takes torch tensors already on the GPU. Nothing here runs without
a ROCm GPU (gfx942 or gfx950) and FlyDSL; ``available()`` says which is
missing. The kernel itself is ``nvfp4_suite.kernels.flydsl.decode``.
"""

from __future__ import annotations

import functools

import numpy as np

from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.emulate import SEED_GEOMETRY
from nvfp4_suite.reference.paged_cache import LAYOUTS, D, page_bytes
from nvfp4_suite.reference.problem import HG

from ..protocol import GPU_LAUNCH_TIMEOUT_S, Capabilities
from .host import XCDS, flydsl_missing, launch_plan, require
from .lanes import PART_F, SPLITS, k_table
from .targets import ARCHS, target

try:
    import torch
except ImportError:
    torch = None

def _arch(device) -> str:
    """The gfx target of a torch ROCm device, without feature suffixes."""
    return torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]


def rocm_missing() -> str | None:
    """None when torch sees a gfx942 or gfx950 GPU through ROCm, else the reason."""
    if torch is None:
        return "torch is not installed"
    if getattr(torch.version, "hip", None) is None:
        return f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None)"
    if not torch.cuda.is_available():
        return "torch sees no ROCm GPU"
    arch = _arch(torch.cuda.current_device())
    try:
        target(arch)
    except ValueError as e:
        return f"the GPU is {arch}; {e}"
    return None


@functools.lru_cache(maxsize=None)
def _launcher(topk: int, splits: int, xcds: int, layout: str, arch: str):
    """The jitted launcher of one configuration; FlyDSL compiles it on first launch
    and keeps the binary, so each (topk, splits, xcds, layout, arch) compiles once."""
    from .decode import compile_nvfp4_sparse_decode

    return compile_nvfp4_sparse_decode(splits=splits, topk=topk, xcds=xcds, layout=layout)


class Workspace:
    """Device buffers reused across launches: the K table, the global scales, split
    partials, and the tickets, which the kernel leaves at zero after every launch."""

    def __init__(self):
        self._tables: dict = {}
        self._scales: dict = {}
        self._parts: dict = {}
        self._tickets: dict = {}

    def table(self, device):
        """int32 ``[256]`` K table on ``device``."""
        if device not in self._tables:
            self._tables[device] = torch.from_numpy(k_table().view(np.int32)).to(device)
        return self._tables[device]

    def scales(self, device, k_global: float, v_global: float):
        """float32 ``[2]`` ``(k_global, v_global)`` on ``device``; the last pair is kept,
        so a model's constant scales cost no host-to-device copy per launch."""
        key = (float(k_global), float(v_global))
        if key != self._scales.get(device, (None,))[0]:
            self._scales[device] = (key, torch.tensor(key, dtype=torch.float32, device=device))
        return self._scales[device][1]

    def partials(self, device, n: int, splits: int):
        """float32 ``[n, splits, 64, PART_F]`` (contents need no initialisation)."""
        key = (device, n, splits)
        if key not in self._parts:
            self._parts[key] = torch.empty((n, splits, 64, PART_F), dtype=torch.float32, device=device)
        return self._parts[key]

    def tickets(self, device, n: int):
        """int32 ``[n]``, zero before the first launch."""
        key = (device, n)
        if key not in self._tickets:
            self._tickets[key] = torch.zeros(n, dtype=torch.int32, device=device)
        return self._tickets[key]


_WORKSPACE = Workspace()


def decode(q, pool, topk, block_table, seq_lens, *, num_kv_heads: int, q_len: int, sm_scale: float,
           k_global_scale: float, v_global_scale: float, layout: str = "token_rows", splits: int = 1,
           xcds: int = 0, out=None, workspace: Workspace | None = None):
    """Launch the kernel on GPU tensors; returns ``out``.

    q: bf16 ``[rows, H, 128]``, ``H = 16 * num_kv_heads``; pool: uint8
    ``[pages, page_bytes(num_kv_heads)]`` in ``layout`` (``token_rows`` or
    ``planar``); topk:
    int32 ``[Hkv, >= rows, TOPK]`` (TOPK <= 64, last two dims contiguous, head
    stride ``topk.stride(0)``); block_table: int32 ``[reqs, max_blocks]`` (row
    stride ``block_table.stride(0)``); seq_lens: int32 ``[reqs]``; out: bf16
    ``[rows, H, 128]`` or None to allocate. splits: workgroups per (row, KV
    head); xcds: XCD count for placement (0: none). The contents are not
    checked here (the kernel cannot report errors): ``FlydslBackend`` runs the
    problem validator first.
    """
    rows, H, d = q.shape
    hkv = int(num_kv_heads)
    require(q.dtype == torch.bfloat16 and d == D and q.is_contiguous(),
             f"q must be contiguous bf16 [rows, H, {D}], got {q.dtype} {tuple(q.shape)}")
    require(H == HG * hkv, f"q has H={H} heads; num_kv_heads={hkv} needs H={HG * hkv}")
    require(pool.dtype == torch.uint8 and pool.dim() == 2 and pool.shape[1] == page_bytes(hkv)
             and pool.is_contiguous(),
             f"pool must be contiguous uint8 [pages, {page_bytes(hkv)}], got {pool.dtype} {tuple(pool.shape)}")
    require(topk.dtype == torch.int32 and topk.dim() == 3 and topk.shape[0] == hkv and topk.shape[1] >= rows
             and 1 <= topk.shape[2] <= 64 and topk.stride(2) == 1 and topk.stride(1) == topk.shape[2],
             f"topk must be int32 [{hkv}, >= {rows}, 1..64] with contiguous rows, got {topk.dtype} "
             f"{tuple(topk.shape)} strides {topk.stride()}")
    reqs = seq_lens.shape[0]
    require(seq_lens.dtype == torch.int32 and seq_lens.dim() == 1 and seq_lens.is_contiguous(),
             f"seq_lens must be contiguous int32 [reqs], got {seq_lens.dtype} {tuple(seq_lens.shape)}")
    require(q_len >= 1 and rows == reqs * q_len, f"rows={rows} must equal reqs={reqs} * q_len={q_len}")
    require(block_table.dtype == torch.int32 and block_table.dim() == 2 and block_table.shape[0] == reqs
             and block_table.stride(1) == 1,
             f"block_table must be int32 [{reqs}, max_blocks] with unit column stride, got "
             f"{block_table.dtype} {tuple(block_table.shape)}")
    for name, v in (("sm_scale", sm_scale), ("k_global_scale", k_global_scale),
                    ("v_global_scale", v_global_scale)):
        require(np.isfinite(v) and v > 0, f"{name} must be finite and > 0, got {v}")
    require(layout in LAYOUTS, f"layout must be 'token_rows' or 'planar', got {layout!r}")
    require(splits in SPLITS, f"splits={splits}: the kernel is built and checked for {SPLITS}")
    require(xcds >= 0, f"xcds must be >= 0, got {xcds}")
    require(rows * H * D * 2 < 2**31, f"q of {rows * H * D * 2} bytes exceeds the kernel's 32-bit offsets")
    dev = q.device
    for name, t in (("pool", pool), ("topk", topk), ("block_table", block_table), ("seq_lens", seq_lens)):
        require(t.device == dev, f"{name} is on {t.device}, q on {dev}")
    if out is None:
        out = torch.empty_like(q)
    require(out.shape == q.shape and out.dtype == torch.bfloat16 and out.is_contiguous() and out.device == dev,
             f"out must be contiguous bf16 {tuple(q.shape)} on {dev}")

    plan = launch_plan(rows, q_len, H, hkv, topk.stride(0), block_table.stride(0), splits, xcds, sm_scale)
    ws = workspace or _WORKSPACE
    part, tickets = ws.partials(dev, plan.n, splits), ws.tickets(dev, plan.n)
    scales = ws.scales(dev, k_global_scale, v_global_scale)
    launch = _launcher(int(topk.shape[2]), splits, xcds, layout, _arch(dev))
    launch(
        q.data_ptr(), pool.data_ptr(), topk.data_ptr(), block_table.data_ptr(), seq_lens.data_ptr(),
        out.data_ptr(), scales.data_ptr(), scales.data_ptr() + 4, ws.table(dev).data_ptr(),
        part.data_ptr(), tickets.data_ptr(), *plan.scalars, torch.cuda.current_stream(dev),
    )
    return out


class FlydslBackend:
    """``flydsl``: the seed kernel on a ROCm GPU; seed geometry (32 keys per running
    max, 8 keys per lane sum, P rounded to bf16); either page layout."""

    name = "flydsl"
    geometry = SEED_GEOMETRY
    capabilities = Capabilities(layouts=LAYOUTS, splits=SPLITS, xcds=XCDS, out=True, targets=ARCHS,
                                launch_timeout_s=GPU_LAUNCH_TIMEOUT_S)

    def __init__(self):
        self.workspace = Workspace()

    def available(self) -> str | None:
        """None on a gfx942/gfx950 ROCm GPU with FlyDSL, else the reason."""
        return flydsl_missing() or rocm_missing()

    def __call__(self, problem: DecodeProblem, *, splits: int = 1, xcds: int = 0, out=None) -> np.ndarray:
        """float32 ``[rows, H, 128]`` holding the bf16 output; validates first.

        out: optional float32 ``[rows, H, 128]`` filled in place (its prior
        contents go to the GPU's output buffer, so rows the kernel fails to
        write keep them)."""
        problem.validate()
        dev = torch.device("cuda")
        q = torch.from_numpy(problem.q).to(dev).to(torch.bfloat16)
        dev_out = None if out is None else torch.from_numpy(np.asarray(out, np.float32)).to(dev).to(torch.bfloat16)
        res = decode(
            q, torch.from_numpy(problem.pool).to(dev), torch.from_numpy(problem.topk).to(dev),
            torch.from_numpy(problem.block_table).to(dev), torch.from_numpy(problem.seq_lens).to(dev),
            num_kv_heads=problem.num_kv_heads, q_len=problem.q_len, sm_scale=problem.sm_scale,
            k_global_scale=problem.k_global_scale, v_global_scale=problem.v_global_scale,
            layout=problem.layout, splits=splits, xcds=xcds, out=dev_out, workspace=self.workspace,
        )
        host = res.float().cpu().numpy()
        if out is None:
            return host
        out[...] = host
        return out
