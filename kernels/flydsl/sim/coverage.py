"""Coverage of the simulated kernel's control flow: which basic blocks its
launches entered, with what EXEC, and which way each conditional branch went.

The blocks come from the program's control flow (``Flow``): a block starts
at the entry (instruction 0), at every branch target, and after every branch
(``s_branch``, ``s_cbranch_*``: the fall-through) and ``s_endpgm``. Each
conditional branch (``s_cbranch_*``) has two directions, taken and not taken
(the fall-through).

A launch records (``Launch``), per block start it entered, the EXEC
populations of the waves entering it (``FULL``: all 64 lanes, ``PARTIAL``,
``NONE``: no lane), as a bit mask, and per conditional branch the directions
its waves took (``TAKEN``, ``NOT_TAKEN``). The launcher (``launch.Kernel``)
records at block granularity: where a wave's pc reaches a block start, and
after a conditional branch from each wave's next pc; a fused stretch records
the block starts it runs through (no EXEC write happens inside one, so its
EXEC is the stretch's). A finished launch's record joins the process-wide
``COLLECTOR`` under its kernel's configuration (``Kernel.config``, which the
backend sets: target, TOPK width, splits, XCDs, layout, mutant); a batched
launch abandoned for a sequential one (its workgroups race) records nothing
of the abandoned part.

``argued_exec`` derives from the code alone which blocks a wave may enter
and with what EXEC populations; ``tests/test_sim_coverage.py`` holds the
records to it.

Recording is off unless ``COLLECTOR.enabled`` (or the environment variable
``NVFP4_SIM_COVERAGE=1`` at import): off, a launch pays one comparison per
step.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

import numpy as np

from .program import Program

# EXEC populations of the waves entering a block, as bits of a mask.
FULL, PARTIAL, NONE = 1, 2, 4
EXEC_NAMES = {FULL: "full", PARTIAL: "partial", NONE: "none"}
# Directions of a conditional branch, as bits of a mask.
NOT_TAKEN, TAKEN = 1, 2
DIRECTION_NAMES = {NOT_TAKEN: "not_taken", TAKEN: "taken"}

_ALL_LANES = 0xFFFFFFFF


def is_branch(mnemonic: str) -> bool:
    """Whether ``mnemonic`` is a branch (``s_branch`` or ``s_cbranch_*``)."""
    return mnemonic == "s_branch" or mnemonic.startswith("s_cbranch_")


class Flow:
    """The basic blocks and conditional branches of ``program``.

    ``starts``: the block starts, ascending instruction indices; ``is_start``
    and ``is_cond`` (bool per instruction): whether one starts a block, whether
    it is a conditional branch; ``conds``: the conditional branches' indices,
    ascending; ``target[pc]``: a branch's target index (None elsewhere)."""

    def __init__(self, program: Program):
        instrs = program.instrs
        n = len(instrs)
        starts = {0} if n else set()
        for ins in instrs:
            if is_branch(ins.base) and ins.target is not None:
                starts.add(ins.target)
            if (is_branch(ins.base) or ins.base == "s_endpgm") and ins.index + 1 < n:
                starts.add(ins.index + 1)
        self.starts = sorted(starts)
        self.is_start = [False] * n
        for s in self.starts:
            self.is_start[s] = True
        self.is_cond = [ins.base.startswith("s_cbranch_") for ins in instrs]
        self.conds = [i for i, c in enumerate(self.is_cond) if c]
        self.target = [ins.target for ins in instrs]

    def starts_in(self, lo: int, hi: int) -> list[int]:
        """The block starts in ``[lo, hi)``."""
        return self.starts[bisect.bisect_left(self.starts, lo):bisect.bisect_left(self.starts, hi)]


def exec_mask(lo: np.ndarray, hi: np.ndarray) -> int:
    """The EXEC populations (``FULL | PARTIAL | NONE`` bits) of waves whose EXEC
    halves are ``lo`` and ``hi`` (uint32 ``[waves]``)."""
    full = (lo == _ALL_LANES) & (hi == _ALL_LANES)
    none = (lo == 0) & (hi == 0)
    return (FULL * bool(full.any())) | (NONE * bool(none.any())) | (PARTIAL * bool((~(full | none)).any()))


@dataclass
class Record:
    """What launches of one kernel configuration reached: ``blocks`` (block
    start index -> EXEC populations seen entering it, a ``FULL | PARTIAL | NONE``
    mask), ``directions`` (conditional branch index -> directions taken, a
    ``NOT_TAKEN | TAKEN`` mask), ``launches`` (how many)."""

    blocks: dict[int, int] = field(default_factory=dict)
    directions: dict[int, int] = field(default_factory=dict)
    launches: int = 0

    def merge(self, other: Record) -> None:
        """Add ``other``'s reach to this one."""
        for pc, m in other.blocks.items():
            self.blocks[pc] = self.blocks.get(pc, 0) | m
        for pc, m in other.directions.items():
            self.directions[pc] = self.directions.get(pc, 0) | m
        self.launches += other.launches

    def to_json(self) -> dict:
        """A JSON-able copy (keys as strings), which ``from_json`` reads back."""
        return {"blocks": {str(k): v for k, v in sorted(self.blocks.items())},
                "directions": {str(k): v for k, v in sorted(self.directions.items())},
                "launches": self.launches}

    @classmethod
    def from_json(cls, d: dict) -> Record:
        """The record ``to_json`` wrote."""
        return cls({int(k): v for k, v in d["blocks"].items()}, {int(k): v for k, v in d["directions"].items()},
                   d["launches"])


class Launch(Record):
    """One launch's record, made by ``Collector.start``; the launcher calls
    ``enter`` at block starts and ``branch`` after conditional branches."""

    def enter(self, pc: int, mask: int) -> None:
        """Waves entered the block at ``pc`` with EXEC populations ``mask``."""
        self.blocks[pc] = self.blocks.get(pc, 0) | mask

    def branch(self, pc: int, taken: bool) -> None:
        """A wave's conditional branch at ``pc`` went ``taken`` (else fell through)."""
        self.directions[pc] = self.directions.get(pc, 0) | (TAKEN if taken else NOT_TAKEN)


def config_key(config: dict) -> str:
    """The collector's key of a kernel configuration (``Kernel.config``), such as
    ``gfx950 topk=16 splits=2 xcds=0 layout=token_rows`` (a mutant appended)."""
    head = config.get("arch", "?")
    rest = " ".join(f"{k}={v}" for k, v in config.items() if k != "arch" and not (k == "mutant" and v is None))
    return f"{head} {rest}".strip()


class Collector:
    """The records of this process's launches by configuration key
    (``config_key``): ``records`` key -> ``(config, Record)``. ``enabled``:
    whether launches record at all."""

    def __init__(self, enabled: bool = False):
        self.enabled = enabled
        self.records: dict[str, tuple[dict, Record]] = {}

    def reset(self) -> None:
        """Forget every record (``enabled`` stays)."""
        self.records = {}

    def start(self) -> Launch | None:
        """A new launch's record, or None when recording is off."""
        return Launch() if self.enabled else None

    def finish(self, config: dict, launch: Launch) -> None:
        """Add a finished launch's record under ``config``."""
        launch.launches = 1
        key = config_key(config)
        if key not in self.records:
            self.records[key] = (dict(config), Record())
        self.records[key][1].merge(launch)

    def to_json(self) -> dict:
        """``{key: {"config": config, "record": Record.to_json()}}``, JSON-able (a
        worker process returns it; ``merge_json`` adds it to another collector)."""
        return {k: {"config": c, "record": r.to_json()} for k, (c, r) in sorted(self.records.items())}

    def merge_json(self, d: dict) -> None:
        """Add records that ``to_json`` wrote (another process's)."""
        for key, entry in d.items():
            if key not in self.records:
                self.records[key] = (dict(entry["config"]), Record())
            self.records[key][1].merge(Record.from_json(entry["record"]))


COLLECTOR = Collector(enabled=os.environ.get("NVFP4_SIM_COVERAGE") == "1")


def _exec_effect(ins) -> str | None:
    """How ``ins`` changes EXEC, for ``argued_exec``: ``"guard"`` (``s_and_saveexec_b64``:
    EXEC &= a lane condition, the old EXEC saved), ``"restore"`` (``s_or_b64 exec, exec,
    ...``: the saved lanes back), None (EXEC untouched); ValueError for any other
    write of EXEC, which the argument does not model."""
    parts = ins.text.strip().split(None, 1)
    ops = [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []
    if ins.base == "s_and_saveexec_b64":
        return "guard"
    if ins.base == "s_or_b64" and ops[:2] == ["exec", "exec"]:
        return "restore"
    if "saveexec" in ins.base or ins.base.startswith("v_cmpx") or (ops and ops[0] in ("exec", "exec_lo", "exec_hi")):
        raise ValueError(f"{ins.where()}: a write of EXEC the argument does not model")
    return None


def argued_exec(program: Program, flow: Flow, excluded=frozenset()) -> dict[int, int]:
    """The EXEC populations (``FULL | PARTIAL | NONE`` mask) the waves may enter
    each block with, argued from the code alone, by block start; a block absent
    is one no wave enters. ``excluded``: ``(branch index, "taken" | "not_taken")``
    directions argued never taken (``coverage_exceptions``), whose edges the
    walk does not follow.

    The argument: waves start full (the launcher's workgroups are whole
    waves); EXEC changes only at an ``s_and_saveexec_b64`` (a lane guard: EXEC
    &= a lane condition, one level deeper) and at the ``s_or_b64 exec, exec,
    ...`` that ends it (one level up); ``_exec_effect`` refuses any other
    write. A wave entering a block at level 0 is ``FULL``; inside a guard it
    is ``PARTIAL`` (the kernel's guards keep one lane of a full wave:
    ``lane == 0`` and the atomic's election of it); through an
    ``s_cbranch_execz`` taken it is ``NONE`` until the guard ends. The walk
    follows every direction not ``excluded`` from block 0 to a fixed point."""
    n = len(program.instrs)
    seen: dict[int, set[tuple[int, bool]]] = {}
    todo = [(0, (0, False))]
    while todo:
        start, state = todo.pop()
        if state in seen.setdefault(start, set()):
            continue
        seen[start].add(state)
        depth, empty = state
        pc = start
        while pc < n:
            ins = program.instrs[pc]
            effect = _exec_effect(ins)
            if effect == "guard":
                depth += 1
            elif effect == "restore":
                if depth == 0:
                    raise ValueError(f"{ins.where()}: restores EXEC outside any guard")
                depth, empty = depth - 1, False
            if ins.base == "s_endpgm":
                break
            to = flow.target[pc]
            if flow.is_cond[pc]:
                assert to is not None  # a conditional branch has a target (program.parse_program)
                if (pc, "taken") not in excluded:
                    todo.append((to, (depth, empty or ins.base == "s_cbranch_execz")))
                if (pc, "not_taken") not in excluded:
                    todo.append((pc + 1, (depth, empty or ins.base == "s_cbranch_execnz")))
                break
            if ins.base == "s_branch" and to is not None:
                todo.append((to, (depth, empty)))
                break
            pc += 1
            if pc < n and flow.is_start[pc]:
                todo.append((pc, (depth, empty)))
                break
    return {s: _population(states) for s, states in sorted(seen.items())}


def _population(states: set[tuple[int, bool]]) -> int:
    """The ``FULL | PARTIAL | NONE`` mask of ``(guard depth, EXEC empty)`` states."""
    out = 0
    for depth, empty in states:
        out |= NONE if empty else FULL if depth == 0 else PARTIAL
    return out
