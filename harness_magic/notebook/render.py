"""Live rendering of a run: ipywidgets in a notebook, rich in a terminal.

Both renderers are event handlers (the loop emits, they subscribe). The widget
view is fed kernel-side — widget values and children are set from Python, never
through ``with output:`` capture — so it updates from any thread and headless.
A :class:`~harness_magic.core.export.RunRecord` is folded alongside, so the
final output and the exports render the same content.

One output per cell: the widget view is the live form only. While the run
goes, model text streams in, each tool call is a collapsible section (code,
result for people, snapshot tables, charts at their natural size, the exact
text the model saw one click away), and the status line ticks every
:data:`TICK_S`. When the run ends the magic replaces the view, in place, with
the static final form (:func:`harness_magic.core.export.render_answer_html`),
which is also what a saved notebook carries.

Every string from the model or the data is escaped, and model Markdown goes
through :func:`harness_magic.core.text.safe_markdown.markdown_to_html` (sanitized,
only ``data:`` images), before it becomes the value of an HTML widget. In the terminal, model and data text goes through
:func:`strip_control` (control bytes shown as escapes, never driving the terminal).
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass
from typing import Any

from harness_magic.core import export
from harness_magic.core.transcript.events import (
    ApprovalStep,
    AssistantMessage,
    EngineProgress,
    Notice,
    ReminderAdded,
    RunFinished,
    RunStarted,
    SandboxStep,
    SubagentEvent,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
    TurnStarted,
)
from harness_magic.core.export import RunRecord, ToolRecord
from harness_magic.core.transcript.scrub import escape_control

__all__ = ["WidgetRunView", "TerminalRenderer", "status_text", "strip_control", "strip_tree", "STREAM_FLUSH_S", "TICK_S",
           "TERMINAL_RESULT_LINES", "TERMINAL_HEADER_WAIT_S"]

STREAM_FLUSH_S = 0.05
"""Streamed text is pushed to the front end at most this often: smooth, without a message per token."""
TICK_S = 1.0
"""The status line and a running call's time are refreshed this often while nothing else happens."""
TERMINAL_RESULT_LINES = 40
"""Lines of a tool result printed in the terminal before ``… N lines more``."""
TERMINAL_PROGRESS_STEP = 25
"""Where the output is not a terminal (a log, a pipe), engine progress prints one line per this many percent."""
TERMINAL_HEADER_WAIT_S = 0.5
"""A call's header waits at most this long for the call's own sandbox step, so the step prints above the call (as
in the notebook): the step is announced milliseconds after the call starts, once the call's inputs are read."""

_e = html.escape


def strip_control(text: Any) -> str:
    """``text`` safe for a terminal: control characters other than newline and tab (ESC, OSC, CR, ...)
    shown as visible escapes (:func:`~harness_magic.core.transcript.scrub.escape_control`); CRLF line ends become LF."""
    return escape_control(str(text).replace("\r\n", "\n"))


def _apply(record: RunRecord, event: Any, state: Any) -> None:
    """Fold ``event`` into ``record``; a finished run counts its subagents' usage too."""
    export.apply_event(record, event, state)
    if isinstance(event, RunFinished):
        record.usage = getattr(event.result, "total_usage", event.result.usage)


def status_text(record: RunRecord, state: str, elapsed_s: float | None = None) -> str:
    """``turn 2/25 · 1,234 tokens (200 cached) · $0.0012 · 1.3 s · running``."""
    bits = [f"turn {record.turn}/{record.max_turns or '?'}"]
    usage = record.usage
    if usage is not None:
        bits.append(f"{usage.total_tokens:,} tokens ({usage.cached_tokens:,} cached)")
        bits.append(f"${usage.cost:.4f}")
    bits.append(f"{record.elapsed_s if elapsed_s is None else elapsed_s:.1f} s")
    bits.append(state)
    return " · ".join(bits)


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
            from harness_magic.notebook.control_magics import call_code_text

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
        self.widget = _RunBox(children=(self.status, body))
        self.widget.add_class("agent-run-view")
        self._state = "starting"
        self._started = time.monotonic()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
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

    def __call__(self, event: Any) -> None:
        with self._lock:
            record = self.record
            if isinstance(event, RunStarted):
                self.record = RunRecord(event.run_id, event.model, event.prompt, event.max_turns, event.run_file)
                self.transcript.record = self.record
                self._started = time.monotonic()
                self._set_status("starting")
                self._start_ticker()
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
        elif isinstance(event, SandboxStep):
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


@dataclass
class _HeldHeader:
    """A call's header held back for the call's own sandbox step (see :class:`TerminalRenderer`)."""

    tool_use_id: str
    text: str
    """The header as rendered when the call started (styles included)."""
    file: Any
    """Where the run printed when the call started (not a capture of model code that may be in place later)."""
    step_running: bool = False
    """The call's sandbox step was announced: the header waits for its end, however long."""


class TerminalRenderer:
    """Event handler that prints a run with rich (terminal IPython, scripts).

    Model messages print as rich Markdown once complete (never raw ``**``/``|---|``),
    tool results keep their line breaks (bounded by :data:`TERMINAL_RESULT_LINES`),
    snapshots print as rich tables, SQL as highlighted SQL, file reads as a
    path, and each chart as one line saying where to see it. Control characters
    and escape sequences from the model or the data are stripped first. Results
    show what people read (:func:`~harness_magic.core.export.display_result_text`):
    notes meant only for the model stay in the run's log and exports' "what the model saw".

    A sandbox step (start, fork, restart) prints above the call it ran for, with
    its time, as the notebook shows it: a call's header waits for the first thing
    the call does, at most ``header_wait_s``; a step of its own goes first (while
    it runs, ``starting the sandbox…`` is one line rewritten in place on a
    terminal), anything else prints the header at once. A step that comes later
    (a worker lost while the call ran) prints where it happens.
    """

    def __init__(self, console: Any = None, header_wait_s: float = TERMINAL_HEADER_WAIT_S) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)
        self.header_wait_s = header_wait_s
        """Longest a call's header waits for the call's own sandbox step (see the class docstring)."""
        self.record = RunRecord()
        self._streaming = False
        self._live: dict[str, list[Any]] = {}
        """tool_use_id -> [lines printed live, lines held back, unfinished last line]."""
        self.printed_final = False
        """True once the final answer has been printed (the cell's value need not repeat it)."""
        self._lock = threading.RLock()
        """One printer at a time: the loop, the engine's polling thread and the header timer all print."""
        self._progress_shown: str | None = None
        """The line rewritten in place now on screen (engine progress, a running sandbox step), or None."""
        self._pending: _HeldHeader | None = None
        """The header of the call that waits for its sandbox step, or None."""
        self._pending_timer: threading.Timer | None = None
        self._progress_step = -1
        """Last TERMINAL_PROGRESS_STEP band printed where the output is not a terminal."""

    def _engine_progress(self, event: EngineProgress) -> None:
        """A running engine query's progress: one line rewritten in place on a terminal, cleared when done;
        elsewhere one line per TERMINAL_PROGRESS_STEP percent. Called from the engine's polling thread."""
        from rich.text import Text

        engine = strip_control(event.engine)
        with self._lock:
            self._flush_header()  # the query runs inside its call: under the call's header
            if event.done:
                self._clear_progress_locked()
                self._progress_step = -1
                return
            percent = "running" if event.percent is None else f"{max(0.0, min(event.percent, 100.0)):.0f}%"
            text = f"{engine} query {percent}"
            if self.console.is_terminal:
                if text != self._progress_shown:
                    self.console.file.write("\r" + text + "\x1b[K")
                    self.console.file.flush()
                    self._progress_shown = text
            elif event.percent is not None and int(event.percent // TERMINAL_PROGRESS_STEP) > self._progress_step:
                self._progress_step = int(event.percent // TERMINAL_PROGRESS_STEP)
                self.console.print(Text(text, style="dim"))

    def _clear_progress_locked(self) -> None:
        if self._progress_shown is not None:
            self.console.file.write("\r\x1b[K")
            self.console.file.flush()
            self._progress_shown = None

    def _step_running(self, event: SandboxStep) -> None:
        """``starting the sandbox…``: rewritten in place on a terminal (the done step replaces it), a line elsewhere."""
        from rich.text import Text

        text = export.sandbox_step_text(event) + "…"
        if self.console.is_terminal:
            self.console.file.write("\r" + text + "\x1b[K")
            self.console.file.flush()
            self._progress_shown = text
        else:
            self.console.print(Text(text, style="dim"))

    def _hold_header(self, tool_use_id: str, header: Any) -> None:
        """Keep a call's header until its first event, or :attr:`header_wait_s` (see the class docstring).

        The header is rendered now, for the output the run prints to now: the timer may fire while in-process
        model code runs with ``sys.stdout`` redirected into its capture, and the header must not land there.
        """
        with self.console.capture() as capture:
            self.console.print(header)
        self._pending = _HeldHeader(tool_use_id, capture.get(), self.console.file)
        timer = threading.Timer(self.header_wait_s, self._header_due, args=(tool_use_id,))
        timer.daemon = True
        self._pending_timer = timer
        timer.start()

    def _header_due(self, tool_use_id: str) -> None:
        """The timer's end: nothing came from the call, so its header prints now (unless its step runs)."""
        with self._lock:
            held = self._pending
            if held is not None and held.tool_use_id == tool_use_id and not held.step_running:
                self._flush_header()

    def _flush_header(self) -> None:
        """Print the waiting header, if any (the lock is held)."""
        if self._pending_timer is not None:
            self._pending_timer.cancel()
            self._pending_timer = None
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.file.write(pending.text)
            pending.file.flush()

    def __call__(self, event: Any) -> None:
        from rich.text import Text

        c = self.console
        if isinstance(event, EngineProgress):
            self._engine_progress(event)
            return
        with self._lock:
            self._clear_progress_locked()  # anything else printed starts on a clean line
            if isinstance(event, SandboxStep) and self._pending is not None \
                    and event.tool_use_id == self._pending.tool_use_id:  # the step of the call whose header waits
                _apply(self.record, event, self)
                if event.duration_s is None:
                    self._pending.step_running = True
                    self._step_running(event)
                else:
                    c.print(Text(export.sandbox_step_text(event), style="dim"))
                    self._flush_header()
                return
            self._flush_header()
            self._print_event(event)

    def _print_event(self, event: Any) -> None:
        """Print one event (the lock is held, any waiting header printed)."""
        from rich.markdown import Markdown
        from rich.panel import Panel
        from rich.syntax import Syntax
        from rich.text import Text

        c = self.console
        if isinstance(event, RunStarted):
            self.record = RunRecord(event.run_id, event.model, event.prompt, event.max_turns, event.run_file)
            self.printed_final = False
            return
        _apply(self.record, event, self)
        if isinstance(event, SubagentEvent):
            inner = event.event
            if isinstance(inner, ToolCallStarted):
                c.print(Text(strip_control(f"  ↳ subagent calls {inner.tool_use.name}"), style="dim"))
            elif isinstance(inner, AssistantMessage) and inner.message.text:
                c.print(Text("  ↳ subagent: " + export._clip(strip_control(inner.message.text), 200), style="dim"))
        elif isinstance(event, AssistantMessage):
            text = strip_control(event.message.text).strip()
            if text:
                c.print(Markdown(text))
                if not event.message.tool_uses:
                    self.printed_final = True
        elif isinstance(event, ToolCallStarted):
            tool = self.record.tool(event.tool_use.id)
            source = export.tool_call_source(tool) if tool is not None else None
            if source is None:
                body: Any = Text(strip_control(str(event.tool_use.input)))
            elif source[0] == "path":
                body = Text.assemble(("path ", "dim"), strip_control(source[1]))
            else:
                body = Syntax(strip_control(source[1]), source[0], word_wrap=True)
            self._hold_header(event.tool_use.id,
                              Panel(body, title=strip_control(event.tool_use.name), title_align="left",
                                    border_style="blue"))
        elif isinstance(event, SandboxStep):  # not for a waiting header: where it happens
            if event.duration_s is None:
                self._step_running(event)
            else:
                c.print(Text(export.sandbox_step_text(event), style="dim"))
        elif isinstance(event, ToolOutputDelta):
            self._print_live(event)
        elif isinstance(event, ToolCallFinished):
            tool = self.record.tool(event.tool_use.id)
            self._end_live(event.tool_use.id)
            if tool is not None:
                self._print_tool(tool)
        elif isinstance(event, TurnFinished):
            c.print(Text(status_text(self.record, "…"), style="dim"))
        elif isinstance(event, Notice):
            c.print(Text(strip_control(event.text), style="yellow" if event.level != "error" else "red"))
        elif isinstance(event, RunFinished):
            result = event.result
            for tool_use_id in list(self._live):
                self._end_live(tool_use_id)
            for tool in self.record.tools:
                if tool.interrupted:
                    c.print(Text(strip_control(export.tool_summary(tool)), style="yellow"))
            if result.status != "completed":
                c.print(Text(f"{result.status}: {strip_control(result.error or '')}", style="bold red"))
            elif result.text and not self.printed_final:
                c.print(Markdown(strip_control(result.text)))
                self.printed_final = True
            for i, chart in enumerate(result.charts, 1):
                c.print(Text(f"chart {i} of {len(result.charts)}: {_png_size(chart)} PNG — "
                             f"%agent_export run.html shows it", style="dim"))
            c.print(Text(strip_control(export.render_footer_text(self.record)), style="dim"))

    def _print_live(self, event: ToolOutputDelta) -> None:
        """Print a running call's output line by line as it arrives, at most TERMINAL_RESULT_LINES."""
        from rich.text import Text

        state = self._live.setdefault(event.tool_use_id, [0, 0, ""])
        *lines, state[2] = (state[2] + event.text).split("\n")
        for line in lines:
            if state[0] < TERMINAL_RESULT_LINES:
                self.console.print(Text("│ " + strip_control(line), style="dim"))
                state[0] += 1
            else:
                state[1] += 1

    def _end_live(self, tool_use_id: str) -> None:
        """After a streamed call: the unfinished last line and how many lines were held back."""
        from rich.text import Text

        state = self._live.pop(tool_use_id, None)
        if state is None:
            return
        if state[2]:
            if state[0] < TERMINAL_RESULT_LINES:
                self.console.print(Text("│ " + strip_control(state[2]), style="dim"))
            else:
                state[1] += 1
        if state[1]:
            self.console.print(Text(f"│ … {state[1]:,} lines more", style="dim"))

    def _print_tool(self, tool: ToolRecord) -> None:
        from rich.text import Text

        from harness_magic.core.text.snapshot_view import snapshot_rich

        c = self.console
        style = "red" if tool.is_error else "dim"
        c.print(Text(strip_control(export.tool_summary(tool)), style=style))
        shown = export.display_result_text(tool)
        streamed = "stdout:\n" + "".join(chunk for _, chunk in tool.output)
        if tool.output and (shown + "\n").startswith(streamed):  # already printed live: one copy only
            shown = (shown + "\n")[len(streamed):].strip("\n")
        shown = strip_control(shown)
        lines = shown.splitlines()
        if len(lines) > TERMINAL_RESULT_LINES:
            lines = lines[:TERMINAL_RESULT_LINES] + [f"… {len(lines) - TERMINAL_RESULT_LINES:,} lines more"]
        if lines:
            c.print(Text("\n".join(lines), style="red" if tool.is_error else ""))
        for name, snap in zip(tool.handles, tool.snapshots):
            if snap:
                c.print(snapshot_rich(strip_control(name), strip_tree(snap)))


def strip_tree(value: Any) -> Any:
    """A snapshot (any JSON tree) with control characters removed from every string in it."""
    if isinstance(value, str):
        return strip_control(value)
    if isinstance(value, list):
        return [strip_tree(v) for v in value]
    if isinstance(value, dict):
        return {(strip_control(k) if isinstance(k, str) else k): strip_tree(v) for k, v in value.items()}
    return value


def _png_size(data: str) -> str:
    """``WIDTHxHEIGHT`` read from a base64 PNG header (``?`` when it is not one)."""
    import base64
    import struct

    try:
        head = base64.b64decode(data[:48])
        if head[:8] == b"\x89PNG\r\n\x1a\n":
            width, height = struct.unpack(">II", head[16:24])
            return f"{width}×{height}"
    except (ValueError, struct.error):
        pass
    return "?"
