"""The package's import graph: no cycles, and the layers in order.

The graph is read from the source with ``ast`` (nothing is imported): every
``import`` and ``from ... import`` anywhere in a module, at its top or inside
a function, is an edge from that module to the module it names (to the
submodule where ``from package import name`` names one). The layers are the
three folders, ``reference`` < ``kernels`` < ``vectors``: a module may import
its own layer and those below it, never one above.
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
