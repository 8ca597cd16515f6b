"""Normalising a provider's reply (an OpenAI-style response dict) into harness types.

Contract: :func:`normalise_response` never mutates the dict it reads and
returns a :class:`ProviderResponse` whose message holds only harness blocks.
Tool-call arguments that are not a JSON object do not raise: they are kept
under :data:`INVALID_ARGUMENTS_KEY` so the loop can answer the model with an
error result. A reply without choices raises :class:`ProviderError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from harness_magic.core.providers.errors import ProviderError
from harness_magic.core.transcript.messages import Message, TextBlock, ToolUseBlock, Usage

__all__ = ["ProviderResponse", "normalise_response", "usage_from_dict", "INVALID_ARGUMENTS_KEY"]

INVALID_ARGUMENTS_KEY = "__invalid_arguments__"
"""Key under which unparseable tool-call arguments are kept for an error result."""


@dataclass(frozen=True)
class ProviderResponse:
    """One normalised model turn."""

    message: Message
    """The assistant message (text and tool uses)."""
    usage: Usage
    """Tokens and cost of this call."""
    stop_reason: str | None = None
    """Provider finish reason (``stop``, ``tool_calls``, ``length``...)."""
    model: str | None = None
    """Model name the provider reported."""
    raw: dict[str, Any] = field(default_factory=dict)
    """Response dict as received, for the log only; never part of history."""
    notices: tuple[str, ...] = ()
    """One-line notices for the user that came with this call (e.g. a placeholder key was sent); never history."""


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def usage_from_dict(usage: Any, cost: float = 0.0) -> Usage:
    """Harness usage from an OpenAI/litellm usage block (cached tokens included)."""
    if not usage:
        return Usage(cost=cost, calls=1)
    details = _get(usage, "prompt_tokens_details")
    cached = _get(details, "cached_tokens") or _get(usage, "cache_read_input_tokens") or 0
    return Usage(
        input_tokens=int(_get(usage, "prompt_tokens") or 0),
        output_tokens=int(_get(usage, "completion_tokens") or 0),
        cached_tokens=int(cached or 0),
        cost=float(cost or 0.0),
        calls=1,
    )


def normalise_response(response: dict[str, Any]) -> ProviderResponse:
    """Harness types from an OpenAI-style response dict (not mutated)."""
    choices = response.get("choices") or []
    if not choices:
        raise ProviderError("provider returned no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    blocks: list[Any] = []
    text = message.get("content")
    if isinstance(text, list):  # content parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if text:
        blocks.append(TextBlock(text=text))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        raw_args = function.get("arguments") or "{}"
        try:
            parsed = json.loads(raw_args) if isinstance(raw_args, str) else dict(raw_args)
            if not isinstance(parsed, dict):
                raise ValueError("arguments must be a JSON object")
        except (ValueError, TypeError) as exc:
            parsed = {INVALID_ARGUMENTS_KEY: f"{exc}: {str(raw_args)[:200]}"}
        blocks.append(
            ToolUseBlock(id=call.get("id") or f"call_{index}", name=function.get("name") or "", input=parsed)
        )
    usage = usage_from_dict(response.get("usage"), response.get("_cost", 0.0))
    return ProviderResponse(
        message=Message(role="assistant", content=tuple(blocks)),
        usage=usage,
        stop_reason=choice.get("finish_reason"),
        model=response.get("model"),
        raw=response,
    )
