"""nvfp4_suite.kernels.flydsl.sim.memorder: hand-written message-passing kernels, with
and without their release and acquire, at workgroup and agent scope, on one XCD and
on two. The pairs hardware orders pass; the others are flagged, naming the store, the
load, both workgroups and the missing instruction, and with stale values substituted
their output is wrong."""

import numpy as np
import pytest
from sim_kernels import hand_kernel, sim_backend

from nvfp4_suite.kernels.flydsl.sim.launch import Kernel, dispatch
from nvfp4_suite.kernels.flydsl.sim.memorder import MemOrder, vmcnt_of
from nvfp4_suite.kernels.flydsl.sim.memory import Memory
from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction, parse_program

FILL = 0xDEADBEEF  # what the data buffer holds before the producers store


def _kernel(body: str) -> Kernel:
    return hand_kernel(body, "gfx942", kernarg=24)


def message_passing(store_bits="", release="", acquire="s_waitcnt vmcnt(0)", load_bits="", peek=False) -> str:
    """Two one-wave workgroups. Each stores 100 + lane + its id to its own slot of
    ``data`` (``store_bits``), runs ``release``, and lane 0 takes a ticket from
    ``flag`` with a returning atomic; then ``acquire``. The one that drew ticket 1
    (the last) loads the other's slot (``load_bits``) and stores it to ``out``.
    ``peek``: every workgroup first loads the other's slot into L1 (and drops it)."""
    first = ("\tv_xor_b32_e32 v9, 0x100, v2\n\tglobal_load_dword v10, v9, s[4:5]\n\ts_waitcnt vmcnt(0)\n"
             if peek else "")
    return f"""\ts_load_dwordx4 s[4:7], s[0:1], 0x0
\ts_load_dwordx2 s[8:9], s[0:1], 0x10
\ts_waitcnt lgkmcnt(0)
\tv_lshlrev_b32_e32 v1, 2, v0
\ts_lshl_b32 s10, s2, 8
\tv_add_u32_e32 v2, s10, v1
{first}\tv_add_u32_e32 v3, 100, v0
\tv_add_u32_e32 v3, s2, v3
\tglobal_store_dword v2, v3, s[4:5] {store_bits}
{release}
\tv_mov_b32_e32 v4, 0
\tv_mov_b32_e32 v5, 1
\ts_mov_b64 exec, 1
\tglobal_atomic_add v6, v4, v5, s[6:7] sc0
\ts_mov_b64 exec, -1
{acquire}
\tv_readfirstlane_b32 s11, v6
\ts_cmp_eq_u32 s11, 1
\ts_cbranch_scc0 .LBB0_1
\ts_xor_b32 s12, s2, 1
\ts_lshl_b32 s12, s12, 8
\tv_add_u32_e32 v7, s12, v1
\tglobal_load_dword v8, v7, s[4:5] {load_bits}
\ts_waitcnt vmcnt(0)
\tglobal_store_dword v1, v8, s[8:9]
.LBB0_1:
\ts_endpgm"""


def _run(body: str, xcds: int, order: str = "forward", stale: bool = False):
    """(out uint32 [64], the check) after one launch of two workgroups."""
    k = _kernel(body)
    mem = Memory()
    data, flag = np.full(128, FILL, np.uint32), np.zeros(1, np.uint32)
    out = np.zeros(64, np.uint32)
    args = b"".join(int(mem.alloc(n, a)).to_bytes(8, "little") for n, a in
                    (("data", data), ("flag", flag), ("out", out)))
    mem.order = MemOrder((2, 1, 1), xcds, stale=stale)
    dispatch(k, mem, args, (2, 1, 1), 64, order=order)
    assert flag[0] == 2
    return out, mem.order


def _expected(order: str) -> np.ndarray:
    """The last workgroup reads the first one's values: 100 + lane + its id."""
    first = 0 if order == "forward" else 1
    return (100 + np.arange(64) + first).astype(np.uint32)


AGENT_REL = "\tbuffer_wbl2 sc1\n\ts_waitcnt vmcnt(0)"  # LLVM gfx942: release at agent scope
AGENT_ACQ = "\ts_waitcnt vmcnt(0)\n\tbuffer_inv sc1"  # acquire at agent scope
WG_TGSPLIT_REL = "\ts_waitcnt vmcnt(0)"  # release at workgroup scope in tgsplit mode
WG_TGSPLIT_ACQ = "\ts_waitcnt vmcnt(0)\n\tbuffer_inv sc0"

# name -> (kernel keywords, {xcds: None when ordered, else the missing instruction's words})
# xcds 1: both workgroups on one XCD; 2: on two XCDs; 0: placement undeclared.
CASES = {
    "agent release and acquire": (dict(release=AGENT_REL, acquire=AGENT_ACQ), {1: None, 2: None, 0: None}),
    "agent acquire without the release": (
        dict(acquire=AGENT_ACQ),
        {x: "s_waitcnt vmcnt(0) between the store and the releasing atomic" for x in (1, 2, 0)}),
    "agent release without the release's wait": (
        dict(release="\tbuffer_wbl2 sc1", acquire=AGENT_ACQ),
        {x: "s_waitcnt vmcnt(0) between the store and the releasing atomic" for x in (1, 2, 0)}),
    "workgroup scope (no wait, no cache action)": (
        dict(), {x: "s_waitcnt vmcnt(0) between the store and the releasing atomic" for x in (1, 2, 0)}),
    "workgroup scope, tgsplit sequences": (
        dict(release=WG_TGSPLIT_REL, acquire=WG_TGSPLIT_ACQ),
        {1: None, 2: "buffer_wbl2 sc1 before the releasing atomic", 0: "buffer_wbl2 sc1 before the releasing"}),
    "agent release, acquire without buffer_inv": (
        dict(release=AGENT_REL), {1: None, 2: "sc1 on the load or buffer_inv sc1", 0: "buffer_inv sc1"}),
    "sc1 store and load with waits (the seed kernel's way)": (
        dict(store_bits="sc1", release=WG_TGSPLIT_REL, load_bits="sc1"), {1: None, 2: None, 0: None}),
    "sc1 store without the wait": (
        dict(store_bits="sc1", load_bits="sc1"),
        {x: "s_waitcnt vmcnt(0) between the store and the releasing atomic" for x in (1, 2, 0)}),
    "sc1 store, load without sc1": (
        dict(store_bits="sc1", release=WG_TGSPLIT_REL), {1: None, 2: "sc1 on the load", 0: "sc1 on the load"}),
    "load into L1 before the acquire, no buffer_inv": (
        dict(release=WG_TGSPLIT_REL, peek=True), {1: "buffer_inv (or sc0/sc1 on the load)", 2: "buffer_wbl2 sc1"}),
    "load into L1 before the acquire, buffer_inv sc0": (
        dict(release=WG_TGSPLIT_REL, acquire=WG_TGSPLIT_ACQ, peek=True), {1: None}),
    "load into L1 before the acquire, sc0 load": (
        dict(release=WG_TGSPLIT_REL, load_bits="sc0", peek=True), {1: None}),
}


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_message_passing_is_flagged_exactly_when_no_chain_covers_both_workgroups(name, order):
    kw, expect = CASES[name]
    body = message_passing(**kw)
    for xcds, missing in expect.items():
        out, chk = _run(body, xcds, order)
        # The simulator itself completes everything at once: the value is always the fresh one.
        assert np.array_equal(out, _expected(order))
        main = [c for c in chk.complaints if c.load_text.startswith("global_load_dword v8")]
        if kw.get("peek"):
            # The peek itself races with the other workgroup's store: no acquire precedes it.
            peeks = [c for c in chk.complaints if c not in main]
            assert len(peeks) == 1 and "an acquire in workgroup" in peeks[0].missing
        else:
            assert main == chk.complaints
        if missing is None:
            assert main == [], (xcds, [str(c) for c in main])
            continue
        assert len(main) == 1, (xcds, [str(c) for c in main])
        c = main[0]
        writer, reader = (0, 1) if order == "forward" else (1, 0)
        assert (c.store_wg, c.load_wg) == (writer, reader)
        assert c.store_text.startswith("global_store_dword v2, v3") and c.load_text.startswith("global_load_dword v8")
        assert missing in c.missing, (xcds, c.missing)
        assert c.buffer == "data" and c.stale == FILL & 0xFF and c.value == (100 + writer) & 0xFF
        text = str(c)
        assert f"workgroup {reader} loads data" in text and f"workgroup {writer} stored it" in text
        assert "missing " + c.missing in text
        assert c.store_bits == (kw.get("store_bits") or "no cache bits") and c.store_outstanding == 1
        assert c.load_bits == (kw.get("load_bits") or "no cache bits") and c.load_outstanding >= 1
        # With the stale value substituted the failure is a wrong output.
        stale_out, _ = _run(body, xcds, order, stale=True)
        assert (stale_out == FILL).all()


def test_placement_decides_whether_two_workgroups_share_an_l2():
    chk = MemOrder((16, 1, 1), xcds=8)
    assert not chk.may_split_l2(3, 11) and chk.may_split_l2(3, 4)
    assert MemOrder((16, 1, 1), xcds=0).may_split_l2(3, 11)


def test_vmcnt_is_read_from_text_and_from_the_packed_immediate():
    assert vmcnt_of(parse_instruction("s_waitcnt vmcnt(3) lgkmcnt(0)")) == 3
    assert vmcnt_of(parse_instruction("s_waitcnt lgkmcnt(0)")) is None
    # gfx9 packing: vmcnt bits 3:0 and 15:14; 0xC07F waits for lgkmcnt(0) only (vmcnt 63).
    assert vmcnt_of(parse_instruction("s_waitcnt 0xc07f")) is None
    assert vmcnt_of(parse_instruction("s_waitcnt 0x0")) == 0


def test_a_store_of_the_loading_workgroup_itself_needs_no_chain():
    # The last workgroup reads its own slot instead of the other's: never flagged.
    body = message_passing().replace("\ts_xor_b32 s12, s2, 1\n", "\ts_mov_b32 s12, s2\n")
    out, chk = _run(body, 2)
    assert chk.complaints == [] and np.array_equal(out, (100 + np.arange(64) + 1).astype(np.uint32))


# ---- the real kernel -------------------------------------------------------------

def _real_case():
    from nvfp4_suite.vectors.catalog.cases import CASES
    return next(c for c in CASES if c.name == "splits-5-blocks").build()


@pytest.fixture(scope="module")
def compiled():
    """The simulator's backend module (``sim_kernels.sim_backend``: skips without the kernel)."""
    return sim_backend()


# Splits 2 only, to keep CI's compiles few; every golden case at every split
# count and placement was checked by hand (the closing note of issue 22).
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("xcds", [0, 8])
def test_the_seed_kernel_raises_no_complaint_at_either_placement(compiled, arch, xcds):
    p = _real_case()
    for order in ("forward", "reverse"):
        res = compiled.run(p, arch, splits=2, xcds=xcds, order=order, memorder="stale")
        assert res["memorder"] == [], [str(c) for c in res["memorder"][:3]]
        assert not np.isnan(res["out"]).any()


def _edited(arch, splits, xcds, layout, edit):
    """The cached seed kernel's assembly with ``edit`` (lines -> lines) applied."""
    from nvfp4_suite.kernels.flydsl.sim.compile import arg_order, assembly_path
    path = assembly_path(arch, 16, splits, xcds, layout)
    return Kernel(parse_program("\n".join(edit(path.read_text().split("\n"))))), tuple(arg_order(path))


def _drop_wait_before_atomic(lines):
    at = next(i for i, t in enumerate(lines) if "global_atomic_add" in t)
    wait = max(i for i in range(at) if "s_waitcnt vmcnt(0)" in lines[i])
    return lines[:wait] + lines[wait + 1:]


def _drop_sc1(lines):
    return [t.replace(" sc1", "") if "buffer_" in t else t for t in lines]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("edit,xcds,missing", [
    (_drop_wait_before_atomic, 8, "s_waitcnt vmcnt(0) between the store and the releasing atomic"),
    (_drop_sc1, 0, "sc1 on the store or buffer_wbl2 sc1 before the releasing atomic"),
])
def test_the_seed_kernel_edited_at_its_release_is_flagged_and_goes_wrong_with_stale_partials(
        compiled, monkeypatch, arch, edit, xcds, missing):
    p = _real_case()
    kern = _edited(arch, 2, xcds, p.layout, edit)
    monkeypatch.setattr(compiled, "kernel", lambda *a: kern)
    res = compiled.run(p, arch, splits=2, xcds=xcds, memorder="stale")
    assert res["memorder"] and all(missing in c.missing for c in res["memorder"])
    c = res["memorder"][0]
    assert c.buffer == "partials" and c.store_wg != c.load_wg and c.store_text.startswith("buffer_store")
    # The partials start as NaN: the merge that reads them stale writes NaN.
    assert np.isnan(res["out"]).any()
    with pytest.raises(compiled.SimError, match="memory-model check, xcds=.*" + missing.split(" ")[0]):
        compiled.run(p, arch, splits=2, xcds=xcds, memorder="check", workspace=compiled.SimWorkspace())


# ---- the memory-order mutants (decode.MUTANTS), through the harness -------------------

def _golden(flag: str):
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.catalog import bugs
    from nvfp4_suite.vectors.catalog.casefile import load_case
    entry = next(c for c in bugs.golden_cases(flag) if c["name"] == "splits-5-blocks")
    return entry, load_case(catalog.HERE / entry["file"], sha256=entry["sha256"])[0]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("mutant", ["ticket_no_wait", "partials_no_sc1"])
def test_each_memory_order_mutant_fails_a_golden_case_carrying_the_flag_as_a_wrong_output(compiled, arch, mutant):
    from nvfp4_suite.kernels.protocol import Launch
    from nvfp4_suite.vectors.engine.harness import run_case
    entry, problem = _golden("memory-order")
    assert {"splits": 2, "xcds": 0} in [{k: x[k] for k in ("splits", "xcds")} for x in entry["launches"]]
    _, rep = run_case(compiled.FlydslSimBackend(arch), problem, Launch(2, 0))
    assert rep.passed, rep.details()
    bad = getattr(compiled, f"{mutant}_{arch}")()
    assert bad.memorder == "stale"
    _, rep = run_case(bad, problem, Launch(2, 0))
    assert not rep.passed
    want = {"ticket_no_wait": "s_waitcnt vmcnt(0) between the store and the releasing atomic",
            "partials_no_sc1": "sc1 on the store or buffer_wbl2 sc1"}[mutant]
    assert bad.memorder_complaints and all(want in c.missing for c in bad.memorder_complaints)


def test_an_unknown_check_mode_is_refused_naming_the_modes():
    from nvfp4_suite.kernels.flydsl.sim import backend as SB
    with pytest.raises(ValueError, match=r"memorder must be one of \('check', 'stale', None\), got 'loud'"):
        SB.FlydslSimBackend("gfx950", memorder="loud")
    with pytest.raises(ValueError, match="memorder must be one of"):
        SB.run(_real_case(), "gfx950", splits=2, memorder="loud")


def test_a_plain_store_to_the_flag_ends_the_release_sequence():
    # Each workgroup, after its ticket, stores 1 to the flag with a plain store: the
    # last one's atomic then reads that store, not the other's release.
    body = message_passing(release=AGENT_REL, acquire=AGENT_ACQ).replace(
        "\ts_mov_b64 exec, -1\n", "\tglobal_store_dword v4, v5, s[6:7]\n\ts_mov_b64 exec, -1\n")
    k = _kernel(body)
    mem = Memory()
    data, flag, out = np.full(128, FILL, np.uint32), np.zeros(1, np.uint32), np.zeros(64, np.uint32)
    args = b"".join(int(mem.alloc(n, a)).to_bytes(8, "little") for n, a in
                    (("data", data), ("flag", flag), ("out", out)))
    mem.order = MemOrder((2, 1, 1), 1)
    dispatch(k, mem, args, (2, 1, 1), 64)
    assert flag[0] == 1 and np.array_equal(out, _expected("forward"))
    (c,) = mem.order.complaints
    assert (c.store_wg, c.load_wg) == (0, 1)
    assert "an acquire in workgroup 1 that reads workgroup 0's release" in c.missing


def test_cache_control_instructions_parse_to_bits_and_refuse_what_they_do_not_take():
    from nvfp4_suite.kernels.flydsl.sim.launch import execute, make_test_wave
    from nvfp4_suite.kernels.flydsl.sim.wave import SimError
    ins = parse_instruction("buffer_inv sc0 sc1")
    assert ins.ops == [] and ins.mods == {"sc0": True, "sc1": True}
    w = make_test_wave("gfx942")
    execute(w, "buffer_wbl2 sc1")  # without a check attached: nothing changes
    assert w.pc == 1
    with pytest.raises(SimError, match="modifier offset not supported"):
        execute(w, "buffer_inv offset:4")


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_the_ticket_reset_before_the_last_workgroups_loads_orders_nothing_away(order):
    # Issue 22's third mutant ("the ticket reset before the last split's loads")
    # in the message-passing pair: the last workgroup stores 0 to the flag right
    # after its acquiring atomic, before it loads the other's slot. The acquire
    # already read the other's release, and no workgroup of the launch touches
    # the flag after it (each takes one ticket), so the reset moves nothing the
    # model orders: no complaint at any placement, the fresh values loaded, the
    # flag left at zero. (Between launches a kernel boundary orders everything;
    # the model does not go there, nor does a stream-ordered launch.)
    body = message_passing(release=AGENT_REL, acquire=AGENT_ACQ).replace(
        "\ts_cbranch_scc0 .LBB0_1\n",
        "\ts_cbranch_scc0 .LBB0_1\n\ts_mov_b64 exec, 1\n\tglobal_store_dword v4, v4, s[6:7]\n\ts_mov_b64 exec, -1\n")
    for xcds in (1, 2, 0):
        k = _kernel(body)
        mem = Memory()
        data, flag, out = np.full(128, FILL, np.uint32), np.zeros(1, np.uint32), np.zeros(64, np.uint32)
        args = b"".join(int(mem.alloc(n, a)).to_bytes(8, "little") for n, a in
                        (("data", data), ("flag", flag), ("out", out)))
        mem.order = MemOrder((2, 1, 1), xcds, stale=True)
        dispatch(k, mem, args, (2, 1, 1), 64, order=order)
        assert mem.order.complaints == [], [str(c) for c in mem.order.complaints]
        assert flag[0] == 0 and np.array_equal(out, _expected(order))


# ---- the batched hooks against one wave at a time ---------------------------------

class _Wave:
    """What the check reads of a wave: its workgroup's ids."""

    def __init__(self, wg: int):
        self.group = type("G", (), {"ids": (wg, 0, 0)})()


def _ins(text: str, index: int):
    ins = parse_instruction(text)
    ins.index = index
    return ins


def _replay(seed: int, batched: bool):
    """A random run of four two-wave workgroups storing to and loading from one
    small buffer (overlapping bytes, every access size and alignment, with and
    without cache bits; all the waves' accesses in one range, or each wave's
    in a slot of its own), with releases, acquires, waits, write-backs and
    invalidates between; each store and load given to the check for all eight
    waves at once (``batched``) or one wave at a time. Returns (the check, the
    buffer, each load's (delivered bytes, bytes memory held))."""
    from nvfp4_suite.kernels.flydsl.sim.memory import ByteRows
    rng = np.random.default_rng(seed)
    mem = Memory()
    data = np.arange(300, dtype=np.uint8)  # not a multiple of 16: rows of 16 bytes stop short of its end
    mem.alloc("data", data)
    mem.alloc("flag", np.zeros(4, np.uint32))
    a, flag = mem.allocs
    chk = MemOrder((4, 1, 1), xcds=int(rng.integers(0, 3)), stale=True)
    waves = [_Wave(wg) for wg in range(4) for _ in range(2)]
    loaded = []
    pc = 0

    def each(fn, *per_wave):
        """``fn(waves, *rows)`` once (batched) or once per wave."""
        if batched:
            return [fn(waves, *per_wave)]
        return [fn([w], *(x[k:k + 1] for x in per_wave)) for k, w in enumerate(waves)]

    for _ in range(4):
        for kind in rng.permutation(["store", "load", "sync"]):
            pc += 1
            nbytes = int(rng.choice([1, 2, 4, 8, 12, 16]))
            align = int(rng.choice([1, 4, nbytes]))
            bits = str(rng.choice(["", " sc0", " sc1", " sc0 sc1", " nt"]))
            offs = rng.integers(0, (a.size - nbytes) // align + 1, (len(waves), 8)) * align
            if rng.integers(0, 2):  # each wave in a 32-byte slot of its own: no byte written by two waves
                offs = np.arange(len(waves))[:, None] * 32 + \
                    rng.integers(0, (32 - nbytes) // align + 1, offs.shape) * align
            if kind == "store":
                ins = _ins(f"global_store_dwordx4 v1, v[2:5], s[0:1]{bits}", pc)
                vals = rng.integers(0, 256, offs.shape + (nbytes,), dtype=np.uint8)
                each(lambda ws, o, ins=ins: chk.issue_waves(ws, ins), offs)
                each(lambda ws, o, v, ins=ins, n=nbytes: chk.store_waves(ws, ins, a, ByteRows(o, n), v), offs, vals)
            elif kind == "load":
                ins = _ins(f"global_load_dwordx4 v[2:5], v1, s[0:1]{bits}", pc)
                each(lambda ws, o, ins=ins: chk.issue_waves(ws, ins), offs)
                raw = ByteRows(offs, nbytes).get(a.data)
                got = each(lambda ws, o, r, ins=ins, n=nbytes: chk.load_waves(ws, ins, a, ByteRows(o, n), r), offs, raw)
                loaded.append((np.concatenate(got), raw))
            else:
                for k, w in enumerate(waves):
                    for text in rng.choice(["s_waitcnt vmcnt(0)", "s_waitcnt vmcnt(1)", "buffer_wbl2 sc1",
                                            "buffer_inv sc1", "buffer_inv", "atomic", "atomic sc0"], 4,
                                           p=[0.3, 0.1, 0.1, 0.05, 0.05, 0.1, 0.3]):
                        ins = _ins(text if not text.startswith("atomic") else
                                   "global_atomic_add v0, v1, v2, s[0:1] sc0" if text.endswith("sc0") else
                                   "global_atomic_add v1, v2, s[0:1]", pc)
                        if text.startswith("s_waitcnt"):
                            chk.waitcnt(w, ins)
                        elif text.startswith("buffer_wbl2"):
                            chk.wbl2(w, ins)
                        elif text.startswith("buffer_inv"):
                            chk.inv(w, ins)
                        else:
                            chk.issue(w, ins)
                            chk.atomic(w, ins, flag, np.array([4 * (k % 2)]), text.endswith("sc0"))
                        pc += 1
    return chk, data, loaded


@pytest.mark.parametrize("seed", range(12))
def test_the_batched_hooks_record_and_flag_what_one_wave_at_a_time_does(seed):
    one, one_data, one_loads = _replay(seed, batched=False)
    many, many_data, many_loads = _replay(seed, batched=True)
    assert [str(c) for c in many.complaints] == [str(c) for c in one.complaints]
    assert np.array_equal(many_data, one_data)
    for (x, _), (y, _) in zip(many_loads, one_loads):
        assert np.array_equal(x, y)
    for (w1, p1), (w2, p2) in zip(many._bufs.values(), one._bufs.values()):
        assert np.array_equal(w1, w2) and np.array_equal(p1, p2)


def test_the_replays_reach_every_rule_and_substitute_stale_bytes():
    # The comparison above means something only if the runs are varied enough.
    missing, stale = set(), 0
    for seed in range(12):
        chk, _, loads = _replay(seed, batched=True)
        missing |= {" ".join(c.missing.split()[:4]) for c in chk.complaints}
        stale += sum(int((got != raw).sum()) for got, raw in loads)
    assert missing == {"a release after the", "s_waitcnt vmcnt(0) between the", "an acquire in workgroup",
                       "sc1 on the store", "sc1 on the load", "buffer_inv (or sc0/sc1 on"}, missing
    assert stale > 0


def _tracked(nbytes: int = 512):
    """A check of four one-wave workgroups over ``data`` (``nbytes``, one store by
    workgroup 3 already recorded, so loads of it are checked) and a 16-byte
    ``flag``: (check, the waves, data's allocation, flag's)."""
    from nvfp4_suite.kernels.flydsl.sim.memory import ByteRows
    mem = Memory()
    mem.alloc("data", np.zeros(nbytes, np.uint8))
    mem.alloc("flag", np.zeros(4, np.uint32))
    a, flag = mem.allocs
    chk = MemOrder((4, 1, 1), xcds=1)
    waves = [_Wave(wg) for wg in range(4)]
    chk.store_waves(waves[3:], _ins("global_store_byte v1, v2, s[0:1]", 0), a, ByteRows(np.array([[0]]), 1),
                    np.zeros((1, 1, 1), np.uint8))
    return chk, waves, a, flag


@pytest.mark.parametrize("nbytes", [1, 4, 12, 16])
def test_a_load_records_for_each_wave_every_l1_line_its_bytes_touch(nbytes):
    from nvfp4_suite.kernels.flydsl.sim.memory import ByteRows
    rng = np.random.default_rng(nbytes)
    chk, waves, a, _ = _tracked(4096)
    # Lanes in no order, repeating lines and not, some accesses crossing into the next line.
    offs = np.concatenate([rng.integers(0, 4096 - nbytes, (4, 40)),
                           np.arange(24)[None] * 16 + 120 + 8 * np.arange(4)[:, None]], axis=1).astype(np.int64)
    chk.load_waves(waves, _ins("global_load_dwordx4 v[2:5], v1, s[0:1]", 1), a, ByteRows(offs, nbytes),
                   np.zeros(offs.shape + (nbytes,), np.uint8))
    for st, o in zip(chk._states(waves), offs):
        assert st.lines["data"] == {int(b) // 128 for b in (o[:, None] + np.arange(nbytes)).reshape(-1)}


def test_a_wave_reading_the_bytes_of_several_unordered_stores_is_flagged_for_each():
    from nvfp4_suite.kernels.flydsl.sim.memory import ByteRows
    chk, waves, a, _ = _tracked()
    for wg in range(3):  # workgroup wg stores bytes 64*wg .. 64*wg+63, released by nothing
        chk.store_waves(waves[wg:wg + 1], _ins("global_store_dword v1, v2, s[0:1]", 1 + wg), a,
                        ByteRows(64 * wg + 4 * np.arange(16)[None], 4), np.ones((1, 16, 4), np.uint8))
    # In one batch: workgroup 1 reads all three ranges (its own needs nothing),
    # workgroup 3 workgroup 1's and workgroup 2's.
    offs = np.stack([np.arange(48) * 4, 64 + np.arange(48) * 2])
    chk.load_waves([waves[1], waves[3]], _ins("global_load_dword v2, v1, s[0:1]", 9), a, ByteRows(offs, 4),
                   np.zeros((2, 48, 4), np.uint8))
    assert sorted((c.store_wg, c.load_wg) for c in chk.complaints) == [(0, 1), (1, 3), (2, 1), (2, 3)]


@pytest.mark.parametrize("at,nbytes,ends", [(11, 1, True), (7, 1, False), (7, 2, True), (12, 4, False),
                                            (4, 4, False), (5, 4, True), (0, 16, True), (9, 2, True)])
def test_a_plain_store_ends_a_release_sequence_exactly_when_it_writes_a_byte_of_the_atomics_dword(at, nbytes, ends):
    # Workgroup 0 stores data and releases it (complete, written through) by an
    # atomic on flag+8; a plain store by workgroup 2 (second of a batch) to
    # flag+at..at+nbytes-1; workgroup 1 acquires at flag+8 and loads the data.
    from nvfp4_suite.kernels.flydsl.sim.memory import ByteRows
    chk, waves, a, flag = _tracked()
    chk.issue(waves[0], _ins("global_store_dword v1, v2, s[0:1] sc1", 1))
    chk.store_waves(waves[:1], _ins("global_store_dword v1, v2, s[0:1] sc1", 1), a, ByteRows(np.array([[64]]), 4),
                    np.ones((1, 1, 4), np.uint8))
    chk.waitcnt(waves[0], _ins("s_waitcnt vmcnt(0)", 2))
    chk.atomic(waves[0], _ins("global_atomic_add v1, v2, s[0:1]", 3), flag, np.array([8]), False)
    chk.store_waves(waves[2:4], _ins("global_store_byte v1, v2, s[0:1]", 4), flag,
                    ByteRows(np.array([[0], [at]]), nbytes), np.zeros((2, 1, nbytes), np.uint8))
    w = waves[1]
    chk.issue(w, _ins("global_atomic_add v0, v1, v2, s[0:1] sc0", 5))
    chk.atomic(w, _ins("global_atomic_add v0, v1, v2, s[0:1] sc0", 5), flag, np.array([8]), True)
    chk.waitcnt(w, _ins("s_waitcnt vmcnt(0)", 6))
    chk.load_waves([w], _ins("global_load_dword v2, v1, s[0:1] sc1", 7), a, ByteRows(np.array([[64]]), 4),
                   np.zeros((1, 1, 4), np.uint8))
    assert [c.missing.split()[:2] for c in chk.complaints] == ([["an", "acquire"]] if ends else [])
