"""nvfp4_suite.kernels.triton.decode on the CPU interpreter (or a GPU): golden vectors chosen
one per bug class, and the kernel's own mutants caught."""

import os

import numpy as np
import pytest

pytest.importorskip("triton", reason="triton not installed: pip install -e '.[triton]'")

from nvfp4_suite.kernels import get_backend  # noqa: E402
from nvfp4_suite.kernels.protocol import Launch  # noqa: E402
from nvfp4_suite.kernels.triton.decode import _DEQ_PTX_TEXT as DEQ_PTX_TEXT  # noqa: E402
from nvfp4_suite.kernels.triton.decode import MUTANTS  # noqa: E402
from nvfp4_suite.reference.examples import random_problem  # noqa: E402
from nvfp4_suite.reference.formats import bf16_round  # noqa: E402
from nvfp4_suite.vectors import catalog  # noqa: E402
from nvfp4_suite.vectors.catalog.casefile import load_case  # noqa: E402
from nvfp4_suite.vectors.engine.check import check_invalid  # noqa: E402
from nvfp4_suite.vectors.engine.harness import run_case  # noqa: E402

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
    b = get_backend(f"nvfp4_suite.kernels.triton.decode:{mutant}")
    p = random_problem(8, reqs=3, q_len=2, num_kv_heads=1, topk=6, seq_lens=[400, 300, 130])
    _, rep = run_case(b, p, Launch(3))
    assert not rep.passed, f"Triton mutant {mutant} passed"


def _run_deq_ptx(data: np.ndarray, scales: np.ndarray):
    """Execute ``_DEQ_PTX`` on uint32 registers: data [n] (four bytes each), scales
    [n, 2] (bf16x2 each); returns the four output registers [n, 4]. Integer
    instructions wrap at 32 bits; ``mul.rn.bf16x2`` multiplies each bf16 lane
    pair exactly and rounds to nearest even."""
    from nvfp4_suite.reference.formats import bf16_round

    regs = {"$4": data.astype(np.uint64), "$5": scales[:, 0].astype(np.uint64), "$6": scales[:, 1].astype(np.uint64)}

    def val(x):
        return regs[x] if x in regs else np.uint64(int(x, 0))

    def bf16_lanes(x):
        return [((x >> np.uint64(16 * i)) & np.uint64(0xFFFF)).astype(np.uint32) << np.uint32(16) for i in (0, 1)]

    for line in DEQ_PTX_TEXT.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}." and not line.startswith(("prmt", "and", "mul")):
            continue
        op, args = line.split(None, 1)
        d, *src = [a.strip() for a in args.split(",")]
        if op == "prmt.b32":
            a, b, sel = val(src[0]), val(src[1]), int(src[2], 0)
            pool = [(a >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)] + \
                   [(b >> np.uint64(8 * i)) & np.uint64(0xFF) for i in range(4)]
            out = np.zeros_like(a)
            for i in range(4):
                nib = (sel >> (4 * i)) & 0xF
                assert nib < 8, "sign-replicating selectors are not modelled"
                out |= pool[nib] << np.uint64(8 * i)
            regs[d] = out
        elif op == "and.b32":
            regs[d] = val(src[0]) & val(src[1])
        elif op == "mul.lo.u32":
            regs[d] = (val(src[0]) * val(src[1])) & np.uint64(0xFFFFFFFF)
        elif op == "mul.rn.bf16x2":
            lanes = []
            for x, y in zip(bf16_lanes(val(src[0])), bf16_lanes(val(src[1]))):
                prod = x.view(np.float32).astype(np.float64) * y.view(np.float32).astype(np.float64)
                lanes.append((bf16_round(prod).view(np.uint32) >> np.uint32(16)).astype(np.uint64))
            regs[d] = lanes[0] | (lanes[1] << np.uint64(16))
        else:
            raise AssertionError(f"unmodelled instruction {op}")
    return np.stack([regs[f"${i}"] for i in range(4)], axis=1)


def test_gpu_dequant_ptx_gives_every_code_times_every_scale_exactly_times_2_pow_minus_7():
    # The GPU path (DEQ 2) runs only on a GPU; here its PTX text runs on a model
    # of its four instructions, over every data byte and every finite scale byte.
    from nvfp4_suite.reference.formats import e2m1_decode, e4m3fn_decode

    byte = np.arange(256, dtype=np.uint32)
    sc = np.array([b for b in range(256) if b & 0x7F != 0x7F], np.uint32)
    d, s = np.meshgrid(byte, sc, indexing="ij")
    d, s = d.reshape(-1), s.reshape(-1)
    # Four different bytes per register (rotations of d), each with its own scale.
    data = [d, (d + 1) % 256, (d + 7) % 256, (d + 100) % 256]
    scales = [s, s[::-1], np.roll(s, 3), np.roll(s, 11)]
    reg = data[0] | data[1] << 8 | data[2] << 16 | data[3] << 24
    sval = [e4m3fn_decode(x.astype(np.uint8)).astype(np.float64) * 2.0**119 for x in scales]
    sbits = [(bf16_round(v).view(np.uint32) >> 16).astype(np.uint32) for v in sval]
    out = _run_deq_ptx(reg, np.stack([sbits[0] | sbits[1] << 16, sbits[2] | sbits[3] << 16], axis=1))

    def lane(r, i):
        return (((r >> np.uint64(16 * i)) & np.uint64(0xFFFF)).astype(np.uint32) << np.uint32(16)).view(np.float32)

    for k in range(4):
        reg_i, half = divmod(k, 2)
        for nib, out_reg in ((0, reg_i), (4, 2 + reg_i)):
            code = (data[k] >> nib) & 0xF
            want = e2m1_decode(code.astype(np.uint8)).astype(np.float64) * e4m3fn_decode(
                scales[k].astype(np.uint8)).astype(np.float64) * 2.0**-7
            got = lane(out[:, out_reg], half).astype(np.float64)
            assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want)), (k, nib)


@pytest.mark.parametrize("rows, hk, topk", [(256, 4, 16), (64, 4, 64), (16, 1, 16), (16, 1, 64), (1, 1, 64),
                                            (3, 2, 4), (40, 8, 64)])
def test_auto_splits_is_a_power_of_two_covering_the_sms_within_its_caps(rows, hk, topk):
    from nvfp4_suite.kernels.triton.decode import auto_splits

    s = auto_splits(rows, hk, topk, 132)
    cap = max(1, min(8, topk // 16))
    assert s & (s - 1) == 0 and 1 <= s <= cap
    assert rows * hk * s >= 132 or s == cap
    assert s == 1 or rows * hk * (s // 2) < 132


def test_default_stages_pipeline_unsplit_launches_only():
    from nvfp4_suite.kernels.triton import decode as D

    if D.NUM_STAGES is not None:
        pytest.skip(f"NVFP4_TRITON_STAGES={D.NUM_STAGES} fixes the stage count")
    assert D.default_stages(1) == 3 and all(D.default_stages(s) == 1 for s in range(2, 9))
