"""What a check is asked to do (``CheckConfig``) and the backend as it judges it (``Subject``).

The command line and the pytest plugin each build one ``CheckConfig`` from
their own options, with the same defaults; everything after that (which
backend, in which arithmetic, isolated or not, which catalogs, how many
generated problems) is decided here, once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import AUTO_SPLITS, DEFAULT_EXAMPLES, INTERPRETED_EXAMPLES, SHRINK_BUDGET_TIMEOUTS
from nvfp4_suite.reference import Geometry
from nvfp4_suite.reference.arithmetic import arithmetic_name, parse_arithmetic
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.engine import interrupts, references
from nvfp4_suite.vectors.engine.harness import shown
from nvfp4_suite.vectors.engine.verdict import SetupError

# The backends ``check`` picks from when none is named, best first.
PREFERENCE = ("flydsl", "triton", "torch", "emulate")
SHAPES = ("small", "serving")


@dataclasses.dataclass(frozen=True)
class CheckConfig:
    """One check: ``backend`` (a registered name or ``module.path:attr``; None:
    the first available of ``PREFERENCE``), ``arithmetic`` (a name
    ``parse_arithmetic`` reads, judging the backend in it instead of its
    declared one; None: declared), ``catalogs`` (project catalog folders run
    after the built-in one; None: the default project folder when it exists),
    ``golden`` (run the catalogs), ``examples`` (generated problems; None: the
    backend's default, ``default_examples``), ``seed``, ``splits`` (only these
    split counts; None: all declared), ``isolate`` and ``timeout`` (each launch
    in a worker process, with this launch timeout in seconds; None: the
    backend's ``launch_timeout_s``), ``outside_domain`` (also run golden
    cases outside the declared input domain, as information), ``minimise``
    (shrink a failing generated problem before reporting it; the judging
    benchmark, which only times, does not), ``shape``
    (``small`` or ``serving``: serving-size generated problems instead of the
    catalogs and small ones), ``json`` (where the JSON report goes, or None),
    ``shard`` (``(K, N)``: judge only share K of N of the golden launches and
    generated problems, ``owns``; None: all of them), ``references`` (where
    the references of a small-shape check run: ``auto``, ``host`` or
    ``device``, ``nvfp4_suite.vectors.engine.references.choose``)."""

    backend: str | None = None
    arithmetic: str | None = None
    catalogs: tuple[str, ...] | None = None
    golden: bool = True
    examples: int | None = None
    seed: int = 0
    splits: tuple[int, ...] | None = None
    isolate: bool = False
    timeout: float | None = None
    outside_domain: bool = False
    minimise: bool = True
    shape: str = "small"
    json: str | None = None
    shard: tuple[int, int] | None = None
    references: str = "auto"

    def problems(self) -> str | None:
        """Why this configuration can judge nothing, or None."""
        if self.examples is not None and self.examples < 0:
            return f"--examples {self.examples}: must be >= 0"
        if self.shape not in SHAPES:
            return f"shape {self.shape!r}: must be one of {SHAPES}"
        if self.timeout is not None and not self.timeout > 0:
            return f"--timeout {self.timeout:g}: must be > 0 seconds"
        if self.shape == "small" and not self.golden and self.examples == 0:
            return "nothing to check: --no-golden with --examples 0"
        if self.shape == "serving" and self.examples == 0:
            return "--shape serving checks generated problems: give --examples > 0"
        if self.references not in references.CHOICES:
            return f"--references {self.references!r}: must be one of {', '.join(references.CHOICES)}"
        if self.shape == "serving" and self.references != "auto":
            return (f"--references {self.references}: serving-size references always run in torch, on the GPU "
                    "when torch sees one; --references chooses for --shape small")
        if self.shard is not None:
            k, n = self.shard
            if not (n >= 1 and 1 <= k <= n):
                return f"--shard {k}/{n}: must be K/N with 1 <= K <= N"
            if self.shape != "small":
                return f"--shard {k}/{n}: --shape serving is not sharded; shard a --shape small campaign"
        return None


def parse_shard(text: str) -> tuple[int, int]:
    """``(K, N)`` of ``"K/N"`` (1 <= K <= N); ValueError naming ``text`` otherwise."""
    k, sep, n = text.partition("/")
    try:
        got = (int(k), int(n)) if sep else None
    except ValueError:
        got = None
    if got is None or not (got[1] >= 1 and 1 <= got[0] <= got[1]):
        raise ValueError(f"shard {text!r}: give K/N with 1 <= K <= N, e.g. 2/7")
    return got


def owns(shard: tuple[int, int] | None, index: int) -> bool:
    """Whether shard ``(K, N)`` judges the item at ``index`` (int, from 0) of an
    ordered list every shard computes alike (a catalog's launches, the
    generated problems in draw order): round robin, ``index % N == K - 1``,
    so the shares are disjoint and their union is the whole list. None: the
    unsharded run, which owns everything."""
    return shard is None or index % shard[1] == shard[0] - 1


def default_examples(capabilities) -> int:
    """Generated problems a check draws when not told: ``INTERPRETED_EXAMPLES``
    for a backend that declares ``interpreted``, else ``DEFAULT_EXAMPLES``."""
    return INTERPRETED_EXAMPLES if capabilities.interpreted else DEFAULT_EXAMPLES


class Subject:
    """A backend as the engine judges it, itself a backend of the protocol:
    ``spec`` as given, ``name`` and ``capabilities`` the backend's,
    ``geometry`` the arithmetic it is judged in (its declared one, or the one
    the check names), for an isolated run ``timeout`` (seconds a launch may
    take in its worker process; None: run in this process), and
    ``references``, where the references of its launches run
    (``nvfp4_suite.vectors.engine.references.References``). Calls go to the
    backend, or to its worker process when isolated."""

    def __init__(self, spec: str, backend, geometry, timeout: float | None = None,
                 refs: references.References = references.HOST):
        from nvfp4_suite.vectors.engine.isolate import Worker

        self.spec = spec
        self.backend = backend
        self.name = backend.name
        self.capabilities = backend.capabilities
        self.geometry = geometry
        self.timeout = timeout
        self.references = refs
        self._worker = None if timeout is None else Worker(spec, timeout)

    @property
    def shrink_budget_s(self) -> float | None:
        """Seconds minimising a failure may take: the backend's declared
        budget, capped for an isolated run at ``SHRINK_BUDGET_TIMEOUTS``
        launch timeouts (every try may meet the same hang); None: no limit."""
        budgets = [b for b in (self.capabilities.shrink_budget_s,
                               None if self.timeout is None else SHRINK_BUDGET_TIMEOUTS * self.timeout)
                   if b is not None]
        return min(budgets) if budgets else None

    def available(self) -> str | None:
        """None: ``load_subject`` asked the backend's own ``available()`` before making this."""
        return None

    def __call__(self, problem, **launch):
        """The backend's output for one launch, from its worker process when isolated."""
        if self._worker is not None:
            return self._worker(problem, **launch)
        return self.backend(problem, **launch)

    def close(self) -> None:
        """End the worker process, if any."""
        if self._worker is not None:
            self._worker.close()


def unavailable(backend) -> str | None:
    """None when ``backend.available()`` says it runs here, otherwise why not:
    its reason, or what went wrong asking (``available()`` raised, exited, or
    returned something that is neither None nor a non-empty reason). A backend
    that cannot run here is a setup error (exit 2), never a kernel verdict."""
    try:
        why = backend.available()
    except KeyboardInterrupt as e:
        if interrupts.from_user(e):
            raise
        return "available() raised KeyboardInterrupt"
    except BaseException as e:  # noqa: BLE001 - any failure to answer is "cannot run here"
        return f"available() raised {type(e).__name__}: {e}"
    if why is None:
        return None
    if not isinstance(why, str) or not why.strip():
        return f"available() returned {why!r}, neither None (usable) nor a reason"
    return why


def pick_backend(spec: str | None):
    """``(spec, backend)``: the backend for ``spec``, or the best available one
    (and its registered name) when None. Raises SetupError with the reasons."""
    if spec is None:
        reasons = []
        for name in PREFERENCE:
            try:
                b = kernels.get_backend(name)
            except kernels.BackendError as e:
                reasons.append(f"{name}: {e}")
                continue
            why = unavailable(b)
            if why is None:
                return name, b
            reasons.append(f"{name}: {why}")
        raise SetupError("no backend available:\n  " + "\n  ".join(reasons))
    try:
        b = kernels.get_backend(spec)
    except kernels.BackendError as e:
        raise SetupError(str(e)) from e
    why = unavailable(b)
    if why is not None:
        raise SetupError(f"backend {b.name!r} is not available here: {why}")
    return spec, b


def load_subject(config: CheckConfig) -> Subject:
    """The ``Subject`` ``config`` asks for: its backend loaded and asked whether
    it runs here, in the arithmetic ``config.arithmetic`` names (else the one
    it declares), isolated when ``config.isolate`` or ``config.timeout`` says
    so, its references where ``config.references`` chooses. Raises
    SetupError (NO VERDICT) for anything that stops a check before it starts,
    naming it."""
    spec, backend = pick_backend(config.backend)
    geometry = backend.geometry
    if config.arithmetic is not None:
        try:
            geometry = parse_arithmetic(config.arithmetic)
        except ValueError as e:
            raise SetupError(str(e)) from e
    caps = backend.capabilities
    if caps.splits == (AUTO_SPLITS,) and isinstance(geometry, Geometry):
        raise SetupError(f"backend {shown(backend.name)} chooses its own split count (splits=('auto',)), but "
                         f"arithmetic {arithmetic_name(geometry)} divides the slots by a split count it needs to "
                         "know: judge it in an exact class (exact, exact-p-bf16)")
    if config.splits:
        bad = [s for s in config.splits if s not in caps.splits]
        if bad:
            raise SetupError(f"--splits {bad}: backend {shown(backend.name)} supports {list(caps.splits)}")
    timeout = None
    if config.isolate or config.timeout is not None:
        timeout = float(config.timeout if config.timeout is not None else caps.launch_timeout_s)
    try:
        refs = references.choose(config.references, caps)
    except ValueError as e:
        raise SetupError(str(e)) from e
    return Subject(spec, backend, geometry, timeout, refs)


def examples_for(config: CheckConfig, subject: Subject) -> int:
    """The generated problems ``config`` draws for ``subject``."""
    return config.examples if config.examples is not None else default_examples(subject.capabilities)


def catalogs_for(config: CheckConfig) -> list[tuple[Path, str]]:
    """``(folder, why)`` of each catalog the check runs, in order, each once:
    the built-in one, then every ``config.catalogs`` folder, or with none
    given the default project catalog folder when it exists (``why``: how it
    was chosen); empty when ``config.golden`` is off or the shape is serving."""
    if not config.golden or config.shape != "small":
        return []
    if config.catalogs:
        extra = [(catalog.resolve(g), f"--catalog {g}") for g in config.catalogs]
    elif catalog.project_root().is_dir():
        why = (f"{catalog.project_root()}, run because it exists: the default project catalog, "
               f"${catalog.PROJECT_ENV} or ./{catalog.PROJECT_DEFAULT}; --catalog DIR chooses others")
        extra = [(catalog.project_root(), why)]
    else:
        extra = []
    out, seen = [], set()
    for root, why in [(catalog.HERE, "built-in")] + extra:
        key = catalog.HERE if catalog.is_builtin(root) else root.resolve()
        if key not in seen:
            seen.add(key)
            out.append((root, why))
    return out
