"""nvfp4_suite.reference.arrays: the numpy namespace and a problem's arrays in it.

The torch namespace is held to the same operations in tests/test_torch_reference.py."""

import numpy as np

from nvfp4_suite.reference.arrays import NUMPY, ProblemArrays
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.paged_cache import dequantize_pages


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
