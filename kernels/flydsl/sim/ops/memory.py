"""Vector memory instructions: MUBUF buffer loads and stores, global loads,
stores and the 32-bit atomic add, and LDS (DS) reads and writes.

Semantic decisions (CDNA3/CDNA4 ISA; where real hardware may differ):

- Buffers: raw buffers only (V# stride 0; ``idxen`` and the ``lds``/``tfe``
  forms raise SimError). The byte offset of a lane is ``vaddr`` (with
  ``offen``) + ``soffset`` + the instruction offset, in unbounded integers
  (hardware computes it in 32 bits; a sum past 2**32 would wrap there, and is
  out of range here). Every component (a dword, or the whole 1/2-byte
  access) is range-checked on its own against ``num_records`` with soffset
  included: an out-of-range component reads 0 and its store is dropped. The
  in-range part must then lie in an allocation, else MemoryFault. ``sc0``,
  ``sc1`` and ``nt`` are cache policy and change no value here; the
  memory-model check (``sim.memorder``, when the launch attaches one to
  ``Memory.order``) reads them, with ``s_waitcnt``, ``buffer_wbl2`` and
  ``buffer_inv``, to decide what another workgroup's load may see.
- Sub-dword loads read exactly the addressed 1 or 2 bytes (any alignment)
  and zero- (``ubyte``/``ushort``) or sign-extend (``sbyte``/``sshort``) them
  into the whole 32-bit destination; sub-dword stores write the low bytes.
- Global: with an SGPR-pair base the VGPR is a 32-bit unsigned offset; with
  ``off`` it is a 64-bit VGPR-pair address (wrapping at 2**64). The offset
  modifier is signed. ``global_atomic_add`` returns the old value only with
  ``sc0`` (CDNA3's name for GLC), which LLVM prints with the extra vdst
  operand; lanes are applied in lane order, so duplicate addresses see the
  earlier lanes' additions. No alignment is checked anywhere (hardware may
  require dword alignment for dword atomics).
- LDS: the address is ``vaddr + offset`` (``offset0``/``offset1`` scaled by
  the element size, or by 64 elements for ``*st64``); any byte outside the
  workgroup's allocation is a MemoryFault (hardware would drop or wrap it).
  Inactive lanes neither read nor write; writes land in lane order (a
  ``write2`` stores every lane's first element, then every lane's second).
"""

from __future__ import annotations

import numpy as np

from ..memory import BufferResource, ByteRows
from ..program import Instr, Operand
from ..wave import LANES, BatchView, Core, Memo, SimError, Wave, batched, op

_CACHE_BITS = frozenset({"sc0", "sc1", "nt"})


def _check_mods(ins: Instr, allowed: frozenset) -> None:
    """SimError naming any modifier the handler does not implement."""
    bad = [k for k in ins.mods if k not in allowed]
    if bad:
        raise SimError(f"{ins.mnemonic}: modifier {', '.join(bad)} not supported at {ins.where()}")


def _issue(w: Wave, ins: Instr) -> None:
    """Tell the memory-model check (if any) that a vector memory instruction issued."""
    order = w.group.memory.order
    if order is not None:
        order.issue(w, ins)


def _check_ops(ins: Instr, n: int) -> None:
    """SimError unless ``ins`` has ``n`` operands, none with a source modifier."""
    if len(ins.ops) != n:
        raise SimError(f"{ins.mnemonic}: expected {n} operands, got {len(ins.ops)} at {ins.where()}")
    if any(o.neg or o.abs or o.sext for o in ins.ops):
        raise SimError(f"{ins.mnemonic}: operand modifiers not supported at {ins.where()}")


# An element's dtype by (bytes, sign-extended), made once (a table built per load cost a core microseconds).
_ELEMENT = {(1, False): np.uint8, (1, True): np.int8, (2, False): np.uint16, (2, True): np.int16,
            (4, False): np.uint32, (4, True): np.uint32}


def _to_bytes(regs: np.ndarray, size: int) -> np.ndarray:
    """uint8 ``[64, n*size]``: register rows ``[n, 64]`` as each lane's bytes, ``size``
    low bytes of every register (little-endian, as memory holds them)."""
    per_lane = np.ascontiguousarray(regs.T).view(np.uint8).reshape(LANES, regs.shape[0], 4)
    return np.ascontiguousarray(per_lane[:, :, :size]).reshape(LANES, -1)


def _from_bytes(data: np.ndarray, size: int, signed: bool) -> np.ndarray:
    """uint32 ``[n, 64]`` registers from uint8 ``[64, n*size]``, each ``size``-byte
    element zero- or sign-extended."""
    dtype = _ELEMENT[size, signed]
    vals = np.ascontiguousarray(data).view(dtype)
    return vals.astype(np.int64).astype(np.uint32).T if size < 4 else vals.T


# ---- MUBUF --------------------------------------------------------------------

# name -> (element bytes, elements, sign-extend)
_BUFFER_LOADS = {
    "buffer_load_ubyte": (1, 1, False), "buffer_load_sbyte": (1, 1, True),
    "buffer_load_ushort": (2, 1, False), "buffer_load_sshort": (2, 1, True),
    "buffer_load_dword": (4, 1, False), "buffer_load_dwordx2": (4, 2, False),
    "buffer_load_dwordx3": (4, 3, False), "buffer_load_dwordx4": (4, 4, False),
}
_BUFFER_STORES = {
    "buffer_store_byte": (1, 1), "buffer_store_short": (2, 1),
    "buffer_store_dword": (4, 1), "buffer_store_dwordx2": (4, 2),
    "buffer_store_dwordx3": (4, 3), "buffer_store_dwordx4": (4, 4),
}
_MUBUF_MODS = frozenset({"offen", "offset"}) | _CACHE_BITS


def _mubuf_form(ins: Instr) -> tuple:
    """(vdata, vaddr or None without ``offen``, srsrc, soffset, instruction offset)
    of a MUBUF instruction; SimError for a form not implemented."""
    dec = ins.__dict__.get("_mubuf")
    if dec is None:
        if ins.mods.get("idxen"):
            raise SimError(f"{ins.mnemonic}: idxen (structured buffers) not supported at {ins.where()}")
        _check_mods(ins, _MUBUF_MODS)
        _check_ops(ins, 4)
        vdata, vaddr, srsrc, soff = ins.ops
        offen = bool(ins.mods.get("offen"))
        if offen != (vaddr.kind == "v") or vaddr.kind not in ("v", "off"):
            raise SimError(f"{ins.mnemonic}: address operand {vaddr.text} inconsistent with offen at {ins.where()}")
        if srsrc.kind != "s" or srsrc.count != 4 or soff.kind not in ("s", "const") or vdata.kind != "v":
            raise SimError(f"{ins.mnemonic}: unsupported operand form at {ins.where()}")
        dec = ins.__dict__["_mubuf"] = (vdata, vaddr if offen else None, srsrc, soff, int(ins.mods.get("offset", 0)))
    return dec


def _mubuf(w: Wave, ins: Instr):
    """(vdata operand, BufferResource, int64 byte offsets ``[64]``) of a MUBUF instruction."""
    vdata, vaddr, srsrc, soff, inst_off = _mubuf_form(ins)
    res = BufferResource.from_words(w.s[srsrc.index:srsrc.index + 4])
    base = w.sget(soff) + inst_off
    offsets = np.full(LANES, base, np.int64) if vaddr is None else w.v[vaddr.index].astype(np.int64) + base
    return vdata, res, offsets


def _buffer_load(w: Wave, ins: Instr) -> None:
    """MUBUF load: out-of-range components read 0, inactive lanes keep their registers."""
    size, n, signed = _BUFFER_LOADS[ins.base]
    vdata, res, offsets = _mubuf(w, ins)
    _issue(w, ins)
    if vdata.count != n:
        raise SimError(f"{ins.mnemonic}: destination {vdata.text} is not {n} registers at {ins.where()}")
    exe = w.exec_mask
    mem, where = w.group.memory, ins.where()
    addrs, inr = res.addresses(offsets, size * n)
    if not (exe & ~inr).any():
        data = mem.load(addrs, size * n, exe, where, (w, ins))
    else:
        data = np.zeros((LANES, size * n), np.uint8)
        for c in range(n):
            addrs, inr = res.addresses(offsets + c * size, size)
            data[:, c * size:(c + 1) * size] = mem.load(addrs, size, exe & inr, where, (w, ins))
    np.copyto(w.v[vdata.index:vdata.index + n], _from_bytes(data, size, signed), where=exe[None, :])


def _buffer_store(w: Wave, ins: Instr) -> None:
    """MUBUF store: out-of-range components are dropped."""
    size, n = _BUFFER_STORES[ins.base]
    vdata, res, offsets = _mubuf(w, ins)
    _issue(w, ins)
    if vdata.count != n:
        raise SimError(f"{ins.mnemonic}: data {vdata.text} is not {n} registers at {ins.where()}")
    exe = w.exec_mask
    mem, where = w.group.memory, ins.where()
    data = _to_bytes(w.v[vdata.index:vdata.index + n], size)
    addrs, inr = res.addresses(offsets, size * n)
    if not (exe & ~inr).any():
        mem.store(addrs, data, exe, where, (w, ins))
        return
    for c in range(n):
        addrs, inr = res.addresses(offsets + c * size, size)
        mem.store(addrs, data[:, c * size:(c + 1) * size], exe & inr, where, (w, ins))


def _issue_all(view: BatchView, ins: Instr) -> None:
    """``_issue`` for every wave of ``view``, in arrival order."""
    order = view.group.memory.order
    if order is not None:
        order.issue_waves(view.waves, ins)


def _write_loaded(view: BatchView, d: int, data: np.ndarray, size: int, signed: bool) -> None:
    """Registers ``d..`` of every wave of ``view`` from uint8 ``[n, 64, bytes]``,
    ``size``-byte elements zero- or sign-extended."""
    dtype = _ELEMENT[size, signed]
    vals = np.ascontiguousarray(data).view(dtype)
    if size < 4:
        vals = vals.astype(np.int64).astype(np.uint32)
    view.vb[:, d:d + vals.shape[2]] = vals.transpose(0, 2, 1)


def _buffer_offsets(ins: Instr):
    """``fn(view)`` of a MUBUF instruction's raw buffers: (base addresses int64
    ``[n]``, each lane's byte offset int64 ``[n, 64]``, ``num_records`` int64
    ``[n]``), or None where a wave's V# is structured (its handler refuses it);
    None when the form has no batched core."""
    try:
        vdata, vaddr, srsrc, soff, inst_off = _mubuf_form(ins)
    except SimError:
        return None
    r = srsrc.index

    def offsets(view):
        words = view.sb[:, r:r + 3].astype(np.int64)
        if (words[:, 1] >> 16 & 0x3FFF).any():
            return None
        base = words[:, 0] | (words[:, 1] & 0xFFFF) << 32
        sof = view.sb[:, soff.index].astype(np.int64) if soff.kind == "s" else np.int64(soff.bits32)
        if vaddr is None:
            # np.broadcast_to (a Python function, microseconds) only where every lane has one offset.
            return base, np.broadcast_to((sof + inst_off)[..., None], (len(view.waves), LANES)), words[:, 2]
        return base, view.vb[:, vaddr.index].astype(np.int64) + (sof + inst_off)[..., None], words[:, 2]
    return offsets


# What ``_buffer_in_range`` derives from the V#s and soffsets of a batch, by
# their bytes, the instruction offset, the access size and whether it has
# ``offen``. A loop reads a buffer through descriptors it changes once per
# iteration (a block's base) and uses for many loads, so the per-wave
# arithmetic is mostly done once per change.
_IN_RANGE = Memo(256)


def _buffer_in_range(ins: Instr, nbytes: int):
    """``fn(view)`` of a MUBUF instruction that ``_buffer_offsets`` binds, each
    lane accessing ``nbytes``: when every wave's V# is raw and every lane's
    whole access lies below its ``num_records``, (int64 ``[n, 64]`` addresses
    (not to be written to: without ``offen`` a cached array), the allocation
    holding them all or None); None otherwise (``_buffer_offsets`` then tells
    the lanes apart)."""
    _, vaddr, srsrc, soff, inst_off = _mubuf_form(ins)
    r, tail = srsrc.index, (inst_off, nbytes, vaddr is not None)

    def derive(words: np.ndarray, sof) -> tuple | None:
        """For V#s ``words`` (uint32 ``[n, 3]``) and soffsets ``sof`` (int64):
        (int64 ``[n, 1]`` base + soffset + offset, or without ``offen`` the
        addresses ``[n, 64]``; int64 ``[n, 1]`` the largest VGPR offset whose
        access is in range; the lowest byte any V# reaches from there and the
        end of the highest one's range, ints); None where a wave's V# is
        structured or none of its lanes can be in range."""
        w = words.astype(np.int64)
        if (w[:, 1] >> 16 & 0x3FFF).any():
            return None
        start = sof + inst_off  # every lane's byte offset is its VGPR (uint32, >= 0) plus this (>= 0)
        vlim = w[:, 2] - nbytes - start
        if (vlim < 0).any():
            return None
        base = w[:, 0] | (w[:, 1] & 0xFFFF) << 32
        first = base + start
        ends = int((base + w[:, 2]).max())
        return (first[:, None] if vaddr is not None else np.repeat(first[:, None], LANES, axis=1), vlim[:, None],
                int(first.min()), ends)

    def in_range(view) -> tuple | None:
        words = view.sb[:, r:r + 3]
        sof = view.sb[:, soff.index] if soff.kind == "s" else None
        key = (words.tobytes() if sof is None else words.tobytes() + sof.tobytes(),) + tail
        got = _IN_RANGE.get(key, _IN_RANGE)
        if got is _IN_RANGE:
            got = _IN_RANGE.put(key, derive(words, np.int64(soff.bits32) if sof is None else sof.astype(np.int64)))
        if got is None:
            return None
        addrs, vlim, lo, end = got
        if vaddr is not None:
            v = view.vb[:, vaddr.index]
            if not (v <= vlim).all():
                return None
            addrs = v + addrs
        mem = view.group.memory
        # Every lane's bytes lie in its V#'s range: an allocation holding all of
        # those holds them (two reductions fewer); else the lanes' own span.
        return addrs, mem.holding(lo, end) or mem.span(addrs, nbytes)
    return in_range


def _buffer_load_decoder(ins: Instr) -> Core | None:
    """The batched decoder of a MUBUF load: every wave's raw buffer, each
    lane's access in one allocation (read as each wave's handler would, in
    arrival order); components out of range read 0 where the allocation is one
    no workgroup wrote; anything else is each wave's handler's."""
    size, n, signed = _BUFFER_LOADS[ins.base]
    form = _buffer_offsets(ins)
    if form is None or ins.ops[0].count != n:
        return None
    d, comp = ins.ops[0].index, np.arange(n, dtype=np.int64) * size
    in_range = _buffer_in_range(ins, size * n)

    def core(view) -> bool | None:
        mem = view.group.memory
        fits = in_range(view)
        if fits is not None:
            addrs, a = fits
            if a is None:
                return False
            _issue_all(view, ins)
            data = mem.load_waves(a, addrs, size * n, view.waves, ins)
        else:
            got = form(view)
            if got is None:
                return False
            base, lane, records = got
            # Each component's byte offset [n, 64, n]; out of range components read 0.
            offsets = lane[..., None] + comp
            inr = (offsets >= 0) & (offsets + size <= records[:, None, None])
            if inr.any():
                addrs = np.where(inr, base[:, None, None] + offsets, (base[:, None, None] + offsets)[inr][0])
                data = mem.load_unwritten(addrs, size, view.waves[-1].group.rank)
                if data is None:
                    return False
                data = np.where(inr[..., None], data, np.uint8(0))
            else:
                data = np.zeros(offsets.shape + (size,), np.uint8)
            _issue_all(view, ins)
        _write_loaded(view, d, data.reshape(len(view.waves), LANES, -1), size, signed)
        return None
    return core


@batched(*_BUFFER_STORES)
def _buffer_store_decoder(ins: Instr) -> Core | None:
    """The batched decoder of a MUBUF store: every wave's raw buffer, each
    lane's access in one allocation and either wholly in range or wholly out
    of it (dropped, as the handler drops its components), written as each
    wave's handler would, in arrival order; anything else (a lane with some
    components in range and some not) is each wave's handler's."""
    size, n = _BUFFER_STORES[ins.base]
    form = _buffer_offsets(ins)
    if form is None or ins.ops[0].count != n:
        return None
    d, comp = ins.ops[0].index, np.arange(n, dtype=np.int64) * size
    in_range = _buffer_in_range(ins, size * n)

    def core(view) -> bool | None:
        data = _lane_bytes(view, d, n, size)
        waves = view.waves
        fits = in_range(view)
        if fits is None:
            got = form(view)
            if got is None:
                return False
            base, lane, records = got
            offsets = lane[..., None] + comp
            parts = (offsets >= 0) & (offsets + size <= records[:, None, None])
            inr = parts.all(axis=2)
            if (parts.any(axis=2) != inr).any():
                return False
            # A lane out of range stores again what the wave's last lane in range
            # stores: the same bytes, the same value, and that lane still writes
            # them last. A wave with no lane in range stores nothing (it issues).
            keep = inr.any(axis=1)
            src = np.where(inr, np.arange(LANES), LANES - 1 - np.argmax(inr[:, ::-1], axis=1)[:, None])[keep]
            base, lane = base[keep], np.take_along_axis(lane[keep], src, axis=1)
            data = np.take_along_axis(data[keep], src[..., None], axis=1)
            waves = [w for w, k in zip(waves, keep.tolist()) if k]
            addrs = base[:, None] + lane  # int64, as in_range's
            fits = (addrs, view.group.memory.span(addrs, size * n) if waves else None)
        addrs, a = fits
        if not waves:
            _issue_all(view, ins)
            return None
        if a is None:
            return False
        _issue_all(view, ins)
        view.group.memory.store_waves(a, addrs, data, waves, ins)
        return None
    return core


op(*_BUFFER_LOADS)(_buffer_load)
op(*_BUFFER_STORES)(_buffer_store)
batched(*_BUFFER_LOADS)(_buffer_load_decoder)


# ---- global -------------------------------------------------------------------

_GLOBAL_LOADS = {
    "global_load_ubyte": (1, 1, False), "global_load_sbyte": (1, 1, True),
    "global_load_ushort": (2, 1, False), "global_load_sshort": (2, 1, True),
    "global_load_dword": (4, 1, False), "global_load_dwordx2": (4, 2, False),
    "global_load_dwordx3": (4, 3, False), "global_load_dwordx4": (4, 4, False),
}
_GLOBAL_STORES = {
    "global_store_byte": (1, 1), "global_store_short": (2, 1),
    "global_store_dword": (4, 1), "global_store_dwordx2": (4, 2),
    "global_store_dwordx3": (4, 3), "global_store_dwordx4": (4, 4),
}
_GLOBAL_MODS = frozenset({"offset"}) | _CACHE_BITS


def _global_addrs(w: Wave, ins: Instr, vaddr: Operand, saddr: Operand) -> np.ndarray:
    """uint64 ``[64]`` addresses: SGPR-pair base + 32-bit VGPR offset, or (``off``)
    a 64-bit VGPR-pair address; plus the signed instruction offset."""
    off = int(ins.mods.get("offset", 0))
    if saddr.kind == "off":
        if vaddr.kind != "v" or vaddr.count != 2:
            raise SimError(f"{ins.mnemonic}: with off the address must be a VGPR pair at {ins.where()}")
        base = w.vget64(vaddr)
    else:
        if saddr.kind != "s" or saddr.count != 2 or vaddr.kind != "v" or vaddr.count != 1:
            raise SimError(f"{ins.mnemonic}: unsupported address form at {ins.where()}")
        base = np.uint64(w.sget(saddr, 64)) + w.v[vaddr.index].astype(np.uint64)
    return base + np.uint64(off & 0xFFFFFFFFFFFFFFFF)


def _global_load(w: Wave, ins: Instr) -> None:
    """``global_load_* vdst, vaddr, saddr|off``."""
    size, n, signed = _GLOBAL_LOADS[ins.base]
    _check_mods(ins, _GLOBAL_MODS)
    _check_ops(ins, 3)
    vdst, vaddr, saddr = ins.ops
    if vdst.kind != "v" or vdst.count != n:
        raise SimError(f"{ins.mnemonic}: destination {vdst.text} is not {n} registers at {ins.where()}")
    _issue(w, ins)
    exe = w.exec_mask
    data = w.group.memory.load(_global_addrs(w, ins, vaddr, saddr), size * n, exe, ins.where(), (w, ins))
    np.copyto(w.v[vdst.index:vdst.index + n], _from_bytes(data, size, signed), where=exe[None, :])


def _global_store(w: Wave, ins: Instr) -> None:
    """``global_store_* vaddr, vdata, saddr|off``."""
    size, n = _GLOBAL_STORES[ins.base]
    _check_mods(ins, _GLOBAL_MODS)
    _check_ops(ins, 3)
    vaddr, vdata, saddr = ins.ops
    if vdata.kind != "v" or vdata.count != n:
        raise SimError(f"{ins.mnemonic}: data {vdata.text} is not {n} registers at {ins.where()}")
    _issue(w, ins)
    data = _to_bytes(w.v[vdata.index:vdata.index + n], size)
    w.group.memory.store(_global_addrs(w, ins, vaddr, saddr), data, w.exec_mask, ins.where(), (w, ins))


def _global_addrs_batched(ins: Instr, vaddr: Operand, saddr: Operand):
    """``fn(view)``: uint64 ``[n, 64]`` addresses of a global access for every
    wave (as ``_global_addrs``); None for a form its handler refuses."""
    off = np.uint64(int(ins.mods.get("offset", 0)) & 0xFFFFFFFFFFFFFFFF)
    if saddr.kind == "off" and vaddr.kind == "v" and vaddr.count == 2:
        i = vaddr.index
        return lambda view: (view.vb[:, i].astype(np.uint64) | view.vb[:, i + 1].astype(np.uint64) << np.uint64(32)) \
            + off
    if saddr.kind == "s" and saddr.count == 2 and vaddr.kind == "v" and vaddr.count == 1:
        s, i = saddr.index, vaddr.index
        return lambda view: (np.ascontiguousarray(view.sb[:, s:s + 2]).view(np.uint64) + off) + view.vb[:, i]
    return None


def _global_form(ins: Instr, reg_at: int, n: int):
    """For a ``global_load_*`` (``reg_at`` 0: ``vdst, vaddr, saddr``) or
    ``global_store_*`` (1: ``vaddr, vdata, saddr``) of ``n`` registers: its
    register operand and ``_global_addrs_batched``'s address function; None for
    a form its handler refuses or that has no batched core."""
    try:
        _check_mods(ins, _GLOBAL_MODS)
        _check_ops(ins, 3)
    except SimError:
        return None
    reg, vaddr, saddr = ins.ops[reg_at], ins.ops[1 - reg_at], ins.ops[2]
    addresses = _global_addrs_batched(ins, vaddr, saddr)
    if reg.kind != "v" or reg.count != n or addresses is None:
        return None
    return reg, addresses


def _global_load_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``global_load_*``: every wave's addresses in one
    allocation (read as each wave's handler would, in arrival order);
    anything else is each wave's handler's."""
    size, n, signed = _GLOBAL_LOADS[ins.base]
    form = _global_form(ins, 0, n)
    if form is None:
        return None
    vdst, addresses = form

    def core(view) -> bool | None:
        addrs = addresses(view)
        mem = view.group.memory
        a = mem.span(addrs, size * n)
        if a is None:
            return False
        _issue_all(view, ins)
        _write_loaded(view, vdst.index, mem.load_waves(a, addrs, size * n, view.waves, ins), size, signed)
        return None
    return core


@batched(*_GLOBAL_STORES)
def _global_store_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``global_store_*``: every wave's addresses in one
    allocation (written as each wave's handler would, in arrival order)."""
    size, n = _GLOBAL_STORES[ins.base]
    form = _global_form(ins, 1, n)
    if form is None:
        return None
    vdata, addresses = form

    def core(view) -> bool | None:
        addrs = addresses(view)
        mem = view.group.memory
        a = mem.span(addrs, size * n)
        if a is None:
            return False
        _issue_all(view, ins)
        mem.store_waves(a, addrs, _lane_bytes(view, vdata.index, n, size), view.waves, ins)
        return None
    return core


op(*_GLOBAL_LOADS)(_global_load)
op(*_GLOBAL_STORES)(_global_store)
batched(*_GLOBAL_LOADS)(_global_load_decoder)


@op("global_atomic_add")
def _global_atomic_add(w: Wave, ins: Instr) -> None:
    """``global_atomic_add [vdst,] vaddr, vdata, saddr|off [sc0]``: uint32 add in
    lane order; with sc0 (GLC) vdst receives the old value."""
    _check_mods(ins, _GLOBAL_MODS)
    returns = bool(ins.mods.get("sc0"))
    _check_ops(ins, 4 if returns else 3)
    ops = ins.ops[1:] if returns else ins.ops
    vaddr, vdata, saddr = ops
    if vdata.kind != "v" or vdata.count != 1:
        raise SimError(f"{ins.mnemonic}: data {vdata.text} is not one VGPR at {ins.where()}")
    _issue(w, ins)
    exe = w.exec_mask
    old = w.group.memory.atomic_add_u32(_global_addrs(w, ins, vaddr, saddr), w.v[vdata.index], exe, ins.where(),
                                        (w, ins), returns)
    if returns:
        w.vset(ins, old)


@op("buffer_wbl2", "buffer_inv")
def _cache_control(w: Wave, ins: Instr) -> None:
    """``buffer_wbl2 [sc0] [sc1]`` (write dirty L2 lines back) and ``buffer_inv [sc0]
    [sc1]`` (invalidate L1, with sc1 also the L2's non-local lines): no value
    changes here, where memory has no caches; the memory-model check reads them."""
    _check_mods(ins, _CACHE_BITS)
    if ins.ops:
        raise SimError(f"{ins.mnemonic}: takes no operands at {ins.where()}")
    order = w.group.memory.order
    if order is not None:
        (order.wbl2 if ins.base == "buffer_wbl2" else order.inv)(w, ins)


# ---- LDS ----------------------------------------------------------------------

_DS_READS = {
    "ds_read_u8": (1, 1, False), "ds_read_i8": (1, 1, True),
    "ds_read_u16": (2, 1, False), "ds_read_i16": (2, 1, True),
    "ds_read_b32": (4, 1, False), "ds_read_b64": (4, 2, False),
    "ds_read_b96": (4, 3, False), "ds_read_b128": (4, 4, False),
}
_DS_WRITES = {
    "ds_write_b8": (1, 1), "ds_write_b16": (2, 1), "ds_write_b32": (4, 1),
    "ds_write_b64": (4, 2), "ds_write_b96": (4, 3), "ds_write_b128": (4, 4),
}
# name -> (registers per element, offset unit in bytes)
_DS_READ2 = {"ds_read2_b32": (1, 4), "ds_read2st64_b32": (1, 256),
             "ds_read2_b64": (2, 8), "ds_read2st64_b64": (2, 512)}
_DS_WRITE2 = {"ds_write2_b32": (1, 4), "ds_write2st64_b32": (1, 256),
              "ds_write2_b64": (2, 8), "ds_write2st64_b64": (2, 512)}


def _ds_addr(w: Wave, ins: Instr, vaddr: Operand) -> np.ndarray:
    """int64 ``[64]``: the lane's LDS byte address register."""
    if vaddr.kind != "v" or vaddr.count != 1:
        raise SimError(f"{ins.mnemonic}: address {vaddr.text} is not a VGPR at {ins.where()}")
    return w.v[vaddr.index].astype(np.int64)


def _ds_read(w: Wave, ins: Instr) -> None:
    """``ds_read_* vdst, vaddr [offset:N]``."""
    size, n, signed = _DS_READS[ins.base]
    _check_mods(ins, frozenset({"offset"}))
    _check_ops(ins, 2)
    vdst, vaddr = ins.ops
    if vdst.kind != "v" or vdst.count != n:
        raise SimError(f"{ins.mnemonic}: destination {vdst.text} is not {n} registers at {ins.where()}")
    exe = w.exec_mask
    addrs = _ds_addr(w, ins, vaddr) + int(ins.mods.get("offset", 0))
    data = w.group.lds.load(addrs, size * n, exe, ins.where())
    np.copyto(w.v[vdst.index:vdst.index + n], _from_bytes(data, size, signed), where=exe[None, :])


def _ds_write(w: Wave, ins: Instr) -> None:
    """``ds_write_* vaddr, vdata [offset:N]``."""
    size, n = _DS_WRITES[ins.base]
    _check_mods(ins, frozenset({"offset"}))
    _check_ops(ins, 2)
    vaddr, vdata = ins.ops
    if vdata.kind != "v" or vdata.count != n:
        raise SimError(f"{ins.mnemonic}: data {vdata.text} is not {n} registers at {ins.where()}")
    addrs = _ds_addr(w, ins, vaddr) + int(ins.mods.get("offset", 0))
    w.group.lds.store(addrs, _to_bytes(w.v[vdata.index:vdata.index + n], size), w.exec_mask, ins.where())


def _ds_read2(w: Wave, ins: Instr) -> None:
    """``ds_read2*_b32/b64 vdst, vaddr offset0:A offset1:B``: two elements at
    ``addr + A*unit`` and ``addr + B*unit``."""
    n, unit = _DS_READ2[ins.base]
    _check_mods(ins, frozenset({"offset0", "offset1"}))
    _check_ops(ins, 2)
    vdst, vaddr = ins.ops
    if vdst.kind != "v" or vdst.count != 2 * n:
        raise SimError(f"{ins.mnemonic}: destination {vdst.text} is not {2 * n} registers at {ins.where()}")
    exe = w.exec_mask
    addr = _ds_addr(w, ins, vaddr)
    for k, key in enumerate(("offset0", "offset1")):
        data = w.group.lds.load(addr + int(ins.mods.get(key, 0)) * unit, 4 * n, exe, ins.where())
        np.copyto(w.v[vdst.index + k * n:vdst.index + (k + 1) * n], _from_bytes(data, 4, False),
                  where=exe[None, :])


def _ds_write2(w: Wave, ins: Instr) -> None:
    """``ds_write2*_b32/b64 vaddr, vdata0, vdata1 offset0:A offset1:B``: vdata0
    at ``addr + A*unit``, then vdata1 at ``addr + B*unit``."""
    n, unit = _DS_WRITE2[ins.base]
    _check_mods(ins, frozenset({"offset0", "offset1"}))
    _check_ops(ins, 3)
    vaddr, d0, d1 = ins.ops
    if any(d.kind != "v" or d.count != n for d in (d0, d1)):
        raise SimError(f"{ins.mnemonic}: data operands are not {n} registers each at {ins.where()}")
    exe = w.exec_mask
    addr = _ds_addr(w, ins, vaddr)
    for key, d in (("offset0", d0), ("offset1", d1)):
        w.group.lds.store(addr + int(ins.mods.get(key, 0)) * unit, _to_bytes(w.v[d.index:d.index + n], 4),
                          exe, ins.where())


op(*_DS_READS)(_ds_read)
op(*_DS_WRITES)(_ds_write)
op(*_DS_READ2)(_ds_read2)
op(*_DS_WRITE2)(_ds_write2)


def _lane_bytes(view, d: int, n: int, size: int) -> np.ndarray:
    """uint8 ``[waves, 64, n*size]``: registers ``d..d+n-1`` of every wave as each
    lane's bytes, ``size`` low bytes of every register (as ``_to_bytes``)."""
    regs = np.ascontiguousarray(view.vb[:, d:d + n].transpose(0, 2, 1))
    return regs.view(np.uint8).reshape(regs.shape[0], LANES, n, 4)[..., :size].reshape(regs.shape[0], LANES, -1)


def _lds_rows(view, addrs: np.ndarray, nbytes: int) -> ByteRows | None:
    """The ``nbytes`` at each wave's LDS byte addresses ``addrs`` (int64 ``[waves,
    ...]``) as bytes of the launch's LDS pool (``ByteRows.get``/``put`` of
    ``group.lds.pool``: ``addrs.shape + (nbytes,)``); None when any byte lies
    outside the workgroup's LDS (the handler names the fault)."""
    if (addrs < 0).any() or int(addrs.max()) + nbytes > view.group.lds.data.size:
        return None
    return ByteRows(view.lds_off.reshape((-1,) + (1,) * (addrs.ndim - 1)) + addrs, nbytes)


def _ds_form(ins: Instr, nops: int, mods: frozenset) -> bool:
    """Whether ``ins`` has the operand count and modifiers a DS handler accepts, a VGPR address first."""
    try:
        _check_mods(ins, mods)
        _check_ops(ins, nops)
    except SimError:
        return False
    return ins.ops[0 if nops == 3 or ins.base.startswith("ds_write") else 1].kind == "v"


def _ds_single(ins: Instr, n: int, size: int):
    """For a one-address ``ds_read_*``/``ds_write_*`` moving ``n`` registers of
    ``size`` bytes: its register operand (destination or data) and the function
    giving each wave's bytes of the LDS pool (``_lds_rows``; None when a byte
    lies outside the LDS); None when the form has no batched core."""
    if not _ds_form(ins, 2, frozenset({"offset"})):
        return None
    regs, vaddr = ins.ops if ins.base.startswith("ds_read") else ins.ops[::-1]
    if regs.kind != "v" or regs.count != n or vaddr.count != 1:
        return None
    off = int(ins.mods.get("offset", 0))

    def rows(view) -> ByteRows | None:
        return _lds_rows(view, view.vb[:, vaddr.index].astype(np.int64) + off, size * n)
    return regs, rows


@batched(*_DS_READS)
def _ds_read_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``ds_read_*``: each wave from its workgroup's LDS."""
    size, n, signed = _DS_READS[ins.base]
    form = _ds_single(ins, n, size)
    if form is None:
        return None
    vdst, rows = form

    def core(view) -> bool | None:
        acc = rows(view)
        if acc is None:
            return False
        _write_loaded(view, vdst.index, acc.get(view.group.lds.pool), size, signed)
        return None
    return core


@batched(*_DS_WRITES)
def _ds_write_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``ds_write_*``: waves in arrival order, lanes in lane order."""
    size, n = _DS_WRITES[ins.base]
    form = _ds_single(ins, n, size)
    if form is None:
        return None
    vdata, rows = form

    def core(view) -> bool | None:
        acc = rows(view)
        if acc is None:
            return False
        acc.put(view.group.lds.pool, _lane_bytes(view, vdata.index, n, size))
        return None
    return core


@batched(*_DS_READ2)
def _ds_read2_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``ds_read2*``."""
    n, unit = _DS_READ2[ins.base]
    if not _ds_form(ins, 2, frozenset({"offset0", "offset1"})):
        return None
    vdst, vaddr = ins.ops
    if vdst.kind != "v" or vdst.count != 2 * n or vaddr.count != 1:
        return None
    offs = np.array([int(ins.mods.get("offset0", 0)) * unit, int(ins.mods.get("offset1", 0)) * unit], np.int64)

    def core(view) -> bool | None:
        # [waves, 64, 2]: element k of each lane at its own address.
        acc = _lds_rows(view, view.vb[:, vaddr.index].astype(np.int64)[..., None] + offs, 4 * n)
        if acc is None:
            return False
        data = acc.get(view.group.lds.pool)  # [waves, 64, 2, 4n]: element 0's registers, then element 1's
        _write_loaded(view, vdst.index, data.reshape(data.shape[0], LANES, -1), 4, False)
        return None
    return core


@batched(*_DS_WRITE2)
def _ds_write2_decoder(ins: Instr) -> Core | None:
    """The batched decoder of ``ds_write2*``: per wave, every lane's first element, then every lane's second."""
    n, unit = _DS_WRITE2[ins.base]
    if not _ds_form(ins, 3, frozenset({"offset0", "offset1"})):
        return None
    vaddr, d0, d1 = ins.ops
    if any(d.kind != "v" or d.count != n for d in (d0, d1)) or vaddr.count != 1:
        return None
    offs = np.array([int(ins.mods.get("offset0", 0)) * unit, int(ins.mods.get("offset1", 0)) * unit], np.int64)

    def core(view) -> bool | None:
        # [waves, 2, 64]: element k of each lane, the first elements of a wave before its second.
        acc = _lds_rows(view, view.vb[:, vaddr.index].astype(np.int64)[:, None, :] + offs[:, None], 4 * n)
        if acc is None:
            return False
        acc.put(view.group.lds.pool, np.stack([_lane_bytes(view, d0.index, n, 4), _lane_bytes(view, d1.index, n, 4)],
                                              axis=1))
        return None
    return core
