"""PostgreSQL's own estimates before a query runs (issue 34, point 4), on a real server.

``EXPLAIN (FORMAT JSON)`` on the read connection gives the plan's rows (the largest ``Plan Rows``) and cost (the
top node's ``Total Cost``); a read over ``max_query_rows`` or ``max_query_cost`` is refused before it runs with
both numbers named; within budget it runs and says its estimate. SQLite gives no estimate: the read runs and
says so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from harness_magic.core.agent.loop import Harness
from harness_magic.core.cache import SessionCache
from harness_magic.core.control.budgets import Budgets
from harness_magic.core.execution.connectors import ConnectorRegistry, sql_connector
from harness_magic.core.execution.connectors.estimates import postgres_plan_estimate
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.providers.offline import ScriptedModel
from postgres import postgres_url  # noqa: F401  (session fixture)

pytestmark = pytest.mark.postgres

TIMEOUT_S = 60.0
"""The statement timeout: a read of ENDLESS that started would end in its timeout error."""
ENDLESS = "SELECT count(*) AS n FROM generate_series(1::bigint, 1000000000000::bigint) AS g"
"""10^12 rows: PostgreSQL estimates them exactly (generate_series' support function) and would take days."""


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


@pytest.fixture(scope="module")
def events_db(postgres_url):  # noqa: F811
    """200,000 analysed rows."""
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS events")
        conn.exec_driver_sql("CREATE TABLE events (id bigint PRIMARY KEY, kind text, amount int)")
        conn.exec_driver_sql("INSERT INTO events SELECT g, (ARRAY['a','b','c'])[1 + g %% 3], g %% 100 "
                             "FROM generate_series(1, 200000) g")
        conn.exec_driver_sql("ANALYZE events")
    yield postgres_url
    engine.dispose()


def run_sql(tmp_path, url, calls, budgets):
    registry = ConnectorRegistry([sql_connector(url, name="warehouse", timeout_s=TIMEOUT_S)])
    turns = [{"tool_calls": [call("load_connectors", connector_name="warehouse")]}]
    turns += [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/pg", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=SessionCache())
    budgets.install(harness)
    registry.install(harness)
    started = time.monotonic()
    result = harness.run_result("go")
    elapsed = time.monotonic() - started
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    logged = [r for r in map(json.loads, Path(harness.run_file).read_text().splitlines())
              if r.get("event") == "query_estimate"]
    return blocks[1:], logged, elapsed


def test_a_read_over_max_query_rows_is_refused_by_the_plan_before_it_runs(tmp_path, events_db):
    blocks, logged, elapsed = run_sql(tmp_path, events_db, [call("warehouse__query", sql=ENDLESS)],
                                      Budgets(max_query_rows=1_000_000))
    assert blocks[0].is_error
    assert "rows ≈ 1,000,000,000,000 over max_query_rows=1,000,000" in blocks[0].content
    assert "No row was read" in blocks[0].content
    assert elapsed < TIMEOUT_S / 4  # the statement never started: it would have run into its timeout
    (event,) = logged
    assert (event["engine"], event["rows"], event["outcome"]) == ("postgresql", 1e12, "refused")
    assert event["cost"] > 0 and event["cost_unit"] == "planner units"


def test_a_read_over_max_query_cost_is_refused_naming_the_planner_cost(tmp_path, events_db):
    blocks, logged, _ = run_sql(tmp_path, events_db, [
        call("warehouse__query", sql="SELECT kind, sum(amount) FROM events GROUP BY kind"),
        call("warehouse__query", sql="SELECT amount FROM events WHERE id = 42"),
    ], Budgets(max_query_cost=100.0))
    scan, lookup = blocks
    assert scan.is_error and "planner units over max_query_cost=100" in scan.content
    assert not lookup.is_error  # an index lookup costs a few units
    assert "Estimate (postgresql plan, before running): rows ≈ 1, cost ≈" in lookup.content
    assert "planner units" in lookup.content and "Query returned 1 rows" in lookup.content
    assert [e["outcome"] for e in logged] == ["refused", "within budget"]


def test_a_read_within_budget_runs_and_carries_the_estimate(tmp_path, events_db):
    blocks, logged, _ = run_sql(tmp_path, events_db, [
        call("warehouse__query", sql="SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind"),
    ], Budgets(max_query_rows=1_000_000, max_query_cost=1e9))
    assert not blocks[0].is_error and "rows ≈ 200,000" in blocks[0].content  # the scan under the 3 groups
    assert "Query returned 3 rows" in blocks[0].content and logged[0]["outcome"] == "within budget"


def test_hostile_queries_get_the_server_error_or_a_refusal_and_nothing_runs(tmp_path, events_db):
    blocks, logged, elapsed = run_sql(tmp_path, events_db, [
        call("warehouse__query", sql="SELECT * FROM no_such_table"),
        call("warehouse__query", sql="SELECT nothing FROM events"),
        call("warehouse__query", sql=f"SELECT 1; {ENDLESS}"),
        call("warehouse__query", sql=f"EXPLAIN ANALYZE {ENDLESS}"),
        call("warehouse__query", sql=f"/* EXPLAIN */ {ENDLESS}"),
        call("warehouse__query", sql=f"EXPLAIN {ENDLESS}"),
    ], Budgets(max_query_rows=1_000_000))
    missing, column, several, analyze, comment, plain = blocks
    assert missing.is_error and "postgresql error" in missing.content and "no_such_table" in missing.content
    assert column.is_error and "postgresql error" in column.content and "nothing" in column.content
    assert several.is_error and "statements" in several.content
    # a read to the classifier, but ANALYZE runs the statement: the statement it explains is what is estimated
    assert analyze.is_error and "over max_query_rows" in analyze.content and "No row was read" in analyze.content
    assert comment.is_error and "over max_query_rows" in comment.content
    assert not plain.is_error and "reads no rows" in plain.content
    assert elapsed < TIMEOUT_S / 4


def test_sqlite_gives_no_estimate_and_the_read_runs_saying_so(tmp_path):
    path = tmp_path / "small.sqlite"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x int)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1), (2)")
    engine.dispose()
    blocks, logged, _ = run_sql(tmp_path, f"sqlite:///{path}", [call("warehouse__query", sql="SELECT * FROM t")],
                                Budgets(max_query_rows=1))
    assert not blocks[0].is_error and "no estimate" in blocks[0].content and "Query returned 2 rows" in blocks[0].content
    assert [e["outcome"] for e in logged] == ["no estimate"]


def test_postgres_plan_estimate_reads_rows_from_every_node_and_cost_from_the_top(events_db):
    engine = sa.create_engine(events_db)
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) SELECT kind, count(*) FROM events GROUP BY kind").scalar()
    engine.dispose()
    estimate = postgres_plan_estimate(plan)
    assert estimate.rows == 200_000 and estimate.cost == plan[0]["Plan"]["Total Cost"]
    assert postgres_plan_estimate(json.dumps(plan)) == estimate  # the text form too
