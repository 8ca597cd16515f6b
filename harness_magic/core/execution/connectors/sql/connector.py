"""The ``sql`` connector: any SQLAlchemy URL, read-only unless a write is approved.

Tools (``<name>__...``):

``list_tables(schema=None)``
    tables and views with their kind and a row estimate (PostgreSQL:
    ``pg_class.reltuples``, no scan).
``describe_table(table, schema=None)``
    columns (type, nullable, default), primary key, foreign keys, row estimate.
``query(sql, name=None, max_rows=None)``
    one statement classified ``read`` by the engine's parser (see
    :mod:`.classify`); rows are streamed in batches into a DataFrame handle,
    capped at ``max_rows`` (the note says when the cap bit).
``execute(sql)``
    one data-changing statement; safety ``write`` (``destructive`` for DROP,
    TRUNCATE, DELETE without WHERE, ...). On PostgreSQL it is previewed in a
    transaction and the user commits or rolls it back (:mod:`.governed`,
    :mod:`.preview`); elsewhere it passes the approval policy before it runs.
    Omitted with ``allow_writes=False``.

What the PostgreSQL read path guarantees, enforced by the server (see
:class:`SQLConnection`): one statement per call (extended protocol), a
transaction that is read-only by the connection's default (``COMMIT``
cannot leave it), ``statement_timeout``, and ``DISCARD ALL`` when the
connection returns to the pool. What it cannot stop depends on the role:
a superuser, or a role that may signal backends, read server files or use
dblink/foreign servers, keeps those powers inside a read-only transaction;
the classifier routes such calls to approval, and the connector's
description warns. Other drivers get a timer that cancels the statement
through the DB-API connection's ``cancel()``/``interrupt()`` when it has one.
The engine does the work; only the result crosses into the notebook.
"""

from __future__ import annotations

import os
import re
import threading
from itertools import islice
from typing import Any, Iterator

from harness_magic.core.execution.connectors._results import (
    DEFAULT_BATCH_ROWS,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    cap_rows,
    rows_to_frame,
    truncation_note,
)
from harness_magic.core.execution.connectors.classify import SQLClassificationError, classify_sql
from harness_magic.core.execution.connectors.estimates import (
    Estimate,
    explain_target,
    gate_read,
    postgres_plan_estimate,
)
from harness_magic.core.execution.connectors.governed import add_sql_execute, govern
from harness_magic.core.execution.connectors.sql.masked_views import masked_view_warnings
from harness_magic.core.execution.connectors.registry import Connector, ConnectorResult, ToolContext
from harness_magic.core.execution.connectors.sameness import records_configuration
from harness_magic.core.execution.tools import ToolError

__all__ = ["sql_connector", "SQLConnection"]


def _import_sqlalchemy() -> Any:
    try:
        import sqlalchemy
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError("the sql connector needs SQLAlchemy: pip install sqlalchemy") from exc
    return sqlalchemy


class SQLConnection:
    """The engine-facing half of the connector (usable without a model).

    PostgreSQL reads go through :attr:`read_engine`, whose connections are
    opened with ``default_transaction_read_only=on`` and ``statement_timeout``
    in the startup packet (and ``role`` when ``read_role`` is given), so every
    transaction on them is read-only and ``COMMIT`` cannot leave that mode.
    Each read sends one statement over the extended protocol (a second
    statement is a server error). Every connection of the read pool (and of
    the write pool when the connector created it from a URL) runs
    ``DISCARD ALL`` when it returns to the pool: settings, temporary tables,
    prepared statements, cursors, ``LISTEN`` and session advisory locks never
    outlive the call that made them.
    """

    def __init__(
        self,
        url_or_engine: Any,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        read_url: Any | None = None,
        read_role: str | None = None,
    ) -> None:
        sa = _import_sqlalchemy()
        if max_rows < 1 or batch_rows < 1 or timeout_s <= 0:
            raise ValueError(f"max_rows, batch_rows and timeout_s must be positive "
                             f"(got {max_rows!r}, {batch_rows!r}, {timeout_s!r})")
        if read_role is not None and (not isinstance(read_role, str) or not _ROLE_RE.fullmatch(read_role)):
            raise ValueError(f"read_role {read_role!r} must be a plain role name (letters, digits, _ or $; "
                             "at most 63 characters)")
        owns_engine = isinstance(url_or_engine, (str, sa.engine.URL))
        if owns_engine:
            try:
                self.engine = sa.create_engine(_psycopg_url(url_or_engine))
            except ValueError:
                raise
            # broad: SQLAlchemy and driver imports fail in many ways; one ValueError naming the URL
            except Exception as exc:
                raise ValueError(f"cannot create an engine for {_redact(url_or_engine)}: {exc}") from exc
        else:
            self.engine = url_or_engine
        self.max_rows = max_rows
        self.timeout_s = timeout_s
        self.batch_rows = batch_rows
        self.read_role = read_role
        if self.dialect == "postgresql":
            if self.engine.dialect.driver != "psycopg":
                raise ValueError(f"the sql connector runs PostgreSQL through the psycopg (3) driver only, "
                                 f"got {self.engine.dialect.driver!r} for {_redact(self.engine.url)}; "
                                 "use a postgresql+psycopg:// URL")
            if owns_engine:  # a caller's own Engine keeps its pool behaviour; reads never use it
                _reset_on_checkin(self.engine)
            options = (f"-c default_transaction_read_only=on "
                       f"-c statement_timeout={max(1, int(timeout_s * 1000))}"
                       + (f" -c role={read_role}" if read_role else ""))
            source = _psycopg_url(read_url) if read_url is not None else self.engine.url
            try:
                self.read_engine = sa.create_engine(source, connect_args={"options": options,
                                                                          "connect_timeout": CONNECT_TIMEOUT_S})
            # broad: SQLAlchemy and driver imports fail in many ways; one ValueError naming the URL
            except Exception as exc:
                raise ValueError(f"cannot create an engine for {_redact(source)}: {exc}") from exc
            if self.read_engine.dialect.name != "postgresql" or self.read_engine.dialect.driver != "psycopg":
                raise ValueError(f"read_url {_redact(source)} must be a postgresql+psycopg:// URL")
            _reset_on_checkin(self.read_engine)
        else:
            if read_url is not None or read_role is not None:
                raise ValueError("read_url and read_role are supported for PostgreSQL only "
                                 f"(this engine is {self.dialect})")
            self.read_engine = _sqlite_read_only(self.engine) if self.dialect == "sqlite" else self.engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def __repr__(self) -> str:
        return f"SQLConnection({_redact(self.engine.url)})"

    # -- privileges -----------------------------------------------------------------------------

    def privileges(self) -> dict[str, Any]:
        """What the read role may do that a read-only transaction does not stop (PostgreSQL only).

        Keys: ``role``, ``superuser``, ``signal_backends`` (``pg_signal_backend``),
        ``read_server_files``, ``write_server_files``, ``execute_server_program``,
        ``dblink`` (may execute a dblink function), ``foreign_servers`` (usable
        servers), ``create_role``, ``bypass_rls``. Empty for other dialects.
        """
        if self.dialect != "postgresql":
            return {}
        sa = _import_sqlalchemy()
        with self.read_engine.connect() as conn:
            row = conn.execute(sa.text(_PRIVILEGES_SQL)).mappings().one()
        return {**row, "foreign_servers": list(row["foreign_servers"] or [])}

    def warnings(self, privileges: dict[str, Any] | None = None) -> list[str]:
        """Plain-language warnings about what the read role can do beyond reading."""
        p = self.privileges() if privileges is None else privileges
        role = p.get("role", "?")
        out = []
        if p.get("superuser"):
            out.append(f"the read role {role!r} is a SUPERUSER: it can read server files, signal backends and "
                       "bypass every privilege; only the read-only transaction and the query classification "
                       "stand between the model and the server. Use a read_url with a plain role.")
        else:
            if p.get("signal_backends"):
                out.append(f"the read role {role!r} can terminate or cancel other sessions (pg_signal_backend)")
            if p.get("read_server_files"):
                out.append(f"the read role {role!r} can read files on the database server (pg_read_server_files)")
            if p.get("write_server_files") or p.get("execute_server_program"):
                out.append(f"the read role {role!r} can write server files or run programs on the server")
            if p.get("create_role"):
                out.append(f"the read role {role!r} can create roles")
        if p.get("dblink"):
            out.append(f"the read role {role!r} can use dblink, which opens connections the read-only "
                       "transaction does not cover")
        if p.get("foreign_servers"):
            out.append(f"the read role {role!r} can use foreign servers: {', '.join(p['foreign_servers'])}")
        return out

    # -- execution ------------------------------------------------------------------------------

    def map_error(self, exc: Exception, sql: str) -> ToolError:
        """The ToolError the model gets for a driver error (timeouts, read-only refusals named)."""
        orig = getattr(exc, "orig", exc)
        code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        if code == "57014" or "interrupt" in text.lower() or "cancel" in text.lower():
            return ToolError(f"The statement timed out after {self.timeout_s:g} s and was cancelled. "
                             "Filter or aggregate more in SQL, or query a smaller range.")
        if code == "25006":
            return ToolError(f"Refused by the database: {text} (queries run in a read-only transaction).")
        if code == "42601" and "multiple commands" in text:
            return ToolError(f"Refused by the database: {text}. Send one statement per call.")
        return ToolError(f"{self.dialect} error: {text}")

    def query(self, sql: str, max_rows: int | None = None) -> tuple[Any, bool]:
        """(DataFrame of at most ``max_rows`` rows, truncated?) for one read statement.

        PostgreSQL: the text goes to the server as one extended-protocol
        statement (``cursor.stream``; no parameters, so ``%`` and ``:name`` are
        never placeholders) on a read-only connection; rows arrive in chunks
        and the statement is cancelled once the cap is passed. Other
        dialects: the DB-API cursor, rows fetched in batches, a timer that
        cancels the statement.
        """
        cap = cap_rows(max_rows, self.max_rows)
        sa = _import_sqlalchemy()
        try:
            with self.read_engine.connect() as conn:
                dbapi = conn.connection.dbapi_connection
                if self.dialect == "postgresql":
                    return self._stream(dbapi, sql, cap)
                with conn.begin():
                    timer = _Timer(dbapi, self.timeout_s)
                    cursor = dbapi.cursor()
                    try:
                        cursor.execute(sql)
                        if cursor.description is None:
                            return rows_to_frame([], []), False
                        columns = [d[0] for d in cursor.description]
                        state = {"truncated": False}
                        frame = rows_to_frame(columns, self._batches(cursor, cap, state))
                    finally:
                        timer.cancel()
                        cursor.close()
                    return frame, state["truncated"]
        except (sa.exc.DBAPIError, *self.dbapi_errors()) as exc:
            raise self.map_error(exc, sql) from exc
        except sa.exc.SQLAlchemyError as exc:
            raise ToolError(f"{self.dialect} error: {exc}") from exc

    def plan(self, sql: str) -> Any:
        """PostgreSQL's plan of one read statement (``EXPLAIN (FORMAT JSON)``, parsed), on the read connection
        (read-only transaction, statement timeout); planned, never run. ToolError with the server's error when
        the statement cannot be planned; None for other dialects (they give no estimate here)."""
        if self.dialect != "postgresql":
            return None
        sa = _import_sqlalchemy()
        try:
            with self.read_engine.connect() as conn:
                dbapi = conn.connection.dbapi_connection
                cursor = dbapi.cursor()
                try:
                    cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", binary=True)  # binary: extended protocol, one statement
                    row = cursor.fetchone()
                finally:
                    cursor.close()
                    dbapi.rollback()
        except (sa.exc.DBAPIError, *self.dbapi_errors()) as exc:
            raise self.map_error(exc, sql) from exc
        return row[0] if row else None

    def _stream(self, dbapi: Any, sql: str, cap: int) -> tuple[Any, bool]:
        cursor = dbapi.cursor()
        batches: list[list[Any]] = []
        taken, truncated = 0, False
        rows = cursor.stream(sql, size=min(self.batch_rows, cap + 1))
        try:
            while taken < cap:
                batch = list(islice(rows, min(self.batch_rows, cap - taken)))
                if not batch:
                    break
                batches.append(batch)
                taken += len(batch)
            truncated = taken == cap and next(rows, None) is not None
        finally:
            rows.close()  # cancels the rest of the statement when the cap stopped it
        columns = [d[0] for d in cursor.description] if cursor.description else []
        cursor.close()
        dbapi.rollback()
        return rows_to_frame(columns, batches), truncated

    def dbapi_errors(self) -> tuple[type[BaseException], ...]:
        """The driver's base error class, for ``except`` clauses outside SQLAlchemy."""
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
        """Run one statement in its own transaction; returns the affected row count (-1 if unknown).

        PostgreSQL: over the extended protocol (psycopg sends a query asking
        for binary results that way), so the text is exactly one statement,
        under ``SET LOCAL statement_timeout``.
        """
        sa = _import_sqlalchemy()
        try:
            with self.engine.connect() as conn:
                with conn.begin():
                    dbapi = conn.connection.dbapi_connection
                    timer = None
                    if self.dialect == "postgresql":
                        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(self.timeout_s * 1000))}")
                    else:
                        timer = _Timer(dbapi, self.timeout_s)
                    cursor = dbapi.cursor()
                    try:
                        if self.dialect == "postgresql":
                            cursor.execute(sql, binary=True)
                        else:
                            cursor.execute(sql)
                        count = cursor.rowcount if cursor.rowcount is not None else -1
                    finally:
                        if timer is not None:
                            timer.cancel()
                        cursor.close()
                return count
        except (sa.exc.DBAPIError, *self.dbapi_errors()) as exc:
            raise self.map_error(exc, sql) from exc
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
            with self.read_engine.connect() as conn:
                rows = conn.execute(sql, {"schema": schema}).mappings().all()
            return [{**r, "row_estimate": _estimate(r["row_estimate"], r["kind"])} for r in rows]
        inspector = sa.inspect(self.read_engine)
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
        with self.read_engine.connect() as conn:
            row = conn.execute(sql, {"table": table, "schema": schema}).first()
        return _estimate(row[0], "table") if row else None

    def describe_table(self, table: str, schema: str | None = None) -> dict[str, Any]:
        sa = _import_sqlalchemy()
        inspector = sa.inspect(self.read_engine)
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


def _plan_estimate(db: SQLConnection, sql: str) -> Estimate | None:
    """PostgreSQL's own estimate of ``sql`` from its plan (nothing runs); None: this dialect gives none here."""
    if db.dialect != "postgresql":
        return None
    target, note = explain_target(sql)
    if target is None:
        return Estimate("postgresql", None, note=note)
    plan = db.plan(target)
    return postgres_plan_estimate(plan) if plan is not None else None


CONNECT_TIMEOUT_S = 10
"""A PostgreSQL server that does not answer within this many seconds fails the call instead of hanging it."""
_ROLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")

_PRIVILEGES_SQL = """
SELECT current_user AS role, r.rolsuper AS superuser, r.rolcreaterole AS create_role, r.rolbypassrls AS bypass_rls,
       pg_has_role(current_user, 'pg_signal_backend', 'USAGE') AS signal_backends,
       pg_has_role(current_user, 'pg_read_server_files', 'USAGE') AS read_server_files,
       pg_has_role(current_user, 'pg_write_server_files', 'USAGE') AS write_server_files,
       pg_has_role(current_user, 'pg_execute_server_program', 'USAGE') AS execute_server_program,
       EXISTS (SELECT 1 FROM pg_proc p WHERE p.proname LIKE 'dblink%%'
               AND has_function_privilege(p.oid, 'EXECUTE')) AS dblink,
       ARRAY(SELECT s.srvname::text FROM pg_foreign_server s
             WHERE has_server_privilege(s.oid, 'USAGE') ORDER BY 1) AS foreign_servers
FROM pg_roles r WHERE r.rolname = current_user
"""
"""The read role's attributes and memberships that reach past a read-only transaction."""


def _psycopg_url(url: Any) -> Any:
    """``postgresql://`` without a driver means psycopg (3) here; other URLs pass through."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_read_only(engine: Any) -> Any:
    """A second engine on the same SQLite file opened ``mode=ro`` that cannot ATTACH other files.

    SQLite itself then refuses every write on the read path. An in-memory
    database has no file to reopen, so it keeps ``engine`` (classification
    alone guards its reads).
    """
    import sqlite3

    from sqlalchemy import create_engine, event

    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return engine
    path = os.path.abspath(database)
    read_engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")

    def lock_down(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)

    event.listen(read_engine, "connect", lock_down)
    return read_engine


def _reset_on_checkin(engine: Any) -> None:
    """``DISCARD ALL`` on every connection returning to ``engine``'s pool (PostgreSQL).

    It resets settings and roles to the connection's startup values, drops
    temporary tables, deallocates prepared statements, closes cursors, stops
    ``LISTEN`` and releases session advisory locks. A connection whose reset
    fails is closed instead of pooled.
    """
    from sqlalchemy import event

    def reset(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is None:
            return
        try:
            dbapi_connection.rollback()
            dbapi_connection.autocommit = True
            try:
                dbapi_connection.execute("DISCARD ALL")
            finally:
                dbapi_connection.autocommit = False
        except Exception:  # broad: driver errors have no common base; a connection that cannot be reset is discarded
            record.invalidate()

    event.listen(engine, "checkin", reset)


def _estimate(value: Any, kind: str | None) -> int | None:
    """reltuples is -1 for never-analysed tables and meaningless for views."""
    if value is None or kind == "view" or int(value) < 0:
        return None
    return int(value)


def _redact(url: Any) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # broad: only hiding a password in a message; an unparsable URL is not shown at all
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


def _classify(sql: str, dialect: str) -> Any:
    try:
        return classify_sql(sql, dialect)
    except SQLClassificationError as exc:
        raise ToolError(f"Cannot run this SQL: {exc}.") from None


@records_configuration
def sql_connector(
    url_or_engine: Any,
    *,
    name: str = "sql",
    description: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    allow_writes: bool | None = None,
    read_url: Any | None = None,
    read_role: str | None = None,
    environment: str = "dev",
) -> Connector:
    """A connector over a SQLAlchemy URL or Engine (see the module docstring).

    ``read_url`` (PostgreSQL) runs every read through another login, e.g. a
    role granted only ``SELECT``; ``read_role`` runs reads under ``SET ROLE``
    to that role instead (weaker: a role can always switch back to its
    login). The description warns when the read role is a superuser or can
    signal backends, read server files or use dblink/foreign servers.

    Writes (:mod:`.governed`): ``allow_writes=False`` removes ``execute``;
    ``None`` keeps it for the policy to decide (``prod`` refuses it), ``True``
    is what ``prod`` needs. ``environment`` is ``dev``, ``staging`` or
    ``prod``.
    """
    db = SQLConnection(url_or_engine, max_rows=max_rows, timeout_s=timeout_s, batch_rows=batch_rows,
                       read_url=read_url, read_role=read_role)
    try:
        warnings = db.warnings()
    except Exception as exc:  # the server may be down now; the tools report that when called
        warnings = [f"the read role's privileges could not be checked ({type(exc).__name__})"] \
            if db.dialect == "postgresql" else []
    text = description or (f"SQL database ({db.dialect}): list and describe tables, run read-only queries "
                           f"whose results come back as handles.")
    if warnings:
        text += " WARNING: " + "; ".join(warnings) + "."
    connector = Connector(name, text)
    connector.dialect = db.dialect
    govern(connector, environment, allow_writes)
    connector.connection = db  # type: ignore[attr-defined]  # a SQL connector's own attributes
    connector.safety_warnings = warnings  # type: ignore[attr-defined]  # a SQL connector's own attributes

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

    masked_checked: list[bool] = []
    """Set once the read role's access to the sensitive columns was checked (:mod:`.masked_views`)."""

    @connector.tool(result_name=f"{name}_result")
    def query(sql: str, context: ToolContext, name: str | None = None, max_rows: int | None = None) -> Any:
        """Run one read-only SQL statement in the database; the rows come back as a DataFrame handle.

        Aggregate and join in SQL: the engine does the work and only the result is fetched.

        Args:
            sql: One SELECT/WITH/VALUES/SHOW/EXPLAIN statement.
            name: Preferred handle name for the result (e.g. weekly_sales).
            max_rows: Fetch at most this many rows (cannot exceed the connector's cap).
        """
        classification = _classify(sql, db.dialect)
        if len(classification.statements) > 1:
            raise ToolError(f"Refused: {len(classification.statements)} statements; send one statement per call "
                            f"({classification.summary}).")
        if not classification.is_read:
            advice = (f"use {connector.name}__execute, which asks the user for approval"
                      if allow_writes is not False else "this connection is read-only")
            raise ToolError(f"Refused: the statement is classified {classification.summary}; "
                            f"{connector.name}__query runs read-only statements ({advice}).")
        estimate = gate_read(context, lambda: _plan_estimate(db, sql), db.dialect)  # before any row is read
        frame, truncated = db.query(sql, max_rows)
        cap = cap_rows(max_rows, db.max_rows)
        note = " ".join(filter(None, [estimate, truncation_note(len(frame), cap, truncated)]))
        if not masked_checked and db.dialect == "postgresql":  # once: the read role and the sensitivity option
            masked_checked.append(True)
            found = masked_view_warnings(db, connector.sensitivity)
            if found:
                note = " ".join(filter(None, ["WARNING: " + "; ".join(found) + ".", note]))
        return ConnectorResult(frame, note, name=name)

    if allow_writes is not False:
        add_sql_execute(connector, db)

    return connector
