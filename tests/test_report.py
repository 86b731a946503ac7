"""vectors/report.py: the JSON verdict's schema, its validator, and how the file is written."""

import json
import os

import pytest

from nvfp4_suite.vectors.cli import report
from nvfp4_suite.vectors.engine.verdict import EXIT_CODES, Kind, Verdict, no_verdict

SCHEMA = {"type": "object", "required": ["a"], "additionalProperties": False,
          "properties": {"a": {"type": ["integer", "null"], "minimum": 0},
                         "b": {"enum": ["x", "y"]}, "c": {"const": 1},
                         "d": {"type": "array", "items": {"$ref": "#/$defs/s"}},
                         "e": {"type": "object", "additionalProperties": {"type": "boolean"}}},
          "$defs": {"s": {"type": "string"}}}


def test_the_validator_accepts_a_conforming_value():
    assert report.validate({"a": None, "b": "x", "c": 1, "d": ["p"], "e": {"k": True}}, SCHEMA) == []
    assert report.validate({"a": 3}, SCHEMA) == []


@pytest.mark.parametrize("value, where", [
    ({}, "required field 'a'"), ({"a": -1}, "$.a: -1 is below 0"), ({"a": True}, "$.a: True is not of type"),
    ({"a": 1.5}, "not of type integer or null"), ({"a": 0, "b": "z"}, "$.b: 'z' is not one of"),
    ({"a": 0, "c": 2}, "$.c: 2 is not 1"), ({"a": 0, "d": ["p", 3]}, "$.d[1]: 3 is not of type string"),
    ({"a": 0, "e": {"k": 1}}, "$.e.k: 1 is not of type boolean"), ({"a": 0, "f": 0}, "field 'f' is not in"),
    ([], "$: [] is not of type object")])
def test_the_validator_names_each_kind_of_violation_by_its_path(value, where):
    errors = report.validate(value, SCHEMA)
    assert len(errors) == 1 and where in errors[0], errors


def test_the_validator_refuses_a_keyword_it_does_not_read():
    with pytest.raises(ValueError, match="pattern"):
        report.validate("x", {"type": "string", "pattern": "x"})


def test_the_schema_file_names_this_schema_and_version_and_uses_only_keywords_the_validator_reads():
    s = report.load_schema()
    assert s["properties"]["schema"]["const"] == report.SCHEMA_NAME
    assert s["properties"]["schema_version"]["const"] == report.SCHEMA_VERSION
    assert s["properties"]["verdict"]["enum"] == [k.value for k in Kind]
    assert s["properties"]["exit_code"]["enum"] == sorted(set(EXIT_CODES.values()))
    # Every value the schema admits for its verdict goes through the validator (it raises on unknown keywords).
    for k in Kind:
        data = report.build("check", [], None, Verdict(k), None)
        assert data["verdict"] == k.value and data["exit_code"] == EXIT_CODES[k]
        assert report.validate(data, s) == []


def test_a_report_of_a_run_that_never_started_validates():
    data = report.build("replay", ["replay", "x.npz"], None, no_verdict("error: no such file"), None)
    assert report.validate(data, report.load_schema()) == []
    assert data["verdict"] == "NO VERDICT" and data["reason"] == "error: no such file"
    stopped = report.build("check", [], None, no_verdict("interrupted (SIGINT)", interrupted=True), 1.0)
    assert stopped["verdict"] == "NO VERDICT" and stopped["interrupted"] is True


def test_writable_refuses_stdout_a_folder_and_a_missing_folder_naming_the_path(tmp_path):
    assert "stdout carries the text report" in report.writable("-")
    assert "is a folder" in report.writable(str(tmp_path))
    assert str(tmp_path / "no" / "r.json") in report.writable(str(tmp_path / "no" / "r.json"))
    assert report.writable(str(tmp_path / "r.json")) is None and os.listdir(tmp_path) == []


def test_write_replaces_the_file_whole_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    report.write(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1} and os.listdir(tmp_path) == ["r.json"]
    with pytest.raises(ValueError):
        report.write(str(path), {"a": float("nan")})  # not JSON: the old report stays, no temporary file is left
    assert json.loads(path.read_text()) == {"a": 1} and os.listdir(tmp_path) == ["r.json"]
