"""The check engine's results as printed text (``nvfp4_suite.vectors.engine.check``
computes them; the CLI and tests print these lines).

Everything a backend controls (its ``name``) goes through ``shown`` first, so
a name with a newline or a terminal escape cannot forge or hide a verdict line.
"""

from __future__ import annotations

import collections
import shlex

from nvfp4_suite.kernels.protocol import Launch
from nvfp4_suite.vectors.engine import blame
from nvfp4_suite.vectors.engine.harness import shown
from nvfp4_suite.vectors.engine.verdict import ROUNDING_FIELDS, Status


def indent(text: str, pad: str) -> str:
    """``text`` with ``pad`` before each of its lines."""
    return pad + text.replace("\n", "\n" + pad)


def replay_command(file, spec: str, launch: Launch | None = None, timeout: float | None = None) -> str:
    """The command that replays ``file`` against the backend loaded by ``spec``
    (``launch``: the one failing launch, else the file's own; ``timeout``: the
    run was isolated with this launch timeout, and so is the replay: a launch
    that hung or killed its process must not take the replay with it). Each
    argument is shell-quoted: the command runs as printed whatever the folder's name."""
    cmd = f"python -m nvfp4_suite.vectors replay {shlex.quote(str(file))} --backend {shlex.quote(spec)}"
    if launch is not None:
        # A kernel's own split count ("auto") is replayed as recorded: no --splits.
        cmd += (f" --splits {launch.splits}" if isinstance(launch.splits, int) else "") + f" --xcds {launch.xcds}"
        if launch.order is not None:
            cmd += f" --order {shlex.quote(launch.order)}"
    if timeout is not None:
        cmd += f" --isolate --timeout {timeout:g}"
    return cmd


def golden_lines(run, spec: str, timeout: float | None = None) -> list[str]:
    """The report of a ``check.GoldenRun``: counts, the cause summary
    (``blame.summary_lines``), one representative report per failing class
    (the case that best isolates the first cause first:
    ``blame.isolating_first``), replay commands (naming the backend by
    ``spec``; ``timeout``: of an isolated run), skips, unreadable cases."""
    out = []
    failed = [c for c in run.cases if c.status is Status.FAIL]
    skipped = [c for c in run.cases if c.status is Status.SKIP]
    errors = [c for c in run.cases if c.status is Status.ERROR]
    partial = [c for c in run.cases if c.status in (Status.PASS, Status.FAIL) and c.skipped]
    out.append(f"golden vectors: {run.count(Status.PASS)} of {len(run.cases)} cases passed, {len(failed)} failed, "
               f"{len(skipped)} skipped, {len(errors)} unreadable")
    if run.stopped:
        out.append(f"  stopped early ({run.stopped}): the cases not listed were not run")
    if failed:
        # What the failures share comes first: one cause can fail cases of many classes.
        out += blame.summary_lines(run.outcomes(), run.diagnosis)
        seen = set()
        for c in blame.isolating_first(failed, run.diagnosis):
            first = c.failures[0]
            new = [f for f in c.flags if f not in seen]
            out.append(f"  {c.tag} FAIL at {len(c.failures)} of {len(c.ran)} launches "
                       f"[{', '.join(c.flags)}]")
            if new:
                seen.update(new)
                out.append(f"      {first.launch.describe()}:")
                out.append(indent(first.text, "        "))
            out.append(f"      replay: {replay_command(c.file, spec, first.launch, timeout)}")
    for c in errors:
        out.append(f"  {c.tag} ERROR: {c.error}")
    for c in skipped:
        reasons = sorted({why for _, why in c.skipped})
        out.append(f"  {c.tag} SKIPPED: {'; '.join(reasons)}")
        for launch, seen in c.outside:
            out.append(f"      outside the domain, information only: {launch.describe()}: {seen}")
    if partial:
        n = sum(len(c.skipped) for c in partial)
        skip_counts = collections.Counter(why for c in partial for _, why in c.skipped)
        out.append(f"  launches skipped in {len(partial)} cases that ran ({n} launches): "
                   + "; ".join(f"{why} ({k})" for why, k in skip_counts.most_common()))
    return out


def rounding_lines(acc) -> list[str]:
    """The run's rounding statistics (totals of ``Report`` fields, summed by
    ``check.add_rounding``) as printed lines: the share checked to one bf16
    value, off nearest-even counts, the mean signed error, and the bias verdict
    the totals would give as one report."""
    from nvfp4_suite.reference.compare import BIAS_ALPHA, BIAS_SIDES, Report, bias_verdict

    if not acc or not acc["n_elements"]:
        return []
    r = Report(against="run", n_elements=0, n_fail=0, max_ulp=0.0, worst=[], nan_rows=[], unwritten_rows=[],
               not_bf16=0)
    # By name, as check.add_rounding summed them (each is an int count of Report's).
    for f in ROUNDING_FIELDS:
        setattr(r, f, int(acc[f]))
    r.mean_signed_ulp = acc["signed_ulp_sum"] / max(acc["n_rounding"], 1)
    lines = [f"  rounding: {r.rounding_summary()}"]
    # Problems are drawn independently, so their (row, head) groups add up as trials.
    p, name, t, k = bias_verdict({side: acc[f"bias {side}"] for side in BIAS_SIDES})
    if acc["bias_verdicts"]:
        lines.append(f"  rounding bias named in {acc['bias_verdicts']} problem(s)")
    if p <= BIAS_ALPHA:
        lines.append(f"  rounding anomaly over the run: outputs rounded {name} "
                     f"({t} of the {k} (row, head) groups with outputs off nearest-even lean that way; "
                     f"chance under no bias <= {p:.2g})")
    return lines


def generated_lines(gen) -> list[str]:
    """The generated part of a check report (a ``check.GeneratedRun``): totals,
    rounding statistics, and the coverage table (problems and failures per condition)."""
    t = gen.totals
    out = [generated_head(gen.n, gen.ok, t["elements"], t["max_ratio"], t["max_ulp"])]
    out += rounding_lines(t.get("rounding"))
    if gen.coverage is not None:
        out += gen.coverage.lines()
    return out


def generated_head(n: int, ok: bool, elements: int, max_ratio: float | None, max_ulp: float | None) -> str:
    """The first line of a generated part: ``n`` problems (``ok``: none failed),
    output ``elements`` compared, the largest bound ratio and ulp distance
    (None: not finite, as a JSON report holds it)."""
    note = "" if ok else " (generation stops at the first failure)"
    ratio = "not finite" if max_ratio is None else f"{max_ratio:.3g}"
    ulp = "not finite" if max_ulp is None else f"{max_ulp:g}"
    return (f"  {n} problems{note}, {elements} output elements compared, largest |got - pre|/reach {ratio}, "
            f"largest bf16 ulp distance {ulp} (large only where outputs cancel to near zero)")


# A failing problem this small (query rows x KV heads x slots) has its arrays printed.
SHOWN_SLOTS = 64


def problem_lines(p) -> list[str]:
    """The small arrays of a minimised problem (a ``DecodeProblem``), enough to
    reason about it from the report: seq_lens, each row's position, each (KV
    head, row) slot list and the block table; nothing when it is larger than
    ``SHOWN_SLOTS`` slots (the saved file holds it)."""
    if p.rows * p.num_kv_heads * p.TOPK > SHOWN_SLOTS:
        return []
    out = [f"  seq_lens {p.seq_lens.tolist()}, positions {p.positions.tolist()} (negative: a padding row)"]
    for h in range(p.num_kv_heads):
        out.append(f"  slot lists of KV head {h} (row: ids; -1 empty, > the row's own block: future): "
                   + "; ".join(f"{r}: {p.topk[h, r].tolist()}" for r in range(p.rows)))
    out.append(f"  block_table {p.block_table.tolist()}")
    return out


def failing_lines(failing, spec: str, saved, save_error: str | None, timeout: float | None = None) -> list[str]:
    """The report of a generated run's failing problem (a ``check.FailingProblem``):
    its size and launch, its report (both reports when it was flaky), where it
    was saved and the replay command (``timeout``: of an isolated run), or why
    saving failed (the report is printed either way)."""
    p, launch = failing.problem, failing.launch
    out = [failing_head(failing.flaky_text is not None, failing.unfinished),
           f"  rows {p.rows}, Hkv {p.num_kv_heads}, TOPK {p.TOPK}, q_len {p.q_len}, launch {launch.describe(p)}"]
    if failing.diagnosis is not None:
        out += failing.diagnosis.lines()
    out += problem_lines(p)
    if failing.flaky_text is not None:
        out += ["  the failing run:", indent(failing.text, "    "), "  the rerun:", indent(failing.flaky_text, "    ")]
    else:
        out.append(indent(failing.text, "  "))
    if saved is not None:
        out += [f"saved: {saved}", f"replay: {replay_command(saved, spec, timeout=timeout)}"]
    else:
        out.append(f"not saved: {save_error} (the report above is the only copy; set NVFP4_REPRO_DIR to a "
                   "writable folder)")
    return out


def failing_head(flaky: bool, unfinished: str | None) -> str:
    """The first line of a failing generated problem's report: flaky, not fully
    minimised (``unfinished``: why), or minimised."""
    if flaky:
        return "FLAKY FAILURE (the same problem and launch failed once and passed when rerun):"
    if unfinished:
        return f"FIRST FAILING PROBLEM (smallest found before {unfinished}; not fully minimised):"
    return "FIRST FAILING PROBLEM (minimised):"


def golden_summary(label: str | None, golden) -> str:
    """A catalog's part of a verdict line (``label`` None: the built-in one;
    ``golden``: its ``check.GoldenRun``, None when it was unreadable)."""
    if golden is None:
        return f"catalog {label} unreadable"
    g = golden
    return (("" if label is None else f"catalog {label}: ") + f"{g.judged} golden cases judged "
            f"({g.count(Status.FAIL)} failed" + (f", {g.count(Status.SKIP)} skipped" if g.count(Status.SKIP) else "")
            + (f", {g.count(Status.ERROR)} unreadable" if g.count(Status.ERROR) else "") + ")")


def verdict_text(verdict, name: str, parts: list[str], last: str | None = None) -> str:
    """A check's or merge's last line: the verdict, the backend's (already
    ``shown``) ``name``, what was judged (``parts``), then ``last`` (the
    seconds taken, the shards merged) after a semicolon."""
    return f"{verdict.head()}: backend {name}; " + ", ".join(parts) + (f"; {last}" if last else "")


def _check_summary(run) -> list[str]:
    """The parts of a check's verdict line: what each part judged."""
    shard = run.config.shard
    parts = [] if shard is None else [f"shard {shard[0]}/{shard[1]}"]
    parts += [golden_summary(cat.label, cat.golden) for cat in run.catalogs]
    if run.generated is not None:
        parts.append(f"{run.generated.n} generated problems")
    if run.serving is not None:
        parts.append(f"{run.serving.n} serving-size problems ({run.serving.failed} failed)")
    if run.stopped:
        parts.append(f"stopped early: {run.stopped}")
    if run.seconds is not None:
        parts.append(f"{run.seconds:.1f} s")
    return parts


def verdict_line(run, verdict) -> str:
    """The last line of a ``check`` (``run``: a ``CheckRun``) or ``replay`` (a
    ``ReplayRun``): the verdict, the backend and what was judged."""
    name = shown(run.subject.name) if run.subject is not None else "?"
    if hasattr(run, "catalogs"):
        parts = _check_summary(run)
        return verdict_text(verdict, name, parts, parts.pop() if run.seconds is not None else None)
    c = run.case
    ran = 0 if c is None else len(c.ran)
    failed = 0 if c is None else len(c.failures)
    skipped = 0 if c is None else len(c.skipped)
    return (f"{verdict.head()}: backend {name}; {run.config.file}: {ran} launches run ({failed} failed"
            + (f", {skipped} outside the backend's capabilities" if skipped else "") + ")")


def replay_lines(case, problem) -> list[str]:
    """The report of a replayed case file (a ``CaseResult`` of ``problem``): per
    launch run its report (PASS, or the failure; a crash as ``FAIL: backend
    raised ...``), per launch skipped why."""
    out = []
    failures = {f.launch: f for f in case.failures}
    if case.expected_error:
        out.append(f"invalid input, expected {case.expected_error}: "
                   + ("PASS" if not failures else "FAIL"))
    for launch in case.ran:
        f = failures.get(launch)
        text = "PASS" if f is None else f.text if f.report is not None or case.expected_error else f"FAIL: {f.text}"
        out.append(f"{launch.describe(problem)}: {text}")
    for launch, why in case.skipped:
        out.append(f"{launch.describe(problem)}: SKIPPED: {why}")
    return out
