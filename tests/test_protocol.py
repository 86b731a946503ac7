"""nvfp4_suite.kernels.protocol: the declared capabilities, the launch record, and the
docs/backends.md section generated from the protocol."""

import dataclasses
from pathlib import Path

import pytest

from nvfp4_suite import kernels
from nvfp4_suite.kernels.protocol import README_SECTION, Capabilities, Launch, Limits, protocol_errors
from nvfp4_suite.reference.examples import random_problem

ROOT = Path(__file__).resolve().parents[1]


def test_readme_writing_a_backend_section_is_the_generated_one():
    assert README_SECTION in (ROOT / "docs" / "backends.md").read_text()


@pytest.mark.parametrize("kw, msg", [
    ({"layouts": ("rows",)}, "layouts"), ({"layouts": ()}, "layouts"), ({"splits": ()}, "splits"),
    ({"splits": (1, 0)}, "index 1 is 0"), ({"xcds": (-8,)}, "index 0 is -8"), ({"splits": (1.5,)}, "1.5"),
])
def test_bad_capabilities_are_refused_naming_the_value(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Capabilities(**kw)


def test_refuses_names_the_value_outside_the_capabilities():
    p = random_problem(1, reqs=1, topk=2, layout="planar")
    caps = Capabilities(layouts=("token_rows",), splits=(1, 2))
    assert "layout 'planar'" in caps.refuses(p, Launch())
    caps = Capabilities(splits=(1, 2), xcds=(0, 8), orders=("forward", "reverse"))
    assert caps.refuses(p, Launch(2, 8, "reverse")) is None
    assert "splits 3" in caps.refuses(p, Launch(3))
    assert "xcds 4" in caps.refuses(p, Launch(1, 4))
    assert "order 'sideways'" in caps.refuses(p, Launch(1, 0, "sideways"))


def test_a_backend_receives_only_the_launch_fields_it_declares():
    plain = Capabilities(splits=(1, 2))
    full = Capabilities(splits=(1, 2), xcds=(0, 8), orders=("forward", "reverse"))
    assert Launch(2, 8, "reverse").kwargs(plain) == {"splits": 2}
    assert Launch(2, 8).kwargs(full) == {"splits": 2, "xcds": 8, "order": "forward"}
    assert Launch(2, 8, "reverse").as_seen_by(plain) == Launch(2)


def test_the_second_run_takes_the_next_declared_order():
    caps = Capabilities(orders=("forward", "reverse", "shuffle:1"))
    assert Launch().then(caps).order == "reverse"
    assert Launch(order="shuffle:1").then(caps).order == "forward"
    assert Launch().then(Capabilities()) == Launch()


def test_launch_records_round_trip_through_json_and_refuse_unknown_fields():
    x = Launch(4, 8, "reverse")
    assert Launch.from_json(x.to_json()) == x
    with pytest.raises(ValueError, match="unknown fields"):
        Launch.from_json({"splits": 1, "warps": 4})
    with pytest.raises(ValueError, match="'splits' is '2'"):
        Launch.from_json({"splits": "2"})


def test_describe_names_the_launch_and_the_problems_layout():
    p = random_problem(1, reqs=1, topk=2, layout="planar")
    assert Launch(2, 8, "reverse").describe(p) == "splits=2 xcds=8 order=reverse layout=planar"
    assert Launch().describe() == "splits=1"


def test_every_registered_backend_declares_capabilities():
    for name in kernels.registered():
        b = kernels.get_backend(name)
        assert protocol_errors(b) == [] and isinstance(b.capabilities, Capabilities), name


def test_protocol_errors_name_what_is_missing():
    class Old:
        name, geometry, splits = "old", None, (1,)

        def available(self):
            return None

    errs = protocol_errors(Old())
    assert "missing attribute 'capabilities'" in errs and any("not callable" in e for e in errs)


@pytest.mark.parametrize("field,value", [("topk", 100), ("topk", 0), ("requests", 0), ("kv_heads", -1),
                                         ("q_len", True), ("requests", 2.0)])
def test_limits_refuse_a_value_no_valid_problem_has_naming_the_field_and_value(field, value):
    with pytest.raises(ValueError, match=f"Limits.{field} = {value!r}"):
        Limits(**{field: value})


# --- the declared input domain and cache layout ---------------------------------

def test_slot_lists_and_cache_layout_are_checked():
    from nvfp4_suite.reference.layout import SEPARATE

    assert Capabilities().slot_lists == "any" and Capabilities().cache_layout is None
    Capabilities(slot_lists="compacted", cache_layout=SEPARATE)
    with pytest.raises(ValueError, match="slot_lists 'sorted'"):
        Capabilities(slot_lists="sorted")
    with pytest.raises(ValueError, match="cache_layout is a str"):
        Capabilities(cache_layout="separate")


def test_a_problem_outside_the_declared_domain_is_refused_naming_the_axis():
    from nvfp4_suite.vectors.catalog.cases import compact

    p = random_problem(2, reqs=2, q_len=1, num_kv_heads=2, topk=4, seq_lens=[600, 300])
    caps = Capabilities(slot_lists="compacted", splits=(1, 2))
    why = caps.refuses(p, Launch())
    assert why.startswith("outside slot_lists=compacted: topk[") and why == caps.outside_domain(p)
    assert caps.refuses_launch(p, Launch()) is None
    assert caps.refuses(compact(p), Launch()) is None
    # A launch refusal comes first: the domain is only the input's.
    assert caps.refuses(p, Launch(3)).startswith("splits 3")
    assert Capabilities().refuses(p, Launch()) is None


def test_a_backend_declaring_a_cache_layout_takes_either_canonical_pool():
    from nvfp4_suite.reference.layout import SEPARATE

    p = random_problem(3, reqs=1, topk=2, layout="planar")
    assert Capabilities(layouts=("token_rows",), cache_layout=SEPARATE).refuses(p, Launch()) is None
    assert "layout 'planar'" in Capabilities(layouts=("token_rows",)).refuses(p, Launch())


def test_a_fixed_softmax_scale_is_a_domain_axis_naming_the_value():
    from nvfp4_suite.reference.examples import random_problem
    from nvfp4_suite.reference.paged_cache import D

    p = random_problem(3, reqs=2, topk=3)
    caps = Capabilities(sm_scale=D**-0.5)
    assert caps.outside_domain(p) is None
    other = dataclasses.replace(p, sm_scale=0.3 * D**-0.5)
    why = caps.outside_domain(other)
    assert why.startswith("outside sm_scale=0.08838834764831845: the problem's sm_scale is 0.0265"), why
    assert Capabilities().outside_domain(other) is None
    for bad in (0.0, -1.0, float("inf"), True, "0.1"):
        with pytest.raises(ValueError, match="Capabilities.sm_scale"):
            Capabilities(sm_scale=bad)


def test_a_negative_scale_byte_is_outside_a_non_negative_scale_domain_naming_it():
    from nvfp4_suite.vectors import catalog

    case = next(c for c in catalog.load_manifest()["cases"] if c["name"] == "e4m3-subnormal")
    p, _, _ = catalog.load_entry(case)
    why = Capabilities(scale_sign="non-negative").outside_domain(p)
    assert why.startswith("outside scale_sign=non-negative: page ") and "negative" in why, why
    assert Capabilities().outside_domain(p) is None
    with pytest.raises(ValueError, match="Capabilities.scale_sign 'positive'"):
        Capabilities(scale_sign="positive")


def test_a_kernel_may_declare_that_it_chooses_its_split_count_and_its_launches_say_so():
    caps = Capabilities(splits=("auto",))
    launch = Launch(splits=3, xcds=0).as_seen_by(caps)
    assert launch == Launch(splits="auto") and launch.kwargs(caps) == {"splits": "auto"}
    assert launch.known_splits == 1 and Launch.from_json(launch.to_json()) == launch
    from nvfp4_suite.reference.examples import random_problem

    assert caps.refuses_launch(random_problem(1), Launch(splits=2)) == "splits 2 not supported (supports ['auto'])"
    for bad in (("auto", 2), ("Auto",), ()):
        with pytest.raises(ValueError, match="Capabilities.splits"):
            Capabilities(splits=bad)
    with pytest.raises(ValueError, match="'splits' is 'two', not an int"):
        Launch.from_json({"splits": "two"})
