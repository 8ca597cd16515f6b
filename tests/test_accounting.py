"""Token and cost accounting: per turn, per run, cached tokens, subagents; session wiring of budgets."""

from __future__ import annotations

from harness_magic import Harness, ProviderAdapter, ScriptedModel, SessionCache, ToolSpec
from harness_magic.core.control.budgets import Budgets
from harness_magic.core.execution.interpreter import InProcessInterpreter
from harness_magic.core.transcript.log import read_log
from harness_magic.core.transcript.messages import Usage
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME, enable_subagents


def tick_tool() -> ToolSpec:
    return ToolSpec(name="tick", description="Tick.", handler=lambda n=0: f"tick {n}",
                    parameters={"type": "object", "properties": {"n": {"type": "integer"}}})


def test_per_turn_usage_with_cached_tokens_sums_to_the_run_over_http(server, tmp_path):
    server.replies = [
        {"tool_calls": [{"id": "c1", "name": "tick", "arguments": {"n": 1}}],
         "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 0}},
        {"tool_calls": [{"id": "c2", "name": "tick", "arguments": {"n": 2}}],
         "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "cached_tokens": 1000}},
        {"text": "Done.", "usage": {"prompt_tokens": 1300, "completion_tokens": 10, "cached_tokens": 1200}},
    ]
    adapter = ProviderAdapter("openai/gpt-4o-mini", api_base=server.api_base, api_key="x", sleep=lambda s: None)
    harness = Harness(adapter, "sys", [tick_tool()], run_dir=str(tmp_path))
    finished = []
    harness.subscribe(lambda e: finished.append(e) if e.kind == "turn_finished" else None)
    result = harness.run_result("go")
    turns = [r for r in read_log(result.run_file) if r["type"] == "turn"]
    assert [t["usage"]["cached_tokens"] for t in turns] == [0, 1000, 1200]
    per_turn = sum((Usage.from_dict(t["usage"]) for t in turns), Usage())
    assert per_turn == result.usage
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (3500, 100, 2200)
    assert result.usage.cost > 0 and result.usage.calls == 3  # litellm's price for gpt-4o-mini
    assert read_log(result.run_file)[-1]["usage"] == result.usage.to_dict() == turns[-1]["cumulative_usage"]
    assert [e.total_usage.total_tokens for e in finished] == [1050, 2290, 3600]


def test_subagent_usage_is_summed_into_the_parent_run(tmp_path):
    parent_model = ScriptedModel([{"tool_calls": [{"name": SUBAGENT_TOOL_NAME, "arguments": {"task": "count"}}]},
                                  {"text": "Parent done."}])
    parent = Harness(ProviderAdapter("scripted", transport=parent_model), "sys", [], run_dir=str(tmp_path),
                     cache=SessionCache())
    children = []

    def child_adapter(_):
        children.append(ProviderAdapter("scripted-child", transport=ScriptedModel([
            {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "1 + 1"}}]}, {"text": "2"}])))
        return children[-1]

    enable_subagents(parent, adapter_factory=child_adapter, backend=InProcessInterpreter())
    child_results = []
    parent.subscribe(lambda e: child_results.append(e.event.result)
                     if e.kind == "subagent_event" and e.event.kind == "run_finished" else None)
    result = parent.run_result("delegate")
    assert result.status == "completed"
    (child,) = child_results
    assert child.usage.calls == 2 and result.subagent_usage == child.usage
    assert result.total_usage == result.usage + child.usage
    assert result.usage.calls == 2  # the parent's own calls stay separate
    assert read_log(result.run_file)[-1]["subagent_usage"] == child.usage.to_dict()


def session(tmp_path, turns, **config) -> AgentSession:
    cfg = AgentConfig(model="scripted", sandbox="inprocess", run_dir=str(tmp_path), **config)
    return AgentSession(cfg, adapter=ProviderAdapter("scripted", transport=ScriptedModel(turns)))


def test_session_config_budgets_end_a_run_and_per_run_budgets_override(tmp_path):
    loop = [{"tool_calls": [{"name": "list_variables"}]}] * 6
    agent = session(tmp_path, loop + loop, max_tool_calls=2)
    assert agent.ask("look").status == "budget_tool_calls"
    assert agent.ask("look again", budgets=Budgets(max_turns=1)).status == "max_turns_exceeded"
    assert agent.budget_guard.budgets == Budgets(max_tool_calls=2)  # the override was for one run


def test_session_offers_the_plan_tool_and_reminders_by_default(tmp_path):
    agent = session(tmp_path, [{"tool_calls": [{"name": "plan", "arguments": {"action": "add", "titles": ["x"]}}]},
                               {"text": "ok"}])
    assert "plan" in [t.name for t in agent.harness.tools] and agent.progress is not None
    assert agent.ask("plan").status == "completed" and agent.planner.items[0].title == "x"
    agent.new_conversation()
    assert agent.planner.items == []
    plain = session(tmp_path, [{"text": "ok"}], planner=False, reminders=False)
    assert "plan" not in [t.name for t in plain.harness.tools] and plain.progress is None
