"""vectors/engine/signatures.py: the mutants' failure patterns on the catalog, recorded and checked
(``python -m nvfp4_suite.vectors signatures``)."""

import pytest

from nvfp4_suite.vectors.catalog import bugs
from nvfp4_suite.vectors.cli import main
from nvfp4_suite.vectors.engine import blame, signatures
from nvfp4_suite.vectors.engine.blame import Outcome


def test_committed_signatures_cover_every_detectable_numpy_mutant_of_this_catalog():
    import hashlib

    from nvfp4_suite.vectors import catalog

    sig = blame.load_signatures()
    assert sig["catalog"] == hashlib.sha256(catalog.MANIFEST.read_bytes()).hexdigest(), (
        "the catalog changed: python -m nvfp4_suite.vectors signatures")
    assert set(sig["mutants"]) == {m.spec for m in bugs.mutants("numpy") if not m.undetectable}


def test_a_recorded_signature_is_what_the_mutant_does_and_its_own_failures_match_it_first(monkeypatch, capsys):
    # The command as documented, in this process, so that its one catalog run
    # (tens of seconds for a numpy mutant) also gives the failures to match.
    spec = "nvfp4_suite.kernels.mutants:numpy_v_scale_linear"
    runs = []

    def check_golden(backend):
        runs.append(real(backend))
        return runs[-1]

    real = signatures.check_golden
    monkeypatch.setattr(signatures, "check_golden", check_golden)
    assert main(["signatures", "--check", "--mutant", spec]) == 0
    assert "up to date" in capsys.readouterr().out and len(runs) == 1
    outs = [Outcome(c.id, tuple(c.flags), launch, frozenset(), any(f.launch == launch for f in c.failures))
            for c in runs[0].cases for launch in c.ran]
    # It matches itself exactly (another mutant with the same failing launches matches as well).
    best = blame.mutant_matches(outs, blame.load_signatures())
    assert spec in [m.spec for m in best if m.jaccard == 1.0], best[:3]


def test_the_signatures_command_refuses_a_mutant_it_does_not_record(capsys):
    assert main(["signatures", "--check", "--mutant", "nvfp4_suite.kernels.mutants:seed_output_half_away"]) == 2
    assert "not a detectable numpy mutant" in capsys.readouterr().err
    assert main(["signatures", "--mutant", "nvfp4_suite.kernels.mutants:numpy_head_mod"]) == 2


@pytest.mark.thorough
def test_the_committed_signatures_are_byte_identical_on_recording():
    assert main(["signatures", "--check"]) == 0
