"""nvfp4_suite.kernels.flydsl.lanes: the FlyDSL kernel's lane arithmetic, run on numpy.

The kernel traces these very functions, so what holds here holds for the
index math, nibble transpose and dequantisation it is built from. The page
loads and the MFMA operand layouts of both targets
(gfx950: one 16x16x32 step, lane ``(i, g)`` holding k ``8g .. 8g + 7``;
gfx942: two 16x16x16 steps over the lane's first and last four values) are
restated in numpy, and the operands they form are compared with what
``reference`` dequantises.
"""

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvfp4_suite.kernels.flydsl import lanes as L
from nvfp4_suite.kernels.flydsl import targets
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.reference.formats import e2m1_decode, e4m3fn_decode, e4m3fnuz_decode
from nvfp4_suite.reference.paged_cache import LAYOUTS, dequantize_pages, page_bytes

TARGETS = {arch: L.NumpyOps(fnuz=targets.target(arch).fnuz) for arch in targets.ARCHS}
LANE = np.arange(64)
N, G = LANE % 16, LANE // 16


def _elementwise_equal(got, want):
    """Same float32 bits, or NaN in both."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))


def _f32_bits_equal(got, want):
    return bool(_elementwise_equal(got, want).all())


def _bf16_halves(word):
    """The two bf16 of a packed word as float32, low first."""
    w = np.asarray(word, np.uint32)
    return (w << 16).view(np.float32), (w & np.uint32(0xFFFF0000)).view(np.float32)


@pytest.mark.parametrize("target", TARGETS)
def test_k_table_dequantises_every_code_with_every_scale_byte_exactly(target):
    ops = TARGETS[target]
    codes, scales = np.meshgrid(np.arange(16, dtype=np.uint32), np.arange(256, dtype=np.uint32), indexing="ij")
    codes, scales = codes.ravel(), scales.ravel()
    # Eight nibbles per word: codes at even positions, their sign-flipped twin at odd ones.
    twin = codes ^ 8
    word = np.zeros_like(codes)
    for j in range(4):
        word |= (codes << (8 * j)) | (twin << (8 * j + 4))
    out = L.k_bf16x8(ops, word, L.k_table()[scales])
    scale = e4m3fn_decode(scales)
    for w in out:
        lo, hi = _bf16_halves(w)
        assert _f32_bits_equal(lo, (e2m1_decode(codes) * scale).astype(np.float32))
        assert _f32_bits_equal(hi, (e2m1_decode(twin) * scale).astype(np.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_fp8_scale_conversion_is_exact_for_every_byte_and_nan_stays_nan(target):
    ops = TARGETS[target]
    b = np.arange(256, dtype=np.uint32)
    for other in (0x00, 0x80, 0x7F, 0x38):  # the neighbouring byte must not leak in
        for hi in (False, True):
            for pos in (0, 1):
                sh = 8 * (2 * hi + pos)
                word = (np.uint32(other * 0x01010101) & ~np.uint32(0xFF << sh)) | (b << np.uint32(sh))
                pair = L.fp8x2_f16(ops, word, hi)
                half = (pair >> np.uint32(16 * pos)) & np.uint32(0xFFFF)
                got = half.astype(np.uint16).view(np.float16).astype(np.float32)
                assert _f32_bits_equal(got, e4m3fn_decode(b))
    zero = L.fp8x2_f16(ops, np.uint32(0x80), False) & np.uint32(0xFFFF)
    assert zero == 0x8000  # 0x80 is -0, not NaN


def test_gfx942_conversion_without_the_correction_is_caught():
    # A kernel that trusts gfx942's converter reads E4M3FNUZ: half of every value,
    # NaN for 0x80, 240 for 0x7F. The exhaustive comparison above must reject it.
    class Uncorrected(L.NumpyOps):
        def __init__(self):
            super().__init__(fnuz=False)

        def cvt_fp8x2_f32(self, word, hi):
            w = np.asarray(word, np.uint32) >> np.uint32(16 if hi else 0)
            return (e4m3fnuz_decode(w & 0xFF).astype(np.float32),
                    e4m3fnuz_decode((w >> 8) & 0xFF).astype(np.float32))

    b = np.arange(256, dtype=np.uint32)
    got = (L.fp8x2_f16(Uncorrected(), b, False) & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
    want = e4m3fn_decode(b)
    assert not _f32_bits_equal(got, want)
    assert np.isnan(got[0x80]) and got[0x7F] == 240.0 and got[0x38] == want[0x38] / 2


def test_e2m1_pair_code_is_e2m1_times_two_to_minus_14_for_every_byte():
    x = np.arange(256, dtype=np.uint32)
    pair = L.e2m1_pair_code(x)
    for shift, codes in ((0, x & 15), (16, x >> 4)):
        half = ((pair >> np.uint32(shift)) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16)
        assert _f32_bits_equal(half.astype(np.float32) * np.float32(2.0**14), e2m1_decode(codes))


def test_e2m1_pair_code_ignores_bits_above_the_byte():
    x = np.arange(256, dtype=np.uint32)
    assert np.array_equal(L.e2m1_pair_code(x | np.uint32(0xABCDEF00)), L.e2m1_pair_code(x))


@given(st.lists(st.integers(0, 2**32 - 1), min_size=8, max_size=8))
def test_nibble_transpose_puts_token_j_of_dim_t_in_nibble_j_of_word_t(words):
    w = [np.uint32(v) for v in words]
    out = L.nibble_transpose(w)
    for t in range(8):
        for j in range(8):
            assert (int(out[t]) >> (4 * j)) & 15 == (words[j] >> (4 * t)) & 15


@given(st.lists(st.integers(0, 2**32 - 1), min_size=8, max_size=8))
def test_nibble_transpose_twice_is_the_identity(words):
    w = [np.uint32(v) for v in words]
    assert [int(v) for v in L.nibble_transpose(L.nibble_transpose(w))] == words


# --- one page, every lane of every wave -----------------------------------------------------


def _pool(seed: int, hkv: int) -> np.ndarray:
    """Random bytes: every E2M1 code and every scale byte appears, NaN bytes included."""
    return np.random.default_rng(seed).integers(0, 256, size=(2, page_bytes(hkv)), dtype=np.uint8)


def lane_raw(page: np.ndarray, kvh: int, hkv: int, w: int, layout: str = "token_rows") -> list:
    """RAW words of all 64 lanes of wave ``w`` from one page, loaded at
    ``block_offsets`` and assembled like the kernel's ``load_block``."""
    words, halves = page.view("<u4"), page.view("<u2")
    k_data, k_scale, v_data, v_scale = L.block_offsets(kvh, hkv, w, N, G, layout)
    kd = [[words[off + i] for i in range(4)] for off in k_data]
    ks = [halves[off].astype(np.uint32) for off in k_scale]
    return L.assemble_raw(kd, ks, [words[o] for o in v_data], [words[o] for o in v_scale])


def dequant(ops, raw):
    """The kernel's ``dequant_k`` and ``dequant_v`` on numpy: ``kf[st][ks]``, ``vf[dt]``,
    each 4 words (8 bf16) per lane."""
    table = L.k_table()
    kf = L.dequant_k(raw, lambda sb: table[sb], functools.partial(L.k_bf16x8, ops))
    vf = L.dequant_v(raw, functools.partial(L.fp8x2_f16, ops), functools.partial(L.v_bf16x8, ops))
    return kf, vf


def operand(words) -> np.ndarray:
    """float32 ``[64 lanes, 8]``: a lane's 8 bf16 operand values in order."""
    vals = []
    for w in words:
        lo, hi = _bf16_halves(w)
        vals += [lo, hi]
    return np.stack(vals, axis=1)


def seed_k_key(w, i, st_):
    """The key sub-tile ``st`` row ``i`` must hold, from the seed's score layout:
    ``a[4 st + e]`` of lane group ``g`` (MFMA C row ``4g + e``) is key ``key_off = 8g + 4st + e``."""
    return w * 32 + 8 * (i // 4) + 4 * st_ + i % 4


def seed_v_key(w, g, j):
    """The key of V operand element ``j`` in lane group ``g``: P's element ``j`` there is
    ``p[j]``, key ``8g + j`` of the wave (``pk_bf16(p[2j], p[2j + 1])``)."""
    return w * 32 + 8 * g + j


def stored_dim(i, dt):
    """The dim V tile ``dt`` row ``i`` must hold: the one the output stores for it. C row
    ``i = 4g + e`` is ``acc[dt][e]`` of lane group ``g``, which ``store_out`` writes as
    bf16 ``dt % 2`` of word ``out_word(n, g, e) + dt // 2``."""
    return 2 * (L.out_word(0, i // 4, i % 4) + dt // 2) + dt % 2


def tile_mismatches(pool: np.ndarray, hkv: int, target: str, layout: str = "token_rows") -> int:
    """Operand values (K and V, all pages, heads, waves, lanes) that differ from the reference."""
    ops = TARGETS[target]
    k_ref, v_ref = dequantize_pages(pool, layout, hkv)
    bad = 0
    for p in range(pool.shape[0]):
        for kvh in range(hkv):
            for w in range(L.NW):
                kf, vf = dequant(ops, lane_raw(pool[p], kvh, hkv, w, layout))
                for st_ in range(2):
                    keys = seed_k_key(w, N, st_)
                    for ks in range(L.NKS):
                        dims = G[:, None] * 32 + ks * 8 + np.arange(8)
                        want = k_ref[p, kvh][keys[:, None], dims]
                        bad += int((~_elementwise_equal(operand(kf[st_][ks]), want)).sum())
                for dt in range(L.NDT):
                    keys = seed_v_key(w, G[:, None], np.arange(8))
                    want = v_ref[p, kvh][keys, stored_dim(N, dt)[:, None]]
                    bad += int((~_elementwise_equal(operand(vf[dt]), want)).sum())
    return bad


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("hkv", [1, 3])
def test_every_lane_loads_and_dequantises_exactly_its_k_and_v_operands(target, hkv, layout):
    assert tile_mismatches(_pool(hkv, hkv), hkv, target, layout) == 0


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match=r"layout = 'rows', expected one of \('token_rows', 'planar'\)"):
        L.block_offsets(0, 1, 0, 0, 0, "rows")


# --- the XCD placement of workgroups ----------------------------------------------------------

@given(st.integers(1, 300), st.integers(1, 4), st.sampled_from([0, 1, 2, 8]))
def test_xcd_mapping_serves_every_row_once_and_keeps_a_request_on_one_xcd(rows_req, q_len, xcds):
    rows = rows_req * q_len
    gx = L.grid_x(rows, q_len, xcds)
    assert gx >= rows and (xcds == 0 or gx % (xcds * q_len) == 0)
    served = L.workgroup_row(np.arange(gx), q_len, xcds)
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
    got = L.workgroup_row(np.arange(12), 3, 2).tolist()
    assert got == [0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]
    assert L.grid_x(15, 3, 8) == 24 and L.grid_x(15, 3, 0) == 15


def _swap_nibbles(x):
    return ((x & 0x7) << 25) | ((x & 0x8) << 28) | ((x & 0x70) << 5) | ((x & 0x80) << 8)


@pytest.mark.parametrize("name, attr, mutant", [
    ("V scales read linearly", "v_scale_row", lambda w, g, h, n: w * 32 + g * 8 + h * 4 + (n // 2) % 4),
    ("K scale groups off by one", "k_scale_byte", lambda g: (g * 2 + 2) % 8),
    ("nibble order swapped", "e2m1_pair_code", _swap_nibbles),
    ("V token rows off by one", "v_key", lambda w, g, j: (w * 32 + g * 8 + j + 1) % 128),
    ("K keys of sub-tiles swapped", "k_key", lambda w, n, st_: w * 32 + (n // 4) * 8 + (1 - st_) * 4 + n % 4),
])
def test_the_operand_check_catches_a_wrong_lane_map(monkeypatch, name, attr, mutant):
    monkeypatch.setattr(L, attr, mutant)
    for layout in LAYOUTS:
        assert tile_mismatches(_pool(5, 2), 2, "gfx950", layout) > 0, (name, layout)


# --- which elements each MFMA pairs ---------------------------------------------------------


def _pairs(layout: str):
    """For each MFMA step: ``(a_elem[i, k], b_elem[k, n])``, the (lane, element) pairs the
    hardware multiplies for output ``[i, n]``; ``x32``: one step, lane ``(i, k // 8)``
    element ``k % 8``; ``2x16``: steps ``h``, lane ``(i, k // 4)`` element ``4h + k % 4``."""
    steps = []
    if layout == "x32":
        k = np.arange(32)
        steps.append((k // 8, k % 8))
    else:
        k = np.arange(16)
        for h in range(2):
            steps.append((k // 4, 4 * h + k % 4))
    return steps


@pytest.mark.parametrize("layout", ["x32", "2x16"])
def test_score_mfma_pairs_each_keys_dims_with_the_same_query_dims_once(layout):
    # The K operand's dims depend on the lane group g only, the same for every
    # key lane i and score step: one pass per query lane n covers them all.
    for n in range(16):
        dims_k, dims_q = [], []
        for ks in range(L.NKS):
            for g, e in _pairs(layout):
                dims_k += list(g * 32 + ks * 8 + e)      # K operand: lane (i, g), element e
                dims_q += list(_q_dims(n, g, ks, e))      # Q operand: lane (n, g), element e
        assert dims_k == dims_q and sorted(dims_k) == list(range(L.D))
    for w in range(L.NW):
        for st_ in range(2):
            assert np.array_equal(L.k_key(w, np.arange(16), st_), seed_k_key(w, np.arange(16), st_))
            for g in range(4):
                for e in range(4):  # the key the causal mask assumes for C row 4g + e is the key loaded there
                    assert L.k_key(w, 4 * g + e, st_) == w * 32 + L.score_key(g, st_, e)
    # The emulation's seed geometry: lane group g sums its scores a[0..7], keys 8g .. 8g + 7, in order.
    for g in range(4):
        assert [L.score_key(g, i // 4, i % 4) for i in range(8)] == list(range(8 * g, 8 * g + 8))


def _q_dims(n, g, ks, e):
    word = L.q_word(n, g, ks) + e // 2 - n * (L.D // 2)
    return 2 * word + e % 2


@pytest.mark.parametrize("layout", ["x32", "2x16"])
def test_pv_mfma_pairs_each_v_token_with_its_probability_and_stores_the_right_dims(layout):
    # Both operands' keys depend on the wave and the lane group g only, the same
    # for every V lane i and P lane n: one pass per wave covers them all.
    for w in range(L.NW):
        keys_v, keys_p = [], []
        for g, e in _pairs(layout):
            keys_v += list(L.v_key(w, g, e))          # V operand: lane (i, g), element e
            keys_p += list(seed_v_key(w, g, e))       # P operand: lane (n, g) holds p[e]
            assert list(keys_p[-len(e):]) == list(w * 32 + L.score_key(g, e // 4, e % 4))
        assert keys_v == keys_p and sorted(keys_v) == list(range(32 * w, 32 * w + 32))
    # Row m of V tile dt holds dim 2 * v_data_byte(m) + dt (nibble dt of the word loaded).
    loaded = [[2 * L.v_data_byte(m) + dt for dt in range(L.NDT)] for m in range(16)]
    stored = [[stored_dim(m, dt) for dt in range(L.NDT)] for m in range(16)]
    assert loaded == stored and sorted(sum(stored, [])) == list(range(L.D))


@pytest.mark.parametrize("layout", ["x32", "2x16"])
def test_scores_from_lane_operands_equal_q_dot_k(layout):
    hkv, target = 2, ("gfx950" if layout == "x32" else "gfx942")
    problem = random_problem(3, reqs=1, num_kv_heads=hkv, topk=2, seq_lens=[256])
    k_ref, _ = dequantize_pages(problem.pool, "token_rows", hkv)
    q = problem.q[0]
    for page in range(problem.pool.shape[0]):
        for kvh in range(hkv):
            for w in range(L.NW):
                kf, _ = dequant(TARGETS[target], lane_raw(problem.pool[page], kvh, hkv, w))
                for st_ in range(2):
                    s = np.zeros((16, 16))
                    for ks in range(L.NKS):
                        a = operand(kf[st_][ks]).astype(np.float64)     # [lane, 8]
                        b = np.stack([q[kvh * 16 + N, _q_dims(N, G, ks, e)] for e in range(8)], 1)
                        for g, e in _pairs(layout):
                            a_mat = a[np.arange(16)[:, None] + 16 * g[None, :], e[None, :]]
                            b_mat = b[np.arange(16)[None, :] + 16 * g[:, None], e[:, None]]
                            s += a_mat @ b_mat
                    keys = seed_k_key(w, np.arange(16), st_)
                    want = q[kvh * 16:(kvh + 1) * 16].astype(np.float64) @ k_ref[page, kvh][keys].T.astype(np.float64)
                    scale = np.abs(q[kvh * 16:(kvh + 1) * 16]) @ np.abs(k_ref[page, kvh][keys]).T
                    assert np.all(np.abs(s - want.T) <= 1e-12 * scale.T + 1e-300)

