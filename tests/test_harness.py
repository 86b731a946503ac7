"""vectors.harness: NaN pre-filled buffers, xcds passing, repeat runs."""

import numpy as np

import reference as R
from reference.examples import random_problem
from vectors.harness import run_case


class BufferBackend:
    """Writes the emulation into the given buffer, optionally skipping a row."""

    name = "buffer"
    geometry = R.SEED_GEOMETRY
    splits = (1, 2)

    def __init__(self, skip_row=None, drift=False):
        self.skip_row, self.drift, self.calls, self.seen_xcds = skip_row, drift, 0, []

    def available(self):
        return None

    def __call__(self, problem, *, splits=1, xcds=0, out=None):
        self.calls += 1
        self.seen_xcds.append(xcds)
        res = R.emulate(problem, splits=splits)
        if self.drift and self.calls > 1:
            res = R.bf16_round(res * np.float32(1.5))
        rows = [r for r in range(problem.rows) if r != self.skip_row]
        out[rows] = res[rows]


def test_correct_buffer_backend_passes_and_receives_xcds():
    b = BufferBackend()
    p = random_problem(1, reqs=3, q_len=2, num_kv_heads=1, topk=4)
    _, rep = run_case(b, p, 2, xcds=8)
    assert rep.passed and b.seen_xcds == [8, 8] and b.calls == 2


def test_row_never_stored_shows_as_unwritten():
    p = random_problem(2, reqs=3, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200, 100])
    _, rep = run_case(BufferBackend(skip_row=1), p, 1)
    assert not rep.passed and rep.unwritten_rows == [1]


def test_second_run_that_differs_fails():
    p = random_problem(3, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200])
    _, rep = run_case(BufferBackend(drift=True), p, 2)
    assert not rep.passed and rep.repeat_mismatch > 0
    assert "second run differs" in rep.summary()


def test_save_repro_writes_a_replayable_case(tmp_path, monkeypatch):
    from vectors.harness import save_repro
    from vectors.io import load_case

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    p = random_problem(4, reqs=2, topk=3)
    path = save_repro("mutant:x", p, 2, "FAIL ...")
    assert path.parent == tmp_path and path.name.startswith("mutant_x-")
    q, meta, _ = load_case(path)
    assert meta["splits"] == 2 and np.array_equal(q.topk, p.topk)
