"""``merge SHARD.json...``: the shards of one ``check --shard K/N`` campaign as one run.

Each shard of a campaign judges a disjoint share of the golden launches and
of the generated problems (``config.owns``: round robin over the launches of
each catalog in order, and over the generated problems in draw order); their
JSON reports (``report.build``) fold here into the report the unsharded run
would have written, and its verdict comes from ``verdict.decide`` over the
folded counts, as every verdict does.

Golden: a case's parts (each shard's launches of it) fold into one case: its
launches run, skipped and failing are the union, its status ERROR when a
part is, else FAIL when a launch failed, else PASS when one ran, else SKIP.
Generated: the unsharded run counts the problems drawn up to and including
its first failure (then it minimises that one), and a shard counts its own
problems up to its first failure; so the fold keeps the problems whose draw
index is at most the smallest failing index of any shard (``Judged``
records: ``GeneratedRun.judged``), and the failing problem is that shard's,
minimised there (the same draw as the unsharded run's first failure; its
minimised form may differ, as hypothesis' shrinking path depends on the
process). A shard's failure at a later index is past the unsharded run's
count: it is named in the text as such, not counted. Not folded: the cause
summary, which compares the kernel's outputs (not in a report) with the
mutants': each shard's summary of its own share is listed under its name
(``shard_cause_lines``; JSON ``blame``); the rounding statistics and the
coverage table's stated minimum shares (each shard's report has its own).

The text report goes through ``render`` as a check's does (``golden_run``
rebuilds each folded catalog as the ``check.GoldenRun`` it prints).

Refused (NO VERDICT, exit 2, naming the file and the field): a file that is
not a report, a report of another schema version or command, a report of a
check without ``--shard``, a shard that did not start, shards whose
``campaign`` fields (backend, arithmetic, seed, examples, suite version,
shape, splits, catalogs) differ, or that split the run into different N, a
doubled shard and a missing one.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.cli import render
from nvfp4_suite.vectors.cli import report as jsonreport
from nvfp4_suite.vectors.engine.check import CaseResult, GoldenRun, LaunchFailure
from nvfp4_suite.vectors.engine.harness import shown
from nvfp4_suite.vectors.engine.verdict import SetupError, Status, Verdict

Shard = tuple[str, dict]  # (the file named on the command line, its report)


@dataclasses.dataclass
class Merged:
    """Shards folded into one run: ``shards`` (file, report) in shard order,
    ``catalogs`` and ``generated`` in the report's form, ``stopped`` (why a
    shard ended early, naming it, or None) and ``notes`` (lines for the text
    report: later generated failures of other shards)."""

    shards: list[Shard]
    catalogs: list[dict]
    generated: dict | None
    stopped: str | None
    notes: list[str]

    def tally(self) -> dict:
        """The counts ``verdict.decide`` takes, as ``check.CheckRun.tally`` counts them."""
        counts = [c["counts"] for c in self.catalogs if c["counts"] is not None]
        gen = self.generated
        failing = gen is not None and gen["failing"] is not None
        return {"judged": sum(c["judged"] for c in counts) + (gen["problems_run"] if gen else 0),
                "failed": sum(c[Status.FAIL.value] for c in counts) + failing,
                "flaky": int(failing and gen["failing"]["flaky"]),  # type: ignore[index]
                "errors": sum(c[Status.ERROR.value] for c in counts) + sum(c["error"] is not None
                                                                          for c in self.catalogs),
                "stopped": self.stopped}


def _read(path: str) -> dict:
    """The report in ``path``, checked to be a check's, of this schema version; SetupError naming what is not."""
    try:
        with open(path, encoding="utf-8") as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        raise SetupError(f"merge: {path}: not a readable JSON report ({e})") from None
    if not isinstance(rep, dict) or rep.get("schema") != jsonreport.SCHEMA_NAME:
        got = rep.get("schema") if isinstance(rep, dict) else type(rep).__name__
        raise SetupError(f"merge: {path}: not an {jsonreport.SCHEMA_NAME} report (schema {got!r})")
    if rep.get("schema_version") != jsonreport.SCHEMA_VERSION:
        raise SetupError(f"merge: {path}: schema_version {rep.get('schema_version')!r}; "
                         f"this suite merges version {jsonreport.SCHEMA_VERSION} only")
    bad = jsonreport.validate(rep, jsonreport.load_schema())
    if bad:
        raise SetupError(f"merge: {path}: not a valid report: {bad[0]}")
    if rep["command"] != "check":
        raise SetupError(f"merge: {path}: command {rep['command']!r}; merge folds the reports of check --shard K/N")
    if rep["shard"] is None:
        raise SetupError(f"merge: {path}: shard null: its check ran without --shard K/N")
    if rep["campaign"] is None:
        raise SetupError(f"merge: {path}: shard {rep['shard']['k']}/{rep['shard']['n']} did not start "
                         f"({rep['verdict']}: {rep['reason']}); rerun that shard")
    return rep


def load(paths: list[str]) -> list[Shard]:
    """The shard reports in ``paths``, in shard order, once checked to be the
    N shards of one run (see the module note); SetupError otherwise, naming
    the file(s) and the field."""
    if not paths:
        raise SetupError("merge: no report given")
    shards = [(p, _read(p)) for p in paths]
    first, rep0 = shards[0]
    n = rep0["shard"]["n"]
    for path, rep in shards[1:]:
        if rep["shard"]["n"] != n:
            raise SetupError(f"merge: {path} is shard {rep['shard']['k']}/{rep['shard']['n']} but {first} is "
                             f"shard {rep0['shard']['k']}/{n}: field shard.n differs")
        for field in jsonreport.CAMPAIGN_FIELDS:
            if rep["campaign"][field] != rep0["campaign"][field]:
                raise SetupError(f"merge: {path} and {first} are shards of different runs: field campaign.{field} "
                                 f"is {rep['campaign'][field]!r} in {path}, {rep0['campaign'][field]!r} in {first}")
    by_k: dict[int, str] = {}
    for path, rep in shards:
        k = rep["shard"]["k"]
        if k in by_k:
            raise SetupError(f"merge: doubled shard {k}/{n}: {by_k[k]} and {path}")
        by_k[k] = path
    missing = [k for k in range(1, n + 1) if k not in by_k]
    if missing:
        raise SetupError(f"merge: missing shard {', '.join(f'{k}/{n}' for k in missing)} "
                         f"(given: {', '.join(f'{by_k[k]} = {k}/{n}' for k in sorted(by_k))})")
    return sorted(shards, key=lambda s: s[1]["shard"]["k"])


def _launch_order(launch: dict) -> tuple:
    """A launch's place in its case: the built-in catalog lists a case's launches by split count
    (a kernel's own, "auto", first), XCDs, then order, so the merged case lists them, and reports
    its first failure, as the unsharded run does (a project case listed otherwise is merged in this order)."""
    splits = launch["splits"]
    return (isinstance(splits, int), splits if isinstance(splits, int) else 0, launch["xcds"], launch["order"] or "")


def _case(parts: list[dict]) -> dict:
    """One case folded from its shards' parts (see the module note)."""
    out = dict(parts[0])
    out["launches_run"] = sorted((x for p in parts for x in p["launches_run"]), key=_launch_order)
    for field in ("launches_skipped", "failures"):
        out[field] = sorted((x for p in parts for x in p[field]), key=lambda x: _launch_order(x["launch"]))
    out["error"] = next((p["error"] for p in parts if p["error"] is not None), None)
    statuses = {p["status"] for p in parts}
    out["status"] = (Status.ERROR if Status.ERROR.value in statuses else Status.FAIL if out["failures"]
                     else Status.PASS if out["launches_run"] else Status.SKIP).value
    return out


def _catalog(parts: list[dict]) -> dict:
    """One catalog folded from its shards' parts: cases by id, counts of the folded cases."""
    out = dict(parts[0])
    out["error"] = next((p["error"] for p in parts if p["error"] is not None), None)
    out["stopped"] = next((p["stopped"] for p in parts if p["stopped"] is not None), None)
    by_id: dict[int, list[dict]] = collections.defaultdict(list)
    for p in parts:
        for c in p["cases"]:
            by_id[c["id"]].append(c)
    out["cases"] = [_case(by_id[i]) for i in sorted(by_id)]
    if all(p["counts"] is None for p in parts):
        out["counts"] = None
    else:
        counts = collections.Counter(c["status"] for c in out["cases"])
        out["counts"] = {s.value: counts[s.value] for s in Status} | {
            "judged": counts[Status.PASS.value] + counts[Status.FAIL.value]}
    return out


def _generated(shards: list[Shard]) -> tuple[dict | None, list[str]]:
    """The generated part folded from the shards' ``judged`` records (see the
    module note), and the note lines of later failures."""
    parts = [(rep["shard"], rep["generated"]) for _, rep in shards if rep["generated"] is not None]
    if not parts:
        return None, []
    records = [(shard, j) for shard, g in parts for j in g["judged"] or []]
    failures = sorted((j["index"], shard["k"]) for shard, j in records if j["failed"])
    first = failures[0][0] if failures else None
    kept = [j for _, j in records if first is None or j["index"] <= first]
    reached: collections.Counter[str] = collections.Counter()
    failed: collections.Counter[str] = collections.Counter()
    for j in kept:
        reached.update(j["conditions"])
        if j["failed"]:
            failed.update(j["conditions"])
    ratios = [j["max_ratio"] for j in kept if j["elements"]]
    ulps = [j["max_ulp"] for j in kept if j["elements"]]
    failing = None
    if first is not None:
        failing = next(g["failing"] for shard, g in parts if shard["k"] == failures[0][1])
    n = parts[0][0]["n"]
    notes = [f"generated: shard {k}/{n} also failed problem {i}, past the first failure (problem {first}, "
             f"shard {failures[0][1]}/{n}) where the unsharded run stops counting: not counted"
             for i, k in failures[1:]]
    # A value JSON could not hold (inf, NaN) was written as null: the fold's is null too.
    return {"problems_run": len(kept),
            "stopped": next((g["stopped"] for _, g in parts if g["stopped"] is not None), None),
            "elements": sum(j["elements"] for j in kept),
            "max_ratio": None if None in ratios else max(ratios, default=0.0),
            "max_ulp": None if None in ulps else max(ulps, default=0.0),
            "coverage": {name: {"problems": reached[name], "failures": failed[name]} for name in reached},
            "failing": failing, "judged": None}, notes


def fold(shards: list[Shard]) -> Merged:
    """``load``'s shards of one run folded into one (see the module note)."""
    labels = [c["label"] for c in shards[0][1]["campaign"]["catalogs"]]
    catalogs = []
    for label in labels:
        parts = [c for _, rep in shards for c in rep["catalogs"] if c["label"] == label]
        if parts:
            catalogs.append(_catalog(parts))
    generated, notes = _generated(shards)
    stopped = None
    for path, rep in shards:
        why = next((c["stopped"] for c in rep["catalogs"] if c["stopped"]), None) or (
            rep["generated"] or {}).get("stopped")
        if why:
            stopped = f"shard {rep['shard']['k']}/{rep['shard']['n']} ({path}): {why}"
            break
    return Merged(shards, catalogs, generated, stopped, notes)


def golden_run(cat: dict) -> GoldenRun:
    """A folded catalog (the report's form) as the ``check.GoldenRun`` that
    ``render.golden_lines`` prints, so that a merge reads as a check does.
    The cause summary's facts (``CaseResult.features``) are not in a report:
    the merged text has no cause summary."""
    cases = []
    for c in cat["cases"]:
        res = CaseResult(c["id"], c["name"], list(c["flags"]), Path(c["file"]), status=Status(c["status"]),
                         error=c["error"], expected_error=c["expected_error"],
                         catalog=None if c["catalog"] == "built-in" else c["catalog"])
        res.ran = [Launch.from_json(x) for x in c["launches_run"]]
        res.skipped = [(Launch.from_json(x["launch"]), x["reason"]) for x in c["launches_skipped"]]
        res.failures = [LaunchFailure(Launch.from_json(f["launch"]), f["text"]) for f in c["failures"]]
        cases.append(res)
    return GoldenRun(cases, cat["stopped"])


def lines(merged: Merged, verdict: Verdict) -> list[str]:
    """The text report of a merge, through ``render`` as a check's: the shards,
    each catalog's golden report, the generated part and its failing problem
    (minimised in its shard), the notes, then the verdict line."""
    rep0 = merged.shards[0][1]
    camp, backend = rep0["campaign"], rep0["backend"]
    spec, timeout = camp["backend"], backend["timeout_s"]
    n = rep0["shard"]["n"]
    out = [f"merged {n} shards of run {camp['run_id'][:12]}: backend {shown(backend['name'])} (--backend {spec}; "
           f"arithmetic {camp['arithmetic']}; seed {camp['seed']}; {camp['examples']} generated problems)"]
    out += [f"  shard {rep['shard']['k']}/{n}: {path}: {rep['verdict']}" for path, rep in merged.shards]
    parts = []
    for cat in merged.catalogs:
        label = None if cat["label"] == "built-in" else cat["label"]
        if label is not None:
            out.append(f"catalog {label} ({cat['chosen']}):")
        if cat["error"] is not None:
            out.append(f"  {label}: ERROR: {cat['error']}")
            parts.append(render.golden_summary(label, None))
            continue
        golden = golden_run(cat)
        out += render.golden_lines(golden, spec, timeout)
        parts.append(render.golden_summary(label, golden))
    gen = merged.generated
    if gen is not None:
        out += [f"generated problems: {gen['problems_run']} (seed {camp['seed']})",
                render.generated_head(gen["problems_run"], gen["failing"] is None, gen["elements"],
                                      gen["max_ratio"], gen["max_ulp"])]
        out += _coverage_lines(gen)
        f = gen["failing"]
        if f is not None:
            size = f["size"]
            out += [render.failing_head(f["flaky"], f["unfinished"]),
                    f"  rows {size['rows']}, Hkv {size['kv_heads']}, TOPK {size['topk']}, q_len {size['q_len']}, "
                    f"launch {Launch.from_json(f['launch']).describe()}", render.indent(f["text"], "  ")]
            out += ([f"saved: {f['saved']}", f"replay: {f['replay']}"] if f["saved"] is not None
                    else [f"not saved: {f['save_error']}"])
        parts.append(f"{gen['problems_run']} generated problems")
    out += shard_cause_lines(merged)
    out += merged.notes
    if merged.stopped:
        parts.append(f"stopped early: {merged.stopped}")
    return out + [render.verdict_text(verdict, shown(backend["name"]), parts, f"merged {n} shards")]


def shard_cause_lines(merged: Merged) -> list[str]:
    """Each shard's cause summary of its golden failures (its report's ``blame``),
    under its name, for the shards that have one; empty when none failed. A
    shard's summary weighs only its share of the launches: the unsharded run
    (or one shard alone, ``check --shard 1/1``) gives the summary over all."""
    n = merged.shards[0][1]["shard"]["n"]
    have = [(rep["shard"]["k"], path, rep["blame"]) for path, rep in merged.shards if rep.get("blame")]
    if not have:
        return []
    out = ["cause summaries of the shards' golden failures (each over its own share of the launches):"]
    for k, path, lines in have:
        out += [f"  shard {k}/{n} ({path}):"] + [f"  {line}" for line in lines]
    return out


def _coverage_lines(gen: dict) -> list[str]:
    """The merged coverage table: per condition reached, its problems, share and failures
    (the stated minimum shares and the never-reached warnings need the backend: see each shard's report)."""
    total = gen["problems_run"]
    if not total or not gen["coverage"]:
        return []
    w = max(len(name) for name in gen["coverage"])
    out = [f"  coverage over {total} problems (conditions reached; each shard's report states the minimum shares):",
           f"  {'condition':<{w}}  problems  share  failed"]
    for name, c in gen["coverage"].items():
        out.append(f"  {name:<{w}}  {c['problems']:8d}  {c['problems'] / total:5.0%}  {c['failures']:6d}")
    return out


def merged_report(argv: list[str], merged: Merged | None, verdict: Verdict, seconds: float | None) -> dict:
    """The report of ``merge`` (``report.build``'s form): the shards' fields,
    their folded catalogs and generated part, ``shards`` naming each;
    ``merged`` None (refused): the verdict and reason alone."""
    rep0: dict[str, Any] = {} if merged is None else merged.shards[0][1]
    camp = rep0.get("campaign")
    gen = None if merged is None else merged.generated
    return {
        "schema": jsonreport.SCHEMA_NAME, "schema_version": jsonreport.SCHEMA_VERSION, "command": "merge",
        "argv": list(argv), "verdict": str(verdict.kind), "exit_code": verdict.exit_code, "reason": verdict.reason,
        "interrupted": verdict.interrupted,
        "suite": rep0.get("suite") or {"version": jsonreport.suite_version(),
                                       "contract_version": catalog.CONTRACT_VERSION,
                                       "catalog_schema_version": catalog.SCHEMA_VERSION,
                                       "generator_version": catalog.GENERATOR_VERSION},
        "backend": rep0.get("backend"), "seed": None if camp is None else camp["seed"],
        "examples": None if merged is None else (gen["problems_run"] if gen else 0),
        "shape": rep0.get("shape"), "catalogs": [] if merged is None else merged.catalogs,
        "blame": [] if merged is None else shard_cause_lines(merged),
        "generated": gen, "serving": None, "replay": None, "shard": None, "campaign": camp,
        "shards": None if merged is None else [{"file": p, "k": r["shard"]["k"], "n": r["shard"]["n"],
                                                 "verdict": r["verdict"]} for p, r in merged.shards],
        "seconds": seconds}
