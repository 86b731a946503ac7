"""Backends that each inject one known bug into a correct implementation.

``NumpyKernel()`` is a correct, independent float64 split-KV online-softmax
implementation (exact class, compared with the oracle); ``NumpyKernel(bug)``
has one bug from ``BUGS``. ``SeedKernel(bug)`` is the seed's own arithmetic
(the emulation, seed geometry, compared with the emulation) with one rounding
bug from ``ROUNDING_BUGS``. ``PlacementBug`` and ``XcdRowMask`` get XCD
placement wrong. The suite must pass the correct ones and fail every mutant:
that is what makes a green run mean something. Each mutant is registered,
with its bug class, in ``nvfp4_suite.vectors.catalog.bugs`` as
``nvfp4_suite.kernels.mutants:numpy_<bug>`` (or ``seed_<bug>``, ``PlacementBug``,
``XcdRowMask``). They are package code, so that ``check --backend`` runs them
from any install, and so does a failing check's diagnosis, which runs them on
the failing launches and compares their outputs with the kernel's
(``nvfp4_suite.vectors.engine.blame.diagnose``).
"""

from __future__ import annotations

import functools

import numpy as np

from nvfp4_suite.kernels.flydsl.lanes import grid_x, workgroup_row
from nvfp4_suite.kernels.protocol import Capabilities
from nvfp4_suite.reference import SEED_GEOMETRY, DecodeProblem, bf16_round, e4m3fnuz_decode, emulate
from nvfp4_suite.reference.emulate import _emulate, exp2_f32
from nvfp4_suite.reference.formats import e2m1_decode, e4m3fn_decode
from nvfp4_suite.reference.paged_cache import BLK, D, page_views, unpack_e2m1, unswizzle_v_scales
from nvfp4_suite.reference.problem import HG, NaNScaleByteError

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
    "exact_output_truncated": "output converted to bf16 by truncation (exact class, judged against the oracle)",
    "empty_split_unwritten": "a split that gets no block writes no partial; the merge reads its stale (NaN) workspace",
    "odd_block_dropped": "blocks walked two per loop trip for n // 2 trips: an odd count's last block is never read",
    "topk_first_32": "slots past the 32nd never read (one 32-lane ballot for the slot list)",
    "layout_token_rows": "pages always decoded in the token_rows layout, whatever the problem's layout",
    "v_scale_per_group": "one V scale per 4-token group (the group's first token's) for all four tokens",
    "masked_page_zero": ("a slot a split does not use (masked, or another split's) still loads page 0, the usual "
                         "clamp of a masked page index, and adds its V times p = 0: a NaN scale there leaks"),
    "subnormal_scale_zero": "subnormal E4M3 scale bytes decoded as zero (a flush-to-zero fp8 conversion)",
    "softmax_no_max": "P = exp(score) in float32 without subtracting the running max: large scores overflow",
    "nan_scale_unchecked": "the host side never scans the read pages' scale bytes for E4M3 NaN",
    "unvalidated": "no host-side validation: invalid input runs (or crashes) instead of raising its ProblemError",
    "sm_scale_ignored": "the problem's sm_scale ignored: a hard-coded 128 ** -0.5 instead",
    "sm_scale_twice": "sm_scale applied twice (once folded into the queries, once into the scores)",
}

ROUNDING_BUGS = {
    "output_truncated": "output converted to bf16 by truncation instead of round-to-nearest-even",
    "output_half_away": "output rounded to bf16 half away from zero instead of half to even",
    "p_truncated": "P truncated to bf16 before the PV product instead of rounded to nearest even",
    "exp2_low_2ulp": "every exp2 two float32 ulps low",
    "one_ulp_on_1pct": "a 1-ulp error on 1% of the output elements (spread by a fixed hash, either sign)",
}

# Rounding mutants no conformance check can reject from the outputs it is given:
# the reasons are the registry's (nvfp4_suite.vectors.catalog.bugs), the proofs in tests/test_mutants.py.


def bf16_truncate(x) -> np.ndarray:
    """float32 -> bf16 by dropping the low 16 bits (toward zero)."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def bf16_half_away(x) -> np.ndarray:
    """float32 -> bf16 to nearest, ties away from zero (add half an ulp to the magnitude bits)."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + np.uint32(0x8000)) & np.uint32(0xFFFF0000)).view(np.float32)


def exp2_low_2ulp(x) -> np.ndarray:
    """``exp2_f32`` two float32 ulps low (0 stays 0, a result below 2 ulps becomes 0)."""
    r = np.asarray(exp2_f32(x))
    bits = r.view(np.int32)
    low = np.where((r > 0) & np.isfinite(r), np.maximum(bits - 2, 0), bits).astype(np.int32)
    return low.view(np.float32)


def one_ulp_pattern(shape) -> np.ndarray:
    """int8 of ``shape``: +1 or -1 on a fixed 1% of the elements (multiplicative hash of the
    flat index), else 0. Fixed, so that two runs of a problem agree."""
    h = (np.arange(int(np.prod(shape)), dtype=np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    hit = h < np.uint64(int(0.01 * 2**32))
    sign = np.where((h >> np.uint64(7)) & np.uint64(1), 1, -1)
    return np.where(hit, sign, 0).astype(np.int8).reshape(shape)


def bf16_step(x, steps) -> np.ndarray:
    """bf16 values ``x`` (float32) moved by ``steps`` bf16 ulps (by value; through zero)."""
    bits = (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.int64)
    key = np.where(bits & 0x8000, -(bits & 0x7FFF), bits) + np.asarray(steps, np.int64)
    out = np.where(key < 0, (-key) | 0x8000, key).astype(np.uint32) << np.uint32(16)
    return out.view(np.float32)


class SeedKernel:
    """The seed's arithmetic (``nvfp4_suite.reference.emulate``, seed geometry), optionally with one
    rounding bug from ``ROUNDING_BUGS``."""

    geometry = SEED_GEOMETRY
    capabilities = Capabilities(splits=tuple(range(1, 9)))

    def __init__(self, bug: str | None = None):
        if bug is not None and bug not in ROUNDING_BUGS:
            raise ValueError(f"unknown bug {bug!r}")
        self.bug = bug
        self.name = f"seed-mutant:{bug}" if bug else "seed-correct"

    def available(self) -> str | None:
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        bug = self.bug
        kw = {}
        if bug == "p_truncated":
            kw["p_round"] = bf16_truncate
        if bug == "exp2_low_2ulp":
            kw["exp2"] = exp2_low_2ulp
        pre = _emulate(problem, splits, SEED_GEOMETRY, False, **kw).pre_round
        if bug == "output_truncated":
            return bf16_truncate(pre)
        if bug == "output_half_away":
            return bf16_half_away(pre)
        out = bf16_round(pre)
        if bug == "one_ulp_on_1pct":
            out = bf16_step(out, one_ulp_pattern(out.shape))
        return out


def _dequant(data, scales, bug):
    codes = unpack_e2m1(data)
    if bug == "nibble_swap":
        codes = codes.reshape(codes.shape[:-1] + (-1, 2))[..., ::-1].reshape(codes.shape)
    vals = e2m1_decode(codes).astype(np.float64)
    dec = e4m3fnuz_decode if bug == "fnuz_scales" else e4m3fn_decode
    sc = dec(scales).astype(np.float64)
    if bug == "subnormal_scale_zero":
        sc = np.where((scales & 0x78) == 0, 0.0, sc)
    if bug == "scale_group_shift":
        sc = np.roll(sc, -1, axis=-1)
    return (vals.reshape(vals.shape[:-1] + (8, 16)) * sc[..., None]).reshape(vals.shape)


class NumpyKernel:
    """A float64 split-KV decode kernel, optionally with one bug from ``BUGS``."""

    geometry = None
    capabilities = Capabilities(splits=tuple(range(1, 9)))

    def __init__(self, bug: str | None = None):
        if bug is not None and bug not in BUGS:
            raise ValueError(f"unknown bug {bug!r}")
        self.bug = bug
        self.name = f"mutant:{bug}" if bug else "numpy-correct"
        self._launches = 0

    def available(self) -> str | None:
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1) -> np.ndarray:
        bug = self.bug
        if bug == "nan_scale_unchecked":
            try:
                problem.validate()
            except NaNScaleByteError:
                pass  # the scan is validate's last step: every other check has passed
        elif bug != "unvalidated":
            problem.validate()
        self._launches += 1
        hk, rows, topk = problem.num_kv_heads, problem.rows, problem.TOPK
        views = page_views(problem.pool, "token_rows" if bug == "layout_token_rows" else problem.layout, hk)
        k_all = _dequant(views.k_data, views.k_scale, bug)
        vs = views.v_scale if bug == "v_scale_linear" else unswizzle_v_scales(views.v_scale)
        if bug == "v_scale_per_group":
            vs = np.repeat(vs[:, :, ::4], 4, axis=2)
        v_all = _dequant(views.v_data, vs, bug)
        ids = problem.topk
        if bug == "token_major_topk":
            ids = ids.reshape(rows, hk, topk).transpose(1, 0, 2)
        r = np.arange(rows)
        pos = problem.seq_lens.astype(np.int64)[r // problem.q_len] - problem.q_len + r % problem.q_len
        if bug == "pos_off_by_one":
            pos = np.where(pos >= 0, pos + (r % problem.q_len > 0), pos)
        self_blk = np.where(pos >= 0, pos // BLK, -1)
        sm_scale = {"sm_scale_ignored": D**-0.5, "sm_scale_twice": problem.sm_scale**2}.get(bug or "", problem.sm_scale)
        scale = sm_scale * problem.k_global_scale
        out = np.zeros((rows, problem.H, D))
        bt_flat = problem.block_table.reshape(-1)
        stride = problem.block_table.shape[1]
        for row in range(rows):
            req = row // problem.q_len
            for h in range(problem.H):
                kvh = h % hk if bug == "head_mod" else h // HG
                slots = ids[kvh, row]
                valid = (slots >= 0) & (slots <= self_blk[row])
                if bug == "topk_first_32":
                    valid &= np.arange(topk) < 32
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
                    if bug == "empty_split_unwritten" and splits > 1 and not mine:
                        parts.append((np.nan, np.nan, np.full(D, np.nan)))
                        continue
                    parts.append(self._split(problem, row, h, kvh, mine, valid, slots, pos[row], self_blk[row],
                                             k_all, v_all, bt_flat, stride, req, scale))
                out[row, h] = self._merge(parts, problem.v_global_scale, splits)
        res = bf16_truncate(out.astype(np.float32)) if bug == "exact_output_truncated" else bf16_round(out)
        if bug == "ticket_not_reset" and splits > 1 and self._launches > 1:
            res[:] = np.nan
        return res

    def _split(self, problem, row, h, kvh, mine, valid, slots, pos, self_blk, k_all, v_all, bt_flat, stride,
               req, scale):
        bug = self.bug
        if bug == "odd_block_dropped" and len(mine) % 2:
            mine = mine[:-1]
        m, denom, acc = -np.inf, 0.0, np.zeros(D)
        for s in mine:
            blk = int(slots[s])
            if valid[s]:
                page = int(bt_flat[(req * stride + blk) % bt_flat.size])
                page %= problem.num_pages
                k = k_all[page, kvh]
                v = v_all[page, kvh]
                with np.errstate(invalid="ignore"):  # NaN scales reach here only unvalidated
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
            with np.errstate(invalid="ignore", over="ignore"):
                alpha = np.exp(m - m_use)
                p = np.exp(sc - m_use)
                if bug == "softmax_no_max":
                    alpha, p = 1.0, np.exp(sc.astype(np.float32)).astype(np.float64)
                denom = denom * alpha + p.sum()
                acc = acc * alpha + p @ v
            m = m_new
        if bug == "softmax_no_max" and m != -np.inf:
            m = 0.0  # the partials are unshifted: the merge must not rescale them
        if bug == "masked_page_zero" and len(mine) < len(slots):
            acc = acc + np.zeros(BLK) @ v_all[0, kvh]
        return m, denom, acc

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
    capabilities = Capabilities(splits=(1, 2), xcds=(0, 8))
    # Its tests check what is saved and how it replays, not how small it gets:
    # minimising stops after 3 s (it took about a minute of CI per test).
    shrink_budget_s = 3.0

    def available(self) -> str | None:
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1, xcds: int = 0) -> np.ndarray:
        out = emulate(problem, splits=splits)
        if xcds:
            out[-1] = np.nan
        return out


class XcdRowMask:
    """The seed emulation on FlyDSL's XCD grid (``nvfp4_suite.kernels.flydsl.lanes``) with
    the store masked by the workgroup id (``bx < rows``) instead of by the row the
    workgroup serves. When ``rows`` is not a multiple of ``xcds * q_len`` the grid
    is padded: pad rows served by workgroups below ``rows`` are stored (past the
    output, dropped here) and the real rows served by the workgroups at or above
    ``rows`` are never stored (NaN, as in the harness's NaN-filled buffer)."""

    name = "xcd-row-mask"
    geometry = SEED_GEOMETRY
    capabilities = Capabilities(splits=tuple(range(1, 9)), xcds=(0, 8))

    def available(self) -> str | None:
        return None

    def __call__(self, problem: DecodeProblem, *, splits: int = 1, xcds: int = 0) -> np.ndarray:
        out = emulate(problem, splits=splits)
        bx = np.arange(grid_x(problem.rows, problem.q_len, xcds))
        row = workgroup_row(bx, problem.q_len, xcds)
        out[row[(bx >= problem.rows) & (row < problem.rows)]] = np.nan
        return out


# Every mutant as a ``mutants:<attr>`` backend, the specs ``nvfp4_suite.vectors.catalog.bugs`` registers:
# ``numpy_<bug>`` is ``NumpyKernel(bug)``, ``seed_<bug>`` is ``SeedKernel(bug)``.
for _bug in BUGS:
    globals()[f"numpy_{_bug}"] = functools.partial(NumpyKernel, _bug)
for _bug in ROUNDING_BUGS:
    globals()[f"seed_{_bug}"] = functools.partial(SeedKernel, _bug)
