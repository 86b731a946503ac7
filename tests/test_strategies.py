"""nvfp4_suite.vectors.engine.strategies: drawn problems are valid, inside the
backend's domain, and the same for a seed in every process and route."""

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from nvfp4_suite.kernels.protocol import INTERPRETED_LIMITS, Capabilities
from nvfp4_suite.reference.paged_cache import BLK
from nvfp4_suite.vectors.engine.strategies import _slots_any, digest, plan, plan_weights, run_generated, weighted

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class CompactedCaps(Capabilities):
    """A backend declaring compacted slot lists (the field issue 21 adds to Capabilities)."""

    slot_lists: str = "compacted"


def _draw(caps, n, seed=0):
    out = []
    run_generated(caps, n, seed, lambda p, launch: out.append((p, launch)), shrink=False)
    return out


def test_every_drawn_problem_is_valid_and_inside_the_capabilities():
    caps = Capabilities(layouts=("planar",), splits=(2, 5), xcds=(0, 8), limits=INTERPRETED_LIMITS)
    for p, launch in _draw(caps, 40):
        p.validate()
        assert p.layout == "planar" and launch.splits in (2, 5) and launch.xcds in (0, 8)
        assert p.reqs <= 2 and p.num_kv_heads <= 2 and p.TOPK <= 8 and p.q_len <= 2


def test_compacted_slot_lists_hold_n_ascending_visible_ids_then_minus_one():
    for p, _ in _draw(CompactedCaps(splits=(1, 2)), 40):
        p.validate()
        pos = p.positions
        for h in range(p.num_kv_heads):
            for r in range(p.rows):
                sb = pos[r] // BLK
                n = min(p.TOPK, sb + 1) if pos[r] >= 0 else 0
                ids = p.topk[h, r]
                assert (ids[n:] == -1).all(), (h, r, ids)
                assert (np.diff(ids[:n]) > 0).all() and (ids[:n] >= 0).all() and (ids[:n] <= sb).all(), (h, r, ids)


def test_the_loop_count_selects_more_than_two_slots_per_split_of_the_smallest_split_count():
    rng = np.random.default_rng(0)

    def valid(slots, nvis):  # future ids are nvis and above
        return int(((slots >= 0) & (slots < nvis)).sum())

    # The smallest split count above 1 is 2: 2 * 2 + 1 valid slots, at most the visible blocks.
    assert valid(_slots_any(rng, "loop", "shuffled", 7, 8, (1, 4, 2)), 7) == 5
    assert valid(_slots_any(rng, "loop", "valid first", 3, 8, (2,)), 3) == 3


def test_weighted_draws_each_key_in_proportion_to_its_weight():
    from hypothesis import given, settings

    seen = []

    @settings(max_examples=300, derandomize=True, database=None)
    @given(weighted({"a": 1, "b": 3}))
    def collect(x):
        seen.append(x)

    collect()
    assert set(seen) == {"a", "b"} and seen.count("b") > seen.count("a")


@pytest.mark.parametrize("caps", [Capabilities(splits=tuple(range(1, 9))),
                                  Capabilities(splits=(1, 2, 4, 8), xcds=(0, 8), orders=("forward", "reverse"))])
def test_the_plan_holds_each_value_its_weight_share_give_or_take_its_weight_in_every_prefix(caps):
    got = [r for r, _ in zip(plan(caps, 3), range(400))]
    for k, table in plan_weights(caps).items():
        total = sum(table.values())
        for n in range(1, len(got) + 1):
            for v, w in table.items():
                seen = sum(getattr(r, k) == v for r in got[:n])
                assert abs(seen - n * w / total) <= w, (k, v, n, seen)


def test_the_plan_is_the_same_for_a_seed_and_differs_between_seeds():
    caps = Capabilities(splits=(1, 2, 4, 8), xcds=(0, 8))
    first = [r for r, _ in zip(plan(caps, 7), range(50))]
    assert first == [r for r, _ in zip(plan(caps, 7), range(50))]
    assert first != [r for r, _ in zip(plan(caps, 8), range(50))]


def test_generated_launches_follow_the_plan_and_only_the_declared_split_counts():
    caps = Capabilities(splits=(1, 3, 5), xcds=(0, 8))
    drawn = _draw(caps, 60, seed=4)
    assert [launch for _, launch in drawn] == [r.launch for r, _ in zip(plan(caps, 4), range(60))]
    only = []
    run_generated(caps, 20, 4, lambda p, launch: only.append(launch.splits), splits=(3,), shrink=False)
    assert set(only) == {3}


def test_a_failure_is_minimised_with_its_launch_held_then_to_the_simplest_launch_and_poison_that_still_fail():
    # Fails for every problem with Hkv > 1 launched with 3 or more splits,
    # poisoned or not: the smallest such is Hkv 2 at 3 splits, no placement, unpoisoned.
    caps = Capabilities(splits=(1, 2, 3, 5, 8), xcds=(0, 8))
    calls = []

    def fn(p, launch):
        calls.append((p, launch))
        if p.num_kv_heads > 1 and launch.splits >= 3:
            raise AssertionError(f"Hkv {p.num_kv_heads} splits {launch.splits}")

    with pytest.raises(AssertionError, match="Hkv 2 splits 3"):
        run_generated(caps, 200, 0, fn)
    p, launch = calls[-1]
    assert (p.num_kv_heads, launch.splits, launch.xcds) == (2, 3, 0)
    generated = [c for c in calls if c[1].splits >= 3 and c[0].num_kv_heads > 1]
    first = generated[0][1]
    assert first.splits > 3 or first.xcds, "the first failure's launch was already the simplest: nothing shown"


def test_a_failure_that_needs_its_launch_keeps_it_when_minimised():
    caps = Capabilities(splits=(1, 2, 4, 8), xcds=(0, 8))

    def fn(p, launch):
        if launch.splits == 8 and launch.xcds == 8:
            raise AssertionError(repr(launch))

    with pytest.raises(AssertionError, match="splits=8, xcds=8"):
        run_generated(caps, 200, 0, fn)


def test_a_poisoned_failure_is_reported_poisoned_and_an_unpoisoned_one_not():
    from nvfp4_suite.vectors.engine.coverage import problem_conditions

    caps = Capabilities(splits=(1,))
    last = []

    def needs_poison(p, launch):
        last[:] = [p]
        if "unread slabs poisoned" in problem_conditions(p):
            raise AssertionError("poisoned")

    with pytest.raises(AssertionError, match="poisoned"):
        run_generated(caps, 200, 0, needs_poison)
    assert "unread slabs poisoned" in problem_conditions(last[0])

    def any_problem(p, launch):
        last[:] = [p]
        raise AssertionError("always")

    assert next(plan(caps, 0)).poison  # the first problem, the one failing, is drawn poisoned

    with pytest.raises(AssertionError, match="always"):
        run_generated(caps, 200, 0, any_problem)
    assert "unread slabs poisoned" not in problem_conditions(last[0])


# --- the same problems for a seed, whatever the process imported ---------------

_DRAW = """
import sys
{imports}
from nvfp4_suite.kernels.protocol import Capabilities
from nvfp4_suite.vectors.engine.strategies import digest, run_generated
caps = Capabilities(splits=(1, 2, 4, 8), xcds=(0, 8))
if sys.argv[1] == "plain-hypothesis":
    # hypothesis' own draws, constants left in: the control
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from nvfp4_suite.vectors.engine.strategies import launches_for, problems_for
    @seed(5)
    @settings(max_examples=12, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(launches_for(caps), problems_for(caps))
    def prop(launch, problem):
        print(digest(problem, launch))
    prop()
else:
    run_generated(caps, 12, 5, lambda p, launch: print(digest(p, launch)), shrink=False)
"""

# A local module full of small literals: hypothesis adds them to its draws once imported.
_CONSTANTS = "VALUES = [" + ", ".join(str(i) for i in range(300)) + "]\nNAMES = ['planar', 'token_rows']\n"


def _digests(tmp_path, route: str, extra_imports: bool) -> list[str]:
    (tmp_path / "many_constants.py").write_text(_CONSTANTS)
    imports = ("import torch\nimport many_constants\nimport nvfp4_suite.kernels.flydsl.sim.backend\n"
               "import nvfp4_suite.vectors.engine.serving\n") if extra_imports else ""
    env = dict(os.environ, PYTHONPATH=str(tmp_path), OMP_NUM_THREADS="1")
    env.pop("NVFP4_DRAWN", None)
    r = subprocess.run([sys.executable, "-c", _DRAW.format(imports=imports), route], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def test_a_seed_draws_byte_identical_problems_whatever_the_process_imported(tmp_path):
    pytest.importorskip("torch", reason="the second import set imports torch")
    plain = _digests(tmp_path, "run_generated", extra_imports=False)
    more = _digests(tmp_path, "run_generated", extra_imports=True)
    assert len(plain) == 12 and plain == more


def test_without_the_neutraliser_the_imports_change_the_draws(tmp_path):
    # The control: hypothesis' own draws do depend on the imports, so the test above can fail.
    pytest.importorskip("torch", reason="the second import set imports torch")
    plain = _digests(tmp_path, "plain-hypothesis", extra_imports=False)
    more = _digests(tmp_path, "plain-hypothesis", extra_imports=True)
    assert len(plain) == len(more) == 12 and plain != more


def _logged(tmp_path, name, cmd, extra_env=None, cwd=ROOT) -> list[str]:
    log = tmp_path / f"{name}.drawn"
    env = dict(os.environ, NVFP4_DRAWN=str(log), OMP_NUM_THREADS="1", CI="true", **(extra_env or {}))
    env.pop("HYPOTHESIS_PROFILE", None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    return log.read_text().split()


def test_the_cli_the_pytest_route_and_a_tool_draw_the_same_problems_for_a_seed(tmp_path):
    # As many draws as the control below needs to show the imports changing them.
    n, seed = 12, 3
    cli = _logged(tmp_path, "cli", [sys.executable, "-m", "nvfp4_suite.vectors", "check", "--backend", "emulate",
                                    "--no-golden", "--examples", str(n), "--seed", str(seed)])
    # The pytest route: the plugin's generated test, run from a project that is not the suite.
    project = tmp_path / "project"
    project.mkdir()
    route = _logged(tmp_path, "pytest", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                                         "--nvfp4-backend", "emulate", "--nvfp4-seed", str(seed),
                                         "--nvfp4-examples", str(n), "-k", "test_generated"], cwd=project)
    tool = textwrap.dedent(f"""
        import torch  # a tool's own imports come first
        from nvfp4_suite.kernels import get_backend
        from nvfp4_suite.vectors.engine.check import check_generated
        assert check_generated(get_backend("emulate"), {n}, {seed}).ok
    """)
    by_tool = _logged(tmp_path, "tool", [sys.executable, "-c", tool])
    assert len(cli) == n and cli == route == by_tool


def test_digest_changes_with_any_byte_and_with_the_launch():
    (p, launch), = _draw(Capabilities(splits=(1, 2)), 1)
    d = digest(p, launch)
    pool = p.pool.copy()
    pool[0, 0] ^= 1
    assert digest(dataclasses.replace(p, pool=pool), launch) != d
    assert digest(p, dataclasses.replace(launch, splits=3 - launch.splits)) != d
    assert digest(p, launch) == d


def test_the_simulator_sweep_draws_what_check_draws_for_its_shard_seed(tmp_path):
    from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing

    why = sim_missing()
    if why:
        pytest.skip(f"the FlyDSL simulator cannot run here: {why}")
    # --seed 0: the first shard's seed is 0 * 100003 + 0 = 0 (sweep's docstring: a seed per shard).
    sweep = _logged(tmp_path, "sweep", [sys.executable, "-m", "nvfp4_suite.vectors.simulator.sweep", "--arch",
                                        "gfx950", "--examples", "1", "--shard-size", "1", "--seed", "0", "--jobs", "1"])
    cli = _logged(tmp_path, "cli", [sys.executable, "-m", "nvfp4_suite.vectors", "check", "--backend",
                                    "flydsl-sim-gfx950", "--no-golden", "--examples", "1", "--seed", "0"])
    assert len(cli) == 1 and sweep == cli


def test_a_shard_is_called_on_the_unsharded_runs_draws_of_its_share():
    # The property `check --shard` rests on: every shard draws the unsharded run's problems
    # and launches; fn sees share K of them (draws K-1, K-1+N, ...), the others pass unseen.
    caps = Capabilities(splits=(1, 2, 4))
    whole = [digest(p, launch) for p, launch in _draw(caps, 9, seed=5)]
    assert len(set(whole)) == 9
    for k in (1, 2, 3):
        mine: list[str] = []
        run_generated(caps, 9, 5, lambda p, launch, seen=mine: seen.append(digest(p, launch)), shrink=False,
                      shard=(k, 3))
        assert mine == whole[k - 1::3], k


def test_a_shard_stops_at_its_own_first_failure_having_drawn_as_the_unsharded_run():
    caps = Capabilities(splits=(1, 2, 4))
    whole = [digest(p, launch) for p, launch in _draw(caps, 9, seed=5)]
    seen = []

    def fails_at_the_third_call(p, launch):
        seen.append(digest(p, launch))
        assert len(seen) < 3

    with pytest.raises(AssertionError):
        run_generated(caps, 9, 5, fails_at_the_third_call, shrink=False, shard=(2, 3))
    # After the failure only it is called again (hypothesis replays the failing example).
    assert seen[:3] == [whole[1], whole[4], whole[7]] and set(seen[3:]) == {whole[7]}, seen
