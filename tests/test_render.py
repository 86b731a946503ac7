"""vectors/render.py: the report text of a check (the parts not tested beside the CLI)."""

import dataclasses

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.reference.examples import random_problem
from nvfp4_suite.vectors.cli.render import SHOWN_SLOTS, failing_lines, problem_lines
from nvfp4_suite.vectors.engine.check import FailingProblem


def test_a_small_failing_problem_shows_its_arrays():
    p = random_problem(3, reqs=2, q_len=2, num_kv_heads=2, topk=3, seq_lens=[130, 1])
    lines = problem_lines(p)
    assert lines[0] == f"  seq_lens [130, 1], positions {p.positions.tolist()} (negative: a padding row)"
    assert p.positions.tolist() == [128, 129, -1, 0]
    for h in range(2):
        assert f"  slot lists of KV head {h} (row: ids; -1 empty, > the row's own block: future): " \
               f"0: {p.topk[h, 0].tolist()}; 1: {p.topk[h, 1].tolist()}" in lines[1 + h]
    assert lines[-1] == f"  block_table {p.block_table.tolist()}"
    text = "\n".join(failing_lines(FailingProblem(p, Launch(splits=2), "the report"), "emulate", "f.npz", None))
    assert "\n  seq_lens [130, 1]" in text and "the report" in text and "replay: python -m" in text


def test_a_large_failing_problem_shows_no_arrays():
    p = random_problem(3, reqs=4, num_kv_heads=2, topk=9)
    assert p.rows * p.num_kv_heads * p.TOPK > SHOWN_SLOTS and problem_lines(p) == []
    small = dataclasses.replace(p, topk=p.topk[:, :, :8])
    assert p.rows * 2 * 8 == SHOWN_SLOTS and problem_lines(small)


def test_a_merged_reports_null_statistics_read_not_finite():
    from nvfp4_suite.vectors.cli.render import generated_head

    # A JSON report holds inf and NaN as null; merge prints them from there.
    assert "largest |got - pre|/reach not finite, largest bf16 ulp distance not finite" in generated_head(
        3, False, 10, None, None)
    assert generated_head(3, True, 10, 0.5, 2.0).startswith(
        "  3 problems, 10 output elements compared, largest |got - pre|/reach 0.5, largest bf16 ulp distance 2 ")


def test_the_verdict_text_puts_the_last_part_after_a_semicolon():
    from nvfp4_suite.vectors.cli.render import failing_head, verdict_text
    from nvfp4_suite.vectors.engine.verdict import Kind, Verdict

    line = verdict_text(Verdict(Kind.NOT_CONFORMANT), "x", ["1 golden cases judged (1 failed)", "2 generated problems"],
                        "merged 2 shards")
    assert line == "NOT CONFORMANT: backend x; 1 golden cases judged (1 failed), 2 generated problems; merged 2 shards"
    assert failing_head(True, None).startswith("FLAKY FAILURE") and "not fully minimised" in failing_head(False, "x")
