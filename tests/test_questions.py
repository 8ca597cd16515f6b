"""ask_user: questions through an answerer, no-answer cases, limits, logging, the ambiguity nudge, bounds.

Core tests drive a real :class:`AgentSession` with a scripted model. How the
notebook and the terminal ask (a widget, a prompt the timeout cancels) is
``test_asking.py``; only the typed-reply rule and a bad setting are here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness_magic.core.control.questions import (
    ASSUMPTION_PREFIX,
    MAX_OPTIONS,
    MAX_QUESTION_CHARS,
    NO_ANSWER_TEXT,
    QuestionAnswer,
    QuestionRequest,
    ambiguity,
)
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.events import AssumptionRecorded, QuestionStep
from harness_magic.core.transcript.log import read_log


def ask(question: str, options: list[str] | None = None, why: str = "") -> dict[str, Any]:
    arguments: dict[str, Any] = {"question": question, "why": why}
    if options is not None:
        arguments["options"] = options
    return {"text": "", "tool_calls": [{"name": "ask_user", "arguments": arguments}]}


def session_for(tmp_path: Path, *turns: dict[str, Any], **config: Any) -> tuple[AgentSession, list[Any]]:
    from harness_magic.core.providers.adapter import ProviderAdapter

    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(list(turns)))
    session = AgentSession(AgentConfig(model="scripted/test", sandbox="inprocess", run_dir=str(tmp_path / "runs"),
                                       **config), adapter=adapter)
    events: list[Any] = []
    session.subscribe(events.append)
    return session, events


def results(session: AgentSession) -> list[str]:
    """The text of every ask_user result in the conversation, in order."""
    names = {}
    out = []
    for message in session.harness.messages:
        for block in message.content:
            if getattr(block, "name", None) == "ask_user":
                names[block.id] = True
            if getattr(block, "tool_use_id", None) in names:
                out.append(block.content)
    return out


def steps(events: list[Any]) -> list[QuestionStep]:
    return [e for e in events if isinstance(e, QuestionStep)]


# -- answered -----------------------------------------------------------------------------------


def test_an_answer_reaches_the_model_and_both_steps_are_emitted(tmp_path: Path) -> None:
    session, events = session_for(tmp_path, ask("Which week start?", ["Monday", "Sunday"], "WAU depends on it"),
                                  {"text": "Done."})
    seen: list[QuestionRequest] = []
    session.answerer = lambda request: seen.append(request) or "Monday"
    result = session.ask("Why did weekly active users drop?")
    assert result.status == "completed"
    assert seen[0].question == "Which week start?" and seen[0].options == ("Monday", "Sunday")
    assert seen[0].why == "WAU depends on it" and seen[0].timeout_s == 300.0
    assert results(session) == ["The user answered: Monday"]
    asking, answered = steps(events)
    assert asking.source is None and asking.answer is None
    assert answered.answer == "Monday" and answered.source == "user" and answered.wait_s is not None
    assert asking.tool_use_id == answered.tool_use_id == seen[0].tool_use_id is not None


def test_a_scripted_answer_says_so_in_the_step(tmp_path: Path) -> None:
    session, events = session_for(tmp_path, ask("Which week?"), {"text": "Done."})
    session.answerer = lambda request: QuestionAnswer("the ISO week 2026-W47", source="scripted")
    session.ask("Count orders.")
    assert steps(events)[-1].source == "scripted"
    assert results(session) == ["The user answered: the ISO week 2026-W47"]


def test_the_question_the_answer_and_the_wait_are_in_the_run_log(tmp_path: Path) -> None:
    session, _ = session_for(tmp_path, ask("Gross or net?", ["gross", "net"]), {"text": "Done."})
    session.answerer = lambda request: "net"
    result = session.ask("Revenue last month?")
    logged = [r for r in read_log(result.run_file) if r.get("type") == "event" and r.get("event") == "question"]
    assert len(logged) == 1
    assert logged[0]["question"] == "Gross or net?" and logged[0]["options"] == ["gross", "net"]
    assert logged[0]["answer"] == "net" and logged[0]["source"] == "user" and logged[0]["wait_s"] >= 0


def test_the_wait_is_counted_apart_from_the_tool_time(tmp_path: Path) -> None:
    session, events = session_for(tmp_path, ask("Which?"), {"text": "Done."})

    def slow(request: QuestionRequest) -> str:
        time.sleep(0.3)
        return "this one"

    session.answerer = slow
    session.ask("Which one?")
    finished = next(e for e in events if getattr(e, "kind", None) == "tool_call_finished")
    assert finished.approval_wait_s >= 0.3 and finished.approval_wait_s <= finished.duration_s
    assert steps(events)[-1].wait_s == finished.approval_wait_s


# -- no answer ------------------------------------------------------------------------------------


def test_without_a_person_the_no_answer_text_comes_at_once(tmp_path: Path) -> None:
    session, events = session_for(tmp_path, ask("Which week?"), {"text": "Done."})
    session.ask("Count orders per week.")
    (answered,) = steps(events)  # no asking step: nobody was asked
    assert answered.source == "no_person" and answered.answer == "" and answered.wait_s == 0.0
    (text,) = results(session)
    assert text.startswith(NO_ANSWER_TEXT) and "no person" in text


@pytest.mark.parametrize("raised, source, words", [
    (TimeoutError, "timeout", "nobody answered within 300 s"),
    (KeyboardInterrupt, "interrupt", "interrupted"),
    (RuntimeError, "no_person", "the answerer failed (RuntimeError)"),
])
def test_a_timeout_an_interrupt_or_a_broken_answerer_is_no_answer_and_the_run_goes_on(
        tmp_path: Path, raised: type[BaseException], source: str, words: str) -> None:
    session, events = session_for(tmp_path, ask("Which week?"), {"text": "Done."})

    def answerer(request: QuestionRequest) -> str:
        raise raised()

    session.answerer = answerer
    result = session.ask("Count orders per week.")
    assert result.status == "completed" and result.text == "Done."
    assert steps(events)[-1].source == source
    (text,) = results(session)
    assert text.startswith(NO_ANSWER_TEXT) and words in text


def timed_out(request: QuestionRequest) -> str:
    raise TimeoutError()


def test_an_unanswered_question_points_to_remember_and_the_remembered_assumption_is_recorded(
        tmp_path: Path) -> None:
    session, events = session_for(
        tmp_path, ask("Which definition of active?"),
        {"text": "", "tool_calls": [{"name": "remember", "arguments": {
            "kind": "assumption", "text": "active means at least one event in the week"}}]},
        {"text": f"{ASSUMPTION_PREFIX} active means at least one event in the week\nWAU fell 8%."})
    session.answerer = timed_out
    session.ask("Why did weekly active users drop?")
    (text,) = results(session)
    assert 'remember(kind="assumption"' in text
    (recorded,) = [e for e in events if isinstance(e, AssumptionRecorded)]  # the line after remember: not again
    assert recorded.text == "active means at least one event in the week"


def test_without_a_remember_tool_the_models_assumption_line_is_recorded(tmp_path: Path) -> None:
    session, events = session_for(
        tmp_path, ask("Which definition of active?"),
        {"text": f"{ASSUMPTION_PREFIX} active means at least one event in the week, Monday-based.\nWAU fell 8%."})
    if any(t.name == "remember" for t in session.harness.tools):
        session.harness.remove_tool("remember")
    session.answerer = timed_out
    session.ask("Why did weekly active users drop?")
    (text,) = results(session)
    assert ASSUMPTION_PREFIX in text and "remember(" not in text
    (recorded,) = [e for e in events if isinstance(e, AssumptionRecorded)]
    assert recorded.text == "active means at least one event in the week, Monday-based."
    assert recorded.source == "model" and recorded.tool_use_id == steps(events)[-1].tool_use_id


def test_an_empty_answer_is_no_answer(tmp_path: Path) -> None:
    session, events = session_for(tmp_path, ask("Which?"), {"text": "Done."})
    session.answerer = lambda request: "   "
    session.ask("Which one?")
    assert results(session)[0].startswith(NO_ANSWER_TEXT)


# -- the limit ------------------------------------------------------------------------------------


def test_over_the_limit_the_person_is_not_asked_and_the_model_is_told_the_limit(tmp_path: Path) -> None:
    session, events = session_for(tmp_path, ask("One?"), ask("Two?"), ask("Three?"), {"text": "Done."},
                                  max_questions=2)
    asked: list[str] = []
    session.answerer = lambda request: asked.append(request.question) or "yes"
    session.ask("Go.")
    assert asked == ["One?", "Two?"]
    events_logged = [r.get("event") for r in read_log(session.runs[-1].run_file) if r.get("type") == "event"]
    assert events_logged.count("question") == 2 and events_logged.count("question_over_limit") == 1
    last = results(session)[-1]
    assert last.startswith(NO_ANSWER_TEXT) and "limit of 2 questions per run" in last


def test_the_limit_is_per_run(tmp_path: Path) -> None:
    session, _ = session_for(tmp_path, ask("One?"), {"text": "a"}, ask("Two?"), {"text": "b"}, max_questions=1)
    session.answerer = lambda request: "yes"
    session.ask("First.")
    session.ask("Second.")
    assert results(session) == ["The user answered: yes", "The user answered: yes"]


@pytest.mark.parametrize("setting, value, words", [
    ("max_questions", -1, "max_questions must be a non-negative integer, got -1"),
    ("question_timeout_s", 0, "question_timeout_s must be a positive number of seconds or None, got 0"),
])
def test_bad_settings_are_refused_naming_the_value(setting: str, value: Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        AgentConfig(**{setting: value})


# -- hostile input --------------------------------------------------------------------------------


def test_a_huge_question_and_a_thousand_options_are_bounded(tmp_path: Path) -> None:
    session, _ = session_for(tmp_path, ask("Q" * 10_000_000, [f"option {i}" for i in range(1000)], "W" * 100_000),
                             {"text": "Done."})
    seen: list[QuestionRequest] = []
    session.answerer = lambda request: seen.append(request) or "A" * 1_000_000
    session.ask("Go.")
    request = seen[0]
    assert len(request.question) == MAX_QUESTION_CHARS and len(request.options) == MAX_OPTIONS
    assert len(request.why) <= 500
    (text,) = results(session)
    assert len(text) < 10_000 and f"only the first {MAX_OPTIONS} of 1000 options" in text


def test_bad_arguments_are_tool_errors_naming_the_problem(tmp_path: Path) -> None:
    session, events = session_for(tmp_path, {"text": "", "tool_calls": [
        {"name": "ask_user", "arguments": {"question": "Which?", "options": "Monday"}}]}, {"text": "Done."})
    session.answerer = lambda request: pytest.fail("a malformed question must not reach the person")
    session.ask("Go.")
    assert "options must be a list of strings" in results(session)[0]
    assert not steps(events)


# -- the nudge ------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt, ambiguous", [
    ("Why did weekly active users drop 8% last week?", True),
    ("What was revenue in March?", False),  # revenue follows the data's columns: no nudge
    ("How did churn change over 2025?", True),
    ("Churn means no order in 90 days; how did it change in 2025?", False),
    ("Count the orders placed last week.", True),
    ("Count the orders per day in 2026-03.", False),
    ("Sum the amount column of sales.csv.", False),
    ("Revenue is defined as gross sales minus refunds; compute it for 2025.", False),
])
def test_the_ambiguity_heuristic(prompt: str, ambiguous: bool) -> None:
    assert (ambiguity(prompt) is not None) is ambiguous


def test_an_ambiguous_request_gets_a_nudge_to_ask_and_a_specific_one_none(tmp_path: Path) -> None:
    session, _ = session_for(tmp_path, {"text": "a"}, {"text": "b"})
    vague = session.ask("Why did weekly active users drop?")
    specific = session.ask("Sum the amount column of sales.csv.")

    def reminders(run_file: str) -> list[str]:
        return [r for t in read_log(run_file) if t.get("type") == "turn" for r in t["request"]["reminders"]]

    (nudge,) = reminders(vague.run_file)
    assert "ask_user" in nudge and "'active user'" in nudge
    assert reminders(specific.run_file) == []


def test_with_reminders_off_there_is_no_nudge(tmp_path: Path) -> None:
    session, _ = session_for(tmp_path, {"text": "a"}, reminders=False)
    result = session.ask("Why did weekly active users drop?")
    assert all(not t["request"]["reminders"] for t in read_log(result.run_file) if t.get("type") == "turn")


# -- the notebook's answerer ----------------------------------------------------------------------


@pytest.mark.parametrize("typed, expected", [
    ("2", "Sunday"), (" 1 ", "Monday"), ("3", "3"), ("0", "0"), ("Tuesday, ISO weeks", "Tuesday, ISO weeks"),
    ("", None), ("   ", None),
])
def test_a_typed_number_picks_an_option_other_text_is_the_answer_and_empty_is_none(typed: str, expected: Any) -> None:
    from harness_magic.notebook.questions import answer_for

    assert answer_for(QuestionRequest("Which week start?", ("Monday", "Sunday")), typed) == expected


def test_the_question_text_escapes_control_characters() -> None:
    from harness_magic.notebook.questions import question_text

    text = question_text(QuestionRequest("a\x1b]0;pwned\x07b", ("Mon\x1b[2Jday",)))
    assert "\x1b" not in text and "a\\x1b]0;pwned\\x07b" in text and "1. Mon\\x1b[2Jday" in text


# -- a real kernel: a bad setting ---------------------------------------------------------------------

jupyter_client = pytest.importorskip("jupyter_client")

from kernel_helpers import Kernel, agent_kernel  # noqa: E402


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("questions"), run_dir="runs", sandbox="inprocess", live="off") as k:
        yield k


@pytest.mark.parametrize("line, words", [
    ("%config AgentMagics.max_questions = -1", "max_questions must be a non-negative integer, got -1"),
    ("%config AgentMagics.question_timeout_s = -5.0", "question_timeout_s must be a positive number of seconds"),
])
def test_in_a_kernel_a_bad_question_setting_is_a_one_line_usage_error(kernel: Kernel, line: str, words: str) -> None:
    from kernel_helpers import usage_error

    assert words in usage_error(kernel.run(line))
    assert kernel.value("get_ipython().magics_manager.registry['AgentMagics'].max_questions") == 3
