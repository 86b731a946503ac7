"""nvfp4_suite.kernels.flydsl.sim.compile: the compile cache's names and lookup,
the shipped bundle of assemblies (rebuilt byte for byte, used without FlyDSL,
current, equal to a fresh compile), and its command line (``--help``, one
configuration's path)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvfp4_suite.kernels.flydsl.sim import compile as C
from nvfp4_suite.kernels.flydsl.sim.backend import sim_missing


def test_help_runs_as_a_module():
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.sim.compile", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--topk" in r.stdout


def test_a_cached_configuration_is_found_only_with_its_argument_order(tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(tmp_path))
    name = C.stem("gfx950", 16, 2, 8, "planar", "ticket_not_reset")
    assert name.startswith("gfx950-k16-s2-x8-planar-ticket_not_reset-")
    (tmp_path / f"{name}-fly9.s").write_text("")
    assert C.cached(name) is None
    (tmp_path / f"{name}-fly9.json").write_text('{"launch_args": [1, 0]}')
    assert C.cached(name) == tmp_path / f"{name}-fly9.s"
    assert C.arg_order(C.cached(name)) == [1, 0]


def test_the_command_prints_the_path_of_a_compiled_configuration():
    why = sim_missing(("gfx950",), topks=(16,))
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1":
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(why)
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.kernels.flydsl.sim.compile", "--arch", "gfx950",
                        "--topk", "16", "--splits", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.name.startswith(C.stem("gfx950", 16, 1)) and "v_mfma" in path.read_text()


def _fake_entry(cache: Path, name: str, version: str, text: str) -> None:
    (cache / f"{name}-fly{version}.s").write_text(text)
    (cache / f"{name}-fly{version}.json").write_text('{"launch_args": [2, 0, 1]}')


def test_a_bundle_is_byte_identical_on_rebuild_and_keeps_only_the_current_sources(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(cache))
    a, b = C.stem("gfx942", 1, 2, 8, "planar"), C.stem("gfx950", 64, 1, 0, "token_rows", "ticket_no_wait")
    _fake_entry(cache, a, "9", "; a\n")
    _fake_entry(cache, b, "9", "; b\n")
    _fake_entry(cache, "gfx950-k1-s1-x0-planar-0123456789abcdef", "9", "; another source's\n")
    (cache / f"{C.stem('gfx950', 16, 1)}-fly9.s").write_text("; no record: not an entry\n")
    first, second = tmp_path / "one.tar.xz", tmp_path / "two.tar.xz"
    names = C.write_bundle(first, [a, b])
    assert names == sorted(f"{n}-fly9.{ext}" for n in (a, b) for ext in ("s", "json"))
    # A rebuild from the cache, with another configuration of these sources
    # beside them, and from the bundle alone (an empty cache) gives the same bytes.
    _fake_entry(cache, C.stem("gfx950", 16, 2, 0, "token_rows", "ticket_not_reset"), "9", "; not asked for\n")
    C.write_bundle(second, [a, b])
    assert first.read_bytes() == second.read_bytes()
    for f in cache.iterdir():
        f.unlink()
    assert C.write_bundle(second, [a, b]) == names and first.read_bytes() == second.read_bytes()
    with pytest.raises(C.CompileError, match=r"gfx950-k33-s1-x0-planar-.* is neither in the cache .* nor in "):
        C.write_bundle(second, [a, C.stem("gfx950", 33, 1, 0, "planar")])
    assert C.write_bundle(second, [a, b]) == names  # the failed write left the bundle whole


def test_without_flydsl_a_configuration_comes_from_the_bundle_into_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(cache))
    name = C.stem("gfx950", 33, 4, 0, "planar")
    _fake_entry(cache, name, "9", "; bundled\n")
    monkeypatch.setattr(C, "BUNDLE", tmp_path / "b.tar.xz")
    C.write_bundle(C.BUNDLE, [name])
    for f in cache.iterdir():
        f.unlink()
    monkeypatch.setattr(C, "flydsl_missing", lambda: "FlyDSL is not installed")
    assert C.bundled(name) == f"{name}-fly9.s" and C.bundled(name, "8") is None
    path = C.assembly_path("gfx950", 33, 4, 0, "planar")
    assert path == cache / f"{name}-fly9.s" and path.read_text() == "; bundled\n"
    assert C.arg_order(path) == [2, 0, 1]
    with pytest.raises(C.CompileError, match=r"gfx950-k16-s4-x0-planar-.* is neither in the cache .* nor in b.tar.xz"):
        C.assembly_path("gfx950", 16, 4, 0, "planar")


def test_the_shipped_bundle_holds_every_configuration_of_the_current_sources_and_nothing_else():
    # A change to what the kernel is traced from changes every name: the bundle must be rebuilt.
    want = [C.stem(*c) for c in C.bundle_configs()]
    assert set(C.needed()) <= set(want)
    absent = [n for n in want if C.bundled(n) is None]
    assert not absent, (f"{C.BUNDLE.name} lacks {len(absent)} of {len(want)} configurations of these "
                        f"sources (first: {absent[0]}): python -m nvfp4_suite.kernels.flydsl.sim.compile --bundle")
    shipped = {m.split("-fly")[0] for m in C._bundle(C.BUNDLE) if m.endswith(".s")}
    assert shipped == set(want), sorted(shipped ^ set(want))


def test_a_fresh_compile_gives_the_bundled_assembly_byte_for_byte(flydsl_compiler, tmp_path, monkeypatch):
    import tarfile

    name = C.stem("gfx942", 16, 2, 8, "planar")
    member = C.bundled(name, C.flydsl_version())
    assert member is not None, f"{C.BUNDLE.name} lacks {name} for this FlyDSL version"
    with tarfile.open(C.BUNDLE, "r:xz") as tar:
        shipped = {n: tar.extractfile(n).read() for n in (member, member[:-2] + ".json")}
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "BUNDLE", tmp_path / "none.tar.xz")  # nothing to take: it compiles
    path = C.assembly_path("gfx942", 16, 2, 8, "planar")
    assert path.read_bytes() == shipped[member]
    assert path.with_suffix(".json").read_bytes() == shipped[member[:-2] + ".json"]


def test_the_bundle_command_rebuilds_the_shipped_bundle_byte_for_byte(flydsl_compiler, tmp_path, monkeypatch):
    copy = tmp_path / C.BUNDLE.name
    copy.write_bytes(C.BUNDLE.read_bytes())
    monkeypatch.setenv("NVFP4_SIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(C, "BUNDLE", copy)
    shipped = Path(C.__file__).with_name("compiled.tar.xz")
    before = shipped.read_bytes()
    assert C.main(["--bundle"]) == 0  # every configuration from the copy: nothing compiles
    # Compared as a flag: pytest's diff of two 90 KB byte strings takes minutes.
    same = copy.read_bytes() == before
    assert same, f"the --bundle command rebuilt {C.BUNDLE.name} differently: run it and commit the archive"
    assert shipped.read_bytes() == before, "the command wrote the shipped archive, not the one it was pointed at"
