"""A numpy model of a third-party kernel's arithmetic, written apart from the reference.

The arithmetic of a serving stack's Triton MSA decode kernel (issue 21): float32
throughout in whatever order BLAS sums, except that P is rounded to bf16 (to
nearest even) before the PV product, relative to one running max per
128-key block, the row sum ``l`` taken from P unrounded; a row's slots are
divided among splits by position (split z walks the valid slots among
positions ``[z*ceil(TOPK/S), (z+1)*ceil(TOPK/S))``). It declares
``nvfp4_suite.reference.EXACT_P_BF16`` by default; ``geometry`` lets a test
misdeclare it, ``bug`` injects one of ``BUGS``. ``pre_round=True`` on a call
returns the float32 output before its final bf16 rounding, for the tests of
the tolerance derivation.
"""

from __future__ import annotations

import numpy as np

from nvfp4_suite.kernels.protocol import Capabilities
from nvfp4_suite.reference import EXACT_P_BF16, DecodeProblem, bf16_round
from nvfp4_suite.reference.paged_cache import D, dequantize, page_views, unswizzle_v_scales
from nvfp4_suite.reference.problem import HG

BUGS = {
    "stale_tail": "no causal cut in the row's own block: keys past its position attended",
    "split_no_rescale": "split partials merged without rescaling by exp(m_split - m_top)",
    "head_mod": "query head h reads KV head h % Hkv instead of h // 16",
}


class ThirdPartyKernel:
    """The model; see the module note."""

    capabilities = Capabilities(splits=tuple(range(1, 9)))

    def __init__(self, geometry=EXACT_P_BF16, bug: str | None = None):
        if bug is not None and bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r}")
        self.geometry, self.bug = geometry, bug
        self.name = f"thirdparty:{bug}" if bug else "thirdparty"

    def available(self) -> str | None:
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1, pre_round: bool = False) -> np.ndarray:
        problem.validate()
        hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
        f32 = np.float32
        views = page_views(problem.pool, problem.layout, hk)
        see = problem.key_mask()  # [Hkv, rows, TOPK, 128]
        valid, pages = problem.valid_slots, problem.slot_pages()
        scale = f32(problem.sm_scale * problem.k_global_scale)
        vg = f32(problem.v_global_scale)
        chunk = -(-topk // splits)
        out = np.zeros((rows, problem.H, D), f32)
        for h0 in range(0, problem.H, HG):
            kvh = h0 // HG
            for row in range(rows):
                q = problem.q[row, h0:h0 + HG].astype(f32)
                parts = []
                for z in range(splits):
                    m, l, acc = np.full(HG, -np.inf, f32), np.zeros(HG, f32), np.zeros((HG, D), f32)
                    for s in range(z * chunk, min((z + 1) * chunk, topk)):
                        if not valid[kvh, row, s]:
                            continue
                        pg, src = pages[kvh, row, s], (kvh if self.bug != "head_mod" else h0 % hk)
                        k = dequantize(views.k_data[pg, src], views.k_scale[pg, src])
                        v = dequantize(views.v_data[pg, src], unswizzle_v_scales(views.v_scale[pg, src]))
                        sc = (q @ k.T) * scale
                        if self.bug != "stale_tail":
                            sc = np.where(see[kvh, row, s], sc, f32(-np.inf))
                        m_new = np.maximum(m, sc.max(axis=1))
                        m_use = np.where(m_new == -np.inf, f32(0), m_new)
                        alpha = np.exp(m - m_use)
                        p = np.exp(sc - m_use[:, None])
                        l = l * alpha + p.sum(axis=1, dtype=f32)
                        acc = acc * alpha[:, None] + bf16_round(p) @ v
                        m = m_new
                    parts.append((m, l, acc))
                ms = np.array([p[0] for p in parts])
                top = ms.max(axis=0)
                top = np.where(top == -np.inf, f32(0), top)
                l_all, acc_all = np.zeros(HG, f32), np.zeros((HG, D), f32)
                for m, l, acc in parts:
                    w = np.ones(HG, f32) if self.bug == "split_no_rescale" else np.exp(m - top)
                    l_all = l_all + l * w
                    acc_all = acc_all + acc * w[:, None]
                with np.errstate(divide="ignore", invalid="ignore"):  # rows with l = 0 are zeros
                    out[row, h0:h0 + HG] = np.where(l_all[:, None] > 0, acc_all * (vg / l_all)[:, None], f32(0))
        return out if pre_round else bf16_round(out)
