"""Shared by the tests of ``nvfp4_suite.reference.compare``'s modules: a small
problem with padding rows and helpers that move bf16 values."""

import numpy as np

import nvfp4_suite.reference as R
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.formats import bf16_ulp


def small_problem():
    """3 requests (q_len 2, the second empty: padding rows), Hkv 2, TOPK 6."""
    return random_problem(3, reqs=3, q_len=2, num_kv_heads=2, topk=6, seq_lens=[400, 0, 129])


def whole_ulp_bound(iv):
    """The old acceptance bound on ``|got - rne(pre)|``, ``delta + ulp(|pre| + delta)``:
    a whole ulp wider than the interval (the module note of ``compare.tolerance``)."""
    return iv.delta + bf16_ulp(np.abs(iv.pre) + iv.delta)


def truncate(x):
    """float32 values truncated to bf16 (toward zero)."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def step(x, n):
    """bf16 values moved by n ulps by value (positive values only here)."""
    return ((np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.int64) + n).astype(np.uint32) << 16


def garbage(shape, seed=0):
    """bf16 values of a normal distribution (sd 0.5), float32."""
    return R.bf16_round(np.random.default_rng(seed).normal(0, 0.5, shape)).astype(np.float32)
