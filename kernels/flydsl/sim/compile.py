"""The assembly of one kernel configuration, compiled once and kept on disk.

``assembly(arch, topk, splits, xcds, layout)`` compiles the FlyDSL kernel with
``COMPILE_ONLY=1`` in a subprocess (FlyDSL picks its target from the
environment when it is imported), reads LLVM's final assembly
(``22_final_isa.s``) and keeps it under ``$NVFP4_SIM_CACHE`` (default
``~/.cache/nvfp4-sim``), keyed by the configuration, a hash of what the
kernel is traced from (its source files, the target records, the reference
page addressing ``row_byte`` with its table ``ROWS``, the constants ``lanes`` holds) and the
FlyDSL version, so a changed kernel is recompiled.
Beside it, ``<same name>.json`` records the order in which the launcher
passes its arguments to the kernel (FlyDSL reorders them; read off the
``gpu.launch_func`` of the first IR stage), as indices into the launcher's
argument list (``nvfp4_suite.kernels.flydsl.decode.compile_nvfp4_sparse_decode``).

    python -m nvfp4_suite.kernels.flydsl.sim.compile --arch gfx950 --topk 16 --splits 2 [--xcds 0] [--layout token_rows]

prints the path of the cached assembly.

The suite ships the assemblies of the current sources in ``compiled.tar.xz``
beside this module (every configuration the two simulator backends may launch,
and the kernel mutants the tests use: ``bundle_configs``): a machine without FlyDSL runs the
simulator from them, and a machine whose FlyDSL is the version that built
them takes them instead of compiling again (CI's compile tests compile
afresh and compare byte for byte). After a change to what the kernel is
traced from, rebuild it (FlyDSL and ``ld.lld`` >= 19 needed):

    python -m nvfp4_suite.kernels.flydsl.sim.compile --bundle

which compiles what is missing and writes the archive (byte-identical when
nothing changed).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata
import inspect
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from nvfp4_suite.reference import paged_cache

from .. import lanes
from ..host import TOPKS, XCDS, flydsl_missing, rocm_path
from ..targets import ARCHS

# The shipped assemblies (the module docstring says what and why).
BUNDLE = Path(__file__).with_name("compiled.tar.xz")

_SOURCES = ("decode.py", "lanes.py", "targets.py")


def cache_dir() -> Path:
    """Where compiled assemblies are kept."""
    return Path(os.environ.get("NVFP4_SIM_CACHE", Path.home() / ".cache" / "nvfp4-sim"))


def _source_key() -> str:
    """A hash of everything the kernel is traced from: its source files, the
    reference function its loader addresses pages with and the table that
    function reads, and the values of the constants ``lanes`` holds (some
    imported from ``reference``)."""
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update((Path(__file__).resolve().parents[1] / name).read_bytes())
    h.update(inspect.getsource(paged_cache.row_byte).encode())
    h.update(repr(paged_cache.ROWS).encode())
    consts = sorted((k, v) for k, v in vars(lanes).items()
                    if not k.startswith("_") and isinstance(v, (int, float, str, tuple)))
    h.update(repr(consts).encode())
    return h.hexdigest()[:16]


def flydsl_version() -> str | None:
    """The installed FlyDSL's version from its package metadata (importing
    FlyDSL imports torch, seconds per process: a cached kernel needs neither),
    or None when it is not installed."""
    try:
        return importlib.metadata.version("flydsl")
    except importlib.metadata.PackageNotFoundError:
        return None


def _worker(topk: int, splits: int, xcds: int, layout: str, mutant: str | None) -> None:
    """In the child: compile one configuration; print the kernel name."""
    import flydsl.compiler as flyc

    from ..decode import compile_nvfp4_sparse_decode

    launch = compile_nvfp4_sparse_decode(splits=splits, topk=topk, xcds=xcds, layout=layout, mutant=mutant)
    args = [0] * 11 + [0, 1, 1, 16, 1, 1, 1, 1, 1.0, 1, None]
    flyc.compile[launch.compile_hints](launch, *args)
    print(launch.kernel_name, flush=True)


class CompileError(RuntimeError):
    """The configuration could not be compiled here; the message says why."""


_LAUNCH_ARGS = re.compile(r"gpu\.launch_func[^\n]*?args\(([^)]*)\)")


def launch_arg_order(mlir: str) -> list[int]:
    """The launcher-argument index of each kernel argument, from the IR's ``gpu.launch_func``."""
    m = _LAUNCH_ARGS.search(mlir)
    if m is None:
        raise CompileError("no gpu.launch_func in FlyDSL's first IR stage")
    return [int(a) for a in re.findall(r"%arg(\d+)\s*:", m.group(1))]


def arg_order(asm: Path) -> list[int]:
    """The kernel-argument order recorded beside a cached assembly."""
    return json.loads(asm.with_suffix(".json").read_text())["launch_args"]


def _stem(arch: str, topk: int, splits: int, xcds: int, layout: str, mutant: str | None) -> str:
    tag = f"-{mutant}" if mutant else ""
    return f"{arch}-k{topk}-s{splits}-x{xcds}-{layout}{tag}-{_source_key()}"


def store(dump: Path, arch: str, topk: int, splits: int, xcds: int, layout: str,
          mutant: str | None = None) -> Path:
    """Keep one compile's dump folder (``FLYDSL_DUMP_DIR/<kernel name>`` with
    ``22_final_isa.s`` and ``00_origin.mlir``) in the cache; returns the assembly's path.
    Runs where FlyDSL is installed (the compile just made the dump)."""
    path = cache_dir() / f"{_stem(arch, topk, splits, xcds, layout, mutant)}-fly{flydsl_version()}.s"
    order = launch_arg_order(Path(dump, "00_origin.mlir").read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    _put(path.with_suffix(".json"), json.dumps({"launch_args": order}).encode())
    _put(path, Path(dump, "22_final_isa.s").read_bytes())
    return path


def stem(arch: str, topk: int, splits: int, xcds: int = 0, layout: str = "token_rows",
         mutant: str | None = None) -> str:
    """The cache's name of one configuration (without the FlyDSL version)."""
    return _stem(arch, topk, splits, xcds, layout, mutant)


def cached(name: str) -> Path | None:
    """The cached assembly (with its argument-order record) of configuration
    ``name`` (a ``stem``) compiled by any FlyDSL version, or None."""
    found = sorted(p for p in cache_dir().glob(f"{name}-*.s") if p.with_suffix(".json").exists())
    return found[-1] if found else None


def _configs(archs=ARCHS, topks=TOPKS) -> list[tuple[str, int, int, int, str]]:
    """``(arch, topk, splits, xcds, layout)`` of every configuration a launch on
    ``archs`` may need: each compiled TOPK width in ``topks`` at every split
    count, XCD placement and layout."""
    return [(a, t, s, x, lay) for a in archs for t in topks for s in lanes.SPLITS for x in XCDS
            for lay in lanes.LAYOUTS]


def needed(archs=ARCHS, mutant: str | None = None, topks=TOPKS) -> list[str]:
    """The ``stem`` of every configuration a launch on ``archs`` may need
    (``mutant``: that kernel mutant; see ``_configs``)."""
    return [stem(*c, mutant) for c in _configs(archs, topks)]


# The kernel mutants the suite's tests run through the simulator, each in the
# configuration its catching launches use (``vectors.bugs``' mutant records, the
# memory-order tests): shipped too, so that CI compiles none of them. A test
# that launches another mutant configuration compiles it where FlyDSL is.
BUNDLED_MUTANTS: tuple[tuple[str, int, int, int, str, str], ...] = (
    ("gfx942", 16, 1, 0, "token_rows", "fnuz_uncorrected"),
    ("gfx942", 16, 2, 0, "token_rows", "partials_no_sc1"),
    ("gfx942", 16, 2, 0, "token_rows", "ticket_no_wait"),
    ("gfx950", 16, 1, 0, "token_rows", "causal_off_by_one"),
    ("gfx950", 16, 1, 0, "token_rows", "v_scale_linear"),
    ("gfx950", 16, 2, 0, "token_rows", "merge_no_rescale"),
    ("gfx950", 16, 2, 0, "token_rows", "partials_no_sc1"),
    ("gfx950", 16, 2, 0, "token_rows", "ticket_no_wait"),
    ("gfx950", 16, 2, 0, "token_rows", "ticket_not_reset"),
)


def bundle_configs() -> list[tuple[str, int, int, int, str, str | None]]:
    """``(arch, topk, splits, xcds, layout, mutant)`` of every configuration the
    bundle holds: all a launch on either target may need, and ``BUNDLED_MUTANTS``."""
    return [(*c, None) for c in _configs()] + list(BUNDLED_MUTANTS)


def _put(dest: Path, data: bytes) -> None:
    """Write ``dest`` whole or not at all (another process may be reading the cache)."""
    tmp = dest.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(dest)


@functools.lru_cache(maxsize=2)
def _bundle_files(path: Path, mtime_ns: int) -> dict[str, bytes]:
    """Every file of the archive (about 12 MB): an xz stream is read from its
    start, so one read serves every lookup and copy of a process."""
    with tarfile.open(path, "r:xz") as tar:
        files = {}
        for m in tar.getmembers():
            data = tar.extractfile(m)
            if data is None:
                raise CompileError(f"{path}: {m.name} is not a regular file")
            files[m.name] = data.read()
        return files


def _bundle(path: Path) -> dict[str, bytes]:
    return _bundle_files(path, path.stat().st_mtime_ns) if path.exists() else {}


def bundled(name: str, version: str | None = None) -> str | None:
    """The bundle's file name of configuration ``name`` (a ``stem``) compiled by
    FlyDSL ``version`` (None: any version, the highest name), or None."""
    members = _bundle(BUNDLE)
    found = sorted(m for m in members if m.startswith(f"{name}-fly") and m.endswith(".s")
                   and m[:-2] + ".json" in members and (version is None or m == f"{name}-fly{version}.s"))
    return found[-1] if found else None


def bundled_text(name: str, version: str | None = None) -> str | None:
    """The bundled assembly of configuration ``name`` (as ``bundled``), or None."""
    member = bundled(name, version)
    return None if member is None else _bundle(BUNDLE)[member].decode()


def unbundle(member: str) -> Path:
    """Copy one bundled assembly (``bundled``'s name) and its argument-order
    record into the cache; returns the assembly's path there."""
    files = _bundle(BUNDLE)
    cache_dir().mkdir(parents=True, exist_ok=True)
    for name in (member[:-2] + ".json", member):  # the record first: an .s alone is not an entry
        _put(cache_dir() / name, files[name])
    return cache_dir() / member


def write_bundle(path: Path | None = None, names: list[str] | None = None) -> list[str]:
    """Write ``path`` (default: ``BUNDLE``, read when called): the entries (assembly and record, any FlyDSL version) of
    configurations ``names`` (``stem``s; default: ``bundle_configs``), each taken
    from the cache or else from the existing bundle; CompileError naming the
    first configuration that is in neither. Deterministic: the same entries
    give the same bytes whatever other configurations the cache holds (sorted names, zero times
    and owners, xz preset 9). Returns the file names."""
    # BUNDLE read here, not bound as the default: a caller that points it elsewhere writes there.
    path = BUNDLE if path is None else path
    names = names if names is not None else [stem(*c) for c in bundle_configs()]
    old = _bundle(path)
    files: dict[str, bytes] = {}
    for name in names:
        found = {f.name: f for f in cache_dir().glob(f"{name}-fly*.s") if f.with_suffix(".json").exists()}
        for member in old:
            if member.startswith(f"{name}-fly") and member.endswith(".s") and member[:-2] + ".json" in old:
                files.setdefault(member, old[member])
                files.setdefault(member[:-2] + ".json", old[member[:-2] + ".json"])
        for fname, f in found.items():
            files[fname] = f.read_bytes()
            files[f.with_suffix(".json").name] = f.with_suffix(".json").read_bytes()
        if not any(m.startswith(f"{name}-fly") for m in files):
            raise CompileError(f"{name} is neither in the cache {cache_dir()} nor in {path}: compile it first")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=9, format=tarfile.USTAR_FORMAT) as tar:
        for fname in sorted(files):
            info = tarfile.TarInfo(fname)
            info.size, info.mode = len(files[fname]), 0o644
            tar.addfile(info, io.BytesIO(files[fname]))
    _put(path, buf.getvalue())
    return sorted(files)


def assembly_path(arch: str, topk: int, splits: int, xcds: int = 0, layout: str = "token_rows",
                  mutant: str | None = None) -> Path:
    """The cached assembly of one configuration (``mutant``: one of
    ``nvfp4_suite.kernels.flydsl.mutants.MUTANTS`` or None), compiling it first when needed.

    A bundled assembly (``compiled.tar.xz``) of the installed FlyDSL version
    is taken instead of compiling. Where FlyDSL or the linker is missing, an
    assembly cached or bundled from these kernel sources (by any FlyDSL
    version) is used: the simulator itself needs no FlyDSL, so a cache folder
    copied to another machine runs there. Raises CompileError when the
    configuration is neither cached nor bundled and FlyDSL or ``ld.lld`` >= 19
    is missing, or the compile fails."""
    if arch not in ARCHS or layout not in paged_cache.LAYOUTS:
        raise ValueError(f"arch must be one of {ARCHS} and layout one of {paged_cache.LAYOUTS}, "
                         f"got {arch!r}, {layout!r}")
    stem = _stem(arch, topk, splits, xcds, layout, mutant)
    version = flydsl_version()
    path = cache_dir() / f"{stem}-fly{version}.s"
    if version is not None and path.exists() and path.with_suffix(".json").exists():
        return path
    member = bundled(stem, version) if version is not None else None
    if member is not None:
        return unbundle(member)
    missing = flydsl_missing()
    rocm, note = (None, missing) if missing else rocm_path()
    if rocm is None:
        # Nothing to compile with here: a compile by another FlyDSL version will do.
        found = cached(stem)
        if found is not None:
            return found
        member = bundled(stem)
        if member is not None:
            return unbundle(member)
        raise CompileError(f"{note}; and {stem} is neither in the cache {cache_dir()} nor in {BUNDLE.name}")
    with tempfile.TemporaryDirectory(prefix=f"nvfp4-sim-{arch}-") as dump:
        env = dict(os.environ, COMPILE_ONLY="1", FLYDSL_GPU_ARCH=arch, ARCH=arch, FLYDSL_RUNTIME_ENABLE_CACHE="0",
                   FLYDSL_DEBUG_DUMP_ASM="1", FLYDSL_DUMP_IR="1", FLYDSL_DUMP_DIR=dump, ROCM_PATH=rocm)
        proc = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.sim.compile", "--worker",
                               str(topk), str(splits), str(xcds), layout, mutant or "-"],
                              capture_output=True, text=True, env=env, cwd=dump)
        name = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if proc.returncode != 0 or not name or not Path(dump, name, "22_final_isa.s").exists():
            raise CompileError(f"compiling {stem} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return store(Path(dump, name), arch, topk, splits, xcds, layout, mutant)


def main(argv=None) -> int:
    """The command line; see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m nvfp4_suite.kernels.flydsl.sim.compile",
                                description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=ARCHS, default="gfx950")
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--splits", type=int, default=1)
    p.add_argument("--xcds", type=int, default=0)
    p.add_argument("--layout", choices=paged_cache.LAYOUTS, default="token_rows")
    p.add_argument("--mutant", default=None, help="build a mutant (nvfp4_suite.kernels.flydsl.mutants.MUTANTS)")
    p.add_argument("--bundle", action="store_true",
                   help=f"compile every configuration the simulator backends may launch and the mutants the tests "
                        f"use (what the cache and bundle lack), then write {BUNDLE.name} of exactly those")
    p.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        t, s, x, lay, mut = args.worker
        _worker(int(t), int(s), int(x), lay, None if mut == "-" else mut)
        return 0
    if args.bundle:
        return _bundle_command()
    try:
        print(assembly_path(args.arch, args.topk, args.splits, args.xcds, args.layout, args.mutant))
    except CompileError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


def _bundle_command() -> int:
    missing = flydsl_missing()
    rocm, note = (None, missing) if missing else rocm_path()
    if rocm is None:
        print(f"cannot build {BUNDLE.name}: {note}", file=sys.stderr)
        return 2
    configs = bundle_configs()
    for i, config in enumerate(configs, 1):
        name = stem(*config)
        if cached(name) is None and bundled(name, flydsl_version()) is None:
            print(f"[{i}/{len(configs)}] compiling {name}", file=sys.stderr, flush=True)
        try:
            assembly_path(*config)
        except CompileError as e:
            print(e, file=sys.stderr)
            return 2
    names = write_bundle()
    print(f"{BUNDLE}: {len(names) // 2} configurations, {BUNDLE.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
