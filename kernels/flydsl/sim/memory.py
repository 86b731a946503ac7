"""The simulated device's memory: only what the host side allocated.

Every buffer the host hands the kernel is registered with ``Memory.alloc``
and gets a 64-bit device address; allocations are separated by unmapped
guard gaps. Any global access that does not fall entirely inside one
allocation raises ``MemoryFault`` naming the address, the instruction and
the nearest allocation: the simulator is a stray-read detector no GPU is.
Registered arrays are the memory itself (no copy), so a large pool made
with ``np.zeros`` stays sparse: pages nobody touches are never resident.

Buffer resources (V#) follow the CDNA3/CDNA4 ISA: base address in bits
0..47, stride in 48..61, ``num_records`` in word 2. For raw buffers (stride
0, the only kind this kernel makes) each dword of an access is checked on
its own: a dword whose byte offset ``o`` has ``o + size > num_records`` is
out of range, reads 0, and its store is dropped (the ISA's rule; hardware
also drops out-of-range atomics). The in-range part must then lie inside
an allocation, or it is a fault.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from .wave import LANES, MemoryFault, SimError

BASE = 0x7F00_0000_0000  # first device address (a canonical user-space-like address)
GAP = 1 << 20  # unmapped bytes between allocations (more than any instruction offset)
ALIGN = 1 << 16


@dataclass
class Allocation:
    """One registered buffer: ``name``, device address ``base``, ``data`` (its
    bytes as a flat uint8 view of the host array), ``size`` in bytes."""

    name: str
    base: int
    data: np.ndarray

    @property
    def size(self) -> int:
        return self.data.size


# The void dtypes of ByteRows' rows by width in bytes, made once (making one per
# access cost about as much as the gather it serves).
_VOID: dict[int, np.dtype] = {}


class ByteRows:
    """The bytes of a batched access: ``nbytes`` at each of the int64 byte
    offsets ``offs`` (``[n, ...]``: wave k's accesses in row k, e.g. one per
    lane) of one allocation or LDS pool, as rows of ``g`` bytes (``g`` the
    largest power of two up to 16 dividing ``nbytes`` and every offset): byte
    j of access ``offs[i]`` is element ``j % g`` of row ``rows[i + (j // g,)]``
    of a per-byte array. A row moves as one
    element of a void dtype, which numpy gathers and scatters several times
    faster than ``g`` elements by byte index; two accesses overlap only in
    whole rows, so where several write a byte the last one's still wins."""

    __slots__ = ("offs", "nbytes", "g", "rows")

    def __init__(self, offs: np.ndarray, nbytes: int):
        self.offs, self.nbytes = offs, nbytes
        bits = int(np.bitwise_or.reduce(offs, axis=None)) | nbytes | 16
        self.g = g = bits & -bits
        # A shift (g is a power of two) is the floor division, and takes about a third less time.
        first = (offs >> (g.bit_length() - 1))[..., None]
        self.rows = first + np.arange(nbytes // g) if nbytes > g else first

    def _rows_of(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` (1-D, one element per byte of the allocation) as 1-D rows of a
        void dtype (its last ``size % g`` elements, which no access reaches, left out)."""
        width = self.g * arr.itemsize
        row = _VOID.get(width)
        if row is None:
            row = _VOID[width] = np.dtype((np.void, width))
        return arr[:arr.size - arr.size % self.g].view(row)

    def get(self, arr: np.ndarray) -> np.ndarray:
        """``arr``'s elements at the accessed bytes: ``offs.shape + (nbytes,)``."""
        return self._rows_of(arr).take(self.rows).view(arr.dtype).reshape(self.offs.shape + (self.nbytes,))

    def put(self, arr: np.ndarray, values) -> None:
        """Assign ``values`` (broadcast to ``offs.shape + (nbytes,)``) at the
        accessed bytes of ``arr``, lanes of a wave and waves in order (a later
        one wins a byte two write)."""
        shape = self.offs.shape + (self.nbytes,)
        if type(values) is not np.ndarray or values.shape != shape:
            # (np.broadcast_to is a Python function, microseconds, for what most callers need not.)
            values = np.broadcast_to(values, shape)
        v = np.ascontiguousarray(values, arr.dtype)
        rows = self._rows_of(arr)
        rows[self.rows] = v.reshape(self.rows.shape[:-1] + (-1,)).view(rows.dtype)

    def index(self) -> np.ndarray:
        """int64 ``offs.shape + (nbytes,)``: every accessed byte's offset."""
        return self.offs[..., None] + np.arange(self.nbytes)


class OrderDiverged(SimError):
    """Workgroups executing together touched memory in an order the launch's
    arrival order would not have: the launch must run one workgroup at a time."""


def _late(hi: np.ndarray, r: np.ndarray, ranks: list[int], what: str) -> None:
    """OrderDiverged naming the first wave k (rank ``ranks[k]``, ascending; ``r``:
    them as int32 ``[n, 1, ...]``) whose bytes' highest ranks ``hi`` (int32 ``[n,
    ...]``) hold one above its own, ``what`` it did with them."""
    # No byte above the lowest rank clears every wave at once (the usual case: two reductions fewer).
    if int(hi.max()) <= ranks[0]:
        return
    late = (hi > r).reshape(len(ranks), -1).any(axis=1)
    if late.any():
        raise OrderDiverged(f"workgroup at arrival {ranks[int(np.argmax(late))]} {what}")


class ArrivalGuard:
    """Whether a launch whose workgroups execute together touches global memory
    as running them one at a time in arrival order would (``rank``: the
    arrival position of the workgroup accessing memory now).

    Two accesses of one byte by different workgroups, at least one a write
    (stores and atomics), conflict; the batched run must perform every
    conflicting pair in rank order, so that each load reads the bytes and
    each atomic the value it would have read had the workgroups run one
    after another. Per byte of every allocation written during the launch:
    the highest rank that wrote it and the highest that accessed it; a write
    by rank r to a byte a higher rank accessed, or a read of a byte a higher
    rank wrote, raises ``OrderDiverged``. Allocations nobody wrote keep only
    the highest rank that read them (taken to have read every byte once one
    is written). Each allocation's bytes are saved at its first write, so
    ``restore`` undoes the launch."""

    def __init__(self):
        self.rank = 0
        self._read_hi: dict[int, int] = {}  # id(allocation) -> highest reader rank, before any write
        self._hi: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id -> (highest writer, highest accessor)
        self._saved: list[tuple[Allocation, np.ndarray]] = []

    def read(self, a: Allocation, idx: np.ndarray) -> None:
        """Before rank ``rank`` reads bytes ``idx`` (int64 offsets) of ``a``."""
        hi = self._hi.get(id(a))
        if hi is None:
            if self._read_hi.get(id(a), -1) < self.rank:
                self._read_hi[id(a)] = self.rank
            return
        hw, ha = hi
        if int(hw[idx].max()) > self.rank:
            raise OrderDiverged(f"workgroup at arrival {self.rank} reads {a.name} bytes written by a later one")
        ha[idx] = np.maximum(ha[idx], self.rank)

    def write(self, a: Allocation, idx: np.ndarray) -> None:
        """Before rank ``rank`` writes (or atomically updates) bytes ``idx`` of ``a``."""
        hw, ha = self._written(a, self.rank)
        if int(ha[idx].max()) > self.rank:
            raise OrderDiverged(f"workgroup at arrival {self.rank} writes {a.name} bytes a later one accessed")
        hw[idx] = np.maximum(hw[idx], self.rank)
        ha[idx] = np.maximum(ha[idx], self.rank)

    def _written(self, a: Allocation, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(highest writer, highest accessor) of every byte of ``a``, which rank
        ``rank`` is about to write: made (and ``a``'s bytes saved) at its first write."""
        hi = self._hi.get(id(a))
        if hi is None:
            read_hi = self._read_hi.get(id(a), -1)
            if read_hi > rank:
                raise OrderDiverged(f"workgroup at arrival {rank} writes {a.name}, read by a later one")
            self._saved.append((a, a.data.copy()))
            hi = self._hi[id(a)] = (np.full(a.size, -1, np.int32), np.full(a.size, read_hi, np.int32))
        return hi

    def read_waves(self, a: Allocation, acc: ByteRows, ranks: list[int]) -> None:
        """``read`` for waves of ranks ``ranks`` (ascending) in turn, wave k reading
        its bytes of ``acc`` (row k of ``acc.offs``): the check sees what it would
        see one wave at a time, since a read changes nothing another read checks."""
        hi = self._hi.get(id(a))
        if hi is None:
            if self._read_hi.get(id(a), -1) < ranks[-1]:
                self._read_hi[id(a)] = ranks[-1]
            return
        hw, ha = hi
        r = np.array(ranks, np.int32).reshape((-1,) + (1,) * acc.offs.ndim)
        _late(acc.get(hw), r, ranks, f"reads {a.name} bytes written by a later one")
        # Where waves read one byte, the last (the highest rank) is assigned last.
        acc.put(ha, np.maximum(acc.get(ha), r))

    def write_waves(self, a: Allocation, acc: ByteRows, ranks: list[int]) -> None:
        """``write`` for waves of ranks ``ranks`` (ascending) in turn, wave k
        writing its bytes of ``acc``: an earlier wave of the batch has no higher
        rank, so what it records never fails a later one."""
        hw, ha = self._written(a, ranks[0])
        r = np.array(ranks, np.int32).reshape((-1,) + (1,) * acc.offs.ndim)
        got = acc.get(ha)
        _late(got, r, ranks, f"writes {a.name} bytes a later one accessed")
        acc.put(hw, np.maximum(acc.get(hw), r))
        acc.put(ha, np.maximum(got, r))

    def unwritten(self, a: Allocation) -> bool:
        """Whether no workgroup has written ``a`` during the launch so far."""
        return id(a) not in self._hi

    def restore(self) -> None:
        """Every allocation written since the guard was made back to its bytes then."""
        for a, saved in self._saved:
            a.data[:] = saved


def _rows(a: Allocation, addrs: np.ndarray, nbytes: int) -> ByteRows:
    """The ``nbytes`` at each of ``addrs`` (uint64, or int64 where a caller computed
    them so: either is subtracted as its own dtype), all inside ``a``, as ``ByteRows``."""
    return ByteRows((addrs - a.base).astype(np.int64, copy=False), nbytes)


class Memory:
    """The device address space: a sorted list of allocations."""

    def __init__(self):
        # The memory-model check (``memorder.MemOrder``) accesses report to, or None.
        self.order = None
        # The arrival-order guard of a batched launch in progress (``ArrivalGuard``), or None.
        self.guard: ArrivalGuard | None = None
        self.allocs: list[Allocation] = []
        self._bases: list[int] = []
        self._next = BASE

    def alloc(self, name: str, array: np.ndarray) -> int:
        """Register ``array`` (C-contiguous, any dtype; written in place by the
        kernel) as buffer ``name``; returns its device address."""
        if not array.flags.c_contiguous:
            raise ValueError(f"buffer {name!r} must be C-contiguous")
        data = array.reshape(-1).view(np.uint8)
        base = self._next
        self.allocs.append(Allocation(name, base, data))
        self._bases.append(base)
        self._next = (base + max(data.size, 1) + GAP + ALIGN - 1) // ALIGN * ALIGN
        return base

    def find(self, addr: int) -> Allocation | None:
        """The allocation holding byte ``addr``, or None."""
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0 and addr < self.allocs[i].base + self.allocs[i].size:
            return self.allocs[i]
        return None

    def describe(self, addr: int) -> str:
        """Where ``addr`` is relative to the nearest allocation (for fault messages)."""
        if not self.allocs:
            return "no buffer is allocated"
        i = bisect.bisect_right(self._bases, addr) - 1
        cands = [a for a in self.allocs[max(i, 0):i + 2]]
        best = min(cands, key=lambda a: min(abs(addr - a.base), abs(addr - (a.base + a.size))))
        if addr < best.base:
            return f"{best.base - addr} bytes before buffer {best.name!r} ({best.size} bytes at {best.base:#x})"
        return f"{addr - best.base - best.size} bytes past the end of buffer {best.name!r} " \
               f"({best.size} bytes at {best.base:#x})"

    def _resolve(self, addrs: np.ndarray, nbytes: int, active: np.ndarray, where: str):
        """(allocation, uint64 offsets) for active lanes accessing ``nbytes`` at ``addrs``."""
        act = addrs[active]
        lo, hi = int(act.min()), int(act.max())
        a = self.find(lo)
        if a is not None and hi + nbytes <= a.base + a.size:
            return a, addrs - np.uint64(a.base)
        bad = next(int(x) for x in act if (b := self.find(int(x))) is None or int(x) + nbytes > b.base + b.size)
        raise MemoryFault(f"{nbytes}-byte access at {bad:#x} outside every allocation ({self.describe(bad)}) "
                          f"at {where}")

    def load_unwritten(self, addrs: np.ndarray, nbytes: int, rank: int) -> np.ndarray | None:
        """uint8 ``addrs.shape + (nbytes,)``: the bytes at ``addrs`` (uint64 or int64, any
        shape; every lane active, rank ``rank`` the highest arrival reading),
        when all of them lie in one allocation that no workgroup of a batched
        launch has written (so neither the arrival-order guard nor the
        memory-model check has anything to say about it); None otherwise,
        having read nothing."""
        a = self.span(addrs, nbytes)
        if a is None:
            return None
        if (self.guard is not None and not self.guard.unwritten(a)) or \
                (self.order is not None and self.order.tracks(a)):
            return None
        if self.guard is not None:
            self.guard.rank = rank
            self.guard.read(a, np.zeros(0, np.int64))
        return _rows(a, addrs, nbytes).get(a.data)

    def span(self, addrs: np.ndarray, nbytes: int) -> Allocation | None:
        """The allocation holding all ``nbytes`` at every one of ``addrs`` (uint64
        or int64, any shape), or None."""
        lo, hi = int(np.minimum.reduce(addrs, axis=None)), int(np.maximum.reduce(addrs, axis=None))
        return self.holding(lo, hi + nbytes)

    def holding(self, lo: int, end: int) -> Allocation | None:
        """The allocation holding every byte from ``lo`` up to ``end`` (exclusive), or None."""
        a = self.find(lo)
        return a if a is not None and end <= a.base + a.size else None

    def load_waves(self, a: Allocation, addrs: np.ndarray, nbytes: int, waves, ins=None) -> np.ndarray:
        """uint8 ``addrs.shape + (nbytes,)``: the bytes at ``addrs`` (uint64 or int64
        ``[n, ...]``, all inside ``a`` (``span``); row k the addresses of ``waves[k]``,
        every lane active, waves in arrival order), as ``load`` for each wave in
        turn reads them: the arrival-order guard, and with ``ins`` (the
        instruction; None for a scalar load, which is not checked) the
        memory-model check, which may substitute stale bytes."""
        acc = _rows(a, addrs, nbytes)
        if self.guard is not None:
            self.guard.read_waves(a, acc, [w.group.rank for w in waves])
        got = acc.get(a.data)
        if self.order is not None and ins is not None and self.order.tracks(a):
            got = self.order.load_waves(waves, ins, a, acc, got)
        return got

    def store_waves(self, a: Allocation, addrs: np.ndarray, data: np.ndarray, waves, ins) -> None:
        """Write uint8 ``data`` (``addrs.shape + (nbytes,)``) at ``addrs`` (as
        ``load_waves``'s), as ``store`` for each wave in turn writes it: waves in
        arrival order, lanes in lane order (a later one wins a byte two write)."""
        acc = _rows(a, addrs, data.shape[-1])
        if self.guard is not None:
            self.guard.write_waves(a, acc, [w.group.rank for w in waves])
        if self.order is None:
            acc.put(a.data, data)
        else:
            self.order.store_waves(waves, ins, a, acc, data)

    def load(self, addrs: np.ndarray, nbytes: int, active: np.ndarray, where: str, ctx=None) -> np.ndarray:
        """uint8 ``[64, nbytes]``: the bytes at ``addrs`` (uint64 ``[64]``) for
        ``active`` lanes, zeros elsewhere. ``ctx``: (wave, instruction) for the
        memory-model check, which may substitute a stale value."""
        out = np.zeros((LANES, nbytes), np.uint8)
        if not active.any():
            return out
        a, off = self._resolve(addrs, nbytes, active, where)
        idx = off[active, None].astype(np.int64) + np.arange(nbytes)
        if self.guard is not None:
            self.guard.read(a, idx)
        got = a.data[idx]
        if self.order is not None and ctx is not None:
            got = self.order.load_waves((ctx[0],), ctx[1], a, ByteRows(idx[None, :, 0], nbytes), got[None])[0]
        out[active] = got
        return out

    def store(self, addrs: np.ndarray, data: np.ndarray, active: np.ndarray, where: str, ctx=None) -> None:
        """Write uint8 ``[64, nbytes]`` at ``addrs`` for ``active`` lanes, in lane
        order (a later lane wins where two lanes write the same byte). ``ctx``:
        (wave, instruction) for the memory-model check."""
        if not active.any():
            return
        nbytes = data.shape[1]
        a, off = self._resolve(addrs, nbytes, active, where)
        idx = off[active, None].astype(np.int64) + np.arange(nbytes)
        if self.guard is not None:
            self.guard.write(a, idx)
        if self.order is not None and ctx is not None:
            self.order.store_waves((ctx[0],), ctx[1], a, ByteRows(idx[None, :, 0], nbytes), data[active][None])
        else:
            a.data[idx] = data[active]

    def atomic_add_u32(self, addrs: np.ndarray, values: np.ndarray, active: np.ndarray, where: str,
                       ctx=None, returns: bool = False) -> np.ndarray:
        """Lane by lane in lane order: ``old = mem[addr]; mem[addr] = old + value``
        (uint32, wrapping); returns the old values (uint32 ``[64]``, 0 for inactive lanes).
        ``ctx``: (wave, instruction) for the memory-model check; ``returns``: whether
        the instruction returns the old value (an acquire there)."""
        old = np.zeros(LANES, np.uint32)
        if not active.any():
            return old
        a, off = self._resolve(addrs, 4, active, where)
        if self.guard is not None:
            self.guard.write(a, off[active, None].astype(np.int64) + np.arange(4))
        if self.order is not None and ctx is not None:
            self.order.atomic(ctx[0], ctx[1], a, off[active].astype(np.int64), returns)
        words = a.data
        for lane in np.nonzero(active)[0]:
            o = int(off[lane])
            cur = int(words[o:o + 4].view(np.uint32)[0])
            old[lane] = cur
            words[o:o + 4] = np.frombuffer(np.uint32((cur + int(values[lane])) & 0xFFFFFFFF).tobytes(), np.uint8)
        return old


@dataclass(frozen=True)
class BufferResource:
    """A decoded V#: ``base`` address, ``stride`` bytes, ``num_records``."""

    base: int
    stride: int
    num_records: int

    @classmethod
    def from_words(cls, words) -> "BufferResource":
        """From the four SGPR words of the descriptor."""
        w0, w1, w2 = (int(w) for w in words[:3])
        return cls(w0 | (w1 & 0xFFFF) << 32, (w1 >> 16) & 0x3FFF, w2)

    def addresses(self, offsets: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(uint64 addresses, bool in-range) for byte ``offsets`` (int64 ``[64]``)
        of a ``size``-byte component; raw buffers only (stride 0)."""
        if self.stride != 0:
            raise MemoryFault(f"structured buffer (stride {self.stride}) not supported by the simulator")
        offsets = np.asarray(offsets, np.int64)
        in_range = (offsets >= 0) & (offsets + size <= self.num_records)
        return (np.uint64(self.base) + offsets.astype(np.uint64)), in_range


class Lds:
    """One workgroup's LDS: ``size`` bytes; an access outside it is a fault."""

    def __init__(self, size: int, fill: int = 0xFF):
        # Hardware LDS holds garbage at launch; 0xFF bytes read as NaN floats,
        # so a kernel that reads LDS it never wrote shows it.
        self.data = np.full(size, fill, np.uint8)
        # ``pool``: the flat array ``data`` lies in at byte ``offset`` (a batched
        # launch keeps every workgroup's LDS in one, see ``share``).
        self.pool, self.offset = self.data, 0

    @staticmethod
    def share(ldss: list[Lds]) -> None:
        """Move the LDS of ``ldss`` (equal sizes) into one pool, their bytes kept."""
        if not ldss:
            return
        size = ldss[0].data.size
        pool = np.empty(len(ldss) * size, np.uint8)
        for i, lds in enumerate(ldss):
            pool[i * size:(i + 1) * size] = lds.data
            lds.data, lds.pool, lds.offset = pool[i * size:(i + 1) * size], pool, i * size

    def _idx(self, addrs: np.ndarray, nbytes: int, active: np.ndarray, where: str) -> np.ndarray:
        a = np.asarray(addrs, np.int64)[active]
        if a.size and (a.min() < 0 or a.max() + nbytes > self.data.size):
            bad = int(a[(a < 0) | (a + nbytes > self.data.size)][0])
            raise MemoryFault(f"{nbytes}-byte LDS access at {bad} outside the workgroup's {self.data.size} "
                              f"bytes at {where}")
        return a[:, None] + np.arange(nbytes)

    def load(self, addrs: np.ndarray, nbytes: int, active: np.ndarray, where: str) -> np.ndarray:
        """uint8 ``[64, nbytes]`` at byte addresses ``addrs`` for active lanes (zeros elsewhere)."""
        out = np.zeros((LANES, nbytes), np.uint8)
        out[active] = self.data[self._idx(addrs, nbytes, active, where)]
        return out

    def store(self, addrs: np.ndarray, data: np.ndarray, active: np.ndarray, where: str) -> None:
        """Write uint8 ``[64, nbytes]`` for active lanes, in lane order."""
        self.data[self._idx(addrs, data.shape[1], active, where)] = data[active]
