"""Benchmark of the references on a torch device against a float32 floor there.

``python -m nvfp4_suite.kernels.torch.bench [--device DEV] [--reps N] [--what oracle,emulate] [--reqs N]``

``nvfp4_suite.reference.bench`` with every array on ``--device`` (default:
CUDA when torch sees a GPU, else the CPU): the same production-size step and
rows, the oracle and the emulation through the torch namespace
(``nvfp4_suite.kernels.torch.reference``) with the problem's pool copied to
the device once, before the timing (as ``serving-bench`` passes it; a small
check with ``--references device`` copies the pool at every launch, a cost
these times leave out), against the same plain softmax attention as
batched ``torch.matmul`` in float32 on that device, with torch's own matmul
precision setting (TF32 off unless the process turned it on). A reference's
time includes its host work: validating the problem and copying its results
back to numpy. Times are the minimum of ``--reps`` runs
after one untimed run, each ended by a device synchronisation; peak MiB is
what the device's allocator held beyond what it held before the call (a dash
on the CPU, where torch keeps no such count).

Exits 2 with the reason where torch is not installed or the device is not there.
"""

from __future__ import annotations

import sys
import time

from nvfp4_suite.reference import bench
from nvfp4_suite.reference.paged_cache import D

from . import reference

try:
    import torch
except ImportError:  # main() says so
    torch = None


def attention_floor(q, k, v):
    """``nvfp4_suite.reference.bench.attention_floor`` in torch: tensors q ``[B,16,128]``,
    k/v ``[B,N,128]`` of one dtype and device -> ``[B,16,128]`` in that dtype."""
    s = torch.matmul(q, k.transpose(1, 2))
    s *= D**-0.5
    s -= s.amax(dim=-1, keepdim=True)
    s.exp_()
    o = torch.matmul(s, v)
    o /= s.sum(dim=-1, keepdim=True)
    return o


def namespace(device: str) -> bench.Namespace:
    """The benchmark's ``Namespace`` on torch device ``device``."""
    dev = torch.device(device)
    gpu = dev.type != "cpu"

    def sync():
        if gpu:
            torch.cuda.synchronize(dev)

    def timed(fn, reps: int):
        fn()
        sync()
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            sync()
            best = min(best, time.perf_counter() - t)
        if not gpu:
            return best, None
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        fn()
        sync()
        return best, torch.cuda.max_memory_allocated(dev) - before

    def references(what: str, p):
        pool = reference.TorchOps(dev).asarray(p.pool)
        call = reference.sparse_decode if what == "oracle" else reference.emulate
        return lambda: call(p, device=dev, pool=pool)

    if gpu:
        where = f"{torch.cuda.get_device_name(dev)}); TF32 matmul: {torch.backends.cuda.matmul.allow_tf32}"
    else:  # torch's own thread count moves the CPU ratios as BLAS's does numpy's
        where = f"the CPU); torch threads: {torch.get_num_threads()}"
    header = f"torch {torch.__version__} on {dev} ({where}"
    return bench.Namespace(header, attention_floor, lambda a: torch.from_numpy(a).to(dev), timed, references,
                           reference.TorchOps(dev))


def main(argv=None) -> int:
    """Print ``nvfp4_suite.reference.bench``'s table computed on a torch device."""
    ap = bench.parser("python -m nvfp4_suite.kernels.torch.bench", __doc__.split("\n\n")[0])
    ap.add_argument("--device", help="torch device (default: cuda when torch sees a GPU, else cpu)")
    args = ap.parse_args(argv)
    why = reference.available()
    if why is None:
        device = reference.default_device() if args.device is None else args.device
        try:
            dev = torch.device(device)
        except RuntimeError as e:
            why = f"--device {device!r}: {e}"
        else:
            if dev.type == "cuda" and not torch.cuda.is_available():
                why = f"--device {device}: no CUDA/ROCm device is visible to torch"
            elif dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
                why = f"--device {device}: torch sees {torch.cuda.device_count()} CUDA/ROCm device(s)"
            elif dev.type not in ("cpu", "cuda"):
                why = f"--device {device}: the torch namespace runs on cpu or cuda (ROCm answers to cuda)"
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    return bench.report(namespace(device), args, ap)


if __name__ == "__main__":
    raise SystemExit(main())
