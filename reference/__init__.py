"""The suite's source of truth, in pure numpy: codecs, the NVFP4 paged cache,
the decode problem and its validator, the exact oracle, and the emulation of
the seed kernel's arithmetic."""

from .formats import (
    bf16_bits,
    bf16_round,
    e2m1_decode,
    e2m1_encode,
    e4m3fn_decode,
    e4m3fn_encode,
    e4m3fnuz_decode,
    from_bf16_bits,
)
from .oracle import sparse_decode
from .paged_cache import LAYOUTS, PageLayout, build_pool, page_bytes
from .problem import (
    DecodeProblem,
    DuplicateSlotError,
    HeadCountError,
    NaNScaleByteError,
    PageIndexError,
    ParameterError,
    ProblemError,
    QueryValueError,
    ScaleError,
    SeqLenError,
    ShapeError,
    TopkIdError,
)

__all__ = [
    "LAYOUTS",
    "DecodeProblem",
    "DuplicateSlotError",
    "HeadCountError",
    "NaNScaleByteError",
    "PageIndexError",
    "PageLayout",
    "ParameterError",
    "ProblemError",
    "QueryValueError",
    "ScaleError",
    "SeqLenError",
    "ShapeError",
    "TopkIdError",
    "bf16_bits",
    "bf16_round",
    "build_pool",
    "e2m1_decode",
    "e2m1_encode",
    "e4m3fn_decode",
    "e4m3fn_encode",
    "e4m3fnuz_decode",
    "from_bf16_bits",
    "page_bytes",
    "sparse_decode",
]

from .emulate import SEED_GEOMETRY, Emulation, Geometry, emulate, emulate_details  # noqa: E402

__all__ += ["SEED_GEOMETRY", "Emulation", "Geometry", "emulate", "emulate_details"]
