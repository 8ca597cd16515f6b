"""Connector read paths: what the engine-enforced safety costs.

Run::

    .venv/bin/python benchmarks/bench_connectors.py             # 1e6 rows
    .venv/bin/python benchmarks/bench_connectors.py --rows 2e5  # quicker

Tables printed (markdown):

1. PostgreSQL (a throwaway server, as the tests start it): fetching N rows x 3
   columns through :meth:`SQLConnection.query` (one extended-protocol statement
   on a read-only connection, streamed in chunks, ``DISCARD ALL`` on checkin)
   against the same driver without any of it — a plain psycopg ``fetchall`` on
   an open connection, then the same DataFrame conversion — as a ratio
   (baseline time / ours; 1.0 means the safety is free). The bare ``fetchall``
   is shown too: the row-to-DataFrame conversion dominates both.
   A one-row query measures the fixed cost per call (checkout, ``DISCARD ALL``).
2. Classification by the engines' parsers (pglast, DuckDB, sqlglot): µs per statement.
3. DuckDB: an aggregate and a full scan over an N-row Parquet file registered as
   an Arrow dataset (DuckDB has no file access) against DuckDB reading the file
   itself with ``read_parquet`` (the old, unlocked way).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

REPEATS = 3
"""Timed runs per measurement; the best is reported (least disturbed by the other engineers' jobs)."""
SMALL_CALLS = 200
"""One-row queries timed for the fixed per-call cost."""


def best(fn, repeats=REPEATS):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_postgres(rows: int) -> None:
    import psycopg
    import sqlalchemy as sa

    from harness_magic.core.execution.connectors._results import rows_to_frame
    from harness_magic.core.execution.connectors.sql.connector import SQLConnection
    from postgres import PostgresServer

    server = PostgresServer().start()
    try:
        engine = sa.create_engine(server.url)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE t AS SELECT g AS id, g %% 97 AS k, md5(g::text) AS s "
                                 f"FROM generate_series(1, {rows}) g")
        engine.dispose()
        db = SQLConnection(server.url, max_rows=rows)
        raw = psycopg.connect(server.url.replace("postgresql+psycopg://", "postgresql://"))
        sql = "SELECT id, k, s FROM t"

        def ours():
            frame, truncated = db.query(sql)
            assert len(frame) == rows and not truncated

        def fetch_only():
            with raw.cursor() as cur:
                cur.execute(sql)
                fetched = cur.fetchall()
            raw.rollback()
            return fetched

        def floor():
            frame = rows_to_frame(["id", "k", "s"], [fetch_only()])
            assert len(frame) == rows

        t_ours, t_floor, t_fetch = best(ours), best(floor), best(fetch_only)
        small = []
        for _ in range(SMALL_CALLS):
            start = time.perf_counter()
            db.query("SELECT 1 AS one")
            small.append(time.perf_counter() - start)
        raw_small = []
        for _ in range(SMALL_CALLS):
            start = time.perf_counter()
            raw.execute("SELECT 1").fetchall()
            raw_small.append(time.perf_counter() - start)
        print(f"\n### PostgreSQL read path ({rows:,} rows x 3 columns)\n")
        print("| measurement | ours | psycopg floor | ratio (floor / ours) |")
        print("| --- | --- | --- | --- |")
        print(f"| all rows into a DataFrame | {t_ours:.2f} s ({rows / t_ours:,.0f} rows/s) | {t_floor:.2f} s | "
              f"{t_floor / t_ours:.2f} |")
        print(f"| (bare fetchall, no DataFrame) | | {t_fetch:.2f} s | |")
        p50, raw_p50 = statistics.median(small), statistics.median(raw_small)
        print(f"| one-row query, p50 (checkout + DISCARD ALL) | {p50 * 1e3:.2f} ms | {raw_p50 * 1e3:.2f} ms | "
              f"{raw_p50 / p50:.2f} |")
        raw.close()
        db.read_engine.dispose()
        db.engine.dispose()
    finally:
        server.stop()


def bench_classify() -> None:
    """Classification per statement against its floor, the engine's parser alone (no tree walk). DuckDB's
    classification parses twice: ``extract_statements`` splits, ``json_serialize_sql`` gives the tree walked
    for data-modifying CTEs and side-effect functions."""
    import duckdb
    import sqlglot
    from pglast.parser import parse_sql_json

    from harness_magic.core.execution.connectors.classify import classify_sql

    sql = ("WITH recent AS (SELECT customer_id, sum(amount) AS total FROM orders WHERE ts > now() - interval '7 days' "
           "GROUP BY 1) SELECT c.region, count(*), avg(r.total) FROM recent r JOIN customers c USING (customer_id) "
           "GROUP BY 1 ORDER BY 2 DESC")
    floors = {"postgresql": lambda: parse_sql_json(sql), "duckdb": lambda: duckdb.extract_statements(sql),
              "sqlite": lambda: sqlglot.parse(sql, read="sqlite"), "spark": lambda: sqlglot.parse(sql, read="spark")}
    print("\n### Classification by the engine's parser (whole tree walked)\n")
    print("| parser | µs per statement | parser alone (µs) | ratio |")
    print("| --- | --- | --- | --- |")
    for dialect, floor in floors.items():
        classify_sql(sql, dialect)
        n = 300
        seconds = best(lambda: [classify_sql(sql, dialect) for _ in range(n)]) / n
        parse = best(lambda: [floor() for _ in range(n)]) / n
        print(f"| {dialect} | {seconds * 1e6:.0f} | {parse * 1e6:.0f} | {seconds / parse:.1f}x |")


def bench_duckdb(rows: int) -> None:
    import duckdb
    import numpy as np
    import pandas as pd

    from harness_magic.core.cache import SessionCache
    from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sales.parquet"
        rng = np.random.default_rng(0)
        pd.DataFrame({"id": np.arange(rows), "region": rng.integers(0, 50, rows),
                      "amount": rng.random(rows)}).to_parquet(path)
        engine = DuckDBEngine({"sales": path}, max_rows=rows)
        cache = SessionCache()
        print(f"\n### DuckDB over a {rows:,}-row Parquet file\n")
        print("| query | ours (Arrow dataset, no file access) | read_parquet (unlocked) | ratio |")
        print("| --- | --- | --- | --- |")
        for label, sql in (("aggregate", "SELECT region, sum(amount) FROM {t} GROUP BY 1"),
                           ("full scan", "SELECT * FROM {t}")):
            ours = best(lambda: engine.query(cache, sql.format(t="sales")))

            def unlocked():
                con = duckdb.connect()
                con.sql(sql.format(t=f"read_parquet('{path}')")).arrow()
                con.close()

            floor = best(unlocked)
            print(f"| {label} | {ours * 1e3:.0f} ms | {floor * 1e3:.0f} ms | {floor / ours:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    args = parser.parse_args()
    rows = int(args.rows)
    bench_classify()
    bench_duckdb(rows)
    bench_postgres(rows)


if __name__ == "__main__":
    main()
