"""The adapters: render a request, call the transport, retry transient failures, normalise the reply.

:class:`ProviderAdapter` (sync) and :class:`AsyncProviderAdapter` share one
contract: ``complete(system, messages, tools, on_text)`` returns a
:class:`~harness_magic.core.providers.response.ProviderResponse` or raises
:class:`~harness_magic.core.providers.errors.ProviderError` after at most
``max_retries`` retries with exponential backoff (a refused connection, an
authentication refusal, a model the server does not serve or a request over the
model's context window is never retried). A response carries in ``notices`` the transport's one-line notice
(the placeholder key was sent) the first time it exists. Adapters never mutate the
messages they are given; they re-render only the messages that changed since
the previous request (renderings are shared read-only), decide prompt-cache
markers (``prompt_caching``), know the model's input limit (capped by the window a
context overflow showed: the server's refusal, or an empty answer to a request within
:data:`~harness_magic.core.providers.overflow.NEAR_WINDOW_SHARE` of the window, raises
:class:`~harness_magic.core.providers.errors.ContextWindowExceeded` naming the prompt's size,
the window and ``context_window``, and the next request is compacted to fit), and estimate
token counts (litellm's counter for real models, characters / 4 otherwise). Every litellm use (the call
and those lookups) goes to the provider host process (:mod:`.hosted`) unless ``provider_host`` is False.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import time
from typing import Any, Callable, Self, Sequence

from harness_magic.core.providers.channel import DEFAULT_IDLE_S
from harness_magic.core.providers.errors import ContextWindowExceeded, ProviderError
from harness_magic.core.providers.hosted import HostedTransport
from harness_magic.core.providers.offline import ReplayModel, ScriptedModel, is_offline_model, offline_transport
from harness_magic.core.providers.overflow import NEAR_WINDOW_SHARE, learned_window, overflow_error
from harness_magic.core.providers.payload import assemble_payload, render_message, render_tool, thaw
from harness_magic.core.providers.response import ProviderResponse, normalise_response
from harness_magic.core.providers.transport import (
    LiteLLMLookups,
    LiteLLMTransport,
    ModelLookups,
    TextCallback,
    check_model_route,
)
from harness_magic.core.transcript.messages import Message

__all__ = [
    "ProviderAdapter",
    "AsyncProviderAdapter",
    "transport_for_model",
    "route_model",
    "PROMPT_CACHING_MODES",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_BACKOFF_S",
    "CHARS_PER_TOKEN_ESTIMATE",
]

DEFAULT_MAX_RETRIES = 3
"""Transient provider failures are retried this many times before surfacing."""
DEFAULT_BACKOFF_S = 0.5
"""First retry delay; doubles each retry (0.5, 1, 2 s)."""
CHARS_PER_TOKEN_ESTIMATE = 4
"""Token estimate where litellm has no tokenizer for the model (offline models)."""
PROMPT_CACHING_MODES = ("auto", "on", "off")
"""``auto``: cache markers only where litellm says the model supports prompt caching."""


def transport_for_model(model: str, *, provider_host: bool = True, provider_idle_s: float = DEFAULT_IDLE_S,
                        **options: Any) -> Any:
    """The transport a model id needs (``options`` are the transport's).

    Offline ids get offline models; others :class:`HostedTransport` (litellm in the provider host process,
    which exits after ``provider_idle_s`` idle seconds), or with ``provider_host`` False
    :class:`LiteLLMTransport` in this process (for litellm module globals or custom providers set here).
    """
    if is_offline_model(model):
        return offline_transport(model)
    if provider_host:
        return HostedTransport(idle_s=provider_idle_s, **options)
    return LiteLLMTransport(**options)


def route_model(model: str, *, provider_host: bool = True, api_base: str | None = None,
                extra: dict[str, Any] | None = None) -> str:
    """:func:`check_model_route`, asked of the provider host unless ``provider_host`` is False (offline ids: here);
    answered by the missing-key record when the run's calls (``api_base``, ``extra``) will be refused by it."""
    if provider_host and not is_offline_model(model):
        transport = HostedTransport(api_base=api_base, extra=extra)
        refusal = transport.recorded_refusal(model)
        return refusal.route if refusal is not None else transport.route(model)
    return check_model_route(model)


def warm_up_provider(model: str, *, provider_host: bool = True, provider_idle_s: float = DEFAULT_IDLE_S,
                     api_base: str | None = None, extra: dict[str, Any] | None = None) -> bool:
    """Start the provider host in the background when ``model`` will need it and none runs (it imports litellm
    while this process goes on, and lives ``provider_idle_s`` if no request comes); whether one was started.
    Offline ids, ``provider_host`` off, and a model the missing-key record refuses with this ``api_base`` and
    ``extra`` (:meth:`HostedTransport.recorded_refusal`): nothing."""
    if not provider_host or is_offline_model(model):
        return False
    return HostedTransport(idle_s=provider_idle_s, api_base=api_base, extra=extra).warm_up(model)


def _estimate(items: list[dict[str, Any]]) -> int:
    """Token estimate of a message list where no tokenizer is known: characters / 4."""
    return len(json.dumps(items, ensure_ascii=False)) // CHARS_PER_TOKEN_ESTIMATE + 1


def _estimates(batches: list[list[dict[str, Any]]]) -> list[int]:
    """:func:`_estimate` of each message list."""
    return [_estimate(items) for items in batches]


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
        provider_host: bool = True,
        provider_idle_s: float = DEFAULT_IDLE_S,
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
        self.provider_host = provider_host
        """Whether litellm runs in the provider host process (lookups included) rather than in this one."""
        self.transport = transport or transport_for_model(
            model, api_base=api_base, api_key=api_key, stream=stream, extra=extra, provider_host=provider_host,
            provider_idle_s=provider_idle_s,
        )
        self._provider_idle_s = provider_idle_s
        self.last_payload: dict[str, Any] | None = None
        """The most recent rendered payload (for inspection and benchmarks)."""
        self._caching_resolved: bool | None = None
        self._limit_resolved: int | None | bool = False
        self._learned_window: int | None = None
        """The window a context overflow showed, in estimate units (None: none seen); caps :attr:`max_input_tokens`."""
        self._memo = _RenderMemo()
        self._tool_memo: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._prefix_tokens: dict[tuple[Any, ...], int] = {}

    def fresh(self) -> Self:
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

    def script_place(self) -> Any:
        """An offline model's place in its script or recording (for :meth:`seek`); None for real providers."""
        transport = self.transport
        return transport.place() if isinstance(transport, (ScriptedModel, ReplayModel)) else None

    def seek(self, place: Any) -> None:
        """Put an offline model back at ``place`` (from :meth:`script_place`); nothing for None or real providers."""
        transport = self.transport
        if place is not None and isinstance(transport, (ScriptedModel, ReplayModel)):
            transport.seek(place)

    # -- capabilities -------------------------------------------------------------------------

    @property
    def cache_markers(self) -> bool:
        """Whether requests carry ``cache_control`` markers (resolved once from :attr:`prompt_caching`)."""
        if self.prompt_caching != "auto":
            return self.prompt_caching == "on"
        if self._caching_resolved is None:
            if self._refused():
                return False  # not kept: asked again once the key is there
            self._caching_resolved = self._model_supports_caching()
        return self._caching_resolved

    @cache_markers.setter
    def cache_markers(self, value: bool) -> None:
        self.prompt_caching = "on" if value else "off"

    def _model_supports_caching(self) -> bool:
        declared = getattr(self.transport, "supports_prompt_caching", None)
        if declared is not None:
            return bool(declared)
        if is_offline_model(self.model):
            return True  # offline models emulate a prefix cache
        try:
            return self._lookups().supports_caching(self.model)
        except Exception:  # unknown model or provider: send no markers
            return False

    def _refused(self) -> bool:
        """Whether this model's calls are refused for want of keys by the missing-key record
        (:meth:`HostedTransport.recorded_refusal`): the run will send nothing, so litellm's tables are not
        asked (no provider host starts for it) and the fallbacks stand in, never kept past the refusal."""
        transport = self.transport
        return isinstance(transport, HostedTransport) and transport.recorded_refusal(self.model) is not None

    def _lookups(self) -> ModelLookups:
        """Who answers questions about the model: the transport when it is litellm's (hosted or here), else the
        provider host or litellm here as :attr:`provider_host` says."""
        transport = self.transport
        if isinstance(transport, (HostedTransport, LiteLLMTransport)):
            return transport
        return HostedTransport(idle_s=self._provider_idle_s) if self.provider_host else LiteLLMLookups()

    @property
    def max_input_tokens(self) -> int | None:
        """The model's input-token limit: :attr:`context_window`, else litellm's model info, else None;
        never above the window a context overflow showed (:meth:`complete` learns it)."""
        if self.context_window is not None:
            known = self.context_window
        elif self._limit_resolved is False and self._refused():
            known = None  # not kept: asked again once the key is there
        else:
            if self._limit_resolved is False:
                self._limit_resolved = self._lookup_limit()
            known = self._limit_resolved
        if self._learned_window is None:
            return known
        return min(known, self._learned_window) if known else self._learned_window

    @property
    def window_learned(self) -> bool:
        """Whether :attr:`max_input_tokens` is the window a context overflow showed: the server's count converted
        to an estimate, not a stated limit, so a request still over it after compaction is sent (the server decides)."""
        known = self.context_window if self.context_window is not None else self._limit_resolved
        return self._learned_window is not None and (not known or self._learned_window < known)

    def _lookup_limit(self) -> int | None:
        declared = getattr(self.transport, "max_input_tokens", None)
        if declared is not None:
            return int(declared)
        if is_offline_model(self.model):
            return None
        try:
            info = self._lookups().model_info(self.model)
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
                memo = self._tool_memo[id(tool)] = (key, render_tool(tool))
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
        added = [(message, render_message(message, parts)) for message in messages[keep:]]
        for (message, rendered), tokens in zip(added, self._tokens_of(added)):  # one count for the new messages
            memo.messages.append(message)
            memo.flat.extend(rendered)
            memo.offsets.append(len(memo.flat))
            memo.tokens.append(memo.tokens[-1] + tokens)
        return memo.flat

    def render(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> dict[str, Any]:
        """The request payload; message renderings are shared read-only with earlier requests."""
        parts = self.cache_markers
        return assemble_payload(self.model, system, self._flat(messages), self._tools(tools), parts)

    # -- token estimates ----------------------------------------------------------------------

    def _counter(self) -> Callable[[list[list[dict[str, Any]]]], list[int]]:
        """litellm's token counter for this model (real models; one call counts a batch of message lists),
        else characters / 4."""
        if not is_offline_model(self.model):
            lookups, model = self._lookups(), self.model
            try:
                lookups.token_counts(model, [[{"role": "user", "content": "probe"}]])  # an unknown model: estimate
                return lambda batches: lookups.token_counts(model, batches)
            # broad: litellm's tokenizer fails in its own ways for an unknown model; the estimate below is used
            except Exception:
                pass
        return _estimates

    def _counting(self) -> Callable[[list[list[dict[str, Any]]]], list[int]]:
        """The token counter, found once and kept (:meth:`_counter`); while the missing-key record refuses the
        model (:meth:`_refused`), the estimate, and neither it nor what it counts is kept."""
        if getattr(self, "_count", None) is None:
            if self._refused():
                return _estimates
            self._count = self._counter()
        return self._count

    def _count_one(self, items: list[dict[str, Any]]) -> int:
        return self._counting()([items])[0]

    def _tokens_of(self, pairs: Sequence[tuple[Message, Sequence[dict[str, Any]]]]) -> list[int]:
        """Tokens of each (message, rendering), memoised per message; the ones not known are counted in one batch."""
        key = ("tokens", self.model)
        counts: list[int] = [0] * len(pairs)
        missing: list[int] = []
        for index, (message, _rendered) in enumerate(pairs):
            memo = message.__dict__.get("_wire")
            if memo is not None and key in memo:
                counts[index] = memo[key]
            else:
                missing.append(index)
        if not missing:
            return counts
        batches = [thaw(list(pairs[index][1])) for index in missing]
        count = self._counting()
        kept = count is getattr(self, "_count", None)
        try:
            found = count(batches)
        # broad: a tokenizer failing on one payload falls back to the estimate (a count, never a send)
        except Exception:
            found = [_estimate(items) for items in batches]
        for index, tokens in zip(missing, found):
            counts[index] = tokens
            memo = pairs[index][0].__dict__.get("_wire")
            if memo is not None and kept:
                memo[key] = tokens
        return counts

    def estimate_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        """Estimated input tokens of the request for ``messages`` (memoised per message)."""
        self._flat(messages)
        key = (system, tuple((t.name, t.description, id(t.parameters)) for t in tools))
        prefix = self._prefix_tokens.get(key)
        if prefix is None:
            prefix = self._count_one([{"role": "system", "content": system}])
            if tools:
                prefix += len(json.dumps(thaw(self._tools(tools)))) // CHARS_PER_TOKEN_ESTIMATE + 1
            if getattr(self, "_count", None) is not None:  # not an estimate made while the record refuses the model
                self._prefix_tokens = {key: prefix}
        return prefix + self._memo.tokens[-1]

    def estimate_messages_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        """Like :meth:`estimate_tokens` for any message list, without touching the incremental rendering."""
        parts = self.cache_markers
        total = self.estimate_tokens(system, [], tools) if not self._memo.messages else None
        if total is None:
            total = self.estimate_tokens(system, self._memo.messages, tools) - self._memo.tokens[-1]
        return total + sum(self._tokens_of([(message, render_message(message, parts)) for message in messages]))

    def estimate_text_tokens(self, text: str) -> int:
        """Estimated tokens of one user prompt."""
        return self._count_one([{"role": "user", "content": text}])

    def _prepare(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> dict[str, Any]:
        """Render the request and keep it as :attr:`last_payload`."""
        self.last_payload = self.render(system, messages, tools)
        return self.last_payload

    def _retry_delay(self, exc: ProviderError, attempt: int) -> float:
        """Backoff before retry ``attempt + 1``; re-raises ``exc`` when it is final (same class, attempts named)."""
        if exc.retryable and attempt < self.max_retries:
            delay: float = self.backoff_s * (2**attempt)
            return delay
        if attempt:
            final = type(exc).__new__(type(exc))  # keep the subclass and its fields (status, url, served models)
            final.__dict__.update(exc.__dict__)
            final.args = (f"{exc} (after {attempt + 1} attempts)",)
            final.retryable = False
            raise final from exc
        raise exc

    def _overflow(self, cause: ContextWindowExceeded | None, system: str, messages: Sequence[Message],
                  tools: Sequence[Any]) -> ContextWindowExceeded:
        """The error for a request that did not fit (``cause``: the server's refusal; None: an empty answer
        near the window); learns the window so the next request is compacted to fit it."""
        estimate = self.estimate_tokens(system, messages, tools)
        window = cause.window if cause is not None else None
        server_prompt = cause.prompt_tokens if cause is not None else None
        self._learned_window = learned_window(window, server_prompt, estimate)
        url = cause.url if cause is not None else (self.api_base or self.model)
        return overflow_error(cause, url=url, estimate=estimate, window=window or self.context_window,
                              setting=self.context_window)

    def _settled(self, response: ProviderResponse, system: str, messages: Sequence[Message],
                 tools: Sequence[Any]) -> ProviderResponse:
        """``response``, unless it is empty (no text, no tool call) after a request near the window: an overflow."""
        message = response.message
        if message.text.strip() or message.tool_uses:
            return response
        limit = self.max_input_tokens
        if limit and self.estimate_tokens(system, messages, tools) >= limit * NEAR_WINDOW_SHARE:
            raise self._overflow(None, system, messages, tools)
        return response

    def _with_notices(self, response: ProviderResponse) -> ProviderResponse:
        """``response`` carrying the transport's pending notice (each notice is handed out once)."""
        notice = getattr(self.transport, "notice", None)
        if not notice:
            return response
        self.transport.notice = None
        return dataclasses.replace(response, notices=response.notices + (notice,))


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
                response = normalise_response(self.transport.complete(payload, on_text))
            except ContextWindowExceeded as exc:
                raise self._overflow(exc, system, messages, tools) from exc
            except ProviderError as exc:
                self._sleep(self._retry_delay(exc, attempt))
                attempt += 1
            else:
                return self._with_notices(self._settled(response, system, messages, tools))


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
                response = normalise_response(await self.transport.acomplete(payload, on_text))
            except ContextWindowExceeded as exc:
                raise self._overflow(exc, system, messages, tools) from exc
            except ProviderError as exc:
                await self._sleep(self._retry_delay(exc, attempt))
                attempt += 1
            else:
                return self._with_notices(self._settled(response, system, messages, tools))
