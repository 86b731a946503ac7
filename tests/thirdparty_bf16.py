"""A numpy model of a second third-party NVFP4 decode kernel (issue 36): token-level
top-k sparse paged attention in Triton, with bf16 tensor-core dots.

Deliberately written apart from the suite's reference (its own key walk, its own
operand arithmetic in float32 with ml_dtypes' bf16): it models what such a
kernel does, not what the contract prescribes.

- Operands: each E4M3 block-scale byte is read as a magnitude (its sign bit
  ignored), multiplied in float32 by the float32 global scale ``g``, rounded
  to bf16, and multiplied by the E2M1 value in bf16: K and V enter the dots
  as ``bf16(e2m1 * bf16(fp32(|e4m3| * g)))``. The global scales are applied
  nowhere else (not to the logits, not to the output).
- Keys: the keys a row sees (its valid slots' blocks, cut at its position), in
  slot order, in tiles of ``TILE`` keys with one running max per tile.
- Arithmetic: float32 scores ``q.k`` (bf16 operands, float32 sums) times
  ``fp32(sm_scale * log2 e)``, ``exp2``; P rounded to bf16 before the PV dot,
  the row sum ``l`` taken from the float32 P; float32 accumulation; the
  output ``acc / l`` rounded once to bf16.

Its arithmetic is declared ``GEOMETRY`` (reference/CONTRACT.md section 7.1) and
its input domain ``SCALE_SIGN`` (section 2.7): on a cache with a negative scale
byte that a row reads, it computes something else, by design.
``run(problem, bug)`` injects one bug from ``BUGS``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nvfp4_suite.reference import Exact
from nvfp4_suite.reference.formats import e2m1_decode, e4m3fn_decode
from nvfp4_suite.reference.paged_cache import BLK, D, page_views, unpack_e2m1, unswizzle_v_scales

GEOMETRY = Exact(p_bf16=True, operands="bf16-folded")
SCALE_SIGN = "non-negative"
TILE = 64  # keys per running max
LOG2E = 1.4426950408889634

BUGS = {
    "e2m1_sign_dropped": "the magnitude read applied to the whole value: the E2M1 code's sign bit ignored too",
    "fold_unrounded": "the folded scale fp32(|e4m3| * g) kept in float32, not rounded to bf16",
    "operand_f32": "the operand e2m1 * bf16(scale) kept in float32, not rounded to bf16",
    "global_twice": "the global scales applied again to the logits and the output, on top of the fold",
}


def bf16(x) -> np.ndarray:
    """float32 values rounded to bf16 (to nearest even, by ml_dtypes), as float32."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def operands(codes, scale_bytes, g, bug: str | None = None) -> np.ndarray:
    """float32 ``[..., 128]`` operands of uint8 codes ``[..., 64]`` and linear scale
    bytes ``[..., 8]`` with float32 global scale ``g``, as the kernel forms them."""
    x = e2m1_decode(unpack_e2m1(codes)).astype(np.float32)
    if bug == "e2m1_sign_dropped":
        x = np.abs(x)
    x = x.reshape(x.shape[:-1] + (8, 16))
    scale = e4m3fn_decode(np.asarray(scale_bytes) & 0x7F).astype(np.float32) * np.float32(g)
    if bug != "fold_unrounded":
        scale = bf16(scale)
    prod = (x * scale[..., None]).astype(np.float32)
    return (prod if bug == "operand_f32" else bf16(prod)).reshape(prod.shape[:-2] + (D,))


def run(problem, bug: str | None = None, pre_round: bool = False) -> np.ndarray:
    """The kernel's output for a valid ``problem``: bf16 values as float32
    ``[rows, H, 128]`` (``pre_round``: the float32 values before that rounding);
    ``bug``: one of ``BUGS`` or None."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}")
    hk = int(problem.num_kv_heads)
    kd, ks, vd, vs = page_views(problem.pool, problem.layout, hk)
    kg, vg = np.float32(problem.k_global_scale), np.float32(problem.v_global_scale)
    c = np.float32(np.float32(problem.sm_scale) * np.float32(LOG2E))
    if bug == "global_twice":
        c = np.float32(c * kg)
    rows = problem.q.shape[0]
    out = np.zeros((rows, problem.H, D), np.float32)
    for r in range(rows):
        req = r // int(problem.q_len)
        pos = int(problem.seq_lens[req]) - int(problem.q_len) + r % int(problem.q_len)
        for h in range(hk):
            keys_k, keys_v = [], []
            for blk in problem.topk[h, r]:
                if pos < 0 or not 0 <= blk <= pos // BLK:
                    continue
                page = int(problem.block_table[req, blk])
                n = min(BLK, pos - int(blk) * BLK + 1)
                keys_k.append(operands(kd[page, h, :n], ks[page, h, :n], kg, bug))
                keys_v.append(operands(vd[page, h, :n], unswizzle_v_scales(vs[page, h])[:n], vg, bug))
            if not keys_k:
                continue
            k, v = np.concatenate(keys_k), np.concatenate(keys_v)
            q = problem.q[r, 16 * h:16 * (h + 1)].astype(np.float32)
            m = np.full(16, -np.inf, np.float32)
            denom = np.zeros(16, np.float32)
            acc = np.zeros((16, D), np.float32)
            for t in range(0, len(k), TILE):
                s = (q @ k[t:t + TILE].T).astype(np.float32) * c
                m_new = np.maximum(m, s.max(axis=1))
                alpha = np.exp2(m - m_new).astype(np.float32)
                p = np.exp2(s - m_new[:, None]).astype(np.float32)
                denom = (denom * alpha + p.sum(axis=1, dtype=np.float32)).astype(np.float32)
                acc = (acc * alpha[:, None] + (bf16(p) @ v[t:t + TILE]).astype(np.float32)).astype(np.float32)
                m = m_new
            res = (acc / denom[:, None]).astype(np.float32)
            out[r, 16 * h:16 * (h + 1)] = res * vg if bug == "global_twice" else res
    return out if pre_round else bf16(out)


class Kernel:
    """The model as a backend declaring its arithmetic and scale domain
    (``arithmetic``, ``scale_sign``: as given, to test wrong declarations);
    it picks its own split count, so it declares ``splits=(1,)``."""

    def __init__(self, bug: str | None = None, arithmetic=GEOMETRY, scale_sign: str = SCALE_SIGN):
        from nvfp4_suite.kernels import Capabilities, Limits

        self.name = "bf16-operands" + (f"-{bug}" if bug else "")
        self.bug = bug
        self.geometry = arithmetic
        self.capabilities = Capabilities(splits=(1,), scale_sign=scale_sign, targets=("numpy",),
                                         limits=Limits(requests=3, kv_heads=2, topk=8, q_len=2))

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        problem.validate()  # the host side: invalid input raises its ProblemError
        return run(problem, self.bug)
