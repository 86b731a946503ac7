"""``check --shard K/N``: the N shards of a campaign, merged (``merge``), are
the unsharded run (verdict, counts, failing cases, the generated part); a
shard judges a disjoint share, draws the unsharded run's problems and says
which shard it is; the pytest plugin's ``--nvfp4-shard`` keeps the same share
of the tests. ``tests/test_merge.py`` holds what ``merge`` refuses."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from catalog_helpers import copy_catalog

ROOT = Path(__file__).resolve().parents[1]
# Fails golden case 36 at its launches with more than one split (2 of 3), passes case 28
# (one block, so its splits hold nothing to rescale), refuses case 15's invalid input as it
# should; of the generated problems of seed 0 it passes the first draw and fails the second,
# which is then minimised.
MUTANT = "nvfp4_suite.kernels.mutants:numpy_split_no_rescale"
CAMPAIGN = ["check", "--backend", MUTANT, "--examples", "3", "--seed", "0"]


@pytest.fixture
def campaign_catalog(tmp_path, monkeypatch):
    """A built-in catalog of cases 36 (failing under MUTANT at some launches), 28 and 15
    (invalid), so that a run takes seconds."""
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.engine.config import Subject

    cases = {c["id"]: c for c in catalog.load_manifest()["cases"]}
    here = copy_catalog(tmp_path, monkeypatch, [cases[36], cases[28], cases[15]])
    monkeypatch.delenv("NVFP4_CATALOG", raising=False)
    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path / "repro"))
    monkeypatch.chdir(tmp_path)
    # Minimising a generated failure took most of the time of a run, and its result is not
    # compared (see _what): a short budget keeps the 14 runs of a test in seconds.
    monkeypatch.setattr(Subject, "shrink_budget_s", property(lambda self: 0.3))
    return here


def _run(*argv) -> tuple[int, dict]:
    """Exit status and JSON report of ``python -m nvfp4_suite.vectors ARGV --json FILE``, in this process."""
    from nvfp4_suite.vectors.cli import main

    out = Path(f"report-{abs(hash(argv))}.json")
    rc = main([*argv, "--json", str(out)])
    return rc, json.loads(out.read_text())


def _shards(n: int, args=CAMPAIGN) -> list[str]:
    """The JSON reports of ``args --shard K/N`` for K = 1..N."""
    files = []
    for k in range(1, n + 1):
        f = f"shard-{k}-of-{n}.json"
        from nvfp4_suite.vectors.cli import main

        assert main([*args, "--shard", f"{k}/{n}", "--json", f]) in (0, 1, 2)
        files.append(f)
    return files


def _what(report: dict) -> dict:
    """What a merged run must share with the unsharded one: verdict, per catalog
    its counts and per case its status and launches (run, skipped, failing; in order), and
    the generated part, with whether its first failing problem is flaky."""
    cases = {}
    for cat in report["catalogs"]:
        for c in cat["cases"]:
            cases[cat["label"], c["id"]] = (
                c["status"], [json.dumps(x, sort_keys=True) for x in c["launches_run"]],
                [json.dumps(x, sort_keys=True) for x in c["launches_skipped"]],
                [(json.dumps(f["launch"], sort_keys=True), f["failing_elements"], f["text"]) for f in c["failures"]])
    gen = dict(report["generated"] or {})
    gen.pop("judged", None)
    if gen.get("failing") is not None:
        # The first failing problem is the same draw (its coverage and statistics are compared);
        # the form hypothesis minimises it to is not: its shrinker's path depends on the process
        # (two unsharded runs in one process can end at different minimal problems).
        gen["failing"] = {"flaky": gen["failing"]["flaky"], "minimised": gen["failing"]["size"] is not None}
    return {"verdict": (report["verdict"], report["exit_code"], report["reason"]),
            "counts": [(c["label"], c["counts"], c["error"]) for c in report["catalogs"]],
            "cases": cases, "generated": gen, "examples": report["examples"]}


def _block(lines: list[str], first: str, end: str) -> list[str]:
    """The lines from the one starting with ``first`` up to the next starting with ``end``."""
    at = next(i for i, line in enumerate(lines) if line.startswith(first))
    return lines[at:next(i for i in range(at + 1, len(lines)) if lines[i].startswith(end))]


def test_shards_merged_are_the_unsharded_run_for_1_2_3_and_7_shards(campaign_catalog, capsys):
    from nvfp4_suite.vectors.cli import report as jsonreport

    rc, whole = _run(*CAMPAIGN)
    checked = capsys.readouterr().out.splitlines()
    want = _what(whole)
    # The campaign is worth comparing: golden failures at some launches of a case, and a
    # generated failure past the first draws, minimised.
    assert rc == 1 and whole["verdict"] == "NOT CONFORMANT"
    failing_case = want["cases"]["built-in", 36]
    assert failing_case[0] == "FAIL" and 0 < len(failing_case[3]) < len(failing_case[1])
    assert whole["generated"]["problems_run"] >= 2 and whole["generated"]["failing"] is not None
    launches = sum(len(c[1]) + len(c[2]) for c in want["cases"].values())
    schema = jsonreport.load_schema()
    for n in (1, 2, 3, 7):
        files = _shards(n)
        shards = [json.loads(Path(f).read_text()) for f in files]
        # Disjoint shares: each launch, and each generated problem, judged by one shard.
        ran = [(c["id"], json.dumps(x, sort_keys=True)) for s in shards for cat in s["catalogs"]
               for c in cat["cases"] for x in c["launches_run"] + [y["launch"] for y in c["launches_skipped"]]]
        assert len(ran) == len(set(ran)) == launches, (n, ran)
        drawn = [j["index"] for s in shards if s["generated"] for j in s["generated"]["judged"]]
        assert len(drawn) == len(set(drawn)), (n, drawn)
        capsys.readouterr()
        mrc, merged = _run("merge", *files)
        out = capsys.readouterr().out
        assert mrc == rc, (n, out)
        assert _what(merged) == want, n
        assert jsonreport.validate(merged, schema) == [], n
        assert merged["shard"] is None and [s["k"] for s in merged["shards"]] == list(range(1, n + 1))
        assert merged["campaign"] == whole["campaign"]
        # The text goes through check's renderer: its verdict line, golden counts and failing case lines.
        took = checked[-1].rsplit("; ", 1)[0]
        assert out.splitlines()[-1] == f"{took}; merged {n} shards", out
        # The golden report is check's but for the cause summary (its facts are not in a report).
        golden = [line for line in _block(checked, "golden vectors: ", "generated problems: ")
                  if not line.startswith(("  shared by the failures: ", "  cause: ",
                                          "  outputs fit another declaration: ", "  failing bug classes "))]
        assert len(golden) > 4 and _block(out.splitlines(), "golden vectors: ", "generated problems: ") == golden
        assert _block(checked, "  2 problems ", "  coverage ")[0] in out.splitlines(), out
        # Each failing shard's own cause summary, under its name, in the text and the JSON alike.
        causes = [(s["shard"]["k"], s["blame"]) for s in shards if s["blame"]]
        assert causes and merged["blame"][0].startswith("cause summaries of the shards' golden failures")
        for k, lines in causes:
            at = merged["blame"].index(f"  shard {k}/{n} ({files[k - 1]}):")
            assert merged["blame"][at + 1:at + 1 + len(lines)] == [f"  {line}" for line in lines], (n, k)
        text = out.splitlines()
        at = text.index(merged["blame"][0])
        assert text[at:at + len(merged["blame"])] == merged["blame"], out
        for s in shards:
            assert jsonreport.validate(s, schema) == [] and s["shard"]["n"] == n


def test_a_passing_campaign_merges_to_the_same_statistics_and_coverage(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["check", "--backend", "emulate", "--no-golden", "--examples", "10", "--seed", "3"]
    rc, whole = _run(*args)
    assert rc == 0
    mrc, merged = _run("merge", *_shards(3, args))
    assert mrc == 0 and _what(merged) == _what(whole)
    assert merged["generated"]["coverage"] and merged["generated"]["elements"] > 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "CONFORMANT: backend emulate; 10 generated problems; merged 3 shards"


def test_a_later_failure_of_another_shard_is_named_and_not_counted(campaign_catalog, capsys):
    # The mutant fails most draws: the unsharded run counts the draws up to its first failure and
    # minimises that one; the other shards fail a later draw of their own, which the merge names
    # but does not count.
    args = ["check", "--backend", MUTANT, "--no-golden", "--examples", "6"]
    rc, whole = _run(*args)
    files = _shards(3, args)
    capsys.readouterr()
    mrc, merged = _run("merge", *files)
    out = capsys.readouterr().out
    assert mrc == rc == 1 and _what(merged) == _what(whole)
    first = whole["generated"]["problems_run"] - 1
    later = [(s["shard"]["k"], j["index"]) for s in map(lambda f: json.loads(Path(f).read_text()), files)
             for j in s["generated"]["judged"] if j["failed"] and j["index"] > first]
    assert later, "no shard failed past the first failure: the case this test is about did not happen"
    for k, i in later:
        assert (f"generated: shard {k}/3 also failed problem {i}, past the first failure (problem {first}, "
                f"shard {first % 3 + 1}/3) where the unsharded run stops counting: not counted") in out, out


def test_a_shard_names_itself_and_counts_only_its_share(campaign_catalog, capsys):
    from nvfp4_suite.vectors.cli import main

    assert main(["check", "--backend", "emulate", "--examples", "7", "--shard", "2/3"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[1].startswith("shard 2/3: judging share 2 of 3 of the golden launches"), out
    # 12 launches: case 36's 3 (two of them this shard's: places 1 and 4), case 28's 8, case 15's one
    # (place 11, shard 3's); draws 1 and 4 of 7.
    assert "golden: [2/2] splits-1-block" in err and "golden: [3/" not in err, err
    assert "generated: 2/2 problems checked" in err, err
    (verdict,) = [line for line in lines if line.startswith("CONFORMANT")]
    assert verdict.startswith("CONFORMANT: backend emulate; shard 2/3, 2 golden cases judged (0 failed), "
                              "2 generated problems; "), out


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_a_shard_outside_1_to_n_is_a_usage_error_naming_it(text, capsys):
    from nvfp4_suite.vectors.cli import main
    from nvfp4_suite.vectors.engine.config import parse_shard

    with pytest.raises(SystemExit) as e:
        main(["check", "--backend", "emulate", "--shard", text])
    assert e.value.code == 2 and f"shard {text!r}: give K/N with 1 <= K <= N" in capsys.readouterr().err
    with pytest.raises(ValueError, match="give K/N"):
        parse_shard(text)


def test_check_config_names_a_bad_shard_and_refuses_sharding_serving():
    from nvfp4_suite.vectors.engine.config import CheckConfig

    assert CheckConfig(shard=(3, 2)).problems() == "--shard 3/2: must be K/N with 1 <= K <= N"
    assert "--shape serving is not sharded" in CheckConfig(shard=(1, 2), shape="serving", examples=1).problems()
    assert CheckConfig(shard=(2, 2)).problems() is None


# --- the pytest plugin ----------------------------------------------------------

def _collected(tmp_path, *args) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                        "--collect-only", "--rootdir", str(tmp_path), "--nvfp4-backend", "emulate",
                        "--nvfp4-examples", "4", *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return [line for line in r.stdout.splitlines() if "::test_" in line]


def test_the_plugin_shards_its_golden_tests_as_check_does(tmp_path):
    whole = _collected(tmp_path)
    shards = [_collected(tmp_path, "--nvfp4-shard", f"{k}/3") for k in (1, 2, 3)]
    golden = [t for s in shards for t in s if "test_golden" in t]
    # Each golden test in exactly one shard; the generated problems' test in every one (each judges its share).
    assert sorted(golden) == sorted(t for t in whole if "test_golden" in t) and len(golden) == len(set(golden))
    assert all(sum("test_generated[emulate]" in t for t in s) == 1 for s in shards)


def test_a_plugin_shard_runs_under_pytest_xdist(tmp_path):
    # xdist's workers must each collect the same tests: a shard's collection depends only on the
    # manifest, the backend's capabilities and K/N, never on the worker.
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--rootdir",
                        str(tmp_path), "--nvfp4-backend", "emulate", "--nvfp4-examples", "4", "--nvfp4-shard", "3/3"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "nvfp4: CONFORMANT: backend emulate" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"{len(_collected(tmp_path, '--nvfp4-shard', '3/3'))} passed" in r.stdout, r.stdout[-3000:]


def test_the_plugins_generated_test_judges_the_shards_share(monkeypatch):
    from nvfp4_suite.vectors import pytest_plugin
    from nvfp4_suite.vectors.engine import check
    from nvfp4_suite.vectors.engine.config import CheckConfig, load_subject

    seen = []
    real = check.check_generated

    def spy(*a, **k):
        gen = real(*a, **k)
        seen.append([j.index for j in gen.judged])
        return gen

    monkeypatch.setattr(check, "check_generated", spy)
    subject = load_subject(CheckConfig(backend="emulate"))
    pytest_plugin.check_generated_or_fail(subject, 5, 0, (2, 3))
    assert seen == [[1, 4]]
    with pytest.raises(pytest.skip.Exception, match="shard 3/3 owns none of the 2 generated problems"):
        pytest_plugin.check_generated_or_fail(subject, 2, 0, (3, 3))


# --- docs/campaigns.md ----------------------------------------------------------

def _documented(section: str) -> list[str]:
    """The commands of docs/campaigns.md's ``section`` (the text between its
    heading and the next): each line that runs ``python -m``, as a shell, a
    workflow step or a container argument gives it."""
    text = (ROOT / "docs" / "campaigns.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in body.splitlines():
        line = line.strip().removeprefix("- ").removeprefix("run: ")
        if line.startswith("python -m "):
            out.append(line)
    assert out, f"docs/campaigns.md: no command in section {section!r}"
    return out


def _argv(line: str, k: int) -> list[str]:
    """``line`` as the shell of shard ``k`` of 4 expands it (its index variables set, globs
    matched in the working folder); a workflow's ``${{ matrix.shard }}`` is that index too."""
    env = {"PATH": os.environ["PATH"], "K": str(k), "SLURM_ARRAY_TASK_ID": str(k), "JOB_COMPLETION_INDEX": str(k - 1)}
    r = subprocess.run(["bash", "-c", 'set -- ' + line.replace("${{ matrix.shard }}", "$K") + '; printf "%s\\0" "$@"'],
                       env=env, capture_output=True, text=True, check=True)
    return r.stdout.split("\0")[:-1]


@pytest.mark.parametrize("section", ["A CI matrix (GitHub Actions)", "A Slurm array", "A Kubernetes indexed job"])
def test_each_documented_campaign_runs_and_merges_as_written(section, campaign_catalog, capsys):
    from nvfp4_suite.vectors.cli import main

    (check,) = [c for c in _documented(section) if " check " in c]
    for k in range(1, 5):
        argv = _argv(check, k)
        assert argv[:3] == ["python", "-m", "nvfp4_suite.vectors"] and f"{k}/4" in argv, argv
        assert main(argv[3:]) == 0
    capsys.readouterr()
    (merge,) = _documented("Merging")
    assert main(_argv(merge, 1)[3:]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("; merged 4 shards")
    assert [s["k"] for s in json.loads(Path("campaign.json").read_text())["shards"]] == [1, 2, 3, 4]
    if section == "A CI matrix (GitHub Actions)":
        assert [c for c in _documented(section) if " merge " in c] == [merge]


def test_the_documented_shard_and_pytest_commands_run(campaign_catalog, capsys, tmp_path):
    from nvfp4_suite.vectors.cli import main

    (shard,) = _documented("What a shard judges")
    assert main(shlex.split(shard)[3:]) == 0
    assert "shard 2/4: judging share 2 of 4" in capsys.readouterr().out
    (session,) = _documented("Under pytest")
    r = subprocess.run([sys.executable, *shlex.split(session)[1:], "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "nvfp4: CONFORMANT: backend emulate" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
