"""nvfp4_suite.vectors.engine.harness: NaN pre-filled buffers, xcds passing, repeat runs, inputs
a backend must not change, a backend's own crash told apart from the harness's."""

import warnings

import numpy as np
import pytest

import nvfp4_suite.reference as R
from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import Capabilities, Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.engine import harness
from nvfp4_suite.vectors.engine.harness import BackendCrash, run_case

INPUTS = ("q", "pool", "topk", "block_table", "seq_lens")


class BufferBackend:
    """Writes the emulation into the given buffer, optionally skipping a row."""

    name = "buffer"
    geometry = R.SEED_GEOMETRY
    capabilities = Capabilities(splits=(1, 2), xcds=(0, 8), out=True)

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
    _, rep = run_case(b, p, Launch(splits=2, xcds=8))
    assert rep.passed and b.seen_xcds == [8, 8] and b.calls == 2


def test_row_never_stored_shows_as_unwritten():
    p = random_problem(2, reqs=3, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200, 100])
    _, rep = run_case(BufferBackend(skip_row=1), p, Launch(splits=1))
    assert not rep.passed and rep.unwritten_rows == [1]


def test_second_run_that_differs_fails():
    p = random_problem(3, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200])
    _, rep = run_case(BufferBackend(drift=True), p, Launch(splits=2))
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
    with pytest.raises(BackendCrash, match="backend raised IndexError: kernel fault") as e:
        run_case(Raising(on_call), p, Launch(splits=1))
    assert isinstance(e.value.error, IndexError)


def test_an_exception_of_the_harness_propagates_unchanged(monkeypatch):
    def broken(*args, **kw):
        raise ZeroDivisionError("comparison fault")

    monkeypatch.setattr(harness, "compare_with_interval", broken)
    p = random_problem(5, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200])
    with pytest.raises(ZeroDivisionError, match="comparison fault"):
        run_case(BufferBackend(), p, Launch(splits=1))


def test_save_repro_writes_a_replayable_case(tmp_path, monkeypatch):
    from nvfp4_suite.vectors.catalog.casefile import load_case
    from nvfp4_suite.vectors.engine.harness import save_repro

    monkeypatch.setenv("NVFP4_REPRO_DIR", str(tmp_path))
    p = random_problem(4, reqs=2, topk=3)
    path = save_repro("mutant:x", p, Launch(splits=2, xcds=8), "FAIL ...")
    assert path.parent == tmp_path and path.name.startswith("mutant_x-")
    q, meta, _ = load_case(path)
    assert meta["launches"] == [{"splits": 2, "xcds": 8, "order": None}] and meta["backend"] == "mutant:x"
    assert np.array_equal(q.topk, p.topk)


class Clobber:
    """Zeroes one input array in place; returns zeros, or (``honest``) the correct
    output computed before the clobbering. ``via``: how it writes ("numpy",
    "setflags": after making the array writable, "torch": through
    ``torch.from_numpy``)."""

    name = "clobber"
    geometry = R.SEED_GEOMETRY
    capabilities = Capabilities(splits=(1, 2))

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
    _, rep = run_case(Clobber(field), p, Launch(splits=2))
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
    _, rep = run_case(Clobber("pool", via=via), _problem(), Launch(splits=1))
    assert not rep.passed and "'pool'" in rep.summary()


def test_expectations_come_from_the_unmodified_problem():
    # Right output, then the pool zeroed: the output matches the expectation of
    # the original problem (it would not match one computed from zeroed pages),
    # and the clobbering alone fails the case.
    _, rep = run_case(Clobber("pool", honest=True), _problem(), Launch(splits=2))
    assert rep.n_fail == 0 and rep.repeat_mismatch == 0
    assert not rep.passed and list(rep.modified_inputs) == ["pool"]


def test_every_changed_input_is_named():
    class Both(Clobber):
        def __call__(self, problem, *, splits=1):
            problem.q[0, 0, 0] = 1.0 - problem.q[0, 0, 0]
            return super().__call__(problem, splits=splits)

    _, rep = run_case(Both("seq_lens", honest=True), _problem(), Launch(splits=1))
    assert list(rep.modified_inputs) == ["q", "seq_lens"]
    assert "backend modified its inputs 'q' (" in rep.summary() and "'seq_lens' (" in rep.summary()


def test_changed_input_shows_beside_a_shape_error():
    class Flat(Clobber):
        def __call__(self, problem, *, splits=1):
            super().__call__(problem, splits=splits)
            return np.zeros(3, np.float32)

    _, rep = run_case(Flat("topk"), _problem(), Launch(splits=1))
    assert rep.shape_error and "output must be float32" in rep.summary() and "'topk' (" in rep.summary()


@pytest.mark.parametrize("name", ["emulate", "torch"])
def test_correct_backends_pass_without_warnings(name):
    b = kernels.get_backend(name)
    if b.available() is not None:
        pytest.skip(b.available())
    with warnings.catch_warnings():
        # torch warns on from_numpy of a read-only array: the harness must not hand it one.
        warnings.simplefilter("error")
        _, rep = run_case(b, _problem(), Launch(splits=2))
    assert rep.passed, rep.details()


class Returns:
    """The emulation, returned as ``convert(output)``."""

    name, geometry = "returns", R.SEED_GEOMETRY
    capabilities = Capabilities(splits=(1, 2))

    def __init__(self, convert):
        self.convert = convert

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        return self.convert(R.emulate(problem, splits=splits))


def _torch_as(dtype, grad=False):
    torch = pytest.importorskip("torch")

    def convert(x):
        t = torch.from_numpy(x).to(getattr(torch, dtype))
        return t.requires_grad_(True) if grad else t
    return convert


@pytest.mark.parametrize("convert", [
    pytest.param(lambda x: x, id="numpy float32"),
    pytest.param(lambda x: x.astype(__import__("ml_dtypes").bfloat16), id="numpy bfloat16"),
    pytest.param("torch-bfloat16", id="torch bfloat16"),
    pytest.param("torch-float32-grad", id="torch float32 requires_grad"),
])
def test_outputs_kernels_naturally_return_are_accepted(convert):
    if convert == "torch-bfloat16":
        convert = _torch_as("bfloat16")
    elif convert == "torch-float32-grad":
        convert = _torch_as("float32", grad=True)
    _, rep = run_case(Returns(convert), _problem(), Launch(splits=2))
    assert rep.passed, rep.details()


def test_float16_output_is_converted_exactly_and_judged():
    # float16 holds fewer exponents than bf16: judged (and failing where it rounds), never a type error.
    _, rep = run_case(Returns(lambda x: x.astype(np.float16)), _problem(), Launch(splits=2))
    assert rep.shape_error is None


@pytest.mark.parametrize("convert, msg", [
    (lambda x: x.tolist(), "returned a builtins.list"),
    (lambda x: x.astype(np.float64), "numpy array of float64"),
    (lambda x: x.astype(np.int32), "numpy array of int32"),
])
def test_other_outputs_fail_with_a_message_about_their_type(convert, msg):
    out, rep = run_case(Returns(convert), _problem(), Launch(splits=2))
    assert out is None and not rep.passed and msg in rep.shape_error


def test_a_launch_outside_the_capabilities_is_refused_before_the_backend_runs():
    with pytest.raises(ValueError, match="splits 3 not supported"):
        run_case(Returns(lambda x: x), _problem(), Launch(splits=3))


def test_backends_with_orders_run_twice_in_two_orders():
    class Ordered(Returns):
        capabilities = Capabilities(splits=(1,), orders=("forward", "reverse"))

        def __call__(self, problem, *, splits=1, order="forward"):
            self.seen.append(order)
            return R.emulate(problem, splits=splits)

    b = Ordered(None)
    b.seen = []
    run_case(b, _problem(), Launch(splits=1, order="reverse"))
    assert b.seen == ["reverse", "forward"]


# --- issue 20: outputs copied, hostile outputs named, BaseException is the backend's ----

import hostile  # noqa: E402 - tests/hostile.py, on sys.path from conftest


def _tiny():
    return random_problem(6, reqs=2, q_len=1, num_kv_heads=1, topk=4, seq_lens=[300, 200])


@pytest.mark.parametrize("make", [hostile.ZerosFirstTorch, hostile.ZerosFirstGraph, hostile.ZerosFirstNumpy],
                         ids=["cpu-torch-buffer", "cuda-graph-style-static-slice", "numpy-buffer"])
def test_a_reused_output_buffer_cannot_hide_a_wrong_first_launch(make):
    # Zeros on every first launch, the right answer on every second, in one buffer:
    # the first result must be judged as it was, not as the second overwrote it.
    pytest.importorskip("torch")
    first, rep = run_case(make(), _tiny(), Launch())
    assert not rep.passed and rep.repeat_mismatch > 0 and not first.any()


@pytest.mark.parametrize("make, msg", [
    (hostile.MetaOutput, "torch tensor on the meta device"),
    (hostile.SparseOutput, "layout torch.sparse_coo"),
    (hostile.Float64Output, "numpy array of float64"),
])
def test_meta_sparse_and_float64_outputs_are_the_backends_named_failure(make, msg):
    pytest.importorskip("torch")
    first, rep = run_case(make(), _tiny(), Launch())
    assert first is None and not rep.passed and msg in rep.shape_error


@pytest.mark.parametrize("make, kind", [(hostile.ExitsOnCall, "SystemExit: 0"),
                                        (hostile.InterruptsOnCall, "KeyboardInterrupt")])
def test_a_backends_own_base_exception_is_a_backend_crash_when_no_signal_arrived(make, kind):
    from nvfp4_suite.vectors.engine import interrupts

    with interrupts.installed(), pytest.raises(BackendCrash, match=f"backend raised {kind}"):
        run_case(make(), _tiny(), Launch())


def test_the_users_interrupt_passes_through_the_harness():
    import signal

    from nvfp4_suite.vectors.engine import interrupts

    class SignalsItself(hostile.Correct):
        def __call__(self, problem, *, splits=1):
            signal.raise_signal(signal.SIGINT)

    with interrupts.installed(), pytest.raises(interrupts.Interrupted, match="SIGINT"):
        run_case(SignalsItself(), _tiny(), Launch())


@pytest.mark.parametrize("where", ["a file", "/proc/x", "read-only"])
def test_save_repro_into_an_unusable_folder_raises_oserror_and_leaves_nothing(tmp_path, monkeypatch, where):
    import os

    from nvfp4_suite.vectors.engine.harness import save_repro

    if where == "a file":
        folder = tmp_path / "f"
        folder.write_text("x")
    elif where == "/proc/x":
        folder = "/proc/x"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
    monkeypatch.setenv("NVFP4_REPRO_DIR", str(folder))
    with pytest.raises(OSError):
        save_repro("x:y", _tiny(), Launch(), "FAIL")
    if where == "read-only":
        assert list(folder.iterdir()) == []


def test_a_crash_report_carries_the_backends_traceback():
    class Raises:
        name = "raises"
        geometry = None
        capabilities = Capabilities()

        def available(self):
            return None

        def __call__(self, problem, *, splits=1):
            return self.inner(problem)

        def inner(self, problem):
            raise ValueError("zero-size array to reduction operation")

    p = random_problem(2, reqs=1, topk=2)
    try:
        run_case(Raises(), p, Launch())
    except BackendCrash as e:
        text = e.details()
    else:
        raise AssertionError("no crash")
    assert text.startswith("backend raised ValueError: zero-size array to reduction operation\n"
                           "backend traceback (innermost frames):")
    assert "in inner" in text and 'raise ValueError("zero-size array' in text
