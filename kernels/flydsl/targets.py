"""The hardware facts of the FlyDSL kernel's targets, one record per target.

Code that differs between targets reads these fields, never an arch name:
the kernel (which MFMA forms the score and PV products, whether fp8 scales
need the FNUZ correction), the resource check (LDS and registers per CU) and
the simulator (which instructions exist, how fp8 converts). ``target(arch)``
raises for an arch without a record, so a new target fails at once instead
of taking another's path; supporting it means adding its record here.
"""

from __future__ import annotations

import dataclasses

FP8_FLAVOURS = ("E4M3FN", "E4M3FNUZ")


@dataclasses.dataclass(frozen=True)
class Target:
    """One target's facts.

    arch: LLVM processor name (``gfx942``). fp8: what ``v_cvt_pk_f32_fp8``
    reads a byte as, ``E4M3FNUZ`` (bias 8, 0x80 the only NaN) or OCP
    ``E4M3FN``. mfma_bf16_k: K of the widest 16x16 bf16 MFMA, 16
    (``v_mfma_f32_16x16x16_bf16``: a K = 32 step is two of them) or 32
    (``v_mfma_f32_16x16x32_bf16``). lds_bytes: LDS per CU, shared by its
    workgroups. regs_per_lane: VGPR + AGPR per lane of a SIMD, shared by the
    waves on it. wave_size: lanes per wave. permlane_swap: has
    ``v_permlane16_swap`` / ``v_permlane32_swap``.
    """

    arch: str
    fp8: str
    mfma_bf16_k: int
    lds_bytes: int
    regs_per_lane: int
    wave_size: int
    permlane_swap: bool

    def __post_init__(self):
        if self.fp8 not in FP8_FLAVOURS:
            raise ValueError(f"{self.arch}: fp8 = {self.fp8!r}, expected one of {FP8_FLAVOURS}")
        if self.mfma_bf16_k not in (16, 32):
            raise ValueError(f"{self.arch}: mfma_bf16_k = {self.mfma_bf16_k}, the kernel has forms for 16 and 32")

    @property
    def fnuz(self) -> bool:
        """Whether the fp8 converter reads E4M3FNUZ (the kernel must correct it to E4M3FN)."""
        return self.fp8 == "E4M3FNUZ"


TARGETS = {
    t.arch: t
    for t in (
        # CDNA3 (MI300 series).
        Target("gfx942", fp8="E4M3FNUZ", mfma_bf16_k=16, lds_bytes=64 * 1024, regs_per_lane=512, wave_size=64,
               permlane_swap=False),
        # CDNA4 (MI350 series).
        Target("gfx950", fp8="E4M3FN", mfma_bf16_k=32, lds_bytes=160 * 1024, regs_per_lane=512, wave_size=64,
               permlane_swap=True),
    )
}
ARCHS = tuple(TARGETS)


def target(arch: str) -> Target:
    """The record of ``arch`` (feature suffixes such as ``:sramecc+:xnack-`` ignored).

    Raises ValueError naming the arch when it has no record."""
    base = str(arch).split(":")[0]
    if base not in TARGETS:
        raise ValueError(f"no target record for arch {arch!r}: the FlyDSL kernel is built for "
                         f"{' and '.join(ARCHS)}; a new target needs its Target in kernels/flydsl/targets.py")
    return TARGETS[base]


def add_arch_option(parser) -> None:
    """``--arch TARGET`` (repeatable, one of ``ARCHS``; default both) on an ``argparse`` parser:
    the one form every command of the FlyDSL kernel and its simulator takes."""
    parser.add_argument("--arch", action="append", choices=ARCHS, help="target (repeatable; default both)")
