"""The suite as a pytest plugin: ``pytest --nvfp4-backend SPEC`` in any project.

Registered through the ``pytest11`` entry point, so installing the suite is
enough. With no ``--nvfp4-backend`` it adds nothing (and imports nothing but
pytest). With it, pytest gets, for each SPEC (a registered backend name or
``module.path:attr``, resolved from the directory pytest was started in):

- one test per golden case and launch, ``test_golden[SPEC-017-stale-tail-splits2]``
  (invalid-input cases have one test, ``...-invalid``): a launch outside the
  backend's capabilities is a skip with the reason; a failure prints the
  report and the ``replay`` command of that case and launch;
- one test of generated problems, ``test_generated[SPEC]``: on failure the
  minimised problem is saved (``.repro/``, or ``$NVFP4_REPRO_DIR``) and its
  ``replay`` command printed.

JUnit output is pytest's own ``--junitxml``; ``-k stale-tail`` selects by case name.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Interpreted backends (Triton's CPU interpreter, the FlyDSL simulator) get
# this many generated problems unless --nvfp4-examples says otherwise.
INTERPRETED_EXAMPLES = 8
DEFAULT_EXAMPLES = 100


def pytest_addoption(parser):
    g = parser.getgroup("nvfp4", "NVFP4 sparse decode conformance (nvfp4_suite)")
    g.addoption("--nvfp4-backend", action="append", default=[], metavar="SPEC",
                help="check this backend: a registered name or module.path:attr (repeatable); "
                     "adds its golden cases and generated problems as tests")
    g.addoption("--nvfp4-examples", type=int, default=None, metavar="N",
                help=f"generated problems per backend (default {DEFAULT_EXAMPLES}; "
                     f"{INTERPRETED_EXAMPLES} for interpreted backends)")
    g.addoption("--nvfp4-seed", type=int, default=0, metavar="N", help="seed of the generated problems (default 0)")
    g.addoption("--nvfp4-isolate", action="store_true",
                help="run each launch in a worker process (nvfp4_suite.vectors.isolate): a crash, a hang, a GPU "
                     "fault or an OOM kill fails that test only")
    g.addoption("--nvfp4-timeout", type=float, default=None, metavar="S",
                help="seconds one launch may take in its worker (implies --nvfp4-isolate)")


def pytest_configure(config):
    if config.getoption("nvfp4_backend"):
        # As `python -m nvfp4_suite.vectors` does: the user's own package is
        # importable from where pytest was started, whatever pytest's import mode.
        here = str(config.invocation_params.dir)
        if here not in sys.path:
            sys.path.insert(0, here)


class ConformanceFailure(AssertionError):
    """A backend's output or error is wrong; the message is the whole report."""


class ConformanceItem(pytest.Item):
    """One conformance test: ``run`` raises ConformanceFailure, or pytest.skip."""

    def __init__(self, *, run, **kw):
        super().__init__(**kw)
        self._run = run

    def runtest(self):
        self._run()

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return Path(__file__), None, self.name


class ConformanceTests(pytest.Collector):
    """The collector under the session that holds the plugin's items."""

    def collect(self):
        cfg = self.config
        items = []
        for spec in dict.fromkeys(cfg.getoption("nvfp4_backend")):
            isolate = cfg.getoption("nvfp4_isolate") or cfg.getoption("nvfp4_timeout") is not None
            for name, run in spec_tests(spec, cfg.getoption("nvfp4_examples"), cfg.getoption("nvfp4_seed"),
                                        (cfg.getoption("nvfp4_timeout"),) if isolate else None, cfg.add_cleanup):
                items.append(ConformanceItem.from_parent(self, name=name, run=run))
        return items


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    # tryfirst: before -k and -m deselect, so that they apply to these items too.
    if config.getoption("nvfp4_backend"):
        tests = ConformanceTests.from_parent(session, name="nvfp4_suite", nodeid="nvfp4_suite")
        found = tests.collect()
        # Reported like any collected file's items (the "collected N items" count).
        session.ihook.pytest_collectreport(report=pytest.CollectReport(tests.nodeid, "passed", None, found))
        items.extend(found)


def load_backend(spec: str):
    """``(backend, None)``, or ``(None, run)`` where ``run`` fails (the spec
    does not load) or skips (the backend cannot run here) with the reason."""
    from nvfp4_suite import kernels

    try:
        b = kernels.get_backend(spec)
    except kernels.BackendError as e:
        msg = str(e)

        def cannot_load():
            """The spec names no usable backend: a failure, not a skip."""
            raise ConformanceFailure(msg)
        return None, cannot_load
    from nvfp4_suite.vectors.check import unavailable

    why = unavailable(b)
    if why is not None:
        def cannot_run():
            """The backend cannot run on this machine."""
            pytest.skip(f"backend {spec} unavailable: {why}")
        return None, cannot_run
    return b, None


def launch_id(launch) -> str:
    """``splits2``, ``splits2-xcds8``, ``splits1-order-reverse``: a launch in a test id."""
    out = f"splits{launch.splits}"
    if launch.xcds:
        out += f"-xcds{launch.xcds}"
    if launch.order is not None:
        out += f"-order-{launch.order}"
    return out


def spec_tests(spec: str, examples: int | None, seed: int, isolate: tuple | None = None, cleanup=None) -> list:
    """``(test name, run)`` pairs for ``spec``: each golden case at each of its
    launches as the backend receives them (one test for an invalid-input
    case), then the generated problems. A backend that cannot load or run
    gives one golden and one generated test, failing or skipping with the reason.
    ``isolate``: ``(timeout,)`` to run every launch in a worker process
    (``nvfp4_suite.vectors.isolate``; timeout None: its default), whose close is
    handed to ``cleanup``."""
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.isolate import Isolated

    b, refusal = load_backend(spec)
    if b is None:
        return [(f"test_golden[{spec}]", refusal), (f"test_generated[{spec}]", refusal)]
    if isolate is not None:
        b = Isolated(spec, b, isolate[0])
        if cleanup is not None:
            cleanup(b.close)
    out = []
    for entry in catalog.load_manifest()["cases"]:
        base = f"{spec}-{entry['id']:03d}-{entry['name']}"
        if entry["result"] == "invalid":
            out.append((f"test_golden[{base}-invalid]", _golden_run(b, spec, entry)))
            continue
        for launch in dict.fromkeys(x.as_seen_by(b.capabilities) for x in catalog.launches(entry)):
            out.append((f"test_golden[{base}-{launch_id(launch)}]", _golden_run(b, spec, entry, launch)))
    n = examples if examples is not None else default_examples(b)
    out.append((f"test_generated[{spec}]", lambda: check_generated_or_fail(b, spec, n, seed)))
    return out


def _golden_run(backend, spec: str, entry: dict, launch=None):
    def run():
        """Judge one case at one launch with the check engine (``check_case``)."""
        from nvfp4_suite.vectors.check import Status, check_case, replay_command

        one = entry if launch is None else {**entry, "launches": [launch.to_json()]}
        res = check_case(backend, one)
        if res.status is Status.SKIP:
            pytest.skip("; ".join(sorted({why for _, why in res.skipped})))
        if res.status is Status.ERROR:
            raise ConformanceFailure(f"case {res.id} {res.name}: the catalog cannot be judged: {res.error}")
        if res.status is Status.FAIL:
            f = res.failures[0]
            raise ConformanceFailure(
                f"case {res.id} {res.name} [{', '.join(res.flags)}], {f.launch.describe()}:\n{f.text}\n"
                f"replay: {replay_command(res.file, spec, None if launch is None else f.launch)}")
    return run


def default_examples(backend) -> int:
    """Generated problems a pytest run gives ``backend``: fewer for interpreted ones."""
    from nvfp4_suite.kernels.protocol import INTERPRETED_LIMITS

    return INTERPRETED_EXAMPLES if backend.capabilities.limits == INTERPRETED_LIMITS else DEFAULT_EXAMPLES


def check_generated_or_fail(backend, spec: str, examples: int, seed: int = 0) -> None:
    """Run ``examples`` generated problems (``check_generated``, seeded); on a
    failure save the minimised problem (only it) and raise ConformanceFailure
    with its report (``render.failing_lines``: flaky or not, the saved path and
    the replay command)."""
    from nvfp4_suite.vectors.check import check_generated, save_failing
    from nvfp4_suite.vectors.render import failing_lines

    gen = check_generated(backend, examples, seed, shrink_budget_s=getattr(backend, "shrink_budget_s", None))
    if gen.failing is not None:
        saved, why = save_failing(spec, gen.failing)
        raise ConformanceFailure("\n".join(failing_lines(gen.failing, spec, saved, why,
                                                          getattr(backend, "timeout", None))))
    if not gen.n:
        raise ConformanceFailure(f"backend {spec}: no generated problem was checked")
