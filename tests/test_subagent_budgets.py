"""A subagent gets at most what is left of its parent's budgets, and its use counts against the parent."""

from __future__ import annotations

import time

from harness_magic.core.control.budgets import Budgets
from harness_magic.core.cache import SessionCache
from harness_magic.core.transcript.log import read_log
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.control.subagent import enable_subagents
from harness_magic.core.execution.tools import ToolSpec

GREEDY_CALLS = 80
"""What a runaway (or prompt-injected) subagent asks for."""


def scripted(turns):
    return ProviderAdapter("scripted/budget", transport=ScriptedModel(turns))


def counting_tool(counter, sleep_s=0.0):
    def work() -> str:
        counter.append(time.monotonic())
        time.sleep(sleep_s)
        return "ok"

    return ToolSpec(name="work", description="Do one unit of work.", parameters={"type": "object", "properties": {}},
                    handler=work)


def build(tmp_path, budgets, *, sleep_s=0.0, parent_extra=()):
    counter: list[float] = []
    child_turns = [{"tool_calls": [{"name": "work", "arguments": {}}]}] * GREEDY_CALLS + [{"text": "child done"}]
    parent_turns = [{"tool_calls": [{"name": "subagent", "arguments": {"task": "grind"}}]}, *parent_extra,
                    {"text": "parent done"}]
    parent = Harness(scripted(parent_turns), "sys", [counting_tool(counter, sleep_s)], max_turns=200,
                     run_dir=str(tmp_path), cache=SessionCache())
    budgets.install(parent)
    enable_subagents(parent, adapter_factory=lambda _: scripted(child_turns), max_turns=GREEDY_CALLS + 5,
                     tools_factory=lambda cache, turn: [counting_tool(counter, sleep_s)])
    return parent, counter


def child_end(result):
    parent_log = read_log(result.run_file)
    event = next(r for r in parent_log if r.get("event") == "subagent")
    return event, read_log(event["child_run_file"])[-1]


def test_a_subagent_cannot_exceed_the_parents_tool_call_budget(tmp_path):
    parent, counter = build(tmp_path, Budgets(max_tool_calls=2),
                            parent_extra=[{"tool_calls": [{"name": "work", "arguments": {}}]}])
    result = parent.run_result("go")
    event, end = child_end(result)
    assert end["status"] == "budget_tool_calls"
    assert len(counter) <= 1  # the subagent call is one of the two; the child may make one more
    assert result.status == "budget_tool_calls"  # the child's calls counted against the parent


def test_a_subagent_cannot_exceed_the_parents_wall_time(tmp_path):
    parent, counter = build(tmp_path, Budgets(max_wall_s=1.0), sleep_s=0.2)
    result = parent.run_result("go")
    event, end = child_end(result)
    assert end["status"] == "budget_wall_time"
    assert len(counter) < 10  # not 80: each call sleeps 0.2 s, so the child stopped within about 2 s of work


def test_a_subagent_gets_only_the_tokens_the_parent_has_left(tmp_path):
    probe, _ = build(tmp_path / "probe", Budgets(max_tool_calls=10_000))
    first_turn = next(r for r in read_log(probe.run_result("go").run_file) if r.get("type") == "turn")
    parent_first = first_turn["usage"]["input_tokens"] + first_turn["usage"]["output_tokens"]

    parent, counter = build(tmp_path / "bounded", Budgets(max_tokens=parent_first + 20))
    result = parent.run_result("go")
    event, end = child_end(result)
    assert end["status"] == "budget_tokens" and event["turns"] == 1
    assert result.status == "budget_tokens"  # the child's tokens were counted against the parent


def test_no_subagent_starts_when_the_budget_is_spent(tmp_path):
    parent, counter = build(tmp_path, Budgets(max_tool_calls=1))
    result = parent.run_result("go")
    outcome = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][0]
    assert outcome.is_error and "No budget left for a subagent" in outcome.content
    assert counter == []
