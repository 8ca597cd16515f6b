"""The ReAct loop: :class:`Harness` (sync) and :class:`AsyncHarness`.

One implementation of the protocol (:class:`_Run`) is driven by a sync and an
async driver; they differ only in how they await the provider.

Invariants kept here:

* The system prompt is fixed at construction; nothing can change it.
* Every tool use is answered by exactly one tool result, in order, before the
  next provider call — also for unknown, hidden, failing or denied tools, at
  the turn limit, and when the run is interrupted.
* Reminders are appended to the conversation suffix, never the prefix.
* Tool handlers are already bound; the loop passes only model arguments.
* Every result goes through :func:`~harness_magic.core.execution.format.format_tool_output`.
* Every turn is logged to JSONL as it happens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Callable, Sequence

from harness_magic.core.transcript.events import (
    AssistantMessage,
    ContextCompacted,
    Notice,
    Event,
    EventHandler,
    ReminderAdded,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
    TurnStarted,
)
from harness_magic.core.execution.format import format_exception, format_tool_output
from harness_magic.core.transcript.scrub import scrub
from harness_magic.core.transcript.log import RunLogger, system_hash
from harness_magic.core.transcript.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    message_to_dict,
    unanswered_tool_uses,
)
from harness_magic.core.providers.provider import (
    EMPTY_ANSWER_TEXT,
    EMPTY_TOOL_RESULT_TEXT,
    INVALID_ARGUMENTS_KEY,
    ProviderError,
    ProviderResponse,
)
from harness_magic.core.execution.tools import ToolError, ToolOutput, ToolSpec

__all__ = ["Harness", "AsyncHarness", "RunResult", "MaxTurnsExceeded", "PromptTooLarge", "ReminderHook",
           "RUN_STATUSES", "NO_ANSWER_TEXT"]

ReminderHook = Callable[[int, int], "str | None"]

RUN_STATUSES = ("completed", "max_turns_exceeded", "error", "interrupted")
"""Statuses a run can end with (budget statuses are added by the control plane)."""

PARTIAL_OUTPUT_MAX_CHARS = 16_000
"""Printed text kept per tool call for an interrupted call's result and log: the head is what matters."""
INTERRUPTED_RESULT = "Interrupted by the user before this tool call finished; it had no effect on the cache."
"""Error result that answers tool calls cut off by an interrupt."""
SKIPPED_RESULT = "Not run: the run stopped ({reason}) before this tool call."
"""Error result for tool calls left unanswered when a run stops early."""
NO_ANSWER_TEXT = "(The model ended the run without writing an answer.)"
"""``RunResult.text`` of a completed run whose model wrote no text at all."""
ROLLED_BACK_NOTE = "no model answer yet, so the prompt was taken back out of the conversation"
"""Added to the error of a run that failed before the model answered anything."""
COMPACT_AT = 0.9
"""Compact when a request's estimate passes this share of the input window (estimates are approximate)."""
COMPACT_TO = 0.6
"""Compact down to this share: room for many more turns before the next compaction (prefix stays stable)."""


class PromptTooLarge(ValueError):
    """A prompt that alone does not fit the model's input window; refused before anything is sent."""

    def __init__(self, tokens: int, limit: int, model: str) -> None:
        super().__init__(f"the prompt is about {tokens:,} tokens, over the {limit:,}-token input window of "
                         f"{model!r}: nothing was sent. Put large data in the cache (--in NAME) and refer to "
                         "it by handle instead of pasting it.")
        self.tokens = tokens
        self.limit = limit


class MaxTurnsExceeded(Exception):
    """Raised by :meth:`Harness.run` / :meth:`Harness.ask` when the turn limit is hit."""

    def __init__(self, turns: int) -> None:
        super().__init__(f"the run stopped after {turns} turns without a final answer")
        self.turns = turns


@dataclass(frozen=True)
class RunResult:
    """Outcome of one run (one prompt and the turns it took)."""

    status: str
    """One of :data:`RUN_STATUSES` or a budget status such as ``budget_cost``."""
    text: str
    """Final model text (empty when the run did not complete)."""
    turns: int
    """Provider calls made in this run."""
    usage: Usage = field(default_factory=Usage)
    """Tokens (cached included) and cost summed over the run."""
    run_id: str | None = None
    session_id: str | None = None
    run_file: str | None = None
    """Path of the JSONL log of this run."""
    error: str | None = None
    """Readable reason when ``status`` is not ``completed``."""
    model: str | None = None
    elapsed_s: float = 0.0
    handles: tuple[str, ...] = ()
    """Cache handles created during the run, in order."""
    messages: tuple[Message, ...] = ()
    """The whole transcript after the run."""
    charts: tuple[str, ...] = ()
    """Base64 PNG charts drawn during the run, in order."""
    subagent_usage: Usage = field(default_factory=Usage)
    """Usage reported by subagents of this run (``add_child_usage``); not in ``usage``."""
    rolled_back: bool = False
    """True when the run failed before the model answered and its prompt was taken out of the history."""

    @property
    def total_usage(self) -> Usage:
        """``usage`` plus ``subagent_usage``: what the run cost in all."""
        return self.usage + self.subagent_usage

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def __repr__(self) -> str:
        return (
            f"RunResult(status={self.status!r}, turns={self.turns}, tokens={self.usage.total_tokens}, "
            f"cost=${self.usage.cost:.4f}, run_id={self.run_id!r})"
        )


class _Stop(Exception):
    """Internal: a check decided the run must stop with ``status``."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _HarnessBase:
    def __init__(
        self,
        adapter: Any,
        system: str,
        tools: list[ToolSpec],
        max_turns: int = 25,
        run_dir: str = "./runs",
        cache: Any | None = None,
        log_extra: dict[str, Any] | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns!r}")
        if not isinstance(system, str):
            raise TypeError(f"system must be a string, got {type(system).__name__}")
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate tool names: {', '.join(duplicates)}")
        if cache is None:
            from harness_magic.core.cache import SessionCache

            cache = SessionCache()
        self._adapter = adapter
        self._system = system
        self._tools = list(tools)
        self._max_turns = max_turns
        self._run_dir = run_dir
        self._cache = cache
        self._messages: list[Message] = []
        self._reminders: list[ReminderHook] = []
        self._handlers: list[EventHandler] = []
        self._run_file: str | None = None
        self._turn: int | None = None
        self._checks: list[Callable[["_Run"], None]] = []
        self._tool_guards: list[Callable[[ToolSpec, ToolUseBlock], "str | None"]] = []
        self._tool_validators: list[Callable[[ToolSpec, ToolUseBlock, ToolOutput], "str | None"]] = []
        self._log_extra: dict[str, Any] = dict(log_extra or {})
        self._active_run: "_Run | None" = None

    # -- public surface -------------------------------------------------------------

    @property
    def system(self) -> str:
        """The system prompt; fixed at construction."""
        return self._system

    @property
    def cache(self) -> Any:
        return self._cache

    @property
    def adapter(self) -> Any:
        return self._adapter

    @property
    def tools(self) -> list[ToolSpec]:
        """All tools (visible or not), in their stable order."""
        return list(self._tools)

    @property
    def messages(self) -> list[Message]:
        """A copy of the canonical history."""
        return list(self._messages)

    @property
    def max_turns(self) -> int:
        return self._max_turns

    @property
    def run_file(self) -> str | None:
        """Path to the JSONL log of the latest run, or None before the first run."""
        return self._run_file

    @property
    def current_run(self) -> "_Run | None":
        """The run in progress (``run_id``, ``logger``, ``turn``, ``current_tool_use``), or None."""
        return self._active_run

    @property
    def current_turn(self) -> int | None:
        """Turn number while a run is in progress (for cache provenance)."""
        return self._turn

    def register_reminder(self, hook: ReminderHook) -> None:
        """Register ``hook(turn, max_turns) -> str | None``, called before each provider call.

        A returned string is appended to the conversation suffix.
        """
        self._reminders.append(hook)

    def tool_output(self, text: str) -> None:
        """Report text the running tool call printed: a :class:`ToolOutputDelta`, kept for an interrupt.

        Ignored outside a tool call. Up to ``PARTIAL_OUTPUT_MAX_CHARS`` per call are kept: an
        interrupted call's result and log entry carry them instead of nothing.
        """
        run = self._active_run
        use = run.current_tool_use if run is not None else None
        if use is None or not isinstance(text, str) or not text:
            return
        kept = run.partial_output.get(use.id, "")
        if len(kept) < PARTIAL_OUTPUT_MAX_CHARS:
            run.partial_output[use.id] = kept + text[:PARTIAL_OUTPUT_MAX_CHARS - len(kept)]
        self._emit(ToolOutputDelta(turn=run.turn, tool_use_id=use.id, text=text))

    def subscribe(self, handler: EventHandler) -> Callable[[], None]:
        """Call ``handler(event)`` for every event; returns an unsubscribe function."""
        self._handlers.append(handler)
        return lambda: self._handlers.remove(handler) if handler in self._handlers else None

    def add_tool(self, tool: ToolSpec) -> None:
        """Append a tool (order is kept stable so the request prefix stays cacheable)."""
        if any(t.name == tool.name for t in self._tools):
            raise ValueError(f"a tool named {tool.name!r} already exists")
        self._tools.append(tool)

    def add_check(self, check: Callable[["_Run"], None]) -> None:
        """Register a per-turn check (budgets); it raises ``_Stop`` to end the run."""
        self._checks.append(check)

    def add_tool_guard(self, guard: Callable[[ToolSpec, ToolUseBlock], "str | None"]) -> None:
        """Register ``guard(spec, use) -> error text | None`` run before a tool (approvals)."""
        self._tool_guards.append(guard)

    def add_tool_validator(self, validator: Callable[[ToolSpec, ToolUseBlock, ToolOutput], "str | None"]) -> None:
        """Register ``validator(spec, use, output) -> error text | None`` run after a tool."""
        self._tool_validators.append(validator)

    def reset_history(self) -> None:
        """Forget the conversation (the cache is kept)."""
        self._messages = []

    def set_history(self, messages: Sequence[Message]) -> None:
        """Replace the conversation (retry from a checkpoint)."""
        self._messages = list(messages)

    def visible_tools(self) -> list[ToolSpec]:
        return [t for t in self._tools if t.visible]

    # -- internals --------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        inner = getattr(event, "event", None)
        if getattr(event, "kind", None) == "subagent_event" and getattr(inner, "kind", None) == "run_finished":
            if self._active_run is not None:  # subagent usage counts towards this run
                self.add_child_usage(getattr(inner.result, "total_usage", inner.result.usage))
        for handler in list(self._handlers):
            try:
                handler(event)
            except Exception as exc:  # a renderer bug must not break the transcript
                warnings.warn(f"event handler {handler!r} failed on {event.kind}: {exc!r}", RuntimeWarning)

    def add_child_usage(self, usage: Usage) -> None:
        """Count a subagent's usage in the current run (budgets, ``RunResult.subagent_usage``).

        Subagent runs whose events reach this harness as ``SubagentEvent`` are
        counted automatically (from their ``RunFinished``); call this only for
        child work that is not reported through events.
        """
        run = self._active_run
        if run is None:
            raise RuntimeError("add_child_usage needs a run in progress")
        run.child_usage = run.child_usage + usage

    def log_event(self, name: str, **fields: Any) -> None:
        """Write an ``event`` record to the current run's log (no-op between runs)."""
        run = self._active_run
        if run is not None:
            run.logger.write("event", name=name, turn=run.turn, **fields)

    def _resume_run(self, run_id: str | None, session_id: str | None) -> "_Run":
        if not self._messages or self._messages[-1].role != "user":
            raise ValueError("resume needs a history ending with a user message (a prompt or tool results)")
        if unanswered_tool_uses(self._messages):
            raise ValueError("resume needs every tool use in the history answered")
        return _Run(self, None, run_id or uuid.uuid4().hex[:12], session_id)

    def _new_run(self, user_message: str, run_id: str | None, session_id: str | None, fresh: bool) -> "_Run":
        if not isinstance(user_message, str) or not user_message.strip():
            raise ValueError("user_message must be a non-empty string")
        limit = getattr(self._adapter, "max_input_tokens", None)
        if limit:
            tokens = self._adapter.estimate_text_tokens(user_message)
            if tokens > limit:
                raise PromptTooLarge(tokens, limit, getattr(self._adapter, "model", "?"))
        if fresh:
            self._messages = []
        return _Run(self, user_message, run_id or uuid.uuid4().hex[:12], session_id)


class _Run:
    """State and protocol steps of one run; drivers call the steps in order."""

    def __init__(self, harness: _HarnessBase, prompt: str | None, run_id: str, session_id: str | None) -> None:
        self.h = harness
        self.prompt = prompt
        self.run_id = run_id
        self.session_id = session_id
        self.turn = 0
        self.usage = Usage()
        self.child_usage = Usage()
        """Usage reported by subagents (``add_child_usage``)."""
        self.tool_calls = 0
        self.handles: list[str] = []
        self.charts: list[str] = []
        self.started = time.monotonic()
        self.model = getattr(harness._adapter, "model", "unknown")
        history = list(harness._messages)
        self.start_len = len(history)
        """History length before this run: a run with no answer truncates back to it."""
        self.responses = 0
        """Model responses received in this run."""
        self.calling = False
        """True while the driver waits for the provider (an ending then counts the request as a turn)."""
        self.logger = RunLogger(harness._run_dir, run_id)
        harness._run_file = str(self.logger.path)
        self.logger.start(
            session_id=session_id,
            model=self.model,
            system=harness._system,
            tools=harness._tools,
            history=history,
            prompt=prompt,
            max_turns=harness._max_turns,
            extra=harness._log_extra or None,
        )
        self.current_tool_use: ToolUseBlock | None = None
        """The tool use being dispatched right now (tools that link child runs read its id)."""
        self.approval_wait_s: dict[str, float] = {}
        """Tool use id -> seconds its approval took (written by approval guards)."""
        self.partial_output: dict[str, str] = {}
        """Tool use id -> text it printed so far (:meth:`_HarnessBase.tool_output`), bounded."""
        harness._active_run = self
        if prompt is not None:  # None: resume from the history as it is (retry from a checkpoint)
            harness._messages.append(Message(role="user", content=(TextBlock(text=prompt),)))
        self.logged_upto = len(history)
        self.final_text = ""
        harness._emit(
            RunStarted(run_id=run_id, model=self.model, max_turns=harness._max_turns, prompt=prompt or "",
                       run_file=harness._run_file)
        )

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    # -- steps --------------------------------------------------------------------------

    def before_call(self) -> tuple[str, list[Message], list[ToolSpec], list[str]]:
        """Run checks, add reminders; returns what the provider call needs."""
        h = self.h
        for check in h._checks:
            check(self)
        if self.turn >= h._max_turns:
            raise _Stop("max_turns_exceeded", f"reached max_turns={h._max_turns} without a final answer")
        self.turn += 1
        h._turn = self.turn
        h._emit(TurnStarted(turn=self.turn, max_turns=h._max_turns))
        reminders = []
        for hook in h._reminders:
            text = hook(self.turn, h._max_turns)
            if text:
                reminders.append(text)
        for text in reminders:
            self._append_suffix_text(text)
            h._emit(ReminderAdded(turn=self.turn, text=text))
        tools = h.visible_tools()
        self._fit_window(tools)
        return h._system, list(h._messages), tools, reminders

    def _fit_window(self, tools: list[ToolSpec]) -> None:
        """Compact the history when the request would pass :data:`COMPACT_AT` of the input window."""
        h = self.h
        adapter = h._adapter
        limit = getattr(adapter, "max_input_tokens", None)
        if not limit:
            return
        tokens = adapter.estimate_tokens(h._system, h._messages, tools)
        if tokens <= limit * COMPACT_AT:
            return
        from harness_magic.core.agent.compaction import compact

        def estimate(messages: Sequence[Message]) -> int:
            return adapter.estimate_messages_tokens(h._system, messages, tools)

        compacted, report = compact(h._messages, estimate, int(limit * COMPACT_TO))
        if report is not None:
            h._messages[:] = compacted
            self.logged_upto = len(h._messages)
            self.logger.write("compaction", turn=self.turn, stage=report.stage, tokens_before=report.tokens_before,
                              tokens_after=report.tokens_after, limit=limit,
                              results_compacted=report.results_compacted,
                              messages_summarised=report.messages_summarised,
                              history=[message_to_dict(m) for m in compacted])
            h._emit(ContextCompacted(turn=self.turn, stage=report.stage, tokens_before=report.tokens_before,
                                     tokens_after=report.tokens_after, limit=limit,
                                     results_compacted=report.results_compacted,
                                     messages_summarised=report.messages_summarised))
            what = (f"{report.results_compacted} older tool results cut to their handle line"
                    if report.stage == "tool_results" else f"{report.messages_summarised} older messages summarised")
            h._emit(Notice(text=f"context compacted to fit {limit:,} tokens: {what} "
                                f"(~{report.tokens_before:,} → ~{report.tokens_after:,} tokens)"))
            tokens = report.tokens_after
        if tokens > limit:
            raise _Stop("error", f"the conversation needs about {tokens:,} tokens, over the {limit:,}-token input "
                                 f"window of {self.model!r}, even after compaction: nothing was sent")

    def _append_suffix_text(self, text: str) -> None:
        messages = self.h._messages
        block = TextBlock(text=text)
        if messages and messages[-1].role == "user":
            messages[-1] = Message(role="user", content=messages[-1].content + (block,))
        else:
            messages.append(Message(role="user", content=(block,)))

    def on_text(self, text: str) -> None:
        self.h._emit(TextDelta(turn=self.turn, text=text))

    def after_response(self, response: ProviderResponse, latency_s: float, tools: list[ToolSpec],
                       reminders: list[str]) -> list[ToolUseBlock]:
        h = self.h
        self.responses += 1
        if not response.message.text.strip() and not response.message.tool_uses:
            # an empty answer is stored in a form every provider accepts on the next request
            response = dataclasses.replace(
                response, message=Message(role="assistant", content=(TextBlock(text=EMPTY_ANSWER_TEXT),)))
        appended = h._messages[self.logged_upto :]
        h._messages.append(response.message)
        self.logged_upto = len(h._messages)
        self.usage = self.usage + response.usage
        raw = {k: v for k, v in response.raw.items() if k != "_cost"}
        h_cache = h._cache
        self.logger.write(
            "turn",
            turn=self.turn,
            request={
                "system_sha256": system_hash(h._system),
                "messages_appended": [message_to_dict(m) for m in appended],
                "visible_tools": [t.name for t in tools],
                "reminders": reminders,
            },
            response={
                "message": message_to_dict(response.message),
                "usage": response.usage.to_dict(),
                "stop_reason": response.stop_reason,
                "model": response.model,
            },
            provider_response=raw,
            latency_s=round(latency_s, 6),
            usage=response.usage.to_dict(),
            cumulative_usage=self.usage.to_dict(),
            cache=h_cache.metadata() if hasattr(h_cache, "metadata") else [],
        )
        h._emit(AssistantMessage(turn=self.turn, message=response.message, usage=response.usage))
        if response.message.text.strip() and response.message.text != EMPTY_ANSWER_TEXT:
            self.final_text = response.message.text
        return response.message.tool_uses

    def dispatch_all(self, uses: list[ToolUseBlock]) -> None:
        """Answer every tool use, in order, with exactly one result."""
        h = self.h
        results: list[ToolResultBlock] = []
        meta: list[dict[str, Any]] = []
        try:
            for use in uses:
                started = time.monotonic()
                h._emit(ToolCallStarted(turn=self.turn, tool_use=use))
                self.current_tool_use = use
                try:
                    output = self._dispatch_one(use)
                finally:
                    self.current_tool_use = None
                duration = time.monotonic() - started
                text = scrub(output.text) if output.is_error else output.text  # errors echo configs and headers
                block = ToolResultBlock(tool_use_id=use.id, content=text if text.strip() else EMPTY_TOOL_RESULT_TEXT,
                                        is_error=output.is_error)
                results.append(block)
                self.tool_calls += 1
                self.handles.extend(output.handles)
                self.charts.extend(a["data"] for a in output.artifacts if a.get("kind") == "image/png")
                snapshots = tuple(self._snapshot(name) for name in output.handles)
                waited = min(self.approval_wait_s.get(use.id, 0.0), duration)
                meta.append({"tool_use_id": use.id, "name": use.name, "is_error": output.is_error,
                             "duration_s": round(duration, 6), "handles": list(output.handles),
                             "content_chars": len(output.text)}
                            | ({"approval_wait_s": round(waited, 6)} if waited else {}))
                shown = output.display_text
                if shown is not None and output.is_error:
                    shown = scrub(shown)  # as the model's text: errors echo configs and headers
                h._emit(ToolCallFinished(turn=self.turn, tool_use=use, result=block, duration_s=duration,
                                         handles=tuple(output.handles), artifacts=tuple(output.artifacts),
                                         snapshots=snapshots, approval_wait_s=waited, display_text=shown))
        finally:
            # On interrupt, answer what is left so the transcript stays consistent.
            answered = {r.tool_use_id for r in results}
            for use in uses:
                if use.id not in answered:
                    partial = scrub(self.partial_output.get(use.id, ""))
                    content = INTERRUPTED_RESULT + (f"\nOutput printed before the interrupt:\n{partial}" if partial else "")
                    results.append(ToolResultBlock(tool_use_id=use.id, content=content, is_error=True))
                    if partial:
                        meta.append({"tool_use_id": use.id, "name": use.name, "is_error": True, "interrupted": True,
                                     "partial_output": partial})
            h._messages.append(Message(role="user", content=tuple(results)))
            self.logger.write("tools", turn=self.turn, results=meta)

    def _snapshot(self, name: str) -> dict[str, Any]:
        try:
            return self.h._cache.snapshot(name)
        except Exception:
            return {}

    def _dispatch_one(self, use: ToolUseBlock) -> ToolOutput:
        h = self.h
        spec = next((t for t in h._tools if t.name == use.name), None)
        visible = [t.name for t in h.visible_tools()]
        if spec is None or not spec.visible:
            what = "is not loaded yet" if spec is not None else "does not exist"
            hint = (f" Call load_connectors(connector_name={spec.connector!r}) first."
                    if spec is not None and spec.connector else "")
            return ToolOutput(
                text=f"Tool {use.name!r} {what}.{hint} Available tools: {', '.join(visible) or '(none)'}.",
                is_error=True,
            )
        if INVALID_ARGUMENTS_KEY in use.input:
            return ToolOutput(text=f"Arguments for {use.name!r} were not valid JSON: {use.input[INVALID_ARGUMENTS_KEY]}",
                              is_error=True)
        for guard in h._tool_guards:
            refusal = guard(spec, use)
            if refusal:
                return ToolOutput(text=refusal, is_error=True)
        try:
            value = spec.handler(**use.input)
        except TypeError as exc:
            if _is_argument_error(exc, spec.handler):
                expected = ", ".join(spec.parameters.get("properties", {})) or "none"
                return ToolOutput(text=f"Bad arguments for {use.name!r}: {exc}. Parameters: {expected}.",
                                  is_error=True)
            return ToolOutput(text=format_exception(exc), is_error=True)
        except ToolError as exc:
            return ToolOutput(text=str(exc), is_error=True)
        except Exception as exc:
            return ToolOutput(text=format_exception(exc), is_error=True)
        output = format_tool_output(value, h._cache, spec.result_name or spec.name, turn=self.turn, tool=spec.name)
        for validator in h._tool_validators:
            problem = validator(spec, use, output)
            if problem:
                output = dataclasses.replace(output, text=f"{output.text}\nVerification failed: {problem}",
                                             is_error=True)
        return output

    def finish(self, status: str, error: str | None = None, *, sent: bool = False) -> RunResult:
        """End the run; ``sent``: the call in flight when it ended had reached the provider."""
        h = self.h
        rolled_back = status != "completed" and self.responses == 0
        if rolled_back:  # nothing answered: the conversation is as before the run (the log keeps the attempt)
            del h._messages[self.start_len :]
            self.logged_upto = len(h._messages)
            error = f"{error or status} ({ROLLED_BACK_NOTE})"
        leftover = unanswered_tool_uses(h._messages)
        if leftover:
            reason = error or status
            h._messages.append(Message(role="user", content=tuple(
                ToolResultBlock(tool_use_id=u.id, content=SKIPPED_RESULT.format(reason=reason), is_error=True)
                for u in leftover)))
        appended = h._messages[self.logged_upto :]
        self.logged_upto = len(h._messages)
        error = scrub(error)
        text = (self.final_text or NO_ANSWER_TEXT) if status == "completed" else ""
        turns = self.responses + (1 if sent else 0)
        result = RunResult(
            status=status,
            text=text,
            turns=turns,
            usage=self.usage,
            run_id=self.run_id,
            session_id=self.session_id,
            run_file=str(self.logger.path),
            error=error,
            model=self.model,
            elapsed_s=self.elapsed_s,
            handles=tuple(self.handles),
            messages=tuple(h._messages),
            charts=tuple(self.charts),
            subagent_usage=self.child_usage,
            rolled_back=rolled_back,
        )
        self.logger.write(
            "run_end",
            status=status,
            text=text,
            error=error,
            rolled_back=rolled_back,
            turns=turns,
            tool_calls=self.tool_calls,
            usage=self.usage.to_dict(),
            subagent_usage=self.child_usage.to_dict(),
            elapsed_s=round(self.elapsed_s, 6),
            handles=list(self.handles),
            messages_appended=[message_to_dict(m) for m in appended],
        )
        self.logger.close()
        h._turn = None
        h._active_run = None
        h._emit(RunFinished(result=result))
        return result

    def handle_response(self, response: ProviderResponse, latency_s: float, tools: list[ToolSpec],
                        reminders: list[str]) -> bool:
        """Record the response, answer its tool uses; True when the model gave its final answer."""
        uses = self.after_response(response, latency_s, tools, reminders)
        if uses:
            self.dispatch_all(uses)
        self.turn_finished(response)
        return not uses

    def stopped_by(self, exc: BaseException) -> RunResult:
        """End the run for one of :data:`_RUN_ENDINGS` with the matching status."""
        calling, self.calling = self.calling, False
        if isinstance(exc, _Stop):
            return self.finish(exc.status, exc.reason)
        if isinstance(exc, ProviderError):
            return self.finish("error", f"provider error: {exc}", sent=calling and exc.request_sent)
        if isinstance(exc, (ValueError, OSError)):  # e.g. a broken offline script or log
            return self.finish("error", f"{type(exc).__name__}: {exc}")
        return self.finish("interrupted", "interrupted by the user", sent=calling)

    def turn_finished(self, response: ProviderResponse) -> None:
        self.h._emit(TurnFinished(turn=self.turn, usage=response.usage, total_usage=self.usage,
                                  elapsed_s=self.elapsed_s))


_RUN_ENDINGS = (_Stop, ProviderError, ValueError, OSError, KeyboardInterrupt)
"""Exceptions that end a run with a status instead of propagating."""


def _is_argument_error(exc: TypeError, handler: Callable[..., Any]) -> bool:
    """True when ``exc`` came from calling ``handler`` with wrong arguments."""
    tb = exc.__traceback__
    depth = 0
    while tb is not None:
        depth += 1
        tb = tb.tb_next
    return depth <= 1


class Harness(_HarnessBase):
    """The synchronous ReAct loop.

    Owns the message list, dispatches tools, applies suffix-only reminders and
    logs every turn to JSONL. The system prompt is never changed after
    construction. ``Agent``-style conveniences live in
    :class:`~harness_magic.core.session.AgentSession`.
    """

    def run_result(self, user_message: str, *, run_id: str | None = None,
                   session_id: str | None = None) -> RunResult:
        """Start a fresh conversation with ``user_message`` and run to the end."""
        return self._drive(self._new_run(user_message, run_id, session_id, fresh=True))

    def ask_result(self, user_message: str, *, run_id: str | None = None,
                   session_id: str | None = None) -> RunResult:
        """Continue the current conversation with ``user_message``."""
        return self._drive(self._new_run(user_message, run_id, session_id, fresh=False))

    def resume_result(self, *, run_id: str | None = None, session_id: str | None = None) -> RunResult:
        """Run from the current history without a new prompt (after :meth:`set_history`)."""
        return self._drive(self._resume_run(run_id, session_id))

    def run(self, user_message: str) -> str:
        """Like :meth:`run_result` but returns the text; raises on failure."""
        return _text_or_raise(self.run_result(user_message))

    def ask(self, user_message: str) -> str:
        """Like :meth:`ask_result` but returns the text; raises on failure."""
        return _text_or_raise(self.ask_result(user_message))

    def _drive(self, run: _Run) -> RunResult:
        try:
            while True:
                system, messages, tools, reminders = run.before_call()
                started = time.monotonic()
                run.calling = True
                response = self._adapter.complete(system, messages, tools, on_text=run.on_text)
                run.calling = False
                if run.handle_response(response, time.monotonic() - started, tools, reminders):
                    return run.finish("completed")
        except _RUN_ENDINGS as exc:
            return run.stopped_by(exc)


class AsyncHarness(_HarnessBase):
    """Async variant of :class:`Harness`; needs an ``AsyncProviderAdapter``.

    ``run_stream`` / ``ask_stream`` yield the same events subscribers get,
    ending with :class:`~harness_magic.core.transcript.events.RunFinished`.
    """

    async def run_result(self, user_message: str, *, run_id: str | None = None,
                         session_id: str | None = None) -> RunResult:
        return await self._drive(self._new_run(user_message, run_id, session_id, fresh=True))

    async def ask_result(self, user_message: str, *, run_id: str | None = None,
                         session_id: str | None = None) -> RunResult:
        return await self._drive(self._new_run(user_message, run_id, session_id, fresh=False))

    async def resume_result(self, *, run_id: str | None = None, session_id: str | None = None) -> RunResult:
        """Run from the current history without a new prompt (after :meth:`set_history`)."""
        return await self._drive(self._resume_run(run_id, session_id))

    async def run(self, user_message: str) -> str:
        return _text_or_raise(await self.run_result(user_message))

    async def ask(self, user_message: str) -> str:
        return _text_or_raise(await self.ask_result(user_message))

    async def run_stream(self, user_message: str) -> AsyncGenerator[Event, None]:
        """Stream events for a fresh conversation."""
        async for event in self._stream(user_message, fresh=True):
            yield event

    async def ask_stream(self, user_message: str) -> AsyncGenerator[Event, None]:
        """Stream events for a follow-up in the current conversation."""
        async for event in self._stream(user_message, fresh=False):
            yield event

    async def _stream(self, user_message: str, *, fresh: bool) -> AsyncGenerator[Event, None]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        unsubscribe = self.subscribe(queue.put_nowait)
        try:
            run = self._new_run(user_message, None, None, fresh=fresh)
            task = asyncio.ensure_future(self._drive(run))
            task.add_done_callback(lambda _: queue.put_nowait(None))
            while True:
                event = await queue.get()
                if event is None:
                    break
                yield event
            await task
        finally:
            unsubscribe()

    async def _drive(self, run: _Run) -> RunResult:
        try:
            while True:
                system, messages, tools, reminders = run.before_call()
                started = time.monotonic()
                run.calling = True
                response = await self._adapter.complete(system, messages, tools, on_text=run.on_text)
                run.calling = False
                if run.handle_response(response, time.monotonic() - started, tools, reminders):
                    return run.finish("completed")
        except (*_RUN_ENDINGS, asyncio.CancelledError) as exc:
            return run.stopped_by(exc)


def _text_or_raise(result: RunResult) -> str:
    if result.status == "max_turns_exceeded":
        raise MaxTurnsExceeded(result.turns)
    if result.status != "completed":
        raise RuntimeError(result.error or result.status)
    return result.text
