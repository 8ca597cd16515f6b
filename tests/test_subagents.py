"""Subagents: isolation both ways, two result channels, recursion, failures, linked logs."""

from __future__ import annotations

import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.transcript.events import SubagentEvent, ToolCallFinished
from harness_magic.core.transcript.log import read_log
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME, enable_subagents
from harness_magic.core.execution.tools import ToolSpec


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


def scripted(turns):
    return ProviderAdapter("scripted/test", transport=ScriptedModel(turns))


def results_of(result):
    return [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]


def mutate_tool(cache):
    """A child tool that mutates a cached value in place (the worst case for isolation)."""

    def mutate(handle: str) -> str:
        cache.get(handle)["amount"] = -1
        return "mutated"

    return ToolSpec(name="mutate", description="Mutate a handle in place.",
                    parameters={"type": "object", "properties": {"handle": {"type": "string"}}}, handler=mutate)


def build(tmp_path, parent_turns, child_turns, *, max_turns=10, parent_cache=None, **options):
    cache = parent_cache if parent_cache is not None else SessionCache()
    parent = Harness(scripted(parent_turns), "You analyse sales.", [], max_turns=max_turns,
                     run_dir=str(tmp_path), cache=cache)
    children = []

    def adapter_factory(parent_adapter):
        children.append(scripted(child_turns))
        return children[-1]

    def tools_factory(child_cache, current_turn):
        from harness_magic.core.execution.interpreter import InProcessInterpreter, make_interpreter_tools

        return make_interpreter_tools(child_cache, InProcessInterpreter(), current_turn=current_turn) + [
            mutate_tool(child_cache)]

    enable_subagents(parent, adapter_factory=adapter_factory, tools_factory=tools_factory, **options)
    return parent


@pytest.fixture
def sales_cache():
    cache = SessionCache()
    cache.put("sales", pd.DataFrame({"region": ["n", "s", "n"], "amount": [1, 2, 3]}))
    cache.put("secret_plan", pd.DataFrame({"x": [42]}))
    cache.put("weekly_summary", pd.DataFrame({"old": [0]}))
    return cache


def delegate(**arguments):
    return {"tool_calls": [call(SUBAGENT_TOOL_NAME, **arguments)]}


def test_mutating_an_input_inside_the_subagent_leaves_the_parent_value_unchanged(tmp_path, sales_cache):
    before = sales_cache.get("sales").copy()
    child = [{"tool_calls": [call("mutate", handle="sales")]},
             {"tool_calls": [call("python_interpreter", code="sales['amount'] = 0\nsales")]},
             {"text": "mutated"}]
    parent = build(tmp_path, [delegate(task="mess with sales", input_handles=["sales"]), {"text": "ok"}], child,
                   parent_cache=sales_cache)
    result = parent.run_result("go")
    assert result.ok
    pd.testing.assert_frame_equal(sales_cache.get("sales"), before)


def test_the_subagent_sees_neither_parent_handles_nor_parent_history(tmp_path, sales_cache):
    child = [{"tool_calls": [call("list_variables")]},
             {"tool_calls": [call("python_interpreter", code="secret_plan")]},
             {"text": "done"}]
    parent = build(tmp_path, [{"text": "earlier answer"}, delegate(task="look around", input_handles=["sales"]),
                              {"text": "ok"}], child, parent_cache=sales_cache)
    parent.run_result("a parent-only question about the secret plan")
    assert parent.ask_result("now delegate").ok
    records = [r for r in (read_log(p) for p in sorted(tmp_path.glob("*.jsonl")))]
    child_log = next(r for r in records if r[0].get("parent_run_id"))
    assert child_log[0]["history"] == [] and child_log[0]["prompt"] == "look around"
    assert "secret plan" not in str(child_log) and "earlier answer" not in str(child_log)
    tool_records = [r for r in child_log if r["type"] == "turn"]
    listing = tool_records[1]["request"]["messages_appended"][0]["content"][0]["content"]
    assert "sales" in listing and "secret_plan" not in listing and "weekly_summary" not in listing
    name_error = tool_records[2]["request"]["messages_appended"][0]["content"][0]
    assert name_error["is_error"] and "NameError" in name_error["content"]


def test_created_handles_are_published_with_collision_suffixes(tmp_path, sales_cache):
    code = "save('weekly_summary', sales.groupby('region')['amount'].sum().reset_index())"
    child = [{"tool_calls": [call("python_interpreter", code=code)]}, {"text": "North leads."}]
    parent = build(tmp_path, [delegate(task="summarise weekly", input_handles=["sales"]), {"text": "ok"}], child,
                   parent_cache=sales_cache)
    result = parent.run_result("go")
    (outcome,) = results_of(result)
    assert not outcome.is_error
    assert "North leads." in outcome.content
    assert "- weekly_summary -> weekly_summary_2" in outcome.content
    assert list(sales_cache.get("weekly_summary").columns) == ["old"]  # never overwritten
    assert list(sales_cache.get("weekly_summary_2")["amount"]) == [4, 2]
    assert "weekly_summary_2" in result.handles
    assert "sales_2" not in sales_cache.names()  # inputs are not published back


def test_text_only_publishes_nothing(tmp_path, sales_cache):
    child = [{"tool_calls": [call("python_interpreter", code="save('summary', sales.amount.sum())")]},
             {"text": "Total is 6."}]
    parent = build(tmp_path, [delegate(task="total", input_handles=["sales"], output_policy="text_only"),
                              {"text": "ok"}], child, parent_cache=sales_cache)
    names_before = sales_cache.names()
    (outcome,) = results_of(parent.run_result("go"))
    assert "Total is 6." in outcome.content and "text_only" in outcome.content
    assert sales_cache.names() == names_before


def test_a_subagent_calling_subagent_gets_a_recursion_error_result(tmp_path):
    child = [delegate(task="recurse"), {"text": "could not recurse"}]
    parent = build(tmp_path, [delegate(task="try to nest"), {"text": "ok"}], child)
    events = []
    parent.subscribe(events.append)
    result = parent.run_result("go")
    nested = [e.event for e in events if isinstance(e, SubagentEvent) and isinstance(e.event, ToolCallFinished)]
    assert nested[0].result.is_error and "SubagentRecursionError" in nested[0].result.content
    assert result.ok


def test_a_failing_subagent_returns_an_error_result_and_publishes_nothing(tmp_path, sales_cache):
    child = [{"tool_calls": [call("python_interpreter", code="save('half_done', 1)")]}]  # then the script runs out
    parent = build(tmp_path, [delegate(task="fail", input_handles=["sales"]), {"text": "ok"}], child,
                   parent_cache=sales_cache)
    (outcome,) = results_of(parent.run_result("go"))
    assert outcome.is_error and "failed" in outcome.content
    assert "half_done" not in sales_cache.names()


def test_bad_arguments_are_error_results(tmp_path, sales_cache):
    parent = build(tmp_path, [delegate(task="x", input_handles=["nope"]),
                              delegate(task="x", output_policy="everything"), {"text": "ok"}], [],
                   parent_cache=sales_cache)
    unknown, policy = results_of(parent.run_result("go"))
    assert unknown.is_error and "nope" in unknown.content and "sales" in unknown.content
    assert policy.is_error and "text_only" in policy.content


def test_logs_are_linked_both_ways_and_events_are_reemitted(tmp_path):
    parent = build(tmp_path, [delegate(task="hello"), {"text": "ok"}], [{"text": "hi from the subagent"}])
    events = []
    parent.subscribe(events.append)
    result = parent.run_result("go")
    parent_log = read_log(result.run_file)
    (link,) = [r for r in parent_log if r.get("event") == "subagent"]
    child_log = read_log(link["child_run_file"])
    start = child_log[0]
    tool_use_id = next(b["id"] for r in parent_log if r["type"] == "turn"
                       for b in r["response"]["message"]["content"] if b["type"] == "tool_use")
    assert start["parent_run_id"] == result.run_id and start["parent_tool_use_id"] == tool_use_id
    assert start["parent_run_file"] == result.run_file
    assert link["child_run_id"] == start["run_id"] and link["status"] == "completed"
    wrapped = [e for e in events if isinstance(e, SubagentEvent)]
    assert wrapped and all(e.parent_tool_use_id == tool_use_id and e.depth == 1 for e in wrapped)
    assert {e.event.kind for e in wrapped} >= {"run_started", "assistant_message", "run_finished"}


def test_the_subagent_budget_is_capped_by_the_parents_remaining_turns(tmp_path):
    parent = build(tmp_path, [{"text": "thinking"} | delegate(task="go"), {"text": "ok"}],
                   [{"text": "quick"}], max_turns=3)
    result = parent.run_result("go")
    (link,) = [r for r in read_log(result.run_file) if r.get("event") == "subagent"]
    assert read_log(link["child_run_file"])[0]["max_turns"] == 2


def test_a_subagent_runs_over_http_through_litellm(tmp_path, server, http_adapter):
    server.replies = [
        {"tool_calls": [{"id": "call_sub", "name": "subagent", "arguments": {"task": "count to three"}}]},
        {"text": "one two three"},
        {"text": "The subagent counted."},
    ]
    parent = Harness(http_adapter(), "You delegate.", [], run_dir=str(tmp_path), cache=SessionCache())
    enable_subagents(parent)
    result = parent.run_result("delegate counting")
    assert result.ok and result.text == "The subagent counted."
    (outcome,) = results_of(result)
    assert "one two three" in outcome.content
    child_request = server.requests[1]
    assert [m["role"] for m in child_request["messages"]] == ["system", "user"]
    assert "count to three" in str(child_request["messages"][1]["content"])
    tool_names = [t["function"]["name"] for t in child_request["tools"]]
    assert "python_interpreter" in tool_names and "load_connectors" not in tool_names


def test_the_session_enables_subagents_with_its_backend(tmp_path):
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    turns = [delegate(task="compute", input_handles=["nums"]),
             {"tool_calls": [call("python_interpreter", code="save('total', sum(nums))")]},
             {"text": "total saved"},
             {"text": "done"}]
    session = AgentSession(AgentConfig(run_dir=str(tmp_path), sandbox="inprocess"), adapter=scripted(turns),
                           subagents=True)
    session.cache.put("nums", [1, 2, 3])
    result = session.ask("go")
    assert result.ok
    assert session.cache.get("total") == 6
