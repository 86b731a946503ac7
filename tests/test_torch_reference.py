"""nvfp4_suite.kernels.torch.reference against the numpy references it mirrors.

Bit for bit: the emulation's float32 results (out, pre_round, score_noise),
abs_v_sum, and the acceptance intervals (lo, hi, nearest) that decide every
verdict. The float64 values (the emulation's magnitude and flip risk, the
oracle's outputs) are order-dependent in their last bits between BLAS and
libm builds (see the module docstring): each side lies within the float64
noise bound of ``nvfp4_suite.reference.compare`` term 5 of the real value, so they
are held to twice it (``compare.oracle_noise`` for the oracle, whose
``exp`` meets large scores and float64 subnormals). CPU torch in CI (a golden subset
and a few generated problems; the whole catalog under ``thorough``), the
same on CUDA under ``gpu``.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[torch]'")

from nvfp4_suite.kernels.torch import reference as TR  # noqa: E402
from nvfp4_suite.kernels.triton.decode import GEOMETRY as TRITON_GEOMETRY  # noqa: E402
from nvfp4_suite.reference import SEED_GEOMETRY, Exact, Geometry, compare  # noqa: E402
from nvfp4_suite.reference.compare.tolerance import gamma_exact  # noqa: E402
from nvfp4_suite.reference.emulate import (  # noqa: E402
    bf16_round_f32,
    emulate_details,
    exp2_f32,
    fma_f32,
    split_schedule,
)
from nvfp4_suite.reference.examples import random_problem  # noqa: E402
from nvfp4_suite.reference.formats import bf16_round, bf16_ulp  # noqa: E402
from nvfp4_suite.reference.oracle import oracle_details  # noqa: E402
from nvfp4_suite.vectors import catalog  # noqa: E402
from nvfp4_suite.vectors.catalog.casefile import load_case  # noqa: E402
from nvfp4_suite.vectors.engine.strategies import problems  # noqa: E402

GEOMETRIES = [SEED_GEOMETRY, TRITON_GEOMETRY, Geometry(64, 16, False)]
# One case per feature the emulation's code paths branch on.
GOLDEN = ["first-slots-invalid", "no-valid-slot-rows", "minus-one-slots", "v-scale-swizzle", "e4m3-subnormal",
          "head-major-hkv2", "qlen3-boundary", "splits-5-blocks", "layout-planar", "large-logits"]
EXACT_FIELDS = ("out", "pre_round", "score_noise", "abs_v_sum")



pytestmark = pytest.mark.usefixtures("one_cpu_thread")


GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU (torch.cuda)")


def _golden(names=None):
    m = catalog.load_manifest()
    out = []
    for c in m["cases"]:
        if c["result"] == "invalid" or (names is not None and c["name"] not in names):
            continue
        p, _, _ = load_case(catalog.HERE / c["file"], sha256=c["sha256"])
        out.append((c["name"], p, sorted({x["splits"] for x in c["launches"]})))
    return out


def _bits_equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _noise(p, magnitude):
    """Two float64 evaluations of one of the emulation's sums of float32 weights times
    dequantised values, each within ``gamma_e`` (term 5 of ``nvfp4_suite.reference.compare``)
    of the real sum: no ``exp`` and no float64 subnormal enters them."""
    return 2 * gamma_exact(p, compare.F64_EPS) * magnitude


def assert_emulation_matches(p, splits, geometry, device):
    a = emulate_details(p, splits=splits, geometry=geometry)
    b = TR.emulate_details(p, splits=splits, geometry=geometry, device=device)
    for f in EXACT_FIELDS:
        assert _bits_equal(getattr(a, f), getattr(b, f)), f"{f} differs (splits {splits}, {geometry})"
    for f in ("magnitude", "flip_risk"):
        x, y = getattr(a, f), getattr(b, f)
        assert np.all(np.abs(x - y) <= _noise(p, x)), f"{f} beyond float64 noise (splits {splits}, {geometry})"
    ia = compare.interval_vs_emulation(p, splits=splits, geometry=geometry)
    ib = compare.interval_from_emulation(p, b, splits=splits, geometry=geometry)
    for f in ("lo", "hi", "nearest"):
        assert _bits_equal(getattr(ia, f), getattr(ib, f)), f"interval {f} differs (splits {splits}, {geometry})"


def assert_oracle_matches(p, device, p_bf16s=(False, True)):
    out, lse, mag, sabs, vsum = oracle_details(p)
    t_out, t_lse, t_mag, t_sabs, t_vsum = TR.oracle_details(p, device=device)
    # Each within term 5's E of the real value (compare.oracle_noise); mag is the
    # same weighted mean of |v|, so the same bound holds for it.
    two_e = 2 * compare.oracle_noise(p, mag, sabs, vsum)
    for name, a, b in (("out", out, t_out), ("magnitude", mag, t_mag)):
        far = np.abs(a - b) > two_e
        if far.any():
            i = tuple(np.argwhere(far)[0])
            raise AssertionError(f"oracle {name} at {i}: numpy {a[i]!r}, torch {b[i]!r}, beyond 2E = {two_e[i]!r} "
                                 f"({int(far.sum())} elements)")
    # A sum of 128 non-negative products, in two orders.
    assert np.all(np.abs(sabs - t_sabs) <= 2 * 128 * compare.F64_EPS * sabs)
    # lse = max + log(sum): the max is a dot product scaled (the same bound on its
    # absolute sum), the log moves by the sum's relative noise.
    kscale = p.sm_scale * p.k_global_scale
    seen = np.isfinite(lse)
    assert np.array_equal(seen, np.isfinite(t_lse)) and np.all(lse[~seen] == t_lse[~seen])
    tol = 2 * 128 * compare.F64_EPS * sabs * kscale + _noise(p, 1.0) + 4 * compare.F64_EPS * np.abs(lse)
    assert np.all(np.abs(lse[seen] - t_lse[seen]) <= tol[seen])
    assert _bits_equal(vsum, t_vsum)
    for p_bf16 in p_bf16s:
        ia = compare.interval_vs_oracle(p, p_bf16=p_bf16)
        ib = TR.interval_vs_oracle(p, p_bf16=p_bf16, device=device)
        for f in ("lo", "hi", "nearest"):
            assert _bits_equal(getattr(ia, f), getattr(ib, f)), f"oracle interval {f} differs (p_bf16 {p_bf16})"


@pytest.mark.parametrize("name, p, splits", _golden(GOLDEN), ids=lambda x: x if isinstance(x, str) else "")
def test_golden_subset_matches_numpy_bit_for_bit_on_cpu(name, p, splits):
    for s in sorted({1, splits[-1]}):
        assert_emulation_matches(p, s, SEED_GEOMETRY, "cpu")
    assert_emulation_matches(p, 3, TRITON_GEOMETRY, "cpu")
    assert_oracle_matches(p, "cpu")


@settings(max_examples=10)
@given(problems(max_reqs=3, max_kv_heads=2, max_topk=12, max_q_len=2), st.integers(1, 8), st.sampled_from(GEOMETRIES))
def test_generated_problems_match_numpy_bit_for_bit_on_cpu(p, splits, geometry):
    assert_emulation_matches(p, splits, geometry, "cpu")
    assert_oracle_matches(p, "cpu")


@pytest.mark.thorough
def test_whole_catalog_matches_numpy_bit_for_bit_on_cpu():
    for _name, p, splits in _golden():
        for s in splits:
            for g in GEOMETRIES:
                assert_emulation_matches(p, s, g, "cpu")
        assert_oracle_matches(p, "cpu")


def test_shared_helpers_in_the_torch_namespace_equal_numpy_on_edge_values():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(4000).astype(np.float32) * 40,
                        np.array([0, -0.0, np.inf, -np.inf, np.nan, 2.0**-130, 3.0e38, -126.5, 128.0],
                                 np.float32)]).astype(np.float32)
    t = torch.from_numpy(x)
    ops = TR.TorchOps("cpu")
    assert _bits_equal(bf16_round_f32(t, ops).numpy(), bf16_round(x))
    assert _bits_equal(exp2_f32(t, ops).numpy(), exp2_f32(x))
    p = np.abs(x[np.isfinite(x)])
    assert _bits_equal(bf16_ulp(torch.from_numpy(p), torch).numpy(), bf16_ulp(p))
    # fma operands around 1 + 2**-24: the float64 sum of a*c and b lands on a float32
    # midpoint while inexact for some of them, where the tie is broken by the exact error.
    a = (1 + np.arange(1, 65) * 2.0**-23).astype(np.float32)
    ties = 0
    for j in range(1, 9):
        for c, b in ((2.0**-24 * (1 - j * 2.0**-23), 1.0), (-(2.0**-24) * (1 + j * 2.0**-23), 1.0 + 2.0**-22)):
            c, bb = np.float32(c), np.full_like(a, b)
            x = a.astype(np.float64) * np.float64(c) + bb
            ties += int(((x.view(np.int64) & 0x1FFFFFFF) == 0x10000000).sum())
            got = fma_f32(torch.from_numpy(a), float(c), torch.from_numpy(bb), ops)
            assert _bits_equal(got.numpy(), fma_f32(a, c, bb))
    assert ties > 0


def _every_byte_under_every_scale():
    """uint8 ``[256, 4, 64]`` data and ``[256, 4, 8]`` scale bytes: scale byte ``s``
    on every group of the four rows ``[s]``, which hold every data byte once, so
    every (code, scale byte) pair in both nibbles."""
    data = np.broadcast_to(np.arange(256, dtype=np.uint8).reshape(1, 4, 64), (256, 4, 64)).copy()
    scales = np.broadcast_to(np.arange(256, dtype=np.uint8)[:, None, None], (256, 4, 8)).copy()
    return data, scales


def _gathers_equal(device):
    from nvfp4_suite.reference.arrays import NUMPY, operand_table
    from nvfp4_suite.reference.paged_cache import DEQUANT_TABLE

    ops = TR.TorchOps(device)
    data, scales = _every_byte_under_every_scale()
    index = ops.table_index(ops.asarray(data), ops.asarray(scales))
    want = NUMPY.table_index(data, scales)
    assert np.array_equal(ops.to_numpy(index), want) and sorted(set(want.reshape(-1).tolist())) == list(range(65536))
    got = ops.pair_rows(ops.asarray(DEQUANT_TABLE), index)
    assert _bits_equal(ops.to_numpy(got), NUMPY.pair_rows(DEQUANT_TABLE, want))  # NaN scales: NaN in both
    into = ops.zeros(tuple(got.shape), ops.float64)
    assert ops.pair_rows(ops.asarray(DEQUANT_TABLE), index, out=into) is into and _bits_equal(ops.to_numpy(into),
                                                                                             ops.to_numpy(got))
    into_np = np.zeros(got.shape)
    assert NUMPY.pair_rows(DEQUANT_TABLE, want, out=into_np) is into_np and _bits_equal(into_np, ops.to_numpy(got))
    table = operand_table("bf16-folded", 0.05)
    index = np.arange(256 * 256).reshape(256, 16, 16)[:, ::-1]  # every row, not in order
    assert _bits_equal(ops.to_numpy(ops.pair_rows(ops.asarray(table), ops.asarray(index))),
                       NUMPY.pair_rows(table, index))


def test_gathers_in_the_torch_namespace_equal_numpy_for_every_code_and_scale_byte():
    _gathers_equal("cpu")


@pytest.mark.gpu
@GPU
def test_gathers_on_the_gpu_equal_numpy_for_every_code_and_scale_byte():
    _gathers_equal("cuda")


@given(st.lists(st.lists(st.booleans(), min_size=7, max_size=7), min_size=1, max_size=6), st.integers(1, 9))
def test_split_schedule_in_the_torch_namespace_equals_numpy(valid, splits):
    v = np.array(valid)
    a, ta = split_schedule(v, splits)
    b, tb = split_schedule(torch.from_numpy(v), splits, TR.TorchOps("cpu"))
    assert ta == tb and np.array_equal(a, b.numpy())


def test_pool_on_the_device_must_match_the_problem():
    name, p, _ = _golden(["layout-planar"])[0]
    with pytest.raises(ValueError, match="pool: expected uint8"):
        TR.emulate(p, device="cpu", pool=torch.zeros(3, dtype=torch.uint8))


@pytest.mark.gpu
@GPU
def test_whole_catalog_matches_numpy_bit_for_bit_on_the_gpu():
    for _name, p, splits in _golden():
        for s in sorted({1, splits[-1]}):
            for g in GEOMETRIES:
                assert_emulation_matches(p, s, g, "cuda")
        assert_oracle_matches(p, "cuda")


@pytest.mark.gpu
@GPU
@settings(max_examples=30)
@given(problems(), st.integers(1, 8), st.sampled_from(GEOMETRIES))
def test_generated_problems_match_numpy_bit_for_bit_on_the_gpu(p, splits, geometry):
    assert_emulation_matches(p, splits, geometry, "cuda")
    assert_oracle_matches(p, "cuda")


@pytest.mark.gpu
@GPU
def test_gpu_exp2_equals_numpy_for_every_float32_argument_the_emulation_meets():
    # The emulation's exp2 arguments are differences from a running maximum: <= 0
    # up to a rounding (a few float32 ulps above 0, where 2**x rounds to 1 either
    # way), and below -150 both give 0. Every float32 in [-150, -0], in chunks.
    dev = torch.device("cuda")
    end = int(np.float32(-150.0).view(np.uint32)) + 1
    bad = []
    for lo in range(0x80000000, end, 2**26):
        bits = np.arange(lo, min(lo + 2**26, end), dtype=np.uint32)
        x = bits.view(np.float32)
        got = exp2_f32(torch.from_numpy(x).to(dev), TR.TorchOps(dev)).cpu().numpy()
        want = exp2_f32(x)
        diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        bad += [hex(int(bits[i])) for i in diff[:5]]
    assert not bad, f"float32 arguments whose CUDA exp2 differs from numpy's: {bad[:20]}"


@pytest.mark.parametrize("operands", ["bf16-folded", "bf16-dequant"])
def test_the_oracle_on_declared_operands_runs_the_same_text_in_torch(operands):
    # Global scales that round (0.0125, 0.05): the operand table, gathered in torch, is the
    # whole difference from the exact operands.
    p = random_problem(7, reqs=2, q_len=2, num_kv_heads=2, topk=6, k_global_scale=0.0125, v_global_scale=0.05)
    arith = Exact(True, operands)
    a = oracle_details(p, operands=operands)
    b = oracle_details(p, ops=TR.TorchOps("cpu"), operands=operands)
    two_e = 2 * compare.oracle_noise(p, a[2], a[3], a[4], operands=operands)
    assert np.all(np.abs(a[0] - b[0]) <= two_e) and np.all(np.abs(a[2] - b[2]) <= two_e)
    assert _bits_equal(a[4], b[4])
    ia = compare.interval_from_oracle(p, a, geometry=arith)
    ib = compare.interval_from_oracle(p, b, geometry=arith)
    for f in ("lo", "hi", "nearest"):
        assert _bits_equal(getattr(ia, f), getattr(ib, f)), f
    assert not _bits_equal(a[0], oracle_details(p)[0])  # the operands are not the exact ones
