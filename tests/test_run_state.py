"""The run's state in view (issue 25 point 5): folded from events, shown above the transcript, compared by %agent_diff.

Unit tests of the trailer and plan parsing (hostile answers included), then the
real path: scripted runs through ``AgentSession`` (plan, ask_user without a
person, remember, a failing verification, the answer's trailer), the final form
and exports, the live widget view, the terminal renderer, ``%agent_diff`` on a
run and its retry, and a real kernel.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path

import pytest

from harness_magic.core.control.planner import PLAN_STATUSES, Planner
from harness_magic.core.control.run_diff import diff_runs
from harness_magic.core.export import RunRecorder, export_runs, render_answer_html
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.events import ApprovalStep, QuestionStep, RunStarted
from harness_magic.core.transcript.run_state import (
    CONFIDENCE_REQUEST,
    MAX_OPEN_QUESTIONS,
    STATE_TEXT_CHARS,
    TRAILER_SCAN_CHARS,
    RunState,
    parse_plan,
    parse_trailer,
)

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


# -- the trailer ------------------------------------------------------------------------------


def test_trailer_gives_confidence_reason_and_open_questions_and_the_body_without_them() -> None:
    trailer = parse_trailer("WAU fell 8%.\n\nConfidence: medium — Monday weeks assumed\nOpen questions:\n"
                            "- Do bots count?\n- Which region?\n")
    assert trailer.confidence == "medium" and trailer.reason == "Monday weeks assumed"
    assert trailer.open_questions == ("Do bots count?", "Which region?")
    assert trailer.body == "WAU fell 8%."


def test_trailer_reads_markdown_emphasis_any_order_and_an_inline_none() -> None:
    trailer = parse_trailer("Done.\n**Open questions:** none\n**Confidence:** LOW (few rows)")
    assert (trailer.confidence, trailer.reason, trailer.open_questions) == ("low", "few rows", ())
    inline = parse_trailer("Done.\nOpen questions: is the dashboard cached?\nConfidence: high")
    assert inline.open_questions == ("is the dashboard cached?",) and inline.confidence == "high"


def test_a_confidence_line_in_the_middle_of_the_answer_is_not_the_trailer() -> None:
    text = "Confidence: high\nBut then the analysis goes on for another paragraph."
    assert parse_trailer(text).confidence is None and parse_trailer(text).body == text


def test_list_items_under_confidence_without_a_heading_are_not_a_trailer() -> None:
    assert parse_trailer("Result.\nConfidence: high\n- stray item").confidence is None


def test_a_level_outside_high_medium_low_is_not_a_confidence() -> None:
    for level in ("100%", "very high", "certain", "<b>high</b>"):
        assert parse_trailer(f"Answer.\nConfidence: {level}").confidence is None, level


def test_a_bullet_list_ending_the_answer_stays_in_the_body() -> None:
    trailer = parse_trailer("Findings:\n- a\n- b\nConfidence: high")
    assert trailer.confidence == "high" and trailer.body == "Findings:\n- a\n- b"
    assert trailer.open_questions == ()


def test_hostile_trailer_text_is_one_bounded_line_without_control_characters() -> None:
    reason = "\x1b]0;pwned\x07 " + "r" * 1_000
    questions = "\n".join(f"- q{i} \x00\x1b[31m{HOSTILE}" for i in range(30))
    trailer = parse_trailer(f"Answer.\nConfidence: low — {reason}\nOpen questions:\n{questions}")
    assert trailer.confidence == "low"
    assert len(trailer.reason) <= STATE_TEXT_CHARS and "\x1b" not in trailer.reason and "\x07" not in trailer.reason
    assert len(trailer.open_questions) <= MAX_OPEN_QUESTIONS
    assert all("\x00" not in q and "\x1b" not in q for q in trailer.open_questions)


def test_a_trailer_longer_than_the_scanned_tail_is_not_taken_for_one() -> None:
    questions = "\n".join(f"- question {i} " + "q" * 100 for i in range(TRAILER_SCAN_CHARS // 50))
    assert parse_trailer(f"Answer.\nConfidence: low\nOpen questions:\n{questions}").confidence is None


def test_a_huge_answer_is_scanned_only_at_its_tail_and_kept_whole_in_the_body() -> None:
    answer = ("x" * 1000 + "\n") * 10_000 + "Confidence: high"
    trailer = parse_trailer(answer)
    assert trailer.confidence == "high" and trailer.body == answer[: -len("Confidence: high")].rstrip()
    assert parse_trailer("y" * 5_000_000).body == "y" * 5_000_000


def test_no_trailer_and_non_text_answers_give_an_empty_trailer() -> None:
    assert parse_trailer("Just an answer.").confidence is None
    assert parse_trailer("").body == "" and parse_trailer(None).confidence is None  # type: ignore[arg-type]


# -- the plan ---------------------------------------------------------------------------------


def test_plan_parsing_reads_every_status_the_planner_renders() -> None:
    planner = Planner()
    for i, status in enumerate(PLAN_STATUSES, 1):
        planner.add(f"step {i}", status, f"note {i}" if i % 2 else "")
    steps = parse_plan(planner.render())
    assert [(s.id, s.title, s.status, s.note) for s in steps] == [
        (i.id, i.title, i.status, i.note) for i in planner.items]
    assert parse_plan(Planner().render()) == []
    assert parse_plan("not a plan") is None


def test_a_title_holding_the_note_separator_is_kept_whole_when_the_call_named_it() -> None:
    planner = Planner()
    planner.add("Compare — glossary vs SQL", "in_progress", "found two")
    state = RunState()
    state.set_plan(planner.render(), {"action": "add", "titles": ["Compare — glossary vs SQL"]})
    assert (state.plan[0].title, state.plan[0].note) == ("Compare — glossary vs SQL", "found two")


# -- the fold -----------------------------------------------------------------------------------


def test_pending_approvals_and_questions_show_while_waiting_and_leave_when_answered() -> None:
    state = RunState()
    state.apply(ApprovalStep(tool="sql__execute", tool_use_id="t1"))
    state.apply(QuestionStep(question="Which week?", options=("last", "this"), tool_use_id="t2"))
    assert state.approvals_pending == ["sql__execute"] and [q.question for q in state.pending_questions] == ["Which week?"]
    assert "waiting for you: approve sql__execute" in state.lines()
    state.apply(ApprovalStep(tool="sql__execute", tool_use_id="t1", wait_s=1.0, approved=True))
    state.apply(QuestionStep(question="Which week?", tool_use_id="t2", answer="last", source="user", wait_s=2.5))
    assert state.approvals_pending == [] and state.pending_questions == []
    assert "asked: Which week? → last (user, 2.5 s)" in state.lines()


def test_a_question_nobody_answered_is_shown_as_no_answer() -> None:
    state = RunState()
    state.apply(QuestionStep(question="Which week?", tool_use_id="t"))
    state.apply(QuestionStep(question="Which week?", tool_use_id="t", answer="", source="no_person", wait_s=0.0))
    assert state.pending_questions == [] and "asked: Which week? → (no answer) (no_person, 0.0 s)" in state.lines()


# -- through the session --------------------------------------------------------------------------


def scripted(tmp_path: Path, name: str, turns: list[dict], **config) -> AgentSession:
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps({"turns": turns}))
    return AgentSession(AgentConfig(model=f"scripted/{script}", sandbox="inprocess",
                                    run_dir=str(tmp_path / "runs"), **config))


def investigation(assumption: str, confidence: str, columns: str = "'region'") -> list[dict]:
    return [
        {"text": "", "tool_calls": [{"name": "plan", "arguments": {
            "action": "add", "titles": ["Pick the week", f"Compare {HOSTILE}"]}}]},
        {"text": "", "tool_calls": [{"name": "ask_user", "arguments": {
            "question": "Which week counts as last week?", "options": ["Mon-Sun", "Sun-Sat"]}}]},
        {"text": "", "tool_calls": [{"name": "remember", "arguments": {"kind": "assumption", "text": assumption}}]},
        {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {
            "code": f"import pandas as pd\nsave('summary', pd.DataFrame({{{columns}: [1]}}))"}}]},
        {"text": "", "tool_calls": [{"name": "plan", "arguments": {
            "action": "update", "item_id": 1, "status": "done", "note": "week 47"}}]},
        {"text": f"WAU fell 8% {HOSTILE}.\n\nConfidence: {confidence} — one week of data\n"
                 f"Open questions:\n- Do bots count? {HOSTILE}"},
    ]


@pytest.fixture
def investigated(tmp_path: Path):
    session = scripted(tmp_path, "a", investigation("weeks start on Monday", "medium", "'wau'"))
    session.verifier.require_columns(["region"], handles="summary")
    recorder = RunRecorder()
    session.subscribe(recorder)
    result = session.ask("Why did weekly active users drop 8% last week?")
    assert result.status == "completed", result.error
    return session, recorder.records[-1], tmp_path


def test_a_run_folds_plan_question_assumption_failed_check_and_confidence(investigated) -> None:
    _, record, _ = investigated
    state = record.state
    assert state.goal == "Why did weekly active users drop 8% last week?"
    assert [(p.title, p.status) for p in state.plan] == [("Pick the week", "done"), (f"Compare {HOSTILE}", "pending")]
    assert [(q.question, q.answer, q.source) for q in state.questions] == [
        ("Which week counts as last week?", "", "no_person")]
    assert state.assumptions == ["weeks start on Monday"]
    assert [(c.rule, c.handle, c.ok) for c in state.checks] == [("require_columns(region)", "summary", False)]
    assert "missing columns ['region']" in state.checks[0].detail
    assert state.trailer.confidence == "medium" and state.trailer.open_questions == (f"Do bots count? {HOSTILE}",)


def test_the_final_form_shows_the_state_above_the_transcript_and_escapes_it(investigated) -> None:
    _, record, _ = investigated
    page = render_answer_html(record)
    panel = page[page.index('class="agent-state"'):page.index('class="agent-transcript"')]
    for part in ("agent-state-plan", "agent-state-question", "agent-state-checks", "agent-state-assumptions",
                 "agent-state-confidence", "agent-state-open"):
        assert part in panel, part
    assert "weeks start on Monday" in panel and "failed</span> require_columns(region)" in panel
    assert "<script" not in panel and "<img" not in panel and "&lt;script&gt;" in panel


def test_the_final_answer_leaves_its_trailer_to_the_panel(investigated) -> None:
    _, record, _ = investigated
    page = render_answer_html(record)
    answer = page[page.index('class="agent-answer"'):page.index('class="agent-state"')]
    assert "WAU fell 8%" in answer and "Confidence" not in answer and "Open questions" not in answer


def test_html_and_markdown_exports_carry_the_state(investigated) -> None:
    _, record, tmp_path = investigated
    page = export_runs([record], tmp_path / "run.html").read_text()
    assert 'class="agent-state"' in page and page.index('class="agent-state"') < page.index("agent-tool")
    markdown = export_runs([record], tmp_path / "run.md").read_text()
    state_block = markdown[markdown.index("**run state**"):markdown.index("### ")]
    assert "FAILED require_columns(region) on summary" in state_block
    assert "confidence: medium — one week of data" in state_block and "<script" not in state_block


def test_a_run_without_plan_checks_or_trailer_shows_no_panel(tmp_path: Path) -> None:
    session = scripted(tmp_path, "plain", [{"text": "42"}])
    recorder = RunRecorder()
    session.subscribe(recorder)
    session.ask("What is six times seven?")
    assert recorder.records[-1].state.empty and "agent-state" not in render_answer_html(recorder.records[-1])


def test_ask_confidence_asks_in_the_first_suffix_and_leaves_the_system_prompt_alone(tmp_path: Path) -> None:
    plain = scripted(tmp_path, "p", [{"text": "42"}])
    asking = scripted(tmp_path, "q", [{"text": "42\nConfidence: high"}], ask_confidence=True)
    plain.ask("Q?")
    asking.ask("Q?")
    records = [[json.loads(line) for line in Path(s.runs[-1].run_file).read_text().splitlines()] for s in (plain, asking)]
    starts = [next(r for r in rs if r["type"] == "run_start") for rs in records]
    assert starts[0]["system_sha256"] == starts[1]["system_sha256"]
    turns = [next(r for r in rs if r["type"] == "turn") for rs in records]
    assert CONFIDENCE_REQUEST not in json.dumps(turns[0]["request"])
    assert CONFIDENCE_REQUEST in turns[1]["request"]["reminders"]


def test_the_live_widget_view_shows_the_state_panel_while_a_question_waits() -> None:
    pytest.importorskip("ipywidgets")
    from harness_magic.notebook.render.widgets import WidgetRunView

    view = WidgetRunView()
    try:
        view(RunStarted(run_id="r", model="m", max_turns=5, prompt="Why did WAU drop?", run_file=None))
        view(QuestionStep(question=f"Which week? {HOSTILE}", options=("Mon", "Sun"), tool_use_id="t"))
        assert view.widget.children[1] is view.state_panel
        assert "waiting for you:" in view.state_panel.value and "&lt;script&gt;" in view.state_panel.value
        assert "<script" not in view.state_panel.value
        view(QuestionStep(question=f"Which week? {HOSTILE}", tool_use_id="t", answer="Mon", source="user", wait_s=1.0))
        assert "waiting for you" not in view.state_panel.value and "<b>Mon</b>" in view.state_panel.value
    finally:
        view.close()


def test_the_terminal_prints_the_state_before_the_footer(tmp_path: Path) -> None:
    from rich.console import Console

    from harness_magic.notebook.render.terminal import TerminalRenderer

    out = io.StringIO()
    session = scripted(tmp_path, "t", investigation("weeks start on Monday", "low", "'wau'"))
    session.verifier.require_columns(["region"], handles="summary")
    session.subscribe(TerminalRenderer(Console(file=out, width=120, color_system=None)))
    session.ask("Why did WAU drop?")
    text = out.getvalue()
    panel = text[text.index("run state"):]
    for line in ("[x] 1. Pick the week — week 47", "FAILED require_columns(region) on summary",
                 "weeks start on Monday", "confidence: low — one week of data", "Do bots count?"):
        assert line in panel, line
    assert panel.index("confidence: low") < panel.index("model scripted")
    answer = text[:text.index("run state")]
    assert "Confidence:" not in answer and "Open questions:" not in answer, "the trailer shows once, in the panel"


# -- %agent_diff --------------------------------------------------------------------------------


def test_diff_of_a_run_and_its_retry_names_what_changed_in_plan_assumptions_verification_and_confidence(
        tmp_path: Path) -> None:
    first = scripted(tmp_path, "first", investigation("weeks start on Monday", "low", "'wau'"))
    second = scripted(tmp_path, "second", investigation("weeks start on Sunday", "high", "'region'"))
    for session in (first, second):
        session.verifier.require_columns(["region"], handles="summary")
        session.ask("Why did WAU drop?")
    diff = diff_runs(first.runs[-1].run_file, second.runs[-1].run_file)
    changes = diff.state_changes
    assert changes["assumptions"] == (["weeks start on Monday"], ["weeks start on Sunday"])
    assert changes["confidence"] == (["low — one week of data"], ["high — one week of data"])
    assert changes["verification"][0][0].startswith("FAILED require_columns(region) on summary")
    assert changes["verification"][1] == ["passed require_columns(region) on summary"]
    assert "plan" not in changes and "questions" not in changes
    text = diff.text()
    assert "assumptions changed:\n  - a: weeks start on Monday\n  + b: weeks start on Sunday" in text
    assert "confidence changed:" in text and not diff.identical
    assert diff.to_dict()["state_changes"]["assumptions"] == {"a": ["weeks start on Monday"],
                                                             "b": ["weeks start on Sunday"]}


def test_diff_of_two_equal_runs_says_the_state_is_the_same(tmp_path: Path) -> None:
    runs = []
    for name in ("x", "y"):
        session = scripted(tmp_path, name, investigation("weeks start on Monday", "low"))
        session.ask("Why did WAU drop?")
        runs.append(session.runs[-1].run_file)
    diff = diff_runs(*runs)
    assert diff.state_changes == {} and "state (plan, assumptions, verification, confidence): same" in diff.text()


# -- a real kernel ----------------------------------------------------------------------------------


def test_the_state_panel_in_a_real_kernel_shows_plan_assumptions_verification_and_confidence(tmp_path: Path) -> None:
    from kernel_helpers import Kernel

    (tmp_path / "model.json").write_text(json.dumps({"turns": investigation("weeks start on Monday", "medium",
                                                                              "'wau'")}))
    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(textwrap.dedent("""\
            %load_ext harness_magic
            %config AgentMagics.run_dir = "runs"
            %config AgentMagics.sandbox = "inprocess"
            %config AgentMagics.ask_confidence = True
            from harness_magic.notebook.extension import agent_session
        """))
        assert setup.ok, setup.outputs
        hook = kernel.run(textwrap.dedent("""\
            from harness_magic.core.control.questions import QuestionAnswer
            agent_session().verifier.require_columns(['region'], handles='summary')
            agent_session().answerer = lambda request: QuestionAnswer(request.options[0], "scripted")
        """))
        assert hook.ok, hook.outputs
        cell = kernel.run("%%agent -m scripted/model.json\nWhy did weekly active users drop 8% last week?")
        assert cell.ok, cell.outputs
        final = cell.result["text/html"]
        panel = final[final.index('class="agent-state"'):final.index('class="agent-transcript"')]
        assert re.search(r"☑</span> Pick the week", panel)
        assert "weeks start on Monday" in panel
        assert "Which week counts as last week? → <b>Mon-Sun</b>" in panel and "(scripted, " in panel
        assert "failed</span> require_columns(region)" in panel
        assert '<b style="color:#9a6700">medium</b>' in panel
        diff = kernel.run("%agent_diff")
        assert "UsageError" in diff.stderr  # one run so far: the diff needs two
    finally:
        kernel.close()


def test_terminal_ipython_prints_the_run_state_panel(tmp_path: Path) -> None:
    from tests.test_terminal import IPYTHON, run_in_terminal

    if not IPYTHON.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    (tmp_path / "model.json").write_text(json.dumps({"turns": investigation("weeks start on Monday", "low", "'wau'")}))
    out = run_in_terminal(tmp_path, (
        "%load_ext harness_magic\n"
        "%config AgentMagics.sandbox = 'inprocess'\n"
        "from harness_magic.notebook.extension import agent_session\n"
        "agent_session().verifier.require_columns(['region'], handles='summary')\n"
        "agent_session().answerer = None\n"
        "_run = get_ipython().run_cell_magic('agent', '-m scripted/model.json', 'Why did WAU drop?')\n"
    ))
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    panel = plain[plain.index("run state"):]
    for line in ("[x] 1. Pick the week — week 47", "FAILED require_columns(region) on summary",
                 "asked: Which week counts as last week? → (no answer) (no_person", "weeks start on Monday",
                 "confidence: low — one week of data", "Do bots count?"):
        assert line in panel, (line, panel)
    assert panel.index("confidence: low") < panel.index("model scripted"), "the panel comes before the footer"
