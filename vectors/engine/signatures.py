"""The failure patterns of the registered mutants on the golden catalog, recorded.

``python -m nvfp4_suite.vectors signatures`` runs every detectable
numpy mutant over the catalog and writes ``vectors/signatures.json`` (the
(case, split count) pairs each fails, tied to the manifest's sha256), which a
failing run's cause summary (``nvfp4_suite.vectors.engine.blame``) matches against;
``--check`` compares instead of writing (a maintainer's command, after a
change of the catalog or of a mutant).
"""

from __future__ import annotations

import json

from nvfp4_suite.vectors.engine.blame import SIGNATURES, load_signatures, signature_key
from nvfp4_suite.vectors.engine.check import check_golden
from nvfp4_suite.vectors.engine.verdict import SetupError


def record_signatures(specs: list[str], progress=None) -> dict:
    """Run each mutant ``spec`` over the golden catalog and record the (case,
    splits) pairs it fails; the manifest's sha256 ties the record to the catalog."""
    import hashlib

    from nvfp4_suite import kernels
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.catalog import bugs

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
    """The numpy mutant's own one-line description (``nvfp4_suite.kernels.mutants.BUGS``),
    else its bug class's."""
    from nvfp4_suite.kernels import mutants
    from nvfp4_suite.vectors.catalog import bugs

    attr = spec.split(":", 1)[1]
    own = mutants.BUGS.get(attr.removeprefix("numpy_")) if attr.startswith("numpy_") else None
    return own or bugs.classes()[{m.spec: m for m in bugs.MUTANTS}[spec].bug].description


def check_or_write(check: bool, mutant=None, progress=None) -> tuple[int, str]:
    """Record the detectable numpy mutants' signatures (``mutant``: only these
    specs, with ``check`` only) and write ``SIGNATURES``, or with ``check``
    compare with it; ``(exit status, the line to print)``. Raises SetupError
    for a spec that is not a detectable numpy mutant."""
    from nvfp4_suite.vectors.catalog import bugs

    specs = [m.spec for m in bugs.mutants("numpy") if not m.undetectable]
    if mutant:
        bad = [s for s in mutant if s not in specs]
        if bad or not check:
            raise SetupError(f"--mutant {bad[0] if bad else mutant[0]}: " + (
                "not a detectable numpy mutant (python -m nvfp4_suite.vectors bugs --mutants numpy)"
                if bad else "only with --check (the file records every mutant)"))
        specs = list(mutant)
    rec = record_signatures(specs, progress=progress)
    if check:
        old = load_signatures()
        stale = [s for s in specs if old["mutants"].get(s) != rec["mutants"][s]]
        if old["catalog"] != rec["catalog"]:
            stale.insert(0, "the catalog itself")
        return (0, "signatures: up to date") if not stale else (
            1, "signatures differ from a fresh recording for: " + ", ".join(stale)
            + " (python -m nvfp4_suite.vectors signatures)")
    SIGNATURES.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return 0, f"wrote {SIGNATURES} ({len(rec['mutants'])} mutants)"
