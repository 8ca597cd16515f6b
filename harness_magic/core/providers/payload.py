"""Rendering harness state into a provider's payload (OpenAI-style chat schema).

Contract:

- :func:`render_request` (and the adapter, through :func:`render_message`,
  :func:`render_tool` and :func:`assemble_payload`) copies the system prompt,
  messages and visible tools into a payload; canonical messages are never
  mutated.
- Content is a plain string unless a part needs a list: without prompt-cache
  markers the system prompt, user turns and tool results are strings (strict
  local servers such as llama-cpp-python's accept only a string for a system
  message), several text blocks of one turn joined by :data:`TEXT_JOINER`.
- Prompt-cache ``cache_control`` markers (on the system prompt and on the
  latest user-side message) exist only in this rendering; history never holds
  them. With markers every user-side content is a list of text parts, marked
  or not, so moving the marker keeps the request prefix byte-stable.
- Rendered messages are read-only (:class:`FrozenDict`, :class:`FrozenList`)
  and shared between requests; :func:`thaw` gives a mutable copy.
- Never an empty text part, never ``content: null`` without tool calls (the
  ``EMPTY_*_TEXT`` placeholders stand in), since strict APIs reject both. An
  assistant turn that only calls tools has ``content: ""``: llama-cpp-python's
  ``chatml-function-calling`` template fails on a null one (HTTP 500 "'dict
  object' has no attribute 'content'"), which a stream hid as an empty answer.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Sequence

from harness_magic.core.transcript.messages import Message, TextBlock

__all__ = [
    "render_request",
    "render_message",
    "render_tool",
    "assemble_payload",
    "thaw",
    "FrozenDict",
    "FrozenList",
    "EMPTY_TOOL_RESULT_TEXT",
    "EMPTY_ANSWER_TEXT",
    "EMPTY_USER_TEXT",
    "TEXT_JOINER",
]

_CACHE_MARK = {"type": "ephemeral"}
"""The prompt-cache breakpoint marker (Anthropic's form; litellm maps or drops it per provider)."""
EMPTY_TOOL_RESULT_TEXT = "(the tool returned no output)"
"""Sent for a tool result with no text: Anthropic rejects empty text blocks."""
EMPTY_ANSWER_TEXT = "(no answer text)"
"""Sent for an assistant turn with neither text nor tool calls: OpenAI rejects ``content: null``."""
EMPTY_USER_TEXT = "(empty message)"
"""Sent for a user turn whose text blocks are all empty (never produced by the loop; old logs may have one)."""
TEXT_JOINER = "\n\n"
"""Joins a turn's text blocks into one string content (a paragraph break, as separate parts read)."""


class FrozenDict(dict):
    """A dict that refuses changes: rendered messages are shared between requests."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("rendered provider messages are shared and read-only; copy them with thaw() first")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]  # every mutator is replaced by one refusing method
    __ior__ = _refuse  # type: ignore[assignment]  # every mutator is replaced by one refusing method

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return thaw(self)


class FrozenList(list):
    """A list that refuses changes (content parts of a shared rendered message)."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("rendered provider messages are shared and read-only; copy them with thaw() first")

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]  # every mutator is replaced by one refusing method

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return thaw(self)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain, mutable copies of the containers in ``value`` (strings and numbers are shared)."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def _has_text(text: str) -> bool:
    return bool(text) and not text.isspace()


def _render_message_uncached(message: Message, parts: bool) -> tuple[dict[str, Any], ...]:
    if message.role == "assistant":
        text = message.text if _has_text(message.text) else ""
        uses = message.tool_uses
        rendered: dict[str, Any] = {"role": "assistant", "content": text or ("" if uses else EMPTY_ANSWER_TEXT)}
        if uses:
            rendered["tool_calls"] = [
                {
                    "id": use.id,
                    "type": "function",
                    "function": {"name": use.name, "arguments": json.dumps(use.input, ensure_ascii=False)},
                }
                for use in uses
            ]
        return (_freeze(rendered),)
    out: list[dict[str, Any]] = []
    for result in message.tool_results:
        body = result.content if _has_text(result.content) else EMPTY_TOOL_RESULT_TEXT
        content: Any = f"ERROR: {body}" if result.is_error else body
        if parts:  # the same shape marked or not, so moving the marker keeps the prefix byte-stable
            content = [{"type": "text", "text": content}]
        out.append({"role": "tool", "tool_call_id": result.tool_use_id, "content": content})
    texts = [b.text for b in message.content if isinstance(b, TextBlock) and _has_text(b.text)]
    if texts or not out:
        texts = texts or [EMPTY_USER_TEXT]
        user: Any = [{"type": "text", "text": t} for t in texts] if parts else TEXT_JOINER.join(texts)
        out.append({"role": "user", "content": user})
    return tuple(_freeze(item) for item in out)


def render_message(message: Message, parts: bool) -> tuple[dict[str, Any], ...]:
    """The wire form of one message: read-only dicts, computed once per message and mode.

    Never an empty text part, never ``content: null`` without tool calls.
    """
    memo = message.__dict__.get("_wire")
    if memo is None:
        memo = {}
        object.__setattr__(message, "_wire", memo)  # frozen dataclass: the memo is not a field
    rendered = memo.get(parts)
    if rendered is None:
        rendered = memo[parts] = _render_message_uncached(message, parts)
    return rendered


def _marked(rendered: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``rendered`` whose last content part carries ``cache_control``."""
    content = rendered.get("content")
    if isinstance(content, str):
        marked = [{"type": "text", "text": content, "cache_control": dict(_CACHE_MARK)}]
    elif isinstance(content, list) and content:
        marked = list(content[:-1]) + [{**content[-1], "cache_control": dict(_CACHE_MARK)}]
    else:
        return rendered
    return FrozenDict({**rendered, "content": _freeze(marked)})


def render_tool(tool: Any) -> dict[str, Any]:
    """The read-only function-tool schema of one :class:`~harness_magic.core.execution.tools.ToolSpec`."""
    return _freeze({
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": copy.deepcopy(tool.parameters)},
    })


def assemble_payload(model: str, system: str, flat: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                     cache_markers: bool) -> dict[str, Any]:
    """The payload from already rendered messages (``flat``) and tools; marks the cache breakpoints when asked."""
    if cache_markers:
        system_content: Any = _freeze([{"type": "text", "text": system, "cache_control": dict(_CACHE_MARK)}])
    else:  # a plain string: strict OpenAI-compatible servers reject a list here
        system_content = system
    rendered: list[dict[str, Any]] = [FrozenDict({"role": "system", "content": system_content})]
    rendered.extend(flat)
    if cache_markers:
        for index in range(len(rendered) - 1, 0, -1):
            if rendered[index]["role"] in ("user", "tool"):
                rendered[index] = _marked(rendered[index])
                break
    payload: dict[str, Any] = {"model": model}
    if tools:  # tools before messages: the stable part of the request comes first
        payload["tools"] = FrozenList(tools)
    payload["messages"] = FrozenList(rendered)
    return payload


def render_request(
    model: str,
    system: str,
    messages: Sequence[Message],
    tools: Sequence[Any],
    *,
    cache_markers: bool = True,
) -> dict[str, Any]:
    """OpenAI-style payload for ``messages``.

    ``tools`` are :class:`~harness_magic.core.execution.tools.ToolSpec` (visible ones only,
    in the caller's order). With ``cache_markers`` the system prompt and the
    latest user-side message carry ``cache_control``. Rendered messages are
    read-only (:class:`FrozenDict`) and shared with later requests; use
    :func:`thaw` for a mutable copy.
    """
    flat: list[dict[str, Any]] = []
    for message in messages:
        flat.extend(render_message(message, cache_markers))
    return assemble_payload(model, system, flat, [render_tool(t) for t in tools], cache_markers)

