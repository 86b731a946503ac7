"""nvfp4_suite.vectors.catalog.lock: commands that change a catalog run one at a time, in
separate processes as users start them; a killed command's leftovers are
cleaned by the next one, which says what it cleaned."""

import errno
import fcntl
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import cases, lock
from nvfp4_suite.vectors.catalog.casefile import load_case, save_case
from nvfp4_suite.vectors.cli import main

BUILTINS = 3

# Runs one CLI command on the catalog folder argv[1] with the first BUILTINS
# built-in cases. HOLD_UNTIL=path: once the command holds the catalog's lock
# (HOLD_AT=lock), has created its build folder (HOLD_AT=build), is about to
# install a complete build (HOLD_AT=install) or to read a case file
# (HOLD_AT=read), it waits for that file to exist, so that the test decides
# when it goes on.
DRIVER = """
import os, sys, time
from pathlib import Path
from nvfp4_suite.vectors import catalog, cli
from nvfp4_suite.vectors.catalog import cases

root = Path(sys.argv[1])
catalog.HERE, catalog.MANIFEST, catalog.DATA = root, root / "manifest.json", root / "data"
cases.CASES = cases.CASES[:int(os.environ["BUILTINS"])]
go = os.environ.get("HOLD_UNTIL")
if go:
    name = {"lock": "_clean_leftovers", "build": "regenerate", "install": "_install",
            "read": "load_entry"}[os.environ["HOLD_AT"]]
    inner = getattr(catalog, name)

    def held(*a, **k):
        print("holding", flush=True)
        while not os.path.exists(go):
            time.sleep(0.05)
        return inner(*a, **k)

    setattr(catalog, name, held)
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A catalog folder ``tmp_path/cat`` of the first BUILTINS built-in cases,
    written by ``regen``, that ``catalog`` reads in this process too."""
    root = tmp_path / "cat"
    root.mkdir()
    monkeypatch.setattr(catalog, "HERE", root)
    monkeypatch.setattr(catalog, "DATA", root / "data")
    monkeypatch.setattr(catalog, "MANIFEST", root / "manifest.json")
    monkeypatch.setattr(cases, "CASES", cases.CASES[:BUILTINS])
    assert main(["regen"]) == 0
    return root


def _start(root, *args, hold=None, at="lock", builtins=BUILTINS):
    env = {**os.environ, "BUILTINS": str(builtins), "OMP_NUM_THREADS": "1"}
    if hold:
        env.update(HOLD_UNTIL=str(hold), HOLD_AT=at)
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(root), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _repro(tmp_path, seed):
    src = tmp_path / f"repro-{seed}.npz"
    save_case(src, random_problem(seed, reqs=2, topk=3), meta={"launches": [Launch(2, 8).to_json()]})
    return src


def _add_args(src, name):
    return ["add", str(src), "--catalog", "builtin", "--comment", "c", "--flags", "split-merge", "--name", name]


def _wait_line(stream, text, proc):
    """Read ``stream`` up to a line containing ``text``; returns what was read."""
    seen = []
    for line in stream:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never came (rc {proc.wait(60)}): {''.join(seen)}{proc.stderr.read()}")


def _finish(proc):
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _assert_consistent(root):
    """Ids 0..n-1, file names from ids and names, meta ids, hashes, nothing else in the folder."""
    m = catalog.load_manifest(root / "manifest.json")
    assert [c["id"] for c in m["cases"]] == list(range(len(m["cases"])))
    for c in m["cases"]:
        assert c["file"] == f"data/{c['id']:03d}-{c['name']}.npz"
        assert load_case(root / c["file"], sha256=c["sha256"])[1]["id"] == c["id"]
    assert sorted(f"data/{p.name}" for p in (root / "data").iterdir()) == sorted(c["file"] for c in m["cases"])
    assert sorted(p.name for p in root.iterdir()) == ["data", "manifest.json"]
    return m


def test_two_adds_started_together_both_land_with_distinct_ids(tiny, tmp_path):
    go = tmp_path / "go"
    first = _start(tiny, *_add_args(_repro(tmp_path, 77), "prod-a"), hold=go)
    _wait_line(first.stdout, "holding", first)
    second = _start(tiny, *_add_args(_repro(tmp_path, 78), "prod-b"))
    waited = _wait_line(second.stderr, "waiting for the catalog lock", second)
    assert f"held by pid {first.pid} (add)" in waited
    go.touch()
    (rc1, out1, err1), (rc2, out2, err2) = _finish(first), _finish(second)
    assert rc1 == rc2 == 0, err1 + err2
    assert re.search(rf"added case {BUILTINS} ", out1) and re.search(rf"added case {BUILTINS + 1} ", out2), out1 + out2
    m = _assert_consistent(tiny)
    assert [(c["name"], c.get("source")) for c in m["cases"][BUILTINS:]] == [("prod-a", "added"), ("prod-b", "added")]


def test_an_add_during_a_regen_waits_and_survives_it(tiny, tmp_path):
    go = tmp_path / "go"
    regen = _start(tiny, "regen", hold=go)
    _wait_line(regen.stdout, "holding", regen)
    add = _start(tiny, *_add_args(_repro(tmp_path, 77), "prod-bug"))
    assert f"held by pid {regen.pid} (regen)" in _wait_line(add.stderr, "waiting for the catalog lock", add)
    go.touch()
    (rc1, _, err1), (rc2, out2, err2) = _finish(regen), _finish(add)
    assert rc1 == rc2 == 0, err1 + err2
    assert f"added case {BUILTINS} " in out2
    m = _assert_consistent(tiny)
    assert [c["name"] for c in m["cases"]] == [c.name for c in cases.CASES[:BUILTINS]] + ["prod-bug"]


def test_a_regen_during_an_add_keeps_the_added_case(tiny, tmp_path):
    go = tmp_path / "go"
    add = _start(tiny, *_add_args(_repro(tmp_path, 77), "prod-bug"), hold=go)
    _wait_line(add.stdout, "holding", add)
    regen = _start(tiny, "regen")
    _wait_line(regen.stderr, "waiting for the catalog lock", regen)
    go.touch()
    (rc1, _, err1), (rc2, _, err2) = _finish(add), _finish(regen)
    assert rc1 == rc2 == 0, err1 + err2
    m = _assert_consistent(tiny)
    assert (m["cases"][-1]["name"], m["cases"][-1]["source"]) == ("prod-bug", "added")


def test_a_command_that_waits_past_the_timeout_refuses_and_changes_nothing(tiny, tmp_path, monkeypatch, capsys):
    go = tmp_path / "go"
    regen = _start(tiny, "regen", hold=go)
    _wait_line(regen.stdout, "holding", regen)
    before = (tiny / "manifest.json").read_bytes()
    monkeypatch.setattr(lock, "TIMEOUT_S", 0.5)
    assert main(_add_args(_repro(tmp_path, 77), "prod-bug")) == 2
    err = capsys.readouterr().err
    assert f"waiting for the catalog lock {tiny / '.lock'}, held by pid {regen.pid} (regen)" in err
    assert f"locked by pid {regen.pid} (regen) for more than 0.5 s; add gave up, nothing was changed" in err
    assert main(["verify"]) == 2 and "verify gave up" in capsys.readouterr().err
    go.touch()
    assert _finish(regen)[0] == 0
    assert (tiny / "manifest.json").read_bytes() == before and not list((tiny / "data").glob("*prod-bug*"))


def test_a_killed_regen_leaves_a_build_folder_the_next_regen_removes_and_reports(tiny, tmp_path, capsys):
    before = {p.name: p.read_bytes() for p in (tiny / "data").iterdir()}
    regen = _start(tiny, "regen", hold=tmp_path / "never", at="build")
    _wait_line(regen.stdout, "holding", regen)
    (build,) = tiny.glob(".regen-*")
    os.kill(regen.pid, signal.SIGKILL)
    assert regen.wait(60) == -signal.SIGKILL and build.is_dir()
    assert main(["regen"]) == 0
    assert f"removed {build.name}, the unfinished build folder of an interrupted regen" in capsys.readouterr().err
    _assert_consistent(tiny)
    assert {p.name: p.read_bytes() for p in (tiny / "data").iterdir()} == before


def test_a_check_started_during_a_regens_install_waits_and_judges_the_new_catalog_whole(tiny, tmp_path):
    # The regen holds the lock with its build complete, about to rename it into
    # place (one more built-in case than the catalog on disk): a golden run that
    # read now would see the old manifest beside new files. It waits instead.
    go = tmp_path / "go"
    regen = _start(tiny, "regen", hold=go, at="install", builtins=BUILTINS + 1)
    _wait_line(regen.stdout, "holding", regen)
    check = _start(tiny, "check", "--backend", "emulate", "--examples", "0")
    assert f"held by pid {regen.pid} (regen)" in _wait_line(check.stderr, "check: waiting for the catalog lock", check)
    assert check.poll() is None
    go.touch()
    (rc1, _, err1), (rc2, out2, err2) = _finish(regen), _finish(check)
    assert rc1 == 0 and rc2 == 0, err1 + out2 + err2
    n = BUILTINS + 1
    assert f"golden vectors: {n} of {n} cases passed, 0 failed, 0 skipped, 0 unreadable" in out2, out2


def test_a_regen_started_during_a_golden_run_waits_for_it(tiny, tmp_path):
    go = tmp_path / "go"
    check = _start(tiny, "check", "--backend", "emulate", "--examples", "0", hold=go, at="read")
    _wait_line(check.stdout, "holding", check)
    before = (tiny / "manifest.json").read_bytes()
    regen = _start(tiny, "regen", builtins=BUILTINS + 1)
    assert "held by a command reading the catalog" in _wait_line(regen.stderr, "waiting for the catalog lock", regen)
    assert (tiny / "manifest.json").read_bytes() == before
    go.touch()
    (rc1, out1, err1), (rc2, _, err2) = _finish(check), _finish(regen)
    assert rc1 == 0 and rc2 == 0, out1 + err1 + err2
    assert f"golden vectors: {BUILTINS} of {BUILTINS} cases passed" in out1
    assert len(_assert_consistent(tiny)["cases"]) == BUILTINS + 1


def test_a_reader_never_removes_the_lock_file_under_another_reader(tmp_path):
    # Two shared holders: the first to leave must not remove the file the other holds.
    with lock.locked(tmp_path, exclusive=False, what="a"):
        with lock.locked(tmp_path, exclusive=False, what="b"):
            pass
        fd = os.open(tmp_path / ".lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert not (tmp_path / ".lock").exists()


def test_a_read_only_catalog_is_read_without_a_lock_and_never_written(tmp_path, monkeypatch):
    # An installed suite's folder: opening the lock file fails as on a read-only file system.
    real_open = os.open

    def read_only(path, flags, *a):
        if Path(path).name == lock.LOCK_NAME:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a)

    monkeypatch.setattr(lock.os, "open", read_only)
    with lock.locked(tmp_path, exclusive=False, what="verify"):
        assert not (tmp_path / lock.LOCK_NAME).exists()
    with pytest.raises(catalog.CaseFileError, match="cannot open the catalog's lock"):
        with lock.locked(tmp_path, exclusive=True, what="add"):
            pass
