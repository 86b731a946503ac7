"""nvfp4_suite.vectors.engine.check: verdicts are never vacuous, unreadable cases are reported by case
while the others run, golden cases are judged by their stored expectations."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from catalog_helpers import copy_catalog

import nvfp4_suite.reference as R
from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import Capabilities, Launch
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.cli import main
from nvfp4_suite.vectors.engine.check import check_generated, check_golden, replay_launches


@pytest.fixture
def small_catalog(tmp_path, monkeypatch):
    """A copy of the first four valid cases and one invalid case of the catalog
    (``tmp_path/vectors``), which ``catalog`` then reads."""
    m = catalog.load_manifest()
    chosen = [c for c in m["cases"] if c["result"] == "valid"][:4] + [
        next(c for c in m["cases"] if c["result"] == "invalid")]
    return copy_catalog(tmp_path, monkeypatch, chosen), chosen


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _rehash(here, idx):
    """Make the manifest's sha256 of case ``idx`` match its (altered) file."""
    import hashlib

    m = json.loads((here / "manifest.json").read_text())
    m["cases"][idx]["sha256"] = hashlib.sha256((here / m["cases"][idx]["file"]).read_bytes()).hexdigest()
    (here / "manifest.json").write_text(json.dumps(m))


def _pickle_npz(path):
    np.savez(path.with_suffix(""), meta=np.array([{"x": 1}], dtype=object))
    shutil.move(str(path.with_suffix("")) + ".npz", path)


@pytest.mark.parametrize("damage", ["flipped byte", "wrong sha256", "pickled with matching sha", "deleted"])
def test_each_corrupted_case_is_reported_by_case_with_exit_2_while_the_others_run(small_catalog, damage, capsys):
    here, chosen = small_catalog
    target = here / chosen[1]["file"]
    if damage == "flipped byte":
        _flip_byte(target)
    elif damage == "wrong sha256":
        m = json.loads((here / "manifest.json").read_text())
        m["cases"][1]["sha256"] = "0" * 64
        (here / "manifest.json").write_text(json.dumps(m))
    elif damage == "pickled with matching sha":
        _pickle_npz(target)
        _rehash(here, 1)
    else:
        target.unlink()
    assert main(["check", "--backend", "emulate", "--examples", "0"]) == 2
    out = capsys.readouterr().out
    assert f"{chosen[1]['id']:3d} {chosen[1]['name']:<28} ERROR: " in out, out
    assert f"4 of {len(chosen)} cases passed, 0 failed, 0 skipped, 1 unreadable" in out, out
    assert "NO VERDICT (a catalog has unreadable cases)" in out


def test_a_manifest_that_is_not_json_exits_2_naming_it(small_catalog, capsys):
    here, _ = small_catalog
    (here / "manifest.json").write_text("{not json")
    assert main(["check", "--backend", "emulate", "--examples", "0"]) == 2
    assert "unreadable manifest" in capsys.readouterr().err


def test_a_manifest_of_another_generator_version_exits_2(small_catalog, capsys):
    here, _ = small_catalog
    m = json.loads((here / "manifest.json").read_text())
    m["generator_version"] = catalog.GENERATOR_VERSION + 1
    (here / "manifest.json").write_text(json.dumps(m))
    assert main(["check", "--backend", "emulate", "--examples", "0"]) == 2
    assert "generator_version" in capsys.readouterr().err


def test_stored_expectations_that_drifted_from_the_reference_are_an_error_not_a_verdict(small_catalog, capsys):
    # A stored interval end moved by one bf16 step: the reference no longer
    # reproduces it, so no backend is judged against it.
    from nvfp4_suite.vectors.catalog.casefile import load_case, save_case

    here, chosen = small_catalog
    path = here / chosen[0]["file"]
    problem, meta, extra = load_case(path)
    extra["expect_exact_hi"] = extra["expect_exact_hi"].copy()
    extra["expect_exact_hi"].reshape(-1)[5] += 1
    save_case(path, problem, meta=meta, extra=extra)
    _rehash(here, 0)
    assert catalog.verify() == [f"case {chosen[0]['id']} {chosen[0]['name']}: array 'expect_exact_hi' differs "
                                "from the reference's"]
    run = check_golden(kernels.get_backend("reference"))
    assert run.cases[0].status == "ERROR" and "drifted" in run.cases[0].error
    assert "[row " in run.cases[0].error and all(c.status == "PASS" for c in run.cases[1:])


def test_missing_manifest_is_an_error_not_a_pass(small_catalog, capsys):
    here, _ = small_catalog
    (here / "manifest.json").unlink()
    assert main(["check", "--backend", "emulate", "--examples", "0"]) == 2
    assert "manifest.json is missing" in capsys.readouterr().err


def test_nothing_to_check_exits_2(capsys):
    assert main(["check", "--backend", "emulate", "--examples", "0", "--no-golden"]) == 2
    assert "nothing to check" in capsys.readouterr().err


class EvenSplits:
    """The emulation, declaring split counts 4 and 6 only (most cases run 1, 2, 3, 8)."""

    name, geometry = "even", R.SEED_GEOMETRY

    def __init__(self, layouts=R.LAYOUTS):
        self.capabilities = Capabilities(layouts=layouts, splits=(4, 6))

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        return R.emulate(problem, splits=splits)


def test_cases_whose_launches_are_all_outside_the_capabilities_are_skipped_not_passed(small_catalog):
    run = check_golden(EvenSplits())
    by_status = {c.status for c in run.cases}
    assert "SKIP" in by_status, run.text()
    for c in run.cases:
        if c.status == "SKIP":
            assert not c.ran and c.skipped and all("splits" in why for _, why in c.skipped)
    assert "skipped" in run.text()


def test_a_run_where_every_case_is_skipped_has_no_verdict(small_catalog, monkeypatch, capsys):
    monkeypatch.setitem(kernels._REGISTRY, "planar-only", lambda: EvenSplits(layouts=("planar",)))
    here, chosen = small_catalog
    m = json.loads((here / "manifest.json").read_text())
    m["cases"] = [c for c in m["cases"] if c["result"] == "valid" and c["params"]["layout"] == "token_rows"]
    (here / "manifest.json").write_text(json.dumps(m))
    assert m["cases"]
    assert main(["check", "--backend", "planar-only", "--examples", "0"]) == 2
    out = capsys.readouterr().out
    assert "NO VERDICT (nothing was judged)" in out and "SKIPPED: layout 'token_rows' not supported" in out


def test_replay_where_every_launch_is_skipped_has_no_verdict(capsys, monkeypatch):
    monkeypatch.setitem(kernels._REGISTRY, "even", EvenSplits)
    m = catalog.load_manifest()
    case = next(c for c in m["cases"] if c["result"] == "valid"
                and not {x["splits"] for x in c["launches"]} & {4, 6})
    assert main(["replay", str(catalog.HERE / case["file"]), "--backend", "even"]) == 2
    out = capsys.readouterr().out
    assert "SKIPPED: splits" in out and "NO VERDICT" in out


def test_replay_of_a_file_that_names_no_backend_needs_one(capsys):
    m = catalog.load_manifest()
    assert main(["replay", str(catalog.HERE / m["cases"][0]["file"])]) == 2
    assert "records no backend: give --backend" in capsys.readouterr().err


def test_replay_launches_follow_the_backends_capabilities():
    meta = {"launches": [Launch(2, 8).to_json(), Launch(2, 0).to_json()]}
    assert replay_launches(meta, Capabilities(splits=(2,))) == [Launch(2, 0)]
    assert replay_launches(meta, Capabilities(splits=(2,), xcds=(0, 8))) == [Launch(2, 8), Launch(2, 0)]
    assert replay_launches(meta, Capabilities(splits=(2,), xcds=(0, 8)), xcds=0) == [Launch(2, 0)]



def test_minimising_reports_its_progress_and_ends_at_the_problem_it_reports():
    from nvfp4_suite.kernels.mutants import NumpyKernel

    lines = []
    run = check_generated(NumpyKernel("head_mod"), examples=20, seed=1, progress=lines.append,
                          shrink_report_s=0.0)
    assert not run.ok
    shrink = [ln for ln in lines if ln.startswith("  minimising: ")]
    # The count, not a substring: "21 tries" contains "1 tries" (the count varies with hypothesis' state).
    assert len(shrink) > 1 and int(shrink[-1].split()[1]) > 1
    small = run.failing.problem
    assert shrink[-1].endswith(f"rows {small.rows}, Hkv {small.num_kv_heads}, TOPK {small.TOPK}, q_len {small.q_len}")


def test_an_interrupted_minimisation_keeps_the_smallest_failing_problem_not_the_latest():
    # Minimising tries problems in hypothesis's order, not ours: a later failing try
    # may be larger. Interrupted after some tries, the smallest one seen must be kept.
    import hostile

    from nvfp4_suite.vectors.engine import interrupts
    from nvfp4_suite.vectors.engine.check import problem_size

    seen = []

    class Wrong(hostile.Correct):
        def __call__(self, problem, *, splits=1):
            if R.emulate(problem).any():  # zeros are wrong here: a failing try
                seen.append(problem_size(problem))
            return np.zeros((problem.rows, problem.H, 128), np.float32)

    def progress(line):
        if line.startswith("  minimising: ") and len(seen) > 3:
            raise interrupts.Interrupted("SIGTERM")

    with interrupts.installed():
        run = check_generated(Wrong(), examples=20, seed=3, progress=progress, shrink_report_s=0.0)
    assert run.stopped == "SIGTERM" and not run.ok
    assert run.failing.unfinished == "the run stopped (SIGTERM)"
    assert problem_size(run.failing.problem) == min(seen)


def test_a_suite_error_that_does_not_repeat_is_hypothesis_flaky_error_not_a_verdict(monkeypatch):
    # No backend failure was recorded, so there is no flaky verdict to give: it
    # was an AttributeError on the missing failing problem, hiding the error itself.
    import hostile
    from hypothesis.errors import Flaky

    from nvfp4_suite.vectors.engine import check

    calls = []

    def run_case_failing_once(*args, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a suite-side error, once")
        return real(*args, **kw)

    real = check.run_case
    monkeypatch.setattr(check, "run_case", run_case_failing_once)
    with pytest.raises(Flaky):  # it holds the RuntimeError (how depends on hypothesis' version)
        check_generated(hostile.Correct(), examples=5, seed=0)


def test_when_the_minimising_budget_runs_out_hypothesis_draws_nothing_more(tmp_path, monkeypatch):
    from nvfp4_suite.kernels import mutants

    # Before, tries past the budget passed unrun and hypothesis' shrinker went on
    # drawing them: a 3 s budget took minutes. Now the first try past it ends the run.
    drawn = tmp_path / "drawn"
    monkeypatch.setenv("NVFP4_DRAWN", str(drawn))
    gen = check_generated(mutants.PlacementBug(), 20, 0, shrink_budget_s=0.0)
    assert gen.failing is not None and gen.failing.unfinished == "the minimising budget of 0 s ran out"
    assert gen.stopped is None and not gen.ok
    assert len(drawn.read_text().splitlines()) == gen.n + 1  # the problems, and the one try that stopped it


def test_a_kernel_choosing_its_own_split_count_is_launched_once_per_case_and_judged_exactly(tmp_path, monkeypatch,
                                                                                             capsys):
    import hostile

    from nvfp4_suite.reference.examples import random_problem
    from nvfp4_suite.vectors.cli import main
    from nvfp4_suite.vectors.engine.harness import save_repro

    run = check_golden(hostile.AutoSplits(), cases=set(range(0, 40, 3)))
    assert run.ok, run.text()
    assert all([x.splits for x in c.ran] == ["auto"] for c in run.cases if c.ran)
    assert check_generated(hostile.AutoSplits(), 8, 0).ok
    # Recorded and replayed as it ran.
    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    path = save_repro("hostile:AutoSplits", random_problem(4, reqs=2, topk=3), Launch(splits="auto"), "x")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert main(["replay", str(path), "--backend", "hostile:AutoSplits"]) == 0
    assert "splits=auto layout=" in capsys.readouterr().out


def test_a_kernel_choosing_its_own_split_count_is_refused_in_an_arithmetic_that_needs_the_count(monkeypatch):
    from nvfp4_suite.vectors.engine.config import CheckConfig, load_subject
    from nvfp4_suite.vectors.engine.verdict import SetupError

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert load_subject(CheckConfig(backend="hostile:AutoSplits", arithmetic="exact-p-bf16")).geometry is not None
    with pytest.raises(SetupError, match=r"chooses its own split count \(splits=\('auto',\)\), but arithmetic "
                                         r"seed divides the slots"):
        load_subject(CheckConfig(backend="hostile:AutoSplits", arithmetic="seed"))


def test_a_failing_replay_names_the_mutant_whose_outputs_equal_the_kernels_in_text_and_json(tmp_path, capsys):
    case = Path(__file__).resolve().parents[1] / "vectors/data/010-stale-tail-127.npz"
    out = tmp_path / "r.json"
    assert main(["replay", str(case), "--backend", "nvfp4_suite.kernels.mutants:numpy_stale_tail", "--splits", "1",
                 "--json", str(out)]) == 1
    text = capsys.readouterr().out.splitlines()
    blame = json.loads(out.read_text())["blame"]
    assert blame and blame[0].startswith("  cause: outputs equal those of mutant stale-tail (") and (
        "bit for bit" in blame[0]), blame
    at = text.index(blame[0])
    assert text[at:at + len(blame)] == blame
    assert main(["replay", str(case), "--backend", "emulate", "--splits", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["blame"] == []
