"""nvfp4_suite.reference.sparse_decode on hand-computed cases, invariances, and layouts.

Hand cases write E2M1 codes with scale byte 0x38 (= 1.0) so every K/V value is
exact and the expected outputs follow from the softmax formula alone.
"""

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import nvfp4_suite.reference as R
from nvfp4_suite.reference.arrays import NumpyOps
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.formats import e2m1_decode, e4m3fn_decode
from nvfp4_suite.reference.oracle import oracle_details, pairs_within
from nvfp4_suite.reference.paged_cache import (
    DEQUANT_TABLE,
    D,
    dequantize,
    page_views,
    pool_from_codes,
    read_pages,
    unpack_e2m1,
    unswizzle_v_scales,
)
from nvfp4_suite.reference.problem import HG

ONE = 0x38  # E4M3 byte of 1.0
CODE = {0.0: 0, 0.5: 1, 1.0: 2, 1.5: 3, 2.0: 4, 3.0: 5, 4.0: 6, 6.0: 7}


def _hand(k_codes, v_codes, *, topk, block_table, seq_lens, q_len=1, q=None,
          sm_scale=2.0**-7, kg=1.0, vg=1.0, layout="token_rows"):
    """A 1-KV-head problem from per-page codes [pages, 128 tokens, 128 dims]."""
    k_codes = np.asarray(k_codes, np.uint8)[:, None]
    v_codes = np.asarray(v_codes, np.uint8)[:, None]
    sc = np.full(k_codes.shape[:3] + (8,), ONE, np.uint8)
    pool = pool_from_codes(k_codes, sc, v_codes, sc, layout=layout)
    seq_lens = np.asarray(seq_lens, np.int32)
    rows = len(seq_lens) * q_len
    if q is None:
        q = np.ones((rows, 16, 128), np.float32)
    return R.DecodeProblem(
        q=q, pool=pool, layout=layout, num_kv_heads=1,
        topk=np.asarray(topk, np.int32).reshape(1, rows, -1),
        block_table=np.asarray(block_table, np.int32), seq_lens=seq_lens,
        q_len=q_len, sm_scale=sm_scale, k_global_scale=kg, v_global_scale=vg,
    )


def _close64(a, b):
    """Equal up to float64 summation-order noise: BLAS may add in another order.

    The error of a float64 weighted mean is ~n * 2**-53 * max|v|; 1e-12 of each
    (row, head)'s largest magnitude covers n = 8192 keys with room to spare.
    """
    scale = np.maximum(np.abs(a).max(axis=-1, keepdims=True), np.abs(b).max(axis=-1, keepdims=True))
    assert np.all(np.abs(a - b) <= 1e-12 * scale)


def _pages(n):
    return np.zeros((n, 128, 128), np.uint8), np.zeros((n, 128, 128), np.uint8)


def test_one_key_outputs_its_value_times_v_global():
    k, v = _pages(1)
    k[0, 0] = CODE[0.5]
    v[0, 0, :64] = CODE[3.0]
    v[0, 0, 64:] = CODE[1.5] | 8
    p = _hand(k, v, topk=[[0]], block_table=[[0]], seq_lens=[1], vg=0.5)
    out, lse = R.sparse_decode(p)
    want = np.r_[np.full(64, 1.5), np.full(64, -0.75)]
    assert np.array_equal(out[0, 5], want)
    # s = (128 * 0.5) * 2**-7 * 1 = 0.5, and the lse of a single key is its score.
    assert lse[0, 5] == 0.5


def test_two_keys_known_softmax():
    k, v = _pages(1)
    k[0, 0] = CODE[0.5]   # q.k = 64  -> s = 0.5
    k[0, 1] = CODE[1.0]   # q.k = 128 -> s = 1.0
    v[0, 0] = CODE[1.0]
    v[0, 1] = CODE[2.0]
    p = _hand(k, v, topk=[[0]], block_table=[[0]], seq_lens=[2])
    out, lse = R.sparse_decode(p)
    e0, e1 = np.exp(0.5), np.exp(1.0)
    np.testing.assert_allclose(out[0], (e0 * 1 + e1 * 2) / (e0 + e1), rtol=1e-14)
    np.testing.assert_allclose(lse[0], np.log(e0 + e1), rtol=1e-14)


def _token_values(v, page, values):
    for t, x in enumerate(values):
        v[page, t] = CODE[abs(x)] | (8 if x < 0 else 0)


def test_diagonal_block_is_cut_at_pos_mod_128_and_stale_tail_hidden():
    # K all zero: uniform softmax over what is visible. Block 0 lives on page 1,
    # block 1 (the diagonal one, pos = 129) on page 0.
    vals = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.5, -1.0]
    k, v = _pages(2)
    _token_values(v, 1, [vals[t % 8] for t in range(128)])
    _token_values(v, 0, [1.0, 3.0] + [6.0] * 126)  # stale tail: 6.0 must not leak
    p = _hand(k, v, topk=[[1, 0]], block_table=[[1, 0]], seq_lens=[130])
    out, lse = R.sparse_decode(p)
    visible = [vals[t % 8] for t in range(128)] + [1.0, 3.0]
    np.testing.assert_allclose(out[0], np.mean(visible), rtol=1e-14)
    np.testing.assert_allclose(lse[0], np.log(130), rtol=1e-14)


def test_seq_len_zero_request_outputs_zeros_and_minus_inf():
    k, v = _pages(1)
    v[:] = CODE[1.0]
    p = _hand(k, v, topk=[[0], [0]], block_table=[[0], [0]], seq_lens=[0, 5])
    out, lse = R.sparse_decode(p)
    assert np.all(out[0] == 0) and np.all(lse[0] == -np.inf)
    assert np.all(out[1] == 1.0)


def test_q_len_3_positions_across_a_block_boundary():
    k, v = _pages(2)
    _token_values(v, 0, [1.0] * 126 + [4.0, -2.0])  # tokens 126, 127 of block 0
    _token_values(v, 1, [6.0] + [-6.0] * 127)        # token 128 is block 1 offset 0
    p = _hand(k, v, topk=[[0, 1]] * 3, block_table=[[0, 1]], seq_lens=[129], q_len=3)
    assert list(p.positions) == [126, 127, 128]
    out, _ = R.sparse_decode(p)
    np.testing.assert_allclose(out[0], (126 + 4.0) / 127, rtol=1e-14)
    np.testing.assert_allclose(out[1], (126 + 4.0 - 2.0) / 128, rtol=1e-14)
    np.testing.assert_allclose(out[2], (126 + 4.0 - 2.0 + 6.0) / 129, rtol=1e-14)


def test_minus_one_and_future_slots_are_ignored():
    base = random_problem(11, reqs=2, q_len=2, num_kv_heads=2, topk=4, seq_lens=[400, 260],
                          invalid_fraction=0.0, shuffle_slots=False)
    out0, lse0 = R.sparse_decode(base)
    wide = np.full((2, 4, 9), -1, np.int32)
    wide[..., [0, 2, 4, 6]] = base.topk
    wide[..., 1] = np.where(base.self_blocks[None, :] >= 3, -1, 3)
    wide[..., 8] = 50
    out1, lse1 = R.sparse_decode(dataclasses.replace(base, topk=wide))
    _close64(out0, out1)
    np.testing.assert_allclose(lse1, lse0, rtol=1e-14)


def test_slot_order_is_irrelevant():
    p = random_problem(12, reqs=3, q_len=2, num_kv_heads=2, topk=8, seq_lens=[900, 300, 1000])
    out0, lse0 = R.sparse_decode(p)
    rng = np.random.default_rng(0)
    perm = np.stack([np.stack([rng.permutation(p.topk[h, r]) for r in range(p.rows)]) for h in range(2)])
    out1, lse1 = R.sparse_decode(dataclasses.replace(p, topk=perm.astype(np.int32)))
    _close64(out0, out1)
    np.testing.assert_allclose(lse1, lse0, rtol=1e-14)


def test_row_with_no_valid_slot_gives_zeros_and_minus_inf():
    p = random_problem(13, reqs=2, q_len=1, num_kv_heads=2, topk=4, seq_lens=[500, 500])
    topk = p.topk.copy()
    topk[1, 0] = [-1, 9, -1, 4]   # -1 and future only, KV head 1 of row 0
    out, lse = R.sparse_decode(dataclasses.replace(p, topk=topk))
    assert np.all(out[0, 16:] == 0) and np.all(lse[0, 16:] == -np.inf)
    assert not np.isnan(out).any()
    assert np.all(np.isfinite(lse[0, :16]))


def test_head_h_reads_kv_head_h_div_16():
    p = random_problem(14, reqs=1, q_len=1, num_kv_heads=3, topk=4, seq_lens=[512])
    q = p.q.copy()
    q[0] = q[0, 16:32][np.arange(48) % 16]  # all heads get KV head 1's queries
    out, _ = R.sparse_decode(dataclasses.replace(p, q=q))
    topk = np.repeat(p.topk[1:2], 3, axis=0)  # every KV head selects like head 1
    same_sel, _ = R.sparse_decode(dataclasses.replace(p, q=q, topk=topk))
    assert np.array_equal(out[0, 16:32], same_sel[0, 16:32])
    assert not np.allclose(out[0, :16], out[0, 16:32])


def test_both_layouts_give_identical_results():
    a = random_problem(15, reqs=3, q_len=2, num_kv_heads=2, topk=6, layout="token_rows")
    b = random_problem(15, reqs=3, q_len=2, num_kv_heads=2, topk=6, layout="planar")
    assert not np.array_equal(a.pool, b.pool)
    oa, la = R.sparse_decode(a)
    ob, lb = R.sparse_decode(b)
    assert np.array_equal(oa, ob) and np.array_equal(la, lb)


def test_oracle_validates_first():
    p = random_problem(16)
    with pytest.raises(R.ScaleError):
        R.sparse_decode(dataclasses.replace(p, sm_scale=-1.0))


def test_oracle_never_nan_with_large_logits():
    p = random_problem(17, reqs=2, q_len=2, num_kv_heads=1, topk=8, q_std=3000.0, kv_std=50.0,
                       seq_lens=[700, 129])
    out, lse = R.sparse_decode(p)
    assert not np.isnan(out).any() and not np.isnan(lse).any()


# --- declared operands (CONTRACT.md section 7.1) ---------------------------------------

def _bf16(x):
    """float32 -> bf16 (ml_dtypes, nearest even) -> float32."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _operand(operands, codes, scale_bytes, g):
    """One key's operands (codes uint8 ``[8, 16]``, its 8 scale bytes) as the formula
    of section 7.1 says, in float32 IEEE products and ml_dtypes' bf16 rounding (the
    scale read with its sign)."""
    x, g = e2m1_decode(codes).astype(np.float32), np.float32(g)
    s = R.e4m3fn_decode(scale_bytes).astype(np.float32)[:, None]
    return (_bf16(x * _bf16(s * g)) if operands == "bf16-folded" else _bf16((x * s) * g)).reshape(128)


@pytest.mark.parametrize("operands", ["bf16-folded", "bf16-dequant"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_oracle_on_declared_operands_is_a_float64_loop_over_keys(operands, seed):
    p = random_problem(seed, reqs=2, q_len=2, num_kv_heads=2, topk=4, seq_lens=[200, 300 + 100 * seed],
                       k_global_scale=0.0125, v_global_scale=0.05)
    # Half the scale bytes negative: the oracle reads a scale with its sign.
    pool = p.pool.copy()
    views = page_views(pool, p.layout, 2)
    rng = np.random.default_rng(seed)
    for part in (views.k_scale, views.v_scale):
        part |= (rng.random(part.shape) < 0.5).astype(np.uint8) << 7
    p = dataclasses.replace(p, pool=pool)
    out, lse = R.sparse_decode(p, operands=operands)
    data = read_pages(pool, p.layout, 2)  # linear V scales
    want_out, want_lse = np.zeros_like(out), np.full_like(lse, -np.inf)
    for r in range(p.rows):
        pos = int(p.positions[r])
        for h in range(2):
            ks, vs = [], []
            for blk in p.topk[h, r]:
                if not 0 <= blk <= pos // 128:
                    continue
                page = p.block_table[r // p.q_len, blk]
                for t in range(min(128, pos - blk * 128 + 1)):
                    ks.append(_operand(operands, unpack_e2m1(data.k_data[page, h, t]).reshape(8, 16),
                                       data.k_scale[page, h, t], 0.0125))
                    vs.append(_operand(operands, unpack_e2m1(data.v_data[page, h, t]).reshape(8, 16),
                                       data.v_scale[page, h, t], 0.05))
            if not ks:
                continue
            heads = slice(16 * h, 16 * h + 16)
            # The global scales are inside the operands: the logits take sm_scale alone.
            s = p.q[r, heads].astype(np.float64) @ np.array(ks, np.float64).T * p.sm_scale
            m = s.max(axis=1, keepdims=True)
            w = np.exp(s - m)
            want_out[r, heads] = w @ np.array(vs, np.float64) / w.sum(axis=1, keepdims=True)
            want_lse[r, heads] = (m + np.log(w.sum(axis=1, keepdims=True)))[:, 0]
    _close64(out, want_out)
    assert np.allclose(lse, want_lse, rtol=1e-12, atol=0) and (np.isinf(lse) == np.isinf(want_lse)).all()
    assert np.isfinite(want_lse).sum() > 16  # rows that see keys were checked
    # The declared operands are not the exact ones here (0.0125 is not a power of two).
    assert not np.allclose(out, R.sparse_decode(p)[0], rtol=1e-6, atol=0)


def _poisoned_page_zero(p):
    """``p`` with a page of 0xFF bytes put first (every E4M3 scale NaN, every E2M1
    code -6): no valid slot reads it, while an invalid slot's page reads as 0."""
    pool = np.concatenate([np.full((1, p.pool.shape[1]), 0xFF, np.uint8), p.pool])
    block_table = np.where(p.block_table >= 0, p.block_table + 1, -1).astype(np.int32)
    return dataclasses.replace(p, pool=pool, block_table=block_table)


def _details_by_definition(p):
    """``oracle_details``' five arrays from their definitions, one (KV head, row) at a
    time in float64 over the keys ``key_mask`` shows in the valid slots' blocks."""
    views = page_views(p.pool, p.layout, p.num_kv_heads)
    mask, pages = p.key_mask(), p.slot_pages()
    kscale, vg = p.sm_scale * p.k_global_scale, p.v_global_scale
    out, mag, vsum = np.zeros(p.q.shape), np.zeros(p.q.shape), np.zeros(p.q.shape)
    lse, sabs = np.full(p.q.shape[:2], -np.inf), np.zeros(p.q.shape[:2])
    for h in range(p.num_kv_heads):
        hs = slice(HG * h, HG * (h + 1))
        for r in range(p.rows):
            valid = pages[h, r] >= 0
            if not valid.any():
                continue
            pg = pages[h, r][valid]
            seen = mask[h, r][valid].reshape(-1)
            k = dequantize(views.k_data[pg, h], views.k_scale[pg, h], np.float64).reshape(-1, D)[seen]
            v = dequantize(views.v_data[pg, h], unswizzle_v_scales(views.v_scale[pg, h]),
                           np.float64).reshape(-1, D)[seen]
            q = p.q[r, hs].astype(np.float64)
            s = q @ k.T * kscale
            w = np.exp(s - s.max(axis=1, keepdims=True))
            denom = w.sum(axis=1, keepdims=True)
            out[r, hs] = w @ v * vg / denom
            lse[r, hs] = s.max(axis=1) + np.log(denom[:, 0])
            mag[r, hs] = w @ np.abs(v) * vg / denom
            sabs[r, hs] = (np.abs(q) @ np.abs(k).T).max(axis=1)
            vsum[r, hs] = np.abs(v).sum(axis=0) * vg
    return out, lse, mag, sabs, vsum


def _mixed_problem():
    """Pairs of several valid counts (so several chunks), cut diagonal blocks, padding
    rows, and invalid slots whose page is a poisoned page 0."""
    p = _poisoned_page_zero(random_problem(18, reqs=4, q_len=2, num_kv_heads=2, topk=8,
                                           seq_lens=[900, 300, 129, 0], invalid_fraction=0.4))
    counts = p.valid_slots.sum(axis=-1)
    assert len(np.unique(counts[counts > 0])) >= 3 and (counts == 0).any()
    assert (~p.valid_slots).any()
    assert (p.valid_slots[..., None] & ~p.key_mask()).any()  # a valid block cut per key
    return p


def test_details_match_their_definitions_over_the_keys_each_row_sees():
    p = _mixed_problem()
    out, lse, mag, sabs, vsum = oracle_details(p)
    want = _details_by_definition(p)
    assert not any(np.isnan(x).any() for x in (out, lse, mag, sabs, vsum))
    _close64(out, want[0])
    _close64(mag, want[2])
    # Sums of at most 8192 non-negative float64 terms (vsum), 128 (sabs): relative error
    # under 8192 * 2**-53 < 1e-12. lse is an absolute quantity near 0 as often as not.
    np.testing.assert_allclose(lse, want[1], rtol=1e-14, atol=1e-13)
    np.testing.assert_allclose(sabs, want[3], rtol=1e-12)
    np.testing.assert_allclose(vsum, want[4], rtol=1e-12)
    assert np.array_equal(np.isinf(lse), np.isinf(want[1]))


@pytest.mark.parametrize("chunk_bytes, block_bytes",
                         [(1, 1), (2**30, 1), (2**30, 2**30), (2**20, 3 * 2**19), (2**30, 3 * 2**17)])
def test_chunks_and_blocks_change_no_bit(chunk_bytes, block_bytes):
    """A pair's arithmetic does not depend on which pairs share its chunk or its block."""
    p = _mixed_problem()
    other = NumpyOps()
    # 1: one pair per chunk (block); 2**30: every pair of a count in one; 1 MiB chunks
    # split the four 1-slot pairs in two, which 1.5 MiB blocks take whole, and 7-slot
    # pairs one a block; 384 KiB blocks take the four 1-slot pairs three, then one.
    # The default differs from each.
    other.chunk_bytes, other.block_bytes = chunk_bytes, block_bytes
    assert (other.chunk_bytes, other.block_bytes) != (NumpyOps.chunk_bytes, NumpyOps.block_bytes)
    for a, b in zip(oracle_details(p), oracle_details(p, ops=other)):
        assert np.array_equal(a.view(np.int64), b.view(np.int64))


@pytest.mark.parametrize("slots", [1, 2, 5, 16])
def test_pairs_within_fills_the_budget_with_whole_pairs_and_takes_at_least_one(slots):
    pair = slots * 128 * 128 * 8  # one float64 [slots * 128, 128] array
    for arrays in (1, 4):
        for n in range(1, 6):
            assert pairs_within(slots, n * arrays * pair, arrays) == n
            assert pairs_within(slots, (n + 1) * arrays * pair - 1, arrays) == n
        assert pairs_within(slots, arrays * pair - 1, arrays) == 1
        assert pairs_within(slots, 0, arrays) == 1


def _multiplied(data, scales):
    """float64 ``e2m1 * e4m3fn`` element by element: the product ``dequantize`` gathers."""
    return (e2m1_decode(unpack_e2m1(data)).astype(np.float64)
            * np.repeat(e4m3fn_decode(scales).astype(np.float64), 16, axis=-1))


class _MultiplyingOps(NumpyOps):
    """The numpy namespace forming exact operands by decoding each code and scale
    byte of a table row (``256 * scale + byte``) and multiplying."""

    calls = 0

    def pair_rows(self, table, index, out=None):
        assert np.shares_memory(table, DEQUANT_TABLE)  # the exact operands' table, read as its rows' bytes
        self.calls += 1
        rows = np.asarray(index).astype(np.int64)
        codes = e2m1_decode(unpack_e2m1((rows & 0xFF).astype(np.uint8)[..., None])).astype(np.float64)
        vals = codes * e4m3fn_decode((rows >> 8).astype(np.uint8)).astype(np.float64)[..., None]
        if out is None:
            return vals
        out[...] = vals
        return out


def test_dequantize_gathers_the_bits_of_every_code_times_every_scale_byte():
    data = np.broadcast_to(np.arange(256, dtype=np.uint8)[:, None, None], (256, 256, 64))
    scales = np.broadcast_to(np.arange(256, dtype=np.uint8)[None, :, None], (256, 256, 8))
    # Bit patterns, not values: -0.0 and the NaN payloads count too.
    assert np.array_equal(dequantize(data, scales, np.float64).view(np.int64),
                          _multiplied(data, scales).view(np.int64))


@pytest.mark.parametrize("seed", range(4))
def test_the_oracle_is_bit_for_bit_the_oracle_over_multiplied_operands(seed):
    """The product-table gather changes no output or bound of the oracle."""
    p = random_problem(40 + seed, reqs=3, q_len=2, num_kv_heads=2, topk=8,
                       seq_lens=[700, 1024, 130], invalid_fraction=0.3)
    multiplying = _MultiplyingOps()
    for a, b in zip(oracle_details(p), oracle_details(p, ops=multiplying)):
        assert a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))
    assert multiplying.calls >= 2  # K and V were formed by multiplying
