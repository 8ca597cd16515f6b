"""Preview, then commit: a governed write runs inside a transaction the user commits or rolls back.

:func:`governed_write` drives one write through a :class:`PreviewBackend`:

1. open a transaction and run exactly one statement in it (under the
   connector's timeout; transaction control inside the write is refused
   before anything is sent, and the engine refuses it inside a function or
   procedure);
2. build a :class:`Preflight` from what the ENGINE reports: rows affected,
   tables touched, a sample of changed rows before and after;
3. ask (``approve(preflight)``) while the transaction stays open: nothing is
   visible to other connections (both engines' MVCC);
4. commit on approval, roll back on anything else (a denial, an error, an
   approver that raises), and audit the outcome (``governed_write``).

Backends:

``postgresql`` (:class:`PostgresPreview`)
    tables touched from ``pg_stat_xact_user_tables`` (this transaction's
    inserted/updated/deleted tuples, triggers and cascades included); rows
    after from ``xmin`` = this transaction's id, rows before from a second
    (read-only) connection, where the old row versions are still visible with
    ``xmax`` = this transaction's id. DDL is transactional in PostgreSQL, so it
    is previewed too (without a row sample). ``statement_timeout`` bounds the
    statement; ``idle_in_transaction_session_timeout`` releases the locks of a
    preview nobody answers (:data:`PREVIEW_HOLD_MAX_S`).
``duckdb`` (:class:`DuckDBPreview`)
    a database file opened with :data:`DUCKDB_WRITE_CONFIG` (no access to other
    files); before the statement, the tables of every schema and attached
    database (``duckdb_tables()``; ``crm.customers``, ``other.main.t``), up to
    :data:`DIFF_MAX_ROWS` rows in all, are copied into temporary tables inside
    the transaction, and ``EXCEPT ALL`` both ways gives the rows before and
    after; the copies are dropped before the user is asked. Over the limit the
    preview says so in a note and lists created and dropped tables only; the
    policy then applies by the tables the statement names
    (:mod:`.touched`). A timer interrupts a statement over the timeout.

Only statements whose effects a rollback undoes are previewed
(:func:`preview_refusal`): one DML or DDL statement (:data:`PREVIEWABLE`)
calling no function with side effects outside the transaction (signals,
server files, dblink, sequences, ... — :func:`~.classify.side_effect`).
Anything else (``COPY``, ``DO``, ``CALL``, ``VACUUM``, ``SET``, a ``SELECT``
calling functions, several statements, transaction control), and any write
on an engine without a backend (other SQL engines, Spark, files), is not run
before approval: it is asked about first with no preview, and the policy is
stricter (:mod:`.policy`: refused in ``prod``, never auto-allowed in
``staging``). Residual risk, stated: a user-defined function or trigger that
the previewed statement fires runs during the preview; its effects outside
the database (if it has any) are not undone by a rollback.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from harness_magic.core.execution.tools import ToolError

__all__ = [
    "Preflight",
    "PreviewBackend",
    "PostgresPreview",
    "DuckDBPreview",
    "governed_write",
    "refuse_transaction_control",
    "preview_refusal",
    "PREVIEWABLE",
    "PREVIEW_SAMPLE_ROWS",
    "PREVIEW_MAX_TABLES",
    "PREVIEW_HOLD_MAX_S",
    "DIFF_MAX_ROWS",
    "DUCKDB_WRITE_CONFIG",
    "CELL_MAX_CHARS",
]

PREVIEW_SAMPLE_ROWS = 5
"""Changed rows shown per table, before and after: enough to check the change, small enough to read."""
PREVIEW_MAX_TABLES = 5
"""Tables sampled per write; the rest are listed with their counts only."""
PREVIEW_HOLD_MAX_S = 600
"""PostgreSQL ends a preview transaction left waiting this long (its locks block other writers)."""
DIFF_MAX_ROWS = 1_000_000
"""DuckDB: tables larger than this in all are not copied for a before/after sample (rows affected stay exact)."""
CELL_MAX_CHARS = 200
"""Each sampled value is cut here for the approval display."""
DUCKDB_WRITE_CONFIG: dict[str, Any] = {"enable_external_access": False, "autoinstall_known_extensions": False,
                                       "autoload_known_extensions": False}
"""A governed DuckDB write reaches its database file only: no COPY to files, no ATTACH, no extensions."""
TRANSACTION_KEYWORDS = ("TRANSACTION", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END", "ABORT")
"""Statement keywords (classify.StatementInfo.keyword) that would end or split the preview transaction."""
PREVIEWABLE: dict[str, frozenset[str]] = {
    "postgresql": frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "CREATE TABLE AS", "INDEX",
                             "ALTERTABLE", "ALTER", "DROP", "TRUNCATE", "COMMENT", "VIEW"}),
    "duckdb": frozenset({"INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP"}),
}
"""Statement keywords (as :mod:`.classify` names them) whose effects stay inside the transaction, per engine."""


def _pg_calls(sql: str) -> list[str]:
    from pglast.parser import parse_sql_json

    calls: list[str] = []
    stack: list[Any] = [json.loads(parse_sql_json(sql))]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            call = node.get("FuncCall")
            if isinstance(call, dict):
                calls.append(".".join(str(p.get("String", {}).get("sval", "")) for p in call.get("funcname", [])))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return calls


def preview_refusal(classification: Any, sql: str, engine: str) -> str | None:
    """Why ``sql`` cannot be previewed on ``engine`` (asked first instead), or None when it can."""
    from harness_magic.core.execution.connectors.classify import side_effect

    statements = classification.statements
    if engine not in PREVIEWABLE:
        return f"{engine} has no preview transaction here"
    if len(statements) != 1:
        return f"{len(statements)} statements (a preview runs exactly one)"
    keyword = statements[0].keyword
    if keyword in TRANSACTION_KEYWORDS:
        return f"{keyword} is transaction control"
    if keyword not in PREVIEWABLE[engine]:
        return f"{keyword} may act outside the transaction (only DML and DDL are previewed)"
    if engine == "postgresql":
        for call in _pg_calls(sql):
            reason = side_effect(call)
            if reason:
                return f"it calls {call}, which {reason} outside the transaction"
    return None


@dataclass(frozen=True)
class Preflight:
    """The risk summary an approver sees before a governed write is committed."""

    statement: str
    engine: str
    kind: str
    """Safety class of the statement (``write`` or ``destructive``)."""
    keyword: str
    rows_affected: int | None
    """What the engine reported for the statement (None: it reports no count, e.g. DDL)."""
    tables: tuple[tuple[str, int | None], ...] = ()
    """Tables touched and rows changed in each (None when unknown), as the engine reports them."""
    before: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    after: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    previewed: bool = True
    """The statement ran inside a transaction that is still open (deny rolls it back)."""
    notes: tuple[str, ...] = ()
    rows_matching: int | None = None
    """Not previewed: the rows its ``WHERE`` matches, counted read-only before it runs (None: unknown)."""

    @property
    def undo(self) -> str:
        """Whether the change can be undone, in words."""
        after_commit = ("after commit the harness keeps no copy of the old rows: undoing needs a backup"
                        if self.keyword not in ("INSERT", "CREATE") else
                        "after commit, undo by deleting what it added")
        if self.previewed:
            return f"reversible until you commit (deny rolls it back); {after_commit}"
        return f"not previewed: it runs for real once approved; {after_commit}"

    def headline(self) -> str:
        tables = ", ".join(f"{t} ({n:,})" if n is not None else t for t, n in self.tables) or "none reported"
        if not self.previewed:
            rows = (f"{self.rows_matching:,} rows match its WHERE (counted read-only, before it runs)"
                    if self.rows_matching is not None else "row count unknown (the engine gives none before it runs)")
            return f"{self.keyword} ({self.kind}) on {self.engine}, not previewed: {rows}" + (
                f"; tables: {tables}" if self.tables else "")
        rows = f"{self.rows_affected:,} rows affected" if self.rows_affected is not None else "row count n/a"
        return f"{self.keyword} ({self.kind}) on {self.engine}: {rows}; tables touched: {tables}"

    def text(self) -> str:
        """Plain-text summary (the approval prompt's text form)."""
        lines = [self.headline(), f"statement: {self.statement.strip()}", f"undo: {self.undo}"]
        lines += [f"note: {n}" for n in self.notes]
        for label, samples in (("before", self.before), ("after", self.after)):
            for table, rows in samples.items():
                lines.append(f"{label} ({table}, {len(rows)} of the changed rows):")
                lines += [f"  {row}" for row in rows]
        return "\n".join(lines)


class PreviewBackend(Protocol):
    """One open transaction on one engine; used once per write."""

    engine: str

    def run(self, sql: str) -> int | None:
        """Open the transaction and run ``sql`` (one statement) in it; the engine's row count or None."""

    def changes(self, sample_rows: int) -> tuple[tuple[tuple[str, int | None], ...], dict[str, list[dict[str, Any]]],
                                                 dict[str, list[dict[str, Any]]], tuple[str, ...]]:
        """(tables touched with counts, rows before, rows after, notes), inside the open transaction."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


def refuse_transaction_control(classification: Any) -> None:
    """ToolError unless ``classification`` is exactly one statement that is not transaction control."""
    statements = classification.statements
    if len(statements) != 1:
        raise ToolError(f"Refused: {len(statements)} statements; a governed write runs exactly one statement "
                        "per call, inside a preview transaction.")
    if statements[0].keyword in TRANSACTION_KEYWORDS:
        raise ToolError(f"Refused: {statements[0].keyword} is transaction control; a governed write runs inside "
                        "a preview transaction that the user commits or rolls back.")


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    return text if len(text) <= CELL_MAX_CHARS else text[: CELL_MAX_CHARS - 1] + "…"


def _rows(columns: list[str], rows: list[Any]) -> list[dict[str, Any]]:
    return [{c: _cell(v) for c, v in zip(columns, row)} for row in rows]


def governed_write(backend: PreviewBackend, sql: str, classification: Any,
                   approve: Callable[[Preflight], Any], *, sample_rows: int = PREVIEW_SAMPLE_ROWS,
                   on_outcome: Callable[[Preflight | None, str], None] | None = None) -> str:
    """Run ``sql`` in a preview transaction, ask ``approve(preflight)``, then commit or roll back.

    ``approve`` returns an object with ``approved`` and ``reason`` (an
    ``ApprovalDecision``); if it raises, the write is rolled back.
    ``on_outcome(preflight, outcome)`` is called once with ``committed``,
    ``rolled_back`` or ``failed`` (preflight None when the statement failed).
    Returns the line the model gets; raises ToolError when the write did not happen.
    """
    refuse_transaction_control(classification)
    info = classification.statements[0]
    report = on_outcome or (lambda preflight, outcome: None)
    try:
        try:
            count = backend.run(sql)
            tables, before, after, notes = backend.changes(sample_rows)
        except ToolError:
            backend.rollback()
            report(None, "failed")
            raise
        preflight = Preflight(statement=sql, engine=backend.engine, kind=classification.kind,
                              keyword=info.keyword, rows_affected=count, tables=tables, before=before,
                              after=after, notes=notes)
        try:
            decision = approve(preflight)
        except BaseException:
            backend.rollback()
            report(preflight, "rolled_back")
            raise
        if not decision.approved:
            backend.rollback()
            report(preflight, "rolled_back")
            raise ToolError(f"Not committed: the previewed {info.keyword} was denied ({decision.reason}) and "
                            "rolled back; nothing changed.")
        try:
            backend.commit()
        except ToolError:
            report(preflight, "failed")
            raise
        report(preflight, "committed")
    finally:
        backend.close()
    rows = f"{count:,} rows affected" if count is not None else "no row count"
    touched = ", ".join(t for t, _ in tables) or "no table rows"
    return f"Committed {info.keyword} ({classification.kind}) after preview and approval; {rows} ({touched})."


# --------------------------------------------------------------------------- PostgreSQL


class PostgresPreview:
    """A preview transaction on a :class:`~.sql.connector.SQLConnection` (psycopg 3)."""

    engine = "postgresql"

    def __init__(self, db: Any) -> None:
        self.db = db
        self._conn: Any = None
        self._xid: str | None = None

    def run(self, sql: str) -> int | None:
        from psycopg.pq import TransactionStatus

        errors = self.db.dbapi_errors()
        try:
            self._conn = self.db.engine.raw_connection()
            dbapi = self._conn.driver_connection
            dbapi.autocommit = False
            with dbapi.cursor() as cur:
                cur.execute(f"SET LOCAL statement_timeout = {max(1, int(self.db.timeout_s * 1000))}")
                cur.execute(f"SET LOCAL idle_in_transaction_session_timeout = {PREVIEW_HOLD_MAX_S * 1000}")
                cur.execute(sql, binary=True)  # extended protocol: exactly one statement
                count = cur.rowcount if cur.rowcount is not None and cur.rowcount >= 0 else None
                if dbapi.info.transaction_status != TransactionStatus.INTRANS:
                    raise ToolError("The statement ended the preview transaction; refused.")
                cur.execute("SELECT pg_current_xact_id_if_assigned()::xid::text")
                self._xid = cur.fetchone()[0]
            return count
        except errors as exc:
            raise self.db.map_error(exc, sql) from exc

    def changes(self, sample_rows: int) -> Any:
        dbapi = self._conn.driver_connection
        if self._xid is None:
            return (), {}, {}, ("the statement changed nothing (no transaction id was assigned)",)
        with dbapi.cursor() as cur:
            cur.execute("SELECT relid::regclass::text, n_tup_ins + n_tup_upd + n_tup_del "
                        "FROM pg_stat_xact_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY 1")
            tables = tuple((name, int(n)) for name, n in cur.fetchall())
        before: dict[str, list[dict[str, Any]]] = {}
        after: dict[str, list[dict[str, Any]]] = {}
        notes: list[str] = []
        if len(tables) > PREVIEW_MAX_TABLES:
            notes.append(f"{len(tables)} tables touched; samples for the first {PREVIEW_MAX_TABLES}")
        sampled = [name for name, _ in tables[:PREVIEW_MAX_TABLES]]
        for table in sampled:  # regclass::text is already quoted where needed
            with dbapi.cursor() as cur:
                cur.execute(f"SELECT * FROM {table} WHERE xmin = %s::xid LIMIT {int(sample_rows)}", (self._xid,))
                rows = _rows([d.name for d in cur.description], cur.fetchall())
            if rows:
                after[table] = rows
        try:
            with self.db.read_engine.connect() as other:  # sees the committed state, old rows still carry xmax
                raw = other.connection.driver_connection
                with raw.cursor() as cur:
                    for table in sampled:
                        cur.execute(f"SELECT * FROM {table} WHERE xmax = %s::xid LIMIT {int(sample_rows)}",
                                    (self._xid,))
                        rows = _rows([d.name for d in cur.description], cur.fetchall())
                        if rows:
                            before[table] = rows
                raw.rollback()
        except Exception as exc:  # the read role may not see these tables: say so, keep the preview
            notes.append(f"rows before could not be read ({type(exc).__name__})")
        if not tables:
            notes.append("no table rows changed (a schema change runs in the same transaction; deny rolls it back)")
        return tables, before, after, tuple(notes)

    def commit(self) -> None:
        try:
            self._conn.driver_connection.commit()
        except self.db.dbapi_errors() as exc:
            raise ToolError(f"The commit failed and nothing was changed: {str(exc).strip()}") from exc

    def rollback(self) -> None:
        if self._conn is not None:
            try:
                self._conn.driver_connection.rollback()
            # broad: driver errors have no common base; a connection that cannot roll back is discarded
            except Exception:
                self._conn.invalidate()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# --------------------------------------------------------------------------- DuckDB


class DuckDBPreview:
    """A preview transaction on a DuckDB database file."""

    engine = "duckdb"

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._con: Any = None
        self._copies: dict[str, str] = {}
        self._tables_before: set[str] = set()
        self._qualified: dict[str, str] = {}
        self._notes: list[str] = []

    def _tables(self) -> dict[str, tuple[str, int]]:
        """``{display name: (qualified SQL name, estimated rows)}`` for every table of every schema and attached
        database (not temporary, not internal); tables of ``main`` in the file's own database keep their bare name."""
        rows = self._con.execute(
            "SELECT database_name, schema_name, table_name, estimated_size, database_name = current_database() "
            "FROM duckdb_tables() WHERE NOT temporary AND NOT internal AND database_name NOT IN ('system', 'temp') "
            "ORDER BY 1, 2, 3").fetchall()
        out: dict[str, tuple[str, int]] = {}
        for database, schema, name, size, own in rows:
            shown = [name] if own and schema == "main" else [schema, name] if own else [database, schema, name]
            out[".".join(_shown(p) for p in shown)] = (".".join(f'"{_ident(p)}"' for p in (database, schema, name)),
                                                        int(size or 0))
        return out

    def run(self, sql: str) -> int | None:
        import duckdb

        statements = duckdb.extract_statements(sql)
        if len(statements) != 1:
            raise ToolError(f"Refused: {len(statements)} statements; a governed write runs exactly one.")
        try:
            self._con = duckdb.connect(self.path, config=DUCKDB_WRITE_CONFIG)
            self._con.execute("BEGIN TRANSACTION")
            tables = self._tables()
            self._tables_before = set(tables)
            self._qualified = {name: qualified for name, (qualified, _) in tables.items()}
            total = sum(n for _, n in tables.values())
            if total <= DIFF_MAX_ROWS:
                for i, (name, (qualified, _)) in enumerate(tables.items()):
                    copy = f"__preview_before_{i}"
                    self._con.execute(f"CREATE TEMP TABLE {copy} AS SELECT * FROM {qualified}")
                    self._copies[name] = copy
            else:
                self._notes.append(f"over the diff limit: the database holds about {total:,} rows (more than "
                                   f"{DIFF_MAX_ROWS:,}), so the changed rows are neither counted per table nor "
                                   "sampled; the policy applies to the tables the statement names")
            return self._execute(statements[0])
        except duckdb.InterruptException as exc:
            raise ToolError(f"The statement timed out after {self.timeout_s:g} s and was cancelled; "
                            "nothing was changed.") from exc
        except duckdb.Error as exc:
            raise ToolError(f"duckdb error: {str(exc).strip().splitlines()[0]}") from exc

    def _execute(self, statement: Any) -> int | None:
        timer = threading.Timer(self.timeout_s, self._con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            result = self._con.execute(statement)
            described = result.description or []
            row = result.fetchone() if described and described[0][0] == "Count" else None
        finally:
            timer.cancel()
        return int(row[0]) if row is not None else None

    def run_direct(self, sql: str) -> int | None:
        """Run one statement committed at once (approved without a preview); the row count or None."""
        import duckdb

        statements = duckdb.extract_statements(sql)
        if len(statements) != 1:
            raise ToolError(f"Refused: {len(statements)} statements; send one statement per call.")
        try:
            self._con = duckdb.connect(self.path, config=DUCKDB_WRITE_CONFIG)
            return self._execute(statements[0])
        except duckdb.InterruptException as exc:
            raise ToolError(f"The statement timed out after {self.timeout_s:g} s and was cancelled.") from exc
        except duckdb.Error as exc:
            raise ToolError(f"duckdb error: {str(exc).strip().splitlines()[0]}") from exc
        finally:
            self.close()

    def changes(self, sample_rows: int) -> Any:
        before: dict[str, list[dict[str, Any]]] = {}
        after: dict[str, list[dict[str, Any]]] = {}
        touched: list[tuple[str, int | None]] = []
        now = set(self._tables())
        for name in sorted(now - self._tables_before):
            touched.append((name, None))
            self._notes.append(f"creates table {name}")
        for name in sorted(self._tables_before - now):
            touched.append((name, None))
            self._notes.append(f"drops table {name}")
        for name, copy in self._copies.items():
            if name not in now:
                continue
            table = self._qualified[name]
            gone_sql = f"SELECT * FROM {copy} EXCEPT ALL SELECT * FROM {table}"
            new_sql = f"SELECT * FROM {table} EXCEPT ALL SELECT * FROM {copy}"
            try:
                gone_n, new_n = self._con.execute(f"SELECT (SELECT count(*) FROM ({gone_sql})), "
                                                  f"(SELECT count(*) FROM ({new_sql}))").fetchone()
            except Exception:  # the columns changed: no row-by-row comparison
                touched.append((name, None))
                self._notes.append(f"the columns of {name} changed: no row sample")
                continue
            if gone_n or new_n:
                touched.append((name, max(gone_n, new_n)))
                if len(touched) <= PREVIEW_MAX_TABLES:
                    for target, query, n in ((before, gone_sql, gone_n), (after, new_sql, new_n)):
                        if n:
                            result = self._con.execute(f"{query} LIMIT {int(sample_rows)}")
                            target[name] = _rows([d[0] for d in result.description], result.fetchall())
        for copy in self._copies.values():
            self._con.execute(f"DROP TABLE IF EXISTS temp.{copy}")
        self._copies.clear()
        return tuple(touched), before, after, tuple(self._notes)

    def commit(self) -> None:
        import duckdb

        try:
            self._con.execute("COMMIT")
        except duckdb.Error as exc:
            raise ToolError(f"The commit failed and nothing was changed: {exc}") from exc

    def rollback(self) -> None:
        if self._con is not None:
            try:
                self._con.execute("ROLLBACK")
            except Exception:  # broad: duckdb errors have no common base
                pass  # a failed statement may have aborted the transaction already; close() discards it

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _ident(name: str) -> str:
    return name.replace('"', '""')


def _shown(part: str) -> str:
    """A name part as SQL would need it: bare when it is a plain lower-case identifier, else quoted."""
    return part if part.isidentifier() and part.isascii() and part == part.lower() else f'"{_ident(part)}"'

