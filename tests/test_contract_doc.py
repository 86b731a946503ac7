"""reference/CONTRACT.md stays in step with the code.

The document's numbers are parsed from its tables (section 1.1 constants,
section 2.3 byte offsets, section 5 error classes, section 10 file format)
and recomputed from the code, so changing either side alone fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from nvfp4_suite import reference
from nvfp4_suite.kernels.flydsl import lanes, seed_index
from nvfp4_suite.reference import formats, paged_cache, problem
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import casefile as vio

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "reference" / "CONTRACT.md"
TEXT = DOC.read_text(encoding="utf-8")


# --- parsing helpers -------------------------------------------------------

def _sections() -> dict[str, str]:
    """Level-2 sections: heading text (without its number) -> body."""
    out, name, buf = {}, None, []
    for line in TEXT.splitlines():
        m = re.match(r"^## (?:\d+\.\s*)?(.+?)\s*$", line)
        if m:
            if name is not None:
                out[name] = "\n".join(buf)
            name, buf = m.group(1), []
        elif name is not None:
            buf.append(line)
    if name is not None:
        out[name] = "\n".join(buf)
    return out


def section(title_start: str) -> str:
    hits = [body for title, body in _sections().items() if title.lower().startswith(title_start.lower())]
    assert len(hits) == 1, f"CONTRACT.md: expected one '## {title_start}...' section, found {len(hits)}"
    return hits[0]


def _cells(line: str) -> list[str]:
    """Cells of a markdown table row (``\\|`` inside a cell is not a separator)."""
    inner = line.strip()
    assert inner.startswith("|") and inner.endswith("|")
    parts = re.split(r"(?<!\\)\|", inner[1:-1])
    return [p.strip() for p in parts]


def table_rows(text: str) -> list[list[str]]:
    """Body rows of every markdown table in ``text`` (header and rule rows dropped)."""
    rows, prev_table = [], False
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.strip().startswith("|"):
            prev_table = False
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        is_header = not prev_table and re.match(r"^\s*\|[\s:|-]+\|\s*$", nxt)
        is_rule = re.match(r"^\s*\|[\s:|-]+\|\s*$", line)
        prev_table = True
        if is_header or is_rule:
            continue
        rows.append(_cells(line))
    return rows


def code(cell: str) -> str | None:
    """The first code span of a cell, ``\\|`` unescaped."""
    m = re.search(r"`([^`]+)`", cell)
    return m.group(1).replace("\\|", "|") if m else None


def code_spans(text: str) -> set[str]:
    return {s.replace("\\|", "|") for s in re.findall(r"`([^`]+)`", text)}


_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def evaluate(formula: str, **env: int) -> int:
    """An integer formula of the document: literals, names from ``env``, + - * // %."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise AssertionError(f"formula {formula!r} uses unknown name {node.id!r}")
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise AssertionError(f"formula {formula!r}: unsupported syntax {ast.dump(node)}")
    return ev(ast.parse(formula, mode="eval"))


def subsection(body: str, title_start: str) -> str:
    """The ``### <n.m> title...`` subsection of a section body."""
    parts = re.split(r"^### (?:[\d.]+\s*)?", body, flags=re.M)
    hits = [p for p in parts[1:] if p.lower().startswith(title_start.lower())]
    assert len(hits) == 1, f"CONTRACT.md: expected one '### {title_start}...' subsection, found {len(hits)}"
    return hits[0]


def constants() -> dict[str, str]:
    """Section 1.1's table: name -> value (both from code spans)."""
    out = {}
    for row in table_rows(subsection(section("Names, shapes and constants"), "Constants")):
        if len(row) == 3 and code(row[0]) and code(row[1]) and row[0].startswith("`"):
            name = code(row[0])
            if re.fullmatch(r"[A-Za-z_][\w.]*", name) and name not in out:
                out[name] = code(row[1])
    return out


CONST = constants()


# --- error classes -----------------------------------------------------------

def problem_error_classes() -> list[str]:
    return sorted(
        name for name, obj in inspect.getmembers(problem, inspect.isclass)
        if issubclass(obj, problem.ProblemError) and obj is not problem.ProblemError
        and obj.__module__ == problem.__name__
    )


def test_every_problem_error_subclass_is_named_in_the_invalid_input_section():
    body = section("Invalid input")
    classes = problem_error_classes()
    assert len(classes) >= 10
    listed = [code(r[0]) for r in table_rows(body) if r and code(r[0]) and code(r[0]).endswith("Error")]
    missing = [c for c in classes if c not in listed]
    assert not missing, f"CONTRACT.md section 'Invalid input' has no table row for {missing}"
    unknown = [c for c in listed if c not in classes]
    assert not unknown, f"CONTRACT.md names error classes the validator does not define: {unknown}"
    assert len(listed) == len(set(listed)), "one table row per class"
    # ...and every class is exported where users import it from.
    assert all(hasattr(reference, c) for c in classes)


# --- constants -----------------------------------------------------------------

EXPECTED_CONSTANTS = {
    "D", "BLK", "HG", "GROUP", "ROW_DATA", "ROW_SCALES", "ROW_BYTES", "TOPK_MIN", "TOPK_MAX",
    "E2M1_MAX", "E4M3FN_MAX", "E4M3FNUZ_7F", "page_bytes", "planar.k_data", "planar.k_scale",
    "planar.v_data", "planar.v_scale", "swizzle.row", "swizzle.col", "NW", "KPW", "THREADS", "PART_F",
}


def test_constant_table_is_complete():
    assert set(CONST) == EXPECTED_CONSTANTS, (
        f"section 1.1 table: missing {sorted(EXPECTED_CONSTANTS - set(CONST))}, "
        f"unexpected {sorted(set(CONST) - EXPECTED_CONSTANTS)}"
    )


@pytest.mark.parametrize("name, values", [
    ("D", [paged_cache.D]),
    ("BLK", [paged_cache.BLK]),
    ("HG", [problem.HG]),
    ("GROUP", [paged_cache.GROUP]),
    ("ROW_DATA", [paged_cache.ROW_DATA]),
    ("ROW_SCALES", [paged_cache.ROW_SCALES]),
    ("ROW_BYTES", [paged_cache.ROW_BYTES]),
    ("NW", [lanes.NW]),
    ("KPW", [lanes.KPW, reference.SEED_GEOMETRY.keys_per_max]),
    ("THREADS", [64 * lanes.NW]),
    ("PART_F", [lanes.PART_F]),
])
def test_integer_constants_match_the_code(name, values):
    stated = evaluate(CONST[name])
    for v in values:
        assert stated == v, f"CONTRACT.md says {name} = {stated}, the code has {v}"


def test_number_format_constants_match_the_codecs():
    assert evaluate(CONST["E2M1_MAX"]) == formats.E2M1_MAX == formats.E2M1_MAGNITUDES.max()
    e4 = evaluate(CONST["E4M3FN_MAX"])
    assert e4 == formats.E4M3_MAX == np.nanmax(formats.e4m3fn_decode(np.arange(256)))
    assert formats.e4m3fn_decode(np.array([0x7E]))[0] == e4
    assert formats.e4m3fn_encode(np.array([1e30]))[0] == 0x7E  # saturates to the stated max
    assert formats.e4m3fnuz_decode(np.array([0x7F]))[0] == evaluate(CONST["E4M3FNUZ_7F"])


def _problem_with_topk(topk_width: int):
    q = np.zeros((1, 16, 128), np.float32)
    pool = np.zeros((1, paged_cache.page_bytes(1)), np.uint8)
    return problem.DecodeProblem(
        q=q, pool=pool, layout="token_rows", num_kv_heads=1,
        topk=np.full((1, 1, topk_width), -1, np.int32), block_table=np.zeros((1, 1), np.int32),
        seq_lens=np.ones(1, np.int32), q_len=1, sm_scale=0.088, k_global_scale=1.0, v_global_scale=1.0,
    )


def test_topk_range_matches_the_validator():
    lo, hi = evaluate(CONST["TOPK_MIN"]), evaluate(CONST["TOPK_MAX"])
    for k in (lo, hi):
        _problem_with_topk(k).validate()
    for k in (lo - 1, hi + 1):
        if k < 0:
            continue
        with pytest.raises(problem.ShapeError):
            _problem_with_topk(k).validate()
    # The FlyDSL seed takes one lane per slot of a 64-lane wave.
    assert hi == 64 and seed_index.split_ballot(np.zeros(hi, np.int64), 0, 1, 0) == 2**64 - 1


@pytest.mark.parametrize("hkv", range(1, 9))
def test_page_bytes_formula(hkv):
    assert evaluate(CONST["page_bytes"], Hkv=hkv) == paged_cache.page_bytes(hkv)


def _offset(view: np.ndarray, pool: np.ndarray) -> int:
    return view.__array_interface__["data"][0] - pool.__array_interface__["data"][0]


@pytest.mark.parametrize("hkv", range(1, 9))
def test_planar_section_offsets(hkv):
    pool = np.zeros((1, paged_cache.page_bytes(hkv)), np.uint8)
    views = paged_cache.page_views(pool, "planar", hkv)
    for part in ("k_data", "k_scale", "v_data", "v_scale"):
        got = _offset(getattr(views, part)[0, 0, 0], pool)
        assert evaluate(CONST[f"planar.{part}"], Hkv=hkv) == got, f"planar {part} section, Hkv {hkv}"


def _address_table() -> dict[str, tuple[str, str]]:
    out = {}
    for row in table_rows(section("NVFP4 storage")):
        if len(row) == 3 and code(row[0]) in ("k_data", "k_scale", "v_data", "v_scale"):
            out[code(row[0])] = (code(row[1]), code(row[2]))
    return out


@pytest.mark.parametrize("layout", paged_cache.LAYOUTS)
def test_row_addresses_in_both_layouts(layout):
    table = _address_table()
    assert sorted(table) == ["k_data", "k_scale", "v_data", "v_scale"]
    col = paged_cache.LAYOUTS.index(layout)
    for hkv in (1, 2, 3, 8):
        pool = np.zeros((1, paged_cache.page_bytes(hkv)), np.uint8)
        views = paged_cache.page_views(pool, layout, hkv)
        for part, formulas in table.items():
            for h in sorted({0, hkv - 1}):
                for t in (0, 1, 77, 127):
                    got = _offset(getattr(views, part)[0, h, t], pool)
                    want = evaluate(formulas[col], Hkv=hkv, h=h, t=t)
                    assert want == got, f"{layout} {part} Hkv {hkv} head {h} token {t}"
                    # The kernel's loader computes the same byte.
                    assert lanes.page_byte(layout, hkv, part, h, t, 0) == got


def test_v_scale_swizzle_formula():
    linear = np.arange(128 * 8, dtype=np.int64).reshape(128, 8)
    stored = paged_cache.swizzle_v_scales(linear)
    for t in range(128):
        for s in range(8):
            r = evaluate(CONST["swizzle.row"], t=t, s=s)
            c = evaluate(CONST["swizzle.col"], t=t, s=s)
            assert stored[r, c] == linear[t, s], f"linear ({t}, {s})"


def test_contract_version_matches_the_catalog():
    m = re.search(r"Contract version: `(\d+)`", TEXT)
    assert m, "CONTRACT.md states its version as 'Contract version: `N`'"
    assert int(m.group(1)) == catalog.CONTRACT_VERSION
    if catalog.exists():
        assert catalog.load_manifest()["contract_version"] == catalog.CONTRACT_VERSION


# --- the golden file format -----------------------------------------------------

def _catalog_files() -> list[Path]:
    if not catalog.exists():
        pytest.skip("no golden catalog in this checkout")
    return [catalog.HERE / c["file"] for c in catalog.load_manifest()["cases"]]


def _npy_dtypes(path: Path) -> dict[str, np.dtype]:
    """Array name -> dtype, read from the NPY headers only."""
    out = {}
    with zipfile.ZipFile(path) as z:
        for member in z.namelist():
            with z.open(member) as f:
                major, _ = np.lib.format.read_magic(f)
                assert major == 1, f"{path.name}: {member} is NPY format {major}.x, the document says 1.0"
                _, _, dtype = np.lib.format.read_array_header_1_0(f)
            out[member.removesuffix(".npy")] = dtype
    return out


def _doc_array_name(key: str) -> str:
    return re.sub(r"^expect_seed_s\d+_", "expect_seed_s{S}_", key)


def _format_arrays() -> dict[str, str]:
    """Section 10's array table: name -> dtype name."""
    out = {}
    for row in table_rows(section("Golden vector file format")):
        if len(row) == 4 and code(row[0]) and code(row[1]) in ("float32", "uint8", "uint16", "int32"):
            for name in code_spans(row[0]):
                out[name] = code(row[1])
    return out


def test_format_section_names_every_array_of_valid_and_invalid_files():
    arrays = _format_arrays()
    files = _catalog_files()
    m = catalog.load_manifest()
    results = {c["result"] for c in m["cases"]}
    assert results == {"valid", "invalid"}
    seen: dict[str, set] = {"valid": set(), "invalid": set()}
    for c, path in zip(m["cases"], files):
        for key, dtype in _npy_dtypes(path).items():
            name = _doc_array_name(key)
            seen[c["result"]].add(name)
            assert name in arrays, f"{path.name}: array {key!r} is not in CONTRACT.md's file-format table"
            assert arrays[name] == dtype.name, (
                f"{path.name}: {key} is {dtype.name}, CONTRACT.md says {arrays[name]}")
            assert dtype.byteorder in "<|=", f"{path.name}: {key} is not little-endian"
    # Every array the document lists occurs in some file, and the problem's arrays
    # are exactly the loader's fields.
    assert set(arrays) == seen["valid"] | seen["invalid"]
    assert set(vio.ARRAY_FIELDS) | {"meta"} == seen["invalid"]
    for name, dt in vio.ARRAY_FIELDS.items():
        assert arrays[name] == np.dtype(dt).name


def test_format_section_names_every_meta_key_and_manifest_field():
    body = section("Golden vector file format")
    spans = code_spans(body)
    m = catalog.load_manifest() if catalog.exists() else pytest.skip("no golden catalog")
    # Fields and keys each have their own table row (first cell); the nested
    # ``meta`` keys and the ``params`` keys are listed inside a row.
    rows = set()
    for row in table_rows(body):
        rows |= code_spans(row[0])
    missing = set()
    for c in m["cases"]:
        with np.load(catalog.HERE / c["file"], allow_pickle=False) as npz:
            meta = json.loads(npz["meta"].tobytes().decode())
        missing |= {k for k in meta if k not in rows}
        missing |= {k for k in meta["meta"] if k not in spans}
        missing |= {k for k in c if k not in rows}
        missing |= {k for k in c["params"] if k not in spans}
    missing |= {k for k in m if k not in rows}
    missing |= {k for k in vio.SCALAR_FIELDS if k not in rows}
    assert not missing, f"CONTRACT.md section 'Golden vector file format' does not name {sorted(missing)}"
    assert f"`schema_version` | `{catalog.SCHEMA_VERSION}`" in body
    assert f"`generator_version` | `{catalog.GENERATOR_VERSION}`" in body
    assert f"`contract_version` | `{catalog.CONTRACT_VERSION}`" in body


# --- the document ships and is referenced ----------------------------------------

def test_readme_points_at_the_document_and_the_package_ships_it():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "reference/CONTRACT.md" in readme
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "CONTRACT.md" in pyproject["tool"]["setuptools"]["package-data"]["nvfp4_suite.reference"]


def test_section_9_is_the_bug_registrys_table():
    from nvfp4_suite.vectors.catalog.bugs import contract_section

    assert contract_section() in DOC.read_text(encoding="utf-8")


# --- section 7.1: the declared arithmetic ---------------------------------------

def test_section_7_1_names_every_arithmetic_the_cli_reads_and_what_each_declares():
    from nvfp4_suite.reference import arithmetic as A

    body = subsection(section("Accuracy and acceptance"), "Declared arithmetic")
    tables = [t for t in re.split(r"\n\s*\n", body) if t.lstrip().startswith("|")]
    assert len(tables) == 2, "section 7.1: expected the names table and the operands table"
    rows = {row[0].strip("`"): row[1].strip("`") for row in table_rows(tables[0])}
    pattern = "geometry:KxL[,p-bf16][,position]"
    operands = "exact[-p-bf16],operands=OPERANDS"
    assert set(rows) == {"exact", "exact-p-bf16", operands, "seed", pattern}
    # Every form the table names is the one parse_arithmetic reads and refuses others with.
    for name in rows:
        assert name in str(pytest.raises(ValueError, A.parse_arithmetic, "bogus").value)
    assert A.parse_arithmetic("exact") is None and rows["exact"] == "None"
    assert A.parse_arithmetic("exact-p-bf16") == A.Exact(p_bf16=True) and rows["exact-p-bf16"] == "Exact(p_bf16=True)"
    g = A.SEED_GEOMETRY
    assert A.parse_arithmetic("seed") == g
    assert rows["seed"] == f'Geometry({g.keys_per_max}, {g.keys_per_lane}, {g.p_bf16}, "{g.split_rule}")'
    assert A.parse_arithmetic("geometry:64x16,position") == A.Geometry(64, 16, False, "position")
    assert rows[operands] == "Exact(p_bf16, operands)"
    assert A.parse_arithmetic("exact-p-bf16,operands=bf16-folded") == A.Exact(True, "bf16-folded")
    # Every operand form is listed with the formula the code names for it.
    formulas = {code(r[0]): code(r[1]) for r in table_rows(tables[1])}
    assert list(formulas) == list(A.OPERANDS)
    assert all(formulas[o] == A.operand_formula(o) for o in A.OPERANDS)
    for f in dataclasses.fields(A.Exact):
        assert f"`{f.name}`" in body, f"section 7.1 does not define Exact.{f.name}"
    # Every field of Geometry and every split rule is defined in the text.
    for f in dataclasses.fields(A.Geometry):
        assert f"`{f.name}`" in body, f"section 7.1 does not define Geometry.{f.name}"
    splits = subsection(section("The seed kernel's arithmetic"), "Splits")
    for rule in A.SPLIT_RULES:
        assert f'`"{rule}"`' in splits and f'`"{rule}"`' in body, f"split rule {rule!r} undefined"


# --- cache layouts, slot-list domains, exported catalogs ---------------------------

def test_layout_section_names_every_key_and_its_example_is_the_separate_layout():
    from nvfp4_suite.reference import layout as L

    body = subsection(section("NVFP4 storage"), "Cache layouts as data")
    keys = set()
    for row in table_rows(body):
        keys |= code_spans(row[0])
    assert keys == set(L.SEPARATE.to_data()) | set(L.SEPARATE.to_data()["k_data"]), keys
    spans = code_spans(body)
    assert set(L.V_SCALE_ORDERS) <= {s.strip('"') for s in spans}
    assert set(L.SCALE_FORMATS) <= {s.strip('"') for s in spans}
    example = re.search(r"```toml\n(.*?)```", body, re.S).group(1)
    assert L.CacheLayout.from_data(tomllib.loads(example)) == L.SEPARATE


@pytest.mark.parametrize("hkv", range(1, 5))
def test_layout_records_of_the_canonical_layouts_are_the_documented_ones(hkv):
    from nvfp4_suite.reference import layout as L

    body = subsection(section("NVFP4 storage"), "Cache layouts as data")
    tr = L.TOKEN_ROWS
    assert f'`page = "{tr.k_data.page.to_data()}"`' in body
    assert f"`token = {tr.k_data.token.to_data()}`" in body and f"`head = {tr.k_data.head.to_data()}`" in body
    stated = re.search(r"offsets `0`, `64`, `\"([^`]+)\"`,\s+`\"([^`]+)\"`", body).groups()
    assert stated == (tr.v_data.offset.to_data(), tr.v_scale.offset.to_data())
    for part in ("k_data", "k_scale", "v_data", "v_scale"):
        v = L.PLANAR.view(part)
        assert v.offset.at(hkv) == evaluate(CONST[f"planar.{part}"], Hkv=hkv)
        assert v.token.at(hkv) == L.WIDTH[part] and v.head.at(hkv) == 128 * L.WIDTH[part]
        assert v.page.at(hkv) == tr.view(part).page.at(hkv) == paged_cache.page_bytes(hkv)


def test_slot_list_domain_table_names_every_domain():
    body = subsection(section("Which keys a row sees"), "Slot-list domains")
    listed = [code(r[0]) for r in table_rows(body)]
    assert listed == list(problem.SLOT_LISTS)


def test_scale_sign_domain_table_names_every_domain():
    body = subsection(section("NVFP4 storage"), "Scale-sign domains")
    listed = [code(r[0]) for r in table_rows(body)]
    assert listed == list(problem.SCALE_SIGNS)
    assert "outside_scale_domain" in body


def test_export_section_names_every_manifest_field_and_array(tmp_path, monkeypatch):
    from nvfp4_suite.reference import layout as L
    from nvfp4_suite.vectors.catalog import export as E

    body = subsection(section("Golden vector file format"), "Exported catalogs")
    rows = set()
    for row in table_rows(body):
        rows |= code_spans(row[0])
    full = catalog.load_manifest()
    few = {**full, "cases": [next(c for c in full["cases"] if c["result"] == r) for r in ("valid", "invalid")]}
    monkeypatch.setattr(catalog, "load_manifest", lambda: few)
    m = E.export_catalog(L.SEPARATE, tmp_path)
    assert f"`{E.FORMAT}`" in body.replace('"', "") or f'`"{E.FORMAT}"`' in body
    assert f"`{E.FORMAT_VERSION}`" in body
    missing = {k for k in m if k not in rows} | {k for c in m["cases"] for k in c if k not in code_spans(body)}
    with np.load(tmp_path / m["cases"][0]["file"]) as npz:
        names = {re.sub(r"^cache_.*", "cache_<tensor>", re.sub(r"^expect_.*", "expect_*", k)) for k in npz.files}
    missing |= names - rows
    assert not missing, f"CONTRACT.md section 10.4 does not name {sorted(missing)}"
