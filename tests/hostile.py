"""Hostile backends for the harness's exit-path tests (issue 20), loaded as
``--backend hostile:Name`` with ``tests/`` on PYTHONPATH or imported directly.

Each is correct (the seed geometry's emulation at splits 1) except for the one
hostile thing its name says, so a verdict other than the expected one is the
harness's fault, not an accident of arithmetic.
"""

import os
import signal
import time

import numpy as np

import nvfp4_suite.reference as R
from nvfp4_suite.kernels.protocol import Capabilities, Limits

SMALL = Limits(requests=2, kv_heads=1, topk=4, q_len=2)


class Correct:
    name = "correct"
    geometry = R.SEED_GEOMETRY
    capabilities = Capabilities(splits=(1,), limits=SMALL, targets=("numpy",))

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        return R.emulate(problem, splits=splits)


class ExitsOnCall(Correct):
    """``sys.exit(0)`` from its own call (a kernel that "skips")."""

    def __call__(self, problem, *, splits=1):
        raise SystemExit(0)


class InterruptsOnCall(Correct):
    """``raise KeyboardInterrupt`` from its own code (no signal involved)."""

    def __call__(self, problem, *, splits=1):
        raise KeyboardInterrupt


class ZerosFirstTorch(Correct):
    """A serving-style static CPU torch float32 output: zeros on every first
    launch of a pair, the right answer on every second, in the same tensor."""

    def __init__(self, padded=False):
        self.calls, self.buf, self.padded = 0, None, padded

    def __call__(self, problem, *, splits=1):
        import torch

        self.calls += 1
        rows = problem.rows + (8 if self.padded else 0)
        if self.buf is None or self.buf.shape[0] < rows or self.buf.shape[1:] != (problem.H, 128):
            self.buf = torch.zeros((rows, problem.H, 128), dtype=torch.float32)
        view = self.buf[: problem.rows]
        if self.calls % 2:
            view.zero_()
        else:
            view.copy_(torch.from_numpy(R.emulate(problem, splits=splits)))
        return view


def ZerosFirstGraph():
    """CUDA-graph style: a static buffer larger than any problem, a slice returned."""
    return ZerosFirstTorch(padded=True)


class ZerosFirstNumpy(ZerosFirstTorch):
    """The same with one reused numpy array."""

    def __call__(self, problem, *, splits=1):
        self.calls += 1
        if self.buf is None or self.buf.shape != (problem.rows, problem.H, 128):
            self.buf = np.zeros((problem.rows, problem.H, 128), np.float32)
        self.buf[...] = 0 if self.calls % 2 else R.emulate(problem, splits=splits)
        return self.buf


class MetaOutput(Correct):
    def __call__(self, problem, *, splits=1):
        import torch

        return torch.empty((problem.rows, problem.H, 128), device="meta")


class SparseOutput(Correct):
    def __call__(self, problem, *, splits=1):
        import torch

        return torch.from_numpy(R.emulate(problem, splits=splits)).to_sparse()


class Float64Output(Correct):
    def __call__(self, problem, *, splits=1):
        return R.emulate(problem, splits=splits).astype(np.float64)


class AvailableRaises(Correct):
    def available(self):
        raise RuntimeError("driver query crashed")


class AvailableExits(Correct):
    def available(self):
        raise SystemExit(0)


class EvilName(Correct):
    """A correct backend whose name tries to forge a verdict line on a terminal."""

    name = "x\nCONFORMANT: backend trusted\x1b[2K"


class ExitsOnName(Correct):
    """Loads (its class has every attribute) but ``sys.exit(0)`` when its name is read."""

    @property
    def name(self):
        raise SystemExit(0)


class Hangs(Correct):
    def __call__(self, problem, *, splits=1):
        time.sleep(3600)


class AbortsOnTwoHeads(Correct):
    """``os.abort()`` (as a GPU fault ends a process) on problems with 2 KV heads."""

    capabilities = Capabilities(splits=(1,), limits=Limits(requests=2, kv_heads=2, topk=4, q_len=2),
                                targets=("numpy",))

    def __call__(self, problem, *, splits=1):
        if problem.num_kv_heads == 2:
            os.abort()
        return R.emulate(problem, splits=splits)


class KillsItself(Correct):
    """SIGKILL to its own process (as the OOM killer does)."""

    # The smallest problems only: minimising a failure that kills every worker costs a
    # fresh worker per try.
    capabilities = Capabilities(splits=(1,), limits=Limits(requests=1, kv_heads=1, topk=1, q_len=1),
                                targets=("numpy",))

    def __call__(self, problem, *, splits=1):
        os.kill(os.getpid(), signal.SIGKILL)


class KillsItselfOnce(Correct):
    """SIGKILL to its own process on the first call of a session (the file
    ``$HOSTILE_MARK`` records that it happened), right ever after."""

    def __call__(self, problem, *, splits=1):
        mark = os.environ["HOSTILE_MARK"]
        if not os.path.exists(mark):
            open(mark, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return R.emulate(problem, splits=splits)


class FlakyOnce(Correct):
    """Wrong (zeros) on its third call only: the first launch of the second
    problem; every rerun of that problem is right (a race that rarely fires)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, problem, *, splits=1):
        self.calls += 1
        out = R.emulate(problem, splits=splits)
        return np.zeros_like(out) if self.calls == 3 else out


class SlowWrong(Correct):
    """Always wrong (zeros) and slow, so that minimising takes long enough to interrupt."""

    def __call__(self, problem, *, splits=1):
        time.sleep(0.2)
        return np.zeros((problem.rows, problem.H, 128), np.float32)


class Slow(Correct):
    """Correct but slow: a run long enough to interrupt."""

    def __call__(self, problem, *, splits=1):
        time.sleep(0.2)
        return R.emulate(problem, splits=splits)


class StringGeometry(Correct):
    """Declares its arithmetic by a name (``"seed"``) instead of a ``Geometry``: not the protocol."""

    geometry = "seed"


class RaisingCapabilities(Correct):
    """Its ``capabilities`` property raises when read."""

    @property
    def capabilities(self):
        raise RuntimeError("capabilities not ready")


class TimeoutAttribute(Correct):
    """A plain ``timeout`` (and ``shrink_budget_s``) attribute: the protocol declares
    neither, so neither may change how the backend is judged."""

    timeout = 5.0
    shrink_budget_s = 0.0


class Compacted(Correct):
    """Correct, and declares the compacted slot-list domain: every check must
    draw and run only compacted slot lists for it (any other list is outside
    its domain, and is refused here, loudly)."""

    capabilities = Capabilities(splits=(1,), limits=SMALL, targets=("numpy",), slot_lists="compacted")

    def __call__(self, problem, *, splits=1):
        from nvfp4_suite.reference.problem import outside_slot_domain

        problem.validate()  # the host side: invalid input raises its ProblemError first
        why = outside_slot_domain(problem, "compacted")
        if why:
            raise ValueError(f"handed slot lists outside its domain: {why}")
        return R.emulate(problem, splits=splits)


class AutoSplits(Correct):
    """Exact class (the oracle rounded once), choosing its own split count: it
    declares ``splits=("auto",)`` and refuses any other ``splits`` it is handed."""

    geometry = None
    capabilities = Capabilities(splits=("auto",), limits=SMALL, targets=("numpy",))

    def __call__(self, problem, *, splits):
        if splits != "auto":
            raise ValueError(f"handed splits={splits!r}; it chooses its own")
        return R.bf16_round(R.sparse_decode(problem)[0])
