"""Events the loop emits. Logging, widgets and terminal output subscribe.

Every event is a small frozen dataclass with a ``kind`` literal. Events carry
harness types only, never provider objects or raw cached payloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Union

from harness_magic.core.transcript.messages import Message, ToolResultBlock, ToolUseBlock, Usage

__all__ = [
    "RunStarted",
    "BudgetsUsed",
    "TurnStarted",
    "TextDelta",
    "AssistantMessage",
    "ToolCallStarted",
    "ToolCallFinished",
    "ToolOutputDelta",
    "SandboxStep",
    "WorkerReplaced",
    "ApprovalStep",
    "ReminderAdded",
    "TurnFinished",
    "RunFinished",
    "SubagentEvent",
    "Notice",
    "ContextCompacted",
    "VerificationChecked",
    "EngineProgress",
    "QuestionStep",
    "AssumptionRecorded",
    "SkillLoaded",
    "MemoryChanged",
    "MaskingApplied",
    "TraceStarted",
    "Event",
    "EventHandler",
]


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    model: str
    max_turns: int
    prompt: str
    run_file: str | None
    kind: Literal["run_started"] = "run_started"


@dataclass(frozen=True)
class TurnStarted:
    turn: int
    """1-based provider turn within the run."""
    max_turns: int
    kind: Literal["turn_started"] = "turn_started"


@dataclass(frozen=True)
class TextDelta:
    """A piece of model text as it streams in."""

    turn: int
    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True)
class AssistantMessage:
    """The model's complete message for a turn (after streaming)."""

    turn: int
    message: Message
    usage: Usage
    finish_reason: str | None = None
    """Why the model stopped, as the provider said (``stop``, ``tool_calls``, ``length``...); None: not said."""
    kind: Literal["assistant_message"] = "assistant_message"


@dataclass(frozen=True)
class ToolCallStarted:
    turn: int
    tool_use: ToolUseBlock
    kind: Literal["tool_call_started"] = "tool_call_started"


@dataclass(frozen=True)
class ToolCallFinished:
    turn: int
    tool_use: ToolUseBlock
    result: ToolResultBlock
    duration_s: float
    handles: tuple[str, ...] = ()
    """Cache handles the call created."""
    artifacts: tuple[dict[str, Any], ...] = ()
    """Display-only extras such as PNG charts; never sent to the model."""
    snapshots: tuple[dict[str, Any], ...] = ()
    """Snapshots of ``handles``, in the same order, for rendering."""
    approval_wait_s: float = 0.0
    """Seconds of ``duration_s`` spent waiting for the user's approval (the tool's own time is the rest)."""
    display_text: str | None = None
    """What people read of the result when it differs from ``result.content`` (model-only notes left out, see
    :attr:`~harness_magic.core.execution.tools.ToolOutput.display_text`); None: the result itself. Never sent to the model."""
    kind: Literal["tool_call_finished"] = "tool_call_finished"


@dataclass(frozen=True)
class ToolOutputDelta:
    """Text a running tool call printed (stdout and stderr), as it arrives; bounded by the backend.

    Display only: the call's :class:`ToolCallFinished` result holds the full output.
    """

    turn: int
    tool_use_id: str
    text: str
    kind: Literal["tool_output_delta"] = "tool_output_delta"


@dataclass(frozen=True)
class SandboxStep:
    """The sandbox is being started, forked or restarted during a tool call (``duration_s`` None), or was (with its time)."""

    action: Literal["start", "restart", "fork"]
    """``start``: the first use in the session (launcher and worker); ``fork``: this cell's fresh worker
    (one per run, forked at its first interpreter call); ``restart``: a new worker after one was lost."""
    duration_s: float | None = None
    tool_use_id: str | None = None
    kind: Literal["sandbox_step"] = "sandbox_step"


@dataclass(frozen=True)
class WorkerReplaced:
    """The sandbox worker, or the launcher that forks workers, was found dead when a tool call started and was
    replaced before the code ran; the call then ran once, in the new worker. For the log and the live view:
    the model's result carries no trace of it."""

    process: Literal["worker", "launcher"]
    """What had died."""
    pid: int
    why: str
    """How it ended: ``killed by SIGKILL``, ``exited with status 3``..."""
    exit_status: int | None = None
    signal: str | None = None
    """The signal's name (``SIGKILL``) when one killed it."""
    new_pid: int | None = None
    """The replacement worker's process id."""
    duration_s: float = 0.0
    """Seconds the replacement took (a new launcher's start included)."""
    tool_use_id: str | None = None
    kind: Literal["worker_replaced"] = "worker_replaced"


@dataclass(frozen=True)
class ApprovalStep:
    """The user is being asked to approve a tool call (``wait_s`` None), or has answered (with the wait).

    Emitted only when the policy really asks (an ``ask`` rule with an approver),
    around the approver's call; the wait is not the tool's time.
    """

    tool: str
    """Full tool name, e.g. ``sql__execute``."""
    tool_use_id: str | None = None
    wait_s: float | None = None
    """Seconds the approver took; None while it is still asking."""
    approved: bool | None = None
    """The answer (None while asking)."""
    kind: Literal["approval_step"] = "approval_step"


@dataclass(frozen=True)
class ReminderAdded:
    """A suffix reminder appended before a provider call."""

    turn: int
    text: str
    kind: Literal["reminder_added"] = "reminder_added"


@dataclass(frozen=True)
class TurnFinished:
    turn: int
    usage: Usage
    """Usage of this turn's provider call."""
    total_usage: Usage
    """Usage summed over the run so far."""
    elapsed_s: float
    kind: Literal["turn_finished"] = "turn_finished"


@dataclass(frozen=True)
class RunFinished:
    result: Any
    """The :class:`~harness_magic.core.agent.result.RunResult`."""
    kind: Literal["run_finished"] = "run_finished"


@dataclass(frozen=True)
class Notice:
    """Something the user should see that is not part of the transcript."""

    text: str
    level: Literal["info", "warning", "error"] = "info"
    kind: Literal["notice"] = "notice"


@dataclass(frozen=True)
class ContextCompacted:
    """The history was compacted to fit the model's input window before a request."""

    turn: int
    stage: str
    """``tool_results`` (older results cut to their handle line) or ``summary`` (older turns summarised)."""
    tokens_before: int
    tokens_after: int
    limit: int
    """The model's input-token limit."""
    results_compacted: int = 0
    messages_summarised: int = 0
    kind: Literal["context_compacted"] = "context_compacted"


@dataclass(frozen=True)
class EngineProgress:
    """How far an engine query has got (e.g. DuckDB's ``query_progress``), for the live status line."""

    engine: str
    """Connector or engine name (``duckdb``)."""
    percent: float | None
    """0-100, or None when the engine cannot tell."""
    done: bool = False
    """True on the last report of a query (finished, failed or interrupted)."""
    kind: Literal["engine_progress"] = "engine_progress"


@dataclass(frozen=True)
class VerificationChecked:
    """Outcome of the user's after-tool checks on one tool call's result handles."""

    turn: int | None
    tool_use_id: str
    tool: str
    passed: bool
    """False when any check failed (the model got an error result)."""
    checks: tuple[dict[str, Any], ...] = ()
    """``{"rule", "handle", "ok", "detail"}`` per check that applied."""
    kind: Literal["verification_checked"] = "verification_checked"


@dataclass(frozen=True)
class SubagentEvent:
    """An event from a subagent's run, wrapped with its parent tool call."""

    parent_tool_use_id: str
    event: Any
    depth: int = 1
    kind: Literal["subagent_event"] = "subagent_event"


@dataclass(frozen=True)
class QuestionStep:
    """The agent asks the user a clarifying question (``answer`` None), or it was answered (with the wait).

    Like :class:`ApprovalStep`, the wait is shown apart from tool time.
    """

    question: str
    options: tuple[str, ...] = ()
    why: str = ""
    tool_use_id: str | None = None
    answer: str | None = None
    """None while asking."""
    source: Literal["user", "timeout", "interrupt", "no_person", "scripted"] | None = None
    """Who answered: the user, or the harness's stand-in answer and why (None while asking)."""
    wait_s: float | None = None
    kind: Literal["question_step"] = "question_step"


@dataclass(frozen=True)
class AssumptionRecorded:
    """An assumption this run works under (stated by the model, or taken from an answered question/memory)."""

    text: str
    source: Literal["model", "question", "memory"] = "model"
    tool_use_id: str | None = None
    kind: Literal["assumption_recorded"] = "assumption_recorded"


@dataclass(frozen=True)
class SkillLoaded:
    """A skill's template was loaded for this run; ``rules`` are the verification rules it added."""

    name: str
    rules: tuple[str, ...] = ()
    tool_use_id: str | None = None
    kind: Literal["skill_loaded"] = "skill_loaded"


@dataclass(frozen=True)
class MemoryChanged:
    """Session or workspace memory changed: an entry recorded, edited or removed."""

    scope: Literal["session", "workspace"]
    action: Literal["recorded", "edited", "removed", "cleared"]
    entry_kind: str
    """``goal``, ``assumption``, ``domain`` or ``definition``."""
    text: str = ""
    kind: Literal["memory_changed"] = "memory_changed"


@dataclass(frozen=True)
class MaskingApplied:
    """Sensitive values were masked (or denied) in text going to the model; counts only, never the values."""

    where: str
    """What was masked: ``tool_result``, ``snapshot``, ``error``, ``subagent``..."""
    tool_use_id: str | None = None
    counts: tuple[tuple[str, int], ...] = ()
    """``(sensitivity class, values masked)`` pairs."""
    kind: Literal["masking_applied"] = "masking_applied"


@dataclass(frozen=True)
class TraceStarted:
    """The run is traced (OpenTelemetry, :mod:`~harness_magic.core.control.tracing`): its trace and root span ids.

    Sent after every subscriber has seen the run's :class:`RunStarted` (before its next event).
    """

    run_id: str
    trace_id: str
    """32 hex digits."""
    span_id: str
    """16 hex digits: the run's root span."""
    kind: Literal["trace_started"] = "trace_started"


@dataclass(frozen=True)
class BudgetsUsed:
    """What the run has used so far of its query and write budgets (sent after each turn while one is set;
    :func:`~harness_magic.core.control.budgets.report_budgets`). A limit of None is not set."""

    queries: int
    """Reads checked against the query budget in this run (each estimated by its engine's plan first)."""
    largest_rows: float | None
    """The largest row estimate of those reads (None: none was estimated)."""
    max_query_rows: int | None
    largest_cost: float | None
    """The largest cost estimate of those reads, in the engine's unit (None: none was estimated)."""
    max_query_cost: float | None
    writes: int
    """Writes approved in this run (its subagents' included)."""
    max_write_operations: int | None
    kind: Literal["budgets_used"] = "budgets_used"


Event = Union[
    RunStarted,
    TurnStarted,
    TextDelta,
    AssistantMessage,
    ToolCallStarted,
    ToolCallFinished,
    ToolOutputDelta,
    SandboxStep,
    WorkerReplaced,
    ApprovalStep,
    ReminderAdded,
    TurnFinished,
    RunFinished,
    Notice,
    ContextCompacted,
    SubagentEvent,
    VerificationChecked,
    EngineProgress,
    QuestionStep,
    AssumptionRecorded,
    SkillLoaded,
    MemoryChanged,
    MaskingApplied,
    TraceStarted,
    BudgetsUsed,
]
EventHandler = Callable[[Event], None]
