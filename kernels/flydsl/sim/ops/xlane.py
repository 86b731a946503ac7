"""Cross-lane data movement: ``ds_swizzle_b32``, ``ds_bpermute_b32`` and
gfx950's ``v_permlane16_swap_b32`` / ``v_permlane32_swap_b32``.

Semantic decisions (CDNA3/CDNA4 ISA; where real hardware may differ):

- ``ds_swizzle_b32 vdst, vaddr offset:P``: the data is the ADDR operand
  (``vaddr``, the second operand); no LDS is touched. Pattern ``P`` with bit
  15 set and bits 8..14 clear is QDMode: lane ``4q + k`` reads lane
  ``4q + P[2k+1:2k]``. With bit 15 clear it is BitMode: within each half of
  32 lanes, lane id ``i`` (5 bits) reads ``((i & and) | or) ^ xor`` with
  ``and = P[4:0]``, ``or = P[9:5]``, ``xor = P[14:10]``. A source lane that
  EXEC disables reads as 0; only EXEC-enabled lanes are written. Patterns
  from 0xC000 up (LLVM prints them as ``swizzle(ROTATE,...)`` and
  ``swizzle(FFT,...)``) and QDMode patterns with bits 8..14 set are not
  described by the CDNA ISA the simulator follows: SimError. LLVM's
  symbolic forms (``SWAP``, ``REVERSE``, ``BROADCAST``, ``QUAD_PERM``,
  ``BITMASK_PERM``) are converted to their numeric pattern as llvm-mc
  encodes them.
- ``ds_bpermute_b32 vdst, vaddr, vdata offset:N``: lane ``i`` reads
  ``vdata`` of lane ``((vaddr[i] + N) mod 2**32) / 4 mod 64``; a disabled
  source lane reads 0 (the ISA applies EXEC to the source reads); only
  enabled lanes are written.
- ``v_permlane16_swap_b32 vdst, vsrc``: for each 32-lane half h and each
  lane ``l < 16``, ``vsrc[32h + l]`` and ``vdst[32h + l + 16]`` exchange
  (odd rows of vdst with even rows of vsrc, a row being 16 lanes).
  ``v_permlane32_swap_b32 vdst, vsrc``: ``vsrc[l]`` and ``vdst[l + 32]``
  exchange for ``l < 32``. Both operands are written. The ISA's pseudo-code
  has no EXEC test, and what the FI/bound_ctrl bits do with disabled lanes
  is not spelled out, so the simulator runs them with every lane enabled
  only and raises SimError under a partial EXEC. Their batched cores write
  both operands (``batched(writes_all=True)``), which a fused stretch reloads.
"""

from __future__ import annotations

import numpy as np

from ..program import Instr
from ..wave import LANES, Core, SimError, Wave, batched, op

_LANE = np.arange(LANES)
_ALL_LANES = (1 << LANES) - 1


def _bitmask_pattern(and_mask: int, or_mask: int, xor_mask: int) -> int:
    return (and_mask & 0x1F) | (or_mask & 0x1F) << 5 | (xor_mask & 0x1F) << 10


def swizzle_pattern(offset) -> int:
    """The 16-bit ds_swizzle pattern of a parsed ``offset`` modifier: an int, or
    ``("swizzle", MODE, args...)`` for LLVM's symbolic ``swizzle(...)`` forms."""
    if isinstance(offset, int):
        return offset
    mode, args = offset[1], offset[2:]
    if mode == "QUAD_PERM" and len(args) == 4:
        sel = [int(a, 0) for a in args]
        return 0x8000 | sel[0] | sel[1] << 2 | sel[2] << 4 | sel[3] << 6
    if mode == "SWAP" and len(args) == 1:
        return _bitmask_pattern(0x1F, 0, int(args[0], 0))
    if mode == "REVERSE" and len(args) == 1:
        return _bitmask_pattern(0x1F, 0, int(args[0], 0) - 1)
    if mode == "BROADCAST" and len(args) == 2:
        return _bitmask_pattern(~(int(args[0], 0) - 1), int(args[1], 0), 0)
    if mode == "BITMASK_PERM" and len(args) == 1:
        text = args[0].strip('"')
        and_mask = or_mask = xor_mask = 0
        for pos, ch in enumerate(text):
            bit = 1 << (4 - pos)
            if ch == "1":
                or_mask |= bit
            elif ch == "p":
                and_mask |= bit
            elif ch == "i":
                and_mask |= bit
                xor_mask |= bit
            elif ch != "0":
                raise SimError(f"swizzle(BITMASK_PERM): bad mask character {ch!r}")
        return _bitmask_pattern(and_mask, or_mask, xor_mask)
    raise SimError(f"swizzle({', '.join(offset[1:])}) not supported by the simulator")


def swizzle_sources(pattern: int) -> np.ndarray:
    """int64 ``[64]``: the lane each lane reads under ds_swizzle ``pattern``."""
    if pattern >= 0xC000 or (pattern & 0x8000 and pattern & 0x7F00):
        raise SimError(f"ds_swizzle pattern {pattern:#06x} (rotate/FFT or reserved bits) not supported")
    if pattern & 0x8000:
        quad_sel = np.array([(pattern >> (2 * k)) & 3 for k in range(4)])
        return (_LANE & ~3) + quad_sel[_LANE & 3]
    and_mask, or_mask, xor_mask = pattern & 0x1F, (pattern >> 5) & 0x1F, (pattern >> 10) & 0x1F
    return (_LANE & 32) | (((_LANE & and_mask) | or_mask) ^ xor_mask)


def _gather(w: Wave, data: np.ndarray, src: np.ndarray) -> np.ndarray:
    """uint32 ``[64]``: ``data[src]``, 0 where the source lane is disabled."""
    return np.where(w.exec_mask[src], data[src], np.uint32(0)).astype(np.uint32)


def _check(ins: Instr, n_ops: int, mods: frozenset) -> None:
    if len(ins.ops) != n_ops or any(o.kind != "v" or o.count != 1 or o.neg or o.abs or o.sext for o in ins.ops):
        raise SimError(f"{ins.mnemonic}: expected {n_ops} plain VGPR operands at {ins.where()}")
    bad = [k for k in ins.mods if k not in mods]
    if bad:
        raise SimError(f"{ins.mnemonic}: modifier {', '.join(bad)} not supported at {ins.where()}")


def _swizzle_src(ins: Instr) -> np.ndarray:
    """The source lane of each lane (``swizzle_sources``) of a ds_swizzle, found once."""
    src = ins.__dict__.get("_swizzle_src")
    if src is None:
        _check(ins, 2, frozenset({"offset"}))
        src = ins.__dict__["_swizzle_src"] = swizzle_sources(swizzle_pattern(ins.mods.get("offset", 0)))
    return src


@op("ds_swizzle_b32")
def _ds_swizzle(w: Wave, ins: Instr) -> None:
    """``ds_swizzle_b32 vdst, vaddr offset:pattern`` (data from vaddr)."""
    w.vset(ins, _gather(w, w.v[ins.ops[1].index], _swizzle_src(ins)))


@batched("ds_swizzle_b32")
def _ds_swizzle_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``ds_swizzle_b32``: with every lane enabled, each
    lane reads its source lane."""
    try:
        src = _swizzle_src(ins)
    except SimError:
        return None
    d, a = ins.ops[0].index, ins.ops[1].index

    def core(w) -> None:
        w.vb[:, d] = w.vb[:, a].take(src, axis=1)
    return core


def _bpermute_lanes(ins: Instr, addr: np.ndarray) -> np.ndarray:
    """intp, ``addr``'s shape: the lane each lane of a ds_bpermute reads (its
    byte address ``addr`` (uint32) plus the offset, over 4, modulo 64)."""
    off = np.uint32(int(ins.mods.get("offset", 0)) & 0xFFFFFFFF)
    return (((addr + off) >> np.uint32(2)) & np.uint32(LANES - 1)).astype(np.intp)


@op("ds_bpermute_b32")
def _ds_bpermute(w: Wave, ins: Instr) -> None:
    """``ds_bpermute_b32 vdst, vaddr, vdata offset:N``: backward permute by byte address."""
    _check(ins, 3, frozenset({"offset"}))
    w.vset(ins, _gather(w, w.v[ins.ops[2].index], _bpermute_lanes(ins, w.v[ins.ops[1].index])))


@batched("ds_bpermute_b32")
def _ds_bpermute_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``ds_bpermute_b32``: with every lane enabled, each
    lane of each wave reads its own source lane."""
    try:
        _check(ins, 3, frozenset({"offset"}))
    except SimError:
        return None
    d, a, data = ins.ops[0].index, ins.ops[1].index, ins.ops[2].index

    def core(w) -> None:
        w.vb[:, d] = np.take_along_axis(w.vb[:, data], _bpermute_lanes(ins, w.vb[:, a]), axis=1)
    return core


def _permlane_swap(w: Wave, ins: Instr, row_mask: np.ndarray, dist: int) -> None:
    """Exchange ``vsrc[l]`` and ``vdst[l + dist]`` for the lanes ``l`` in ``row_mask``."""
    _check(ins, 2, frozenset({"fi", "bound_ctrl"}))
    if not w.group.target.permlane_swap:
        raise SimError(f"{ins.mnemonic}: {w.group.target.arch} has no permlane swap instructions at {ins.where()}")
    if w.exec_bits != _ALL_LANES:
        raise SimError(f"{ins.mnemonic} with a partial EXEC ({w.exec_bits:#018x}): disabled-lane "
                       f"behaviour not modelled at {ins.where()}")
    vdst, vsrc = w.v[ins.ops[0].index], w.v[ins.ops[1].index]
    lo = np.nonzero(row_mask)[0]
    old_dst, old_src = vdst[lo + dist].copy(), vsrc[lo].copy()
    vsrc[lo] = old_dst
    vdst[lo + dist] = old_src


_EVEN_ROWS = (_LANE & 16) == 0
_LOW_HALF = _LANE < 32


@op("v_permlane16_swap_b32")
def _permlane16_swap(w: Wave, ins: Instr) -> None:
    """Swap the odd 16-lane rows of vdst with the even rows of vsrc."""
    _permlane_swap(w, ins, _EVEN_ROWS, 16)


@op("v_permlane32_swap_b32")
def _permlane32_swap(w: Wave, ins: Instr) -> None:
    """Swap the upper 32 lanes of vdst with the lower 32 lanes of vsrc."""
    _permlane_swap(w, ins, _LOW_HALF, 32)


def _permlane_decoder(dist: int):
    """The batched decoder of a permlane swap of rows ``dist`` lanes apart: each
    32-lane half of a register seen as ``[32 / dist, dist]`` (a 16-lane row, or
    the half), its odd rows of vdst exchanged with the even rows of vsrc, the
    handler's lanes (``_permlane_swap``), for all waves at once; every lane
    enabled, as the handler requires. A target without the instructions is
    left to the handler, which says so."""
    def decode(ins: Instr) -> Core | None:
        try:
            _check(ins, 2, frozenset({"fi", "bound_ctrl"}))
        except SimError:
            return None
        d, s = ins.ops[0].index, ins.ops[1].index

        def core(w) -> bool | None:
            if not w.group.target.permlane_swap:
                return False
            vb = w.vb
            n = vb.shape[0]
            # Both registers read before either is written (they may be one); each
            # written whole (a scattered view's registers are copies: ``Rows``).
            x = vb[:, d].reshape(n, -1, 2, dist)
            y = x if s == d else vb[:, s].reshape(n, -1, 2, dist)
            new_x = x.copy()
            new_y = new_x if s == d else y.copy()
            new_x[:, :, 1], new_y[:, :, 0] = y[:, :, 0], x[:, :, 1]
            vb[:, d] = new_x.reshape(n, LANES)
            if s != d:
                vb[:, s] = new_y.reshape(n, LANES)
            return None
        return core
    return decode


batched("v_permlane16_swap_b32", writes_all=True)(_permlane_decoder(16))
batched("v_permlane32_swap_b32", writes_all=True)(_permlane_decoder(32))
