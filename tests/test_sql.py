"""SQL classification, the DuckDB connector and the files connector (no server needed)."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import (
    ApprovalPolicy,
    ConnectorRegistry,
    classify_sql,
    connectors_from_config,
    duckdb_connector,
    files_connector,
)
from harness_magic.core.execution.connectors.classify import SQLClassificationError
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


def run_tools(tmp_path, registry, calls, cache=None):
    """Load every connector, make ``calls`` one per turn; returns (results, harness, run)."""
    turns = [{"tool_calls": [call("load_connectors", connector_name=n)]} for n in registry.names]
    turns += [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(turns))
    harness = Harness(adapter, "sys", [], run_dir=str(tmp_path), cache=cache or SessionCache())
    registry.install(harness)
    result = harness.run_result("go")
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    return blocks[len(registry.names):], harness, result


# ------------------------------------------------------------------------------- classification


@pytest.mark.parametrize("sql, kind", [
    ("SELECT 1", "read"),
    ("  with t as (select 1) select * from t", "read"),
    ("VALUES (1), (2)", "read"),
    ("EXPLAIN SELECT * FROM t", "read"),
    ("SELECT 'drop table x; delete from y' AS s", "read"),
    ("SELECT 1 -- ; drop table x", "read"),
    ("SELECT /* ; insert into t */ 1", "read"),
    ("SELECT $$ ; DELETE FROM t $$", "read"),
    ("SELECT \"update\" FROM t", "read"),
    ("SELECT E'it\\'s; drop table t'", "read"),
    ("INSERT INTO t VALUES (1)", "write"),
    ("UPDATE t SET a = 1 WHERE id = 2", "write"),
    ("CREATE TABLE t (a int)", "write"),
    ("COPY t TO '/tmp/x.csv'", "write"),
    ("SET statement_timeout = 0", "write"),
    ("WITH gone AS (DELETE FROM t WHERE a = 1 RETURNING *) SELECT * FROM gone", "write"),
    ("SELECT * INTO newt FROM t", "write"),
    ("SELECT * FROM t FOR UPDATE", "write"),
    ("EXPLAIN ANALYZE INSERT INTO t VALUES (1)", "write"),
    ("DROP TABLE t", "destructive"),
    ("TRUNCATE t", "destructive"),
    ("DELETE FROM t", "destructive"),
    ("UPDATE t SET a = 1", "destructive"),
    ("SELECT 1; DROP TABLE t", "destructive"),
    ("ALTER TABLE t DROP COLUMN a", "destructive"),
    ("SELECT 1; SELECT 2", "write"),
    ("SELECT * FROM (SELECT pg_notify('a', 'b')) s", "write"),
    ("SELECT * FROM ROWS FROM (pg_ls_dir('.'))", "write"),
    ("SELECT 1 FROM t WHERE a IN (SELECT b FROM u FOR SHARE)", "write"),
    ('SELECT "PG_ADVISORY_LOCK"(1)', "write"),
    ("REVOKE SELECT ON t FROM x", "destructive"),
    ("EXPLAIN SELECT pg_terminate_backend(1)", "read"),
    ("EXPLAIN ANALYZE SELECT pg_terminate_backend(1)", "write"),
])
def test_statements_are_classified(sql, kind):
    assert classify_sql(sql).kind == kind


@pytest.mark.parametrize("sql", ["", "  ;  ", "SELECT 'unterminated", "SELECT /* open", "FOO BAR"])
def test_empty_or_malformed_sql_is_rejected(sql):
    with pytest.raises(SQLClassificationError):
        classify_sql(sql)


# ------------------------------------------------------------------------------- duckdb


@pytest.fixture
def big_cache():
    rng = np.random.default_rng(0)
    cache = SessionCache()
    cache.put("orders", pd.DataFrame({"order_id": np.arange(1_000_000), "customer_id": rng.integers(0, 1000, 1_000_000),
                                      "amount": rng.integers(1, 100, 1_000_000)}))
    cache.put("customers", pd.DataFrame({"customer_id": np.arange(1000),
                                         "region": np.array(["north", "south", "east", "west"])[np.arange(1000) % 4]}))
    return cache


def test_duckdb_schema_discovery_lists_and_describes_cached_frames_and_files(tmp_path, big_cache):
    path = tmp_path / "targets.csv"
    path.write_text("region,target\nnorth,10\nsouth,20\n")
    registry = ConnectorRegistry([duckdb_connector({"targets": path})])
    (tables, described), _, _ = run_tools(tmp_path, registry, [call("duckdb__list_tables"),
                                                               call("duckdb__describe", table="orders")],
                                         cache=big_cache)
    listing = json.loads(tables.content)
    assert {"name": "targets", "kind": "file", "path": "targets.csv"} in listing
    assert {"name": "orders", "kind": "cached frame", "rows": 1_000_000} in listing
    assert [c["name"] for c in json.loads(described.content)["columns"]] == ["order_id", "customer_id", "amount"]


def test_duckdb_join_and_aggregate_over_a_million_rows_return_handles(tmp_path, big_cache):
    registry = ConnectorRegistry([duckdb_connector()])
    join = ("SELECT o.order_id, o.amount, c.region FROM orders o JOIN customers c USING (customer_id)")
    agg = ("SELECT c.region, sum(o.amount) AS revenue, count(*) AS n FROM orders o "
           "JOIN customers c USING (customer_id) GROUP BY 1 ORDER BY 1")
    (joined, summary), harness, run = run_tools(
        tmp_path, registry, [call("duckdb__query", sql=join, name="joined"),
                             call("duckdb__query", sql=agg, name="by_region")], cache=big_cache)
    assert not joined.is_error and not summary.is_error
    assert harness.cache.get("joined").shape == (1_000_000, 3)
    frame = harness.cache.get("by_region")
    assert list(frame["region"]) == ["east", "north", "south", "west"]
    orders = big_cache.get("orders")
    assert frame["n"].sum() == 1_000_000 and frame["revenue"].sum() == orders["amount"].sum()
    assert run.handles == ("joined", "by_region")


def test_duckdb_row_cap_is_reported_to_the_model(tmp_path, big_cache):
    registry = ConnectorRegistry([duckdb_connector(max_rows=1000)])
    (result,), harness, _ = run_tools(tmp_path, registry, [call("duckdb__query", sql="SELECT * FROM orders")],
                                      cache=big_cache)
    assert "truncated at 1,000 rows" in result.content
    assert len(harness.cache.get("duckdb_result")) == 1000


def test_duckdb_statement_timeout_interrupts_the_query(tmp_path):
    registry = ConnectorRegistry([duckdb_connector(timeout_s=0.3)])
    sql = "SELECT count(*) FROM range(1000000000000) a"
    (result,), _, _ = run_tools(tmp_path, registry, [call("duckdb__query", sql=sql)])
    assert result.is_error and "timed out after 0.3 s" in result.content


def test_duckdb_refuses_writes_and_files_outside_its_configuration(tmp_path, big_cache):
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    registry = ConnectorRegistry([duckdb_connector()])
    (copy, read), _, _ = run_tools(tmp_path, registry, [
        call("duckdb__query", sql=f"COPY orders TO '{tmp_path}/out.csv'"),
        call("duckdb__query", sql=f"SELECT * FROM read_csv_auto('{secret}')"),
    ], cache=big_cache)
    assert copy.is_error and "classified write" in copy.content
    assert not (tmp_path / "out.csv").exists()
    assert read.is_error and "hunter2" not in read.content


def test_duckdb_sql_cannot_change_cached_frames(tmp_path, big_cache):
    before = big_cache.get("customers").copy()
    registry = ConnectorRegistry([duckdb_connector()], approval=ApprovalPolicy.allow_all())
    run_tools(tmp_path, registry, [call("duckdb__query", sql="UPDATE customers SET region = 'x' WHERE true")],
              cache=big_cache)
    pd.testing.assert_frame_equal(big_cache.get("customers"), before)


# ------------------------------------------------------------------------------- files


@pytest.fixture
def data_dir(tmp_path):
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    frame.to_csv(root / "plain.csv", index=False)
    frame.to_parquet(root / "sub" / "table.parquet")
    (root / "records.json").write_text(json.dumps(frame.to_dict(orient="records")))
    frame.to_excel(root / "book.xlsx", sheet_name="first", index=False)
    outside = tmp_path / "outside.csv"
    outside.write_text("secret\n42\n")
    os.symlink(outside, root / "escape.csv")
    return root


def test_files_lists_and_reads_every_supported_format(tmp_path, data_dir):
    registry = ConnectorRegistry([files_connector([data_dir])])
    results, harness, _ = run_tools(tmp_path, registry, [
        call("files__list"),
        call("files__read", path="data/plain.csv"),
        call("files__read", path="data/sub/table.parquet"),
        call("files__read", path="records.json"),
        call("files__read", path="data/book.xlsx", sheet="first"),
    ])
    listing = json.loads(results[0].content)
    assert [e["path"] for e in listing] == ["data/book.xlsx", "data/plain.csv", "data/records.json",
                                            "data/sub/table.parquet"]  # the escaping symlink is not listed
    assert all(not r.is_error for r in results)
    assert set(harness.cache.names()) == {"plain", "table", "records", "book"}
    for name in ("plain", "table", "records", "book"):
        assert list(harness.cache.get(name)["a"]) == [1, 2, 3]


@pytest.mark.parametrize("path", ["data/../outside.csv", "../outside.csv", "data/escape.csv", "/etc/passwd"])
def test_files_refuses_paths_outside_the_roots(tmp_path, data_dir, path):
    registry = ConnectorRegistry([files_connector([data_dir])])
    (result,), harness, _ = run_tools(tmp_path, registry, [call("files__read", path=path)])
    assert result.is_error and "outside the configured directories" in result.content
    assert harness.cache.names() == []


def test_connectors_can_come_from_config(tmp_path, data_dir):
    registry = connectors_from_config([{"type": "files", "roots": [str(data_dir)]},
                                       {"type": "duckdb", "files": {"plain": str(data_dir / "plain.csv")}},
                                       {"type": "sql", "name": "lite", "url": "sqlite://"}])
    assert registry.names == ["files", "duckdb", "lite"]
    with pytest.raises(ValueError, match="unknown"):
        connectors_from_config([{"type": "ftp"}])


@pytest.mark.parametrize("attack", [
    "DELETE FROM accounts",
    "SELECT 1; DELETE FROM accounts",
    "ATTACH DATABASE '{dir}/stolen.db' AS stolen",
    "CREATE TABLE t2 AS SELECT * FROM accounts",
    "PRAGMA query_only = OFF",
    "VACUUM INTO '{dir}/copy.db'",
])
def test_sqlite_reads_run_on_a_read_only_connection(tmp_path, attack):
    """Straight into the engine path: SQLite itself refuses the write, whatever the classifier says."""
    import sqlite3

    from harness_magic.core.execution.connectors.sql.connector import SQLConnection
    from harness_magic.core.execution.tools import ToolError

    path = tmp_path / "bank.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE accounts (id int)")
        conn.execute("INSERT INTO accounts VALUES (1)")
    before = path.read_bytes()
    db = SQLConnection(f"sqlite:///{path}")
    try:
        db.query(attack.format(dir=tmp_path))
    except ToolError:
        pass
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank.db"]
    assert db.query("SELECT count(*) AS n FROM accounts")[0]["n"].tolist() == [1]
