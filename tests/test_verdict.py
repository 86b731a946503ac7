"""nvfp4_suite.vectors.engine.verdict: the one place a verdict is decided."""

import itertools

import pytest

from nvfp4_suite.vectors.engine.verdict import EXIT_CODES, Kind, Verdict, decide, no_verdict


@pytest.mark.parametrize("judged, failed, flaky, errors, stopped",
                         [c for c in itertools.product(range(3), range(3), range(3), range(2), (None, "SIGINT"))
                          if c[1] <= c[0] and c[2] <= c[1]])
def test_decide_over_every_small_tally_follows_the_rules_in_order(judged, failed, flaky, errors, stopped):
    v = decide(judged=judged, failed=failed, flaky=flaky, errors=errors, stopped=stopped)
    if failed:
        # A failure decides whatever else happened; flaky only when every failure was.
        assert v.kind is (Kind.FLAKY if flaky == failed else Kind.NOT_CONFORMANT)
        assert v.interrupted is (stopped is not None)
    elif stopped:
        assert v == no_verdict("interrupted (SIGINT)", interrupted=True)
    elif errors:
        assert v.kind is Kind.NO_VERDICT and v.reason == "a catalog has unreadable cases"
    elif not judged:
        assert v.kind is Kind.NO_VERDICT and v.reason == "nothing was judged"
    else:
        assert v == Verdict(Kind.CONFORMANT)


def test_nothing_judged_is_never_conformant():
    assert all(decide(judged=0, failed=0, errors=e).kind is Kind.NO_VERDICT for e in (0, 1))


def test_each_kind_has_its_exit_code_and_only_a_judged_run_exits_0_or_1():
    assert EXIT_CODES == {Kind.CONFORMANT: 0, Kind.NOT_CONFORMANT: 1, Kind.FLAKY: 1, Kind.NO_VERDICT: 2,
                          Kind.SUITE_ERROR: 3}
    assert [Verdict(k).exit_code for k in Kind] == [0, 1, 1, 2, 3]
    assert str(Kind.NOT_CONFORMANT) == "NOT CONFORMANT" and Kind.FLAKY == "FLAKY FAILURE"


def test_head_names_the_reason_except_for_conformant():
    assert no_verdict("nothing was judged").head() == "NO VERDICT (nothing was judged)"
    assert Verdict(Kind.CONFORMANT, "ignored").head() == "CONFORMANT"
    assert Verdict(Kind.NOT_CONFORMANT).head() == "NOT CONFORMANT"
