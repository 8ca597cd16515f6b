"""The provider seam: render harness state, call a transport, normalise back.

Three steps, each owned here and nowhere else:

1. :func:`render_request` copies the system prompt, messages and visible tools
   into an OpenAI-style chat payload. Prompt-cache ``cache_control`` markers
   (on the system prompt and on the latest user-side message) exist only in
   this rendering; canonical history never holds them.
2. A *transport* sends the payload and returns an OpenAI-style response dict.
   :class:`LiteLLMTransport` is the real one (litellm, imported lazily); the
   offline models in :mod:`harness_magic.core.providers.offline` are others.
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

from harness_magic.core.transcript.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from harness_magic.core.transcript.scrub import register_secret, scrub

__all__ = [
    "ProviderAdapter",
    "AsyncProviderAdapter",
    "ProviderResponse",
    "ProviderError",
    "ModelRouteError",
    "check_model_route",
    "render_message",
    "thaw",
    "FrozenDict",
    "FrozenList",
    "PROMPT_CACHING_MODES",
    "EMPTY_TOOL_RESULT_TEXT",
    "EMPTY_ANSWER_TEXT",
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

CHARS_PER_TOKEN_ESTIMATE = 4
"""Token estimate where litellm has no tokenizer for the model (offline models)."""

TextCallback = Callable[[str], None]


class ProviderError(Exception):
    """A provider call failed for good (after retries, or not retryable)."""

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False,
                 request_sent: bool = True) -> None:
        super().__init__(scrub(message))  # gateways echo headers (and keys) into error bodies
        self.status_code = status_code
        self.retryable = retryable
        self.request_sent = request_sent
        """False when the failure happened before anything reached a provider (no key, no route, no connection)."""


class ModelRouteError(ProviderError, ValueError):
    """litellm cannot route this model id to a provider; raised before any request."""

    def __init__(self, message: str) -> None:
        super().__init__(message, request_sent=False)


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
EMPTY_TOOL_RESULT_TEXT = "(the tool returned no output)"
"""Sent for a tool result with no text: Anthropic rejects empty text blocks."""
EMPTY_ANSWER_TEXT = "(no answer text)"
"""Sent for an assistant turn with neither text nor tool calls: OpenAI rejects ``content: null``."""
EMPTY_USER_TEXT = "(empty message)"
"""Sent for a user turn whose text blocks are all empty (never produced by the loop; old logs may have one)."""
PROMPT_CACHING_MODES = ("auto", "on", "off")
"""``auto``: cache markers only where litellm says the model supports prompt caching."""


class FrozenDict(dict):
    """A dict that refuses changes: rendered messages are shared between requests."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("rendered provider messages are shared and read-only; copy them with thaw() first")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return thaw(self)


class FrozenList(list):
    """A list that refuses changes (content parts of a shared rendered message)."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("rendered provider messages are shared and read-only; copy them with thaw() first")

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse  # type: ignore[assignment]
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

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
        rendered: dict[str, Any] = {"role": "assistant", "content": text or (None if uses else EMPTY_ANSWER_TEXT)}
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
        out.append({"role": "user", "content": [{"type": "text", "text": t} for t in texts or [EMPTY_USER_TEXT]]})
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


def _render_message(message: Message, parts: bool) -> list[dict[str, Any]]:
    return list(render_message(message, parts))


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


def _render_tool(tool: Any) -> dict[str, Any]:
    return _freeze({
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": copy.deepcopy(tool.parameters)},
    })


def _assemble(model: str, system: str, flat: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
              cache_markers: bool) -> dict[str, Any]:
    system_part: dict[str, Any] = {"type": "text", "text": system}
    if cache_markers:
        system_part["cache_control"] = dict(_CACHE_MARK)
    rendered = [FrozenDict({"role": "system", "content": _freeze([system_part])})]
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
    return _assemble(model, system, flat, [_render_tool(t) for t in tools], cache_markers)


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


_CONNECTION_ERRORS = frozenset({"APIConnectionError", "ConnectError", "ConnectionError", "ConnectTimeout"})
"""litellm/httpx exception names that mean the request never reached a server."""


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception in ``exc``'s cause/context chain (the socket error behind a wrapper)."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _is_connection_failure(exc: BaseException) -> bool:
    chain: list[BaseException] = [exc]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt in chain or len(chain) > 20:
            break
        chain.append(nxt)  # type: ignore[arg-type]
    for item in chain:
        if type(item).__name__ in _CONNECTION_ERRORS or isinstance(item, ConnectionError) \
                or type(item).__name__ == "gaierror":
            return True
    text = str(exc)
    return "Connection error" in text or "Cannot connect" in text or "ConnectError" in text


def _map_exception(exc: Exception, url: str | None = None) -> ProviderError:
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    if _is_connection_failure(exc) and not (isinstance(status, int) and 400 <= status < 500):
        root = _root_cause(exc)
        detail = str(root).strip().splitlines()[0] if str(root).strip() else type(root).__name__
        return ProviderError(f"cannot connect to {url or 'the provider'}: {type(root).__name__}: {detail[:300]}",
                             retryable=True, request_sent=False)
    transient_names = {"APIConnectionError", "Timeout", "RateLimitError", "InternalServerError",
                       "ServiceUnavailableError", "BadGatewayError"}
    retryable = (isinstance(status, int) and status in RETRYABLE_STATUS) or name in transient_names
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    label = f"{name} (HTTP {status})" if isinstance(status, int) else name
    return ProviderError(f"{label}: {detail[:500]}", status_code=status if isinstance(status, int) else None,
                         retryable=retryable)


def check_model_route(model: str) -> str:
    """The litellm provider for ``model``; :class:`ModelRouteError` (one line) when litellm has none.

    Offline ids (``offline/``, ``scripted/``, ``replay/``) route to the offline models.
    """
    from harness_magic.core.providers.offline import OFFLINE_PREFIXES, is_offline_model

    if is_offline_model(model):
        return model.partition("/")[0]
    litellm = _import_litellm()
    try:
        return str(litellm.get_llm_provider(model)[1])
    except Exception:
        prefix, sep, _ = model.partition("/")
        what = f"provider prefix {prefix + '/'!r}" if sep else "no provider prefix"
        raise ModelRouteError(
            f"model {model!r}: litellm cannot route it ({what}). Use '<provider>/<model>', e.g. "
            f"'openai/gpt-4o-mini' or 'anthropic/claude-sonnet-4-20250514', or one of "
            f"{', '.join(p + '...' for p in OFFLINE_PREFIXES)}; list providers with "
            "`litellm.provider_list` and a provider's models with `litellm.models_by_provider['openai']`."
        ) from None


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

    def _url(self, model: str) -> str:
        """Where requests for ``model`` go: the configured api_base, else litellm's default for the provider."""
        if self.api_base:
            return self.api_base
        try:
            _, provider, _, base = _import_litellm().get_llm_provider(model)
            return base or f"the {provider} API"
        except Exception:
            return "the provider"

    def _kwargs(self, litellm: Any, payload: dict[str, Any]) -> dict[str, Any]:
        check_model_route(payload["model"])
        if self._api_key is None and self.api_base is None:
            check = litellm.validate_environment(model=payload["model"])
            missing = check.get("missing_keys") or []
            if missing:
                raise ProviderError(
                    f"No API key for model {payload['model']!r}: set {', '.join(missing)} in the environment "
                    "(never in the notebook), point api_base at a local server, or use the offline model "
                    "(model 'offline/quickstart', or 'scripted/<file.json>' / 'replay/<run.jsonl>').",
                    request_sent=False,
                )
        kwargs = thaw(payload)  # plain containers: some routes mutate messages in place
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
                try:
                    for chunk in response:
                        chunks.append(chunk)
                        delta = chunk.choices[0].delta.content if chunk.choices else None
                        if delta and on_text is not None:
                            on_text(delta)
                finally:  # also when on_text raises (an interrupt): never leave the stream to the GC
                    _close_stream(response)
                response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
        except ProviderError:
            raise
        except Exception as exc:
            raise _map_exception(exc, self._url(kwargs["model"])) from exc
        return self._finish(litellm, response)

    async def acomplete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]:
        litellm = _import_litellm()
        kwargs = self._kwargs(litellm, payload)
        try:
            response = await litellm.acompletion(**kwargs)
            if self.stream:
                chunks = []
                try:
                    async for chunk in response:
                        chunks.append(chunk)
                        delta = chunk.choices[0].delta.content if chunk.choices else None
                        if delta and on_text is not None:
                            on_text(delta)
                finally:
                    aclose = getattr(response, "aclose", None)
                    if aclose is not None:
                        try:
                            await aclose()
                        except Exception:
                            pass
                response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
        except ProviderError:
            raise
        except Exception as exc:
            raise _map_exception(exc, self._url(kwargs["model"])) from exc
        return self._finish(litellm, response)


def _close_stream(response: Any) -> None:
    """Close a litellm streaming response now, returning its HTTP connection to the pool.

    litellm's sync stream wrapper has no ``close()``; a stream abandoned
    mid-way (``on_text`` raised, e.g. KeyboardInterrupt from the stop button)
    would be finalised later by the garbage collector, which can run on this
    thread while it holds httpcore's pool lock (inside the next request) and
    then wait for that same, non-reentrant lock forever (encode/httpcore#990).
    So the provider stream under it is closed here: an ``openai.Stream`` (its
    ``close``) or an SSE iterator over httpx's ``iter_lines`` generator (closing
    the generator closes the response). Closing a finished stream does nothing.
    """
    stream = getattr(response, "completion_stream", None)
    for part in (stream, getattr(stream, "streaming_response", None), getattr(stream, "response_iterator", None),
                 getattr(stream, "response", None)):
        close = getattr(part, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # a close that fails leaves nothing better to do; the stream is done with
                pass


def transport_for_model(model: str, **options: Any) -> Any:
    """The transport a model id needs: offline ids get offline models."""
    from harness_magic.core import offline

    if offline.is_offline_model(model):
        return offline.offline_transport(model)
    return LiteLLMTransport(**options)


# --------------------------------------------------------------------------- adapters


class _RenderMemo:
    """The last rendering: messages, their flat wire form, and offsets (message i starts at offsets[i])."""

    __slots__ = ("messages", "flat", "offsets", "tokens")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.flat: list[dict[str, Any]] = []
        self.offsets: list[int] = [0]
        self.tokens: list[int] = [0]
        """Cumulative token estimate: ``tokens[i]`` for ``messages[:i]``."""


def _common_length(old: list[Message], new: Sequence[Message]) -> int:
    n = min(len(old), len(new))
    if old[:n] == list(new[:n]):  # C-level loop; identical objects compare by identity first
        return n
    index = 0
    while index < n and old[index] is new[index]:
        index += 1
    return index


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
        cache_markers: bool | None = None,
        prompt_caching: str = "auto",
        context_window: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if prompt_caching not in PROMPT_CACHING_MODES:
            raise ValueError(f"prompt_caching {prompt_caching!r} is not valid; allowed: {', '.join(PROMPT_CACHING_MODES)}")
        if context_window is not None and (not isinstance(context_window, int) or context_window < 1):
            raise ValueError(f"context_window must be a positive number of tokens or None, got {context_window!r}")
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        if cache_markers is not None:  # the older boolean switch: True = "on", False = "off"
            prompt_caching = "on" if cache_markers else "off"
        self.prompt_caching = prompt_caching
        """``auto`` (markers where litellm's model info says the model caches prompts), ``on`` or ``off``."""
        self.context_window = context_window
        """Input-token limit override; None asks litellm's model info (offline models: no limit)."""
        self.api_base = api_base
        self.transport = transport or transport_for_model(
            model, api_base=api_base, api_key=api_key, stream=stream, extra=extra
        )
        self.last_payload: dict[str, Any] | None = None
        """The most recent rendered payload (for inspection and benchmarks)."""
        self._caching_resolved: bool | None = None
        self._limit_resolved: int | None | bool = False
        self._memo = _RenderMemo()
        self._tool_memo: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._prefix_tokens: dict[tuple[Any, ...], int] = {}

    def fresh(self) -> "_AdapterBase":
        """A new adapter with the same settings and a fresh offline transport state."""
        clone = copy.copy(self)
        if hasattr(self.transport, "fresh"):
            clone.transport = self.transport.fresh()
        clone.last_payload = None
        clone._memo = _RenderMemo()
        return clone

    def rewind(self) -> bool:
        """Restart an offline model's script or recording from its first turn; False for real providers."""
        rewind = getattr(self.transport, "rewind", None)
        if rewind is None:
            return False
        rewind()
        return True

    # -- capabilities -------------------------------------------------------------------------

    @property
    def cache_markers(self) -> bool:
        """Whether requests carry ``cache_control`` markers (resolved once from :attr:`prompt_caching`)."""
        if self.prompt_caching != "auto":
            return self.prompt_caching == "on"
        if self._caching_resolved is None:
            self._caching_resolved = self._model_supports_caching()
        return self._caching_resolved

    @cache_markers.setter
    def cache_markers(self, value: bool) -> None:
        self.prompt_caching = "on" if value else "off"

    def _model_supports_caching(self) -> bool:
        declared = getattr(self.transport, "supports_prompt_caching", None)
        if declared is not None:
            return bool(declared)
        from harness_magic.core.providers.offline import is_offline_model

        if is_offline_model(self.model):
            return True  # offline models emulate a prefix cache
        try:
            from litellm.utils import supports_prompt_caching

            _import_litellm()
            return bool(supports_prompt_caching(model=self.model))
        except Exception:  # unknown model or provider: send no markers
            return False

    @property
    def max_input_tokens(self) -> int | None:
        """The model's input-token limit: :attr:`context_window`, else litellm's model info, else None."""
        if self.context_window is not None:
            return self.context_window
        if self._limit_resolved is False:
            self._limit_resolved = self._lookup_limit()
        return self._limit_resolved  # type: ignore[return-value]

    def _lookup_limit(self) -> int | None:
        declared = getattr(self.transport, "max_input_tokens", None)
        if declared is not None:
            return int(declared)
        from harness_magic.core.providers.offline import is_offline_model

        if is_offline_model(self.model):
            return None
        try:
            info = _import_litellm().get_model_info(self.model)
        except Exception:  # not in litellm's map: no known limit
            return None
        limit = info.get("max_input_tokens") or info.get("max_tokens")
        return int(limit) if limit else None

    # -- rendering ----------------------------------------------------------------------------

    def _tools(self, tools: Sequence[Any]) -> list[dict[str, Any]]:
        out = []
        for tool in tools:
            key = (tool.name, tool.description, id(tool.parameters))
            memo = self._tool_memo.get(id(tool))
            if memo is None or memo[0] != key:
                memo = self._tool_memo[id(tool)] = (key, _render_tool(tool))
            out.append(memo[1])
        return out

    def _flat(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """The flat wire form of ``messages``, re-rendering only what changed since the last call."""
        parts = self.cache_markers
        if getattr(self, "_memo_parts", parts) != parts:  # the mode changed: nothing rendered is reusable
            self._memo = _RenderMemo()
        self._memo_parts = parts
        memo = self._memo
        keep = _common_length(memo.messages, messages)
        del memo.messages[keep:], memo.offsets[keep + 1 :], memo.tokens[keep + 1 :]
        del memo.flat[memo.offsets[keep] :]
        for message in messages[keep:]:
            rendered = render_message(message, parts)
            memo.messages.append(message)
            memo.flat.extend(rendered)
            memo.offsets.append(len(memo.flat))
            memo.tokens.append(memo.tokens[-1] + self._message_tokens(message, rendered))
        return memo.flat

    def render(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> dict[str, Any]:
        """The request payload; message renderings are shared read-only with earlier requests."""
        parts = self.cache_markers
        return _assemble(self.model, system, self._flat(messages), self._tools(tools), parts)

    # -- token estimates ----------------------------------------------------------------------

    def _counter(self) -> Callable[[list[dict[str, Any]]], int]:
        """litellm's token counter for this model (real models), else characters / 4."""
        from harness_magic.core.providers.offline import is_offline_model

        if not is_offline_model(self.model):
            try:
                litellm = _import_litellm()

                def count(items: list[dict[str, Any]]) -> int:
                    return int(litellm.token_counter(model=self.model, messages=thaw(items)))

                count(  # probe once: an unknown model falls back to the estimate
                    [{"role": "user", "content": "probe"}])
                return count
            except Exception:
                pass
        return lambda items: len(json.dumps(items, ensure_ascii=False)) // CHARS_PER_TOKEN_ESTIMATE + 1

    def _message_tokens(self, message: Message, rendered: Sequence[dict[str, Any]]) -> int:
        memo = message.__dict__.get("_wire")
        key = ("tokens", self.model)
        if memo is not None and key in memo:
            return memo[key]
        if getattr(self, "_count", None) is None:
            self._count = self._counter()
        try:
            tokens = self._count(list(rendered))
        except Exception:
            tokens = len(json.dumps(thaw(list(rendered)), ensure_ascii=False)) // CHARS_PER_TOKEN_ESTIMATE + 1
        if memo is not None:
            memo[key] = tokens
        return tokens

    def estimate_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        """Estimated input tokens of the request for ``messages`` (memoised per message)."""
        self._flat(messages)
        key = (system, tuple((t.name, t.description, id(t.parameters)) for t in tools))
        prefix = self._prefix_tokens.get(key)
        if prefix is None:
            if getattr(self, "_count", None) is None:
                self._count = self._counter()
            prefix = self._count([{"role": "system", "content": system}])
            if tools:
                prefix += len(json.dumps(thaw(self._tools(tools)))) // CHARS_PER_TOKEN_ESTIMATE + 1
            self._prefix_tokens = {key: prefix}
        return prefix + self._memo.tokens[-1]

    def estimate_messages_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        """Like :meth:`estimate_tokens` for any message list, without touching the incremental rendering."""
        parts = self.cache_markers
        total = self.estimate_tokens(system, [], tools) if not self._memo.messages else None
        if total is None:
            total = self.estimate_tokens(system, self._memo.messages, tools) - self._memo.tokens[-1]
        for message in messages:
            total += self._message_tokens(message, render_message(message, parts))
        return total

    def estimate_text_tokens(self, text: str) -> int:
        """Estimated tokens of one user prompt."""
        if getattr(self, "_count", None) is None:
            self._count = self._counter()
        return self._count([{"role": "user", "content": text}])

    def _prepare(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> dict[str, Any]:
        """Render the request and keep it as :attr:`last_payload`."""
        self.last_payload = self.render(system, messages, tools)
        return self.last_payload

    def _retry_delay(self, exc: ProviderError, attempt: int) -> float:
        """Backoff before retry ``attempt + 1``; re-raises ``exc`` when it is final."""
        if exc.retryable and attempt < self.max_retries:
            return self.backoff_s * (2**attempt)
        if attempt:
            raise ProviderError(f"{exc} (after {attempt + 1} attempts)", status_code=exc.status_code,
                                request_sent=exc.request_sent) from exc
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
                return normalise_response(self.transport.complete(payload, on_text))
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
                return normalise_response(await self.transport.acomplete(payload, on_text))
            except ProviderError as exc:
                await self._sleep(self._retry_delay(exc, attempt))
                attempt += 1
