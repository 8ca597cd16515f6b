"""The live view of a run in a notebook: ipywidgets fed kernel-side.

The view is an event handler (the loop emits, it subscribes), fed kernel-side —
widget values and children are set from Python, never through ``with output:``
capture — so it updates from any thread and headless.

One output per cell: the widget view is the live form only. While the run
goes, model text streams in, each tool call is a collapsible section (code,
result for people, snapshot tables, charts at their natural size, the exact
text the model saw one click away), and the status line ticks every
:data:`TICK_S`. When the run ends the magic replaces the view, in place, with
the static final form (:func:`harness_magic.core.export.render_answer_html`),
which is also what a saved notebook carries.

Every string from the model or the data is escaped, and model Markdown goes
through :func:`harness_magic.core.text.safe_markdown.markdown_to_html` (sanitized,
only ``data:`` images), before it becomes the value of an HTML widget.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

from harness_magic.core import export
from harness_magic.core.export import RunRecord, ToolRecord
from harness_magic.core.export.state_view import state_html
from harness_magic.core.transcript.events import (
    ApprovalStep,
    AssistantMessage,
    AssumptionRecorded,
    EngineProgress,
    Notice,
    QuestionStep,
    ReminderAdded,
    RunFinished,
    RunStarted,
    SandboxStep,
    WorkerReplaced,
    SubagentEvent,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
    TurnStarted,
)
from harness_magic.notebook.code_text import call_code_text
from harness_magic.notebook.render.common import fold_event, status_text

__all__ = ["WidgetRunView", "STREAM_FLUSH_S", "TICK_S"]

STREAM_FLUSH_S = 0.05
"""Streamed text is pushed to the front end at most this often: smooth, without a message per token."""
TICK_S = 1.0
"""The status line and a running call's time are refreshed this often while nothing else happens."""

_e = html.escape


class _Transcript:
    """Widgets of one transcript (a run, or a subagent's nested run)."""

    def __init__(self, widgets: Any, box: Any, clipboard: Any = None) -> None:
        self.w = widgets
        self.box = box
        self.record = RunRecord()
        """The run this transcript shows (names its calls for the copy buttons)."""
        self.clipboard = clipboard
        """The session's :class:`~harness_magic.notebook.clipboard.CodeClipboard`, or None (no copy buttons)."""
        self.text_widget: Any = None
        self.text = ""
        self.last_flush = 0.0
        self.tools: dict[str, tuple[Any, Any, ToolRecord]] = {}
        """tool_use_id -> (accordion, body HTML, record)."""
        self.nested: dict[str, _Transcript] = {}

    def _append(self, widget: Any) -> None:
        self.box.children = (*self.box.children, widget)

    def _insert_before(self, widget: Any, tool_use_id: str | None) -> None:
        """Put ``widget`` just above the section of call ``tool_use_id`` (at the end when there is none)."""
        entry = self.tools.get(tool_use_id) if tool_use_id else None
        children = list(self.box.children)
        at = next((i for i, child in enumerate(children) if entry is not None and child is entry[0]), len(children))
        self.box.children = (*children[:at], widget, *children[at:])

    def _insert_after(self, widget: Any, tool_use_id: str | None) -> None:
        """Put ``widget`` just below the section of call ``tool_use_id`` (at the end when there is none)."""
        entry = self.tools.get(tool_use_id) if tool_use_id else None
        children = list(self.box.children)
        at = next((i + 1 for i, child in enumerate(children) if entry is not None and child is entry[0]),
                  len(children))
        self.box.children = (*children[:at], widget, *children[at:])

    def holder_of(self, tool_use_id: str | None) -> "_Transcript | None":
        """The transcript (this one, or a subagent's nested in it) that shows call ``tool_use_id``."""
        if tool_use_id in self.tools:
            return self
        for inner in self.nested.values():
            found = inner.holder_of(tool_use_id)
            if found is not None:
                return found
        return None

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

    def _body(self, tool: ToolRecord) -> str:
        """A call's section body, with its "copy code" button once the clipboard holds its code."""
        key = export.copy_key(self.record, tool) if self.clipboard is not None else None
        if key is not None:
            code = call_code_text(self.record, tool)
            if code is None or not self.clipboard.add(key, code + "\n"):  # refused: hidden characters
                key = None
        return export.render_tool_body_html(tool, copy=key, copy_nested=self.clipboard is not None)

    def on_tool_started(self, tool: ToolRecord) -> None:
        self.text_widget = None
        body = self.w.HTML(self._body(tool))
        body.add_class("agent-tool-body")
        container = self.w.VBox(children=(body,))
        accordion = self.w.Accordion(children=(container,))
        accordion.set_title(0, export.tool_summary(tool, time.monotonic()))
        accordion.add_class(f"agent-{tool.kind}")
        accordion.add_class("agent-tool")
        self.tools[tool.id] = (accordion, body, tool)
        self._append(accordion)

    def refresh(self, tool: ToolRecord) -> None:
        """Redraw one call's section from its record (started, finished, interrupted)."""
        entry = self.tools.get(tool.id)
        if entry is None:
            self.on_tool_started(tool)
            entry = self.tools[tool.id]
        accordion, body, _ = entry
        accordion.set_title(0, export.tool_summary(tool, time.monotonic()))
        if tool.subagent is not None:
            accordion.add_class("agent-subagent")
        body.value = self._body(tool)

    def open(self, tool: ToolRecord) -> None:
        """Unfold a call's section (once it prints, so the output is seen as it streams)."""
        entry = self.tools.get(tool.id)
        if entry is not None and entry[0].selected_index is None:
            entry[0].selected_index = 0

    def tick(self, now: float) -> None:
        for accordion, _, tool in self.tools.values():
            if tool.result is None and not tool.interrupted:
                accordion.set_title(0, export.tool_summary(tool, now))
        for inner in self.nested.values():
            inner.tick(now)

    def nested_for(self, tool: ToolRecord) -> "_Transcript":
        if tool.id not in self.nested:
            accordion, body, _ = self.tools[tool.id]
            inner = self.w.VBox(layout=self.w.Layout(margin="0 0 0 12px"))
            container = accordion.children[0]
            container.children = (*container.children, inner)
            self.nested[tool.id] = _Transcript(self.w, inner, self.clipboard)
            self.nested[tool.id].record = tool.subagent if tool.subagent is not None else RunRecord()
            accordion.add_class("agent-subagent")
        return self.nested[tool.id]


class WidgetRunView:
    """Event handler that renders a run into ipywidgets, live.

    ``view.widget`` is the root to display once; ``view.record`` the folded run.
    A daemon thread refreshes the status line every :data:`TICK_S` while the
    run goes; :meth:`close` (or the run's end) stops it.
    """

    def __init__(self, clipboard: Any = None) -> None:
        """``clipboard``: the session's :class:`~harness_magic.notebook.clipboard.CodeClipboard`; with it,
        each code or SQL call gets a "copy code" button."""
        import ipywidgets

        self.w = ipywidgets
        self.record = RunRecord()
        self.status = ipywidgets.HTML()
        self.status.add_class("agent-status-line")
        body = ipywidgets.VBox()
        self.transcript = _Transcript(ipywidgets, body, clipboard)
        self.state_panel = ipywidgets.HTML()
        """The run's state (plan, waits, verification, assumptions, confidence) above the transcript."""
        self.widget = _RunBox(children=(self.status, self.state_panel, body))
        self.widget.add_class("agent-run-view")
        self._state = "starting"
        self._started = time.monotonic()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._prompts: list[Any] = []
        """Questions and approvals shown in this view (:class:`~harness_magic.notebook.prompt_widget.PromptBox`)."""
        self._set_status("starting")

    def _set_status(self, state: str) -> None:
        self._state = state
        elapsed = None if self.record.result is not None else time.monotonic() - self._started
        self.status.value = (f'<span style="color:#57606a;font-size:0.9em">'
                             f"{_e(status_text(self.record, state, elapsed))}</span>")

    def _tick_loop(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self.record.result is not None:
                    return
                self._set_status(self._state)
                self.transcript.tick(time.monotonic())

    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick_loop, name="agent-status-tick", daemon=True)
            self._ticker.start()

    def stop(self) -> None:
        """Stop the ticker (the view keeps what it shows)."""
        self._stop.set()

    def close(self) -> None:
        """Stop the ticker and close every widget of the view (the front end drops them)."""
        self._stop.set()
        _close_tree(self.widget)

    def place_prompt(self, prompt: Any) -> bool:
        """Show a question's or approval's prompt (a :class:`~harness_magic.notebook.prompt_widget.PromptBox`)
        just below its call's section, a subagent's inside that subagent's section, at the end when the call
        is not shown; False once this view no longer shows a run in progress (the caller shows it alone)."""
        with self._lock:
            if self._stop.is_set():
                return False
            holder = self.transcript.holder_of(prompt.tool_use_id) or self.transcript
            holder._insert_after(prompt.widget, prompt.tool_use_id)
            self._prompts.append(prompt)
            return True

    def __call__(self, event: Any) -> None:
        with self._lock:
            record = self.record
            if isinstance(event, RunStarted):
                self.record = RunRecord(event.run_id, event.model, event.prompt, event.max_turns, event.run_file)
                self.record.state.apply(event)
                self.transcript.record = self.record
                self._started = time.monotonic()
                self._set_status("starting")
                self._start_ticker()
                return
            fold_event(record, event, self)
            self._render(self.transcript, record, event)
            panel = state_html(record.state, live=True)
            if panel != self.state_panel.value:
                self.state_panel.value = panel

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
        elif isinstance(event, (SandboxStep, WorkerReplaced)):
            if event.duration_s is None:
                if transcript is self.transcript:
                    self._set_status(export.sandbox_step_text(event))
            else:
                step = self.w.HTML(f'<div class="agent-sandbox-step" style="color:#57606a;font-size:0.9em">'
                                   f"{_e(export.sandbox_step_text(event))}</div>")
                transcript._insert_before(step, event.tool_use_id)
                running = next((t.name for t in reversed(record.tools) if t.result is None and not t.interrupted), None)
                if transcript is self.transcript and running is not None:
                    self._set_status(f"running {running}")
        elif isinstance(event, ApprovalStep):
            tool = record.tool(event.tool_use_id) if event.tool_use_id else None
            if tool is not None:
                transcript.refresh(tool)
            self._set_status(f"waiting for approval: {event.tool}" if event.wait_s is None  # a subagent's too
                             else f"running {event.tool}")
        elif isinstance(event, QuestionStep):  # the wait is the user's, shown apart from tool time
            tool = record.tool(event.tool_use_id) if event.tool_use_id else None
            if tool is not None:
                transcript.refresh(tool)
            self._set_status(f"waiting for your answer: {export.clip(event.question, 80)}" if event.source is None
                             else "running ask_user")
        elif isinstance(event, ToolOutputDelta):
            tool = record.tool(event.tool_use_id)
            if tool is not None and tool.result is None:
                transcript.refresh(tool)  # the backend hands output on at most ~10 times a second
                transcript.open(tool)
        elif isinstance(event, ToolCallFinished):
            tool = record.tool(event.tool_use.id)
            if tool is not None:
                transcript.refresh(tool)
            if transcript is self.transcript:
                self._set_status("thinking")
        elif isinstance(event, (TurnStarted, TurnFinished)) and transcript is self.transcript:
            if isinstance(event, TurnStarted):
                record.turn = event.turn
            self._set_status("waiting for the model" if isinstance(event, TurnStarted) else "thinking")
        elif isinstance(event, EngineProgress) and transcript is self.transcript:
            self._set_status("thinking" if event.done else f"{event.engine} query "
                             f"{'running' if event.percent is None else f'{event.percent:.0f}%'}")
        elif isinstance(event, AssumptionRecorded) and event.source == "model":
            for prompt in self._prompts:  # the assumption a withdrawn question left the agent to make
                if prompt.show_assumption(event.text):
                    break
        elif isinstance(event, ReminderAdded):
            pass  # what the model saw, not what the user needs: shown only in the transcript's model view
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
            self._stop.set()
            transcript.text_widget = None
            for _, _, tool in list(transcript.tools.values()):
                if tool.interrupted:
                    transcript.refresh(tool)
            result = event.result
            self._set_status(result.status if result.status == "completed" else f"{result.status}: {result.error or ''}")


def _close_tree(widget: Any) -> None:
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


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
