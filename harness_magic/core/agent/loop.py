"""The ReAct loop: :class:`Harness` (sync) and :class:`AsyncHarness`.

One implementation of the protocol (:class:`~harness_magic.core.agent.run.Run`)
is driven by a sync and an async driver; they differ only in how they await
the provider. What a run ends with lives in :mod:`~harness_magic.core.agent.result`,
the run's constants in :mod:`~harness_magic.core.agent.run`.

Invariants kept here:

* The system prompt is fixed at construction; nothing can change it.
* Every tool use is answered by exactly one tool result, in order, before the
  next provider call — also for unknown, hidden, failing or denied tools, at
  the turn limit, and when the run is interrupted.
* Reminders are appended to the conversation suffix, never the prefix.
* Tool handlers are already bound; the loop passes only model arguments.
* Every result goes through :func:`~harness_magic.core.execution.format.format_tool_output`.
* Every turn is logged to JSONL as it happens.

Code outside the loop uses the harness's public surface only: :meth:`emit`,
:class:`StopRun` from a check, :meth:`overriding` to run with another adapter,
turn limit or log fields, and the read-only hook properties.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import warnings
from typing import TYPE_CHECKING, Any, AsyncGenerator, Callable, Generic, Iterator, Mapping, Sequence, TypeVar

from harness_magic.core.agent.result import MaxTurnsExceeded, PromptTooLarge, RunResult
from harness_magic.core.agent.run import RUN_ENDINGS, ResultMasker, Check, ReminderHook, Run, ToolGuard, ToolValidator
from harness_magic.core.agent.state import HarnessState
from harness_magic.core.execution.tools import ToolSpec
from harness_magic.core.knowledge.citations import Ledger
from harness_magic.core.transcript.audit import AuditLog
from harness_magic.core.transcript.events import Event, EventHandler, RunFinished, SubagentEvent
from harness_magic.core.transcript.messages import Message, Usage, unanswered_tool_uses

if TYPE_CHECKING:
    from harness_magic.core.cache.protocol import HandleCache
    from harness_magic.core.providers.protocol import AsyncModelAdapter, ModelAdapter, SyncModelAdapter

__all__ = ["Harness", "AsyncHarness"]

AdapterT = TypeVar("AdapterT", bound="ModelAdapter")
"""The adapter a driver calls: a :class:`SyncModelAdapter` for :class:`Harness`, an async one for :class:`AsyncHarness`."""


def _checked_max_turns(max_turns: int) -> int:
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns!r}")
    return max_turns


class _HarnessBase(Generic[AdapterT]):
    def __init__(
        self,
        adapter: AdapterT,
        system: str,
        tools: list[ToolSpec],
        max_turns: int = 25,
        run_dir: str = "./runs",
        cache: HandleCache | None = None,
        log_extra: dict[str, Any] | None = None,
    ) -> None:
        _checked_max_turns(max_turns)
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
        """The canonical history; a run rewrites it in place, so it is never rebound."""
        self._reminders: list[ReminderHook] = []
        self._handlers: list[EventHandler] = []
        self._run_file: str | None = None
        self._checks: list[Check] = []
        self._tool_guards: list[ToolGuard] = []
        self._tool_validators: list[ToolValidator] = []
        self._log_extra: dict[str, Any] = dict(log_extra or {})
        self._active_run: Run | None = None
        self._masker: ResultMasker | None = None
        self.audit: AuditLog | None = None
        """The workspace audit log governance decisions go to (set by the session; None: not audited)."""
        self.citations = Ledger()
        """Sources knowledge tools retrieved through this harness (:func:`~harness_magic.core.knowledge.citations.record_retrieval`)."""
        self.state = HarnessState()
        """Per-harness state of the planes above the agent (e.g. the budget guards installed on it)."""

    # -- public surface -------------------------------------------------------------

    @property
    def system(self) -> str:
        """The system prompt; fixed at construction."""
        return self._system

    @property
    def cache(self) -> HandleCache:
        return self._cache

    @property
    def adapter(self) -> AdapterT:
        """The provider adapter; a new one applies from the next provider call."""
        return self._adapter

    @adapter.setter
    def adapter(self, adapter: AdapterT) -> None:
        self._adapter = adapter

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
        """Turn limit of each run (at least 1)."""
        return self._max_turns

    @max_turns.setter
    def max_turns(self, max_turns: int) -> None:
        self._max_turns = _checked_max_turns(max_turns)

    @property
    def run_dir(self) -> str:
        """Folder that receives the JSONL log of each run started from now on."""
        return self._run_dir

    @run_dir.setter
    def run_dir(self, run_dir: str) -> None:
        self._run_dir = run_dir

    @property
    def log_extra(self) -> Mapping[str, Any]:
        """Extra fields written into each run's ``run_start`` record (a copy)."""
        return dict(self._log_extra)

    @property
    def checks(self) -> tuple[Check, ...]:
        """Per-turn checks (:meth:`add_check`), in order."""
        return tuple(self._checks)

    @property
    def reminder_hooks(self) -> tuple[ReminderHook, ...]:
        """Reminder hooks (:meth:`register_reminder`), in order."""
        return tuple(self._reminders)

    @property
    def tool_guards(self) -> tuple[ToolGuard, ...]:
        """Tool guards (:meth:`add_tool_guard`), in order."""
        return tuple(self._tool_guards)

    @property
    def tool_validators(self) -> tuple[ToolValidator, ...]:
        """Tool validators (:meth:`add_tool_validator`), in order."""
        return tuple(self._tool_validators)

    @property
    def masker(self) -> ResultMasker | None:
        """The masking step every tool result passes before the provider sees it (:meth:`set_masker`), or None."""
        return self._masker

    def set_masker(self, masker: ResultMasker | None) -> None:
        """Install the one masking step (a :class:`~harness_magic.core.agent.run.ResultMasker`; None: none)."""
        self._masker = masker

    @property
    def run_file(self) -> str | None:
        """Path to the JSONL log of the latest run, or None before the first run."""
        return self._run_file

    @property
    def current_run(self) -> Run | None:
        """The run in progress (``run_id``, ``logger``, ``turn``, ``current_tool_use``), or None."""
        return self._active_run

    @property
    def current_turn(self) -> int | None:
        """Turn number while a run is in progress (for cache provenance); None before its first turn."""
        run = self._active_run
        return (run.turn or None) if run is not None else None

    @contextlib.contextmanager
    def overriding(self, *, adapter: AdapterT | None = None, max_turns: int | None = None,
                   log_extra: Mapping[str, Any] | None = None) -> Iterator[None]:
        """Within the block, runs use ``adapter``, ``max_turns`` and ``log_extra`` merged into the log's fields.

        Each None keeps the harness's own; all are restored on leaving, also on error.
        """
        saved = self._adapter, self._max_turns, self._log_extra
        if max_turns is not None:
            _checked_max_turns(max_turns)
        try:
            if adapter is not None:
                self._adapter = adapter
            if max_turns is not None:
                self._max_turns = max_turns
            if log_extra is not None:
                self._log_extra = {**self._log_extra, **log_extra}
            yield
        finally:
            self._adapter, self._max_turns, self._log_extra = saved

    def register_reminder(self, hook: ReminderHook) -> None:
        """Register ``hook(turn, max_turns) -> str | None``, called before each provider call.

        A returned string is appended to the conversation suffix.
        """
        self._reminders.append(hook)

    def emit(self, event: Event) -> None:
        """Send ``event`` to every subscriber (a failing subscriber only warns).

        A subagent's ``RunFinished`` reaching this harness as a ``SubagentEvent``
        also counts the subagent's usage in the run in progress.
        """
        if isinstance(event, SubagentEvent) and isinstance(event.event, RunFinished):
            if self._active_run is not None:  # subagent usage counts towards this run
                self.add_child_usage(event.event.result.total_usage)
        for handler in list(self._handlers):
            try:
                handler(event)
            except Exception as exc:  # a renderer bug must not break the transcript
                warnings.warn(f"event handler {handler!r} failed on {event.kind}: {exc!r}", RuntimeWarning)

    def tool_output(self, text: str) -> None:
        """Report text the running tool call printed: a :class:`ToolOutputDelta`, kept for an interrupt.

        Ignored outside a tool call. Up to ``PARTIAL_OUTPUT_MAX_CHARS`` per call are kept: an
        interrupted call's result and log entry carry them instead of nothing.
        """
        run = self._active_run
        if run is not None:
            run.tool_printed(text)

    def subscribe(self, handler: EventHandler) -> Callable[[], None]:
        """Call ``handler(event)`` for every event; returns an unsubscribe function."""
        self._handlers.append(handler)
        return lambda: self._handlers.remove(handler) if handler in self._handlers else None

    def add_tool(self, tool: ToolSpec) -> None:
        """Append a tool (order is kept stable so the request prefix stays cacheable)."""
        if any(t.name == tool.name for t in self._tools):
            raise ValueError(f"a tool named {tool.name!r} already exists")
        self._tools.append(tool)

    def remove_tool(self, name: str) -> None:
        """Remove the tool called ``name`` (the others keep their order)."""
        if not any(t.name == name for t in self._tools):
            raise ValueError(f"no tool named {name!r}; tools: {', '.join(t.name for t in self._tools) or '(none)'}")
        self._tools = [t for t in self._tools if t.name != name]

    def add_check(self, check: Check) -> None:
        """Register ``check(run)`` run before each provider call (budgets); it raises :class:`StopRun` to end the run."""
        self._checks.append(check)

    def add_tool_guard(self, guard: ToolGuard) -> None:
        """Register ``guard(spec, use) -> error text | None`` run before a tool (approvals)."""
        self._tool_guards.append(guard)

    def add_tool_validator(self, validator: ToolValidator) -> None:
        """Register ``validator(spec, use, output) -> error text | None`` run after a tool."""
        self._tool_validators.append(validator)

    def reset_history(self) -> None:
        """Forget the conversation (the cache is kept)."""
        self._messages.clear()

    def set_history(self, messages: Sequence[Message]) -> None:
        """Replace the conversation (retry from a checkpoint)."""
        self._messages[:] = list(messages)

    def visible_tools(self) -> list[ToolSpec]:
        return [t for t in self._tools if t.visible]

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
        """Write an ``event`` record to the current run's log (no-op between runs); every string in ``fields`` passes
        the masking step first, so the log holds what the model saw (a retrieval's snippets too)."""
        run = self._active_run
        if run is not None:
            if self._masker is not None:
                fields = self._masker.mask_snapshot(fields)
            run.logger.write("event", name=name, turn=run.turn, **fields)

    # -- driving a run ------------------------------------------------------------------

    def _resume_run(self, run_id: str | None, session_id: str | None) -> Run:
        if not self._messages or self._messages[-1].role != "user":
            raise ValueError("resume needs a history ending with a user message (a prompt or tool results)")
        if unanswered_tool_uses(self._messages):
            raise ValueError("resume needs every tool use in the history answered")
        return self._start(None, run_id, session_id)

    def _new_run(self, user_message: str, run_id: str | None, session_id: str | None, fresh: bool) -> Run:
        if not isinstance(user_message, str) or not user_message.strip():
            raise ValueError("user_message must be a non-empty string")
        limit = self._adapter.max_input_tokens
        if limit:
            tokens = self._adapter.estimate_text_tokens(user_message)
            if tokens > limit:
                raise PromptTooLarge(tokens, limit, self._adapter.model)
        if fresh:
            self._messages.clear()
        return self._start(user_message, run_id, session_id)

    def _start(self, prompt: str | None, run_id: str | None, session_id: str | None) -> Run:
        run = Run(self, self._messages, prompt, run_id or uuid.uuid4().hex[:12], session_id)
        self._run_file = run.run_file
        self._active_run = run
        run.begin()
        return run

    def _end(self, result: RunResult) -> RunResult:
        self._active_run = None
        self.emit(RunFinished(result=result))
        return result

    def _crash(self, run: Run, exc: Exception) -> None:
        """Close ``run`` for ``exc`` (:meth:`Run.crashed`) before the driver re-raises it."""
        try:
            result = run.crashed(exc)
        except Exception as during:  # broad: the log itself may be what broke; the caller needs the first error
            self._active_run = None
            run.logger.close()
            exc.add_note(f"(the run log could not record this failure: {type(during).__name__}: {during})")
            return
        self._end(result)


class Harness(_HarnessBase["SyncModelAdapter"]):
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

    def _drive(self, run: Run) -> RunResult:
        try:
            while True:
                system, messages, tools, reminders = run.before_call()
                started = time.monotonic()
                run.calling = True
                response = self._adapter.complete(system, messages, tools, on_text=run.on_text)
                run.calling = False
                if run.handle_response(response, time.monotonic() - started, tools, reminders):
                    return self._end(run.finish("completed"))
        except RUN_ENDINGS as exc:
            return self._end(run.stopped_by(exc))
        except Exception as exc:  # not a run ending but a bug: recorded in the run log, then raised as it is
            self._crash(run, exc)
            raise


class AsyncHarness(_HarnessBase["AsyncModelAdapter"]):
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

    async def _drive(self, run: Run) -> RunResult:
        try:
            while True:
                system, messages, tools, reminders = run.before_call()
                started = time.monotonic()
                run.calling = True
                response = await self._adapter.complete(system, messages, tools, on_text=run.on_text)
                run.calling = False
                if run.handle_response(response, time.monotonic() - started, tools, reminders):
                    return self._end(run.finish("completed"))
        except (*RUN_ENDINGS, asyncio.CancelledError) as exc:
            return self._end(run.stopped_by(exc))
        except Exception as exc:  # not a run ending but a bug: recorded in the run log, then raised as it is
            self._crash(run, exc)
            raise


def _text_or_raise(result: RunResult) -> str:
    if result.status == "max_turns_exceeded":
        raise MaxTurnsExceeded(result.turns)
    if result.status != "completed":
        raise RuntimeError(result.error or result.status)
    return result.text
