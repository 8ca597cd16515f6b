"""The plan tool: add, update, list, with statuses; errors go back to the model."""

from __future__ import annotations

import pytest

from harness_magic import Harness, ProviderAdapter, ScriptedModel
from harness_magic.core.control.planner import PLAN_STATUSES, Planner
from harness_magic.core.execution.tools import ToolError


def test_add_update_list_render_the_whole_plan():
    planner = Planner()
    planner.handle("add", titles=["Load sales", "Compute growth"])
    text = planner.handle("update", item_id=1, status="done", note="1200 rows")
    assert text.splitlines() == ["Plan (1 pending, 1 done):", "1. [x] Load sales — 1200 rows", "2. [ ] Compute growth"]
    assert planner.handle("list") == text
    assert planner.version == 3  # two items added, one update


def test_statuses_are_the_four_named_ones():
    assert PLAN_STATUSES == ("pending", "in_progress", "done", "blocked")
    planner = Planner()
    planner.add("x")
    for status in PLAN_STATUSES:
        assert planner.update(1, status=status).status == status


@pytest.mark.parametrize("call, message", [
    ({"action": "update", "item_id": 9, "status": "done"}, "no plan item 9"),
    ({"action": "update", "item_id": 1, "status": "finished"}, "status 'finished' is not valid"),
    ({"action": "add"}, "add needs"),
    ({"action": "remove"}, "action 'remove' is not valid"),
])
def test_bad_calls_raise_tool_errors_naming_the_problem(call, message):
    planner = Planner()
    planner.add("first")
    with pytest.raises(ToolError, match=message):
        planner.handle(**call)


def test_plan_tool_in_a_run_returns_the_plan_and_errors_as_results(tmp_path):
    planner = Planner()
    model = ScriptedModel([
        {"tool_calls": [{"name": "plan", "arguments": {"action": "add", "titles": ["Load", "Answer"]}}]},
        {"tool_calls": [{"name": "plan", "arguments": {"action": "update", "item_id": 7, "status": "done"}}]},
        {"tool_calls": [{"name": "plan", "arguments": {"action": "update", "item_id": 1, "status": "done"}}]},
        {"text": "Done."},
    ])
    harness = Harness(ProviderAdapter("scripted", transport=model), "sys", [planner.tool()],
                      run_dir=str(tmp_path))
    result = harness.run_result("plan it")
    results = [r for m in result.messages for r in m.tool_results]
    assert [r.is_error for r in results] == [False, True, False]
    assert "no plan item 7" in results[1].content
    assert [i.status for i in planner.items] == ["done", "pending"]
