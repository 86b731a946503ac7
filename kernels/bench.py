"""``python -m kernels.bench``: time the Triton kernel (and torch) on a GPU.

For each configuration (rows, Hkv, q_len; TOPK 16; every row sees 16 full
blocks) it reports the median of CUDA-event timings after warm-up, the bytes
the kernel must read (K and V slabs of every selected block, scales
included, plus q and out), the achieved bandwidth as a fraction of the
4.3 TB/s roofline and of a device-to-device copy of the same bytes measured
in the same run (the floor), and the torch backend's time on the same problem.
"""

from __future__ import annotations

import argparse
import statistics

ROOFLINE = 4.3e12


def _time(fn, reps: int, warmup: int = 5) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def _problem(rows: int, hk: int, q_len: int, topk: int, dev, seed: int = 0):
    import torch

    from reference.paged_cache import page_bytes

    g = torch.Generator(device=dev).manual_seed(seed)
    reqs = rows // q_len
    pages = reqs * topk
    pool = torch.randint(0, 256, (pages, page_bytes(hk)), dtype=torch.uint8, device=dev, generator=g)
    # Valid scale bytes everywhere (0x30..0x3F): overwrite every row's 8 scale bytes.
    t = pool.view(pages, 2 * hk, 128, 72)
    t[..., 64:] = torch.randint(0x30, 0x40, t[..., 64:].shape, dtype=torch.uint8, device=dev, generator=g)
    bt = torch.randperm(pages, device=dev, generator=g).to(torch.int32).view(reqs, topk)
    ids = torch.stack([torch.stack([torch.randperm(topk, device=dev, generator=g) for _ in range(rows)])
                       for _ in range(hk)]).to(torch.int32).contiguous()
    # The last row of each request sees all TOPK blocks; earlier rows cut the last one.
    seq = torch.full((reqs,), topk * 128, dtype=torch.int32, device=dev)
    q = (torch.randn((rows, 16 * hk, 128), device=dev, generator=g)).to(torch.bfloat16)
    return q, pool, ids, bt, seq


def main(argv=None) -> int:
    """Print the benchmark table; exit 2 without a GPU."""
    ap = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--no-torch", action="store_true", help="skip the torch backend column")
    ap.add_argument("--warps", default="", help="comma-separated num_warps to sweep (default: the kernel's)")
    ap.add_argument("--splits", default="", help="comma-separated split counts to sweep (default: one per size)")
    args = ap.parse_args(argv)
    import torch

    from kernels.torch import backend as torch_backend
    from kernels.triton import decode as triton_decode

    if not torch.cuda.is_available():
        print("error: no CUDA/ROCm device", flush=True)
        return 2
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name()}; roofline {ROOFLINE / 1e12:.1f} TB/s; TOPK {args.topk}")
    print(f"{'rows':>5} {'Hkv':>3} {'q_len':>5} {'splits':>6} {'MB read':>8} {'triton us':>10} {'TB/s':>6} "
          f"{'of 4.3':>7} {'copy us':>8} {'of copy':>8} {'torch us':>9} {'torch/triton':>12}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for rows, hk, q_len in [(1, 1, 1), (16, 1, 1), (64, 4, 1), (64, 4, 4), (128, 4, 2), (256, 1, 1),
                            (256, 4, 1), (256, 4, 4)]:
        split_opts = [int(x) for x in args.splits.split(",") if x] or [max(1, min(8, -(-2 * sms // (rows * hk))))]
        q, pool, ids, bt, seq = _problem(rows, hk, q_len, args.topk, dev)
        kw = dict(layout="token_rows", num_kv_heads=hk, q_len=q_len, sm_scale=128**-0.5,
                  k_global_scale=0.05, v_global_scale=0.05)
        out = torch.empty((rows, 16 * hk, 128), dtype=torch.bfloat16, device=dev)
        warps = [int(w) for w in args.warps.split(",") if w] or [triton_decode.NUM_WARPS]
        times = {(w, sp): _time(lambda: triton_decode.decode(q, pool, ids, bt, seq, splits=sp, out=out, num_warps=w,
                                                             **kw), args.reps) for w in warps for sp in split_opts}
        best = min(times, key=times.get)
        t_tr = times[best]
        splits = best[1]
        if len(times) > 1:
            print("      sweep (warps, splits): us = " + ", ".join(f"{k}: {t * 1e6:.0f}" for k, t in times.items()))
        nbytes = rows * hk * args.topk * 128 * 72 * 2 + q.numel() * 2 * 2
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        t_cp = _time(lambda: dst.copy_(src), args.reps)
        if args.no_torch:
            t_to = float("nan")
        else:
            t_to = _time(lambda: torch_backend.decode(q, pool, ids, bt, seq, **kw), max(5, args.reps // 5))
        print(f"{rows:5d} {hk:3d} {q_len:5d} {splits:6d} {nbytes / 1e6:8.2f} {t_tr * 1e6:10.1f} "
              f"{nbytes / t_tr / 1e12:6.2f} {nbytes / t_tr / ROOFLINE:7.1%} {t_cp * 1e6:8.1f} "
              f"{t_cp / t_tr:8.1%} {t_to * 1e6:9.1f} {t_to / t_tr:12.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
