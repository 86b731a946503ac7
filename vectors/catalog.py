"""The golden-vector catalog: ``vectors/manifest.json`` and ``vectors/data/*.npz`` (library
side; the commands are in ``nvfp4_suite.vectors.cli``). The file format is documented for
checkers in other languages in ``reference/CONTRACT.md`` section 10.

Each valid case file stores, beside the problem, the expectations a checker
needs to judge an output from the file alone, as bf16 bit patterns (uint16,
``[rows, H, 128]``): for the exact class ``expect_exact_{lo,hi,nearest}``
and for the seed geometry at each split count S the case runs
``expect_seed_s{S}_{lo,hi,nearest}``. An output element passes when it is a
bf16 value with ``lo <= got <= hi`` (``nearest`` is the reference rounded to
nearest-even, for rounding statistics). Also ``out_exact`` (float32, the
oracle), ``lse`` and ``magnitude`` (float32, the tolerance model's ``A``).
The golden check judges backends of those two classes against the stored
arrays, after confirming that the reference still reproduces them
(``verify`` does that for the whole catalog: the drift detector).

Byte-identical regeneration: the problems come from seeded PCG64 streams and
integer/IEEE-exact codecs; files are written with fixed zip timestamps. The
expectations come from float64 computations rounded to float32 or bf16; the
only platform-dependent steps before that rounding are BLAS summation order
and the last bit of float64 exp/exp2, which move a stored value only if a
float64 result lies within a few float64 ulps of a rounding boundary.
``python -m nvfp4_suite.vectors regen --check`` in CI turns any such event into a failure
rather than a silent change.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import SEED_GEOMETRY
from nvfp4_suite.reference.compare import Interval, interval_vs_emulation, interval_vs_oracle
from nvfp4_suite.reference.formats import bf16_bits, from_bf16_bits
from nvfp4_suite.reference.oracle import oracle_details
from nvfp4_suite.reference.problem import DecodeProblem

from . import cases as C
from .io import CaseFileError, load_case, save_case

HERE = Path(__file__).parent
MANIFEST = HERE / "manifest.json"
DATA = HERE / "data"
SCHEMA_VERSION = 2
GENERATOR_VERSION = 2
CONTRACT_VERSION = 1
_ENDS = ("lo", "hi", "nearest")


def exists() -> bool:
    """True when this checkout has a catalog manifest."""
    return MANIFEST.is_file()


def load_manifest(path: Path | None = None, *, versions: bool = True) -> dict:
    """The manifest (default: the catalog's) as a dict; raises CaseFileError naming
    the field when malformed, or (``versions``) the version when it was written
    by another schema, generator or contract version than this code's. A
    schema 1 manifest (``regen`` reads the previous catalog with ``versions``
    off) has its cases' ``splits`` x ``xcds`` lists converted to launch records."""
    path = MANIFEST if path is None else path
    try:
        m = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaseFileError(f"{path}: unreadable manifest ({e})") from e
    if not isinstance(m, dict):
        raise CaseFileError(f"{path}: the manifest is a JSON {type(m).__name__}, not an object")
    for field in ("schema_version", "generator_version", "contract_version", "notes", "cases"):
        if field not in m:
            raise CaseFileError(f"{path}: field {field!r} missing")
    if m["schema_version"] == 1:
        for c in m["cases"]:
            c["launches"] = [Launch(splits=s, xcds=x).to_json() for s in c.pop("splits", [1])
                             for x in c.pop("xcds", [0])]
    for field, mine in (("schema_version", SCHEMA_VERSION), ("generator_version", GENERATOR_VERSION),
                        ("contract_version", CONTRACT_VERSION)):
        if versions and m[field] != mine:
            raise CaseFileError(f"{path}: {field} {m[field]!r}, this code reads {mine} "
                                "(regenerate with `python -m nvfp4_suite.vectors regen`, or use the matching suite)")
    for i, c in enumerate(m["cases"]):
        for field in ("id", "file", "sha256", "comment", "flags", "result", "params", "launches"):
            if field not in c:
                raise CaseFileError(f"{path}: cases[{i}] field {field!r} missing")
        unknown = [f for f in c["flags"] if f not in m["notes"]]
        if unknown:
            raise CaseFileError(f"{path}: cases[{i}] ({c['file']}) has flags {unknown} not in notes")
        try:
            [Launch.from_json(x) for x in c["launches"]]
        except (TypeError, ValueError) as e:
            raise CaseFileError(f"{path}: cases[{i}] ({c['file']}) launches: {e}") from e
    return m


def launches(entry: dict) -> list[Launch]:
    """The launch records a manifest entry (or a case file's meta) lists."""
    return [Launch.from_json(x) for x in entry["launches"]]


def _split_counts(entry_launches) -> list[int]:
    return sorted({x.splits for x in entry_launches})


def judgments(problem: DecodeProblem, splits) -> dict[str, Interval]:
    """The intervals a valid case stores: ``exact`` (the exact class against the
    oracle) and ``seed_s{S}`` (the seed geometry's emulation) for each S in ``splits``."""
    out = {"exact": interval_vs_oracle(problem, p_bf16=False)}
    for s in splits:
        out[f"seed_s{s}"] = interval_vs_emulation(problem, splits=s, geometry=SEED_GEOMETRY)
    return out


def judgment_name(geometry, splits: int) -> str | None:
    """The stored judgment that applies to a backend of ``geometry`` at ``splits``
    (None when the catalog stores none for that geometry)."""
    if geometry is None:
        return "exact"
    return f"seed_s{splits}" if geometry == SEED_GEOMETRY else None


def expectations(problem: DecodeProblem, splits) -> dict:
    """The arrays a valid case stores (see the module docstring)."""
    out, lse, mag, _, _ = oracle_details(problem)
    extra = {
        "out_exact": out.astype(np.float32),
        "lse": lse.astype(np.float32),
        "magnitude": mag.astype(np.float32),
    }
    for name, iv in judgments(problem, splits).items():
        for end in _ENDS:
            extra[f"expect_{name}_{end}"] = bf16_bits(getattr(iv, end))
    return extra


def stored_interval(extra: dict, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(lo, hi, nearest)`` float32 bf16 values of judgment ``name`` stored in a
    case file's ``extra`` arrays, or None when the file holds none."""
    keys = [f"expect_{name}_{end}" for end in _ENDS]
    if not all(k in extra for k in keys):
        return None
    return tuple(from_bf16_bits(extra[k]) for k in keys)


def drift(problem: DecodeProblem, extra: dict, name: str, iv: Interval) -> str | None:
    """None when the stored judgment ``name`` equals ``iv`` (the reference's,
    recomputed) bit for bit; otherwise which end differs and where."""
    stored = stored_interval(extra, name)
    if stored is None:
        return f"judgment {name!r} not stored"
    for end, arr in zip(_ENDS, stored):
        mine = getattr(iv, end)
        diff = bf16_bits(arr) != bf16_bits(mine)
        if diff.any():
            r, h, d = (int(i) for i in np.argwhere(diff)[0])
            return (f"stored {end} of {name} differs from the reference's in {int(diff.sum())} elements, "
                    f"first [row {r}, head {h}, dim {d}]: stored {arr[r, h, d]!r}, reference {mine[r, h, d]!r}")
    return None


def verify(progress=None) -> list[str]:
    """The drift detector: recompute every valid case's stored expectations from
    its stored problem and compare bit for bit. Returns one line per problem
    (empty when the reference reproduces the whole catalog)."""
    m = load_manifest()
    bad = []
    for i, c in enumerate(m["cases"]):
        if progress:
            progress(f"  verify: [{i + 1}/{len(m['cases'])}] {c['name']}")
        try:
            problem, _, extra = load_case(HERE / c["file"], sha256=c["sha256"])
        except CaseFileError as e:
            bad.append(f"case {c['id']} {c['name']}: {e}")
            continue
        if c["result"] != "valid":
            continue
        fresh = expectations(problem, _split_counts(launches(c)))
        for k, v in fresh.items():
            if k not in extra:
                bad.append(f"case {c['id']} {c['name']}: array {k!r} missing")
            elif extra[k].dtype != v.dtype or not np.array_equal(extra[k].view(np.uint8), v.view(np.uint8)):
                bad.append(f"case {c['id']} {c['name']}: array {k!r} differs from the reference's")
    return bad


def _params(case: C.Case, p: DecodeProblem) -> dict:
    return {
        "builder": case.name, "layout": p.layout, "num_kv_heads": int(p.num_kv_heads), "rows": int(p.q.shape[0]),
        "TOPK": int(p.topk.shape[2]), "q_len": int(p.q_len), "seq_lens": [int(s) for s in p.seq_lens],
        "num_pages": int(p.pool.shape[0]),
    }


def _file_name(case_id: int, name: str) -> str:
    return f"{case_id:03d}-{name}.npz"


def _meta(entry: dict) -> dict:
    """The ``meta`` a catalog file stores, from its manifest entry (built-in and added alike,
    so that regenerating an added case rewrites the bytes ``add`` wrote)."""
    meta = {k: entry[k] for k in ("id", "name", "comment", "flags", "launches", "result")}
    if entry.get("expected_error"):
        meta["expected_error"] = entry["expected_error"]
    return meta


def case_launches(case: C.Case) -> list[dict]:
    """The launch records of a built-in case: every split count at every XCD placement."""
    return [Launch(splits=s, xcds=x).to_json() for s in case.splits for x in case.xcds]


def _write_case(case_id: int, case: C.Case, folder: Path) -> dict:
    p = case.build()
    fname = _file_name(case_id, case.name)
    entry = {
        "id": case_id, "name": case.name, "file": f"data/{fname}", "comment": case.comment,
        "flags": list(case.flags), "launches": case_launches(case), "params": _params(case, p),
    }
    if case.expected_error:
        entry["result"] = "invalid"
        entry["expected_error"] = case.expected_error
        extra = {}
    else:
        p.validate()
        entry["result"] = "valid"
        extra = expectations(p, case.splits)
    entry["sha256"] = save_case(folder / fname, p, meta=_meta(entry), extra=extra)
    return entry


def _regen_added(case_id: int, entry: dict, problem: DecodeProblem, folder: Path) -> dict:
    """Rewrite a case promoted with ``add`` (manifest entry ``entry``, ``problem`` read
    from its committed file) as case ``case_id`` in ``folder``, the expectations
    recomputed. The bytes are unchanged unless the reference's arithmetic or the
    case's id (the built-in count) changed."""
    fname = _file_name(case_id, entry["name"])
    entry = {**entry, "id": case_id, "file": f"data/{fname}"}
    extra = {} if entry.get("expected_error") else expectations(problem, _split_counts(launches(entry)))
    entry["sha256"] = save_case(folder / fname, problem, meta=_meta(entry), extra=extra)
    return entry


def regenerate(folder: Path, progress=None, previous: dict | None = None) -> dict:
    """Write every case into ``folder``; return the manifest dict.

    Built-in cases come from ``cases.CASES``; cases promoted with ``add``
    (``source: added`` in ``previous``) are re-read from their committed files
    (which must match ``previous``'s sha256) and follow the built-ins, in
    their previous order, numbered on from them. Writes nothing outside ``folder``.
    """
    # Read first: a missing or altered promoted file stops the run before any work.
    added = [(c, load_case(HERE / c["file"], sha256=c["sha256"])[0])
             for c in (previous or {}).get("cases", []) if c.get("source") == "added"]
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    total = len(C.CASES) + len(added)
    for i, case in enumerate(C.CASES):
        if progress:
            progress(f"  [{i + 1}/{total}] {case.name}")
        entries.append(_write_case(i, case, folder))
    for entry, problem in added:
        if progress:
            progress(f"  [{len(entries) + 1}/{total}] {entry['name']} (added)")
        entries.append(_regen_added(len(entries), entry, problem, folder))
    return {
        "schema_version": SCHEMA_VERSION, "generator_version": GENERATOR_VERSION,
        "contract_version": CONTRACT_VERSION, "notes": C.FLAGS, "cases": entries,
    }


def dump(manifest: dict) -> str:
    """The manifest's committed text."""
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` through a temporary file and a rename, so a
    reader sees the old or the new content, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def regen_write(previous: dict | None, progress=None) -> dict:
    """Regenerate the catalog in place; returns the new manifest.

    Built beside DATA (same file system, so the swap is renames) and swapped in
    only when complete: an interrupted regen leaves the committed catalog as it
    was, and removes its build folder."""
    build = Path(tempfile.mkdtemp(prefix=".regen-", dir=DATA.parent))
    try:
        manifest = regenerate(build / "data", progress, previous)
        (build / "manifest.json").write_text(dump(manifest))
        _swap_in(build)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return manifest


def _swap_in(build: Path) -> None:
    """Replace DATA with ``build/data``, then MANIFEST with ``build/manifest.json``.

    The manifest goes last: until it is replaced, a reader sees the previous
    manifest, whose files are unchanged when the regeneration changed nothing
    and otherwise fail their sha256 check rather than load silently."""
    old = build / "old-data"
    if DATA.exists():
        os.replace(DATA, old)
    try:
        os.replace(build / "data", DATA)
    except BaseException:
        if old.exists():
            os.replace(old, DATA)
        raise
    os.replace(build / "manifest.json", MANIFEST)


def regen_differences(previous: dict, progress=None) -> tuple[int, list[str]]:
    """Regenerate into a temporary folder and compare with the committed catalog
    byte for byte; returns (case count, one line per difference)."""
    with tempfile.TemporaryDirectory() as tmp:
        manifest = regenerate(Path(tmp) / "data", progress, previous)
        bad = []
        if dump(manifest) != MANIFEST.read_text():
            bad.append("manifest.json differs from a fresh regeneration")
        for c in manifest["cases"]:
            fresh = (Path(tmp) / c["file"]).read_bytes()
            mine = (HERE / c["file"]).read_bytes() if (HERE / c["file"]).is_file() else b""
            if fresh != mine:
                bad.append(f"{c['file']} differs from a fresh regeneration")
        committed = {p.name for p in DATA.glob("*.npz")}
        extra = committed - {Path(c["file"]).name for c in manifest["cases"]}
        bad += [f"data/{n} is not in the manifest" for n in sorted(extra)]
    return len(manifest["cases"]), bad


def add_case(file, *, comment: str, flags, name: str | None = None, splits=None) -> dict:
    """Promote a case file (e.g. a saved repro) into the catalog; returns its entry.

    Valid problems get expectations at ``splits`` (default: the split counts
    of the file's launches); a problem the validator rejects becomes an
    invalid-input case naming the ``ProblemError`` subclass. Raises
    CaseFileError for an unreadable file or unknown flags. The manifest is
    replaced atomically after the data file is written."""
    from nvfp4_suite.reference import ProblemError

    m = load_manifest()
    unknown = [f for f in flags if f not in m["notes"]]
    if unknown:
        raise CaseFileError(f"unknown flags {unknown}; known: {', '.join(m['notes'])}")
    problem, meta, _ = load_case(file)
    try:
        problem.validate()
        expected_error = None
    except ProblemError as e:
        expected_error = type(e).__name__
    case_id = len(m["cases"])
    name = name or Path(file).stem
    fname = _file_name(case_id, name)
    if splits:
        counts = sorted(set(splits))
    else:
        counts = _split_counts(launches(meta)) if "launches" in meta else [1]
    entry = {
        "id": case_id, "name": name, "file": f"data/{fname}", "comment": comment,
        "flags": list(flags), "launches": [Launch(splits=s, xcds=x).to_json() for s in counts for x in (0, 8)],
        "source": "added", "result": "invalid" if expected_error else "valid",
        "params": {"builder": "added", "from": Path(file).name},
    }
    if expected_error:
        entry["expected_error"] = expected_error
    extra = {} if expected_error else expectations(problem, counts)
    entry["sha256"] = save_case(DATA / fname, problem, meta=_meta(entry), extra=extra)
    m["cases"].append(entry)
    write_atomic(MANIFEST, dump(m))
    return entry
