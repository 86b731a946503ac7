"""Case files: one decode problem (plus expectations) in an ``.npz``, never pickled.

Arrays are stored under their ``DecodeProblem`` field names; scalars and
metadata live in one JSON string array ``meta`` (uint8 bytes of UTF-8).
Writing goes through ``zipfile`` with a fixed timestamp and no
compression-level drift, so the same content gives the same bytes on every
machine, and through a temporary file renamed into place, so an interrupted
write leaves no truncated file (and never writes through a symlink).

Reading treats the file as hostile data: nothing in it can import or call
code (no pickles; the metadata is JSON whose known fields are type-checked),
and its size is bounded before anything is inflated: the sizes the ZIP
directory declares for its members must sum to at most ``MAX_CASE_BYTES``,
and each NPY header's shape must account for exactly its member's bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import DecodeProblem

ARRAY_FIELDS = {"q": np.float32, "pool": np.uint8, "topk": np.int32, "block_table": np.int32, "seq_lens": np.int32}
SCALAR_FIELDS = ("layout", "num_kv_heads", "q_len", "sm_scale", "k_global_scale", "v_global_scale")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# The largest golden case holds under 3 MB of arrays, a generated repro far
# less: 256 MiB is room for any case a kernel engineer saves, and far below
# what a deflate bomb of a few MB can declare.
MAX_CASE_BYTES = 256 * 2**20
MAX_MEMBERS = 256
# Meta keys the suite reads from a case file's ``meta`` object, with the type each must have.
_META_TYPES = {"backend": str, "expected_error": str, "report": str, "name": str, "comment": str, "result": str,
               "id": int, "flags": list, "launches": list}


class CaseFileError(ValueError):
    """A case file that is missing, malformed, pickled, too large or fails its hash."""


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def _umask() -> int:
    mask = os.umask(0o22)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


def write_atomic(path, data: bytes) -> None:
    """Replace ``path`` by ``data`` through a new temporary file beside it
    (``.NAME.*.tmp``, created exclusively) and a rename: a reader sees the old
    or the new content, never a part; an interruption leaves at most the
    temporary file (removed here when the interruption is an exception); a
    symlink at ``path`` is replaced, never written through. The file gets
    the permissions a plain ``open`` would give it (0666 less the umask),
    not the temporary file's 0600: a project catalog is shared by a team."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_case(path, problem: DecodeProblem, meta: dict | None = None, extra: dict | None = None) -> str:
    """Write ``problem`` (and ``extra`` arrays, e.g. expectations) to ``path``, atomically.

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
    write_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


def _plain(v):
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _read_bytes(path: Path, follow_symlinks: bool) -> bytes:
    """The bytes of regular file ``path`` (at most MAX_CASE_BYTES); with
    ``follow_symlinks`` off, a symlink is refused rather than opened."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not a regular file).
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise CaseFileError(f"{path}: no such case file") from None
    except OSError as e:
        if not follow_symlinks and path.is_symlink():
            raise CaseFileError(f"{path}: is a symlink; catalog files are never links") from None
        raise CaseFileError(f"{path}: cannot open ({e.strerror})") from None
    # Checked before fdopen: a folder opens as a descriptor but not as a file object.
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CaseFileError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > MAX_CASE_BYTES:
            raise CaseFileError(f"{path}: {st.st_size} bytes; case files are limited to {MAX_CASE_BYTES} bytes")
        return f.read(MAX_CASE_BYTES + 1)


def _npy_array(path: Path, member: str, raw: bytes) -> np.ndarray:
    """The array of NPY bytes ``raw``; its header's shape and dtype must
    account for exactly the bytes that follow it (checked before allocating)."""
    f = io.BytesIO(raw)
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise CaseFileError(f"{path}: member {member}: NPY format version {version} not read here")
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = reader(f)
    if dtype.hasobject:
        raise CaseFileError(f"{path}: refused (member {member} holds Python objects); "
                            "case files never hold pickled objects")
    count = 1
    for n in shape:
        count *= n
    body = len(raw) - f.tell()
    if dtype.itemsize == 0 or count * dtype.itemsize != body:
        raise CaseFileError(f"{path}: member {member}: header declares shape {shape} of {dtype} "
                            f"({count * dtype.itemsize} bytes) but holds {body} bytes")
    a = np.frombuffer(bytearray(raw[f.tell():]), dtype=dtype, count=count)
    return a.reshape(shape, order="F" if fortran else "C")


def _read_arrays(path: Path, data: bytes) -> dict[str, np.ndarray]:
    """The arrays of the npz bytes ``data``, the declared sizes checked against
    the limits before any member is inflated."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = z.infolist()
        if len(infos) > MAX_MEMBERS:
            raise CaseFileError(f"{path}: {len(infos)} members; case files hold at most {MAX_MEMBERS}")
        names = [i.filename for i in infos]
        bad = [n for n in names if not n.endswith(".npy") or names.count(n) > 1]
        if bad:
            raise CaseFileError(f"{path}: member {bad[0]!r} is not one .npy array")
        total = 0
        for i in infos:
            total += i.file_size
            if total > MAX_CASE_BYTES:
                raise CaseFileError(f"{path}: member {i.filename} declares {i.file_size} bytes uncompressed, "
                                    f"{total} with the members before it; case files are limited to "
                                    f"{MAX_CASE_BYTES} bytes (MAX_CASE_BYTES); nothing was inflated")
        return {i.filename[:-4]: _npy_array(path, i.filename, z.read(i)) for i in infos}


def check_meta(path, meta) -> dict:
    """``meta`` (a case file's ``meta`` object) if each key the suite reads
    has its type and ``launches`` holds launch records; else CaseFileError
    naming the key. A case file is data: its meta selects nothing to run."""
    if not isinstance(meta, dict):
        raise CaseFileError(f"{path}: field 'meta.meta' is a JSON {type(meta).__name__}, not an object")
    for key, kind in _META_TYPES.items():
        if key in meta and (not isinstance(meta[key], kind) or isinstance(meta[key], bool)):
            raise CaseFileError(f"{path}: field 'meta.meta.{key}' is a JSON {type(meta[key]).__name__}, "
                                f"expected {kind.__name__}")
    for i, x in enumerate(meta.get("launches", [])):
        try:
            Launch.from_json(x)
        except (TypeError, ValueError) as e:
            raise CaseFileError(f"{path}: field 'meta.meta.launches[{i}]': {e}") from None
    return meta


def load_case(path, sha256: str | None = None, *, follow_symlinks: bool = True) -> tuple[DecodeProblem, dict, dict]:
    """Read a case file: ``(problem, meta, extra arrays)``.

    Refuses, with a ``CaseFileError`` naming the file and the field or member:
    pickled content, a wrong ``sha256`` (when given), a file or declared
    member sizes over ``MAX_CASE_BYTES`` (before inflating anything),
    missing fields, wrong dtypes, metadata of the wrong types, and (with
    ``follow_symlinks`` off, as the catalog reads) a symlink. The problem is
    not validated here (an invalid-input case is a valid file).
    """
    path = Path(path)
    data = _read_bytes(path, follow_symlinks)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise CaseFileError(f"{path}: sha256 {hashlib.sha256(data).hexdigest()} does not match the manifest's {sha256}")
    if not data.startswith(b"PK\x03\x04"):
        raise CaseFileError(f"{path}: not a readable npz file (no zip signature)")
    try:
        arrays = _read_arrays(path, data)
    except CaseFileError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, ValueError,
            OverflowError, TypeError, SyntaxError) as e:
        raise CaseFileError(f"{path}: not a readable npz file ({type(e).__name__}: {e})") from e
    if "meta" not in arrays:
        raise CaseFileError(f"{path}: field 'meta' missing")
    try:
        m = json.loads(arrays.pop("meta").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CaseFileError(f"{path}: field 'meta' is not JSON this reader accepts ({type(e).__name__})") from None
    if not isinstance(m, dict):
        raise CaseFileError(f"{path}: field 'meta' is a JSON {type(m).__name__}, not an object")
    for name, dt in ARRAY_FIELDS.items():
        if name not in arrays:
            raise CaseFileError(f"{path}: field {name!r} missing")
        if arrays[name].dtype != dt:
            raise CaseFileError(f"{path}: field {name!r} has dtype {arrays[name].dtype}, expected {np.dtype(dt).name}")
    for name in SCALAR_FIELDS:
        if name not in m:
            raise CaseFileError(f"{path}: field 'meta.{name}' missing")
    meta = check_meta(path, m.get("meta", {}))
    fields: dict[str, Any] = {n: arrays.pop(n) for n in ARRAY_FIELDS}  # arrays, then str/int/float scalars
    fields.update({n: m[n] for n in SCALAR_FIELDS})
    problem = DecodeProblem(**fields)
    return problem, meta, arrays
