"""``merge REPORT.json...`` (``nvfp4_suite.vectors.cli.merge``): what it refuses,
NO VERDICT (exit 2) naming the file and the field, with a JSON report that
validates; ``tests/test_shard.py`` holds that what it folds is the unsharded run."""

import json
import shutil
from pathlib import Path

import pytest


def _shards(n: int, args: list[str]) -> list[str]:
    """The JSON reports of ``check ARGS --shard K/N`` for K = 1..N, in the working folder."""
    from nvfp4_suite.vectors.cli import main

    files = []
    for k in range(1, n + 1):
        files.append(f"shard-{k}-of-{n}.json")
        assert main([*args, "--shard", f"{k}/{n}", "--json", files[-1]]) == 0
    return files


@pytest.fixture
def two_shards(tmp_path, monkeypatch):
    """Shards 1/2 and 2/2 of a cheap campaign (emulate, two generated problems), in tmp_path."""
    monkeypatch.chdir(tmp_path)
    return _shards(2, ["check", "--backend", "emulate", "--no-golden", "--examples", "2"])


def _refused(capsys, *files, json_out=None) -> str:
    """merge FILES must be NO VERDICT (exit 2); its error message."""
    from nvfp4_suite.vectors.cli import main

    capsys.readouterr()
    assert main(["merge", *files] + (["--json", json_out] if json_out else [])) == 2
    return capsys.readouterr().err


def test_merge_refuses_shards_of_different_runs_naming_the_files_and_field(two_shards, capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["check", "--backend", "emulate", "--no-golden", "--examples", "2", "--seed", "1", "--shard", "2/2",
                 "--json", "seed1.json"]) == 0
    err = _refused(capsys, two_shards[0], "seed1.json", json_out="m.json")
    assert ("error: merge: seed1.json and shard-1-of-2.json are shards of different runs: field campaign.seed is 1 "
            "in seed1.json, 0 in shard-1-of-2.json") in err, err
    report = json.loads(Path("m.json").read_text())
    assert report["verdict"] == "NO VERDICT" and "campaign.seed" in report["reason"] and report["shards"] is None
    from nvfp4_suite.vectors.cli import report as jsonreport

    assert jsonreport.validate(report, jsonreport.load_schema()) == []
    assert main(["check", "--backend", "emulate", "--no-golden", "--examples", "3", "--shard", "2/2",
                 "--json", "three.json"]) == 0
    assert "field campaign.examples is 3 in three.json, 2 in shard-1-of-2.json" in _refused(
        capsys, two_shards[0], "three.json")
    assert main(["check", "--backend", "emulate", "--no-golden", "--examples", "2", "--shard", "2/3",
                 "--json", "of3.json"]) in (0, 2)
    assert "of3.json is shard 2/3 but shard-1-of-2.json is shard 1/2: field shard.n differs" in _refused(
        capsys, two_shards[0], "of3.json")


def test_merge_refuses_shards_of_another_backend_arithmetic_or_suite_version(two_shards, capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["check", "--backend", "reference", "--no-golden", "--examples", "2", "--shard", "2/2",
                 "--json", "ref.json"]) == 0
    assert "field campaign.backend is 'reference' in ref.json, 'emulate' in shard-1-of-2.json" in _refused(
        capsys, two_shards[0], "ref.json")
    # emulate judged in the exact arithmetic may fail: the verdict is not what this is about.
    assert main(["check", "--backend", "emulate", "--arithmetic", "exact", "--no-golden", "--examples", "2",
                 "--shard", "2/2", "--json", "exact.json"]) in (0, 1)
    assert "field campaign.arithmetic is 'exact' in exact.json, 'seed' in shard-1-of-2.json" in _refused(
        capsys, two_shards[0], "exact.json")
    # A shard run by another release of the suite (the field as that release would write it).
    other = json.loads(Path(two_shards[1]).read_text())
    other["campaign"]["suite_version"] = "0.0.1"
    Path("old.json").write_text(json.dumps(other))
    assert "field campaign.suite_version is '0.0.1' in old.json" in _refused(capsys, two_shards[0], "old.json")


def test_merge_refuses_a_missing_or_doubled_shard_by_name(two_shards, capsys):
    shutil.copy(two_shards[0], "again.json")
    assert "error: merge: doubled shard 1/2: shard-1-of-2.json and again.json" in _refused(
        capsys, two_shards[0], "again.json", two_shards[1])
    assert "error: merge: missing shard 2/2 (given: shard-1-of-2.json = 1/2)" in _refused(capsys, two_shards[0])


def test_merge_refuses_what_is_not_a_shard_report_naming_the_file(two_shards, capsys):
    from nvfp4_suite.vectors.cli import main

    Path("notes.txt").write_text("not json\n")
    assert "error: merge: notes.txt: not a readable JSON report" in _refused(capsys, "notes.txt", two_shards[1])
    Path("other.json").write_text('{"schema": "something-else"}\n')
    assert "other.json: not an nvfp4-check-report report (schema 'something-else')" in _refused(
        capsys, two_shards[0], "other.json")
    old = json.loads(Path(two_shards[1]).read_text())
    Path("v1.json").write_text(json.dumps({**old, "schema_version": 1}))
    assert "v1.json: schema_version 1; this suite merges version 4 only" in _refused(capsys, two_shards[0], "v1.json")
    assert main(["check", "--backend", "emulate", "--no-golden", "--examples", "2", "--json", "whole.json"]) == 0
    assert "whole.json: shard null: its check ran without --shard K/N" in _refused(capsys, two_shards[0], "whole.json")
    assert main(["check", "--backend", "no-such-backend", "--shard", "2/2", "--json", "dead.json"]) == 2
    err = _refused(capsys, two_shards[0], "dead.json")
    assert "dead.json: shard 2/2 did not start (NO VERDICT: error: " in err and "rerun that shard" in err, err
