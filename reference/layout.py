"""A cache layout as data: where a kernel's K and V codes and scales lie, in Python and as a file.

A ``CacheLayout`` names, for each of the four views (``k_data``, ``k_scale``,
``v_data``, ``v_scale``: E2M1 code rows of 64 bytes, E4M3 scale rows of 8),
the tensor it lives in and its byte offset and strides over page, token and
KV head; the order of the V scales in a block (``linear`` or the seed's
``swizzled``, ``paged_cache.swizzle_v_scales``); and the scales' fp8 flavour.
Offsets and strides are affine in the KV-head count ``Hkv`` (``Affine``:
``"8192*Hkv"``, ``"64*Hkv+8"``, or a plain int), so one record serves every
problem. Token ``t``'s row of KV head ``h`` in page ``p`` of view ``x`` is the
row's width in bytes from byte ``offset + p*page + t*token + h*head`` of
tensor ``x.tensor``; a tensor is uint8 ``[num_pages, page]`` (every view in it
has the same ``page`` stride), so it is one plain 2-D array per name.

The suite's canonical pools are two instances (``TOKEN_ROWS``, ``PLANAR``:
one tensor ``"pool"``, V scales swizzled). ``pack`` re-packs a canonical pool
into any layout and ``unpack`` the other way, every value's bytes identical
(bytes no view covers are zero); ``views`` hands out the four views in the
layout's own order (``v_scale`` linear for a ``linear`` layout: nothing to
unswizzle), ``read`` always linear. ``present`` gives a backend that declares
a layout its problem with the cache re-packed (``LaidOutProblem``).

A layout file is TOML or JSON with the same keys (``load``/``save``;
``reference/CONTRACT.md`` section 2.6)::

    name = "separate"
    v_scale_order = "linear"
    scale_format = "e4m3fn"
    [k_data]
    tensor = "k_codes"
    offset = 0
    page = "8192*Hkv"
    token = "64*Hkv"
    head = 64
    # ... one table per view
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np

from . import paged_cache as pc
from .problem import DecodeProblem

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 has no TOML reader: layouts load from JSON there (``load`` says so)
    tomllib = None

PARTS = pc.PARTS
# Bytes of one row of each view.
WIDTH = {"k_data": pc.ROW_DATA, "k_scale": pc.ROW_SCALES, "v_data": pc.ROW_DATA, "v_scale": pc.ROW_SCALES}
V_SCALE_ORDERS = ("linear", "swizzled")
# e4m3fnuz is not offered: not every E4M3FN value has an FNUZ byte (448, -0 as a zero group,
# subnormals below 2**-10), so a re-pack could not keep every value.
SCALE_FORMATS = ("e4m3fn",)
_FIELDS = ("tensor", "offset", "page", "token", "head")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LayoutError(ValueError):
    """A layout record or file that does not describe a usable layout (message names the field)."""


@dataclasses.dataclass(frozen=True)
class Affine:
    """``const + per_hkv * Hkv`` bytes. Written as an int when ``per_hkv`` is 0,
    else as ``"per_hkv*Hkv"`` or ``"per_hkv*Hkv+const"``."""

    const: int = 0
    per_hkv: int = 0

    def at(self, hkv):
        """The value for ``hkv`` KV heads. Only ``+`` and ``*`` with ``hkv`` first,
        so a traced integer (the FlyDSL kernel's loader) works as well as an int."""
        if self.per_hkv == 0:
            return self.const
        v = hkv * self.per_hkv
        return v + self.const if self.const else v

    @classmethod
    def parse(cls, value, where: str = "value") -> Affine:
        """An int, or a string of ``+``-separated terms ``N``, ``Hkv``, ``N*Hkv``, ``Hkv*N``."""
        if isinstance(value, Affine):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return cls(int(value), 0)
        if not isinstance(value, str):
            raise LayoutError(f"{where} = {value!r}: expected an int or a string like '64*Hkv+8'")
        const = per = 0
        for term in value.replace(" ", "").split("+"):
            m = re.fullmatch(r"(\d+)|(?:(\d+)\*)?Hkv|Hkv\*(\d+)", term)
            if not m:
                raise LayoutError(f"{where} = {value!r}: term {term!r} is not N, Hkv, N*Hkv or Hkv*N")
            if m.group(1) is not None:
                const += int(m.group(1))
            else:
                per += int(m.group(2) or m.group(3) or 1)
        return cls(const, per)

    def to_data(self):
        """The file form: an int, or the string ``parse`` reads back."""
        if self.per_hkv == 0:
            return self.const
        s = f"{self.per_hkv}*Hkv"
        return s + (f"+{self.const}" if self.const else "")


@dataclasses.dataclass(frozen=True)
class View:
    """Where one view's rows lie: ``tensor`` (its name), byte ``offset`` and the
    ``page``, ``token`` and ``head`` strides in bytes (each an ``Affine`` in Hkv;
    ints and strings are parsed)."""

    tensor: str
    offset: Affine
    page: Affine
    token: Affine
    head: Affine

    def __post_init__(self):
        for f in _FIELDS[1:]:
            object.__setattr__(self, f, Affine.parse(getattr(self, f), f))

    def to_data(self) -> dict:
        """The view as a file table."""
        return {"tensor": self.tensor, **{f: getattr(self, f).to_data() for f in _FIELDS[1:]}}


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """A cache layout: the four ``View``s, the V-scale order, the scale format.

    name: how reports name it. v_scale_order: ``"linear"`` (stored ``[t, s]``
    is group ``s`` of token ``t``) or ``"swizzled"`` (the seed's,
    ``paged_cache.swizzle_v_scales``). scale_format: ``"e4m3fn"``. Raises
    ``LayoutError`` naming the field for anything else; ``bind`` checks the
    geometry (no two rows overlap, every row inside its tensor's page).
    """

    name: str
    k_data: View
    k_scale: View
    v_data: View
    v_scale: View
    v_scale_order: str = "linear"
    scale_format: str = "e4m3fn"

    def __post_init__(self):
        if self.v_scale_order not in V_SCALE_ORDERS:
            raise LayoutError(f"v_scale_order = {self.v_scale_order!r}, expected one of {V_SCALE_ORDERS}")
        if self.scale_format not in SCALE_FORMATS:
            raise LayoutError(f"scale_format = {self.scale_format!r}, expected one of {SCALE_FORMATS} "
                              "(e4m3fnuz cannot hold every e4m3fn value: 448, subnormals)")
        for part in PARTS:
            v = getattr(self, part)
            if not isinstance(v, View):
                raise LayoutError(f"{part} is a {type(v).__name__}, not a View")
            if not _NAME.fullmatch(v.tensor):
                raise LayoutError(f"{part}.tensor = {v.tensor!r}: a tensor name is letters, digits and _")

    def view(self, part: str) -> View:
        """The ``View`` of ``part`` (one of ``PARTS``)."""
        if part not in PARTS:
            raise ValueError(f"part = {part!r}, expected one of {PARTS}")
        return getattr(self, part)

    def tensor_names(self) -> tuple[str, ...]:
        """The tensors, in the order of their first view."""
        return tuple(dict.fromkeys(self.view(p).tensor for p in PARTS))

    def page_strides(self, hkv: int) -> dict[str, int]:
        """Tensor name -> bytes per page for ``hkv`` KV heads, after ``check``."""
        self.check(hkv)
        return {t: next(self.view(p).page.at(hkv) for p in PARTS if self.view(p).tensor == t)
                for t in self.tensor_names()}

    def row_byte(self, hkv, part: str, head, token):
        """Byte, within its tensor's page, of token ``token``'s row of ``part`` of
        KV head ``head`` (for ``v_scale``: the stored row, in this layout's order).
        Only ``+`` and ``*``, traced integers first."""
        v = self.view(part)
        off = head * v.head.at(hkv) + token * v.token.at(hkv)
        o = v.offset.at(hkv)
        if isinstance(o, int):
            return off + o if o else off
        return o + off  # a traced offset goes first: the other side may be a plain int

    def check(self, hkv: int) -> None:
        """Raise ``LayoutError`` unless, for ``hkv`` KV heads, every row of every
        view lies inside its tensor's page, no two rows share a byte, and the
        views of one tensor agree on the page stride."""
        if not isinstance(hkv, (int, np.integer)) or hkv < 1:
            raise LayoutError(f"num_kv_heads = {hkv!r}, must be an int >= 1")
        key = (self, int(hkv))
        if key in _CHECKED:
            return
        cover: dict[str, np.ndarray] = {}
        owner: dict[str, np.ndarray] = {}
        for i, part in enumerate(PARTS):
            v = self.view(part)
            page = v.page.at(hkv)
            for f in _FIELDS[1:]:
                if getattr(v, f).at(hkv) < 0:
                    raise LayoutError(f"{self.name}: {part}.{f} is negative for Hkv {hkv}")
            if v.tensor in cover and cover[v.tensor].size != page:
                raise LayoutError(f"{self.name}: {part}.page = {page} for Hkv {hkv}, but tensor {v.tensor!r} "
                                  f"has page stride {cover[v.tensor].size} from another view")
            c = cover.setdefault(v.tensor, np.zeros(page, np.int64))
            o = owner.setdefault(v.tensor, np.full(page, -1, np.int64))
            start = (v.offset.at(hkv) + np.arange(hkv)[:, None, None] * v.head.at(hkv)
                     + np.arange(pc.BLK)[None, :, None] * v.token.at(hkv) + np.arange(WIDTH[part])[None, None, :])
            start = start.reshape(-1)
            if start.max() >= page:
                raise LayoutError(f"{self.name}: {part} reaches byte {int(start.max())} of tensor {v.tensor!r}, "
                                  f"whose page stride is {page} (Hkv {hkv})")
            np.add.at(c, start, 1)
            hit = np.flatnonzero(c > 1)
            if hit.size:
                other = int(o[hit[0]])
                who = PARTS[other] if other >= 0 and other != i else part
                raise LayoutError(f"{self.name}: {part} and {who} share byte {int(hit[0])} of tensor "
                                  f"{v.tensor!r} (Hkv {hkv})")
            o[start] = i
        _CHECKED.add(key)

    # --- files ----------------------------------------------------------------

    def to_data(self) -> dict:
        """The layout as the nested dict a TOML or JSON file holds."""
        d: dict[str, object] = {"name": self.name, "v_scale_order": self.v_scale_order,
                                "scale_format": self.scale_format}
        d.update({p: self.view(p).to_data() for p in PARTS})
        return d

    @classmethod
    def from_data(cls, d: dict, where: str = "layout") -> CacheLayout:
        """The record of ``to_data``; raises ``LayoutError`` naming a missing or unknown key."""
        if not isinstance(d, dict):
            raise LayoutError(f"{where}: expected a table/object, got {type(d).__name__}")
        known = {"name", "v_scale_order", "scale_format", *PARTS}
        unknown = sorted(set(d) - known)
        if unknown:
            raise LayoutError(f"{where}: unknown keys {unknown} (known: {sorted(known)})")
        missing = [k for k in ("name", *PARTS) if k not in d]
        if missing:
            raise LayoutError(f"{where}: missing keys {missing}")
        views = {}
        for p in PARTS:
            t = d[p]
            if not isinstance(t, dict):
                raise LayoutError(f"{where}: {p} must be a table with keys {list(_FIELDS)}")
            bad = sorted(set(t) ^ set(_FIELDS))
            if bad:
                raise LayoutError(f"{where}: {p} has keys {sorted(t)}, expected exactly {list(_FIELDS)}")
            if not isinstance(t["tensor"], str):
                raise LayoutError(f"{where}: {p}.tensor = {t['tensor']!r} is not a string")
            views[p] = View(t["tensor"], *(Affine.parse(t[f], f"{p}.{f}") for f in _FIELDS[1:]))
        return cls(name=str(d["name"]), v_scale_order=d.get("v_scale_order", "linear"),
                   scale_format=d.get("scale_format", "e4m3fn"), **views)

    def to_toml(self) -> str:
        """The layout as TOML text (``tomllib`` reads it back)."""
        d = self.to_data()
        lines = [f"{k} = {json.dumps(d[k])}" for k in ("name", "v_scale_order", "scale_format")]
        for p in PARTS:
            lines += ["", f"[{p}]"] + [f"{k} = {json.dumps(v)}" for k, v in d[p].items()]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        """The layout as JSON text."""
        return json.dumps(self.to_data(), indent=1) + "\n"


# (layout, Hkv) pairs already checked: check() is called on every pack and present.
_CHECKED: set = set()


def load(path) -> CacheLayout:
    """A layout from a file: ``.json`` read as JSON, any other suffix as TOML."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise LayoutError(f"{path}: cannot read ({e})") from e
    if path.suffix == ".json":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise LayoutError(f"{path}: not JSON ({e})") from e
    else:
        if tomllib is None:
            raise LayoutError(f"{path}: reading a TOML layout needs Python >= 3.11 (tomllib); "
                              f"this is {sys.version.split()[0]}: save the layout as .json")
        try:
            d = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise LayoutError(f"{path}: not TOML ({e})") from e
    return CacheLayout.from_data(d, str(path))


def save(layout: CacheLayout, path) -> None:
    """Write ``layout`` as JSON (``.json``) or TOML (any other suffix)."""
    path = Path(path)
    path.write_text(layout.to_json() if path.suffix == ".json" else layout.to_toml(), encoding="utf-8")


def _seed(name: str) -> CacheLayout:
    """A canonical pool layout as a record: one tensor ``pool``, V scales
    swizzled, the rows of ``paged_cache.ROWS[name]``."""
    page = Affine(0, 2 * pc.BLK * pc.ROW_BYTES)
    views = {p: View("pool", Affine(const, per), page, Affine(token), Affine(head))
             for p, (const, per, head, token) in pc.ROWS[name].items()}
    return CacheLayout(name, views["k_data"], views["k_scale"], views["v_data"], views["v_scale"],
                       v_scale_order="swizzled")


TOKEN_ROWS = _seed("token_rows")
PLANAR = _seed("planar")
CANONICAL = {"token_rows": TOKEN_ROWS, "planar": PLANAR}
assert tuple(CANONICAL) == pc.LAYOUTS

# Four separate tensors [pages, 128 tokens, Hkv, row] with linear V scales, as many
# serving-stack kernels hold their cache.
SEPARATE = CacheLayout(
    name="separate",
    k_data=View("k_codes", Affine(), Affine.parse("8192*Hkv"), Affine.parse("64*Hkv"), Affine(64)),
    k_scale=View("k_scales", Affine(), Affine.parse("1024*Hkv"), Affine.parse("8*Hkv"), Affine(8)),
    v_data=View("v_codes", Affine(), Affine.parse("8192*Hkv"), Affine.parse("64*Hkv"), Affine(64)),
    v_scale=View("v_scales", Affine(), Affine.parse("1024*Hkv"), Affine.parse("8*Hkv"), Affine(8)),
    v_scale_order="linear",
)


def as_layout(layout) -> CacheLayout:
    """A ``CacheLayout`` from a record, a canonical name or a file path."""
    if isinstance(layout, CacheLayout):
        return layout
    if isinstance(layout, str) and layout in CANONICAL:
        return CANONICAL[layout]
    return load(layout)


# --- views and re-packing -----------------------------------------------------

def _check_tensors(layout: CacheLayout, tensors: dict, hkv: int) -> int:
    strides = layout.page_strides(hkv)
    missing = [t for t in strides if t not in tensors]
    if missing:
        raise LayoutError(f"{layout.name}: tensors {missing} missing (given {sorted(tensors)})")
    pages: int | None = None
    for t, stride in strides.items():
        a = tensors[t]
        if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim != 2 or a.shape[1] != stride:
            raise LayoutError(f"{layout.name}: tensor {t!r} must be uint8 [num_pages, {stride}] for Hkv {hkv}, "
                              f"got {getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
        if pages is not None and a.shape[0] != pages:
            raise LayoutError(f"{layout.name}: tensor {t!r} has {a.shape[0]} pages, another has {pages}")
        pages = a.shape[0]
    assert pages is not None  # page_strides names each of the four views' tensors
    return pages


def views(layout, tensors: dict, hkv: int) -> pc.PageViews:
    """The four views of ``tensors`` (name -> uint8 ``[num_pages, page]``), each
    uint8 ``[num_pages, Hkv, 128, width]``, in the layout's own order: ``v_scale``
    is linear for a ``linear`` layout and swizzled for a ``swizzled`` one
    (``read`` is always linear). Writing through a view writes the tensor."""
    layout = as_layout(layout)
    n = _check_tensors(layout, tensors, hkv)
    out = []
    for part in PARTS:
        v = layout.view(part)
        a = tensors[v.tensor]
        ps, bs = a.strides
        out.append(np.lib.stride_tricks.as_strided(
            a[:, v.offset.at(hkv):], shape=(n, hkv, pc.BLK, WIDTH[part]),
            strides=(ps, v.head.at(hkv) * bs, v.token.at(hkv) * bs, bs), writeable=True))
    return pc.PageViews(*out)


def read(layout, tensors: dict, hkv: int) -> pc.PageViews:
    """Copies of the four views with V scales linear, whatever the layout's order."""
    layout = as_layout(layout)
    v = views(layout, tensors, hkv)
    vs = pc.unswizzle_v_scales(v.v_scale) if layout.v_scale_order == "swizzled" else v.v_scale.copy()
    return pc.PageViews(v.k_data.copy(), v.k_scale.copy(), v.v_data.copy(), vs)


def write(layout, hkv: int, num_pages: int, rows: pc.PageViews) -> dict[str, np.ndarray]:
    """New tensors of ``layout`` holding ``rows`` (four uint8 arrays ``[num_pages,
    Hkv, 128, width]``, V scales linear); bytes no view covers are zero."""
    layout = as_layout(layout)
    tensors = {t: np.zeros((num_pages, s), np.uint8) for t, s in layout.page_strides(hkv).items()}
    v = views(layout, tensors, hkv)
    v.k_data[...] = rows.k_data
    v.k_scale[...] = rows.k_scale
    v.v_data[...] = rows.v_data
    v.v_scale[...] = pc.swizzle_v_scales(rows.v_scale) if layout.v_scale_order == "swizzled" else rows.v_scale
    return tensors


def pack(pool: np.ndarray, canonical: str, hkv: int, layout) -> dict[str, np.ndarray]:
    """The canonical ``pool`` (uint8 ``[num_pages, page_bytes(hkv)]`` in layout
    ``canonical``, ``"token_rows"`` or ``"planar"``) re-packed into ``layout``:
    tensor name -> uint8 ``[num_pages, page]``. Every code and scale byte keeps
    its value; only its place (and, between orders, the V-scale permutation) changes."""
    return write(layout, hkv, pool.shape[0], pc.read_pages(pool, canonical, hkv))


def unpack(tensors: dict, layout, hkv: int, canonical: str = "token_rows") -> np.ndarray:
    """The inverse of ``pack``: a canonical pool uint8 ``[num_pages, page_bytes(hkv)]``
    in layout ``canonical`` from ``tensors`` in ``layout``."""
    rows = read(layout, tensors, hkv)
    pool = np.zeros((rows.k_data.shape[0], pc.page_bytes(hkv)), np.uint8)
    pc.write_pages(pool, canonical, hkv, *rows)
    return pool


def to_problem(tensors: dict, layout, *, q, topk, block_table, seq_lens, num_kv_heads: int, q_len: int,
               sm_scale: float, k_global_scale: float, v_global_scale: float,
               canonical: str = "token_rows") -> DecodeProblem:
    """A ``DecodeProblem`` from a cache dump in ``layout`` (``tensors``: name ->
    uint8 ``[num_pages, page]``) and the step's other inputs (arrays as in
    ``DecodeProblem``), its pool re-packed into ``canonical``. Not validated."""
    pool = unpack(tensors, layout, int(num_kv_heads), canonical)
    return DecodeProblem(q=np.asarray(q), pool=pool, layout=canonical, num_kv_heads=int(num_kv_heads),
                         topk=np.asarray(topk), block_table=np.asarray(block_table), seq_lens=np.asarray(seq_lens),
                         q_len=int(q_len), sm_scale=sm_scale, k_global_scale=k_global_scale,
                         v_global_scale=v_global_scale)


@dataclasses.dataclass(frozen=True, eq=False)
class LaidOutProblem(DecodeProblem):
    """A ``DecodeProblem`` that also carries its cache in a declared layout.

    cache: tensor name -> uint8 ``[num_pages, page]`` in ``cache_layout``, the
    same values as ``pool`` (which stays, in ``layout``, for the host-side
    validator). A kernel declaring ``cache_layout`` reads ``cache``;
    ``views()`` gives its four views in the declared order.
    """

    cache: dict = dataclasses.field(default_factory=dict)
    cache_layout: CacheLayout | None = None

    def views(self) -> pc.PageViews:
        """The four views of ``cache`` (see ``views``), V scales in the declared order."""
        return views(self.cache_layout, self.cache, int(self.num_kv_heads))


def present(problem: DecodeProblem, layout: CacheLayout | None) -> DecodeProblem:
    """``problem`` as a backend declaring ``layout`` receives it: unchanged for
    None, else a ``LaidOutProblem`` whose ``cache`` is the pool re-packed into
    ``layout`` (fresh arrays: the backend may not write its inputs, and the
    expectations come from ``problem`` itself)."""
    if layout is None:
        return problem
    fields = {f.name: getattr(problem, f.name) for f in dataclasses.fields(DecodeProblem)}
    cache = pack(problem.pool, problem.layout, int(problem.num_kv_heads), layout)
    return LaidOutProblem(**fields, cache=cache, cache_layout=layout)
