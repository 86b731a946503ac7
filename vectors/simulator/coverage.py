"""``python -m nvfp4_suite.vectors.simulator.coverage``: how much of the simulated
kernel's control flow the golden catalog and generated problems reach.

    python -m nvfp4_suite.vectors.simulator.coverage --json FILE [--arch gfx942|gfx950 ...]
        [--examples N] [--seed 1] [--jobs N] [--shard-size 10] [--no-golden]

Runs the tasks of ``sweep`` (every golden case at every launch its manifest
lists, and ``--examples`` generated problems per target in shards) with the
simulator's coverage recording on (``nvfp4_suite.kernels.flydsl.sim.coverage``)
in worker processes, each returning its records with its result, and
writes, per target and compiled kernel configuration (target, TOPK width,
splits, XCDs, layout), for the golden catalog, the generated problems and
their union: the basic blocks reached of all, the conditional-branch
directions reached of all, and each unreached block and direction. Prints a
table (a line per configuration, a total per target, and a line per split
class by block and branch ordinal: ``split_class_rows``). Exit 0 when every
task ran (conformance is ``sweep``'s to judge: a task that does not conform
still counts its launches), 1 when a task crashed, 2 when the kernel cannot
be had here.

The assembly text the simulator runs carries no byte addresses, so a place
is an instruction index in the kernel (``index``) and its line in the
assembly text of the configuration's compile (``line``); ``symbol`` is the
nearest label at or before it (the kernel's name before the first), with
the instructions after it (``+N``).

JSON schema (``check_schema`` enforces it; ``SCHEMA`` names its version)::

    {"schema": "nvfp4-sim-coverage/1",
     "targets": [str],                     # gfx942, gfx950
     "examples": int, "seed": int, "golden": bool,
     "crashed": [str],                     # tasks that raised, by name
     "configurations": [{
         "key": str,                       # "gfx950 topk=16 splits=2 xcds=0 layout=token_rows"
         "config": {"arch": str, "topk": int, "splits": int, "xcds": int, "layout": str,
                    "mutant": str | null},
         "blocks_total": int, "directions_total": int,
         "golden" | "generated" | "union": {
             "launches": int,
             "blocks_reached": int, "directions_reached": int,
             "exec": {str(index): [str]},  # reached block -> EXEC seen: "full", "partial", "none"
             "unreached_blocks": [{"index": int, "line": int, "symbol": str, "first": [str]}],
             "unreached_directions": [{"index": int, "line": int, "symbol": str,
                                       "direction": "taken" | "not_taken",
                                       "branch": str, "to": int, "first": [str]}]}}]}

``first``: up to ``FIRST`` instruction texts from the block (or the
direction's destination, instruction ``to``) on. A configuration appears when
any task launched it; one only the generated problems launch has a golden
entry reaching nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
from pathlib import Path

from nvfp4_suite.kernels.flydsl.sim import coverage as simcov
from nvfp4_suite.kernels.flydsl.sim.backend import kernel, sim_missing
from nvfp4_suite.kernels.flydsl.sim.program import Program
from nvfp4_suite.kernels.flydsl.targets import ARCHS, add_arch_option
from nvfp4_suite.vectors.catalog.casefile import write_atomic
from nvfp4_suite.vectors.cli.runner import guarded
from nvfp4_suite.vectors.engine.verdict import SetupError
from nvfp4_suite.vectors.simulator.sweep import golden_task, tasks_for

SCHEMA = "nvfp4-sim-coverage/1"
SOURCES = ("golden", "generated", "union")
FIRST = 3  # instructions shown from an unreached place


def covered_task(fn, args) -> tuple[str | None, dict]:
    """``fn(*args)`` (a ``sweep`` task) with coverage recording on, in a worker
    process: ``(None or the crash as text, the records: Collector.to_json())``.
    The records are the launches that finished, a crashed task's included."""
    col = simcov.COLLECTOR
    col.enabled = True
    col.reset()
    try:
        fn(*args)
        crash = None
    except Exception as e:  # noqa: BLE001 - a crashed task is reported by name, its records kept
        crash = f"{type(e).__name__}: {e}"
    records = col.to_json()
    col.reset()
    return crash, records


def gather(tasks, jobs: int, out=print) -> tuple[dict[str, simcov.Collector], list[str]]:
    """Run ``tasks`` (``sweep.tasks_for``'s ``(name, function, arguments)``) on
    ``jobs`` worker processes (1: this process), recording coverage:
    ``({"golden": Collector, "generated": Collector}, names crashed)``."""
    cols = {"golden": simcov.Collector(), "generated": simcov.Collector()}
    crashed: list[str] = []

    def take(done: int, name: str, fn, result) -> None:
        crash, records = result
        cols["golden" if fn is golden_task else "generated"].merge_json(records)
        out(f"[{done}/{len(tasks)}] {'CRASH' if crash else 'done '} {name}" + (f": {crash}" if crash else ""))
        if crash:
            crashed.append(name)

    if jobs <= 1:
        for done, (name, fn, a) in enumerate(tasks, 1):
            take(done, name, fn, covered_task(fn, a))
    else:
        with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
            futures = {pool.submit(covered_task, fn, a): (name, fn) for name, fn, a in tasks}
            for done, f in enumerate(concurrent.futures.as_completed(futures), 1):
                name, fn = futures[f]
                take(done, name, fn, f.result())
    return cols, crashed


def _symbol(program: Program, marks: list[tuple[int, str]], pc: int) -> str:
    """The nearest label at or before ``pc`` (``marks``: ascending ``(index, name)``) and the distance."""
    at, name = max((m for m in marks if m[0] <= pc), default=(0, program.name))
    return name if at == pc else f"{name}+{pc - at}"


def _first(program: Program, pc: int) -> list[str]:
    return [ins.text.strip() for ins in program.instrs[pc:pc + FIRST]]


def summarise(config: dict, records: dict[str, simcov.Record]) -> dict:
    """One configuration's entry of the JSON (see the module docstring) from its
    ``records`` by source (``golden``, ``generated``, ``union``; an absent source
    reached nothing)."""
    kern, _ = kernel(config["arch"], config["topk"], config["splits"], config["xcds"], config["layout"],
                     config["mutant"])
    prog, flow = kern.program, kern.flow
    marks = sorted([(0, prog.name)] + [(i, n) for n, i in prog.labels.items()])
    entry: dict = {"key": simcov.config_key(config), "config": config, "blocks_total": len(flow.starts),
                   "directions_total": 2 * len(flow.conds)}
    for source in SOURCES:
        rec = records.get(source, simcov.Record())
        unreached_dirs = []
        reached_dirs = 0
        for pc in flow.conds:
            for bit, name in simcov.DIRECTION_NAMES.items():
                if rec.directions.get(pc, 0) & bit:
                    reached_dirs += 1
                    continue
                to = flow.target[pc] if bit == simcov.TAKEN else pc + 1
                assert to is not None  # a conditional branch has a target (program.parse_program)
                unreached_dirs.append({"index": pc, "line": prog.instrs[pc].line, "symbol": _symbol(prog, marks, pc),
                                       "direction": name, "branch": prog.instrs[pc].text.strip(), "to": to,
                                       "first": _first(prog, to)})
        entry[source] = {
            "launches": rec.launches,
            "blocks_reached": sum(1 for s in flow.starts if s in rec.blocks),
            "directions_reached": reached_dirs,
            "exec": {str(s): [n for bit, n in simcov.EXEC_NAMES.items() if rec.blocks[s] & bit]
                     for s in flow.starts if s in rec.blocks},
            "unreached_blocks": [{"index": s, "line": prog.instrs[s].line, "symbol": _symbol(prog, marks, s),
                                  "first": _first(prog, s)} for s in flow.starts if s not in rec.blocks],
            "unreached_directions": unreached_dirs}
    return entry


def report(cols: dict[str, simcov.Collector], archs, examples: int, seed: int, golden: bool,
           crashed: list[str]) -> dict:
    """The JSON document (see the module docstring) of the records ``cols`` by source."""
    keys = sorted(set(cols["golden"].records) | set(cols["generated"].records))
    configs = []
    for key in keys:
        by_source: dict[str, simcov.Record] = {}
        union = simcov.Record()
        config: dict = {}
        for source in ("golden", "generated"):
            if key in cols[source].records:
                config, rec = cols[source].records[key]
                by_source[source] = rec
                union.merge(rec)
        by_source["union"] = union
        configs.append(summarise(config, by_source))
    return {"schema": SCHEMA, "targets": list(archs), "examples": examples, "seed": seed, "golden": golden,
            "crashed": crashed, "configurations": configs}


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(f"coverage JSON: {what}")


def check_schema(doc: dict) -> None:
    """Raise ValueError naming the first place where ``doc`` departs from the
    schema in the module docstring (types, names and that each count agrees with
    its totals and lists)."""
    _need(isinstance(doc, dict) and doc.get("schema") == SCHEMA, f"schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    for k, t in (("targets", list), ("examples", int), ("seed", int), ("golden", bool), ("crashed", list),
                 ("configurations", list)):
        _need(isinstance(doc.get(k), t), f"{k} is {doc.get(k)!r}, not a {t.__name__}")
    _need(all(a in ARCHS for a in doc["targets"]), f"targets {doc['targets']!r} outside {ARCHS}")
    for c in doc["configurations"]:
        key = c.get("key")
        _need(isinstance(key, str), f"configuration key {key!r}")
        _need(set(c.get("config", {})) == {"arch", "topk", "splits", "xcds", "layout", "mutant"},
              f"{key}: config fields {sorted(c.get('config', {}))}")
        _need(simcov.config_key(c["config"]) == key, f"{key}: key does not name config {c['config']!r}")
        for k in ("blocks_total", "directions_total"):
            _need(isinstance(c.get(k), int) and c[k] >= 0, f"{key}: {k} is {c.get(k)!r}")
        for source in SOURCES:
            s = c.get(source)
            _need(isinstance(s, dict), f"{key}: no {source} entry")
            for k in ("launches", "blocks_reached", "directions_reached"):
                _need(isinstance(s.get(k), int) and s[k] >= 0, f"{key} {source}: {k} is {s.get(k)!r}")
            ub, ud = s.get("unreached_blocks"), s.get("unreached_directions")
            _need(isinstance(ub, list) and s["blocks_reached"] + len(ub) == c["blocks_total"],
                  f"{key} {source}: {s['blocks_reached']} blocks reached and {ub!r} unreached "
                  f"make not {c['blocks_total']}")
            _need(isinstance(ud, list) and s["directions_reached"] + len(ud) == c["directions_total"],
                  f"{key} {source}: {s['directions_reached']} directions reached and {len(ud or [])} "
                  f"unreached make not {c['directions_total']}")
            _need(isinstance(s.get("exec"), dict) and len(s["exec"]) == s["blocks_reached"]
                  and all(set(v) <= set(simcov.EXEC_NAMES.values()) and v for v in s["exec"].values()),
                  f"{key} {source}: exec {s.get('exec')!r}")
            for b in ub:
                _need(set(b) == {"index", "line", "symbol", "first"} and isinstance(b["index"], int)
                      and isinstance(b["line"], int) and isinstance(b["symbol"], str)
                      and isinstance(b["first"], list), f"{key} {source}: unreached block {b!r}")
            for d in ud:
                _need(set(d) == {"index", "line", "symbol", "direction", "branch", "to", "first"}
                      and d["direction"] in simcov.DIRECTION_NAMES.values()
                      and isinstance(d["index"], int) and isinstance(d["to"], int), f"{key} {source}: "
                      f"unreached direction {d!r}")


def table(doc: dict) -> list[str]:
    """The stdout table: per configuration, per target (summed) and per split
    class (``split_class_rows``), blocks and directions reached of all for
    golden, generated and union."""
    head = f"{'configuration':48} " + " ".join(f"{s + ' blocks':>16} {s + ' dirs':>16}" for s in SOURCES)
    lines = [head]

    def row(name: str, cs: list[dict]) -> str:
        cells = []
        for s in SOURCES:
            for what in ("blocks", "directions"):
                got = sum(c[s][f"{what}_reached"] for c in cs)
                total = sum(c[f"{what}_total"] for c in cs)
                cells.append(f"{got:>7}/{total:<8}")
        return f"{name:48} " + " ".join(cells)

    for arch in doc["targets"]:
        cs = [c for c in doc["configurations"] if c["config"]["arch"] == arch]
        lines += [row(c["key"], [c]) for c in cs]
        lines.append(row(f"{arch} all {len(cs)} configurations", cs))
        lines += split_class_rows(arch, cs)
    return lines


def split_class_rows(arch: str, configurations: list[dict]) -> list[str]:
    """A table row per split class (splits 1, splits > 1) of ``arch``'s
    ``configurations`` (the JSON's entries): the blocks and directions reached
    by ordinal (``Flow.starts``, ``Flow.conds``), in any configuration of the
    class. The compiles of a class share their control flow, so this compares
    the golden and generated halves where they launch different TOPK widths,
    placements and layouts (the totals per target above add configurations
    that only one half launches)."""
    classes: dict[tuple, list[dict]] = {}
    for c in configurations:
        classes.setdefault((c["config"]["splits"] > 1, c["blocks_total"], c["directions_total"]), []).append(c)
    lines = []
    for (multi, n_blocks, n_dirs), cs in sorted(classes.items()):
        cells = []
        for source in SOURCES:
            blocks, dirs = set(), set()
            for c in cs:
                if not c[source]["launches"]:
                    continue
                cfg = c["config"]
                flow = kernel(arch, cfg["topk"], cfg["splits"], cfg["xcds"], cfg["layout"], cfg["mutant"])[0].flow
                gone_b = {b["index"] for b in c[source]["unreached_blocks"]}
                gone_d = {(d["index"], d["direction"]) for d in c[source]["unreached_directions"]}
                blocks |= {i for i, pc in enumerate(flow.starts) if pc not in gone_b}
                dirs |= {(i, name) for i, pc in enumerate(flow.conds) for name in simcov.DIRECTION_NAMES.values()
                         if (pc, name) not in gone_d}
            cells += [f"{len(blocks):>7}/{n_blocks:<8}", f"{len(dirs):>7}/{n_dirs:<8}"]
        name = f"{arch} splits{'>1' if multi else '=1'} by ordinal, {len(cs)} configurations"
        lines.append(f"{name:48} " + " ".join(cells))
    return lines


def main(argv=None) -> int:
    """The command line; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.vectors.simulator.coverage",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, type=Path, help="write the coverage report here")
    add_arch_option(ap)
    ap.add_argument("--examples", type=int, default=0, help="generated problems per target")
    ap.add_argument("--no-golden", action="store_true", help="skip the golden catalog")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shard-size", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (1: this process)")
    args = ap.parse_args(argv)
    return guarded(lambda: _coverage(args))


def _coverage(args) -> int:
    """The coverage run ``args`` asks for; exit 1 when a task crashed (its coverage is then incomplete)."""
    archs = tuple(args.arch or ARCHS)
    if args.examples < 0:
        raise SetupError(f"--examples must be >= 0, got {args.examples}")
    if args.no_golden and args.examples == 0:
        raise SetupError("nothing to run: --no-golden and no --examples")
    missing = sim_missing(archs)
    if missing:
        raise SetupError(missing)
    tasks = [t for a in archs for t in tasks_for(a, not args.no_golden, examples=args.examples, seed=args.seed,
                                                  shard_size=args.shard_size)]
    cols, crashed = gather(tasks, max(1, args.jobs), out=lambda s: print(s, flush=True))
    doc = report(cols, archs, args.examples, args.seed, not args.no_golden, crashed)
    check_schema(doc)
    write_atomic(args.json, (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
    print("\n".join(table(doc)))
    print(f"written: {args.json}")
    for name in crashed:
        print(f"CRASHED: {name}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
