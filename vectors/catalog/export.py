"""The golden catalog in a declared cache layout, and cache dumps in one back into problems.

``python -m nvfp4_suite.vectors export --layout FILE DIR`` writes every valid
golden case with its cache re-packed into the layout of ``FILE`` (a TOML or
JSON layout, ``nvfp4_suite.reference.layout``), the stored expectations
unchanged, for checkers in other languages. ``python -m nvfp4_suite.vectors
import --layout FILE DUMP OUT`` reads a dump in the same per-case format
(``cache_<tensor>`` arrays in that layout, the other inputs beside them) and
writes a case file in the canonical format, to ``replay`` or ``add`` to the
catalog. The format is ``reference/CONTRACT.md`` section 10.4:

- ``DIR/manifest.json``: ``format`` (``"nvfp4-suite-export"``), ``format_version``,
  ``layout`` (the layout record), ``tensors`` (its tensor names), ``cases``
  (id, name, file, comment, flags, launches, ``slot_lists``: the domains the
  case is inside) and ``not_exported`` (the invalid-input cases, by name).
- ``DIR/NNN-name.npz``: plain arrays, nothing pickled: ``q``, ``topk``,
  ``block_table``, ``seq_lens``; ``cache_<tensor>`` uint8 ``[num_pages, page]``
  per tensor; 0-d ``num_kv_heads``, ``q_len`` (int32), ``sm_scale``,
  ``k_global_scale``, ``v_global_scale`` (float64); and every expectation
  array of the case file (``expect_*``, ``out_exact``, ``lse``, ``magnitude``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from nvfp4_suite.reference import layout as L
from nvfp4_suite.reference.problem import SLOT_LISTS, DecodeProblem, outside_slot_domain
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog.casefile import CaseFileError, load_case, save_case

FORMAT = "nvfp4-suite-export"
FORMAT_VERSION = 1
INPUTS = {"q": np.float32, "topk": np.int32, "block_table": np.int32, "seq_lens": np.int32}
SCALARS = {"num_kv_heads": np.int32, "q_len": np.int32, "sm_scale": np.float64, "k_global_scale": np.float64,
           "v_global_scale": np.float64}


def dump_arrays(problem: DecodeProblem, layout) -> dict[str, np.ndarray]:
    """The per-case arrays of the export format for ``problem`` (a valid problem),
    its cache re-packed into ``layout``."""
    layout = L.as_layout(layout)
    out = {n: np.asarray(getattr(problem, n), dt) for n, dt in INPUTS.items()}
    out.update({n: np.asarray(getattr(problem, n), dt) for n, dt in SCALARS.items()})
    tensors = L.pack(problem.pool, problem.layout, int(problem.num_kv_heads), layout)
    out.update({f"cache_{t}": a for t, a in tensors.items()})
    return out


def write_dump(path, problem: DecodeProblem, layout, extra: dict | None = None) -> None:
    """Write ``problem`` in the export format to ``path`` (``extra``: more arrays)."""
    arrays: dict[str, Any] = dump_arrays(problem, layout)
    more: dict[str, Any] = extra or {}
    np.savez_compressed(path, **arrays, **more)  # a name in both is a TypeError, never an overwrite


def import_case(path, layout, canonical: str = "token_rows") -> tuple[DecodeProblem, dict]:
    """A dump in the export format and ``layout`` as ``(problem, other arrays)``:
    the problem's pool re-packed into ``canonical``; the other arrays (e.g.
    expectations) as stored. Raises ``CaseFileError`` naming a missing or
    mistyped array, ``LayoutError`` for tensors that do not fit the layout."""
    layout = L.as_layout(layout)
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as e:
        raise CaseFileError(f"{path}: not a readable npz of plain arrays ({e})") from e
    for n, dt in {**INPUTS, **SCALARS}.items():
        if n not in arrays:
            raise CaseFileError(f"{path}: array {n!r} missing")
        if arrays[n].dtype != dt:
            raise CaseFileError(f"{path}: array {n!r} is {arrays[n].dtype}, expected {np.dtype(dt).name}")
    tensors = {}
    for t in layout.tensor_names():
        if f"cache_{t}" not in arrays:
            raise CaseFileError(f"{path}: array 'cache_{t}' missing (layout {layout.name} has tensors "
                                f"{list(layout.tensor_names())})")
        tensors[t] = arrays.pop(f"cache_{t}")
    ins = {n: arrays.pop(n) for n in INPUTS}
    sc = {n: arrays.pop(n).item() for n in SCALARS}
    problem = L.to_problem(tensors, layout, canonical=canonical, **ins, **sc)
    return problem, arrays


def domains(problem: DecodeProblem) -> list[str]:
    """The slot-list domains ``problem`` is inside."""
    return [d for d in SLOT_LISTS if outside_slot_domain(problem, d) is None]


def export_catalog(layout, folder, progress=None) -> dict:
    """Write the golden catalog into ``folder`` in ``layout``; returns the manifest written."""
    layout = L.as_layout(layout)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    m = catalog.load_manifest()
    cases, skipped = [], []
    for i, c in enumerate(m["cases"]):
        if progress:
            progress(f"  export: [{i + 1}/{len(m['cases'])}] {c['name']}")
        if c["result"] != "valid":
            skipped.append(c["name"])
            continue
        problem, _, extra = load_case(catalog.HERE / c["file"], sha256=c["sha256"])
        name = Path(c["file"]).name
        write_dump(folder / name, problem, layout, extra)
        cases.append({"id": c["id"], "name": c["name"], "file": name, "comment": c["comment"],
                      "flags": c["flags"], "launches": c["launches"], "slot_lists": domains(problem)})
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "layout": layout.to_data(),
                "tensors": list(layout.tensor_names()), "notes": m["notes"], "cases": cases,
                "not_exported": {"invalid input (judged by the host-side validator on the canonical case files)":
                                 skipped}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


# --- commands (a layout that cannot be read is LayoutError: NO VERDICT, exit 2) ---

def cmd_export(args) -> int:
    """``export --layout FILE DIR``."""
    lay = L.load(args.layout)
    m = export_catalog(lay, args.dir)
    print(f"exported {len(m['cases'])} valid cases in layout {lay.name!r} (tensors {', '.join(m['tensors'])}) "
          f"to {args.dir}; {sum(map(len, m['not_exported'].values()))} invalid-input cases not exported")
    return 0


def cmd_import(args) -> int:
    """``import --layout FILE DUMP OUT``."""
    from nvfp4_suite.reference import ProblemError

    lay = L.load(args.layout)
    try:
        problem, _ = import_case(args.dump, lay, args.canonical)
    except L.LayoutError as e:
        raise L.LayoutError(f"{args.dump}: {e}") from e
    try:
        problem.validate()
        status = "valid"
    except ProblemError as e:
        status = f"invalid ({type(e).__name__}: {e})"
    save_case(args.out, problem, meta={"source": "import", "cache_layout": lay.name})
    print(f"wrote {args.out}: {problem.rows} rows, Hkv {problem.num_kv_heads}, TOPK {problem.TOPK}, "
          f"{problem.num_pages} pages in {args.canonical}; {status}")
    print(f"check it: python -m nvfp4_suite.vectors replay {args.out} --backend SPEC")
    print(f"promote it: python -m nvfp4_suite.vectors add {args.out} --comment '...' --flags FLAG")
    return 0


def register(sub) -> None:
    """Add the ``export`` and ``import`` subcommands to ``sub`` (the CLI's subparsers)."""
    e = sub.add_parser("export", help="write the golden catalog in a declared cache layout (npz + JSON manifest)",
                       description="Write every valid golden case with its cache in the layout of FILE, the stored "
                                   "expectations unchanged (format: reference/CONTRACT.md section 10.4).")
    e.add_argument("--layout", required=True, help="a layout file (TOML, or JSON by its .json suffix)")
    e.add_argument("dir", help="the folder to write")
    e.set_defaults(fn=cmd_export)
    i = sub.add_parser("import", help="turn a cache dump in a declared layout into a case file",
                       description="Read DUMP (an npz in the export format, cache in the layout of FILE) and write "
                                   "OUT, a case file to replay or add to the catalog.")
    i.add_argument("--layout", required=True, help="a layout file (TOML, or JSON by its .json suffix)")
    i.add_argument("--canonical", choices=L.pc.LAYOUTS, default="token_rows",
                   help="the pool layout of the case file written (default token_rows)")
    i.add_argument("dump", help="the dump: npz of plain arrays")
    i.add_argument("out", help="the case file to write (.npz)")
    i.set_defaults(fn=cmd_import)
