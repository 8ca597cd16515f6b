"""The run footer shows what a run used of its query and write budgets when they are set (issue 35.2):
``queries 1 (largest 200/1,000,000 rows) · writes 1/2``, rendered by one function for the notebook's HTML,
the terminal and the exports alike; a run without them shows neither."""

from __future__ import annotations

import io

import duckdb
import pandas as pd
import pytest
from rich.console import Console

from harness_magic.core.agent.loop import Harness
from harness_magic.core.cache import SessionCache
from harness_magic.core.control.budgets import Budgets
from harness_magic.core.execution.connectors import ApprovalPolicy, ConnectorRegistry, duckdb_connector
from harness_magic.core.export import RunRecorder, export_runs, render_footer_text
from harness_magic.core.export.render_html import render_answer_html
from harness_magic.core.export.views import render_budgets_text
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.transcript.events import BudgetsUsed
from harness_magic.notebook.render import TerminalRenderer

ROWS = 200
READ = "SELECT region, sum(amount) AS total FROM sales GROUP BY region"


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


def used(**fields: object) -> BudgetsUsed:
    values: dict[str, object] = dict(queries=0, largest_rows=None, max_query_rows=None, largest_cost=None,
                                     max_query_cost=None, writes=0, max_write_operations=None)
    values.update(fields)
    return BudgetsUsed(**values)  # type: ignore[arg-type]  # the test's own keyword table


@pytest.mark.parametrize("fields, text", [
    ({}, ""),
    ({"max_write_operations": 5}, "writes 0/5"),
    ({"writes": 2, "max_write_operations": 2}, "writes 2/2"),
    ({"queries": 3, "largest_rows": 1200.0, "max_query_rows": 1_000_000}, "queries 3 (largest 1,200/1,000,000 rows)"),
    ({"max_query_rows": 10}, "queries 0 (largest 0/10 rows)"),
    ({"queries": 1, "largest_cost": 12.5, "max_query_cost": 1000.0}, "queries 1 (largest cost 12.50/1,000)"),
    ({"queries": 2, "largest_rows": 40.0, "max_query_rows": 50, "largest_cost": 7.0, "max_query_cost": 9.0,
      "writes": 0, "max_write_operations": 0}, "queries 2 (largest 40/50 rows, cost 7/9) · writes 0/0"),
])
def test_the_budgets_part_names_only_the_budgets_that_are_set(fields, text):
    assert render_budgets_text(used(**fields)) == text


def test_no_budgets_event_shows_nothing():
    assert render_budgets_text(None) == ""


def run_with(tmp_path, budgets: Budgets | None, calls: list[dict[str, object]]):
    """One run on a DuckDB connector under ``budgets``, watched by a recorder and a terminal renderer."""
    database = tmp_path / "notes.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE TABLE notes (n INTEGER)")
    connector = duckdb_connector(database=str(database), timeout_s=60.0)
    turns = [{"tool_calls": [call("load_connectors", connector_name="duckdb")]}]
    turns += [{"tool_calls": [c]} for c in calls] + [{"text": "Done."}]
    cache = SessionCache()
    cache.put("sales", pd.DataFrame({"region": ["north", "south", "east", "west"] * (ROWS // 4),
                                     "amount": range(ROWS)}))
    harness = Harness(ProviderAdapter("scripted/footer", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path / "runs"), cache=cache)
    if budgets is not None:
        budgets.install(harness)
    ConnectorRegistry([connector], approval=ApprovalPolicy.allow_all()).install(harness)
    recorder, screen = RunRecorder(), io.StringIO()
    harness.subscribe(recorder)
    harness.subscribe(TerminalRenderer(Console(file=screen, force_terminal=False, color_system=None, width=400)))
    result = harness.run_result("Total by region, then note it.")
    assert result.status == "completed", result
    return recorder.current, screen.getvalue()


def test_the_footer_shows_the_queries_and_writes_a_run_used_everywhere_it_is_shown(tmp_path):
    budgets = Budgets(max_query_rows=1_000_000, max_write_operations=2)
    record, terminal = run_with(tmp_path, budgets, [call("duckdb__query", sql=READ),
                                                    call("duckdb__execute", sql="INSERT INTO notes VALUES (1)")])
    assert record.budgets is not None and (record.budgets.queries, record.budgets.writes) == (1, 1)
    largest = record.budgets.largest_rows
    assert largest is not None and 0 < largest <= 1_000_000
    expected = f"queries 1 (largest {largest:,.0f}/1,000,000 rows) · writes 1/2"
    footer = render_footer_text(record)
    assert expected in footer and footer.index("$") < footer.index(expected) < footer.index(" s · run ")
    assert expected in terminal, "the terminal's footer"
    assert expected in render_answer_html(record), "the notebook's final output"
    for suffix in (".html", ".md"):
        assert expected in export_runs([record], tmp_path / f"run{suffix}").read_text(), suffix


def test_a_write_budget_alone_shows_the_writes_and_no_queries(tmp_path):
    record, terminal = run_with(tmp_path, Budgets(max_write_operations=3), [call("duckdb__query", sql=READ)])
    footer = render_footer_text(record)
    assert "writes 0/3" in footer and "queries" not in footer and "writes 0/3" in terminal


@pytest.mark.parametrize("budgets", [None, Budgets(max_tool_calls=10)], ids=["none", "tool-calls-only"])
def test_without_query_or_write_budgets_the_footer_shows_neither(tmp_path, budgets):
    record, terminal = run_with(tmp_path, budgets, [call("duckdb__query", sql=READ)])
    assert record.budgets is None
    footer = render_footer_text(record)
    assert "queries" not in footer and "writes" not in footer and "writes" not in terminal


def test_through_a_session_with_masking_and_a_worker_the_footer_counts_the_budgets_and_shows_no_real_value(
        tmp_path, server):
    """Every plane on: litellm over HTTP, a glossary that masks, DuckDB views serving pseudonyms, a sandboxed
    worker, and both budgets. The footer counts the queries the model ran (a hostile one that names the file
    path is refused and not counted as run), and neither the footer, the exports nor any request body holds a
    real value."""
    from test_pseudonyms import call as call_with_id, glossary, leaks, make_session, people, sent

    people().to_parquet(tmp_path / "customers.parquet")
    lake = {"type": "duckdb", "name": "lake", "files": {"customers": str(tmp_path / "customers.parquet")}}
    session = make_session(tmp_path, server, [glossary(tmp_path), lake], sandbox="worker")
    recorder = RunRecorder()
    session.subscribe(recorder)
    try:
        server.replies = [
            {"tool_calls": [{"id": "c0", **call_with_id("load_connectors", connector_name="lake")}]},
            {"tool_calls": [{"id": "q0", **call_with_id("lake__query", name="everyone",
                                                         sql="SELECT id, name, email, amount FROM customers")}]},
            {"tool_calls": [{"id": "q1", **call_with_id(
                "lake__query", sql=f"SELECT * FROM read_parquet('{tmp_path / 'customers.parquet'}')")}]},
            {"tool_calls": [{"id": "p0", **call_with_id("python_interpreter",
                                                         code="print(everyone.name.tolist(), everyone.amount.sum())")}]},
            {"text": "Done."}]
        result = session.ask("Who owes what?", budgets=Budgets(max_query_rows=1_000_000, max_write_operations=2))
        assert result.status == "completed", result.error
        record = recorder.current
        assert record.budgets is not None and record.budgets.writes == 0
        refused = next(item for item in record.items if getattr(item, "id", None) == "q1")
        assert refused.is_error and "Permission Error" in refused.result  # the engine's own refusal
        assert record.budgets.queries == 1 and record.budgets.largest_rows is not None  # the refused one never ran
        footer = render_footer_text(record)
        assert "queries 1 (largest " in footer and "/1,000,000 rows) · writes 0/2" in footer
        shown = [footer, render_answer_html(record)]
        shown += [export_runs([record], tmp_path / f"run{suffix}").read_text() for suffix in (".html", ".md")]
        assert [leaks(text) for text in shown] == [[], [], [], []]
        assert leaks(sent(server)) == []
        assert session.cache.user_value("everyone", session.cache.get("everyone"))["name"].tolist() == \
            people()["name"].tolist()  # the pull still restores them
    finally:
        session.close()
