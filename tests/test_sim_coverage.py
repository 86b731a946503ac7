"""Coverage records of the simulated kernel (``kernels/flydsl/sim/coverage.py``),
the coverage command's JSON (``vectors/simulator/coverage.py``) and the argued
list of unreached directions (``coverage_exceptions``)."""

import re

import pytest
from sim_kernels import hand_kernel, sim_backend

from nvfp4_suite.kernels.flydsl.sim import coverage
from nvfp4_suite.kernels.flydsl.sim.launch import dispatch
from nvfp4_suite.kernels.flydsl.sim.memory import Memory

# Wave 0 holds lane 0 (v0 == 0), wave 1 does not: the execz branch (#2) falls
# through on wave 0 with one lane and is taken by wave 1 with none; the scc1
# branch (#6) is never taken (workgroup id 0), so .LBB0_2 (#8) is never entered.
TINY = """\tv_cmp_eq_u32_e32 vcc, 0, v0
\ts_and_saveexec_b64 s[8:9], vcc
\ts_cbranch_execz .LBB0_1
\tv_mov_b32_e32 v1, 0
.LBB0_1:
\ts_or_b64 exec, exec, s[8:9]
\ts_cmp_eq_u32 s2, 7
\ts_cbranch_scc1 .LBB0_2
\ts_endpgm
.LBB0_2:
\ts_endpgm"""


@pytest.fixture
def collector():
    """The process collector, on and empty; restored after."""
    col = coverage.COLLECTOR
    was, kept = col.enabled, col.records
    col.enabled, col.records = True, {}
    yield col
    col.enabled, col.records = was, kept


@pytest.mark.parametrize("batched", [True, False])
def test_tiny_kernel_records_blocks_exec_and_directions(collector, batched):
    k = hand_kernel(TINY)
    k.config = {"arch": "gfx950", "name": "tiny"}
    assert k.flow.starts == [0, 3, 4, 7, 8]
    assert k.flow.conds == [2, 6]
    dispatch(k, Memory(), b"", (1, 1, 1), block=128, batched=batched)
    [(config, rec)] = collector.records.values()
    assert config == {"arch": "gfx950", "name": "tiny"}
    assert rec.launches == 1
    assert rec.blocks == {0: coverage.FULL, 3: coverage.PARTIAL, 4: coverage.PARTIAL | coverage.NONE,
                          7: coverage.FULL}
    assert rec.directions == {2: coverage.TAKEN | coverage.NOT_TAKEN, 6: coverage.NOT_TAKEN}


def test_argued_exec_matches_the_tiny_kernels_record_and_sees_a_wrong_argument(collector):
    k = hand_kernel(TINY)
    k.config = {"arch": "gfx950", "name": "tiny"}
    dispatch(k, Memory(), b"", (1, 1, 1), block=128)
    [(_, rec)] = collector.records.values()
    # Nothing excluded: .LBB0_2 (#8) may be entered too; the guard's join (#4)
    # partial (wave 0's one lane) or empty (wave 1, through the execz branch).
    assert coverage.argued_exec(k.program, k.flow) == {**rec.blocks, 8: coverage.FULL}
    # The scc1 branch (#6) argued never taken: exactly what the launch entered.
    assert coverage.argued_exec(k.program, k.flow, {(6, "taken")}) == rec.blocks
    # A wrong argument (the execz branch never taken) denies the EXEC-empty wave the launch had.
    wrong = coverage.argued_exec(k.program, k.flow, {(2, "taken"), (6, "taken")})
    assert wrong[4] == coverage.PARTIAL and rec.blocks[4] & ~wrong[4] == coverage.NONE
    # A write of EXEC the argument does not model is refused.
    other = hand_kernel(TINY.replace("\tv_mov_b32_e32 v1, 0", "\ts_mov_b64 exec, -1"))
    with pytest.raises(ValueError, match="does not model"):
        coverage.argued_exec(other.program, other.flow)


def test_recording_off_records_nothing(collector):
    collector.enabled = False
    dispatch(hand_kernel(TINY), Memory(), b"", (1, 1, 1), block=128)
    assert collector.records == {}


def test_collector_json_round_trip_merges():
    a, b = coverage.Collector(), coverage.Collector()
    rec = coverage.Launch()
    rec.enter(0, coverage.FULL)
    rec.branch(5, True)
    a.finish({"arch": "gfx942", "topk": 16}, rec)
    rec2 = coverage.Launch()
    rec2.enter(0, coverage.NONE)
    rec2.branch(5, False)
    b.finish({"arch": "gfx942", "topk": 16}, rec2)
    a.merge_json(b.to_json())
    [(_, got)] = a.records.values()
    assert got.blocks == {0: coverage.FULL | coverage.NONE}
    assert got.directions == {5: coverage.TAKEN | coverage.NOT_TAKEN}
    assert got.launches == 2


def _text_flow(text: str) -> tuple[int, int]:
    """Block starts and conditional branches read from the assembly text alone
    (labels and mnemonics by regular expression), not through ``program``."""
    body = text.split("\nk:\n", 1)[1] if "\nk:\n" in text else re.split(r"\n_?\w+:\n", text, maxsplit=1)[1]
    body = body.split(".Lfunc_end", 1)[0]
    n, starts, conds, label_at, targets = 0, {0}, 0, {}, []
    for raw in body.splitlines():
        s = raw.split(";")[0].split("//")[0].strip()
        if not s or (s.startswith(".") and not s.endswith(":")):
            continue
        if s.endswith(":"):
            label_at[s[:-1]] = n
            continue
        m = s.split()[0]
        if m == "s_branch" or m.startswith("s_cbranch_"):
            targets.append(s.split()[-1])
            conds += m.startswith("s_cbranch_")
            starts.add(n + 1)
        elif m == "s_endpgm":
            starts.add(n + 1)
        n += 1
    starts |= {label_at[t] for t in targets}
    return len({s for s in starts if s < n}), conds


def test_real_launch_records_within_the_disassembly(collector):
    backend = sim_backend()
    from nvfp4_suite.kernels.flydsl.sim.bench import bench_problem
    from nvfp4_suite.kernels.flydsl.sim.compile import assembly_path

    problem = bench_problem()
    kern, _ = backend.kernel("gfx950", 16, 2, 0, "token_rows", None)
    blocks, conds = _text_flow(assembly_path("gfx950", 16, 2, 0, "token_rows", None).read_text())
    assert (len(kern.flow.starts), len(kern.flow.conds)) == (blocks, conds)
    was = kern.fuse
    try:
        got = []
        for fuse in (True, False):
            collector.reset()
            kern.fuse = fuse
            backend.run(problem, "gfx950", splits=2)
            [(config, rec)] = collector.records.values()
            got.append(rec)
    finally:
        kern.fuse = was
    # Fused stretches record what the steps record one by one.
    assert got[0] == got[1]
    rec = got[0]
    assert config == {"arch": "gfx950", "topk": 16, "splits": 2, "xcds": 0, "layout": "token_rows", "mutant": None}
    assert set(rec.blocks) <= set(kern.flow.starts) and 0 in rec.blocks
    assert set(rec.directions) <= set(kern.flow.conds)
    # A direction taken enters the block it leads to.
    for pc, m in rec.directions.items():
        if m & coverage.TAKEN:
            assert kern.flow.target[pc] in rec.blocks
        if m & coverage.NOT_TAKEN:
            assert pc + 1 in rec.blocks


def test_command_json_matches_its_schema(tmp_path):
    sim_backend()
    import json

    from nvfp4_suite.vectors.simulator import coverage as command

    out = tmp_path / "cov.json"
    # Two generated problems in this process, no golden case: short.
    assert command.main(["--json", str(out), "--arch", "gfx950", "--no-golden", "--examples", "2",
                         "--jobs", "1"]) == 0
    doc = json.loads(out.read_text())
    command.check_schema(doc)
    assert doc["configurations"], "two generated problems launch at least one configuration"
    c = doc["configurations"][0]
    assert c["generated"]["launches"] > 0 and c["golden"]["launches"] == 0
    assert c["union"]["blocks_reached"] == c["generated"]["blocks_reached"]
    # A split class of one configuration reaches, by ordinal, what that configuration does.
    cells = re.compile(r"\d+/\d+")
    [own] = [line for line in command.table(doc) if line.startswith(c["key"] + " ")]
    [by_class] = command.split_class_rows("gfx950", [c])
    assert cells.findall(by_class) == cells.findall(own)
    assert len(command.split_class_rows("gfx950", doc["configurations"])) == len(
        {x["config"]["splits"] > 1 for x in doc["configurations"]})
    # The check sees a count that disagrees with its list.
    c["union"]["blocks_reached"] += 1
    with pytest.raises(ValueError, match="blocks reached"):
        command.check_schema(doc)


def _unreached(rec: coverage.Record, flow: coverage.Flow) -> set[tuple[int, str]]:
    return {(pc, name) for pc in flow.conds for bit, name in coverage.DIRECTION_NAMES.items()
            if not rec.directions.get(pc, 0) & bit}


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_argued_entries_match_the_compiled_branches(arch):
    from sim_kernels import CONFIGS

    from nvfp4_suite.kernels.flydsl.sim.coverage_exceptions import expected_unreached

    backend = sim_backend()
    for topk, splits, xcds, layout in CONFIGS:
        kern, _ = backend.kernel(arch, topk, splits, xcds, layout, None)
        expected_unreached(kern.config, kern.program, kern.flow)  # raises naming a branch that moved


def _by_branch(records) -> set[tuple[bool, int, str]]:
    """``(splits > 1, branch ordinal in Flow.conds, direction)`` of every direction
    taken by ``records`` (``Collector.records``' values): the compiles of one split
    class share their branches (``coverage_exceptions``), so a direction is one
    of its class whichever TOPK, placement and layout took it."""
    from nvfp4_suite.kernels.flydsl.sim.backend import kernel

    out = set()
    for config, rec in records:
        kern, _ = kernel(config["arch"], config["topk"], config["splits"], config["xcds"], config["layout"], None)
        out |= {(config["splits"] > 1, i, name) for i, pc in enumerate(kern.flow.conds)
                for bit, name in coverage.DIRECTION_NAMES.items() if rec.directions.get(pc, 0) & bit}
    return out


def _reachable(arch: str) -> set[tuple[bool, int, str]]:
    """The directions of both split classes (as ``_by_branch``'s) that some
    configuration a launch on ``arch`` may need can take: each class's every
    branch direction but those ``UNREACHABLE`` argues unreached on all of the
    class's configurations."""
    from nvfp4_suite.kernels.flydsl.sim.backend import kernel
    from nvfp4_suite.kernels.flydsl.sim.compile import bundle_configs
    from nvfp4_suite.kernels.flydsl.sim.coverage_exceptions import UNREACHABLE

    configs = [{"arch": a, "topk": t, "splits": s, "xcds": x, "layout": lay, "mutant": None}
               for a, t, s, x, lay, m in bundle_configs() if a == arch and m is None]
    out = set()
    for multi in (False, True):
        of_class = [c for c in configs if (c["splits"] > 1) == multi]
        kern, _ = kernel(arch, of_class[0]["topk"], of_class[0]["splits"], of_class[0]["xcds"],
                         of_class[0]["layout"], None)
        out |= {(multi, i, name) for i in range(len(kern.flow.conds)) for name in coverage.DIRECTION_NAMES.values()
                if not all(any(e.branch == i and e.direction == name and e.applies(c) for e in UNREACHABLE)
                           for c in of_class)}
    return out


def _argued(config: dict, kern) -> dict[int, int]:
    """``coverage.argued_exec`` of ``kern`` with the directions ``UNREACHABLE``
    argues for ``config`` excluded."""
    from nvfp4_suite.kernels.flydsl.sim.coverage_exceptions import argued_unreached

    return coverage.argued_exec(kern.program, kern.flow, set(argued_unreached(config, kern.program, kern.flow)))


def _assert_argued_exec(key: str, kern, rec: coverage.Record, argued: dict[int, int]) -> None:
    """Every block ``rec`` entered is one the argument lets a wave enter, with
    only the EXEC populations it argues (``coverage.argued_exec``)."""
    for pc, got in rec.blocks.items():
        ordinal = kern.flow.starts.index(pc)
        assert pc in argued, f"{key}: block #{pc} (ordinal {ordinal}) entered, argued unreachable"
        assert not got & ~argued[pc], (f"{key}: block #{pc} (ordinal {ordinal}) entered with "
                                       f"{_names(got)}, argued {_names(argued[pc])}")


def _names(mask: int) -> list[str]:
    return [n for bit, n in coverage.EXEC_NAMES.items() if mask & bit]


# The catalog's share of CI's coverage check, per target: the token_rows golden
# cases of TOPK 64 and 33 with an empty row (88 topk-64-empty-rows, 90
# topk-33-empty-rows) at 1 and 8 splits. They leave unreached on their
# configurations exactly what the argued list names for them (as the full
# catalog does), and together take every reachable direction of both split
# classes. The full catalog runs by hand (-m thorough, below).
CI_CASES, CI_SPLITS = {88, 90}, {1, 8}


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_the_catalog_leaves_unreached_only_the_listed_directions(collector, arch):
    backend = sim_backend()
    from nvfp4_suite.kernels.flydsl.sim.coverage_exceptions import expected_unreached
    from nvfp4_suite.vectors.engine.check import check_golden

    run = check_golden(backend.FlydslSimBackend(arch), cases=CI_CASES, splits=CI_SPLITS)
    assert run.ok
    keys = sorted(collector.records)
    assert keys == sorted(f"{arch} topk={t} splits={s} xcds={x} layout=token_rows" for t in (33, 64)
                          for s in CI_SPLITS for x in (0, 8))
    for key in keys:
        config, rec = collector.records[key]
        kern, _ = backend.kernel(arch, config["topk"], config["splits"], config["xcds"], "token_rows", None)
        expected = expected_unreached(config, kern.program, kern.flow)
        assert _unreached(rec, kern.flow) == set(expected), key
        _assert_argued_exec(key, kern, rec, _argued(config, kern))
    missing = _reachable(arch) - _by_branch(collector.records.values())
    assert not missing, f"the CI cases leave reachable directions unreached: {sorted(missing)}"


# The generated problems' share of CI's coverage check, per target: this many
# from this seed (``check --no-golden --examples N --seed S`` draws the same).
CI_GENERATED, CI_GENERATED_SEED = 20, 1


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_generated_problems_take_every_reachable_direction_and_no_argued_one(collector, arch):
    backend = sim_backend()
    from nvfp4_suite.kernels.flydsl.sim.coverage_exceptions import UNREACHABLE
    from nvfp4_suite.vectors.engine.check import check_generated

    gen = check_generated(backend.FlydslSimBackend(arch), CI_GENERATED, CI_GENERATED_SEED, shrink=False)
    assert gen.ok and gen.n == CI_GENERATED
    for key, (config, rec) in collector.records.items():
        kern, _ = backend.kernel(arch, config["topk"], config["splits"], config["xcds"], config["layout"], None)
        for entry in UNREACHABLE:
            if entry.applies(config):
                pc = kern.flow.conds[entry.branch]
                bit = coverage.TAKEN if entry.direction == "taken" else coverage.NOT_TAKEN
                assert not rec.directions.get(pc, 0) & bit, f"{key}: argued unreachable, reached: {entry.reason}"
        _assert_argued_exec(key, kern, rec, _argued(config, kern))
    missing = _reachable(arch) - _by_branch(collector.records.values())
    assert not missing, (f"{CI_GENERATED} generated problems (seed {CI_GENERATED_SEED}) leave reachable "
                         f"directions unreached (splits > 1, branch, direction): {sorted(missing)}")


@pytest.mark.thorough
def test_the_full_catalog_and_generated_problems_on_both_targets():
    """By hand (-m thorough; minutes): what the coverage command runs (the full
    catalog, ``GENERATED`` problems from ``GENERATED_SEED`` per target), checked
    configuration by configuration (``coverage_exceptions``' rule): the
    catalog leaves unreached exactly the directions ``UNREACHABLE`` and
    ``CATALOG_GAPS`` name; the union of both halves launches every bundled
    configuration and, on each, leaves unreached exactly the directions
    ``UNREACHABLE`` names and the blocks no wave enters without them, every block entered with exactly the EXEC
    populations ``coverage.argued_exec`` argues."""
    import os

    backend = sim_backend()
    from nvfp4_suite.kernels.flydsl.sim.compile import bundle_configs
    from nvfp4_suite.kernels.flydsl.sim.coverage_exceptions import (
        GENERATED,
        GENERATED_SEED,
        argued_unreached,
        expected_unreached,
    )
    from nvfp4_suite.vectors.simulator.coverage import gather
    from nvfp4_suite.vectors.simulator.sweep import tasks_for

    for arch in ("gfx942", "gfx950"):
        cols, crashed = gather(tasks_for(arch, True, examples=GENERATED, seed=GENERATED_SEED),
                               min(2, os.cpu_count() or 1), out=lambda s: None)
        assert not crashed
        union = coverage.Collector()
        for col in cols.values():
            union.merge_json(col.to_json())
        bundled = [{"arch": a, "topk": t, "splits": s, "xcds": x, "layout": lay, "mutant": None}
                   for a, t, s, x, lay, m in bundle_configs() if a == arch and m is None]
        launchable = {coverage.config_key(c) for c in bundled}
        assert set(union.records) == launchable, (arch, sorted(launchable ^ set(union.records)))
        for key, (config, rec) in union.records.items():
            kern, _ = backend.kernel(arch, config["topk"], config["splits"], config["xcds"], config["layout"], None)
            left = argued_unreached(config, kern.program, kern.flow)
            assert _unreached(rec, kern.flow) == set(left), (key, sorted(_unreached(rec, kern.flow) ^ set(left)))
            argued = coverage.argued_exec(kern.program, kern.flow, set(left))
            assert rec.blocks == argued, (key, {kern.flow.starts.index(pc): (_names(rec.blocks.get(pc, 0)),
                                                                             _names(argued.get(pc, 0)))
                                                for pc in set(rec.blocks) | set(argued)
                                                if rec.blocks.get(pc) != argued.get(pc)})
            if key in cols["golden"].records:
                expected = set(expected_unreached(config, kern.program, kern.flow))
                assert _unreached(cols["golden"].records[key][1], kern.flow) == expected, key


def _flow_reach(records) -> dict[str, tuple]:
    """Per configuration key (the mutant's name left out): the kernel's block and
    branch counts and, by block and branch ordinal, what ``records`` reached."""
    from nvfp4_suite.kernels.flydsl.sim.backend import kernel

    out = {}
    for key, (c, rec) in records.items():
        kern, _ = kernel(c["arch"], c["topk"], c["splits"], c["xcds"], c["layout"], c["mutant"])
        starts, conds = kern.flow.starts, kern.flow.conds
        out[key.replace(f" mutant={c['mutant']}", "")] = (
            len(starts), len(conds), tuple(rec.blocks.get(pc, 0) for pc in starts),
            tuple(rec.directions.get(pc, 0) for pc in conds))
    return out


def test_each_kernel_mutant_changes_output_or_coverage_on_its_catching_launch(collector):
    """Each FlyDSL kernel mutant on its catching launch
    (tests/test_bugs.py ``CATCHING``) and the correct kernel on the same one;
    the record (docs/flydsl.md, "Coverage"): every mutant fails it by output,
    ``ticket_not_reset`` alone also changes the coverage (its reset's lane-0
    guard, branch #7, is gone)."""
    from test_bugs import CATCHING

    from nvfp4_suite.kernels import get_backend
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.engine.check import check_golden

    sim_backend()
    record = {}
    for spec, (correct, name, splits) in sorted(CATCHING.items()):
        if ".flydsl." not in spec:
            continue
        case = next(c["id"] for c in catalog.load_manifest()["cases"] if c["name"] == name)
        got = []
        for which in (correct, spec):
            collector.reset()
            run = check_golden(get_backend(which), cases={case}, splits={splits})
            got.append((run.ok, _flow_reach(collector.records)))
        (ok, reach), (mutant_ok, mutant_reach) = got
        assert ok, f"the correct {correct} fails {name} splits={splits}"
        record[spec.split(":")[1]] = (not mutant_ok, reach != mutant_reach)
    assert all(out or cov for out, cov in record.values()), record
    assert [m for m, (_, cov) in record.items() if cov] == ["ticket_not_reset_gfx950"], record
