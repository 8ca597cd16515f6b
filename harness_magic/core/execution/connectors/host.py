"""What the connectors need of the harness they are installed in: the :class:`ConnectorHost` protocol.

The execution plane sits below the agent, so it cannot name the harness; it
declares what it reads and calls instead, and both drivers
(:class:`~harness_magic.core.agent.loop.Harness`, ``AsyncHarness``) meet it
(``tests/test_typed_seams.py``). Connector code types a harness as
:class:`ConnectorHost` and reads these members; it never probes for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness_magic.core.cache.protocol import HandleCache
    from harness_magic.core.execution.tools import ToolSpec
    from harness_magic.core.transcript.audit import AuditLog
    from harness_magic.core.transcript.events import Event
    from harness_magic.core.transcript.log import RunLogger
    from harness_magic.core.transcript.messages import ToolUseBlock

__all__ = ["CONNECTOR_HOST_MEMBERS", "ConnectorHost", "ConnectorRun"]


class ConnectorRun(Protocol):
    """What connectors read of the run in progress (:class:`~harness_magic.core.agent.run.Run` is one)."""

    @property
    def turn(self) -> int: ...
    @property
    def logger(self) -> RunLogger: ...
    @property
    def current_tool_use(self) -> ToolUseBlock | None: ...
    @property
    def approval_wait_s(self) -> dict[str, float]:
        """Seconds each tool call waited for an approval (tool use id -> seconds), shown apart from its own time."""
        ...


@runtime_checkable
class ConnectorHost(Protocol):
    """The harness a connector registry is installed in."""

    audit: AuditLog | None
    """The workspace audit log approvals and governed writes go to (None: not audited)."""

    @property
    def cache(self) -> HandleCache: ...
    @property
    def current_turn(self) -> int | None: ...
    @property
    def current_run(self) -> ConnectorRun | None: ...
    def emit(self, event: Event) -> None: ...
    def add_tool(self, tool: ToolSpec) -> None: ...
    def remove_tool(self, name: str) -> None: ...
    def add_tool_guard(self, guard: Callable[[ToolSpec, ToolUseBlock], str | None]) -> None: ...


CONNECTOR_HOST_MEMBERS = ("audit", "cache", "current_turn", "current_run", "emit", "add_tool", "remove_tool",
                          "add_tool_guard")
"""Every member of :class:`ConnectorHost` (``tests/test_typed_seams.py``)."""
