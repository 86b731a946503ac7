"""nvfp4_suite.kernels.flydsl.resources: reading a code object's resources and judging them."""

import pytest

from nvfp4_suite.kernels.flydsl.lanes import NDT
from nvfp4_suite.kernels.flydsl.resources import format_table, parse_isa, problems, workgroups_per_cu

ISA = """
\tbuffer_store_dwordx4 v0, s[8:11], 0 offen{sc}
\tbuffer_load_dwordx4 v0, s[8:11], 0 offen offset:16{sc}
\tglobal_atomic_add v2, v3, s[22:23] sc0
\tv_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
\t\t.amdhsa_next_free_vgpr {regs}
\t\t.amdhsa_accum_offset 208
\t\t.amdhsa_float_denorm_mode_16_64 {denorm}
  - .agpr_count:     0
    .group_segment_fixed_size: {lds}
    .private_segment_fixed_size: {scratch}
    .sgpr_count:     71
    .sgpr_spill_count: 0
    .vgpr_count:     {regs}
    .vgpr_spill_count: {spill}
"""


def row(splits=2, xcds=0, sc=" sc1", stores=NDT + 1, regs=207, denorm=3, lds=27664, scratch=0, spill=0,
        arch="gfx950"):
    text = "".join(ISA.format(sc=sc, regs=regs, denorm=denorm, lds=lds, scratch=scratch, spill=spill)
                   for _ in range(stores))
    return {"arch": arch, "layout": "token_rows", "topk": 16, "splits": splits, "xcds": xcds, "compile_s": 1.0,
            "lds_expected": 27664, **parse_isa(text)}


def test_parse_isa_reads_the_metadata_and_counts_sc1_and_mfma():
    r = row(stores=3)
    assert (r["regs"], r["vgpr"], r["agpr"], r["lds"], r["scratch"]) == (207, 208, 0, 27664, 0)
    assert (r["sc1_ops"], r["sc1_stores"], r["sc1_other"], r["mfma"]) == (6, 3, 0, 3)


def test_a_clean_split_configuration_passes():
    assert problems(row()) == []
    assert problems(row(splits=1, sc="")) == [] and problems(row(xcds=8, sc="")) == []


@pytest.mark.parametrize("kw, words", [
    ({"scratch": 16}, "scratch"),
    ({"spill": 2}, "spills"),
    ({"regs": 264}, "> 256"),
    ({"denorm": 0}, "fp16 denormals"),
    ({"lds": 35856}, "LDS 35856"),
    ({"xcds": 8}, "partials need none"),
    ({"splits": 1}, "partials need none"),
    ({"sc": ""}, "sc1 on 0 stores"),
    ({"stores": 3}, "sc1 on 3 stores"),
])
def test_each_violation_is_named(kw, words):
    bad = problems(row(**kw))
    assert bad and any(words in b for b in bad), bad
    assert "FAIL" in format_table([row(**kw)])


def test_lds_limits_a_gfx942_cu_to_one_workgroup_above_32_kib():
    assert workgroups_per_cu(row(arch="gfx942", lds=27664)) == 2
    assert workgroups_per_cu(row(arch="gfx942", lds=35856)) == 1
    assert workgroups_per_cu(row(arch="gfx950", lds=35856)) == 2  # registers: 512 // 208
    assert workgroups_per_cu(row(arch="gfx950", lds=35856, regs=128)) == 4
    assert any("workgroup(s) per CU" in b for b in problems(row(arch="gfx942", lds=35856)))


def test_the_command_helps_and_checks_one_configuration(flydsl_compiler):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.resources", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--topk" in r.stdout
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.resources", "--arch", "gfx950",
                        "--topk", "1", "--splits", "1", "--xcds", "0", "--jobs", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "1 of 1 configurations pass" in r.stderr and "gfx950" in r.stdout and " ok" in r.stdout
