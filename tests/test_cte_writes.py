"""Data-modifying statements hidden inside a query (a CTE, a subquery, ``query('...')``) are writes.

The engines already refuse them on the read path (DuckDB's read-only
transaction, PostgreSQL's read-only transaction, Spark's subquery wrapper);
these tests check what the classifier makes of them, which decides what the
model is told and what the user is asked: a read tool refuses them as
writes (pointing to the execute tool that asks), an execute tool asks with
the right kind (``destructive`` for a DELETE/UPDATE without WHERE anywhere in
the tree), and nothing changes after a denied approval. Ground truth: each
hostile form really changes a writable copy of the data in the real engine.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
import sqlalchemy as sa

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import ApprovalPolicy, ConnectorRegistry, duckdb_connector, sql_connector
from harness_magic.core.execution.connectors.classify import SQLClassificationError, classify_sql
from harness_magic.core.execution.connectors.duckdb.connector import lazy_rebinder
from harness_magic.core.execution.connectors.spark.connector import spark_connector
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.execution.tools import ToolError
from postgres import postgres_url  # noqa: F401  (session fixture)

ROWS = 5

# (sql with the table name as {t}, kind) — accepted and run by both DuckDB 2 and PostgreSQL 15
HOSTILE = [
    ("WITH d AS (DELETE FROM {t} RETURNING *) SELECT * FROM d", "destructive"),
    ("WITH d AS (DELETE FROM {t} WHERE id = 1 RETURNING *) SELECT * FROM d", "write"),
    ("WITH i AS (INSERT INTO {t} VALUES (99, 'x') RETURNING *) SELECT * FROM i", "write"),
    ("WITH u AS (UPDATE {t} SET note = 'pwned' WHERE id > 0 RETURNING id) SELECT count(*) FROM u", "write"),
    ("WITH u AS (UPDATE {t} SET note = 'pwned' RETURNING id) SELECT count(*) FROM u", "destructive"),
    ("wItH d aS (dElEtE fRoM {t} rEtUrNiNg *) sElEcT * fRoM d", "destructive"),
    ("WITH/**/d AS(/* SELECT */DELETE--comment )\nFROM {t} RETURNING *)SELECT*FROM d", "destructive"),
    ('WITH "d" AS (DELETE FROM "{t}" RETURNING "id") SELECT "id" FROM "d"', "destructive"),
    ('WITH "select" AS (DELETE FROM {t} RETURNING 1) SELECT * FROM "select"', "destructive"),
    ("WITH d AS MATERIALIZED (DELETE FROM {t} RETURNING id) SELECT * FROM d", "destructive"),
    ("WITH a AS (SELECT 1 AS x), d AS (DELETE FROM {t} WHERE id IN (SELECT x FROM a) RETURNING id), "
     "e AS (DELETE FROM {t} RETURNING id) SELECT * FROM d", "destructive"),
    ("WITH d AS (DELETE FROM {t} WHERE id = 2 RETURNING id) "
     "SELECT * FROM (SELECT * FROM (SELECT * FROM d) x) y", "write"),
    ("WITH d AS (DELETE FROM {t} RETURNING id) INSERT INTO {t} SELECT id + 100, 'moved' FROM d", "destructive"),
    ("WITH d AS (DELETE FROM {t} RETURNING id) UPDATE {t} SET note = 'x' WHERE id IN (SELECT id FROM d)",
     "destructive"),
]

# accepted by the parsers, refused by the engines' binders (nested, view bodies): still writes to the classifier
PARSED_ONLY = [
    ("SELECT * FROM (WITH d AS (DELETE FROM {t} RETURNING *) SELECT * FROM d) s", "destructive"),
    ("SELECT (WITH d AS (DELETE FROM {t} WHERE id = 1 RETURNING id) SELECT max(id) FROM d)", "write"),
    ("SELECT * FROM {t} WHERE EXISTS (WITH u AS (UPDATE {t} SET note = 'x' RETURNING 1) SELECT 1 FROM u)",
     "destructive"),
    ("SELECT 1 UNION ALL (WITH i AS (INSERT INTO {t} VALUES (7, 'x') RETURNING 1) SELECT * FROM i)", "write"),
    ("WITH a AS (WITH b AS (WITH d AS (DELETE FROM {t} RETURNING id) SELECT * FROM d) SELECT * FROM b) "
     "SELECT * FROM a", "destructive"),
    ("CREATE VIEW v_cte AS WITH d AS (DELETE FROM {t} RETURNING *) SELECT * FROM d", "destructive"),
    ("EXPLAIN ANALYZE WITH d AS (DELETE FROM {t} RETURNING *) SELECT * FROM d", "destructive"),
]

DEEP = 40
"""Nesting depth of the deep forms: well inside every parser's limits, far past what a hand-written scan follows."""


def deep_subquery(table: str) -> str:
    return "SELECT * FROM (" * DEEP + f"WITH d AS (DELETE FROM {table} RETURNING id) SELECT * FROM d" + ") x" * DEEP


def deep_ctes(table: str) -> str:
    return ("".join(f"WITH c{i} AS (" for i in range(DEEP)) + f"DELETE FROM {table} RETURNING id"
            + "".join(f") SELECT * FROM c{i}" for i in reversed(range(DEEP))))


def deep_consumer(table: str) -> str:
    """A top-level data-modifying CTE read through deeply nested subqueries (the engines run this one)."""
    return (f"WITH d AS (DELETE FROM {table} RETURNING id) " + "SELECT * FROM (" * DEEP + "SELECT * FROM d"
            + ") x" * DEEP)


LEGIT = [
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT sum(n) AS s FROM r",
     {"s": 15}),
    ('WITH "delete" AS (SELECT count(*) AS "delete" FROM {t}) SELECT "delete" FROM "delete"', {"delete": ROWS}),
    ('WITH "insert" AS (SELECT id FROM {t}), "update" AS (SELECT id FROM "insert" WHERE id > 3) '
     'SELECT count(*) AS n FROM "update"', {"n": 2}),
    ('SELECT count(*) AS "delete" FROM (SELECT note AS "update", id AS "returning" FROM {t}) AS "merge"',
     {"delete": ROWS}),
    ("SELECT count(*) AS n FROM {t} WHERE note <> 'WITH d AS (DELETE FROM {t} RETURNING *) SELECT 1'", {"n": ROWS}),
    ("SELECT count(*) AS n /* WITH d AS (DELETE FROM x) */ FROM {t} -- ; DELETE FROM x", {"n": ROWS}),
    ("WITH a AS (SELECT id FROM {t}), b AS (SELECT id FROM a WHERE id IN (SELECT id FROM a)) "
     "SELECT count(*) AS n FROM b", {"n": ROWS}),
]


def fill(sql: str, table: str) -> str:
    return sql.replace("{t}", table)


# ------------------------------------------------------------------------------------------ the classifier


@pytest.mark.parametrize("dialect", ["postgresql", "duckdb", "spark"])
@pytest.mark.parametrize("sql, kind", HOSTILE + PARSED_ONLY)
def test_hidden_writes_take_the_class_of_the_worst_statement_in_the_tree(dialect, sql, kind):
    if dialect == "duckdb" and sql.startswith(("CREATE", "EXPLAIN")):
        kind = "write"  # DuckDB serialises only SELECT trees: other statements keep their own class
    if dialect == "spark" and sql.startswith("EXPLAIN"):
        kind = "write"  # sqlglot reads Spark's EXPLAIN as a command
    found = classify_sql(fill(sql, "victim"), dialect)
    assert found.kind == kind, found.summary
    assert len(found.statements) == 1


@pytest.mark.parametrize("dialect", ["postgresql", "duckdb", "spark"])
def test_deep_nesting_still_finds_the_write_or_refuses(dialect):
    for sql in (deep_subquery("victim"), deep_ctes("victim"), deep_consumer("victim")):
        assert classify_sql(sql, dialect).kind == "destructive"
    very_deep = "SELECT * FROM (" * 3000 + "WITH d AS (DELETE FROM victim RETURNING 1) SELECT 1" + ") x" * 3000
    try:
        assert classify_sql(very_deep, dialect).kind != "read"
    except SQLClassificationError as exc:
        assert "nested too deeply" in str(exc) or "rejects it" in str(exc)


@pytest.mark.parametrize("dialect", ["postgresql", "duckdb", "spark"])
@pytest.mark.parametrize("sql", [s for s, _ in LEGIT])
def test_legitimate_queries_with_ctes_stay_plain_reads(dialect, sql):
    found = classify_sql(fill(sql, "victim"), dialect)
    assert found.kind == "read", found.summary


@pytest.mark.parametrize("sql, kind", [
    ("SELECT * FROM query('WITH d AS (DELETE FROM victim RETURNING *) SELECT * FROM d')", "destructive"),
    ("SELECT * FROM query('SELECT * FROM query(''WITH u AS (UPDATE victim SET note = 1 WHERE id = 1 "
     "RETURNING 1) SELECT 1'')')", "write"),
    ("SELECT * FROM query('SELECT 1; DELETE FROM victim')", "destructive"),
    ("SELECT * FROM query(getvariable('q'))", "write"),
    ("SELECT * FROM query('SELECT nextval(''s'')')", "write"),
    ("SELECT nextval('s')", "write"),
    ("DELETE FROM victim", "destructive"),
    ("DELETE FROM victim --", "destructive"),
    ("UPDATE victim SET note = 'x' -- WHERE id = 1", "destructive"),
    ("DELETE FROM victim WHERE id = 1", "write"),
    ("WITH d AS (COPY victim TO 'x.csv') SELECT * FROM d", "write"),
    ("SELECT * FROM query('SELECT 1')", "read"),
    ("WITH d AS (DELETE FROM victim RETURNING *) FROM d", "destructive"),
    ("DESCRIBE (WITH d AS (DELETE FROM victim RETURNING *) SELECT * FROM d)", "destructive"),
    ("SUMMARIZE (WITH d AS (UPDATE victim SET note = 'x' WHERE id = 1 RETURNING *) SELECT * FROM d)", "write"),
    ("WITH d AS (DELETE FROM memory.main.victim USING (SELECT 1 AS id) s RETURNING *) SELECT * FROM d",
     "destructive"),
    ("WITH d AS (INSERT OR REPLACE INTO victim VALUES (1, 'x') RETURNING *) SELECT * FROM d", "write"),
    ("INSERT INTO victim WITH d AS (DELETE FROM victim RETURNING *) SELECT * FROM d", "destructive"),
    ("EXPLAIN WITH d AS (DELETE FROM victim RETURNING *) SELECT * FROM d", "read"),  # plan only: runs nothing
])
def test_duckdb_specific_forms(sql, kind):
    found = classify_sql(sql, "duckdb")
    assert found.kind == kind, found.summary


@pytest.mark.parametrize("sql, kind", [
    ('WITH d AS (DELETE FROM U&"cte\\005Fvictim" RETURNING 1) SELECT 1', "destructive"),
    ("WITH d AS (DELETE FROM ONLY public.victim WHERE note = $$x'$$ RETURNING 1) SELECT 1", "write"),
    ("COPY (DELETE FROM victim RETURNING 1) TO STDOUT", "destructive"),
    ("COPY (WITH d AS (DELETE FROM victim RETURNING 1) SELECT 1) TO STDOUT", "destructive"),
    ("DECLARE c CURSOR FOR WITH d AS (DELETE FROM victim RETURNING 1) SELECT 1", "destructive"),
    ("PREPARE p AS WITH d AS (UPDATE victim SET note = 'x' RETURNING 1) SELECT 1", "destructive"),
    ("CREATE TABLE x AS WITH d AS (DELETE FROM victim WHERE id = 1 RETURNING 1) SELECT 1", "write"),
    ("SELECT * FROM victim WHERE id = (SELECT nextval('s'))", "write"),
])
def test_postgresql_specific_forms(sql, kind):
    found = classify_sql(sql, "postgresql")
    assert found.kind == kind, found.summary


def test_a_merge_in_a_cte_is_a_write_to_postgresql_parser():
    sql = ("WITH m AS (MERGE INTO victim v USING (SELECT 1 AS id) s ON v.id = s.id WHEN MATCHED THEN DELETE "
           "RETURNING v.id) SELECT * FROM m")
    found = classify_sql(sql, "postgresql")
    assert found.kind == "write" and "MERGE inside the SELECT" in found.summary


# ------------------------------------------------------------------------------------------ real DuckDB


def duck_db() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE victim (id INTEGER, note VARCHAR)")
    con.execute(f"INSERT INTO victim SELECT g, 'row ' || g FROM range(1, {ROWS + 1}) t(g)")
    return con


def duck_state(con: duckdb.DuckDBPyConnection) -> list:
    return con.execute("SELECT id, note FROM victim ORDER BY ALL").fetchall()


@pytest.mark.parametrize("sql, kind", HOSTILE + [(deep_consumer("{t}"), "destructive")])
def test_each_hostile_form_really_writes_in_duckdb(sql, kind):
    """Ground truth for the classifier's verdict: DuckDB runs the form and the table changes."""
    con = duck_db()
    before = duck_state(con)
    con.execute(fill(sql, "victim")).fetchall()
    assert duck_state(con) != before


def duck_tools(tmp_path, calls, cache, connector=None):
    registry = ConnectorRegistry([connector or duckdb_connector(name="duck")])
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duck"}}]}]
    turns += [{"tool_calls": [{"name": name, "arguments": arguments}]} for name, arguments in calls]
    turns += [{"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/duck", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=cache)
    registry.install(harness)
    result = harness.run_result("go")
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    return blocks[1:], registry["duck"]


@pytest.mark.parametrize("sql, kind", HOSTILE + PARSED_ONLY + [(deep_subquery("{t}"), "destructive"),
                                                                (deep_ctes("{t}"), "destructive"),
                                                                (deep_consumer("{t}"), "destructive")])
def test_duckdb_query_refuses_hidden_writes_as_writes(tmp_path, sql, kind):
    cache = SessionCache()
    frame = pd.DataFrame({"id": range(1, ROWS + 1), "note": [f"row {i}" for i in range(1, ROWS + 1)]})
    cache.put("victim", frame)
    text = fill(sql, "victim")
    blocks, connector = duck_tools(tmp_path, [("duck__query", {"sql": text}),
                                              ("duck__query", {"sql": text, "lazy": True})], cache)
    for block in blocks:
        assert block.is_error
        assert "Refused: the statement is classified " in block.content, block.content
        assert "duck__query runs read-only queries only" in block.content
        assert "DuckDB" not in block.content.split("Refused")[0]  # our message, not an engine error
    assert cache.names() == ["victim"]
    assert cache.get("victim").equals(frame)
    frame_now, _ = connector.engine.query(cache, "SELECT count(*) AS n FROM victim", None)
    assert int(frame_now["n"].iloc[0]) == ROWS


@pytest.mark.parametrize("sql, expected", LEGIT)
def test_duckdb_legitimate_cte_queries_run(tmp_path, sql, expected):
    cache = SessionCache()
    cache.put("victim", pd.DataFrame({"id": range(1, ROWS + 1), "note": [f"row {i}" for i in range(1, ROWS + 1)]}))
    blocks, _ = duck_tools(tmp_path, [("duck__query", {"sql": fill(sql, "victim"), "name": "out"})], cache)
    assert not blocks[0].is_error, blocks[0].content
    assert cache.get("out").iloc[0].to_dict() == expected


def test_a_kept_lazy_result_is_guarded_by_classification_and_by_the_read_only_transaction(tmp_path):
    """The engine's own table (a kept lazy result): the tool refuses with the classification, and the
    engine path with the classifier skipped fails in DuckDB's read-only transaction; the pull stays exact."""
    cache = SessionCache()
    cache.put("t", pd.DataFrame({"id": range(10)}))
    connector = duckdb_connector(name="duck")
    engine = connector.engine
    relation = engine.lazy(cache, "SELECT id % 2 AS k, count(*) AS n FROM t GROUP BY 1")
    cache.put("by_k", relation)
    assert relation.result in engine.result_tables()
    hidden = [f'WITH d AS (DELETE FROM "{relation.result}" RETURNING *) SELECT * FROM d',
              f'WITH u AS (UPDATE {relation.result} SET n = 0 RETURNING 1) SELECT * FROM u']
    blocks, _ = duck_tools(tmp_path, [("duck__query", {"sql": sql}) for sql in hidden], cache, connector)
    assert all(b.is_error and "classified destructive" in b.content for b in blocks), [b.content for b in blocks]
    for sql in hidden:
        with pytest.raises(ToolError, match="read-only"):
            engine.query(cache, sql)
    pulled = relation.materialize(cache, 10**6)
    assert pulled.sort_values("k").n.tolist() == [5, 5]


def test_a_crafted_checkpoint_with_a_hidden_write_is_refused_on_rebind():
    connector = duckdb_connector(name="duck")
    rebind = lazy_rebinder([connector])
    with pytest.raises(ToolError, match="classified destructive"):
        rebind("duckdb", {"connector": "duck",
                          "sql": "WITH d AS (DELETE FROM __harness_result_0 RETURNING *) SELECT * FROM d"},
               SessionCache())


# ------------------------------------------------------------------------------------------ real PostgreSQL

PG_TABLE = "cte_victim"


@pytest.fixture(scope="module")
def pg(postgres_url):  # noqa: F811
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {PG_TABLE}, victim CASCADE")
        conn.exec_driver_sql("DROP VIEW IF EXISTS v_cte")
        conn.exec_driver_sql(f"CREATE TABLE {PG_TABLE} (id int, note text)")
        conn.exec_driver_sql(f"INSERT INTO {PG_TABLE} SELECT g, 'row ' || g FROM generate_series(1, {ROWS}) g")
    yield postgres_url, engine
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {PG_TABLE}")
    engine.dispose()


def pg_state(engine) -> list:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT id, note FROM {PG_TABLE} ORDER BY id, note").fetchall()
        views = conn.exec_driver_sql("SELECT count(*) FROM pg_views WHERE viewname = 'v_cte'").scalar()
    return [tuple(r) for r in rows] + [("views", views)]


@pytest.mark.postgres
@pytest.mark.parametrize("sql, kind", HOSTILE + [(deep_consumer("{t}"), "destructive")])
def test_each_hostile_form_really_writes_in_postgresql(pg, sql, kind):
    """Ground truth: PostgreSQL runs the form and the table changes (rolled back afterwards)."""
    _, engine = pg
    before = pg_state(engine)
    with engine.connect() as conn:
        trans = conn.begin()
        result = conn.exec_driver_sql(fill(sql, PG_TABLE))
        if result.returns_rows:
            result.fetchall()
        changed = conn.exec_driver_sql(f"SELECT id, note FROM {PG_TABLE} ORDER BY id, note").fetchall()
        trans.rollback()
    assert [tuple(r) for r in changed] != before[:-1]
    assert pg_state(engine) == before


@pytest.mark.postgres
@pytest.mark.parametrize("sql, kind", HOSTILE + [(deep_consumer("{t}"), "destructive")])
def test_postgresql_read_path_refuses_each_form_without_the_classifier(pg, sql, kind):
    """The boundary: the read path's read-only transaction refuses the form (the classifier skipped)."""
    from harness_magic.core.execution.connectors.sql.connector import SQLConnection

    url, engine = pg
    before = pg_state(engine)
    db = SQLConnection(url, timeout_s=5)
    try:
        with pytest.raises(ToolError, match="read-only transaction"):
            db.query(fill(sql, PG_TABLE))
    finally:
        db.read_engine.dispose()
        db.engine.dispose()
    assert pg_state(engine) == before


def pg_tools(tmp_path, url, sql, approver):
    registry = ConnectorRegistry([sql_connector(url, name="wh", timeout_s=5)],
                                 approval=ApprovalPolicy(approver=approver))
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "wh"}}]},
             {"tool_calls": [{"name": "wh__query", "arguments": {"sql": sql}}]},
             {"tool_calls": [{"name": "wh__execute", "arguments": {"sql": sql}}]},
             {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/pg", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=SessionCache())
    registry.install(harness)
    result = harness.run_result("go")
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    connector = registry["wh"]
    connector.connection.read_engine.dispose()
    connector.connection.engine.dispose()
    return blocks[1:], harness.cache


@pytest.mark.postgres
@pytest.mark.parametrize("sql, kind", HOSTILE + PARSED_ONLY + [(deep_subquery("{t}"), "destructive"),
                                                                (deep_ctes("{t}"), "destructive"),
                                                                (deep_consumer("{t}"), "destructive")])
def test_postgresql_query_refuses_and_execute_asks_with_the_right_kind(tmp_path, pg, sql, kind):
    url, engine = pg
    text = fill(sql, PG_TABLE)
    before = pg_state(engine)
    asked = []

    def deny(request):
        asked.append(request)
        return False

    (via_query, via_execute), cache = pg_tools(tmp_path, url, text, deny)
    assert via_query.is_error and "Refused: the statement is classified " + kind in via_query.content, \
        via_query.content
    assert "use wh__execute, which asks the user for approval" in via_query.content
    assert "read-only transaction" not in via_query.content  # refused before the server was asked
    assert cache.names() == []
    if asked or "postgresql error" not in via_execute.content:  # else the server refused it inside the preview
        assert via_execute.is_error and "denied" in via_execute.content
        assert [(r.tool, r.safety) for r in asked] == [("wh__execute", kind)]
    assert via_execute.is_error and pg_state(engine) == before


@pytest.mark.postgres
@pytest.mark.parametrize("sql, expected", LEGIT)
def test_postgresql_legitimate_cte_queries_run(tmp_path, pg, sql, expected):
    url, _ = pg
    registry = ConnectorRegistry([sql_connector(url, name="wh", timeout_s=5)])
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "wh"}}]},
             {"tool_calls": [{"name": "wh__query", "arguments": {"sql": fill(sql, PG_TABLE), "name": "out"}}]},
             {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/pg", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=SessionCache())
    registry.install(harness)
    result = harness.run_result("go")
    block = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][-1]
    registry["wh"].connection.read_engine.dispose()
    assert not block.is_error, block.content
    assert {k: int(v) for k, v in harness.cache.get("out").iloc[0].to_dict().items()} == expected


# ------------------------------------------------------------------------------------------ Spark (no server)


@pytest.mark.parametrize("sql, kind", HOSTILE[:6] + PARSED_ONLY[:5])
def test_spark_query_refuses_and_execute_asks_before_spark_is_reached(tmp_path, sql, kind):
    """Refusal and a denied approval happen before any connection: the engine is never started."""
    connector = spark_connector("sc://localhost:1", name="lake")
    asked = []

    def deny(request):
        asked.append(request)
        return False

    registry = ConnectorRegistry([connector], approval=ApprovalPolicy(approver=deny))
    text = fill(sql, "victim")
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "lake"}}]},
             {"tool_calls": [{"name": "lake__query", "arguments": {"sql": text}}]},
             {"tool_calls": [{"name": "lake__execute", "arguments": {"sql": text}}]},
             {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/spark", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=SessionCache())
    registry.install(harness)
    result = harness.run_result("go")
    via_query, via_execute = [b for m in result.messages for b in m.content
                              if getattr(b, "type", "") == "tool_result"][1:]
    assert via_query.is_error and f"Refused: the statement is classified {kind}" in via_query.content
    assert "use lake__execute, which asks the user for approval" in via_query.content
    assert via_execute.is_error and "denied" in via_execute.content
    assert [r.safety for r in asked] == [kind]
    assert connector.engine._spark is None
