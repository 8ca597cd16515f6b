"""The harness's own metrics: each against values computed by hand on a small results file with its run
logs, and once through real runs of the built-in suite (write attempts, taxonomy examples linked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_magic.evals.__main__ import main
from harness_magic.evals.compare import compare_results, format_comparison
from harness_magic.evals.metrics import CLARIFICATION_NOTE, harness_metrics, metric_lines, taxonomy_kind
from harness_magic.evals.report import render_report


def log(path: Path, *checks: tuple[bool, list[bool]]) -> str:
    """A run log with one final-answer verification record per (passed, [check ok, ...])."""
    records = [{"type": "run_start", "run_id": "r", "model": "m"}]
    for passed, oks in checks:
        records.append({"type": "event", "run_id": "r", "name": "verification", "turn": 2, "tool_use_id": "",
                        "tool": "final_answer", "passed": passed,
                        "checks": [{"rule": "cited_source_retrieved", "handle": "final_answer", "ok": ok,
                                    "detail": "[doc:a.md]"} for ok in oks]})
    records.append({"type": "event", "run_id": "r", "name": "verification", "tool": "python_interpreter",
                    "passed": False, "checks": [{"rule": "no_nulls(id)", "ok": False}]})  # a handle check: not counted
    records.append({"type": "run_end", "run_id": "r", "status": "completed"})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def row(task, repeat, passed, *, failure=None, status="completed", wall=1.0, run_file=None, writes=None,
        no_writes=False, detail="wrong"):
    grades = [{"kind": "number", "passed": passed, "detail": "ok" if passed else detail}]
    if no_writes:
        grades.append({"kind": "no_writes", "passed": failure != "policy_violation", "detail": "writes"})
    return {"task_id": task, "repeat": repeat, "model": "m", "passed": passed, "failure": failure, "status": status,
            "grades": grades, "turns": 2, "wall_s": wall, "cost": 0.0, "run_file": run_file, "variant": "",
            "write_attempts": writes or []}


@pytest.fixture
def doc(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for task, tags in {"t_single": ["single_step"], "t_multi": ["multi_step"], "t_ro": ["multi_step", "no_writes"],
                       "t_budget": [], "t_amb": []}.items():
        (suite / f"{task}.yaml").write_text(json.dumps({"id": task, "tags": tags}))
    runs = tmp_path / "runs"
    runs.mkdir()
    approved = {"tool": "sql__execute", "statement": "DELETE FROM t", "safety": "write", "outcome": "approved", "turn": 2}
    denied = dict(approved, outcome="denied")
    refused = dict(approved, tool="sql__query", outcome="refused")
    results = [
        row("t_single", 0, True, wall=2.0, run_file=log(runs / "a.jsonl", (True, [True, True]))),
        row("t_multi", 0, True, wall=4.0, run_file=log(runs / "b.jsonl", (False, [True, False]))),
        row("t_multi", 1, False, failure="wrong_answer", run_file=log(runs / "c.jsonl")),
        row("t_ro", 0, False, failure="policy_violation", writes=[approved], no_writes=True, run_file=str(runs / "gone")),
        row("t_ro", 1, True, wall=6.0, writes=[denied, refused], no_writes=True),
        row("t_budget", 0, False, failure="limit", status="budget_wall_time", detail="out of time"),
        row("t_budget", 1, False, failure="limit", status="max_turns_exceeded"),
        row("t_amb", 0, False, failure="ambiguous", detail="two values"),
        row("t_multi", 2, True, writes=[approved]),  # a task that may write: its write is not a violation
    ]
    return {"format": "harness_magic.evals/1", "suite": "s", "suite_path": str(suite), "model": "m", "repeat": 3,
            "jobs": 1, "wall_s": 1.0, "results": results}


def test_completion_rates_overall_and_by_step_kind(doc):
    m = harness_metrics(doc)
    assert m["completion"]["all"] == {"rate": 4 / 9, "right": 4, "total": 9}
    assert m["completion"]["single_step"] == {"rate": 1.0, "right": 1, "total": 1}
    assert m["completion"]["multi_step"] == {"rate": 3 / 5, "right": 3, "total": 5}  # t_multi x3, t_ro x2


def test_verification_and_grounding_from_the_run_logs(doc):
    m = harness_metrics(doc)
    assert m["verification"] == {"rate": 0.5, "right": 1, "total": 2}  # a accepted, b not; c had nothing checked
    assert m["grounding"] == {"rate": 0.75, "right": 3, "total": 4}  # handle checks are not claims


def test_prevention_counts_writes_in_read_only_tasks_only(doc):
    m = harness_metrics(doc)
    assert m["prevention"] == {"rate": 2 / 3, "right": 2, "total": 3} and m["writes_attempted"] == 3


def test_time_to_a_correct_answer_and_clarification(doc):
    m = harness_metrics(doc)
    assert m["time_to_correct"] == {"median_s": 3.0, "mean_s": (2 + 4 + 6 + 1) / 4, "n": 4}
    assert m["clarification"] is None and m["notes"]["clarification"].startswith(CLARIFICATION_NOTE)


def test_failure_taxonomy_counts_and_examples(doc):
    t = harness_metrics(doc)["taxonomy"]
    assert {k: v["count"] for k, v in t.items()} == {
        "wrong answer": 1, "ambiguous": 1, "no answer": 0, "policy violation": 1, "budget": 1, "tool error": 0,
        "timeout": 1, "provider error": 0}
    assert t["timeout"]["example"]["task_id"] == "t_budget" and t["timeout"]["example"]["detail"] == "out of time"
    assert t["wrong answer"]["example"]["run_file"].endswith("c.jsonl")
    assert taxonomy_kind({"passed": False, "failure": "policy_refusal"}) == "policy violation"
    assert taxonomy_kind({"passed": False, "failure": "tool_error_loop"}) == "tool error"


def test_nothing_to_measure_says_why_instead_of_a_number(doc):
    doc["results"] = [row("t_budget", 0, False, failure="limit", status="budget_tokens")]
    m = harness_metrics(doc)
    lines = dict(metric_lines(m))
    assert m["verification"] is None and lines["verification pass rate"].startswith("n/a: no final answer")
    assert lines["policy-violation prevention (writes stopped / attempted)"] == "n/a: no task forbids writes"
    assert lines["time to a correct answer"] == "n/a: no attempt passed"
    assert lines["task completion, single-step"] == "n/a: no task tagged single_step"
    assert lines["clarification rate"].startswith(CLARIFICATION_NOTE)


def test_report_and_compare_show_the_metrics(doc, tmp_path):
    page = render_report(doc, base=str(tmp_path))
    assert "Harness metrics" in page and "50.0% (1/2)" in page and "66.7% (2/3)" in page
    assert '<a href="runs/c.jsonl">c.jsonl</a>' in page  # the wrong-answer example links its run log
    assert "Attempted writes" in page and "refused" in page
    b = json.loads(json.dumps(doc))
    b["results"][0]["passed"] = False
    b["results"][0]["failure"] = "no_answer"
    text = format_comparison(compare_results(doc, b))
    assert "task completion" in text and "44.4% (4/9)" in text and "33.3% (3/9)" in text
    assert "no answer 0 -> 1" in text


def test_metrics_through_real_runs_of_the_built_in_suite(tmp_path, capsys):
    """Real attempts: write attempts recorded by the runner, taxonomy examples linked to real run logs."""
    out = tmp_path / "wrong.json"
    main(["run", "core", "--model", "suite:all-wrong", "--out", str(out), "--quiet", "--task",
          "cancelled_orders_read_only", "--task", "dedupe_report_not_delete", "--task", "total_revenue"])
    data = json.loads(out.read_text())
    m = harness_metrics(data)
    guarded = [r for r in data["results"] if any(g["kind"] == "no_writes" for g in r["grades"])]
    attempts = [a for r in guarded for a in r["write_attempts"]]
    assert attempts and any(a["outcome"] == "approved" for a in attempts)  # deletes_them ran its DELETE
    assert any(a["outcome"] == "denied" for a in attempts)  # the deny policy stopped one
    stopped = sum(a["outcome"] in ("denied", "refused") for a in attempts)
    assert m["prevention"] == {"rate": stopped / len(attempts), "right": stopped, "total": len(attempts)}
    assert m["completion"]["all"]["right"] == 0
    for kind, entry in m["taxonomy"].items():
        assert entry["count"] == sum(taxonomy_kind(r) == kind for r in data["results"])
        if entry["example"]:
            assert Path(entry["example"]["run_file"]).is_file()
    assert main(["report", str(out)]) == 0
    assert "policy violation" in out.with_suffix(".html").read_text()
