"""Replay a recorded run exactly, retry from a checkpoint, diff two runs."""

from __future__ import annotations

import pytest

from harness_magic import Harness, InProcessInterpreter, ProviderAdapter, ScriptedModel, SessionCache, make_interpreter_tools
from harness_magic.core.control.budgets import Budgets
from harness_magic.core.transcript.log import read_log, reconstruct_transcript
from harness_magic.core.control.planner import Planner
from harness_magic.core.control.reminders import ProgressTracker
from harness_magic.core.control.recorded import checkpoint_messages, load_run
from harness_magic.core.control.run_diff import diff_runs
from harness_magic.core.control.replay import replay_run, retry_from
from harness_magic.core.control.verification import Verifier

SYSTEM = "You are a replay test. Stable prefix."
LOAD = "import pandas as pd\nsave('sales', pd.DataFrame({'region': ['N', 'S', 'N'], 'q': [1, 1, 2], 'v': [10, 20, 15]}))"
GROWTH = "g = sales.groupby('region')['v'].agg(['first', 'last'])\ng['growth'] = g['last'] / g['first'] - 1\nsave('growth', g.reset_index())"
BAD = "save('growth', sales.head(1))"


def call(code: str, id_: str | None = None) -> dict:
    out = {"name": "python_interpreter", "arguments": {"code": code}}
    if id_:
        out["id"] = id_
    return out


def build(tmp_path, adapter, *, cache=None, budgets=None, name="runs") -> Harness:
    """A harness like a session's: interpreter, plan tool, reminders and a verifier."""
    cache = cache if cache is not None else SessionCache()
    planner = Planner()
    harness = Harness(adapter, SYSTEM, make_interpreter_tools(cache, InProcessInterpreter()) + [planner.tool()],
                      max_turns=8, run_dir=str(tmp_path / name), cache=cache)
    ProgressTracker(budgets=budgets).install(harness)
    Verifier().require_columns(["growth"], handles="growth").install(harness)
    if budgets:
        budgets.install(harness)
    return harness


ORIGINAL = [
    {"text": "Loading.", "tool_calls": [call(LOAD)]},
    {"tool_calls": [call(BAD)]},  # fails verification: no growth column
    {"tool_calls": [call(BAD)]},  # same call again: failure + repeat reminders
    {"tool_calls": [call(GROWTH), {"name": "plan", "arguments": {"action": "add", "titles": ["growth"]}}]},
    {"text": "North grew fastest (+50%)."},
]


def record(tmp_path, turns=ORIGINAL, **options):
    harness = build(tmp_path, ProviderAdapter("scripted", transport=ScriptedModel(turns)), **options)
    harness.run_result("Which region grew fastest?")
    return harness


def test_replay_reproduces_the_recorded_transcript_exactly(tmp_path):
    harness = record(tmp_path)
    log = harness.run_file
    recorded = reconstruct_transcript(log)
    assert any("[harness reminder]" in m.text for m in recorded if m.role == "user")  # reminders were recorded
    replay = replay_run(log, run_dir=tmp_path / "replay")
    assert replay.identical, replay.first_difference
    assert list(replay.result.messages) == recorded == harness.messages
    original_end = read_log(log)[-1]
    assert replay.result.status == original_end["status"] == "completed"
    assert replay.result.usage.to_dict() == original_end["usage"]  # recorded usage is played back
    assert replay.result.text == "North grew fastest (+50%)."


def test_replay_with_live_tools_reproduces_a_deterministic_run(tmp_path):
    log = record(tmp_path).run_file
    cache = SessionCache()
    planner = Planner()
    tools = make_interpreter_tools(cache, InProcessInterpreter()) + [planner.tool()]
    replay = replay_run(log, tools=tools, cache=cache, run_dir=tmp_path / "replay")
    # Live tools, no verifier: the verification error does not happen, so the transcripts part there.
    assert replay.first_difference is not None
    assert replay.replayed[: replay.first_difference] == replay.recorded[: replay.first_difference]
    assert "growth" in cache.names()


def test_replay_reproduces_a_budget_stop(tmp_path):
    harness = record(tmp_path, budgets=Budgets(max_tool_calls=2))
    assert read_log(harness.run_file)[-1]["status"] == "budget_tool_calls"
    replay = replay_run(harness.run_file, run_dir=tmp_path / "replay")
    assert replay.identical and replay.result.status == "budget_tool_calls"


def test_checkpoint_is_the_transcript_before_the_turn_without_its_reminders(tmp_path):
    log = record(tmp_path).run_file
    recorded = reconstruct_transcript(log)
    checkpoint = checkpoint_messages(log, 4)  # prompt, then 3 model messages, each answered
    assert len(checkpoint) == 7 and checkpoint[:6] == recorded[:6]
    assert checkpoint[6].tool_results == recorded[6].tool_results
    assert "[harness reminder]" in recorded[6].text and not checkpoint[6].text  # turn 4's reminders dropped
    assert checkpoint_messages(log, 1) == recorded[:1]
    with pytest.raises(ValueError, match="cannot retry from turn 9"):
        checkpoint_messages(log, 9)


def test_retry_from_a_checkpoint_reuses_the_prefix_and_calls_the_model_from_there(tmp_path):
    harness = record(tmp_path)
    log = harness.run_file
    # Same session (the cache still holds `sales`); a different model from turn 4 on.
    alternative = ScriptedModel([{"tool_calls": [call(GROWTH)]}, {"text": "North grew fastest (+50%), South flat."}])
    harness.adapter = ProviderAdapter("scripted-b", transport=alternative)
    retry = retry_from(log, 4, harness)
    assert retry.status == "completed" and retry.turns == 2
    assert list(retry.messages[:7]) == checkpoint_messages(log, 4)
    assert retry.text == "North grew fastest (+50%), South flat."
    start = read_log(retry.run_file)[0]
    assert start["retry"]["of_run"] == load_run(log).run_id and start["retry"]["from_turn"] == 4
    assert start["prompt"] is None and len(start["history"]) == 7
    assert alternative.remaining == 0
    # The retry's own log replays exactly too, and counts turns from the question.
    assert replay_run(retry.run_file, run_dir=tmp_path / "replay").identical
    assert load_run(retry.run_file).turns == 5


def test_diff_of_two_runs_shows_changed_calls_and_answer(tmp_path):
    log_a = record(tmp_path).run_file
    other = [ORIGINAL[0], {"tool_calls": [call(GROWTH)]}, {"text": "North grew fastest."}]
    log_b = build(tmp_path, ProviderAdapter("scripted", transport=ScriptedModel(other)), name="b") \
        .run_result("Which region grew fastest?").run_file
    diff = diff_runs(log_a, log_b)
    assert diff.same_question and diff.answer_changed and not diff.identical
    assert [c.op for c in diff.calls] == ["same", "removed", "removed", "result_changed", "removed"]
    assert diff.first_divergence_turn == 2
    text = diff.text()
    assert "first divergence: turn 2" in text
    assert "- turn 2: python_interpreter(code=\"save('growth', sales.head(1))\")  (only in a)" in text
    assert "-North grew fastest (+50%)." in text and "+North grew fastest." in text
    assert diff.to_dict()["b"]["turns"] == 3


def test_diff_marks_results_that_changed_for_the_same_call(tmp_path):
    log_a = record(tmp_path, turns=[{"tool_calls": [call("1 + 1")]}, {"text": "2"}]).run_file
    log_b = record(tmp_path, turns=[{"tool_calls": [call("1 + 1")]}, {"text": "2"}]).run_file
    assert diff_runs(log_a, log_b).identical
    log_c = record(tmp_path, turns=[{"tool_calls": [call("1 + 2")]}, {"text": "3"}]).run_file
    diff = diff_runs(log_a, log_c)
    assert [c.op for c in diff.calls] == ["changed"] and "! a: turn 1" in diff.text()
