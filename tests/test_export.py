"""nvfp4_suite.vectors.catalog.export: the catalog in a declared layout, and dumps back into problems."""

import json
import subprocess
import sys

import numpy as np
import pytest

from nvfp4_suite.reference import layout as L
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import export as E
from nvfp4_suite.vectors.catalog.casefile import load_case
from nvfp4_suite.vectors.cli import main

LAYOUT_TOML = L.SEPARATE.to_toml()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exp")
    (folder / "separate.toml").write_text(LAYOUT_TOML)
    assert main(["export", "--layout", str(folder / "separate.toml"), str(folder / "out")]) == 0
    return folder


def test_export_writes_every_valid_case_with_its_expectations_unchanged(exported):
    m = json.loads((exported / "out" / "manifest.json").read_text())
    assert m["format"] == E.FORMAT and m["format_version"] == E.FORMAT_VERSION
    assert L.CacheLayout.from_data(m["layout"]) == L.SEPARATE and m["tensors"] == list(L.SEPARATE.tensor_names())
    cat = catalog.load_manifest()["cases"]
    valid = [c for c in cat if c["result"] == "valid"]
    assert [c["name"] for c in m["cases"]] == [c["name"] for c in valid]
    assert sum(map(len, m["not_exported"].values())) == len(cat) - len(valid)
    for entry, case in zip(valid, m["cases"]):
        problem, _, extra = load_case(catalog.HERE / entry["file"], sha256=entry["sha256"])
        assert case["launches"] == entry["launches"] and case["flags"] == entry["flags"]
        assert case["slot_lists"] == E.domains(problem)
        with np.load(exported / "out" / case["file"], allow_pickle=False) as npz:
            for k, v in extra.items():
                assert npz[k].dtype == v.dtype and np.array_equal(npz[k], v), (case["name"], k)
            for k in E.INPUTS:
                assert np.array_equal(npz[k], getattr(problem, k))
            assert npz["num_kv_heads"].shape == () and npz["sm_scale"].item() == problem.sm_scale


def test_import_gives_back_each_exported_problem_byte_for_byte(exported):
    cat = {c["name"]: c for c in catalog.load_manifest()["cases"]}
    m = json.loads((exported / "out" / "manifest.json").read_text())
    for case in m["cases"]:
        entry = cat[case["name"]]
        want, _, extra = load_case(catalog.HERE / entry["file"], sha256=entry["sha256"])
        got, other = E.import_case(exported / "out" / case["file"], L.SEPARATE, canonical=want.layout)
        for f in ("q", "pool", "topk", "block_table", "seq_lens"):
            assert np.array_equal(getattr(got, f), getattr(want, f)), (case["name"], f)
        for f in ("layout", "num_kv_heads", "q_len", "sm_scale", "k_global_scale", "v_global_scale"):
            assert getattr(got, f) == getattr(want, f)
        assert set(other) == set(extra)


def test_import_command_writes_a_case_file_to_replay_and_add(exported, tmp_path, capsys):
    dump = exported / "out" / "054-v-scale-swizzle-compacted.npz"
    out = tmp_path / "imported.npz"
    assert main(["import", "--layout", str(exported / "separate.toml"), str(dump), str(out)]) == 0
    text = capsys.readouterr().out
    assert "valid" in text and f"replay {out}" in text and f"add {out}" in text
    problem, meta, _ = load_case(out)
    assert meta == {"source": "import", "cache_layout": "separate"}
    assert main(["replay", str(out), "--backend", "reference", "--splits", "1"]) == 0


def test_import_refuses_a_dump_missing_a_tensor_naming_it(exported, tmp_path):
    with np.load(exported / "out" / "054-v-scale-swizzle-compacted.npz") as npz:
        arrays = {k: npz[k] for k in npz.files if k != "cache_v_scales"}
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(E.CaseFileError, match="cache_v_scales"):
        E.import_case(tmp_path / "bad.npz", L.SEPARATE)
    assert main(["import", "--layout", str(exported / "separate.toml"), str(tmp_path / "bad.npz"),
                 str(tmp_path / "o.npz")]) == 2


def test_a_bad_layout_file_exits_2_naming_the_problem(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text(LAYOUT_TOML.replace('v_scale_order = "linear"', 'v_scale_order = "zigzag"'))
    assert main(["export", "--layout", str(tmp_path / "bad.toml"), str(tmp_path / "o")]) == 2
    assert "v_scale_order = 'zigzag'" in capsys.readouterr().err


def test_export_help_runs_as_documented():
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", "export", "--help"], capture_output=True,
                       text=True, check=True)
    assert "--layout" in r.stdout and "10.4" in r.stdout
