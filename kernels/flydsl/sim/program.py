"""LLVM's AMDGPU assembly text of one kernel, parsed into what the simulator runs.

FlyDSL writes the final assembly of every compile (``22_final_isa.s``, LLVM's
own printing of the code object it links). ``parse_program`` reads one kernel
from it: the instructions in order with their operands and modifiers parsed,
branch labels resolved to instruction indices, the kernel descriptor's
``.amdhsa_*`` fields and the metadata's kernel arguments.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

# Register names LLVM prints for the special scalar registers, with their
# SGPR-file index as the simulator lays it out (the ISA's operand numbering).
SPECIAL_SGPRS = {
    "vcc_lo": (106, 1), "vcc_hi": (107, 1), "vcc": (106, 2),
    "m0": (124, 1), "exec_lo": (126, 1), "exec_hi": (127, 1), "exec": (126, 2),
}
NUM_SGPRS = 128
AGPR_BASE = 256  # a0..a255 follow v0..v255 in the simulator's vector file

# Inline floating-point constants the ISA encodes without a literal, as bit
# patterns for 32-bit, 16-bit and 64-bit operands.
_INLINE_FLOATS = {
    "0.5": (0x3F000000, 0x3800, 0x3FE0000000000000), "-0.5": (0xBF000000, 0xB800, 0xBFE0000000000000),
    "1.0": (0x3F800000, 0x3C00, 0x3FF0000000000000), "-1.0": (0xBF800000, 0xBC00, 0xBFF0000000000000),
    "2.0": (0x40000000, 0x4000, 0x4000000000000000), "-2.0": (0xC0000000, 0xC000, 0xC000000000000000),
    "4.0": (0x40800000, 0x4400, 0x4010000000000000), "-4.0": (0xC0800000, 0xC400, 0xC010000000000000),
    "0.15915494": (0x3E22F983, 0x3118, 0x3FC45F306DC9C882),
}


class ParseError(ValueError):
    """Assembly text the simulator cannot read; names the line."""


@dataclass(frozen=True)
class Operand:
    """One instruction operand.

    kind: ``"s"`` (SGPR file, specials included), ``"v"`` (VGPR or AGPR,
    AGPRs at ``AGPR_BASE``), ``"const"`` (an inline constant or literal),
    ``"label"`` (a branch target), ``"off"`` (no address register).
    index/count: first register and number of 32-bit registers.
    value: for ``const``, the integer as written (ints) or None (floats);
    bits32/bits16/bits64: the constant's bit patterns for operands of that
    width. neg/abs: floating-point source modifiers; sext: SDWA sign extension.
    """

    kind: str
    index: int = 0
    count: int = 1
    value: int | None = None
    bits32: int = 0
    bits16: int = 0
    bits64: int = 0
    neg: bool = False
    abs: bool = False
    sext: bool = False
    text: str = ""


@dataclass
class Instr:
    """One instruction: ``mnemonic`` as printed (``v_add_f32_e64``), ``base``
    without the encoding suffix (``v_add_f32``), ``enc`` that suffix (``e32``,
    ``e64``, ``sdwa``, ``dpp`` or ``""``), ``ops`` the operands in order,
    ``mods`` the trailing modifiers (``{"offset": 16, "offen": True,
    "op_sel_hi": (1, 0), "src0_sel": "WORD_1", ...}``), ``target`` the
    instruction index of a branch's label, ``line`` its 1-based line in the
    text and ``text`` the line itself."""

    mnemonic: str
    base: str
    enc: str
    ops: list[Operand]
    mods: dict
    line: int
    text: str
    index: int = 0
    target: int | None = None

    def where(self) -> str:
        """``#index (line N: text)`` for error messages."""
        return f"instruction #{self.index} (line {self.line}: {self.text.strip()})"


@dataclass
class Program:
    """One kernel: ``name``, ``arch`` (``gfx942``/``gfx950``), ``instrs``,
    ``labels`` (name -> instruction index), ``descriptor`` (``.amdhsa_*``
    fields without the prefix, as ints), ``args`` (the metadata's kernel
    arguments: dicts with ``offset``, ``size``, ``value_kind``),
    ``kernarg_size`` and ``lds_size`` in bytes."""

    name: str
    arch: str
    instrs: list[Instr]
    labels: dict[str, int]
    descriptor: dict[str, int]
    args: list[dict] = field(default_factory=list)

    @property
    def kernarg_size(self) -> int:
        return self.descriptor["kernarg_size"]

    @property
    def lds_size(self) -> int:
        return self.descriptor["group_segment_fixed_size"]

    def mnemonics(self) -> set[str]:
        """The distinct mnemonics of the program."""
        return {i.mnemonic for i in self.instrs}


_REG = re.compile(r"^(?P<kind>[sva])(?:(?P<one>\d+)|\[(?P<lo>\d+):(?P<hi>\d+)\])$")
_ENCODINGS = ("_e32", "_e64", "_sdwa", "_dpp")


def _split(s: str, at_space: bool) -> list[str]:
    """Split at commas (or, with ``at_space``, white space) outside brackets and
    parentheses, so ``name:[a,b]`` and ``swizzle(A,B)`` stay whole."""
    if "[" not in s and "(" not in s:
        return [p for p in (s.split() if at_space else (p.strip() for p in s.split(","))) if p]
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if depth == 0 and (ch.isspace() if at_space else ch == ","):
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return [p for p in parts if p]


def _int_bits(v: int) -> tuple[int, int, int]:
    return v & 0xFFFFFFFF, v & 0xFFFF, v & 0xFFFFFFFFFFFFFFFF


@functools.lru_cache(maxsize=None)
def parse_operand(text: str) -> Operand:
    """One operand as LLVM prints it (``v[2:5]``, ``-|v1|``, ``s7``, ``vcc``,
    ``0x4f7ffffe``, ``-16``, ``0.5``, ``sext(v3)``, ``.LBB0_2``, ``off``)."""
    t = text.strip()
    neg = abs_ = sext = False
    if t.startswith("sext(") and t.endswith(")"):
        sext, t = True, t[5:-1]
    if t.startswith("-") and (t[1:2] in ("|", "v", "s", "a") or t[1:].startswith(("vcc", "exec", "m0"))):
        neg, t = True, t[1:]
    if t.startswith("|") and t.endswith("|"):
        abs_, t = True, t[1:-1]
    if t.startswith("neg(") and t.endswith(")"):
        neg, t = True, t[4:-1]
    if t.startswith("abs(") and t.endswith(")"):
        abs_, t = True, t[4:-1]
    if t in SPECIAL_SGPRS:
        idx, cnt = SPECIAL_SGPRS[t]
        return Operand("s", idx, cnt, neg=neg, abs=abs_, sext=sext, text=text)
    m = _REG.match(t)
    if m:
        lo = int(m["one"] if m["one"] is not None else m["lo"])
        hi = lo if m["one"] is not None else int(m["hi"])
        kind = "s" if m["kind"] == "s" else "v"
        base = AGPR_BASE if m["kind"] == "a" else 0
        return Operand(kind, base + lo, hi - lo + 1, neg=neg, abs=abs_, sext=sext, text=text)
    if t == "off":
        return Operand("off", text=text)
    if t.startswith("."):
        return Operand("label", text=t)
    if t in _INLINE_FLOATS:
        b32, b16, b64 = _INLINE_FLOATS[t]
        return Operand("const", bits32=b32, bits16=b16, bits64=b64, neg=neg, abs=abs_, text=text)
    try:
        v = int(t, 0)
    except ValueError:
        raise ParseError(f"cannot read operand {text!r}") from None
    b32, b16, b64 = _int_bits(v)
    return Operand("const", value=v, bits32=b32, bits16=b16, bits64=b64, neg=neg, abs=abs_, text=text)


def _parse_mod(tok: str, mods: dict) -> None:
    if ":" not in tok:
        mods[tok] = True
        return
    key, val = tok.split(":", 1)
    if val.startswith("["):
        mods[key] = tuple(int(x) for x in val[1:-1].split(","))
    elif val.startswith("swizzle("):
        mods[key] = ("swizzle",) + tuple(x.strip() for x in val[8:-1].split(","))
    else:
        try:
            mods[key] = int(val, 0)
        except ValueError:
            mods[key] = val


def parse_instruction(text: str, line: int = 0) -> Instr:
    """One instruction line (comment already removed or not)."""
    return _instruction(text, text.split("//")[0].split(";")[0].strip(), line)


def _instruction(text: str, code: str, line: int) -> Instr:
    """The instruction of line ``text`` (``line``), its ``code`` without the comment."""
    try:
        mnemonic, base, enc, ops, mods = _parsed(code)
    except ParseError as e:
        raise ParseError(f"line {line}: {e}: {text.strip()}") from None
    # Copies: a program's instructions are its own, however many programs share a line.
    return Instr(mnemonic, base, enc, list(ops), dict(mods), line, text)


# Parsed once per process for each distinct code of a line: the kernels of a
# target share most of their lines (about 9,000 distinct among the 240,000 of
# gfx942's 64 configurations), so the bound keeps every line of both targets.
@functools.lru_cache(maxsize=1 << 15)
def _parsed(code: str) -> tuple[str, str, str, tuple[Operand, ...], dict]:
    """``(mnemonic, base, enc, ops, mods)`` of an instruction's code (see ``Instr``);
    the caller copies ``mods``, which stays the cache's."""
    mnemonic, _, rest = code.partition(" ")
    base, enc = mnemonic, ""
    for suffix in _ENCODINGS:
        if mnemonic.endswith(suffix):
            base, enc = mnemonic[: -len(suffix)], suffix[1:]
            break
    ops: list[Operand] = []
    mods: dict = {}
    rest = rest.strip()
    if mnemonic == "s_waitcnt":
        return mnemonic, base, enc, (), {"counts": rest}
    if rest:
        pieces = _split(rest, at_space=False)
        last_words = _split(pieces[-1], at_space=True)
        if len(pieces) == 1 and _is_modifier(last_words[0]):
            operand_texts, mod_words = [], last_words
        else:
            operand_texts, mod_words = pieces[:-1] + last_words[:1], last_words[1:]
        ops = [parse_operand(t) for t in operand_texts]
        for w in mod_words:
            _parse_mod(w, mods)
    return mnemonic, base, enc, tuple(ops), mods


# Modifiers written as a bare word (an instruction with no operands, such as
# ``buffer_inv sc1``, has nothing but them).
_BARE_MODIFIERS = frozenset({"sc0", "sc1", "nt", "offen", "idxen"})


def _is_modifier(tok: str) -> bool:
    return tok in _BARE_MODIFIERS or ":" in tok.split("[")[0].split("(")[0]


_DESC = re.compile(r"^\s*\.amdhsa_(\w+)\s+(-?\d+)\s*$")
_ARG = re.compile(r"^\s*-\s+\.offset:\s+(\d+)\s*$")


def parse_program(text: str, name: str | None = None) -> Program:
    """The kernel ``name`` (default: the first kernel) of an assembly text.

    Raises ParseError naming the line of anything it cannot read."""
    lines = text.splitlines()
    arch_m = re.search(r'\.amdgcn_target\s+"amdgcn-amd-amdhsa--?(?:unknown-)?(gfx[0-9a-f]+)', text)
    if arch_m is None:
        raise ParseError("no .amdgcn_target line: not LLVM AMDGPU assembly")
    if name is None:
        m = re.search(r"^\s*\.globl\s+(\S+)", text, re.M)
        if m is None:
            raise ParseError("no .globl kernel symbol in the assembly")
        name = m.group(1)
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f"{name}:"), None)
    if start is None:
        raise ParseError(f"kernel {name!r} not found in the assembly")
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    for i in range(start + 1, len(lines)):
        raw = lines[i]
        s = raw.split("//")[0].split(";")[0].strip()
        if not s:
            continue
        if s.endswith(":") and " " not in s:
            label = s[:-1]
            if label.startswith(".Lfunc_end"):
                break
            labels[label] = len(instrs)
            continue
        if s.startswith("."):
            continue
        ins = _instruction(raw, s, i + 1)
        ins.index = len(instrs)
        instrs.append(ins)
    for ins in instrs:
        for op in ins.ops:
            if op.kind == "label":
                if op.text not in labels:
                    raise ParseError(f"line {ins.line}: unknown label {op.text}")
                ins.target = labels[op.text]
    descriptor = _descriptor(lines, name)
    return Program(name, arch_m.group(1), instrs, labels, descriptor, _args(text, name))


def _descriptor(lines: list[str], name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    inside = False
    for ln in lines:
        s = ln.strip()
        if s == f".amdhsa_kernel {name}":
            inside = True
        elif s == ".end_amdhsa_kernel":
            inside = False
        elif inside:
            m = _DESC.match(ln)
            if m:
                out[m.group(1)] = int(m.group(2))
    if not out:
        raise ParseError(f"no .amdhsa_kernel descriptor for {name!r}")
    return out


def _args(text: str, name: str) -> list[dict]:
    """The ``.args`` of ``name``'s metadata entry (offset, size, value_kind)."""
    meta = text.split(".amdgpu_metadata", 1)[-1]
    block = meta.split(f".name:           {name}")[0]
    block = block.rsplit(".args:", 1)[-1] if ".args:" in block else ""
    args: list[dict] = []
    for ln in block.splitlines():
        m = _ARG.match(ln)
        if m:
            args.append({"offset": int(m.group(1))})
            continue
        kv = re.match(r"^\s+\.(size|value_kind):\s+(\S+)", ln)
        if kv and args:
            args[-1][kv.group(1)] = int(kv.group(2)) if kv.group(1) == "size" else kv.group(2)
    return args
