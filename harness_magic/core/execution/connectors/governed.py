"""Write tools under governance: the ``execute`` tool of the sql and duckdb connectors.

On PostgreSQL and a DuckDB database file, ``execute`` is a previewed tool
(:mod:`.preview`): the guard only refuses what the policy refuses outright
(e.g. a ``prod`` connector without ``allow_writes``); the statement then runs
in a transaction, the approver sees the preflight summary, and the write is
committed or rolled back. Other SQL engines (SQLite, ...) cannot preview: the
tool asks first, with a preflight that says "not previewed" and the number of
rows the statement's ``WHERE`` matches, counted by a read-only ``SELECT
COUNT(*)`` when the statement is a simple ``UPDATE``/``DELETE`` (else "row
count unknown"), then runs it in its own transaction; the policy treats those
writes as unpreviewable. Every write is audited (``governed_write``) with its
outcome and row count; the audit never holds row values.

The connector's ``sensitivity`` option (``{"[schema.]table.column" or
"column": class}``) and the ``sensitivity`` of the session's glossary entries
(the connector's own option wins where both name a column) class the data: a write carries in its approval request
the classes of every table it touches (:mod:`.touched`: the tables the
statement names in any schema or attached database, read or written, plus
those the engine's preview reports), so the policy table can key on them. A
statement whose tables cannot be determined carries every class configured.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from harness_magic.core.execution.connectors.approval import ApprovalRequest
from harness_magic.core.execution.connectors.classify import SQLClassificationError, classify_sql, sqlglot_dialect
from harness_magic.core.execution.connectors.policy import ENVIRONMENTS, PolicyError
from harness_magic.core.execution.connectors.preview import (
    DuckDBPreview,
    PostgresPreview,
    Preflight,
    governed_write,
    preview_refusal,
)
from harness_magic.core.execution.connectors.registry import Connector, ToolContext
from harness_magic.core.execution.connectors.touched import (
    Touched,
    classes_touched,
    count_query,
    table_ref,
    tables_named,
)
from harness_magic.core.execution.tools import ToolError
from harness_magic.core.transcript.audit import AuditError, audit
from harness_magic.core.transcript.events import Notice

__all__ = ["add_sql_execute", "add_duckdb_execute", "govern"]


def govern(connector: Connector, environment: str, allow_writes: bool | None) -> None:
    """Set the connector's environment (validated) and whether its configuration allows writes."""
    if environment not in ENVIRONMENTS:
        raise PolicyError(f"connector {connector.name!r}: environment {environment!r} is invalid; "
                          f"allowed: {', '.join(ENVIRONMENTS)}")
    connector.environment = environment
    connector.allow_writes = allow_writes is True


def _sensitivity(named: Touched, reported: tuple[tuple[str, Any], ...], dialect: str,
                 sensitivity: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(classes of the tables the statement names and the engine reports, notes for the approver)."""
    refs = [table_ref(name, sqlglot_dialect(dialect)) for name, _ in reported]
    unknown = named.unknown or ("the engine reported a table name that cannot be read" if None in refs else "")
    classes = classes_touched([*named.tables, *(r for r in refs if r is not None)], sensitivity,
                              unknown=bool(unknown))
    notes: list[str] = []
    if unknown:
        notes.append(f"the tables this statement touches cannot be determined ({unknown}): it counts as touching "
                     f"every sensitive table{' (' + ', '.join(classes) + ')' if classes else ''}")
    seen = {(r.name.lower(), r.schema.lower()) for r in refs if r is not None}
    extra = [str(t) for t in named.tables if (t.name.lower(), t.schema.lower()) not in seen]
    if extra and reported:
        notes.append(f"the statement also names {', '.join(extra)} (read, or changed where the preview cannot "
                     "count)")
    elif extra:
        notes.append(f"tables the statement names: {', '.join(extra)}")
    return classes, tuple(notes)


def _matching_rows(db: Any, sql: str) -> tuple[int | None, str]:
    """(rows a simple UPDATE/DELETE's WHERE matches, counted read-only, or None; why not, when None)."""
    query = count_query(sql, sqlglot_dialect(db.dialect))
    if query is None:
        return None, "not a simple UPDATE/DELETE of one table, so its rows are not counted before it runs"
    try:
        if not classify_sql(query, db.dialect).is_read:  # its WHERE calls something with side effects
            return None, "its WHERE is not a plain read, so its rows are not counted before it runs"
        frame, _ = db.query(query, 1)
        return int(frame.iloc[0, 0]), ""
    except Exception as exc:  # the count is advice for the approver: its failure is said, never fatal
        return None, f"counting its rows failed ({type(exc).__name__})"


def _classify(sql: str, dialect: str) -> Any:
    if not isinstance(sql, str) or not sql.strip():
        raise ToolError("sql must be a non-empty string holding one statement")
    try:
        return classify_sql(sql, dialect)
    except SQLClassificationError as exc:
        raise ToolError(f"Cannot run this SQL: {exc}.") from None


def _write_classifier(dialect: str) -> Callable[[dict[str, Any]], tuple[str, str]]:
    def classify(arguments: dict[str, Any]) -> tuple[str, str]:
        classification = classify_sql(str(arguments.get("sql", "")), dialect)
        kind = "write" if classification.kind == "read" else classification.kind
        return kind, f"{arguments.get('sql', '')!s} [{classification.summary}]"

    return classify


def run_governed(backend: Any, direct: Callable[[str], int | None], sql: str, dialect: str,
                 context: ToolContext, connector: Connector,
                 count_rows: Callable[[str], tuple[int | None, str]] | None = None) -> str:
    """One governed write: previewed and then asked when it can be, else asked first and run directly.

    Both paths ask through ``context.approve`` (the policy sees ``previewable``
    and the sensitivity of every table touched) and audit a ``governed_write``
    with the outcome. ``count_rows(sql)`` gives the rows an unpreviewed write's
    ``WHERE`` matches (read-only) and why not when it cannot; None: unknown.
    """
    classification = _classify(sql, dialect)
    kind = "write" if classification.kind == "read" else classification.kind
    classification = dataclasses.replace(classification, kind=kind)
    harness = context.harness
    run = harness.current_run if harness is not None else None
    use = run.current_tool_use if run is not None else None
    use_id = use.id if use is not None else None
    ask = context.approve
    if ask is None:
        raise ToolError("Refused: this write tool needs the approval guard (install the connector registry).")

    named = tables_named(sql, sqlglot_dialect(dialect))
    declared = {**context.glossary_classes, **connector.sensitivity}

    def on_outcome(preflight: Preflight | None, outcome: str, previewed: bool = True) -> None:
        tables = [t for t, _ in preflight.tables] if preflight is not None else []
        tables += [str(t) for t in named.tables if str(t) not in tables]
        rows = preflight.rows_affected if preflight is not None else None
        if harness is None:  # a tool called outside a harness has no audit log to write to
            return
        try:
            audit(harness.audit, "governed_write", connector=connector.name, environment=connector.environment,
                  statement=sql, tables=tables, rows=rows, outcome=outcome, previewed=previewed,
                  tool_use_id=use_id)
        except AuditError as exc:  # the outcome stands; the user is told the log missed it
            harness.emit(Notice(text=f"The audit log could not record a {outcome} write: {exc}",
                                level="warning"))

    why_not = preview_refusal(classification, sql, dialect)
    if why_not is not None:
        sensitivity, notes = _sensitivity(named, (), dialect, declared)
        matching, not_counted = count_rows(sql) if count_rows is not None and len(classification.statements) == 1 else (
            None, "the engine gives no row count before it runs")
        preflight = Preflight(statement=sql, engine=dialect, kind=kind,
                              keyword=classification.statements[0].keyword, rows_affected=None, previewed=False,
                              notes=(f"no preview: {why_not}", *((not_counted,) if not_counted else ()), *notes),
                              rows_matching=matching)
        decision = ask(ApprovalRequest(
            tool=context.tool_name, connector=connector.name, safety=kind, arguments={"sql": sql},
            summary=f"{sql} [{classification.summary}] NO PREVIEW: {why_not}; {preflight.headline()}",
            tool_use_id=use_id, previewable=False, preflight=preflight, sensitivity=sensitivity))
        if not decision.approved:
            raise ToolError(f"Not run: {context.tool_name} is a {kind} call and was denied ({decision.reason}). "
                            "Nothing was executed or changed.")
        if len(classification.statements) > 1:
            raise ToolError(f"Refused: {len(classification.statements)} statements; send one statement per call.")
        try:
            done = direct(sql)
        except ToolError:
            on_outcome(None, "failed", False)
            raise
        done = done if done is not None and done >= 0 else None  # -1: the driver gives no count
        on_outcome(dataclasses.replace(preflight, rows_affected=done), "committed", False)
        affected = f"{done:,} rows affected" if done is not None else "row count unknown"
        return f"Executed {classification.statements[0].keyword} ({kind}) without a preview; {affected}."

    def approve(preflight: Preflight) -> Any:
        sensitivity, notes = _sensitivity(named, preflight.tables, dialect, declared)
        preflight = dataclasses.replace(preflight, notes=preflight.notes + notes)
        return ask(ApprovalRequest(
            tool=context.tool_name, connector=connector.name, safety=kind, arguments={"sql": sql},
            summary=preflight.headline(), tool_use_id=use_id, previewable=True, preflight=preflight,
            sensitivity=sensitivity))

    return governed_write(backend, sql, classification, approve, on_outcome=on_outcome)


def add_sql_execute(connector: Connector, db: Any) -> None:
    """Add ``execute`` to a sql connector: previewed on PostgreSQL, asked first (with its matching rows) elsewhere."""
    classify = _write_classifier(db.dialect)
    if db.dialect == "postgresql":

        @connector.tool(safety="write", classify=classify, previewed=True)
        def execute(sql: str, context: ToolContext) -> str:
            """Run one data-changing statement (INSERT, UPDATE, CREATE, ...) in a transaction the user previews, then commits or rolls back.

            Args:
                sql: Exactly one statement (no BEGIN/COMMIT/ROLLBACK: the preview transaction is managed for you).
            """
            return run_governed(PostgresPreview(db), db.execute, sql, db.dialect, context, connector,
                                count_rows=lambda statement: _matching_rows(db, statement))

    else:
        @connector.tool(safety="write", classify=classify, previewed=True)
        def execute(sql: str, context: ToolContext) -> str:  # engines without a preview transaction
            """Run one data-changing statement (INSERT, UPDATE, CREATE, ...) after the user approves it.

            This engine has no preview transaction: the approval says so and shows how many rows the WHERE matches.

            Args:
                sql: Exactly one statement.
            """
            return run_governed(None, db.execute, sql, db.dialect, context, connector,
                                count_rows=lambda statement: _matching_rows(db, statement))


def add_duckdb_execute(connector: Connector, database: str, timeout_s: float) -> None:
    """Add a previewed ``execute`` writing to the DuckDB database file ``database``."""

    @connector.tool(safety="write", classify=_write_classifier("duckdb"), previewed=True)
    def execute(sql: str, context: ToolContext) -> str:
        """Run one data-changing statement on the connector's database file in a transaction the user previews, then commits or rolls back.

        Args:
            sql: Exactly one statement (no BEGIN/COMMIT/ROLLBACK: the preview transaction is managed for you).
        """
        backend = DuckDBPreview(database, timeout_s)
        return run_governed(backend, backend.run_direct, sql, "duckdb", context, connector)
