"""The live view of a run in a terminal: rich, with model and data text made safe to print.

The renderer is an event handler (the loop emits, it subscribes). Model and
data text goes through :func:`strip_control` first (control bytes shown as
escapes, never driving the terminal).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from harness_magic.core import export
from harness_magic.core.export.record import RunRecord, ToolRecord, clip
from harness_magic.core.text.counts import count
from harness_magic.core.transcript.events import (
    AssistantMessage,
    EngineProgress,
    Notice,
    QuestionStep,
    RunFinished,
    RunStarted,
    SandboxStep,
    WorkerReplaced,
    SubagentEvent,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
)
from harness_magic.core.transcript.run_state import parse_trailer
from harness_magic.core.transcript.scrub import escape_control
from harness_magic.notebook.render.common import fold_event, status_text

__all__ = ["TerminalRenderer", "strip_control", "strip_tree", "TERMINAL_RESULT_LINES", "TERMINAL_PROGRESS_STEP",
           "TERMINAL_HEADER_WAIT_S"]

TERMINAL_RESULT_LINES = 40
"""Lines of a tool result printed in the terminal before ``… N lines more``."""
TERMINAL_PROGRESS_STEP = 25
"""Where the output is not a terminal (a log, a pipe), engine progress prints one line per this many percent."""
TERMINAL_HEADER_WAIT_S = 0.5
"""A call's header waits at most this long for the call's own sandbox step, so the step prints above the call (as
in the notebook): the step is announced milliseconds after the call starts, once the call's inputs are read."""


def strip_control(text: Any) -> str:
    """``text`` safe for a terminal: control characters other than newline and tab (ESC, OSC, CR, ...)
    shown as visible escapes (:func:`~harness_magic.core.transcript.scrub.escape_control`); CRLF line ends become LF."""
    return escape_control(str(text).replace("\r\n", "\n"))


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


IMAGE_SOURCE_CHARS = 80
"""Characters of a (non-``data:``) image address printed in place of the image."""


def _image_placeholder(token: Any) -> list[Any]:
    """Inline tokens that stand where an image was: ``[image: alt — address]`` in italics."""
    from markdown_it.token import Token

    alt = " ".join("".join(child.content for child in (token.children or [])).split()) or "image"
    src = str(token.attrGet("src") or "").strip()
    where = "" if not src or src.lower().startswith("data:") else f" — {clip(src, IMAGE_SOURCE_CHARS)}"
    label = Token("text", "", 0)
    label.content = f"[image: {alt}{where}]"
    return [Token("em_open", "em", 1), label, Token("em_close", "em", -1)]


def terminal_markdown(text: str) -> Any:
    """``text`` as a rich Markdown renderable whose images print as text in their place.

    A terminal shows no image, and rich's own placeholder moves the alt text to the
    front of its paragraph; here each image becomes ``[image: alt — address]`` where it stood
    (no request is made: the address is only printed).
    """
    from rich.markdown import Markdown

    markdown = Markdown(text)
    for block in markdown.parsed:
        if block.type == "inline" and block.children:
            block.children = [part for child in block.children
                              for part in (_image_placeholder(child) if child.type == "image" else [child])]
    return markdown


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
            if isinstance(event, (SandboxStep, WorkerReplaced)) and self._pending is not None \
                    and event.tool_use_id == self._pending.tool_use_id:  # the step of the call whose header waits
                fold_event(self.record, event, self)
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
        from rich.panel import Panel
        from rich.syntax import Syntax
        from rich.text import Text

        c = self.console
        if isinstance(event, RunStarted):
            self.record = RunRecord(event.run_id, event.model, event.prompt, event.max_turns, event.run_file)
            self.record.state.apply(event)
            self.printed_final = False
            return
        fold_event(self.record, event, self)
        if isinstance(event, SubagentEvent):
            inner = event.event
            if isinstance(inner, ToolCallStarted):
                c.print(Text(strip_control(f"  ↳ subagent calls {inner.tool_use.name}"), style="dim"))
            elif isinstance(inner, AssistantMessage) and inner.message.text:
                c.print(Text("  ↳ subagent: " + clip(strip_control(inner.message.text), 200), style="dim"))
        elif isinstance(event, AssistantMessage):
            text = event.message.text
            if not event.message.tool_uses:  # a final answer: its Confidence trailer shows in the state box
                text = parse_trailer(text).shown_answer(text)
            text = strip_control(text).strip()
            if text:
                c.print(terminal_markdown(text))
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
        elif isinstance(event, (SandboxStep, WorkerReplaced)):  # not for a waiting header: where it happens
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
        elif isinstance(event, QuestionStep) and event.source is not None:
            answer = clip(strip_control(event.answer), 200) if event.answer else "no answer"
            c.print(Text(f"answer ({event.source}, waited {event.wait_s or 0.0:.1f} s): {answer}", style="dim"))
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
                c.print(terminal_markdown(strip_control(result.text)))
                self.printed_final = True
            for i, chart in enumerate(result.charts, 1):
                c.print(Text(f"chart {i} of {len(result.charts)}: {_png_size(chart)} PNG — "
                             f"%agent_export run.html shows it", style="dim"))
            if not self.record.state.empty:  # the run's state, as the notebook shows it above the transcript
                c.print(Panel(Text(strip_control(self.record.state.text())), title="run state", title_align="left",
                              border_style="dim"))
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
            self.console.print(Text(f"│ … {count(state[1], 'line')} more", style="dim"))

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
            lines = lines[:TERMINAL_RESULT_LINES] + [f"… {count(len(lines) - TERMINAL_RESULT_LINES, 'line')} more"]
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
