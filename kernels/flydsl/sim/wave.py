"""One wave64's architectural state, operand access, and the instruction registry.

Register files: the scalar file, 128 SGPRs (``vcc`` at 106/107, ``m0`` 124,
``exec`` 126/127, the ISA's operand numbering) then ``SCC`` (column
``SCC``, 0 or 1), and 512 vector registers of 64 lanes (``v0..v255``, then
``a0..a255``), all uint32. Handlers are registered per
mnemonic without its encoding suffix (``@op("v_add_f32")`` serves ``_e32``,
``_e64`` and ``_sdwa``) and read and write operands through the ``Wave``
methods here, which apply what the encoding says: EXEC (inactive lanes keep
their value), SDWA operand and destination selects, the floating-point
source modifiers ``neg``/``abs`` and ``clamp``.

Execution goes through ``decode``: each instruction of a program is decoded
once into a closure ``fn(wave)``. For the forms the kernel executes most (the
integer, float, f16, packed, compare, MFMA, load and LDS families register
``batched`` decoders) a core binds its source readers (register views, SDWA
source selects, constants as arrays) and destination once, and executes the
instruction for any number of waves with a full EXEC at once (``BatchView``;
a single wave is one); on a partial EXEC, and for every other form, the
handler runs, so the handlers stay the one statement of each instruction's
meaning and the unit tests, which execute through ``decode``, check both.
Instructions that ignore EXEC, or read it per wave (the scalar family, the
lane reads), register cores that run for any EXEC (``exec_free``); those are
stated once, as their cores (``core_op``: a wave's handler is its core over
that wave).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Protocol

import numpy as np

from .program import AGPR_BASE, NUM_SGPRS, Instr, Operand

LANES = 64
SCC = NUM_SGPRS  # SCC's column in the scalar file, after the SGPRs
_LANE_BITS = np.arange(LANES, dtype=np.uint64)
_BIT_WEIGHTS = np.uint64(1) << _LANE_BITS


class SimError(RuntimeError):
    """The simulated kernel did something the simulator refuses to guess about."""


class UnknownInstruction(SimError):
    """An instruction without a handler; names its mnemonic and place."""


class MemoryFault(SimError):
    """An access outside every allocation (or outside LDS); names the address,
    the instruction and the allocation nearest to it."""


Handler = Callable[["Wave", Instr], None]
OPS: dict[str, Handler] = {}


def op(*names: str) -> Callable[[Handler], Handler]:
    """Register the decorated handler for each mnemonic in ``names`` (without
    the encoding suffix). A name registered twice is a programming error."""
    def deco(fn: Handler) -> Handler:
        for n in names:
            if n in OPS:
                raise ValueError(f"{n} registered twice")
            OPS[n] = fn
        return fn
    return deco


SDWA_MODS = frozenset({"dst_sel", "dst_unused", "src0_sel", "src1_sel"})


def check_form(ins: Instr, nops: int, mods: frozenset, sdwa: bool, family: str) -> None:
    """SimError for an encoding (DPP; SDWA unless ``sdwa``), operand count (not
    ``nops``) or modifier (outside ``mods``, plus the SDWA selects) that a
    handler of ``family`` does not implement."""
    name = ins.mnemonic
    if ins.enc == "dpp":
        raise SimError(f"{name}: DPP is not implemented for {family} at {ins.where()}")
    if ins.enc == "sdwa" and not sdwa:
        raise SimError(f"{name}: the SDWA form is not implemented at {ins.where()}")
    if len(ins.ops) != nops:
        raise SimError(f"{name}: expected {nops} operands, got {len(ins.ops)} at {ins.where()}")
    extra = set(ins.mods) - mods - (SDWA_MODS if ins.enc == "sdwa" else frozenset())
    if extra:
        raise SimError(f"{name}: modifier {', '.join(sorted(extra))} not implemented at {ins.where()}")


# Batched decoders: for a mnemonic, ``fn(ins)`` returns a closure ``core(view)``
# that executes ``ins`` for every wave of ``view`` at once, all with a full EXEC
# (``view.vb`` uint32 ``[n, R, 64]``, ``view.sb`` uint32 ``[n, 129]``, SGPRs and
# SCC: a ``Wave``'s own registers as n = 1, or a run of waves of a launch), or
# None for a form it does not bind. Lane-wise operations without scalar results
# (no SCC or VCC) have one, so that n waves at once mean the same as each wave
# alone, and so do the scalar ALU (each wave's results in its own row), and
# loads of memory no workgroup of the launch has written. A core returns
# False, having changed nothing, where it leaves the instruction to each
# wave's own closure (a load of written memory, out of range, a fault). An
# ``exec_free`` decoder's cores run whatever EXEC holds (the instructions that
# ignore it: the scalar family).
Core = Callable[["Wave | BatchView"], "bool | None"]
BatchDecoder = Callable[[Instr], "Core | None"]
BATCHED: dict[str, BatchDecoder] = {}
EXEC_FREE: set[str] = set()
# The mnemonics whose cores write every VGPR operand (a swap's two), not only the first.
WRITE_ALL: set[str] = set()


def batched(*names: str, exec_free: bool = False, writes_all: bool = False
            ) -> Callable[[BatchDecoder], BatchDecoder]:
    """Register the decorated batched decoder for each mnemonic in ``names``
    (without the encoding suffix); its handler must be registered too (``op``).
    ``exec_free``: its cores run for any EXEC, not only a full one;
    ``writes_all``: they write every VGPR operand (``vgprs_written``)."""
    def deco(fn: BatchDecoder) -> BatchDecoder:
        for n in names:
            if n in BATCHED:
                raise ValueError(f"batched decoder for {n} registered twice")
            BATCHED[n] = fn
            if exec_free:
                EXEC_FREE.add(n)
            if writes_all:
                WRITE_ALL.add(n)
        return fn
    return deco


def vgprs_named(ins: Instr) -> set[int]:
    """The VGPRs ``ins``'s operands name (all it may read or write)."""
    return {o.index + j for o in ins.ops if o.kind == "v" for j in range(o.count)}


def vgprs_written(ins: Instr) -> list[int]:
    """The VGPRs a batched core of ``ins`` may write: its first operand's (where
    that is a VGPR), or every VGPR operand's for a ``writes_all`` decoder's."""
    ops = ins.ops if (ins.base if ins.base in BATCHED else ins.mnemonic) in WRITE_ALL else ins.ops[:1]
    return sorted({o.index + j for o in ops if o.kind == "v" for j in range(o.count)})


class Grouping(NamedTuple):
    """How instructions of one mnemonic run several at once (``grouped``):
    ``make(instrs)``, the core of the instructions ``instrs`` (a tuple), and
    ``fits(group, ins)``, whether ``ins`` may join the tuple ``group``."""
    make: Callable[[tuple[Instr, ...]], "GroupCore"]
    fits: Callable[[tuple[Instr, ...], Instr], bool]


class GroupCore(Protocol):
    """A group's core (``grouped``): ``core(view)`` executes all its
    instructions; ``take(j, view)`` reads instruction ``j``'s sources (every
    earlier one's taken first), and ``run(view, count)`` executes the first
    ``count`` taken and writes their results."""
    def __call__(self, view: "BatchView", /) -> None: ...

    def take(self, j: int, view: "BatchView", /) -> None: ...

    def run(self, view: "BatchView", count: int, /) -> None: ...


# By mnemonic without the encoding suffix (``grouped``).
GROUPED: dict[str, Grouping] = {}


def grouped(*names: str, fits: Callable[[tuple[Instr, ...], Instr], bool]
            ) -> Callable[[Callable[[tuple[Instr, ...]], GroupCore]], Callable[[tuple[Instr, ...]], GroupCore]]:
    """Register the decorated ``make(instrs)`` for each mnemonic in ``names``
    (which must have a batched decoder too) with ``fits``. ``make`` returns
    the ``GroupCore`` of ``instrs`` (each of those mnemonics, with a batched
    core; each but the first fitted to the ones before it, ``fits``): on a
    view with a full EXEC it computes what their cores compute one after
    another, each reading its sources where ``take`` runs, and it never
    leaves them to the handlers. A fused stretch takes each member at its
    place and runs the group at the last one's, as one call (``fuse``): one
    call over ``n * len(instrs)`` items costs a fraction of ``len(instrs)``
    calls over ``n`` waves."""
    def deco(make: Callable[[tuple[Instr, ...]], GroupCore]) -> Callable[[tuple[Instr, ...]], GroupCore]:
        for n in names:
            if n in GROUPED:
                raise ValueError(f"grouping for {n} registered twice")
            GROUPED[n] = Grouping(make, fits)
        return make
    return deco


def grouping_of(ins: Instr) -> Grouping | None:
    """How ``ins``'s mnemonic runs grouped (``grouped``), or None."""
    return GROUPED.get(ins.base) or GROUPED.get(ins.mnemonic)


def core_op(*names: str) -> Callable[[Callable[[Instr], Core]], Callable[[Instr], Core]]:
    """Register the decorated ``build(ins)``, which makes an instruction's core
    (SimError for a form it refuses), as the one statement of the meaning of
    ``names``: batched for any EXEC (``exec_free``), and as each wave's handler
    the same core over that wave (made once per instruction)."""
    def deco(build: Callable[[Instr], Core]) -> Callable[[Instr], Core]:
        def built(ins: Instr) -> Core:
            core = ins.__dict__.get("_core")
            if core is None:
                core = ins.__dict__["_core"] = build(ins)
            return core

        def handler(w: Wave, ins: Instr) -> None:
            built(ins)(w)

        def decoder(ins: Instr) -> Core | None:
            try:
                return built(ins)
            except SimError:
                return None  # the handler raises it when a wave executes the instruction
        op(*names)(handler)
        batched(*names, exec_free=True)(decoder)
        return build
    return deco


class Memo(dict):
    """A process-wide cache of at most ``bound`` entries (``put`` drops the
    oldest first), for what the kernels of a process make alike many times."""

    def __init__(self, bound: int):
        super().__init__()
        self.bound = bound

    def put(self, key, value):
        """Store ``value`` under ``key`` and return it."""
        if len(self) >= self.bound:
            del self[next(iter(self))]
        self[key] = value
        return value


def form_key(ins: Instr) -> tuple:
    """What an instruction's meaning depends on: its mnemonic, operands and
    modifiers (not its place: line, index, branch target), hashable."""
    return ins.mnemonic, tuple(ins.ops), tuple(ins.mods.items())


def decode_batched(ins: Instr) -> Core | None:
    """``core(view)`` executing ``ins`` for every wave of a view whose waves all
    have a full EXEC (any EXEC where ``exec_free(ins)``), or None when no
    batched decoder binds this form."""
    dec = BATCHED.get(ins.base) or BATCHED.get(ins.mnemonic)
    return dec(ins) if dec is not None else None


def exec_free(ins: Instr) -> bool:
    """Whether the cores of ``ins`` run for any EXEC (see ``batched``)."""
    return (ins.base if ins.base in BATCHED else ins.mnemonic) in EXEC_FREE


def decode(ins: Instr) -> Callable[["Wave"], None]:
    """``fn(wave)`` executing ``ins``: its batched core on a full EXEC, or on any
    for an ``exec_free`` one (the handler otherwise, or where the core leaves
    it), else its handler with the instruction bound; UnknownInstruction when
    there is none."""
    return decode_both(ins)[0]


def decode_both(ins: Instr) -> tuple[Callable[["Wave"], None], Core | None]:
    """``(decode(ins), decode_batched(ins))``, the core made once and serving
    both (a launch needs both; decoding twice was half of making a ``Kernel``)."""
    h = handler_for(ins)
    core = decode_batched(ins)
    return _bound(ins, h, core), core


def _bound(ins: Instr, h: Handler, core: Core | None) -> Callable[["Wave"], None]:
    """``decode(ins)``'s function over the handler ``h`` and the core ``core``."""
    if core is not None and exec_free(ins):
        def free(w: Wave, h: Handler = h, ins: Instr = ins, core: Core = core) -> None:
            if core(w) is False:
                h(w, ins)
        return free
    if core is not None:
        def run(w: Wave, h: Handler = h, ins: Instr = ins, core: Core = core) -> None:
            s = w.s
            if not (s[126] == FULL and s[127] == FULL) or core(w) is False:
                h(w, ins)
        return run

    def bound(w: Wave, h: Handler = h, ins: Instr = ins) -> None:
        h(w, ins)
    return bound


FULL = np.uint32(0xFFFFFFFF)


Reader = Callable[["Wave | BatchView"], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Source:
    """A 32-bit source read as Python text, the one statement of it that both
    the batched cores' readers and fused stretches (``fuse``) execute:
    ``expr`` (uint32, or float32 for ``plain_source(as_f32=True)``) over
    ``{r}``, the register (``reg``: ``("v", i)`` VGPR i's lanes ``vb[:, i]``,
    ``[n, 64]``; ``("s", i)`` SGPR i per wave ``sb[:, i, None]``, ``[n, 1]``;
    None for a constant) and ``{k0}``, ``{k1}``.. (``consts``, numpy scalars).
    ``view``: the text is a view of the register (no arithmetic), which
    follows the register's changes in place: a stretch binds it once."""

    expr: str
    reg: tuple[str, int] | None
    consts: tuple = ()
    view: bool = False

    def text(self, reg: str, consts: list[str]) -> str:
        """``expr`` with the register written ``reg`` and the constants ``consts``."""
        return self.expr.format(r=reg, **{f"k{i}": c for i, c in enumerate(consts)})

    def reader(self) -> Reader:
        """``fn(view)`` evaluating the read for the waves of a view."""
        kind = None if self.reg is None else self.reg[0]
        key = (self.expr, kind, len(self.consts))
        make = _READERS.get(key)
        if make is None:
            # One function per text and register kind, making the readers of every
            # register and constant (a closure over them, as cheap to call as any).
            names = [f"k{i}" for i in range(len(self.consts))]
            reg = "" if kind is None else _REG_TEXT[kind].format(w="w.", i="i")
            make = _READERS[key] = eval(f"lambda {', '.join(['i'] + names)}: lambda w: {self.text(reg, names)}",
                                        {"np": np})
        return make(None if self.reg is None else self.reg[1], *self.consts)


# A register as a Source's ``reg`` reads it, over a view's files (``{w}vb``, ``{w}sb``).
_REG_TEXT = {"v": "{w}vb[:, {i}]", "s": "{w}sb[:, {i}, None]"}
# Source.reader's functions by text, register kind and number of constants.
_READERS: dict[tuple[str, str | None, int], Callable] = {}


def reg_text(reg: tuple[str, int], prefix: str = "") -> str:
    """Python text reading ``reg`` (a ``Source.reg``) from files named ``prefix + "vb"``/``"sb"``."""
    return _REG_TEXT[reg[0]].format(w=prefix, i=reg[1])


def plain_text(o: Operand, as_f32: bool = False) -> Source | None:
    """The ``Source`` of a 32-bit source without modifiers, for the waves of a
    view (uint32, or float32 with ``as_f32``): a VGPR's lanes (a view,
    ``[n, 64]``), an SGPR per wave (``[n, 1]``), a constant as a numpy scalar
    (of the same dtype, so that numpy keeps the operation in that dtype, where
    a Python int could promote it); None for any other operand."""
    if o.neg or o.abs or o.sext:
        return None
    f32 = ".view(np.float32)" if as_f32 else ""
    if o.kind in ("v", "s"):
        return Source("{r}" + f32, (o.kind, o.index), view=True)
    if o.kind == "const":
        c = np.uint32(o.bits32)
        return Source("{k0}", None, (c.view(np.float32) if as_f32 else c,))
    return None


def plain_source(o: Operand, as_f32: bool = False) -> Reader | None:
    """A reader ``fn(view)`` of ``plain_text(o, as_f32)`` (uint32, or float32
    with ``as_f32``: ``[n, 64]`` for a VGPR, ``[n, 1]`` an SGPR, a numpy
    scalar a constant); None for any other operand."""
    src = plain_text(o, as_f32)
    return None if src is None else src.reader()


def sdwa_text(o: Operand, sel: str) -> Source | None:
    """The ``Source`` of an SDWA source: ``plain_text`` for a DWORD select,
    else the VGPR's field ``sel`` zero- or sign-extended (uint32 ``[n, 64]``,
    as ``_select``); None for any other operand."""
    shift, width = _SEL_SHIFT[sel]
    if width == 32:
        return plain_text(dataclasses.replace(o, sext=False))
    if o.kind != "v" or o.neg or o.abs:
        return None
    reg = (o.kind, o.index)
    # A field at either end of the word needs one operation, not two.
    if not o.sext:
        sh, mask = np.uint32(shift), np.uint32((1 << width) - 1)
        if shift == 0:
            return Source("({r} & {k0})", reg, (mask,))
        if shift + width == 32:
            return Source("({r} >> {k0})", reg, (sh,))
        return Source("(({r} >> {k0}) & {k1})", reg, (sh, mask))
    up, down = np.uint32(32 - shift - width), np.int32(32 - width)
    if shift + width == 32:
        return Source("({r}.view(np.int32) >> {k0}).view(np.uint32)", reg, (down,))
    return Source("(({r} << {k0}).view(np.int32) >> {k1}).view(np.uint32)", reg, (up, down))


def sdwa_source(o: Operand, sel: str) -> Reader | None:
    """A reader ``fn(view)`` of ``sdwa_text(o, sel)`` (uint32 ``[n, 64]``, or
    as ``plain_source`` for a DWORD select); None for any other operand."""
    src = sdwa_text(o, sel)
    return None if src is None else src.reader()


@dataclasses.dataclass(frozen=True)
class Inline:
    """How a fused stretch (``fuse``) executes an instruction without its core:
    VGPR ``dest`` (all 64 lanes of every wave, EXEC full) gets ``expr``, the
    text of the operation that the core computes (over ``{a}``, ``{b}``,
    ``{c}``, the ``sources`` in order; ``{out}``, where present, the place for
    ``, out=`` the destination in its outermost ufunc call), evaluated in
    ``namespace`` (the names the text uses; ``pure``: those of its functions
    whose result depends on their arguments alone, which a stretch may call
    once for constant arguments). It is made from the instruction's form
    alone (``form_key``): ``fuse`` caches stretch texts by the forms. An
    instruction writing two VGPRs (a packed f32 op) has an ``Inline`` per
    VGPR: ``then``, the next one's, runs after this one; the decoder orders
    them so that none writes a register a later one reads."""

    expr: str
    dest: int
    sources: tuple[Source, ...]
    namespace: dict
    pure: frozenset = frozenset()
    then: Inline | None = None

    def parts(self) -> list[Inline]:
        """This statement and those chained after it (``then``), in order."""
        out = [self]
        while out[-1].then is not None:
            out.append(out[-1].then)
        return out


def inline_of(ins: Instr) -> Inline | None:
    """The ``Inline`` form the batched decoder of ``ins`` recorded with its core, if any."""
    return ins.__dict__.get("_inline")


def mask_reader(o: Operand) -> Reader | None:
    """A reader ``fn(view)`` of a lane mask held in an SGPR pair: bool ``[n, 64]``,
    lane i bit i of the pair; None for any other operand."""
    if o.kind != "s" or o.count != 2 or o.neg or o.abs or o.sext:
        return None
    i = o.index

    def read(w) -> np.ndarray:
        # The pair's 8 bytes, lane 0 the lowest bit of the first (little-endian words).
        return np.unpackbits(np.ascontiguousarray(w.sb[:, i:i + 2]).view(np.uint8), axis=1,
                             bitorder="little").view(bool)
    return read


def put_mask(w: "Wave | BatchView", o: Operand, mask: np.ndarray) -> None:
    """Write bool ``mask`` (``[n, 64]``, or any shape that broadcasts to it) to SGPR
    pair ``o`` of every wave of ``w``, lane i to bit i (a compare's result
    under a full EXEC)."""
    n = w.vb.shape[0]
    bits = np.packbits(np.broadcast_to(mask, (n, LANES)), axis=1, bitorder="little")
    w.sb[:, o.index:o.index + 2] = bits.view(np.uint32)


def handler_for(ins: Instr) -> Handler:
    """The handler of ``ins``; UnknownInstruction when there is none."""
    h = OPS.get(ins.base) or OPS.get(ins.mnemonic)
    if h is None:
        raise UnknownInstruction(f"no semantics for {ins.mnemonic} at {ins.where()}")
    return h


def mask_to_int(mask: np.ndarray) -> int:
    """A bool ``[64]`` lane mask as a 64-bit integer, lane i at bit i."""
    return int(np.bitwise_or.reduce(np.where(mask, _BIT_WEIGHTS, np.uint64(0))))


def int_to_mask(bits: int) -> np.ndarray:
    """A 64-bit integer as a bool ``[64]`` lane mask."""
    return ((np.uint64(bits & 0xFFFFFFFFFFFFFFFF) >> _LANE_BITS) & np.uint64(1)).astype(bool)


_SEL_SHIFT = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
              "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}


def _select(x, sel: str, sext: bool):
    """SDWA source select: the field of ``x`` named by ``sel``, zero- or sign-extended."""
    shift, width = _SEL_SHIFT[sel]
    if width == 32:
        return x
    field = (np.asarray(x, np.uint32) >> np.uint32(shift)) & np.uint32((1 << width) - 1)
    if sext:
        field = (field.astype(np.int32) << (32 - width) >> (32 - width)).astype(np.uint32) \
            if isinstance(field, np.ndarray) else np.uint32(np.int32(field << (32 - width)) >> (32 - width))
    return field


class Wave:
    """The state of one wave: ``s`` (uint32 ``[128]``), ``scc`` (0/1, an int), ``v``
    (uint32 ``[R, 64]``: all 512 in its own files, a launch's the first R, those its
    program names), ``pc`` (instruction index), ``state`` (``"run"``,
    ``"barrier"``, ``"end"``), ``count`` (instructions executed), and the
    ``group`` it belongs to (LDS, memory, the target's facts)."""

    def __init__(self, group, wave_id: int, regs: tuple[np.ndarray, np.ndarray, int] | None = None):
        self.group = group
        self.wave_id = wave_id
        # ``regs``: (scalar files uint32 [N, 129], vector files uint32 [N, R, 64], k)
        # of a launch's waves, this wave's being row k; its own files otherwise.
        if regs is None:
            regs = (np.zeros((1, NUM_SGPRS + 1), np.uint32), np.zeros((1, 2 * AGPR_BASE, LANES), np.uint32), 0)
        sfile, vfile, k = regs
        # ``sb``/``vb``: the same registers as a view of one wave (n = 1), the
        # shape batched cores read (``BatchView``); ``s`` the SGPRs without SCC.
        self.sb, self.vb = sfile[k:k + 1], vfile[k:k + 1]
        self.s, self.v = sfile[k, :NUM_SGPRS], vfile[k]
        self.k = k
        self.pc = 0
        self.state = "run"
        self.count = 0
        self._exec_key: tuple[int, int] | None = None
        self._exec_mask = np.zeros(LANES, bool)

    @property
    def scc(self) -> int:
        """SCC (0 or 1)."""
        return int(self.sb[0, SCC])

    @scc.setter
    def scc(self, value: int) -> None:
        self.sb[0, SCC] = value

    @property
    def waves(self) -> tuple[Wave]:
        """This wave alone, as a batched core reads the waves of a ``BatchView``."""
        return (self,)

    @property
    def lds_off(self) -> np.ndarray:
        """int64 ``[1, 1, 1]``: where this wave's LDS starts in its pool (``BatchView.lds_off``)."""
        return np.full((1, 1, 1), self.group.lds.offset, np.int64)

    # ---- EXEC -------------------------------------------------------------
    @property
    def exec_mask(self) -> np.ndarray:
        """bool ``[64]``: the lanes EXEC enables."""
        key = (int(self.s[126]), int(self.s[127]))
        if key != self._exec_key:
            self._exec_key = key
            self._exec_mask = int_to_mask(key[0] | key[1] << 32)
        return self._exec_mask

    @property
    def exec_full(self) -> bool:
        """Whether EXEC enables every lane (the common case, written without a mask)."""
        s = self.s
        return s[126] == 0xFFFFFFFF and s[127] == 0xFFFFFFFF

    @property
    def exec_bits(self) -> int:
        return int(self.s[126]) | int(self.s[127]) << 32

    # ---- scalar operands ----------------------------------------------------
    def sget(self, o: Operand, width: int = 32) -> int:
        """A scalar source as an unsigned int of ``width`` bits (32 or 64): SGPRs
        (a pair for 64), or a constant (inline constants sign-extend to 64)."""
        if o.kind == "s":
            lo = int(self.s[o.index])
            return lo | int(self.s[o.index + 1]) << 32 if width == 64 else lo
        if o.kind == "const":
            return o.bits64 if width == 64 else o.bits32
        raise SimError(f"{o.text} is not a scalar source")

    def sset(self, o: Operand, value: int, width: int = 32) -> None:
        """Write ``value`` (``width`` bits) to SGPR operand ``o``."""
        if o.kind != "s":
            raise SimError(f"{o.text} is not a scalar destination")
        self.s[o.index] = value & 0xFFFFFFFF
        if width == 64:
            self.s[o.index + 1] = (value >> 32) & 0xFFFFFFFF

    def mask_get(self, o: Operand) -> np.ndarray:
        """bool ``[64]``: a lane mask held in an SGPR pair (``vcc``, ``s[4:5]``) or a constant."""
        return int_to_mask(self.sget(o, 64))

    def mask_set(self, o: Operand, mask: np.ndarray) -> None:
        """Write a compare result: bit i = ``mask[i]`` for active lanes, 0 for inactive ones."""
        self.sset(o, mask_to_int(mask & self.exec_mask), 64)

    # ---- vector operands ----------------------------------------------------
    def raw(self, o: Operand):
        """The 32-bit value of a source operand, no modifiers: uint32 ``[64]`` for a
        VGPR (a view: do not modify), an ``np.uint32`` for an SGPR or constant."""
        if o.kind == "v":
            return self.v[o.index]
        if o.kind == "s":
            return self.s[o.index]
        if o.kind == "const":
            return np.uint32(o.bits32)
        raise SimError(f"{o.text} is not a source operand")

    def vget(self, ins: Instr, i: int):
        """Source ``ins.ops[i]`` as uint32 bits, with the SDWA select of an
        ``_sdwa`` instruction applied (source k = ``ops[k + 1]``)."""
        o = ins.ops[i]
        x = self.raw(o)
        if ins.enc == "sdwa":
            x = _select(x, ins.mods.get(f"src{i - 1}_sel", "DWORD"), o.sext)
        return x

    def vget_f32(self, ins: Instr, i: int):
        """Source ``ins.ops[i]`` as float32 with ``abs`` then ``neg`` applied."""
        x = np.asarray(self.vget(ins, i), np.uint32)
        o = ins.ops[i]
        if o.abs:
            x = x & np.uint32(0x7FFFFFFF)
        if o.neg:
            x = x ^ np.uint32(0x80000000)
        return x.view(np.float32)

    def vget_regs(self, o: Operand) -> np.ndarray:
        """uint32 ``[count, 64]``: a multi-register operand (a view for VGPRs;
        SGPRs and constants broadcast)."""
        if o.kind == "v":
            return self.v[o.index:o.index + o.count]
        if o.kind == "s":
            return np.repeat(self.s[o.index:o.index + o.count, None], LANES, axis=1)
        if o.kind == "const":
            words = [o.bits64 & 0xFFFFFFFF, o.bits64 >> 32][:o.count] if o.count <= 2 else [o.bits32] * o.count
            return np.repeat(np.array(words, np.uint32)[:, None], LANES, axis=1)
        raise SimError(f"{o.text} is not a source operand")

    def vget64(self, o: Operand) -> np.ndarray:
        """uint64 ``[64]``: a 64-bit source (a VGPR pair, an SGPR pair, or a
        constant, inline integers sign-extended)."""
        if o.kind == "const":
            return np.full(LANES, o.bits64, np.uint64)
        regs = self.vget_regs(Operand(o.kind, o.index, 2)).astype(np.uint64)
        return regs[0] | (regs[1] << np.uint64(32))

    def vset(self, ins: Instr, value, i: int = 0) -> None:
        """Write ``value`` (uint32 ``[64]`` or scalar) to vector destination
        ``ins.ops[i]`` in active lanes, through an ``_sdwa`` destination select."""
        o = ins.ops[i]
        if o.kind != "v":
            raise SimError(f"{o.text} is not a vector destination at {ins.where()}")
        dst = self.v[o.index]
        if type(value) is not np.ndarray or value.dtype != np.uint32:
            value = np.asarray(value)
            if value.dtype != np.uint32:
                value = value.astype(np.uint32) if value.dtype.kind in "iub" else value.view(np.uint32)
        if ins.enc == "sdwa":
            value = self._sdwa_dst(ins, dst, value)
        if self.exec_full:
            dst[...] = value
        else:
            np.copyto(dst, value, where=self.exec_mask)

    @staticmethod
    def _sdwa_dst(ins: Instr, old: np.ndarray, value: np.ndarray) -> np.ndarray:
        sel = ins.mods.get("dst_sel", "DWORD")
        shift, width = _SEL_SHIFT[sel]
        if width == 32:
            return value
        unused = ins.mods.get("dst_unused", "UNUSED_PAD")
        fmask = np.uint32(((1 << width) - 1) << shift)
        placed = (value << np.uint32(shift)) & fmask
        if unused == "UNUSED_PRESERVE":
            return (old & ~fmask) | placed
        if unused == "UNUSED_SEXT":
            top = shift + width
            sign = (placed >> np.uint32(top - 1)) & np.uint32(1)
            upper = np.uint32((0xFFFFFFFF << top) & 0xFFFFFFFF) if top < 32 else np.uint32(0)
            return placed | np.where(sign.astype(bool), upper, np.uint32(0)).astype(np.uint32)
        return placed

    def vset_f32(self, ins: Instr, value, i: int = 0) -> None:
        """Write a float32 result: ``clamp`` to [0, 1] when the instruction says so
        (NaN becomes 0, as the ISA's clamp with DX10 mode does), then ``vset``."""
        value = np.asarray(value, np.float32)
        if ins.mods.get("clamp"):
            value = np.where(np.isnan(value), np.float32(0), np.clip(value, np.float32(0), np.float32(1)))
        self.vset(ins, value.view(np.uint32), i)

    def vset_regs(self, o: Operand, words: np.ndarray) -> None:
        """Write uint32 ``[count, 64]`` to a multi-register destination, active lanes only."""
        if o.kind != "v":
            raise SimError(f"{o.text} is not a vector destination")
        if self.exec_full:
            self.v[o.index:o.index + o.count] = words
        else:
            np.copyto(self.v[o.index:o.index + o.count], words.astype(np.uint32, copy=False),
                      where=self.exec_mask[None, :])

    def vset64(self, o: Operand, value: np.ndarray) -> None:
        """Write uint64 ``[64]`` to a VGPR pair, active lanes only."""
        value = np.asarray(value, np.uint64)
        self.vset_regs(Operand("v", o.index, 2),
                       np.stack([value & np.uint64(0xFFFFFFFF), value >> np.uint64(32)]).astype(np.uint32))


_EVERY = slice(None)


class Rows:
    """Rows ``rows`` (int ``[n]``, ascending) of a register file ``[N, ...]`` as
    batched cores index it: ``r[:, i]``, ``r[:, i:j]``, ``r[:, i, None]`` and
    ``r[:, [i, j], None]`` read those rows' registers (gathered copies), the
    same keys assigned write them back (scattered); ``shape`` as the rows'."""

    __slots__ = ("_file", "_rows", "shape")

    def __init__(self, file: np.ndarray, rows: np.ndarray):
        self._file, self._rows = file, rows
        self.shape = (len(rows),) + file.shape[1:]

    def _key(self, key: tuple) -> tuple:
        # Plain loops and type checks: this runs for every register access of a scattered run.
        if type(key) is not tuple or type(key[0]) is not slice or key[0] != _EVERY:
            raise TypeError(f"batched register access must select every wave first, got {key!r}")
        for k in key:
            if type(k) is list:
                return (self._rows[:, None],) + key[1:]
        return (self._rows,) + key[1:]

    def __getitem__(self, key: tuple) -> np.ndarray:
        return self._file[self._key(key)]

    def __setitem__(self, key: tuple, value) -> None:
        self._file[self._key(key)] = value


class BatchView:
    """``waves`` (ascending rows of a launch's register files), for batched
    cores: ``sb`` uint32 ``[n, 129]`` (SGPRs and SCC) and ``vb`` uint32 ``[n, R, 64]``
    (R: see ``Wave.v``; views where the rows are evenly spaced, consecutive
    or not, else ``Rows``, or arrays that copy them: ``gathered``), and
    ``group``, the first wave's workgroup (the target, options and memory,
    which every workgroup of a launch shares)."""

    __slots__ = ("sb", "vb", "group", "waves", "_lds_off", "_rows", "_files")

    def __init__(self, sfile: np.ndarray, vfile: np.ndarray, waves: list[Wave]):
        k0, n = waves[0].k, len(waves)
        self.sb: np.ndarray | Rows
        self.vb: np.ndarray | Rows
        step = waves[1].k - k0 if n > 1 else 1
        end = k0 + step * (n - 1)
        # (The last row first: a run with a gap usually shows it there.)
        if waves[-1].k == end and all(w.k == k0 + step * i for i, w in enumerate(waves)):
            # Rows in steps of one (or of any stride: one wave of each workgroup,
            # as after a branch on the wave's index) are a view of the files.
            self.sb, self.vb = sfile[k0:end + 1:step], vfile[k0:end + 1:step]
            self._rows: np.ndarray | None = None
        else:
            self._rows = np.array([w.k for w in waves], np.intp)
            self.sb, self.vb = Rows(sfile, self._rows), Rows(vfile, self._rows)
            self._files = (sfile, vfile)
        self.group = waves[0].group
        self.waves = waves
        self._lds_off: np.ndarray | None = None

    def gathered(self, vgprs: np.ndarray, scratch: np.ndarray) -> "BatchView":
        """The same waves with ``sb`` uint32 ``[n, 129]`` and ``vb`` uint32 ``[n,
        R, 64]`` arrays: a copy of a scattered view's rows (``Rows``): all of
        their SGPRs, and of their VGPRs those listed in ``vgprs`` (intp), in the
        first ``n`` rows of ``scratch`` (a launch's ``[N, R, 64]``; its other
        VGPRs hold anything). Every core and fused stretch that names no other
        VGPR runs on it as on a view of the files (its scalar cores write the
        copy's SGPRs, which a stretch's inlined reads see); ``scatter`` writes
        it back. An evenly spaced view is its own."""
        if self._rows is None:
            return self
        sfile, vfile = self._files
        copy = object.__new__(BatchView)
        copy.sb, copy.vb = sfile[self._rows], scratch[:len(self._rows)]
        if len(vgprs):
            copy.vb[:, vgprs] = vfile[self._rows[:, None], vgprs]
        copy.group, copy.waves, copy._lds_off, copy._rows = self.group, self.waves, self._lds_off, None
        return copy

    def scatter(self, copy: "BatchView", vgprs: np.ndarray) -> None:
        """Write ``copy`` (``gathered``'s) back to this view's rows: every SGPR, and the VGPRs ``vgprs``."""
        rows = self._rows
        if copy is not self and rows is not None:
            sfile, vfile = self._files
            sfile[rows] = copy.sb
            if len(vgprs):
                vfile[rows[:, None], vgprs] = copy.vb[:, vgprs]

    @property
    def lds_off(self) -> np.ndarray:
        """int64 ``[n, 1, 1]``: where each wave's LDS starts in the launch's LDS
        pool (``group.lds.pool``; ``Lds.share``)."""
        if self._lds_off is None:
            self._lds_off = np.array([w.group.lds.offset for w in self.waves], np.int64)[:, None, None]
        return self._lds_off
