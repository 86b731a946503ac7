"""nvfp4_suite.reference.problem: derived facts and every validator error path."""

import dataclasses

import numpy as np
import pytest

import nvfp4_suite.reference as R
from nvfp4_suite.reference.examples import random_problem


def _base(**kw):
    return random_problem(3, reqs=3, q_len=2, num_kv_heads=2, topk=6, seq_lens=[300, 0, 129], **kw)


def _with(p, **changes):
    return dataclasses.replace(p, **changes)


def test_random_problem_is_valid_and_deterministic():
    a, b = _base(), _base()
    a.validate()
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y


def test_positions_and_self_blocks():
    p = _base()
    assert list(p.positions) == [298, 299, -2, -1, 127, 128]
    assert list(p.self_blocks) == [2, 2, -1, -1, 0, 1]
    assert (p.rows, p.H, p.reqs, p.TOPK) == (6, 32, 3, 6)


def test_valid_slots_exclude_minus_one_future_and_padding_rows():
    p = _base()
    topk = p.topk.copy()
    topk[0, 0] = [-1, 0, 2, 3, 7, 1]
    topk[0, 2] = [0, 1, -1, -1, -1, -1]
    p = _with(p, topk=topk)
    assert list(p.valid_slots[0, 0]) == [False, True, True, False, False, True]
    assert not p.valid_slots[0, 2].any()


def test_key_mask_cuts_only_the_own_block_at_the_row_position():
    p = _base()
    topk = p.topk.copy()
    # Row 0 (pos 298, own block 2): earlier blocks whole, block 2 up to offset 298 % 128 = 42.
    topk[0, 0] = [-1, 0, 2, 3, 7, 1]
    # Row 5 (pos 128, own block 1): only offset 0 of block 1.
    topk[1, 5] = [1, 0, -1, -1, -1, -1]
    m = _with(p, topk=topk).key_mask()
    assert m.shape == (2, 6, 6, 128) and m.dtype == bool
    assert [int(n) for n in m[0, 0].sum(axis=-1)] == [0, 128, 43, 0, 0, 128]
    assert m[0, 0, 2, 42] and not m[0, 0, 2, 43]
    assert [int(n) for n in m[1, 5].sum(axis=-1)] == [1, 128, 0, 0, 0, 0] and m[1, 5, 0, 0]
    assert not m[:, 2:4].any()  # padding rows (request 1, seq_len 0) see nothing


@pytest.mark.parametrize(
    "change, err, msg",
    [
        (lambda p: {"q": p.q.astype(np.float64)}, R.ShapeError, "q must be float32"),
        (lambda p: {"q": p.q[:, :16]}, R.HeadCountError, "H = 16 heads but num_kv_heads = 2"),
        (lambda p: {"q": p.q[:4]}, R.ShapeError, "4 rows but seq_lens has 3 requests"),
        (lambda p: {"topk": p.topk[:1]}, R.ShapeError, "topk.shape"),
        (lambda p: {"topk": p.topk.astype(np.int64)}, R.ShapeError, "topk must be int32"),
        (lambda p: {"pool": p.pool[:, :-1]}, R.ShapeError, "pool.shape"),
        (lambda p: {"layout": "rows"}, R.ParameterError, "layout = 'rows'"),
        (lambda p: {"q_len": 0}, R.ParameterError, "q_len = 0"),
        (lambda p: {"sm_scale": 0.0}, R.ScaleError, "sm_scale = 0.0"),
        (lambda p: {"k_global_scale": float("nan")}, R.ScaleError, "k_global_scale = nan"),
        (lambda p: {"v_global_scale": -1.0}, R.ScaleError, "v_global_scale = -1.0"),
        (lambda p: {"v_global_scale": 1e39}, R.ScaleError, "not a positive finite float32"),
    ],
)
def test_validator_rejects_bad_shapes_and_scalars(change, err, msg):
    p = _base()
    with pytest.raises(err, match=msg):
        _with(p, **change(p)).validate()


@pytest.mark.parametrize(
    "name, value",
    [
        ("k_global_scale", np.array(0.0125)),
        ("v_global_scale", np.array(0.02, np.float32)),
        ("sm_scale", np.float64(128**-0.5)),
        ("q_len", np.array(2)),
        ("num_kv_heads", np.array(2, np.int32)),
    ],
)
def test_scalar_parameters_accept_numpy_scalars_and_0d_arrays_as_the_same_problem(name, value):
    base = _base()
    p = _with(base, **{name: value}).validate()
    assert getattr(p, name) == value and not isinstance(getattr(p, name), np.ndarray)
    # The values equal the base problem's in float32, the precision the kernel uses.
    assert np.array_equal(R.emulate(p), R.emulate(base))


@pytest.mark.parametrize(
    "name, value, msg",
    [
        ("k_global_scale", np.array([0.0125]),
         r"k_global_scale = array\(\[0.0125\]\) \(ndarray of dtype float64 and shape \(1,\)\) is not a real number"),
        ("sm_scale", "0.1", r"sm_scale = '0.1' \(str\) is not a real number"),
        ("v_global_scale", np.array(True),
         r"v_global_scale = array\(True\) \(ndarray of dtype bool .* not a real number"),
        ("q_len", np.array([2]),
         r"q_len = array\(\[2\]\) \(ndarray of dtype int64 and shape \(1,\)\), must be an integer"),
        ("num_kv_heads", np.array(2.0), r"num_kv_heads = 2.0 \(float\), must be an integer >= 1"),
    ],
)
def test_validator_names_a_scalar_parameter_of_the_wrong_kind_and_its_value(name, value, msg):
    err = R.ScaleError if name.endswith("scale") else R.ParameterError
    with pytest.raises(err, match=msg):
        _with(_base(), **{name: value}).validate()


def test_validator_rejects_non_bf16_query_naming_index():
    p = _base()
    q = p.q.copy()
    q[4, 17, 100] = np.float32(1.0 + 2.0**-12)
    with pytest.raises(R.QueryValueError, match=r"q\[4, 17, 100\] = .*not a finite bfloat16"):
        _with(p, q=q).validate()
    q[4, 17, 100] = np.inf
    with pytest.raises(R.QueryValueError, match=r"q\[4, 17, 100\]"):
        _with(p, q=q).validate()


def test_validator_rejects_negative_seq_len():
    p = _base()
    with pytest.raises(R.SeqLenError, match=r"seq_lens\[1\] = -5 is negative"):
        _with(p, seq_lens=np.array([300, -5, 129], np.int32)).validate()


def test_validator_rejects_seq_len_beyond_block_table():
    p = _base()
    cols = p.block_table.shape[1]
    sl = np.array([300, 0, cols * 128 + 1], np.int32)
    with pytest.raises(R.SeqLenError, match=rf"seq_lens\[2\] = {cols * 128 + 1} needs {cols + 1} blocks"):
        _with(p, seq_lens=sl).validate()


def test_validator_rejects_topk_below_minus_one():
    p = _base()
    topk = p.topk.copy()
    topk[1, 3, 4] = -2
    with pytest.raises(R.TopkIdError, match=r"topk\[1, 3, 4\] = -2"):
        _with(p, topk=topk).validate()


def test_validator_rejects_duplicate_valid_ids_but_not_duplicate_invalid_ones():
    p = _base()
    topk = p.topk.copy()
    topk[1, 0] = [-1, 2, -1, 9, 9, 2]
    with pytest.raises(R.DuplicateSlotError, match=r"topk\[1, 0, 1\] and topk\[1, 0, 5\] both select valid block 2"):
        _with(p, topk=topk).validate()
    topk[1, 0] = [-1, 2, -1, 9, 9, 1]
    _with(p, topk=topk).validate()


def test_validator_rejects_page_outside_pool_with_full_message():
    p = _base()
    bt = p.block_table.copy()
    topk = p.topk.copy()
    topk[:, :2] = [0, 1, -1, -1, -1, -1]
    topk[1, 0] = [0, 1, 2, -1, -1, -1]
    bt[0, 2] = 912
    with pytest.raises(
        R.PageIndexError,
        match=rf"topk\[1, 0, 2\] = 2 maps through block_table\[0, 2\] = 912, outside \[0, {p.num_pages}\) pages",
    ):
        _with(p, topk=topk, block_table=bt).validate()
    bt[0, 2] = -1
    with pytest.raises(R.PageIndexError, match="= -1, outside"):
        _with(p, topk=topk, block_table=bt).validate()


def test_validator_ignores_bad_pages_of_invalid_slots():
    p = _base()
    bt = p.block_table.copy()
    bt[1, :] = 10**6  # request 1 is padding: none of its slots is valid
    _with(p, block_table=bt).validate()


@pytest.mark.parametrize("byte", [0x7F, 0xFF])
@pytest.mark.parametrize("kind", ["k_scale", "v_scale"])
def test_validator_rejects_nan_scale_byte_in_read_page(kind, byte):
    from nvfp4_suite.reference.paged_cache import page_views

    p = _base()
    topk = p.topk.copy()
    topk[0, 0] = [1, -1, -1, -1, -1, -1]
    page = int(p.block_table[0, 1])
    pool = p.pool.copy()
    getattr(page_views(pool, p.layout, 2), kind)[page, 0, 77, 3] = byte
    with pytest.raises(R.NaNScaleByteError, match=rf"page {page}, KV head 0: {kind[0].upper()} scale"):
        _with(p, topk=topk, pool=pool).validate()


def test_word_scan_flags_a_slab_exactly_when_one_of_its_scale_bytes_is_nan():
    from nvfp4_suite.reference.problem import _may_hold_nan_byte

    # Every byte value at every position of a token's 8 scale bytes, the other
    # bytes cycling through every non-NaN value (the scan's borrows cross bytes).
    others = np.array([b for b in range(256) if b & 0x7F != 0x7F], np.uint8)
    pool = np.zeros((1, 4 * 8), np.uint8)  # one page, four tokens of 8 bytes
    stored = pool.reshape(1, 1, 4, 8)
    pairs = np.array([[0, 0]])
    for j in range(8):
        for byte in range(256):
            stored[0, 0] = others[(np.arange(32) + 8 * j + byte) % len(others)].reshape(4, 8)
            stored[0, 0, byte % 4, j] = byte
            assert _may_hold_nan_byte(stored, pairs) == (byte & 0x7F == 0x7F), (j, byte)


def _fortran(pool):
    return np.asfortranarray(pool)


def _odd_offset(pool):
    big = np.zeros((pool.shape[0], pool.shape[1] + 1), np.uint8)
    big[:, 1:] = pool
    return big[:, 1:]


@pytest.mark.parametrize("place", [_fortran, _odd_offset])
def test_validator_rejects_nan_scale_byte_in_pools_of_other_memory_layouts(place):
    # Fortran order: no uint64 view of the rows, the byte scan decides. An odd
    # offset: every word the scan reads is unaligned.
    p = _with_scale(_base(), "V", int(_base().block_table[0, 0]), 1, 5, 6, 0xFF)
    with pytest.raises(R.NaNScaleByteError, match=r"KV head 1: V scale of token 5, group 6 is 0xFF"):
        _with(p, pool=place(p.pool)).validate()
    _with(_base(), pool=place(_base().pool)).validate()


def test_validator_accepts_nan_scale_byte_in_unread_page_and_other_head():
    from nvfp4_suite.reference.paged_cache import page_views

    p = _base()
    pool = p.pool.copy()
    used = set(p.slot_pages()[p.valid_slots].tolist())
    spare = [i for i in range(p.num_pages) if i not in used][0]
    page_views(pool, p.layout, 2).k_scale[spare] = 0x7F
    _with(p, pool=pool).validate()


# --- what the reference cannot compute (issue 20, item 8) -----------------------

@pytest.mark.parametrize("change, msg", [
    ({"sm_scale": 1e-30, "k_global_scale": 1e-30}, r"c = fp32\(.*\) = 0\.0 \(sm_scale = 1e-30"),
    ({"sm_scale": 1e30, "k_global_scale": 1e30}, r"c = fp32\(.*\) = inf \(sm_scale = 1e\+30"),
    ({"k_global_scale": 1.4e-45}, r"c = fp32\(.*\) = 0\.0 \(sm_scale = .*, k_global_scale = 1\.4e-45\)"),
    ({"v_global_scale": 1e-46}, r"v_global_scale = 1e-46 is not a positive finite float32 \(float32 value 0\.0\)"),
    ({"v_global_scale": 1e36}, r"v_global_scale = 1e\+36: outputs can reach 2688"),
    ({"sm_scale": 2**64}, r"scores times c can reach .* sm_scale = 18446744073709551616"),
    ({"sm_scale": 10**400}, r"sm_scale = 1000.* is too large for a float"),
])
def test_scales_the_reference_cannot_compute_are_a_scale_error_naming_field_and_value(change, msg):
    # Each of these was accepted (or a TypeError) and made the emulation return NaN.
    with pytest.raises(R.ScaleError, match=msg):
        _with(_base(), **change).validate()


def test_largest_accepted_scales_give_no_nan_in_the_emulation_or_the_oracle():
    # Just inside the magnitude bound: the reference computes it (no NaN anywhere).
    p = _base()
    q1 = float(np.abs(p.q.astype(np.float64)).sum(axis=-1).max())
    c_max = 2.0**30 / (q1 * 2688)
    sm = c_max / (1.4426950408889634 * p.k_global_scale) * 0.99
    big = _with(p, sm_scale=sm).validate()
    assert not np.isnan(R.emulate(big)).any() and not np.isnan(R.sparse_decode(big)[0]).any()


def test_a_problem_with_no_rows_is_a_shape_error():
    p = _base()
    empty = _with(p, q=p.q[:0], seq_lens=p.seq_lens[:0], block_table=p.block_table[:0], topk=p.topk[:, :0])
    with pytest.raises(R.ShapeError, match="q has 0 rows"):
        empty.validate()


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16])
def test_a_narrow_numpy_head_count_is_held_as_an_int_and_sizes_do_not_wrap(dtype):
    # np.uint8(16) made page_bytes 0 (2 * 16 * 128 * 72 wraps in uint8).
    p = random_problem(3, reqs=1, q_len=1, num_kv_heads=2, topk=2)
    q = _with(p, num_kv_heads=dtype(2))
    assert type(q.num_kv_heads) is int and q.num_kv_heads == 2
    q.validate()
    assert np.array_equal(R.emulate(q), R.emulate(p))


def test_the_reference_refuses_a_problem_over_its_memory_budget_naming_size_and_budget(monkeypatch):
    p = _base()
    monkeypatch.setenv("NVFP4_REFERENCE_BUDGET_GIB", "0.0001")
    with pytest.raises(R.ReferenceBudgetError, match=r"the emulation at splits=8 needs about .* GiB .*rows 6, Hkv 2, "
                                                      r"TOPK 6\), over the reference's budget of 0\.0 GiB"):
        R.emulate(p, splits=8)
    with pytest.raises(R.ReferenceBudgetError, match="the oracle needs about"):
        R.sparse_decode(p)
    monkeypatch.setenv("NVFP4_REFERENCE_BUDGET_GIB", "lots")
    with pytest.raises(ValueError, match="NVFP4_REFERENCE_BUDGET_GIB = 'lots'"):
        R.emulate(p)


def test_the_issue_serving_problem_is_refused_by_the_default_budget_before_allocating(monkeypatch):
    # 2048 requests, Hkv 8, TOPK 64 (a 160 KB case file): the emulation at 8 splits needed
    # about 20 GiB and was killed or swapped; now it is refused at once, naming both sizes.
    from nvfp4_suite.reference.paged_cache import page_bytes

    monkeypatch.delenv("NVFP4_REFERENCE_BUDGET_GIB", raising=False)
    reqs, hk, topk = 2048, 8, 64
    p = R.DecodeProblem(q=np.zeros((reqs, 16 * hk, 128), np.float32), pool=np.zeros((1, page_bytes(hk)), np.uint8),
                        layout="token_rows", num_kv_heads=hk, topk=np.full((hk, reqs, topk), -1, np.int32),
                        block_table=np.zeros((reqs, 1), np.int32), seq_lens=np.ones(reqs, np.int32), q_len=1,
                        sm_scale=0.088, k_global_scale=0.05, v_global_scale=0.01).validate()
    with pytest.raises(R.ReferenceBudgetError, match=r"emulation at splits=8 needs about 2\d\.\d GiB .*rows 2048, "
                                                      r"Hkv 8, TOPK 64\), over the reference's budget of 8\.0 GiB"):
        R.emulate(p, splits=8)


# --- slot-list domains (outside_slot_domain) ----------------------------------

def _compacted_by_definition(ids, pos, topk):
    """The contract's definition of a compacted list, written out slot by slot."""
    n = 0 if pos < 0 else min(topk, pos // 128 + 1)
    head, tail = list(ids[:n]), list(ids[n:])
    return (all(0 <= x <= pos // 128 for x in head) and head == sorted(set(head))
            and all(x == -1 for x in tail))


def test_compacted_domain_matches_its_definition_on_every_list_of_three_slots():
    import itertools

    from nvfp4_suite.reference.problem import outside_slot_domain

    base = random_problem(0, reqs=1, q_len=1, num_kv_heads=1, topk=3, seq_lens=[1])
    for seq_len in (0, 1, 128, 129, 300, 600):
        for ids in itertools.product(range(-1, 5), repeat=3):
            p = dataclasses.replace(base, seq_lens=np.array([seq_len], np.int32),
                                    topk=np.array(ids, np.int32).reshape(1, 1, 3))
            inside = outside_slot_domain(p, "compacted") is None
            assert inside == _compacted_by_definition(ids, seq_len - 1, 3), (seq_len, ids)
            assert outside_slot_domain(p, "any") is None


def test_outside_slot_domain_names_the_first_head_row_and_slot():
    from nvfp4_suite.reference.problem import outside_slot_domain

    p = random_problem(1, reqs=2, q_len=1, num_kv_heads=2, topk=4, seq_lens=[300, 600])
    t = np.array([[[0, 1, 2, -1], [0, 1, 2, 3]], [[0, 1, 2, -1], [0, 2, 3, 4]]], np.int32)
    assert outside_slot_domain(dataclasses.replace(p, topk=t), "compacted") is None
    t[1, 1, 3] = -1
    msg = outside_slot_domain(dataclasses.replace(p, topk=t), "compacted")
    assert msg.startswith("topk[1, 1, 3] = -1") and "slots 0..3" in msg
    t[0, 0, 3] = 2
    assert outside_slot_domain(dataclasses.replace(p, topk=t), "compacted").startswith("topk[0, 0, 3] = 2: "
                                                                                      "compacted lists hold -1")
    with pytest.raises(ValueError, match="slot_lists"):
        outside_slot_domain(p, "sorted")


# --- scale-sign domains (outside_scale_domain) ---------------------------------

def _scale_problem():
    """Request 0 (position 129) sees all of block 0's page and tokens 0, 1 of block 1's;
    request 1 (position 59) tokens 0..59 of its one page; nothing else is seen."""
    p = random_problem(11, reqs=2, num_kv_heads=2, topk=4, seq_lens=[130, 60])
    views = R.read_pages(p.pool, p.layout, 2)
    assert (views.k_scale < 0x80).all() and (views.v_scale < 0x80).all()  # the quantiser's scales
    return p


def _with_scale(p, kind, page, head, token, group, byte):
    """``p`` with the (linear) ``kind`` scale byte at (page, head, token, group) set to ``byte``."""
    pool = p.pool.copy()
    views = R.page_views(pool, p.layout, p.num_kv_heads)
    if kind == "K":
        views.k_scale[page, head, token, group] = byte
    else:
        lin = R.unswizzle_v_scales(views.v_scale[page, head])
        lin[token, group] = byte
        views.v_scale[page, head] = R.swizzle_v_scales(lin)
    return dataclasses.replace(p, pool=pool)


@pytest.mark.parametrize("kind", ["K", "V"])
def test_non_negative_domain_is_its_definition_for_every_scale_byte_a_row_reads(kind):
    from nvfp4_suite.reference.problem import outside_scale_domain

    p = _scale_problem()
    page = int(p.block_table[1, 0])
    for byte in range(256):
        if byte & 0x7F == 0x7F:
            continue  # E4M3 NaN: invalid input (the validator's)
        q = _with_scale(p, kind, page, 1, 59, 6, byte).validate()
        msg = outside_scale_domain(q, "non-negative")
        assert outside_scale_domain(q, "any") is None
        if byte < 0x80 or byte == 0x80:  # non-negative, or negative zero (its magnitude's value)
            assert msg is None, hex(byte)
        else:
            value = float(R.e4m3fn_decode(np.uint8(byte)))
            assert value < 0 and msg.startswith(
                f"page {page}, KV head 1: {kind} scale of token 59, group 6 is 0x{byte:02X} ({value!r}), negative"), msg


def test_negative_scales_of_keys_no_row_sees_are_inside_the_domain():
    from nvfp4_suite.reference.problem import outside_scale_domain

    p = _scale_problem()
    spare = sorted(set(range(p.num_pages)) - set(p.block_table[p.block_table >= 0].tolist()))
    unseen = [(int(p.block_table[0, 1]), 2), (int(p.block_table[1, 0]), 60), (spare[0], 0)]
    for kind in ("K", "V"):
        for page, token in unseen:
            q = _with_scale(p, kind, page, 0, token, 0, 0xB8)  # -1.0
            assert outside_scale_domain(q, "non-negative") is None, (kind, page, token)
        # The last key request 0 sees is read.
        q = _with_scale(p, kind, int(p.block_table[0, 1]), 0, 1, 0, 0xB8)
        assert outside_scale_domain(q, "non-negative") is not None


def test_outside_scale_domain_names_k_before_v_and_the_first_index():
    from nvfp4_suite.reference.problem import outside_scale_domain

    p = _scale_problem()
    a, b = sorted([int(p.block_table[0, 0]), int(p.block_table[1, 0])])
    q = _with_scale(p, "V", a, 0, 0, 0, 0xC0)
    q = _with_scale(q, "K", b, 1, 9, 3, 0xA0)
    q = _with_scale(q, "K", b, 1, 4, 7, 0x90)
    q = _with_scale(q, "K", b, 0, 50, 0, 0x81)  # the smallest negative subnormal
    assert outside_scale_domain(q, "non-negative").startswith(
        f"page {b}, KV head 0: K scale of token 50, group 0 is 0x81 (-0.001953125), negative")
    q = _with_scale(_with_scale(p, "V", b, 1, 4, 7, 0xC0), "V", b, 1, 4, 2, 0xB0)
    assert outside_scale_domain(q, "non-negative").startswith(
        f"page {b}, KV head 1: V scale of token 4, group 2 is 0xB0")
    with pytest.raises(ValueError, match="scale_sign = 'positive', expected one of"):
        outside_scale_domain(p, "positive")
