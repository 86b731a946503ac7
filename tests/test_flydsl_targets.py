"""nvfp4_suite.kernels.flydsl.targets: one record of hardware facts per target, and a loud
failure for a target without one, in every place that reads them."""

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from nvfp4_suite.kernels.flydsl import targets as T
from nvfp4_suite.kernels.flydsl.resources import workgroups_per_cu
from nvfp4_suite.kernels.flydsl.sim.launch import Group, dispatch, make_test_wave
from nvfp4_suite.kernels.flydsl.sim.memory import Lds, Memory
from nvfp4_suite.kernels.flydsl.sim.wave import SimError
from nvfp4_suite.reference.formats import e4m3fn_decode, e4m3fnuz_decode


def test_the_kernels_two_targets_have_records():
    assert T.ARCHS == ("gfx942", "gfx950")
    assert all(T.target(a).arch == a for a in T.ARCHS)


def test_feature_suffixes_are_ignored():
    assert T.target("gfx942:sramecc+:xnack-") is T.target("gfx942")


@pytest.mark.parametrize("arch", ["gfx90a", "gfx1100", "gfx942x", "", "GFX942"])
def test_an_arch_without_a_record_fails_naming_it(arch):
    with pytest.raises(ValueError, match=f"no target record for arch {arch!r}"):
        T.target(arch)


def test_fp8_flavour_matches_the_ml_dtypes_reading_of_every_byte():
    # ml_dtypes' float8 types are an independent statement of the two encodings.
    flavours = {"E4M3FN": ml_dtypes.float8_e4m3fn, "E4M3FNUZ": ml_dtypes.float8_e4m3fnuz}
    b = np.arange(256, dtype=np.uint8)
    for arch in T.ARCHS:
        t = T.target(arch)
        want = b.view(flavours[t.fp8]).astype(np.float32)
        got = (e4m3fnuz_decode if t.fnuz else e4m3fn_decode)(b).astype(np.float32)
        np.testing.assert_array_equal(got, want)
    assert T.target("gfx942").fnuz and not T.target("gfx950").fnuz


def test_a_record_refuses_facts_the_kernel_has_no_path_for():
    base = T.target("gfx950")
    with pytest.raises(ValueError, match="mfma_bf16_k = 64"):
        dataclasses.replace(base, arch="gfx9x", mfma_bf16_k=64)
    with pytest.raises(ValueError, match="fp8 = 'E5M2'"):
        dataclasses.replace(base, arch="gfx9x", fp8="E5M2")


def test_the_resource_check_reads_lds_and_registers_from_the_record():
    row = {"regs": 128, "lds": 27664}
    # 64 KiB // 27664 = 2 on gfx942; 160 KiB // 27664 = 5 on gfx950; 512 // 128 = 4 by registers.
    assert workgroups_per_cu(dict(row, arch="gfx942")) == 2
    assert workgroups_per_cu(dict(row, arch="gfx950")) == 4
    with pytest.raises(ValueError, match="no target record for arch 'gfx90a'"):
        workgroups_per_cu(dict(row, arch="gfx90a"))


def test_the_simulator_refuses_a_target_without_a_record_or_with_other_waves():
    with pytest.raises(ValueError, match="no target record for arch 'gfx90a'"):
        make_test_wave("gfx90a")
    wave32 = dataclasses.replace(T.target("gfx950"), arch="gfx1200", wave_size=32)
    with pytest.raises(SimError, match="gfx1200 runs 32-lane waves; the simulator models 64"):
        Group(Memory(), wave32, Lds(0))


def test_a_kernel_assembled_for_another_target_is_refused_at_dispatch():
    from nvfp4_suite.kernels.flydsl.sim.launch import Kernel
    from nvfp4_suite.kernels.flydsl.sim.program import parse_program

    text = """\t.amdgcn_target "amdgcn-amd-amdhsa--gfx90a"
\t.text
\t.globl\tk
k:
\ts_endpgm
.Lfunc_end0:
\t.amdhsa_kernel k
\t\t.amdhsa_kernarg_size 0
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t.end_amdhsa_kernel
"""
    with pytest.raises(ValueError, match="no target record for arch 'gfx90a'"):
        dispatch(Kernel(parse_program(text)), Memory(), b"", (1, 1, 1), 64)


def test_instruction_availability_follows_the_record_not_the_name():
    from nvfp4_suite.kernels.flydsl.sim.launch import execute

    # A made-up target with gfx950's name but gfx942's facts lacks gfx950's instructions.
    w = make_test_wave("gfx950")
    w.group = Group(Memory(), dataclasses.replace(T.target("gfx942"), arch="gfx950"), Lds(0))
    with pytest.raises(SimError, match="needs the K = 32 bf16 MFMA"):
        execute(w, "v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], 0")
    with pytest.raises(SimError, match="has no permlane swap"):
        execute(w, "v_permlane16_swap_b32_e32 v1, v2")


def test_the_kernel_refuses_to_compile_for_a_target_without_a_record(monkeypatch):
    pytest.importorskip("flydsl", reason="building the kernel needs FlyDSL")
    from nvfp4_suite.kernels.flydsl import decode

    monkeypatch.setattr(decode, "get_rocm_arch", lambda: "gfx1201")
    with pytest.raises(ValueError, match="no target record for arch 'gfx1201'"):
        decode.compile_nvfp4_sparse_decode()
