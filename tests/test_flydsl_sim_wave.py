"""nvfp4_suite.kernels.flydsl.sim.wave: the register views batched cores read and write."""

import numpy as np
import pytest

from nvfp4_suite.kernels.flydsl.sim.wave import Rows


def test_rows_gather_and_scatter_only_the_chosen_waves_registers():
    vfile = np.arange(5 * 8 * 4).reshape(5, 8, 4)
    sfile = np.arange(5 * 6).reshape(5, 6)
    rows = np.array([0, 2, 3])
    v, s = Rows(vfile, rows), Rows(sfile, rows)
    assert v.shape == (3, 8, 4) and s.shape == (3, 6)
    assert np.array_equal(v[:, 1], vfile[[0, 2, 3], 1]) and v[:, 1, None].shape == (3, 1, 4)
    assert np.array_equal(v[:, 2:4], vfile[[0, 2, 3], 2:4])
    assert np.array_equal(s[:, 2, None], sfile[[0, 2, 3], 2:3])
    assert np.array_equal(s[:, [1, 4], None][..., 0], sfile[[0, 2, 3]][:, [1, 4]])
    before = vfile.copy()
    v[:, 1] = -1
    v[:, 5:7] = np.zeros((3, 2, 4), int)
    changed = np.zeros(vfile.shape, bool)
    changed[[0, 2, 3], 1] = changed[[0, 2, 3], 5:7] = True
    assert (vfile[changed] <= 0).all() and np.array_equal(vfile[~changed], before[~changed])
    s[:, 3] = 7
    assert list(sfile[:, 3]) == [7, 9, 7, 7, 27]
    with pytest.raises(TypeError, match="select every wave first"):
        v[1]


@pytest.mark.parametrize("ks,view", [([3], True), ([1, 2, 3], True), ([0, 2, 4], True), ([1, 4], True),
                                     ([0, 1, 3], False), ([0, 2, 3, 4], False)])
def test_a_batch_views_evenly_spaced_rows_and_gathers_any_others(ks, view):
    """Evenly spaced rows (consecutive, every other row, a lone wave) are views
    of the files, which writes reach; other rows are ``Rows``; either way the
    view holds exactly those waves' registers, in order."""
    from nvfp4_suite.kernels.flydsl.sim.launch import make_test_wave
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave

    vfile = np.arange(5 * 3 * 64, dtype=np.uint32).reshape(5, 3, 64)
    sfile = np.arange(5 * 129, dtype=np.uint32).reshape(5, 129)
    group = make_test_wave().group
    b = BatchView(sfile, vfile, [Wave(group, 0, (sfile, vfile, k)) for k in ks])
    assert (type(b.vb) is np.ndarray, type(b.sb) is np.ndarray) == (view, view)
    assert np.array_equal(b.vb[:, 1], vfile[ks, 1]) and np.array_equal(b.sb[:, 7], sfile[ks, 7])
    b.vb[:, 2] = 0
    b.sb[:, 5] = 0
    assert [bool((vfile[k, 2] == 0).all()) for k in range(5)] == [k in ks for k in range(5)]
    assert [int(sfile[k, 5]) == 0 for k in range(5)] == [k in ks for k in range(5)]


@pytest.mark.parametrize("ks", [[0, 1, 3], [0, 2, 3, 4], [1, 2, 3]])
def test_a_gathered_batch_copies_the_named_registers_and_scatter_writes_back_only_those(ks):
    """``gathered`` copies uneven rows' SGPRs and the named VGPRs into a
    scratch file (an evenly spaced view is its own copy): writes to the copy
    reach the files at ``scatter``, in those rows, SGPRs and the VGPRs named
    there, and no others."""
    from nvfp4_suite.kernels.flydsl.sim.launch import make_test_wave
    from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave

    vfile = np.arange(5 * 4 * 64, dtype=np.uint32).reshape(5, 4, 64)
    sfile = np.arange(5 * 129, dtype=np.uint32).reshape(5, 129)
    group = make_test_wave().group
    b = BatchView(sfile, vfile, [Wave(group, 0, (sfile, vfile, k)) for k in ks])
    scratch = np.zeros_like(vfile)
    g = b.gathered(np.array([1, 2]), scratch)
    assert (g is b) == (ks == [1, 2, 3])
    assert type(g.vb) is np.ndarray and type(g.sb) is np.ndarray and g.waves is b.waves
    assert np.array_equal(g.vb[:, 1:3], vfile[ks, 1:3]) and np.array_equal(g.sb, sfile[ks])
    v0, s0 = vfile.copy(), sfile.copy()
    g.vb[:, 1:4] = 0
    g.sb[:, 5] = 0
    if g is not b:
        assert g.vb.base is scratch and not (g.vb[:, 0] == vfile[ks, 0]).all()  # VGPR 0 not gathered
        assert np.array_equal(vfile, v0) and np.array_equal(sfile, s0)  # a copy: the files wait
    b.scatter(g, np.array([2, 3]))
    written = [2, 3] if g is not b else [1, 2, 3]
    for r in range(4):
        assert [bool((vfile[k, r] == 0).all()) for k in range(5)] == [k in ks and r in written for k in range(5)]
    assert [int(sfile[k, 5]) == 0 for k in range(5)] == [k in ks for k in range(5)]
    keep = np.ones(vfile.shape, bool)
    keep[np.ix_(ks, written)] = False
    assert np.array_equal(vfile[keep], v0[keep])


def _alu_forms() -> dict[str, str]:
    """Each distinct vector ALU and cross-lane instruction form (registers kept,
    one text per mnemonic and modifier set) of the compiled kernels that has a
    batched core, both targets."""
    from sim_kernels import compiled_kernels

    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import decode_batched

    forms: dict[tuple, tuple[str, str]] = {}
    for path in compiled_kernels():
        arch = "gfx942" if "gfx942" in path else "gfx950"
        for ln in open(path):
            text = ln.strip()
            if not text.startswith(("v_", "ds_swizzle", "ds_bpermute")):
                continue
            ins = parse_instruction(text)
            key = (arch, ins.mnemonic, tuple(sorted(ins.mods.items())), tuple((o.kind, o.neg, o.abs) for o in ins.ops))
            if key not in forms and decode_batched(ins) is not None:
                forms[key] = (arch, text)
    return {f"{arch}:{text}": arch for arch, text in forms.values()}


def test_every_batched_alu_form_of_the_compiled_kernels_matches_its_handler():
    """Each form's core over several waves (consecutive and gathered rows) leaves
    every register as its handler on each wave alone does, on registers full
    of hard bit patterns (NaNs, infinities, denormals, -0, fp16 specials)."""
    from sim_cores import assert_core_matches_handler

    forms = _alu_forms()
    assert len(forms) > 50
    for i, (key, arch) in enumerate(sorted(forms.items())):
        assert_core_matches_handler(key.split(":", 1)[1], arch, seed=i)


@pytest.mark.parametrize("text", [
    "v_cmp_lt_f32_e64 s[4:5], -v1, |v2|", "v_cmp_u_f32_e32 vcc, s3, v2", "v_cmp_neq_f32_e64 s[6:7], s3, v2",
    "v_cmp_tru_f32_e64 s[4:5], v1, v2", "v_cmp_o_f32_e64 exec, v1, 0.5",
    "v_cvt_f16_f32_e32 v1, v2", "v_cvt_f16_f32_sdwa v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1",
    "v_cvt_u32_f32_e32 v1, v2", "v_cvt_f32_u32_e32 v1, s3", "v_cvt_f32_u32_sdwa v1, v2 dst_sel:DWORD "
    "dst_unused:UNUSED_PAD src0_sel:BYTE_2", "v_rcp_f32_e32 v1, v2", "v_rcp_f32_e64 v1, -|v2|",
    "v_pack_b32_f16 v1, v2, v3", "v_pack_b32_f16 v1, v2, s3 op_sel:[1,1,0]", "v_fmac_f32_e32 v1, v2, v3",
    "v_fmac_f32_e64 v1, -v2, s3", "v_fma_f32 v1, -v2, v3, 1.0", "v_mul_f32_e64 v1, |v2|, -s3",
    "v_cndmask_b32_e64 v1, v2, v3, s[4:5]", "v_cmp_gt_u32_e64 s[8:9], v1, 63",
    "v_lshlrev_b64 v[2:3], v1, -1", "v_lshrrev_b64 v[2:3], s3, v[4:5]", "v_ashrrev_i64 v[2:3], v1, s[4:5]",
    "v_mbcnt_lo_u32_b32 v1, s4, 0", "v_mbcnt_hi_u32_b32 v1, v4, v1",
    "ds_swizzle_b32 v1, v2 offset:swizzle(SWAP,16)", "ds_swizzle_b32 v1, v2 offset:swizzle(QUAD_PERM,1,0,3,2)",
    "ds_bpermute_b32 v1, v2, v3", "ds_bpermute_b32 v1, v2, v3 offset:0xfffe",
    "v_perm_b32 v1, v2, v3, v4", "v_perm_b32 v1, v2, v3, s4", "v_perm_b32 v1, s2, v3, 0x0c0d1080",
    "v_perm_b32 v1, v2, 0x11223344, 0x07060504",
    "v_cvt_f32_f16_sdwa v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1", "v_cvt_f32_f16_e32 v1, s2",
    "v_cvt_f32_f16_sdwa v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_1",
    "v_lshlrev_b32_sdwa v1, v2, sext(v3) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:WORD_1",
    "v_lshlrev_b32_sdwa v1, v2, sext(v3) dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:BYTE_2",
    "v_or_b32_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_0 src1_sel:BYTE_3",
    "v_pk_mul_f32 v[4:5], v[4:5], s[40:41] op_sel_hi:[1,0]", "v_pk_mul_f32 v[4:5], v[6:7], s[40:41] op_sel:[1,1]",
    "v_pk_add_f32 v[4:5], v[6:7], v[8:9] op_sel:[1,0] op_sel_hi:[0,1] neg_lo:[0,1] neg_hi:[1,0]",
    "v_pk_fma_f32 v[4:5], v[6:7], v[6:7], v[8:9] op_sel_hi:[0,1,1]", "v_pk_mul_f32 v[4:5], 1.0, v[6:7] op_sel_hi:[0,1]",
    "v_and_b32_e32 v1, 15, v0", "v_mov_b32_e32 v1, 0x3f800000", "v_mul_f32_e32 v1, 0x3e000000, v2",
    "v_max_f32_e32 v1, 0x7fc00000, v2", "v_exp_f32_e32 v1, 1.0", "v_cvt_pk_f32_fp8_e32 v[2:3], 0x3c40",
    "v_div_scale_f32 v1, vcc, v2, v2, v3", "v_div_scale_f32 v1, s[4:5], s2, v3, s2",
    "v_div_fmas_f32 v1, v2, v3, v4", "v_div_fmas_f32 v1, -v2, s3, 1.0", "v_div_fixup_f32 v1, v2, v3, v4",
    "v_div_fixup_f32 v1, v2, s3, -v4", "v_cvt_pk_bf16_f32 v1, v2, s3", "v_cvt_pk_bf16_f32 v1, -v2, v3",
    "v_cvt_pk_f16_f32 v1, s2, v3", "v_cvt_pk_f16_f32 v1, v2, |v3|",
])
def test_batched_forms_match_their_handlers(text):
    """Forms beyond the compiled kernels' (source modifiers, SGPR and constant
    sources, SDWA selects, EXEC as a compare's destination)."""
    from sim_cores import assert_core_matches_handler

    from nvfp4_suite.kernels.flydsl.sim.program import parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import decode_batched

    assert decode_batched(parse_instruction(text)) is not None
    assert_core_matches_handler(text)


def test_vgprs_named_are_every_vgpr_operands_registers_and_no_others():
    from nvfp4_suite.kernels.flydsl.sim.program import AGPR_BASE, parse_instruction
    from nvfp4_suite.kernels.flydsl.sim.wave import vgprs_named

    assert vgprs_named(parse_instruction("v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], a[6:7], v[0:3]")) == \
        {0, 1, 2, 3, 4, 5, AGPR_BASE + 6, AGPR_BASE + 7}
    assert vgprs_named(parse_instruction("v_cndmask_b32_e64 v1, v2, 7, s[20:21]")) == {1, 2}
    assert vgprs_named(parse_instruction("s_and_b64 s[20:21], vcc, s[22:23]")) == set()
