"""nvfp4_suite.kernels.flydsl.sim.launch: workgroup orders, waves meeting at barriers, the
initial registers the kernel descriptor declares, on small hand-written kernels."""

import numpy as np
import pytest
from sim_kernels import hand_kernel

from nvfp4_suite.kernels.flydsl.sim.launch import Group, Kernel, dispatch, workgroup_order
from nvfp4_suite.kernels.flydsl.sim.memory import Lds, Memory
from nvfp4_suite.kernels.flydsl.sim.wave import MemoryFault, SimError
from nvfp4_suite.kernels.flydsl.targets import target


def _kernel(body: str, lds: int = 0, kernarg: int = 16) -> Kernel:
    return hand_kernel(body, "gfx950", lds, kernarg)


# Lane 0 of each workgroup takes a ticket from a counter and stores it at
# out[workgroup id]: the tickets show the order the workgroups ran in.
TICKETS = """\ts_load_dwordx4 s[4:7], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\tv_cmp_eq_u32_e32 vcc, 0, v0
\ts_and_saveexec_b64 s[8:9], vcc
\ts_cbranch_execz .LBB0_1
\tv_mov_b32_e32 v1, 0
\tv_mov_b32_e32 v2, 1
\tglobal_atomic_add v3, v1, v2, s[4:5] sc0
\ts_lshl_b32 s10, s2, 2
\tv_mov_b32_e32 v5, s10
\tglobal_store_dword v5, v3, s[6:7]
.LBB0_1:
\ts_endpgm"""


def _args(*addrs) -> bytes:
    return b"".join(int(a).to_bytes(8, "little") for a in addrs)


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle:3", "shuffle:4"])
def test_workgroups_run_one_at_a_time_in_the_chosen_order(order):
    k = _kernel(TICKETS)
    mem = Memory()
    counter, out = np.zeros(1, np.uint32), np.full(6, 99, np.uint32)
    n = dispatch(k, mem, _args(mem.alloc("counter", counter), mem.alloc("out", out)), (6, 1, 1), 64, order=order)
    ran = [ids[0] for ids in workgroup_order((6, 1, 1), order)]
    assert counter[0] == 6
    assert [int(out[x]) for x in ran] == list(range(6))
    assert n > 6 * 5


def test_orders_are_permutations_and_shuffles_are_seeded():
    fwd = workgroup_order((3, 2, 2), "forward")
    assert fwd[:4] == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (0, 1, 0)] and len(set(fwd)) == 12
    assert workgroup_order((3, 2, 2), "reverse") == fwd[::-1]
    s1 = workgroup_order((3, 2, 2), "shuffle:1")
    assert sorted(s1) == sorted(fwd) and s1 == workgroup_order((3, 2, 2), "shuffle:1")
    assert s1 != workgroup_order((3, 2, 2), "shuffle:2")
    with pytest.raises(ValueError, match="forward, reverse or shuffle"):
        workgroup_order((1, 1, 1), "sideways")


# Each work-item writes tid + 100 to LDS, waits at the barrier, then reads the
# word of the work-item 64 away (in the other wave) and stores it at out[tid].
BARRIER = """\ts_load_dwordx2 s[6:7], s[0:1], 0x0
\tv_lshlrev_b32_e32 v1, 2, v0
\tv_add_u32_e32 v2, 0x64, v0
\tds_write_b32 v1, v2
\ts_waitcnt lgkmcnt(0)
\ts_barrier
\tv_xor_b32_e32 v3, 0x100, v1
\tds_read_b32 v4, v3
\ts_waitcnt lgkmcnt(0)
\tglobal_store_dword v1, v4, s[6:7]
\ts_endpgm"""


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_waves_meet_at_the_barrier_before_reading_each_others_lds(order):
    k = _kernel(BARRIER, lds=512, kernarg=8)
    mem = Memory()
    out = np.zeros(128, np.uint32)
    dispatch(k, mem, _args(mem.alloc("out", out)), (1, 1, 1), 128, order=order)
    assert list(out) == [(t ^ 64) + 100 for t in range(128)]


def test_a_wave_that_has_ended_no_longer_holds_the_barrier():
    # Wave 0 ends early; wave 1 passes its barrier and stores out[tid] = tid.
    body = """\ts_load_dwordx2 s[6:7], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\tv_cmp_gt_u32_e32 vcc, 64, v0
\ts_cbranch_vccnz .LBB0_1
\ts_barrier
\tv_lshlrev_b32_e32 v1, 2, v0
\tglobal_store_dword v1, v0, s[6:7]
.LBB0_1:
\ts_endpgm"""
    mem = Memory()
    out = np.zeros(128, np.uint32)
    dispatch(_kernel(body, kernarg=8), mem, _args(mem.alloc("out", out)), (1, 1, 1), 128)
    assert list(out) == [0] * 64 + list(range(64, 128))


def test_a_kernel_that_loops_forever_stops_at_the_budget():
    k = _kernel(""".LBB0_0:
\ts_branch .LBB0_0""")
    mem = Memory()
    group = Group(mem, target("gfx950"), Lds(0))
    with pytest.raises(SimError, match="exceeded 1000 instructions"):
        k.run_group(group, mem.alloc("kernarg", np.zeros(16, np.uint8)), 64, budget=1000)


def test_a_store_past_every_allocation_names_the_buffer():
    body = """\ts_load_dwordx2 s[6:7], s[0:1], 0x0
\tv_lshlrev_b32_e32 v1, 2, v0
\tglobal_store_dword v1, v0, s[6:7]
\ts_endpgm"""
    mem = Memory()
    out = np.zeros(63, np.uint32)
    with pytest.raises(MemoryFault, match="past the end of buffer 'out'"):
        dispatch(_kernel(body, kernarg=8), mem, _args(mem.alloc("out", out)), (1, 1, 1), 64)


def test_kernarg_segment_larger_than_declared_is_refused():
    with pytest.raises(SimError, match="kernarg segment of 24 bytes"):
        dispatch(_kernel(TICKETS), Memory(), bytes(24), (1, 1, 1), 64)


# Each workgroup loops (its id + 1) times adding the work-item id, so the
# workgroups' waves diverge in the loop; then a barrier and a store of the sum.
DIVERGENT = """\ts_load_dwordx2 s[6:7], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\ts_add_u32 s10, s2, 1
\tv_mov_b32_e32 v1, 0
.LBB0_1:
\tv_add_u32_e32 v1, v1, v0
\ts_sub_u32 s10, s10, 1
\ts_cmp_lg_u32 s10, 0
\ts_cbranch_scc1 .LBB0_1
\ts_barrier
\ts_lshl_b32 s11, s2, 9
\tv_lshlrev_b32_e32 v2, 2, v0
\tv_add_u32_e32 v2, s11, v2
\tglobal_store_dword v2, v1, s[6:7]
\ts_endpgm"""


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle:5"])
def test_batched_and_sequential_launches_agree_where_waves_diverge(order):
    runs = {}
    for batched in (True, False):
        k = _kernel(DIVERGENT, kernarg=8)
        mem = Memory()
        out = np.zeros(4 * 128, np.uint32)
        n = dispatch(k, mem, _args(mem.alloc("out", out)), (4, 1, 1), 128, order=order, batched=batched)
        runs[batched] = (out, n, k.steps)
    tid = np.arange(128)
    expected = np.concatenate([tid * (wg + 1) for wg in range(4)]).astype(np.uint32)
    for out, _, _ in runs.values():
        assert np.array_equal(out, expected)
    # The same wave-instructions: 2 waves x 4 workgroups x (10 + 4 per loop trip).
    assert runs[True][1] == runs[False][1] == sum(2 * (10 + 4 * (wg + 1)) for wg in range(4))
    # One at a time a step is one wave's instruction; batched, the steps of the
    # longest workgroup (the others' waves ride along).
    assert runs[False][2] == runs[False][1]
    assert runs[True][2] == 10 + 4 * 4


# Workgroup 1 ends at once, and workgroup 3 skips an add, so the waves of
# workgroups 0 and 2 (rows 0, 1, 4, 5) are a run whose rows are not evenly
# spaced, which joins workgroup 3's (rows 6, 7) after the add. Each loop trip
# runs a fused stretch, then v_bfrev_b32 (each wave's handler: no batched
# core), then more cores, the last of them reading v7, which nothing before
# it in the loop names.
SCATTERED = """\ts_load_dwordx2 s[6:7], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\tv_mul_u32_u24_e32 v7, 7, v0
\ts_cmp_eq_u32 s2, 1
\ts_cbranch_scc1 .LBB0_2
\tv_mov_b32_e32 v1, v0
\ts_cmp_eq_u32 s2, 3
\ts_cbranch_scc1 .LBB0_3
\tv_add_u32_e32 v1, 0x100, v1
\tv_add_u32_e32 v1, 0x100, v1
.LBB0_3:
\ts_mov_b32 s10, 3
.LBB0_1:
\tv_mul_lo_u32 v1, v1, 3
\tv_add_u32_e32 v1, 5, v1
\tv_xor_b32_e32 v1, s10, v1
\tv_bfrev_b32_e32 v1, v1
\tv_add_u32_e32 v1, v1, v0
\tv_lshrrev_b32_e32 v1, 3, v1
\tv_xor_b32_e32 v1, v1, v7
\ts_sub_u32 s10, s10, 1
\ts_cmp_lg_u32 s10, 0
\ts_cbranch_scc1 .LBB0_1
\ts_lshl_b32 s11, s2, 9
\tv_lshlrev_b32_e32 v2, 2, v0
\tv_add_u32_e32 v2, s11, v2
\tglobal_store_dword v2, v1, s[6:7]
.LBB0_2:
\ts_endpgm"""


def test_a_run_of_uneven_rows_computes_on_a_gathered_copy_written_back_before_handlers(monkeypatch):
    """The runs of rows 0, 1, 4, 5 and 0, 1, 4, 5, 6, 7 (full EXEC) execute on
    gathered copies of their registers; each wave's handler (v_bfrev_b32) and
    the run joined sees what the cores wrote to them. Expected: the loop in numpy."""
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView

    gathered = []
    real = BatchView.gathered

    def spy(view, *args):
        copy = real(view, *args)
        if copy is not view:
            gathered.append([w.k for w in view.waves])
        return copy
    monkeypatch.setattr(BatchView, "gathered", spy)
    k = _kernel(SCATTERED, kernarg=8)
    mem = Memory()
    out = np.full(4 * 128, 7, np.uint32)
    dispatch(k, mem, _args(mem.alloc("out", out)), (4, 1, 1), 128)
    assert [0, 1, 4, 5] in gathered and [0, 1, 4, 5, 6, 7] in gathered
    tid = np.arange(128, dtype=np.uint64)

    def expected(start):
        v = start
        for s10 in (3, 2, 1):
            v = ((v * 3) % 2**32 + 5) % 2**32 ^ s10
            v = np.array([int(f"{int(x):032b}"[::-1], 2) for x in v], np.uint64)
            v = (((v + tid) % 2**32) >> 3) ^ (tid * 7)
        return v
    assert np.array_equal(out[:128], expected(tid + 0x200)) and np.array_equal(out[256:384], expected(tid + 0x200))
    assert np.array_equal(out[384:], expected(tid))
    assert (out[128:256] == 7).all()


def test_a_span_names_the_vgprs_up_to_the_next_control_instruction_where_it_is_long_enough():
    k = _kernel(SCATTERED, kernarg=8)
    texts = [ins.text.strip() for ins in k.program.instrs]
    after_bfrev = texts.index("v_add_u32_e32 v1, v1, v0")
    use, written = k.span(after_bfrev)
    # v_add, v_lshrrev, v_xor (v7), then s_sub, s_cmp and the branch: 6 instructions, 3 VGPRs.
    assert use.tolist() == [0, 1, 7] and written.tolist() == [1]
    loop = texts.index("v_mul_lo_u32 v1, v1, 3")
    use, written = k.span(loop)
    assert use.tolist() == [0, 1, 7] and written.tolist() == [1]
    # From the first add to the loop's branch: 15 instructions (s_mov and the loop's 13), 3 VGPRs.
    assert k.span(texts.index("v_add_u32_e32 v1, 0x100, v1"))[0].tolist() == [0, 1, 7]
    # v_mov v1, v0 then s_cmp and the branch: 3 instructions for 2 VGPRs, too few to pay for a gather.
    assert k.span(texts.index("v_mov_b32_e32 v1, v0")) is None


def test_a_launch_whose_workgroups_race_runs_one_workgroup_at_a_time():
    # Each workgroup first reads the other's slot, then writes its own: run
    # together, the first would read before the second wrote, which one after
    # another it would not (in reverse order: the other way round).
    body = """\ts_load_dwordx2 s[6:7], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\ts_xor_b32 s10, s2, 1
\ts_lshl_b32 s10, s10, 2
\tv_mov_b32_e32 v1, s10
\tglobal_load_dword v2, v1, s[6:7]
\ts_waitcnt vmcnt(0)
\tv_add_u32_e32 v2, 1, v2
\ts_lshl_b32 s11, s2, 2
\tv_mov_b32_e32 v3, s11
\ts_mov_b64 exec, 1
\tglobal_store_dword v3, v2, s[6:7]
\ts_endpgm"""
    for order, expected in (("forward", [1, 2]), ("reverse", [2, 1])):
        k = _kernel(body, kernarg=8)
        mem = Memory()
        out = np.zeros(2, np.uint32)
        n = dispatch(k, mem, _args(mem.alloc("out", out)), (2, 1, 1), 64, order=order)
        assert list(out) == expected
        assert n == k.steps == 2 * 13  # the batched attempt undone: its steps are not counted


def test_a_launch_pauses_the_garbage_collector_and_restores_it_as_it_was():
    """During ``dispatch`` collection is off; after it, on or off as before,
    also when the launch raises."""
    import gc

    from nvfp4_suite.kernels.flydsl.sim import launch as L

    seen = []
    real = L.Kernel.run_batched

    def spy(self, *a, **k):
        seen.append(gc.isenabled())
        return real(self, *a, **k)

    k = hand_kernel("s_endpgm")
    was = gc.isenabled()
    try:
        L.Kernel.run_batched = spy
        for on in (True, False):
            (gc.enable if on else gc.disable)()
            L.dispatch(k, Memory(), b"", (1, 1, 1), block=64)
            assert gc.isenabled() is on
        gc.enable()
        with pytest.raises(SimError):
            L.dispatch(k, Memory(), b"\0" * 4096, (1, 1, 1), block=64)  # a kernarg segment too long
        assert gc.isenabled()
    finally:
        L.Kernel.run_batched = real
        (gc.enable if was else gc.disable)()
    assert seen == [False, False]
