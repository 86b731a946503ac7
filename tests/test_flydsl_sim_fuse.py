"""nvfp4_suite.kernels.flydsl.sim.fuse: a fused stretch computes what the step
loop's cores compute, bit for bit, and counts the same steps: every inlined
integer op on hard bit patterns, stretches cut at a join, left at a declined
core and stopped by the budget, and whole launches of the kernel (every
register, memory byte, count and memory-model complaint) with and without
fusing."""

import re
import types

import numpy as np
import pytest
from sim_kernels import hand_kernel, sim_backend

from nvfp4_suite.kernels.flydsl.sim import launch as L
from nvfp4_suite.kernels.flydsl.sim.fuse import WARMUP, Stretches
from nvfp4_suite.kernels.flydsl.sim.launch import Group, Kernel, dispatch
from nvfp4_suite.kernels.flydsl.sim.memory import Lds, Memory
from nvfp4_suite.kernels.flydsl.sim.ops import vint
from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
from nvfp4_suite.kernels.flydsl.sim.wave import SimError, decode_batched, inline_of
from nvfp4_suite.kernels.flydsl.targets import target

# Patterns where wrapping, sign, shift-count masking and the 24-bit and 16-bit
# fields show: each register gets them in a different lane order, so that
# every pair of them meets somewhere.
_HARD = np.array([0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 24, 31, 32, 33, 63, 64, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF,
                  0x10000, 0xFFFFFF, 0x1000000, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, 0xFFFFFFFF,
                  0x3F800000, 0xBF800000, 0x7FC00000], np.uint32)


def _files(n: int = 3, regs: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 2**32, (n, regs, 64), dtype=np.uint32)
    for r in range(regs):
        v[:, r, :len(_HARD)] = rng.permutation(_HARD)
    s = rng.integers(0, 2**32, (n, 129), dtype=np.uint32)
    s[:, 4], s[:, 5] = 0x80000001, 33
    return s, v


def _forms(name: str, nsrc: int) -> list[str]:
    """Instructions of op ``name``: VGPR, constant and SGPR sources, a
    destination that is a source, and (for the VOP2 ops) SDWA selects."""
    e64 = "" if nsrc == 3 or name in vint._VOP3_ONLY else "_e64"
    srcs = [["v2", "v3", "v4"], ["17", "v3", "v4"], ["v2", "s4", "v4"], ["v2", "v3", "s5"], ["v1", "v1", "v2"],
            ["-7", "v3", "v1"], ["v2", "0x3f800000", "v3"]]
    out = [f"{name}{e64} v1, {', '.join(s[:nsrc])}" for s in srcs]
    if nsrc == 1:
        out.append(f"{name}_sdwa v1, sext(v2) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1")
    if nsrc == 2 and name not in vint._VOP3_ONLY:
        for s0, s1 in (("BYTE_0", "WORD_1"), ("BYTE_2", "BYTE_3"), ("WORD_0", "DWORD"), ("DWORD", "BYTE_1")):
            out.append(f"{name}_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:{s0} src1_sel:{s1}")
            out.append(f"{name}_sdwa v1, sext(v2), sext(v3) dst_sel:DWORD dst_unused:UNUSED_PAD "
                       f"src0_sel:{s0} src1_sel:{s1}")
    if name == "v_perm_b32":
        out += ["v_perm_b32 v1, v2, v3, 0x7060302", "v_perm_b32 v1, v2, v3, 0x0c0d0b09"]
    return out


_OPS = [(name, n) for table, n in ((vint._UNARY_TEXT, 1), (vint._BINARY_TEXT, 2), (vint._TERNARY_TEXT, 3))
        for name in table]


@pytest.mark.parametrize("name,nsrc", _OPS, ids=[name for name, _ in _OPS])
def test_every_inlined_integer_op_computes_its_cores_bits(name, nsrc):
    # Each form alone and all in one stretch (later ones reading earlier results):
    # the stretch's text against the cores, on the same files. Breaking an op's
    # inline form (a wrong {out}, a fold of a non-constant, a scalar's dtype)
    # shows as a mismatch here.
    instrs = [parse_instruction(t) for t in _forms(name, nsrc)]
    cores = [decode_batched(ins) for ins in instrs]
    inlined = [ins for ins, c in zip(instrs, cores) if c is not None and inline_of(ins) is not None]
    assert inlined or name == "v_bfrev_b32", f"{name}: no form is inlined"
    for group in [[ins] for ins in inlined] + [inlined]:
        _stretch_matches_cores(group, *_files())


def test_every_bitop3_truth_tables_inline_form_computes_its_cores_bits():
    # Every table, eight to a stretch, each writing its own register (which it
    # also reads), with an SGPR or a constant among the sources: a wrong text
    # (``_bitop3_text``) or a fold of it shows as a mismatch.
    for src in ("v9, s4, v{d}", "-7, v{d}, v10"):
        for first in range(0, 256, 8):
            instrs = [parse_instruction(f"v_bitop3_b32 v{1 + j}, {src.format(d=1 + j)} bitop3:{first + j:#x}")
                      for j in range(8)]
            assert all(decode_batched(ins) is not None and inline_of(ins) is not None for ins in instrs)
            text = _stretch_matches_cores(instrs, *_files())
            assert "_fz_core" not in text  # every one inlined


def _stretch_matches_cores(instrs, s, v) -> str:
    """Run ``instrs`` as one stretch and through their cores one by one, on
    copies of the files ``s``, ``v``: every register the same. Returns the
    stretch's text."""
    cores = [decode_batched(ins) for ins in instrs]
    n = len(instrs)
    st = Stretches(instrs, cores, [False] * n, [False] * n, [False] * n)
    st.warmup = 1
    want = types.SimpleNamespace(sb=s.copy(), vb=v.copy())
    got = types.SimpleNamespace(sb=s.copy(), vb=v.copy())
    with np.errstate(all="ignore"):
        for core in cores:
            core(want)
        assert st.get(0, n)(got) is None
    assert np.array_equal(got.vb, want.vb), [ins.text for ins in instrs]
    assert np.array_equal(got.sb, want.sb)
    return st.source(0, n)[0]


# Float forms with an Inline form: each op with VGPR, SGPR and constant
# sources and a destination that is a source; the fp16 halves and products;
# the packed f32 ops (a statement per result VGPR) with an SGPR pair whose
# low register feeds both results (op_sel_hi 0), or each its own, or the
# high one the low result (op_sel), a constant, and the low result's VGPR a
# source of the high result (which must run first).
_FLOAT_FORMS = [f"{op}_e64 v1, {a}, {b}" for op in ("v_add_f32", "v_sub_f32", "v_subrev_f32", "v_mul_f32")
                for a, b in (("v2", "v3"), ("s4", "v3"), ("v1", "v1"), ("0.5", "v2"), ("v2", "-4.0"))] + [
    "v_cvt_f32_f16_e32 v1, v2", "v_cvt_f32_f16_e32 v3, v3",
    "v_cvt_f32_f16_sdwa v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1",
    "v_cvt_f32_f16_sdwa v2, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_0",
    "v_pk_mul_f16 v1, v2, v3", "v_pk_mul_f16 v2, v2, v2",
    "v_pk_mul_f32 v[4:5], v[4:5], s[4:5] op_sel_hi:[1,0]", "v_pk_mul_f32 v[6:7], v[2:3], s[4:5]",
    "v_pk_mul_f32 v[6:7], s[4:5], v[6:7] op_sel:[1,0] op_sel_hi:[0,1]",
    "v_pk_mul_f32 v[2:3], v[2:3], v[4:5] op_sel_hi:[0,1]", "v_pk_add_f32 v[4:5], v[4:5], v[4:5]",
    "v_pk_add_f32 v[6:7], v[2:3], 0.5 op_sel_hi:[1,0]", "v_pk_add_f32 v[2:3], v[6:7], v[2:3] op_sel:[0,1]",
]


@pytest.mark.parametrize("text", _FLOAT_FORMS)
def test_every_inlined_float_op_computes_its_cores_bits(text):
    # As the integer ops': the form alone, then in a stretch after and before
    # others that read and write its registers, against the cores on the same
    # files, whose lanes hold NaNs of both kinds and signs, infinities, zeros,
    # denormals and fp16 specials in both halves.
    ins = parse_instruction(text)
    assert decode_batched(ins) is not None and inline_of(ins) is not None, text
    rng = np.random.default_rng(len(text))
    hard = np.array([0x7F800001, 0xFFA00001, 0x7FC00003, 0xFFC00000, 0x7F800000, 0xFF800000, 0, 0x80000000, 1,
                     0x807FFFFF, 0x3F800000, 0xC0490FDB, 0x7BFF7C01, 0xFC00FE00, 0x00018001, 0x3C00BC00], np.uint32)
    for group in ([text], ["v_xor_b32_e32 v1, 0x8000, v2", text, "v_add_u32_e32 v5, v1, v2", text]):
        s, v = _files()
        for r in range(v.shape[1]):
            v[:, r] = rng.choice(hard, v[:, r].shape)
        s[:, 4:6] = rng.choice(hard, (s.shape[0], 2))
        text = _stretch_matches_cores([parse_instruction(t) for t in group], s, v)
        assert "_fz_core" not in text  # every one inlined


def test_a_packed_form_whose_results_each_overwrite_a_source_of_the_other_runs_its_core_in_a_stretch():
    # The low result's VGPR v2 feeds the high result and the high one's v3 the
    # low result: no order of two statements reads both sources first, so the
    # stretch calls the core, among inlined ops that write and read the pair.
    text = "v_pk_mul_f32 v[2:3], v[2:3], v[4:5] op_sel:[1,0] op_sel_hi:[0,1]"
    ins = parse_instruction(text)
    assert decode_batched(ins) is not None and inline_of(ins) is None
    group = ["v_xor_b32_e32 v2, 0x8000, v3", text, "v_add_u32_e32 v5, v2, v3", text]
    stretch = _stretch_matches_cores([parse_instruction(t) for t in group], *_files())
    assert stretch.count("_fz_core") == 2  # its two calls


def test_stretch_code_is_compiled_once_per_text_and_runs_with_each_stretchs_own_values():
    # Stretches of the same text share their compiled code, and those of the same
    # instruction forms their text too, each run with its own constants and
    # cores: one constant or core apart, the text is the same and the results
    # are not; one register apart, the text is not.
    from nvfp4_suite.kernels.flydsl.sim import fuse

    variants = {
        "base": ["v_add_u32_e32 v1, v2, v3", "v_xor_b32_e32 v1, 0x55, v1", "v_max_f32_e32 v4, v1, v3",
                 "v_or_b32_e32 v5, v4, v2"],
        "again": ["v_add_u32_e32 v1, v2, v3", "v_xor_b32_e32 v1, 0x55, v1", "v_max_f32_e32 v4, v1, v3",
                  "v_or_b32_e32 v5, v4, v2"],
        "constant": ["v_add_u32_e32 v1, v2, v3", "v_xor_b32_e32 v1, 0x56, v1", "v_max_f32_e32 v4, v1, v3",
                     "v_or_b32_e32 v5, v4, v2"],
        "core": ["v_add_u32_e32 v1, v2, v3", "v_xor_b32_e32 v1, 0x55, v1", "v_min_f32_e32 v4, v1, v3",
                 "v_or_b32_e32 v5, v4, v2"],
        "register": ["v_add_u32_e32 v1, v2, v3", "v_xor_b32_e32 v1, 0x55, v6", "v_max_f32_e32 v4, v1, v3",
                     "v_or_b32_e32 v5, v4, v2"],
    }
    texts, results, calls = {}, {}, []
    for name, lines in variants.items():
        # The stretch at a different place in each, as in kernels that differ before it.
        pad = len(texts)
        instrs = [parse_instruction("s_nop 0")] * pad + [parse_instruction(t) for t in lines]
        cores = [decode_batched(ins) for ins in instrs]
        if name == "again":
            # The same forms as "base", so its text and constants come from the cache:
            # its own cores still run (this one counts its calls).
            mul = cores[pad + 2]
            cores[pad + 2] = lambda w, mul=mul, calls=calls: calls.append(1) or mul(w)
        n = len(instrs)
        st = Stretches(instrs, cores, [False] * n, [False] * n, [False] * n)
        st.warmup = 1
        texts[name] = st.source(pad, n)[0]
        s, v = _files()
        want = types.SimpleNamespace(sb=s.copy(), vb=v.copy())
        got = types.SimpleNamespace(sb=s.copy(), vb=v.copy())
        fn = st.get(pad, n)
        with np.errstate(all="ignore"):
            for core in cores[pad:]:
                core(want)
            assert fn(got) is None
        assert np.array_equal(got.vb, want.vb) and np.array_equal(got.sb, want.sb), name
        assert fn.__code__.co_filename == f"<stretch {pad}:{n}>"
        assert fuse._CODE[texts[name]].co_consts[0].co_code == fn.__code__.co_code
        results[name] = got.vb.tobytes()
    assert texts["base"] == texts["again"] == texts["constant"] == texts["core"] != texts["register"]
    assert results["base"] == results["again"] and calls == [1, 1]
    assert len({results[k] for k in ("base", "constant", "core", "register")}) == 4


def _kernel(body: str, kernarg: int = 8) -> Kernel:
    return hand_kernel(body, "gfx950", kernarg=kernarg)


# Workgroup 2 branches into the middle of the straight-line block that
# workgroups 0 and 1 run from its top: their run meets it there (a join
# inside the stretch), and from there they go on as one run. Then a v_exp_f32,
# whose core declines under the exp_ulps option, inside another stretch,
# reading what the instruction before it wrote.
JOIN = """\ts_load_dwordx2 s[6:7], s[0:1], 0x0
\ts_waitcnt lgkmcnt(0)
\ts_cmp_eq_u32 s2, 2
\ts_cbranch_scc1 .LBB0_1
\tv_add_u32_e32 v1, 5, v0
\tv_lshlrev_b32_e32 v1, 3, v1
\tv_xor_b32_e32 v1, 0x55, v1
\tv_and_or_b32 v1, v1, 0xff0, v0
.LBB0_1:
\tv_add_u32_e32 v2, v1, v0
\tv_lshrrev_b32_e32 v3, 2, v2
\tv_or3_b32 v2, v2, v3, 7
\tv_cvt_f32_u32_e32 v4, v2
\tv_mul_f32_e32 v4, 0x3c000000, v4
\tv_exp_f32_e32 v4, v4
\tv_add_u32_e32 v4, v4, v2
\tv_xor_b32_e32 v4, v3, v4
\ts_lshl_b32 s11, s2, 8
\tv_lshlrev_b32_e32 v5, 2, v0
\tv_add_u32_e32 v5, s11, v5
\tglobal_store_dword v5, v4, s[6:7]
\ts_endpgm"""


def _join_launch(fuse: bool, options: dict | None = None, order: str = "forward", warmup: int = 1):
    k = _kernel(JOIN)
    k.fuse = fuse
    k.stretches.warmup = warmup
    mem = Memory()
    out = np.zeros(3 * 64, np.uint32)
    n = dispatch(k, mem, (mem.alloc("out", out)).to_bytes(8, "little"), (3, 1, 1), 64, order=order,
                 options=options)
    return k, out, n


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("options", [None, {"exp_ulps": 1}])
def test_a_stretch_stops_where_the_next_run_joins_and_where_a_core_declines(order, options):
    (kf, out_f, n_f), (ks, out_s, n_s) = _join_launch(True, options, order), _join_launch(False, options, order)
    assert np.array_equal(out_f, out_s) and n_f == n_s and kf.steps == ks.steps
    # Workgroups 0 and 1's run was cut where workgroup 2's waits (pc 8, .LBB0_1): a
    # stretch through it would run workgroup 0 alone past the join, and the
    # steps would count 11 more; one from pc 8 ran all three.
    assert (4, 8) in kf.stretches._fns and (4, kf.stretches.end[4]) not in kf.stretches._fns
    assert kf.steps == 8 + 13 and n_f == 3 * 4 + 2 * 4 + 3 * 13
    # Under exp_ulps the stretch from the join stops at v_exp_f32 (pc 13), whose
    # handler runs; the next one starts after it.
    assert ((8, 13) in kf.stretches._fns or (14, 19) in kf.stretches._fns) == bool(options)


def test_a_stretch_is_made_at_its_warmup_th_use_and_run_by_the_steps_before():
    # Every stretch of one launch is used once: with a warmup of 2 none is made
    # (the steps run them, alike), and each counts its use.
    (k, out, n), (_, out_s, n_s) = _join_launch(True, warmup=2), _join_launch(False)
    assert np.array_equal(out, out_s) and n == n_s
    assert not k.stretches._fns and k.stretches._uses[(4, 8)] == 1
    assert k.stretches.get(4, 8) is not None  # the second use makes it


def test_the_budget_stops_a_stretch_at_the_instruction_where_the_step_loop_stops():
    # With fusing, a budget ending inside a stretch must name the same
    # instruction as the step loop does (a stretch run past it would not raise,
    # or raise later naming another).
    msgs = {}
    for fuse in (True, False):
        k = _kernel(JOIN)
        k.fuse = fuse
        k.stretches.warmup = 1
        mem = Memory()
        out = np.zeros(2 * 64, np.uint32)
        kernarg = np.zeros(8, np.uint8)
        kernarg.view(np.uint64)[0] = mem.alloc("out", out)
        groups = [Group(mem, target("gfx950"), Lds(0), (wg, 0, 0), {}, wg) for wg in range(2)]
        with pytest.raises(SimError, match="exceeded 11 instructions") as e:
            k.run_batched(groups, mem.alloc("kernarg", kernarg), 64, budget=11)
        msgs[fuse] = str(e.value)
    assert msgs[True] == msgs[False]
    assert "v_cvt_f32_u32" in msgs[True]


# ---- whole launches of the kernel, fused and step by step ----------------------------------

@pytest.fixture(scope="module")
def compiled():
    """The simulator's backend module (``sim_kernels.sim_backend``: skips without the kernel)."""
    return sim_backend()


def _golden():
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.catalog import bugs
    from nvfp4_suite.vectors.catalog.casefile import load_case
    entry = next(c for c in bugs.golden_cases("memory-order") if c["name"] == "splits-5-blocks")
    return load_case(catalog.HERE / entry["file"], sha256=entry["sha256"])[0]


def _launch(SB, monkeypatch, problem, arch, splits, xcds, fuse, order):
    files, memories, fused = [], [], []
    init, disp = L.Kernel.init_wave, SB.dispatch

    def init_wave(self, group, wave_id, kernarg_addr, block, regs=None):
        if regs is not None and regs[2] == 0:
            files.append(regs[:2])
        return init(self, group, wave_id, kernarg_addr, block, regs)

    def dispatch_(kernel, memory, *a, **kw):
        # Every stretch made at its first use, so that the launch runs all it can fused.
        kernel.fuse, kernel.stretches.warmup = fuse, 1
        memories.append(memory)
        get = kernel.stretches.get

        def counted(start, stop):
            # The stretches the launch ran fused: the comparison below is empty without any.
            fn = get(start, stop)
            fused.append(fn is not None)
            return fn
        kernel.stretches.get = counted
        try:
            return disp(kernel, memory, *a, **kw)
        finally:
            kernel.fuse, kernel.stretches.warmup = True, WARMUP
            del kernel.stretches.get
    monkeypatch.setattr(L.Kernel, "init_wave", init_wave)
    monkeypatch.setattr(SB, "dispatch", dispatch_)
    res = SB.run(problem, arch, splits=splits, xcds=xcds, order=order, memorder="stale")
    monkeypatch.undo()
    (mem,) = memories
    return res, files, {a.name: a.data.copy() for a in mem.allocs}, sum(fused)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("splits,xcds,order", [(1, 0, "forward"), (2, 8, "reverse"), (4, 0, "shuffle:2")])
def test_a_fused_launch_leaves_every_register_and_byte_the_step_loop_leaves(compiled, monkeypatch, arch, splits,
                                                                           xcds, order):
    p = _golden()
    fused = _launch(compiled, monkeypatch, p, arch, splits, xcds, True, order)
    steps = _launch(compiled, monkeypatch, p, arch, splits, xcds, False, order)
    (rf, files_f, mem_f, ran_f), (rs, files_s, mem_s, ran_s) = fused, steps
    assert ran_f > 0 and ran_s == 0
    assert rf["instructions"] == rs["instructions"] and rf["steps"] == rs["steps"]
    assert [str(c) for c in rf["memorder"]] == [str(c) for c in rs["memorder"]]
    assert np.array_equal(rf["out"].view(np.uint32), rs["out"].view(np.uint32))
    assert len(files_f) == len(files_s) >= 1
    for (sf, vf), (ss, vs) in zip(files_f, files_s):
        assert np.array_equal(sf, ss) and np.array_equal(vf, vs)
    assert mem_f.keys() == mem_s.keys()
    for name in mem_f:
        assert np.array_equal(mem_f[name], mem_s[name]), name


def test_every_fusable_core_of_the_compiled_kernels_writes_no_vgpr_but_those_it_declares():
    """A stretch reloads its copies of only the VGPRs a core writes, taken to
    be ``vgprs_written``'s (its first operand's, a swap's two): each fusable instruction of the compiled kernels
    (both targets), its core run on random registers with a full EXEC, leaves
    every other VGPR as it was."""
    from sim_kernels import compiled_kernels

    from nvfp4_suite.kernels.flydsl.sim.launch import make_test_wave
    from nvfp4_suite.kernels.flydsl.sim.program import parse_program
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave, vgprs_written

    seen, checked = set(), 0
    rng = np.random.default_rng(0)
    for path in compiled_kernels():
        arch = "gfx942" if "gfx942" in path else "gfx950"
        kern = Kernel(parse_program(open(path).read()))
        group = make_test_wave(arch).group
        for ins, core, fusable in zip(kern.program.instrs, kern.cores, kern.stretches.fusable):
            if not fusable or (arch, ins.text.strip()) in seen:
                continue
            seen.add((arch, ins.text.strip()))
            s = rng.integers(0, 2**32, (2, 129), dtype=np.uint64).astype(np.uint32)
            s[:, 126:128] = 0xFFFFFFFF
            v = rng.integers(0, 2**32, (2, 512, 64), dtype=np.uint64).astype(np.uint32)
            before = v.copy()
            with np.errstate(all="ignore"):
                if core(BatchView(s, v, [Wave(group, k, (s, v, k)) for k in range(2)])) is False:
                    continue
            mine = np.zeros(512, bool)
            mine[vgprs_written(ins)] = True
            assert np.array_equal(v[:, ~mine], before[:, ~mine]), ins.text
            checked += 1
    assert checked > 100


# ---- groups: MFMAs run as one call ---------------------------------------------------------

def _mfma(d: int, a: int, b: int, c) -> str:
    return f"v_mfma_f32_16x16x16_bf16 v[{d}:{d + 3}], v[{a}:{a + 1}], v[{b}:{b + 1}], " + \
        (c if isinstance(c, str) else f"v[{c}:{c + 3}]")


# Stretches of MFMAs and other instructions, and the groups ``_groups`` finds
# (places): PV's independent MFMAs with unrelated instructions between; a
# chain; instructions between that write an earlier member's A and B, which
# a later member reads (each member reads its sources at its place), as the
# compiler reuses registers; an instruction that reads an earlier member's D
# and one that writes it, each closing the group so far; an MFMA reading an
# earlier one's D as A, which starts a group of its own.
_GROUPS = {
    "pv": ([_mfma(0, 100, 200, 0), "v_add_u32_e32 v40, v41, v42", _mfma(4, 102, 200, 4),
            "v_xor_b32_e32 v104, v41, v42", _mfma(8, 104, 200, 8), _mfma(12, 106, 200, 12)], [(0, 2, 4, 5)]),
    "chain": ([_mfma(0, 100, 200, "0"), "v_add_u32_e32 v40, v41, v42", _mfma(0, 102, 202, 0),
               _mfma(4, 104, 204, 0)], [(0, 2, 3)]),
    "sources rewritten": ([_mfma(0, 100, 200, "0"), "v_xor_b32_e32 v101, v41, v42", "v_add_u32_e32 v200, v101, v9",
                           _mfma(0, 100, 200, 0), "v_mov_b32_e32 v100, v7", _mfma(4, 100, 202, 0)], [(0, 3, 5)]),
    "result read": ([_mfma(0, 100, 200, 0), _mfma(4, 102, 200, 4), "v_add_u32_e32 v40, v5, v42",
                     _mfma(8, 104, 200, 8), _mfma(12, 106, 200, 12)], [(0, 1), (3, 4)]),
    "result written": ([_mfma(0, 100, 200, 0), _mfma(4, 102, 200, 4), "v_mov_b32_e32 v1, v42",
                        _mfma(8, 104, 200, 8)], [(0, 1)]),
    "reads a result": ([_mfma(0, 100, 200, 0), _mfma(4, 102, 200, 4), _mfma(8, 2, 200, 8),
                        _mfma(12, 106, 200, 12)], [(0, 1), (2, 3)]),
}


def _mfma_files(n: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Files of ``n`` waves with 512 VGPRs, bf16 pairs of a few binades (as the kernel's)."""
    rng = np.random.default_rng(seed)
    v = ((rng.integers(0x3C00, 0x4100, (n, 512, 64), dtype=np.uint32) | 0x8000 * rng.integers(
        0, 2, (n, 512, 64), dtype=np.uint32)) << 16) | rng.integers(0x3C00, 0x4100, (n, 512, 64), dtype=np.uint32)
    return rng.integers(0, 2**32, (n, 129), dtype=np.uint32), v


@pytest.mark.parametrize("name", list(_GROUPS))
def test_a_group_ends_before_an_instruction_naming_a_members_result_and_computes_its_cores_bits(name):
    from nvfp4_suite.kernels.flydsl.sim.fuse import _groups

    texts, want = _GROUPS[name]
    instrs = [parse_instruction(t) for t in texts]
    assert _groups(instrs) == want
    # And the stretch computes what its cores compute one after another, one call per group.
    text = _stretch_matches_cores(instrs, *_mfma_files())
    singles = sum(t.startswith("v_mfma") for t in texts) - sum(len(g) for g in want)
    assert text.count(".run(w, ") == len(want) and text.count(".take(") == sum(len(g) for g in want)
    assert len(re.findall(r"_fz_core\d+\(w\)", text)) == singles


def test_a_core_that_declines_between_members_runs_the_members_before_it_first():
    """Members wait for their group's last place; where a core between declines
    (returns False), the stretch runs the members taken before it, then
    returns its place: the registers are then as the cores before it leave
    them, one after another (each member's A rewritten after its place: each
    reads its sources there)."""
    from nvfp4_suite.kernels.flydsl.sim.fuse import _groups

    texts = [_mfma(0, 100, 200, 0), "v_add_u32_e32 v100, v41, v42", _mfma(4, 102, 200, 4),
             "v_xor_b32_e32 v102, v41, v42", "v_exp_f32_e32 v44, v45", _mfma(8, 104, 200, 8)]
    instrs = [parse_instruction(t) for t in texts]
    assert _groups(instrs) == [(0, 2, 5)]
    cores = [decode_batched(ins) for ins in instrs]
    cores[4] = lambda w: False
    n = len(instrs)
    st = Stretches(instrs, cores, [False] * n, [False] * n, [False] * n)
    st.warmup = 1
    s, v = _mfma_files()
    want = types.SimpleNamespace(sb=s.copy(), vb=v.copy())
    got = types.SimpleNamespace(sb=s.copy(), vb=v.copy())
    with np.errstate(all="ignore"):
        for core in cores[:4]:
            core(want)
        assert st.get(0, n)(got) == 4
    assert np.array_equal(got.vb, want.vb) and np.array_equal(got.sb, want.sb)
    assert "_fz_core5.run(w, 2)\n        return 4" in st.source(0, n)[0]
