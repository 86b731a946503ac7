"""``python -m nvfp4_suite.kernels.bench``: time the Triton kernel on a GPU against the roofline
and a device copy of the same bytes measured in the same run.

For each configuration (TOPK 16 and 64; rows, Hkv, q_len; every row sees TOPK
full blocks, the last one causally cut for q_len > 1) it reports the bytes the
kernel must read (K and V slabs of every selected block, scales included, plus
q and out), the time at the split count the host picks by itself
(``splits="auto"``, ``nvfp4_suite.kernels.triton.decode.auto_splits``) and at the best of
1, 2, 4, 8 splits, each as a fraction of the 4.3 TB/s roofline, the time of
a device-to-device copy of the same bytes (the floor), and the time at every
split count tried. Times are device
throughput: CUDA events around ``--calls`` back-to-back launches (so Python's
launch cost overlaps the previous launch), the median of ``--reps`` such
batches, after warm-up. ``--torch`` adds the torch backend's time.
"""

from __future__ import annotations

import argparse
import functools
import statistics

ROOFLINE = 4.3e12
CONFIGS = [(1, 1, 1), (16, 1, 1), (64, 4, 1), (64, 4, 4), (256, 4, 1), (256, 4, 4)]


def _time(fn, reps: int = 5, calls: int = 10, warmup: int = 3) -> float:
    """Seconds per call: median over ``reps`` batches of ``calls`` back-to-back calls."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / calls)
    return statistics.median(ts)


def _problem(rows: int, hk: int, q_len: int, topk: int, dev, seed: int = 0):
    import torch

    from nvfp4_suite.reference.paged_cache import page_bytes

    g = torch.Generator(device=dev).manual_seed(seed)
    reqs = rows // q_len
    pages = reqs * topk
    pool = torch.randint(0, 256, (pages, page_bytes(hk)), dtype=torch.uint8, device=dev, generator=g)
    # Valid scale bytes everywhere (0x30..0x3F): overwrite every row's 8 scale bytes.
    t = pool.view(pages, 2 * hk, 128, 72)
    t[..., 64:] = torch.randint(0x30, 0x40, t[..., 64:].shape, dtype=torch.uint8, device=dev, generator=g)
    bt = torch.randperm(pages, device=dev, generator=g).to(torch.int32).view(reqs, topk)
    ids = torch.argsort(torch.rand((hk, rows, topk), device=dev, generator=g), dim=-1).to(torch.int32).contiguous()
    # Every row's position is in block TOPK-1: all TOPK blocks valid, the last causally cut for q_len > 1.
    seq = torch.full((reqs,), topk * 128, dtype=torch.int32, device=dev)
    q = (torch.randn((rows, 16 * hk, 128), device=dev, generator=g)).to(torch.bfloat16)
    return q, pool, ids, bt, seq


def main(argv=None) -> int:
    """Print the benchmark table; exit 2 without a GPU."""
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--topk", default="16,64", help="comma-separated TOPK values")
    ap.add_argument("--torch", action="store_true", help="add the torch backend's time")
    args = ap.parse_args(argv)
    import torch

    from nvfp4_suite.kernels.triton import decode as triton_decode

    if not torch.cuda.is_available():
        print("error: no CUDA/ROCm device", flush=True)
        return 2
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"device: {torch.cuda.get_device_name()} ({sms} SMs); roofline {ROOFLINE / 1e12:.1f} TB/s; "
          f"triton num_warps {triton_decode.NUM_WARPS}, "
          f"num_stages {triton_decode.NUM_STAGES or '3 unsplit, 1 split'}, "
          f"deq {triton_decode.DEQ}")
    print(f"{'TOPK':>4} {'rows':>5} {'Hkv':>3} {'q_len':>5} {'MB read':>8} | {'auto':>4} {'us':>8} {'of 4.3':>7} | "
          f"{'best':>4} {'us':>8} {'of 4.3':>7} | {'copy us':>8} {'of copy':>8} | us by split count"
          + (f" {'torch us':>9}" if args.torch else ""))
    for topk in [int(x) for x in args.topk.split(",") if x]:
        for rows, hk, q_len in CONFIGS:
            q, pool, ids, bt, seq = _problem(rows, hk, q_len, topk, dev)
            kw = dict(layout="token_rows", num_kv_heads=hk, q_len=q_len, sm_scale=128**-0.5,
                      k_global_scale=0.05, v_global_scale=0.05)
            out = torch.empty((rows, 16 * hk, 128), dtype=torch.bfloat16, device=dev)
            auto = triton_decode.auto_splits(rows, hk, topk, sms)
            times: dict[int, float] = {}
            for sp in sorted({1, 2, 4, 8, auto}):
                if sp > max(1, topk):
                    continue
                # partial binds this iteration's tensors and split count (_time calls it at once)
                run = functools.partial(triton_decode.decode, q, pool, ids, bt, seq, splits=sp, out=out, **kw)
                times[sp] = _time(run, args.reps, args.calls)
            best = min(times, key=times.__getitem__)
            nbytes = rows * hk * topk * 128 * 72 * 2 + q.numel() * 2 * 2
            src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            t_cp = _time(functools.partial(dst.copy_, src), args.reps, args.calls)
            line = (f"{topk:4d} {rows:5d} {hk:3d} {q_len:5d} {nbytes / 1e6:8.2f} | {auto:4d} {times[auto] * 1e6:8.1f} "
                    f"{nbytes / times[auto] / ROOFLINE:7.1%} | {best:4d} {times[best] * 1e6:8.1f} "
                    f"{nbytes / times[best] / ROOFLINE:7.1%} | {t_cp * 1e6:8.1f} {t_cp / times[best]:8.1%} | "
                    + " ".join(f"{sp}:{t * 1e6:.0f}" for sp, t in sorted(times.items())))
            if args.torch:
                from nvfp4_suite.kernels.torch import backend as torch_backend

                t_to = _time(functools.partial(torch_backend.decode, q, pool, ids, bt, seq, **kw), 3, 2)
                line += f" {t_to * 1e6:9.1f}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
