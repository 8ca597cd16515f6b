"""The ``duckdb`` connector: SQL over cached frames and configured files, in-process.

Configuration (a built-in type of ``AgentMagics.connectors``)::

    {"type": "duckdb", "files": {"sales": "data/sales.parquet", "logs": "data/logs/*.csv"}}

Tools: ``list_tables`` (cached frames, lazy handles, file views), ``describe``
(columns and DuckDB types) and ``query`` (one read-only statement; a frame, or
a lazy handle kept in DuckDB with ``lazy=true``). Every query, the model's and a
checkpoint's re-binding (:func:`lazy_rebinder`), passes the same classification
first (exactly one statement, read-only: :mod:`.classify`). What the engine
then guarantees whatever the statement looks like (a locked database without
external access, read-only files, a read-only transaction, the timeout) is
:mod:`.engine`'s contract; the files it reads are resolved by
:mod:`.sources`.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from harness_magic.core.execution.connectors._results import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    cap_rows,
    lazy_handle_note,
    truncation_note,
)
from harness_magic.core.execution.connectors.classify import require_one_read
from harness_magic.core.execution.connectors.duckdb.engine import IDENTIFIER, DuckDBEngine
from harness_magic.core.execution.connectors.estimates import Estimate, duckdb_plan_estimate, explain_target, gate_read
from harness_magic.core.execution.connectors.governed import add_duckdb_execute, govern
from harness_magic.core.execution.connectors.lazy import (
    COUNT_BUDGET_S,
    LazyRelation,
    cache_location,
    definition_rebinder,
    is_cached_frame,
)
from harness_magic.core.execution.connectors.progress import progress_reporter
from harness_magic.core.execution.connectors.registry import Connector, ConnectorResult, ToolContext
from harness_magic.core.execution.connectors.sameness import records_configuration
from harness_magic.core.execution.tools import ToolError

__all__ = [
    "duckdb_connector",
    "lazy_rebinder",
]

def _check_read_only(sql: str, connector_name: str) -> None:
    """The classification every DuckDB query passes before it runs (the model's, and a checkpoint's re-binding):
    exactly one statement, read-only; ToolError otherwise."""
    require_one_read(sql, "duckdb", f"{connector_name}__query", "save results as handles instead")


def lazy_rebinder(connectors: Any) -> Callable[[str, dict[str, str], Any], LazyRelation]:
    """``rebind`` for :meth:`SessionCache.load`: lazy DuckDB handles re-created on the configured connectors.

    ``connectors`` is a ConnectorRegistry (``session.connectors.registry``) or
    an iterable of connectors. A saved definition names its connector and
    query; the query goes through :func:`_check_read_only` (the same
    classification as the model's ``duckdb__query``) and :meth:`DuckDBEngine.lazy`
    (DuckDB's parser: one SELECT; the locked, file-less connection), so a
    crafted checkpoint can run nothing the model could not. Refusals raise
    ToolError/LookupError naming the reason; the cache records them.
    """
    return definition_rebinder(connectors, LazyRelation.__harness_engine__, DuckDBEngine, _check_read_only)


def _estimate(engine: DuckDBEngine, context: ToolContext, sql: str) -> Estimate:
    """DuckDB's own estimate of ``sql`` from its plan (nothing runs); a plain EXPLAIN reads no rows."""
    target, note = explain_target(sql)
    if target is None:
        return Estimate("duckdb", None, note=note)
    return duckdb_plan_estimate(engine.plan(context.cache, target))


@records_configuration
def duckdb_connector(
    files: Mapping[str, str | os.PathLike[str]] | None = None,
    *,
    name: str = "duckdb",
    description: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_limit: str | None = None,
    threads: int | None = None,
    database: str | os.PathLike[str] | None = None,
    allow_writes: bool | None = None,
    environment: str = "dev",
) -> Connector:
    """SQL over cached handles and ``files`` (view name -> file, directory or glob), in-process.

    ``memory_limit`` (e.g. ``"2GB"``) bounds DuckDB's memory; larger work spills
    to a private temporary directory (mode 0700) removed with the engine.

    ``database`` (a DuckDB file) adds ``execute``: one write to that file,
    previewed in a transaction the user commits or rolls back
    (:mod:`.governed`); ``allow_writes=False`` leaves it out, ``True`` is what
    ``environment="prod"`` needs. The read tools do not see that file.
    """
    engine = DuckDBEngine(files, max_rows=max_rows, timeout_s=timeout_s, memory_limit=memory_limit,
                          threads=threads)
    connector = Connector(
        name, description or "In-process DuckDB SQL over cached DataFrame handles (by handle name) and "
                             "configured files; results come back as handles.")
    connector.engine = engine  # type: ignore[attr-defined]  # a DuckDB connector's own attribute
    connector.dialect = "duckdb"
    connector.serves_pseudonyms = frozenset({f"{connector.name}__query"})  # files: views serving pseudonyms
    engine.connector_name = connector.name
    govern(connector, environment, allow_writes)

    @connector.tool()
    def list_tables(context: ToolContext) -> Any:
        """List what SQL can query: cached DataFrame handles and configured file views."""
        out = [{"name": view, "kind": "file", "path": path.name,
                **({"files": len(engine.sources[view][1])} if len(engine.sources[view][1]) > 1 else {})}
               for view, path in engine.files.items()]
        for handle in context.cache.names():
            if handle in engine.files:
                continue
            if cache_location(context.cache, handle) == LazyRelation.__harness_engine__:
                snap = context.cache.snapshot(handle)
                out.append({"name": handle, "kind": "lazy handle", "rows": snap.get("shape", [None])[0],
                            **{k: snap[k] for k in ("rows_estimated", "count_skipped", "rows_at_least") if k in snap}})
            elif is_cached_frame(context.cache, handle):
                out.append({"name": handle, "kind": "cached frame",
                            "rows": context.cache.snapshot(handle).get("shape", [None])[0]})
        return out if out else "Nothing to query yet: no cached frames and no configured files."

    @connector.tool()
    def describe(table: str, context: ToolContext) -> Any:
        """Columns and DuckDB types of a cached frame or file view.

        Args:
            table: A name from list_tables.
        """
        if not IDENTIFIER.fullmatch(table or ""):
            raise ToolError(f"{table!r} is not a table name")
        con = engine.connect(context.cache, table)
        try:
            rows = con.execute(f'DESCRIBE "{table}"').fetchall()
        except Exception as exc:  # broad: duckdb's catalog errors have no one type; a missing table is the tool's error
            raise ToolError(f"No table {table!r}; use {connector.name}__list_tables") from exc
        finally:
            con.close()
        return {"table": table, "columns": [{"name": r[0], "type": r[1]} for r in rows]}

    @connector.tool(result_name=f"{name}_result")
    def query(sql: str, context: ToolContext, name: str | None = None, max_rows: int | None = None,
              lazy: bool = False) -> Any:
        """Run one read-only DuckDB SQL statement; cached frames and lazy handles are tables named by their handle.

        Args:
            sql: One SELECT/WITH/... statement, e.g. SELECT region, sum(x) FROM sales GROUP BY 1.
            name: Preferred handle name for the result.
            max_rows: Fetch at most this many rows (cannot exceed the connector's cap).
            lazy: Keep the result in DuckDB as a lazy handle (no rows fetched; later queries can name it;
                python code that names it brings its rows in, within a size cap). Use for large intermediates.
        """
        _check_read_only(sql, connector.name)
        if lazy and max_rows is not None:
            raise ToolError("max_rows applies to fetched results; a lazy handle fetches nothing. Add LIMIT "
                            "to the SQL instead, or leave lazy unset.")
        estimate = gate_read(context, lambda: _estimate(engine, context, sql), "duckdb")  # before any row is read
        progress = progress_reporter(context, connector.name)
        if lazy:
            relation = engine.lazy(context.cache, sql, progress)
            note = lazy_handle_note(relation, "DuckDB", connector.name, f"at least {relation.rows_at_least or 0:,}; "
                                    f"counting them took over {COUNT_BUDGET_S:g} s, so the count was skipped")
            return ConnectorResult(relation, " ".join(filter(None, [estimate, note])), name=name)
        frame, truncated = engine.query(context.cache, sql, max_rows, progress)
        cap = cap_rows(max_rows, engine.max_rows)
        return ConnectorResult(frame, " ".join(filter(None, [estimate, truncation_note(len(frame), cap, truncated)])),
                               name=name)

    if database is not None and allow_writes is not False:
        add_duckdb_execute(connector, os.path.abspath(os.fspath(database)), timeout_s)
    return connector
