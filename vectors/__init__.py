"""The golden catalog (``catalog``), the check engine (``engine``), the command
line (``cli``), the simulator's drivers (``simulator``) and the pytest plugin.

Modules that once stood directly in this package have homes in those rooms;
importing one by its old path raises ``ModuleNotFoundError`` naming the new
one, and running it with ``python -m`` says the same and exits 2.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

# Old module path (under nvfp4_suite.vectors) -> where it lives now, or the command that replaces it.
MOVED = {
    "cases": "nvfp4_suite.vectors.catalog.cases", "io": "nvfp4_suite.vectors.catalog.casefile",
    "lock": "nvfp4_suite.vectors.catalog.lock", "export": "nvfp4_suite.vectors.catalog.export",
    "bugs": "nvfp4_suite.vectors.catalog.bugs (the command: python -m nvfp4_suite.vectors bugs)",
    "bug_classes": "nvfp4_suite.vectors.catalog.bug_classes", "check": "nvfp4_suite.vectors.engine.check",
    "harness": "nvfp4_suite.vectors.engine.harness", "isolate": "nvfp4_suite.vectors.engine.isolate",
    "strategies": "nvfp4_suite.vectors.engine.strategies", "coverage": "nvfp4_suite.vectors.engine.coverage",
    "blame": "nvfp4_suite.vectors.engine.blame",
    # The recorded failure patterns are gone: a failing run's cause summary runs the mutants itself.
    "signatures": "nvfp4_suite.vectors.engine.blame (a failing check's cause summary now runs the mutants and "
                  "compares their outputs; nothing is recorded)",
    "serving": "nvfp4_suite.vectors.engine.serving (the check: python -m nvfp4_suite.vectors check --shape "
               "serving; the benchmark: python -m nvfp4_suite.vectors serving-bench)",
    "interrupts": "nvfp4_suite.vectors.engine.interrupts", "results": "nvfp4_suite.vectors.engine.verdict",
    "render": "nvfp4_suite.vectors.cli.render", "progress": "nvfp4_suite.vectors.cli.progress",
    "report": "nvfp4_suite.vectors.cli.report", "entry": "nvfp4_suite.vectors.cli.runner",
    "sim_sweep": "nvfp4_suite.vectors.simulator.sweep", "sim_bench": "nvfp4_suite.vectors.simulator.bench",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Answers an old module path with its new home: an import raises
    ``ModuleNotFoundError``, ``python -m`` runs code that says so and exits 2."""

    def find_spec(self, fullname, path=None, target=None):
        """A spec for an old path of this package (None for every other name)."""
        head, _, leaf = fullname.rpartition(".")
        if head != __name__ or leaf not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    @staticmethod
    def _message(fullname: str) -> str:
        return f"{fullname} has moved: use {MOVED[fullname.rpartition('.')[2]]}"

    def create_module(self, spec):
        """Refuse the import, naming the new home."""
        raise ModuleNotFoundError(self._message(spec.name), name=spec.name)

    def exec_module(self, module):  # pragma: no cover - create_module has refused
        """Never reached: ``create_module`` refuses."""

    def get_source(self, fullname):
        """What ``python -m OLD`` runs: say where it went, exit 2 (nothing was judged)."""
        return f"import sys\nprint({self._message(fullname)!r}, file=sys.stderr)\nraise SystemExit(2)\n"


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.append(_Moved())
