"""Run records: what one run showed, folded from the session's events.

Contract: a :class:`RunRecorder` subscribed to a session's events keeps, per
run, a plain :class:`RunRecord` — the prompt, the model's text, every tool call
(:class:`ToolRecord`) with its code, result, snapshots, charts and live output,
nested subagent transcripts, notices, reminders and the final result — in the
order they happened. :func:`apply_event` is the one fold; events it does not
know are ignored. Records hold data only: rendering is :mod:`.render_html`,
:mod:`.render_markdown` and the notebook's views.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from harness_magic.core.transcript.events import (
    ApprovalStep,
    BudgetsUsed,
    AssistantMessage,
    MaskingApplied,
    Notice,
    QuestionStep,
    ReminderAdded,
    RunFinished,
    RunStarted,
    SandboxStep,
    SubagentEvent,
    TextDelta,
    ToolCallFinished,
    TraceStarted,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
    WorkerReplaced,
)
from harness_magic.core.transcript.run_state import RunState

__all__ = [
    "RunRecord",
    "ToolRecord",
    "RunRecorder",
    "apply_event",
    "sandbox_step_text",
    "clip",
    "CONNECTOR_TOOL",
    "LIVE_OUTPUT_MAX_CHARS",
]

CONNECTOR_TOOL = "load_connectors"
"""Tool whose calls render as connector loads."""
LIVE_OUTPUT_MAX_CHARS = 256_000
"""Characters of live output a record keeps per call (the backend streams fewer): a display, not a log."""


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with ``…``."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"



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
    wait_label: str = "approval"
    """What the user's wait was for: ``approval``, or ``answer`` (an ``ask_user`` question)."""
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
    masked: dict[str, int] = field(default_factory=dict)
    """Values masked or denied in what the model read of this call, per sensitivity class (never the values)."""

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
            return f"subagent: {clip(task, 60)}" if task else f"subagent ({self.name})"
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
    """The :class:`~harness_magic.core.agent.result.RunResult`, once finished."""
    state: RunState = field(default_factory=RunState)
    """Goal, plan, waits, verification, assumptions and confidence, folded from the same events."""
    trace_id: str | None = None
    """The run's OpenTelemetry trace id (32 hex digits) when it was traced (:class:`TraceStarted`)."""
    budgets: BudgetsUsed | None = None
    """What the run used of its query and write budgets, when one was set (the latest :class:`BudgetsUsed`)."""

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
            self.current.state.apply(event)
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


def sandbox_step_text(event: SandboxStep | WorkerReplaced) -> str:
    """``sandbox started · 2.31 s`` (``fresh sandbox worker forked``, ``sandbox restarted``);
    ``starting the sandbox`` (``forking …``, ``restarting …``) while it runs; for a :class:`WorkerReplaced`,
    ``sandbox worker (pid 812) was found dead (killed by SIGKILL) and replaced before the call ran · 0.05 s``."""
    if isinstance(event, WorkerReplaced):
        what = "sandbox worker" if event.process == "worker" else "sandbox launcher"
        replaced = "replaced" if event.process == "worker" else "replaced with its worker"
        return (f"{what} (pid {event.pid}) was found dead ({event.why[:200]}) and {replaced} "
                f"before the call ran · {event.duration_s:.2f} s")
    running, done = _STEP_WORDS.get(event.action, _STEP_WORDS["restart"])
    if event.duration_s is None:
        return running
    return f"{done} · {event.duration_s:.2f} s"


def apply_event(record: RunRecord, event: Any, state: Any) -> None:
    """Fold one event into ``record`` (``state`` tracks whether text is streaming)."""
    record.state.apply(event)
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
    elif isinstance(event, TraceStarted):
        record.trace_id = event.trace_id
    elif isinstance(event, BudgetsUsed):
        record.budgets = event
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
    elif isinstance(event, (SandboxStep, WorkerReplaced)):
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
    elif isinstance(event, QuestionStep):  # the wait for an answer, like an approval's, is apart from tool time
        tool = record.tool(event.tool_use_id) if event.tool_use_id else None
        if tool is not None:
            tool.wait_label = "answer"
            if event.source is None:
                tool.approval_since = time.monotonic()
            else:
                tool.approval_since = None
                tool.approval_wait_s += event.wait_s or 0.0
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
    elif isinstance(event, MaskingApplied):  # counts only: the values never reach a record
        tool = record.tool(event.tool_use_id) if event.tool_use_id else None
        if tool is not None:  # the call's own section says it too: a masked figure is not a computed one
            for cls, n in event.counts:
                tool.masked[cls] = tool.masked.get(cls, 0) + n
        what = ", ".join(f"{n} {cls}" for cls, n in event.counts)
        record.items.append(("notice", "info", f"sensitive values masked before the model saw this {event.where}: "
                                               f"{what}"))
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
