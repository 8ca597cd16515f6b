"""Eval clarification scoring (issue 25): a task declares whether a question is expected and what the
simulated user replies; attempts record the questions they asked; report and compare give the rates.

Runs are real suite runs (AgentSession, its ask_user tool, sandbox worker) with scripted models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_magic.core.control.questions import NO_ANSWER_TEXT
from harness_magic.evals.compare import compare_results, format_comparison
from harness_magic.evals.metrics import CLARIFICATION_NOTE, harness_metrics, metric_lines
from harness_magic.evals.report import render_report
from harness_magic.evals.runner import ALL_WRONG, run_suite
from harness_magic.evals.schema import SuiteError, load_suite

ASKING = ["ask_fiscal_year_revenue", "ask_active_customers_q2"]

TASK = """\
id: {id}
prompt: "How many rows does `t` have? End with ANSWER: <number>."
inputs:
  t: {{file: t.csv}}
{clarification}graders:
- number: {{expected: 3, abs_tol: 0}}
scripts:
  reference:
  - ask: {{question: "Count the header too?"}}
  - text: "ANSWER: 3"
  wrong:
  - name: silent
    expect: wrong_answer
    turns:
    - text: "ANSWER: 4"
"""


def suite(tmp_path: Path, **tasks: str) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir(exist_ok=True)
    (folder / "t.csv").write_text("a\n1\n2\n3\n")
    for task_id, clarification in tasks.items():
        (folder / f"{task_id}.yaml").write_text(TASK.format(id=task_id, clarification=clarification))
    return folder


@pytest.fixture(scope="module")
def reference_and_wrong(tmp_path_factory):
    core = load_suite("core")
    out = tmp_path_factory.mktemp("clarify")
    ref = run_suite(core, "suite:reference", tasks=ASKING + ["total_revenue"], out_dir=out / "ref")
    wrong = run_suite(core, ALL_WRONG, tasks=ASKING, out_dir=out / "wrong")
    return ref, wrong


def test_the_reference_scripts_ask_and_the_simulated_user_replies(reference_and_wrong):
    ref, _ = reference_and_wrong
    by_id = {r["task_id"]: r for r in ref["results"]}
    assert all(r["passed"] for r in ref["results"])
    core = {t.id: t for t in load_suite("core").tasks}
    for task_id in ASKING:
        result = by_id[task_id]
        assert result["clarification_expected"] is True
        [question] = result["questions"]
        assert question["source"] == "scripted" and question["answer"] == core[task_id].clarification.reply
    assert by_id["total_revenue"]["clarification_expected"] is None and by_id["total_revenue"]["questions"] == []
    m = harness_metrics(ref)
    assert m["clarification"] == {"rate": 1.0, "right": 2, "total": 2}
    assert m["unneeded_questions"] == {"rate": 0.0, "right": 0, "total": 1}
    lines = dict(metric_lines(m))
    assert lines["clarification rate"] == "100.0% (2/2)"
    assert lines["questions asked when none was expected"] == "0.0% (0/1)"


def test_the_wrong_scripts_guess_fail_and_score_no_clarification(reference_and_wrong):
    _, wrong = reference_and_wrong
    assert [(r["passed"], r["failure"], r["questions"]) for r in wrong["results"]] == [(False, "wrong_answer", [])] * 2
    assert harness_metrics(wrong)["clarification"] == {"rate": 0.0, "right": 0, "total": 2}


def test_report_and_compare_show_the_clarification_rate(reference_and_wrong, tmp_path):
    ref, wrong = reference_and_wrong
    page = render_report(ref)
    assert "clarification rate" in page and "100.0% (2/2)" in page
    assert "questions asked when none was expected" in page
    assert "<h2>Clarifying questions</h2>" in page and "When does your fiscal year 2024 start and end?" in page
    _, wrong = reference_and_wrong
    hostile = {**wrong, "results": [dict(wrong["results"][0], questions=[
        {"question": "<script>alert(1)</script>", "answer": None, "source": "no_person", "turn": 1}])]}
    missed = render_report(wrong)
    assert missed.count("(asked none)") == 2  # both wrong scripts were expected to ask
    escaped = render_report(hostile)
    assert "<script>alert(1)" not in escaped and "&lt;script&gt;alert(1)" in escaped
    a = {**wrong, "results": [dict(r, variant="") for r in wrong["results"]]}
    b = {**ref, "results": [r for r in ref["results"] if r["task_id"] in ASKING]}
    text = format_comparison(compare_results(a, b), "A", "B")
    row = next(line for line in text.splitlines() if line.startswith("clarification rate"))
    assert "0.0% (0/2)" in row and "100.0% (2/2)" in row


def test_without_a_declared_reply_a_question_gets_the_no_person_answer_and_counts_as_unneeded(tmp_path):
    folder = suite(tmp_path, undeclared="", declined="clarification: {expected: false}\n")
    data = run_suite(load_suite(folder), "suite:reference", out_dir=tmp_path / "runs")
    for result in data["results"]:
        [question] = result["questions"]
        assert question["source"] == "no_person" and not question["answer"]
        assert result["passed"]  # the script still answers 3
    log = Path(data["results"][0]["run_file"]).read_text()
    assert NO_ANSWER_TEXT in log  # what the model was told
    m = harness_metrics(data)
    assert m["clarification"] is None and m["notes"]["clarification"] == CLARIFICATION_NOTE
    assert m["unneeded_questions"] == {"rate": 1.0, "right": 2, "total": 2}


def test_a_task_not_expecting_a_question_may_still_give_a_reply(tmp_path):
    folder = suite(tmp_path, polite='clarification: {expected: false, reply: "No, data rows only."}\n')
    [result] = run_suite(load_suite(folder), "suite:reference", out_dir=tmp_path / "runs")["results"]
    assert result["clarification_expected"] is False
    assert result["questions"][0]["answer"] == "No, data rows only." and result["questions"][0]["source"] == "scripted"


def test_results_that_predate_question_recording_are_counted_in_neither_rate():
    old = {"suite": "s", "model": "m", "results": [
        {"task_id": "a", "repeat": 0, "passed": True, "grades": [], "wall_s": 1.0},
        {"task_id": "b", "repeat": 0, "passed": True, "grades": [], "wall_s": 1.0, "clarification_expected": True,
         "questions": [{"question": "q", "answer": "x", "source": "scripted", "turn": 1}]}]}
    m = harness_metrics(old)
    assert m["clarification"] == {"rate": 1.0, "right": 1, "total": 1}
    assert m["unneeded_questions"] is None
    assert "1 result from before questions were recorded" in m["notes"]["unneeded_questions"]


@pytest.mark.parametrize("clarification, message", [
    ("clarification: {expected: yes please}\n", "clarification.expected: expected true or false"),
    ("clarification: {expected: true}\n", "clarification.reply: a task that expects a question needs the reply"),
    ("clarification: {expected: true, reply: 42}\n", "clarification.reply: expected a non-empty string, got 42"),
    ("clarification: {expected: true, reply: '   '}\n", "clarification.reply: expected a non-empty string"),
    ("clarification: {expected: true, reply: ok, when: always}\n",
     r"clarification: unknown key\(s\) when; allowed: expected, reply"),
    ("clarification: [true]\n", "clarification: expected a mapping, got list"),
    (f"clarification: {{expected: true, reply: {'x' * 2001}}}\n", "clarification.reply: 2001 characters; at most"),
])
def test_a_bad_clarification_is_refused_naming_the_field(tmp_path, clarification, message):
    folder = suite(tmp_path, bad=clarification)
    with pytest.raises(SuiteError, match=message) as info:
        load_suite(folder)
    assert "bad.yaml" in str(info.value)


def test_results_json_carries_the_questions(reference_and_wrong):
    ref, _ = reference_and_wrong
    again = json.loads(json.dumps(ref))
    assert harness_metrics(again)["clarification"]["right"] == 2
