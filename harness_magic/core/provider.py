"""The provider seam: render harness state, call a transport, normalise back.

Three steps, each owned here and nowhere else:

1. :func:`render_request` copies the system prompt, messages and visible tools
   into an OpenAI-style chat payload. Prompt-cache ``cache_control`` markers
   (on the system prompt and on the latest user-side message) exist only in
   this rendering; canonical history never holds them.
2. A *transport* sends the payload and returns an OpenAI-style response dict.
   :class:`LiteLLMTransport` is the real one (litellm, imported lazily); the
   offline models in :mod:`harness_magic.core.offline` are others.
3. :func:`normalise_response` turns the response dict into harness types.

Adapters retry transient failures (rate limits, server errors, connection
errors) with bounded exponential backoff and raise :class:`ProviderError`
otherwise. They never mutate the messages they are given.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from harness_magic.core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from harness_magic.core.scrub import register_secret, scrub

__all__ = [
    "ProviderAdapter",
    "AsyncProviderAdapter",
    "ProviderResponse",
    "ProviderError",
    "Transport",
    "LiteLLMTransport",
    "render_request",
    "normalise_response",
    "transport_for_model",
    "INVALID_ARGUMENTS_KEY",
    "DEFAULT_MAX_RETRIES",
]

DEFAULT_MAX_RETRIES = 3
"""Transient provider failures are retried this many times before surfacing."""
DEFAULT_BACKOFF_S = 0.5
"""First retry delay; doubles each retry (0.5, 1, 2 s)."""
DEFAULT_TIMEOUT_S = 120.0
"""Per-request timeout; long enough for slow models, short enough to notice a hang."""
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""HTTP statuses worth a retry: throttling and transient server trouble."""
INVALID_ARGUMENTS_KEY = "__invalid_arguments__"
"""Key under which unparseable tool-call arguments are kept for an error result."""

TextCallback = Callable[[str], None]


class ProviderError(Exception):
    """A provider call failed for good (after retries, or not retryable)."""

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False) -> None:
        super().__init__(scrub(message))  # gateways echo headers (and keys) into error bodies
        self.status_code = status_code
        self.retryable = retryable


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


class Transport(Protocol):
    """Sends one rendered payload; returns an OpenAI-style response dict."""

    def complete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]: ...

    async def acomplete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]: ...


# --------------------------------------------------------------------------- rendering

_CACHE_MARK = {"type": "ephemeral"}


def _render_message(message: Message, parts: bool) -> list[dict[str, Any]]:
    if message.role == "assistant":
        text = message.text
        rendered: dict[str, Any] = {"role": "assistant", "content": text or None}
        uses = message.tool_uses
        if uses:
            rendered["tool_calls"] = [
                {
                    "id": use.id,
                    "type": "function",
                    "function": {"name": use.name, "arguments": json.dumps(use.input, ensure_ascii=False)},
                }
                for use in uses
            ]
        return [rendered]
    out: list[dict[str, Any]] = []
    for result in message.tool_results:
        content: Any = f"ERROR: {result.content}" if result.is_error else result.content
        if parts:  # the same shape marked or not, so moving the marker keeps the prefix byte-stable
            content = [{"type": "text", "text": content}]
        out.append({"role": "tool", "tool_call_id": result.tool_use_id, "content": content})
    texts = [b.text for b in message.content if isinstance(b, TextBlock)]
    if texts:
        out.append({"role": "user", "content": [{"type": "text", "text": t} for t in texts]})
    return out


def _mark_last(rendered: dict[str, Any]) -> None:
    content = rendered.get("content")
    if isinstance(content, str):
        rendered["content"] = [{"type": "text", "text": content, "cache_control": dict(_CACHE_MARK)}]
    elif isinstance(content, list) and content:
        content[-1]["cache_control"] = dict(_CACHE_MARK)


def render_request(
    model: str,
    system: str,
    messages: Sequence[Message],
    tools: Sequence[Any],
    *,
    cache_markers: bool = True,
) -> dict[str, Any]:
    """OpenAI-style payload for ``messages``; a fresh structure sharing nothing.

    ``tools`` are :class:`~harness_magic.core.tools.ToolSpec` (visible ones only,
    in the caller's order). With ``cache_markers`` the system prompt and the
    latest user-side message carry ``cache_control``.
    """
    system_part: dict[str, Any] = {"type": "text", "text": system}
    if cache_markers:
        system_part["cache_control"] = dict(_CACHE_MARK)
    rendered = [{"role": "system", "content": [system_part]}]
    for message in messages:
        rendered.extend(_render_message(message, cache_markers))
    if cache_markers:
        for item in reversed(rendered):
            if item["role"] in ("user", "tool"):
                _mark_last(item)
                break
    payload: dict[str, Any] = {"model": model}
    if tools:  # tools before messages: the stable part of the request comes first
        payload["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": copy.deepcopy(t.parameters),
                },
            }
            for t in tools
        ]
    payload["messages"] = rendered
    return payload


# --------------------------------------------------------------------------- normalising


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


# --------------------------------------------------------------------------- litellm transport


def _import_litellm() -> Any:
    """Import litellm once, offline-safe: local cost map, no debug chatter."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def _map_exception(exc: Exception) -> ProviderError:
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    transient_names = {"APIConnectionError", "Timeout", "RateLimitError", "InternalServerError",
                       "ServiceUnavailableError", "BadGatewayError"}
    retryable = (isinstance(status, int) and status in RETRYABLE_STATUS) or name in transient_names
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    label = f"{name} (HTTP {status})" if isinstance(status, int) else name
    return ProviderError(f"{label}: {detail[:500]}", status_code=status if isinstance(status, int) else None,
                         retryable=retryable)


class LiteLLMTransport:
    """Calls litellm; streams text through ``on_text`` and reassembles tool calls."""

    def __init__(
        self,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        stream: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.api_base = api_base
        self._api_key = api_key
        register_secret(api_key)
        register_secret((extra or {}).get("api_key"))
        self.stream = stream
        self.timeout_s = timeout_s
        self.extra = dict(extra or {})

    def __repr__(self) -> str:  # never shows the key
        return f"LiteLLMTransport(api_base={self.api_base!r}, stream={self.stream})"

    def _kwargs(self, litellm: Any, payload: dict[str, Any]) -> dict[str, Any]:
        if self._api_key is None and self.api_base is None:
            check = litellm.validate_environment(model=payload["model"])
            missing = check.get("missing_keys") or []
            if missing:
                raise ProviderError(
                    f"No API key for model {payload['model']!r}: set {', '.join(missing)} in the environment "
                    "(never in the notebook), point api_base at a local server, or use the offline model "
                    "(model 'offline/quickstart', or 'scripted/<file.json>' / 'replay/<run.jsonl>')."
                )
        kwargs = copy.deepcopy(payload)  # some routes mutate messages in place
        kwargs.update(self.extra)
        kwargs.update(timeout=self.timeout_s, num_retries=0, max_retries=0)
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        if self.stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        return kwargs

    @staticmethod
    def _finish(litellm: Any, response: Any) -> dict[str, Any]:
        try:
            cost = float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # unknown model: no price
            cost = 0.0
        data = response.model_dump() if hasattr(response, "model_dump") else dict(response)
        data["_cost"] = cost
        return data

    def complete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]:
        litellm = _import_litellm()
        kwargs = self._kwargs(litellm, payload)
        try:
            response = litellm.completion(**kwargs)
            if self.stream:
                chunks = []
                for chunk in response:
                    chunks.append(chunk)
                    delta = chunk.choices[0].delta.content if chunk.choices else None
                    if delta and on_text is not None:
                        on_text(delta)
                response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
        except ProviderError:
            raise
        except Exception as exc:
            raise _map_exception(exc) from exc
        return self._finish(litellm, response)

    async def acomplete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]:
        litellm = _import_litellm()
        kwargs = self._kwargs(litellm, payload)
        try:
            response = await litellm.acompletion(**kwargs)
            if self.stream:
                chunks = []
                async for chunk in response:
                    chunks.append(chunk)
                    delta = chunk.choices[0].delta.content if chunk.choices else None
                    if delta and on_text is not None:
                        on_text(delta)
                response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
        except ProviderError:
            raise
        except Exception as exc:
            raise _map_exception(exc) from exc
        return self._finish(litellm, response)


def transport_for_model(model: str, **options: Any) -> Any:
    """The transport a model id needs: offline ids get offline models."""
    from harness_magic.core import offline

    if offline.is_offline_model(model):
        return offline.offline_transport(model)
    return LiteLLMTransport(**options)


# --------------------------------------------------------------------------- adapters


class _AdapterBase:
    def __init__(
        self,
        model: str,
        *,
        transport: Any | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        stream: bool = True,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        cache_markers: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.cache_markers = cache_markers
        self.transport = transport or transport_for_model(
            model, api_base=api_base, api_key=api_key, stream=stream, extra=extra
        )
        self.last_payload: dict[str, Any] | None = None
        """The most recent rendered payload (for inspection and benchmarks)."""

    def fresh(self) -> "_AdapterBase":
        """A new adapter with the same settings and a fresh offline transport state."""
        clone = copy.copy(self)
        if hasattr(self.transport, "fresh"):
            clone.transport = self.transport.fresh()
        clone.last_payload = None
        return clone

    def render(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> dict[str, Any]:
        return render_request(self.model, system, messages, tools, cache_markers=self.cache_markers)

    def _prepare(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> dict[str, Any]:
        """Render the request and keep it as :attr:`last_payload`."""
        self.last_payload = self.render(system, messages, tools)
        return self.last_payload

    def _retry_delay(self, exc: ProviderError, attempt: int) -> float:
        """Backoff before retry ``attempt + 1``; re-raises ``exc`` when it is final."""
        if exc.retryable and attempt < self.max_retries:
            return self.backoff_s * (2**attempt)
        if attempt:
            raise ProviderError(f"{exc} (after {attempt + 1} attempts)", status_code=exc.status_code) from exc
        raise exc


class ProviderAdapter(_AdapterBase):
    """Synchronous adapter: ``complete(system, messages, tools) -> ProviderResponse``."""

    def __init__(self, model: str, *, sleep: Callable[[float], None] = time.sleep, **options: Any) -> None:
        super().__init__(model, **options)
        self._sleep = sleep

    def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Any],
        on_text: TextCallback | None = None,
    ) -> ProviderResponse:
        payload = self._prepare(system, messages, tools)
        attempt = 0
        while True:
            try:
                return normalise_response(self.transport.complete(copy.deepcopy(payload), on_text))
            except ProviderError as exc:
                self._sleep(self._retry_delay(exc, attempt))
                attempt += 1


class AsyncProviderAdapter(_AdapterBase):
    """Asynchronous adapter: ``await complete(...)``; same contract as the sync one."""

    def __init__(self, model: str, *, sleep: Callable[[float], Any] = asyncio.sleep, **options: Any) -> None:
        super().__init__(model, **options)
        self._sleep = sleep

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[Any],
        on_text: TextCallback | None = None,
    ) -> ProviderResponse:
        payload = self._prepare(system, messages, tools)
        attempt = 0
        while True:
            try:
                return normalise_response(await self.transport.acomplete(copy.deepcopy(payload), on_text))
            except ProviderError as exc:
                await self._sleep(self._retry_delay(exc, attempt))
                attempt += 1
