"""Hypothesis strategies for valid decode problems over paged NVFP4 caches.

The structure (layout, Hkv, requests, seq_lens, q_len, TOPK, the mode of each
slot list, the scale-byte and query regimes) is drawn with hypothesis, so a
failure shrinks towards few requests, small TOPK and simple slot lists. The
pool's code bytes are either drawn by hypothesis as an array (a fill byte and
a sparse set of drawn bytes, the way ``hypothesis.extra.numpy.arrays`` draws
large arrays: this shrinks to a constant pool with few distinct bytes) or
come from a numpy generator seeded by one drawn integer (dense random bytes);
the byte source is drawn first and shrinks towards the hypothesis array, so a
minimised repro holds readable bytes whenever the failure allows.
Permutations, ids and scale bytes come from the seeded generator. Each drawn
problem records its case classes with ``hypothesis.event`` so a run shows its
coverage. ``problems_for`` and ``launches_for`` draw only inside a backend's
``nvfp4_suite.kernels.Capabilities``.
"""

from __future__ import annotations

import numpy as np
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nvfp4_suite.kernels.protocol import Capabilities, Launch
from nvfp4_suite.reference import LAYOUTS, DecodeProblem, bf16_round
from nvfp4_suite.reference.examples import paged_block_table
from nvfp4_suite.reference.paged_cache import BLK, D, page_bytes, page_views
from nvfp4_suite.reference.problem import HG

from .cases import loud_tail, poison_unread

SPECIAL_SEQ_LENS = (0, 1, 127, 128, 129, 256, 383, 384, 385)
SLOT_MODES = ("mixed", "all_visible", "none_valid", "invalid_first", "own_block_only", "no_own_block")
# Scale bytes a kernel must decode right: zero, -0, subnormals, the largest finite.
SPECIAL_SCALES = np.array([0x00, 0x80, 0x01, 0x03, 0x07, 0x87, 0x7E, 0xFE], np.uint8)


def _fill_slots(rng, mode: str, nvis: int, topk: int) -> np.ndarray:
    ids = rng.permutation(nvis) if nvis else np.zeros(0, np.int64)
    own = nvis - 1
    if mode == "none_valid" or nvis == 0:
        valid = np.zeros(0, np.int64)
    elif mode == "all_visible":
        valid = ids[:topk]
    elif mode == "own_block_only":
        valid = np.array([own])
    elif mode == "no_own_block":
        valid = ids[ids != own][: rng.integers(0, topk + 1)]
    else:
        valid = ids[: rng.integers(0, min(nvis, topk) + 1)]
    valid = valid[:topk]
    junk_n = topk - len(valid)
    junk = np.where(rng.random(junk_n) < 0.5, -1, nvis + rng.integers(0, 4, junk_n))
    if mode == "invalid_first":
        slots = np.concatenate([junk, valid])
    else:
        slots = rng.permutation(np.concatenate([valid, junk]))
    return slots.astype(np.int32)


@st.composite
def problems(draw, max_reqs: int = 8, max_kv_heads: int = 4, max_topk: int = 64, max_q_len: int = 4,
             layouts=LAYOUTS) -> DecodeProblem:
    """A valid ``DecodeProblem`` in one of ``layouts``; see the module docstring."""
    layout = draw(st.sampled_from(layouts))
    hk = draw(st.integers(1, max_kv_heads))
    reqs = draw(st.integers(1, max_reqs))
    q_len = draw(st.integers(1, max_q_len))
    seq_lens = np.array(
        draw(st.lists(st.one_of(st.sampled_from(SPECIAL_SEQ_LENS), st.integers(0, 1200)),
                      min_size=reqs, max_size=reqs)),
        np.int32,
    )
    topk = draw(st.one_of(st.integers(1, min(16, max_topk)), st.sampled_from([max_topk, 33 if max_topk >= 33 else 1])))
    modes = draw(st.lists(st.sampled_from(SLOT_MODES), min_size=1, max_size=4))
    scale_regime = draw(st.sampled_from(["plain", "special", "wide"]))
    q_std = draw(st.sampled_from([0.5, 2.0, 16.0]))
    k_global = draw(st.sampled_from([0.05, 0.5, 2.0]))
    v_global = draw(st.sampled_from([0.01, 1.0]))
    spare = draw(st.integers(0, 3))
    poison = draw(st.booleans())
    seeded_bytes = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)

    extra_cols = draw(st.integers(0, 2))
    block_table, num_pages = paged_block_table(seq_lens, rng, spare_pages=spare, extra_cols=extra_cols)
    rows = reqs * q_len

    shape = (num_pages, page_bytes(hk))
    if seeded_bytes:
        pool = rng.integers(0, 256, shape, dtype=np.uint8)
    else:
        pool = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, 255), fill=st.integers(0, 255)))
    views = page_views(pool, layout, hk)
    for sc in (views.k_scale, views.v_scale):
        if scale_regime == "wide":
            sc[...] = rng.integers(0x08, 0x60, sc.shape, dtype=np.uint8) | (rng.integers(0, 2, sc.shape, dtype=np.uint8) << 7)
        else:
            sc[...] = rng.integers(0x30, 0x40, sc.shape, dtype=np.uint8)
        if scale_regime == "special":
            hit = rng.random(sc.shape) < 0.1
            sc[hit] = rng.choice(SPECIAL_SCALES, int(hit.sum()))

    q = bf16_round(rng.standard_normal((rows, HG * hk, D)) * q_std)
    ids = np.empty((hk, rows, topk), np.int32)
    pos = seq_lens.astype(np.int64)[np.arange(rows) // q_len] - q_len + np.arange(rows) % q_len
    for h in range(hk):
        for r in range(rows):
            nvis = int(pos[r] // BLK + 1) if pos[r] >= 0 else 0
            ids[h, r] = _fill_slots(rng, modes[(h * rows + r) % len(modes)], nvis, topk)

    problem = DecodeProblem(
        q=q, pool=pool, layout=layout, num_kv_heads=hk, topk=ids, block_table=block_table,
        seq_lens=seq_lens, q_len=q_len, sm_scale=D**-0.5, k_global_scale=k_global,
        v_global_scale=v_global,
    )
    problem = loud_tail(problem)
    if poison:
        problem = poison_unread(problem)
    _record_events(problem, modes)
    return problem


def case_classes(p: DecodeProblem) -> list[str]:
    """The case classes a problem exercises (for coverage events and summaries)."""
    out = [f"layout={p.layout}", f"Hkv={p.num_kv_heads}"]
    if p.num_kv_heads > 1 and p.rows != p.num_kv_heads:
        out.append("Hkv>1, rows!=Hkv")
    if p.q_len > 1:
        out.append("q_len>1")
    if (p.positions < 0).any():
        out.append("padding row")
    valid = p.valid_slots
    if (~valid.any(axis=-1)).any():
        out.append("row with no valid slot")
    if (p.topk == -1).any():
        out.append("-1 slot")
    if ((p.topk > p.self_blocks[None, :, None]) & (p.self_blocks[None, :, None] >= 0)).any():
        out.append("future slot")
    if (~valid[..., 0] & valid.any(axis=-1)).any():
        out.append("first slot invalid, later valid")
    if (valid.sum(axis=-1) % 2 == 1).any():
        out.append("odd valid block count")
    if p.TOPK >= 33:
        out.append("TOPK>=33")
    if ((p.positions >= 0) & ((p.positions % BLK) != BLK - 1)).any():
        out.append("diagonal block cut")
    sc = page_views(p.pool, p.layout, p.num_kv_heads)
    read = p.slot_pages()[valid]
    if len(read) and np.isin(sc.k_scale[read], SPECIAL_SCALES[:6]).any():
        out.append("special scale bytes read")
    if float(np.abs(p.q).max(initial=0)) >= 16:
        out.append("large logits")
    if ((sc.k_scale & 0x7F) == 0x7F).any():
        out.append("NaN-poisoned unread slabs")
    return out


def _record_events(p: DecodeProblem, modes) -> None:
    for c in case_classes(p):
        event(c)
    for m in modes:
        event(f"slot mode {m}")


def launches_for(caps: Capabilities, splits=None):
    """Launch records inside ``caps`` (``splits``: only these split counts)."""
    orders = st.sampled_from(caps.orders) if caps.orders else st.none()
    return st.builds(Launch, splits=st.sampled_from(tuple(splits or caps.splits)),
                     xcds=st.sampled_from(caps.xcds), order=orders)


def record_launch(problem: DecodeProblem, launch: Launch) -> None:
    """Coverage events for a launch's parameters."""
    event(f"splits={launch.splits}")
    if launch.xcds and problem.rows % (launch.xcds * problem.q_len):
        event(f"xcds={launch.xcds}, rows not a multiple of xcds * q_len")


def problems_for(caps: Capabilities):
    """The problem strategy inside ``caps``: its layouts, at most its limits."""
    lim = caps.limits
    return problems(max_reqs=lim.requests, max_kv_heads=lim.kv_heads, max_topk=lim.topk, max_q_len=lim.q_len,
                    layouts=caps.layouts)
