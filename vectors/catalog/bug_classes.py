"""The bug-class vocabulary: each class's flag and description, and nothing else.

The data alone, imported by ``nvfp4_suite.vectors.catalog.cases`` (the manifest's
``notes``) and by the registry ``nvfp4_suite.vectors.catalog.bugs`` (which adds the
mutants and looks classes up in the catalog); apart so that the cases and
the catalog do not import the registry that imports them.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class BugClass:
    """A bug class: its flag ``name``, what a case carrying the flag holds
    (``description``), and, for a class no mutant can stand for, why (``no_mutant``)."""

    name: str
    description: str
    no_mutant: str | None = None


CLASSES = (
    BugClass("first-invalid-nan", "leading slots all invalid; an unguarded exp2(-inf - -inf) turns the row NaN"),
    BugClass("empty-row", "rows that see no key (padding requests, no valid slot): exact zeros, never NaN"),
    BugClass("split-merge", "split-KV partials merged, including splits that got no block"),
    BugClass("split-rescale", "split maxima far apart: a merge without exp2(big - top) rescaling is wrong"),
    BugClass("ticket-reset", "split tickets must be reset: the second launch of the same case must match"),
    BugClass("memory-order", "split partials read by the merging split: each must be ordered after its store by a "
                             "release/acquire chain covering both workgroups (the simulator's memory-model check)"),
    BugClass("minus-one", "-1 slots that a kernel must not dereference through the block table"),
    BugClass("v-scale-swizzle", "V scales with a token-dependent pattern: a linear read gives other values"),
    BugClass("v-scale-writer",
             "every token of a 4-token group has its own V scale (a writer keeping one per 4 tokens is wrong)"),
    BugClass("stale-tail", "bytes past seq_len in the last page are loud; attending them moves the output"),
    BugClass("fnuz", "scale bytes whose E4M3FNUZ reading differs (every byte halves; 0x80 is NaN; 0x7F is 240)"),
    BugClass("e4m3-special", "subnormal, zero and largest E4M3 scale bytes in pages that are read"),
    BugClass("e4m3-nan", "an E4M3 NaN scale byte in a read page (invalid input)"),
    BugClass("e2m1-ties", "cache written from values on E2M1 ties (a reciprocal-multiply writer rounds them otherwise)",
             no_mutant="a fact of the cache writer, not of a decode kernel: a kernel reads the stored codes and "
                       "rounds nothing to E2M1, so no decode bug is specific to codes that came from ties (the "
                       "writer's ties-to-even is tested in tests/test_formats.py)"),
    BugClass("nibble-order", "every E2M1 code in both nibbles, so a swapped nibble order shows"),
    BugClass("scale-group", "scale groups with distinct values, so an off-by-one group index shows"),
    BugClass("topk-major",
             "Hkv > 1 and rows != Hkv with distinct per-head selections: token-major top-k reads other slots"),
    BugClass("head-map", "KV heads with very different data: h % Hkv instead of h // 16 reads the wrong head"),
    BugClass("position", "q_len > 1 across a block boundary: an off-by-one position moves the causal cut"),
    BugClass("causal-earlier", "earlier blocks fully visible next to a cut diagonal block"),
    BugClass("xcds", "rows not a multiple of xcds * q_len: FlyDSL's XCD padding must store nothing for pad rows"),
    BugClass("stray-read", "slabs no valid slot reads are poisoned with NaN scale bytes"),
    BugClass("layout", "the same values in the other page layout"),
    BugClass("large-logits", "peaked softmax, P underflowing to subnormal"),
    BugClass("topk-wide", "TOPK 33 or 64: slot lanes past 32 in use"),
    BugClass("odd-blocks", "an odd number of valid blocks: the last loop trip's second block is masked"),
    BugClass("rounding", "thousands of ordinary outputs judged to the bit: a bf16 rounding other than "
                         "nearest-even (of P or of the output), or a stray ulp, shows"),
    BugClass("invalid", "invalid input: the host side must reject it with the named ProblemError"),
    BugClass("softmax-scale", "softmax scales other than 128 ** -0.5, not powers of two: a kernel that ignores "
                              "sm_scale, applies it twice or folds it wrongly is wrong"),
)
