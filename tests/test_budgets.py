"""Budgets end a run with their own status and a consistent transcript."""

from __future__ import annotations

import time

import pytest

from harness_magic import Harness, ProviderAdapter, ScriptedModel, ToolSpec
from harness_magic.core.control.budgets import BUDGET_STATUSES, Budgets
from harness_magic.core.transcript.log import read_log, reconstruct_transcript
from harness_magic.core.transcript.messages import Message, Usage

SYSTEM = "You are a budget test. Stable prefix."


def tick_tool(delay_s: float = 0.0) -> ToolSpec:
    def tick(n: int = 0) -> str:
        time.sleep(delay_s)
        return f"tick {n}"

    return ToolSpec(name="tick", description="Tick.", handler=tick,
                    parameters={"type": "object", "properties": {"n": {"type": "integer"}}})


def looping_model(turns: int = 20, calls_per_turn: int = 1) -> ScriptedModel:
    """A model that never stops calling tools."""
    return ScriptedModel([{"text": f"step {t}", "tool_calls": [
        {"name": "tick", "arguments": {"n": t * 10 + c}} for c in range(calls_per_turn)]} for t in range(turns)])


def harness_with(budgets: Budgets, tmp_path, *, model=None, adapter=None, delay_s=0.0, max_turns=25) -> Harness:
    adapter = adapter or ProviderAdapter("scripted", transport=model or looping_model())
    harness = Harness(adapter, SYSTEM, [tick_tool(delay_s)], max_turns=max_turns, run_dir=str(tmp_path / "runs"))
    budgets.install(harness)
    return harness


def assert_consistent(result) -> None:
    """Every tool use answered once, in order; the log reconstructs the same transcript; run_end has the status."""
    messages: list[Message] = list(result.messages)
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_uses:
            answers = messages[index + 1].tool_results
            assert [r.tool_use_id for r in answers] == [u.id for u in message.tool_uses]
    assert reconstruct_transcript(result.run_file) == messages
    end = read_log(result.run_file)[-1]
    assert end["type"] == "run_end" and end["status"] == result.status and end["error"] == result.error


def test_token_budget_ends_run_with_budget_tokens(tmp_path):
    result = harness_with(Budgets(max_tokens=150), tmp_path).run_result("count forever")
    assert result.status == "budget_tokens"
    assert result.usage.total_tokens >= 150 and result.turns >= 1
    assert "max_tokens=150" in result.error
    assert_consistent(result)


def test_cost_budget_uses_litellm_pricing_over_http(server, tmp_path):
    # gpt-4o-mini is in litellm's local price table, so each call has a real cost.
    server.replies = [{"text": "more", "tool_calls": [{"id": f"c{i}", "name": "tick", "arguments": {"n": i}}],
                       "usage": {"prompt_tokens": 100_000, "completion_tokens": 1_000}} for i in range(5)]
    adapter = ProviderAdapter("openai/gpt-4o-mini", api_base=server.api_base, api_key="x", sleep=lambda s: None)
    result = harness_with(Budgets(max_cost_usd=0.03), tmp_path, adapter=adapter).run_result("spend")
    assert result.status == "budget_cost"
    assert 0.03 <= result.usage.cost < 0.1
    assert result.turns == 2  # ~$0.0156 per call: stop before the third
    assert_consistent(result)


def test_wall_time_budget_ends_run_between_steps(tmp_path):
    result = harness_with(Budgets(max_wall_s=0.2), tmp_path, delay_s=0.08).run_result("slow work")
    assert result.status == "budget_wall_time"
    assert result.elapsed_s >= 0.2
    # each step sleeps 0.08 s: a run that checks its budget between steps stops by the third (a loaded machine
    # only makes it fewer), where ignoring the budget would run on to max_turns
    assert 1 <= result.turns <= 3
    assert_consistent(result)


def test_tool_call_budget_refuses_calls_past_it_and_stops(tmp_path):
    harness = harness_with(Budgets(max_tool_calls=3), tmp_path, model=looping_model(calls_per_turn=2))
    result = harness.run_result("many calls")
    assert result.status == "budget_tool_calls"
    results = [r for m in result.messages for r in m.tool_results]
    assert [r.is_error for r in results] == [False, False, False, True]
    assert "tool-call budget exhausted" in results[-1].content
    assert_consistent(result)


def test_tool_call_budget_leaves_a_turn_to_answer(tmp_path):
    model = ScriptedModel([{"tool_calls": [{"name": "tick", "arguments": {"n": 1}}]}, {"text": "Answer."}])
    result = harness_with(Budgets(max_tool_calls=1), tmp_path, model=model).run_result("one call")
    assert result.status == "completed" and result.text == "Answer."


def test_turn_budget_keeps_max_turns_exceeded(tmp_path):
    result = harness_with(Budgets(max_turns=2), tmp_path).run_result("loop")
    assert result.status == "max_turns_exceeded" and result.turns == 2
    assert_consistent(result)


def test_token_budget_counts_subagent_usage(tmp_path):
    model = ScriptedModel([{"tool_calls": [{"name": "delegate"}]}, {"text": "never reached"}])
    harness = harness_with(Budgets(max_tokens=10_000), tmp_path, model=model)
    harness.add_tool(ToolSpec(name="delegate", description="Run a subagent.",
                              parameters={"type": "object", "properties": {}},
                              handler=lambda: harness.add_child_usage(Usage(input_tokens=20_000, calls=1))))
    result = harness.run_result("delegate")
    assert result.status == "budget_tokens"
    assert result.subagent_usage.input_tokens == 20_000
    assert result.total_usage.total_tokens == result.usage.total_tokens + 20_000
    assert read_log(result.run_file)[-1]["subagent_usage"]["input_tokens"] == 20_000


def test_budget_statuses_are_named():
    assert set(BUDGET_STATUSES) == {"budget_tokens", "budget_cost", "budget_wall_time", "budget_tool_calls"}


@pytest.mark.parametrize("bad", [{"max_tokens": 0}, {"max_cost_usd": -1.0}, {"max_tool_calls": 1.5},
                                 {"max_wall_s": "10"}])
def test_bad_budget_values_are_rejected_with_the_field_named(bad):
    with pytest.raises((ValueError, TypeError), match=next(iter(bad))):
        Budgets(**bad)
