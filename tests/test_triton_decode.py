"""kernels.triton.decode on the CPU interpreter (or a GPU): golden vectors chosen
one per bug class, and the kernel's own mutants caught."""

import os

import pytest

pytest.importorskip("triton", reason="triton not installed: pip install -e '.[triton]'")

from kernels import get_backend  # noqa: E402
from kernels.triton.decode import MUTANTS  # noqa: E402
from reference.examples import random_problem  # noqa: E402
from vectors import catalog  # noqa: E402
from kernels.protocol import Launch  # noqa: E402
from vectors.check import check_invalid  # noqa: E402
from vectors.harness import run_case  # noqa: E402
from vectors.io import load_case  # noqa: E402

# Small golden cases covering the bug classes the kernel's code paths touch.
GOLDEN = ["first-slots-invalid", "no-valid-slot-rows", "minus-one-slots", "v-scale-swizzle", "stale-tail-1",
          "e4m3-neg-zero", "e4m3-subnormal", "e2m1-every-code", "head-major-hkv2", "qlen3-boundary",
          "splits-5-blocks", "layout-planar", "large-logits", "invalid-duplicate"]


@pytest.fixture(scope="module")
def backend():
    b = get_backend("triton")
    why = b.available()
    if why:
        pytest.skip(f"triton backend unavailable: {why}")
    return b


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_case(backend, name):
    m = catalog.load_manifest()
    c = next(c for c in m["cases"] if c["name"] == name)
    p, _, _ = load_case(catalog.HERE / c["file"], sha256=c["sha256"])
    if c["result"] == "invalid":
        ok, text = check_invalid(p, c["expected_error"], backend)
        assert ok, text
        return
    splits = sorted({x["splits"] for x in c["launches"]})
    for s in sorted({1, 3} & set(splits)) or splits[:1]:
        _, rep = run_case(backend, p, Launch(s))
        assert rep.passed, rep.details()


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_kernel_mutant_is_caught(backend, mutant):
    if os.environ.get("TRITON_INTERPRET") != "1" and mutant == "minus_one":
        pytest.skip("the -1 mutant reads out of bounds: on a GPU it may fault the context")
    b = get_backend(f"kernels.triton.decode:{mutant}")
    p = random_problem(8, reqs=3, q_len=2, num_kv_heads=1, topk=6, seq_lens=[400, 300, 130])
    _, rep = run_case(b, p, Launch(3))
    assert not rep.passed, f"Triton mutant {mutant} passed"
