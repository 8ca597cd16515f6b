"""Tool specifications and the tool-output type handlers may return.

A :class:`ToolSpec` carries an already-bound handler: the loop calls
``handler(**model_arguments)`` and nothing else. Stateful tools are closures
or callable objects that captured their dependencies when they were built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol

__all__ = ["ToolSpec", "ToolOutput", "SafetyClass", "SAFETY_CLASSES", "ToolError", "ToolHost", "ToolContext"]

SafetyClass = Literal["read", "write", "destructive", "external"]
SAFETY_CLASSES: tuple[str, ...] = ("read", "write", "destructive", "external")


class ToolError(Exception):
    """Raised by a tool handler for an expected failure.

    The message goes back to the model as an error result without a traceback.
    """


@dataclass
class ToolSpec:
    """A tool the model may call.

    ``visible`` is the only field the harness mutates after construction, and
    only as explicit behaviour (loading a connector reveals its tools).
    Hidden tools are neither offered to the model nor dispatched.
    """

    name: str
    """Name the model calls; ``[A-Za-z0-9_-]{1,64}`` as providers require."""
    description: str
    """One paragraph telling the model what the tool does."""
    parameters: dict[str, Any]
    """JSON Schema (``type: object``) of the arguments."""
    handler: Callable[..., Any]
    """Bound callable receiving the model's arguments as keywords."""
    visible: bool = True
    """Whether the tool is offered to the model and may be dispatched."""
    safety: SafetyClass = "read"
    """``read`` runs freely; anything else passes the approval policy first."""
    connector: str | None = None
    """Connector that owns the tool, or None for built-in tools."""
    result_name: str | None = None
    """Preferred cache handle for large results; defaults to the tool name."""

    def __post_init__(self) -> None:
        import re

        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name or ""):
            raise ValueError(
                f"tool name {self.name!r} is invalid: use 1-64 letters, digits, '_' or '-'"
            )
        if self.safety not in SAFETY_CLASSES:
            raise ValueError(f"safety {self.safety!r} is invalid; allowed: {', '.join(SAFETY_CLASSES)}")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ValueError(f"parameters of tool {self.name!r} must be a JSON schema with type 'object'")

    def schema(self) -> dict[str, Any]:
        """Provider-neutral description: name, description, parameters."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass
class ToolOutput:
    """A result a handler has already formatted for the model.

    Returned by tools (such as the interpreter) that compose their text from
    several formatted pieces. The loop passes it through unchanged.
    """

    text: str
    """Model-visible text, already bounded."""
    is_error: bool = False
    """Marks the result as an error for the model."""
    handles: list[str] = field(default_factory=list)
    """Cache handles this call created, in order."""
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    """Display-only extras (e.g. ``{"kind": "image/png", "data": b64}``); never sent to the model."""
    display_text: str | None = None
    """What people read of the result when it differs from ``text`` (notes meant only for the model, such as
    the chart count, and a value that only repeats a saved handle, left out); None: the same as ``text``."""


class ToolHost(Protocol):
    """What tools read from the harness that dispatches them (:class:`~harness_magic.core.agent.loop.Harness` is one)."""

    @property
    def current_turn(self) -> int | None:
        """The turn of the run in progress (cache provenance), or None."""
        ...

    def tool_output(self, text: str) -> None:
        """Report text the running tool call printed."""
        ...


class ToolContext:
    """The harness a set of tools reports to, given to the tools before that harness exists.

    Tools and their harness each need the other: build the context, build the
    tools over it (``current_turn=context.current_turn, on_output=context.tool_output``),
    build the harness with the tools, then :meth:`bind` it. Before binding (and
    for tools used without a harness) there is no turn and printed text goes nowhere.
    """

    def __init__(self) -> None:
        self._host: ToolHost | None = None

    @property
    def host(self) -> ToolHost | None:
        """The bound harness, or None before :meth:`bind`."""
        return self._host

    def bind(self, host: ToolHost) -> None:
        """Make ``host`` the harness these tools report to; a context is bound once."""
        if self._host is not None:
            raise RuntimeError(f"this tool context is already bound to {self._host!r}; build a new one per harness")
        self._host = host

    def current_turn(self) -> int | None:
        """The bound harness's turn, or None (unbound, or no run in progress)."""
        return self._host.current_turn if self._host is not None else None

    def tool_output(self, text: str) -> None:
        """Pass printed ``text`` to the bound harness; dropped while unbound."""
        if self._host is not None:
            self._host.tool_output(text)
