"""The suite as a pytest plugin: ``pytest --nvfp4-backend SPEC`` in any project.

Registered through the ``pytest11`` entry point, so installing the suite is
enough. With no ``--nvfp4-backend`` it adds nothing. With it, each SPEC (a
registered backend name or ``module.path:attr``, resolved from the directory
pytest was started in) is checked as ``python -m nvfp4_suite.vectors check``
checks it: the same ``CheckConfig`` fields and defaults, the same catalogs
(the built-in one, then the project catalog: ``--nvfp4-catalog`` or the
default folder when it exists), the same engine. pytest gets:

- one test per golden case and launch, ``test_golden[SPEC-008-stale-tail-1-splits1]``
  (a project catalog's case: ``test_golden[SPEC-project:000-name-splits1]``;
  an invalid-input case has one test, ``...-invalid``): a launch outside the
  backend's capabilities is a skip with the reason; a failure prints the
  report and the ``replay`` command of that case and launch;
- one test of generated problems, ``test_generated[SPEC]``: on failure the
  minimised problem is saved (``.repro/``, or ``$NVFP4_REPRO_DIR``) and its
  ``replay`` command printed;
- when golden tests failed, the cause summary of each backend's golden
  failures at the end of the session, as ``check`` prints it above its
  failing cases (``blame.summary_lines``: the mutant whose outputs equal the
  kernel's first), over every golden test of the session: under pytest-xdist
  each worker hands its judged cases to the controller when it finishes;
- a verdict line per backend at the end of the session
  (``nvfp4_suite.vectors.engine.verdict.decide`` over its tests). A backend
  that cannot be loaded or run here, or that judged nothing, ends the
  session with NO VERDICT's exit status, 2, as ``check`` does.

JUnit output is pytest's own ``--junitxml``; ``-k stale-tail`` selects by case name.

``--nvfp4-shard K/N`` keeps share K of N, the share ``check --shard K/N``
judges (``config.owns``): the golden tests of that shard's launches, and
``test_generated`` judging that shard's generated problems; N pytest
processes (CI jobs, machines) with K = 1..N together run every test once.
Under pytest-xdist the tests of one session are already spread over its
workers, test by test, with no option: ``--nvfp4-shard`` is for separate
sessions. The generated problems are one test, so one worker runs them;
``--nvfp4-shard`` divides them between sessions.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser):
    from nvfp4_suite.vectors.engine.references import CHOICES

    g = parser.getgroup("nvfp4", "NVFP4 sparse decode conformance (nvfp4_suite)")
    g.addoption("--nvfp4-backend", action="append", default=[], metavar="SPEC",
                help="check this backend: a registered name or module.path:attr (repeatable); "
                     "adds its golden cases and generated problems as tests")
    g.addoption("--nvfp4-examples", type=int, default=None, metavar="N",
                help="generated problems per backend (default: check's, fewer for a backend that declares "
                     "interpreted: nvfp4_suite.vectors.engine.config.default_examples)")
    g.addoption("--nvfp4-seed", type=int, default=0, metavar="N", help="seed of the generated problems (default 0)")
    g.addoption("--nvfp4-arithmetic", default=None, metavar="NAME",
                help="judge the backend in this arithmetic, not the one it declares (as check --arithmetic)")
    g.addoption("--nvfp4-catalog", action="append", default=None, metavar="DIR",
                help="also run this project catalog's cases (repeatable); default: $NVFP4_CATALOG or "
                     "./nvfp4-catalog when that folder exists (as check --catalog)")
    g.addoption("--nvfp4-isolate", action="store_true",
                help="run each launch in a worker process (nvfp4_suite.vectors.engine.isolate): a crash, a hang, a "
                     "GPU fault or an OOM kill fails that test only")
    g.addoption("--nvfp4-timeout", type=float, default=None, metavar="S",
                help="seconds one launch may take in its worker (implies --nvfp4-isolate)")
    g.addoption("--nvfp4-shard", type=_shard, default=None, metavar="K/N",
                help="only share K of N of the golden launches and generated problems, as check --shard K/N "
                     "(for N separate sessions: CI jobs, machines)")
    g.addoption("--nvfp4-references", choices=CHOICES, default="auto",
                help="where the references run, as check --references: host (numpy), device (torch on the GPU), "
                     "auto (the GPU when the backend runs on one and torch sees it; default)")


def _shard(text: str) -> tuple[int, int]:
    """``--nvfp4-shard K/N`` as ``(K, N)``; pytest reports the ValueError naming ``text``."""
    from nvfp4_suite.vectors.engine.config import parse_shard

    return parse_shard(text)


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
            config = config_for(cfg, spec)
            for name, run in spec_tests(config, cfg.add_cleanup):
                item = ConformanceItem.from_parent(self, name=name, run=run)
                item.user_properties.append(("nvfp4_backend", spec))
                items.append(item)
        return items


def config_for(cfg, spec: str):
    """The engine's ``CheckConfig`` for ``spec`` from pytest's options: the same
    fields and defaults as ``check``'s (golden cases, catalogs, examples,
    seed, arithmetic, isolation)."""
    from nvfp4_suite.vectors.engine.config import CheckConfig

    catalogs = cfg.getoption("nvfp4_catalog")
    return CheckConfig(backend=spec, arithmetic=cfg.getoption("nvfp4_arithmetic"),
                       catalogs=tuple(catalogs) if catalogs else None, examples=cfg.getoption("nvfp4_examples"),
                       seed=cfg.getoption("nvfp4_seed"), isolate=cfg.getoption("nvfp4_isolate"),
                       timeout=cfg.getoption("nvfp4_timeout"), shard=cfg.getoption("nvfp4_shard"),
                       references=cfg.getoption("nvfp4_references"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    # tryfirst: before -k and -m deselect, so that they apply to these items too.
    if config.getoption("nvfp4_backend"):
        tests = ConformanceTests.from_parent(session, name="nvfp4_suite", nodeid="nvfp4_suite")
        found = tests.collect()
        # Reported like any collected file's items (the "collected N items" count).
        session.ihook.pytest_collectreport(report=pytest.CollectReport(tests.nodeid, "passed", None, found))
        items.extend(found)


def pytest_runtest_logreport(report):
    """Count each conformance test's outcome per backend, for the session's verdicts."""
    spec = dict(report.user_properties).get("nvfp4_backend")
    if spec is None or report.when not in ("call", "setup"):
        return
    if report.when == "setup" and report.passed:
        return  # the call's report follows
    tally = _TALLY.setdefault(spec, {"judged": 0, "failed": 0})
    tally["judged"] += report.passed or report.failed
    tally["failed"] += report.failed


# Per backend spec: {"judged": tests passed or failed, "failed": tests failed}.
_TALLY: dict[str, dict[str, Any]] = {}


# Per (backend spec, catalog label): the subject's arithmetic and every golden
# CaseResult judged, for the session's cause summary.
_GOLDEN: dict[tuple[str, Any], tuple[Any, list]] = {}


# The key of a pytest-xdist worker's output under which its judged golden cases travel.
WORKER_KEY = "nvfp4_golden"


def _hand_to_controller(session) -> None:
    """In a pytest-xdist worker: hand this worker's judged golden cases to the
    controller (``pytest_testnodedown``), which prints the session's cause summary."""
    session.config.workeroutput[WORKER_KEY] = pickle.dumps(_GOLDEN)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: fold a finished worker's golden cases into this
    process's, so the cause summary covers the whole session. The worker is
    this session's own process, running this installed suite: its pickle is
    data this code wrote."""
    data = getattr(node, "workeroutput", {}).get(WORKER_KEY)
    if data is None:
        return
    for key, (geometry, cases) in pickle.loads(data).items():
        _GOLDEN.setdefault(key, (geometry, []))[1].extend(cases)


def pytest_terminal_summary(terminalreporter):
    """The cause summary of each backend's golden failures, then one verdict
    line per backend (``nvfp4_suite.vectors.engine.verdict.decide``)."""
    for line in _cause_lines() + _verdict_lines():
        terminalreporter.write_line(line)


def _cause_lines() -> list[str]:
    """``check``'s cause summary (``blame.summary_lines`` with its diagnosis)
    of each backend's golden tests that failed, per catalog."""
    from nvfp4_suite.vectors.engine import blame
    from nvfp4_suite.vectors.engine.check import GoldenRun

    out = []
    for (spec, label), (geometry, cases) in _GOLDEN.items():
        # Catalog order whichever process judged each launch (ties in the summary go to the first case).
        run = GoldenRun(sorted(cases, key=lambda c: (c.id, [launch_id(x) for x in c.ran])))
        if not any(c.failures for c in cases):
            continue
        run.diagnosis = blame.diagnose_golden(run, geometry)
        out.append(f"nvfp4: cause of backend {spec}'s golden failures" + (f" (catalog {label})" if label else "")
                   + ":")
        out += blame.summary_lines(run.outcomes(), run.diagnosis)
    return out


def _verdict_lines() -> list[str]:
    from nvfp4_suite.vectors.engine.verdict import decide

    return [f"nvfp4: {decide(**t).head()}: backend {spec}; {t['judged']} tests judged, {t['failed']} failed"
            for spec, t in _TALLY.items()]


def pytest_sessionfinish(session, exitstatus):
    """A session whose conformance tests judged nothing for a backend, and
    failed nothing, ends with NO VERDICT's exit status (2), as ``check`` does.
    A pytest-xdist worker first hands its golden cases to the controller."""
    from nvfp4_suite.vectors.engine.verdict import decide

    if hasattr(session.config, "workeroutput"):
        _hand_to_controller(session)
    if exitstatus == 0 and _TALLY and any(decide(**t).exit_code == 2 for t in _TALLY.values()):
        session.exitstatus = 2


def launch_id(launch) -> str:
    """``splits2``, ``splits2-xcds8``, ``splits1-order-reverse``: a launch in a test id."""
    out = f"splits{launch.splits}"
    if launch.xcds:
        out += f"-xcds{launch.xcds}"
    if launch.order is not None:
        out += f"-order-{launch.order}"
    return out


def spec_tests(config, cleanup=None) -> list:
    """``(test name, run)`` pairs for ``config`` (a ``CheckConfig`` naming one
    backend): each golden case of each catalog the check runs
    (``config.catalogs_for``: the built-in one, then the project's) at each of
    its launches as the backend receives them (one test for an invalid-input
    case), then the generated problems. A backend that cannot load or run
    ends the session as ``check`` ends: NO VERDICT, exit status 2, with the
    reason. The subject's worker process, if isolated, is closed by ``cleanup``.
    ``config.shard``: only that share's launches and generated problems
    (``check.sharded_launches``, as ``check --shard``)."""
    from nvfp4_suite.vectors import catalog
    from nvfp4_suite.vectors.cli.runner import NO_VERDICT_ERRORS
    from nvfp4_suite.vectors.engine.check import case_launches, sharded_launches
    from nvfp4_suite.vectors.engine.config import catalogs_for, examples_for, load_subject

    spec = config.backend
    try:
        why = config.problems()
        if why:
            raise ValueError(why)
        subject = load_subject(config)
    except (*NO_VERDICT_ERRORS, ValueError) as e:
        pytest.exit(f"NO VERDICT for --nvfp4-backend {spec}: {e}", returncode=2)
    if cleanup is not None:
        cleanup(subject.close)
    out = []
    for root, _ in catalogs_for(config):
        label = catalog.label(root)
        try:
            cases = catalog.load_manifest(path=root / "manifest.json")["cases"]
        except catalog.CaseFileError as e:
            pytest.exit(f"NO VERDICT for --nvfp4-backend {spec}: catalog {label or 'built-in'}: {e}", returncode=2)
        for entry, mine in zip(cases, sharded_launches(subject.capabilities, cases, config.shard)):
            base = f"{spec}-{entry['id']:03d}-{entry['name']}" if label is None else \
                f"{spec}-{label}:{entry['id']:03d}-{entry['name']}"
            launches = case_launches(subject.capabilities, entry) if mine is None else mine
            if entry.get("expected_error"):
                if launches:  # its one launch, the refusal, is this shard's
                    out.append((f"test_golden[{base}-invalid]", _golden_run(subject, entry, root)))
                continue
            for launch in launches:
                out.append((f"test_golden[{base}-{launch_id(launch)}]", _golden_run(subject, entry, root, launch)))
    n = examples_for(config, subject)
    if n:
        out.append((f"test_generated[{spec}]",
                    lambda: check_generated_or_fail(subject, n, config.seed, config.shard)))
    return out


def _golden_run(subject, entry: dict, root, launch=None):
    def run():
        """Judge one case at one launch with the check engine (``check_case``)."""
        from nvfp4_suite.vectors.cli.render import replay_command
        from nvfp4_suite.vectors.engine.check import check_case
        from nvfp4_suite.vectors.engine.verdict import Status

        one = entry if launch is None else {**entry, "launches": [launch.to_json()]}
        res = check_case(subject, one, root=root, references=subject.references)
        _GOLDEN.setdefault((subject.spec, res.catalog), (subject.geometry, []))[1].append(res)
        if res.status is Status.SKIP:
            pytest.skip("; ".join(sorted({why for _, why in res.skipped})))
        if res.status is Status.ERROR:
            raise ConformanceFailure(f"case {res.tag.strip()}: the catalog cannot be judged: {res.error}")
        if res.status is Status.FAIL:
            f = res.failures[0]
            again = replay_command(res.file, subject.spec, None if launch is None else f.launch, subject.timeout)
            raise ConformanceFailure(
                f"case {res.tag.strip()} [{', '.join(res.flags)}], {f.launch.describe()}:\n{f.text}\nreplay: {again}")
    return run


def check_generated_or_fail(subject, examples: int, seed: int = 0, shard: tuple[int, int] | None = None) -> None:
    """Run ``examples`` generated problems (``check_generated``, seeded; ``shard``
    ``(K, N)``: only that share of them) on
    ``subject`` (a ``config.Subject``); on a failure save the minimised problem
    (only it) and raise ConformanceFailure with its report
    (``render.failing_lines``: flaky or not, the saved path and the replay command)."""
    from nvfp4_suite.vectors.cli.render import failing_lines
    from nvfp4_suite.vectors.engine.check import check_generated, save_failing

    gen = check_generated(subject, examples, seed, shrink_budget_s=subject.shrink_budget_s, shard=shard,
                          references=subject.references)
    if gen.failing is not None:
        saved, why = save_failing(subject.spec, gen.failing)
        raise ConformanceFailure("\n".join(failing_lines(gen.failing, subject.spec, saved, why, subject.timeout)))
    if not gen.n and shard is not None:
        pytest.skip(f"shard {shard[0]}/{shard[1]} owns none of the {examples} generated problems")
    if not gen.n:
        raise ConformanceFailure(f"backend {subject.spec}: no generated problem was checked")
