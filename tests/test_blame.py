"""vectors/blame.py: the cause summary of a golden run."""

import json

import numpy as np

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.engine import blame
from nvfp4_suite.vectors.engine.blame import Outcome


def _problem(topk_rows, seq_lens, q_len=1, hkv=1, layout="token_rows"):
    """A seeded problem whose slot lists are ``topk_rows`` ([Hkv, rows, TOPK])."""
    ids = np.asarray(topk_rows, np.int32)
    p = random_problem(0, reqs=len(seq_lens), num_kv_heads=hkv, topk=ids.shape[2],
                       q_len=q_len, seq_lens=list(seq_lens), layout=layout)
    import dataclasses

    return dataclasses.replace(p, topk=ids).validate()


def test_launch_features_name_each_slot_list_fact():
    # Row 0 at position 299 (self block 2): [-1, 0, 2] has -1 before valid ids; row 1 at 127: compacted.
    p = _problem([[[-1, 0, 2], [0, -1, -1]]], seq_lens=[300, 128])
    f = blame.launch_features(p, Launch(splits=2))
    assert {"not-compacted", "invalid-before-valid", "minus-one-slot", "splits>1", "token_rows", "odd-valid-count",
            "partial-last-block"} <= f
    assert "future-slot" not in f and "row-without-work" not in f and "hkv>1" not in f


def test_launch_features_see_future_ids_and_rows_without_work():
    # Row 0 at position 99 (self block 0): id 1 is a future block; row 1 has none valid.
    p = _problem([[[0, 1], [-1, -1]]], seq_lens=[100, 50])
    f = blame.launch_features(p, Launch())
    assert {"future-slot", "row-without-work", "minus-one-slot"} <= f
    assert "invalid-before-valid" not in f and "splits>1" not in f


def test_launch_features_compacted_lists_have_no_invalid_before_valid():
    p = _problem([[[0, 1, 2, -1], [0, -1, -1, -1]]], seq_lens=[384, 128])
    f = blame.launch_features(p, Launch())
    assert "invalid-before-valid" not in f and "future-slot" not in f and "not-compacted" not in f
    assert "partial-last-block" not in f  # both positions end a block (383, 127)


def _o(case, failed, *features, flags=("x",), splits=1):
    return Outcome(case, tuple(flags), Launch(splits=splits), frozenset(features), failed)


def test_shared_causes_are_the_features_every_failure_has_and_some_pass_lacks():
    outs = [_o(0, True, "hkv>1", "q_len>1"), _o(1, True, "hkv>1", "planar"), _o(2, False, "hkv>1", "q_len>1"),
            _o(3, False, "q_len>1")]
    causes = blame.shared_causes(outs)
    assert [c.feature for c in causes] == ["hkv>1"]
    assert (causes[0].failing, causes[0].passing_with, causes[0].passing) == (2, 1, 2)


def test_shared_causes_exclude_features_every_launch_has():
    outs = [_o(0, True, "planar"), _o(1, False, "planar")]
    assert blame.shared_causes(outs) == []


def test_shared_causes_rank_the_rarest_among_passing_launches_first():
    outs = [_o(0, True, "planar", "xcds"), _o(1, False, "planar"), _o(2, False, "planar"), _o(3, False, "xcds"),
            _o(4, False)]
    assert [c.feature for c in blame.shared_causes(outs)] == ["xcds", "planar"]


def test_shared_causes_of_equal_share_come_in_the_order_of_features():
    outs = [_o(0, True, "q_len>1", "invalid-before-valid"), _o(1, False)]
    assert [c.feature for c in blame.shared_causes(outs)] == ["invalid-before-valid", "q_len>1"]


def test_class_shares_rank_by_share_not_by_count():
    outs = ([_o(i, i < 5, flags=("big",)) for i in range(30)]
            + [_o(100 + i, True, flags=("small",)) for i in range(2)])
    shares = blame.class_shares(outs)
    assert [(s.flag, s.failed, s.judged) for s in shares] == [("small", 2, 2), ("big", 5, 30)]


def test_class_shares_count_a_case_once_whatever_its_launches():
    outs = [_o(0, True, splits=1), _o(0, False, splits=2), _o(1, False)]
    (s,) = blame.class_shares(outs)
    assert (s.failed, s.judged) == (1, 2)


def test_mutant_matches_need_a_close_failure_pattern():
    sig = {"mutants": {"m:a": {"bug": "head-map", "what": "h % Hkv", "failing": [[0, 1], [1, 1], [2, 1]]},
                       "m:b": {"bug": "other", "what": "", "failing": [[5, 1]]}}}
    outs = [_o(i, i < 3) for i in range(6)]
    (m,) = blame.mutant_matches(outs, sig)
    assert (m.spec, m.both, m.mutant_only, m.run_only, m.jaccard) == ("m:a", 3, 0, 0, 1.0)
    # Half the pattern is no match.
    outs = [_o(i, i in (0, 3)) for i in range(6)]
    assert blame.mutant_matches(outs, sig) == []


def test_mutant_matches_only_count_launches_the_run_judged():
    sig = {"mutants": {"m:a": {"bug": "b", "what": "", "failing": [[0, 1], [0, 2], [1, 2]]}}}
    outs = [_o(0, True, splits=1), _o(1, False, splits=1)]  # splits 2 never ran
    (m,) = blame.mutant_matches(outs, sig)
    assert (m.both, m.mutant_only) == (1, 0)


def test_summary_lines_put_the_shared_cause_first_and_say_nothing_for_a_pass():
    outs = [_o(0, True, "invalid-before-valid", flags=("fnuz",)),
            _o(1, True, "invalid-before-valid", flags=("nibble-order",)),
            _o(2, False, flags=("fnuz",))]
    lines = blame.summary_lines(outs, {"mutants": {}})
    assert lines[0].startswith("  shared by the failures: every failing launch (2) has a -1 or future slot")
    assert lines[-1] == "  failing bug classes by share of their cases failed: nibble-order 1/1, fnuz 1/2"
    assert blame.summary_lines([_o(0, False)], {"mutants": {}}) == []


def test_load_signatures_of_a_damaged_file_is_empty(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("{not json")
    assert blame.load_signatures(bad) == {"catalog": None, "mutants": {}}
    bad.write_text(json.dumps([1, 2]))
    assert blame.load_signatures(bad)["mutants"] == {}
