"""The ``sql`` connector: any SQLAlchemy URL, read-only unless a write is approved.

Tools (``<name>__...``):

``list_tables(schema=None)``
    tables and views with their kind and a row estimate (PostgreSQL:
    ``pg_class.reltuples``, no scan).
``describe_table(table, schema=None)``
    columns (type, nullable, default), primary key, foreign keys, row estimate.
``query(sql, name=None, max_rows=None)``
    one statement classified ``read`` (see :mod:`.classify`); rows are streamed
    in batches into a DataFrame handle, capped at ``max_rows`` (the note says
    when the cap bit). On PostgreSQL it also runs in a ``READ ONLY``
    transaction, so side-effecting functions fail in the engine too.
``execute(sql)``
    one data-changing statement; safety ``write`` (``destructive`` for DROP,
    TRUNCATE, DELETE without WHERE, ...), so it passes the approval policy
    before it runs. Omitted with ``allow_writes=False``.

Every statement runs under a timeout: PostgreSQL ``SET LOCAL
statement_timeout``; other drivers get a timer that cancels the statement
through the DB-API connection's ``cancel()``/``interrupt()`` when it has one.
The engine does the work; only the result crosses into the notebook.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Iterator

from harness_magic.core.connectors._results import (
    DEFAULT_BATCH_ROWS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    cap_rows,
    rows_to_frame,
    truncation_note,
)
from harness_magic.core.connectors.classify import SQLClassificationError, classify_sql
from harness_magic.core.connectors.registry import Connector, ConnectorResult
from harness_magic.core.tools import ToolError

__all__ = ["sql_connector", "SQLConnection"]

_CURSOR_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
"""Statements PostgreSQL can run through a server-side cursor (DECLARE ... CURSOR FOR)."""


def _import_sqlalchemy() -> Any:
    try:
        import sqlalchemy
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError("the sql connector needs SQLAlchemy: pip install sqlalchemy") from exc
    return sqlalchemy


class SQLConnection:
    """The engine-facing half of the connector (usable without a model)."""

    def __init__(
        self,
        url_or_engine: Any,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> None:
        sa = _import_sqlalchemy()
        if max_rows < 1 or batch_rows < 1 or timeout_s <= 0:
            raise ValueError(f"max_rows, batch_rows and timeout_s must be positive "
                             f"(got {max_rows!r}, {batch_rows!r}, {timeout_s!r})")
        if isinstance(url_or_engine, (str, sa.engine.URL)):
            try:
                self.engine = sa.create_engine(url_or_engine)
            except Exception as exc:
                raise ValueError(f"cannot create an engine for {_redact(url_or_engine)}: {exc}") from exc
        else:
            self.engine = url_or_engine
        self.max_rows = max_rows
        self.timeout_s = timeout_s
        self.batch_rows = batch_rows

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def __repr__(self) -> str:
        return f"SQLConnection({_redact(self.engine.url)})"

    # -- execution ------------------------------------------------------------------------------

    def _begin(self, conn: Any, *, read_only: bool) -> "_Timer | None":
        """Arm the timeout (and read-only mode) on a connection inside a transaction."""
        if self.dialect == "postgresql":
            if read_only:
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(self.timeout_s * 1000)}")
            return None
        return _Timer(conn.connection.dbapi_connection, self.timeout_s)

    def _map_error(self, exc: Exception, sql: str) -> ToolError:
        orig = getattr(exc, "orig", exc)
        code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        if code == "57014" or "interrupt" in text.lower() or "cancel" in text.lower():
            return ToolError(f"The statement timed out after {self.timeout_s:g} s and was cancelled. "
                             "Filter or aggregate more in SQL, or query a smaller range.")
        if code == "25006":
            return ToolError(f"Refused by the database: {text} (queries run in a read-only transaction).")
        return ToolError(f"{self.dialect} error: {text}")

    def query(self, sql: str, max_rows: int | None = None) -> tuple[Any, bool]:
        """(DataFrame of at most ``max_rows`` rows, truncated?) for one read statement.

        The statement goes to the DB-API cursor as is (no parameters, so ``%``
        and ``:name`` are never taken for placeholders). Rows are fetched in
        batches; PostgreSQL uses a server-side cursor so only the capped rows
        ever leave the server.
        """
        cap = cap_rows(max_rows, self.max_rows)
        sa = _import_sqlalchemy()
        try:
            with self.engine.connect() as conn:
                with conn.begin():
                    timer = self._begin(conn, read_only=True)
                    dbapi = conn.connection.dbapi_connection
                    keyword = classify_sql(sql).statements[0].keyword
                    server_side = self.dialect == "postgresql" and keyword in _CURSOR_KEYWORDS
                    cursor = dbapi.cursor(name=f"harness_{uuid.uuid4().hex[:12]}") if server_side else dbapi.cursor()
                    try:
                        cursor.execute(sql)
                        if cursor.description is None:
                            return rows_to_frame([], []), False
                        columns = [d[0] for d in cursor.description]
                        state = {"truncated": False}
                        frame = rows_to_frame(columns, self._batches(cursor, cap, state))
                    finally:
                        if timer is not None:
                            timer.cancel()
                        cursor.close()
                    return frame, state["truncated"]
        except (sa.exc.DBAPIError, *self._dbapi_errors()) as exc:
            raise self._map_error(exc, sql) from exc
        except sa.exc.SQLAlchemyError as exc:
            raise ToolError(f"{self.dialect} error: {exc}") from exc

    def _dbapi_errors(self) -> tuple[type[BaseException], ...]:
        error = getattr(self.engine.dialect.dbapi, "Error", None)
        return (error,) if isinstance(error, type) else ()

    def _batches(self, cursor: Any, cap: int, state: dict[str, bool]) -> Iterator[list[Any]]:
        taken = 0
        size = min(self.batch_rows, cap)
        while taken < cap:
            rows = cursor.fetchmany(min(size, cap - taken))
            if not rows:
                return
            taken += len(rows)
            yield rows
        state["truncated"] = bool(cursor.fetchmany(1))

    def execute(self, sql: str) -> int:
        """Run one statement in its own transaction; returns the affected row count (-1 if unknown)."""
        sa = _import_sqlalchemy()
        try:
            with self.engine.connect() as conn:
                with conn.begin():
                    timer = self._begin(conn, read_only=False)
                    cursor = conn.connection.dbapi_connection.cursor()
                    try:
                        cursor.execute(sql)
                        count = cursor.rowcount if cursor.rowcount is not None else -1
                    finally:
                        if timer is not None:
                            timer.cancel()
                        cursor.close()
                return count
        except (sa.exc.DBAPIError, *self._dbapi_errors()) as exc:
            raise self._map_error(exc, sql) from exc
        except sa.exc.SQLAlchemyError as exc:
            raise ToolError(f"{self.dialect} error: {exc}") from exc

    # -- schema -------------------------------------------------------------------------------------

    def list_tables(self, schema: str | None = None) -> list[dict[str, Any]]:
        sa = _import_sqlalchemy()
        if self.dialect == "postgresql":
            sql = sa.text(
                "SELECT n.nspname AS schema, c.relname AS name, "
                "CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'v' THEN 'view' "
                "WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table' END AS kind, "
                "c.reltuples::bigint AS row_estimate "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r','p','v','m','f') "
                "AND n.nspname NOT IN ('pg_catalog','information_schema') AND n.nspname NOT LIKE 'pg_toast%' "
                "AND (CAST(:schema AS text) IS NULL OR n.nspname = :schema) "
                "ORDER BY 1, 2"
            )
            with self.engine.connect() as conn:
                rows = conn.execute(sql, {"schema": schema}).mappings().all()
            return [{**r, "row_estimate": _estimate(r["row_estimate"], r["kind"])} for r in rows]
        inspector = sa.inspect(self.engine)
        schemas = [schema] if schema else [None]
        out = []
        for sch in schemas:
            for name in inspector.get_table_names(schema=sch):
                out.append({"schema": sch, "name": name, "kind": "table", "row_estimate": None})
            for name in inspector.get_view_names(schema=sch):
                out.append({"schema": sch, "name": name, "kind": "view", "row_estimate": None})
        return out

    def row_estimate(self, table: str, schema: str | None) -> int | None:
        if self.dialect != "postgresql":
            return None
        sa = _import_sqlalchemy()
        sql = sa.text(
            "SELECT c.reltuples::bigint, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = :table AND n.nspname = COALESCE(CAST(:schema AS text), current_schema())"
        )
        with self.engine.connect() as conn:
            row = conn.execute(sql, {"table": table, "schema": schema}).first()
        return _estimate(row[0], "table") if row else None

    def describe_table(self, table: str, schema: str | None = None) -> dict[str, Any]:
        sa = _import_sqlalchemy()
        inspector = sa.inspect(self.engine)
        if not inspector.has_table(table, schema=schema) and table not in inspector.get_view_names(schema=schema):
            known = [t["name"] for t in self.list_tables(schema)]
            raise ToolError(f"No table {table!r}{f' in schema {schema!r}' if schema else ''}. "
                            f"Tables: {', '.join(known[:50]) or '(none)'}.")
        columns = [
            {"name": c["name"], "type": str(c["type"]), "nullable": bool(c.get("nullable", True)),
             **({"default": str(c["default"])} if c.get("default") is not None else {})}
            for c in inspector.get_columns(table, schema=schema)
        ]
        try:
            primary_key = inspector.get_pk_constraint(table, schema=schema).get("constrained_columns") or []
            foreign_keys = [
                {"columns": fk["constrained_columns"], "references":
                 f"{fk.get('referred_schema') + '.' if fk.get('referred_schema') else ''}{fk['referred_table']}"
                 f"({', '.join(fk['referred_columns'])})"}
                for fk in inspector.get_foreign_keys(table, schema=schema)
            ]
        except (NotImplementedError, sa.exc.NoSuchTableError):
            primary_key, foreign_keys = [], []
        return {
            "table": table,
            "schema": schema,
            "row_estimate": self.row_estimate(table, schema),
            "primary_key": primary_key,
            "foreign_keys": foreign_keys,
            "columns": columns,
        }


def _estimate(value: Any, kind: str | None) -> int | None:
    """reltuples is -1 for never-analysed tables and meaningless for views."""
    if value is None or kind == "view" or int(value) < 0:
        return None
    return int(value)


def _redact(url: Any) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<url>"


class _Timer:
    """Cancels the running statement through the DB-API connection after ``timeout_s``."""

    def __init__(self, dbapi_connection: Any, timeout_s: float) -> None:
        cancel = getattr(dbapi_connection, "cancel", None) or getattr(dbapi_connection, "interrupt", None)
        self._timer = threading.Timer(timeout_s, cancel) if cancel else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _classify(sql: str) -> Any:
    try:
        return classify_sql(sql)
    except SQLClassificationError as exc:
        raise ToolError(f"Cannot run this SQL: {exc}.") from None


def sql_connector(
    url_or_engine: Any,
    *,
    name: str = "sql",
    description: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    allow_writes: bool = True,
) -> Connector:
    """A connector over a SQLAlchemy URL or Engine (see the module docstring)."""
    db = SQLConnection(url_or_engine, max_rows=max_rows, timeout_s=timeout_s, batch_rows=batch_rows)
    connector = Connector(
        name,
        description or f"SQL database ({db.dialect}): list and describe tables, run read-only queries "
                       f"whose results come back as handles.",
    )
    connector.connection = db  # type: ignore[attr-defined]

    @connector.tool()
    def list_tables(schema: str | None = None) -> Any:
        """List tables and views with their kind and estimated row count.

        Args:
            schema: Only this schema (all user schemas when omitted).
        """
        return db.list_tables(schema)

    @connector.tool()
    def describe_table(table: str, schema: str | None = None) -> Any:
        """Describe a table: columns with types and nullability, keys, and the estimated row count.

        Args:
            table: Table or view name.
            schema: Schema of the table (the default search path when omitted).
        """
        return db.describe_table(table, schema)

    @connector.tool(result_name=f"{name}_result")
    def query(sql: str, name: str | None = None, max_rows: int | None = None) -> Any:
        """Run one read-only SQL statement in the database; the rows come back as a DataFrame handle.

        Aggregate and join in SQL: the engine does the work and only the result is fetched.

        Args:
            sql: One SELECT/WITH/VALUES/SHOW/EXPLAIN statement.
            name: Preferred handle name for the result (e.g. weekly_sales).
            max_rows: Fetch at most this many rows (cannot exceed the connector's cap).
        """
        classification = _classify(sql)
        if len(classification.statements) > 1:
            raise ToolError("Send one statement per call.")
        if not classification.is_read:
            advice = (f"use {connector.name}__execute, which asks the user for approval" if allow_writes
                      else "this connection is read-only")
            raise ToolError(f"Refused: the statement is classified {classification.summary}; "
                            f"{connector.name}__query runs read-only statements ({advice}).")
        frame, truncated = db.query(sql, max_rows)
        cap = cap_rows(max_rows, db.max_rows)
        return ConnectorResult(frame, truncation_note(len(frame), cap, truncated), name=name)

    if allow_writes:

        def classify(arguments: dict[str, Any]) -> tuple[str, str]:
            classification = classify_sql(str(arguments.get("sql", "")))
            kind = "write" if classification.kind == "read" else classification.kind
            return kind, f"{arguments.get('sql', '')!s} [{classification.summary}]"

        @connector.tool(safety="write", classify=classify)
        def execute(sql: str) -> str:
            """Run one data-changing statement (INSERT, UPDATE, CREATE, ...) after the user approves it.

            Args:
                sql: Exactly one statement.
            """
            classification = _classify(sql)
            if len(classification.statements) > 1:
                raise ToolError("Send one statement per call.")
            count = db.execute(sql)
            affected = f"{count:,} rows affected" if count >= 0 else "row count unknown"
            return f"Executed {classification.statements[0].keyword} ({classification.kind}); {affected}."

    return connector
