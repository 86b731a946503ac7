"""``python -m nvfp4_suite.kernels.triton.sweep``: time Triton kernel variants (dequantisation path,
warps, pipeline stages, register cap, splits; 0 splits = the host's own pick) in one GPU run;
each variant's output is checked against the torch backend first (relative L2
error). Prints one line per variant; kernels/triton/NOTES.md logs the results."""

from __future__ import annotations

import argparse
import functools
import importlib
import itertools
import sys

from nvfp4_suite.kernels.bench import ROOFLINE, _problem, _time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.triton.sweep",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256x4x1,64x4x1")
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--deq", default="1,2", help="dequantisation paths (nvfp4_suite.kernels.triton.decode.DEQ)")
    ap.add_argument("--warps", default="4,8")
    ap.add_argument("--stages", default="1")
    ap.add_argument("--splits", default="0,1,2,4")
    ap.add_argument("--maxnreg", default="0", help="register caps (0: none)")
    ap.add_argument("--module", default="nvfp4_suite.kernels.triton.decode")
    args = ap.parse_args(argv)
    import torch

    from nvfp4_suite.kernels.torch import backend as torch_backend

    if not torch.cuda.is_available():
        print("error: no CUDA/ROCm device", file=sys.stderr)
        return 2
    mod = importlib.import_module(args.module)
    dev = torch.device("cuda")
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    for size in args.sizes.split(","):
        rows, hk, q_len = (int(x) for x in size.split("x"))
        q, pool, ids, bt, seq = _problem(rows, hk, q_len, args.topk, dev)
        kw = dict(layout="token_rows", num_kv_heads=hk, q_len=q_len, sm_scale=128**-0.5,
                  k_global_scale=0.05, v_global_scale=0.05)
        ref = torch_backend.decode(q, pool, ids, bt, seq, **kw).float()
        nbytes = rows * hk * args.topk * 128 * 72 * 2 + q.numel() * 2 * 2
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        t_cp = _time(functools.partial(dst.copy_, src))
        print(f"== {rows}x{hk} q_len {q_len} TOPK {args.topk}: {nbytes / 1e6:.1f} MB, copy {t_cp * 1e6:.1f} us",
              flush=True)
        out = torch.empty((rows, 16 * hk, 128), dtype=torch.bfloat16, device=dev)
        for dq, w, st, mr, sp in itertools.product(ints(args.deq), ints(args.warps), ints(args.stages),
                                                   ints(args.maxnreg), ints(args.splits)):
            if sp == 0:
                sp = mod.auto_splits(rows, hk, args.topk, torch.cuda.get_device_properties(0).multi_processor_count)
            fn = functools.partial(mod.decode, q, pool, ids, bt, seq, splits=sp, out=out, num_warps=w, num_stages=st,
                                   deq=dq, maxnreg=mr or None, **kw)
            try:
                out.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = ((out.float() - ref).norm() / ref.norm()).item()
                t = _time(fn)
            except Exception as e:  # noqa: BLE001
                print(f"deq {dq} warps {w} stages {st} maxnreg {mr} splits {sp}: "
                      f"FAILED {type(e).__name__}: {str(e)[:200]}",
                      flush=True)
                continue
            print(f"deq {dq} warps {w} stages {st} maxnreg {mr} splits {sp}: {t * 1e6:8.1f} us "
                  f"{nbytes / t / 1e12:5.2f} TB/s {nbytes / t / ROOFLINE:6.1%} of 4.3, {t_cp / t:6.1%} of copy; "
                  f"relerr {err:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
