"""kernels.flydsl.seed_index: the seed's integer logic against the reference's semantics."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kernels.flydsl import seed_index as S
from reference.emulate import _split_schedule


@given(st.integers(1, 300), st.integers(1, 4), st.sampled_from([0, 1, 2, 8]))
def test_xcd_mapping_serves_every_row_once_and_keeps_a_request_on_one_xcd(rows_req, q_len, xcds):
    rows = rows_req * q_len
    gx = S.grid_x(rows, q_len, xcds)
    assert gx >= rows and (xcds == 0 or gx % (xcds * q_len) == 0)
    served = S.workgroup_row(np.arange(gx), q_len, xcds)
    assert sorted(served) == list(range(gx))  # a bijection onto rows plus padding rows
    if xcds:
        bx = np.arange(gx)
        req = served // q_len
        for r in np.unique(req):
            assert len(set((bx[req == r] % xcds).tolist())) == 1


def test_xcd_mapping_hand_checked():
    # xcds 2, q_len 3, by hand: even workgroups sit on XCD 0, odd on XCD 1.
    # bx 0 -> row 0 and bx 1 -> row 3 (request 1 starts on XCD 1); bx 2 -> row 1;
    # bx 6 (slot 3, the second group of requests) -> row 6; bx 7 -> row 9.
    got = S.workgroup_row(np.arange(12), 3, 2).tolist()
    assert got == [0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]


@given(st.lists(st.integers(-1, 12), min_size=1, max_size=64), st.integers(-1, 10), st.integers(1, 8))
def test_seed_split_ballot_and_walk_visit_exactly_the_emulations_schedule(ids, self_blk, splits):
    ids = np.array(ids)
    valid = (ids >= 0) & (ids <= self_blk)
    sched, _ = _split_schedule(valid[None, :], splits)
    first = int(np.flatnonzero(valid)[0]) if valid.any() else 0
    for z in range(splits):
        walk = S.block_walk(S.split_ballot(ids, self_blk, splits, z), first)
        live = [s for s, alive in walk if alive]
        want = [int(s) for s in sched[0, z] if s >= 0]
        assert live == want
        dead = [s for s, alive in walk if not alive]
        assert len(dead) == len(live) % 2  # only the odd last block is masked
        if dead:
            assert walk[-1] == (first, False) and valid[first]  # it reads a valid page

