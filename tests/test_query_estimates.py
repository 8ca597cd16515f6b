"""The engines' own estimates before a query runs (issue 34, point 4), on real DuckDB engines.

A run's ``max_query_rows``/``max_query_cost`` make every query tool ask the engine's plan first (``EXPLAIN``,
never the query): a read estimated over a limit asks the approver or, with none, is refused, naming the
estimate and the limit, before any row is read; a read within budget runs and its result carries the estimate
(the tool contract's cost and risk line), which the run log records without values. ``max_write_operations``
bounds the approved writes of a run. Hostile inputs: a query whose plan fails, text holding ``EXPLAIN``, several
statements in one call.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from harness_magic.core.agent.loop import Harness
from harness_magic.core.execution.tools import ToolSpec
from harness_magic.core.cache import SessionCache
from harness_magic.core.config import AgentConfig
from harness_magic.core.control.budgets import Budgets, child_budgets
from harness_magic.core.control.presets import SubagentPreset
from harness_magic.core.execution.connectors import ApprovalPolicy, ConnectorRegistry, duckdb_connector
from harness_magic.core.execution.connectors.approval import ApprovalDecision
from harness_magic.core.execution.connectors.estimates import (
    Estimate,
    QueryLimits,
    budget_for,
    duckdb_plan_estimate,
    explain_target,
    spark_plan_estimate,
)
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.session import AgentSession

HUGE = 500_000_000_000
"""Rows of ``range(HUGE)``: planning it is instant, reading it would take hours on two cores."""
HUGE_SQL = f"SELECT sum(range) AS total FROM range({HUGE})"
TIMEOUT_S = 60.0
"""The connector's statement timeout: a read of HUGE_SQL that started would end in its timeout error."""
LIMIT = 1_000_000


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


def run_duckdb(tmp_path, calls, budgets, *, approval=None, **options):
    """One run of a scripted model making ``calls`` (one per turn) on a DuckDB connector, under ``budgets``."""
    options.setdefault("timeout_s", TIMEOUT_S)
    connector = duckdb_connector(**options)
    registry = ConnectorRegistry([connector], approval=approval)
    turns = [{"tool_calls": [call("load_connectors", connector_name="duckdb")]}]
    turns += [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    cache = SessionCache()
    cache.put("sales", pd.DataFrame({"region": ["north", "south", "east", "west"] * 50, "amount": range(200)}))
    harness = Harness(ProviderAdapter("scripted/estimates", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path / "runs"), cache=cache)
    budgets.install(harness)
    registry.install(harness)
    started = time.monotonic()
    result = harness.run_result("go")
    elapsed = time.monotonic() - started
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    return blocks[1:], harness, connector, elapsed


def events(harness, name):
    log = Path(harness.run_file)
    return [r for r in map(json.loads, log.read_text().splitlines()) if r.get("event") == name]


class Spy:
    """Counts calls of one engine method that reads rows (the real method still runs)."""

    def __init__(self, engine, method):
        self.calls = 0
        real = getattr(engine, method)

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        setattr(engine, method, counted)


# -- the must-show: refused by its estimate before any row is read ----------------------------------------------


def test_a_duckdb_query_over_a_large_table_is_refused_by_its_estimate_before_any_row_is_read(tmp_path):
    connector = duckdb_connector(timeout_s=TIMEOUT_S)
    reads = [Spy(connector.engine, "query"), Spy(connector.engine, "lazy")]
    registry = ConnectorRegistry([connector])
    turns = [{"tool_calls": [call("load_connectors", connector_name="duckdb")]},
             {"tool_calls": [call("duckdb__query", sql=HUGE_SQL)]},
             {"tool_calls": [call("duckdb__query", sql=HUGE_SQL, lazy=True)]}, {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/estimates", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path / "runs"), cache=SessionCache())
    Budgets(max_query_rows=LIMIT).install(harness)
    registry.install(harness)
    started = time.monotonic()
    result = harness.run_result("go")
    elapsed = time.monotonic() - started
    eager, lazy = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][1:]
    for block in (eager, lazy):
        assert block.is_error
        assert "rows ≈ 500,000,000,000 over max_query_rows=1,000,000" in block.content  # the estimate and the limit
        assert "No row was read" in block.content and "no approver" in block.content
    # no row was read: the engine's reading methods never ran, no handle was made, and the run took a fraction
    # of the statement timeout a started read would have run into
    assert [spy.calls for spy in reads] == [0, 0]
    assert not result.handles and not harness.cache.names()
    assert elapsed < TIMEOUT_S / 4
    logged = events(harness, "query_estimate")
    assert [(e["engine"], e["rows"], e["outcome"], e["max_query_rows"]) for e in logged] == [
        ("duckdb", float(HUGE), "refused", LIMIT)] * 2
    assert all("range(" not in json.dumps(e) for e in logged)  # numbers and names, never the statement


def test_a_query_within_budget_runs_and_its_result_carries_the_estimate(tmp_path):
    blocks, harness, _, _ = run_duckdb(tmp_path, [
        call("duckdb__query", sql="SELECT region, sum(amount) AS total FROM sales GROUP BY region"),
        call("duckdb__query", sql="SELECT * FROM sales", lazy=True),
    ], Budgets(max_query_rows=LIMIT))
    eager, lazy = blocks
    assert not eager.is_error and not lazy.is_error
    assert "Estimate (duckdb plan, before running): rows ≈ 200, cost: none." in eager.content
    assert "Query returned 4 rows" in eager.content
    assert "Estimate (duckdb plan, before running): rows ≈ 200" in lazy.content
    assert [e["outcome"] for e in events(harness, "query_estimate")] == ["within budget"] * 2


def test_without_a_query_budget_nothing_is_estimated(tmp_path):
    blocks, harness, _, _ = run_duckdb(tmp_path, [call("duckdb__query", sql="SELECT count(*) FROM sales")],
                                       Budgets(max_tool_calls=10))
    assert not blocks[0].is_error and "Estimate" not in blocks[0].content
    assert events(harness, "query_estimate") == []


# -- the policy decides: ask, approve, deny, per-tool rule -----------------------------------------------------


def test_an_over_budget_read_asks_the_approver_with_the_estimate_and_runs_when_approved(tmp_path):
    asked = []

    def approver(request):
        asked.append(request)
        return True

    blocks, harness, _, _ = run_duckdb(tmp_path, [call("duckdb__query", sql="SELECT count(*) AS n FROM range(5000)")],
                                       Budgets(max_query_rows=1000), approval=ApprovalPolicy(approver=approver))
    assert not blocks[0].is_error
    assert "rows ≈ 5,000" in blocks[0].content and "the user approved it" in blocks[0].content
    (request,) = asked
    assert request.tool == "duckdb__query" and request.safety == "read" and request.connector == "duckdb"
    assert request.over_budget == "rows ≈ 5,000 over max_query_rows=1,000"
    assert "rows ≈ 5,000" in request.summary
    assert [e["outcome"] for e in events(harness, "query_estimate")] == ["approved"]
    (approval,) = events(harness, "approval")
    assert approval["approved"] and approval["tool"] == "duckdb__query"


def test_a_denied_over_budget_read_is_refused_with_the_reason(tmp_path):
    def approver(request):
        return ApprovalDecision(False, "too big for today")

    connector_blocks, _, connector, _ = run_duckdb(
        tmp_path, [call("duckdb__query", sql=HUGE_SQL)], Budgets(max_query_rows=LIMIT),
        approval=ApprovalPolicy(approver=approver))
    assert connector_blocks[0].is_error and "too big for today" in connector_blocks[0].content
    assert "No row was read" in connector_blocks[0].content


def test_a_per_tool_rule_decides_without_asking(tmp_path):
    def approver(request):
        raise AssertionError("a per-tool rule decides; nobody is asked")

    allowed, _, _, _ = run_duckdb(tmp_path / "a", [call("duckdb__query", sql="SELECT count(*) FROM range(5000)")],
                                  Budgets(max_query_rows=1000),
                                  approval=ApprovalPolicy(tools={"duckdb__query": "allow"}, approver=approver))
    assert not allowed[0].is_error and "rows ≈ 5,000" in allowed[0].content
    denied, _, _, _ = run_duckdb(tmp_path / "d", [call("duckdb__query", sql="SELECT 1")],
                                 Budgets(max_query_rows=1000),
                                 approval=ApprovalPolicy(tools={"duckdb__query": "deny"}, approver=approver))
    assert denied[0].is_error and "denied" in denied[0].content  # the rule denies every call of the tool


# -- hostile inputs ------------------------------------------------------------------------------------------


def test_a_query_whose_plan_fails_gets_the_engine_error(tmp_path):
    blocks, harness, connector, _ = run_duckdb(tmp_path, [
        call("duckdb__query", sql="SELECT * FROM no_such_table"),
        call("duckdb__query", sql="SELECT no_such_column FROM sales"),
        call("duckdb__query", sql="SELEC 1"),
    ], Budgets(max_query_rows=LIMIT))
    missing, unknown_column, syntax = blocks
    assert missing.is_error and "duckdb error: Catalog Error" in missing.content and "no_such_table" in missing.content
    assert unknown_column.is_error and "duckdb error: Binder Error" in unknown_column.content
    assert syntax.is_error and "syntax error" in syntax.content
    assert events(harness, "query_estimate") == []  # no plan, no estimate: the read never started


def test_text_holding_explain_cannot_slip_past_the_estimate(tmp_path):
    blocks, harness, _, elapsed = run_duckdb(tmp_path, [
        call("duckdb__query", sql=f"EXPLAIN ANALYZE {HUGE_SQL}"),  # would run the query: refused as a write
        call("duckdb__query", sql=f"SELECT 'EXPLAIN' AS word, sum(range) FROM range({HUGE})"),
        call("duckdb__query", sql=f"/* EXPLAIN */ {HUGE_SQL}"),
        call("duckdb__query", sql=f"EXPLAIN {HUGE_SQL}"),  # a plain EXPLAIN plans only: it reads no rows
    ], Budgets(max_query_rows=LIMIT))
    analyze, literal, comment, plain = blocks
    assert analyze.is_error and "EXPLAIN ANALYZE runs the statement" in analyze.content
    assert literal.is_error and "over max_query_rows" in literal.content
    assert comment.is_error and "over max_query_rows" in comment.content
    assert not plain.is_error and "an EXPLAIN without ANALYZE reads no rows" in plain.content
    assert elapsed < TIMEOUT_S / 4


def test_several_statements_are_refused_before_any_is_planned_or_run(tmp_path):
    blocks, harness, _, elapsed = run_duckdb(tmp_path, [
        call("duckdb__query", sql=f"SELECT 1; {HUGE_SQL}"),
        call("duckdb__query", sql=f"SELECT 1 -- x\n; {HUGE_SQL}"),
        call("duckdb__query", sql=f"{HUGE_SQL}; SELECT 1"),
    ], Budgets(max_query_rows=LIMIT))
    assert all(b.is_error and "statement" in b.content for b in blocks)
    assert events(harness, "query_estimate") == [] and elapsed < TIMEOUT_S / 4


# -- max_write_operations ------------------------------------------------------------------------------------


def write_calls(n, first=0):
    return [call("duckdb__execute", sql=f"INSERT INTO notes VALUES ({i})") for i in range(first, first + n)]


def notes_db(tmp_path):
    path = tmp_path / "notes.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE notes (n INTEGER)")
    return path


def rows_in(path):
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT count(*) FROM notes").fetchone()[0]


def test_max_write_operations_refuses_the_second_write_of_a_run(tmp_path):
    path = notes_db(tmp_path)
    blocks, harness, _, _ = run_duckdb(tmp_path, write_calls(2), Budgets(max_write_operations=1),
                                       approval=ApprovalPolicy.allow_all(), database=str(path))
    first, second = blocks
    assert not first.is_error and "INSERT" in first.content
    assert second.is_error
    assert "write budget exhausted: 1 approved write of max_write_operations=1 in this run" in second.content
    assert "Nothing was executed or changed" in second.content
    assert rows_in(path) == 1
    decisions = events(harness, "approval")
    assert [d["approved"] for d in decisions] == [True, False]


def test_max_write_operations_zero_allows_no_write_and_each_run_counts_anew(tmp_path):
    path = notes_db(tmp_path)
    blocks, _, _, _ = run_duckdb(tmp_path / "zero", write_calls(1), Budgets(max_write_operations=0),
                                 approval=ApprovalPolicy.allow_all(), database=str(path))
    assert blocks[0].is_error and "max_write_operations=0" in blocks[0].content
    assert rows_in(path) == 0
    # a session: two runs of two writes each under max_write_operations=2 (the count is per run)
    connector = duckdb_connector(database=str(path), timeout_s=TIMEOUT_S)
    turns = []
    for _ in range(2):
        turns += [{"tool_calls": [call("load_connectors", connector_name="duckdb")]}]
        turns += [{"tool_calls": [c]} for c in write_calls(2)] + [{"text": "done"}]
    adapter = ProviderAdapter("scripted/writes", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", max_write_operations=2),
                           adapter=adapter)
    session.add_connector(connector, approval=ApprovalPolicy.allow_all())
    for _ in range(2):
        result = session.ask("write two notes")
        assert result.status == "completed"
    assert rows_in(path) == 4


def test_max_write_operations_bounds_unpreviewed_writes_too(tmp_path):
    import sqlalchemy as sa

    from harness_magic.core.execution.connectors import sql_connector

    url = f"sqlite:///{tmp_path / 'notes.sqlite'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE notes (n INTEGER)")
    registry = ConnectorRegistry([sql_connector(url, name="notes")], approval=ApprovalPolicy.allow_all())
    turns = [{"tool_calls": [call("load_connectors", connector_name="notes")]}]
    turns += [{"tool_calls": [call("notes__execute", sql=f"INSERT INTO notes VALUES ({i})")]} for i in range(3)]
    harness = Harness(ProviderAdapter("scripted/sqlite", transport=ScriptedModel(turns + [{"text": "done"}])),
                      "sys", [], run_dir=str(tmp_path / "runs"), cache=SessionCache())
    Budgets(max_write_operations=2).install(harness)
    registry.install(harness)
    result = harness.run_result("go")
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][1:]
    assert [b.is_error for b in blocks] == [False, False, True]
    assert "2 approved writes of max_write_operations=2" in blocks[2].content
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM notes").scalar() == 2
    engine.dispose()


def test_a_cell_budget_overrides_the_configured_one_for_that_run_only(tmp_path):
    turns = [{"tool_calls": [call("load_connectors", connector_name="duckdb")]},
             {"tool_calls": [call("duckdb__query", sql="SELECT count(*) FROM range(5000)")]}, {"text": "done"},
             {"tool_calls": [call("duckdb__query", sql="SELECT count(*) FROM range(5000)")]}, {"text": "done"}]
    adapter = ProviderAdapter("scripted/cell", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", max_query_rows=100_000),
                           adapter=adapter)
    session.add_connector(duckdb_connector(timeout_s=TIMEOUT_S))
    cell = session.ask("count", budgets=session.config.budgets().merged(max_query_rows=1000))  # as --max-query-rows
    refused = [b for m in cell.messages for b in m.content if getattr(b, "type", "") == "tool_result"][-1]
    assert refused.is_error and "over max_query_rows=1,000" in refused.content
    assert session.budget_guard.budgets.max_query_rows == 100_000  # the configured budget is back
    again = session.ask("count again")
    ran = [b for m in again.messages for b in m.content if getattr(b, "type", "") == "tool_result"][-1]
    assert not ran.is_error and "rows ≈ 5,000" in ran.content


# -- the budgets themselves ----------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value, message", [
    ("max_query_rows", 0, "max_query_rows must be positive or None, got 0"),
    ("max_query_rows", 1.5, "max_query_rows must be an integer or None, got 1.5"),
    ("max_query_cost", math.nan, "max_query_cost must be positive or None, got nan"),
    ("max_query_cost", math.inf, "max_query_cost must be at most"),
    ("max_query_cost", "1e9", "max_query_cost must be a number or None, got '1e9'"),
    ("max_write_operations", -1, "max_write_operations must be 0 or more or None, got -1"),
    ("max_write_operations", True, "max_write_operations must be an integer or None, got True"),
])
def test_bad_query_and_write_budgets_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError) as raised:
        Budgets(**{field: value})
    assert message in str(raised.value)
    with pytest.raises(ValueError) as raised:
        AgentConfig(**{field: value})
    assert message in str(raised.value)


def test_query_budgets_never_end_a_run_and_reach_a_subagent_with_the_writes_left(tmp_path):
    budgets = Budgets(max_query_rows=10, max_query_cost=5.0, max_write_operations=2)
    assert budgets.query_limits() == QueryLimits(10, 5.0, 2)
    seen = []

    def delegate() -> str:
        """What a subagent started now would get (as the subagent tool asks)."""
        run = harness.current_run
        budget_for(harness).count_write(run)  # one write approved earlier in this run
        seen.append(child_budgets(harness, run))
        return "delegated"

    spec = ToolSpec(name="delegate", description="Delegate.", handler=delegate,
                    parameters={"type": "object", "properties": {}})
    turns = [{"tool_calls": [{"name": "delegate", "arguments": {}}]}, {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/x", transport=ScriptedModel(turns)), "sys", [spec],
                      run_dir=str(tmp_path), cache=SessionCache())
    budgets.install(harness)
    result = harness.run_result("go")
    assert result.status == "completed"  # query and write budgets never end a run
    ((child, spent),) = seen
    assert spent is None
    assert (child.max_query_rows, child.max_query_cost, child.max_write_operations) == (10, 5.0, 1)


# -- reading the plans -----------------------------------------------------------------------------------------


def test_duckdb_plan_estimate_reads_the_largest_cardinality_of_a_real_plan():
    with duckdb.connect() as con:
        plan = con.execute("EXPLAIN (FORMAT JSON) SELECT range % 7 AS g, count(*) FROM range(50000000) "
                           "WHERE range > 10 GROUP BY g").fetchall()[0][1]
    estimate = duckdb_plan_estimate(plan)
    assert estimate == Estimate("duckdb", 50_000_000.0)  # the scan, not the 7 groups it returns
    assert estimate.line() == "Estimate (duckdb plan, before running): rows ≈ 50,000,000, cost: none."


@pytest.mark.parametrize("sql, target", [
    ("SELECT 1", "SELECT 1"),
    ("explain select 1", None),
    ("EXPLAIN ANALYZE SELECT 1", "SELECT 1"),
    ("EXPLAIN (ANALYZE, BUFFERS) SELECT 1", "SELECT 1"),
    ("EXPLAIN VERBOSE ANALYSE\nSELECT 1", "SELECT 1"),
    ("SELECT 'EXPLAIN ANALYZE'", "SELECT 'EXPLAIN ANALYZE'"),
])
def test_explain_target_estimates_what_would_run(sql, target):
    assert explain_target(sql)[0] == target


def test_spark_plan_estimate_reads_sizes_with_units_and_ignores_an_unknown_size():
    plan = ("== Optimized Logical Plan ==\n"
            "Aggregate [sum(id#0L) AS s#2L], Statistics(sizeInBytes=16.0 B, rowCount=1)\n"
            "+- Range (0, 50000000, step=1, splits=Some(2)), Statistics(sizeInBytes=381.5 MiB, rowCount=5.00E+7)\n"
            "\n== Physical Plan ==\n*(2) HashAggregate(keys=[], functions=[sum(id#0L)])\n")
    estimate = spark_plan_estimate(plan)
    assert estimate.rows == 5e7 and estimate.cost == pytest.approx(381.5 * 2**20)
    unknown = spark_plan_estimate("== Optimized Logical Plan ==\nProject [a], Statistics(sizeInBytes=8.0 EiB)\n")
    assert unknown.empty


def test_a_subagents_approved_writes_count_against_its_parents_max_write_operations(tmp_path):
    """Delegating cannot multiply the write budget: each writing subagent spends the parent run's writes.

    A prompt-injected parent with max_write_operations=2 starts a writing domain subagent twice; the first
    writes twice, so the second is left none and its write is refused (and so would the parent's own be).
    """
    path = notes_db(tmp_path)
    writer = SubagentPreset(name="writer", description="Writes notes.", prompt="Write.",
                            tools=("load_connectors", "duckdb__*"), read_only=False)

    def child(n_writes: int, first: int) -> list[dict]:
        return ([{"tool_calls": [call("load_connectors", connector_name="duckdb")]}]
                + [{"tool_calls": [c]} for c in write_calls(n_writes, first=first)] + [{"text": "wrote"}])

    delegate = {"tool_calls": [call("subagent", task="write notes", preset="writer")]}
    turns = ([delegate] + child(2, 0) + [delegate] + child(1, 2)
             + [{"tool_calls": [call("load_connectors", connector_name="duckdb")]},
                {"tool_calls": write_calls(1, first=3)}, {"text": "done"}])
    adapter = ProviderAdapter("scripted/delegating", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", max_write_operations=2),
                           adapter=adapter, subagents={"presets": {"writer": writer}})
    session.add_connector(duckdb_connector(database=str(path), timeout_s=TIMEOUT_S),
                          approval=ApprovalPolicy.allow_all())
    result = session.ask("write four notes")
    assert result.status == "completed"
    assert rows_in(path) == 2, "two subagents and the parent wrote two notes in all, the run's budget"
    decisions = [r for log in sorted((tmp_path / "runs").glob("*.jsonl"))
                 for r in map(json.loads, log.read_text().splitlines()) if r.get("event") == "approval"]
    # a preset's copy of the connector keeps the write previewed: asked once, after its preview, per write
    assert [(d["approved"], d["previewed"]) for d in decisions].count((True, True)) == 2
    assert [d["approved"] for d in decisions].count(True) == 2
    outputs = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    assert outputs[-1].is_error and "max_write_operations=2" in outputs[-1].content  # the parent's own write
