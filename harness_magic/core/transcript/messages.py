"""Typed transcript: messages made of text, tool-use and tool-result blocks.

The canonical history is a list of :class:`Message`. Blocks are frozen
dataclasses told apart by their ``type`` literal. Provider-specific wire
forms live in :mod:`harness_magic.core.providers.payload`; the JSON form used by logs
lives here (:func:`message_to_dict` / :func:`message_from_dict`).

Contract: every :class:`ToolUseBlock` in an assistant message is answered by
exactly one :class:`ToolResultBlock` (same ``tool_use_id``, same order) in the
next user message, before the next provider call.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal, Union

__all__ = [
    "TextBlock",
    "ToolUseBlock",
    "ToolResultBlock",
    "Block",
    "Message",
    "Usage",
    "message_to_dict",
    "message_from_dict",
    "block_to_dict",
    "block_from_dict",
    "unanswered_tool_uses",
]


@dataclass(frozen=True)
class TextBlock:
    """Plain text from the user, the model, or a harness reminder."""

    text: str
    """The text itself."""
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ToolUseBlock:
    """A tool call requested by the model."""

    id: str
    """Provider-assigned call id; the matching result carries it back."""
    name: str
    """Tool name as the model called it (may name an unknown or hidden tool)."""
    input: dict[str, Any]
    """Arguments as parsed JSON. Treat as read-only; copy before changing."""
    type: Literal["tool_use"] = "tool_use"


@dataclass(frozen=True)
class ToolResultBlock:
    """The harness's answer to one :class:`ToolUseBlock`."""

    tool_use_id: str
    """Id of the tool use this result answers."""
    content: str
    """Model-visible text, already bounded by the formatter."""
    is_error: bool = False
    """True when the tool failed, was unknown, hidden, denied or interrupted."""
    type: Literal["tool_result"] = "tool_result"


Block = Union[TextBlock, ToolUseBlock, ToolResultBlock]


@dataclass(frozen=True)
class Message:
    """One turn of the conversation: a role plus an ordered tuple of blocks."""

    role: Literal["user", "assistant"]
    """``user`` for prompts, tool results and reminders; ``assistant`` for the model."""
    content: tuple[Block, ...]
    """Blocks in order."""

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(f"role must be 'user' or 'assistant', got {self.role!r}")
        if not isinstance(self.content, tuple):
            object.__setattr__(self, "content", tuple(self.content))

    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool-use blocks, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        """The tool-result blocks, in order."""
        return [b for b in self.content if isinstance(b, ToolResultBlock)]


@dataclass(frozen=True)
class Usage:
    """Token and cost accounting for one provider call or a sum of them."""

    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens."""
    cached_tokens: int = 0
    """Prompt tokens served from the provider's prompt cache."""
    cost: float = 0.0
    """USD, from litellm's price table when the model is known, else 0."""
    calls: int = 0
    """Number of provider calls summed into this value."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost=self.cost + other.cost,
            calls=self.calls + other.calls,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "total_tokens": self.total_tokens,
            "cost": self.cost,
            "calls": self.calls,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Usage":
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            cached_tokens=int(data.get("cached_tokens", 0)),
            cost=float(data.get("cost", 0.0)),
            calls=int(data.get("calls", 0)),
        )


def block_to_dict(block: Block) -> dict[str, Any]:
    """JSON form of a block (a fresh dict; inputs are deep-copied)."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": copy.deepcopy(block.input)}
    if isinstance(block, ToolResultBlock):
        return {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": block.content,
            "is_error": block.is_error,
        }
    raise TypeError(f"not a block: {block!r}")


def block_from_dict(data: dict[str, Any]) -> Block:
    """Inverse of :func:`block_to_dict`."""
    kind = data.get("type")
    if kind == "text":
        return TextBlock(text=data["text"])
    if kind == "tool_use":
        return ToolUseBlock(id=data["id"], name=data["name"], input=copy.deepcopy(data.get("input") or {}))
    if kind == "tool_result":
        return ToolResultBlock(
            tool_use_id=data["tool_use_id"], content=data["content"], is_error=bool(data.get("is_error", False))
        )
    raise ValueError(f"unknown block type {kind!r}; expected text, tool_use or tool_result")


def message_to_dict(message: Message) -> dict[str, Any]:
    """JSON form of a message."""
    return {"role": message.role, "content": [block_to_dict(b) for b in message.content]}


def message_from_dict(data: dict[str, Any]) -> Message:
    """Inverse of :func:`message_to_dict`."""
    return Message(role=data["role"], content=tuple(block_from_dict(b) for b in data["content"]))


def unanswered_tool_uses(messages: list[Message]) -> list[ToolUseBlock]:
    """Tool uses in the last assistant message that have no result after it.

    Used to restore the pairing invariant after an interruption.
    """
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            answered = {
                r.tool_use_id for later in messages[index + 1 :] for r in later.tool_results
            }
            return [u for u in messages[index].tool_uses if u.id not in answered]
    return []
