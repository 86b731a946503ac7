"""nvfp4_suite.vectors.catalog.casefile: case files round-trip, are deterministic, and refuse bad input."""

import io
import json
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest

from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.catalog.casefile import MAX_CASE_BYTES, CaseFileError, load_case, save_case


def test_roundtrip_and_byte_identical_rewrite(tmp_path):
    p = random_problem(4, reqs=2, q_len=2, num_kv_heads=2, topk=5)
    extra = {"out_exact": np.arange(6, dtype=np.float32)}
    h1 = save_case(tmp_path / "a.npz", p, meta={"x": 1}, extra=extra)
    h2 = save_case(tmp_path / "b.npz", p, meta={"x": 1}, extra=extra)
    assert h1 == h2 and (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    q, meta, ex = load_case(tmp_path / "a.npz", sha256=h1)
    assert meta == {"x": 1} and np.array_equal(ex["out_exact"], extra["out_exact"])
    for f in ("q", "pool", "topk", "block_table", "seq_lens"):
        assert np.array_equal(getattr(q, f), getattr(p, f))
    assert (q.layout, q.q_len, q.sm_scale) == (p.layout, p.q_len, p.sm_scale)


def test_tampered_file_is_refused_by_its_hash(tmp_path):
    p = random_problem(5)
    h = save_case(tmp_path / "a.npz", p)
    data = bytearray((tmp_path / "a.npz").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "a.npz").write_bytes(bytes(data))
    with pytest.raises(CaseFileError, match=r"a\.npz: sha256 .* does not match"):
        load_case(tmp_path / "a.npz", sha256=h)


def test_pickled_file_is_refused(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, q=np.array([{"a": 1}], dtype=object), meta=np.frombuffer(b"{}", np.uint8))
    with pytest.raises(CaseFileError, match="evil.npz: refused .*never hold pickled"):
        load_case(path)


def _rewrite(src, dst, drop=None, replace=None):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.namelist():
            if item == drop:
                continue
            data = zin.read(item)
            if replace and item in replace:
                data = replace[item]
            zout.writestr(item, data)


def test_malformed_files_name_the_file_and_field(tmp_path):
    p = random_problem(6)
    save_case(tmp_path / "ok.npz", p)
    _rewrite(tmp_path / "ok.npz", tmp_path / "no_topk.npz", drop="topk.npy")
    with pytest.raises(CaseFileError, match=r"no_topk\.npz: field 'topk' missing"):
        load_case(tmp_path / "no_topk.npz")
    buf = io.BytesIO()
    np.lib.format.write_array(buf, p.topk.astype(np.int64))
    _rewrite(tmp_path / "ok.npz", tmp_path / "wide.npz", replace={"topk.npy": buf.getvalue()})
    with pytest.raises(CaseFileError, match=r"wide\.npz: field 'topk' has dtype int64"):
        load_case(tmp_path / "wide.npz")
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(json.dumps({"layout": "planar"}).encode(), np.uint8))
    _rewrite(tmp_path / "ok.npz", tmp_path / "meta.npz", replace={"meta.npy": buf.getvalue()})
    with pytest.raises(CaseFileError, match=r"meta\.npz: field 'meta\.num_kv_heads' missing"):
        load_case(tmp_path / "meta.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(CaseFileError, match="junk.npz: not a readable npz"):
        load_case(tmp_path / "junk.npz")
    with pytest.raises(CaseFileError, match="no such case file"):
        load_case(tmp_path / "missing.npz")


def _zip(members):
    """A ZIP archive of ``members`` (name -> (raw DEFLATE stream, CRC-32, size it inflates to)),
    written by hand so that a member can be a stream built without inflating it here."""
    out, central = bytearray(), bytearray()
    for name, (comp, crc, size) in members.items():
        n = name.encode()
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(comp), size, len(n), 0) + n + comp
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, len(comp), size, len(n),
                               0, 0, 0, 0, 0, offset) + n
    return bytes(out + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central),
                                             len(out), 0))


def _deflated(data: bytes):
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(), zlib.crc32(data), len(data)


def _bomb_pool(n_chunks=128):
    """``pool.npy`` as a DEFLATE stream of about 16 KB per 16 MiB of zeros: an NPY
    header declaring ``[n_chunks * 2**24 / 8192, 8192]`` uint8, then the zeros."""
    chunk = bytes(2**24)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False,
                                                  "shape": (n_chunks * 2**24 // 8192, 8192)})
    header = header.getvalue()
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    # After a full flush the compressor starts afresh: the same input gives the same bytes,
    # so one compressed chunk repeated inflates to that many chunks.
    body = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(header)
    for _ in range(n_chunks):
        crc = zlib.crc32(chunk, crc)
    return head + body * n_chunks + c.flush(), crc, len(header) + n_chunks * len(chunk)


def test_a_deflate_bomb_is_refused_before_inflating_naming_the_member_its_size_and_the_limit(tmp_path):
    save_case(tmp_path / "ok.npz", random_problem(6))
    with zipfile.ZipFile(tmp_path / "ok.npz") as z:
        members = {n: _deflated(z.read(n)) for n in z.namelist()}
    members["pool.npy"] = _bomb_pool()
    bomb = tmp_path / "bomb.npz"
    bomb.write_bytes(_zip(members))
    declared = members["pool.npy"][2]
    assert bomb.stat().st_size < 2.5e6 and declared > 2**31
    with pytest.raises(CaseFileError, match=rf"bomb\.npz: member pool\.npy declares {declared} bytes uncompressed.*"
                                            rf"limited to {MAX_CASE_BYTES} bytes"):
        load_case(bomb)
    # As a user replays it: refused with exit 2, the process never near the inflated size.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    # The child reports its own peak (os.wait4's figure of a child forked from a large
    # pytest process can carry the parent's pages), against the same command on a small
    # damaged file: what the imports cost (torch's CUDA libraries alone are over 1 GiB) is
    # not what the bomb would cost.
    script = ("import resource, sys\nfrom nvfp4_suite.vectors.cli import main\nrc = main(sys.argv[1:])\n"
              "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(rc)")

    def peak_kib(path):
        r = subprocess.run([sys.executable, "-c", script, "replay", str(path), "--backend", "emulate"],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 2, r.stderr
        return r.stderr, int(r.stderr.rsplit("peak ", 1)[1])

    err, peak = peak_kib(bomb)
    assert f"member pool.npy declares {declared} bytes" in err, err
    small = tmp_path / "small.npz"
    small.write_bytes(b"PK\x03\x04 not a case")
    _, floor = peak_kib(small)
    assert (peak - floor) * 1024 < 256 * 2**20, f"replay of the bomb peaked at {peak} KiB, {floor} KiB without it"


def test_an_npy_header_whose_shape_does_not_match_its_bytes_is_refused_before_allocating(tmp_path):
    save_case(tmp_path / "ok.npz", random_problem(6))
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": (2**40,)})
    _rewrite(tmp_path / "ok.npz", tmp_path / "liar.npz", replace={"pool.npy": buf.getvalue() + bytes(64)})
    with pytest.raises(CaseFileError, match=r"liar\.npz: member pool\.npy: header declares shape \(1099511627776,\) "
                                            r"of uint8 \(1099511627776 bytes\) but holds 64 bytes"):
        load_case(tmp_path / "liar.npz")


@pytest.mark.parametrize("meta, message", [
    ({"launches": 5}, "field 'meta.meta.launches' is a JSON int, expected list"),
    ({"launches": [1]}, r"field 'meta.meta.launches\[0\]': 1 is not a launch record"),
    ({"launches": [{"splits": "2"}]},
     r"field 'meta.meta.launches\[0\]': launch record field 'splits' is '2', not an int"),
    ({"launches": [{"order": ["a"]}]},
     r"field 'meta.meta.launches\[0\]': launch record field 'order' is \['a'\], not a string or null"),
    ({"launches": [{"splits": 1, "evil": 1}]},
     r"field 'meta.meta.launches\[0\]': launch record has unknown fields \['evil'\]"),
    ({"backend": ["os", "abort"]}, "field 'meta.meta.backend' is a JSON list, expected str"),
    ({"expected_error": 3}, "field 'meta.meta.expected_error' is a JSON int, expected str"),
    ([], "field 'meta.meta' is a JSON list, not an object"),
])
def test_metadata_of_the_wrong_type_is_refused_naming_the_field(tmp_path, meta, message):
    p = random_problem(6)
    save_case(tmp_path / "ok.npz", p)
    top = {n: getattr(p, n) for n in ("layout", "q_len", "sm_scale", "k_global_scale", "v_global_scale")}
    text = json.dumps({**top, "num_kv_heads": int(p.num_kv_heads), "meta": meta})
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(text.encode(), np.uint8))
    _rewrite(tmp_path / "ok.npz", tmp_path / "bad.npz", replace={"meta.npy": buf.getvalue()})
    with pytest.raises(CaseFileError, match="bad.npz: " + message):
        load_case(tmp_path / "bad.npz")


def test_deeply_nested_metadata_is_refused_not_a_recursion_crash(tmp_path):
    save_case(tmp_path / "ok.npz", random_problem(6))
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.frombuffer(("[" * 200000 + "]" * 200000).encode(), np.uint8))
    _rewrite(tmp_path / "ok.npz", tmp_path / "deep.npz", replace={"meta.npy": buf.getvalue()})
    with pytest.raises(CaseFileError, match=r"deep\.npz: field 'meta' is not JSON this reader accepts "
                                            r"\(RecursionError\)"):
        load_case(tmp_path / "deep.npz")


def test_an_interrupted_write_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "a.npz"
    save_case(path, random_problem(4))
    before = path.read_bytes()

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_case(path, random_problem(5))
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["a.npz"]


def test_a_fifo_or_device_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "pipe.npz")
    r = subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", "replay", str(tmp_path / "pipe.npz"), "--backend",
                        "emulate"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "pipe.npz: not a regular file" in r.stderr, r.stderr
    with pytest.raises(CaseFileError, match="/dev/zero: not a regular file"):
        load_case("/dev/zero")


def test_a_folder_given_as_a_case_file_is_refused_naming_it(tmp_path):
    with pytest.raises(CaseFileError, match="not a regular file"):
        load_case(tmp_path)
