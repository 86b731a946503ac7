"""nvfp4_suite.reference.arrays: the numpy namespace and a problem's arrays in it.

The torch namespace is held to the same operations in tests/test_torch_reference.py."""

import ml_dtypes
import numpy as np
import pytest

from nvfp4_suite.reference.arithmetic import OPERANDS
from nvfp4_suite.reference.arrays import NUMPY, ProblemArrays, applied_global_scales, operand_table
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.formats import e2m1_decode, e4m3fn_decode
from nvfp4_suite.reference.paged_cache import dequantize_pages, read_pages, unpack_e2m1


def test_scatters_accumulate_over_repeated_indices():
    t = np.zeros((3, 2))
    NUMPY.scatter_max(t, np.array([0, 0, 2]), np.array([[1.0, 5.0], [3.0, 2.0], [4.0, 4.0]]))
    assert t.tolist() == [[3.0, 5.0], [0.0, 0.0], [4.0, 4.0]]
    NUMPY.index_add(t, np.array([1, 1]), np.array([[1.0, 1.0], [2.0, 3.0]]))
    assert t[1].tolist() == [3.0, 4.0]


def test_float32_bit_patterns_round_trip_through_int64():
    x = np.array([0.0, -0.0, 1.5, -np.inf, 2.0**-149], np.float32)
    bits = NUMPY.bits32(x)
    assert bits.dtype == np.int64 and bits.min() >= 0 and bits[1] == 2**31
    assert np.array_equal(NUMPY.from_bits32(bits).view(np.uint32), x.view(np.uint32))


def test_problem_arrays_are_pair_major_and_back_inverts_it():
    p = random_problem(4, reqs=2, q_len=2, num_kv_heads=2, topk=3)
    a = ProblemArrays(p)
    assert a.q.shape == (2 * p.rows, 16, 128) and a.mask.shape == (2 * p.rows, 3, 128)
    assert np.array_equal(a.back(a.q), p.q.astype(np.float64))
    # Pair (KV head 1, row 0) is pair index rows: its queries are heads 16..31 of row 0.
    assert np.array_equal(a.q[p.rows], p.q[0, 16:32])


def test_kv_of_a_page_is_the_dequantised_page_with_v_scales_unswizzled():
    p = random_problem(6, reqs=1, q_len=1, num_kv_heads=2, topk=2)
    a = ProblemArrays(p)
    page = int(p.block_table[0, 0])
    k, v = a.kv(np.array([page, page]), np.array([0, 1]))
    want_k, want_v = dequantize_pages(p.pool, p.layout, 2, [page], np.float64)
    assert np.array_equal(k, want_k[0]) and np.array_equal(v, want_v[0])


# --- declared operands ---------------------------------------------------------------

def _bf16(x):
    """float32 -> bf16 (ml_dtypes, nearest even) -> float32: independent of the reference's rounding."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _operands_by_formula(operands, codes, scale_bytes, g):
    """The formulas of CONTRACT.md section 7.1 in float32 IEEE operations (each product
    of float32 values rounded once) and ml_dtypes' bf16 rounding."""
    x = e2m1_decode(codes).astype(np.float32)
    s = e4m3fn_decode(scale_bytes).astype(np.float32)
    g = np.float32(g)
    if operands == "bf16-folded":
        return _bf16(x * _bf16(s * g))  # x * bf16(...) has at most 10 bits: exact in float32
    return _bf16((x * s) * g)


@pytest.mark.parametrize("operands", OPERANDS[1:])
@pytest.mark.parametrize("g", [0.0125, 0.02, 0.05, 1.0, 3.0**-20, 7.3e30, 1e-36])  # 1e-36: float32 subnormals
def test_the_operand_table_is_its_formula_for_every_code_and_scale_byte(operands, g):
    table = operand_table(operands, g)
    data = np.arange(256, dtype=np.uint8)
    for s in range(256):
        codes = np.stack([data & 0xF, data >> 4], axis=-1)
        want = _operands_by_formula(operands, codes, np.uint8(s), g)
        got = table[256 * s + data.astype(np.int64)]
        if (s & 0x7F) == 0x7F:
            assert np.isnan(got).all()
        else:
            assert np.array_equal(got, want.astype(np.float64)), (operands, g, hex(s))


def test_an_operand_table_that_overflows_is_refused_naming_the_scale_and_byte():
    # 6 * 448 * g is over the float32 maximum (3.40e38), 6 * 416 * g (byte 0x7D) is not.
    with pytest.raises(ValueError, match=r"v_global_scale = 1\.3e\+35: operands bf16-folded .* byte 0x7E \(448\)"):
        operand_table("bf16-folded", 1.3e35, "v_global_scale")
    assert not np.isinf(operand_table("bf16-folded", 1.2e35)).any()
    with pytest.raises(ValueError, match="operands = 'exact'"):
        operand_table("exact", 1.0)


@pytest.mark.parametrize("operands", OPERANDS[1:])
def test_kv_gathers_the_declared_operands_of_each_key(operands):
    p = random_problem(6, reqs=2, num_kv_heads=2, topk=3, k_global_scale=0.0125, v_global_scale=0.05)
    a = ProblemArrays(p)
    pg, hd = np.array([0, 2, 1]), np.array([1, 0, 1])
    k, v = a.kv(pg, hd, operands)
    views = read_pages(p.pool, p.layout, p.num_kv_heads)
    for kind, got, g in (("k", k, 0.0125), ("v", v, 0.05)):
        codes = unpack_e2m1(getattr(views, f"{kind}_data")[pg, hd])
        scales = np.repeat(getattr(views, f"{kind}_scale")[pg, hd], 16, axis=-1)
        assert np.array_equal(got, _operands_by_formula(operands, codes, scales, g))
    assert applied_global_scales(p, operands) == (1.0, 1.0)
    assert applied_global_scales(p) == (0.0125, 0.05)
