"""The machine-readable verdict of ``check --json FILE`` and ``replay --json FILE``.

One JSON object per run, schema ``nvfp4-check-report`` version
``SCHEMA_VERSION``, described by ``report.schema.json`` beside this module
(JSON Schema, draft 2020-12 subset; ``validate`` checks a report against it
without a runtime dependency). ``Recorder`` collects the run's parts as the
CLI reaches them; ``write`` stores the object atomically (a temporary file
in the same folder, then a rename), also for a run that ends with exit 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from . import catalog
from .render import replay_command

SCHEMA_NAME = "nvfp4-check-report"
SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("report.schema.json")
VERDICTS = ("CONFORMANT", "NOT CONFORMANT", "NO VERDICT", "INTERRUPTED")


def suite_version() -> str:
    """The installed suite's version (its distribution metadata), or ``unknown``."""
    try:
        return metadata.version("nvfp4-sparse-decode-suite")
    except metadata.PackageNotFoundError:
        return "unknown"


def writable(path: str) -> str | None:
    """None when ``path`` can be written (a file created beside it, then removed),
    else why not; checked before a run starts. ``-`` is refused: the text report
    owns stdout."""
    if path == "-":
        return "--json -: stdout carries the text report; give a file name"
    p = Path(path)
    if p.is_dir():
        return f"--json {path}: is a folder"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent if str(p.parent) else ".")
    except OSError as e:
        return f"--json {path}: cannot write there ({e.strerror or e})"
    os.close(fd)
    os.unlink(tmp)
    if p.exists() and not os.access(p, os.W_OK):
        return f"--json {path}: the file exists and is not writable"
    return None


def write(path: str, report: dict) -> None:
    """Store ``report`` as JSON at ``path``: a temporary file in the same folder,
    renamed over ``path`` (a reader never sees half a report)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent if str(p.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        os.unlink(tmp)
        raise


def _num(x: float) -> float | None:
    """A float JSON can hold (None for inf and NaN)."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


def backend_json(spec: str, backend) -> dict:
    """The backend as the report names it: spec, name, declared arithmetic, capabilities, isolation."""
    from nvfp4_suite.reference.arithmetic import arithmetic_name

    c = backend.capabilities
    layout = c.cache_layout
    return {"spec": spec, "name": str(backend.name), "arithmetic": arithmetic_name(backend.geometry),
            "capabilities": {"layouts": list(c.layouts), "splits": list(c.splits), "xcds": list(c.xcds),
                             "orders": list(c.orders), "out": bool(c.out), "targets": list(c.targets),
                             "slot_lists": c.slot_lists,
                             "cache_layout": None if layout is None else str(getattr(layout, "name", layout)),
                             "limits": {k: v for k, v in dataclasses.asdict(c.limits).items()}},
            "timeout_s": getattr(backend, "timeout", None)}


def _failing_elements(failure) -> int | None:
    return None if failure.report is None else int(failure.report.n_fail)


def case_json(c, spec: str, timeout: float | None) -> dict:
    """One ``check.CaseResult`` (status, launches run and skipped, failures with replay commands)."""
    return {"id": c.id, "name": c.name, "catalog": c.catalog or "built-in", "flags": list(c.flags),
            "file": str(c.file), "status": str(c.status), "expected_error": c.expected_error,
            "launches_run": [x.to_json() for x in c.ran],
            "launches_skipped": [{"launch": x.to_json(), "reason": why} for x, why in c.skipped],
            "failures": [{"launch": f.launch.to_json(), "failing_elements": _failing_elements(f),
                          "text": f.text, "replay": replay_command(c.file, spec, f.launch, timeout)}
                         for f in c.failures],
            "error": c.error}


class Recorder:
    """The report of one ``check`` or ``replay`` run, filled in as the run goes;
    ``finish`` gives the object for the exit code the run ended with."""

    def __init__(self, command: str, argv: list[str]) -> None:
        self.data: dict[str, Any] = {
            "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "command": command, "argv": list(argv),
            "verdict": "NO VERDICT", "exit_code": 2, "reason": None,
            "suite": {"version": suite_version(), "contract_version": catalog.CONTRACT_VERSION,
                      "catalog_schema_version": catalog.SCHEMA_VERSION,
                      "generator_version": catalog.GENERATOR_VERSION},
            "backend": None, "seed": None, "examples": None, "catalogs": [], "generated": None, "replay": None,
            "seconds": None}
        self.stopped: str | None = None

    def backend(self, spec: str, backend) -> None:
        """Record the backend the run judges."""
        self.data["backend"] = backend_json(spec, backend)

    def catalog(self, root, why: str, golden=None, error: str | None = None, spec: str = "",
                timeout: float | None = None) -> None:
        """Record one catalog's golden run (``check.GoldenRun``), or the ``error`` that made it unreadable."""
        manifest = Path(root) / "manifest.json"
        entry: dict[str, Any] = {
            "label": catalog.label(root) or "built-in", "folder": str(root), "chosen": why,
            "manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.is_file() else None,
            "error": error, "stopped": None, "counts": None, "cases": []}
        if golden is not None:
            from .check import Status

            entry["stopped"] = golden.stopped
            entry["counts"] = {s.value: golden.count(s) for s in Status} | {"judged": golden.judged}
            entry["cases"] = [case_json(c, spec, timeout) for c in golden.cases]
            self.stopped = self.stopped or golden.stopped
        self.data["catalogs"].append(entry)

    def generated(self, gen, spec: str, saved, save_error: str | None, timeout: float | None) -> None:
        """Record the generated part (``check.GeneratedRun``) and its failing problem, saved at ``saved``."""
        t = gen.totals
        failing = None
        if gen.failing is not None:
            f, p = gen.failing, gen.failing.problem
            failing = {"size": {"rows": p.rows, "kv_heads": p.num_kv_heads, "topk": p.TOPK, "q_len": p.q_len,
                                "pages": p.num_pages},
                       "launch": f.launch.to_json(), "text": f.text, "flaky": f.flaky_text is not None,
                       "flaky_text": f.flaky_text, "unfinished": f.unfinished,
                       "saved": None if saved is None else str(saved), "save_error": save_error,
                       "replay": None if saved is None else replay_command(saved, spec, timeout=timeout)}
        self.data["generated"] = {
            "problems_run": gen.n, "stopped": gen.stopped, "elements": int(t["elements"]),
            "max_ratio": _num(t["max_ratio"]), "max_ulp": _num(t["max_ulp"]),
            "coverage": {name: {"problems": int(r), "failures": int(f)} for name, (r, f) in gen.stats.items()},
            "failing": failing}
        self.stopped = self.stopped or gen.stopped

    def finish(self, exit_code: int, reason: str | None = None, interrupted: bool = False,
               seconds: float | None = None) -> dict:
        """The report for a run that exits with ``exit_code`` (``reason``: why there is no
        verdict; ``interrupted``: a signal or a reader gone ended it without a failure found)."""
        if exit_code == 0:
            verdict = "CONFORMANT"
        elif exit_code == 1:
            verdict = "NOT CONFORMANT"
        elif interrupted or self.stopped:
            verdict = "INTERRUPTED"
        else:
            verdict = "NO VERDICT"
        self.data.update(verdict=verdict, exit_code=exit_code, seconds=seconds,
                         reason=reason if reason is not None else self.stopped)
        return self.data


# --- a validator for the subset of JSON Schema report.schema.json uses ----------

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def validate(value: Any, schema: dict, root: dict | None = None, where: str = "$") -> list[str]:
    """The ways ``value`` breaks ``schema`` (empty: it conforms), each naming the
    path of the offending value. Keywords read: ``$ref`` (``#/$defs/NAME``),
    ``type`` (a name or a list), ``enum``, ``const``, ``minimum``, ``properties``,
    ``required``, ``additionalProperties`` (false or a schema), ``items``;
    a keyword outside these raises ValueError (never silently ignored)."""
    root = schema if root is None else root
    known = {"$ref", "type", "enum", "const", "minimum", "properties", "required", "additionalProperties",
             "items", "description", "title", "$schema", "$id", "$defs"}
    unknown = set(schema) - known
    if unknown:
        raise ValueError(f"{where}: schema keywords {sorted(unknown)} are not read by this validator")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"{where}: $ref {ref!r}: only #/$defs/NAME is read")
        return validate(value, root["$defs"][ref[len("#/$defs/"):]], root, where)
    out: list[str] = []
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, k) for k in kinds):
            return [f"{where}: {value!r:.60} is not of type {' or '.join(kinds)}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r:.60} is not one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: {value!r:.60} is not {schema['const']!r}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        out.append(f"{where}: {value!r} is below {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                out.append(f"{where}: required field {k!r} is missing")
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                out += validate(v, props[k], root, f"{where}.{k}")
            elif extra is False:
                out.append(f"{where}: field {k!r} is not in the schema")
            elif isinstance(extra, dict):
                out += validate(v, extra, root, f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += validate(v, schema["items"], root, f"{where}[{i}]")
    return out


def load_schema() -> dict:
    """The report's JSON Schema (``report.schema.json``)."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def replay_json(file: str, expected_error: str | None, launches: list[dict]) -> dict:
    """The replay part: the case file, its expected error (an invalid case), and per launch
    ``{"launch", "status" (PASS, FAIL, SKIP), "reason", "failing_elements", "text"}``."""
    return {"file": file, "expected_error": expected_error, "launches": launches}
