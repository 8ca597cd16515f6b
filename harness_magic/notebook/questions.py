"""How the agent's ``ask_user`` question looks, and what a typed reply answers.

Asking is :mod:`.asking`: in a notebook the question is a widget in the cell
(:func:`question_html` is its header, the options are buttons), in a terminal
it is :func:`question_text` and a prompt the timeout cancels, where a typed
number picks an option (:func:`answer_for`). The model's Markdown is rendered
inert (:func:`~harness_magic.core.text.safe_markdown.markdown_to_html`), every
other string escaped; the plain text shows control characters escaped.
"""

from __future__ import annotations

import html
from typing import Any

from harness_magic.core.transcript.scrub import escape_control

__all__ = ["question_html", "question_text", "answer_for", "waiting_note"]


def question_text(request: Any) -> str:
    """The question as plain text: the question, why, and the numbered options."""
    lines = [f"question from the agent: {request.question}"]
    if request.why:
        lines.append(f"why: {request.why}")
    lines += [f"  {n}. {option}" for n, option in enumerate(request.options, 1)]
    return escape_control("\n".join(lines))


def question_html(request: Any) -> str:
    """The question as an HTML header: the question's Markdown rendered inert, why escaped (the options are
    the widget's buttons)."""
    from harness_magic.core.text.safe_markdown import markdown_to_html

    why = f'<div style="color:#57606a">why: {html.escape(request.why)}</div>' if request.why else ""
    body = markdown_to_html(request.question).strip()
    if body.count("<p>") == 1 and body.startswith("<p>") and body.endswith("</p>"):  # one line: no margins
        body = f"<div>{body[3:-4]}</div>"
    return (f'<div class="agent-question" style="border-left:3px solid #0969da;padding:2px 8px">'
            f'<b style="color:#0969da">The agent asks</b>{body}{why}</div>')


def waiting_note(request: Any) -> str:
    """The status line under an open question: how to answer and what happens without an answer."""
    how = "Click an option or type your own answer" if request.options else "Type your answer"
    if not request.timeout_s:
        return f"{how}; the agent waits for it."
    return f"{how}. No answer within {request.timeout_s:g} s: the agent goes on under an assumption it states."


def answer_for(request: Any, typed: str) -> str | None:
    """What a typed line answers: an option's number picks it, other text is the answer, empty is None."""
    typed = typed.strip()
    if not typed:
        return None
    if typed.isdigit() and 1 <= int(typed) <= len(request.options):
        return request.options[int(typed) - 1]
    return typed
