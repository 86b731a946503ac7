"""nvfp4_suite.kernels.flydsl.sim.program: reading LLVM's AMDGPU assembly text."""

import pytest

from nvfp4_suite.kernels.flydsl.sim.program import (
    AGPR_BASE,
    ParseError,
    parse_instruction,
    parse_operand,
    parse_program,
)

TINY = """\t.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
\t.text
\t.globl\ttiny
\t.p2align\t8
tiny:
\ts_load_dwordx2 s[2:3], s[0:1], 0x0 ; comment
\ts_waitcnt lgkmcnt(0)
\ts_branch .LBB0_1
.LBB0_1:
\tv_add_f32_e64 v1, -|v2|, s3 clamp
\ts_cbranch_scc1 .LBB0_1
\ts_endpgm
.Lfunc_end0:
\t.amdhsa_kernel tiny
\t\t.amdhsa_group_segment_fixed_size 64
\t\t.amdhsa_kernarg_size 16
\t\t.amdhsa_user_sgpr_count 2
\t.end_amdhsa_kernel
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .offset:         0
        .size:           8
        .value_kind:     by_value
      - .offset:         8
        .size:           4
        .value_kind:     by_value
    .name:           tiny
\t.end_amdgpu_metadata
"""


def test_operands_registers_specials_and_modifiers():
    assert parse_operand("v[2:5]").kind == "v" and parse_operand("v[2:5]").count == 4
    a = parse_operand("a[0:3]")
    assert (a.kind, a.index, a.count) == ("v", AGPR_BASE, 4)
    assert (parse_operand("vcc").index, parse_operand("vcc").count) == (106, 2)
    assert (parse_operand("exec").index, parse_operand("m0").index) == (126, 124)
    o = parse_operand("-|v7|")
    assert (o.kind, o.index, o.neg, o.abs) == ("v", 7, True, True)
    assert parse_operand("sext(v3)").sext


def test_constants_carry_each_width():
    c = parse_operand("-1")
    assert (c.bits32, c.bits16, c.bits64) == (0xFFFFFFFF, 0xFFFF, 2**64 - 1)
    h = parse_operand("0.5")
    assert (h.bits32, h.bits16) == (0x3F000000, 0x3800) and h.value is None
    lit = parse_operand("0x4f7ffffe")
    assert lit.bits32 == 0x4F7FFFFE and lit.value == 0x4F7FFFFE
    assert parse_operand("-0.5").bits32 == 0xBF000000
    with pytest.raises(ParseError, match="bogus"):
        parse_operand("bogus")


def test_instruction_modifiers_are_parsed_whole():
    ins = parse_instruction("\tv_pk_fma_f32 v[50:51], v[50:51], v[70:71], v[110:111] op_sel_hi:[1,1,0] "
                            "neg_lo:[0,0,1] neg_hi:[0,0,1]")
    assert ins.base == "v_pk_fma_f32" and ins.enc == "" and len(ins.ops) == 4
    assert ins.mods == {"op_sel_hi": (1, 1, 0), "neg_lo": (0, 0, 1), "neg_hi": (0, 0, 1)}
    ins = parse_instruction("buffer_load_dwordx4 v[2:5], v1, s[4:7], 0 offen offset:16 sc1")
    assert len(ins.ops) == 4 and ins.mods == {"offen": True, "offset": 16, "sc1": True}
    ins = parse_instruction("ds_swizzle_b32 v110, v108 offset:swizzle(SWAP,16)")
    assert ins.mods["offset"] == ("swizzle", "SWAP", "16")
    ins = parse_instruction("v_or_b32_sdwa v1, v2, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD "
                            "src1_sel:BYTE_3")
    assert (ins.base, ins.enc, ins.mods["src1_sel"]) == ("v_or_b32", "sdwa", "BYTE_3")
    assert parse_instruction("s_endpgm").ops == []


def test_program_resolves_labels_descriptor_and_arguments():
    p = parse_program(TINY)
    assert (p.name, p.arch, len(p.instrs)) == ("tiny", "gfx950", 6)
    assert p.labels == {".LBB0_1": 3}
    assert p.instrs[2].target == 3 and p.instrs[4].target == 3
    assert p.lds_size == 64 and p.kernarg_size == 16 and p.descriptor["user_sgpr_count"] == 2
    assert p.args == [{"offset": 0, "size": 8, "value_kind": "by_value"},
                      {"offset": 8, "size": 4, "value_kind": "by_value"}]
    add = p.instrs[3]
    assert add.ops[1].neg and add.ops[1].abs and add.mods == {"clamp": True}
    assert "line 10" in add.where()


def test_program_errors_name_what_is_missing():
    with pytest.raises(ParseError, match="amdgcn_target"):
        parse_program("tiny:\n\ts_endpgm\n")
    with pytest.raises(ParseError, match="unknown label"):
        parse_program(TINY.replace("s_branch .LBB0_1", "s_branch .LBB9_9"))
    with pytest.raises(ParseError, match="not found"):
        parse_program(TINY, name="other")


def test_instructions_of_one_line_text_are_each_their_own():
    # The parse of a line's code is cached per process: each instruction still
    # has its own place, text, operand list and modifier dict, and a different
    # code (one operand or modifier apart) its own parse.
    a = parse_instruction("\tbuffer_load_dword v1, v2, s[4:7], 0 offen offset:16 ; one", 7)
    b = parse_instruction("\tbuffer_load_dword v1, v2, s[4:7], 0 offen offset:16 // two", 9)
    assert (a.line, b.line) == (7, 9) and "one" in a.text and "two" in b.text
    assert a.ops == b.ops and a.mods == b.mods and a.ops is not b.ops and a.mods is not b.mods
    a.mods["offset"] = 99
    a.ops.append(parse_operand("v3"))
    c = parse_instruction("\tbuffer_load_dword v1, v2, s[4:7], 0 offen offset:16", 11)
    assert c.mods == {"offen": True, "offset": 16} and len(c.ops) == 4
    assert parse_instruction("buffer_load_dword v1, v2, s[4:7], 0 offen offset:32").mods["offset"] == 32
    assert parse_instruction("buffer_load_dword v1, v3, s[4:7], 0 offen offset:16").ops[1].index == 3
    # A line it cannot read names its own line each time.
    for line in (3, 5):
        with pytest.raises(ParseError, match=f"line {line}: "):
            parse_instruction("v_add_u32 v1, v2, bogus", line)
