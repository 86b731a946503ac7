"""vectors.harness: NaN pre-filled buffers, xcds passing, repeat runs, inputs
a backend must not change, a backend's own crash told apart from the harness's."""

import warnings

import numpy as np
import pytest

import kernels
import reference as R
from reference.examples import random_problem
from vectors import harness
from vectors.harness import BackendCrash, run_case

INPUTS = ("q", "pool", "topk", "block_table", "seq_lens")


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


class Raising(BufferBackend):
    """Raises from its own ``__call__`` on the given call."""

    def __init__(self, on_call):
        super().__init__()
        self.on_call = on_call

    def __call__(self, problem, *, splits=1, xcds=0, out=None):
        if self.calls + 1 == self.on_call:
            raise IndexError("kernel fault")
        super().__call__(problem, splits=splits, xcds=xcds, out=out)


@pytest.mark.parametrize("on_call", [1, 2])
def test_an_exception_of_the_backend_is_a_backend_crash_holding_it(on_call):
    p = random_problem(4, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200])
    with pytest.raises(BackendCrash, match="backend buffer raised IndexError: kernel fault") as e:
        run_case(Raising(on_call), p, 1)
    assert isinstance(e.value.original, IndexError)


def test_an_exception_of_the_harness_propagates_unchanged(monkeypatch):
    def broken(*args, **kw):
        raise ZeroDivisionError("comparison fault")

    monkeypatch.setattr(harness, "compare_backend_output", broken)
    p = random_problem(5, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200])
    with pytest.raises(ZeroDivisionError, match="comparison fault"):
        run_case(BufferBackend(), p, 1)


def test_save_repro_writes_a_replayable_case(tmp_path, monkeypatch):
    from vectors.harness import save_repro
    from vectors.io import load_case

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    p = random_problem(4, reqs=2, topk=3)
    path = save_repro("mutant:x", p, 2, "FAIL ...", xcds=8)
    assert path.parent == tmp_path and path.name.startswith("mutant_x-")
    q, meta, _ = load_case(path)
    assert meta["splits"] == 2 and meta["xcds"] == 8 and np.array_equal(q.topk, p.topk)


class Clobber:
    """Zeroes one input array in place; returns zeros, or (``honest``) the correct
    output computed before the clobbering. ``via``: how it writes ("numpy",
    "setflags": after making the array writable, "torch": through
    ``torch.from_numpy``)."""

    name = "clobber"
    geometry = R.SEED_GEOMETRY
    splits = (1, 2)

    def __init__(self, field, honest=False, via="numpy"):
        self.field, self.honest, self.via = field, honest, via

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        res = R.emulate(problem, splits=splits) if self.honest else np.zeros((problem.rows, problem.H, 128), np.float32)
        arr = getattr(problem, self.field)
        if self.via == "torch":
            import torch

            torch.from_numpy(arr).zero_()
        else:
            if self.via == "setflags":
                arr.setflags(write=True)
            arr[...] = 0
        return res


def _problem():
    return random_problem(5, reqs=3, q_len=2, num_kv_heads=1, topk=4, seq_lens=[300, 200, 129])


@pytest.mark.parametrize("field", INPUTS)
def test_backend_that_zeroes_an_input_fails_naming_it(field):
    p = _problem()
    before = {f: getattr(p, f).copy() for f in INPUTS}
    _, rep = run_case(Clobber(field), p, 2)
    assert not rep.passed and list(rep.modified_inputs) == [field]
    n = int(np.count_nonzero(before[field].reshape(-1).view(np.uint8)))
    assert n > 0 and rep.modified_inputs[field] == n
    assert f"backend modified its input '{field}' ({n} bytes changed)" in rep.summary()
    assert all(np.array_equal(getattr(p, f), before[f]) for f in INPUTS), "the caller's problem was changed"
    # Zeros are wrong for this problem's untouched inputs, whatever the clobbered copy says.
    assert rep.n_fail > 0


@pytest.mark.parametrize("via", ["setflags", "torch"])
def test_writes_that_bypass_numpy_flags_are_caught(via):
    if via == "torch":
        pytest.importorskip("torch")
    _, rep = run_case(Clobber("pool", via=via), _problem(), 1)
    assert not rep.passed and "'pool'" in rep.summary()


def test_expectations_come_from_the_unmodified_problem():
    # Right output, then the pool zeroed: the output matches the expectation of
    # the original problem (it would not match one computed from zeroed pages),
    # and the clobbering alone fails the case.
    _, rep = run_case(Clobber("pool", honest=True), _problem(), 2)
    assert rep.n_fail == 0 and rep.repeat_mismatch == 0
    assert not rep.passed and list(rep.modified_inputs) == ["pool"]


def test_every_changed_input_is_named():
    class Both(Clobber):
        def __call__(self, problem, *, splits=1):
            problem.q[0, 0, 0] = 1.0 - problem.q[0, 0, 0]
            return super().__call__(problem, splits=splits)

    _, rep = run_case(Both("seq_lens", honest=True), _problem(), 1)
    assert list(rep.modified_inputs) == ["q", "seq_lens"]
    assert "backend modified its inputs 'q' (" in rep.summary() and "'seq_lens' (" in rep.summary()


def test_changed_input_shows_beside_a_shape_error():
    class Flat(Clobber):
        def __call__(self, problem, *, splits=1):
            super().__call__(problem, splits=splits)
            return np.zeros(3, np.float32)

    _, rep = run_case(Flat("topk"), _problem(), 1)
    assert rep.shape_error and "output must be float32" in rep.summary() and "'topk' (" in rep.summary()


@pytest.mark.parametrize("name", ["emulate", "torch"])
def test_correct_backends_pass_without_warnings(name):
    b = kernels.get_backend(name)
    if b.available() is not None:
        pytest.skip(b.available())
    with warnings.catch_warnings():
        # torch warns on from_numpy of a read-only array: the harness must not hand it one.
        warnings.simplefilter("error")
        _, rep = run_case(b, _problem(), 2)
    assert rep.passed, rep.details()
