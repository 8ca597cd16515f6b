"""The writes a run attempted, read back from its run log (for ``no_writes`` graders and reports)."""

from __future__ import annotations

from typing import Any

__all__ = ["write_attempts", "attempt_line", "SQL_DIALECTS", "WRITE_SAFETY"]

WRITE_SAFETY = ("write", "destructive", "external")
"""Approval-event safety classes that are writes."""

SQL_DIALECTS = {"duckdb": "duckdb", "spark": "spark", "sql": "sqlite"}
"""Connector name -> SQL dialect for classifying a statement sent to its read tool (others: postgresql)."""


def _tool_uses(records: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(turn, tool_use block) of every tool call the model made, in order."""
    out = []
    for record in records:
        if record.get("type") != "turn":
            continue
        message = (record.get("response") or {}).get("message") or {}
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                out.append((int(record.get("turn") or 0), block))
    return out


def write_attempts(records: list[dict[str, Any]], dialects: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every write the run attempted, from its run-log records, in order.

    Each is ``{"tool", "statement", "safety", "outcome", "turn"}``; ``outcome`` is
    ``approved`` (the approval policy let it run), ``denied`` (the policy refused it)
    or ``refused`` (a read-only tool such as ``sql__query`` refused the statement,
    which the connector's classifier marks as a write, before sending it).
    """
    from harness_magic.core.execution.connectors.classify import SQLClassificationError, classify_sql

    dialects = {**SQL_DIALECTS, **(dialects or {})}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in records:
        if record.get("type") == "event" and record.get("event") == "approval" and record.get("safety") in WRITE_SAFETY:
            seen.add(str(record.get("tool_use_id")))
            out.append({"tool": record.get("tool"), "statement": str(record.get("summary") or ""),
                        "safety": record.get("safety"), "outcome": "approved" if record.get("approved") else "denied",
                        "turn": record.get("turn")})
    for turn, use in _tool_uses(records):
        name, arguments = str(use.get("name") or ""), use.get("input") or {}
        connector, _, tool = name.partition("__")
        if tool != "query" or str(use.get("id")) in seen or not isinstance(arguments, dict):
            continue
        sql = arguments.get("sql")
        if not isinstance(sql, str):
            continue  # the tool refused it as not SQL (classify_sql raises SQLClassificationError for it too)
        try:
            classification = classify_sql(sql, dialects.get(connector, "postgresql"))
        except SQLClassificationError:
            continue  # not SQL the classifier can read: the tool refused it as such, not as a write
        if not classification.is_read:
            out.append({"tool": name, "statement": f"{sql} [{classification.summary}]", "safety": classification.kind,
                        "outcome": "refused", "turn": turn})
    out.sort(key=lambda a: int(a.get("turn") or 0))
    return out


def attempt_line(attempt: dict[str, Any]) -> str:
    return f"{attempt['outcome']}: {attempt['tool']}: {attempt['statement']}"
