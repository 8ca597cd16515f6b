"""Run records as HTML: the notebook's final output and the ``.html`` export.

Contract: every value that came from the model, the data or the user is
escaped (:func:`html.escape`), and model Markdown is rendered and sanitized by
:mod:`harness_magic.core.text.safe_markdown` (no raw HTML, an allowlist of
tags, only ``data:`` images); the only other markup is the renderer's own, so
nothing in a transcript is ever active HTML or script and nothing loads from
the network. Charts are embedded as ``data:`` URIs and styles are inline: a
page from :func:`render_html_document` needs no network and no other file.
Pygments and markdown-it are imported when a transcript is first rendered.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any, Sequence

from harness_magic.core.export.record import RunRecord, ToolRecord, clip
from harness_magic.core.export.state_view import state_html
from harness_magic.core.text.counts import count
from harness_magic.core.export.views import (
    copy_key,
    display_result_text,
    hidden_chars_note,
    printed_output,
    render_footer_text,
    tool_call_source,
    tool_summary,
)

__all__ = [
    "render_run_html",
    "render_answer_html",
    "render_html_document",
    "render_tool_body_html",
    "render_snapshot_html",
    "render_code_html",
    "render_markdown_safe",
    "model_saw_html",
    "reminder_html",
    "printed_html",
    "copy_button_html",
]

_e = html.escape

_BOX = "border:1px solid #d0d7de;border-radius:6px;padding:4px 8px;margin:4px 0"
_MUTED = "color:#57606a;font-size:0.9em"
_PRE = "white-space:pre-wrap;word-break:break-word;margin:4px 0;font-size:0.9em"

def render_code_html(code: str, language: str = "python") -> str:
    """Highlighted code with inline styles (pygments escapes the source)."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name

        return highlight(code, get_lexer_by_name(language), HtmlFormatter(noclasses=True, nobackground=True))
    except Exception:  # no pygments or no lexer: plain, escaped
        return f'<pre style="{_PRE}">{_e(code)}</pre>'


def render_markdown_safe(text: str) -> str:
    """Model Markdown as sanitized HTML: no raw HTML, allowlisted tags, only ``data:`` images."""
    from harness_magic.core.text.safe_markdown import markdown_to_html

    return markdown_to_html(text)


def render_snapshot_html(name: str, snapshot: dict[str, Any]) -> str:
    """A snapshot as a table (MultiIndex levels, dtype row, ``+N more rows/columns``), every cell escaped."""
    from harness_magic.core.text.snapshot_view import snapshot_html

    return snapshot_html(name, snapshot)


def _img(data: str) -> str:
    """A chart at its natural size (shrunk only when wider than the page, never stretched)."""
    safe = re.sub(r"[^A-Za-z0-9+/=]", "", data)  # base64 alphabet only: cannot break out of the attribute
    return f'<img class="agent-chart" alt="chart" style="max-width:100%;height:auto" src="data:image/png;base64,{safe}"/>'


def _source_html(tool: ToolRecord) -> str:
    from harness_magic.core.text.hidden_chars import reveal

    source = tool_call_source(tool)
    if source is None:
        return ""
    language, text = source
    note = hidden_chars_note(text, language)
    warning = f'<div class="agent-hidden-chars" style="color:#cf222e;font-size:0.85em">{_e(note)}</div>' if note else ""
    text = reveal(text)  # what runs is what people read: hidden characters become visible escapes
    if language == "path":
        return f'{warning}<div class="agent-path" style="{_MUTED}">path: <code>{_e(text)}</code></div>'
    return (f'{warning}<div class="agent-code" style="overflow-x:auto;max-width:100%">'
            f"{render_code_html(text, language)}</div>")


def model_saw_html(text: str, label: str = "what the model saw") -> str:
    """The exact text the model received, collapsed behind one click."""
    return (f'<details class="agent-model-saw" style="{_MUTED}"><summary>{_e(label)}</summary>'
            f'<pre class="agent-model-text" style="{_PRE}">{_e(text)}</pre></details>')


_REMINDER_TAG = re.compile(r"^\s*\[harness[^\]\n]*\]\s*")
"""The tag the harness puts before its reminder text (``[harness reminder]``), dropped from the summary line."""
REMINDER_SUMMARY_CHARS = 90
"""Characters of a reminder shown on its folded line: enough for its first clause."""
REMINDER_EXPLANATION = ("The harness added this note to the model's next request (it nudges on stalled "
                        "progress, failing or repeated calls, the last turn and budgets); neither you nor "
                        "the model wrote it.")


def reminder_html(text: str) -> str:
    """A harness reminder, folded: its summary line says what it is and starts the note; opened, one line
    explains where it came from above the exact text the model received."""
    notes = [_REMINDER_TAG.sub("", line).strip() for line in text.splitlines()]
    gist = clip(" · ".join(n for n in notes if n), REMINDER_SUMMARY_CHARS)
    return (f'<details class="agent-model-saw agent-reminder" style="{_MUTED}">'
            f"<summary>harness note to the model: {_e(gist)}</summary>"
            f'<div class="agent-reminder-why">{_e(REMINDER_EXPLANATION)}</div>'
            f'<pre class="agent-model-text" style="{_PRE}">{_e(text)}</pre></details>')


def printed_html(tool: ToolRecord) -> str:
    """The live output a call printed (bounded), or ``""``."""
    text, more = printed_output(tool)
    if not text:
        return ""
    note = f'<div style="{_MUTED}">… {count(more, "line")} more above</div>' if more else ""
    return f'{note}<pre class="agent-stdout" style="{_PRE}">{_e(text)}</pre>'



def copy_button_html(key: str) -> str:
    """A hidden "copy code" button naming call ``key``: inert HTML, no script.

    In a running notebook the session's clipboard widget
    (:mod:`harness_magic.notebook.clipboard`) shows it and copies that call's
    code on a click; anywhere else (a saved notebook on GitHub, an export) it stays hidden.
    """
    return (f'<button type="button" class="agent-copy-code" data-agent-call="{_e(key, quote=True)}" hidden '
            'style="display:none;float:right;font-size:0.8em;margin:2px 0 2px 6px;cursor:pointer" '
            'title="Copy this call\'s code (what %agent_code puts into the next cell for it)">copy code</button>')


def render_tool_body_html(tool: ToolRecord, *, charts: bool = True, copy: str | None = None,
                          copy_nested: bool = False) -> str:
    """One call's section body: what it ran, its result for people, tables, charts, what the model saw.

    ``copy``: the call's :func:`copy_key`, to put a "copy code" button (:func:`copy_button_html`) above its code;
    ``copy_nested``: buttons for the calls of a subagent's nested transcript too.
    """
    source = tool_call_source(tool)
    parts: list[str] = [copy_button_html(copy)] if copy else []
    parts.append(_source_html(tool))
    shown_key = {"python": "code", "sql": "sql" if "sql" in tool.input else "query", "path": "path"}.get(
        source[0]) if source else None
    others = {k: v for k, v in tool.input.items() if k != shown_key}
    if others:
        parts.append(f'<pre style="{_PRE}">{_e(json.dumps(others, ensure_ascii=False, indent=1, default=str))}</pre>')
    if tool.subagent is not None:
        nested = render_run_html(tool.subagent, nested=True, copy_buttons=copy_nested)
        parts.append(f'<div style="margin-left:12px">{nested}</div>')
    if tool.result is None:
        parts.append(printed_html(tool))
        if tool.interrupted:
            parts.append(f'<div class="agent-interrupted" style="color:#9a6700">interrupted</div>')
    else:
        shown = display_result_text(tool)
        color = "#cf222e" if tool.is_error else "#57606a"
        if shown:
            parts.append(f'<div style="color:{color};font-size:0.85em">{"error" if tool.is_error else "result"}</div>'
                         f'<pre class="agent-result" style="{_PRE}">{_e(shown)}</pre>')
        for name, snap in zip(tool.handles, tool.snapshots):
            if snap:
                parts.append(render_snapshot_html(name, snap))
    if charts:
        parts.extend(_img(c) for c in tool.charts)
    elif tool.charts:
        parts.append(f'<div style="{_MUTED}">{count(len(tool.charts), "chart")}, shown with the answer</div>')
    if tool.result is not None:
        parts.append(model_saw_html(tool.result))
    return "".join(parts)



def render_run_html(record: RunRecord, *, nested: bool = False, open_tools: bool = False,
                    final_form: bool = False, copy_buttons: bool = False) -> str:
    """The transcript of one run: text, and one ``<details>`` per tool call; reminders only as model input.

    ``final_form``: the transcript sits under the answer, so the answer's text
    and the charts (shown above it) are not repeated. ``copy_buttons``: a
    (hidden, inert) "copy code" button per code or SQL call, for the notebook.
    """
    parts: list[str] = []
    answer = record.result.text if final_form and record.result is not None else None
    if nested and record.prompt:
        parts.append(f'<div style="{_MUTED}">task: {_e(clip(record.prompt, 300))}</div>')
    for item in record.items:
        if isinstance(item, ToolRecord):
            opened = " open" if open_tools else ""
            body = render_tool_body_html(item, charts=not final_form, copy_nested=copy_buttons,
                                         copy=copy_key(record, item) if copy_buttons else None)
            parts.append(
                f'<details class="agent-tool agent-{item.kind}" style="{_BOX}"{opened}>'
                f"<summary>{_e(tool_summary(item))}</summary>{body}</details>"
            )
        elif item[0] == "text":
            if answer is not None and item is record.items[-1] and item[1].strip() == answer.strip():
                continue
            parts.append(f'<div class="agent-text">{_cited_html(item[1], record)}</div>')
        elif item[0] == "reminder":
            parts.append(reminder_html(item[1]))
        elif item[0] == "notice":  # as the live view shows it: the level is named only when it is not info
            level = "" if item[1] == "info" else f"{_e(item[1])}: "
            parts.append(f'<div class="agent-notice" style="{_MUTED}">{level}{_e(item[2])}</div>')
    if nested and record.result is not None:
        parts.append(f'<div style="{_MUTED}">{_e(render_footer_text(record))}</div>')
    return "".join(parts)



def _status_html(record: RunRecord) -> str:
    result = record.result
    if result is None or result.status == "completed":
        return ""
    color = "#9a6700" if result.status == "interrupted" else "#cf222e"
    return (
        f'<div class="agent-status" style="{_BOX};border-color:{color};color:{color}">'
        f"<b>{_e(result.status)}</b>: {_e(result.error or '')}</div>"
    )


def _cited_html(text: str, record: RunRecord) -> str:
    """Model Markdown as sanitized HTML, ``[doc:...]``/``[term:...]`` citations linked to their own snippets
    (from the run log) while the Markdown is parsed, so the sanitizer sees the final HTML."""
    from harness_magic.core.knowledge.citations import CITATION_RE, citations_html, sources_from_run_file

    if not CITATION_RE.search(text):
        return render_markdown_safe(text)
    return citations_html(text, sources_from_run_file(record.run_file))



def render_answer_html(record: RunRecord, *, copy_buttons: bool = False) -> str:
    """The stable final output: status, answer, charts, footer, and the transcript folded.

    ``copy_buttons``: each code or SQL call gets a "copy code" button (hidden and inert outside a running notebook).
    """
    result = record.result
    parts = ['<div class="agent-final">', _status_html(record)]
    if result is not None and result.text:  # a Confidence/Open questions trailer shows in the state panel instead
        text = record.state.trailer.shown_answer(result.text)
        parts.append(f'<div class="agent-answer">{_cited_html(text, record)}</div>')
    parts.extend(_img(c) for c in record.charts)
    parts.append(state_html(record.state))
    tools = record.tools
    if tools:
        parts.append(
            f'<details class="agent-transcript" style="{_BOX}"><summary>transcript: '
            f"{len(tools)} tool call{'s' if len(tools) != 1 else ''}</summary>"
            f"{render_run_html(record, final_form=True, copy_buttons=copy_buttons)}</details>"
        )
    else:  # no transcript to fold them into: a run's notices (a placeholder key was sent...) stay in view
        parts.extend(f'<div class="agent-notice" style="{_MUTED}">{_e(item[2])}</div>'
                     for item in record.items if item[0] == "notice")
    parts.append(f'<div class="agent-footer" style="{_MUTED}">{_e(render_footer_text(record))}</div></div>')
    return "".join(parts)



def render_html_document(records: Sequence[RunRecord], title: str = "harness_magic transcript") -> str:
    """A self-contained page: each run's prompt, transcript (tools open), answer and footer."""
    body = []
    for record in records:
        body.append(
            f'<section class="agent-run" style="margin:16px 0">'
            f"<h2 style=\"font-size:1.1em\">run {_e(record.run_id or '?')}</h2>"
            f'<div style="{_BOX};background:#f6f8fa"><div style="{_MUTED}">prompt</div>'
            f'<div style="{_PRE}">{_e(record.prompt)}</div></div>{state_html(record.state)}'
            f"{render_run_html(record, open_tools=True)}{_status_html(record)}"
            f'<div class="agent-footer" style="{_MUTED}">{_e(render_footer_text(record))}</div></section>'
        )
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'\">"
        f"<title>{_e(title)}</title></head>"
        '<body style="font-family:system-ui,sans-serif;max-width:960px;margin:auto;padding:8px">'
        f"<h1 style=\"font-size:1.3em\">{_e(title)}</h1>{''.join(body)}</body></html>\n"
    )

