"""The suite's source of truth, in pure numpy: codecs, the NVFP4 paged cache
(its writer ``quantize_nvfp4``/``build_pool`` and its readers ``page_views``,
``read_pages``, ``dequantize_pages``), the decode problem and its validator,
the exact oracle, and the emulation of the seed kernel's arithmetic (both
written once over the array namespace of ``nvfp4_suite.reference.arrays``),
and the arithmetic a kernel declares (``Geometry``, ``Exact``;
``nvfp4_suite.reference.arithmetic``). The tolerance model and the report are
in ``nvfp4_suite.reference.compare``."""

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
from .paged_cache import (
    LAYOUTS,
    PageLayout,
    PageViews,
    build_pool,
    dequantize,
    dequantize_pages,
    page_bytes,
    page_views,
    pool_from_codes,
    quantize_nvfp4,
    read_pages,
    swizzle_v_scales,
    unswizzle_v_scales,
)
from .problem import (
    DecodeProblem,
    DuplicateSlotError,
    HeadCountError,
    NaNScaleByteError,
    PageIndexError,
    ParameterError,
    ProblemError,
    QueryValueError,
    ReferenceBudgetError,
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
    "PageViews",
    "ParameterError",
    "ProblemError",
    "QueryValueError",
    "ReferenceBudgetError",
    "ScaleError",
    "SeqLenError",
    "ShapeError",
    "TopkIdError",
    "bf16_bits",
    "bf16_round",
    "build_pool",
    "dequantize",
    "dequantize_pages",
    "e2m1_decode",
    "e2m1_encode",
    "e4m3fn_decode",
    "e4m3fn_encode",
    "e4m3fnuz_decode",
    "from_bf16_bits",
    "page_bytes",
    "page_views",
    "pool_from_codes",
    "quantize_nvfp4",
    "read_pages",
    "sparse_decode",
    "swizzle_v_scales",
    "unswizzle_v_scales",
]

from .arithmetic import (  # noqa: E402
    EXACT_P_BF16,
    OPERANDS,
    SEED_GEOMETRY,
    Exact,
    Geometry,
    arithmetic_name,
    parse_arithmetic,
)
from .emulate import Emulation, emulate, emulate_details  # noqa: E402

__all__ += ["EXACT_P_BF16", "OPERANDS", "SEED_GEOMETRY", "Emulation", "Exact", "Geometry", "arithmetic_name", "emulate",
            "emulate_details", "parse_arithmetic"]
