"""Dispatching a kernel: workgroups one after another, their waves to barriers.

A dispatch runs every workgroup of the grid to completion, one at a time,
in a chosen order (``forward``, ``reverse``, or ``shuffle:SEED``), so that a
kernel whose workgroups communicate through memory (the split ticket) is
seen under every arrival order the check asks for. Inside a workgroup the
waves run one at a time, each until it reaches ``s_barrier`` or
``s_endpgm``; when every wave that has not ended waits at the barrier they all go on
(the wave order, forward or reversed, follows the workgroup order's
direction). Memory operations complete at once, so ``s_waitcnt`` has
nothing to wait for; what hardware would let a load see instead is the
memory-model check's (``memorder.MemOrder``, attached as ``Memory.order``).

Initial state, as the kernel descriptor declares it: ``s[0:1]`` the kernarg
segment's address (``user_sgpr_kernarg_segment_ptr``; the other user SGPR
kinds this kernel does not enable are refused), the workgroup ids in the
SGPRs after the user SGPRs (x, y, z as enabled), ``v0`` the work-item id
(x only). EXEC holds every lane of a full wave. Every other register starts
as 0xFFFFFFFF (a NaN as float), which hardware does not promise either.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from ..targets import Target
from ..targets import target as target_of
from . import ops  # noqa: F401  (registers every instruction family)
from .memory import Lds, Memory
from .program import Program, parse_instruction
from .wave import LANES, SimError, Wave, decode, mask_to_int

_UNSUPPORTED_USER_SGPRS = ("dispatch_ptr", "queue_ptr", "dispatch_id", "private_segment_size")


@dataclass
class Group:
    """One workgroup in flight: its ids, LDS, the device memory and target (the
    ``nvfp4_suite.kernels.flydsl.targets`` record the instruction handlers read), and options
    (``exp_ulps``: a perturbation of ``v_exp_f32`` in ulps, see the float family)."""

    memory: Memory
    target: Target
    lds: Lds
    ids: tuple[int, int, int] = (0, 0, 0)
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.target.wave_size != LANES:
            raise SimError(f"{self.target.arch} runs {self.target.wave_size}-lane waves; the simulator models {LANES}")


def workgroup_order(grid: tuple[int, int, int], order: str) -> list[tuple[int, int, int]]:
    """Every workgroup id of ``grid`` in ``order``: ``forward`` (x fastest),
    ``reverse``, or ``shuffle:SEED`` (a seeded permutation)."""
    ids = [(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])]
    if order == "forward":
        return ids
    if order == "reverse":
        return ids[::-1]
    if order.startswith("shuffle:"):
        random.Random(int(order.split(":", 1)[1])).shuffle(ids)
        return ids
    raise ValueError(f"workgroup order must be forward, reverse or shuffle:SEED, got {order!r}")


class Kernel:
    """A parsed program ready to run: each instruction decoded once (``wave.decode``)."""

    def __init__(self, program: Program):
        self.program = program
        # Simulator steps executed (one step runs one instruction for the waves
        # it is issued to; one wave each here, so it equals the wave-instructions).
        self.steps = 0
        # Each instruction decoded once into a closure over its operands.
        self.fns = [decode(ins) for ins in program.instrs]
        d = program.descriptor
        for kind in _UNSUPPORTED_USER_SGPRS:
            if d.get(f"user_sgpr_{kind}", 0):
                raise SimError(f"{program.name}: user SGPR {kind} is not supported by the simulator")
        if d.get("system_vgpr_workitem_id", 0) != 0:
            raise SimError(f"{program.name}: only 1-D work-item ids are supported")
        if d.get("enable_private_segment", 0) or d.get("private_segment_fixed_size", 0):
            raise SimError(f"{program.name}: scratch memory is not supported by the simulator")
        self.user_sgprs = d["user_sgpr_count"]
        self.wg_id_enabled = [d.get(f"system_sgpr_workgroup_id_{a}", 0) for a in "xyz"]

    def init_wave(self, group: Group, wave_id: int, kernarg_addr: int, block: int) -> Wave:
        """A wave at the kernel's entry with the descriptor's initial registers."""
        w = Wave(group, wave_id)
        w.s[:] = 0xFFFFFFFF
        w.v[:] = 0xFFFFFFFF
        w.s[0], w.s[1] = kernarg_addr & 0xFFFFFFFF, kernarg_addr >> 32
        nxt = self.user_sgprs
        for axis, on in enumerate(self.wg_id_enabled):
            if on:
                w.s[nxt] = group.ids[axis]
                nxt += 1
        tid = wave_id * LANES + np.arange(LANES)
        w.v[0] = tid
        live = mask_to_int(tid < block)
        w.s[126], w.s[127] = live & 0xFFFFFFFF, live >> 32
        w.scc = 0
        return w

    def run_wave(self, w: Wave, budget: int) -> None:
        """Run ``w`` until it waits at a barrier or ends; SimError past ``budget`` instructions."""
        instrs, fns = self.program.instrs, self.fns
        n = len(instrs)
        w.state = "run"
        # Floating-point exceptions are the instructions' results (NaN, inf), not
        # warnings: ignored for the whole run rather than per instruction.
        with np.errstate(all="ignore"):
            while w.state == "run":
                pc = w.pc
                if not 0 <= pc < n:
                    raise SimError(f"wave {w.wave_id} ran off the program (pc {pc})")
                w.pc = pc + 1
                fns[pc](w)
                w.count += 1
                if w.count > budget:
                    raise SimError(f"wave {w.wave_id} exceeded {budget} instructions (at {instrs[pc].where()})")

    def run_group(self, group: Group, kernarg_addr: int, block: int, reverse: bool = False,
                  budget: int = 10_000_000) -> int:
        """Run one workgroup of ``block`` work-items to completion; returns instructions executed."""
        n_waves = -(-block // LANES)
        waves = [self.init_wave(group, i, kernarg_addr, block) for i in range(n_waves)]
        order = waves[::-1] if reverse else waves
        # A wave that has ended no longer counts at the barrier (as on hardware),
        # so each round runs every live wave to its next barrier or its end.
        live = order
        while live:
            for w in live:
                self.run_wave(w, budget)
            live = [w for w in order if w.state != "end"]
        n = sum(w.count for w in waves)
        self.steps += n
        return n


def dispatch(kernel: Kernel, memory: Memory, kernarg: bytes, grid: tuple[int, int, int], block: int = 256,
             order: str = "forward", target: Target | None = None, options: dict | None = None) -> int:
    """Run ``kernel`` over ``grid`` workgroups of ``block`` work-items with the
    kernarg segment ``kernarg`` (padded to the descriptor's size); returns the
    instructions executed (all waves)."""
    prog = kernel.program
    if len(kernarg) > prog.kernarg_size:
        raise SimError(f"kernarg segment of {len(kernarg)} bytes; {prog.name} declares {prog.kernarg_size}")
    seg = np.zeros(prog.kernarg_size, np.uint8)
    seg[:len(kernarg)] = np.frombuffer(kernarg, np.uint8)
    kernarg_addr = memory.alloc("kernarg", seg)
    target = target or target_of(prog.arch)
    total = 0
    for ids in workgroup_order(grid, order):
        group = Group(memory, target, Lds(prog.lds_size), ids, options or {})
        total += kernel.run_group(group, kernarg_addr, block, reverse=order == "reverse")
    return total


def make_test_wave(arch: str = "gfx950", lds_bytes: int = 65536, memory: Memory | None = None,
                   options: dict | None = None) -> Wave:
    """A wave with all 64 lanes active and zeroed registers, for unit tests of instruction families."""
    group = Group(memory or Memory(), target_of(arch), Lds(lds_bytes, fill=0), options=options or {})
    w = Wave(group, 0)
    w.s[126] = w.s[127] = 0xFFFFFFFF
    return w


def execute(w: Wave, text: str, labels: dict[str, int] | None = None) -> None:
    """Run one instruction given as assembly text on ``w`` (unit tests); a branch's
    label is looked up in ``labels`` (name -> instruction index)."""
    ins = parse_instruction(text)
    for o in ins.ops:
        if o.kind == "label":
            if not labels or o.text not in labels:
                raise SimError(f"execute(): label {o.text} not in labels")
            ins.target = labels[o.text]
    w.pc += 1
    with np.errstate(all="ignore"):
        decode(ins)(w)
