"""Run records and transcript export (``.jsonl``, ``.html``, ``.md``).

A :class:`RunRecorder` subscribes to a session's events and keeps, per run, a
plain :class:`RunRecord`: the prompt, the model's text, every tool call with its
code, result, snapshots and charts, nested subagent transcripts, and the final
result. The notebook's final output and :func:`export_runs` both render these
records, so what a colleague opens is what the notebook showed.

Contract of the renderers: every value that came from the model, the data or
the user is escaped (:func:`html.escape`), and model Markdown is rendered and
sanitized by :mod:`harness_magic.core.text.safe_markdown` (no raw HTML, an allowlist
of tags, only ``data:`` images); the only other markup is the renderer's own, so
nothing in a transcript is ever active HTML or script and nothing loads from
the network. The ``.md`` export escapes the model's raw HTML and image syntax
the same way. Charts are embedded as ``data:`` URIs and styles are inline: an
exported ``.html`` file needs no network and no other file.

People see tables, the model sees text: snapshots render as tables
(:mod:`harness_magic.core.text.snapshot_view`), and the exact text a tool call
returned to the model is one click away in a ``what the model saw`` section,
like the harness's reminders, which appear nowhere else.

Pure: imports neither IPython nor ipywidgets. Pygments, markdown-it and nh3
are imported when a transcript is first rendered.
"""

from __future__ import annotations

import html
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness_magic.core.text.safe_markdown import escape_markdown_html
from harness_magic.core.transcript.events import (
    AssistantMessage,
    Notice,
    ReminderAdded,
    RunFinished,
    RunStarted,
    SubagentEvent,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    SandboxStep,
    ApprovalStep,
    ToolOutputDelta,
    TurnFinished,
)
from harness_magic.core.transcript.scrub import scrub

__all__ = [
    "RunRecord",
    "ToolRecord",
    "RunRecorder",
    "export_runs",
    "render_run_html",
    "render_answer_html",
    "render_footer_text",
    "render_snapshot_html",
    "render_code_html",
    "render_markdown_safe",
    "render_html_document",
    "render_markdown_document",
    "render_tool_body_html",
    "copy_key",
    "copy_button_html",
    "display_result_text",
    "printed_output",
    "tool_call_source",
    "EXPORT_FORMATS",
    "RESULT_PREVIEW_CHARS",
]

EXPORT_FORMATS = (".jsonl", ".html", ".md")
"""Suffixes :func:`export_runs` understands."""
RESULT_PREVIEW_CHARS = 4_000
"""Tool result text shown per call: results are already bounded; this keeps pages light."""
CONNECTOR_TOOL = "load_connectors"
"""Tool whose calls render as connector loads."""
STDOUT_PREVIEW_LINES = 200
"""Lines of printed output shown per call before ``… N lines more``: long logs stay readable."""
APPROVAL_WAIT_SHOWN_S = 0.05
"""Approval waits shorter than this (a policy answering at once) are not worth a mention."""
LIVE_OUTPUT_MAX_CHARS = 256_000
"""Characters of live output a record keeps per call (the backend streams fewer): a display, not a log."""
_SNAPSHOT_LINE = re.compile(r"^Snapshot: \{.*\}$", re.M)
"""The JSON snapshot line of a tool result: shown to people as a table instead."""
_SAVED_LINE = re.compile(r"^Saved as `([A-Za-z_][A-Za-z0-9_]*)`$\n?", re.M)
"""A bare ``Saved as `handle``` line: for people, the handle's table (titled by it) says as much. A line
with a note (``(`name` was taken)``) does not match and stays."""


@dataclass
class ToolRecord:
    """One tool call as it was shown."""

    id: str
    name: str
    input: dict[str, Any]
    turn: int
    result: str | None = None
    """Result text sent to the model (None while running)."""
    display_text: str | None = None
    """What people read of the result when it differs from ``result`` (model-only notes left out); None: ``result``."""
    is_error: bool = False
    duration_s: float | None = None
    approval_wait_s: float = 0.0
    """Seconds of ``duration_s`` spent waiting for the user's approval."""
    approval_since: float | None = None
    """``time.monotonic()`` when the user was asked to approve this call, while the question is open."""
    sandbox_s: float = 0.0
    """Seconds of ``duration_s`` spent starting, forking or restarting the sandbox (shown as its own step)."""
    started: float | None = None
    """``time.monotonic()`` when the call started (live views tick from it)."""
    output: list[tuple[str, str]] = field(default_factory=list)
    """``(stream, text)`` chunks the call printed while it ran (live output; kept on interrupt)."""
    interrupted: bool = False
    """The run was interrupted while this call ran."""
    handles: list[str] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)
    """Base64 PNGs the call drew."""
    subagent: "RunRecord | None" = None
    """The nested transcript when this call ran a subagent."""

    @property
    def kind(self) -> str:
        if self.subagent is not None:
            return "subagent"
        if self.name == CONNECTOR_TOOL:
            return "connector"
        return "tool"

    @property
    def title(self) -> str:
        """One line naming the call: the tool and its key argument."""
        if self.name == CONNECTOR_TOOL:
            return f"connector: {self.input.get('connector_name', '?')}"
        if self.subagent is not None:
            task = str(self.input.get("task") or self.input.get("prompt") or "")
            return f"subagent: {_clip(task, 60)}" if task else f"subagent ({self.name})"
        return self.name


@dataclass
class RunRecord:
    """Everything one run showed, in order."""

    run_id: str | None = None
    model: str | None = None
    prompt: str = ""
    max_turns: int | None = None
    run_file: str | None = None
    items: list[Any] = field(default_factory=list)
    """``("text", str)``, :class:`ToolRecord`, ``("notice", level, str)`` or ``("reminder", str)``."""
    turn: int = 0
    usage: Any = None
    """Latest cumulative :class:`~harness_magic.core.transcript.messages.Usage`."""
    elapsed_s: float = 0.0
    result: Any = None
    """The :class:`~harness_magic.core.agent.loop.RunResult`, once finished."""

    def tool(self, tool_use_id: str) -> ToolRecord | None:
        for item in self.items:
            if isinstance(item, ToolRecord) and item.id == tool_use_id:
                return item
        return None

    @property
    def tools(self) -> list[ToolRecord]:
        return [i for i in self.items if isinstance(i, ToolRecord)]

    @property
    def charts(self) -> list[str]:
        if self.result is not None:
            return list(self.result.charts)
        return [c for t in self.tools for c in t.charts]


class RunRecorder:
    """Event handler that builds :class:`RunRecord` objects.

    ``recorder.records`` holds every run seen, oldest first; ``recorder.current``
    the run in progress (or the last one).
    """

    def __init__(self) -> None:
        self.records: list[RunRecord] = []
        self.current: RunRecord | None = None
        self._streaming = False

    def __call__(self, event: Any) -> None:
        if isinstance(event, RunStarted):
            self.current = RunRecord(event.run_id, event.model, event.prompt, event.max_turns, event.run_file)
            self.records.append(self.current)
            self._streaming = False
            return
        if self.current is None:
            self.current = RunRecord()
            self.records.append(self.current)
        apply_event(self.current, event, self)

    def find(self, run_id: str) -> RunRecord | None:
        return next((r for r in self.records if r.run_id == run_id), None)


_STEP_WORDS = {"start": ("starting the sandbox", "sandbox started"),
               "fork": ("forking a fresh sandbox worker", "fresh sandbox worker forked"),
               "restart": ("restarting the sandbox", "sandbox restarted")}
"""What a :class:`SandboxStep` says while it runs, and once done (followed by its time)."""


def sandbox_step_text(event: SandboxStep) -> str:
    """``sandbox started · 2.31 s`` (``fresh sandbox worker forked``, ``sandbox restarted``);
    ``starting the sandbox`` (``forking …``, ``restarting …``) while it runs."""
    running, done = _STEP_WORDS.get(event.action, _STEP_WORDS["restart"])
    if event.duration_s is None:
        return running
    return f"{done} · {event.duration_s:.2f} s"


def apply_event(record: RunRecord, event: Any, state: Any) -> None:
    """Fold one event into ``record`` (``state`` tracks whether text is streaming)."""
    if isinstance(event, TextDelta):
        if getattr(state, "_streaming", False) and record.items and record.items[-1][0:1] == ("text",):
            record.items[-1] = ("text", record.items[-1][1] + event.text)
        else:
            record.items.append(("text", event.text))
        state._streaming = True
    elif isinstance(event, AssistantMessage):
        text = event.message.text
        if getattr(state, "_streaming", False) and record.items and record.items[-1][0:1] == ("text",):
            record.items[-1] = ("text", text)
        elif text:
            record.items.append(("text", text))
        state._streaming = False
    elif isinstance(event, ToolCallStarted):
        state._streaming = False
        use = event.tool_use
        record.items.append(ToolRecord(use.id, use.name, dict(use.input), event.turn, started=time.monotonic()))
    elif isinstance(event, ToolCallFinished):
        tool = record.tool(event.tool_use.id)
        if tool is None:
            use = event.tool_use
            tool = ToolRecord(use.id, use.name, dict(use.input), event.turn)
            record.items.append(tool)
        tool.result = event.result.content
        tool.display_text = getattr(event, "display_text", None)
        tool.is_error = event.result.is_error
        tool.duration_s = event.duration_s
        tool.approval_wait_s = float(getattr(event, "approval_wait_s", 0.0) or 0.0)
        tool.approval_since = None
        tool.handles = list(event.handles)
        tool.snapshots = [dict(s) for s in event.snapshots]
        tool.charts = [a["data"] for a in event.artifacts if a.get("kind") == "image/png" and a.get("data")]
    elif isinstance(event, SandboxStep):
        if event.duration_s is not None:  # placed before the call it ran for: it happened before the code ran
            tool = record.tool(event.tool_use_id) if event.tool_use_id else None
            notice = ("notice", "info", sandbox_step_text(event))
            if tool is None:
                record.items.append(notice)
            else:
                record.items.insert(next(i for i, item in enumerate(record.items) if item is tool), notice)
                tool.sandbox_s += event.duration_s
    elif isinstance(event, ApprovalStep):
        tool = record.tool(event.tool_use_id) if event.tool_use_id else None
        if tool is not None:
            if event.wait_s is None:
                tool.approval_since = time.monotonic()
            else:
                tool.approval_since = None
                tool.approval_wait_s += event.wait_s
    elif isinstance(event, ToolOutputDelta):
        tool = record.tool(event.tool_use_id)
        if tool is not None and tool.result is None:
            room = LIVE_OUTPUT_MAX_CHARS - sum(len(chunk) for _, chunk in tool.output)
            if room > 0:
                tool.output.append(("stdout", event.text[:room]))
    elif isinstance(event, TurnFinished):
        record.turn = event.turn
        record.usage = event.total_usage
        record.elapsed_s = event.elapsed_s
    elif isinstance(event, ReminderAdded):
        record.items.append(("reminder", event.text))
    elif isinstance(event, Notice):
        record.items.append(("notice", event.level, event.text))
    elif isinstance(event, SubagentEvent):
        tool = record.tool(event.parent_tool_use_id)
        if tool is None:
            return
        if tool.subagent is None:
            tool.subagent = RunRecord()
        inner = event.event
        if isinstance(inner, RunStarted):
            sub = tool.subagent
            sub.run_id, sub.model, sub.prompt = inner.run_id, inner.model, inner.prompt
            sub.max_turns, sub.run_file = inner.max_turns, inner.run_file
        else:
            apply_event(tool.subagent, inner, tool.subagent)
    elif isinstance(event, RunFinished):
        result = event.result
        record.result = result
        record.turn = result.turns
        record.usage = result.usage
        record.elapsed_s = result.elapsed_s
        record.run_file = result.run_file or record.run_file
        record.run_id = result.run_id or record.run_id
        record.model = result.model or record.model
        if result.status == "interrupted":
            for tool in record.tools:
                if tool.result is None:
                    tool.interrupted = True


# -- HTML pieces (shared with the notebook) -------------------------------------------------

_e = html.escape

_BOX = "border:1px solid #d0d7de;border-radius:6px;padding:4px 8px;margin:4px 0"
_MUTED = "color:#57606a;font-size:0.9em"
_PRE = "white-space:pre-wrap;word-break:break-word;margin:4px 0;font-size:0.9em"


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def tool_call_source(tool: ToolRecord) -> tuple[str, str] | None:
    """``(language, text)`` of what a call runs: ``python`` code, ``sql``, or a file ``path``; None otherwise."""
    for key, language in (("code", "python"), ("sql", "sql"), ("query", "sql"), ("path", "path")):
        value = tool.input.get(key)
        if isinstance(value, str):
            return language, value
    return None


def display_result_text(tool: ToolRecord) -> str:
    """The result as people read it: the call's text for people (:attr:`ToolRecord.display_text`: no notes meant
    only for the model) or else the model's text, without snapshot JSON or a bare ``Saved as`` line for a
    handle shown as a table (the table, titled by the handle, shows both instead)."""
    text = (tool.display_text if tool.display_text is not None else tool.result) or ""
    if tool.snapshots:
        tabled = {name for name, snapshot in zip(tool.handles, tool.snapshots) if snapshot}
        text = _SNAPSHOT_LINE.sub("", text)
        text = _SAVED_LINE.sub(lambda line: "" if line.group(1) in tabled else line.group(0), text)
        text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text if len(text) <= RESULT_PREVIEW_CHARS else text[:RESULT_PREVIEW_CHARS] + "…"


def printed_output(tool: ToolRecord, limit: int = STDOUT_PREVIEW_LINES) -> tuple[str, int]:
    """What the call printed while it ran, as ``(last lines, lines left out)``."""
    text = "".join(chunk for _, chunk in tool.output)
    lines = text.splitlines()
    if len(lines) <= limit:
        return text, 0
    return "\n".join(lines[-limit:]), len(lines) - limit


def hidden_chars_note(text: str, language: str = "python") -> str:
    """A plain-text warning naming the hidden characters of a call's code by line and character, or ``""``."""
    from harness_magic.core.text.hidden_chars import find_hidden, report_lines

    findings = find_hidden(text)
    if not findings:
        return ""
    n = len(findings)
    what = ("no copy button; %agent_code refuses it unless --escaped" if language == "python"
            else "%agent_code writes it as a Python string with the same escapes")
    return (f"⚠ {n} hidden character{'s' if n != 1 else ''} in this {'code' if language != 'path' else 'path'}, "
            f"shown as escapes ({what}): " + "; ".join(report_lines(findings)))


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


def printed_html(tool: ToolRecord) -> str:
    """The live output a call printed (bounded), or ``""``."""
    text, more = printed_output(tool)
    if not text:
        return ""
    note = f'<div style="{_MUTED}">… {more:,} lines more above</div>' if more else ""
    return f'{note}<pre class="agent-stdout" style="{_PRE}">{_e(text)}</pre>'


def copy_key(record: RunRecord, tool: ToolRecord) -> str | None:
    """``RUN_ID:TOOL_USE_ID``, naming a call whose code (Python or SQL) can be copied; None for other calls."""
    from harness_magic.core.text.hidden_chars import find_hidden

    source = tool_call_source(tool)
    if source is None or source[0] not in ("python", "sql") or not record.run_id:
        return None
    if source[0] == "python" and find_hidden(source[1]):  # never copied (hidden_chars.hand_over); SQL goes as repr
        return None
    return f"{record.run_id}:{tool.id}"


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
        parts.append(f'<div style="{_MUTED}">{len(tool.charts)} chart(s), shown with the answer</div>')
    if tool.result is not None:
        parts.append(model_saw_html(tool.result))
    return "".join(parts)


_tool_body_html = render_tool_body_html


def tool_summary(tool: ToolRecord, now: float | None = None) -> str:
    """The one-line summary of a tool section (plain text); ``now`` ticks a running call's time."""
    if tool.interrupted and tool.result is None:
        mark = "■"
    else:
        mark = "…" if tool.result is None else ("✗" if tool.is_error else "✓")
    bits = [f"{mark} {tool.title}"]
    if tool.duration_s is not None:
        bits.append(f"{max(tool.duration_s - tool.approval_wait_s - tool.sandbox_s, 0.0):.2f} s")
        if tool.approval_wait_s >= APPROVAL_WAIT_SHOWN_S:
            bits.append(f"approval wait {tool.approval_wait_s:.1f} s")
    elif tool.approval_since is not None and now is not None and not tool.interrupted:
        bits.append(f"waiting for approval {now - tool.approval_since:.0f} s")
    elif now is not None and tool.started is not None and not tool.interrupted:
        bits.append(f"{max(now - tool.started - tool.approval_wait_s, 0.0):.0f} s")
    if tool.interrupted and tool.result is None:
        bits.append("interrupted")
    if tool.handles:
        bits.append("→ " + ", ".join(tool.handles))
    return " · ".join(bits)


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
        parts.append(f'<div style="{_MUTED}">task: {_e(_clip(record.prompt, 300))}</div>')
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
            parts.append(model_saw_html(item[1], "what the model saw: harness reminder"))
        elif item[0] == "notice":  # as the live view shows it: the level is named only when it is not info
            level = "" if item[1] == "info" else f"{_e(item[1])}: "
            parts.append(f'<div class="agent-notice" style="{_MUTED}">{level}{_e(item[2])}</div>')
    if nested and record.result is not None:
        parts.append(f'<div style="{_MUTED}">{_e(render_footer_text(record))}</div>')
    return "".join(parts)


def render_footer_text(record: RunRecord) -> str:
    """``model · turns · tokens · cached · cost · elapsed · run id · log`` as one line."""
    result = record.result
    usage = record.usage
    bits = [f"model {record.model or '?'}"]
    turns = result.turns if result is not None else record.turn
    bits.append(f"{turns} turn{'s' if turns != 1 else ''}")
    if usage is not None:
        bits.append(f"{usage.total_tokens:,} tokens ({usage.input_tokens:,} in, {usage.output_tokens:,} out)")
        bits.append(f"{usage.cached_tokens:,} cached")
        bits.append(f"${usage.cost:.4f}")
    elapsed = result.elapsed_s if result is not None else record.elapsed_s
    bits.append(f"{elapsed:.2f} s")
    if record.run_id:
        bits.append(f"run {record.run_id}")
    if record.run_file:
        bits.append(f"log {record.run_file}")
    return " · ".join(bits)


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


def _cited_markdown(text: str, record: RunRecord) -> str:
    """Model Markdown for the ``.md`` export: raw HTML and images literal, citations linked to their own snippets."""
    from harness_magic.core.knowledge.citations import CITATION_RE, citations_markdown, sources_from_run_file

    if not CITATION_RE.search(text):
        return escape_markdown_html(text)
    return citations_markdown(text, sources_from_run_file(record.run_file))


def render_answer_html(record: RunRecord, *, copy_buttons: bool = False) -> str:
    """The stable final output: status, answer, charts, footer, and the transcript folded.

    ``copy_buttons``: each code or SQL call gets a "copy code" button (hidden and inert outside a running notebook).
    """
    result = record.result
    parts = ['<div class="agent-final">', _status_html(record)]
    if result is not None and result.text:
        parts.append(f'<div class="agent-answer">{_cited_html(result.text, record)}</div>')
    parts.extend(_img(c) for c in record.charts)
    tools = record.tools
    if tools:
        parts.append(
            f'<details class="agent-transcript" style="{_BOX}"><summary>transcript: '
            f"{len(tools)} tool call{'s' if len(tools) != 1 else ''}</summary>"
            f"{render_run_html(record, final_form=True, copy_buttons=copy_buttons)}</details>"
        )
    parts.append(f'<div class="agent-footer" style="{_MUTED}">{_e(render_footer_text(record))}</div></div>')
    return "".join(parts)


def render_answer_markdown(record: RunRecord) -> str:
    result = record.result
    lines = []
    if result is not None and result.status != "completed":
        lines.append(f"**{result.status}**: {result.error or ''}\n")
    if result is not None and result.text:
        lines.append(_cited_markdown(result.text, record) + "\n")
    lines.append(f"*{_md_inline(render_footer_text(record))}*")
    return "\n".join(lines)


def render_html_document(records: Sequence[RunRecord], title: str = "harness_magic transcript") -> str:
    """A self-contained page: each run's prompt, transcript (tools open), answer and footer."""
    body = []
    for record in records:
        body.append(
            f'<section class="agent-run" style="margin:16px 0">'
            f"<h2 style=\"font-size:1.1em\">run {_e(record.run_id or '?')}</h2>"
            f'<div style="{_BOX};background:#f6f8fa"><div style="{_MUTED}">prompt</div>'
            f'<div style="{_PRE}">{_e(record.prompt)}</div></div>'
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


def _fence(text: str, language: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{text}\n{ticks}"


def _md_inline(text: str) -> str:
    """One line of harness text that may quote the model: no raw HTML, no images, no line breaks."""
    return escape_markdown_html(" ".join(str(text).split()))


def _md_record(record: RunRecord, depth: int = 2) -> list[str]:
    from harness_magic.core.text.snapshot_view import snapshot_text

    out: list[str] = []
    for item in record.items:
        if isinstance(item, ToolRecord):
            out.append(f"{'#' * min(depth + 1, 6)} {_md_inline(tool_summary(item))}\n")
            source = tool_call_source(item)
            shown_key = None
            if source is not None:
                from harness_magic.core.text.hidden_chars import reveal

                language, text = source
                shown_key = {"python": "code", "path": "path"}.get(language) or ("sql" if "sql" in item.input else "query")
                note = hidden_chars_note(text, language)
                if note:
                    out.append(f"> {_md_inline(note)}\n")
                text = reveal(text)
                out.append((f"Path: {_fence(text)}" if language == "path" else _fence(text, language)) + "\n")
            others = {k: v for k, v in item.input.items() if k != shown_key}
            if others:
                out.append(_fence(json.dumps(others, ensure_ascii=False, indent=1, default=str), "json") + "\n")
            if item.subagent is not None:
                out.append(f"Subagent transcript (task: {_md_inline(item.subagent.prompt)}):\n")
                out.extend(_md_record(item.subagent, depth + 1))
            if item.result is None:
                printed, more = printed_output(item)
                if printed:
                    out.append(("Printed" + (f" (… {more:,} lines more above)" if more else "") + ":\n\n")
                               + _fence(printed) + "\n")
                if item.interrupted:
                    out.append("*interrupted*\n")
            else:
                shown = display_result_text(item)
                if shown:
                    out.append(("Error:" if item.is_error else "Result:") + "\n\n" + _fence(shown) + "\n")
            for name, snap in zip(item.handles, item.snapshots):
                if snap:
                    out.append(_fence(snapshot_text(name, snap)) + "\n")
            for chart in item.charts:
                out.append(f"![chart](data:image/png;base64,{re.sub(r'[^A-Za-z0-9+/=]', '', chart)})\n")
        elif item[0] == "text":
            out.append(_cited_markdown(item[1], record) + "\n")
        elif item[0] == "notice":
            level = "" if item[1] == "info" else f"{_md_inline(item[1])}: "
            out.append(f"> {level}{_md_inline(item[2])}\n")
    return out


def render_markdown_document(records: Sequence[RunRecord], title: str = "harness_magic transcript") -> str:
    """Runs as Markdown: prompts and results fenced, model text with its raw HTML and images made literal."""
    out = [f"# {_md_inline(title)}\n"]
    for record in records:
        out.append(f"## run {_md_inline(record.run_id or '?')}\n")
        out.append("**Prompt:**\n\n" + _fence(record.prompt) + "\n")
        out.extend(_md_record(record))
        result = record.result
        if result is not None and result.status != "completed":
            out.append(f"**{_md_inline(result.status)}**: {_md_inline(result.error or '')}\n")
        out.append(f"*{_md_inline(render_footer_text(record))}*\n")
    return "\n".join(out)


def export_runs(records: Iterable[RunRecord], path: str | Path) -> Path:
    """Write ``records`` to ``path``; the suffix picks the format (see :data:`EXPORT_FORMATS`).

    The directory must exist: a mistyped path is refused (``FileNotFoundError``
    naming it), never created.
    """
    records = list(records)
    target = Path(path).expanduser()
    suffix = target.suffix.lower()
    if suffix not in EXPORT_FORMATS:
        raise ValueError(f"cannot export to {target.name!r}: use one of {', '.join(EXPORT_FORMATS)}")
    if not records:
        raise ValueError("no runs to export yet")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot export to {str(path)!r}: directory {str(parent)!r} does not exist "
                                "(create it first; nothing was written)")
    if suffix == ".jsonl":
        for record in records:
            if not record.run_file or not Path(record.run_file).exists():
                raise ValueError(f"run {record.run_id}: its log file {record.run_file!r} is missing")
        with open(target, "w", encoding="utf-8") as out:
            for record in records:
                with open(record.run_file, encoding="utf-8") as source:
                    for line in source:
                        out.write(scrub(line))
    elif suffix == ".html":
        target.write_text(scrub(render_html_document(records)), encoding="utf-8")
    else:
        target.write_text(scrub(render_markdown_document(records)), encoding="utf-8")
    return target
