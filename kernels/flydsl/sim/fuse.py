"""Fused stretches: straight-line runs of instructions executed by one call.

A batched launch (``launch.Kernel.run_batched``) executes, step by step, the
core of each instruction for the waves at the lowest pc. Where those waves
have a full EXEC and the instructions from pc on are ones whose cores the
step loop would call one after another anyway (no control flow, no EXEC
write, no memory access), one generated function executes a whole stretch
``[start, stop)`` of them: the same cores in the same order on the same
view, except that the forms with an ``Inline`` statement (lane-wise integer
and float ops, a statement per VGPR written, ``wave.inline_of``) are written
out as their arithmetic on copies of the registers held in local variables
(``_Writer``), without a reader or op call each. The text executed is the
one the cores are made from (``Source`` reads, the ops' texts), so the
results are the cores' bit for bit; the step loop counts the stretch's
instructions as the steps they are. Where a core leaves its instruction to each wave's handler
(returns False), the step loop takes over from there. A stretch's function
is made at its ``WARMUP``-th use.

MFMAs of a stretch run as groups (``_groups``, ``wave.grouped``): each
member's sources are read at its own place (``take``), and all of them are
computed at the last member's place in one call (``run``), their products
in one matrix product, a chain's accumulations (each C the one before's D)
one after another; nothing between may name a member's result. One call over
a group costs about what two or three single MFMAs did.

A stretch runs only where the view's registers are arrays: evenly spaced
rows (``wave.BatchView`` makes those a view of the files) or a scattered
run's gathered copy (``BatchView.gathered``). It binds each SGPR once, as a
view of those arrays, which the scalar cores' writes reach; the copies that
``wave.Rows`` makes at each access would not see them.
"""

from __future__ import annotations

import ast
import re
from types import CodeType
from typing import Callable

import numpy as np

from .program import Instr
from .wave import (
    BATCHED,
    Core,
    GroupCore,
    Inline,
    Memo,
    form_key,
    grouping_of,
    inline_of,
    reg_text,
    vgprs_named,
    vgprs_written,
)

# Scalar memory instructions (their cores read memory, or may leave it to the handlers).
_SCALAR_MEMORY = ("s_load", "s_buffer_load", "s_store", "s_buffer_store", "s_atomic", "s_dcache", "s_memtime",
                  "s_memrealtime")

# A stretch: ``fn(view)`` returning None when every instruction ran, else the
# index in the stretch of the one whose core left it to the handlers (those
# before it ran, it did not).
StretchFn = Callable[[object], "int | None"]


# A stretch's function is made at its WARMUP-th use (``Stretches.warmup``): a
# stretch a kernel runs once (most of a short launch's) is left to the steps,
# one it runs again (a loop's, or every launch's) is made.
WARMUP = 2


def touches_memory(ins: Instr) -> bool:
    """Whether ``ins`` is a memory access (a load, store or atomic of global
    memory, LDS or the scalar cache): never fused."""
    dec = BATCHED.get(ins.base) or BATCHED.get(ins.mnemonic)
    return (dec is not None and dec.__module__.endswith(".ops.memory")) or ins.base.startswith(_SCALAR_MEMORY)


class Stretches:
    """The fusable instructions of a program and their stretches, generated
    when first asked for. ``fusable[pc]``: ``cores[pc]`` exists and the
    instruction is neither control flow nor an EXEC write nor a memory access;
    ``end[pc]``: the first pc from ``pc`` on that is not fusable (``pc`` itself
    where it is not)."""

    def __init__(self, instrs: list[Instr], cores: list[Core | None], exec_free: list[bool], control: list[bool],
                 writes_exec: list[bool]):
        n = len(instrs)
        self.instrs, self.cores = instrs, cores
        self.fusable = [cores[i] is not None and not control[i] and not writes_exec[i]
                        and not touches_memory(instrs[i]) for i in range(n)]
        self.end = [0] * (n + 1)
        self.end[n] = n
        for i in range(n - 1, -1, -1):
            self.end[i] = self.end[i + 1] if self.fusable[i] else i
        # Instructions needing a full EXEC before each pc: a stretch needs one where it holds any.
        self._needs = [0] * (n + 1)
        for i in range(n):
            self._needs[i + 1] = self._needs[i] + (not exec_free[i])
        self._fns: dict[tuple[int, int], StretchFn] = {}
        self._uses: dict[tuple[int, int], int] = {}
        # Uses of a stretch before its function is made: making one costs about
        # what ten executions fused save over the steps (most of it Python's
        # compile), so one a kernel runs only once is not made.
        self.warmup = WARMUP

    def needs_full(self, start: int, stop: int) -> bool:
        """Whether any instruction of ``[start, stop)`` needs a full EXEC (is not ``exec_free``)."""
        return self._needs[stop] > self._needs[start]

    def get(self, start: int, stop: int) -> StretchFn | None:
        """The function executing the fusable instructions ``[start, stop)``, made
        at its ``warmup``-th use (None before: the caller runs the stretch's
        steps itself)."""
        key = (start, stop)
        fn = self._fns.get(key)
        if fn is None:
            uses = self._uses[key] = self._uses.get(key, 0) + 1
            if uses < self.warmup:
                return None
            fn = self._fns[key] = self._make(start, stop)
        return fn

    def source(self, start: int, stop: int) -> tuple[str, dict]:
        """The Python text of the stretch ``[start, stop)``'s function ``stretch(w)`` and its globals."""
        instrs = self.instrs[start:stop]
        key = tuple((form_key(ins), inline_of(ins) is not None) for ins in instrs)
        hit = _SOURCES.get(key)
        if hit is None:
            hit = _SOURCES.put(key, _Writer(instrs).text())
        text, shared, calls = hit
        return text, {**shared, **{name: self._core(start, places) for name, places in calls.items()}}

    def _core(self, start: int, places: tuple[int, ...]) -> Core | GroupCore:
        """The core a stretch from ``start`` calls for its instructions at ``places``:
        one instruction's own, or a group's (``wave.grouped``)."""
        if len(places) == 1:
            core = self.cores[start + places[0]]
            assert core is not None  # a fusable instruction's
            return core
        instrs = tuple(self.instrs[start + k] for k in places)
        grouping = grouping_of(instrs[0])
        assert grouping is not None  # _groups groups only those with one
        return grouping.make(instrs)

    def _make(self, start: int, stop: int) -> StretchFn:
        text, glob = self.source(start, stop)
        exec(_compiled(text, f"<stretch {start}:{stop}>"), glob)
        return glob["stretch"]


# Stretch texts, their globals but the cores, and the cores they call (by name,
# the places in the stretch of the instructions each executes: one, or a
# group's), by the instructions' forms and whether each is inlined: the text
# is written from those alone (an ``Inline`` is made from its instruction's
# form, ``wave.inline_of``; a core called is named by its place, with the
# VGPRs its operands name; groups are found from the forms, ``_groups``), and
# so are the constants it names.
# Writing the text was most of making a stretch once its code was cached (2.2
# of 3.6 s for gfx942's golden catalog). 2,048 stretches hold a target's.
_SOURCES = Memo(2048)

# Stretch code compiled by text (most of making a stretch was Python's compile):
# the kernels of a target share most of their stretches (the same instructions
# at the same registers; about 40% of the texts made are new in a few of a
# target's configurations). The text names its constants and cores, whose
# values are each kernel's own globals; 2,048 texts hold a target's (about
# 13 KB each on average).
_CODE = Memo(2048)


def _compiled(text: str, filename: str) -> CodeType:
    """``compile(text, filename, "exec")``, compiled once per text in a process."""
    code = _CODE.get(text)
    if code is None:
        code = _CODE.put(text, compile(text, filename, "exec"))
    return _renamed(code, filename)


def _renamed(code: CodeType, filename: str) -> CodeType:
    """``code`` and the code objects it holds (the function's) named ``filename``."""
    if code.co_filename == filename:
        return code
    consts = tuple(_renamed(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


class _Writer:
    """The text of one stretch's function. A VGPR an inlined instruction uses is
    a local variable, a contiguous copy of its lanes (``[n, 64]``: numpy's
    operations on those cost a fraction of the same on a view into the files,
    whose waves lie a whole file apart), loaded at its first use and written
    back before a core reads it and at the end (``dirty``: changed since);
    after a core, the copies of the VGPRs it names are loaded again. An SGPR
    is a view (``[n, 1]``), which the scalar cores' writes reach. A source
    that views a register as another dtype is bound once (``_view``). Constants
    are 0-d arrays (numpy's operations with those cost less than with its
    scalars, and compute the same: NEP 50 types both alike), and an inlined
    instruction's subexpressions of constants alone are computed once, here
    (``_folded``). A group of instructions (``_groups``) is one call, at its
    last member's place."""

    def __init__(self, instrs: list[Instr]):
        self.instrs = instrs
        self.lines = ["def stretch(w):", "    vb = w.vb", "    sb = w.sb"]
        self.glob: dict = {"np": np}
        # The cores called, by name: the places of the instructions each executes.
        self.calls: dict[str, tuple[int, ...]] = {}
        self.consts: set[str] = set()
        self.vloaded: set[int] = set()
        self.dirty: set[int] = set()
        self.sbound: set[int] = set()
        self.views: dict[str, str] = {}

    def text(self) -> tuple[str, dict, dict[str, tuple[int, ...]]]:
        """The stretch's text, its globals but the cores, and the cores it calls
        (``calls``)."""
        group_of = {k: group for group in _groups(self.instrs) for k in group}
        # A group whose last member is ahead: its core's name and the members taken.
        waiting: tuple[str, int] | None = None
        for k, ins in enumerate(self.instrs):
            group = group_of.get(k)
            if group is not None:
                name = f"{_CORE}{group[-1]}"
                if k == group[0]:
                    self.calls[name] = group
                # The member's sources as they are at its place (``wave.GroupCore``).
                self._flush(sorted(vgprs_named(ins) & self.dirty))
                self._emit(f"{name}.take({group.index(k)}, w)")
                waiting = (name, group.index(k) + 1)
                if k == group[-1]:
                    self._emit(f"{name}.run(w, {len(group)})")
                    self._reload(set().union(*(vgprs_written(self.instrs[j]) for j in group)))
                    waiting = None
                continue
            spec = inline_of(ins)
            if spec is not None and all(self._merge(part.namespace) for part in spec.parts()):
                for part in spec.parts():
                    self._inline(part)
            else:
                self._call(k, waiting)
        self._flush(sorted(self.dirty))
        self.lines.append("    return None")
        return "\n".join(self.lines) + "\n", self.glob, self.calls

    def _emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def _const(self, value) -> str:
        name = f"_fz_k{len(self.consts)}"
        self.consts.add(name)
        self.glob[name] = np.asarray(value)
        return name

    def _reg(self, reg: tuple[str, int]) -> str:
        kind, i = reg
        name = f"{kind}{i}"
        if kind == "v" and i not in self.vloaded:
            self.vloaded.add(i)
            self._emit(f"{name} = {reg_text(reg)}.copy()")
        elif kind == "s" and i not in self.sbound:
            self.sbound.add(i)
            self._emit(f"{name} = {reg_text(reg)}")
        return name

    def _view(self, text: str) -> str:
        """The name of the view ``text`` of a register, bound at its first use:
        the copies are changed in place only (and an SGPR is a view of the
        files), so a view of one stays current to the end of the stretch."""
        name = self.views.get(text)
        if name is None:
            name = self.views[text] = f"_fz_w{len(self.views)}"
            self._emit(f"{name} = {text}")
        return name

    def _inline(self, spec: Inline) -> None:
        args: dict[str, str] = {}
        consts: list = []
        for j, src in enumerate(spec.sources):
            if src.reg is None:
                # A constant (``{k0}``): folded with the op's text.
                consts.append(src.consts[0])
                continue
            text = src.text(self._reg(src.reg), [self._const(c) for c in src.consts])
            if not text.isidentifier():
                if src.view:
                    text = self._view(text)
                else:
                    self._emit(f"_t{j} = {text}")
                    text = f"_t{j}"
            args[f"__{'ABC'[j]}"] = text
        dest = self._reg(("v", spec.dest))
        text, values = _folded(spec, tuple(src.reg is None for src in spec.sources), consts)
        names = {**args, "__O": dest, **{f"__K{i}": self._const(v) for i, v in enumerate(values)}}
        text = _PLACEHOLDER.sub(lambda m: names[m.group(0)], text)
        self._emit(text if "{out}" in spec.expr else f"{dest}[...] = {text}")
        self.dirty.add(spec.dest)

    def _call(self, k: int, waiting: tuple[str, int] | None) -> None:
        """A call of the core of the instruction at place ``k``, after the
        members taken so far of a group ending later (``waiting``: its core's
        name and their count): where this core declines, those run before the
        stretch returns."""
        ins = self.instrs[k]
        self._flush(sorted(vgprs_named(ins) & self.dirty))
        name = f"{_CORE}{k}"
        self.calls[name] = (k,)
        self._emit(f"if {name}(w) is False:")
        rest = sorted(self.dirty)
        if rest:
            # The core changed nothing; the copies changed since their load go back.
            self._emit(f"    vb[:, {rest}] = np.stack(({', '.join(f'v{i}' for i in rest)},), 1)")
        if waiting is not None:
            # The stretch stops before this instruction: the members of a group
            # taken before it run now (nothing between has named their results).
            self._emit(f"    {waiting[0]}.run(w, {waiting[1]})")
        self._emit(f"    return {k}")
        self._reload(set(vgprs_written(ins)))

    def _reload(self, written: set[int]) -> None:
        # Only the VGPRs a core writes change (``vgprs_written``; ``tests/test_flydsl_sim_fuse.py``
        # checks every core of the compiled kernels for that). The copies of those it
        # only read are still current.
        for i in sorted(written & self.vloaded):
            self._emit(f"v{i}[...] = vb[:, {i}]")

    def _flush(self, regs: list[int]) -> None:
        for i in regs:
            self._emit(f"vb[:, {i}] = v{i}")
        self.dirty.difference_update(regs)

    def _merge(self, namespace: dict) -> bool:
        """Add ``namespace`` to the stretch's globals; False where one of its
        names means something else there (the instruction's core is called instead)."""
        for key, value in namespace.items():
            if key in self.glob and self.glob[key] is not value:
                return False
        self.glob.update(namespace)
        return True


def _groups(instrs: list[Instr]) -> list[tuple[int, ...]]:
    """The groups of a stretch's instructions (places, ascending; two or more
    each) that its function runs as one call at the last member's place
    (``wave.grouped``), each member's sources read at its own place:
    instructions, none inlined, whose mnemonic's ``Grouping`` fits each to
    the ones before it, where no instruction between a member and the last
    one names a VGPR the member writes (it would see that VGPR before the
    member's result, or have its own write overwritten by it). Greedy, in
    order: an instruction that does not fit, or names such a VGPR, closes
    the group so far."""
    groups: list[tuple[int, ...]] = []
    group: tuple[int, ...] = ()
    written: set[int] = set()  # what the group's members write
    for k, ins in enumerate(instrs):
        regs = vgprs_named(ins)
        grouping = grouping_of(ins) if inline_of(ins) is None else None
        if group and grouping is not None and grouping_of(instrs[group[0]]) is grouping \
                and grouping.fits(tuple(instrs[j] for j in group), ins):
            group += (k,)
            written |= set(vgprs_written(ins))
            continue
        if group and (grouping is not None or regs & written):
            if len(group) > 1:
                groups.append(group)
            group, written = (), set()
        if grouping is not None:
            group, written = (k,), set(vgprs_written(ins))
    if len(group) > 1:
        groups.append(group)
    return groups


# The globals naming the cores a stretch calls: ``_CORE`` and the place of the
# call (a group's last member's).
_CORE = "_fz_core"
_PLACEHOLDER = re.compile(r"\b__[ABCOK]\d*\b")
_FOLDS: dict[tuple, tuple[str, list]] = {}


def _folded(spec: Inline, const: tuple[bool, ...], values: list) -> tuple[str, list]:
    """The text of ``spec``'s op for sources that are registers (``__A``,
    ``__B``, ``__C``, by position) or constants (``const``; their ``values`` in
    order), destination ``__O``: each largest subexpression that is a call
    or an operation on constants alone (and ``np``'s and the ``pure``
    functions) replaced by a constant holding its value where that is a numpy
    scalar or array (``__K0``, ``__K1``..; returned in order). Made once per
    op, constants and shape of its sources."""
    key = (spec.expr, const, tuple((v.dtype.str, v.tobytes()) for v in values), spec.pure)
    hit = _FOLDS.get(key)
    if hit is not None:
        return hit
    glob = {**spec.namespace}
    known = set(spec.pure) | {"np"}
    names: dict[str, str] = {}
    vals = iter(values)
    for j, is_const in enumerate(const):
        if is_const:
            name = f"__k{j}"
            glob[name] = np.asarray(next(vals))
            known.add(name)
        else:
            name = f"__{'ABC'[j]}"
        names["abc"[j]] = name
    folded: list = []

    def constant(node: ast.AST) -> bool:
        return all(n.id in known for n in ast.walk(node) if isinstance(n, ast.Name)) and \
            not any(isinstance(n, ast.keyword) for n in ast.walk(node))

    class Fold(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            if isinstance(node, (ast.Name, ast.Call, ast.BinOp, ast.UnaryOp)) and constant(node):
                with np.errstate(all="ignore"):
                    value = eval(compile(ast.Expression(node), "<fold>", "eval"), glob)
                if isinstance(value, (np.generic, np.ndarray)):
                    folded.append(np.asarray(value))
                    return ast.Name(f"__K{len(folded) - 1}", ast.Load())
            return self.generic_visit(node)

    text = spec.expr.format(out=", out=__O", **names)
    hit = _FOLDS[key] = (ast.unparse(Fold().visit(ast.parse(text, mode="eval"))), folded)
    return hit
