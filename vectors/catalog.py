"""The golden-vector catalog: ``vectors/manifest.json`` and ``vectors/data/*.npz``.

Each case file holds the problem's arrays and, for valid cases, the
expectations: ``out_exact`` (the exact oracle, float32), ``lse`` (float32),
``magnitude`` (float32, the tolerance model's ``A``) and ``out_emulated_s{S}``
(the seed-geometry emulation, bf16 values as float32) for every split count
the case lists.

Byte-identical regeneration: the problems come from seeded PCG64 streams and
integer/IEEE-exact codecs; files are written with fixed zip timestamps. The
expectations come from float64 computations rounded to float32 (or bf16); the
only platform-dependent steps before that rounding are BLAS summation order
and the last bit of float64 exp/exp2, which move a stored value only if a
float64 result lies within a few float64 ulps of a float32 rounding boundary
(about 2**-28 per element). ``python -m vectors regen --check`` in CI turns
any such event into a failure rather than a silent change.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from reference import ProblemError, emulate
from reference.compare import describe_modified_inputs
from reference.oracle import oracle_details
from reference.problem import DecodeProblem

from . import cases as C
from .harness import modified_inputs, private_copy, run_case, takes_xcds
from .io import CaseFileError, load_case, save_case

HERE = Path(__file__).parent
MANIFEST = HERE / "manifest.json"
DATA = HERE / "data"
SCHEMA_VERSION = 1
GENERATOR_VERSION = 1
CONTRACT_VERSION = 1


def exists() -> bool:
    """True when this checkout has a catalog manifest."""
    return MANIFEST.is_file()


def load_manifest(path: Path | None = None) -> dict:
    """The manifest (default: the catalog's) as a dict; raises CaseFileError naming
    the field when malformed."""
    path = MANIFEST if path is None else path
    try:
        m = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CaseFileError(f"{path}: unreadable manifest ({e})") from e
    for field in ("schema_version", "generator_version", "contract_version", "notes", "cases"):
        if field not in m:
            raise CaseFileError(f"{path}: field {field!r} missing")
    if m["schema_version"] != SCHEMA_VERSION:
        raise CaseFileError(f"{path}: schema_version {m['schema_version']}, this code reads {SCHEMA_VERSION}")
    for i, c in enumerate(m["cases"]):
        for field in ("id", "file", "sha256", "comment", "flags", "result", "params"):
            if field not in c:
                raise CaseFileError(f"{path}: cases[{i}] field {field!r} missing")
        unknown = [f for f in c["flags"] if f not in m["notes"]]
        if unknown:
            raise CaseFileError(f"{path}: cases[{i}] ({c['file']}) has flags {unknown} not in notes")
    return m


def expectations(problem: DecodeProblem, splits) -> dict:
    """The arrays a valid case stores (see the module docstring)."""
    out, lse, mag, _, _ = oracle_details(problem)
    extra = {
        "out_exact": out.astype(np.float32),
        "lse": lse.astype(np.float32),
        "magnitude": mag.astype(np.float32),
    }
    for s in splits:
        extra[f"out_emulated_s{s}"] = emulate(problem, splits=s)
    return extra


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
    meta = {k: entry[k] for k in ("id", "name", "comment", "flags", "splits", "result")}
    meta["splits_list"] = list(entry["splits"])
    if entry.get("expected_error"):
        meta["expected_error"] = entry["expected_error"]
    return meta


def _write_case(case_id: int, case: C.Case, folder: Path) -> dict:
    p = case.build()
    fname = _file_name(case_id, case.name)
    entry = {
        "id": case_id, "name": case.name, "file": f"data/{fname}", "comment": case.comment,
        "flags": list(case.flags), "splits": list(case.splits), "xcds": list(case.xcds),
        "params": _params(case, p),
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
    extra = {} if entry.get("expected_error") else expectations(problem, entry["splits"])
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


def _dump(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def check_invalid(problem: DecodeProblem, expected_error: str, backend=None) -> tuple[bool, str]:
    """The validator (and the backend's host side, if given) must raise ``expected_error``;
    the backend gets a ``private_copy`` and must leave it as it was."""
    def raised(fn):
        """(exception class name or None, message) of calling fn."""
        try:
            fn()
        except ProblemError as e:
            return type(e).__name__, str(e)
        except Exception as e:  # noqa: BLE001 - any other exception is the wrong answer
            return type(e).__name__, str(e)
        return None, "no error raised"

    lines, ok = [], True
    who = [("reference validator", problem.validate)]
    seen = None
    if backend is not None:
        seen = private_copy(problem)
        who.append((f"backend {backend.name}", lambda: backend(seen, splits=1)))
    for name, fn in who:
        got, msg = raised(fn)
        good = got == expected_error
        ok &= good
        lines.append(f"{name}: {'PASS' if good else 'FAIL'}: expected {expected_error}, got {got}: {msg}")
    changed = {} if seen is None else modified_inputs(problem, seen)
    if changed:
        ok = False
        lines.append(f"backend {backend.name}: FAIL: {describe_modified_inputs(changed)}")
    return ok, "\n".join(lines)


def check_all(backend, progress=None, stop_at_first: bool = False, spec: str | None = None,
              cases=None) -> tuple[bool, list[str]]:
    """Run every catalog case (or those whose id is in ``cases``) against
    ``backend``; returns (ok, report lines).

    spec: how the replay hints name the backend (the ``--backend`` it was
    loaded by; default its ``name``, right for registered backends).
    """
    m = load_manifest()
    chosen = [c for c in m["cases"] if cases is None or c["id"] in cases]
    lines, ok = [f"golden vectors: {len(chosen)} cases"], True
    placed = takes_xcds(backend)
    for i, c in enumerate(chosen):
        if progress:
            progress(f"  golden: [{i + 1}/{len(chosen)}] {c['name']}")
        problem, meta, _ = load_case(HERE / c["file"], sha256=c["sha256"])
        if c["result"] == "invalid":
            good, text = check_invalid(problem, c["expected_error"], backend)
            status = "PASS" if good else "FAIL"
            lines.append(f"  {c['id']:3d} {c['name']:<28} {status} (rejects with {c['expected_error']})")
            if not good:
                lines.append("      " + text.replace("\n", "\n      "))
        else:
            good = True
            splits = [s for s in c["splits"] if s in backend.splits]
            placements = c["xcds"] if placed else [0]
            details = []
            for s in splits:
                for x in placements:
                    try:
                        _, rep = run_case(backend, problem, s, x)
                        passed, text = rep.passed, rep.details()
                    except Exception as e:  # noqa: BLE001 - a crash is a failure of this case
                        passed, text = False, f"backend raised {type(e).__name__}: {e}"
                    good &= passed
                    if not passed:
                        details.append((s, x, text))
            status = "PASS" if good else "FAIL"
            where = f"splits {splits}" + (f", xcds {placements}" if placed else "")
            lines.append(f"  {c['id']:3d} {c['name']:<28} {status} ({where})")
            # Case files do not hold the manifest's placements: the hint names the failing launch.
            for s, x, text in details:
                lines.append(f"      splits={s} xcds={x}: " + text.replace("\n", "\n      "))
                lines.append(f"      replay: python -m vectors replay {HERE / c['file']} "
                             f"--backend {spec or backend.name} --splits {s} --xcds {x}")
        ok &= good
        if stop_at_first and not ok:
            break
    return ok, lines


# --- subcommands -----------------------------------------------------------

def _progress(msg):
    end = "\r" if sys.stderr.isatty() else "\n"
    print(msg, file=sys.stderr, end=end, flush=True)


def cmd_regen(args) -> int:
    """``regen [--check]``: rewrite the catalog, or compare a fresh regeneration byte for byte.

    Exit 2 (the catalog untouched) when the committed catalog cannot be read,
    e.g. an added case's file is missing or fails its hash.
    """
    try:
        previous = load_manifest() if exists() else None
        return _regen_check(previous) if args.check else _regen_write(previous)
    except CaseFileError as e:
        print(f"regen: {e}", file=sys.stderr)
        return 2


def _regen_write(previous: dict | None) -> int:
    # Built beside DATA (same file system, so the swap is renames) and swapped in
    # only when complete: an interrupted regen leaves the committed catalog as it was.
    build = Path(tempfile.mkdtemp(prefix=".regen-", dir=DATA.parent))
    try:
        manifest = regenerate(build / "data", _progress, previous)
        (build / "manifest.json").write_text(_dump(manifest))
        _swap_in(build)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    size = sum(f.stat().st_size for f in DATA.iterdir())
    print(f"wrote {len(manifest['cases'])} cases, {size / 2**20:.2f} MiB")
    return 0


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


def _regen_check(previous: dict | None) -> int:
    if previous is None:
        print("regen --check: no manifest to check against", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        manifest = regenerate(Path(tmp) / "data", _progress, previous)
        bad = []
        if _dump(manifest) != MANIFEST.read_text():
            bad.append("manifest.json differs from a fresh regeneration")
        for c in manifest["cases"]:
            fresh = (Path(tmp) / c["file"]).read_bytes()
            mine = (HERE / c["file"]).read_bytes() if (HERE / c["file"]).is_file() else b""
            if fresh != mine:
                bad.append(f"{c['file']} differs from a fresh regeneration")
        committed = {p.name for p in DATA.glob("*.npz")}
        extra = committed - {Path(c["file"]).name for c in manifest["cases"]}
        bad += [f"data/{n} is not in the manifest" for n in sorted(extra)]
    for b in bad:
        print(f"regen --check: {b}")
    print(f"regen --check: {'OK' if not bad else 'FAILED'} ({len(manifest['cases'])} cases)")
    return 1 if bad else 0


def cmd_list(args) -> int:
    """``list [--flag F]``: one line per case and its comment."""
    m = load_manifest()
    for c in m["cases"]:
        if args.flag and args.flag not in c["flags"]:
            continue
        res = c["result"] + (f" {c['expected_error']}" if c.get("expected_error") else "")
        print(f"{c['id']:3d}  {c['name']:<28} {res:<28} {','.join(c['flags'])}")
        print(f"     {c['comment']}")
    return 0


def cmd_add(args) -> int:
    """``add FILE --comment C --flags F..``: promote a case file into the catalog."""
    m = load_manifest()
    unknown = [f for f in args.flags if f not in m["notes"]]
    if unknown:
        print(f"add: unknown flags {unknown}; known: {', '.join(m['notes'])}", file=sys.stderr)
        return 2
    problem, meta, _ = load_case(args.file)
    try:
        problem.validate()
        expected_error = None
    except ProblemError as e:
        expected_error = type(e).__name__
    case_id = len(m["cases"])
    name = args.name or Path(args.file).stem
    fname = _file_name(case_id, name)
    splits = sorted(set(args.splits or meta.get("splits_list") or [meta.get("splits", 1)]))
    entry = {
        "id": case_id, "name": name, "file": f"data/{fname}", "comment": args.comment,
        "flags": list(args.flags), "splits": splits, "xcds": [0, 8], "source": "added",
        "result": "invalid" if expected_error else "valid",
        "params": {"builder": "added", "from": Path(args.file).name},
    }
    if expected_error:
        entry["expected_error"] = expected_error
    extra = {} if expected_error else expectations(problem, splits)
    entry["sha256"] = save_case(DATA / fname, problem, meta=_meta(entry), extra=extra)
    m["cases"].append(entry)
    MANIFEST.write_text(_dump(m))
    print(f"added case {case_id} ({fname}), result {entry['result']}")
    return 0


def add_subcommands(sub) -> None:
    """Register regen, list and add on the CLI's subparsers."""
    r = sub.add_parser("regen", help="regenerate every golden case (with --check: compare, change nothing)")
    r.add_argument("--check", action="store_true")
    r.set_defaults(fn=cmd_regen)
    ls = sub.add_parser("list", help="list the golden cases")
    ls.add_argument("--flag", help="only cases with this flag")
    ls.set_defaults(fn=cmd_list)
    a = sub.add_parser("add", help="promote a saved case file (e.g. from .repro/) into the catalog")
    a.add_argument("file")
    a.add_argument("--comment", required=True)
    a.add_argument("--flags", nargs="+", required=True)
    a.add_argument("--name")
    a.add_argument("--splits", type=int, nargs="+")
    a.set_defaults(fn=cmd_add)
