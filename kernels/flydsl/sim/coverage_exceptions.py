"""The conditional-branch directions of the decode kernel that the golden
catalog and the generated problems leave unreached, each with its reason
(``coverage``), per kernel configuration (``Kernel.config``: target, TOPK
width, splits, XCDs, layout).

``UNREACHABLE``: directions no valid problem reaches, argued from the kernel
(``kernels/flydsl/decode.py``) and its compiled code. ``CATALOG_GAPS``:
directions a valid problem reaches but no golden case does on the listed
configurations (each names what reaches it); a golden case that closes one
removes it from the list.

The rule (``tests/test_sim_coverage.py``), on either target, configuration
by configuration: the golden cases leave unreached exactly the directions
``UNREACHABLE`` and ``CATALOG_GAPS`` name for it (CI: the TOPK 33 and 64
cases; ``-m thorough``: the full catalog); generated problems reach no
``UNREACHABLE`` direction; and (``-m thorough``) the union of the golden
cases and ``GENERATED`` generated problems launches every bundled
configuration and leaves unreached exactly the directions ``UNREACHABLE``
names for it (``argued_unreached``), and exactly the blocks no wave enters
without them (``coverage.argued_exec``). A block is not listed: it is
unreached only when every direction into it is. Generated problems are at
most TOPK 8 (the interpreted limits, compiled width 1 or 16), so they never
launch TOPK 33 or 64, and at TOPK 16 their rows hold at most 8 valid slots:
the catalog's cases launch those configurations and paths.

A direction is named by its branch's ordinal among the kernel's conditional
branches (``coverage.Flow.conds``; the compiles of every configuration share
their order), with what the branch must look like there (``mnemonic``; the
instruction before it, ``before``, where the argument rests on it; whether it
jumps backwards, ``backward``), so that a recompile that moves the branches
fails ``check_shape`` instead of matching another branch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .coverage import Flow
from .program import Program


@dataclass(frozen=True)
class Unreached:
    """One direction left unreached: conditional branch number ``branch``
    (``Flow.conds`` order), ``direction`` (``taken`` or ``not_taken``), on the
    configurations (``Kernel.config`` dicts) where ``applies`` holds (``when``
    says which in words); ``reason`` why."""

    branch: int
    direction: str
    mnemonic: str
    before: str | None
    backward: bool
    applies: Callable[[dict], bool]
    when: str
    reason: str

    def check_shape(self, program: Program, flow: Flow) -> None:
        """Raise ValueError naming the difference where ``program``'s branch
        ``branch`` is not the one this entry argues about."""
        if self.branch >= len(flow.conds):
            raise ValueError(f"{program.name}: no conditional branch #{self.branch} ({len(flow.conds)} in all)")
        pc = flow.conds[self.branch]
        ins, prev = program.instrs[pc], program.instrs[pc - 1]
        target = flow.target[pc]
        assert target is not None  # a conditional branch has a target (program.parse_program)
        if (ins.base != self.mnemonic or (self.before is not None and prev.base != self.before)
                or (target < pc) != self.backward):
            raise ValueError(f"{program.name}: conditional branch #{self.branch} is {ins.where()} after "
                             f"{prev.text.strip()!r}, jumping to #{target}; the entry expects {self.mnemonic} after "
                             f"{self.before}, {'backward' if self.backward else 'forward'}")


def _multi_split(c: dict) -> bool:
    return c["splits"] > 1


def _in(*configs: tuple[int, int, int, str]) -> Callable[[dict], bool]:
    """Holds for the ``(topk, splits, xcds, layout)`` listed, on every target."""
    return lambda c: (c["topk"], c["splits"], c["xcds"], c["layout"]) in configs


UNREACHABLE = (
    Unreached(1, "taken", "s_cbranch_scc1", None, True, lambda c: c["topk"] <= 2 * c["splits"],
              "TOPK <= 2 * splits",
              "the back edge of the block loop: each iteration attends two slots (blk_a, blk_b), so the loop "
              "repeats only when the split's chunk holds 3 or more valid slots; the chunk is ceil(n_v / SPLITS) "
              "of the n_v <= TOPK valid slots (decode.py: chunk = (n_v + SPLITS - 1) // SPLITS), at most 2 when "
              "TOPK <= 2 * SPLITS (splits 1: the chunk is all n_v <= TOPK slots)"),
    Unreached(4, "taken", "s_cbranch_execz", "s_and_saveexec_b64", False, _multi_split, "splits > 1",
              "the ticket's lane-0 guard: EXEC becomes EXEC & (v0 & 63 == 0) (v_cmp_eq_u32 ... 0, v137; "
              "v137 = v0 & 63), empty only if the wave's lane 0 is inactive, but every wave of the 256-item "
              "workgroup is full here (the coverage records show this block entered with a full EXEC only)"),
    Unreached(5, "taken", "s_cbranch_execz", "s_and_saveexec_b64", False, _multi_split, "splits > 1",
              "the atomic optimiser's election: EXEC & (mbcnt(EXEC) == 0), the lowest active lane, is empty only "
              "when EXEC is, and branch #4 falling through means EXEC is not"),
    Unreached(7, "taken", "s_cbranch_execz", "s_and_saveexec_b64", True, _multi_split, "splits > 1",
              "the last split's lane-0 guard, the mask of branch #4 (v0 & 63 == 0) on a full wave: never empty"),
)

CATALOG_GAPS = (
    Unreached(0, "taken", "s_cbranch_scc0", "v_readlane_b32", False,
              _in((16, 1, 0, "planar"), (16, 4, 0, "planar")),
              "the xcds=0 launches of the planar TOPK-16 cases at 1 and 4 splits",
              "a workgroup whose split chunk holds no valid slot (vmask == 0: every slot -1 or past the "
              "row's position) skips the block loop; the same cases' xcds=8 launches (the padded grid's rows) "
              "and the generated problems reach it, these configurations' golden problems have no such row"),
    Unreached(1, "taken", "s_cbranch_scc1", None, True,
              _in((16, 2, 0, "planar"), (16, 2, 8, "planar")),
              "TOPK 16, splits 2, planar",
              "the block loop's back edge needs a split chunk of 3 or more valid slots (n_v > 2 * splits, "
              "see UNREACHABLE); the golden problems of these configurations have at most 2 per chunk, the "
              "generated problems reach it"),
)


# The generated problems of the thorough check, per target: with the full
# catalog they leave unreached only ``UNREACHABLE`` (``check --no-golden
# --examples N --seed S`` draws the same).
GENERATED, GENERATED_SEED = 300, 1


def argued_unreached(config: dict, program: Program, flow: Flow) -> dict[tuple[int, str], Unreached]:
    """The entries of ``UNREACHABLE`` that apply to ``config``, as
    ``expected_unreached``'s: what golden and generated problems together
    leave unreached there."""
    return _applying(UNREACHABLE, config, program, flow)


def expected_unreached(config: dict, program: Program, flow: Flow) -> dict[tuple[int, str], Unreached]:
    """The entries of ``UNREACHABLE`` and ``CATALOG_GAPS`` that apply to ``config`` (a
    ``Kernel.config``), by ``(branch index in the program, direction)``: what the
    golden cases leave unreached there; raises ValueError where an entry's
    branch is not the one it argues about (``Unreached.check_shape``)."""
    return _applying(UNREACHABLE + CATALOG_GAPS, config, program, flow)


def _applying(entries, config: dict, program: Program, flow: Flow) -> dict[tuple[int, str], Unreached]:
    out: dict[tuple[int, str], Unreached] = {}
    for entry in entries:
        if entry.applies(config):
            entry.check_shape(program, flow)
            out[(flow.conds[entry.branch], entry.direction)] = entry
    return out
