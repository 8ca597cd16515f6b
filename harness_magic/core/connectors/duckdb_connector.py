"""The ``duckdb`` connector: SQL over cached frames and configured files, in-process.

Each query gets a fresh in-memory DuckDB connection in which

* every cached DataFrame handle the SQL names is registered as a view of a
  copy (``cache.view``), so SQL can never change what the cache holds;
* every configured file (``files={"sales": "data/sales.parquet"}``) is a
  table backed by an Arrow dataset that Python opened read-only (Parquet and
  CSV scanned lazily, JSON loaded), so DuckDB itself never holds a path;
* the connection is opened with external access off (no file system, no
  ``ATTACH``, no ``COPY ... TO``, no ``EXPORT``), extension auto-install and
  auto-load off, and its configuration locked before any model SQL runs.
  ``read_csv('/etc/passwd')`` and ``COPY t TO '<configured file>'`` fail
  inside the engine, whatever the statement looks like.

DuckDB's own parser (``extract_statements``) classifies the text: exactly one
statement per call, and only plain queries run (see :mod:`.classify`).
Results stream out as Arrow batches up to the row cap. A timer interrupts a
statement that runs past the timeout.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any, Mapping

from harness_magic.core.connectors._results import (
    DEFAULT_BATCH_ROWS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    arrow_to_frame,
    cap_rows,
    truncation_note,
)
from harness_magic.core.connectors.classify import SQLClassificationError, classify_sql
from harness_magic.core.connectors.registry import Connector, ConnectorResult, ToolContext
from harness_magic.core.tools import ToolError

__all__ = ["duckdb_connector", "DuckDBEngine"]

_READERS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv",
            ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}
"""File suffix -> how Python opens it for DuckDB (see :func:`_open_file`)."""
LOCKED_CONFIG = {"enable_external_access": False, "autoinstall_known_extensions": False,
                 "autoload_known_extensions": False, "allow_community_extensions": False}
"""Connection settings that keep DuckDB off the file system and away from extensions."""
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DuckDBEngine:
    """Runs read-only SQL over cache frames and configured files."""

    def __init__(self, files: Mapping[str, str | os.PathLike[str]] | None = None, *,
                 max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S,
                 batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        self.files: dict[str, Path] = {}
        for view, path in (files or {}).items():
            if not _IDENT.fullmatch(view):
                raise ValueError(f"duckdb file view name {view!r} must be an identifier")
            real = Path(os.path.realpath(os.fspath(path)))
            if real.suffix.lower() not in _READERS:
                raise ValueError(f"duckdb cannot read {os.fspath(path)!r}; supported: {', '.join(sorted(_READERS))}")
            if not real.is_file():
                raise ValueError(f"duckdb file {os.fspath(path)!r} does not exist")
            self.files[view] = real
        self.max_rows, self.timeout_s, self.batch_rows = max_rows, timeout_s, batch_rows

    def connect(self, cache: Any, sql: str | None) -> Any:
        """A fresh in-memory connection: configured files and the cached frames ``sql`` names, then locked."""
        import duckdb

        con = duckdb.connect(":memory:", config=dict(LOCKED_CONFIG))
        try:
            for view, path in self.files.items():
                con.register(view, _open_file(path))
            wanted = set(_IDENT.findall(sql)) if sql is not None else set(cache.names() if cache is not None else [])
            for handle in sorted(wanted - set(self.files)):
                if cache is not None and handle in cache and _is_frame(cache, handle):
                    con.register(handle, cache.view(handle))
            con.execute("SET lock_configuration = true")
        except Exception:
            con.close()
            raise
        return con

    def query(self, cache: Any, sql: str, max_rows: int | None = None) -> tuple[Any, bool]:
        import duckdb
        import pyarrow as pa

        cap = cap_rows(max_rows, self.max_rows)
        con = self.connect(cache, sql)
        timer = threading.Timer(self.timeout_s, con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            statements = duckdb.extract_statements(sql)
            if len(statements) != 1:
                raise ToolError(f"Refused: {len(statements)} statements; send exactly one per call.")
            relation = con.sql(statements[0])  # only this statement runs, whatever else the text holds
            if relation is None:
                return pa.table({}).to_pandas(), False
            reader = relation.to_arrow_reader(self.batch_rows)
            batches, rows, truncated = [], 0, False
            for batch in reader:
                if rows + len(batch) > cap:
                    batches.append(batch.slice(0, cap - rows))
                    truncated = True
                    break
                batches.append(batch)
                rows += len(batch)
            table = pa.Table.from_batches(batches, schema=reader.schema)
            return arrow_to_frame(table), truncated
        except duckdb.InterruptException as exc:
            raise ToolError(f"The statement timed out after {self.timeout_s:g} s and was interrupted.") from exc
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise ToolError(f"duckdb error: {first}") from exc
        finally:
            timer.cancel()
            con.close()


def _open_file(path: Path) -> Any:
    """An Arrow dataset/table over ``path``, opened by Python for reading only."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.dataset as ds

    kind = _READERS[path.suffix.lower()]
    if kind == "parquet":
        return ds.dataset(str(path), format="parquet")
    if kind in ("csv", "tsv"):
        delimiter = "\t" if kind == "tsv" else ","
        return ds.dataset(str(path), format=ds.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delimiter)))
    if kind == "jsonl":
        return ds.dataset(str(path), format="json")
    import json

    with open(path, "rb") as handle:
        data = json.load(handle)
    rows = data if isinstance(data, list) else [data]
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path.name}: a JSON file must hold an object or a list of objects")
    return pa.Table.from_pylist(rows)


def _is_frame(cache: Any, handle: str) -> bool:
    try:
        return str(cache.snapshot(handle).get("type", "")).lower() == "dataframe"
    except Exception:
        return False


def duckdb_connector(
    files: Mapping[str, str | os.PathLike[str]] | None = None,
    *,
    name: str = "duckdb",
    description: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Connector:
    """SQL over cached DataFrame handles and ``files`` (view name -> path), in-process."""
    engine = DuckDBEngine(files, max_rows=max_rows, timeout_s=timeout_s)
    connector = Connector(
        name, description or "In-process DuckDB SQL over cached DataFrame handles (by handle name) and "
                             "configured files; results come back as handles.")
    connector.engine = engine  # type: ignore[attr-defined]

    @connector.tool()
    def list_tables(context: ToolContext) -> Any:
        """List what SQL can query: cached DataFrame handles and configured file views."""
        out = [{"name": view, "kind": "file", "path": path.name} for view, path in engine.files.items()]
        for handle in context.cache.names():
            if handle not in engine.files and _is_frame(context.cache, handle):
                out.append({"name": handle, "kind": "cached frame", "rows": context.cache.snapshot(handle).get("shape", [None])[0]})
        return out if out else "Nothing to query yet: no cached frames and no configured files."

    @connector.tool()
    def describe(table: str, context: ToolContext) -> Any:
        """Columns and DuckDB types of a cached frame or file view.

        Args:
            table: A name from list_tables.
        """
        if not _IDENT.fullmatch(table or ""):
            raise ToolError(f"{table!r} is not a table name")
        con = engine.connect(context.cache, table)
        try:
            rows = con.execute(f'DESCRIBE "{table}"').fetchall()
        except Exception as exc:
            raise ToolError(f"No table {table!r}; use {connector.name}__list_tables") from exc
        finally:
            con.close()
        return {"table": table, "columns": [{"name": r[0], "type": r[1]} for r in rows]}

    @connector.tool(result_name=f"{name}_result")
    def query(sql: str, context: ToolContext, name: str | None = None, max_rows: int | None = None) -> Any:
        """Run one read-only DuckDB SQL statement; cached frames are tables named by their handle.

        Args:
            sql: One SELECT/WITH/... statement, e.g. SELECT region, sum(x) FROM sales GROUP BY 1.
            name: Preferred handle name for the result.
            max_rows: Fetch at most this many rows (cannot exceed the connector's cap).
        """
        try:
            classification = classify_sql(sql, "duckdb")
        except SQLClassificationError as exc:
            raise ToolError(f"Cannot run this SQL: {exc}.") from None
        if len(classification.statements) > 1:
            raise ToolError(f"Refused: {len(classification.statements)} statements; send one statement per call "
                            f"({classification.summary}).")
        if not classification.is_read:
            raise ToolError(f"Refused: the statement is classified {classification.summary}; "
                            f"{connector.name}__query runs read-only statements. Save results as handles instead.")
        frame, truncated = engine.query(context.cache, sql, max_rows)
        cap = cap_rows(max_rows, engine.max_rows)
        return ConnectorResult(frame, truncation_note(len(frame), cap, truncated), name=name)

    return connector
