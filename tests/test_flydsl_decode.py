"""nvfp4_suite.kernels.flydsl.decode: every configuration for gfx942 and gfx950 is
within its resource budget (compile-only: no GPU runs the kernel here).

The budget is checked on the assemblies the suite ships
(``nvfp4_suite.kernels.flydsl.sim.compile.BUNDLE``: every configuration, compiled
by this FlyDSL from these sources; ``tests/test_flydsl_sim_compile.py`` fails when
they are not of the current sources and compares a fresh compile with them byte
for byte), so the tests do not compile each one again; one configuration is
compiled here through the resource command's own path (a fresh process,
``COMPILE_ONLY=1``, ``FLYDSL_GPU_ARCH``) and must give the same row. See
``nvfp4_suite.kernels.flydsl.resources``. Where FlyDSL or ``ld.lld`` >= 19 is
missing they skip with the reason, unless ``NVFP4_REQUIRE_COMPILE=1`` (set by
``.ci/run``) makes that a failure.
"""


import pytest

from nvfp4_suite.kernels.flydsl.host import TOPKS, XCDS
from nvfp4_suite.kernels.flydsl.resources import ARCHS, SPLITS, compile_configs, format_table, problems, shipped_rows

pytestmark = pytest.mark.compile_only


@pytest.mark.parametrize("topk", TOPKS)
@pytest.mark.parametrize("arch", ARCHS)
def test_every_split_and_xcd_setting_compiles_without_scratch_within_256_registers(flydsl_compiler, arch, topk):
    rows = shipped_rows(arch, [(topk, s, x, "token_rows") for s in SPLITS for x in XCDS])
    print(format_table(rows))
    assert len(rows) == len(SPLITS) * len(XCDS)
    assert not [r for r in rows if problems(r)], format_table(rows)


@pytest.mark.parametrize("topk", TOPKS)
@pytest.mark.parametrize("arch", ARCHS)
def test_the_planar_loader_compiles_within_the_same_budget(flydsl_compiler, arch, topk):
    rows = shipped_rows(arch, [(topk, s, x, "planar") for s in SPLITS for x in XCDS])
    print(format_table(rows))
    assert len(rows) == len(SPLITS) * len(XCDS) and not [r for r in rows if problems(r)], format_table(rows)


def test_a_fresh_compile_gives_the_shipped_configurations_row(flydsl_compiler):
    config = (33, 2, 0, "planar")
    fresh, shipped = compile_configs("gfx950", [config], flydsl_compiler)[0], shipped_rows("gfx950", [config])[0]
    assert fresh.pop("compile_s") > 0 and shipped.pop("compile_s") == 0
    assert fresh == shipped


def test_out_of_range_topk_splits_or_layout_is_refused_before_compiling(flydsl_compiler):
    from nvfp4_suite.kernels.flydsl.decode import compile_nvfp4_sparse_decode

    for kw in ({"topk": 0}, {"topk": 65}, {"splits": 0}):
        with pytest.raises(ValueError, match="topk must be in 1..64 and splits >= 1"):
            compile_nvfp4_sparse_decode(**kw)
    with pytest.raises(ValueError, match="layout must be one of"):
        compile_nvfp4_sparse_decode(layout="rows")
