"""nvfp4_suite.vectors.io: case files round-trip, are deterministic, and refuse bad input."""

import io
import json
import zipfile

import numpy as np
import pytest

from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.io import CaseFileError, load_case, save_case


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
