"""Connector registry: progressive disclosure, schemas from hints, approvals, bounded results."""

from __future__ import annotations

import re
from typing import Literal

import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import (
    ApprovalDecision,
    ApprovalPolicy,
    Connector,
    ConnectorRegistry,
    duckdb_connector,
    tool_from_function,
)
from harness_magic.core.transcript.events import Notice
from harness_magic.core.transcript.log import read_log
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter

RESULT_BOUND_CHARS = 5_000
"""What a tool result may cost the model's context, whatever the data size."""


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


def scripted_harness(tmp_path, turns, registry, **kw):
    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(turns))
    harness = Harness(adapter, "You analyse data.", [], run_dir=str(tmp_path), cache=SessionCache(), **kw)
    installed = registry.install(harness)
    return harness, installed


def tool_results(result):
    return [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]


def demo_connector(calls):
    demo = Connector("demo", "A demo connector that echoes.")

    @demo.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        calls.append(("echo", text))
        return f"echo: {text}"

    @demo.tool(safety="write")
    def append(row: str) -> str:
        """Append a row to the demo store."""
        calls.append(("append", row))
        return "appended"

    return demo


def test_connector_tools_are_hidden_until_loaded_then_visible_and_the_load_is_logged(tmp_path):
    calls: list = []
    registry = ConnectorRegistry([demo_connector(calls)])
    turns = [
        {"tool_calls": [call("demo__echo", text="too early")]},
        {"tool_calls": [call("load_connectors", connector_name="demo")]},
        {"tool_calls": [call("demo__echo", text="now")]},
        {"text": "done"},
    ]
    harness, installed = scripted_harness(tmp_path, turns, registry)
    notices = []
    harness.subscribe(lambda e: notices.append(e) if isinstance(e, Notice) else None)
    result = harness.run_result("go")

    early, loaded, later = tool_results(result)
    assert early.is_error and "not loaded yet" in early.content and "load_connectors" in early.content
    assert calls == [("echo", "now")]
    assert "demo__echo" in loaded.content and later.content == "echo: now"
    visible = [r["request"]["visible_tools"] for r in read_log(result.run_file) if r["type"] == "turn"]
    assert "demo__echo" not in visible[0] and "demo__echo" not in visible[1]
    assert "demo__echo" in visible[2] and "demo__append" in visible[2]
    events = [r for r in read_log(result.run_file) if r["type"] == "event"]
    assert events[0]["event"] == "connector_loaded" and events[0]["connector"] == "demo" and events[0]["turn"] == 2
    assert any("demo" in n.text for n in notices)
    assert installed.loaded == ["demo"]


def test_the_model_sees_only_a_catalogue_and_load_connectors_before_loading(tmp_path):
    registry = ConnectorRegistry([demo_connector([])])
    harness, _ = scripted_harness(tmp_path, [{"text": "hi"}], registry)
    visible = [t.name for t in harness.visible_tools()]
    assert visible == ["load_connectors"]
    description = harness.visible_tools()[0].description
    assert "- demo: A demo connector that echoes. (2 tools)" in description
    assert harness.visible_tools()[0].parameters["properties"]["connector_name"]["enum"] == ["demo"]


def test_tool_order_is_stable_across_loads(tmp_path):
    registry = ConnectorRegistry([demo_connector([])])
    harness, installed = scripted_harness(tmp_path, [{"text": "hi"}], registry)
    before = [t.name for t in harness.tools]
    installed.load("demo")
    assert [t.name for t in harness.tools] == before == ["load_connectors", "demo__echo", "demo__append"]


def test_loading_an_unknown_connector_is_an_error_naming_the_connectors(tmp_path):
    registry = ConnectorRegistry([demo_connector([])])
    turns = [{"tool_calls": [call("load_connectors", connector_name="nope")]}, {"text": "ok"}]
    harness, _ = scripted_harness(tmp_path, turns, registry)
    (result,) = tool_results(harness.run_result("go"))
    assert result.is_error and "demo" in result.content


def test_schema_comes_from_type_hints_and_docstring():
    def lookup(customer_id: int, fields: list[str] | None = None, mode: Literal["fast", "full"] = "fast",
               strict: bool = False) -> dict:
        """Fetch one customer.

        Args:
            customer_id: The CRM id.
            fields: Columns to return.
        """

    spec = tool_from_function(lookup, connector="crm", name="crm__lookup")
    assert spec.description == "Fetch one customer."
    props = spec.parameters["properties"]
    assert props["customer_id"] == {"type": "integer", "description": "The CRM id."}
    assert props["fields"] == {"type": "array", "items": {"type": "string"}, "description": "Columns to return."}
    assert props["mode"] == {"type": "string", "enum": ["fast", "full"], "default": "fast"}
    assert props["strict"] == {"type": "boolean", "default": False}
    assert spec.parameters["required"] == ["customer_id"]


@pytest.mark.parametrize("annotation", ["set[str]", "object", "int | str"])
def test_unsupported_parameter_types_are_rejected_naming_the_parameter(annotation):
    namespace: dict = {}
    exec(f"def bad(x: {annotation}) -> str:\n    'Doc.'\n", namespace)
    with pytest.raises(TypeError, match=r"tool 'bad', parameter 'x'"):
        tool_from_function(namespace["bad"])


def test_missing_annotations_and_descriptions_are_developer_errors():
    def untyped(x):
        """Doc."""

    def undocumented(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="missing type annotation"):
        tool_from_function(untyped)
    with pytest.raises(ValueError, match="needs a description"):
        tool_from_function(undocumented)
    with pytest.raises(ValueError, match="connector name"):
        Connector("bad name", "x")


def test_a_million_row_connector_result_becomes_a_handle_with_a_bounded_result(tmp_path):
    registry = ConnectorRegistry([duckdb_connector()])
    sql = "SELECT range AS i, range % 7 AS g FROM range(1000000)"
    turns = [
        {"tool_calls": [call("load_connectors", connector_name="duckdb")]},
        {"tool_calls": [call("duckdb__query", sql=sql, name="big")]},
        {"text": "done"},
    ]
    harness, _ = scripted_harness(tmp_path, turns, registry)
    result = harness.run_result("go")
    _, query = tool_results(result)
    assert not query.is_error
    assert "big" in result.handles
    assert harness.cache.get("big").shape == (1_000_000, 2)
    assert "1,000,000 rows" in query.content
    assert len(query.content) < RESULT_BOUND_CHARS
    log_text = open(result.run_file).read()
    assert len(log_text) < 100_000  # the log holds metadata, not the million rows


# ------------------------------------------------------------------------------- approvals


def approval_run(tmp_path, policy):
    calls: list = []
    registry = ConnectorRegistry([demo_connector(calls)], approval=policy)
    turns = [
        {"tool_calls": [call("load_connectors", connector_name="demo")]},
        {"tool_calls": [call("demo__append", row="r1"), call("demo__echo", text="read")]},
        {"text": "done"},
    ]
    harness, _ = scripted_harness(tmp_path, turns, registry)
    result = harness.run_result("go")
    return calls, tool_results(result)[1:], result


def test_allow_policy_runs_write_tools_without_asking(tmp_path):
    calls, (append, echo), _ = approval_run(tmp_path, ApprovalPolicy.allow_all())
    assert calls == [("append", "r1"), ("echo", "read")]
    assert not append.is_error


def test_deny_policy_returns_an_error_result_and_never_runs_the_tool(tmp_path):
    calls, (append, echo), result = approval_run(tmp_path, ApprovalPolicy.deny_all())
    assert calls == [("echo", "read")]
    assert append.is_error and "denied" in append.content and "Nothing was executed" in append.content
    approvals = [r for r in read_log(result.run_file) if r.get("event") == "approval"]
    assert approvals[0]["approved"] is False and approvals[0]["tool"] == "demo__append"


def test_ask_policy_calls_the_approver_with_the_request(tmp_path):
    requests = []

    def approver(request):
        requests.append(request)
        return True

    calls, (append, _), _ = approval_run(tmp_path, ApprovalPolicy(approver=approver))
    assert calls[0] == ("append", "r1")
    (request,) = requests  # read tools are never asked about
    assert request.tool == "demo__append" and request.safety == "write" and request.connector == "demo"
    assert request.arguments == {"row": "r1"} and request.tool_use_id


def test_ask_policy_denial_by_the_approver_carries_its_reason(tmp_path):
    policy = ApprovalPolicy(approver=lambda request: ApprovalDecision(False, "not on a Friday"))
    calls, (append, _), _ = approval_run(tmp_path, policy)
    assert ("append", "r1") not in calls
    assert append.is_error and "not on a Friday" in append.content


def test_ask_without_an_approver_or_with_a_failing_one_denies(tmp_path):
    calls, (append, _), _ = approval_run(tmp_path, ApprovalPolicy())
    assert append.is_error and "no approver" in append.content and ("append", "r1") not in calls

    def broken(request):
        raise RuntimeError("widget gone")

    calls, (append, _), _ = approval_run(tmp_path / "b", ApprovalPolicy(approver=broken))
    assert append.is_error and "widget gone" in append.content and ("append", "r1") not in calls


def test_policy_rejects_unknown_rules():
    with pytest.raises(ValueError, match="sometimes"):
        ApprovalPolicy(rules={"write": "sometimes"})
    with pytest.raises(ValueError, match="read"):
        ApprovalPolicy(rules={"read": "ask"})


def test_session_wires_connectors_and_approvals(tmp_path):
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    calls: list = []
    turns = [
        {"tool_calls": [call("load_connectors", connector_name="demo")]},
        {"tool_calls": [call("demo__append", row="x")]},
        {"text": "done"},
    ]
    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path), sandbox="inprocess"), adapter=adapter)
    session.add_connector(demo_connector(calls), approval=ApprovalPolicy(approver=lambda r: True))
    result = session.ask("go")
    assert result.ok and calls == [("append", "x")]
    assert session.connectors.loaded == ["demo"]


def test_approval_wait_is_reported_apart_from_the_tool_time(tmp_path):
    import time

    from harness_magic.core.transcript.events import ToolCallFinished
    from harness_magic.core.export import RunRecord
    from harness_magic.core.export.record import apply_event
    from harness_magic.core.export.views import tool_summary

    def slow_user(request):
        time.sleep(0.4)
        return True

    calls: list = []
    registry = ConnectorRegistry([demo_connector(calls)], approval=ApprovalPolicy(approver=slow_user))
    turns = [{"tool_calls": [call("load_connectors", connector_name="demo")]},
             {"tool_calls": [call("demo__append", row="r1"), call("demo__echo", text="read")]}, {"text": "done"}]
    harness, _ = scripted_harness(tmp_path, turns, registry)
    events: list = []
    harness.subscribe(events.append)
    result = harness.run_result("go")
    append, echo = [e for e in events if isinstance(e, ToolCallFinished)][1:]
    assert 0.4 <= append.approval_wait_s <= append.duration_s
    # the wait is counted once: the tool's own time (microseconds) stays below the 0.4 s wait, however loaded
    assert append.duration_s - append.approval_wait_s < append.approval_wait_s
    assert echo.approval_wait_s == 0.0, "read tools are never asked about"
    record = RunRecord()
    for event in events:
        apply_event(record, event, record)
    summary = tool_summary(record.tool(append.tool_use.id))
    assert "approval wait 0.4 s" in summary and summary.split(" · ")[1].endswith(" s")
    assert float(summary.split(" · ")[1][:-2]) < 0.3, summary
    assert "approval" not in tool_summary(record.tool(echo.tool_use.id))
    log = read_log(result.run_file)
    assert [r for r in log if r.get("event") == "approval"][0]["wait_s"] >= 0.4
    tools = [r for r in log if r.get("type") == "tools"][-1]["results"]
    assert tools[0]["approval_wait_s"] >= 0.4 and "approval_wait_s" not in tools[1]


def test_the_live_view_says_waiting_for_approval_while_the_user_decides(tmp_path):
    import time

    pytest.importorskip("ipywidgets")
    from harness_magic.core.transcript.events import ApprovalStep
    from harness_magic.notebook.render import TICK_S, WidgetRunView

    seen: dict = {}
    view = WidgetRunView()

    def slow_user(request):
        seen["status"] = view.status.value
        accordion = view.transcript.tools[request.tool_use_id][0]
        seen["title_at_once"] = accordion.get_title(0)
        time.sleep(TICK_S * 1.6)  # the ticker redraws the open call meanwhile
        deadline = time.monotonic() + 60  # a loaded machine may run the ticker late: wait for its redraw
        while "waiting for approval 0 s" in accordion.get_title(0) and time.monotonic() < deadline:
            time.sleep(TICK_S / 10)
        seen["title_later"] = accordion.get_title(0)
        return True

    def broken(request):
        raise RuntimeError("<b>prompt closed</b>")

    calls: list = []
    registry = ConnectorRegistry([demo_connector(calls)], approval=ApprovalPolicy(approver=slow_user))
    turns = [{"tool_calls": [call("load_connectors", connector_name="demo")]},
             {"tool_calls": [call("demo__append", row="r1"), call("demo__echo", text="read")]}, {"text": "done"}]
    harness, _ = scripted_harness(tmp_path, turns, registry)
    events: list = []
    harness.subscribe(events.append)
    harness.subscribe(view)
    try:
        result = harness.run_result("go")
        assert result.ok
        assert "waiting for approval: demo__append" in seen["status"]
        assert "waiting for approval 0 s" in seen["title_at_once"], seen
        assert re.search(r"waiting for approval [1-9]\d* s", seen["title_later"]), \
            ("the wait ticks, apart from the tool's time", seen)
        steps = [e for e in events if isinstance(e, ApprovalStep)]
        assert [(s.tool, s.wait_s is None, s.approved) for s in steps] == [
            ("demo__append", True, None), ("demo__append", False, True)], "read tools are never asked about"
        assert steps[1].wait_s >= TICK_S * 1.6
        append = view.record.tool(steps[0].tool_use_id)
        title = view.transcript.tools[append.id][0].get_title(0)
        shown_wait = re.search(r"approval wait (\d+\.\d) s", title)
        assert shown_wait and float(shown_wait.group(1)) >= TICK_S * 1.6 and "waiting" not in title, title
        assert float(title.split(" · ")[1][:-2]) < steps[1].wait_s, "the tool's own time leaves the wait out"
        assert "waiting for approval" not in view.status.value
    finally:
        view.close()

    # a policy that answers without asking shows no step; an approver that fails shows its step, denied
    for policy, expected in ((ApprovalPolicy.allow_all(), []), (ApprovalPolicy(approver=broken), [None, False])):
        registry = ConnectorRegistry([demo_connector([])], approval=policy)
        harness, _ = scripted_harness(tmp_path / str(len(expected)), turns, registry)
        events = []
        harness.subscribe(events.append)
        harness.run_result("go")
        assert [e.approved for e in events if isinstance(e, ApprovalStep)] == expected
