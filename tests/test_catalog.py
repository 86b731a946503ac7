"""nvfp4_suite.vectors.catalog: the committed catalog regenerates byte for byte, covers
every bug class, and every case passes against the reference backends."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import Capabilities
import nvfp4_suite.reference as R
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.vectors import catalog, cases
from nvfp4_suite.vectors.check import check_golden
from nvfp4_suite.vectors.cli import main
from nvfp4_suite.vectors.io import load_case, save_case


def test_regen_check_reproduces_every_committed_byte(capsys):
    assert _regen(check=True) == 0
    assert "regen --check: OK" in capsys.readouterr().out


def test_manifest_is_well_formed_and_files_match_their_hashes():
    m = catalog.load_manifest()
    assert len(m["cases"]) >= 40
    assert [c["id"] for c in m["cases"]] == list(range(len(m["cases"])))
    for c in m["cases"]:
        load_case(catalog.HERE / c["file"], sha256=c["sha256"])
    size = sum(p.stat().st_size for p in catalog.DATA.glob("*.npz"))
    # Pools and the stored intervals (bf16 bits, three per judgment) dominate; the
    # compacted-domain twins (cases.py, issue 21) took it from 25 MB to 42 MB.
    assert size < 44e6


def test_every_bug_class_has_a_case_and_every_validator_error_an_invalid_case():
    m = catalog.load_manifest()
    used = {f for c in m["cases"] for f in c["flags"]}
    assert used == set(cases.FLAGS)
    from nvfp4_suite import reference

    errors = {n for n in dir(reference) if n.endswith("Error") and n != "ProblemError"}
    invalid = {c["expected_error"] for c in m["cases"] if c["result"] == "invalid"}
    assert errors <= invalid


@pytest.mark.parametrize("name", ["reference", "emulate"])
def test_every_case_passes_against_the_reference_backends(name):
    run = check_golden(kernels.get_backend(name))
    assert run.ok and run.count("PASS") == len(run.cases), run.text()


def test_valid_cases_store_expectations_the_reference_reproduces():
    import nvfp4_suite.reference as R

    m = catalog.load_manifest()
    c = next(c for c in m["cases"] if c["name"] == "splits-5-blocks")
    p, meta, extra = load_case(catalog.HERE / c["file"], sha256=c["sha256"])
    assert np.array_equal(R.from_bf16_bits(extra["expect_seed_s3_nearest"]), R.emulate(p, splits=3))
    assert catalog.verify() == []
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


@pytest.fixture
def tmp_catalog(tmp_path, monkeypatch):
    """A copy of the committed catalog (``tmp_path/vectors``) that ``catalog`` reads and writes."""
    here = tmp_path / "vectors"
    shutil.copytree(catalog.DATA, here / "data")
    shutil.copy(catalog.MANIFEST, here / "manifest.json")
    monkeypatch.setattr(catalog, "HERE", here)
    monkeypatch.setattr(catalog, "DATA", here / "data")
    monkeypatch.setattr(catalog, "MANIFEST", here / "manifest.json")
    return here


def _add(tmp_path, seed=77, name="prod-bug"):
    """Promote a saved random problem (repro meta: splits 2) with ``add``; returns its manifest entry."""
    src = tmp_path / f"repro-{seed}.npz"
    save_case(src, random_problem(seed, reqs=2, topk=3), meta={"launches": [Launch(2, 8).to_json()]})
    catalog.add_case(src, comment="found in production", flags=["split-merge"], name=name)
    return catalog.load_manifest(catalog.MANIFEST)["cases"][-1]


def _regen(check=False):
    return main(["regen"] + (["--check"] if check else []))


def _snapshot(here):
    """Every byte of a catalog folder's manifest and data files; nothing else but
    the package's modules may be there (no leftover build folder)."""
    others = {p.name for p in here.iterdir() if p.suffix != ".py" and p.name != "__pycache__"}
    assert others == {"data", "manifest.json"}
    return {"manifest.json": (here / "manifest.json").read_bytes(),
            **{f"data/{p.name}": p.read_bytes() for p in (here / "data").iterdir()}}


def _assert_consistent(here):
    """Ids 0..n-1 in order, file names from ids and names, meta ids, hashes, no stray files."""
    m = catalog.load_manifest(here / "manifest.json")
    assert [c["id"] for c in m["cases"]] == list(range(len(m["cases"])))
    for c in m["cases"]:
        assert c["file"] == f"data/{c['id']:03d}-{c['name']}.npz"
        _, meta, _ = load_case(here / c["file"], sha256=c["sha256"])
        assert meta["id"] == c["id"]
    assert sorted(f"data/{p.name}" for p in (here / "data").iterdir()) == sorted(c["file"] for c in m["cases"])


def test_add_promotes_a_saved_case_and_regen_check_passes(tmp_catalog, tmp_path):
    new = _add(tmp_path)
    assert new["name"] == "prod-bug" and new["source"] == "added"
    assert {x["splits"] for x in new["launches"]} == {2}
    p, meta, extra = load_case(tmp_catalog / new["file"], sha256=new["sha256"])
    assert "expect_seed_s2_lo" in extra
    before = _snapshot(tmp_catalog)
    assert _regen(check=True) == 0
    assert _snapshot(tmp_catalog) == before


def test_add_then_regen_keeps_every_case_byte_identical(tmp_path):
    # The commands as a user runs them, on a copy of the suite (the catalog
    # lives beside the code that reads it), imported ahead of the installed one.
    root = Path(__file__).resolve().parents[1]
    suite = tmp_path / "site" / "nvfp4_suite"
    for pkg in ("reference", "kernels", "vectors"):
        shutil.copytree(root / pkg, suite / pkg, ignore=shutil.ignore_patterns("__pycache__", ".regen-*"))
    (suite / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    src = tmp_path / "x.npz"
    save_case(src, random_problem(77, reqs=2, topk=3), meta={"launches": [Launch(2, 8).to_json()]})

    def run(*args):
        r = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, env=env,
                           timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    # Never let the commands below write to the checkout's own catalog.
    assert run("-c", "from nvfp4_suite.vectors import catalog; print(catalog.HERE)").strip() == str(suite / "vectors")
    run("-m", "nvfp4_suite.vectors", "add", str(src), "--comment", "c", "--flags", "split-merge")
    before = _snapshot(suite / "vectors")
    run("-m", "nvfp4_suite.vectors", "regen")
    assert _snapshot(suite / "vectors") == before
    _assert_consistent(suite / "vectors")


def test_regen_numbers_added_cases_after_the_builtins(tmp_catalog, tmp_path, monkeypatch):
    first, second = _add(tmp_path, 77, "prod-a"), _add(tmp_path, 78, "prod-b")
    old = {c["name"]: load_case(tmp_catalog / c["file"]) for c in (first, second)}
    monkeypatch.setattr(cases, "CASES", cases.CASES[:2])
    assert _regen() == 0
    _assert_consistent(tmp_catalog)
    m = catalog.load_manifest(tmp_catalog / "manifest.json")
    assert [(c["id"], c["name"], c.get("source")) for c in m["cases"][2:]] == [(2, "prod-a", "added"),
                                                                              (3, "prod-b", "added")]
    for c in m["cases"][2:]:
        p, meta, extra = load_case(tmp_catalog / c["file"], sha256=c["sha256"])
        q, old_meta, old_extra = old[c["name"]]
        assert all(np.array_equal(getattr(p, f), getattr(q, f)) for f in ("q", "pool", "topk", "block_table"))
        assert meta == {**old_meta, "id": c["id"]}
        assert extra.keys() == old_extra.keys() and all(np.array_equal(extra[k], old_extra[k]) for k in extra)
    assert _regen(check=True) == 0


def test_interrupted_regen_leaves_the_catalog_intact(tmp_catalog, tmp_path, monkeypatch, capsys):
    _add(tmp_path)
    before = _snapshot(tmp_catalog)
    written = []

    def save_then_fail(path, *args, **kw):
        if len(written) == 3:
            raise KeyboardInterrupt
        written.append(path)
        return save_case(path, *args, **kw)

    monkeypatch.setattr(catalog, "save_case", save_then_fail)
    assert _regen() == 2
    assert "interrupted: no verdict" in capsys.readouterr().err
    assert len(written) == 3 and all(not p.is_relative_to(tmp_catalog / "data") for p in written)
    assert _snapshot(tmp_catalog) == before
    _assert_consistent(tmp_catalog)


def test_regen_that_fails_to_swap_in_its_data_restores_the_old(tmp_catalog, tmp_path, monkeypatch):
    import os

    _add(tmp_path)
    before = _snapshot(tmp_catalog)
    monkeypatch.setattr(cases, "CASES", cases.CASES[:2])
    replace, calls = os.replace, []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(f"cannot rename {src}")
        replace(src, dst)

    monkeypatch.setattr(catalog.os, "replace", second_fails)
    with pytest.raises(OSError, match="cannot rename"):
        _regen()
    assert _snapshot(tmp_catalog) == before


def test_regen_refuses_a_catalog_whose_added_file_is_gone(tmp_catalog, tmp_path, capsys):
    new = _add(tmp_path)
    (tmp_catalog / new["file"]).unlink()
    before = _snapshot(tmp_catalog)
    assert _regen() == 2
    assert f"{new['file'].split('/')[1]}: no such case file" in capsys.readouterr().err
    assert _snapshot(tmp_catalog) == before


def test_golden_check_runs_each_case_at_every_declared_xcds_placement(monkeypatch):
    class Placed:
        name, geometry = "placed", R.SEED_GEOMETRY
        capabilities = Capabilities(splits=(1,), xcds=(0, 8))

        def __init__(self):
            self.seen = []

        def available(self):
            return None

        def __call__(self, problem, *, splits=1, xcds=0):
            self.seen.append(xcds)
            return R.emulate(problem, splits=splits)

    m = catalog.load_manifest()
    case = next(c for c in m["cases"] if c["result"] == "valid" and {"splits": 1, "xcds": 8, "order": None}
                in c["launches"])
    monkeypatch.setattr(catalog, "load_manifest", lambda **kw: {**m, "cases": [case]})
    b = Placed()
    run = check_golden(b)
    assert run.ok and sorted(b.seen) == [0, 0, 8, 8], run.text()
    (res,) = run.cases
    assert all(x.splits == 1 for x in res.ran) and {x.splits for x, _ in res.skipped} == {2, 3, 8}


def test_golden_check_fails_a_backend_that_zeroes_its_pool(monkeypatch):
    class ZeroPool:
        """Rejects invalid input as the reference does, zeroes the pool either way, returns zeros."""

        name, geometry = "zero-pool", R.SEED_GEOMETRY
        capabilities = Capabilities(splits=(1, 2, 3, 8))

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
    monkeypatch.setattr(catalog, "load_manifest", lambda **kw: {**m, "cases": [valid, invalid]})
    run = check_golden(ZeroPool())
    assert not run.ok and [c.status for c in run.cases] == ["FAIL", "FAIL"]
    assert len(run.cases[0].failures) == len({x["splits"] for x in valid["launches"]})
    assert all("backend modified its input 'pool'" in f.text for c in run.cases for f in c.failures)
