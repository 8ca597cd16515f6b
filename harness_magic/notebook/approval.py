"""How a request to approve a connector's (or memory's) write looks, in the cell and in a terminal.

Asking is :mod:`.asking`: in a notebook :func:`request_html` heads a widget
with Approve and Deny buttons (Commit for a previewed write); in a terminal
:func:`request_text` is printed above a ``[y/N]`` prompt the timeout cancels.
The plain-text request and the prompt show control characters escaped
(:func:`~harness_magic.core.transcript.scrub.escape_control`): the model's arguments
cannot rewrite the terminal around the question.

A governed write's request carries a preflight summary (:mod:`~harness_magic.core.execution.connectors.preview`):
rows affected, tables touched, a sample of the changed rows before and after,
whether it can be undone. Both forms show it; every value (the sampled rows
are the database's, not ours) is escaped the same way. A write that could not
be previewed says so in a warning line above everything else.
"""

from __future__ import annotations

import html
import json
from typing import Any

from harness_magic.core.transcript.scrub import escape_control

__all__ = ["request_html", "request_text", "approve_verb", "APPROVE_ANSWERS", "NO_PERSON_REASON"]

APPROVE_ANSWERS = ("y", "yes")
"""Answers that approve; anything else (an empty line included) denies."""
NO_PERSON_REASON = ("it needs approval, and nobody can approve it here (this front end takes no input from a "
                    "person: nbclient, nbval, a pipe)")
"""Reason given to the model when there is no person to ask."""
ARGUMENTS_PREVIEW_CHARS = 2000
"""Arguments longer than this are cut in the display (the model's full call still runs as asked)."""


def _arguments(request: Any) -> str:
    text = json.dumps(request.arguments, indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= ARGUMENTS_PREVIEW_CHARS else text[:ARGUMENTS_PREVIEW_CHARS] + "\n…"


def _environment(request: Any) -> str:
    return f", {request.environment}" if request.environment != "dev" else ""


def _warning(preflight: Any) -> str | None:
    if preflight is None or preflight.previewed:
        return None
    return "NOT PREVIEWED: approving runs it for real; it cannot be rolled back from here."


def request_text(request: Any) -> str:
    """The request as plain text: tool, connector, safety, summary, preflight, arguments."""
    lines = [f"approval needed: {request.tool} (connector {request.connector or '-'}, {request.safety}"
             f"{_environment(request)})"]
    preflight = request.preflight
    warning = _warning(preflight)
    if warning:
        lines.insert(0, warning)
    if preflight is not None:
        lines.append(preflight.text())
    elif request.summary:
        lines.append(request.summary)
    lines.append(_arguments(request))
    return escape_control("\n".join(lines))


def _sample_html(label: str, table: str, rows: list[dict[str, Any]]) -> str:
    e = html.escape
    columns = list(rows[0]) if rows else []
    head = "".join(f'<th style="padding:1px 6px">{e(str(c))}</th>' for c in columns)
    body = "".join("<tr>" + "".join(f'<td style="padding:1px 6px">{e(escape_control(str(r.get(c))))}</td>'
                                    for c in columns) + "</tr>" for r in rows)
    return (f'<div><i>{e(label)} ({e(table)}, {len(rows)} of the changed rows)</i>'
            f'<table style="font-size:90%"><tr>{head}</tr>{body}</table></div>')


def _preflight_html(preflight: Any) -> str:
    e = html.escape
    parts = [f"<div><b>{e(escape_control(preflight.headline()))}</b></div>",
             f"<div>undo: {e(preflight.undo)}</div>"]
    parts += [f"<div>note: {e(escape_control(n))}</div>" for n in preflight.notes]
    for label, samples in (("before", preflight.before), ("after", preflight.after)):
        parts += [_sample_html(label, table, rows) for table, rows in samples.items()]
    return f'<div class="agent-preflight" style="margin:4px 0">{"".join(parts)}</div>'


def request_html(request: Any) -> str:
    """The request as an escaped HTML box."""
    e = html.escape
    rows = [("tool", request.tool), ("connector", request.connector or "-"), ("safety", request.safety)]
    if request.environment != "dev":
        rows.append(("environment", request.environment))
    if request.summary and request.preflight is None:
        rows.append(("summary", request.summary))
    warning = _warning(request.preflight)
    warning = f'<div style="color:#cf222e;font-weight:bold">{e(warning)}</div>' if warning else ""
    preflight = _preflight_html(request.preflight) if request.preflight is not None else ""
    cells = "".join(f'<tr><th style="text-align:left;padding:1px 8px">{e(k)}</th>'
                    f'<td style="text-align:left;padding:1px 8px">{e(str(v))}</td></tr>' for k, v in rows)
    return (f'<div class="agent-approval" style="border:1px solid #9a6700;border-radius:4px;padding:4px 8px">'
            f'{warning}<b style="color:#9a6700">Approval needed</b><table>{cells}</table>{preflight}'
            f'<pre style="margin:2px 0">{e(_arguments(request))}</pre></div>')


def approve_verb(request: Any) -> str:
    """``Commit`` for a previewed write (its transaction is open), else ``Approve``."""
    return "Commit" if request.preflight is not None and request.preflight.previewed else "Approve"
