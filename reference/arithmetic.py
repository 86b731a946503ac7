"""What a kernel declares about its arithmetic: where it rounds and how it groups.

A backend's ``geometry`` attribute holds one of three declarations (CONTRACT.md
section 7.1 defines each; ``nvfp4_suite.reference.compare.tolerance`` derives
each one's interval):

- ``None``, the exact class: float32 or better in any summation order, P not
  rounded, one bf16 rounding at the end; judged against the exact oracle.
- ``Exact(p_bf16=True)`` (``EXACT_P_BF16``): the exact class except that P is
  rounded to bf16 (to nearest even) before the PV product, its row sum ``l``
  taken from P unrounded, whatever running max P is relative to and however
  the slots are split; judged against the exact oracle with P's rounding as
  one more term. ``Exact(p_bf16=False)`` is the exact class.
- ``Exact(p_bf16, operands)`` with ``operands`` other than ``"exact"``: the
  above, except that K and V enter the dot products as the rounded operands
  ``operands`` names (``OPERANDS``, formulas at ``operand_formula``), the
  global scales folded into them and applied nowhere else; judged against
  the exact oracle computed on those operands.
- ``Geometry``: the whole float32 chain (keys per running max, keys per lane,
  P's rounding, the split rule); judged against the emulation of that
  geometry, to the last bf16 rounding.

``parse_arithmetic`` reads the names ``check --arithmetic`` takes and
``arithmetic_name`` writes them.
"""

from __future__ import annotations

import dataclasses
import re

BLK = 128  # keys per block (``nvfp4_suite.reference.paged_cache.BLK``; kept here to stay a leaf)

# How a row's slots are divided among S splits (CONTRACT.md section 6.4).
SPLIT_RULES = ("rank", "position")


@dataclasses.dataclass(frozen=True)
class Geometry:
    """How a kernel cuts one 128-key block, rounds P and divides slots among splits.

    keys_per_max: keys that share one running max (the seed: a wave's 32);
    128 // keys_per_max independent streams are merged at the end like waves.
    keys_per_lane: keys a lane sums into its partial ``l`` per block, in order
    (the seed: 8); ``keys_per_max // keys_per_lane`` lane partials per head,
    added pairwise at the end. p_bf16: P rounded to bf16 before the PV product.
    split_rule: ``"rank"`` (the seed: the valid slots ranked in slot order,
    cut into chunks of ``ceil(n_valid / S)``) or ``"position"`` (slot positions
    cut into chunks of ``ceil(TOPK / S)``, each split walking its valid slots).
    """

    keys_per_max: int = 32
    keys_per_lane: int = 8
    p_bf16: bool = True
    split_rule: str = "rank"

    def __post_init__(self):
        if BLK % self.keys_per_max or self.keys_per_max % self.keys_per_lane:
            raise ValueError(f"Geometry {self}: 128 must divide into keys_per_max, and that into keys_per_lane")
        lanes = self.keys_per_max // self.keys_per_lane
        if lanes & (lanes - 1):
            raise ValueError(f"Geometry {self}: lanes per head ({lanes}) must be a power of two")
        if self.split_rule not in SPLIT_RULES:
            raise ValueError(f"Geometry {self}: split_rule must be one of {SPLIT_RULES}")

    @property
    def streams(self) -> int:
        """Independent running-max streams per 128-key block (the seed's 4 waves)."""
        return BLK // self.keys_per_max

    @property
    def lanes(self) -> int:
        """Lane partial sums of l per head and stream."""
        return self.keys_per_max // self.keys_per_lane


SEED_GEOMETRY = Geometry(32, 8, True)


# The operands a kernel of the exact class may multiply in its dot products, for K (global
# scale g = fp32(k_global_scale)) and alike for V (g = fp32(v_global_scale)); e2m1 and e4m3 are
# a code's and its block-scale byte's values (CONTRACT.md section 7.1; the oracle forms them in
# nvfp4_suite.reference.arrays.operand_table).
OPERANDS = ("exact", "bf16-folded", "bf16-dequant")
_FORMULAS = {
    # The suite's own: exact products, the global scales applied to the logits and the output.
    "exact": "e2m1 * e4m3",
    # A Triton kernel that folds the global scale into each block scale, rounds that to bf16,
    # and multiplies in bf16 before its tensor-core dots (issue 36's second serving kernel).
    "bf16-folded": "bf16(e2m1 * bf16(fp32(e4m3 * g)))",
    # A dequantise-ahead kernel: the fp32 product (e2m1 * e4m3) * g converted once to bf16
    # (FlashInfer's NVFP4 KV dequantisation to a 16-bit cache, then a bf16 attention kernel).
    "bf16-dequant": "bf16(fp32(fp32(e2m1 * e4m3) * g))",
}


def operand_formula(operands: str) -> str:
    """The value an operand of ``operands`` (one of ``OPERANDS``) enters the dots as:
    ``fp32`` and ``bf16`` round to nearest even (bf16 from the float32 value),
    products are exact before their rounding, ``g`` is the float32 global scale."""
    return _FORMULAS[operands]


@dataclasses.dataclass(frozen=True)
class Exact:
    """The exact class, with P rounded to bf16 before the PV product where
    ``p_bf16``, and K and V entering the dots as ``operands`` (one of
    ``OPERANDS``: ``"exact"``, the exact products with the global scales
    applied to the logits and the output; otherwise the rounded operands of
    ``operand_formula``, the global scales folded in). The module note says
    what is and is not assumed."""

    p_bf16: bool = True
    operands: str = "exact"

    def __post_init__(self):
        if self.operands not in OPERANDS:
            raise ValueError(f"Exact {self}: operands = {self.operands!r}, expected one of {OPERANDS}")


EXACT_P_BF16 = Exact(p_bf16=True)


def p_rounded(arithmetic) -> bool:
    """Whether a kernel of ``arithmetic`` (None, ``Exact`` or ``Geometry``) rounds P to bf16."""
    return arithmetic is not None and arithmetic.p_bf16


def operands_of(arithmetic) -> str:
    """The operands (one of ``OPERANDS``) a kernel of ``arithmetic`` (None, ``Exact``
    or ``Geometry``) multiplies: ``"exact"`` but for an ``Exact`` that declares others
    (an emulated ``Geometry`` takes the exact products, CONTRACT.md section 6)."""
    return arithmetic.operands if isinstance(arithmetic, Exact) else "exact"


def arithmetic_name(arithmetic) -> str:
    """The name ``parse_arithmetic`` reads back: ``exact``, ``exact-p-bf16`` (either
    followed by ``,operands=NAME`` for operands other than ``exact``), ``seed`` or
    ``geometry:KxL[,p-bf16][,position]``."""
    if arithmetic is None:
        return "exact"
    if isinstance(arithmetic, Exact):
        return (("exact-p-bf16" if arithmetic.p_bf16 else "exact")
                + ("" if arithmetic.operands == "exact" else f",operands={arithmetic.operands}"))
    if arithmetic == SEED_GEOMETRY:
        return "seed"
    g = arithmetic
    return (f"geometry:{g.keys_per_max}x{g.keys_per_lane}" + (",p-bf16" if g.p_bf16 else "")
            + (",position" if g.split_rule == "position" else ""))


_GEOMETRY = re.compile(r"geometry:(\d+)x(\d+)((?:,(?:p-bf16|position))*)$")
# "exact" operands are the default and have no suffix: one name per declaration.
_EXACT = re.compile(r"(exact|exact-p-bf16),operands=(" + "|".join(re.escape(o) for o in OPERANDS[1:]) + ")$")


def parse_arithmetic(text: str):
    """The declaration ``text`` names (see ``arithmetic_name``): None, an ``Exact``
    or a ``Geometry``. Raises ValueError naming the text and the accepted forms."""
    if text == "exact":
        return None
    if text == "exact-p-bf16":
        return EXACT_P_BF16
    if text == "seed":
        return SEED_GEOMETRY
    m = _EXACT.match(text)
    if m:
        return Exact(m.group(1) == "exact-p-bf16", m.group(2))
    m = _GEOMETRY.match(text)
    if m:
        opts = [o for o in m.group(3).split(",") if o]
        if len(set(opts)) == len(opts):
            return Geometry(int(m.group(1)), int(m.group(2)), "p-bf16" in opts,
                            "position" if "position" in opts else "rank")
    raise ValueError(f"arithmetic {text!r}: expected exact, exact-p-bf16, exact[-p-bf16],operands=OPERANDS, "
                     f"seed or geometry:KxL[,p-bf16][,position] (OPERANDS one of {', '.join(OPERANDS[1:])}; "
                     "K keys per running max, L keys per lane)")
