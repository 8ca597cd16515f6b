"""The fast path of a lazy DuckDB handle (issue 35 point 4), on the real engine and real Parquet files.

* Every query's cursor reads configured Parquet through the read-only file
  system page by page (:data:`~.duckdb.engine.READ_SETTINGS`, set GLOBAL on
  the engine's database, so a new cursor has it too), and the model cannot
  switch it back: the configuration is locked and only plain queries run.
* A lazy handle's snapshot takes its exact count from its one execution
  (DuckDB's answer to ``CREATE TABLE AS``): the count matches the rows the
  pull returns, for empty, small and aggregate results, and the query runs
  once from creation to pull (a side-effect UDF counts the rows DuckDB
  computed).

Timing is measured in ``benchmarks/bench_engines.py`` (``hub_row``), never here.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_duckdb_lazy_once import add_counter  # the side-effect counter both files use

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors.duckdb.engine import READ_SETTINGS, DuckDBEngine
from harness_magic.core.execution.tools import ToolError

ROWS = 20_000
"""Rows of the Parquet file: small, but several data pages per column."""


@pytest.fixture
def parquet(tmp_path):
    path = tmp_path / "events.parquet"
    table = pa.table({"id": pa.array(range(ROWS), pa.int64()),
                      "k": pa.array([i % 7 for i in range(ROWS)], pa.int64()),
                      "amount": pa.array([float(i % 1000) / 10 for i in range(ROWS)], pa.float64())})
    pq.write_table(table, path, row_group_size=ROWS // 2, data_page_size=16 * 1024)
    return path


@pytest.fixture
def engine(parquet):
    engine = DuckDBEngine({"events": parquet})
    yield engine
    engine.close()


def setting(engine: DuckDBEngine, cache: SessionCache, name: str):
    con = engine.connect(cache, "events")
    try:
        return con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0]
    finally:
        con.close()


def test_every_query_cursor_reads_parquet_page_by_page(engine):
    cache = SessionCache()
    assert READ_SETTINGS == {"disable_parquet_prefetching": "true"}
    for _ in range(2):  # each query gets a fresh cursor: the setting is the database's, not one session's
        assert setting(engine, cache, "disable_parquet_prefetching") is True
    frame, truncated = engine.query(cache, "SELECT k, sum(amount) AS total, count(*) AS n FROM events GROUP BY k")
    assert not truncated and int(frame["n"].sum()) == ROWS and len(frame) == 7


def test_reads_through_the_read_only_file_system_stay_below_a_column_chunk(engine, parquet):
    """Without prefetching, DuckDB asks the read-only file system for pages, not a whole column chunk at once."""
    from harness_magic.core.execution.connectors.duckdb import readonly_fs

    sizes: list[int] = []
    original = readonly_fs._PositionalFile.read

    def counting(self, size=-1):
        data = original(self, size)
        sizes.append(len(data))
        return data

    chunk = pq.ParquetFile(parquet).metadata.row_group(0).column(2).total_compressed_size
    readonly_fs._PositionalFile.read = counting
    try:
        frame, _ = engine.query(SessionCache(), "SELECT sum(amount) AS total FROM events")
    finally:
        readonly_fs._PositionalFile.read = original
    assert frame["total"][0] == pytest.approx(sum(float(i % 1000) / 10 for i in range(ROWS)))
    assert sizes and max(sizes) < chunk, (max(sizes), chunk)


@pytest.mark.parametrize("sql", [
    "SET GLOBAL disable_parquet_prefetching = false",
    "SET disable_parquet_prefetching = false",
    "RESET disable_parquet_prefetching",
    "SELECT 1; SET GLOBAL disable_parquet_prefetching = false",
    "PRAGMA disable_parquet_prefetching",
])
def test_the_model_cannot_change_how_the_engine_reads(engine, sql):
    cache = SessionCache()
    with pytest.raises(ToolError):
        engine.query(cache, sql)
    with pytest.raises(ToolError):
        engine.lazy(cache, sql)
    assert setting(engine, cache, "disable_parquet_prefetching") is True


def test_a_cursor_cannot_change_the_read_settings_either(engine):
    """Defence in depth: the database's configuration is locked before any query runs."""
    import duckdb

    con = engine.connect(SessionCache(), "events")
    try:
        with pytest.raises(duckdb.Error):
            con.execute("SET GLOBAL disable_parquet_prefetching = false")
    finally:
        con.close()
    assert setting(engine, SessionCache(), "disable_parquet_prefetching") is True


@pytest.mark.parametrize("sql, rows", [
    ("SELECT k, sum(tick(id)) AS s, count(*) AS n FROM events GROUP BY k", 7),
    ("SELECT tick(id) AS id, amount FROM events WHERE k = 3", len(range(3, ROWS, 7))),
    ("SELECT tick(id) AS id FROM events WHERE id < 0", 0),
    ("SELECT tick(id) AS id FROM events LIMIT 3", 3),
    ("SELECT tick(id) AS id FROM events", ROWS),
])
def test_the_snapshot_count_is_its_one_execution_and_the_pull_returns_exactly_those_rows(engine, sql, rows):
    seen = add_counter(engine)
    cache = SessionCache()
    relation = engine.lazy(cache, sql)
    computed = seen[0]
    assert (relation.rows, relation.rows_estimated, relation.count_skipped) == (rows, False, False)
    assert len(relation.columns) >= 1
    handle = cache.put("h", relation)
    frame = relation.materialize(cache, 64 * 1024**2, handle=handle)
    assert isinstance(frame, pd.DataFrame) and len(frame) == rows
    assert seen[0] == computed, "the pull ran the query again instead of reading the kept result"
    assert relation.result is not None  # kept: every case here ends within the snapshot's one read


def test_the_head_shown_is_the_first_rows_pulled(engine):
    cache = SessionCache()
    relation = engine.lazy(cache, "SELECT id, amount FROM events WHERE k = 5 ORDER BY id")
    handle = cache.put("h", relation)
    snapshot = cache.snapshot(handle)
    frame = relation.materialize(cache, 64 * 1024**2, handle=handle)
    assert snapshot["shape"][0] == len(frame) == len(range(5, ROWS, 7))
    head = relation._info["head"]
    pd.testing.assert_frame_equal(head.reset_index(drop=True), frame.head(len(head)).reset_index(drop=True))
