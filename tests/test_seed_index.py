"""nvfp4_suite.kernels.flydsl.seed_index: the seed's integer logic against the reference's semantics."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from nvfp4_suite.kernels.flydsl import seed_index as S
from nvfp4_suite.reference.emulate import split_schedule


@given(st.lists(st.integers(-1, 12), min_size=1, max_size=64), st.integers(-1, 10), st.integers(1, 8))
def test_seed_split_ballot_and_walk_visit_exactly_the_emulations_schedule(ids, self_blk, splits):
    ids = np.array(ids)
    valid = (ids >= 0) & (ids <= self_blk)
    sched, _ = split_schedule(valid[None, :], splits)
    for z in range(splits):
        vmask = S.split_ballot(ids, self_blk, splits, z)
        first = (vmask & -vmask).bit_length() - 1 if vmask else 0  # the kernel's, per split
        walk = S.block_walk(vmask, first)
        live = [s for s, alive in walk if alive]
        want = [int(s) for s in sched[0, z] if s >= 0]
        assert live == want
        dead = [s for s, alive in walk if not alive]
        assert len(dead) == len(live) % 2  # only the odd last block is masked
        if dead:
            # It re-reads the page of the split's first live block.
            assert walk[-1] == (first, False) and walk[0] == (first, True)

