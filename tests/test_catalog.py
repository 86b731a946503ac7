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

import nvfp4_suite.reference as R
from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import Capabilities, Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import cases
from nvfp4_suite.vectors.catalog.casefile import load_case, save_case
from nvfp4_suite.vectors.cli import main
from nvfp4_suite.vectors.engine.check import check_golden

# ``add`` into the built-in catalog (here: a copy of it) is explicit; the default is the project's catalog.
ADD_BUILTIN = ["--catalog", "builtin", "--comment", "c", "--flags", "split-merge"]


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
    # compacted-domain twins (cases.py, issue 21) took it from 25 MB to 42 MB, the
    # non-negative scale twins and the softmax-scale cases (issues 36, 38) to 43.5 MB, the
    # cases that launch every compiled configuration (issue 37) to 47.3 MB.
    assert size < 48e6


def test_every_bug_class_has_a_case_and_every_validator_error_an_invalid_case():
    m = catalog.load_manifest()
    used = {f for c in m["cases"] for f in c["flags"]}
    assert used == set(cases.FLAGS)
    from nvfp4_suite import reference

    errors = {n for n in dir(reference) if n.endswith("Error") and n != "ProblemError"
              and issubclass(getattr(reference, n), reference.ProblemError)}
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
    # Beside the catalog only the package's own data file may be there (the report
    # schema, in the suite's vectors/ folder).
    # The package's subpackages (catalog, cli, engine, simulator) are folders of modules.
    others = {p.name for p in here.iterdir() if p.suffix != ".py" and p.name != "__pycache__"
              and not (p.is_dir() and (p / "__init__.py").is_file())}
    assert {"data", "manifest.json"} <= others <= {"data", "manifest.json", "report.schema.json"}
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
        shutil.copytree(root / pkg, suite / pkg, ignore=shutil.ignore_patterns("__pycache__", ".regen-*", ".lock"))
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
    run("-m", "nvfp4_suite.vectors", "add", str(src), *ADD_BUILTIN)
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


def test_a_regen_interrupted_while_installing_is_finished_by_the_next_regen(tmp_catalog, tmp_path, monkeypatch,
                                                                            capsys):
    # The built-in count drops from 51 to 2: the added case moves from 051 to 002,
    # 49 files go, so an install cut after two renames leaves a mixed data/.
    _add(tmp_path)
    monkeypatch.setattr(cases, "CASES", cases.CASES[:2])
    reference = tmp_path / "reference"
    shutil.copytree(tmp_catalog, reference)
    with monkeypatch.context() as m:  # the same regeneration of the built-in catalog, done whole
        m.setattr(catalog, "HERE", reference)
        catalog.regen_write()
    replace, installed = os.replace, []

    def cut_after_two(src, dst):
        if Path(src).parent.name == "data" and Path(dst).parent == tmp_catalog / "data":
            if len(installed) == 2:
                raise KeyboardInterrupt
            installed.append(dst)
        replace(src, dst)

    monkeypatch.setattr(catalog.os, "replace", cut_after_two)
    assert _regen() == 2
    monkeypatch.setattr(catalog.os, "replace", replace)
    (build,) = tmp_catalog.glob(".regen-*")
    assert len(installed) == 2 and (build / "manifest.json").is_file()
    capsys.readouterr()
    assert _regen() == 0
    assert f"finished the install of an interrupted regen ({build.name}" in capsys.readouterr().err
    assert _snapshot(tmp_catalog) == _snapshot(reference)
    _assert_consistent(tmp_catalog)


def test_leftovers_of_interrupted_commands_are_removed_and_reported(tmp_catalog, tmp_path, monkeypatch, capsys):
    # What a SIGKILL leaves: an unfinished build, a committed build of a manifest
    # that has changed since (never installed over it), temporary files.
    unfinished = tmp_catalog / ".regen-unfinished"
    (unfinished / "data").mkdir(parents=True)
    (unfinished / "data" / "000-x.npz").write_bytes(b"partial")
    stale = tmp_catalog / ".regen-stale"
    shutil.copytree(unfinished, stale)
    (stale / "manifest.json").write_text(catalog.dump({**catalog.load_manifest(), "cases": []}))
    (stale / "previous.sha256").write_text("0" * 64)
    temps = [tmp_catalog / ".manifest.json.k2j4.tmp", tmp_catalog / "data" / ".051-prod-bug.npz.x8q1.tmp"]
    for t in temps:
        t.write_bytes(b"trunc")
    before = _snapshot_data(tmp_catalog)
    src = tmp_path / "x.npz"
    save_case(src, random_problem(77, reqs=2, topk=3))
    assert main(["add", str(src), *ADD_BUILTIN, "--name", "prod-bug"]) == 0
    err = capsys.readouterr().err
    assert "removed .regen-unfinished, the unfinished build folder of an interrupted regen" in err
    assert "removed .regen-stale, the complete build of an interrupted regen from another manifest" in err
    for t in temps:
        assert f"removed {t.relative_to(tmp_catalog)}, the temporary file of an interrupted write" in err
    after = _snapshot(tmp_catalog)
    assert {k: v for k, v in after.items() if "prod-bug" not in k and k != "manifest.json"} == before
    _assert_consistent(tmp_catalog)


def _snapshot_data(here):
    return {f"data/{p.name}": p.read_bytes() for p in (here / "data").iterdir() if not p.name.startswith(".")}


def test_regen_reports_unknown_files_in_data_and_leaves_them(tmp_catalog, tmp_path, monkeypatch, capsys):
    notes = tmp_catalog / "data" / "NOTES.txt"
    notes.write_text("which cases to add next\n")
    wip = tmp_catalog / "data" / "wip-case.npz"
    save_case(wip, random_problem(5))
    kept = {p: p.read_bytes() for p in (notes, wip)}
    monkeypatch.setattr(cases, "CASES", cases.CASES[:2])
    assert _regen() == 0
    err = capsys.readouterr().err
    assert "regen: data/NOTES.txt is not in the manifest: left in place" in err
    assert "regen: data/wip-case.npz is not in the manifest: left in place" in err
    assert {p: p.read_bytes() for p in kept} == kept
    # Only files the previous manifest listed went: the built-ins beyond the first two.
    assert sorted(p.name for p in (tmp_catalog / "data").iterdir()) == sorted(
        [c["file"][5:] for c in catalog.load_manifest()["cases"]] + ["NOTES.txt", "wip-case.npz"])
    assert _regen(check=True) == 1
    assert "regen --check: data/wip-case.npz is not in the manifest" in capsys.readouterr().out


def test_regen_refuses_to_overwrite_a_file_the_manifest_does_not_list(tmp_catalog, tmp_path, monkeypatch, capsys):
    _add(tmp_path)
    # With two built-ins the added case becomes 002-prod-bug.npz: a name a user's file holds.
    mine = tmp_catalog / "data" / "002-prod-bug.npz"
    mine.write_bytes(b"my own notes")
    before = _snapshot(tmp_catalog)
    monkeypatch.setattr(cases, "CASES", cases.CASES[:2])
    assert _regen() == 2
    assert f"{mine}: not in the manifest, and this regeneration writes a file of that name" in capsys.readouterr().err
    assert _snapshot(tmp_catalog) == before


def test_regen_without_a_manifest_refuses_while_data_holds_promoted_cases(tmp_catalog, tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.setattr(cases, "CASES", cases.CASES[:2])
    assert _regen() == 0
    new = _add(tmp_path)
    (tmp_catalog / "manifest.json").unlink()
    before = _snapshot_data(tmp_catalog)
    capsys.readouterr()
    assert _regen() == 2
    err = capsys.readouterr().err
    assert f"manifest.json is missing and {tmp_catalog / 'data'} holds 1 case files a fresh regeneration does not " \
           f"write ({new['file'][5:]})" in err and "nothing was changed" in err
    assert _snapshot_data(tmp_catalog) == before and not list(tmp_catalog.glob(".regen-*"))
    # Without promoted cases in data/ it rebuilds: the built-ins' files are the fresh build's bytes.
    (tmp_catalog / new["file"]).unlink()
    assert _regen() == 0 and len(catalog.load_manifest()["cases"]) == 2


@pytest.mark.parametrize("name, bad", [("/../../../../../outside/escaped", "'/' at position 0"),
                                       ("a\\b", "'\\\\' at position 1"), ("ok..dots", "'..'"),
                                       (".hidden", "start with a letter or digit"), ("x y", "' ' at position 1"),
                                       ("caf\u00e9", "'\u00e9' at position 3"), ("x" * 101, "at most 100")])
def test_add_refuses_a_bad_case_name_naming_the_character(tmp_catalog, tmp_path, name, bad, capsys):
    src = tmp_path / "x.npz"
    save_case(src, random_problem(77, reqs=2, topk=3))
    before = sorted(tmp_path.rglob("*"))
    snap = _snapshot(tmp_catalog)
    assert main(["add", str(src), *ADD_BUILTIN, "--name", name]) == 2
    err = capsys.readouterr().err
    assert f"case name {name!r}" in err and bad in err, err
    assert sorted(tmp_path.rglob("*")) == before and _snapshot(tmp_catalog) == snap


def test_add_never_writes_through_a_symlink_in_data(tmp_catalog, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    next_id = len(catalog.load_manifest(tmp_catalog / "manifest.json")["cases"])
    link = tmp_catalog / "data" / f"{next_id:03d}-prod-bug.npz"
    link.symlink_to(victim)
    src = tmp_path / "x.npz"
    save_case(src, random_problem(77, reqs=2, topk=3))
    manifest = (tmp_catalog / "manifest.json").read_bytes()
    assert main(["add", str(src), *ADD_BUILTIN, "--name", "prod-bug"]) == 2
    assert f"{link}: exists but the manifest does not list it" in capsys.readouterr().err
    assert victim.read_text() == "precious" and link.is_symlink()
    assert (tmp_catalog / "manifest.json").read_bytes() == manifest


def test_a_symlinked_data_folder_is_refused_by_add_and_regen(tmp_catalog, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    shutil.move(tmp_catalog / "data", elsewhere)
    (tmp_catalog / "data").symlink_to(elsewhere)
    before = sorted(p.name for p in elsewhere.iterdir())
    src = tmp_path / "x.npz"
    save_case(src, random_problem(77, reqs=2, topk=3))
    for cmd in (["add", str(src), *ADD_BUILTIN], ["regen"]):
        assert main(cmd) == 2
        assert f"{tmp_catalog / 'data'}: is a symlink; a catalog's data folder must be a folder of its own" \
            in capsys.readouterr().err
    assert sorted(p.name for p in elsewhere.iterdir()) == before and not list(tmp_catalog.glob(".regen-*"))


@pytest.mark.parametrize("file", ["../../outside.npz", "/etc/passwd", "data/../../outside.npz", "data/sub/x.npz"])
def test_a_manifest_file_outside_data_is_refused_naming_the_case_and_path(tmp_catalog, tmp_path, file, capsys):
    # Even with a matching sha256: the path alone is refused, before any file is opened.
    outside = tmp_path / "outside.npz"
    sha = save_case(outside, random_problem(5))
    m = json.loads((tmp_catalog / "manifest.json").read_text())
    m["cases"][3].update(file=file, sha256=sha)
    (tmp_catalog / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(catalog.CatalogError) as e:
        catalog.load_manifest()
    assert f"cases[3] ({m['cases'][3]['name']!r}): file {file!r} is not a .npz file directly inside data/" \
           in str(e.value)
    for cmd in (["verify"], ["regen"], ["check", "--backend", "emulate", "--examples", "0"], ["list"]):
        assert main(cmd) == 2
        assert f"file {file!r} is not a .npz file directly inside data/; refused" in capsys.readouterr().err


def test_a_symlinked_case_file_is_that_cases_error_and_never_followed(tmp_catalog, tmp_path, capsys):
    m = catalog.load_manifest()
    m["cases"] = m["cases"][:2]
    (tmp_catalog / "manifest.json").write_text(catalog.dump(m))
    target = tmp_catalog / m["cases"][0]["file"]
    copy = tmp_path / "elsewhere.npz"
    shutil.move(target, copy)
    target.symlink_to(copy)
    assert catalog.verify() == [f"case 0 {m['cases'][0]['name']}: {target}: is a symlink; "
                                "catalog files are never links"]
    run = check_golden(kernels.get_backend("emulate"), cases=[0, 1])
    assert [c.status for c in run.cases] == ["ERROR", "PASS"] and "is a symlink" in run.cases[0].error


def test_a_catalog_case_with_hostile_metadata_is_that_cases_error_and_the_run_goes_on(tmp_catalog):
    m = json.loads((tmp_catalog / "manifest.json").read_text())
    for i, meta in ((0, {"launches": 5}), (1, "[" * 100000 + "]" * 100000)):
        path = tmp_catalog / m["cases"][i]["file"]
        m["cases"][i]["sha256"] = _with_meta(path, meta)
    (tmp_catalog / "manifest.json").write_text(json.dumps(m))
    run = check_golden(kernels.get_backend("emulate"), cases=[0, 1, 2])
    assert [c.status for c in run.cases] == ["ERROR", "ERROR", "PASS"], run.text()
    assert "field 'meta.meta.launches' is a JSON int, expected list" in run.cases[0].error
    assert "field 'meta' is not JSON this reader accepts (RecursionError)" in run.cases[1].error


def _with_meta(path, meta):
    """Rewrite case file ``path`` with its ``meta`` object replaced by ``meta``
    (a JSON value, or raw JSON text when a str); returns the new sha256."""
    import hashlib
    import io
    import zipfile

    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    top = json.loads(np.lib.format.read_array(io.BytesIO(members["meta.npy"])).tobytes())
    text = json.dumps({**top, "meta": None}).replace("null", meta if isinstance(meta, str) else json.dumps(meta))
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(text.encode(), np.uint8))
    members["meta.npy"] = buf.getvalue()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data in members.items():
            z.writestr(n, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_interrupted_add_leaves_no_file_behind(tmp_catalog, tmp_path, monkeypatch, capsys):
    from nvfp4_suite.vectors.catalog import casefile as case_io

    src = tmp_path / "x.npz"
    save_case(src, random_problem(77, reqs=2, topk=3))
    before = _snapshot(tmp_catalog)
    real_fdopen = os.fdopen

    class HalfWritten:
        """A file that takes half of what it is given, then is interrupted."""

        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            raise KeyboardInterrupt

    def fdopen(fd, mode, *a):
        return HalfWritten(real_fdopen(fd, mode)) if "w" in mode else real_fdopen(fd, mode, *a)

    monkeypatch.setattr(case_io.os, "fdopen", fdopen)
    add = ["add", str(src), *ADD_BUILTIN, "--name", "prod-bug"]
    assert main(add) == 2
    monkeypatch.setattr(case_io.os, "fdopen", real_fdopen)
    assert _snapshot(tmp_catalog) == before and not list((tmp_catalog / "data").glob(".*"))

    def interrupted(*a):
        raise KeyboardInterrupt

    # Interrupted between the data file and the manifest: the data file goes again.
    monkeypatch.setattr(catalog, "write_atomic", interrupted)
    assert main(add) == 2
    assert _snapshot(tmp_catalog) == before
    assert capsys.readouterr().err.count("interrupted: no verdict") == 2


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


# --- project catalogs ---------------------------------------------------------

def _builtin_bytes():
    return catalog.MANIFEST.read_bytes(), sorted(p.name for p in catalog.DATA.iterdir())


def test_a_project_catalog_holds_only_its_promoted_cases_numbered_from_0_and_regenerates_byte_identical(tmp_path):
    before = _builtin_bytes()
    proj = tmp_path / "proj"
    for seed, name in ((77, "one"), (78, "two")):
        src = tmp_path / f"r{seed}.npz"
        save_case(src, random_problem(seed, reqs=2, topk=3), meta={"launches": [Launch(2, 8).to_json()]})
        catalog.add_case(src, comment="c", flags=["split-merge"], name=name, root=proj)
    _assert_consistent(proj)
    m = catalog.load_manifest(proj / "manifest.json")
    assert [c["name"] for c in m["cases"]] == ["one", "two"] and m["notes"] == cases.FLAGS
    assert sorted(p.name for p in proj.iterdir()) == ["data", "manifest.json"]
    snap = _snapshot_folder(proj)
    assert catalog.regen_differences(root=proj) == (2, [])
    assert catalog.verify(root=proj) == []
    assert catalog.regen_write(root=proj)["cases"] == m["cases"]  # no built-in case written into it
    assert _snapshot_folder(proj) == snap
    assert _builtin_bytes() == before


def _snapshot_folder(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_add_creates_no_catalog_over_case_files_a_lost_manifest_listed(tmp_path, capsys):
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "data" / "000-mine.npz").write_bytes(b"a case only a lost manifest listed")
    src = tmp_path / "x.npz"
    save_case(src, random_problem(77, reqs=2, topk=3))
    assert main(["add", str(src), "--comment", "c", "--flags", "split-merge", "--catalog", str(proj)]) == 2
    assert f"{proj / 'manifest.json'} is missing and {proj / 'data'} holds case files (000-mine.npz)" \
        in capsys.readouterr().err
    assert sorted(p.name for p in proj.rglob("*")) == ["000-mine.npz", "data"]


def test_the_default_project_catalog_is_the_env_folder_else_nvfp4_catalog_here_and_never_the_suite(
        tmp_path, monkeypatch):
    monkeypatch.delenv("NVFP4_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert catalog.project_root() == Path("nvfp4-catalog") and catalog.label(catalog.project_root()) == "project"
    assert not catalog.is_builtin(catalog.project_root())
    monkeypatch.setenv("NVFP4_CATALOG", str(tmp_path / "team"))
    assert catalog.project_root() == tmp_path / "team" and catalog.label(tmp_path / "team") == "project"
    assert catalog.label(tmp_path / "other") == str(tmp_path / "other")
    # The built-in catalog only by name or by its own folder, and its cases keep their bare ids.
    assert catalog.resolve("builtin") == catalog.HERE and catalog.resolve("./builtin") == Path("builtin")
    assert catalog.is_builtin(catalog.HERE / ".." / "vectors") and catalog.label(catalog.HERE) is None
    monkeypatch.chdir(catalog.HERE)
    assert catalog.is_builtin(Path(".")) and not catalog.is_builtin(catalog.project_root())


def test_catalog_files_get_the_permissions_of_a_plain_open_for_a_team_to_share(tmp_path):
    old = os.umask(0o022)
    try:
        src = tmp_path / "x.npz"
        save_case(src, random_problem(77, reqs=2, topk=3))
        catalog.add_case(src, comment="c", flags=["split-merge"], root=tmp_path / "proj")
        os.umask(0o027)
        catalog.add_case(src, comment="c", flags=["split-merge"], name="again", root=tmp_path / "proj")
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path / "proj").as_posix(): p.stat().st_mode & 0o777
             for p in (tmp_path / "proj").rglob("*") if p.is_file()}
    assert modes == {"data/000-x.npz": 0o644, "data/001-again.npz": 0o640, "manifest.json": 0o640}
