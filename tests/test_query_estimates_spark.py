"""Spark's own estimates before a query runs (issue 34, point 4), on a real local Spark Connect server started by
the connector (``master=``).

The optimized logical plan's statistics (``EXPLAIN COST``: ``rowCount``, ``sizeInBytes``) are asked before any
job: a query over ``max_query_rows`` or ``max_query_cost`` (bytes) is refused naming the estimate and the limit,
and no row is read; within budget it runs and carries its estimate; a query Spark cannot plan gets Spark's error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from spark_servers import quick_jvm

pytest.importorskip("pyspark")

from harness_magic.core.agent.loop import Harness  # noqa: E402
from harness_magic.core.cache import SessionCache  # noqa: E402
from harness_magic.core.control.budgets import Budgets  # noqa: E402
from harness_magic.core.execution.connectors import ConnectorRegistry  # noqa: E402
from harness_magic.core.execution.connectors.spark.connector import spark_connector  # noqa: E402
from harness_magic.core.providers.adapter import ProviderAdapter  # noqa: E402
from harness_magic.core.providers.offline import ScriptedModel  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

TIMEOUT_S = 120.0
"""The Spark job timeout: a read of HUGE_SQL that started would end in its timeout error."""
HUGE_SQL = "SELECT sum(id) AS total FROM range(500000000000)"
"""5 * 10^11 rows: Spark plans them instantly and would need days to read them on two cores."""


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


@pytest.fixture(scope="module")
def spark():
    """One connector whose engine starts its own local server (stopped at the end)."""
    connector = spark_connector(master="local[2]", timeout_s=TIMEOUT_S,
                                conf=quick_jvm({"spark.sql.shuffle.partitions": "2"}))
    connector.engine.run(lambda session: session.sql("SELECT 1").collect())  # the server starts here, not in a test
    yield connector
    connector.engine.close()


class Spy:
    """Counts calls of one engine method that runs Spark jobs (the real method still runs)."""

    def __init__(self, engine, method):
        self.calls = 0
        self.engine, self.method, self.real = engine, method, getattr(engine, method)

        def counted(*args, **kwargs):
            self.calls += 1
            return self.real(*args, **kwargs)

        setattr(engine, method, counted)

    def restore(self):
        setattr(self.engine, self.method, self.real)


def run_spark(tmp_path, connector, calls, budgets):
    registry = ConnectorRegistry([connector])
    turns = [{"tool_calls": [call("load_connectors", connector_name="spark")]}]
    turns += [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/spark", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=SessionCache())
    budgets.install(harness)
    registry.install(harness)
    spies = [Spy(connector.engine, "query"), Spy(connector.engine, "lazy")]
    started = time.monotonic()
    try:
        result = harness.run_result("go")
    finally:
        for spy in spies:
            spy.restore()
    elapsed = time.monotonic() - started
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    logged = [r for r in map(json.loads, Path(harness.run_file).read_text().splitlines())
              if r.get("event") == "query_estimate"]
    return blocks[1:], logged, [s.calls for s in spies], elapsed


def test_a_spark_query_over_max_query_rows_is_refused_by_its_plan_before_any_job(tmp_path, spark):
    blocks, logged, reads, elapsed = run_spark(tmp_path, spark, [
        call("spark__query", sql=HUGE_SQL), call("spark__query", sql=HUGE_SQL, lazy=False)],
        Budgets(max_query_rows=1_000_000))
    for block in blocks:
        assert block.is_error
        assert "rows ≈ 500,000,000,000 over max_query_rows=1,000,000" in block.content
        assert "No row was read" in block.content
    assert reads == [0, 0] and elapsed < TIMEOUT_S / 4
    assert [(e["engine"], e["rows"], e["outcome"]) for e in logged] == [("spark", 5e11, "refused")] * 2


def test_a_spark_query_over_max_query_cost_is_refused_naming_the_bytes(tmp_path, spark):
    blocks, logged, reads, _ = run_spark(tmp_path, spark, [
        call("spark__query", sql="SELECT id FROM range(1000000)", lazy=False)], Budgets(max_query_cost=1000.0))
    assert blocks[0].is_error and "bytes over max_query_cost=1,000" in blocks[0].content
    assert reads == [0, 0] and logged[0]["cost_unit"] == "bytes" and logged[0]["cost"] == pytest.approx(8e6, rel=0.01)


def test_a_spark_query_within_budget_runs_and_carries_the_estimate(tmp_path, spark):
    blocks, logged, reads, _ = run_spark(tmp_path, spark, [
        call("spark__query", sql="SELECT id * 2 AS twice FROM range(100)", lazy=False)],
        Budgets(max_query_rows=1_000_000, max_query_cost=1e9))
    assert not blocks[0].is_error
    assert "Estimate (spark plan, before running): rows ≈ 100, cost ≈ 800 bytes." in blocks[0].content
    assert "Query returned 100 rows" in blocks[0].content
    assert reads == [1, 0] and [e["outcome"] for e in logged] == ["within budget"]


def test_a_spark_query_it_cannot_plan_gets_spark_error_and_no_estimate(tmp_path, spark):
    blocks, logged, reads, _ = run_spark(tmp_path, spark, [
        call("spark__query", sql="SELECT * FROM no_such_table"),
        call("spark__query", sql=f"SELECT 1; {HUGE_SQL}"),
    ], Budgets(max_query_rows=1_000_000))
    missing, several = blocks
    assert missing.is_error and "spark error" in missing.content and "no_such_table" in missing.content
    assert several.is_error
    assert logged == [] and reads == [0, 0]
