"""Write tools under governance: the ``execute`` tool of the sql and duckdb connectors.

On PostgreSQL and a DuckDB database file, ``execute`` is a previewed tool
(:mod:`.preview`): the guard only refuses what the policy refuses outright
(e.g. a ``prod`` connector without ``allow_writes``); the statement then runs
in a transaction, the approver sees the preflight summary, and the write is
committed or rolled back. Other SQL engines keep the direct path (approve,
then run in its own transaction): the policy treats those writes as
unpreviewable. Every previewed write is audited (``governed_write``) with its
outcome and row count; the audit never holds row values.

The connector's ``sensitivity`` option (``{"table.column" or "column": class}``)
classes the data: a previewed write touching a table with a classed column
(or any table, for a bare column name) carries those classes in its approval
request, so the policy table can key on them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from harness_magic.core.execution.connectors.approval import ApprovalRequest
from harness_magic.core.execution.connectors.classify import SQLClassificationError, classify_sql
from harness_magic.core.execution.connectors.policy import ENVIRONMENTS, PolicyError
from harness_magic.core.execution.connectors.preview import (
    DuckDBPreview,
    PostgresPreview,
    Preflight,
    governed_write,
    preview_refusal,
)
from harness_magic.core.execution.connectors.registry import Connector, ToolContext
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


def _classes(tables: tuple[tuple[str, Any], ...], sensitivity: Mapping[str, str]) -> tuple[str, ...]:
    names = {t.lower().rsplit(".", 1)[-1].strip('"') for t, _ in tables}
    found = {cls for key, cls in sensitivity.items() if cls != "none" and
             ("." not in key or key.lower().rsplit(".", 1)[0].rsplit(".", 1)[-1] in names)}
    return tuple(sorted(found))


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
                 context: ToolContext, connector: Connector) -> str:
    """One governed write: previewed and then asked when it can be, else asked first and run directly.

    Both paths ask through ``context.approve`` (the policy sees ``previewable``)
    and audit a ``governed_write`` with the outcome.
    """
    classification = _classify(sql, dialect)
    kind = "write" if classification.kind == "read" else classification.kind
    classification = dataclasses.replace(classification, kind=kind)
    harness = context.harness
    run = getattr(harness, "current_run", None)
    use_id = getattr(getattr(run, "current_tool_use", None), "id", None)
    if context.approve is None:
        raise ToolError("Refused: this write tool needs the approval guard (install the connector registry).")

    def on_outcome(preflight: Preflight | None, outcome: str, previewed: bool = True) -> None:
        tables = [t for t, _ in preflight.tables] if preflight is not None else []
        rows = preflight.rows_affected if preflight is not None else None
        try:
            audit(harness.audit, "governed_write", connector=connector.name, environment=connector.environment,
                  statement=sql, tables=tables, rows=rows, outcome=outcome, previewed=previewed,
                  tool_use_id=use_id)
        except AuditError as exc:  # the outcome stands; the user is told the log missed it
            harness.emit(Notice(text=f"The audit log could not record a {outcome} write: {exc}",
                                level="warning"))

    why_not = preview_refusal(classification, sql, dialect)
    if why_not is not None:
        preflight = Preflight(statement=sql, engine=dialect, kind=kind,
                              keyword=classification.statements[0].keyword, rows_affected=None, previewed=False,
                              notes=(f"no preview: {why_not}",))
        decision = context.approve(ApprovalRequest(
            tool=context.tool_name, connector=connector.name, safety=kind, arguments={"sql": sql},
            summary=f"{sql} [{classification.summary}] NO PREVIEW: {why_not}", tool_use_id=use_id,
            previewable=False, preflight=preflight))
        if not decision.approved:
            raise ToolError(f"Not run: {context.tool_name} is a {kind} call and was denied ({decision.reason}). "
                            "Nothing was executed or changed.")
        if len(classification.statements) > 1:
            raise ToolError(f"Refused: {len(classification.statements)} statements; send one statement per call.")
        try:
            count = direct(sql)
        except ToolError:
            on_outcome(None, "failed", False)
            raise
        on_outcome(dataclasses.replace(preflight, rows_affected=count), "committed", False)
        affected = f"{count:,} rows affected" if count is not None and count >= 0 else "row count unknown"
        return f"Executed {classification.statements[0].keyword} ({kind}) without a preview; {affected}."

    def approve(preflight: Preflight) -> Any:
        return context.approve(ApprovalRequest(
            tool=context.tool_name, connector=connector.name, safety=kind, arguments={"sql": sql},
            summary=preflight.headline(), tool_use_id=use_id, previewable=True, preflight=preflight,
            sensitivity=_classes(preflight.tables, connector.sensitivity)))

    return governed_write(backend, sql, classification, approve, on_outcome=on_outcome)


def add_sql_execute(connector: Connector, db: Any) -> None:
    """Add ``execute`` to a sql connector: previewed on PostgreSQL, direct elsewhere."""
    classify = _write_classifier(db.dialect)
    if db.dialect == "postgresql":

        @connector.tool(safety="write", classify=classify, previewed=True)
        def execute(sql: str, context: ToolContext) -> str:
            """Run one data-changing statement (INSERT, UPDATE, CREATE, ...) in a transaction the user previews, then commits or rolls back.

            Args:
                sql: Exactly one statement (no BEGIN/COMMIT/ROLLBACK: the preview transaction is managed for you).
            """
            return run_governed(PostgresPreview(db), db.execute, sql, db.dialect, context, connector)

        return

    @connector.tool(safety="write", classify=classify)
    def execute(sql: str, context: ToolContext) -> str:  # noqa: F811 - the direct path for engines without a preview
        """Run one data-changing statement (INSERT, UPDATE, CREATE, ...) after the user approves it.

        Args:
            sql: Exactly one statement.
        """
        classification = _classify(sql, db.dialect)
        if len(classification.statements) > 1:
            raise ToolError(f"Refused: {len(classification.statements)} statements; send one statement per call.")
        try:
            count = db.execute(sql)
        except ToolError:
            _audit_direct(context, connector, sql, None, "failed")
            raise
        _audit_direct(context, connector, sql, count if count >= 0 else None, "committed")
        affected = f"{count:,} rows affected" if count >= 0 else "row count unknown"
        return f"Executed {classification.statements[0].keyword} ({classification.kind}); {affected}."


def _audit_direct(context: ToolContext, connector: Connector, sql: str, rows: int | None, outcome: str) -> None:
    """A ``governed_write`` record for a write run without a preview (approved by the guard before it ran)."""
    harness = context.harness
    run = getattr(harness, "current_run", None)
    use_id = getattr(getattr(run, "current_tool_use", None), "id", None)
    try:
        audit(getattr(harness, "audit", None), "governed_write", connector=connector.name,
              environment=connector.environment, statement=sql, tables=[], rows=rows, outcome=outcome,
              previewed=False, tool_use_id=use_id)
    except AuditError as exc:  # the outcome stands; the user is told the log missed it
        harness.emit(Notice(text=f"The audit log could not record a {outcome} write: {exc}", level="warning"))


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
