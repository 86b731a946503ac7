"""The simulator's vector memory instructions (MUBUF, global, DS) against a
lane-by-lane Python model over the same bytes, with some lanes disabled."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from sim_kernels import compiled_kernels

from nvfp4_suite.kernels.flydsl.sim.launch import execute, make_test_wave
from nvfp4_suite.kernels.flydsl.sim.memory import Memory
from nvfp4_suite.kernels.flydsl.sim.program import parse_program
from nvfp4_suite.kernels.flydsl.sim.wave import OPS, MemoryFault, SimError, mask_to_int

LANES = 64
SENTINEL = 0xDEADBEEF


def _wave(rng, arch="gfx950", memory=None):
    """A wave with a random partial EXEC (lane 0 on, lane 1 off) and sentinel VGPRs."""
    w = make_test_wave(arch, memory=memory)
    mask = rng.random(LANES) < 0.7
    mask[0], mask[1] = True, False
    bits = mask_to_int(mask)
    w.s[126], w.s[127] = bits & 0xFFFFFFFF, bits >> 32
    w.v[:] = SENTINEL
    return w, mask


def _rsrc(w, sidx, base, num_records, stride=0):
    w.s[sidx] = base & 0xFFFFFFFF
    w.s[sidx + 1] = (base >> 32) | (stride << 16)
    w.s[sidx + 2] = num_records
    w.s[sidx + 3] = 0x00027000


def _elem(raw: bytes, signed: bool) -> int:
    """A little-endian element as the 32-bit register value it loads to."""
    return int.from_bytes(raw, "little", signed=signed) & 0xFFFFFFFF


BUFFER_LOADS = {"buffer_load_ubyte": (1, 1, False), "buffer_load_sbyte": (1, 1, True),
                "buffer_load_ushort": (2, 1, False), "buffer_load_sshort": (2, 1, True),
                "buffer_load_dword": (4, 1, False), "buffer_load_dwordx2": (4, 2, False),
                "buffer_load_dwordx3": (4, 3, False), "buffer_load_dwordx4": (4, 4, False)}
BUFFER_STORES = {"buffer_store_byte": (1, 1), "buffer_store_short": (2, 1), "buffer_store_dword": (4, 1),
                 "buffer_store_dwordx2": (4, 2), "buffer_store_dwordx3": (4, 3), "buffer_store_dwordx4": (4, 4)}


def _regs(n, first=10):
    return f"v{first}" if n == 1 else f"v[{first}:{first + n - 1}]"


@pytest.mark.parametrize("name", sorted(BUFFER_LOADS))
def test_buffer_load_reads_addressed_bytes_and_zero_out_of_range(name):
    size, n, signed = BUFFER_LOADS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    mem = Memory()
    host = rng.integers(0, 256, 4096, dtype=np.uint8)
    base = mem.alloc("buf", host)
    w, mask = _wave(rng, memory=mem)
    num_records, soff, inst = 3001, 12, 20
    _rsrc(w, 4, base, num_records)
    w.s[3] = soff
    w.v[1] = rng.integers(0, 3000, LANES)
    w.v[1][2:6] = [num_records - soff - inst - size * n + d for d in (0, 1, 4, 5)]  # straddling the end
    execute(w, f"{name} {_regs(n)}, v1, s[4:7], s3 offen offset:{inst} sc0 sc1 nt")
    for lane in range(LANES):
        for c in range(n):
            got = int(w.v[10 + c][lane])
            off = int(w.v[1][lane]) + soff + inst + c * size
            want = (_elem(host[off:off + size].tobytes(), signed) if off + size <= num_records else 0) \
                if mask[lane] else SENTINEL
            assert got == want, (lane, c, off)


@pytest.mark.parametrize("name", sorted(BUFFER_STORES))
def test_buffer_store_writes_in_range_bytes_and_drops_the_rest(name):
    size, n = BUFFER_STORES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    mem = Memory()
    host = rng.integers(0, 256, 4096, dtype=np.uint8)
    model = host.copy()
    base = mem.alloc("buf", host)
    w, mask = _wave(rng, memory=mem)
    num_records, inst = 64 * 40 - 6, 4
    _rsrc(w, 8, base, num_records)
    w.v[1] = rng.permutation(LANES) * 40 + rng.integers(0, 8, LANES)  # disjoint per lane, any alignment
    for c in range(n):
        w.v[20 + c] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    execute(w, f"{name} {_regs(n, 20)}, v1, s[8:11], 0 offen offset:{inst} sc1")
    for lane in np.nonzero(mask)[0]:
        for c in range(n):
            off = int(w.v[1][lane]) + inst + c * size
            if off + size <= num_records:
                model[off:off + size] = np.frombuffer(int(w.v[20 + c][lane]).to_bytes(4, "little")[:size], np.uint8)
    np.testing.assert_array_equal(host, model)


def test_buffer_load_ushort_loads_only_the_addressed_halfword():
    rng = np.random.default_rng(1)
    mem = Memory()
    host = np.arange(0x8000, 0x8000 + 512, dtype=np.uint16)  # sign bit set: must not sign-extend
    base = mem.alloc("halves", host)
    w, mask = _wave(rng, memory=mem)
    _rsrc(w, 4, base, host.nbytes)
    w.v[1] = np.arange(LANES) * 2 + 2  # even and odd halfwords of each dword
    w.v[1][3] = 7  # an odd byte address: bytes 7 and 8
    execute(w, "buffer_load_ushort v5, v1, s[4:7], 0 offen offset:2")
    raw = host.view(np.uint8)
    for lane in range(LANES):
        off = int(w.v[1][lane]) + 2
        want = int(raw[off]) | int(raw[off + 1]) << 8 if mask[lane] else SENTINEL
        assert int(w.v[5][lane]) == want


def test_buffer_without_offen_uses_soffset_and_offset_only():
    rng = np.random.default_rng(2)
    mem = Memory()
    host = np.arange(64, dtype=np.uint32)
    base = mem.alloc("words", host)
    w, mask = _wave(rng, memory=mem)
    _rsrc(w, 4, base, host.nbytes)
    w.s[2] = 8
    execute(w, "buffer_load_dword v3, off, s[4:7], s2 offset:4")
    assert (w.v[3][mask] == 3).all() and (w.v[3][~mask] == SENTINEL).all()


def test_buffer_access_past_its_allocation_faults_naming_address_and_buffer():
    rng = np.random.default_rng(3)
    mem = Memory()
    base = mem.alloc("kv_cache", np.zeros(256, np.uint8))
    w, _ = _wave(rng, memory=mem)
    _rsrc(w, 4, base, 1 << 20)  # the descriptor claims more than was allocated
    w.v[1] = 0
    w.v[1][0] = 256
    with pytest.raises(MemoryFault, match=rf"{base + 256:#x}.*kv_cache"):
        execute(w, "buffer_load_dword v3, v1, s[4:7], 0 offen")


def test_buffer_unsupported_forms_are_refused():
    rng = np.random.default_rng(4)
    w, _ = _wave(rng)
    _rsrc(w, 4, 0x1000, 64)
    for text in ("buffer_load_dword v1, v2, s[4:7], 0 idxen", "buffer_load_dword v1, v2, s[4:7], 0 offen lds",
                 "buffer_load_dword v1, v2, s[4:7], 0 offen tfe", "buffer_load_dword v1, v2, s[4:7], 0"):
        with pytest.raises(SimError):
            execute(w, text)
    _rsrc(w, 4, 0x1000, 64, stride=16)
    w.v[2] = 0
    with pytest.raises(SimError):
        execute(w, "buffer_load_dword v1, v2, s[4:7], 0 offen")


GLOBAL_LOADS = {"global_load_ubyte": (1, 1, False), "global_load_sshort": (2, 1, True),
                "global_load_ushort": (2, 1, False), "global_load_dword": (4, 1, False),
                "global_load_dwordx2": (4, 2, False), "global_load_dwordx4": (4, 4, False)}


@pytest.mark.parametrize("name", sorted(GLOBAL_LOADS))
@pytest.mark.parametrize("form", ["saddr", "off"])
def test_global_load_matches_model(name, form):
    size, n, signed = GLOBAL_LOADS[name]
    rng = np.random.default_rng(5)
    mem = Memory()
    mem.alloc("other", np.zeros(100, np.uint8))
    host = rng.integers(0, 256, 2048, dtype=np.uint8)
    base = mem.alloc("buf", host)
    w, mask = _wave(rng, memory=mem)
    offs = rng.integers(16, 2000, LANES)
    if form == "saddr":
        w.s[14], w.s[15] = base & 0xFFFFFFFF, base >> 32
        w.v[2] = offs
        execute(w, f"{name} {_regs(n)}, v2, s[14:15] offset:-16")
    else:
        addr = (base + offs).astype(np.uint64)
        w.v[6], w.v[7] = addr & 0xFFFFFFFF, addr >> np.uint64(32)
        execute(w, f"{name} {_regs(n)}, v[6:7], off offset:-16")
    for lane in range(LANES):
        for c in range(n):
            off = int(offs[lane]) - 16 + c * size
            want = _elem(host[off:off + size].tobytes(), signed) if mask[lane] else SENTINEL
            assert int(w.v[10 + c][lane]) == want


@pytest.mark.parametrize("form", ["saddr", "off"])
def test_global_store_dword_writes_active_lanes_in_lane_order(form):
    rng = np.random.default_rng(6)
    mem = Memory()
    host = np.zeros(32, np.uint32)
    base = mem.alloc("out", host)
    w, mask = _wave(rng, memory=mem)
    idx = rng.integers(0, 32, LANES)  # duplicates: the last active lane wins
    w.v[0] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    if form == "saddr":
        w.s[0], w.s[1] = base & 0xFFFFFFFF, base >> 32
        w.v[1] = idx * 4
        execute(w, "global_store_dword v1, v0, s[0:1]")
    else:
        addr = (base + idx * 4).astype(np.uint64)
        w.v[2], w.v[3] = addr & 0xFFFFFFFF, addr >> np.uint64(32)
        execute(w, "global_store_dword v[2:3], v0, off")
    model = np.zeros(32, np.uint32)
    for lane in np.nonzero(mask)[0]:
        model[idx[lane]] = w.v[0][lane]
    np.testing.assert_array_equal(host, model)


def test_global_atomic_add_returns_old_values_in_lane_order():
    rng = np.random.default_rng(7)
    mem = Memory()
    host = rng.integers(0, 2 ** 32, 4, dtype=np.uint64).astype(np.uint32)
    model = [int(x) for x in host]
    base = mem.alloc("tickets", host)
    w, mask = _wave(rng, memory=mem)
    w.s[22], w.s[23] = base & 0xFFFFFFFF, base >> 32
    idx = rng.integers(0, 4, LANES)
    w.v[2] = idx * 4
    w.v[3] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)  # sums wrap
    execute(w, "global_atomic_add v2, v2, v3, s[22:23] sc0")
    for lane in range(LANES):
        if mask[lane]:
            old = model[idx[lane]]
            model[idx[lane]] = (old + int(w.v[3][lane])) & 0xFFFFFFFF
            assert int(w.v[2][lane]) == old
        else:
            assert int(w.v[2][lane]) == idx[lane] * 4
    assert [int(x) for x in host] == model


def test_global_atomic_add_without_sc0_returns_nothing():
    rng = np.random.default_rng(8)
    mem = Memory()
    host = np.zeros(1, np.uint32)
    base = mem.alloc("counter", host)
    w, mask = _wave(rng, memory=mem)
    w.s[16], w.s[17] = base & 0xFFFFFFFF, base >> 32
    w.v[3] = 0
    w.v[4] = 1
    before = w.v.copy()
    execute(w, "global_atomic_add v3, v4, s[16:17]")
    assert host[0] == mask.sum()
    np.testing.assert_array_equal(w.v, before)
    with pytest.raises(SimError):
        execute(w, "global_atomic_add v3, v4, s[16:17] sc0")  # sc0 needs the vdst operand
    with pytest.raises(SimError):
        execute(w, "global_atomic_add v2, v3, v4, s[16:17]")


DS_READS = {"ds_read_u8": (1, 1, False), "ds_read_i8": (1, 1, True), "ds_read_u16": (2, 1, False),
            "ds_read_i16": (2, 1, True), "ds_read_b32": (4, 1, False), "ds_read_b64": (4, 2, False),
            "ds_read_b96": (4, 3, False), "ds_read_b128": (4, 4, False)}
DS_WRITES = {"ds_write_b8": (1, 1), "ds_write_b16": (2, 1), "ds_write_b32": (4, 1), "ds_write_b64": (4, 2),
             "ds_write_b96": (4, 3), "ds_write_b128": (4, 4)}


@pytest.mark.parametrize("name", sorted(DS_READS))
def test_ds_read_matches_model(name):
    size, n, signed = DS_READS[name]
    rng = np.random.default_rng(9)
    w, mask = _wave(rng)
    lds = w.group.lds.data
    lds[:] = rng.integers(0, 256, lds.size, dtype=np.uint8)
    w.v[1] = rng.integers(0, 60000, LANES)
    w.v[1][~mask] = 0xFFFFFF00  # disabled lanes' addresses are never used
    execute(w, f"{name} {_regs(n, 12)}, v1 offset:1000")
    for lane in range(LANES):
        for c in range(n):
            off = int(w.v[1][lane]) + 1000 + c * size
            want = _elem(lds[off:off + size].tobytes(), signed) if mask[lane] else SENTINEL
            assert int(w.v[12 + c][lane]) == want


@pytest.mark.parametrize("name", sorted(DS_WRITES))
def test_ds_write_matches_model(name):
    size, n = DS_WRITES[name]
    rng = np.random.default_rng(10)
    w, mask = _wave(rng)
    lds = w.group.lds.data
    lds[:] = rng.integers(0, 256, lds.size, dtype=np.uint8)
    model = lds.copy()
    w.v[1] = rng.integers(0, 50000, LANES)  # overlaps allowed: later lanes win
    for c in range(n):
        w.v[20 + c] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    execute(w, f"{name} v1, {_regs(n, 20)} offset:24")
    for lane in np.nonzero(mask)[0]:
        raw = b"".join(int(w.v[20 + c][lane]).to_bytes(4, "little")[:size] for c in range(n))
        off = int(w.v[1][lane]) + 24
        model[off:off + len(raw)] = np.frombuffer(raw, np.uint8)
    np.testing.assert_array_equal(lds, model)


@pytest.mark.parametrize("name,regs,unit", [("ds_read2_b32", 1, 4), ("ds_read2st64_b32", 1, 256),
                                             ("ds_read2_b64", 2, 8), ("ds_read2st64_b64", 2, 512)])
def test_ds_read2_reads_two_elements_at_scaled_offsets(name, regs, unit):
    rng = np.random.default_rng(11)
    w, mask = _wave(rng)
    lds = w.group.lds.data
    lds[:] = rng.integers(0, 256, lds.size, dtype=np.uint8)
    w.v[168] = rng.integers(0, 2000, LANES) * 4
    execute(w, f"{name} {_regs(2 * regs, 36)}, v168 offset0:98 offset1:100")
    for lane in range(LANES):
        for k, o in enumerate((98, 100)):
            for r in range(regs):
                off = int(w.v[168][lane]) + o * unit + 4 * r
                want = _elem(lds[off:off + 4].tobytes(), False) if mask[lane] else SENTINEL
                assert int(w.v[36 + k * regs + r][lane]) == want


@pytest.mark.parametrize("name,regs,unit", [("ds_write2_b32", 1, 4), ("ds_write2st64_b32", 1, 256),
                                             ("ds_write2_b64", 2, 8), ("ds_write2st64_b64", 2, 512)])
def test_ds_write2_writes_two_elements_at_scaled_offsets(name, regs, unit):
    rng = np.random.default_rng(12)
    w, mask = _wave(rng)
    lds = w.group.lds.data
    model = lds.copy()
    w.v[34] = rng.permutation(LANES) * (16 if unit <= 8 else unit // 64)  # no two element writes overlap
    for r in range(2 * regs):
        w.v[108 + r] = rng.integers(0, 2 ** 32, LANES, dtype=np.uint64)
    d0, d1 = _regs(regs, 108), _regs(regs, 108 + regs)
    execute(w, f"{name} v34, {d0}, {d1} offset0:96 offset1:97")
    for lane in np.nonzero(mask)[0]:
        for k, o in enumerate((96, 97)):
            raw = b"".join(int(w.v[108 + k * regs + r][lane]).to_bytes(4, "little") for r in range(regs))
            off = int(w.v[34][lane]) + o * unit
            model[off:off + len(raw)] = np.frombuffer(raw, np.uint8)
    np.testing.assert_array_equal(lds, model)


def test_ds_access_outside_lds_faults_but_disabled_lanes_do_not():
    rng = np.random.default_rng(13)
    w, mask = _wave(rng)
    w.v[1] = 0
    w.v[1][1] = 10 ** 6  # lane 1 is disabled: no fault
    execute(w, "ds_read_b128 v[4:7], v1 offset:16")
    w.v[1][0] = 65536 - 8
    with pytest.raises(MemoryFault, match="65528"):
        execute(w, "ds_read_b128 v[4:7], v1")
    with pytest.raises(MemoryFault):
        execute(w, "ds_write_b32 v1, v2 offset:8")
    with pytest.raises(SimError):
        execute(w, "ds_read_b32 v1, v3 offset:8 gds")


# ---- every family's mnemonics in the compiled kernels have a handler --------------

FAMILY = re.compile(r"^(buffer_|global_|flat_|scratch_|ds_|v_mfma|v_permlane|v_smfmac)")


def test_every_memory_xlane_and_mfma_mnemonic_in_the_kernels_has_a_handler():
    for path in compiled_kernels():
        prog = parse_program(open(path).read())
        mine = {i.base for i in prog.instrs if FAMILY.match(i.base)}
        assert mine, f"{path}: the kernel has memory instructions"
        assert sorted(m for m in mine if m not in OPS) == [], path


def test_the_arrival_guard_allows_conflicting_accesses_in_arrival_order_only():
    from nvfp4_suite.kernels.flydsl.sim.memory import ArrivalGuard, OrderDiverged
    mem = Memory()
    buf = np.arange(16, dtype=np.uint8)
    mem.alloc("b", buf)
    a = mem.allocs[0]
    g = ArrivalGuard()
    g.rank = 2
    g.read(a, np.array([0, 1]))  # before any write: remembered as rank 2's read
    g.rank = 1
    with pytest.raises(OrderDiverged, match="writes b, read by a later one"):
        g.write(a, np.array([8]))
    g = ArrivalGuard()
    g.rank = 1
    g.write(a, np.array([4, 5]))
    buf[4:6] = 99
    g.rank = 3
    g.read(a, np.array([4, 5]))  # a later workgroup reads what an earlier one wrote
    g.write(a, np.array([6]))
    g.rank = 2
    g.read(a, np.array([4, 7]))  # bytes 4, 7: written by rank 1 / nobody
    with pytest.raises(OrderDiverged, match="reads b bytes written by a later one"):
        g.read(a, np.array([6]))
    with pytest.raises(OrderDiverged, match="writes b bytes a later one accessed"):
        g.write(a, np.array([5]))
    assert not g.unwritten(a)
    g.restore()
    assert np.array_equal(buf, np.arange(16))


@pytest.mark.parametrize("nbytes,align", [(1, 1), (2, 2), (4, 1), (4, 4), (8, 8), (12, 4), (16, 16), (16, 4)])
def test_byte_rows_read_and_write_the_bytes_byte_indices_name(nbytes, align):
    from nvfp4_suite.kernels.flydsl.sim.memory import ByteRows
    rng = np.random.default_rng(nbytes * 17 + align)
    arr = rng.integers(0, 1 << 30, 1003, dtype=np.int32)  # its last bytes outside every row of 16
    offs = rng.integers(0, (arr.size - nbytes) // align + 1, (3, 64)) * align
    offs[0, :2] = arr.size - nbytes - (arr.size - nbytes) % align  # the last reachable access
    acc = ByteRows(offs, nbytes)
    idx = offs[..., None] + np.arange(nbytes)
    assert acc.g == min(16, nbytes & -nbytes, align & -align) and np.array_equal(acc.index(), idx)
    assert np.array_equal(acc.get(arr), arr[idx])
    vals = rng.integers(0, 1 << 30, idx.shape, dtype=np.int32)
    want = arr.copy()
    for k in range(3):  # waves in order, lanes in lane order: the last write of a byte wins
        for i in range(64):
            want[idx[k, i]] = vals[k, i]
    acc.put(arr, vals)
    assert np.array_equal(arr, want)
    acc.put(arr, np.array([5, 6, 7], np.int32)[:, None, None])
    want[idx[0]], want[idx[1]], want[idx[2]] = 5, 6, 7
    assert np.array_equal(arr, want)


@pytest.mark.parametrize("seed", range(6))
def test_the_arrival_guard_checks_a_batch_of_waves_as_one_wave_at_a_time(seed):
    from nvfp4_suite.kernels.flydsl.sim.memory import ArrivalGuard, ByteRows, OrderDiverged
    rng = np.random.default_rng(seed)
    mem = Memory()
    mem.alloc("b", np.zeros(200, np.uint8))
    a = mem.allocs[0]
    batched, single = ArrivalGuard(), ArrivalGuard()
    raised = 0
    for _ in range(8):
        nbytes = int(rng.choice([1, 4, 16]))
        offs = rng.integers(0, (a.size - nbytes) // nbytes + 1, (4, 3)) * nbytes
        ranks = sorted(rng.integers(0, 6, 4).tolist())
        write = bool(rng.integers(0, 2))
        try:
            (batched.write_waves if write else batched.read_waves)(a, ByteRows(offs, nbytes), ranks)
            got = None
        except OrderDiverged as e:
            got = str(e)
        want = None
        for k, r in enumerate(ranks):
            single.rank = r
            try:
                (single.write if write else single.read)(a, (offs[k, :, None] + np.arange(nbytes)).reshape(-1))
            except OrderDiverged as e:
                want = str(e)
                break
        assert got == want
        if got is not None:
            raised += 1
            break  # the launch starts over one workgroup at a time
        for x, y in zip(batched._hi.get(id(a), ()), single._hi.get(id(a), ())):
            assert np.array_equal(x, y)
    assert seed != 0 or raised  # the comparison covers a divergence too


# ---- the batched cores against each wave's handler ----------------------------------

BATCHED_FORMS = [
    "buffer_load_dwordx4 v[10:13], v1, s[8:11], 0 offen offset:16",
    "buffer_load_ushort v10, v1, s[8:11], s12 offen",
    "buffer_load_dwordx2 v[10:11], v1, s[16:19], 0 offen",  # partly past num_records
    "buffer_load_dword v10, off, s[8:11], s12 offset:4",
    "buffer_store_dwordx2 v[14:15], v1, s[8:11], 0 offen sc1",
    "buffer_load_dwordx3 v[10:12], v1, s[8:11], 0 offen sc0",
    "buffer_store_byte v14, v1, s[8:11], 0 offen offset:3",
    "buffer_store_dwordx2 v[14:15], v1, s[16:19], 0 offen offset:48",  # lanes wholly past num_records dropped
    "buffer_store_dwordx2 v[14:15], v1, s[16:19], 0 offen offset:4000",  # some waves' every lane past it
    "global_load_dwordx2 v[10:11], v1, s[4:5] offset:8",
    "global_store_dwordx4 v6, v[14:17], s[4:5]",
    "global_store_dwordx2 v7, v[14:15], s[4:5] nt",  # each wave's bytes its own
    "global_load_dwordx2 v[10:11], v7, s[4:5] offset:1024",  # the next wave's bytes
    "global_load_sbyte v10, v[2:3], off offset:1",
    "global_store_short v[2:3], v14, off offset:2",
    "global_load_dwordx4 v[10:13], v6, s[4:5] sc1",
    "ds_write_b64 v5, v[14:15] offset:8",
    "ds_read_b128 v[10:13], v5 offset:16",
    "ds_read_i8 v10, v5 offset:3",
    "ds_write2_b32 v5, v14, v15 offset0:2 offset1:3",
    "ds_read2_b32 v[10:11], v5 offset0:1 offset1:9",
    "ds_write2st64_b64 v5, v[14:15], v[16:17] offset1:1",
    "ds_read2st64_b64 v[10:13], v5 offset1:1",
    "ds_write_b8 v5, v14 offset:5",
]


def _batch(seed: int):
    """Eight waves of four workgroups (two each, one LDS pool) over one 64 KiB
    buffer: random data registers, lane offsets that overlap between waves
    (and ``v7``: a slot of its own per wave), and the memory-model check attached. Returns (waves, SGPR file, VGPR file,
    LDS pool, the buffer, the check)."""
    from nvfp4_suite.kernels.flydsl.sim.launch import Group
    from nvfp4_suite.kernels.flydsl.sim.memorder import MemOrder
    from nvfp4_suite.kernels.flydsl.sim.memory import Lds
    from nvfp4_suite.kernels.flydsl.sim.wave import Wave
    from nvfp4_suite.kernels.flydsl.targets import target
    rng = np.random.default_rng(seed)
    mem = Memory()
    buf = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    base = mem.alloc("data", buf)
    mem.order = MemOrder((4, 1, 1), xcds=0, stale=True)
    groups = [Group(mem, target("gfx942"), Lds(4096, fill=0), (g, 0, 0), {}, g) for g in range(4)]
    Lds.share([g.lds for g in groups])
    n = 2 * len(groups)
    sfile = np.zeros((n, 129), np.uint32)
    vfile = rng.integers(0, 1 << 32, (n, 32, LANES), dtype=np.uint64).astype(np.uint32)
    waves = [Wave(groups[k // 2], k % 2, (sfile, vfile, k)) for k in range(n)]
    sfile[:, 126:128] = 0xFFFFFFFF
    sfile[:, 4], sfile[:, 5] = base & 0xFFFFFFFF, base >> 32
    for s, records in ((8, buf.size), (16, 1 << 12)):
        sfile[:, s], sfile[:, s + 1], sfile[:, s + 2], sfile[:, s + 3] = base & 0xFFFFFFFF, base >> 32, records, 0
    sfile[:, 12] = 32
    vfile[:, 1] = rng.integers(0, 1 << 8, (n, LANES)) * 16  # a small range: waves share bytes
    vfile[:, 6] = rng.integers(0, 1 << 12, (n, LANES)) * 4
    vfile[:, 7] = (1 << 15) + np.arange(n)[:, None] * 1024 + rng.permutation(LANES) * 8
    addr = base + vfile[:, 1].astype(np.uint64)
    vfile[:, 2], vfile[:, 3] = addr & 0xFFFFFFFF, addr >> 32
    vfile[:, 5] = rng.integers(0, 3 << 7, (n, LANES)) * 4
    return waves, sfile, vfile, groups[0].lds.pool, buf, mem.order


@pytest.mark.parametrize("seed", range(3))
def test_batched_memory_cores_do_what_each_waves_handler_does_in_turn(seed):
    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, decode, decode_batched
    one, many = _batch(seed), _batch(seed)
    for i, text in enumerate(BATCHED_FORMS):
        ins = parse_instruction(text)
        ins.index = i
        for w in one[0]:
            decode(ins)(w)
        core = decode_batched(ins)
        assert core is not None, text
        assert core(BatchView(many[1], many[2], many[0])) is None, text  # no wave left to its handler
        for x, y in zip(one[1:5], many[1:5]):
            assert np.array_equal(x, y), text
    assert [str(c) for c in one[5].complaints] == [str(c) for c in many[5].complaints]
    assert one[5].complaints  # the waves' bytes overlap: the check had something to say


def test_a_batched_store_leaves_a_lane_straddling_num_records_to_the_handlers():
    """A lane whose first component is in range and second is not (v1 = 4080:
    bytes 4092..4099 of a 4096-byte range): the core declines, having issued
    and written nothing, so the handlers store the components one by one."""
    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, decode_batched
    waves, sfile, vfile, _, buf, order = _batch(0)
    vfile[:, 1, 5] = 4080
    before = buf.copy()
    core = decode_batched(parse_instruction("buffer_store_dwordx2 v[14:15], v1, s[16:19], 0 offen offset:12"))
    assert core(BatchView(sfile, vfile, waves)) is False
    assert np.array_equal(buf, before) and not order.complaints and not order._waves


def _set_soffset(files, value):
    files[1][:, 12] = value


def _set_records(files, records):
    files[1][:, 18] = records


def _set_lanes(files, values):
    files[2][:, 6] = values


def _point_first_wave_elsewhere(files):
    """Wave 0's V# s[16:19] to a buffer of its own, allocated now, the other
    waves' to 4096 bytes of theirs: every lane in range."""
    base = files[0][0].group.memory.alloc("other", np.arange(1 << 12, dtype=np.uint32).view(np.uint8))
    _set_records(files, 4096)
    files[1][0, 16], files[1][0, 17], files[1][0, 18] = base & 0xFFFFFFFF, base >> 32, 1 << 12


# v6 of every wave in the steps below: lane l of wave k at 16*l + 4*k, the
# highest (wave 7's last lane) at LAST.
_LANE_OFFS = np.arange(LANES) * 16 + np.arange(8)[:, None] * 4
LAST = 63 * 16 + 7 * 4

# (what changes before the instruction runs, the instruction): one V# (s[16:19],
# records 4096 at first) and one soffset (s12) changed under instructions that
# ran before, so that what a core derives from them must follow; lanes whose
# access ends exactly at num_records, one byte past it, and wholly past it.
_DESCRIPTOR_STEPS = [
    (lambda f: _set_lanes(f, _LANE_OFFS), "buffer_store_dwordx2 v[14:15], v6, s[16:19], 0 offen"),
    (lambda f: None, "buffer_load_dwordx2 v[10:11], v6, s[16:19], 0 offen"),
    (lambda f: _set_records(f, LAST + 8), "buffer_load_dwordx2 v[10:11], v6, s[16:19], 0 offen"),  # ends at it
    (lambda f: _set_records(f, LAST + 7), "buffer_load_dwordx2 v[10:11], v6, s[16:19], 0 offen"),  # a byte past
    # As two steps before but for the offset, which takes the last lane 4 bytes past.
    (lambda f: _set_records(f, LAST + 8), "buffer_load_dwordx2 v[12:13], v6, s[16:19], 0 offen offset:4"),
    (lambda f: _set_records(f, LAST + 7), "buffer_store_dword v14, v6, s[16:19], 0 offen offset:4"),  # a byte past
    (lambda f: _set_records(f, 4096), "buffer_load_dword v10, v6, s[16:19], s12 offen"),
    (lambda f: _set_soffset(f, 4096 - LAST - 4), "buffer_load_dword v10, v6, s[16:19], s12 offen"),  # ends at it
    (lambda f: _set_soffset(f, 4096 - LAST - 3), "buffer_load_dword v10, v6, s[16:19], s12 offen"),  # past
    (lambda f: _set_soffset(f, 4088), "buffer_load_dwordx2 v[10:11], off, s[16:19], s12"),  # ends at it
    (lambda f: _set_soffset(f, 4089), "buffer_load_dwordx2 v[10:11], off, s[16:19], s12"),  # past: reads zeros
    (lambda f: _set_soffset(f, 0), "buffer_store_dword v14, v6, s[16:19], s12 offen offset:1024"),
    (lambda f: f[1].__setitem__((slice(None), 16), f[1][:, 16] + 64), "buffer_load_dword v10, v6, s[16:19], s12 offen"),
    (lambda f: f[1].__setitem__((slice(3, None), 18), 1000), "buffer_load_dword v10, v6, s[16:19], s12 offen"),
    (lambda f: None, "buffer_store_dword v14, v6, s[16:19], s12 offen"),  # some waves' lanes past their own V#
    (_point_first_wave_elsewhere, "buffer_load_dword v10, v6, s[16:19], 0 offen"),  # the waves' bytes in two buffers
    (lambda f: None, "buffer_store_dword v14, v6, s[16:19], 0 offen"),
]


@pytest.mark.parametrize("seed", range(3))
def test_buffer_cores_follow_a_changed_descriptor_or_soffset_as_the_handlers_do(seed):
    """Buffer loads and stores over descriptors and soffsets that change between
    executions, with lanes at and past num_records and loads of bytes other
    workgroups stored: the cores (and the handlers where a core declines) leave
    registers, memory and the memory-model check's complaints as each wave's
    handler does, the stale bytes it substitutes included."""
    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, decode_batched, handler_for
    one, many = _batch(seed), _batch(seed)
    for i, (change, text) in enumerate(_DESCRIPTOR_STEPS):
        ins = parse_instruction(text)
        ins.index = i
        change(one)
        change(many)
        handler, core = handler_for(ins), decode_batched(ins)
        for w in one[0]:
            handler(w, ins)
        if core(BatchView(many[1], many[2], many[0])) is False:
            for w in many[0]:
                handler(w, ins)
        for x, y in zip(one[1:5], many[1:5]):
            assert np.array_equal(x, y), text
    assert [str(c) for c in one[5].complaints] == [str(c) for c in many[5].complaints]
    assert one[5].complaints  # the loads read bytes other workgroups stored
