"""A lazy DuckDB handle and its pull run one pass over the data, told by DuckDB's own query log (issue 35 point 4).

What the engine runs is read from DuckDB's ``QueryLog`` (switched on for the
engine's database as it is created, before the engine locks its
configuration) and what it reads from the bytes its read-only file system
hands DuckDB:

* creating a lazy handle over configured Parquet runs the model's query once
  (one ``CREATE TEMPORARY TABLE ... AS`` whose answer is the exact count), with
  no ``count(*)`` and no ``SET``, and one ``EXPLAIN`` only when its text may
  group (a plan reads no rows); the pull reads the kept table:
  together they read the files' bytes once, as one plain fetch of the same SQL
  does;
* the count is exact from that one execution for queries with ``ORDER BY``,
  ``LIMIT``, ``HAVING``, ``DISTINCT``, an empty result, and text a hostile model
  shapes to confuse a wrapper (``LIMIT`` in a literal or a trailing comment);
* a cursor that nobody polls for progress tracks none (DuckDB's default, relied
  on and checked here); one whose caller reports progress turns it on and is
  polled;
* an aggregate runs whole, once, however many groups it has; a query whose
  text cannot group is planned only when its result outgrows the snapshot's
  first part (then counted within the budget).

Timing is measured in ``benchmarks/bench_engines.py`` (``hub_row``), never here.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors.duckdb import readonly_fs
from harness_magic.core.execution.connectors.duckdb.engine import ONE_PASS_MAX_ROWS, DuckDBEngine

FILES = 3
ROWS_PER_FILE = 20_000
ROWS = FILES * ROWS_PER_FILE
GROUPS = 7
GROUP_BY = "SELECT k, count(*) AS n, sum(amount) AS total FROM events GROUP BY k"


@pytest.fixture
def dataset(tmp_path):
    """Three Parquet files (several pages per column): ``id``, ``k`` (GROUPS keys), ``amount``."""
    root = tmp_path / "events"
    root.mkdir()
    for part in range(FILES):
        ids = range(part * ROWS_PER_FILE, (part + 1) * ROWS_PER_FILE)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "k": pa.array([i % GROUPS for i in ids], pa.int64()),
                                 "amount": pa.array([float(i % 1000) / 10 for i in ids], pa.float64())}),
                       root / f"part-{part}.parquet", row_group_size=ROWS_PER_FILE // 2, data_page_size=16 * 1024)
    return root


class QueryLog:
    """The statements DuckDB ran on the engine's database since the last :meth:`take`, in order."""

    def __init__(self) -> None:
        self.databases: list = []
        self._seen = 0

    def take(self) -> list[str]:
        db = self.databases[-1]  # the engine's database: made at its first query, after any probe of its settings
        rows = db.execute("SELECT message FROM duckdb_logs WHERE type = 'QueryLog' ORDER BY timestamp").fetchall()
        messages = [row[0] for row in rows[self._seen:]]
        self._seen = len(rows) + 1  # the SELECT above is logged too
        return messages


@pytest.fixture
def logged(monkeypatch):
    """Every DuckDB database made from here on logs its queries (before the engine locks its configuration)."""
    import duckdb

    log = QueryLog()
    connect = duckdb.connect

    def connect_logging(*args, **kwargs):
        db = connect(*args, **kwargs)
        db.execute("CALL enable_logging('QueryLog')")
        log.databases.append(db)
        return db

    monkeypatch.setattr(duckdb, "connect", connect_logging)
    return log


@pytest.fixture
def bytes_read(monkeypatch):
    """Bytes DuckDB read through the read-only file system (a one-item list, added to as it reads)."""
    total = [0]
    original = readonly_fs._PositionalFile.read

    def counting(self, size=-1):
        data = original(self, size)
        total[0] += len(data)
        return data

    monkeypatch.setattr(readonly_fs._PositionalFile, "read", counting)
    return total


def scans(statements: list[str]) -> list[str]:
    """The statements that read the configured files: the model's query, or a view of it (a plan reads no rows:
    :func:`test_the_handle_and_its_pull_read_the_files_once` counts the bytes)."""
    return [s for s in statements if re.search(r'\bevents\b|"__harness_query__"', s)
            and not s.startswith(("CREATE TEMPORARY VIEW", "EXPLAIN"))]


def lazy_logged(logged, sql: str, tables: dict[str, str] | None = None) -> tuple[DuckDBEngine, SessionCache, Any,
                                                                                  list[str]]:
    """(engine, cache, the lazy relation of ``sql``, the statements its creation ran), on an engine whose
    database was set up (and its setup logged) before we look."""
    engine = DuckDBEngine(tables or {})
    cache = SessionCache()
    engine.lazy(cache, "SELECT 1 AS warm")
    logged.take()
    relation = engine.lazy(cache, sql)
    return engine, cache, relation, logged.take()


def test_a_group_by_and_its_pull_run_one_execution_and_nothing_else(dataset, logged):
    engine, cache, relation, made = lazy_logged(logged, GROUP_BY, {"events": str(dataset)})
    handle = cache.put("by_k", relation)
    frame = relation.materialize(cache, 10**8, handle=handle)
    pulled = logged.take()

    assert (relation.rows, relation.count_skipped, relation.rows_estimated) == (GROUPS, False, False)
    assert len(frame) == GROUPS and int(frame["n"].sum()) == ROWS
    # an aggregate: planned once (its text groups), then computed whole by the one run
    assert scans(made) == ['CREATE TEMPORARY TABLE "__harness_snapshot__" AS SELECT * FROM "__harness_query__"'], made
    assert len([s for s in made if s.startswith("EXPLAIN") and GROUP_BY in s]) == 1, made
    for absent in ("count(*) FROM", "SET "):
        assert not [s for s in made + pulled if absent in s and s != GROUP_BY], (absent, made + pulled)
    assert not [s for s in pulled if s.startswith("EXPLAIN")], pulled
    assert pulled == [f'SELECT * FROM "{relation.result}"'], pulled  # no transaction, no SET: one read
    engine.close()


def test_the_handle_and_its_pull_read_the_files_once(dataset, bytes_read):
    engine = DuckDBEngine({"events": str(dataset)})
    cache = SessionCache()
    engine.query(cache, "SELECT 1 AS warm")
    before = bytes_read[0]
    frame, _ = engine.query(cache, GROUP_BY)
    one_pass = bytes_read[0] - before
    footers = sum(pq.ParquetFile(path).metadata.serialized_size for path in dataset.glob("*.parquet"))
    assert one_pass > 5 * footers and len(frame) == GROUPS  # the columns' pages, not only footers

    before = bytes_read[0]
    relation = engine.lazy(cache, GROUP_BY)
    made = bytes_read[0] - before
    handle = cache.put("by_k", relation)
    before = bytes_read[0]
    assert len(relation.materialize(cache, 10**8, handle=handle)) == GROUPS
    assert bytes_read[0] == before  # the pull reads the kept table, not the files
    # a second pass (a count, a sample query, a re-run) would read the pages again: twice one_pass
    assert made < 1.2 * one_pass, (made, one_pass)
    engine.close()


@pytest.mark.parametrize("sql, rows", [
    ("SELECT * FROM events ORDER BY amount DESC, id LIMIT 7", 7),
    ("SELECT id, amount FROM events WHERE k = 3 ORDER BY id", len(range(3, ROWS, GROUPS))),
    ("SELECT k, count(*) AS n FROM events GROUP BY k HAVING count(*) > 0 ORDER BY n DESC LIMIT 3", 3),
    ("SELECT DISTINCT k FROM events", GROUPS),
    ("SELECT count(*) AS n FROM events", 1),
    ("SELECT id FROM events WHERE id < 0", 0),
    ("SELECT id FROM events LIMIT 2 OFFSET 5", 2),
    # hostile shapes: a wrapper that pasted LIMIT after the model's text would be fooled by these
    ("SELECT 'x LIMIT 1' AS s, k FROM events GROUP BY k", GROUPS),
    ("SELECT k FROM events GROUP BY k -- LIMIT 1", GROUPS),
    ("SELECT k FROM events GROUP BY k /* ) LIMIT 1 */", GROUPS),
    ("FROM events SELECT k, max(id) AS top GROUP BY ALL;", GROUPS),
])
def test_the_count_is_exact_from_the_one_execution(dataset, logged, sql, rows):
    engine, cache, relation, made = lazy_logged(logged, sql, {"events": str(dataset)})
    assert (relation.rows, relation.count_skipped, relation.rows_estimated) == (rows, False, False)
    assert relation.result is not None  # computed whole by that one run: kept for pulls
    assert len(scans(made)) == 1 and len([s for s in made if s.startswith("EXPLAIN")]) <= 1, made
    handle = cache.put("h", relation)
    assert len(relation.materialize(cache, 10**8, handle=handle)) == rows
    assert len(scans(logged.take())) == 0  # the pull read the kept table
    engine.close()


def test_a_cursor_nobody_polls_tracks_no_progress_and_one_polled_does(dataset, logged):
    engine = DuckDBEngine({"events": str(dataset)})
    cache = SessionCache()
    con = engine.connect(cache, "events")
    try:  # DuckDB's default, relied on: a new cursor tracks no progress and so needs no SET
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchall()[0][0] is False
    finally:
        con.close()
    logged.take()
    engine.query(cache, GROUP_BY)
    relation = engine.lazy(cache, GROUP_BY)
    relation.materialize(cache, 10**8, handle=cache.put("h", relation))
    assert not [s for s in logged.take() if s.startswith("SET")]

    reports: list[tuple[float | None, bool]] = []
    engine.lazy(cache, GROUP_BY, progress=lambda percent, done: reports.append((percent, done)))
    frame, _ = engine.query(cache, GROUP_BY, progress=lambda percent, done: reports.append((percent, done)))
    settings = [s for s in logged.take() if s.startswith("SET")]
    assert sorted(settings) == sorted(["SET enable_progress_bar = true", "SET enable_progress_bar_print = false"] * 2)
    assert reports.count((None, True)) == 2 and len(frame) == GROUPS  # each call's poller ended and said so
    engine.close()


@pytest.mark.parametrize("sql", [
    "SET enable_progress_bar = true",
    "SET enable_progress_bar_print = true",
    "SELECT 1; SET enable_progress_bar_print = true",
    "RESET enable_progress_bar",
])
def test_the_model_cannot_switch_the_progress_settings(dataset, sql):
    """The tool's classification refuses the statement; run on the engine alone it holds for its own cursor only."""
    from harness_magic.core.execution.connectors.duckdb.connector import _check_read_only
    from harness_magic.core.execution.tools import ToolError

    with pytest.raises(ToolError):
        _check_read_only(sql, "duckdb")
    engine = DuckDBEngine({"events": str(dataset)})
    cache = SessionCache()
    try:
        engine.query(cache, sql)
    except ToolError:
        pass  # several statements: refused by the engine too
    con = engine.connect(cache, "events")
    try:
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchall()[0][0] is False
    finally:
        con.close()
    engine.close()


def test_a_query_that_cannot_group_has_its_plan_read_only_once_it_outgrows_the_first_part(logged):
    """A long non-aggregate: first part, then its plan (not an aggregate), then count(*) within the budget."""
    engine, cache, relation, made = lazy_logged(logged, f"SELECT range AS y FROM range({ONE_PASS_MAX_ROWS + 50})")
    assert (relation.rows, relation.count_skipped, relation.result) == (ONE_PASS_MAX_ROWS + 50, False, None)
    assert [s.split(" ")[0] for s in made if s.startswith(("EXPLAIN", "SELECT count(*)"))] == ["EXPLAIN", "SELECT"]
    engine.close()


def test_an_aggregate_with_more_groups_than_the_first_part_runs_once_and_is_kept(logged):
    """Many groups: planned first, computed whole by the one run (never a first part, then the whole again)."""
    groups = ONE_PASS_MAX_ROWS + 50
    sql = f"SELECT range AS g, count(*) AS n FROM range({groups}) GROUP BY g"
    engine, cache, relation, made = lazy_logged(logged, sql)
    assert (relation.rows, relation.count_skipped, relation.rows_estimated) == (groups, False, False)
    assert relation.result is not None  # kept whole for pulls
    runs = [s for s in made if s.startswith("CREATE TEMPORARY TABLE")]
    assert runs == ['CREATE TEMPORARY TABLE "__harness_snapshot__" AS SELECT * FROM "__harness_query__"'], made
    assert not [s for s in made if s.startswith("SELECT count(*)")], made
    engine.close()


@pytest.mark.parametrize("sql", [
    "SELECT 'group by' AS s, range AS y FROM range({n})",  # the words in a literal: one plan, then as any other
    "SELECT range AS y FROM range({n}) -- DISTINCT",
])
def test_text_that_only_looks_grouped_costs_one_plan_and_is_counted_as_any_other(logged, sql):
    engine, cache, relation, made = lazy_logged(logged, sql.format(n=ONE_PASS_MAX_ROWS + 50))
    assert (relation.rows, relation.count_skipped, relation.result) == (ONE_PASS_MAX_ROWS + 50, False, None)
    assert [s.split(" ")[0] for s in made if s.startswith(("EXPLAIN", "SELECT count(*)"))] == ["EXPLAIN", "SELECT"]
    assert [s for s in made if s.startswith("CREATE TEMPORARY TABLE")] == [
        f'CREATE TEMPORARY TABLE "__harness_snapshot__" AS SELECT * FROM "__harness_query__" '
        f'LIMIT {ONE_PASS_MAX_ROWS + 1}'], made
    engine.close()


def test_the_read_only_files_seek_as_files_do(dataset):
    """DuckDB seeks before every read: positions per thread, clamped at 0, and a clear error for a bad whence."""
    import io
    import threading

    path = next(dataset.glob("*.parquet"))
    files = readonly_fs.ReadOnlyFiles({"events/0.parquet": path})
    handle = files._open(files.url("events/0.parquet"))
    size = path.stat().st_size
    try:
        assert handle.seek(10) == 10 and handle.seek(5, io.SEEK_CUR) == 15 and handle.tell() == 15
        assert handle.seek(-4, io.SEEK_END) == size - 4 and handle.read() == path.read_bytes()[-4:]
        assert handle.seek(-100) == 0 and handle.read(4) == b"PAR1"
        other: list[int] = []
        thread = threading.Thread(target=lambda: other.append(handle.tell()))
        thread.start()
        thread.join()
        assert other == [0] and handle.tell() == 4  # another thread's offset is its own
        for whence in (3, -1, "end"):
            with pytest.raises(ValueError, match="whence must be 0, 1 or 2"):
                handle.seek(0, whence)
    finally:
        handle.close()
