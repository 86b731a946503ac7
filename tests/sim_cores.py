"""A check the instruction-family tests share: an instruction's batched core
over several waves against its handler run on each wave alone."""

import numpy as np

from nvfp4_suite.kernels.flydsl.sim.launch import make_test_wave
from nvfp4_suite.kernels.flydsl.sim.program import NUM_SGPRS, parse_instruction
from nvfp4_suite.kernels.flydsl.sim.wave import BatchView, Wave, decode_batched, handler_for

# Bit patterns that take the hard paths: float32 zeros, infinities, NaNs (quiet
# and signalling, both signs), denormals, the extremes, fp16 specials in both
# halves, integer extremes.
HARD_BITS = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FA00000,
                      0xFFA00001, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
                      0x3F800000, 0xBF800000, 0x3F800001, 0x4B800000, 0x4F800000, 0xCF000000, 0x477FE000,
                      0x477FF000, 0x33800000, 0x33000000, 0x7C007C00, 0xFC00FC00, 0x7E007D00, 0x80008000,
                      0x00010001, 0x03FF8001, 0x3C00BC00, 0x7BFF7BFF, 0xFFFFFFFF, 0x7FFFFFFF, 0x0000003F,
                      0x00000040, 0x0000001F, 0x00000020], np.uint32)


def registers(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Scalar (uint32 ``[n, 129]``) and vector (uint32 ``[n, 512, 64]``) files of
    ``n`` waves: the hard patterns, small integers and random bits mixed
    across lanes and registers, EXEC full, SCC random."""
    vfile = rng.integers(0, 2**32, (n, 512, 64), dtype=np.uint64).astype(np.uint32)
    pick = rng.random(vfile.shape)
    vfile = np.where(pick < 0.4, rng.choice(HARD_BITS, vfile.shape), vfile)
    vfile = np.where((pick > 0.4) & (pick < 0.55), rng.integers(0, 70, vfile.shape).astype(np.uint32), vfile)
    sfile = rng.choice(HARD_BITS, (n, NUM_SGPRS + 1))
    sfile[:, 126:128] = 0xFFFFFFFF
    sfile[:, NUM_SGPRS] = rng.integers(0, 2, n)
    return sfile, vfile


def assert_core_matches_handler(text: str, arch: str = "gfx942", seed: int = 0, n: int = 5) -> None:
    """``text``'s batched core over ``n`` waves (consecutive register rows, then
    every other row, both views of the files, then rows with uneven gaps,
    gathered and scattered) leaves every register as its handler run on each
    wave alone does, bit for bit, all with a full EXEC."""
    ins = parse_instruction(text)
    core, handler = decode_batched(ins), handler_for(ins)
    assert core is not None, f"{text}: no batched core"
    group = make_test_wave(arch).group
    sfile, vfile = registers(np.random.default_rng(seed), n)
    want_s, want_v = sfile.copy(), vfile.copy()
    with np.errstate(all="ignore"):
        for k in range(n):
            handler(Wave(group, k, (want_s, want_v, k)), ins)
        for rows in (list(range(n)), list(range(0, n, 2)), [0, 1, n - 1]):
            s, v = sfile.copy(), vfile.copy()
            assert core(BatchView(s, v, [Wave(group, k, (s, v, k)) for k in rows])) is not False, text
            for k in range(n):
                ws, wv = (want_s[k], want_v[k]) if k in rows else (sfile[k], vfile[k])
                assert (s[k] == ws).all(), (text, k, np.nonzero(s[k] != ws))
                bad = np.argwhere(v[k] != wv)
                assert not len(bad), (text, k, bad[:4].tolist(), v[k][tuple(bad[0])], wv[tuple(bad[0])])
