"""nvfp4_suite.vectors.catalog.bugs: the bug-class registry holds.

Every detectable mutant fails a golden case that carries its own class's
flag, so the flags mean something: numpy mutants are searched over every
carrying case and launch (cheapest case first); Triton (CPU interpreter) and
FlyDSL (simulator) mutants, slow here, run on the carrying launch chosen in
``CATCHING``, where their correct kernel passes. A mutant counts as caught
only by a failed report or a crash of the backend itself (``BackendCrash``),
never by an error of the harness. Every class has a mutant or says why not,
every mutant defined anywhere is registered, and the registry's vocabulary is
the catalog's.
"""

import functools
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvfp4_suite.kernels import get_backend, mutants
from nvfp4_suite.kernels.protocol import Capabilities, Launch
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog import bugs, cases
from nvfp4_suite.vectors.catalog.casefile import load_case
from nvfp4_suite.vectors.engine.check import check_invalid
from nvfp4_suite.vectors.engine.harness import BackendCrash, run_case

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _problem(name: str):
    entry = next(c for c in catalog.load_manifest()["cases"] if c["name"] == name)
    return load_case(catalog.HERE / entry["file"], sha256=entry["sha256"])[0]


def _cost(entry) -> int:
    p = entry["params"]
    return 0 if entry["result"] == "invalid" else p["rows"] * p["num_kv_heads"] * p["TOPK"]


def failure(backend, entry, splits: int = 1, xcds: int = 0) -> str | None:
    """Why ``backend`` fails golden case ``entry`` at this launch, or None when it passes.

    A failed report or the backend's own exception (``BackendCrash``) is a
    failure; any other exception (the harness's) propagates. An invalid-input
    case fails when the backend does not raise the case's ``ProblemError``.
    """
    problem = _problem(entry["name"])
    if entry["result"] == "invalid":
        ok, text = check_invalid(problem, entry["expected_error"], backend)
        return None if ok else text
    try:
        _, rep = run_case(backend, problem, Launch(splits, xcds))
    except BackendCrash as e:
        return f"the kernel crashed: {e}"
    return None if rep.passed else rep.details()


def _launches(backend, entry):
    caps = backend.capabilities
    seen = dict.fromkeys(Launch.from_json(x).as_seen_by(caps) for x in entry["launches"])
    return [(x.splits, x.xcds) for x in seen if x.splits in caps.splits and x.xcds in caps.xcds]


def _registered(spec) -> bugs.Mutant:
    return next(m for m in bugs.MUTANTS if m.spec == spec)


def _detectable(engine):
    return [m.spec for m in bugs.mutants(engine) if not m.undetectable]


# --- the registry is complete and agrees with the catalog ---------------------

def test_every_class_has_a_detectable_mutant_or_a_reason_and_a_golden_case():
    for c in bugs.CLASSES:
        found = [m for m in bugs.mutants(bug=c.name) if not m.undetectable]
        assert bool(found) != bool(c.no_mutant), (
            f"class {c.name}: {len(found)} detectable mutants and no_mutant={c.no_mutant!r}; "
            "exactly one of the two is needed")
        assert bugs.golden_cases(c.name), f"class {c.name}: no golden case carries its flag"


def test_every_mutant_names_a_registered_class_once():
    names = bugs.classes()
    specs = [m.spec for m in bugs.MUTANTS]
    assert len(specs) == len(set(specs)), "a mutant is registered twice"
    for m in bugs.MUTANTS:
        assert m.bug in names, f"mutant {m.spec}: class {m.bug!r} is not registered"


def test_the_catalog_vocabulary_is_the_registry():
    assert cases.FLAGS == {c.name: c.description for c in bugs.CLASSES}
    assert catalog.load_manifest()["notes"] == cases.FLAGS


def test_every_numpy_mutant_in_kernels_mutants_is_registered():
    prefix = "nvfp4_suite.kernels.mutants:"
    defined = {f"{prefix}numpy_{b}" for b in mutants.BUGS} | {f"{prefix}seed_{b}" for b in mutants.ROUNDING_BUGS}
    # Other backend classes there are mutants too, except the two correct kernels.
    defined |= {f"{prefix}{n}" for n, obj in vars(mutants).items()
                if isinstance(obj, type) and hasattr(obj, "available") and n not in ("NumpyKernel", "SeedKernel")}
    assert defined == {m.spec for m in bugs.mutants("numpy")}


def test_every_triton_mutant_is_registered():
    from nvfp4_suite.kernels.triton.decode import MUTANTS

    assert {f"nvfp4_suite.kernels.triton.decode:{n}" for n in MUTANTS} == {m.spec for m in bugs.mutants("triton")}


def test_every_flydsl_mutant_is_registered_once_and_the_simulator_builds_every_one():
    from nvfp4_suite.kernels.flydsl.mutants import MUTANTS
    from nvfp4_suite.kernels.flydsl.sim import backend as SB

    names = [m.spec.split(":")[1].rsplit("_", 1)[0] for m in bugs.mutants("flydsl")]
    assert sorted(names) == sorted(MUTANTS)
    for name in MUTANTS:
        for arch in ("gfx942", "gfx950"):
            assert getattr(SB, f"{name}_{arch}")().mutant == name


def test_every_registered_spec_names_an_object():
    for m in bugs.MUTANTS:
        mod, attr = m.spec.split(":")
        assert callable(getattr(importlib.import_module(mod), attr)), m.spec


# --- every mutant is caught by a case carrying its flag -------------------------

@pytest.mark.parametrize("spec", _detectable("numpy"))
def test_each_numpy_mutant_fails_a_golden_case_carrying_its_flag(spec):
    mutant = _registered(spec)
    for entry in sorted(bugs.golden_cases(mutant.bug), key=_cost):
        backend = get_backend(spec)
        for s, x in _launches(backend, entry) if entry["result"] == "valid" else [(1, 0)]:
            if failure(backend, entry, s, x):
                return
    pytest.fail(f"{spec} passed every golden case flagged {mutant.bug}")


@pytest.mark.parametrize("spec", [m.spec for m in bugs.MUTANTS if m.undetectable])
def test_undetectable_mutants_pass_every_golden_case_of_their_class(spec):
    # The registry's claim, on the catalog (tests/test_mutants.py holds the proofs).
    mutant = _registered(spec)
    backend = get_backend(spec)
    for entry in bugs.golden_cases(mutant.bug):
        for s, x in _launches(backend, entry):
            assert failure(backend, entry, s, x) is None, f"{spec} fails {entry['name']} splits={s}"


# Triton and FlyDSL mutants -> (the correct backend, a golden case carrying the
# mutant's flag, splits): the cheapest catching launch measured on a CPU.
CATCHING = {
    "nvfp4_suite.kernels.triton.decode:causal": ("triton", "stale-tail-1", 1),
    "nvfp4_suite.kernels.triton.decode:v_scale_linear": ("triton", "v-scale-swizzle", 1),
    "nvfp4_suite.kernels.triton.decode:minus_one": ("triton", "minus-one-first-request", 1),
    "nvfp4_suite.kernels.triton.decode:merge_no_rescale": ("triton", "split-rescale", 2),
    "nvfp4_suite.kernels.flydsl.sim.backend:causal_off_by_one_gfx950": ("flydsl-sim-gfx950", "stale-tail-1", 1),
    "nvfp4_suite.kernels.flydsl.sim.backend:v_scale_linear_gfx950": ("flydsl-sim-gfx950", "v-scale-per-token", 1),
    "nvfp4_suite.kernels.flydsl.sim.backend:merge_no_rescale_gfx950": ("flydsl-sim-gfx950", "split-rescale", 2),
    "nvfp4_suite.kernels.flydsl.sim.backend:ticket_not_reset_gfx950": ("flydsl-sim-gfx950", "splits-5-blocks", 2),
    "nvfp4_suite.kernels.flydsl.sim.backend:fnuz_uncorrected_gfx942": ("flydsl-sim-gfx942", "e4m3-neg-zero", 1),
    "nvfp4_suite.kernels.flydsl.sim.backend:ticket_no_wait_gfx950": ("flydsl-sim-gfx950", "splits-5-blocks", 2),
    "nvfp4_suite.kernels.flydsl.sim.backend:partials_no_sc1_gfx950": ("flydsl-sim-gfx950", "splits-5-blocks", 2),
}


def test_every_triton_and_flydsl_mutant_has_a_catching_launch_on_a_case_with_its_flag():
    assert set(CATCHING) == set(_detectable("triton") + _detectable("flydsl"))
    for spec, (_, name, splits) in CATCHING.items():
        mutant = _registered(spec)
        entry = next((c for c in bugs.golden_cases(mutant.bug) if c["name"] == name), None)
        assert entry is not None, f"{spec}: case {name} does not carry flag {mutant.bug}"
        assert entry["result"] == "valid" and splits in {x["splits"] for x in entry["launches"]}, spec


def _usable(spec):
    backend = get_backend(spec)
    why = backend.available()
    if why:
        if os.environ.get("NVFP4_REQUIRE_COMPILE") == "1" and "flydsl" in spec:
            pytest.fail(f"NVFP4_REQUIRE_COMPILE=1 but {why}")
        pytest.skip(f"{spec} unavailable: {why}")
    return backend


def _catches(spec, correct, name, splits):
    entry = next(c for c in catalog.load_manifest()["cases"] if c["name"] == name)
    text = failure(_usable(correct), entry, splits)
    assert text is None, f"the correct {correct} fails {name} splits={splits}:\n{text}"
    assert failure(_usable(spec), entry, splits), f"{spec} passed {name} splits={splits}"


@pytest.mark.parametrize("spec", sorted(CATCHING))
def test_each_triton_and_flydsl_mutant_fails_its_catching_launch(spec):
    if spec == "nvfp4_suite.kernels.triton.decode:minus_one" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the -1 mutant reads out of bounds: on a GPU it may fault the context")
    _catches(spec, *CATCHING[spec])


# By hand (-m thorough): each Triton and FlyDSL mutant against every valid case
# carrying its flag, and the FlyDSL mutants that are bugs on both targets on gfx942 too.
THOROUGH = sorted(CATCHING) + [s.replace("_gfx950", "_gfx942") for s in sorted(CATCHING) if s.endswith("_gfx950")]


@pytest.mark.thorough
@pytest.mark.parametrize("spec", THOROUGH)
def test_triton_and_flydsl_mutants_fail_every_valid_case_carrying_their_flag(spec):
    mutant = _registered(spec if spec in CATCHING else spec.replace("_gfx942", "_gfx950"))
    passed = []
    for entry in bugs.golden_cases(mutant.bug):
        if entry["result"] == "valid":
            backend = _usable(spec)
            if not any(failure(backend, entry, s, x) for s, x in _launches(backend, entry)):
                passed.append(entry["name"])
    assert not passed, f"{spec} passes {passed}, flagged {mutant.bug}"


# --- only the kernel's own crash is a catch ------------------------------------

class Crashing:
    """A backend whose kernel raises on every launch."""

    name = "crashing"
    geometry = None
    capabilities = Capabilities(splits=(1,))

    def available(self):
        return None

    def __call__(self, problem, *, splits=1):
        raise FloatingPointError("kernel fault")


def test_a_crash_of_the_kernel_counts_as_caught():
    entry = bugs.golden_cases("stale-tail")[0]
    assert "the kernel crashed" in failure(Crashing(), entry)
    with pytest.raises(BackendCrash) as e:
        run_case(Crashing(), _problem(entry["name"]))
    assert isinstance(e.value.error, FloatingPointError)


def test_a_harness_error_is_not_counted_as_a_catch(monkeypatch):
    import nvfp4_suite.vectors.engine.harness as H

    def broken(*a, **kw):
        raise RuntimeError("harness comparison broke")

    entry = bugs.golden_cases("head-map")[0]
    mutant = mutants.NumpyKernel("head_mod")
    assert failure(mutant, entry)
    monkeypatch.setattr(H, "compare_with_interval", broken)
    with pytest.raises(RuntimeError, match="harness comparison broke"):
        failure(mutant, entry)


# --- the command --------------------------------------------------------------

def _bugs_cli(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "nvfp4_suite.vectors", "bugs", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, check=True).stdout


def test_the_command_prints_one_engines_mutant_specs_one_a_line():
    assert _bugs_cli("--mutants", "triton").split() == [m.spec for m in bugs.mutants("triton")]


def test_the_command_lists_every_class_with_its_cases_and_mutants():
    out = _bugs_cli()
    for c in bugs.CLASSES:
        assert f"{c.name}: {c.description}" in out
    for m in bugs.MUTANTS:
        assert f"mutant:  {m.spec}" in out


def test_the_contract_table_has_a_row_per_class_naming_each_of_its_mutants():
    text = bugs.contract_section()
    assert _bugs_cli("--contract") == text
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    assert list(rows) == [c.name for c in bugs.CLASSES]
    for m in bugs.MUTANTS:
        assert f"{m.engine} `{m.spec.split(':', 1)[1]}`" in rows[m.bug]

def test_gpu_check_takes_the_triton_mutants_from_the_registry():
    script = (ROOT / "kernels" / "gpu_check.sh").read_text()
    assert "python3 -m nvfp4_suite.vectors bugs --mutants triton" in script
    for m in bugs.mutants("triton"):
        assert m.spec.split(":")[1] not in script, f"gpu_check.sh names {m.spec} itself"
