"""The golden cases: how each is built, what it targets.

Every builder is deterministic: it starts from ``random_problem`` (PCG64
streams, integer and IEEE-exact codecs) with a fixed seed and then writes
structured bytes, so regeneration gives the same problem on every machine.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from nvfp4_suite.reference import DecodeProblem, bf16_round
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.paged_cache import (
    BLK,
    GROUP,
    D,
    build_pool,
    pack_e2m1,
    page_views,
    swizzle_v_scales,
    unswizzle_v_scales,
)
from nvfp4_suite.reference.problem import read_slabs
from nvfp4_suite.vectors.catalog.bug_classes import CLASSES

# The bug-class vocabulary (the manifest's ``notes``): one definition, in the registry.
FLAGS = {c.name: c.description for c in CLASSES}


@dataclasses.dataclass(frozen=True)
class Case:
    """One golden case: its name, what it targets (comment, flags), how it is
    built, the split counts (and FlyDSL xcds values) it is run with, and for an
    invalid-input case the ``ProblemError`` subclass the host side must raise."""

    name: str
    comment: str
    flags: tuple
    build: Callable[[], DecodeProblem]
    splits: tuple = (1, 2, 3, 8)
    expected_error: str | None = None
    xcds: tuple = (0, 8)


def _replace(p: DecodeProblem, **kw) -> DecodeProblem:
    return dataclasses.replace(p, **kw)


def _base(seed, **kw):
    kw.setdefault("spare_pages", 0)
    return random_problem(seed, **kw)


# The loud tail: code 7 (6.0) in both nibbles, scale 448 (E4M3 0x7E).
LOUD_CODES, LOUD_SCALE = 0x77, 0x7E


def write_loud_tail(pool: np.ndarray, layout: str, num_kv_heads: int, block_table: np.ndarray,
                    seq_lens: np.ndarray) -> None:
    """In place: the largest codes and scale 448 past seq_len in every request's last
    page (pool uint8 ``[pages, page_bytes]``; block_table int ``[reqs, max_blocks]``;
    seq_lens int ``[reqs]``); a request whose last page is absent (-1) is skipped."""
    v = page_views(pool, layout, num_kv_heads)
    for r, sl in enumerate(seq_lens):
        pg = block_table[r, sl // BLK] if sl % BLK else -1
        if pg < 0:
            continue
        t = sl % BLK
        v.k_data[pg, :, t:] = LOUD_CODES
        v.v_data[pg, :, t:] = LOUD_CODES
        v.k_scale[pg, :, t:] = LOUD_SCALE
        lin = unswizzle_v_scales(v.v_scale[pg])
        lin[:, t:] = LOUD_SCALE
        v.v_scale[pg] = swizzle_v_scales(lin)


def loud_tail(p: DecodeProblem) -> DecodeProblem:
    """A copy with the loud tail (``write_loud_tail``): finite (the problem stays
    valid), but any leak moves the output."""
    pool = p.pool.copy()
    write_loud_tail(pool, p.layout, p.num_kv_heads, p.block_table, p.seq_lens)
    return _replace(p, pool=pool)


def poison_unread(p: DecodeProblem) -> DecodeProblem:
    """A copy whose (page, KV head) slabs that no valid slot reads hold NaN scale bytes."""
    pool = p.pool.copy()
    v = page_views(pool, p.layout, p.num_kv_heads)
    for pg, h in np.argwhere(~read_slabs(p.valid_slots, p.slot_pages(), p.num_pages)):
        v.k_scale[pg, h] = 0x7F
        v.v_scale[pg, h] = 0xFF
    return _replace(p, pool=pool)


def _set_scales(p: DecodeProblem, which: str, fn) -> DecodeProblem:
    """Rewrite linear scales of every slab: ``fn(shape, rng) -> uint8 [pages, Hkv, 128, 8]``."""
    pool = p.pool.copy()
    v = page_views(pool, p.layout, p.num_kv_heads)
    rng = np.random.default_rng(99)
    if "k" in which:
        v.k_scale[...] = fn(v.k_scale.shape, rng)
    if "v" in which:
        v.v_scale[...] = swizzle_v_scales(fn(v.v_scale.shape, rng))
    return _replace(p, pool=pool)


def _slots(p: DecodeProblem, fn) -> DecodeProblem:
    topk = p.topk.copy()
    fn(topk)
    return _replace(p, topk=topk)


# --- builders ---------------------------------------------------------------

def _first_slots_invalid(topk_w=16):
    p = _base(101, reqs=3, q_len=1, num_kv_heads=1, topk=topk_w, seq_lens=[1100, 700, 300],
              invalid_fraction=0.0, shuffle_slots=False)

    def f(t):
        for r in range(p.rows):
            nv = int((t[0, r] >= 0).sum())
            valid = t[0, r][t[0, r] >= 0][: topk_w // 2]
            lead = np.where(np.arange(topk_w - len(valid)) % 2 == 0, -1, 40 + r)
            t[0, r] = np.concatenate([lead, valid])
            assert nv >= 1
    return _slots(p, f)


def _no_valid_slot_rows():
    p = _base(102, reqs=3, q_len=2, num_kv_heads=2, topk=8, seq_lens=[400, 300, 500])

    def f(t):
        t[0, 1] = [-1, 9, -1, 7, 20, -1, -1, 5]
        t[1, 4] = -1
    return _slots(p, f)


def _padding_requests(q_len=1):
    return _base(103 + q_len, reqs=6, q_len=q_len, num_kv_heads=2, topk=8,
                 seq_lens=[500, 0, 130, 0, 0, 1] if q_len == 1 else [500, 130, 1, 0, 0, 0])


def _minus_one_slots(first_request: bool):
    p = _base(106 + first_request, reqs=3, q_len=1, num_kv_heads=1, topk=8, seq_lens=[400, 520, 260], spare_pages=1,
              invalid_fraction=0.0, shuffle_slots=False)
    pool = p.pool.copy()
    v = page_views(pool, p.layout, 1)
    bt = p.block_table.copy()
    # The entry just before each row's table (and the last one, where numpy
    # wraps -1) points at a loud page, so a dereferenced -1 shows.
    loud = p.num_pages - 1
    v.v_data[loud] = 0x77
    v.k_data[loud] = 0x77
    bt[bt < 0] = loud

    def f(t):
        for r in range(p.rows):
            if first_request and r != 0:
                continue
            t[0, r, 1::2] = -1
    return _slots(_replace(p, pool=pool, block_table=bt), f)


def _v_scale_swizzle():
    p = _base(108, reqs=2, q_len=1, num_kv_heads=2, topk=4, seq_lens=[512, 300])

    def pattern(shape, rng):
        t = np.arange(BLK)[:, None]
        s = np.arange(8)[None, :]
        # Exponent varies with token and group: no linear re-read reproduces it.
        return np.broadcast_to((0x28 + (t * 3 + s * 5) % 24).astype(np.uint8), shape).copy()
    return _set_scales(p, "v", pattern)


def _v_scale_per_token():
    p = _base(109, reqs=2, q_len=2, num_kv_heads=1, topk=4, seq_lens=[256, 390])

    def pattern(shape, rng):
        t = np.arange(BLK)[:, None]
        base = rng.integers(0x30, 0x3C, shape, dtype=np.uint8)
        return (base + (t % 4 * 2).astype(np.uint8)).astype(np.uint8)
    return _set_scales(p, "v", pattern)


def _stale_tail(seq_lens):
    return loud_tail(_base(110 + seq_lens[0] % 7, reqs=len(seq_lens), q_len=1, num_kv_heads=1, topk=8,
                            seq_lens=seq_lens))


def _scale_bytes(kind: str):
    p = _base(120, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[400, 260])
    special = {
        "neg_zero": np.array([0x80, 0x38, 0x30, 0x80], np.uint8),
        "subnormal": np.array([0x01, 0x02, 0x05, 0x07, 0x81, 0x86, 0x38], np.uint8),
        "zero": np.array([0x00, 0x00, 0x38, 0x34], np.uint8),
        "max": np.array([0x7E, 0xFE, 0x7D, 0x77], np.uint8),
        # The same classes with no sign bit: cases inside the non-negative scale domain.
        "subnormal-nonneg": np.array([0x01, 0x02, 0x05, 0x07, 0x03, 0x06, 0x38], np.uint8),
        "max-nonneg": np.array([0x7E, 0x7E, 0x7D, 0x77], np.uint8),
    }[kind]

    def pattern(shape, rng):
        return rng.choice(special, shape).astype(np.uint8)
    return _set_scales(p, "kv", pattern)


def _nan_scale(byte: int, which: str):
    p = _base(121, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[400, 260])
    pool = p.pool.copy()
    v = page_views(pool, p.layout, 1)
    page = int(p.slot_pages()[p.valid_slots][0])
    getattr(v, which)[page, 0, 5, 3] = byte
    return _replace(p, pool=pool)


def _every_code():
    p = _base(122, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[512, 200])
    pool = p.pool.copy()
    v = page_views(pool, p.layout, 1)
    codes = (np.arange(BLK)[:, None] + np.arange(D)[None, :] * 7) % 16
    for data in (v.k_data, v.v_data):
        for pg in range(p.num_pages):
            data[pg, 0] = pack_e2m1(np.roll(codes, pg, axis=0))
    return _replace(p, pool=pool)


def _scale_groups():
    p = _base(123, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[384, 256])

    def pattern(shape, rng):
        return np.broadcast_to((0x28 + 3 * np.arange(8)).astype(np.uint8), shape).copy()
    return _set_scales(p, "kv", pattern)


def _e2m1_ties():
    p = _base(124, reqs=2, q_len=1, num_kv_heads=1, topk=3, seq_lens=[300, 200], spare_pages=0)
    rng = np.random.default_rng(124)
    shape = (p.num_pages, 1, BLK, D)
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    vals = rng.choice(ties, shape) * rng.choice([-1.0, 1.0], shape)
    vals[..., ::GROUP] = 6.0  # amax 6 per group with g = 1/4: sf = 4, x / (4 g) lands on the tie
    g = 0.25
    pool = build_pool(vals, vals, layout="token_rows", k_global_scale=g, v_global_scale=g)
    return _replace(p, pool=pool, k_global_scale=g, v_global_scale=g)


def _head_major(hk, reqs, q_len):
    return _base(130 + hk, reqs=reqs, q_len=q_len, num_kv_heads=hk, topk=6,
                 seq_lens=[400 - 90 * r for r in range(reqs)], invalid_fraction=0.3)


def _head_mapping(hk):
    p = _base(140 + hk, reqs=2, q_len=1, num_kv_heads=hk, topk=4, seq_lens=[512, 300])
    pool = p.pool.copy()
    v = page_views(pool, p.layout, hk)
    for h in range(hk):
        v.v_scale[:, h] = 0x30 + 4 * h  # KV head h's values scale by 2**(h/2)
        v.k_scale[:, h] = 0x38 - 2 * h
    return _replace(p, pool=pool)


def _positions(seq_len, q_len):
    return loud_tail(_base(150 + q_len, reqs=2, q_len=q_len, num_kv_heads=1, topk=4,
                            seq_lens=[seq_len, seq_len + BLK], invalid_fraction=0.0))


def _causal_earlier():
    return _base(155, reqs=2, q_len=1, num_kv_heads=1, topk=8, seq_lens=[7 * BLK + 3, 5 * BLK + 64],
                 invalid_fraction=0.0)


def _splits_case(n_valid):
    p = _base(160 + n_valid, reqs=2, q_len=1, num_kv_heads=1, topk=8, seq_lens=[1024, 1024],
              invalid_fraction=0.0, shuffle_slots=False)

    def f(t):
        for r in range(p.rows):
            t[0, r, n_valid:] = -1
    return _slots(p, f)


def _split_rescale():
    p = _base(170, reqs=1, q_len=1, num_kv_heads=1, topk=8, seq_lens=[1024], invalid_fraction=0.0,
              shuffle_slots=False)
    pool = p.pool.copy()
    v = page_views(pool, p.layout, 1)
    # Block in slot 6 gets keys aligned with q: its scores dwarf every other.
    page = p.block_table[0, p.topk[0, 0, 6]]
    sign = np.where(p.q[0, 0] >= 0, 0, 8)
    codes = np.broadcast_to(7 | sign, (BLK, D))
    v.k_data[page, 0] = pack_e2m1(codes)
    v.k_scale[page, 0] = 0x40
    return _replace(p, pool=pool, q=bf16_round(p.q * 2))


def _xcds_rows():
    return _base(175, reqs=5, q_len=3, num_kv_heads=1, topk=6, seq_lens=[300, 129, 0, 200, 390])


def _page0_spare():
    p = _base(176, reqs=3, q_len=2, num_kv_heads=2, topk=6, seq_lens=[600, 200, 0], spare_pages=3)
    # Page 0, where kernels commonly point a masked load, becomes a spare page (poisoned by the callers).
    spare = min(set(range(p.num_pages)) - set(p.block_table[p.block_table >= 0].tolist()))
    pool = p.pool.copy()
    pool[[0, spare]] = pool[[spare, 0]]
    bt = p.block_table.copy()
    bt[p.block_table == 0], bt[p.block_table == spare] = spare, 0
    return _replace(p, pool=pool, block_table=bt)


def _poisoned():
    return poison_unread(_page0_spare())


def _layout_case(layout):
    return _base(177, reqs=3, q_len=2, num_kv_heads=2, topk=6, layout=layout, seq_lens=[500, 260, 129])


def _large_logits():
    return _base(178, reqs=2, q_len=2, num_kv_heads=1, topk=8, q_std=24.0, kv_std=4.0, seq_lens=[900, 400])


def _wide_topk(k):
    return _base(180 + k, reqs=1, q_len=1, num_kv_heads=1, topk=k, seq_lens=[k * BLK], invalid_fraction=0.0,
                 spare_pages=0)


def _shared_prefix():
    p = _base(185, reqs=3, q_len=1, num_kv_heads=1, topk=6, seq_lens=[640, 640, 300])
    bt = p.block_table.copy()
    bt[1, :3] = bt[0, :3]  # requests 0 and 1 share their first three pages (prefix caching)
    return _replace(p, block_table=bt)


# --- invalid input ------------------------------------------------------------

def _inv_base():
    return _base(190, reqs=2, q_len=2, num_kv_heads=2, topk=4, seq_lens=[400, 260])


def _inv_shape():
    p = _inv_base()
    return _replace(p, q=p.q[:3])


def _inv_heads():
    p = _inv_base()
    return _replace(p, q=p.q[:, :24])


def _inv_q(value):
    p = _inv_base()
    q = p.q.copy()
    q[1, 5, 9] = value
    return _replace(p, q=q)


def _inv_seq(value):
    p = _inv_base()
    return _replace(p, seq_lens=np.array([400, value], np.int32))


def _inv_topk_below():
    return _slots(_inv_base(), lambda t: t.__setitem__((1, 2, 3), -5))


def _inv_duplicate():
    def f(t):
        t[0, 0] = [1, -1, 1, 0]
    return _slots(_inv_base(), f)


def _inv_page(value):
    p = _inv_base()
    bt = p.block_table.copy()

    def f(t):
        t[:, 0] = [0, -1, -1, -1]
    p = _slots(p, f)
    bt[0, 0] = value
    return _replace(p, block_table=bt)


def _inv_scale(field, value):
    return _replace(_inv_base(), **{field: value})


CASES = [
    Case("first-slots-invalid", "Half the slots of every row lead with -1 and future ids before the valid ones.",
         ("first-invalid-nan",), lambda: _first_slots_invalid()),
    Case("no-valid-slot-rows", "Rows (and single KV heads of rows) whose slots are all -1 or future.",
         ("empty-row", "first-invalid-nan"), _no_valid_slot_rows),
    Case("padding-requests", "A CUDA-graph batch: half the requests have seq_len 0, merged over 1..8 splits.",
         ("empty-row", "split-merge"), lambda: _padding_requests(1), splits=tuple(range(1, 9))),
    Case("padding-requests-qlen2", "Trailing seq_len-0 requests with q_len 2, and a request with seq_len 1.",
         ("empty-row", "position"), lambda: _padding_requests(2)),
    Case("minus-one-slots", "Every second slot is -1 and the table's unused entries point at a loud page.",
         ("minus-one",), lambda: _minus_one_slots(False)),
    Case("minus-one-first-request", "-1 slots in request 0, where a dereference reads before the table.",
         ("minus-one",), lambda: _minus_one_slots(True)),
    Case("v-scale-swizzle", "V scales vary with token and group: only the swizzled read gives these values.",
         ("v-scale-swizzle",), _v_scale_swizzle),
    Case("v-scale-per-token", "Each token of every 4-token group has its own V scale.",
         ("v-scale-swizzle", "v-scale-writer"), _v_scale_per_token),
    Case("stale-tail-1", "seq_len % 128 == 1: 127 loud stale tokens after the last real one.",
         ("stale-tail",), lambda: _stale_tail([129, 257])),
    Case("stale-tail-64", "seq_len % 128 == 64 with loud stale tokens.", ("stale-tail",),
         lambda: _stale_tail([320, 64])),
    Case("stale-tail-127", "seq_len % 128 == 127: one loud stale token.", ("stale-tail",),
         lambda: _stale_tail([255, 127])),
    Case("e4m3-neg-zero", "Scale byte 0x80 (-0: a zero group, NaN on an uncorrected FNUZ path) in read pages.",
         ("fnuz", "e4m3-special"), lambda: _scale_bytes("neg_zero")),
    Case("e4m3-subnormal", "Subnormal scale bytes (m * 2**-9) in K and V.", ("e4m3-special", "fnuz"),
         lambda: _scale_bytes("subnormal")),
    Case("e4m3-zero", "Zero scale bytes: whole groups of zeros.", ("e4m3-special",), lambda: _scale_bytes("zero")),
    Case("e4m3-max", "Scale bytes 0x7E/0xFE (448) and neighbours: FNUZ reads them halved.",
         ("fnuz", "e4m3-special"), lambda: _scale_bytes("max")),
    Case("e4m3-nan-k-7f", "K scale byte 0x7F (NaN) in a read page.", ("e4m3-nan", "invalid"),
         lambda: _nan_scale(0x7F, "k_scale"), expected_error="NaNScaleByteError"),
    Case("e4m3-nan-v-ff", "V scale byte 0xFF (NaN) in a read page.", ("e4m3-nan", "invalid"),
         lambda: _nan_scale(0xFF, "v_scale"), expected_error="NaNScaleByteError"),
    Case("e2m1-every-code", "Every E2M1 code at every nibble position, shifted per page.", ("nibble-order",),
         _every_code),
    Case("scale-groups", "Each of the 8 scale groups of a row has its own scale.", ("scale-group",), _scale_groups),
    Case("e2m1-ties", "Cache quantised from values on every E2M1 tie (division, ties to even).",
         ("e2m1-ties",), _e2m1_ties),
    Case("head-major-hkv2", "Hkv 2, 6 rows, per-head selections differ.", ("topk-major",),
         lambda: _head_major(2, 3, 2)),
    Case("head-major-hkv4", "Hkv 4, 6 rows (3 requests x q_len 2), per-head selections differ.", ("topk-major",),
         lambda: _head_major(4, 3, 2)),
    Case("head-map-hkv3", "KV heads scaled differently (Hkv 3).", ("head-map",), lambda: _head_mapping(3)),
    Case("head-map-hkv4", "KV heads scaled differently (Hkv 4).", ("head-map",), lambda: _head_mapping(4)),
    Case("qlen3-boundary", "q_len 3 at seq_len 129: positions 126, 127, 128 straddle a block.",
         ("position", "stale-tail"), lambda: _positions(129, 3)),
    Case("qlen4-boundary", "q_len 4 at seq_len 258.", ("position",), lambda: _positions(258, 4)),
    Case("causal-earlier", "Seven fully visible earlier blocks beside a diagonal block cut at 2.",
         ("causal-earlier",), _causal_earlier),
    Case("splits-5-blocks", "5 valid blocks over 1..8 splits (empty splits from 6 on).",
         ("split-merge", "odd-blocks", "ticket-reset", "memory-order"), lambda: _splits_case(5),
         splits=tuple(range(1, 9))),
    Case("splits-1-block", "One valid block over 1..8 splits: all but one split empty.",
         ("split-merge", "odd-blocks"), lambda: _splits_case(1), splits=tuple(range(1, 9))),
    Case("split-rescale", "One block's scores dwarf the rest: split maxima far apart.",
         ("split-rescale", "large-logits"), _split_rescale, splits=tuple(range(1, 9))),
    Case("xcds-rows", "15 rows (5 requests x q_len 3): not a multiple of 8 x 3.", ("xcds", "empty-row"),
         _xcds_rows),
    Case("poisoned-unread", "Every slab no valid slot reads holds NaN scale bytes, page 0's among them.",
         ("stray-read",), _poisoned),
    Case("layout-token-rows", "A mixed batch in the token_rows layout (24576 ordinary outputs).",
         ("layout", "rounding"), lambda: _layout_case("token_rows")),
    Case("layout-planar", "The same batch in the planar layout.", ("layout",), lambda: _layout_case("planar")),
    Case("large-logits", "Scores in the hundreds: P underflows to subnormal.", ("large-logits",), _large_logits),
    Case("topk-64", "All 64 slots valid and full.", ("topk-wide",), lambda: _wide_topk(64), splits=(1, 8)),
    Case("topk-33", "33 slots, all valid: the 33rd slot lane.", ("topk-wide", "odd-blocks"), lambda: _wide_topk(33),
         splits=(1, 2, 8)),
    Case("shared-prefix", "Two requests share their first three pages.", ("causal-earlier",), _shared_prefix),
    Case("invalid-rows", "q has 3 rows for 2 requests x q_len 2.", ("invalid",), _inv_shape,
         expected_error="ShapeError"),
    Case("invalid-heads", "24 query heads for Hkv 2.", ("invalid",), _inv_heads, expected_error="HeadCountError"),
    Case("invalid-q-not-bf16", "A query value with bits below bf16.", ("invalid",),
         lambda: _inv_q(np.float32(1 + 2.0**-12)), expected_error="QueryValueError"),
    Case("invalid-q-inf", "An infinite query value.", ("invalid",), lambda: _inv_q(np.float32(np.inf)),
         expected_error="QueryValueError"),
    Case("invalid-seq-negative", "seq_lens[1] = -3.", ("invalid",), lambda: _inv_seq(-3), expected_error="SeqLenError"),
    Case("invalid-seq-beyond-table", "seq_len needing more blocks than the table has.", ("invalid",),
         lambda: _inv_seq(4000), expected_error="SeqLenError"),
    Case("invalid-topk-below", "A top-k id of -5.", ("invalid",), _inv_topk_below, expected_error="TopkIdError"),
    Case("invalid-duplicate", "Valid block 1 selected twice in one slot list.", ("invalid",), _inv_duplicate,
         expected_error="DuplicateSlotError"),
    Case("invalid-page-high", "A valid slot maps to page 912 of a small pool.", ("invalid",), lambda: _inv_page(912),
         expected_error="PageIndexError"),
    Case("invalid-page-minus-one", "A valid slot maps to a -1 table entry.", ("invalid", "minus-one"),
         lambda: _inv_page(-1), expected_error="PageIndexError"),
    Case("invalid-k-global-zero", "k_global_scale = 0.", ("invalid",), lambda: _inv_scale("k_global_scale", 0.0),
         expected_error="ScaleError"),
    Case("invalid-v-global-nan", "v_global_scale = NaN.", ("invalid",),
         lambda: _inv_scale("v_global_scale", float("nan")), expected_error="ScaleError"),
    Case("invalid-layout", "An unknown page layout name.", ("invalid", "layout"),
         lambda: _replace(_inv_base(), layout="paged"), expected_error="ParameterError"),
]


# --- the compacted slot-list domain ----------------------------------------------
# A kernel declaring ``slot_lists="compacted"`` skips every case above that holds other
# lists; these cases are inside that domain (nvfp4_suite.reference.problem.outside_slot_domain),
# so each bug class such a kernel can have keeps cases it runs. ``first-invalid-nan`` has
# none: a compacted list never puts an invalid slot before a valid one.

def compact(p: DecodeProblem) -> DecodeProblem:
    """A copy whose slot lists are compacted, keeping as much of each list as fits.

    Per (KV head, row), with ``n = min(TOPK, self_blk + 1)``: the row's own
    block (so the causal cut is always exercised), then its valid ids in slot
    order, then the other visible blocks from the newest down, the first
    ``n`` of those sorted ascending, then -1."""
    topk = p.topk.copy()
    sb = p.self_blocks
    for h in range(p.num_kv_heads):
        for r in range(p.rows):
            n = int(min(p.TOPK, sb[r] + 1))
            ids = [int(sb[r])] + [int(x) for x in p.topk[h, r] if 0 <= x <= sb[r]] + list(range(int(sb[r]), -1, -1))
            chosen = sorted(list(dict.fromkeys(ids))[:n]) if n > 0 else []
            topk[h, r] = chosen + [-1] * (p.TOPK - n)
    return _replace(p, topk=topk)


def _compacted_splits(n_valid):
    # The row's own block is block n_valid - 1: n_valid slots filled, the rest -1.
    return compact(_base(160 + n_valid, reqs=2, q_len=1, num_kv_heads=1, topk=8,
                         seq_lens=[n_valid * BLK - 10, n_valid * BLK], invalid_fraction=0.0, shuffle_slots=False))


def _compacted_topk_major(hk):
    # Four or five visible blocks for three slots: each KV head keeps its own selection.
    return compact(_base(135 + hk, reqs=3, q_len=2, num_kv_heads=hk, topk=3, seq_lens=[600, 520, 400],
                         invalid_fraction=0.3))


def _compacted_poisoned():
    return poison_unread(compact(_page0_spare()))


def _compacted(case: str, fn, flags=None, comment=None) -> Case:
    """The compacted twin of the case named ``case`` (same flags unless given). It keeps
    the twin's split counts where they are its point (split classes), else runs at 1 and
    3 splits (3: uneven slot shares), to keep the catalog's size down."""
    base = next(c for c in CASES if c.name == case)
    default = Case.__dataclass_fields__["splits"].default
    return Case(f"{case}-compacted", comment or f"{base.comment} Slot lists compacted.",
                tuple(flags or base.flags), fn, splits=(1, 3) if base.splits == default else base.splits)


CASES += [
    _compacted("padding-requests", lambda: compact(_padding_requests(1))),
    _compacted("padding-requests-qlen2", lambda: compact(_padding_requests(2))),
    _compacted("minus-one-slots", lambda: compact(_minus_one_slots(False)),
               comment="Trailing -1 slots after the compacted ids; the table's unused entries point at a "
                       "loud page."),
    _compacted("v-scale-swizzle", lambda: compact(_v_scale_swizzle())),
    _compacted("v-scale-per-token", lambda: compact(_v_scale_per_token())),
    _compacted("stale-tail-1", lambda: compact(_stale_tail([129, 257]))),
    _compacted("stale-tail-64", lambda: compact(_stale_tail([320, 64]))),
    _compacted("stale-tail-127", lambda: compact(_stale_tail([255, 127]))),
    _compacted("e4m3-neg-zero", lambda: compact(_scale_bytes("neg_zero"))),
    _compacted("e4m3-subnormal", lambda: compact(_scale_bytes("subnormal"))),
    _compacted("e4m3-zero", lambda: compact(_scale_bytes("zero"))),
    _compacted("e4m3-max", lambda: compact(_scale_bytes("max"))),
    _compacted("e2m1-every-code", lambda: compact(_every_code())),
    _compacted("scale-groups", lambda: compact(_scale_groups())),
    _compacted("e2m1-ties", lambda: compact(_e2m1_ties())),
    _compacted("head-major-hkv2", lambda: _compacted_topk_major(2),
               comment="Hkv 2, 6 rows, 4 or 5 visible blocks for 3 slots: per-head compacted selections differ."),
    _compacted("head-major-hkv4", lambda: _compacted_topk_major(4),
               comment="Hkv 4, 6 rows, 4 or 5 visible blocks for 3 slots: per-head compacted selections differ."),
    _compacted("head-map-hkv3", lambda: compact(_head_mapping(3))),
    _compacted("head-map-hkv4", lambda: compact(_head_mapping(4))),
    _compacted("qlen3-boundary", lambda: compact(_positions(129, 3))),
    _compacted("qlen4-boundary", lambda: compact(_positions(258, 4))),
    _compacted("causal-earlier", lambda: compact(_causal_earlier())),
    _compacted("splits-5-blocks", lambda: _compacted_splits(5),
               comment="5 compacted blocks (slots 5..7 -1) over 1..8 splits (empty splits from 6 on)."),
    _compacted("splits-1-block", lambda: _compacted_splits(1),
               comment="One compacted block over 1..8 splits: all but one split empty."),
    _compacted("split-rescale", lambda: compact(_split_rescale())),
    _compacted("xcds-rows", lambda: compact(_xcds_rows())),
    _compacted("poisoned-unread", _compacted_poisoned),
    _compacted("layout-token-rows", lambda: compact(_layout_case("token_rows"))),
    _compacted("layout-planar", lambda: compact(_layout_case("planar"))),
    _compacted("large-logits", lambda: compact(_large_logits())),
    _compacted("topk-33", lambda: compact(_wide_topk(33))),
    _compacted("shared-prefix", lambda: compact(_shared_prefix())),
]

# Twins inside the non-negative scale domain (reference/CONTRACT.md section 2.7), for
# the bug classes whose cases hold negative scale bytes a row reads: a kernel that
# reads a scale byte as a magnitude keeps a case of each class it can have.
CASES += [
    Case("e4m3-subnormal-nonneg", "Subnormal scale bytes (m * 2**-9) in K and V, none negative.",
         ("e4m3-special", "fnuz"), lambda: _scale_bytes("subnormal-nonneg")),
    Case("e4m3-max-nonneg", "Scale bytes 0x7E (448) and neighbours, none negative: FNUZ reads them halved.",
         ("fnuz", "e4m3-special"), lambda: _scale_bytes("max-nonneg")),
]


def _sm_scale(seed: int, factor: float) -> DecodeProblem:
    """A problem whose softmax scale is ``factor * 128 ** -0.5`` (``factor`` not a power of two)."""
    return _replace(_base(seed, reqs=2, q_len=2, num_kv_heads=1, topk=3, seq_lens=[300, 200]),
                    sm_scale=factor * D**-0.5)


# Softmax scales other than the usual 128 ** -0.5: a kernel that drops the argument,
# applies it twice or folds it wrongly into another constant fails these.
CASES += [
    Case("sm-scale-small", "sm_scale = 0.3 / sqrt(128): flatter softmax; a kernel using 1 / sqrt(128) is wrong.",
         ("softmax-scale",), lambda: _sm_scale(130, 0.3)),
    Case("sm-scale-large", "sm_scale = 3.3 / sqrt(128): peaked softmax; ignoring or squaring sm_scale shows.",
         ("softmax-scale",), lambda: _sm_scale(131, 3.3)),
]
CASES += [_compacted("sm-scale-large", lambda: compact(_sm_scale(131, 3.3)))]



# --- launch configurations of the compiled kernel ----------------------------
# Every configuration a backend compiles (TOPK width, split count, XCD
# placement, layout) has its own code, and each path of it needs a case that
# takes it (docs/flydsl.md, "Coverage"): the wide widths in both layouts and
# at every split count with a row that has no valid slot, a split whose block
# loop runs more than once, and the narrowest width with an empty row.

def _wide_empty_rows(k: int, layout: str) -> DecodeProblem:
    """TOPK ``k``: a request with 20 valid slots among the ``k`` (3 or more a split
    at 8 splits: the block loop's second trip), a padding request (its row has
    no valid slot, so every split's chunk is empty) and one with 6."""
    return _base(200 + k, reqs=3, q_len=1, num_kv_heads=1, topk=k, seq_lens=[20 * BLK, 0, 5 * BLK + 7],
                 invalid_fraction=0.0, layout=layout)


def _split_loop(layout: str) -> DecodeProblem:
    """TOPK 16 with 16 and 11 valid slots: over 4 splits, 4 and 3 blocks a split,
    so each split's loop over its blocks (two a trip) runs a second trip."""
    return _base(240, reqs=2, q_len=1, num_kv_heads=1, topk=16, seq_lens=[16 * BLK - 5, 11 * BLK - 60],
                 invalid_fraction=0.0, layout=layout)


def _topk_one_empty_row(layout: str) -> DecodeProblem:
    """TOPK 1 with a padding request between two others: a row with no valid slot."""
    return _base(245, reqs=3, q_len=1, num_kv_heads=1, topk=1, seq_lens=[300, 0, 129], layout=layout)


CASES += [
    Case("topk-64-empty-rows", "TOPK 64: requests with 20, 0 (padding) and 6 valid slots.",
         ("topk-wide", "empty-row"), lambda: _wide_empty_rows(64, "token_rows"), splits=(1, 2, 4, 8)),
    Case("topk-64-planar", "The TOPK 64 batch with a padding request, in the planar layout.",
         ("topk-wide", "empty-row", "layout"), lambda: _wide_empty_rows(64, "planar"), splits=(1, 2, 4, 8)),
    Case("topk-33-empty-rows", "TOPK 33: requests with 20, 0 (padding) and 6 valid slots.",
         ("topk-wide", "empty-row"), lambda: _wide_empty_rows(33, "token_rows"), splits=(1, 2, 4, 8)),
    Case("topk-33-planar", "The TOPK 33 batch with a padding request, in the planar layout.",
         ("topk-wide", "empty-row", "layout"), lambda: _wide_empty_rows(33, "planar"), splits=(1, 2, 4, 8)),
    Case("split-loop", "16 and 11 valid slots over 4 splits: 4 and 3 blocks a split, the block loop twice.",
         ("odd-blocks",), lambda: _split_loop("token_rows"), splits=(1, 4)),
    Case("split-loop-planar", "The 4-split block loop batch in the planar layout.",
         ("odd-blocks", "layout"), lambda: _split_loop("planar"), splits=(1, 4)),
    Case("topk-1-empty-row", "TOPK 1 with a padding request: an empty row at the narrowest width.",
         ("empty-row",), lambda: _topk_one_empty_row("token_rows"), splits=(1, 2)),
    Case("topk-1-empty-row-planar", "The TOPK 1 batch with a padding request, in the planar layout.",
         ("empty-row", "layout"), lambda: _topk_one_empty_row("planar"), splits=(1, 2)),
]
