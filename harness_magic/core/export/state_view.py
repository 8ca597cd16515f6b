"""The run's state panel (:class:`~harness_magic.core.transcript.run_state.RunState`) as HTML and Markdown.

Contract: every value is escaped (it comes from the model, the data or the
user): the panel's only markup is its own, inline-styled, with no script and
no network. An empty state (nothing beyond the goal) renders as ``""``, so runs
without a plan, checks, questions or assumptions look as they did.
"""

from __future__ import annotations

import html

from harness_magic.core.text.safe_markdown import escape_markdown_html
from harness_magic.core.transcript.run_state import RunState

__all__ = ["state_html", "state_markdown", "STATE_TITLE"]

STATE_TITLE = "run state"
_e = html.escape
_BOX = ("border:1px solid #d0d7de;border-radius:6px;padding:4px 8px;margin:4px 0;background:#f6f8fa;"
        "font-size:0.9em")
_MUTED = "color:#57606a"
_MARK = {"pending": "☐", "in_progress": "◐", "done": "☑", "blocked": "⚠"}
_LEVEL_COLOR = {"high": "#1a7f37", "medium": "#9a6700", "low": "#cf222e"}


def _row(label: str, body: str, cls: str) -> str:
    return f'<div class="agent-state-{cls}"><span style="{_MUTED}">{_e(label)}</span> {body}</div>'


def _items(values: list[str], cls: str) -> str:
    return (f'<ul class="agent-state-{cls}" style="margin:0 0 2px 0;padding-left:20px">'
            + "".join(f"<li>{v}</li>" for v in values) + "</ul>")


def state_html(state: RunState, *, live: bool = False) -> str:
    """The panel shown above the transcript; ``live`` shows pending waits as waiting (the final form
    shows an unanswered question as unanswered)."""
    if state.empty:
        return ""
    box = _BOX + (";line-height:1.4" if live else "")  # a widget's HTML inherits the tall widget line height
    parts = [f'<div class="agent-state" style="{box}"><div style="{_MUTED};font-weight:600">{STATE_TITLE}</div>']
    if state.goal:
        parts.append(_row("goal", _e(state.goal), "goal"))
    if state.plan:
        parts.append(_row("plan", f'<span style="{_MUTED}">({_e(state.plan_summary())})</span>', "plan-head"))
        parts.append(_items([f'<span title="{_e(p.status.replace("_", " "), quote=True)}">{_MARK[p.status]}</span> '
                             f'{_e(p.title)}' + (f' <span style="{_MUTED}">— {_e(p.note)}</span>' if p.note else "")
                             for p in state.plan], "plan"))
    for tool in state.approvals_pending:
        parts.append(_row("waiting for you:", f"approve <code>{_e(tool)}</code>", "waiting"))
    for q in state.questions:
        if q.answer is None:
            label = "waiting for you:" if live else "unanswered:"
            options = f' <span style="{_MUTED}">[{_e(" / ".join(q.options))}]</span>' if q.options else ""
            parts.append(_row(label, _e(q.question) + options, "waiting"))
        else:
            wait = f", {q.wait_s:.1f} s" if q.wait_s is not None else ""
            parts.append(_row("asked:", f"{_e(q.question)} → <b>{_e(q.shown_answer)}</b> "
                              f'<span style="{_MUTED}">({_e(q.source or "?")}{wait})</span>', "question"))
    if state.skills:
        parts.append(_row("skills:", _e(", ".join(state.skills)), "skills"))
    if state.checks:
        parts.append(_row("verification", f'<span style="{_MUTED}">({_e(state.verification_summary())})</span>',
                          "checks-head"))
        rows = []
        for c in state.checks:
            mark = ('<span style="color:#1a7f37">passed</span>' if c.ok
                    else '<span style="color:#cf222e;font-weight:600">failed</span>')
            where = f' on <code>{_e(c.handle)}</code>' if c.handle else ""
            why = f": {_e(c.detail)}" if c.detail and not c.ok else ""
            again = f' <span style="{_MUTED}">(failed before)</span>' if c.ok and c.failed_before else ""
            rows.append(f"{mark} {_e(c.rule)}{where}{why}{again}")
        parts.append(_items(rows, "checks"))
    if state.assumptions:
        parts.append(_row("assumptions", "", "assumptions-head"))
        parts.append(_items([_e(state.assumption_label(a)) for a in state.assumptions], "assumptions"))
    trailer = state.trailer
    if trailer.confidence:
        color = _LEVEL_COLOR[trailer.confidence]
        reason = f" — {_e(trailer.reason)}" if trailer.reason else ""
        parts.append(_row("confidence:", f'<b style="color:{color}">{_e(trailer.confidence)}</b>{reason}',
                          "confidence"))
    if trailer.open_questions:
        parts.append(_row("open questions", "", "open-head"))
        parts.append(_items([_e(q) for q in trailer.open_questions], "open"))
    parts.append("</div>")
    return "".join(parts)


def state_markdown(state: RunState) -> str:
    """The panel for the ``.md`` export: a fenced-free block of escaped lines, or ``""``."""
    if state.empty:
        return ""
    lines = [f"**{STATE_TITLE}**", ""]
    for line in state.lines():
        indent = len(line) - len(line.lstrip(" "))
        text = escape_markdown_html(line.strip().removeprefix("- "))
        lines.append(("  " if indent else "") + "- " + text)
    return "\n".join(lines) + "\n"
