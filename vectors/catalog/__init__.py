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

A catalog is a folder (``root``) kept as a small database: the built-in one
is this package's (``HERE``); a project catalog (``project_root``: default
``./nvfp4-catalog``, or ``$NVFP4_CATALOG``) holds a team's own promoted
cases, in the same format, outside the installed suite, so that an upgrade
keeps them. It is created by its first ``add``; its cases are numbered
from 0 and all of them are promoted cases (``regen`` re-reads them, it
writes no built-in case there). ``add`` and ``regen`` hold a catalog's
exclusive lock, ``check``'s golden run, ``verify`` and ``regen --check`` its
shared one (``nvfp4_suite.vectors.catalog.lock``), so concurrent commands lose
nothing and a reader never sees a catalog half installed. The manifest is validated when read: case
names from a safe character set (``check_name``), each ``file`` directly
inside ``data/``; catalog files are read without following symlinks and
written only by atomic renames. ``regen`` removes only files its previous
manifest lists, reports any other entry of ``data/`` and leaves it, refuses
to run without a manifest while ``data/`` holds case files it would not
write (promoted cases only a manifest lists), and the next ``add`` or
``regen`` finishes or removes what an interrupted one left (see ``_install``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import string
import tempfile
from pathlib import Path

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import SEED_GEOMETRY
from nvfp4_suite.reference.compare import Interval, interval_vs_emulation, interval_vs_oracle
from nvfp4_suite.reference.formats import bf16_bits, from_bf16_bits
from nvfp4_suite.reference.oracle import oracle_details
from nvfp4_suite.reference.problem import DecodeProblem
from nvfp4_suite.vectors.catalog import cases as C
from nvfp4_suite.vectors.catalog import lock
from nvfp4_suite.vectors.catalog.casefile import CaseFileError, load_case, save_case, write_atomic

# The built-in catalog. Every function that reads or writes a catalog takes
# ``root``, the folder holding ``manifest.json`` and ``data/``, default HERE.
# The built-in catalog lives in the package's vectors/ folder, beside this subpackage.
HERE = Path(__file__).resolve().parent.parent
MANIFEST = HERE / "manifest.json"
DATA = HERE / "data"
SCHEMA_VERSION = 2
GENERATOR_VERSION = 2
CONTRACT_VERSION = 1
_ENDS = ("lo", "hi", "nearest")
NAME_CHARS = frozenset(string.ascii_letters + string.digits + "-_.")
MAX_NAME = 100


class CatalogError(CaseFileError):
    """The catalog refuses an operation: a bad case name, a manifest entry naming
    a file outside ``data/``, a symlink, a file it would overwrite or lose."""


# ``--catalog builtin`` names the built-in catalog; any other value is a folder.
BUILTIN = "builtin"
PROJECT_ENV = "NVFP4_CATALOG"
PROJECT_DEFAULT = "nvfp4-catalog"


def _root(root) -> Path:
    return HERE if root is None else Path(root)


def project_root() -> Path:
    """The default project catalog folder: ``$NVFP4_CATALOG`` when set, else
    ``./nvfp4-catalog`` in the current directory (never the installed suite's tree)."""
    return Path(os.environ.get(PROJECT_ENV) or PROJECT_DEFAULT)


def resolve(arg) -> Path:
    """The folder a ``--catalog`` value names: ``builtin`` is the built-in
    catalog, anything else a path (``./builtin`` for a folder of that name)."""
    return HERE if arg == BUILTIN else Path(arg)


def is_builtin(root) -> bool:
    """True when ``root`` is the built-in catalog's folder (by path or as the same folder)."""
    root = _root(root)
    try:
        return root.resolve() == HERE.resolve() or (root.exists() and os.path.samefile(root, HERE))
    except OSError:
        return False


def label(root) -> str | None:
    """How a report names catalog ``root``'s cases (``LABEL:NNN-name``): None for
    the built-in catalog (its cases keep their bare ids), ``project`` for the
    default project folder, else the folder as given."""
    root = _root(root)
    if is_builtin(root):
        return None
    try:
        if root.resolve() == project_root().resolve():
            return "project"
    except OSError:
        pass
    return str(root)


def exists(root=None) -> bool:
    """True when the catalog folder ``root`` (default: the built-in one) has a manifest."""
    return (_root(root) / "manifest.json").is_file()


def check_name(name, limit: int = MAX_NAME) -> str:
    """``name`` when it is a valid case name (what ``add --name`` and the
    manifest accept: it becomes part of a file name in ``data/``); else
    CatalogError naming the first character that is not allowed."""
    rule = (f"case names use letters, digits, '-', '_' and '.', start with a letter or digit, "
            f"hold no '..' and are at most {limit} characters")
    if not isinstance(name, str) or not name:
        raise CatalogError(f"case name {name!r}: empty or not a string; {rule}")
    for i, ch in enumerate(name):
        if ch not in NAME_CHARS:
            raise CatalogError(f"case name {name!r}: character {ch!r} at position {i} is not allowed; {rule}")
    if not name[0].isalnum() or ".." in name or len(name) > limit:
        raise CatalogError(f"case name {name!r}: {rule}")
    return name


def _data_name(file, where: str) -> str:
    """The file name inside ``data/`` of a manifest ``file`` field, which must
    be ``data/`` and one valid name ending in ``.npz``; CatalogError naming
    ``where`` (the case) and the path otherwise."""
    name = file[5:] if isinstance(file, str) and file.startswith("data/") else None
    try:
        if name is None or not name.endswith(".npz"):
            raise CatalogError("")
        check_name(name[:-4], limit=len(_file_name(0, "x" * MAX_NAME)) - 4)
    except CatalogError:
        raise CatalogError(f"{where}: file {file!r} is not a .npz file directly inside data/; "
                           "refused, nothing was read") from None
    return name


def _data_dir(root: Path) -> Path:
    data = root / "data"
    if data.is_symlink():
        raise CatalogError(f"{data}: is a symlink; a catalog's data folder must be a folder of its own")
    return data


def case_file(entry: dict, root=None) -> Path:
    """The path of a (validated) manifest entry's file in catalog ``root``;
    CatalogError if the entry names anything but a file directly inside
    ``data/`` or the data folder is a symlink."""
    return _data_dir(_root(root)) / _data_name(entry["file"], f"case {entry['id']} {entry['name']!r}")


def load_entry(entry: dict, root=None) -> tuple[DecodeProblem, dict, dict]:
    """``load_case`` of a manifest entry's file in catalog ``root``: its sha256
    checked, a symlink refused (never followed), nothing outside ``data/`` read."""
    return load_case(case_file(entry, root), sha256=entry["sha256"], follow_symlinks=False)


_ENTRY_TYPES = {"id": int, "name": str, "file": str, "sha256": str, "comment": str, "flags": list, "result": str,
                "params": dict, "launches": list}


def _check_entry(path, i: int, c, notes: dict) -> None:
    if not isinstance(c, dict):
        raise CaseFileError(f"{path}: cases[{i}] is a JSON {type(c).__name__}, not an object")
    for field, kind in _ENTRY_TYPES.items():
        if field not in c:
            raise CaseFileError(f"{path}: cases[{i}] field {field!r} missing")
        if not isinstance(c[field], kind) or isinstance(c[field], bool):
            raise CaseFileError(f"{path}: cases[{i}] field {field!r} is a JSON {type(c[field]).__name__}, "
                                f"expected {kind.__name__}")
    where = f"{path}: cases[{i}] ({c['name']!r})"
    try:
        check_name(c["name"])
    except CatalogError as e:
        raise CatalogError(f"{where}: {e}") from None
    _data_name(c["file"], where)
    if len(c["sha256"]) != 64 or set(c["sha256"]) - set("0123456789abcdef"):
        raise CaseFileError(f"{where}: sha256 {c['sha256']!r} is not 64 lowercase hex digits")
    if c["result"] not in ("valid", "invalid") or not isinstance(c.get("expected_error", ""), str):
        raise CaseFileError(f"{where}: result {c['result']!r} / expected_error {c.get('expected_error')!r} malformed")
    unknown = [f for f in c["flags"] if not isinstance(f, str) or f not in notes]
    if unknown:
        raise CaseFileError(f"{path}: cases[{i}] ({c['file']}) has flags {unknown} not in notes")
    for x in c["launches"]:
        try:
            Launch.from_json(x)
        except (TypeError, ValueError) as e:
            raise CaseFileError(f"{path}: cases[{i}] ({c['file']}) launches: {e}") from None


def load_manifest(path: Path | None = None, *, versions: bool = True) -> dict:
    """The manifest (default: the built-in catalog's) as a dict; raises
    CaseFileError naming the field (and the case) when malformed, a file
    that is not directly inside ``data/`` among them, or (``versions``) the
    version when it was written by another schema, generator or contract
    version than this code's. A schema 1 manifest (``regen`` reads the
    previous catalog with ``versions`` off) has its cases' ``splits`` x
    ``xcds`` lists converted to launch records."""
    path = HERE / "manifest.json" if path is None else path
    try:
        m = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CaseFileError(f"{path}: unreadable manifest ({type(e).__name__}: {e})") from None
    if not isinstance(m, dict):
        raise CaseFileError(f"{path}: the manifest is a JSON {type(m).__name__}, not an object")
    for field in ("schema_version", "generator_version", "contract_version", "notes", "cases"):
        if field not in m:
            raise CaseFileError(f"{path}: field {field!r} missing")
    if not isinstance(m["cases"], list) or not isinstance(m["notes"], dict):
        raise CaseFileError(f"{path}: 'cases' must be a JSON array and 'notes' an object")
    if m["schema_version"] == 1:
        for c in m["cases"]:
            if isinstance(c, dict) and isinstance(c.get("splits", []), list) and isinstance(c.get("xcds", []), list):
                c["launches"] = [Launch(splits=s, xcds=x).to_json() for s in c.pop("splits", [1])
                                 for x in c.pop("xcds", [0])]
    for field, mine in (("schema_version", SCHEMA_VERSION), ("generator_version", GENERATOR_VERSION),
                        ("contract_version", CONTRACT_VERSION)):
        if versions and m[field] != mine:
            raise CaseFileError(f"{path}: {field} {m[field]!r}, this code reads {mine} "
                                "(regenerate with `python -m nvfp4_suite.vectors regen`, or use the matching suite)")
    for i, c in enumerate(m["cases"]):
        _check_entry(path, i, c, m["notes"])
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
    lo, hi, nearest = (from_bf16_bits(extra[k]) for k in keys)
    return lo, hi, nearest


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


def verify(progress=None, *, root=None, notice=None) -> list[str]:
    """The drift detector: recompute every valid case's stored expectations from
    its stored problem and compare bit for bit, under the catalog's shared lock
    (``notice``: told if it waits for it). Returns one line per problem (empty
    when the reference reproduces the whole catalog)."""
    root = _root(root)
    with lock.locked(root, exclusive=False, what="verify", notice=notice):
        m = load_manifest(root / "manifest.json")
        bad = []
        for i, c in enumerate(m["cases"]):
            if progress:
                progress(f"  verify: [{i + 1}/{len(m['cases'])}] {c['name']}")
            try:
                problem, _, extra = load_entry(c, root)
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


def regenerate(folder: Path, progress=None, previous: dict | None = None, *, root=None) -> dict:
    """Write every case into ``folder``; return the manifest dict.

    In the built-in catalog, built-in cases come from ``cases.CASES``; cases
    promoted with ``add`` (``source: added`` in ``previous``, the manifest of
    catalog ``root``) are re-read from their committed files (which must
    match ``previous``'s sha256) and follow the built-ins, in their previous
    order, numbered on from them. A project catalog holds no built-in case:
    every case of ``previous`` is re-read so, numbered from 0. Writes nothing
    outside ``folder``.
    """
    builtins = C.CASES if is_builtin(root) else []
    # Read first: a missing or altered promoted file stops the run before any work.
    added = [(c, load_entry(c, root)[0]) for c in (previous or {}).get("cases", [])
             if c.get("source") == "added" or not builtins]
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    total = len(builtins) + len(added)
    for i, case in enumerate(builtins):
        if progress:
            progress(f"  [{i + 1}/{total}] {case.name}")
        entries.append(_write_case(i, case, folder))
    for entry, problem in added:
        if progress:
            progress(f"  [{len(entries) + 1}/{total}] {entry['name']} (added)")
        entries.append(_regen_added(len(entries), entry, problem, folder))
    return _manifest(entries)


def _manifest(entries: list) -> dict:
    return {
        "schema_version": SCHEMA_VERSION, "generator_version": GENERATOR_VERSION,
        "contract_version": CONTRACT_VERSION, "notes": C.FLAGS, "cases": entries,
    }


def _create(root: Path) -> None:
    """Under the exclusive lock: make folder ``root`` an empty project catalog
    (a manifest with no case, an empty ``data/``), as its first ``add`` does.
    Refuses a ``data/`` holding case files: cases only a lost manifest listed,
    which ``add`` will not bury under a new one."""
    if exists(root):
        raise CatalogError(f"{root / 'manifest.json'}: exists; this folder is a catalog already")
    data = _data_dir(root)
    cases = sorted(p.name for p in data.glob("*.npz")) if data.is_dir() else []
    if cases:
        raise CatalogError(f"{root / 'manifest.json'} is missing and {data} holds case files "
                           f"({', '.join(cases[:5])}{', ...' if len(cases) > 5 else ''}): restore the manifest, "
                           "or move them out of data/; nothing was created")
    data.mkdir(exist_ok=True)
    write_atomic(root / "manifest.json", dump(_manifest([])).encode())


def dump(manifest: dict) -> str:
    """The manifest's committed text."""
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def _manifest_sha(root: Path) -> str:
    path = root / "manifest.json"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "none"


def _files(manifest: dict | None) -> set[str]:
    """The names in ``data/`` a (validated) manifest lists."""
    return {c["file"][len("data/"):] for c in (manifest or {}).get("cases", [])}


# How a regeneration changes a catalog folder ROOT. Build: every file in a
# folder ROOT/.regen-*/data, then (the commit point) its manifest.json and the
# sha256 of the manifest it started from, previous.sha256. Install: each built
# file renamed into ROOT/data; the files the old manifest lists and the new one
# does not removed; the manifest renamed into place last; the build folder
# removed. Nothing else in data/ is touched. An interrupted build leaves the
# catalog as it was; an interrupted install is finished by the next add or
# regen (it is only renames, of a build that completed from the same manifest).


def _install(build: Path, root: Path) -> None:
    new = load_manifest(build / "manifest.json", versions=False)
    old = load_manifest(root / "manifest.json", versions=False) if exists(root) else None
    data = _data_dir(root)
    data.mkdir(exist_ok=True)
    for name in sorted(_files(new)):
        if (build / "data" / name).exists():
            os.replace(build / "data" / name, data / name)
    for name in sorted(_files(old) - _files(new)):
        (data / name).unlink(missing_ok=True)
    os.replace(build / "manifest.json", root / "manifest.json")


def _clean_leftovers(root: Path, notice) -> None:
    """Under the exclusive lock (no other command is writing): finish or remove
    what interrupted commands left in catalog ``root``, telling ``notice``."""
    say = notice or (lambda msg: None)
    data = _data_dir(root)  # a symlinked data folder is refused before anything is touched
    for build in sorted(root.glob(".regen-*")):
        if not build.is_dir() or build.is_symlink():
            continue
        base = build / "previous.sha256"
        if not (build / "manifest.json").is_file() or not base.is_file():
            say(f"removed {build.name}, the unfinished build folder of an interrupted regen")
        elif base.read_text() == _manifest_sha(root):
            _install(build, root)
            say(f"finished the install of an interrupted regen ({build.name}, built from this manifest)")
        else:
            say(f"removed {build.name}, the complete build of an interrupted regen from another manifest "
                "(not installed over this one)")
        shutil.rmtree(build)
    temps = list(root.glob(".manifest.json.*.tmp")) + (list(data.glob(".*.npz.*.tmp")) if data.is_dir() else [])
    for tmp in sorted(temps):
        tmp.unlink()
        say(f"removed {tmp.relative_to(root)}, the temporary file of an interrupted write")


def _unknown_entries(previous: dict | None, manifest: dict, build: Path, root: Path) -> list[str]:
    """The names in ``root/data`` that ``previous`` does not list (left in place
    by the install) and that are not byte-identical to a file of the fresh
    build ``manifest``. Refuses (CatalogError) a build that would overwrite one
    of them, and, with no previous manifest, a data folder holding case files
    a fresh build does not write: they may be promoted cases only a manifest lists."""
    data = _data_dir(root)
    present = sorted(os.listdir(data)) if data.is_dir() else []
    new = _files(manifest)

    def same(name):
        p = data / name
        return (name in new and p.is_file() and not p.is_symlink()
                and p.read_bytes() == (build / "data" / name).read_bytes())

    unknown = [n for n in present if n not in _files(previous) and not same(n)]
    clobbered = [n for n in unknown if n in new]
    if clobbered:
        raise CatalogError(f"{data / clobbered[0]}: not in the manifest, and this regeneration writes a file of that "
                           "name; move it out of data/ (nothing was changed)")
    if previous is None:
        cases = [n for n in unknown if n.endswith(".npz")]
        if cases:
            raise CatalogError(
                f"{root / 'manifest.json'} is missing and {data} holds {len(cases)} case files a fresh "
                f"regeneration does not write ({', '.join(cases[:5])}{', ...' if len(cases) > 5 else ''}): cases "
                "promoted with `add` are listed only in the manifest, and regen will not lose them. Restore the "
                "manifest (e.g. `git checkout vectors/manifest.json`), or move those files out of data/; "
                "nothing was changed")
    return unknown


def regen_write(progress=None, *, root=None, notice=None) -> dict:
    """Regenerate catalog ``root`` in place under its exclusive lock; returns the new manifest.

    Leftovers of interrupted commands are finished or removed first. The
    previous manifest is read under the lock (its promoted cases are kept).
    The new catalog is built beside ``data/`` and installed only when
    complete (see the comment above ``_install``); ``data/`` entries the
    previous manifest does not list are left in place and reported to
    ``notice``, one line each."""
    root = _root(root)
    with lock.locked(root, exclusive=True, what="regen", notice=notice):
        _clean_leftovers(root, notice)
        previous = load_manifest(root / "manifest.json", versions=False) if exists(root) else None
        base = _manifest_sha(root)
        build = Path(tempfile.mkdtemp(prefix=".regen-", dir=root))
        try:
            manifest = regenerate(build / "data", progress, previous, root=root)
            unknown = _unknown_entries(previous, manifest, build, root)
            (build / "previous.sha256").write_text(base)
            write_atomic(build / "manifest.json", dump(manifest).encode())
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        # An interruption from here on leaves the build folder for the next add or regen to finish.
        _install(build, root)
        shutil.rmtree(build)
    for name in unknown:
        if notice:
            notice(f"regen: data/{name} is not in the manifest: left in place")
    return manifest


def regen_differences(progress=None, *, root=None, notice=None) -> tuple[int, list[str]]:
    """Regenerate catalog ``root`` into a temporary folder, under its shared
    lock, and compare with it byte for byte; returns (case count, one line
    per difference)."""
    root = _root(root)
    with lock.locked(root, exclusive=False, what="regen --check", notice=notice):
        previous = load_manifest(root / "manifest.json")
        data = _data_dir(root)
        with tempfile.TemporaryDirectory() as tmp:
            manifest = regenerate(Path(tmp) / "data", progress, previous, root=root)
            bad = []
            if dump(manifest) != (root / "manifest.json").read_text():
                bad.append("manifest.json differs from a fresh regeneration")
            for c in manifest["cases"]:
                fresh = (Path(tmp) / c["file"]).read_bytes()
                mine = root / c["file"]
                if fresh != (mine.read_bytes() if mine.is_file() and not mine.is_symlink() else b""):
                    bad.append(f"{c['file']} differs from a fresh regeneration")
            extra = {p.name for p in data.glob("*.npz")} - _files(manifest)
            bad += [f"data/{n} is not in the manifest" for n in sorted(extra)]
    return len(manifest["cases"]), bad


def add_case(file, *, comment: str, flags, name: str | None = None, splits=None, root=None, notice=None) -> dict:
    """Promote a case file (e.g. a saved repro) into catalog ``root``; returns its entry.

    Valid problems get expectations at ``splits`` (ints >= 1; default: the
    split counts of the file's launches); a problem the validator rejects
    becomes an invalid-input case naming the ``ProblemError`` subclass.
    Raises CaseFileError for an unreadable file, a bad name (``check_name``)
    or unknown flags, CatalogError where ``data/`` already holds a file of the
    new case's name. Runs under the catalog's exclusive lock; the data file
    and then the manifest are each replaced atomically, and the data file is
    removed again if the manifest could not be written. A project catalog
    folder without a manifest is created first (``_create``); the built-in
    one is never created."""
    from nvfp4_suite.reference import ProblemError

    root = _root(root)
    builtin = is_builtin(root)
    name = check_name(Path(file).stem if name is None else name)
    if splits and any(not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in splits):
        raise ValueError(f"splits {list(splits)}: split counts are integers >= 1")
    problem, meta, _ = load_case(file)
    try:
        problem.validate()
        expected_error = None
    except ProblemError as e:
        expected_error = type(e).__name__
    except Exception as e:  # noqa: BLE001 - a file the validator cannot judge is refused, never stored
        raise CaseFileError(f"{file}: the validator cannot judge its problem ({type(e).__name__}: {e})") from None
    counts = sorted(set(splits)) if splits else (_split_counts(launches(meta)) if meta.get("launches") else [1])
    extra = {} if expected_error else expectations(problem, counts)
    if not builtin:
        root.mkdir(parents=True, exist_ok=True)
    with lock.locked(root, exclusive=True, what="add", notice=notice):
        _clean_leftovers(root, notice)
        if not builtin and not exists(root):
            _create(root)
            if notice:
                notice(f"add: created the project catalog {root}")
        m = load_manifest(root / "manifest.json")
        unknown = [f for f in flags if f not in m["notes"]]
        if unknown:
            raise CaseFileError(f"unknown flags {unknown}; known: {', '.join(m['notes'])}")
        case_id = len(m["cases"])
        fname = _file_name(case_id, name)
        dest = _data_dir(root) / fname
        if os.path.lexists(dest):
            raise CatalogError(f"{dest}: exists but the manifest does not list it (a file of your own, or left by "
                               "an interrupted add?); move it out of data/; nothing was added")
        entry = {
            "id": case_id, "name": name, "file": f"data/{fname}", "comment": comment,
            "flags": list(flags), "launches": [Launch(splits=s, xcds=x).to_json() for s in counts for x in (0, 8)],
            "source": "added", "result": "invalid" if expected_error else "valid",
            "params": {"builder": "added", "from": Path(file).name},
        }
        if expected_error:
            entry["expected_error"] = expected_error
        entry["sha256"] = save_case(dest, problem, meta=_meta(entry), extra=extra)
        try:
            m["cases"].append(entry)
            write_atomic(root / "manifest.json", dump(m).encode())
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
    return entry
