"""The bug classes: what the golden cases target and the mutants that prove they do.

A bug class is one known way a sparse NVFP4 decode kernel goes wrong. Its name
is the flag that golden cases carry (``vectors/manifest.json``), its
description the manifest's ``notes`` entry (``nvfp4_suite.vectors.catalog.cases`` takes both from
``nvfp4_suite.vectors.catalog.bug_classes``, which holds them apart from this module so that
the cases do not import the registry that looks them up in the catalog). Its
golden cases are the catalog's cases carrying the flag (``golden_cases``). Its
mutants are backends that each inject that one bug into a correct implementation; they are named by backend specs
(``module:attr``, as ``nvfp4_suite.kernels.get_backend`` and ``python -m nvfp4_suite.vectors check
--backend`` take them), so this module imports nothing to list them:

- ``nvfp4_suite.kernels.mutants:<attr>``: numpy kernels, each one bug injected into an
  independent correct implementation;
- ``nvfp4_suite.kernels.triton.decode:<name>``: the Triton kernel built with one of its ``MUTANTS``;
- ``nvfp4_suite.kernels.flydsl.sim.backend:<name>_<arch>``: the FlyDSL kernel compiled with
  one of ``nvfp4_suite.kernels.flydsl.mutants.MUTANTS`` for ``arch``, run by the simulator.

``tests/test_bugs.py`` holds the registry to account: every detectable mutant
fails a golden case carrying its own class's flag, every class has a mutant
or says why it has none, and every mutant defined anywhere is registered.

    python -m nvfp4_suite.vectors bugs                    # each class: description, golden cases, mutants
    python -m nvfp4_suite.vectors bugs --mutants triton   # the Triton mutants' specs, one a line
    python -m nvfp4_suite.vectors bugs --contract         # section 9 of reference/CONTRACT.md
"""

from __future__ import annotations

import argparse
import dataclasses

from nvfp4_suite.vectors.catalog.bug_classes import CLASSES, BugClass

DESCRIPTION = ("Each bug class (a golden-case flag): its description, the golden cases carrying it and its "
               "mutants (backend specs that inject that one bug).")

__all__ = ["CLASSES", "ENGINES", "MUTANTS", "BugClass", "Mutant", "classes", "contract_section", "golden_cases",
           "mutants"]


@dataclasses.dataclass(frozen=True)
class Mutant:
    """A backend with one bug of class ``bug``, loadable as ``spec``;
    ``undetectable``: why no conformance check can reject it, or None."""

    spec: str
    bug: str
    undetectable: str | None = None

    @property
    def engine(self) -> str:
        """``numpy``, ``triton`` or ``flydsl``: what the mutant runs on."""
        return ENGINES[self.spec.split(":", 1)[0]]


ENGINES = {"nvfp4_suite.kernels.mutants": "numpy", "nvfp4_suite.kernels.triton.decode": "triton",
           "nvfp4_suite.kernels.flydsl.sim.backend": "flydsl"}

_HALF_AWAY = (
    "differs from nearest-even only where the float32 value is exactly a bf16 tie; delta > 0 "
    "everywhere (term 4 alone is >= 2**-126), so both neighbours of a tie are in the interval: "
    "a correct kernel whose value lies a hair to either side gives either one. Only the bias "
    "verdict can see it, and only in a problem with >= 32 distinct (row, head) groups of ties; "
    "the golden catalog holds 9 "
    "tie elements in all and the generator none in 1000 problems")
_EXP2_LOW = (
    "a common factor on every weight cancels between the numerator and l; what is left (the "
    "factor varies by < 2**-23 across a binade, and bf16(p) flips only for keys within 4 u of a "
    "bf16 midpoint, all inside the flip-risk window of term 3, whose own part is 8 u) keeps the "
    "unrounded output within delta of the emulation's: every element is inside its interval "
    "by construction, and the flips move outputs by the sign of v, not one way")

MUTANTS = (
    # nvfp4_suite.kernels.mutants: NumpyKernel(bug) as numpy_<bug> (exact class, judged against the oracle)
    Mutant("nvfp4_suite.kernels.mutants:numpy_unguarded_first_invalid", "first-invalid-nan"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_split_empty_nan", "empty-row"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_empty_split_unwritten", "split-merge"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_split_no_rescale", "split-rescale"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_ticket_not_reset", "ticket-reset"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_minus_one_deref", "minus-one"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_v_scale_linear", "v-scale-swizzle"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_v_scale_per_group", "v-scale-writer"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_stale_tail", "stale-tail"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_fnuz_scales", "fnuz"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_subnormal_scale_zero", "e4m3-special"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_nan_scale_unchecked", "e4m3-nan"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_nibble_swap", "nibble-order"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_scale_group_shift", "scale-group"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_token_major_topk", "topk-major"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_head_mod", "head-map"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_pos_off_by_one", "position"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_causal_all_blocks", "causal-earlier"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_masked_page_zero", "stray-read"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_layout_token_rows", "layout"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_softmax_no_max", "large-logits"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_topk_first_32", "topk-wide"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_odd_block_dropped", "odd-blocks"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_exact_output_truncated", "rounding"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_unvalidated", "invalid"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_sm_scale_ignored", "softmax-scale"),
    Mutant("nvfp4_suite.kernels.mutants:numpy_sm_scale_twice", "softmax-scale"),
    # nvfp4_suite.kernels.mutants: SeedKernel(bug) as seed_<bug> (seed geometry, judged against the emulation)
    Mutant("nvfp4_suite.kernels.mutants:seed_output_truncated", "rounding"),
    Mutant("nvfp4_suite.kernels.mutants:seed_output_half_away", "rounding", undetectable=_HALF_AWAY),
    Mutant("nvfp4_suite.kernels.mutants:seed_p_truncated", "rounding"),
    Mutant("nvfp4_suite.kernels.mutants:seed_exp2_low_2ulp", "rounding", undetectable=_EXP2_LOW),
    Mutant("nvfp4_suite.kernels.mutants:seed_one_ulp_on_1pct", "rounding"),
    # nvfp4_suite.kernels.mutants: launch-placement bugs (backends taking ``xcds``)
    Mutant("nvfp4_suite.kernels.mutants:PlacementBug", "xcds"),
    Mutant("nvfp4_suite.kernels.mutants:XcdRowMask", "xcds"),
    # nvfp4_suite.kernels.triton.decode.MUTANTS
    Mutant("nvfp4_suite.kernels.triton.decode:causal", "stale-tail"),
    Mutant("nvfp4_suite.kernels.triton.decode:v_scale_linear", "v-scale-swizzle"),
    Mutant("nvfp4_suite.kernels.triton.decode:minus_one", "minus-one"),
    Mutant("nvfp4_suite.kernels.triton.decode:merge_no_rescale", "split-rescale"),
    # nvfp4_suite.kernels.flydsl.mutants.MUTANTS, each on the target where it is a bug (FNUZ only on gfx942)
    Mutant("nvfp4_suite.kernels.flydsl.sim.backend:causal_off_by_one_gfx950", "stale-tail"),
    Mutant("nvfp4_suite.kernels.flydsl.sim.backend:v_scale_linear_gfx950", "v-scale-swizzle"),
    Mutant("nvfp4_suite.kernels.flydsl.sim.backend:merge_no_rescale_gfx950", "split-rescale"),
    Mutant("nvfp4_suite.kernels.flydsl.sim.backend:ticket_not_reset_gfx950", "ticket-reset"),
    Mutant("nvfp4_suite.kernels.flydsl.sim.backend:fnuz_uncorrected_gfx942", "fnuz"),
    # memory-order bugs, caught by the simulator's memory-model check (gfx942 too: tests/test_flydsl_sim_memorder.py)
    Mutant("nvfp4_suite.kernels.flydsl.sim.backend:ticket_no_wait_gfx950", "memory-order"),
    Mutant("nvfp4_suite.kernels.flydsl.sim.backend:partials_no_sc1_gfx950", "memory-order"),
)


def classes() -> dict[str, BugClass]:
    """Class name (flag) -> ``BugClass``, in catalog order."""
    return {c.name: c for c in CLASSES}


def mutants(engine: str | None = None, bug: str | None = None) -> list[Mutant]:
    """The registered mutants, optionally only those of ``engine`` and/or of class ``bug``."""
    return [m for m in MUTANTS if engine in (None, m.engine) and bug in (None, m.bug)]


def golden_cases(bug: str, manifest: dict | None = None) -> list[dict]:
    """The manifest entries (default: the committed catalog's) of the cases carrying flag ``bug``."""
    if manifest is None:
        from nvfp4_suite.vectors.catalog import load_manifest

        manifest = load_manifest()
    return [c for c in manifest["cases"] if bug in c["flags"]]


def contract_section() -> str:
    """Section 9 of ``reference/CONTRACT.md`` (a markdown string): one table
    row per class with its flag, what its golden cases hold and its mutants,
    generated here so that the document cannot fall behind the registry
    (``tests/test_contract_doc.py`` keeps the two equal)."""
    rows = []
    for c in CLASSES:
        names = []
        for m in mutants(bug=c.name):
            attr = m.spec.split(":", 1)[1]
            names.append(f"{m.engine} `{attr}`" + (" (undetectable)" if m.undetectable else ""))
        rows.append(f"| `{c.name}` | {c.description} | {', '.join(names) or 'none (a writer fact)'} |")
    return "\n".join([
        "## 9. Known bug classes",
        "",
        "A bug class is one known way a kernel goes wrong. Golden cases carry its",
        "name as a manifest flag; its mutants are backends that inject that one",
        "bug, and the suite must reject each detectable one on a case of its own",
        "class. The table is generated from `nvfp4_suite.vectors.catalog.bugs` (`python -m",
        "nvfp4_suite.vectors bugs --contract` prints it; the full mutant specs, the",
        "cases of each class and why an undetectable mutant cannot be caught:",
        "`python -m nvfp4_suite.vectors bugs`).",
        "",
        "| flag | what its golden cases hold | mutants |",
        "| --- | --- | --- |",
        *rows,
        "",
    ])


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``bugs`` (``python -m nvfp4_suite.vectors bugs``)."""
    ap.add_argument("--mutants", metavar="ENGINE", choices=sorted(set(ENGINES.values())) + ["all"],
                    help="print only the specs of this engine's mutants (or all), one a line")
    ap.add_argument("--contract", action="store_true",
                    help="print section 9 of reference/CONTRACT.md (the table of bug classes)")


def run(args) -> int:
    """Print what ``args`` (from ``add_arguments``) asks for; 0."""
    if args.contract:
        print(contract_section(), end="")
        return 0
    if args.mutants:
        for m in mutants(None if args.mutants == "all" else args.mutants):
            print(m.spec)
        return 0
    from nvfp4_suite.vectors.catalog import load_manifest

    manifest = load_manifest()
    for c in CLASSES:
        print(f"{c.name}: {c.description}")
        cases = golden_cases(c.name, manifest)
        print("  cases:   " + (", ".join(f"{g['id']} {g['name']}" for g in cases) or "none"))
        for m in mutants(bug=c.name):
            print(f"  mutant:  {m.spec}" + (f" (undetectable: {m.undetectable})" if m.undetectable else ""))
        if c.no_mutant:
            print(f"  no mutant: {c.no_mutant}")
    return 0
