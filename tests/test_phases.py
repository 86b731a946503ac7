"""vectors/engine/phases.py: the judging benchmark's timer."""

import pytest

from nvfp4_suite.vectors.engine import phases


class Clock:
    """A perf_counter that advances by one second per reading."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1.0
        return self.now


def test_timed_outside_a_recording_records_nothing_and_runs_the_block():
    ran = []
    with phases.timed("launches"):
        ran.append(1)
    assert ran == [1] and phases._active is None


def test_each_timed_block_adds_its_wall_time_to_its_phase(monkeypatch):
    monkeypatch.setattr(phases.time, "perf_counter", Clock())
    with phases.recording() as seconds:
        with phases.timed("launches"):
            pass
        with phases.timed("launches"):
            pass
        with phases.timed("judging"):
            pass
    assert seconds == {"launches": 2.0, "references": 0.0, "judging": 1.0, "reporting": 0.0}
    assert phases._active is None


def test_a_block_that_raises_is_still_timed_and_the_recording_ends(monkeypatch):
    monkeypatch.setattr(phases.time, "perf_counter", Clock())
    with pytest.raises(ValueError):
        with phases.recording() as seconds:
            with phases.timed("references"):
                raise ValueError("x")
    assert seconds["references"] == 1.0 and phases._active is None


def test_a_recording_inside_a_recording_is_refused():
    with phases.recording():
        with pytest.raises(RuntimeError, match="already active"):
            with phases.recording():
                pass


def test_judging_cost_is_references_and_judging_per_problem():
    t = phases.Timing("x", "seed", 4, 10.0,
                      {"generation": 1.0, "launches": 5.0, "references": 2.0, "judging": 2.0, "reporting": 0.0}, True)
    assert t.judging_cost == 1.0
