"""Dispatching a kernel: the waves of every workgroup executed together.

A dispatch runs every workgroup of the grid to completion. The workgroups
have an arrival order (``forward``, ``reverse``, or ``shuffle:SEED``), so
that a kernel whose workgroups communicate through memory (the split
ticket) is seen under every arrival order the check asks for.

Batched execution (the default): all waves of all workgroups share register
files (``[waves, 129]`` SGPRs and SCC, ``[waves, R, 64]`` VGPRs and AGPRs, the
first R of the 512 that the program names), ordered
by their workgroup's arrival, and each wave has its own pc. Each step
executes the instruction at the lowest pc any runnable wave holds, for every
wave at that pc (so waves that diverged in a loop meet again after it): one
batched core call over those waves where the instruction has one
(``wave.decode_batched``) and every such wave's EXEC is full (any EXEC for
the scalar family, which ignores it), else the instruction once per wave in
arrival order. Only control flow (branches, ``s_barrier``, ``s_endpgm``)
leaves each wave its own decision. The waves at the lowest pc go on by
themselves, without a return to the schedule, until a control instruction
or the pc of the next waves (where the two join): the same steps in the
same order as the rule above, with less bookkeeping; where their EXEC is full,
a straight-line stretch of batched instructions up to there runs as one call
(``fuse``: the same cores' arithmetic, the same steps counted). A wave at ``s_barrier`` waits
until every wave of its workgroup that has not ended waits there (waves of
one workgroup in reverse order when the launch's order is ``reverse``).
Global memory sees the workgroups' accesses interleaved, in arrival order
within a step; ``memory.ArrivalGuard`` checks that every two accesses of
one byte by different workgroups, one of them a write, happen in arrival
order, which makes every load, store and atomic see what running the
workgroups one after another would show it. Where that fails (a kernel
whose workgroups race, like a load of another workgroup's slot before its
ticket) the launch's memory and memory-model check are restored and it
runs sequentially: one workgroup at a time, each wave until it reaches
``s_barrier`` or ``s_endpgm``.

Memory operations complete at once, so ``s_waitcnt`` has nothing to wait
for; what hardware would let a load see instead is the memory-model
check's (``memorder.MemOrder``, attached as ``Memory.order``), which takes
each wave's events in that wave's program order either way.

Initial state, as the kernel descriptor declares it: ``s[0:1]`` the kernarg
segment's address (``user_sgpr_kernarg_segment_ptr``; the other user SGPR
kinds this kernel does not enable are refused), the workgroup ids in the
SGPRs after the user SGPRs (x, y, z as enabled), ``v0`` the work-item id
(x only). EXEC holds every lane of a full wave. Every other register starts
as 0xFFFFFFFF (a NaN as float), which hardware does not promise either.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import random
from dataclasses import dataclass, field

import numpy as np

from ..targets import Target
from ..targets import target as target_of
from . import ops  # noqa: F401  (registers every instruction family)
from .coverage import COLLECTOR, Flow, Launch, exec_mask
from .coverage import FULL as EXEC_FULL
from .fuse import Stretches
from .memory import ArrivalGuard, Lds, Memory, OrderDiverged
from .program import NUM_SGPRS, Program, parse_instruction
from .wave import (
    FULL,
    LANES,
    BatchView,
    Core,
    SimError,
    Wave,
    decode,
    decode_both,
    exec_free,
    mask_to_int,
    vgprs_named,
    vgprs_written,
)

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
    rank: int = 0  # arrival position in the launch's workgroup order

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
        # Each instruction decoded once into a closure over its operands, and
        # into a core over a run of waves where it has one.
        pairs = [decode_both(ins) for ins in program.instrs]
        self.fns = [fn for fn, _ in pairs]
        # A launch's vector files hold the registers the program names (v0, the
        # work-item id, at least): every operand is the whole range of registers
        # its instruction touches. (The kernel names about 220 of the 512.)
        self.vgprs = max([1] + [o.index + o.count for ins in program.instrs for o in ins.ops if o.kind == "v"])
        self.cores: list[Core | None] = [core for _, core in pairs]
        self.exec_free = [exec_free(ins) for ins in program.instrs]
        # Control flow (the next pc is the wave's own, or it stops) and EXEC writes.
        self.control = [ins.target is not None or ins.base in ("s_endpgm", "s_barrier") for ins in program.instrs]
        self.writes_exec = [ins.base.startswith("v_cmpx") or "saveexec" in ins.base
                            or any(o.kind == "s" and o.index <= 127 and o.index + o.count > 126 for o in ins.ops)
                            for ins in program.instrs]
        # Straight-line stretches of those cores, each executed by one call where
        # the step loop would call the cores one after another (``fuse``);
        # ``fuse`` False leaves every step to the loop (the tests compare the two).
        self.stretches = Stretches(program.instrs, self.cores, self.exec_free, self.control, self.writes_exec)
        self.fuse = True
        # Coverage (``coverage``): the blocks and conditional branches, the
        # configuration the records of this kernel's launches go under (the
        # backend's: target, TOPK, splits, XCDs, layout, mutant), and the record
        # of the launch in progress (None: not recording).
        self.flow = Flow(program)
        self.config: dict = {"arch": program.arch, "name": program.name}
        self.recording: Launch | None = None
        self._spans: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
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

    def init_wave(self, group: Group, wave_id: int, kernarg_addr: int, block: int,
                  regs: tuple[np.ndarray, np.ndarray, int] | None = None) -> Wave:
        """A wave at the kernel's entry with the descriptor's initial registers
        (in row ``k`` of a launch's register files ``regs``, see ``Wave``,
        which the caller has filled with 0xFFFFFFFF; its own files, filled
        here, without ``regs``)."""
        w = Wave(group, wave_id, regs)
        if regs is None:
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
        rec, starts, cond = self.recording, self.flow.is_start, self.flow.is_cond
        w.state = "run"
        # Floating-point exceptions are the instructions' results (NaN, inf), not
        # warnings: ignored for the whole run rather than per instruction.
        with np.errstate(all="ignore"):
            while w.state == "run":
                pc = w.pc
                if not 0 <= pc < n:
                    raise SimError(f"wave {w.wave_id} ran off the program (pc {pc})")
                if rec is not None and starts[pc]:
                    rec.enter(pc, exec_mask(w.s[126:127], w.s[127:128]))
                w.pc = pc + 1
                fns[pc](w)
                if rec is not None and cond[pc]:
                    rec.branch(pc, w.pc == instrs[pc].target)
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

    def span(self, pc: int) -> tuple[np.ndarray, np.ndarray] | None:
        """intp: the VGPRs that the instructions from ``pc`` to the next control
        instruction (inclusive) name, and those their cores may write
        (``vgprs_written``): all a run's steps and stretches from ``pc`` touch
        before it stops or a handler runs; None where those instructions are
        fewer than twice the VGPRs (a gather and a scatter of each, for a
        scattered run, would cost more than the accesses of its steps). Found
        once per pc."""
        if pc not in self._spans:
            use: set[int] = set()
            written: set[int] = set()
            for i in range(pc, len(self.program.instrs)):
                ins = self.program.instrs[i]
                use.update(vgprs_named(ins))
                written.update(vgprs_written(ins))
                if self.control[i]:
                    break
            self._spans[pc] = None if i + 1 - pc < 2 * len(use) else (
                np.array(sorted(use), np.intp), np.array(sorted(written), np.intp))
        return self._spans[pc]

    def run_batched(self, groups: list[Group], kernarg_addr: int, block: int, reverse: bool = False,
                    budget: int = 10_000_000) -> int:
        """Run ``groups`` (in arrival order) together to completion (see the
        module note); returns the instructions executed (all waves). The
        budget bounds the steps: a wave executes at most one instruction per
        step, so one that exceeds ``budget`` is always caught."""
        n_waves = -(-block // LANES)
        n = len(groups) * n_waves
        sfile = np.full((n, NUM_SGPRS + 1), 0xFFFFFFFF, np.uint32)
        vfile = np.full((n, self.vgprs, LANES), 0xFFFFFFFF, np.uint32)
        waves: list[Wave] = []
        for g in groups:
            for i in (range(n_waves)[::-1] if reverse else range(n_waves)):
                waves.append(self.init_wave(g, i, kernarg_addr, block, (sfile, vfile, len(waves))))
        Lds.share([g.lds for g in groups])
        scratch: list[np.ndarray] = []

        def span(pc: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
            # What a gathered view from pc needs (``_Run.view``): the VGPRs used and
            # written up to the next control instruction, and the launch's scratch file.
            regs = self.span(pc)
            if regs is None:
                return None
            if not scratch:
                scratch.append(np.empty_like(vfile))
            return (*regs, scratch[0])
        sched = _Schedule(sfile, vfile, span)
        live = {id(g): n_waves for g in groups}
        waiting: dict[int, list[Wave]] = {id(g): [] for g in groups}
        sched.put(0, waves)
        runs = sched.runs
        instrs, fns = self.program.instrs, self.fns
        # Per instruction, what a step asks of it, in one look-up: its core, whether
        # that runs for any EXEC, whether it writes EXEC, whether it is control flow.
        steps_of = list(zip(self.cores, self.exec_free, self.writes_exec, self.control))
        n_instrs = len(instrs)
        stretches = self.stretches
        fusable = stretches.fusable if self.fuse else [False] * n_instrs
        ends = stretches.end
        guard = groups[0].memory.guard if groups else None
        rec, flow = self.recording, self.flow
        starts = flow.is_start
        steps = total = 0
        with np.errstate(all="ignore"):
            while runs:
                pc = min(runs)
                run = runs.pop(pc)
                ws = run.waves
                n_ws = len(ws)
                view = None
                # The run goes on by itself up to the next run's pc (where they
                # join) or a control instruction: the steps the lowest-pc rule
                # takes, without a return to the schedule for each.
                nxt = min(runs) if runs else -1
                plain = -1  # the steps run up to this pc, a stretch not yet made
                while True:
                    if not 0 <= pc < n_instrs:
                        raise SimError(f"wave {ws[0].wave_id} ran off the program (pc {pc})")
                    if fusable[pc] and pc >= plain:
                        # A stretch of fusable instructions up to the next run's pc, in one
                        # call where the steps below would call each core on a full EXEC
                        # (and where the budget lasts it: else the steps find where it ends);
                        # otherwise the steps run it.
                        stop = ends[pc] if not pc < nxt < ends[pc] else nxt
                        stretch = None
                        if stop - pc > 1 and steps + stop - pc <= budget and (
                                run.full or not stretches.needs_full(pc, stop)
                                or (run.full is None and run.exec_full(pc))):
                            if view is None:
                                view = run.view(pc)
                            # Registers that are arrays only: not ``Rows`` (see ``fuse``).
                            stretch = stretches.get(pc, stop) if type(view.vb) is np.ndarray else None
                        if stretch is None:
                            plain = stop
                        else:
                            left = stretch(view)
                            ran = stop - pc if left is None else left
                            if rec is not None:
                                # The blocks the stretch ran into, with its EXEC (it writes none).
                                for s in flow.starts_in(pc, pc + ran):
                                    rec.enter(s, run.exec_mask())
                            steps += ran
                            total += ran * n_ws
                            pc += ran
                            if left is None:
                                if pc == nxt:
                                    # Joining the next run, as after the stretch's last step.
                                    pc, control = pc - 1, False
                                    break
                                continue
                            # The instruction whose core declined: the step below runs its handlers.
                    if rec is not None and starts[pc]:
                        rec.enter(pc, run.exec_mask())
                    steps += 1
                    total += n_ws
                    if steps > budget:
                        raise SimError(f"wave {ws[0].wave_id} exceeded {budget} instructions "
                                       f"(at {instrs[pc].where()})")
                    core, free, writes_exec, control = steps_of[pc]
                    if core is not None and (free or run.full or (run.full is None and run.exec_full(pc))):
                        if view is None:
                            view = run.view(pc)
                        done = core(view) is not False
                    else:
                        done = False
                    if not done:
                        run.sync()
                        view = None
                        fn = fns[pc]
                        for w in ws:
                            w.pc = pc + 1
                            if guard is not None:
                                guard.rank = w.group.rank
                            fn(w)
                    if writes_exec:
                        run.full = None
                    if control or pc + 1 == nxt:
                        break
                    pc += 1
                run.sync()
                if not control:
                    sched.put(pc + 1, ws, run)  # joining the next run
                    continue
                if rec is not None and flow.is_cond[pc]:
                    for w in ws:
                        rec.branch(pc, w.pc == flow.target[pc])
                # Each wave goes on at its own pc, or waits at the barrier, or has ended;
                # the waves going on at one pc join there as one run.
                moved: dict[int, list[Wave]] = {}
                for w in ws:
                    if w.state == "run":
                        moved.setdefault(w.pc, []).append(w)
                        continue
                    gid = id(w.group)
                    if w.state == "end":
                        live[gid] -= 1
                    else:
                        waiting[gid].append(w)
                    # A wave that has ended no longer counts at the barrier (as on hardware).
                    if waiting[gid] and len(waiting[gid]) == live[gid]:
                        for v in waiting[gid]:
                            v.state = "run"
                            moved.setdefault(v.pc, []).append(v)
                        waiting[gid] = []
                for to, group in moved.items():
                    group.sort(key=_row)
                    sched.put(to, group)
        stuck = [w for ws in waiting.values() for w in ws]
        if stuck:
            raise SimError(f"wave {stuck[0].wave_id} waits at a barrier no other wave of its workgroup reaches")
        for w in waves:
            w.state = "end"
        self.steps += steps
        return total


def _row(w: Wave) -> int:
    return w.k


class _Run:
    """The waves at one pc (in arrival order: ascending register-file row), a
    ``view(pc)`` of them all for batched cores (``BatchView``, made when first
    asked), and whether all have a full EXEC (``full``; None until asked, and
    after an EXEC write). Where their rows are not evenly spaced and EXEC is
    full, the view is a copy of the VGPRs that the instructions up to the
    next control instruction use (``Kernel.span``: where they are many, at
    least twice the registers), gathered into the launch's scratch file
    (``BatchView.gathered``), which the launch writes back (``sync``) before a
    wave's handler runs and where the run stops: one gather and one scatter
    of those registers cost less than a gather or a scatter at each register
    access of each step (``Rows``), and fused stretches run on it."""

    __slots__ = ("waves", "full", "_view", "_ctx", "_gathered")

    def __init__(self, waves: list[Wave], ctx: tuple):
        self.waves = waves
        self.full: bool | None = None
        self._view: BatchView | None = None
        self._ctx = ctx  # the files and the span of a pc (``_Schedule``)
        # Where the view is a gathered copy: the view of the files it copies, and
        # the VGPRs to write back.
        self._gathered: tuple[BatchView, np.ndarray] | None = None

    def view(self, pc: int) -> BatchView:
        """The ``BatchView`` of the run's waves, at ``pc``."""
        if self._view is None:
            sfile, vfile, span = self._ctx
            v = BatchView(sfile, vfile, self.waves)
            # A run with a partial EXEC is left to ``Rows``: its steps alternate cores
            # and each wave's handlers, which read the files.
            regs = span(pc) if type(v.vb) is not np.ndarray and self.exec_full(pc, v) else None
            if regs is not None:
                use, written, scratch = regs
                self._gathered = (v, written)
                v = v.gathered(use, scratch)
            self._view = v
        return self._view

    def sync(self) -> None:
        """Write a gathered view's written VGPRs back to the files (before each
        wave's handler reads them, and where the run stops) and drop it."""
        if self._gathered is not None:
            base, written = self._gathered
            assert self._view is not None  # the copy, made with _gathered
            base.scatter(self._view, written)
            self._gathered = self._view = None

    def exec_mask(self) -> int:
        """The EXEC populations of the run's waves (``coverage.exec_mask``), from
        its gathered copy where it has one (the files' rows are stale until ``sync``)."""
        if self.full:
            return EXEC_FULL
        if self._gathered is not None:
            assert self._view is not None  # the copy, made with _gathered
            sb = self._view.sb
        else:
            sfile = self._ctx[0]
            sb = sfile[[w.k for w in self.waves]]
        return exec_mask(sb[:, 126], sb[:, 127])

    def exec_full(self, pc: int, view: BatchView | None = None) -> bool:
        """Whether every wave's EXEC enables all 64 lanes (read from ``view``, or the run's at ``pc``)."""
        if self.full is None:
            self.full = bool(((self.view(pc) if view is None else view).sb[:, 126:128] == FULL).all())
        return self.full


class _Schedule:
    """The runnable waves by pc (``runs``: pc -> ``_Run``); ``span(pc)``: what a
    run's gathered view needs (``_Run.view``)."""

    def __init__(self, sfile: np.ndarray, vfile: np.ndarray, span):
        self.runs: dict[int, _Run] = {}
        self._ctx = (sfile, vfile, span)

    def put(self, pc: int, waves: list[Wave], run: _Run | None = None) -> None:
        """``waves`` (ascending rows; ``run``: already a run of them) go on at
        ``pc``, joining any already there."""
        there = self.runs.get(pc)
        if there is not None:
            self.runs[pc] = _Run(sorted(there.waves + waves, key=_row), self._ctx)
        else:
            self.runs[pc] = run if run is not None else _Run(waves, self._ctx)


@contextlib.contextmanager
def _no_collection():
    """Python's cyclic garbage collector paused (as it was after): a launch makes
    many short-lived tuples and lists, whose count sets off collections that
    walk every object the parsed kernels hold (about a tenth of a golden
    task's time, measured); what a launch leaves is freed by reference
    counting, or collected after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def dispatch(kernel: Kernel, memory: Memory, kernarg: bytes, grid: tuple[int, int, int], block: int = 256,
             order: str = "forward", target: Target | None = None, options: dict | None = None,
             batched: bool = True) -> int:
    """Run ``kernel`` over ``grid`` workgroups of ``block`` work-items with the
    kernarg segment ``kernarg`` (padded to the descriptor's size); returns the
    instructions executed (all waves). ``batched``: the workgroups execute
    together (falling back to one at a time where they race, see the module
    note); False runs them one at a time. The garbage collector pauses for the
    launch (``_no_collection``)."""
    with _no_collection():
        return _dispatch(kernel, memory, kernarg, grid, block, order, target, options, batched)


def _dispatch(kernel: Kernel, memory: Memory, kernarg: bytes, grid: tuple[int, int, int], block: int,
              order: str, target: Target | None, options: dict | None, batched: bool) -> int:
    prog = kernel.program
    if len(kernarg) > prog.kernarg_size:
        raise SimError(f"kernarg segment of {len(kernarg)} bytes; {prog.name} declares {prog.kernarg_size}")
    seg = np.zeros(prog.kernarg_size, np.uint8)
    seg[:len(kernarg)] = np.frombuffer(kernarg, np.uint8)
    kernarg_addr = memory.alloc("kernarg", seg)
    target = target or target_of(prog.arch)
    ids = workgroup_order(grid, order)
    reverse = order == "reverse"
    try:
        if batched:
            groups = [Group(memory, target, Lds(prog.lds_size), wg, options or {}, rank)
                      for rank, wg in enumerate(ids)]
            check = copy.deepcopy(memory.order)
            steps = kernel.steps
            memory.guard = guard = ArrivalGuard()
            kernel.recording = COLLECTOR.start()
            try:
                total = kernel.run_batched(groups, kernarg_addr, block, reverse=reverse)
                _finish(kernel)
                return total
            except OrderDiverged:
                # The workgroups race: undo the launch and run it one workgroup at a time.
                guard.restore()
                if memory.order is not None:
                    memory.order.__dict__.update(check.__dict__)
                kernel.steps = steps
            finally:
                memory.guard = None
        # A fresh record: the abandoned batched run's reach is not the launch's.
        kernel.recording = COLLECTOR.start()
        total = 0
        for rank, wg in enumerate(ids):
            group = Group(memory, target, Lds(prog.lds_size), wg, options or {}, rank)
            total += kernel.run_group(group, kernarg_addr, block, reverse=reverse)
        _finish(kernel)
        return total
    finally:
        kernel.recording = None


def _finish(kernel: Kernel) -> None:
    """Add the finished launch's coverage record, if one was made, to the collector."""
    if kernel.recording is not None:
        COLLECTOR.finish(kernel.config, kernel.recording)


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
