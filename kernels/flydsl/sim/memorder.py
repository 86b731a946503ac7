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

from .memory import ByteRows

LINE = 128  # bytes in an L2/L1 cache line on gfx942/gfx950


class _WaveState:
    """One wave's memory events: its vector memory operations are numbered from
    1 in issue order (``seq``: issued so far); the ``vmcnt`` counter decrements
    in issue order, so the complete ones are exactly 1..``done``."""

    def __init__(self, wg: int, ids: tuple):
        self.wg = wg
        self.ids = ids  # the workgroup's (x, y, z), which tell a new wave at a reused id() apart
        self.seq = 0
        self.done = 0
        self.stores: list[Store] = []
        self.acqs: list[Acquire] = []
        self.wbl2: list[tuple[int, list]] = []  # (seq, the stores it writes back) of buffer_wbl2 sc1 not yet complete
        self.lines: dict[str, set[int]] = {}  # buffer -> lines the wave's loads filled into L1


@dataclass(eq=False)
class Store:
    """One global store: the storing wave's state and its operation's ``seq``,
    workgroup ``wg`` (linear id), ``pc``, ``text``, cache bits."""

    wave: _WaveState
    seq: int
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

    def complete(self) -> bool:
        """Waited for by an ``s_waitcnt vmcnt`` of its wave."""
        return self.seq <= self.wave.done

    def in_memory(self) -> bool:
        """Visible past its XCD's L2: a complete ``sc1`` store, or written back."""
        return self.complete() and self.sc1 or self.written_back


@dataclass(eq=False)
class Acquire:
    """A returning atomic of a wave (its state, its operation's ``seq``) at
    ``addr``: the releases it read (sid -> (store complete at its release,
    store in memory at its release, release pc)), the lines the wave had
    filled into L1 before it (buffer -> lines), and what the wave invalidated
    after it completed."""

    wave: _WaveState
    seq: int
    addr: int = 0
    pc: int = 0
    released: dict = field(default_factory=dict)
    filled: dict = field(default_factory=dict)
    inv_l1: bool = False
    inv_l2: bool = False

    def complete(self) -> bool:
        """Waited for by an ``s_waitcnt vmcnt`` of its wave."""
        return self.seq <= self.wave.done


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


def _bits(mods: dict) -> str:
    """A memory instruction's cache bits as a complaint names them."""
    return " ".join(n for n in ("sc0", "sc1", "nt") if mods.get(n)) or "no cache bits"


class MemOrder:
    """The check for one launch of ``grid`` workgroups placed on ``xcds`` XCDs
    (0: placement undeclared). ``stale``: loads the rules do not order return
    the stale value. ``complaints``: one per distinct (store pc, load pc,
    workgroups, missing instruction), in the order found.

    The hooks take a batch of waves (in arrival order) that execute one
    instruction together, and record what the same hook would for each wave in
    turn: the waves' events go to their own states, and what one wave's access
    records (a store's writer and stale bytes) is what the next would see."""

    def __init__(self, grid: tuple[int, int, int], xcds: int = 0, stale: bool = False):
        self.grid = grid
        self.xcds = xcds
        self.stale = stale
        self.complaints: list[Complaint] = []
        self._seen: set = set()
        self._waves: dict[int, _WaveState] = {}
        self._stores: list[Store] = []
        # Each store's workgroup by sid, for finding other workgroups' bytes at
        # once: int32, longer than _stores, its last element -1 (what writer -1 reads).
        self._store_wgs = np.full(64, -1, np.int32)
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

    def _states(self, waves) -> list[_WaveState]:
        """Each wave's state (made at its first event)."""
        get, out = self._waves.get, []
        for w in waves:
            st = get(id(w))
            if st is None or st.ids != w.group.ids:
                st = self._waves[id(w)] = _WaveState(self.wg_of(w), w.group.ids)
            out.append(st)
        return out

    # ---- hooks the instructions call ----------------------------------------
    def issue(self, w, ins) -> None:
        """A vector memory instruction issues (whatever EXEC holds: it counts in vmcnt)."""
        self.issue_waves((w,), ins)

    def issue_waves(self, waves, ins) -> None:
        """``issue`` for each of ``waves``."""
        for st in self._states(waves):
            st.seq += 1

    def waitcnt(self, w, ins) -> None:
        """``s_waitcnt``: every vector memory operation but the ``vmcnt`` youngest completes."""
        self.waitcnt_all((w,), ins)

    def waitcnt_all(self, waves, ins) -> None:
        """``waitcnt`` for each of ``waves``."""
        n = ins.__dict__.get("_vmcnt", -1)
        if n == -1:
            n = ins.__dict__["_vmcnt"] = vmcnt_of(ins)
        if n is None:
            return
        for st in self._states(waves):
            if st.seq - n > st.done:
                st.done = st.seq - n
                while st.wbl2 and st.wbl2[0][0] <= st.done:
                    for s in st.wbl2.pop(0)[1]:
                        s.written_back = True

    def wbl2(self, w, ins) -> None:
        """``buffer_wbl2``: with ``sc1`` it writes the wave's earlier stores back to memory once complete."""
        self.issue(w, ins)
        if ins.mods.get("sc1"):
            st = self._states((w,))[0]
            st.wbl2.append((st.seq, list(st.stores)))

    def inv(self, w, ins) -> None:
        """``buffer_inv``: invalidates L1 (and with ``sc1`` the L2's non-local lines)
        for every completed acquire of the wave."""
        self.issue(w, ins)
        for a in self._states((w,))[0].acqs:
            if a.complete():
                a.inv_l1 = True
                a.inv_l2 = a.inv_l2 or bool(ins.mods.get("sc1"))

    def store_waves(self, waves, ins, alloc, acc: ByteRows, data: np.ndarray) -> None:
        """Each of ``waves`` in turn stores ``data[k]`` (uint8 ``acc.offs.shape +
        (nbytes,)``) at the bytes of ``alloc`` that ``acc`` names for it (row k
        of ``acc.offs``): recorded (each byte's writer, and the byte it
        overwrote), then written."""
        sts = self._states(waves)
        m = ins.mods
        text, sc0, sc1, nt = ins.text.strip(), bool(m.get("sc0")), bool(m.get("sc1")), bool(m.get("nt"))
        sid0 = len(self._stores)
        for st in sts:
            s = Store(st, st.seq, sid=len(self._stores), wg=st.wg, pc=ins.index, text=text, sc0=sc0, sc1=sc1, nt=nt,
                      outstanding=st.seq - st.done)
            self._stores.append(s)
            st.stores.append(s)
        if len(self._stores) >= self._store_wgs.size:
            grown = np.full(2 * len(self._stores), -1, np.int32)
            grown[:sid0] = self._store_wgs[:sid0]
            self._store_wgs = grown
        self._store_wgs[sid0:len(self._stores)] = [st.wg for st in sts]
        writer, prev = self._buf(alloc)
        sids = np.arange(sid0, len(self._stores), dtype=np.int32).reshape((-1,) + (1,) * acc.offs.ndim)
        acc.put(writer, sids)
        if len(sts) == 1 or (acc.get(writer) == sids).all():
            # No byte written by two of the waves: each overwrites what memory holds now.
            acc.put(prev, acc.get(alloc.data))
            acc.put(alloc.data, data)
        else:
            for k in range(len(sts)):
                one = ByteRows(acc.offs[k:k + 1], acc.nbytes)
                one.put(prev, one.get(alloc.data))
                one.put(alloc.data, data[k:k + 1])
        # A plain store to an atomic's address ends its release sequence.
        if self._released:
            # Only a dword that overlaps ``alloc`` can be written; all of them are checked at once.
            ds = [d for d in (x - alloc.base for x in self._released) if -4 < d < alloc.size and d % 4 == 0]
            if ds:
                lo, at = acc.offs.reshape(-1, 1), np.array(ds, np.int64)
                for k in np.flatnonzero(((lo < at + 4) & (lo + acc.nbytes > at)).any(axis=0)).tolist():
                    del self._released[alloc.base + ds[k]]

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
        st = self._states((w,))[0]
        now = {s.sid: (s.complete(), s.in_memory(), ins.index) for s in st.stores}
        # A line filled into L1 before the acquire stays stale past it (rule 4);
        # lines the wave loads from now on are filled after it.
        filled = {name: frozenset(lines) for name, lines in st.lines.items()} if returns else {}
        # (A set of Python ints: np.unique costs microseconds more for the one or few lanes an atomic has.)
        for off in sorted(set(offsets.tolist())):
            addr = alloc.base + off
            seqn = self._released.setdefault(addr, {})
            if returns:
                st.acqs.append(Acquire(st, st.seq, addr=addr, pc=ins.index, released=dict(seqn), filled=filled))
            self._ever_released.update(now)
            for sid, (c, mem, pc) in now.items():
                old = seqn.get(sid)
                seqn[sid] = (c, mem, pc) if old is None else (old[0] or c, old[1] or mem, pc)
        if alloc.name in self._bufs:
            self._bufs[alloc.name][0][offsets[:, None] + np.arange(4)] = -1

    def load_waves(self, waves, ins, alloc, acc: ByteRows, data: np.ndarray) -> np.ndarray:
        """After each of ``waves`` read ``data[k]`` (uint8 ``acc.offs.shape +
        (nbytes,)``) at the bytes of ``alloc`` that ``acc`` names for it (row k):
        check every byte another workgroup wrote, wave by wave; returns the data
        the loads deliver (a copy with stale bytes substituted where ``stale``
        and unordered)."""
        sts = self._states(waves)
        b = self._bufs.get(alloc.name)
        if b is None:
            return data
        writer, prev = b
        n = len(sts)
        bypass_l1 = bool(ins.mods.get("sc0") or ins.mods.get("sc1"))
        if not bypass_l1:
            # Every line an access touches: those of its first and last bytes, and one per LINE between.
            ends = list(range(0, acc.nbytes - 1, LINE)) + [acc.nbytes - 1]
            lines = ((acc.offs.reshape(n, -1, 1) + ends) // LINE).reshape(n, -1)
            # Neighbouring lanes mostly share a line: only the first of each run of
            # one line goes to the set (a third of the time, for a wave of 16-byte loads).
            first = np.ones(lines.shape, bool)
            np.not_equal(lines[:, 1:], lines[:, :-1], out=first[:, 1:])
            runs = lines[first].tolist()
            start = 0
            for st, end in zip(sts, np.cumsum(first.sum(axis=1)).tolist()):
                st.lines.setdefault(alloc.name, set()).update(runs[start:end])
                start = end
        wr = acc.get(writer).reshape(n, -1)
        if wr.max() < 0:
            return data
        foreign = self._store_wgs[wr] != np.array([st.wg for st in sts], np.int32)[:, None]
        foreign &= wr >= 0
        ks = np.flatnonzero(foreign.any(axis=1))
        if ks.size == 0:
            return data
        bad = None
        bits = None
        # Each wave's lowest and highest foreign writer, for all waves at once: most
        # read the bytes of one store only, and need no np.unique of their own.
        los = np.where(foreign, wr, len(self._stores)).min(axis=1).tolist()
        his = np.where(foreign, wr, -1).max(axis=1).tolist()
        for k in ks.tolist():
            # Wave k's byte offsets, in the order of wr[k] (asked for only by the L1 rule and a complaint).
            st, wk, ik = sts[k], wr[k], lambda k=k: (acc.offs[k].reshape(-1, 1) + np.arange(acc.nbytes)).reshape(-1)
            lo, hi = los[k], his[k]
            for sid in [lo] if lo == hi else np.unique(wk[foreign[k]]).tolist():
                s = self._stores[sid]
                missing = self._missing(st, s, ins, alloc, lambda ik=ik, wk=wk, sid=sid: ik()[wk == sid], bypass_l1)
                if missing is None:
                    continue
                sel = wk == sid
                if bad is None:
                    bad = np.zeros(wr.shape, bool)
                bad[k] |= sel
                key = (s.pc, ins.index, s.wg, st.wg, missing)
                if key not in self._seen:
                    self._seen.add(key)
                    i = int(ik()[sel][0])
                    bits = bits or _bits(ins.mods)
                    self.complaints.append(Complaint(s.pc, s.text, s.wg, ins.index, ins.text.strip(), st.wg, missing,
                                                     i, alloc.name, int(prev[i]), int(alloc.data[i]), s.bits(), bits,
                                                     s.outstanding, st.seq - st.done))
        if self.stale and bad is not None:
            data = data.copy()
            flat = data.reshape(n, -1)
            flat[bad] = prev[acc.index().reshape(n, -1)[bad]]
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
            elif not a.complete():
                why.append(f"s_waitcnt vmcnt(0) between the acquiring atomic #{a.pc} and the load")
            elif cross and not in_mem:
                why.append(f"sc1 on the store or buffer_wbl2 sc1 before the releasing atomic #{rel_pc} "
                           f"(workgroups {s.wg} and {st.wg} may be on different XCDs)")
            elif cross and not (ins.mods.get("sc1") or a.inv_l2):
                why.append(f"sc1 on the load or buffer_inv sc1 after the acquiring atomic #{a.pc} "
                           f"(workgroups {s.wg} and {st.wg} may be on different XCDs)")
            elif not bypass_l1 and not a.inv_l1 and a.filled.get(alloc.name) and not a.filled[alloc.name].isdisjoint(
                    (idx() // LINE).tolist()):
                why.append(f"buffer_inv (or sc0/sc1 on the load) after the acquiring atomic #{a.pc}: the line "
                           f"was loaded into L1 before it")
            else:
                return None
        return why[0]
