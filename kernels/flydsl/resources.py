"""Compile the FlyDSL kernel without a GPU and check its resources.

    python -m nvfp4_suite.kernels.flydsl.resources [--arch gfx942 --arch gfx950]
        [--topk 1 16 33 64] [--splits 1 2 4 8] [--xcds 0 8] [--layout token_rows]
        [--jobs 2] [--json PATH]

Each configuration is compiled with ``COMPILE_ONLY=1`` and ``FLYDSL_GPU_ARCH``
set, its final assembly read back, and a table printed, one row per
configuration. A configuration fails when its code object has scratch or
spills, uses more than 256 VGPR+AGPR per lane, fits fewer than two
workgroups on a CU (registers or LDS, per the target's record in
``nvfp4_suite.kernels.flydsl.targets``: 64 KiB of LDS on gfx942, 160 KiB on gfx950), lacks
fp16 denormals (the K/V decode relies on them), has LDS other than the
``Shared`` fields it uses, or has ``sc1`` anywhere but on the split partials
of an ``xcds == 0`` launch. Every compile is also kept in the simulator's
compile cache (``nvfp4_suite.kernels.flydsl.sim.compile``). Exit status: 0 all pass, 1 a check failed, 2 no
usable linker or FlyDSL.

Linking needs ``ld.lld`` 19 or newer at ``$ROCM_PATH/llvm/bin/ld.lld``. When
that is missing and a Debian ``lld-19`` (or newer) is installed, a folder with
that link is made under the system's temporary directory and used.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nvfp4_suite.reference.paged_cache import LAYOUTS

from .host import TOPKS, XCDS, flydsl_missing, rocm_path
from .lanes import NDT, SPLITS
from .targets import ARCHS, add_arch_option, target

MAX_REGS = 256


def expected_lds(shared, splits: int) -> int:
    """Bytes of LDS a configuration must have: the ``Shared`` struct's fields it
    uses. FlyDSL's static allocator makes each field its own LDS symbol, so the
    ticket, touched only by the split merge, is absent when ``splits == 1``."""
    from flydsl.compiler.protocol import dsl_size_of

    fields = dict(shared.__annotations__)
    if splits == 1:
        fields.pop("ticket")
    return sum(dsl_size_of(t) for t in fields.values())


def parse_isa(text: str) -> dict:
    """Resource figures of one kernel's final assembly (``22_final_isa.s``)."""
    def num(pattern: str) -> int:
        m = re.search(pattern, text, re.M)
        if m is None:
            raise ValueError(f"assembly has no {pattern!r}")
        return int(m.group(1))

    insts = [ln.split("//")[0].strip() for ln in text.splitlines() if re.match(r"\s+[a-z_0-9]+_", ln)]
    sc1 = [i for i in insts if re.search(r"\bsc1\b", i)]
    return {
        "regs": num(r"\.amdhsa_next_free_vgpr\s+(\d+)"),
        "vgpr": num(r"\.amdhsa_accum_offset\s+(\d+)"),
        "agpr": num(r"\.agpr_count:\s+(\d+)"),
        "sgpr": num(r"\.sgpr_count:\s+(\d+)"),
        "vgpr_spill": num(r"\.vgpr_spill_count:\s+(\d+)"),
        "sgpr_spill": num(r"\.sgpr_spill_count:\s+(\d+)"),
        "lds": num(r"\.group_segment_fixed_size:\s+(\d+)"),
        "scratch": num(r"\.private_segment_fixed_size:\s+(\d+)"),
        "f16_denorm": num(r"\.amdhsa_float_denorm_mode_16_64\s+(\d+)"),
        "sc1_ops": len(sc1),
        "sc1_other": sum(1 for i in sc1 if not i.startswith(("buffer_load", "buffer_store"))),
        "sc1_stores": sum(1 for i in sc1 if i.startswith("buffer_store")),
        "mfma": sum(1 for i in insts if i.startswith("v_mfma")),
    }


def workgroups_per_cu(row: dict) -> int:
    """4-wave workgroups resident per CU: each wave has a SIMD's VGPR+AGPR
    (the target's ``regs_per_lane``, allocated in granules of 8) to share, and
    the CU's LDS (``lds_bytes``) is shared whole."""
    tgt = target(row["arch"])
    by_regs = tgt.regs_per_lane // (-(-row["regs"] // 8) * 8)
    return min(8, by_regs, tgt.lds_bytes // max(1, row["lds"]))


def problems(row: dict) -> list[str]:
    """What is wrong with one compiled configuration (empty when it passes)."""
    bad = []
    if row["scratch"]:
        bad.append(f"scratch {row['scratch']} bytes")
    if row["vgpr_spill"] or row["sgpr_spill"]:
        bad.append(f"spills: {row['vgpr_spill']} VGPR, {row['sgpr_spill']} SGPR")
    if row["regs"] > MAX_REGS:
        bad.append(f"{row['regs']} VGPR+AGPR > {MAX_REGS}")
    if workgroups_per_cu(row) < 2:
        bad.append(f"{workgroups_per_cu(row)} workgroup(s) per CU; two must fit")
    if row["f16_denorm"] != 3:
        bad.append(f"fp16 denormals off (mode {row['f16_denorm']})")
    if row["lds"] != row["lds_expected"]:
        bad.append(f"LDS {row['lds']} != Shared {row['lds_expected']}")
    partial_scope = row["splits"] > 1 and row["xcds"] == 0
    if partial_scope and (row["sc1_other"] or row["sc1_stores"] != NDT + 1):
        bad.append(f"sc1 on {row['sc1_stores']} stores ({NDT + 1} partial stores expected), "
                   f"{row['sc1_other']} other instructions")
    if not partial_scope and row["sc1_ops"]:
        bad.append(f"sc1 on {row['sc1_ops']} instructions; partials need none here")
    return bad


def _worker(arch: str, configs: list[tuple]) -> None:
    """Compile ``configs`` for ``arch`` in this process (environment set by the parent)."""
    import flydsl.compiler as flyc

    from .decode import compile_nvfp4_sparse_decode
    from .sim.compile import store

    dump = os.environ["FLYDSL_DUMP_DIR"]
    for topk, splits, xcds, layout in configs:
        t0 = time.perf_counter()
        launch = compile_nvfp4_sparse_decode(splits=splits, topk=topk, xcds=xcds, layout=layout)
        args = [0] * 11 + [0, 1, 1, 16, 1, 1, 1, 1, 1.0, 1, None]
        flyc.compile[launch.compile_hints](launch, *args)
        isa = Path(dump, launch.kernel_name, "22_final_isa.s").read_text()
        # The same compile is what the simulator runs: keep it in its cache.
        store(Path(dump, launch.kernel_name), arch, topk, splits, xcds, layout)
        row = {"arch": arch, "topk": topk, "splits": splits, "xcds": xcds, "layout": layout,
               "compile_s": round(time.perf_counter() - t0, 2),
               "lds_expected": expected_lds(launch.shared, splits), **parse_isa(isa)}
        print(json.dumps(row), flush=True)


def compile_configs(arch: str, configs: list[tuple], rocm: str) -> list[dict]:
    """Compile ``configs`` (``(topk, splits, xcds, layout)``) of ``arch`` in a fresh
    process; one result row each.

    Raises RuntimeError with the compiler's output when the process fails."""
    with tempfile.TemporaryDirectory(prefix=f"flydsl-{arch}-") as dump:
        env = dict(os.environ, COMPILE_ONLY="1", FLYDSL_GPU_ARCH=arch, FLYDSL_RUNTIME_ENABLE_CACHE="0",
                   FLYDSL_DEBUG_DUMP_ASM="1", FLYDSL_DUMP_IR="1", FLYDSL_DUMP_DIR=dump, ROCM_PATH=rocm, ARCH=arch)
        spec = ",".join(":".join(map(str, c)) for c in configs)
        proc = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.resources", "--worker", arch, spec],
                              capture_output=True, text=True, env=env, cwd=dump)
        rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or len(rows) != len(configs):
            raise RuntimeError(f"compiling {arch} {spec} failed (exit {proc.returncode}):\n"
                               f"{proc.stderr[-4000:]}\nassembly dumps: {glob.glob(dump + '/*')}")
    return rows


def shipped_rows(arch: str, configs: list[tuple]) -> list[dict]:
    """Result rows of ``configs`` (``(topk, splits, xcds, layout)``) of ``arch``
    read from the assemblies the suite ships (``sim.compile.BUNDLE``: what the
    installed FlyDSL compiles from these sources), without compiling; their
    ``compile_s`` is 0. Needs FlyDSL (the ``Shared`` struct's size). Raises
    LookupError naming a configuration the bundle lacks for this FlyDSL version."""
    from .decode import compile_nvfp4_sparse_decode
    from .sim import compile as C

    rows = []
    for topk, splits, xcds, layout in configs:
        name = C.stem(arch, topk, splits, xcds, layout)
        text = C.bundled_text(name, C.flydsl_version())
        if text is None:
            raise LookupError(f"{C.BUNDLE.name} has no {name} from FlyDSL {C.flydsl_version()}: "
                              "python -m nvfp4_suite.kernels.flydsl.sim.compile --bundle")
        launch = compile_nvfp4_sparse_decode(splits=splits, topk=topk, xcds=xcds, layout=layout)
        rows.append({"arch": arch, "topk": topk, "splits": splits, "xcds": xcds, "layout": layout,
                     "compile_s": 0.0, "lds_expected": expected_lds(launch.shared, splits), **parse_isa(text)})
    return rows


def format_table(rows: list[dict]) -> str:
    """The resource table: one line per configuration, failures named."""
    head = (f"{'arch':7} {'layout':10} {'topk':>4} {'spl':>3} {'xcd':>3} {'regs':>4} {'vgpr':>4} {'agpr':>4} "
            f"{'sgpr':>4} {'LDS':>6} {'wg':>2} {'scr':>3} {'spill':>5} {'sc1':>3} {'mfma':>4} {'s':>5}  result")
    lines = [head]
    for r in rows:
        bad = problems(r)
        lines.append(
            f"{r['arch']:7} {r['layout']:10} {r['topk']:>4} {r['splits']:>3} {r['xcds']:>3} {r['regs']:>4} "
            f"{r['vgpr']:>4} {r['agpr']:>4} {r['sgpr']:>4} {r['lds']:>6} {workgroups_per_cu(r):>2} {r['scratch']:>3} "
            f"{r['vgpr_spill'] + r['sgpr_spill']:>5} {r['sc1_ops']:>3} {r['mfma']:>4} {r['compile_s']:>5}  "
            + ("ok" if not bad else "FAIL: " + "; ".join(bad)))
    return "\n".join(lines)


def main(argv=None) -> int:
    """The command line; see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.flydsl.resources",
                                description=__doc__.split("\n")[0])
    add_arch_option(p)
    p.add_argument("--topk", type=int, nargs="+", default=list(TOPKS))
    p.add_argument("--splits", type=int, nargs="+", default=list(SPLITS))
    p.add_argument("--xcds", type=int, nargs="+", default=list(XCDS))
    p.add_argument("--layout", nargs="+", choices=LAYOUTS, default=["token_rows"])
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiler processes at once")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--worker", nargs=2, metavar=("ARCH", "CONFIGS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        arch, spec = args.worker
        parsed = [c.split(":") for c in spec.split(",")]
        _worker(arch, [(int(t), int(s), int(x), lay) for t, s, x, lay in parsed])
        return 0
    missing = flydsl_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    rocm, note = rocm_path()
    if rocm is None:
        print(note, file=sys.stderr)
        return 2
    archs = args.arch or list(ARCHS)
    jobs = [(a, [(t, s, x, lay) for s, x in itertools.product(args.splits, args.xcds)])
            for a in archs for t in args.topk for lay in args.layout]
    total = sum(len(c) for _, c in jobs)
    print(f"compiling {total} configurations ({note}, {args.jobs} at once)", file=sys.stderr)
    rows = []
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = [pool.submit(compile_configs, a, c, rocm) for a, c in jobs]
        for f in concurrent.futures.as_completed(futures):
            rows += f.result()
            print(f"  {len(rows)}/{total} compiled", file=sys.stderr)
    rows.sort(key=lambda r: (r["arch"], r["layout"], r["topk"], r["splits"], r["xcds"]))
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    failed = [r for r in rows if problems(r)]
    print(f"{len(rows) - len(failed)} of {len(rows)} configurations pass", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
