"""The package's import graph: no cycles, and the layers in order.

The graph is read from the source with ``ast`` (nothing is imported): every
``import`` and ``from ... import`` anywhere in a module, at its top or inside
a function, is an edge from that module to the module it names (to the
submodule where ``from package import name`` names one). The layers are the
three folders, ``reference`` < ``kernels`` < ``vectors``: a module may import
its own layer and those below it, never one above. Inside ``vectors`` the
rooms are layers too: ``catalog`` < ``engine`` < ``cli`` < the front ends
that use the command line's pieces (``simulator``, ``pytest_plugin``,
``__main__``). Production code never imports the test suite's modules nor
edits ``sys.path``, except where a documented entry point makes the user's
working directory importable (the ``nvfp4-vectors`` script, the pytest
plugin) and where the isolation worker takes its parent's path.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "nvfp4_suite"
LAYERS = ("reference", "kernels", "vectors")



def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three folders."""
    out = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([PACKAGE, *parts])] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations that
    never run (a type checker's view, no edge of the import graph)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that ``name`` (at ``path``) imports when it runs."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            # ``import a.b.c`` names a.b.c; keep the longest prefix that is a module of ours.
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(name: str) -> int:
    return LAYERS.index(name.split(".")[1])


# The rooms of vectors/, lowest first; a module may import its own room and those below.
ROOMS = (("catalog",), ("engine",), ("cli",), ("simulator", "pytest_plugin", "__main__"))


def _room(name: str) -> int | None:
    """The rank of a ``vectors`` module's room (None: the package itself, outside the rooms)."""
    parts = name.split(".")
    if parts[1] != "vectors" or len(parts) < 3:
        return None
    return next(i for i, room in enumerate(ROOMS) if parts[2] in room)


# Files that may edit sys.path, and why (see the module note).
PATH_EDITORS = {"vectors/cli/__init__.py": "console_main: the user's working directory, as python -m makes it",
                "vectors/pytest_plugin.py": "pytest_configure: the directory pytest was started in",
                "vectors/engine/isolate.py": "the isolation worker takes its parent's sys.path"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that returns to its start, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_graph_is_read_from_every_module_of_the_three_layers():
    graph = _graph()
    assert {_layer(n) for n in graph} == {0, 1, 2}
    # Spot checks of the parser on edges that exist: relative, absolute, submodule by name.
    assert "nvfp4_suite.reference.compare.tolerance" in graph["nvfp4_suite.reference.compare.report"]
    assert "nvfp4_suite.reference.emulate" in graph["nvfp4_suite.kernels.torch.reference"]
    assert "nvfp4_suite.vectors.catalog.cases" in graph["nvfp4_suite.vectors.catalog"]
    assert "nvfp4_suite.vectors.engine.verdict" in graph["nvfp4_suite.vectors.cli.runner"]
    # bias.py imports report.Report under TYPE_CHECKING only (report.py imports bias): no edge.
    assert "nvfp4_suite.reference.compare.report" not in graph["nvfp4_suite.reference.compare.bias"]
    assert "nvfp4_suite.reference.compare.bias" in graph["nvfp4_suite.reference.compare.report"]


def test_no_module_imports_itself_back_through_a_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_a_layer_above_its_own():
    graph = _graph()
    upward = sorted(f"{n} -> {m}" for n, deps in graph.items() for m in deps
                    if _layer(m) > _layer(n))
    assert not upward, "upward imports (reference < kernels < vectors):\n" + "\n".join(upward)


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_of_vectors_lies_in_a_room():
    assert {_room(n) for n in _graph() if n.startswith("nvfp4_suite.vectors.")} == {0, 1, 2, 3}


def test_no_room_of_vectors_imports_a_room_above_its_own():
    graph = _graph()
    upward = sorted(f"{n} -> {m}" for n, deps in graph.items() for m in deps
                    if _room(n) is not None and _room(m) is not None and _room(m) > _room(n))
    assert not upward, "upward imports (catalog < engine < cli < simulator, pytest_plugin):\n" + "\n".join(upward)


def test_production_code_imports_nothing_of_the_tests():
    tests = {p.stem for p in (ROOT / "tests").glob("*.py")} - {"conftest"}
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{name} imports {n}" for n in names if n.split(".")[0] in tests | {"tests"}]
    assert not found, found


def test_only_the_documented_entry_points_edit_sys_path():
    editors = {}
    for path in sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else \
                node.targets[0].value if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) \
                else None
            if target is not None and ast.unparse(target) == "sys.path":
                editors[str(path.relative_to(ROOT))] = ast.unparse(node)
    assert set(editors) == set(PATH_EDITORS), editors


def test_the_path_edit_finder_finds_each_form():
    for code in ("sys.path.insert(0, x)", "sys.path.append(x)", "sys.path[:] = p"):
        node = ast.parse(code).body[0].value if "[:]" not in code else ast.parse(code).body[0]
        target = node.func.value if isinstance(node, ast.Call) else node.targets[0].value
        assert ast.unparse(target) == "sys.path"
