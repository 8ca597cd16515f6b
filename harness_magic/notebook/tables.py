"""The tables the line magics show: ``%agent_vars`` (handles), ``%agent_sandbox`` (layers), ``%agent_status``.

Rows are plain dicts; each table renders as HTML (every cell escaped) and as
aligned plain text, so a kernel and a terminal show the same content.
"""

from __future__ import annotations

import html
from typing import Any

from harness_magic.core.cache.protocol import HandleCache

__all__ = ["handle_rows", "sandbox_rows", "table_html", "table_text", "export_rows_html", "rows_text",
           "pairs_html", "HANDLE_COLUMNS", "SANDBOX_COLUMNS"]

HANDLE_COLUMNS = ("name", "type", "shape", "size", "where", "run", "turn", "tool")
"""Columns of the ``%agent_vars`` table, in :func:`handle_rows` order."""
SANDBOX_COLUMNS = ("layer", "state", "detail")
"""Columns of the ``%agent_sandbox`` table, in :func:`sandbox_rows` order."""
_NOT_HOLDING = ("unavailable", "not ")
"""Prefixes of a layer's text status that mean it does not hold (mirrors the sandbox backend)."""


def handle_rows(cache: HandleCache, runs: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """name, type, shape, size, where, run, turn, tool for every handle (``runs``: handle -> run id)."""
    rows = []
    for entry in cache.metadata():
        shape = entry.get("shape")
        size = next((entry[k] for k in ("size_bytes", "size", "nbytes") if entry.get(k) is not None), None)
        where = entry.get("location") or "memory"
        if where == "disk" and entry.get("storage"):
            where = f"disk ({entry['storage']})"
        rows.append({
            "name": entry.get("name"),
            "type": entry.get("type"),
            "shape": "×".join(str(s) for s in shape) if isinstance(shape, (list, tuple)) else (shape or ""),
            "size": _size(size),
            "where": where,
            "run": (runs or {}).get(entry["name"], ""),
            "turn": "" if entry.get("turn") is None else entry.get("turn"),
            "tool": entry.get("tool") or "",
        })
    return rows


def sandbox_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """layer, state (on/off), detail for each entry of :func:`~harness_magic.core.execution.sandbox.probe_confinement`."""
    from harness_magic.core.execution.sandbox import confinement_gap

    rows = []
    for layer, value in report.items():
        holds = value is True or (isinstance(value, str) and not value.startswith(_NOT_HOLDING))
        if layer == "confined":
            detail = "untrusted code may run" if holds else f"{confinement_gap(report)}: the worker refuses to start"
        else:
            detail = value if isinstance(value, str) else ""
        rows.append({"layer": layer, "state": "on" if holds else "off", "detail": detail})
    return rows


def _size(nbytes: Any) -> str:
    if not isinstance(nbytes, (int, float)):
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""


def _numeric(rows: list[dict[str, Any]], column: str) -> bool:
    """A column of numbers (blanks allowed, at least one number): right-aligned; text reads from the left."""
    values = [r[column] for r in rows if r[column] != ""]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def table_html(rows: list[dict[str, Any]], columns: tuple[str, ...], css_class: str = "agent-table") -> str:
    """An HTML table of ``columns`` of ``rows``, every cell escaped; text left-aligned, numbers right-aligned.

    The alignment is explicit on every cell: JupyterLab's stylesheet right-aligns table cells otherwise.
    """
    align = {c: "right" if _numeric(rows, c) else "left" for c in columns}
    head = "".join(f'<th style="text-align:{align[c]};padding:1px 8px">{html.escape(c)}</th>' for c in columns)
    body = "".join(
        "<tr>" + "".join(f'<td style="text-align:{align[c]};padding:1px 8px">{html.escape(str(r[c]))}</td>'
                         for c in columns) + "</tr>"
        for r in rows
    )
    return f'<table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def table_text(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """The same table as aligned plain text (a header line, then one line per row); numbers right-aligned."""
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    right = {c: _numeric(rows, c) for c in columns}

    def cell(text: str, c: str) -> str:
        return text.rjust(widths[c]) if right[c] else text.ljust(widths[c])

    lines = ["  ".join(cell(c, c) for c in columns).rstrip()]
    lines += ["  ".join(cell(str(r[c]), c) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def export_rows_html(rows: list[dict[str, Any]]) -> str:
    """The ``%agent_vars`` table of :func:`handle_rows` as HTML."""
    return table_html(rows, HANDLE_COLUMNS, "agent-vars")


def rows_text(rows: list[dict[str, Any]]) -> str:
    """The ``%agent_vars`` table of :func:`handle_rows` as plain text."""
    return table_text(rows, HANDLE_COLUMNS)


def pairs_html(rows: list[tuple[str, Any]]) -> str:
    """A two-column key/value table (``%agent_status``), every cell escaped."""
    body = "".join(f'<tr><th style="text-align:left;padding:1px 8px">{html.escape(k)}</th>'
                   f'<td style="text-align:left;padding:1px 8px">{html.escape(str(v))}</td></tr>' for k, v in rows)
    return f'<table class="agent-status-table">{body}</table>'
