"""Backends ``flydsl-sim-gfx942`` and ``flydsl-sim-gfx950``: the compiled FlyDSL
kernel executed by this package's simulator, on any CPU.

The host side is the ``flydsl`` backend's: the problem validator, the K table
(``lanes.k_table``), the grid, partials and tickets (``launch_plan``); only
the launch differs. The kernel's buffers are numpy arrays registered with
the simulator's ``Memory`` (the pool without a copy, so a sparse pool stays
sparse), its arguments packed into the kernarg segment in the order the
launcher passes them, and the workgroups run together, their accesses to
shared memory in arrival order (``launch.dispatch``).

The workgroup arrival order is part of the launch (``WORKGROUP_ORDERS``:
forward, reverse, seeded shuffles, declared in the backend's capabilities):
the harness's two runs of every problem, which must agree bitwise, use two
consecutive orders, so the split ticket sees two arrival orders. The
tickets and partials persist across calls like the ROCm workspace's; a
launch that leaves a ticket non-zero raises ``SimError``.

Every launch runs the memory-model check (``memorder``) at the launch's XCD
placement: a load of partials another workgroup stored that no release and
acquire order raises ``SimError`` naming both (``memorder="check"``), or
returns the stale value hardware may return (``"stale"``), so the
conformance check sees a wrong output.
"""

from __future__ import annotations

import functools
import struct

import numpy as np

from nvfp4_suite.reference import DecodeProblem
from nvfp4_suite.reference.emulate import SEED_GEOMETRY
from nvfp4_suite.reference.formats import bf16_bits, from_bf16_bits

from ...protocol import GPU_LAUNCH_TIMEOUT_S, INTERPRETED_LIMITS, Capabilities
from ..host import TOPKS, XCDS, flydsl_missing, launch_plan, rocm_path
from ..lanes import LAYOUTS, PART_F, SPLITS, k_table
from ..mutants import MEMORY_ORDER_MUTANTS, MUTANTS
from ..targets import ARCHS
from .compile import BUNDLE, CompileError, arg_order, assembly_path, bundled, cache_dir, cached, needed
from .launch import Kernel, dispatch
from .memorder import MemOrder
from .memory import Memory
from .program import parse_program
from .wave import SimError

BLOCK = 256
MEMORDER_MODES = ("check", "stale", None)
WORKGROUP_ORDERS = ("forward", "reverse") + tuple(f"shuffle:{i}" for i in range(1, 6))
# The kernel is compiled per TOPK; a problem's slot lists are padded with -1
# (empty slots, which the kernel skips) up to the next of these widths, so a
# sweep over many TOPK values needs few compiles. They are the widths the
# compile-only resource check builds (which fills the same cache), 33 an odd one.
TOPK_BUCKETS = TOPKS


def topk_bucket(topk: int, buckets=TOPK_BUCKETS) -> int:
    """The compiled TOPK a problem of ``topk`` slots runs with (``buckets`` None: exact)."""
    if buckets is None:
        return topk
    return next(b for b in buckets if b >= topk)


@functools.lru_cache(maxsize=None)
def kernel(arch: str, topk: int, splits: int, xcds: int, layout: str,
           mutant: str | None = None) -> tuple[Kernel, tuple[int, ...]]:
    """The parsed program of one configuration and its kernel-argument order
    (compiled once, cached on disk by ``compile``)."""
    path = assembly_path(arch, topk, splits, xcds, layout, mutant)
    kern = Kernel(parse_program(path.read_text()))
    # What identifies this compiled kernel in coverage records (``coverage.config_key``).
    kern.config = {"arch": arch, "topk": topk, "splits": splits, "xcds": xcds, "layout": layout, "mutant": mutant}
    return kern, tuple(arg_order(path))


def pack_kernargs(program, order: tuple[int, ...], launch_args: list) -> bytes:
    """The kernarg segment: launcher argument ``order[k]`` at the offset and size
    the metadata gives kernel argument ``k`` (floats as float32)."""
    seg = bytearray(program.kernarg_size)
    if len(order) != len(program.args):
        raise SimError(f"{program.name}: {len(program.args)} kernel arguments, launch order names {len(order)}")
    for meta, idx in zip(program.args, order):
        value = launch_args[idx]
        if isinstance(value, float):
            raw = struct.pack("<f", value)
        else:
            raw = int(value).to_bytes(8, "little", signed=int(value) < 0)[: meta["size"]]
        if len(raw) != meta["size"]:
            raise SimError(f"kernel argument {idx} has {len(raw)} bytes, metadata says {meta['size']}")
        seg[meta["offset"]:meta["offset"] + meta["size"]] = raw
    return bytes(seg)


class SimWorkspace:
    """Partials and tickets kept across launches (as on a GPU), per size."""

    def __init__(self):
        self._parts: dict = {}
        self._tickets: dict = {}

    def partials(self, n: int, splits: int) -> np.ndarray:
        """float32 ``[n, splits, 64, PART_F]``; filled with NaN when first made,
        since the kernel must write every partial it reads."""
        key = (n, splits)
        if key not in self._parts:
            self._parts[key] = np.full((n, splits, 64, PART_F), np.nan, np.float32)
        return self._parts[key]

    def tickets(self, n: int) -> np.ndarray:
        """int32 ``[n]``, zero before the first launch."""
        if n not in self._tickets:
            self._tickets[n] = np.zeros(n, np.int32)
        return self._tickets[n]


def run(problem: DecodeProblem, arch: str, *, splits: int = 1, xcds: int = 0, out: np.ndarray | None = None,
        order: str = "forward", workspace: SimWorkspace | None = None, options: dict | None = None,
        mutant: str | None = None, buckets=TOPK_BUCKETS, memorder: str | None = "check") -> dict:
    """Launch the kernel for ``arch`` on a validated ``problem`` in the simulator.

    Returns ``{"out": float32 [rows, H, 128], "instructions": int, "steps": int}``
    (wave-instructions executed, and simulator steps: ``launch.Kernel.steps``). ``out``
    (float32 ``[rows, H, 128]`` of bf16 values or NaN, optional) is the output
    buffer's prior contents, so rows the kernel never stores keep them.
    ``order`` is the workgroup order (``launch.workgroup_order``); ``options``
    reach the instruction handlers (``exp_ulps``); ``mutant`` builds the kernel
    with one of ``nvfp4_suite.kernels.flydsl.mutants.MUTANTS``; ``buckets`` the compiled TOPK
    widths (``TOPK_BUCKETS``; None compiles the problem's own). ``memorder``: ``"check"``
    raises SimError on the memory-model check's first complaints, ``"stale"`` lets
    unordered loads return their stale value, None runs no check; the
    complaints are returned as ``"memorder"`` (a list of ``memorder.Complaint``)."""
    if memorder not in MEMORDER_MODES:
        raise ValueError(f"memorder must be one of {MEMORDER_MODES}, got {memorder!r}")
    if splits not in SPLITS:
        raise ValueError(f"splits={splits}: the kernel is built and checked for {SPLITS}")
    if xcds < 0:
        raise ValueError(f"xcds must be >= 0, got {xcds}")
    if problem.layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {problem.layout!r}")
    rows, H = problem.rows, problem.H
    hkv = problem.num_kv_heads
    topk_w = topk_bucket(problem.topk.shape[2], buckets)
    topk = np.full((hkv, rows, topk_w), -1, np.int32)
    topk[:, :, :problem.topk.shape[2]] = problem.topk
    kern, order_args = kernel(arch, topk_w, splits, xcds, problem.layout, mutant)
    plan = launch_plan(rows, problem.q_len, H, hkv, rows * topk_w, problem.block_table.shape[1], splits, xcds,
                       problem.sm_scale)
    ws = workspace or SimWorkspace()
    q = bf16_bits(problem.q)
    dev_out = bf16_bits(out if out is not None else np.zeros(problem.q.shape, np.float32))
    scales = np.array([problem.k_global_scale, problem.v_global_scale], np.float32)
    tickets = ws.tickets(plan.n)
    mem = Memory()
    addr = [mem.alloc("q", q), mem.alloc("pool", np.ascontiguousarray(problem.pool)),
            mem.alloc("topk", topk),
            mem.alloc("block_table", np.ascontiguousarray(problem.block_table, np.int32)),
            mem.alloc("seq_lens", np.ascontiguousarray(problem.seq_lens, np.int32)),
            mem.alloc("out", dev_out)]
    scale_addr = mem.alloc("global_scales", scales)
    addr += [scale_addr, scale_addr + 4, mem.alloc("k_table", k_table().view(np.int32).copy()),
             mem.alloc("partials", ws.partials(plan.n, splits)), mem.alloc("tickets", tickets)]
    kernargs = pack_kernargs(kern.program, order_args, addr + list(plan.scalars))
    steps = kern.steps
    if memorder is not None:
        mem.order = MemOrder(plan.grid, xcds, stale=memorder == "stale")
    count = dispatch(kern, mem, kernargs, plan.grid, BLOCK, order=order, options=options)
    complaints = mem.order.complaints if mem.order is not None else []
    if memorder == "check" and complaints:
        shown = "; ".join(str(c) for c in complaints[:3])
        more = f" (and {len(complaints) - 3} more)" if len(complaints) > 3 else ""
        raise SimError(f"memory-model check, xcds={xcds}: {shown}{more}")
    if tickets.any():
        bad = int(np.flatnonzero(tickets)[0])
        raise SimError(f"ticket {bad} is {int(tickets[bad])} after the launch; the kernel must reset it to 0")
    return {"out": from_bf16_bits(dev_out), "instructions": count, "steps": kern.steps - steps,
            "memorder": complaints}


def sim_missing(archs=ARCHS, mutant: str | None = None, topks=TOPK_BUCKETS) -> str | None:
    """None when the simulator can get every compiled kernel it may be asked
    for here, else the reason naming what is missing.

    Enough is a compile cache and the shipped bundle (``compile.BUNDLE``)
    holding together every configuration of ``archs``
    (``mutant``: that kernel mutant) a launch may need: each compiled TOPK width
    in ``topks`` (None: every width 1..64) at every split count, XCD placement
    and layout (any FlyDSL version's compile). Otherwise FlyDSL (and the torch
    its compiler imports) and ``ld.lld`` >= 19 must be here to compile the
    missing ones on first use."""
    need = needed(archs, mutant, range(1, TOPKS[-1] + 1) if topks is None else topks)
    # A complete cache (with the bundle) is enough, and looking needs no FlyDSL import (which imports torch).
    absent = [n for n in need if cached(n) is None and bundled(n) is None]
    if not absent:
        return None
    missing = flydsl_missing()
    if missing is None:
        rocm, note = rocm_path()
        if rocm is not None:
            return None
        missing = note
    shown = ", ".join(absent[:4]) + (f" and {len(absent) - 4} more" if len(absent) > 4 else "")
    return (f"{missing}; so the simulator runs only from its compile cache {cache_dir()} and "
            f"{BUNDLE.name}, which lack "
            f"{len(absent)} of the {len(need)} compiled configurations its launches need: {shown}")


class FlydslSimBackend:
    """``flydsl-sim-<arch>``: the seed kernel compiled for ``arch`` and run by the
    simulator; seed geometry; every configuration the ``flydsl`` backend offers.
    ``buckets``: the compiled TOPK widths (``TOPK_BUCKETS``; None: exact); ``memorder``:
    the memory-model check's mode (``run``)."""

    geometry = SEED_GEOMETRY

    def __init__(self, arch: str, options: dict | None = None, mutant: str | None = None, buckets=TOPK_BUCKETS,
                 memorder: str | None = "check"):
        if arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
        if memorder not in MEMORDER_MODES:
            raise ValueError(f"memorder must be one of {MEMORDER_MODES}, got {memorder!r}")
        self.memorder = memorder
        self.memorder_complaints: list = []  # every launch's, with memorder="stale"
        self.arch = arch
        self.mutant = mutant
        self.buckets = buckets
        self.name = f"flydsl-sim-{arch}" + (f"-{mutant}" if mutant else "")
        self.options = options or {}
        self.workspace = SimWorkspace()
        # Executing every instruction in Python is slow: small generated problems.
        self.capabilities = Capabilities(layouts=LAYOUTS, splits=SPLITS, xcds=XCDS, orders=WORKGROUP_ORDERS,
                                         out=True, targets=(arch,), limits=INTERPRETED_LIMITS, interpreted=True,
                                         launch_timeout_s=GPU_LAUNCH_TIMEOUT_S)
        self.instructions = 0  # wave-instructions executed by every call so far
        self.steps = 0  # simulator steps of every call so far

    def available(self) -> str | None:
        """None when every kernel configuration this backend's launches may need can
        be had here (compiled now, or cached), else the reason (``sim_missing``)."""
        return sim_missing((self.arch,), self.mutant, self.buckets)

    def __call__(self, problem: DecodeProblem, *, splits: int = 1, xcds: int = 0, order: str = "forward",
                 out=None) -> np.ndarray:
        """float32 ``[rows, H, 128]`` holding the bf16 output; validates first.
        order: the workgroups' arrival order (``WORKGROUP_ORDERS``)."""
        problem.validate()
        try:
            res = run(problem, self.arch, splits=splits, xcds=xcds, out=out, order=order,
                      workspace=self.workspace, options=self.options, mutant=self.mutant, buckets=self.buckets,
                      memorder=self.memorder)
        except CompileError as e:
            raise SimError(f"cannot compile the kernel for {self.arch}: {e}") from e
        self.instructions += res["instructions"]
        self.steps += res["steps"]
        self.memorder_complaints += res["memorder"]
        if out is None:
            return res["out"]
        out[...] = res["out"]
        return out


def gfx942() -> FlydslSimBackend:
    """The ``flydsl-sim-gfx942`` backend."""
    return FlydslSimBackend("gfx942")


def gfx950() -> FlydslSimBackend:
    """The ``flydsl-sim-gfx950`` backend."""
    return FlydslSimBackend("gfx950")


# The kernel mutants as ``module:attr`` backends, e.g.
# ``nvfp4_suite.kernels.flydsl.sim.backend:ticket_not_reset_gfx950``
# (``nvfp4_suite.kernels.flydsl.mutants``). The memory-order mutants run with stale
# values substituted (``memorder="stale"``), so the check sees their bug as a wrong output.
for _m in MUTANTS:
    for _arch in ARCHS:
        globals()[f"{_m}_{_arch}"] = functools.partial(FlydslSimBackend, _arch, mutant=_m,
                                                       memorder="stale" if _m in MEMORY_ORDER_MUTANTS else "check")
