"""Live rendering of a run: ipywidgets in a notebook, rich in a terminal.

Both renderers are event handlers (the loop emits, they subscribe). The widget
view is fed kernel-side — widget values and children are set from Python, never
through ``with output:`` capture — so it updates from any thread and headless.
A :class:`~harness_magic.core.export.RunRecord` is folded alongside, so the
stable final output and exports render the same content.

Every string from the model or the data goes through :func:`html.escape` (or
the escaping renderers of :mod:`harness_magic.core.export`) before it becomes
the value of an HTML widget; in the terminal renderer it goes through
:func:`~harness_magic.core.scrub.escape_control`, so ESC/OSC/CR bytes print as
escapes instead of driving the terminal.
"""

from __future__ import annotations

import html
import time
from typing import Any

from harness_magic.core import export
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
    TurnStarted,
)
from harness_magic.core.export import RunRecord, ToolRecord
from harness_magic.core.scrub import escape_control

__all__ = ["WidgetRunView", "TerminalRenderer", "status_text", "STREAM_FLUSH_S"]

STREAM_FLUSH_S = 0.05
"""Streamed text is pushed to the front end at most this often: smooth, without a message per token."""

_e = html.escape


def _apply(record: RunRecord, event: Any, state: Any) -> None:
    """Fold ``event`` into ``record``; a finished run counts its subagents' usage too."""
    export.apply_event(record, event, state)
    if isinstance(event, RunFinished):
        record.usage = getattr(event.result, "total_usage", event.result.usage)


def status_text(record: RunRecord, state: str) -> str:
    """``turn 2/25 · 1,234 tokens (200 cached) · $0.0012 · 1.3 s · running``."""
    bits = [f"turn {record.turn}/{record.max_turns or '?'}"]
    usage = record.usage
    if usage is not None:
        bits.append(f"{usage.total_tokens:,} tokens ({usage.cached_tokens:,} cached)")
        bits.append(f"${usage.cost:.4f}")
    bits.append(f"{record.elapsed_s:.1f} s")
    bits.append(state)
    return " · ".join(bits)


class _Transcript:
    """Widgets of one transcript (a run, or a subagent's nested run)."""

    def __init__(self, widgets: Any, box: Any) -> None:
        self.w = widgets
        self.box = box
        self.text_widget: Any = None
        self.text = ""
        self.last_flush = 0.0
        self.tools: dict[str, tuple[Any, Any, Any]] = {}
        """tool_use_id -> (accordion, body box, nested transcript or None)."""
        self.nested: dict[str, _Transcript] = {}

    def _append(self, widget: Any) -> None:
        self.box.children = (*self.box.children, widget)

    def _set_text(self) -> None:
        self.text_widget.value = f'<div class="agent-text">{export.render_markdown_safe(self.text)}</div>'

    def on_delta(self, text: str) -> None:
        if self.text_widget is None:
            self.text = ""
            self.text_widget = self.w.HTML()
            self._append(self.text_widget)
        self.text += text
        now = time.monotonic()
        if now - self.last_flush >= STREAM_FLUSH_S:
            self.last_flush = now
            self._set_text()

    def on_message(self, text: str) -> None:
        if self.text_widget is None and not text:
            return
        if self.text_widget is None:
            self.text_widget = self.w.HTML()
            self._append(self.text_widget)
        self.text = text
        self._set_text()
        self.text_widget = None

    def on_tool_started(self, tool: ToolRecord) -> None:
        self.text_widget = None
        body = self.w.VBox()
        children = []
        code = tool.input.get("code")
        if isinstance(code, str):
            children.append(self.w.HTML(export.render_code_html(code)))
        others = {k: v for k, v in tool.input.items() if k != "code"}
        if others:
            import json

            text = json.dumps(others, ensure_ascii=False, indent=1, default=str)
            children.append(self.w.HTML(f'<pre style="white-space:pre-wrap">{_e(text)}</pre>'))
        body.children = tuple(children)
        accordion = self.w.Accordion(children=(body,))
        accordion.set_title(0, export.tool_summary(tool))
        accordion.add_class(f"agent-{tool.kind}")
        accordion.add_class("agent-tool")
        self.tools[tool.id] = (accordion, body, None)
        self._append(accordion)

    def on_tool_finished(self, tool: ToolRecord) -> None:
        entry = self.tools.get(tool.id)
        if entry is None:
            self.on_tool_started(tool)
            entry = self.tools[tool.id]
        accordion, body, _ = entry
        accordion.set_title(0, export.tool_summary(tool))
        if tool.subagent is not None:
            accordion.add_class("agent-subagent")
        children = list(body.children)
        color = "#cf222e" if tool.is_error else "#57606a"
        result = tool.result or ""
        if len(result) > export.RESULT_PREVIEW_CHARS:
            result = result[: export.RESULT_PREVIEW_CHARS] + "…"
        children.append(self.w.HTML(
            f'<div style="color:{color};font-size:0.85em">{"error" if tool.is_error else "result"}</div>'
            f'<pre style="white-space:pre-wrap;margin:2px 0">{_e(result)}</pre>'
        ))
        for name, snap in zip(tool.handles, tool.snapshots):
            if snap:
                children.append(snapshot_widget(self.w, name, snap))
        for chart in tool.charts:
            import base64

            children.append(self.w.Image(value=base64.b64decode(chart), format="png"))
        body.children = tuple(children)

    def nested_for(self, tool: ToolRecord) -> "_Transcript":
        if tool.id not in self.nested:
            accordion, body, _ = self.tools[tool.id]
            inner = self.w.VBox(layout=self.w.Layout(margin="0 0 0 12px"))
            task = tool.subagent.prompt if tool.subagent is not None else ""
            head = self.w.HTML(f'<div style="color:#57606a">subagent task: {_e(task)}</div>') if task else None
            body.children = (*body.children, *(w for w in (head, inner) if w is not None))
            self.nested[tool.id] = _Transcript(self.w, inner)
            accordion.add_class("agent-subagent")
        return self.nested[tool.id]


def snapshot_widget(widgets: Any, name: str, snapshot: dict[str, Any]) -> Any:
    """A snapshot as its own widget: shape/dtypes line and a sample-rows table."""
    box = widgets.HTML(export.render_snapshot_html(name, snapshot))
    box.add_class("agent-snapshot-widget")
    return box


class WidgetRunView:
    """Event handler that renders a run into ipywidgets, live.

    ``view.widget`` is the root to display once; ``view.record`` the folded run.
    """

    def __init__(self) -> None:
        import ipywidgets

        self.w = ipywidgets
        self.record = RunRecord()
        self.status = ipywidgets.HTML()
        self.status.add_class("agent-status-line")
        body = ipywidgets.VBox()
        self.transcript = _Transcript(ipywidgets, body)
        self.widget = _RunBox(children=(self.status, body))
        self.widget.add_class("agent-run-view")
        self._set_status("starting")

    def _set_status(self, state: str) -> None:
        self.status.value = f'<span style="color:#57606a;font-size:0.9em">{_e(status_text(self.record, state))}</span>'

    def __call__(self, event: Any) -> None:
        record = self.record
        if isinstance(event, RunStarted):
            self.record = record = RunRecord(event.run_id, event.model, event.prompt, event.max_turns, event.run_file)
            self._set_status("starting")
            return
        _apply(record, event, self)
        self._render(self.transcript, record, event)

    def _render(self, transcript: _Transcript, record: RunRecord, event: Any) -> None:
        if isinstance(event, TextDelta):
            transcript.on_delta(event.text)
        elif isinstance(event, AssistantMessage):
            transcript.on_message(event.message.text)
        elif isinstance(event, ToolCallStarted):
            tool = record.tool(event.tool_use.id)
            if tool is not None:
                transcript.on_tool_started(tool)
            if transcript is self.transcript:
                self._set_status(f"running {event.tool_use.name}")
        elif isinstance(event, ToolCallFinished):
            tool = record.tool(event.tool_use.id)
            if tool is not None:
                transcript.on_tool_finished(tool)
        elif isinstance(event, (TurnStarted, TurnFinished)) and transcript is self.transcript:
            if isinstance(event, TurnStarted):
                record.turn = event.turn
            self._set_status("waiting for the model" if isinstance(event, TurnStarted) else "thinking")
        elif isinstance(event, ReminderAdded):
            transcript._append(self.w.HTML(f'<div style="color:#57606a">reminder: {_e(event.text)}</div>'))
        elif isinstance(event, Notice):
            color = {"error": "#cf222e", "warning": "#9a6700"}.get(event.level, "#57606a")
            transcript._append(self.w.HTML(f'<div style="color:{color}">{_e(event.text)}</div>'))
        elif isinstance(event, SubagentEvent):
            tool = record.tool(event.parent_tool_use_id)
            if tool is None or tool.subagent is None or tool.id not in transcript.tools:
                return
            inner = transcript.nested_for(tool)
            if not isinstance(event.event, RunStarted):
                self._render(inner, tool.subagent, event.event)
        elif isinstance(event, RunFinished) and transcript is self.transcript:
            transcript.text_widget = None
            result = event.result
            self._set_status(result.status if result.status == "completed" else f"{result.status}: {result.error or ''}")


def _run_box_class() -> Any:
    import ipywidgets

    class RunBox(ipywidgets.VBox):
        """The live view; its plain-text form is fixed, so saved notebooks compare stably."""

        def __repr__(self) -> str:
            return "<agent run: live view>"

    return RunBox


def _RunBox(**kwargs: Any) -> Any:  # noqa: N802 - a lazily built class
    global _RUN_BOX
    if _RUN_BOX is None:
        _RUN_BOX = _run_box_class()
    return _RUN_BOX(**kwargs)


_RUN_BOX: Any = None


class TerminalRenderer:
    """Event handler that prints a run with rich (terminal IPython, scripts)."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)
        self.record = RunRecord()
        self._printing_stream = False
        self._streamed_final = False

    def __call__(self, event: Any) -> None:
        from rich.markdown import Markdown
        from rich.panel import Panel
        from rich.syntax import Syntax
        from rich.text import Text

        c = self.console
        safe = escape_control  # model and data text must not drive the terminal
        if isinstance(event, RunStarted):
            self.record = RunRecord(event.run_id, event.model, event.prompt, event.max_turns, event.run_file)
            return
        _apply(self.record, event, self)
        if isinstance(event, SubagentEvent):
            inner = event.event
            if isinstance(inner, ToolCallStarted):
                c.print(Text(safe(f"  ↳ subagent calls {inner.tool_use.name}"), style="dim"))
            elif isinstance(inner, AssistantMessage) and inner.message.text:
                c.print(Text(safe("  ↳ subagent: " + export._clip(inner.message.text, 200)), style="dim"))
        elif isinstance(event, TextDelta):
            self._printing_stream = True
            c.print(Text(safe(event.text)), end="")
        elif isinstance(event, AssistantMessage):
            if self._printing_stream:
                c.print()
            elif event.message.text:
                c.print(Text(safe(event.message.text)))
            self._streamed_final = self._printing_stream and not event.message.tool_uses
            self._printing_stream = False
        elif isinstance(event, ToolCallStarted):
            code = event.tool_use.input.get("code")
            body: Any = Syntax(safe(code), "python") if isinstance(code, str) else Text(safe(event.tool_use.input))
            c.print(Panel(body, title=safe(event.tool_use.name), title_align="left", border_style="blue"))
        elif isinstance(event, ToolCallFinished):
            tool = self.record.tool(event.tool_use.id)
            if tool is not None:
                style = "red" if tool.is_error else "dim"
                c.print(Text(safe(export.tool_summary(tool)), style=style))
                c.print(Text(safe(export._clip(tool.result or "", 600)), style=style))
        elif isinstance(event, TurnFinished):
            c.print(Text(status_text(self.record, "…"), style="dim"))
        elif isinstance(event, Notice):
            c.print(Text(safe(event.text), style="yellow" if event.level != "error" else "red"))
        elif isinstance(event, RunFinished):
            result = event.result
            if result.status != "completed":
                c.print(Text(safe(f"{result.status}: {result.error or ''}"), style="bold red"))
            elif result.text and not self._streamed_final:
                c.print(Markdown(safe(result.text)))
            if result.charts:
                c.print(Text(f"({len(result.charts)} chart(s) drawn; export to .html to view)", style="dim"))
            c.print(Text(safe(export.render_footer_text(self.record)), style="dim"))
