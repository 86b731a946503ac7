"""A numpy model of a third-party MSA NVFP4 decode kernel (a serving stack's Triton kernel).

Deliberately written apart from the suite's reference: it models what such a
kernel does, not what the contract prescribes.

- Slot walk: its top-k selector hands it compacted slot lists, so it walks
  exactly the first ``min(TOPK, ceil(kv_len / 128))`` slots of a row, whatever
  they hold (a -1 there is looked up as block -1 of the table's row).
- Arithmetic: float32 scores; one running max per 128 keys (one block);
  P = exp(s - m) rounded to bf16 before the PV product, l summed from the
  float32 P; splits get the row's slots by slot position (split ``j`` of
  ``S`` takes slots ``[j*c, (j+1)*c)``, ``c = ceil(TOPK / S)``); partials
  merged with their maxima; the output rounded once to bf16.
- Cache: four separate tensors ``[pages, 128, Hkv, 64]`` (codes) and
  ``[pages, 128, Hkv, 8]`` (scales), V scales linear: ``LAYOUT``.

``ThirdPartyKernel(bug)`` injects one bug from ``BUGS``;
``ThirdPartyKernel(slot_lists=..., layout=...)`` misdeclares its domain or layout;
``ThirdPartyKernel(p_bf16=False)`` is the same kernel with P left in float32,
an exact-class kernel; ``ThirdPartyKernel(geometry=...)`` misdeclares its
arithmetic.
"""

from __future__ import annotations

import numpy as np

from nvfp4_suite.kernels.protocol import INTERPRETED_LIMITS, Capabilities, Limits
from nvfp4_suite.reference import EXACT_P_BF16, bf16_round
from nvfp4_suite.reference.formats import e2m1_decode, e4m3fn_decode
from nvfp4_suite.reference.layout import SEPARATE, CacheLayout
from nvfp4_suite.reference.paged_cache import BLK, D, unpack_e2m1, unswizzle_v_scales

# The kernel's cache: four tensors [pages, 128, Hkv, row], linear V scales.
LAYOUT: CacheLayout = SEPARATE

# Its arithmetic, declared: exact but P rounded to bf16 (reference/CONTRACT.md 7.1). One max
# per 128 keys and the split by slot position need no declaration under it (the P term of
# the oracle's interval covers any running max); tests/test_arithmetic.py also judges the
# model against its whole geometry, Geometry(128, 128, True, "position").
GEOMETRY = EXACT_P_BF16

BUGS = {
    "v_scale_swizzled": "V scales read through the seed's swizzle although the cache holds them linear",
    "no_causal_cut": "every key of the row's own block attended (stale bytes past seq_len)",
    "walk_one_short": "walks ceil((kv_len - 1) / 128) slots: a row whose own block just began loses it",
    "merge_no_rescale": "split partials summed without rescaling by exp(m_split - m_top)",
    "head_mod": "query head h reads KV head h % Hkv instead of h // 16",
    "walk_all_slots": "walks all TOPK slots, not the first ceil(kv_len / 128): a trailing -1 is looked up as block -1",
    "nibble_swap": "E2M1 nibble order swapped",
}


_TRUE = object()  # the geometry argument's default: the model's own declaration


class ThirdPartyKernel:
    """The model as a backend: ``slot_lists``, ``layout`` and ``geometry`` are
    what it declares (its true ones by default: ``GEOMETRY``, or the exact class
    with ``p_bf16=False``), ``bug`` one of ``BUGS`` or None."""

    def __init__(self, bug: str | None = None, *, slot_lists: str = "compacted",
                 layout: CacheLayout | None = LAYOUT, p_bf16: bool = True, limits: Limits = INTERPRETED_LIMITS,
                 geometry=_TRUE):
        if bug is not None and bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r}")
        self.bug = bug
        self.p_bf16 = p_bf16
        self.geometry = (GEOMETRY if p_bf16 else None) if geometry is _TRUE else geometry
        self.name = "thirdparty" + ("" if p_bf16 else "-p-f32") + (f":{bug}" if bug else "")
        self.capabilities = Capabilities(splits=(1, 2, 3, 4, 8), targets=("numpy",), slot_lists=slot_lists,
                                         cache_layout=layout, limits=limits)

    def available(self) -> str | None:
        return None

    def __call__(self, problem, *, splits: int = 1, pre_round: bool = False) -> np.ndarray:
        """The output; ``pre_round``: the float32 values before their final bf16
        rounding (for the tests of the tolerance derivation)."""
        problem.validate()  # the host side
        return run(self._tensors(problem), problem, splits, self.bug, self.p_bf16, pre_round)

    @staticmethod
    def _tensors(problem) -> dict:
        # The kernel reads its four tensors; anything else is the adapter's mistake.
        cache = getattr(problem, "cache", None)
        if not cache:
            raise TypeError("thirdparty: no cache tensors received (the backend must declare its cache_layout)")
        return cache


def run(cache: dict, problem, splits: int, bug: str | None = None, p_bf16: bool = True,
        pre_round: bool = False) -> np.ndarray:
    """The kernel on raw arrays: ``cache`` (``k_codes``, ``k_scales``, ``v_codes``,
    ``v_scales``: uint8 ``[pages, 128*Hkv*row]``) and ``problem``'s q, topk,
    block_table, seq_lens, q_len and scalars (attributes); ``p_bf16``: P rounded
    to bf16 before PV (the kernel) or left in float32. Returns bf16 values
    as float32 ``[rows, H, 128]`` (``pre_round``: before that last rounding)."""
    hk = int(problem.num_kv_heads)
    q = np.asarray(problem.q, np.float32)
    rows, H = q.shape[:2]
    topk = np.asarray(problem.topk)
    TOPK = topk.shape[2]
    bt = np.asarray(problem.block_table)
    seq = np.asarray(problem.seq_lens).astype(np.int64)
    q_len = int(problem.q_len)
    pages = cache["k_codes"].shape[0]
    kc = cache["k_codes"].reshape(pages, BLK, hk, D // 2)
    ks = cache["k_scales"].reshape(pages, BLK, hk, 8)
    vc = cache["v_codes"].reshape(pages, BLK, hk, D // 2)
    vs = cache["v_scales"].reshape(pages, BLK, hk, 8)
    scale = np.float32(problem.sm_scale) * np.float32(problem.k_global_scale)
    vg = np.float32(problem.v_global_scale)
    per_split = -(-TOPK // splits)
    out = np.zeros((rows, H, D), np.float32)

    def dequant(codes, scales):
        c = unpack_e2m1(codes)
        if bug == "nibble_swap":
            c = c.reshape(c.shape[:-1] + (-1, 2))[..., ::-1].reshape(c.shape)
        x = e2m1_decode(c).astype(np.float32).reshape(c.shape[:-1] + (8, 16))
        return (x * e4m3fn_decode(scales).astype(np.float32)[..., None]).reshape(c.shape)

    blocks = {}

    def block(page, h):
        """(K, V) float32 [128, 128] of one page and KV head, dequantised once per call."""
        if (page, h) not in blocks:
            vscale = vs[page, :, h]
            if bug == "v_scale_swizzled":
                vscale = unswizzle_v_scales(vscale)
            blocks[page, h] = (dequant(kc[page, :, h], ks[page, :, h]), dequant(vc[page, :, h], vscale))
        return blocks[page, h]

    for r in range(rows):
        req = r // q_len
        pos = int(seq[req]) - q_len + r % q_len
        kv_len = max(pos + 1, 0)
        n = min(TOPK, -(-(kv_len - 1) // BLK) if bug == "walk_one_short" else -(-kv_len // BLK))
        if bug == "walk_all_slots":
            n = TOPK
        for h in range(hk):
            # The 16 query heads that read KV head h (h % Hkv for the head_mod bug).
            heads = [qh for qh in range(H) if (qh % hk if bug == "head_mod" else qh // 16) == h]
            qs = q[r, heads]
            parts = []
            for j in range(splits):
                m = np.full(len(heads), -np.inf, np.float32)
                denom = np.zeros(len(heads), np.float32)
                acc = np.zeros((len(heads), D), np.float32)
                for s in range(j * per_split, min((j + 1) * per_split, n)):
                    blk = int(topk[h, r, s])
                    k, v = block(int(bt[req, blk]), h)
                    sc = (qs @ k.T).astype(np.float32) * scale  # [heads, 128 keys]
                    if bug != "no_causal_cut":
                        keys = blk * BLK + np.arange(BLK)
                        sc = np.where(keys[None, :] < kv_len, sc, np.float32(-np.inf))
                    m_new = np.maximum(m, sc.max(axis=1))
                    safe = np.where(m_new == -np.inf, np.float32(0), m_new)
                    alpha = np.exp(m - safe).astype(np.float32)
                    p = np.exp(sc - safe[:, None]).astype(np.float32)
                    pb = bf16_round(p) if p_bf16 else p
                    denom = (denom * alpha + p.sum(axis=1, dtype=np.float32)).astype(np.float32)
                    acc = (acc * alpha[:, None] + (pb @ v).astype(np.float32)).astype(np.float32)
                    m = m_new
                parts.append((m, denom, acc))
            top = np.max([pm for pm, _, _ in parts], axis=0)
            safe = np.where(top == -np.inf, np.float32(0), top)
            num = np.zeros((len(heads), D), np.float32)
            den = np.zeros(len(heads), np.float32)
            for pm, pl, pacc in parts:
                w = np.ones_like(pm) if bug == "merge_no_rescale" else np.exp(pm - safe).astype(np.float32)
                w = np.where(pm == -np.inf, np.float32(0), w)
                num = (num + pacc * w[:, None]).astype(np.float32)
                den = (den + pl * w).astype(np.float32)
            with np.errstate(invalid="ignore", divide="ignore"):
                res = np.where(den[:, None] > 0, num / den[:, None] * vg, np.float32(0))
            out[r, heads] = res.astype(np.float32)
    return out if pre_round else bf16_round(out)
