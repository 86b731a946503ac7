"""The numpy model of a third-party kernel (tests/thirdparty.py) judged inside the contract it declares.

Declared truly (compacted slot lists, its four-tensor layout) it is CONFORMANT
on the golden vectors and on generated problems; with its domain or its layout
misdeclared it is NOT CONFORMANT and the failures point at the cause; each of
its injected bugs is caught by a compacted golden case of the bug's class.

Its arithmetic (exact, P in bf16 before PV) is declared (``thirdparty.GEOMETRY``).
The tests of the domain and the layout use ``ThirdPartyKernel(p_bf16=False)``,
the same kernel with P left in float32, an exact-class kernel, so that what they
judge is the domain or the layout alone.
"""

import dataclasses
import functools
import json

import numpy as np
import pytest
import thirdparty as T
from hypothesis import HealthCheck, given, settings

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference import layout as L
from nvfp4_suite.reference.problem import outside_slot_domain
from nvfp4_suite.vectors import catalog
from nvfp4_suite.vectors.catalog.casefile import load_case
from nvfp4_suite.vectors.catalog.export import export_catalog
from nvfp4_suite.vectors.cli.render import golden_lines
from nvfp4_suite.vectors.engine import check
from nvfp4_suite.vectors.engine.check import check_golden
from nvfp4_suite.vectors.engine.harness import BackendCrash, run_case
from nvfp4_suite.vectors.engine.strategies import launches_for, problems_for

SPLITS = [1, 3]  # the golden launches these tests run (every case has splits 1, most have 3)


@functools.lru_cache(maxsize=None)
def _manifest():
    return catalog.load_manifest()


def _problem(entry):
    return load_case(catalog.HERE / entry["file"], sha256=entry["sha256"])[0]


@functools.lru_cache(maxsize=None)
def _compacted_ids():
    return {c["id"] for c in _manifest()["cases"]
            if c["result"] == "valid" and outside_slot_domain(_problem(c), "compacted") is None}


def _ids(names):
    return {c["id"] for c in _manifest()["cases"] if c["name"] in names}


# --- declared truly --------------------------------------------------------------

def test_declared_truly_the_p_f32_kernel_is_conformant_on_every_case_of_its_domain():
    run = check_golden(T.ThirdPartyKernel(p_bf16=False), splits=SPLITS)
    assert run.ok, run.text()
    inside = _compacted_ids()
    for c in run.cases:
        entry = _manifest()["cases"][c.id]
        if entry["result"] == "invalid" or c.id in inside:
            assert c.status == "PASS", run.text()
        else:
            reasons = {w for _, w in c.skipped if not w.endswith("not selected")}
            assert c.status == "SKIP" and reasons and all(w.startswith("outside slot_lists=compacted: topk[")
                                                          for w in reasons), c
    assert len(inside) >= 32


def test_declared_truly_the_kernel_is_conformant_on_the_golden_vectors():
    run = check_golden(T.ThirdPartyKernel(), splits=SPLITS)
    assert run.ok, run.text()
    assert {c.id for c in run.cases if c.status == "PASS" and c.expected_error is None} == _compacted_ids()


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=__import__("hypothesis").strategies.data())
def test_declared_truly_the_kernel_is_conformant_on_generated_compacted_problems(data):
    kernel = T.ThirdPartyKernel()
    problem = data.draw(problems_for(kernel.capabilities))
    assert outside_slot_domain(problem, "compacted") is None  # the strategies draw inside the declared domain
    launch = data.draw(launches_for(kernel.capabilities))
    _, rep = run_case(kernel, problem, launch)
    assert rep.passed, rep.details()


# --- misdeclared -------------------------------------------------------------------

DOMAIN_SUBSET = ("first-slots-invalid", "minus-one-slots", "v-scale-swizzle", "stale-tail-1", "head-map-hkv3")


def test_misdeclared_domain_fails_exactly_the_cases_outside_the_true_domain():
    cases = _ids(DOMAIN_SUBSET) | _ids({f"{n}-compacted" for n in DOMAIN_SUBSET})
    run = check_golden(T.ThirdPartyKernel(p_bf16=False, slot_lists="any"), cases=cases, splits=[1])
    failed = {c.id for c in run.cases if c.status == "FAIL"}
    assert not run.ok
    # The cause is the input domain: every failing case is outside the compacted domain,
    # and every compacted twin passes.
    assert failed and failed == cases - _compacted_ids(), run.text()
    # And the report says so first, above the cases' own classes.
    lines = golden_lines(run, "thirdparty")
    passing = sum(len(c.ran) for c in run.cases if c.status == "PASS")
    assert lines[1] == ("  shared by the failures: every failing launch (5) has a slot list outside the "
                        f"compacted domain (reference/CONTRACT.md 3.1); of the {passing} passing launches, "
                        "0 have it"), lines[:4]


def test_outside_domain_cases_are_run_as_information_with_outside_domain():
    kernel = T.ThirdPartyKernel(p_bf16=False)
    run = check_golden(kernel, cases=_ids(DOMAIN_SUBSET), splits=[1], outside_domain=True)
    assert run.judged == 0 and all(c.status == "SKIP" and c.outside for c in run.cases)
    text = "\n".join(golden_lines(run, "thirdparty"))
    assert "outside the domain, information only: splits=1" in text
    seen = [s for c in run.cases for _, s in c.outside]
    assert any("NaN" in s or "garbage" in s or "crash" in s for s in seen), seen
    assert "FAIL" not in text


SWIZZLED = dataclasses.replace(L.SEPARATE, name="separate-swizzled", v_scale_order="swizzled")
HEAD_MAJOR = dataclasses.replace(
    L.SEPARATE, name="head-major",
    **{p: dataclasses.replace(getattr(L.SEPARATE, p), token=L.WIDTH[p], head=128 * L.WIDTH[p]) for p in L.PARTS})


@pytest.mark.parametrize("layout, must_fail, may_pass", [
    # V scales handed over swizzled: the cases whose V scales vary within 4 tokens fail.
    # (head-map's V scales are one byte per KV head: the same in either order.)
    (SWIZZLED, {"v-scale-swizzle-compacted", "v-scale-per-token-compacted"}, {"head-map-hkv3-compacted"}),
    # Token and head strides exchanged: only Hkv > 1 reads other rows.
    (HEAD_MAJOR, {"head-map-hkv3-compacted", "head-major-hkv2-compacted"}, {"stale-tail-1-compacted"}),
])
def test_misdeclared_layout_fails_the_cases_that_tell_the_layouts_apart(layout, must_fail, may_pass):
    run = check_golden(T.ThirdPartyKernel(p_bf16=False, layout=layout), cases=_ids(must_fail | may_pass), splits=[1])
    status = {c.name: c.status for c in run.cases}
    assert all(status[n] == "FAIL" for n in must_fail), run.text()
    assert all(status[n] == "PASS" for n in may_pass), run.text()


def test_no_declared_layout_is_a_crash_that_says_so():
    run = check_golden(T.ThirdPartyKernel(p_bf16=False, layout=None), cases=_ids({"stale-tail-1-compacted"}),
                       splits=[1])
    assert not run.ok and "no cache tensors received" in run.text()


# --- injected bugs -------------------------------------------------------------------

CAUGHT_BY = {
    "v_scale_swizzled": "v-scale-swizzle", "no_causal_cut": "stale-tail", "walk_one_short": "stale-tail",
    "merge_no_rescale": "split-rescale", "head_mod": "head-map", "walk_all_slots": "minus-one",
    "nibble_swap": "nibble-order",
}


def test_every_injected_bug_has_a_class():
    assert set(CAUGHT_BY) == set(T.BUGS)


@pytest.mark.parametrize("bug", sorted(T.BUGS))
def test_each_injected_bug_fails_a_compacted_case_of_its_class(bug):
    flag = CAUGHT_BY[bug]
    inside = _compacted_ids()
    entries = [c for c in _manifest()["cases"] if c["id"] in inside and flag in c["flags"]]
    assert entries
    kernel = T.ThirdPartyKernel(bug)
    for entry in entries:
        for launch in catalog.launches(entry):
            try:
                _, rep = run_case(kernel, _problem(entry), launch.as_seen_by(kernel.capabilities))
            except BackendCrash:
                return
            if not rep.passed:
                return
    pytest.fail(f"bug {bug} passed every compacted case flagged {flag}")


# --- the exported catalog, read with numpy alone ----------------------------------------

def _bf16(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


class _Inputs:
    """The kernel's inputs as read from an exported file: plain attributes, no suite object."""

    def __init__(self, npz):
        for k in ("q", "topk", "block_table", "seq_lens"):
            setattr(self, k, npz[k])
        for k in ("num_kv_heads", "q_len", "sm_scale", "k_global_scale", "v_global_scale"):
            setattr(self, k, npz[k].item())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    export_catalog(L.SEPARATE, folder)
    return folder


@pytest.mark.parametrize("p_bf16", [False, True])
def test_the_exported_catalog_read_with_numpy_alone_gives_the_suites_verdicts(exported, p_bf16):
    # The reader: only numpy, json and the format of CONTRACT.md section 10.4.
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["layout"]["v_scale"]["tensor"] == "v_scales" and manifest["layout"]["v_scale_order"] == "linear"
    verdicts = {}
    for case in manifest["cases"]:
        if "compacted" not in case["slot_lists"]:
            continue
        with np.load(exported / case["file"], allow_pickle=False) as npz:
            inputs = _Inputs(npz)
            cache = {t: npz[f"cache_{t}"] for t in manifest["tensors"]}
            lo, hi = _bf16(npz["expect_exact_lo"]), _bf16(npz["expect_exact_hi"])
        for s in sorted({x["splits"] for x in case["launches"]} & set(SPLITS)):
            got = T.run(cache, inputs, s, p_bf16=p_bf16)
            verdicts[case["name"], s] = bool(np.all((got >= lo) & (got <= hi)))
    # The suite's verdicts on the canonical catalog, judged as the exact class (the stored interval).
    kernel = T.ThirdPartyKernel(p_bf16=p_bf16, geometry=None)
    suite = {}
    for entry in _manifest()["cases"]:
        if entry["id"] not in _compacted_ids():
            continue
        for s in sorted({x["splits"] for x in entry["launches"]} & set(SPLITS)):
            res = check.check_case(kernel, {**entry, "launches": [Launch(s).to_json()]})
            suite[entry["name"], s] = res.status == "PASS"
    assert verdicts == suite
    assert len(verdicts) >= 60
    # The P-in-float32 kernel passes everything; the P-in-bf16 one is outside the exact class somewhere.
    assert all(verdicts.values()) if not p_bf16 else not all(verdicts.values())
