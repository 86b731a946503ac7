"""The failure patterns of the registered mutants on the golden catalog, recorded.

``python -m nvfp4_suite.vectors.signatures --signatures`` runs every detectable
numpy mutant over the catalog and writes ``vectors/signatures.json`` (the
(case, split count) pairs each fails, tied to the manifest's sha256), which a
failing run's cause summary (``nvfp4_suite.vectors.blame``) matches against;
``--check`` compares instead of writing. The mutants live in the suite's
checkout (``tests/mutants.py``), so this is a maintainer's command.
"""

from __future__ import annotations

import argparse
import json
import sys

from .blame import HERE, SIGNATURES, load_signatures, signature_key
from .check import check_golden


def record_signatures(specs: list[str], progress=None) -> dict:
    """Run each mutant ``spec`` over the golden catalog and record the (case,
    splits) pairs it fails; the manifest's sha256 ties the record to the catalog."""
    import hashlib

    from nvfp4_suite import kernels

    from . import bugs, catalog

    whats = {m.spec: m for m in bugs.MUTANTS}
    sha = hashlib.sha256(catalog.MANIFEST.read_bytes()).hexdigest()
    mutants: dict[str, dict] = {}
    for spec in specs:
        if progress:
            progress(f"signature of {spec}")
        backend = kernels.get_backend(spec)
        run = check_golden(backend)
        failing = sorted({signature_key(c.id, f.launch) for c in run.cases for f in c.failures})
        m = whats[spec]
        mutants[spec] = {"bug": m.bug, "what": _what(spec), "failing": [list(x) for x in failing]}
    return {"catalog": sha, "mutants": mutants}


def _what(spec: str) -> str:
    """The mutant's own one-line description (``BUGS[bug]`` of its module, as
    ``tests/mutants.py`` keeps them), else its bug class's."""
    import importlib

    from nvfp4_suite import kernels

    from . import bugs

    mod = importlib.import_module(spec.split(":", 1)[0])
    own = getattr(mod, "BUGS", {}).get(getattr(kernels.get_backend(spec), "bug", None))
    return own or bugs.classes()[{m.spec: m for m in bugs.MUTANTS}[spec].bug].description


def main(argv=None) -> int:
    """``python -m nvfp4_suite.vectors.signatures --signatures [--check] [--mutant SPEC ...]``."""
    from . import bugs

    ap = argparse.ArgumentParser(
        prog="python -m nvfp4_suite.vectors.signatures",
        description="Record (or check) the failure patterns of the numpy mutants on the golden catalog, which "
                    "check reports match against a failing run. Needs the suite's checkout: the mutants live "
                    "in its tests/ folder.")
    ap.add_argument("--signatures", action="store_true", required=True,
                    help=f"run every detectable numpy mutant over the catalog and write {SIGNATURES.name}")
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    ap.add_argument("--mutant", action="append", metavar="SPEC",
                    help="with --check: only this mutant's entry (repeatable)")
    args = ap.parse_args(argv)
    tests = HERE.parent / "tests"
    if not (tests / "mutants.py").exists():
        print(f"the mutants live in the suite's checkout ({tests}/mutants.py); not found", file=sys.stderr)
        return 2
    specs = [m.spec for m in bugs.mutants("numpy") if not m.undetectable]
    if args.mutant:
        bad = [s for s in args.mutant if s not in specs]
        if bad or not args.check:
            print(f"--mutant {bad[0] if bad else args.mutant[0]}: " + (
                "not a detectable numpy mutant (python -m nvfp4_suite.vectors bugs --mutants numpy)"
                if bad else "only with --check (the file records every mutant)"), file=sys.stderr)
            return 2
        specs = args.mutant
    sys.path.insert(0, str(tests))
    rec = record_signatures(specs, progress=lambda s: print(s, file=sys.stderr))
    if args.check:
        old = load_signatures()
        stale = [s for s in specs if old["mutants"].get(s) != rec["mutants"][s]]
        if old["catalog"] != rec["catalog"]:
            stale.insert(0, "the catalog itself")
        print("signatures: up to date" if not stale else "signatures differ from a fresh recording for: "
              + ", ".join(stale) + " (python -m nvfp4_suite.vectors.signatures --signatures)")
        return 0 if not stale else 1
    SIGNATURES.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SIGNATURES} ({len(rec['mutants'])} mutants)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
