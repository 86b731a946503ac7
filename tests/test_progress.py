"""vectors/progress.py: a live bar on a terminal, the plain lines elsewhere."""

import io
import os
import pty
import select
import subprocess
import sys

from nvfp4_suite.vectors.cli.progress import Progress, duration


class FakeTty(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_not_a_terminal_prints_each_line_unchanged():
    out = io.StringIO()
    p = Progress(out)
    for line in ("  golden: [1/3] a", "  minimising: 4 tries; smallest failing problem so far: rows 1"):
        p(line)
    p.clear()
    assert out.getvalue() == "  golden: [1/3] a\n  minimising: 4 tries; smallest failing problem so far: rows 1\n"


def test_on_a_terminal_the_bar_redraws_in_place_with_percentage_and_eta_from_the_mean_step():
    out, clock = FakeTty(), Clock()
    p = Progress(out, clock=clock, columns=200)
    p("  generated: 1/10 problems checked")
    assert out.getvalue().startswith("\r") and "10% |##" in out.getvalue() and "ETA ?" in out.getvalue()
    clock.t += 4.0  # two steps in 4 s: 2 s a step, 7 steps left
    p("  generated: 3/10 problems checked")
    last = out.getvalue().split("\r")[-1]
    assert "30% |#######" in last and "ETA 14s" in last and "generated: 3/10" in last and "\n" not in out.getvalue()


def test_a_new_stage_restarts_the_estimate_and_a_shorter_line_blanks_the_rest_of_the_longer_one():
    out, clock = FakeTty(), Clock()
    p = Progress(out, clock=clock, columns=200)
    p("  golden: [1/83] a-very-long-case-name-indeed")
    clock.t += 50
    p("  generated: 1/5 problems checked")
    first, second = out.getvalue().split("\r")[1:]
    assert "ETA ?" in second and len(second) >= len(first)


def test_a_line_without_a_count_shows_the_seconds_spent_in_its_stage():
    out, clock = FakeTty(), Clock()
    p = Progress(out, clock=clock, columns=200)
    p("  minimising: 0 tries; smallest so far: rows 9")
    clock.t += 75
    p("  minimising: 15 tries; smallest so far: rows 2")
    assert out.getvalue().split("\r")[-1].startswith("minimising: 15 tries; smallest so far: rows 2  (1m15s)")


def test_the_bar_is_cut_to_the_terminal_width_and_clear_erases_it():
    out = FakeTty()
    p = Progress(out, clock=Clock(), columns=30)
    p("  golden: [5/10] " + "x" * 100)
    assert len(out.getvalue().split("\r")[-1]) == 29
    p.clear()
    assert out.getvalue().endswith("\r" + " " * 29 + "\r")


def test_duration_formats():
    assert [duration(s) for s in (0.4, 59, 61, 3599, 7620)] == ["0s", "59s", "1m01s", "59m59s", "2h07m"]


def test_check_on_a_terminal_draws_the_bar_and_in_a_pipe_prints_the_lines(tmp_path):
    cmd = [sys.executable, "-m", "nvfp4_suite.vectors", "check", "--backend", "emulate", "--no-golden",
           "--examples", "3"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    piped = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert piped.returncode == 0 and "  generated: 3/3 problems checked\n" in piped.stderr and "\r" not in piped.stderr
    main, child = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=child, cwd=tmp_path, env=env, text=True)
    os.close(child)
    seen = b""
    while True:
        ready, _, _ = select.select([main], [], [], 300)
        if not ready:
            break
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out = p.communicate(timeout=300)[0]
    os.close(main)
    assert p.returncode == 0 and out.startswith("backend: ")
    text = seen.decode()
    assert "\r" in text and "100% |" in text and "ETA" in text and "generated: 3/3 problems checked" in text, text
