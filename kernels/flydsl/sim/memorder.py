"""The memory-model check: would hardware let a load see another workgroup's store?

The simulator completes every memory operation at once and shows each load
what running the workgroups one after another in arrival order would (see
``launch``), so on its own every store is visible to every later load. Each
wave's events reach this check in that wave's program order, the workgroups'
interleaved as the batched run executes them; conflicting accesses of two
workgroups come in arrival order, so what the check records at each load
(the bytes' writers, the release sequences an acquire read) is what running
them one after another would record. One difference remains, in the wording
only: where a workgroup loads another's store that is not ordered before it,
and the storing workgroup releases only after that load ran, the complaint
names the missing release (one after another, the release would have come
first and the missing acquire would be named); either way the load is flagged.
This module follows what gfx942/gfx950 hardware allows instead (LLVM's
AMDGPUUsage, "Memory Model GFX942", which covers both): for every load of
global memory whose bytes another workgroup of the same launch wrote, the
store must be ordered before the load by a release/acquire chain whose
cache actions cover both workgroups. Otherwise ``MemOrder`` records a
``Complaint`` naming the store, the load, both workgroups and the missing
instruction, and the value the load may legally return instead (the stale
one: what memory held before that write). With ``stale=True`` the load
returns that stale value, so a conformance check shows the bug as a wrong
output.

Modelled (the rules, each checked per store-load pair, A the writing
workgroup, B the reading one):

1. Completion. A vector memory operation is complete only after the wave's
   ``s_waitcnt vmcnt(N)`` leaves at most N younger ones outstanding (the
   counter decrements in issue order on gfx9). The store must be complete
   when A's wave issues the atomic that releases it (AMDGPUUsage: release
   needs ``s_waitcnt vmcnt(0)`` before the releasing atomic).
2. The chain. A release is a global atomic issued by the storing wave after
   the store; the atomics on one address form a release sequence (each
   read-modify-write carries the earlier releases on; a plain store to the
   address ends it). B's wave must have executed a returning atomic (``sc0``)
   on that address that read the sequence, and that atomic must be complete
   (``s_waitcnt vmcnt``) before the load issues (acquire: ``s_waitcnt
   vmcnt(0)`` after the atomic).
3. Across L2s. gfx942 and gfx950 have one L2 per XCD, not coherent with
   each other. When A and B may run on different XCDs, the store must reach
   memory: the store carries ``sc1`` (agent-scope store: written through), or
   A's wave issued ``buffer_wbl2 sc1`` after it, complete before the release
   (agent-scope release). And the load must not hit a stale line in B's L2:
   the load carries ``sc1`` (agent-scope load), or B's wave issued
   ``buffer_inv sc1`` after the acquiring atomic completed (agent-scope
   acquire). The launch declares the placement: ``xcds`` > 0 puts workgroup
   w (linear id, x fastest) on XCD ``w % xcds``; ``xcds`` 0 declares none, so
   any two workgroups may be on different XCDs.
4. L1. The vector L1 is per CU and write-through, so a line in B's L1 can be
   stale only if it was filled before the write became visible: the check
   flags a load without ``sc0``/``sc1`` whose 128-byte line B's wave loaded
   (without bypassing L1) before its acquiring atomic, unless a
   ``buffer_inv`` after the acquire invalidated L1.

A workgroup-scope release or acquire (LLVM's gfx942 sequences outside
tgsplit mode: no wait, no cache action) therefore never orders two
workgroups; an agent-scope one (``buffer_wbl2 sc1``, ``s_waitcnt
vmcnt(0)``, the atomic; the atomic, ``s_waitcnt vmcnt(0)``, ``buffer_inv
sc1``) orders any two.

Not modelled: atomics themselves are taken as coherent at agent scope
(performed at memory; their cache bits are not checked); scalar (SMEM)
loads of data another workgroup wrote are not checked; waves of one
workgroup are one agent (a store by one wave released by another wave's
atomic after ``s_barrier`` is not credited: only the storing wave's own
release counts); L1 lines filled by other workgroups sharing B's CU (only
B's own earlier loads are considered); tgsplit mode; system scope and the
host; using a register whose load has not completed (a hazard, not an
ordering rule); ordering between launches (a kernel boundary is a full
release and acquire).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

LINE = 128  # bytes in an L2/L1 cache line on gfx942/gfx950


@dataclass(eq=False)
class _Op:
    """One outstanding vector memory operation of a wave (``complete`` once waited for)."""

    complete: bool = False


@dataclass(eq=False)
class Store:
    """One global store: its instruction's ``op``, workgroup ``wg`` (linear id), ``pc``, ``text``, cache bits."""

    op: _Op
    sid: int = 0
    wg: int = 0
    pc: int = 0
    text: str = ""
    sc0: bool = False
    sc1: bool = False
    nt: bool = False
    outstanding: int = 0  # the wave's vector memory operations in flight once it issued (itself included)
    # A complete buffer_wbl2 sc1 issued after it wrote it back to memory.
    written_back: bool = False

    def bits(self) -> str:
        b = [n for n in ("sc0", "sc1", "nt") if getattr(self, n)]
        return " ".join(b) or "no cache bits"

    def in_memory(self) -> bool:
        """Visible past its XCD's L2: a complete ``sc1`` store, or written back."""
        return self.op.complete and self.sc1 or self.written_back


@dataclass(eq=False)
class _Wbl2(_Op):
    stores: list = field(default_factory=list)


@dataclass(eq=False)
class Acquire:
    """A returning atomic of a wave at ``addr``: the releases it read (sid ->
    (store complete at its release, store in memory at its release, release pc)),
    and what the wave invalidated after it completed."""

    op: _Op
    addr: int = 0
    pc: int = 0
    seq: int = 0
    released: dict = field(default_factory=dict)
    inv_l1: bool = False
    inv_l2: bool = False


@dataclass
class Complaint:
    """One violation: the store and the load (pc, text, workgroup, cache bits, the
    wave's vector memory operations in flight once issued), the missing instruction,
    a byte address it concerns and the stale value a load may return."""

    store_pc: int
    store_text: str
    store_wg: int
    load_pc: int
    load_text: str
    load_wg: int
    missing: str
    addr: int
    buffer: str
    stale: int
    value: int
    store_bits: str = ""
    load_bits: str = ""
    store_outstanding: int = 0
    load_outstanding: int = 0

    def __str__(self) -> str:
        return (f"workgroup {self.load_wg} loads {self.buffer}+{self.addr:#x} at #{self.load_pc} "
                f"({self.load_text}; {self.load_bits}, vmcnt {self.load_outstanding}) after workgroup "
                f"{self.store_wg} stored it at #{self.store_pc} ({self.store_text}; {self.store_bits}, vmcnt "
                f"{self.store_outstanding}) with no release/acquire chain covering both: missing {self.missing}; "
                f"the load may return the stale byte {self.stale:#04x} instead of {self.value:#04x}")


class _WaveState:
    def __init__(self, wg: int):
        self.wg = wg
        self.queue: list[_Op] = []  # outstanding vector memory operations, oldest first
        self.stores: list[Store] = []
        self.acqs: list[Acquire] = []
        self.seq = 0  # vector memory operations issued so far
        # The operation the wave's current instruction issued (a placeholder until the first).
        self.cur: _Op = _Op()
        self.lines: dict[tuple[str, int], int] = {}  # (buffer, line) -> seq of the first L1-filling load


_VMCNT = re.compile(r"vmcnt\((\d+)\)")


def vmcnt_of(ins) -> int | None:
    """The ``vmcnt`` an ``s_waitcnt`` waits for (None: it does not wait on it)."""
    counts = ins.mods.get("counts", "")
    m = _VMCNT.search(counts)
    if m:
        return int(m.group(1))
    try:
        v = int(counts, 0)
    except ValueError:
        return None
    # gfx9's packed immediate: vmcnt in bits 3:0 and 15:14; 63 waits for nothing.
    n = (v & 0xF) | ((v >> 14) & 0x3) << 4
    return None if n == 63 else n


class MemOrder:
    """The check for one launch of ``grid`` workgroups placed on ``xcds`` XCDs
    (0: placement undeclared). ``stale``: loads the rules do not order return
    the stale value. ``complaints``: one per distinct (store pc, load pc,
    workgroups, missing instruction), in the order found."""

    def __init__(self, grid: tuple[int, int, int], xcds: int = 0, stale: bool = False):
        self.grid = grid
        self.xcds = xcds
        self.stale = stale
        self.complaints: list[Complaint] = []
        self._seen: set = set()
        self._waves: dict[int, _WaveState] = {}
        self._stores: list[Store] = []
        self._bufs: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # writer sid (-1 none), byte before it
        self._released: dict[int, dict] = {}  # atomic address -> release sequence
        self._ever_released: set[int] = set()  # sids some atomic released

    # ---- placement --------------------------------------------------------
    def wg_of(self, w) -> int:
        """The linear id of ``w``'s workgroup (x fastest)."""
        x, y, z = w.group.ids
        return x + self.grid[0] * (y + self.grid[1] * z)

    def may_split_l2(self, a: int, b: int) -> bool:
        """Whether workgroups ``a`` and ``b`` may run on XCDs with different L2s."""
        return self.xcds == 0 or a % self.xcds != b % self.xcds

    def _wave(self, w) -> _WaveState:
        st = self._waves.get(id(w))
        if st is None or st.wg != self.wg_of(w):
            st = self._waves[id(w)] = _WaveState(self.wg_of(w))
        return st

    def issue(self, w, ins) -> None:
        """A vector memory instruction issues (whatever EXEC holds: it counts in vmcnt)."""
        st = self._wave(w)
        st.cur = _Wbl2() if ins.base == "buffer_wbl2" else _Op()
        st.queue.append(st.cur)
        st.seq += 1

    # ---- hooks the instructions call ----------------------------------------
    def waitcnt(self, w, ins) -> None:
        """``s_waitcnt``: every vector memory operation but the ``vmcnt`` youngest completes."""
        self.waitcnt_all((w,), ins)

    def waitcnt_all(self, waves, ins) -> None:
        """``waitcnt`` for each of ``waves`` in turn."""
        n = ins.__dict__.get("_vmcnt", -1)
        if n == -1:
            n = ins.__dict__["_vmcnt"] = vmcnt_of(ins)
        if n is None:
            return
        for w in waves:
            st = self._wave(w)
            k = len(st.queue) - n
            if k <= 0:
                continue
            done, st.queue = st.queue[:k], st.queue[k:]
            for op in done:
                op.complete = True
                if isinstance(op, _Wbl2):
                    for s in op.stores:
                        s.written_back = True

    def wbl2(self, w, ins) -> None:
        """``buffer_wbl2``: with ``sc1`` it writes the wave's earlier stores back to memory once complete."""
        self.issue(w, ins)
        st = self._wave(w)
        if ins.mods.get("sc1") and isinstance(st.cur, _Wbl2):
            st.cur.stores = list(st.stores)

    def inv(self, w, ins) -> None:
        """``buffer_inv``: invalidates L1 (and with ``sc1`` the L2's non-local lines)
        for every completed acquire of the wave."""
        self.issue(w, ins)
        for a in self._wave(w).acqs:
            if a.op.complete:
                a.inv_l1 = True
                a.inv_l2 = a.inv_l2 or bool(ins.mods.get("sc1"))

    def store(self, w, ins, alloc, idx: np.ndarray) -> None:
        """Before a store writes bytes ``idx`` (int64 offsets in ``alloc``): record it."""
        st = self._wave(w)
        m = ins.mods
        s = Store(st.cur, sid=len(self._stores), wg=st.wg, pc=ins.index, text=ins.text.strip(), sc0=bool(m.get("sc0")),
                  sc1=bool(m.get("sc1")), nt=bool(m.get("nt")), outstanding=len(st.queue))
        self._stores.append(s)
        st.stores.append(s)
        writer, prev = self._buf(alloc)
        flat = idx.reshape(-1)
        prev[flat] = alloc.data[flat]
        writer[flat] = s.sid
        # A plain store to an atomic's address ends its release sequence.
        if self._released:
            hit = np.isin(np.fromiter(self._released, np.int64), alloc.base + (flat & ~3))
            for addr in [a for a, h in zip(list(self._released), hit) if h]:
                del self._released[addr]

    def tracks(self, alloc) -> bool:
        """Whether any store to ``alloc`` was recorded (a load of it is checked)."""
        return alloc.name in self._bufs

    def _buf(self, alloc):
        b = self._bufs.get(alloc.name)
        if b is None:
            b = self._bufs[alloc.name] = (np.full(alloc.size, -1, np.int32), np.zeros(alloc.size, np.uint8))
        return b

    def atomic(self, w, ins, alloc, offsets: np.ndarray, returns: bool) -> None:
        """A global atomic at byte ``offsets`` (int64, active lanes) of ``alloc``: a
        release of the wave's stores, and with ``returns`` an acquire."""
        st = self._wave(w)
        now = {s.sid: (s.op.complete, s.in_memory(), ins.index) for s in st.stores}
        acq = None
        for off in np.unique(offsets):
            addr = alloc.base + int(off)
            seqn = self._released.setdefault(addr, {})
            if returns:
                acq = Acquire(st.cur, addr=addr, pc=ins.index, seq=st.seq, released=dict(seqn))
                st.acqs.append(acq)
            self._ever_released.update(now)
            for sid, (c, mem, pc) in now.items():
                old = seqn.get(sid)
                seqn[sid] = (c, mem, pc) if old is None else (old[0] or c, old[1] or mem, pc)
        if alloc.name in self._bufs:
            self._bufs[alloc.name][0][offsets[:, None] + np.arange(4)] = -1

    def load(self, w, ins, alloc, idx: np.ndarray, data: np.ndarray) -> np.ndarray:
        """After a load read ``data`` (uint8, the shape of ``idx``) at bytes ``idx`` of
        ``alloc``: check every byte another workgroup wrote; returns the data the
        load delivers (stale bytes substituted where ``stale`` and unordered)."""
        st = self._wave(w)
        seq = st.seq
        bypass_l1 = bool(ins.mods.get("sc0") or ins.mods.get("sc1"))
        b = self._bufs.get(alloc.name)
        if b is None:
            return data
        writer, prev = b
        if not bypass_l1:
            for line in np.unique(idx // LINE):
                st.lines.setdefault((alloc.name, int(line)), seq)
        wr = writer[idx]
        if (wr < 0).all():
            return data
        bad = np.zeros(idx.shape, bool)
        for sid in np.unique(wr[wr >= 0]):
            s = self._stores[int(sid)]
            if s.wg == st.wg:
                continue
            missing = self._missing(st, s, ins, alloc, lambda sid=sid: idx[wr == sid], bypass_l1)
            if missing is None:
                continue
            sel = wr == sid
            bad |= sel
            k = (s.pc, ins.index, s.wg, st.wg, missing)
            if k not in self._seen:
                self._seen.add(k)
                i = int(idx[sel][0])
                bits = " ".join(n for n in ("sc0", "sc1", "nt") if ins.mods.get(n)) or "no cache bits"
                self.complaints.append(Complaint(s.pc, s.text, s.wg, ins.index, ins.text.strip(), st.wg, missing,
                                                 i, alloc.name, int(prev[i]), int(alloc.data[i]), s.bits(), bits,
                                                 s.outstanding, len(st.queue)))
        if self.stale and bad.any():
            data = data.copy()
            data[bad] = prev[idx[bad]]
        return data

    def _missing(self, st: _WaveState, s: Store, ins, alloc, idx, bypass_l1: bool) -> str | None:
        """None when a chain orders store ``s`` before this load, else what is missing
        (``idx()``: the bytes of the load that ``s`` wrote, asked for only when
        the L1 rule needs them)."""
        cross = self.may_split_l2(s.wg, st.wg)
        chains = [a for a in st.acqs if s.sid in a.released]
        if not chains:
            if s.sid not in self._ever_released:
                return f"a release after the store in workgroup {s.wg} (s_waitcnt vmcnt(0), then an atomic)"
            return (f"an acquire in workgroup {st.wg} that reads workgroup {s.wg}'s release (a returning atomic "
                    f"on its address before the load, with no plain store to that address between)")
        why = []
        for a in chains:
            done, in_mem, rel_pc = a.released[s.sid]
            if not done:
                why.append(f"s_waitcnt vmcnt(0) between the store and the releasing atomic #{rel_pc}")
            elif not a.op.complete:
                why.append(f"s_waitcnt vmcnt(0) between the acquiring atomic #{a.pc} and the load")
            elif cross and not in_mem:
                why.append(f"sc1 on the store or buffer_wbl2 sc1 before the releasing atomic #{rel_pc} "
                           f"(workgroups {s.wg} and {st.wg} may be on different XCDs)")
            elif cross and not (ins.mods.get("sc1") or a.inv_l2):
                why.append(f"sc1 on the load or buffer_inv sc1 after the acquiring atomic #{a.pc} "
                           f"(workgroups {s.wg} and {st.wg} may be on different XCDs)")
            elif not bypass_l1 and not a.inv_l1 and any(
                    st.lines.get((alloc.name, int(line)), a.seq) < a.seq for line in np.unique(idx() // LINE)):
                why.append(f"buffer_inv (or sc0/sc1 on the load) after the acquiring atomic #{a.pc}: the line "
                           f"was loaded into L1 before it")
            else:
                return None
        return why[0]
