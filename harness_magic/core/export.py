"""Run records and transcript export (``.jsonl``, ``.html``, ``.md``).

A :class:`RunRecorder` subscribes to a session's events and keeps, per run, a
plain :class:`RunRecord`: the prompt, the model's text, every tool call with its
code, result, snapshots and charts, nested subagent transcripts, and the final
result. The notebook's final output and :func:`export_runs` both render these
records, so what a colleague opens is what the notebook showed.

Contract of the renderers: every value that came from the model, the data or
the user is escaped (:func:`html.escape`); the only markup in the output is
the renderer's own, so nothing in a transcript is ever active HTML or script.
Charts are embedded as ``data:`` URIs and styles are inline: an exported
``.html`` file needs no network and no other file.

Pure: imports neither IPython nor ipywidgets. Pygments and markdown-it (both
dependencies of rich) are imported when a transcript is first rendered.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness_magic.core.events import (
    AssistantMessage,
    Notice,
    ReminderAdded,
    RunFinished,
    RunStarted,
    SubagentEvent,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from harness_magic.core.scrub import scrub

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
    "EXPORT_FORMATS",
    "RESULT_PREVIEW_CHARS",
]

EXPORT_FORMATS = (".jsonl", ".html", ".md")
"""Suffixes :func:`export_runs` understands."""
RESULT_PREVIEW_CHARS = 4_000
"""Tool result text shown per call: results are already bounded; this keeps pages light."""
CONNECTOR_TOOL = "load_connectors"
"""Tool whose calls render as connector loads."""


@dataclass
class ToolRecord:
    """One tool call as it was shown."""

    id: str
    name: str
    input: dict[str, Any]
    turn: int
    result: str | None = None
    """Result text sent to the model (None while running)."""
    is_error: bool = False
    duration_s: float | None = None
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
    """Latest cumulative :class:`~harness_magic.core.messages.Usage`."""
    elapsed_s: float = 0.0
    result: Any = None
    """The :class:`~harness_magic.core.loop.RunResult`, once finished."""

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
        record.items.append(ToolRecord(use.id, use.name, dict(use.input), event.turn))
    elif isinstance(event, ToolCallFinished):
        tool = record.tool(event.tool_use.id)
        if tool is None:
            use = event.tool_use
            tool = ToolRecord(use.id, use.name, dict(use.input), event.turn)
            record.items.append(tool)
        tool.result = event.result.content
        tool.is_error = event.result.is_error
        tool.duration_s = event.duration_s
        tool.handles = list(event.handles)
        tool.snapshots = [dict(s) for s in event.snapshots]
        tool.charts = [a["data"] for a in event.artifacts if a.get("kind") == "image/png" and a.get("data")]
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
    """Markdown to HTML with raw HTML disabled (it is shown as text) and safe links only."""
    try:
        from markdown_it import MarkdownIt

        return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    except ImportError:
        return f'<div style="{_PRE}">{_e(text)}</div>'


def _cell(value: Any) -> str:
    if value is None:
        return '<span style="color:#8c959f">null</span>'
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return _e(str(value))


def render_snapshot_html(name: str, snapshot: dict[str, Any]) -> str:
    """A snapshot as a small table: shape and dtypes line, then sample rows."""
    kind = snapshot.get("type", "?")
    shape = snapshot.get("shape")
    shape_text = " × ".join(str(s) for s in shape) if isinstance(shape, (list, tuple)) else ""
    head = f"<b>{_e(name)}</b> <span style=\"{_MUTED}\">{_e(str(kind))}"
    head += f" {_e(shape_text)}" if shape_text else ""
    head += "</span>"
    parts = [f'<div class="agent-snapshot" style="{_BOX}">{head}']
    sample = snapshot.get("sample")
    columns = snapshot.get("columns")
    dtypes = snapshot.get("dtypes")
    if isinstance(dtypes, dict) and dtypes:
        shown = ", ".join(f"{k}: {v}" for k, v in dtypes.items())
        parts.append(f'<div style="{_MUTED}">dtypes: {_e(_clip(shown, 400))}</div>')
    elif snapshot.get("dtype"):
        parts.append(f'<div style="{_MUTED}">dtype: {_e(str(snapshot["dtype"]))}</div>')
    if isinstance(sample, list) and sample and all(isinstance(r, dict) for r in sample):
        cols = [str(c) for c in (columns or [])] or list(sample[0])
        cols = [c for c in cols if any(c in r for r in sample)] or list(sample[0])
        index = snapshot.get("index") if isinstance(snapshot.get("index"), dict) else {}
        labels = index.get("head") if isinstance(index.get("head"), list) else None
        if labels is not None and len(labels) < len(sample):
            labels = None
        rows = "".join(
            "<tr>"
            + (f'<th style="padding:1px 6px;text-align:left">{_cell(labels[i])}</th>' if labels else "")
            + "".join(f'<td style="padding:1px 6px">{_cell(r.get(c))}</td>' for c in cols)
            + "</tr>"
            for i, r in enumerate(sample)
        )
        corner = f'<th style="padding:1px 6px">{_e(str(index.get("name") or ""))}</th>' if labels else ""
        header = corner + "".join(f'<th style="padding:1px 6px;text-align:left">{_e(c)}</th>' for c in cols)
        parts.append(
            f'<table class="agent-snapshot-table" style="border-collapse:collapse;font-size:0.9em">'
            f"<thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>"
        )
    elif isinstance(sample, list) and sample:
        parts.append(f'<div style="{_PRE}">{_e(", ".join(_cell_text(v) for v in sample))}</div>')
    else:
        rest = {k: v for k, v in snapshot.items() if k not in ("type", "shape")}
        if rest:
            text = json.dumps(rest, ensure_ascii=False, default=str)
            parts.append(f'<pre style="{_PRE}">{_e(_clip(text, 1200))}</pre>')
    parts.append("</div>")
    return "".join(parts)


def _cell_text(value: Any) -> str:
    return "null" if value is None else str(value)


def _img(data: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9+/=]", "", data)  # base64 alphabet only: cannot break out of the attribute
    return f'<img alt="chart" style="max-width:100%" src="data:image/png;base64,{safe}"/>'


def _tool_body_html(tool: ToolRecord) -> str:
    parts: list[str] = []
    code = tool.input.get("code") if isinstance(tool.input.get("code"), str) else None
    if code is not None:
        parts.append(render_code_html(code))
        others = {k: v for k, v in tool.input.items() if k != "code"}
    else:
        others = tool.input
    if others:
        parts.append(f'<pre style="{_PRE}">{_e(json.dumps(others, ensure_ascii=False, indent=1, default=str))}</pre>')
    if tool.subagent is not None:
        parts.append(f'<div style="margin-left:12px">{render_run_html(tool.subagent, nested=True)}</div>')
    if tool.result is not None:
        color = "#cf222e" if tool.is_error else "#57606a"
        label = "error" if tool.is_error else "result"
        text = tool.result if len(tool.result) <= RESULT_PREVIEW_CHARS else tool.result[:RESULT_PREVIEW_CHARS] + "…"
        parts.append(f'<div style="color:{color};font-size:0.85em">{label}</div><pre style="{_PRE}">{_e(text)}</pre>')
    for name, snap in zip(tool.handles, tool.snapshots):
        if snap:
            parts.append(render_snapshot_html(name, snap))
    parts.extend(_img(c) for c in tool.charts)
    return "".join(parts)


def tool_summary(tool: ToolRecord) -> str:
    """The one-line summary of a tool section (plain text)."""
    mark = "…" if tool.result is None else ("✗" if tool.is_error else "✓")
    bits = [f"{mark} {tool.title}"]
    if tool.duration_s is not None:
        bits.append(f"{tool.duration_s:.2f} s")
    if tool.handles:
        bits.append("→ " + ", ".join(tool.handles))
    return " · ".join(bits)


def render_run_html(record: RunRecord, *, nested: bool = False, open_tools: bool = False) -> str:
    """The transcript of one run: text, and one ``<details>`` per tool call."""
    parts: list[str] = []
    if nested and record.prompt:
        parts.append(f'<div style="{_MUTED}">task: {_e(_clip(record.prompt, 300))}</div>')
    for item in record.items:
        if isinstance(item, ToolRecord):
            opened = " open" if open_tools else ""
            parts.append(
                f'<details class="agent-tool agent-{item.kind}" style="{_BOX}"{opened}>'
                f"<summary>{_e(tool_summary(item))}</summary>{_tool_body_html(item)}</details>"
            )
        elif item[0] == "text":
            parts.append(f'<div class="agent-text">{_cited_html(render_markdown_safe(item[1]), record)}</div>')
        elif item[0] == "reminder":
            parts.append(f'<div style="{_MUTED}">reminder: {_e(item[1])}</div>')
        elif item[0] == "notice":
            parts.append(f'<div style="{_MUTED}">{_e(item[1])}: {_e(item[2])}</div>')
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


def _cited_html(answer_html: str, record: RunRecord) -> str:
    """Answer HTML with ``[doc:...]``/``[term:...]`` citations linked to their snippets (from the run log)."""
    from harness_magic.core.knowledge.citations import CITATION_RE, citations_html, sources_from_run_file

    if not CITATION_RE.search(html.unescape(answer_html)):
        return answer_html
    return citations_html(answer_html, sources_from_run_file(record.run_file))


def _cited_markdown(text: str, record: RunRecord) -> str:
    from harness_magic.core.knowledge.citations import CITATION_RE, citations_markdown, sources_from_run_file

    if not CITATION_RE.search(text):
        return text
    return citations_markdown(text, sources_from_run_file(record.run_file))


def render_answer_html(record: RunRecord) -> str:
    """The stable final output: status, answer, charts, footer, and the transcript folded."""
    result = record.result
    parts = ['<div class="agent-final">', _status_html(record)]
    if result is not None and result.text:
        parts.append(f'<div class="agent-answer">{_cited_html(render_markdown_safe(result.text), record)}</div>')
    parts.extend(_img(c) for c in record.charts)
    tools = record.tools
    if tools:
        parts.append(
            f'<details class="agent-transcript" style="{_BOX}"><summary>transcript: '
            f"{len(tools)} tool call{'s' if len(tools) != 1 else ''}</summary>{render_run_html(record)}</details>"
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
    lines.append(f"*{render_footer_text(record)}*")
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


def _md_record(record: RunRecord, depth: int = 2) -> list[str]:
    out: list[str] = []
    for item in record.items:
        if isinstance(item, ToolRecord):
            out.append(f"{'#' * min(depth + 1, 6)} {tool_summary(item)}\n")
            code = item.input.get("code")
            if isinstance(code, str):
                out.append(_fence(code, "python") + "\n")
            others = {k: v for k, v in item.input.items() if k != "code"}
            if others:
                out.append(_fence(json.dumps(others, ensure_ascii=False, indent=1, default=str), "json") + "\n")
            if item.subagent is not None:
                out.append(f"Subagent transcript (task: {item.subagent.prompt}):\n")
                out.extend(_md_record(item.subagent, depth + 1))
            if item.result is not None:
                out.append(("Error:" if item.is_error else "Result:") + "\n\n" + _fence(item.result) + "\n")
            for name, snap in zip(item.handles, item.snapshots):
                out.append(f"Snapshot of `{name}`:\n\n" + _fence(json.dumps(snap, ensure_ascii=False, indent=1, default=str), "json") + "\n")
            for chart in item.charts:
                out.append(f"![chart](data:image/png;base64,{re.sub(r'[^A-Za-z0-9+/=]', '', chart)})\n")
        elif item[0] == "text":
            out.append(_cited_markdown(item[1], record) + "\n")
        elif item[0] == "reminder":
            out.append(f"> reminder: {item[1]}\n")
        elif item[0] == "notice":
            out.append(f"> {item[1]}: {item[2]}\n")
    return out


def render_markdown_document(records: Sequence[RunRecord], title: str = "harness_magic transcript") -> str:
    out = [f"# {title}\n"]
    for record in records:
        out.append(f"## run {record.run_id or '?'}\n")
        out.append("**Prompt:**\n\n" + _fence(record.prompt) + "\n")
        out.extend(_md_record(record))
        result = record.result
        if result is not None and result.status != "completed":
            out.append(f"**{result.status}**: {result.error or ''}\n")
        out.append(f"*{render_footer_text(record)}*\n")
    return "\n".join(out)


def export_runs(records: Iterable[RunRecord], path: str | Path) -> Path:
    """Write ``records`` to ``path``; the suffix picks the format (see :data:`EXPORT_FORMATS`)."""
    records = list(records)
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in EXPORT_FORMATS:
        raise ValueError(f"cannot export to {target.name!r}: use one of {', '.join(EXPORT_FORMATS)}")
    if not records:
        raise ValueError("no runs to export yet")
    target.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".jsonl":
        with open(target, "w", encoding="utf-8") as out:
            for record in records:
                if not record.run_file or not Path(record.run_file).exists():
                    raise ValueError(f"run {record.run_id}: its log file {record.run_file!r} is missing")
                with open(record.run_file, encoding="utf-8") as source:
                    for line in source:
                        out.write(scrub(line))
    elif suffix == ".html":
        target.write_text(scrub(render_html_document(records)), encoding="utf-8")
    else:
        target.write_text(scrub(render_markdown_document(records)), encoding="utf-8")
    return target
