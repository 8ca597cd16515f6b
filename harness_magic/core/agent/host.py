"""What the planes above the agent need of a harness: the :class:`HarnessHost` protocol.

Control pieces (budgets, questions, memory, reminders, verification, skills,
subagents, audit, replay) and the connectors install themselves on a harness
and later read it; they type it as :class:`HarnessHost` and call its public
surface, never probing for members. Both drivers
(:class:`~harness_magic.core.agent.loop.Harness` and
:class:`~harness_magic.core.agent.loop.AsyncHarness`) implement it;
:data:`HOST_MEMBERS` names every member and ``tests/test_typed_seams.py`` pins each
implementation to all of them; ``tests/test_types.py`` checks this module strictly.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from harness_magic.core.agent.run import Check, ReminderHook, ResultMasker, Run, RunHost, ToolGuard, ToolValidator
from harness_magic.core.agent.state import HarnessState
from harness_magic.core.execution.tools import ToolSpec
from harness_magic.core.knowledge.citations import Ledger
from harness_magic.core.transcript.audit import AuditLog
from harness_magic.core.transcript.events import EventHandler
from harness_magic.core.transcript.messages import Message, Usage

__all__ = ["HOST_MEMBERS", "HarnessHost"]


@runtime_checkable
class HarnessHost(RunHost, Protocol):
    """The public surface of a harness: what a run reads of it (:class:`RunHost`), its parts, its hooks and its
    run state."""

    audit: AuditLog | None
    """The workspace audit log governance decisions go to (None: not audited)."""
    citations: Ledger
    """Sources knowledge tools retrieved through this harness."""
    state: HarnessState
    """Per-harness state of the planes above the agent."""

    @property
    def messages(self) -> list[Message]: ...
    @property
    def run_file(self) -> str | None: ...
    @property
    def current_run(self) -> Run | None: ...
    @property
    def current_turn(self) -> int | None: ...

    def overriding(self, *, max_turns: int | None = None,
                   log_extra: Mapping[str, Any] | None = None) -> AbstractContextManager[None]:
        """Run with another turn limit or log fields inside the block; restored after. (Each driver also takes
        ``adapter=``, typed by the adapter it drives: sync or async.)"""
        ...

    def set_masker(self, masker: ResultMasker | None) -> None: ...
    def register_reminder(self, hook: ReminderHook) -> None: ...
    def tool_output(self, text: str) -> None: ...
    def subscribe(self, handler: EventHandler) -> Callable[[], None]: ...
    def add_tool(self, tool: ToolSpec) -> None: ...
    def remove_tool(self, name: str) -> None: ...
    def add_check(self, check: Check) -> None: ...
    def add_tool_guard(self, guard: ToolGuard) -> None: ...
    def add_tool_validator(self, validator: ToolValidator) -> None: ...
    def reset_history(self) -> None: ...
    def set_history(self, messages: Sequence[Message]) -> None: ...
    def add_child_usage(self, usage: Usage) -> None: ...
    def log_event(self, name: str, **fields: Any) -> None: ...


HOST_MEMBERS = ("adapter", "system", "tools", "visible_tools", "max_turns", "run_dir", "log_extra", "cache", "checks",
                "reminder_hooks", "tool_guards", "tool_validators", "masker", "emit",  # RunHost's
                "audit", "citations", "state", "messages", "run_file", "current_run", "current_turn", "overriding",
                "set_masker", "register_reminder", "tool_output", "subscribe", "add_tool", "remove_tool", "add_check",
                "add_tool_guard", "add_tool_validator", "reset_history", "set_history", "add_child_usage", "log_event")
"""Every member of :class:`HarnessHost` (``tests/test_typed_seams.py``)."""
