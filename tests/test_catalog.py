"""vectors.catalog: the committed catalog regenerates byte for byte, covers
every bug class, and every case passes against the reference backends."""

import json
import shutil

import numpy as np
import pytest

import kernels
import reference as R
from vectors import catalog, cases
from vectors.io import load_case


def test_regen_check_reproduces_every_committed_byte(capsys):
    assert catalog.cmd_regen(type("A", (), {"check": True})()) == 0
    assert "regen --check: OK" in capsys.readouterr().out


def test_manifest_is_well_formed_and_files_match_their_hashes():
    m = catalog.load_manifest()
    assert len(m["cases"]) >= 40
    assert [c["id"] for c in m["cases"]] == list(range(len(m["cases"])))
    for c in m["cases"]:
        load_case(catalog.HERE / c["file"], sha256=c["sha256"])
    size = sum(p.stat().st_size for p in catalog.DATA.glob("*.npz"))
    assert size < 20e6


def test_every_bug_class_has_a_case_and_every_validator_error_an_invalid_case():
    m = catalog.load_manifest()
    used = {f for c in m["cases"] for f in c["flags"]}
    assert used == set(cases.FLAGS)
    import reference

    errors = {n for n in dir(reference) if n.endswith("Error") and n != "ProblemError"}
    invalid = {c["expected_error"] for c in m["cases"] if c["result"] == "invalid"}
    assert errors <= invalid


@pytest.mark.parametrize("name", ["reference", "emulate"])
def test_every_case_passes_against_the_reference_backends(name):
    ok, lines = catalog.check_all(kernels.get_backend(name))
    assert ok, "\n".join(lines)


def test_valid_cases_store_expectations_the_reference_reproduces():
    import reference as R

    m = catalog.load_manifest()
    c = next(c for c in m["cases"] if c["name"] == "splits-5-blocks")
    p, meta, extra = load_case(catalog.HERE / c["file"], sha256=c["sha256"])
    assert np.array_equal(extra["out_emulated_s3"], R.emulate(p, splits=3))
    assert np.array_equal(extra["out_exact"], R.sparse_decode(p)[0].astype(np.float32))


def test_malformed_manifest_names_the_field(tmp_path):
    m = json.loads(catalog.MANIFEST.read_text())
    del m["cases"][3]["sha256"]
    bad = tmp_path / "manifest.json"
    bad.write_text(json.dumps(m))
    with pytest.raises(catalog.CaseFileError, match=r"cases\[3\] field 'sha256' missing"):
        catalog.load_manifest(bad)
    m = json.loads(catalog.MANIFEST.read_text())
    m["cases"][0]["flags"] = ["no-such-flag"]
    bad.write_text(json.dumps(m))
    with pytest.raises(catalog.CaseFileError, match="not in notes"):
        catalog.load_manifest(bad)


def test_add_promotes_a_saved_case_and_regen_keeps_it(tmp_path, monkeypatch):
    here = tmp_path / "vectors"
    shutil.copytree(catalog.HERE / "data", here / "data")
    shutil.copy(catalog.MANIFEST, here / "manifest.json")
    monkeypatch.setattr(catalog, "HERE", here)
    monkeypatch.setattr(catalog, "DATA", here / "data")
    monkeypatch.setattr(catalog, "MANIFEST", here / "manifest.json")
    from reference.examples import random_problem
    from vectors.io import save_case

    src = tmp_path / "repro.npz"
    save_case(src, random_problem(77, reqs=2, topk=3), meta={"splits": 2})
    args = type("A", (), {"file": str(src), "comment": "found in production", "flags": ["split-merge"],
                          "name": "prod-bug", "splits": None})()
    assert catalog.cmd_add(args) == 0
    m = catalog.load_manifest(here / "manifest.json")
    new = m["cases"][-1]
    assert new["name"] == "prod-bug" and new["source"] == "added" and new["splits"] == [2]
    p, meta, extra = load_case(here / new["file"], sha256=new["sha256"])
    assert "out_emulated_s2" in extra
    assert catalog.cmd_regen(type("A", (), {"check": True})()) == 0


def test_check_all_runs_each_case_at_every_xcds_placement_of_the_manifest(monkeypatch):
    class Placed:
        name, geometry, splits = "placed", R.SEED_GEOMETRY, (1,)

        def __init__(self):
            self.seen = []

        def available(self):
            return None

        def __call__(self, problem, *, splits=1, xcds=0):
            self.seen.append(xcds)
            return R.emulate(problem, splits=splits)

    m = catalog.load_manifest()
    case = next(c for c in m["cases"] if c["result"] == "valid" and 1 in c["splits"])
    monkeypatch.setattr(catalog, "load_manifest", lambda: {**m, "cases": [case]})
    b = Placed()
    ok, lines = catalog.check_all(b)
    assert ok and sorted(b.seen) == sorted(case["xcds"] * 2) and len(case["xcds"]) > 1
    assert f"xcds {case['xcds']}" in lines[1]


def test_check_all_fails_a_backend_that_zeroes_its_pool(monkeypatch):
    class ZeroPool:
        """Rejects invalid input as the reference does, zeroes the pool either way, returns zeros."""

        name, geometry, splits = "zero-pool", R.SEED_GEOMETRY, (1, 2, 3, 8)

        def available(self):
            return None

        def __call__(self, problem, *, splits=1):
            try:
                problem.validate()
            finally:
                problem.pool[...] = 0
            return np.zeros((problem.rows, problem.H, 128), np.float32)

    m = catalog.load_manifest()
    # Expectations computed from the zeroed pool would be zeros: what this backend returns.
    valid = next(c for c in m["cases"] if c["name"] == "stale-tail-1")
    invalid = next(c for c in m["cases"] if c["result"] == "invalid")
    monkeypatch.setattr(catalog, "load_manifest", lambda: {**m, "cases": [valid, invalid]})
    ok, lines = catalog.check_all(ZeroPool())
    text = "\n".join(lines)
    assert not ok
    assert f"{valid['name']:<28} FAIL" in text and f"{invalid['name']:<28} FAIL" in text
    assert text.count("backend modified its input 'pool'") == len(valid["splits"]) + 1, text
