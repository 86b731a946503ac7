"""The machine-readable verdict of ``check --json FILE`` and ``replay --json FILE``.

One JSON object per run, schema ``nvfp4-check-report`` version
``SCHEMA_VERSION``, described by ``report.schema.json`` in the package's
``vectors/`` folder (JSON Schema, draft 2020-12 subset; ``validate`` checks a
report against it without a runtime dependency). ``build`` makes the object
from a run as far as it got and its verdict; ``write`` stores it atomically
(a temporary file in the same folder, then a rename), whatever the verdict.
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

from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog.casefile import write_atomic
from nvfp4_suite.vectors.cli.render import replay_command

SCHEMA_NAME = "nvfp4-check-report"
SCHEMA_VERSION = 4
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "report.schema.json"


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
    """Store ``report`` as JSON at ``path``, atomically and with the file mode the
    umask gives (``casefile.write_atomic``: a reader never sees half a report)."""
    write_atomic(path, (json.dumps(report, indent=1, allow_nan=False) + "\n").encode("utf-8"))


def _num(x: float) -> float | None:
    """A float JSON can hold (None for inf and NaN)."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


def backend_json(subject) -> dict:
    """The backend as the report names it (a ``config.Subject``): spec, name, the
    arithmetic it is judged in, capabilities, the launch timeout of an isolated run,
    where its references ran."""
    from nvfp4_suite.reference.arithmetic import arithmetic_name

    backend = subject
    c = backend.capabilities
    layout = c.cache_layout
    return {"spec": subject.spec, "name": str(backend.name), "arithmetic": arithmetic_name(backend.geometry),
            "capabilities": {"layouts": list(c.layouts), "splits": list(c.splits), "xcds": list(c.xcds),
                             "orders": list(c.orders), "out": bool(c.out), "targets": list(c.targets),
                             "slot_lists": c.slot_lists, "scale_sign": c.scale_sign, "sm_scale": c.sm_scale,
                             "cache_layout": None if layout is None else layout.name,
                             "limits": dict(dataclasses.asdict(c.limits)), "interpreted": c.interpreted,
                             "launch_timeout_s": c.launch_timeout_s, "shrink_budget_s": c.shrink_budget_s},
            "timeout_s": subject.timeout, "references": subject.references.where}


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


def manifest_sha256(root) -> str | None:
    """sha256 (hex) of catalog folder ``root``'s manifest.json, or None when there is none."""
    manifest = Path(root) / "manifest.json"
    return hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.is_file() else None


def _catalog_json(cat, spec: str, timeout: float | None) -> dict:
    """One ``check.CatalogRun``: its folder, how it was chosen, its counts and cases, or its error."""
    from nvfp4_suite.vectors.engine.verdict import Status

    g = cat.golden
    return {"label": cat.label or "built-in", "folder": str(cat.root), "chosen": cat.why,
            "manifest_sha256": manifest_sha256(cat.root),
            "error": cat.error, "stopped": None if g is None else g.stopped,
            "counts": None if g is None else {s.value: g.count(s) for s in Status} | {"judged": g.judged},
            "cases": [] if g is None else [case_json(c, spec, timeout) for c in g.cases]}


def _generated_json(run, spec: str, timeout: float | None) -> dict | None:
    """The generated part of a ``check.CheckRun`` and its failing problem, or None."""
    gen = run.generated
    if gen is None:
        return None
    t = gen.totals
    failing = None
    if gen.failing is not None:
        f, p = gen.failing, gen.failing.problem
        failing = {"size": {"rows": p.rows, "kv_heads": p.num_kv_heads, "topk": p.TOPK, "q_len": p.q_len,
                            "pages": p.num_pages},
                   "launch": f.launch.to_json(), "text": f.text, "flaky": f.flaky_text is not None,
                   "diagnosis": [] if f.diagnosis is None else f.diagnosis.lines(),
                   "flaky_text": f.flaky_text, "unfinished": f.unfinished,
                   "saved": None if run.saved is None else str(run.saved), "save_error": run.save_error,
                   "replay": None if run.saved is None else replay_command(run.saved, spec, timeout=timeout)}
    return {"problems_run": gen.n, "stopped": gen.stopped, "elements": int(t["elements"]),
            "max_ratio": _num(t["max_ratio"]), "max_ulp": _num(t["max_ulp"]),
            "coverage": {name: {"problems": int(r), "failures": int(f)} for name, (r, f) in gen.stats.items()},
            "failing": failing,
            "judged": None if gen.judged is None else [
                {"index": j.index, "elements": j.elements,
                 "max_ratio": None if j.max_ratio is None else _num(j.max_ratio),
                 "max_ulp": None if j.max_ulp is None else _num(j.max_ulp), "conditions": list(j.conditions),
                 "failed": j.failed} for j in gen.judged]}


# The campaign fields shards of one run must share (merge names the one that differs).
CAMPAIGN_FIELDS = ("backend", "arithmetic", "seed", "examples", "suite_version", "shape", "splits", "catalogs")


def campaign_json(run) -> dict | None:
    """What makes a ``check.CheckRun`` one run of a campaign, whatever its shard:
    ``CAMPAIGN_FIELDS`` (the backend spec, the arithmetic it is judged in, the
    seed, the generated problems asked for, the suite's version, the shape,
    the split counts selected, each catalog's label and manifest sha256) and
    ``run_id``, the sha256 of those; None before the backend was loaded."""
    from nvfp4_suite.reference.arithmetic import arithmetic_name
    from nvfp4_suite.vectors.engine.config import catalogs_for, examples_for

    subject = run.subject
    if subject is None:
        return None
    config = run.config
    out: dict[str, Any] = {
        "backend": subject.spec, "arithmetic": arithmetic_name(subject.geometry), "seed": config.seed,
        "examples": examples_for(config, subject), "suite_version": suite_version(), "shape": config.shape,
        "splits": None if not config.splits else sorted(config.splits),
        "catalogs": [{"label": catalog.label(root) or "built-in", "manifest_sha256": manifest_sha256(root)}
                     for root, _ in catalogs_for(config)]}
    out["run_id"] = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()
    return out


def _replay_json(run) -> dict:
    """The replay part: the case file, its expected error (an invalid case), and per launch
    ``{"launch", "status" (PASS, FAIL, SKIP), "reason", "failing_elements", "text"}``."""
    c = run.case
    launches: list[dict] = []
    if c is not None:
        failures = {f.launch: f for f in c.failures}
        for x in c.ran:
            f = failures.get(x)
            launches.append({"launch": x.to_json(), "status": "FAIL" if f else "PASS", "reason": None,
                             "failing_elements": None if f is None else _failing_elements(f),
                             "text": "PASS" if f is None else f.text})
        launches += [{"launch": x.to_json(), "status": "SKIP", "reason": why, "failing_elements": None,
                      "text": f"SKIPPED: {why}"} for x, why in c.skipped]
    return {"file": run.config.file, "expected_error": None if c is None else c.expected_error,
            "launches": launches}


def build(command: str, argv: list[str], run, verdict, seconds: float | None) -> dict:
    """The report of a ``check`` (``run``: a ``check.CheckRun``) or ``replay``
    (a ``check.ReplayRun``) that ended with ``verdict``; ``run`` may be
    partial (an error stopped it) or None (nothing was started). ``merge``
    writes its own (``merge.merged_report``)."""
    subject = None if run is None else run.subject
    spec = "" if subject is None else subject.spec
    timeout = None if subject is None else subject.timeout
    check = command == "check" and run is not None
    return {
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "command": command, "argv": list(argv),
        "verdict": str(verdict.kind), "exit_code": verdict.exit_code, "reason": verdict.reason,
        "interrupted": verdict.interrupted,
        "suite": {"version": suite_version(), "contract_version": catalog.CONTRACT_VERSION,
                  "catalog_schema_version": catalog.SCHEMA_VERSION, "generator_version": catalog.GENERATOR_VERSION},
        "backend": None if subject is None else backend_json(subject),
        "seed": run.config.seed if check else None,
        "examples": (run.generated.n if run.generated else 0) if check and subject is not None else None,
        "shape": run.config.shape if check else None,
        "catalogs": [_catalog_json(c, spec, timeout) for c in run.catalogs] if check else [],
        "blame": run.blame_lines() if run is not None else [],
        "generated": _generated_json(run, spec, timeout) if check else None,
        "serving": None if not check or run.serving is None else {
            "problems_run": run.serving.n, "failed": run.serving.failed, "stopped": run.serving.stopped,
            "problems": list(run.serving.lines)},
        "replay": _replay_json(run) if command == "replay" and run is not None else None,
        "shard": None if not check or run.config.shard is None else dict(zip(("k", "n"), run.config.shard)),
        "campaign": campaign_json(run) if check else None,
        "shards": None,
        "seconds": seconds}


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
