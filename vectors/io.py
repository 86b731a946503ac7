"""Case files: one decode problem (plus expectations) in an ``.npz``, never pickled.

Arrays are stored under their ``DecodeProblem`` field names; scalars and
metadata live in one JSON string array ``meta`` (uint8 bytes of UTF-8), so
``numpy.load(..., allow_pickle=False)`` reads everything. Writing goes
through ``zipfile`` with a fixed timestamp and no compression-level drift, so
the same content gives the same bytes on every machine.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np

from nvfp4_suite.reference import DecodeProblem

ARRAY_FIELDS = {"q": np.float32, "pool": np.uint8, "topk": np.int32, "block_table": np.int32, "seq_lens": np.int32}
SCALAR_FIELDS = ("layout", "num_kv_heads", "q_len", "sm_scale", "k_global_scale", "v_global_scale")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


class CaseFileError(ValueError):
    """A case file that is missing, malformed, pickled or fails its hash."""


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def save_case(path, problem: DecodeProblem, meta: dict | None = None, extra: dict | None = None) -> str:
    """Write ``problem`` (and ``extra`` arrays, e.g. expectations) to ``path``.

    meta: JSON-serialisable dict stored beside the scalars. Returns the file's
    sha256 hex digest. The bytes depend only on the content.
    """
    arrays = {name: np.asarray(getattr(problem, name)) for name in ARRAY_FIELDS}
    arrays.update(extra or {})
    m = {name: _plain(getattr(problem, name)) for name in SCALAR_FIELDS}
    m["meta"] = meta or {}
    arrays["meta"] = np.frombuffer(json.dumps(m, sort_keys=True).encode(), np.uint8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(name + ".npy", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, _npy_bytes(arrays[name]), compresslevel=6)
    data = buf.getvalue()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _plain(v):
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def load_case(path, sha256: str | None = None) -> tuple[DecodeProblem, dict, dict]:
    """Read a case file: ``(problem, meta, extra arrays)``.

    Refuses pickled content, a wrong ``sha256`` (when given), missing fields and
    wrong dtypes, with a ``CaseFileError`` naming the file and the field. The
    problem is not validated here (an invalid-input case is a valid file).
    """
    path = Path(path)
    if not path.is_file():
        raise CaseFileError(f"{path}: no such case file")
    data = path.read_bytes()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise CaseFileError(f"{path}: sha256 {hashlib.sha256(data).hexdigest()} does not match the manifest's {sha256}")
    if not data.startswith(b"PK\x03\x04"):
        raise CaseFileError(f"{path}: not a readable npz file (no zip signature)")
    try:
        npz = np.load(io.BytesIO(data), allow_pickle=False)
        arrays = {k: npz[k] for k in npz.files}
    except ValueError as e:
        raise CaseFileError(f"{path}: refused ({e}); case files never hold pickled objects") from e
    except Exception as e:
        raise CaseFileError(f"{path}: not a readable npz file ({e})") from e
    if "meta" not in arrays:
        raise CaseFileError(f"{path}: field 'meta' missing")
    try:
        m = json.loads(arrays.pop("meta").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaseFileError(f"{path}: field 'meta' is not JSON ({e})") from e
    for name, dt in ARRAY_FIELDS.items():
        if name not in arrays:
            raise CaseFileError(f"{path}: field {name!r} missing")
        if arrays[name].dtype != dt:
            raise CaseFileError(f"{path}: field {name!r} has dtype {arrays[name].dtype}, expected {np.dtype(dt).name}")
    for name in SCALAR_FIELDS:
        if name not in m:
            raise CaseFileError(f"{path}: field 'meta.{name}' missing")
    problem = DecodeProblem(**{n: arrays.pop(n) for n in ARRAY_FIELDS}, **{n: m[n] for n in SCALAR_FIELDS})
    return problem, m.get("meta", {}), arrays
