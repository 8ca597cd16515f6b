"""Escalating suffix reminders: thresholds, placement, logging, a byte-stable system prompt."""

from __future__ import annotations

import json

from harness_magic import Harness, ProviderAdapter, ScriptedModel, ToolSpec
from harness_magic.core.control.budgets import Budgets
from harness_magic.core.transcript.log import read_log
from harness_magic.core.transcript.messages import TextBlock
from harness_magic.core.control.planner import Planner
from harness_magic.core.control.reminders import FAILURE_STREAK, NO_PLAN_TURNS, REMINDER_PREFIX, REPEAT_STREAK, ProgressTracker

SYSTEM = "You are a reminder test. Stable prefix."


def tick_tool() -> ToolSpec:
    return ToolSpec(name="tick", description="Tick.", handler=lambda n=0: f"tick {n}",
                    parameters={"type": "object", "properties": {"n": {"type": "integer"}}})


def fail_tool() -> ToolSpec:
    def fail(n: int = 0) -> str:
        raise KeyError(f"no column c{n}")

    return ToolSpec(name="fail", description="Fails.", handler=fail,
                    parameters={"type": "object", "properties": {"n": {"type": "integer"}}})


def calls(*turns) -> list[dict]:
    """Scripted turns: each item is a list of (tool, n) calls; then a final answer."""
    return [{"tool_calls": [{"name": name, "arguments": {"n": n}} for name, n in turn]} for turn in turns] + [
        {"text": "Final answer."}]


def run(tmp_path, turns, *, max_turns=25, budgets=None, planner=True):
    planner_ = Planner() if planner else None
    tools = [tick_tool(), fail_tool()] + ([planner_.tool()] if planner_ else [])
    harness = Harness(ProviderAdapter("scripted", transport=ScriptedModel(turns)), SYSTEM, tools,
                      max_turns=max_turns, run_dir=str(tmp_path / "runs"))
    tracker = ProgressTracker(track_plan=planner, budgets=budgets).install(harness)
    return harness.run_result("work"), tracker


def reminder_turns(tracker, needle: str) -> list[int]:
    return [turn for turn, text in tracker.sent if needle in text]


def test_no_plan_update_escalates_at_one_two_and_three_times_the_threshold(tmp_path):
    result, tracker = run(tmp_path, calls(*[[("tick", i)] for i in range(3 * NO_PLAN_TURNS)]))
    assert result.status == "completed"
    turns = reminder_turns(tracker, "No plan update") + reminder_turns(tracker, "No recorded progress")
    assert turns == [NO_PLAN_TURNS + 1, 2 * NO_PLAN_TURNS + 1, 3 * NO_PLAN_TURNS + 1]
    texts = [text for _, text in tracker.sent]
    assert "Use the plan tool" in texts[0] and "going in circles" in texts[1] and "Stop exploring" in texts[2]


def test_a_plan_update_resets_the_no_progress_count(tmp_path):
    plan_add = {"tool_calls": [{"name": "plan", "arguments": {"action": "add", "titles": ["a"]}}]}
    ticks = calls([("tick", 1)], [("tick", 2)])[:-1]
    result, tracker = run(tmp_path, ticks + [plan_add] + calls([("tick", 3)], [("tick", 4)]))
    assert result.status == "completed" and result.turns == 6
    assert tracker.sent == []  # 2 turns, update, 2 turns: never NO_PLAN_TURNS in a row


def test_failing_calls_escalate_after_the_streak(tmp_path):
    result, tracker = run(tmp_path, calls(*[[("fail", i)] for i in range(2 * FAILURE_STREAK)]), planner=False)
    assert reminder_turns(tracker, "tool calls failed") == [FAILURE_STREAK + 1]
    assert reminder_turns(tracker, "in a row have failed") == [2 * FAILURE_STREAK + 1]


def test_the_same_call_repeated_is_named(tmp_path):
    result, tracker = run(tmp_path, calls(*[[("tick", 5)]] * (REPEAT_STREAK + 1)), planner=False)
    assert reminder_turns(tracker, "same arguments") == [REPEAT_STREAK + 1]
    assert reminder_turns(tracker, "identical tick calls") == [REPEAT_STREAK + 2]
    assert "tick" in tracker.sent[0][1]


def test_final_turn_warning_comes_exactly_on_the_last_turn(tmp_path):
    result, tracker = run(tmp_path, calls(*[[("tick", i)] for i in range(2)]), max_turns=3, planner=False)
    assert result.status == "completed"
    assert tracker.sent == [(3, f"{REMINDER_PREFIX} This is the final turn (3/3): give your final answer now in "
                                "plain text. Tool calls made now will not get another turn.")]


def test_budget_warning_once_past_eighty_percent(tmp_path):
    result, tracker = run(tmp_path, calls(*[[("tick", i)] for i in range(5)]), planner=False,
                          budgets=Budgets(max_tool_calls=5))
    assert reminder_turns(tracker, "tool-call budget is used") == [5]  # after 4 of 5 calls


def test_reminders_land_in_the_suffix_and_the_log(tmp_path):
    result, tracker = run(tmp_path, calls(*[[("tick", i)] for i in range(NO_PLAN_TURNS)]))
    (turn, text), = tracker.sent
    records = [r for r in read_log(result.run_file) if r["type"] == "turn"]
    assert records[turn - 1]["request"]["reminders"] == [text]
    # The reminder is the last block of the tool-result message sent with that turn.
    suffix = records[turn - 1]["request"]["messages_appended"][-1]
    assert suffix["role"] == "user" and suffix["content"][-1] == {"type": "text", "text": text}
    assert all(r["request"]["system_sha256"] == records[0]["request"]["system_sha256"] for r in records)


def test_system_prompt_is_byte_identical_across_requests_over_http(server, tmp_path):
    server.replies = [{"tool_calls": [{"id": f"c{i}", "name": "fail", "arguments": {"n": i}}]} for i in range(5)]
    server.replies.append({"text": "Giving up."})
    adapter = ProviderAdapter("openai/x", api_base=server.api_base, api_key="x", sleep=lambda s: None)
    harness = Harness(adapter, SYSTEM, [fail_tool()], max_turns=6, run_dir=str(tmp_path))
    tracker = ProgressTracker(track_plan=False).install(harness)
    result = harness.run_result("try")
    assert result.status == "completed" and len(tracker.sent) == 3  # failures x2, x4, and the final turn
    systems = {json.dumps(r["messages"][0], sort_keys=True) for r in server.requests}
    assert len(server.requests) == 6 and len(systems) == 1
    assert SYSTEM in systems.pop()
    for turn, text in tracker.sent:
        last = server.requests[turn - 1]["messages"][-1]
        assert last["role"] == "user" and text in json.dumps(last)
        assert all(text not in json.dumps(m) for m in server.requests[turn - 1]["messages"][:1])
    assert isinstance(result.messages[-2].content[-1], TextBlock)
