"""Approve or deny a connector's tool call from the cell that is running.

The agent asks while the cell executes, and a busy kernel processes no widget
clicks, so buttons could never answer. The kernel's stdin request can: the
approver shows what is asked (escaped HTML) and then calls ``input()``, which
JupyterLab and Notebook render as a text box in the cell and terminal IPython
as a prompt. A front end without stdin (nbclient, nbval) denies the call.
The plain-text request and the prompt show control characters escaped
(:func:`~harness_magic.core.transcript.scrub.escape_control`): the model's arguments
cannot rewrite the terminal around the question.
"""

from __future__ import annotations

import html
import json
from typing import Any

from harness_magic.core.transcript.scrub import escape_control

__all__ = ["StdinApprover", "request_html", "request_text", "APPROVE_ANSWERS", "NO_STDIN_REASON"]

APPROVE_ANSWERS = ("y", "yes")
"""Answers that approve; anything else (an empty line included) denies."""
NO_STDIN_REASON = ("it needs approval, and approving needs an interactive front end that answers input() "
                   "(this one has no stdin)")
"""Reason given to the model when the front end cannot prompt."""
ARGUMENTS_PREVIEW_CHARS = 2000
"""Arguments longer than this are cut in the display (the model's full call still runs as asked)."""


def _arguments(request: Any) -> str:
    text = json.dumps(request.arguments, indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= ARGUMENTS_PREVIEW_CHARS else text[:ARGUMENTS_PREVIEW_CHARS] + "\n…"


def request_text(request: Any) -> str:
    """The request as plain text: tool, connector, safety, summary, arguments."""
    lines = [f"approval needed: {request.tool} (connector {request.connector or '-'}, {request.safety})"]
    if request.summary:
        lines.append(request.summary)
    lines.append(_arguments(request))
    return escape_control("\n".join(lines))


def request_html(request: Any) -> str:
    """The request as an escaped HTML box."""
    e = html.escape
    rows = [("tool", request.tool), ("connector", request.connector or "-"), ("safety", request.safety)]
    if request.summary:
        rows.append(("summary", request.summary))
    cells = "".join(f'<tr><th style="text-align:left;padding:1px 8px">{e(k)}</th>'
                    f'<td style="text-align:left;padding:1px 8px">{e(str(v))}</td></tr>' for k, v in rows)
    return (f'<div class="agent-approval" style="border:1px solid #9a6700;border-radius:4px;padding:4px 8px">'
            f'<b style="color:#9a6700">Approval needed</b><table>{cells}</table>'
            f'<pre style="margin:2px 0">{e(_arguments(request))}</pre></div>')


class StdinApprover:
    """``approver(request) -> ApprovalDecision`` that asks in the running cell through ``input()``."""

    def __call__(self, request: Any) -> Any:
        from IPython.core.error import StdinNotImplementedError
        from IPython.display import display

        from harness_magic.core.execution.connectors import ApprovalDecision

        display({"text/html": request_html(request), "text/plain": request_text(request)}, raw=True)
        try:
            answer = input(escape_control(f"Approve {request.tool}? [y/N] "))
        except (StdinNotImplementedError, EOFError):
            return ApprovalDecision(False, NO_STDIN_REASON)
        approved = answer.strip().lower() in APPROVE_ANSWERS
        return ApprovalDecision(approved, "approved by the user" if approved else "the user denied it")
