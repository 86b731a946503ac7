"""Backends that each inject one known bug class into a correct implementation.

``NumpyKernel()`` is a correct, independent float64 split-KV online-softmax
implementation (exact class, compared with the oracle); ``NumpyKernel(bug)``
reproduces one of the contract's known bug classes. The suite must pass the
correct one and fail every mutant: that is what makes a green run mean
something.
"""

from __future__ import annotations

import numpy as np

from reference import SEED_GEOMETRY, DecodeProblem, bf16_round, e4m3fnuz_decode, emulate
from reference.formats import e2m1_decode, e4m3fn_decode
from reference.paged_cache import BLK, D, page_views, unpack_e2m1, unswizzle_v_scales
from reference.problem import HG

BUGS = {
    "unguarded_first_invalid": "slots walked in order incl. invalid ones, exp(-inf - -inf) unguarded",
    "split_empty_nan": "split merge of empty splits without the -inf guard",
    "minus_one_deref": "-1 slot dereferenced as block-table index (reads before the row)",
    "v_scale_linear": "V scales read linearly instead of swizzled",
    "stale_tail": "no causal cut in the own block: stale bytes past seq_len attended",
    "fnuz_scales": "E4M3 scales decoded as FNUZ (gfx942 converter uncorrected)",
    "token_major_topk": "top-k read token-major [rows, Hkv, TOPK] instead of head-major",
    "head_mod": "query head h reads KV head h % Hkv instead of h // 16",
    "pos_off_by_one": "row position off by one for q_len > 1",
    "causal_all_blocks": "causal limit applied to earlier blocks too",
    "split_no_rescale": "split merge without rescaling by exp(m_split - m_top)",
    "ticket_not_reset": "split tickets not reset: second launch leaves rows unwritten",
    "nibble_swap": "E2M1 nibble order swapped",
    "scale_group_shift": "scale group off by one (dims 16g..16g+15 use scale g+1)",
}


def _dequant(data, scales, bug):
    codes = unpack_e2m1(data)
    if bug == "nibble_swap":
        codes = codes.reshape(codes.shape[:-1] + (-1, 2))[..., ::-1].reshape(codes.shape)
    vals = e2m1_decode(codes).astype(np.float64)
    dec = e4m3fnuz_decode if bug == "fnuz_scales" else e4m3fn_decode
    sc = dec(scales).astype(np.float64)
    if bug == "scale_group_shift":
        sc = np.roll(sc, -1, axis=-1)
    return (vals.reshape(vals.shape[:-1] + (8, 16)) * sc[..., None]).reshape(vals.shape)


class NumpyKernel:
    """A float64 split-KV decode kernel, optionally with one bug from ``BUGS``."""

    geometry = None
    splits = tuple(range(1, 9))

    def __init__(self, bug: str | None = None):
        if bug is not None and bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r}")
        self.bug = bug
        self.name = f"mutant:{bug}" if bug else "numpy-correct"
        self._launches = 0

    def available(self) -> str | None:
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        problem.validate()
        self._launches += 1
        bug = self.bug
        hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
        views = page_views(problem.pool, problem.layout, hk)
        k_all = _dequant(views.k_data, views.k_scale, bug)
        vs = views.v_scale if bug == "v_scale_linear" else unswizzle_v_scales(views.v_scale)
        v_all = _dequant(views.v_data, vs, bug)
        ids = problem.topk
        if bug == "token_major_topk":
            ids = ids.reshape(rows, hk, topk).transpose(1, 0, 2)
        r = np.arange(rows)
        pos = problem.seq_lens.astype(np.int64)[r // problem.q_len] - problem.q_len + r % problem.q_len
        if bug == "pos_off_by_one":
            pos = np.where(pos >= 0, pos + (r % problem.q_len > 0), pos)
        self_blk = np.where(pos >= 0, pos // BLK, -1)
        scale = problem.sm_scale * problem.k_global_scale
        out = np.zeros((rows, problem.H, D))
        bt_flat = problem.block_table.reshape(-1)
        stride = problem.block_table.shape[1]
        for row in range(rows):
            req = row // problem.q_len
            for h in range(problem.H):
                kvh = h % hk if bug == "head_mod" else h // HG
                slots = ids[kvh, row]
                valid = (slots >= 0) & (slots <= self_blk[row])
                if bug == "minus_one_deref":
                    valid |= (slots == -1) & (pos[row] >= 0)
                walk = np.arange(topk) if bug == "unguarded_first_invalid" else np.flatnonzero(valid)
                n_valid = int(valid.sum())
                chunk = -(-n_valid // splits)
                parts = []
                for z in range(splits):
                    mine = [s for s in walk if not valid[s] or z * chunk <= int(valid[: s].sum()) < (z + 1) * chunk]
                    if bug != "unguarded_first_invalid" and splits > 1:
                        mine = [s for s in mine if valid[s]]
                    parts.append(self._split(problem, row, h, kvh, mine, valid, slots, pos[row], self_blk[row],
                                             k_all, v_all, bt_flat, stride, req, scale))
                out[row, h] = self._merge(parts, problem.v_global_scale, splits)
        res = bf16_round(out)
        if bug == "ticket_not_reset" and splits > 1 and self._launches > 1:
            res[:] = np.nan
        return res

    def _split(self, problem, row, h, kvh, mine, valid, slots, pos, self_blk, k_all, v_all, bt_flat, stride,
               req, scale):
        bug = self.bug
        m, l, acc = -np.inf, 0.0, np.zeros(D)
        for s in mine:
            blk = int(slots[s])
            if valid[s]:
                page = int(bt_flat[(req * stride + blk) % bt_flat.size])
                page %= problem.num_pages
                k = k_all[page, kvh]
                v = v_all[page, kvh]
                sc = (k @ problem.q[row, h].astype(np.float64)) * scale
                off = np.arange(BLK)
                cut = blk == self_blk or bug == "causal_all_blocks"
                if cut and bug != "stale_tail":
                    sc = np.where(off <= pos % BLK, sc, -np.inf)
            else:
                sc = np.full(BLK, -np.inf)
                v = np.zeros((BLK, D))
            m_new = max(m, sc.max())
            if bug == "unguarded_first_invalid":
                m_use = m_new
            else:
                m_use = m_new if m_new != -np.inf else 0.0
            with np.errstate(invalid="ignore"):
                alpha = np.exp(m - m_use)
                p = np.exp(sc - m_use)
            l = l * alpha + p.sum()
            acc = acc * alpha + p @ v
            m = m_new
        return m, l, acc

    def _merge(self, parts, v_global, splits):
        bug = self.bug
        ms = np.array([p[0] for p in parts])
        top = ms.max()
        if top == -np.inf and bug != "split_empty_nan":
            top = 0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            ws = np.ones(len(parts)) if bug == "split_no_rescale" else np.exp(ms - top)
            l_all = sum(p[1] * w for p, w in zip(parts, ws))
            acc = sum(p[2] * w for p, w in zip(parts, ws))
            if bug == "split_empty_nan":
                return acc * (v_global / l_all)
        return acc * (v_global / l_all) if l_all > 0 else np.zeros(D)


class PlacementBug:
    """The seed emulation behind an ``xcds`` parameter that leaves the last row
    unstored (NaN) whenever ``xcds`` is not 0: a bug only an XCD placement shows."""

    name = "placement-bug"
    geometry = SEED_GEOMETRY
    splits = (1, 2)

    def available(self) -> str | None:
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1, xcds: int = 0) -> np.ndarray:
        out = emulate(problem, splits=splits)
        if xcds:
            out[-1] = np.nan
        return out
