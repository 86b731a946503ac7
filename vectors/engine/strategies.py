"""Hypothesis strategies for valid decode problems over paged NVFP4 caches.

The structure (layout, Hkv, requests, seq_lens, q_len, TOPK, a plan for each
row's slot list, the scale-byte and query regimes) is drawn with hypothesis,
so a failure shrinks towards few requests, small TOPK and simple slot lists.
The distribution is shaped to the conditions of
``nvfp4_suite.vectors.engine.coverage`` (each drawn at least as often as stated
there; ``tests/test_coverage.py`` measures it): weighted choices
(``weighted``), and a simplest choice everywhere that still gives a problem
with work (one request, a visible block selected, dense random code bytes),
because hypothesis draws its first problems as a random prefix completed
with simplest choices, and shrinks towards them.

The pool's code bytes come from a numpy generator seeded by one drawn integer
(dense random bytes, the simplest choice) or are drawn by hypothesis as an
array (a fill byte and a sparse set of drawn bytes, the way
``hypothesis.extra.numpy.arrays`` draws large arrays). Permutations, ids and
scale bytes come from the seeded generator. Each drawn problem records its
coverage conditions with ``hypothesis.event``. ``problems_for`` and
``launches_for`` draw only inside a backend's
``nvfp4_suite.kernels.Capabilities``, its slot-list domain included
(``capabilities.slot_lists``: ``"any"``, the default, puts -1 and future ids
anywhere; ``"compacted"``: per KV head and row, with ``n = min(TOPK,
self_blk + 1)`` (0 for a padding row), the first ``n`` slots hold ``n``
distinct ids of ``[0, self_blk]`` ascending and the rest are -1).
``run_generated`` draws the same problems for a seed in any process, each
completed by the next record of a seeded stratified plan (``plan``): its
launch, and whether its unread slabs are poisoned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os

import numpy as np
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nvfp4_suite.kernels.protocol import AUTO_SPLITS, Capabilities, Launch
from nvfp4_suite.reference import LAYOUTS, DecodeProblem, bf16_round
from nvfp4_suite.reference.examples import paged_block_table
from nvfp4_suite.reference.paged_cache import BLK, D, page_bytes, page_views
from nvfp4_suite.reference.problem import HG, SLOT_LISTS, row_positions
from nvfp4_suite.vectors.catalog.cases import loud_tail, poison_unread
from nvfp4_suite.vectors.engine.config import owns
from nvfp4_suite.vectors.engine.coverage import SCALE_CLASSES, launch_conditions, problem_conditions

# seq_len kinds (weights): a uniform length, a block edge, shorter than q_len
# (the request's first rows are padding, its last ones are not), a padding
# request (0), a long one (over 32 blocks: TOPK >= 33 lists with valid lanes
# past 32 in the compacted domain), one of several blocks (5 to 8 visible: a
# split of a 2-split launch may walk 3 or more, the block loop's back edge).
# "uniform" first: the simplest choice has work.
SEQ_KINDS = {"uniform": 8, "edge": 4, "short": 2, "padding": 1, "long": 1, "several blocks": 5}
EDGE_SEQ_LENS = (1, 2, 3, 127, 128, 129, 255, 256, 257, 383, 384, 385)
LONG_SEQ_LENS = (32 * BLK + 1, 40 * BLK)
SEVERAL_SEQ_LENS = (4 * BLK + 1, 8 * BLK)
# How many valid slots a row's plan selects (weights): a random count, every
# visible block, one, a multiple of a declared split count, none, and more than
# two per split of the smallest declared split count above 1 (its block loop
# repeats). "none" weighs 2 so that rows with no valid slot keep their stated
# share beside "loop" (nvfp4_suite.vectors.engine.coverage).
COUNTS = {"random": 4, "all": 2, "one": 1, "split multiple": 2, "none": 2, "loop": 3}
# Where the junk (-1 and future ids) goes relative to the valid slots.
ARRANGEMENTS = {"shuffled": 3, "junk first": 1, "valid first": 1, "diagonal first": 2}
# Scale-byte regimes (weights): quantiser-like bytes, a wide signed range,
# every E4M3FN class of ``coverage.SCALE_CLASSES`` mixed in, sparse special bytes.
SCALE_REGIMES = {"plain": 2, "classes": 2, "wide": 1, "special": 1}
# Softmax scales, as factors of 128 ** -0.5 (weights): the usual one most often, and
# the range models use (1/4..4), non-powers of two among them, so that a kernel that
# ignores sm_scale, squares it or folds it wrongly fails.
SM_SCALE_FACTORS = {1.0: 2, 0.25: 1, 0.3: 1, 0.7: 1, 1.6: 1, 3.3: 1, 4.0: 1}
# Scale bytes a kernel must decode right: zero, -0, subnormals, the largest finite.
SPECIAL_SCALES = np.array([0x00, 0x80, 0x01, 0x03, 0x07, 0x87, 0x7E, 0xFE], np.uint8)
_CLASS_BYTES = [np.flatnonzero(test(np.arange(256))).astype(np.uint8) for test in SCALE_CLASSES.values()]


def weighted(choices: dict):
    """A strategy drawing a key of ``choices`` (key -> integer weight) with
    probability proportional to its weight; it shrinks towards the first key."""
    return st.sampled_from([k for k, w in choices.items() for _ in range(w)])


def _slots_any(rng, count: str, arrangement: str, nvis: int, topk: int, splits) -> np.ndarray:
    """One row's slot list in the "any" domain: ``nvis`` visible blocks, a
    count and an arrangement from the row's plan."""
    most = min(nvis, topk)
    if count == "none" or most == 0:
        n = 0
    elif count == "all":
        n = most
    elif count == "one":
        n = 1
    elif count == "split multiple":
        # a multiple of the largest split count that fits: of its divisors too
        s = max([s for s in splits if isinstance(s, int) and s <= most], default=1)
        n = s * int(rng.integers(1, most // s + 1))
    elif count == "loop":
        s = min([s for s in splits if isinstance(s, int) and s > 1], default=1)
        n = min(most, 2 * s + 1)
    else:
        n = int(rng.integers(1, most + 1))
    own = nvis - 1
    valid = rng.choice(nvis, n, replace=False) if n else np.zeros(0, np.int64)
    if arrangement == "diagonal first" and n:
        valid = np.concatenate([[own], valid[valid != own]])[:n]
    k = topk - n
    future = nvis + rng.integers(0, 4, k)
    junk_kind = rng.integers(0, 3)  # only -1, only future ids, or both
    junk = np.where(rng.random(k) < 0.5, -1, future) if junk_kind == 0 else (
        np.full(k, -1) if junk_kind == 1 else future)
    if arrangement == "junk first":
        slots = np.concatenate([junk, valid])
    elif arrangement == "valid first":
        slots = np.concatenate([valid, junk])
    elif arrangement == "diagonal first" and n:
        # the own block is the first valid slot; junk may come before it
        rest = rng.permutation(np.concatenate([valid[1:], junk]))
        later = np.flatnonzero(np.isin(rest, valid[1:]))
        at = int(rng.integers(0, (later[0] if len(later) else len(rest)) + 1))
        slots = np.insert(rest, at, own)
    else:
        slots = rng.permutation(np.concatenate([valid, junk]))
    return slots.astype(np.int32)


def compacted_slot_list(rng, nvis: int, topk: int) -> np.ndarray:
    """int32 ``[topk]``: one row's slot list in the compacted domain (``min(topk,
    nvis)`` distinct visible ids ascending, then -1; ``nvis``: the row's visible blocks)."""
    n = min(topk, nvis)
    ids = np.sort(rng.choice(nvis, n, replace=False)) if n else np.zeros(0, np.int64)
    return np.concatenate([ids, np.full(topk - n, -1)]).astype(np.int32)


def scale_bytes(rng, regime: str, shape, scale_sign: str = "any") -> np.ndarray:
    """uint8 scale bytes of ``shape`` in ``regime`` (a ``SCALE_REGIMES`` name: plain
    0x30..0x3F, wide 0x08..0x5F of either sign, classes, special; never an E4M3 NaN),
    drawn the same for either ``scale_sign`` (``SCALE_SIGNS``), whose ``"non-negative"``
    then clears the sign bits."""
    out = _scale_bytes(rng, regime, shape)
    return out & np.uint8(0x7F) if scale_sign == "non-negative" else out


def _scale_bytes(rng, regime: str, shape) -> np.ndarray:
    if regime == "wide":
        return rng.integers(0x08, 0x60, shape, dtype=np.uint8) | (rng.integers(0, 2, shape, dtype=np.uint8) << 7)
    sc = rng.integers(0x30, 0x40, shape, dtype=np.uint8)
    if regime == "special":
        hit = rng.random(shape) < 0.1
        sc[hit] = rng.choice(SPECIAL_SCALES, int(hit.sum()))
    elif regime == "classes":
        hit = rng.random(shape) < 0.3
        cls = rng.integers(0, len(_CLASS_BYTES), int(hit.sum()))
        sc[hit] = [_CLASS_BYTES[c][rng.integers(0, len(_CLASS_BYTES[c]))] for c in cls]
    return sc


def _seq_len(draw, kind: str, long_ok: bool, q_len: int) -> int:
    if kind == "padding":
        return 0
    if kind == "short" and q_len > 1:
        return draw(st.integers(1, q_len - 1))
    if kind == "edge":
        return draw(st.sampled_from(EDGE_SEQ_LENS))
    if kind == "long" and long_ok:
        return draw(st.integers(*LONG_SEQ_LENS))
    if kind == "several blocks":
        return draw(st.integers(*SEVERAL_SEQ_LENS))
    return draw(st.integers(1, 1200))


@st.composite
def problems(draw, max_reqs: int = 8, max_kv_heads: int = 4, max_topk: int = 64, max_q_len: int = 4,
             layouts=LAYOUTS, splits=(1,), slot_lists: str = "any", poison: bool | None = None,
             scale_sign: str = "any", sm_scale: float | None = None) -> DecodeProblem:
    """A valid ``DecodeProblem`` in one of ``layouts``, slot lists in the
    ``slot_lists`` domain, scale bytes in the ``scale_sign`` domain (its
    ``"non-negative"`` clears every drawn byte's sign bit), the softmax scale
    ``sm_scale`` (None: drawn, ``SM_SCALE_FACTORS`` times ``128 ** -0.5``), "split multiple"
    counts taken from ``splits``,
    unread slabs poisoned (``cases.poison_unread``) as ``poison`` says (None:
    drawn); see the module docstring."""
    if slot_lists not in SLOT_LISTS:
        raise ValueError(f"slot_lists = {slot_lists!r}, must be one of {SLOT_LISTS}")
    layout = draw(st.sampled_from(layouts))
    hk = draw(st.integers(1, max_kv_heads))
    reqs = draw(st.integers(1, max_reqs))
    q_len = draw(st.integers(1, max_q_len))
    wide = [max_topk] + ([33] if 33 < max_topk else [])
    topk = draw(st.one_of(st.integers(1, min(16, max_topk)), st.sampled_from(wide)))
    # Compacted lists reach lanes past 32 only through long sequences: drawn more often there.
    kinds = weighted(dict(SEQ_KINDS, long=3) if slot_lists == "compacted" else SEQ_KINDS)
    seq_lens = np.array([_seq_len(draw, draw(kinds), topk >= 33, q_len) for _ in range(reqs)], np.int32)
    # The first plan selects something, so that a problem has rows with work
    # unless all its rows are padding; later ones may select nothing.
    plans = [draw(st.tuples(weighted({k: w for k, w in COUNTS.items() if k != "none"}), weighted(ARRANGEMENTS)))]
    plans += draw(st.lists(st.tuples(weighted(COUNTS), weighted(ARRANGEMENTS)), max_size=3))
    scale_regime = draw(weighted(SCALE_REGIMES))
    q_std = draw(weighted({2.0: 2, 16.0: 2, 0.5: 1}))
    k_global = draw(st.sampled_from([0.05, 0.5, 2.0]))
    v_global = draw(st.sampled_from([0.01, 1.0]))
    spare = draw(st.integers(0, 3))
    if poison is None:
        poison = draw(st.booleans())
    drawn_bytes = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)

    extra_cols = draw(st.integers(0, 2))
    block_table, num_pages = paged_block_table(seq_lens, rng, spare_pages=spare, extra_cols=extra_cols)
    rows = reqs * q_len

    shape = (num_pages, page_bytes(hk))
    if drawn_bytes:
        pool = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, 255), fill=st.integers(0, 255)))
    else:
        pool = rng.integers(0, 256, shape, dtype=np.uint8)
    views = page_views(pool, layout, hk)
    for sc in (views.k_scale, views.v_scale):
        sc[...] = scale_bytes(rng, scale_regime, sc.shape, scale_sign)

    q = bf16_round(rng.standard_normal((rows, HG * hk, D)) * q_std)
    ids = np.empty((hk, rows, topk), np.int32)
    pos = row_positions(seq_lens, q_len)
    for h in range(hk):
        for r in range(rows):
            nvis = int(pos[r] // BLK + 1) if pos[r] >= 0 else 0
            if slot_lists == "compacted":
                ids[h, r] = compacted_slot_list(rng, nvis, topk)
            else:
                count, arrangement = plans[(h * rows + r) % len(plans)]
                ids[h, r] = _slots_any(rng, count, arrangement, nvis, topk, splits)

    # Drawn last, so that every other field of a seed's problem stays as it was drawn before.
    sm_scale = float(sm_scale) if sm_scale is not None else draw(weighted(SM_SCALE_FACTORS)) * D**-0.5
    problem = DecodeProblem(
        q=q, pool=pool, layout=layout, num_kv_heads=hk, topk=ids, block_table=block_table,
        seq_lens=seq_lens, q_len=q_len, sm_scale=sm_scale, k_global_scale=k_global,
        v_global_scale=v_global,
    )
    problem = loud_tail(problem)
    if poison:
        problem = poison_unread(problem)
    for c in sorted(problem_conditions(problem)):
        event(c)
    return problem


@dataclasses.dataclass(frozen=True)
class Planned:
    """What ``run_generated`` adds to a drawn problem: the launch fields
    (``splits``, ``xcds``, ``order``, as ``Launch``'s) and whether its unread
    slabs are ``poison``ed (``cases.poison_unread``)."""

    splits: int
    xcds: int
    order: str | None
    poison: bool

    @property
    def launch(self) -> Launch:
        return Launch(splits=self.splits, xcds=self.xcds, order=self.order)


def launch_weights(caps: Capabilities, splits=None) -> dict[str, dict]:
    """The launch choices inside ``caps`` (``splits``: only these split counts),
    per ``Launch`` field: value -> integer weight, the simplest first. Split
    count 1 and no placement are the simplest (a minimised failure keeps them
    when it can) and weigh half as much as the others."""
    return {"splits": {s: 1 if s in (1, AUTO_SPLITS) else 2 for s in sorted(splits or caps.splits, key=str)},
            "xcds": {x: 1 if x == 0 else 2 for x in sorted(caps.xcds)},
            "order": {o: 1 for o in caps.orders} if caps.orders else {None: 1}}


def plan_weights(caps: Capabilities, splits=None) -> dict[str, dict]:
    """``launch_weights`` and the poisoning's (poisoned or not, evenly;
    unpoisoned the simpler): per ``Planned`` field, value -> weight, the
    simplest first."""
    return dict(launch_weights(caps, splits), poison={False: 1, True: 1})


def launches_for(caps: Capabilities, splits=None):
    """A hypothesis strategy of launch records inside ``caps`` (``splits``: only
    these split counts), weighted as ``launch_weights``; for tests that draw
    with ``@given``. ``run_generated`` does not draw launches with hypothesis
    (``plan``)."""
    return st.builds(Launch, **{k: weighted(v) for k, v in launch_weights(caps, splits).items()})


def plan(caps: Capabilities, seed: int, splits=None):
    """An endless iterator of ``Planned`` records inside ``caps`` (``splits``:
    only these split counts) for seed ``seed`` (int): each field
    (``plan_weights``) cycles through its table (each value repeated by its weight) in a fresh seeded shuffle
    per cycle, so the first ``n`` records hold each value ``n`` times its
    weight share, give or take its weight.

    Why not hypothesis: its draws are made to find bugs, not to spread. It
    replays and mutates choices of earlier examples, so a choice among 15
    entries lands on one entry anywhere from 0 to 4 times its share over 200
    examples, and a boolean is true in 17% of them (measured with hypothesis
    6.155-6.170, for ``sampled_from`` and for a hashed wide integer alike):
    a split count the backend declares could go unlaunched."""
    tables = {k: [v for v, w in t.items() for _ in range(w)] for k, t in plan_weights(caps, splits).items()}
    rng = np.random.default_rng([seed, 0x4C61756E])  # a stream of its own: hypothesis' seed draws the problems
    queues: dict[str, list] = {k: [] for k in tables}
    while True:
        got = {}
        for k, t in tables.items():
            if not queues[k]:
                queues[k] = [t[i] for i in rng.permutation(len(t))]
            got[k] = queues[k].pop()
        yield Planned(**got)


def problems_for(caps: Capabilities, poison: bool | None = None):
    """The problem strategy inside ``caps``: its layouts, at most its limits,
    its slot-list and scale-sign domains and its fixed softmax scale, if any
    (``capabilities.slot_lists``, ``scale_sign``, ``sm_scale``); ``poison`` as ``problems``'."""
    lim = caps.limits
    return problems(max_reqs=lim.requests, max_kv_heads=lim.kv_heads, max_topk=lim.topk, max_q_len=lim.q_len,
                    layouts=caps.layouts, splits=caps.splits, slot_lists=caps.slot_lists, poison=poison,
                    scale_sign=caps.scale_sign, sm_scale=caps.sm_scale)


# --- drawing the same problems for a seed in any process -------------------------

@contextlib.contextmanager
def without_local_constants():
    """Hypothesis mixes literal constants from every local (not installed)
    module the process has imported into its draws (``_get_local_constants``
    in ``hypothesis.internal.conjecture.providers``, 6.13x and later): a draw
    then depends on what was imported before it. Within this context that
    pool is empty, so the choices a seed gives depend on the seed alone; the
    cache of permitted constants is cleared on entry and on exit so that no
    earlier or later draw sees the other pool."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # before 6.12x there is no providers module and no such pool
        providers = None
    get = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if get is None or cache is None:  # a hypothesis without the mechanism: nothing to neutralise
        yield
        return
    empty = type(providers._local_constants)()
    providers._get_local_constants = lambda: empty
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = get
        cache.cache.clear()


def run_generated(caps: Capabilities, examples: int, seed: int, fn, splits=None, shrink: bool = True,
                  shard: tuple[int, int] | None = None) -> None:
    """Call ``fn(problem, launch)`` on ``examples`` problems drawn inside ``caps``
    from ``seed`` (int), each completed by the next record of ``plan(caps,
    seed, splits)`` (``splits``: only these split counts): its launch, and
    its unread slabs poisoned or not. The same problems and launches in every
    process and route (the CLI's ``check``, the pytest route, tools),
    whatever was imported. ``fn`` raises ``AssertionError`` for a failure:
    generation stops and (``shrink``) the failure is minimised: hypothesis
    shrinks the problem with the failing record held, then simpler records
    are tried on the smallest problem, one field at a time (split count,
    placement, order, poisoning), its simpler values simplest first; the
    first that still fails is kept. ``fn`` is last called with the smallest
    failing problem and launch, whose ``AssertionError`` propagates.
    Settings are hypothesis' defaults, not the loaded profile's, apart from
    those given here: no database (nothing replayed from earlier runs), no
    deadline, no health checks. When ``NVFP4_DRAWN`` names a file, a digest
    of each problem and launch tried (``digest``) is appended to it, one a
    line.

    ``shard`` ``(K, N)``: every problem is drawn as in the unsharded run, but
    until the first failure ``fn`` is called only on those whose draw index
    ``config.owns`` gives to share K; the others return at once, as a passing
    problem does, so hypothesis draws exactly the unsharded run's problems
    (and plan records) up to this shard's first failure. From that failure
    on, every try of the minimisation is judged here."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    log = os.environ.get("NVFP4_DRAWN")
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    records = plan(caps, seed, splits)
    # The failing record, held while hypothesis shrinks and replays its problem
    # (a record that changed between its calls would make the failure flaky),
    # and the last failing problem (hypothesis' smallest, replayed last).
    held: list[Planned] = []
    failed: list[DecodeProblem] = []
    drawn = [0]  # problems drawn before the first failure: the draw index of the next one

    def call(problem: DecodeProblem, rec: Planned, events: bool = False) -> None:
        launch = rec.launch
        if rec.poison:
            problem = poison_unread(problem)
        if events:  # hypothesis' statistics; the unpoisoned problem's conditions were recorded as it was drawn
            got = launch_conditions(problem, launch)
            if rec.poison:
                got |= problem_conditions(problem)
            for c in sorted(got):
                event(c)
        if log:
            with open(log, "a") as f:
                f.write(digest(problem, launch) + "\n")
        fn(problem, launch)

    @hseed(seed)
    @settings(settings.get_profile("default"), max_examples=examples, deadline=None, database=None,
              print_blob=False, suppress_health_check=list(HealthCheck), phases=phases, derandomize=False)
    @given(problems_for(caps, poison=False))
    def prop(problem):
        if held:
            rec = held[0]
        else:
            rec, index = next(records), drawn[0]
            drawn[0] += 1
            if not owns(shard, index):
                return  # another shard's problem: drawn, so that later draws stay the unsharded run's
        try:
            call(problem, rec, events=True)
        except BaseException:
            if not held:
                held.append(rec)
            failed[:] = [problem]
            raise

    with without_local_constants():
        try:
            prop()
        except AssertionError as err:
            if not (shrink and failed):
                raise
            last = err
        else:
            return
    problem, best = failed[0], held[0]
    passed_last = False
    for k, table in plan_weights(caps, splits).items():
        for v in table:
            if v == getattr(best, k):
                break
            cand = dataclasses.replace(best, **{k: v})
            try:
                call(problem, cand)
                passed_last = True
            except AssertionError as err:
                best, last, passed_last = cand, err, False
                break
    if passed_last:
        call(problem, best)  # fn's last call is the failure reported
    raise last


def digest(problem: DecodeProblem, launch: Launch) -> str:
    """sha256 (hex) of every array's bytes, shape and dtype, every scalar and the launch."""
    h = hashlib.sha256()
    for name in ("q", "pool", "topk", "block_table", "seq_lens"):
        a = np.ascontiguousarray(getattr(problem, name))
        h.update(f"{name} {a.dtype} {a.shape}".encode())
        h.update(a.tobytes())
    for name in ("layout", "num_kv_heads", "q_len", "sm_scale", "k_global_scale", "v_global_scale"):
        h.update(f"{name}={getattr(problem, name)!r}".encode())
    h.update(repr(launch).encode())
    return h.hexdigest()
