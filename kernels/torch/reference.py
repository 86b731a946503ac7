"""The emulation and the exact oracle on a torch device, for GPUs.

``nvfp4_suite.reference.emulate`` and ``nvfp4_suite.reference.oracle`` take
minutes in numpy on a serving-size step. They are written once over an
array namespace (``nvfp4_suite.reference.arrays``); this module supplies
the torch one (``TorchOps``: device placement, dtypes, bit casts, scatters
and the table gathers, ``table_index`` and ``pair_rows``), so the same text
runs on any torch device in seconds. Nothing of the arithmetic is written here.

What equals the numpy versions, and why:

- The emulation's float32 results (``out``, ``pre_round``, ``score_noise``)
  and ``abs_v_sum``: every float32 operation is the same IEEE operation in
  the same order; float64 -> float32 roundings round the same float64 values.
  Two steps could differ: a float64 dot product summed in another order
  (cuBLAS or MKL against numpy's BLAS) and the last bit of float64 ``exp2``.
  Both are exact or agree unless a float64 result lies within a few float64
  ulps of a float32 rounding boundary (about 2**-28 per rounding), as the
  golden catalog's note says of regeneration across machines.
- The float64 tolerance inputs (``magnitude``, ``flip_risk``) and the
  oracle's outputs: float64 sums over thousands of keys and float64 ``exp``
  differ in their last bits between BLAS and libm builds (numpy's own results
  move between machines the same way), so they agree to within float64
  rounding, not to the bit. What the verdict reads is the acceptance interval
  (``Interval.lo``, ``hi``, ``nearest``): bf16 roundings of those values,
  widened by one float64 ulp, equal unless an end lies within a few float64
  ulps of a bf16 rounding midpoint. tests/test_torch_reference.py checks the
  exact parts bit for bit and the float64 parts against the oracle's own
  noise bound (``nvfp4_suite.reference.compare`` term 5).

Every function takes a ``DecodeProblem`` (numpy), validates it, and returns
numpy arrays; ``device`` names the torch device (default: CUDA when torch sees
one, else the CPU); ``pool`` may pass the problem's pool already on that
device (uint8 ``[pages, page_bytes]``) so that a caller checking several
launches of one problem copies it once.
"""

from __future__ import annotations

import contextlib

import numpy as np

from nvfp4_suite.reference import compare
from nvfp4_suite.reference import oracle as _oracle
from nvfp4_suite.reference.arrays import NumpyOps
from nvfp4_suite.reference.emulate import SEED_GEOMETRY, Emulation, Geometry
from nvfp4_suite.reference.emulate import emulate_details as _emulate_details
from nvfp4_suite.reference.problem import DecodeProblem

from .backend import page_views

try:
    import torch
except ImportError:  # callers check ``available()``
    torch = None


def available() -> str | None:
    """None when torch imports, else the reason."""
    return None if torch is not None else "torch is not installed (pip install -e '.[torch]')"


def default_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


class TorchOps(NumpyOps):
    """torch on one device as the reference's array namespace (see
    ``nvfp4_suite.reference.arrays.NumpyOps`` for what each operation means)."""

    xp = torch

    def __init__(self, device):
        self.device = torch.device(device)
        self.float32, self.float64, self.int64 = torch.float32, torch.float64, torch.int64
        # A GPU takes many more (pair, split) blocks per step and a larger oracle chunk.
        gpu = self.device.type != "cpu"
        self.step_blocks = 2048 if gpu else 64
        self.chunk_bytes = 2 * 2**30 if gpu else 64 * 2**20
        # A GPU forms a chunk's K (or V) at once; the CPU in cache-sized blocks as numpy.
        self.block_bytes = self.chunk_bytes if gpu else NumpyOps.block_bytes
        self._columns = torch.arange(2, device=self.device)

    def _dtype(self, dtype):
        return {np.float32: torch.float32, np.float64: torch.float64, np.int64: torch.int64}.get(dtype, dtype)

    def asarray(self, a, dtype=None):
        a = np.ascontiguousarray(a)
        # torch wants writable memory even to copy from: read-only arrays (the problem's) are copied first.
        t = torch.from_numpy(a if a.flags.writeable else a.copy()).to(self.device)
        return t if dtype is None else t.to(self._dtype(dtype))

    def to_numpy(self, a) -> np.ndarray:
        return a.cpu().numpy()

    def zeros(self, shape, dtype):
        return torch.zeros(shape, dtype=dtype, device=self.device)

    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype, device=self.device)

    def full(self, shape, value, dtype):
        return torch.full(shape, value, dtype=dtype, device=self.device)

    def arange(self, n: int):
        return torch.arange(n, device=self.device)

    def f32(self, a):
        return a.float() if torch.is_tensor(a) else torch.tensor(a, dtype=torch.float32, device=self.device)

    def f64(self, a):
        return a.double() if torch.is_tensor(a) else torch.tensor(a, dtype=torch.float64, device=self.device)

    def astype(self, a, dtype):
        return a.to(dtype)

    def amax(self, a, axis):
        return a.amax(dim=axis)

    def sum(self, a, axis):
        return a.sum(dim=axis)

    def any_of(self, a, axis):
        return a.any(dim=axis)

    def nonzero(self, a):
        return torch.nonzero(a, as_tuple=True)

    def scatter_max(self, target, index, values) -> None:
        idx = index.reshape((-1,) + (1,) * (values.dim() - 1)).expand_as(values)
        target.scatter_reduce_(0, idx, values, reduce="amax")

    def index_add(self, target, index, values) -> None:
        target.index_add_(0, index, values)

    def argsort_stable(self, a, axis: int):
        return torch.sort(a.to(torch.uint8) if a.dtype == torch.bool else a, dim=axis, stable=True).indices

    def take_along_axis(self, a, index, axis: int):
        return torch.gather(a, axis, index)

    def table_index(self, data, scales):
        lead = tuple(data.shape[:-1])
        rows = scales.long().reshape(lead + (8, 1)) * 256 + data.long().reshape(lead + (8, 8))
        return rows.reshape(lead + (64,))

    def pair_rows(self, table, index, out=None):
        # Two 8-byte elements per row, by flat index (so the table has exactly two
        # columns): torch's gather of whole 16-byte rows is many times slower on a
        # GPU, and the oracle and the emulation gather one row per cache byte
        # (nvfp4_suite.kernels.torch.bench times them).
        flat = index.long()[..., None] * 2 + self._columns
        return torch.take(table, flat, out=out)

    def bits32(self, a):
        return a.view(torch.int32).to(torch.int64) & 0xFFFFFFFF

    def from_bits32(self, bits):
        return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)

    def bits64(self, a):
        return a.view(torch.int64)

    def from_bits64(self, bits):
        return bits.view(torch.float64)

    def errstate(self):
        return contextlib.nullcontext()

    def page_views(self, pool, layout: str, num_kv_heads: int):
        if not torch.is_tensor(pool):
            pool = self.asarray(pool)
        elif (pool.dtype != torch.uint8 or pool.device.type != self.device.type
              or self.device.index not in (None, pool.device.index)):
            raise ValueError(f"pool: expected uint8 on {self.device}, got {pool.dtype} on {pool.device}")
        return tuple(page_views(pool, layout, num_kv_heads))


def _ops(problem: DecodeProblem, device, pool) -> TorchOps:
    """The namespace of ``device`` (default: where ``pool`` lies, else ``default_device()``),
    after checking that ``pool`` is the problem's pool shape."""
    if pool is not None and tuple(pool.shape) != problem.pool.shape:
        raise ValueError(f"pool: expected uint8 {problem.pool.shape}, got {pool.dtype} {tuple(pool.shape)}")
    if pool is not None and device is None:
        device = pool.device  # "cuda" names the current device: work where the pool is
    return TorchOps(device or default_device())


def emulate_details(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
                    device=None, pool=None) -> Emulation:
    """``nvfp4_suite.reference.emulate.emulate_details`` on a torch device: the same
    ``Emulation`` (numpy arrays, ``[rows, H, 128]``; score_noise ``[rows, H]``)."""
    ops = _ops(problem, device, pool)
    return _emulate_details(problem, splits=splits, geometry=geometry, ops=ops, pool=pool)


def emulate(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
            device=None, pool=None) -> np.ndarray:
    """``nvfp4_suite.reference.emulate.emulate`` on a torch device: float32 ``[rows, H, 128]`` of bf16 values."""
    return emulate_details(problem, splits=splits, geometry=geometry, device=device, pool=pool).out


def oracle_details(problem: DecodeProblem, *, device=None, pool=None) -> tuple[np.ndarray, ...]:
    """``nvfp4_suite.reference.oracle.oracle_details`` on a torch device: ``(out, lse, magnitude,
    score_abs, abs_v_sum)``, float64 numpy arrays ``[rows, H, 128]`` (lse and
    score_abs ``[rows, H]``)."""
    return _oracle.oracle_details(problem, ops=_ops(problem, device, pool), pool=pool)


def sparse_decode(problem: DecodeProblem, *, device=None, pool=None) -> tuple[np.ndarray, np.ndarray]:
    """``nvfp4_suite.reference.oracle.sparse_decode`` on a torch device: ``(out, lse)`` float64."""
    return _oracle.sparse_decode(problem, ops=_ops(problem, device, pool), pool=pool)


def interval_vs_emulation(problem: DecodeProblem, *, splits: int = 1, geometry: Geometry = SEED_GEOMETRY,
                          device=None, pool=None) -> compare.Interval:
    """``nvfp4_suite.reference.compare.interval_vs_emulation`` from the torch emulation."""
    ops = _ops(problem, device, pool)
    return compare.interval_vs_emulation(problem, splits=splits, geometry=geometry, ops=ops, pool=pool)


def interval_vs_oracle(problem: DecodeProblem, *, p_bf16: bool | None = None, geometry=None,
                       splits: int = 1, device=None, pool=None) -> compare.Interval:
    """``nvfp4_suite.reference.compare.interval_vs_oracle`` from the torch oracle."""
    ops = _ops(problem, device, pool)
    return compare.interval_vs_oracle(problem, p_bf16=p_bf16, geometry=geometry, splits=splits, ops=ops, pool=pool)


def backend_interval(problem: DecodeProblem, *, geometry, splits: int = 1, device=None,
                     pool=None) -> tuple[compare.Interval, str]:
    """``nvfp4_suite.reference.compare.backend_interval`` with the torch references: ``(interval,
    against)`` for a backend of the arithmetic ``geometry`` declares."""
    ops = _ops(problem, device, pool)
    return compare.backend_interval(problem, geometry=geometry, splits=splits, ops=ops, pool=pool)

