"""The transport seam: send one rendered payload, return an OpenAI-style response dict.

:class:`Transport` is the protocol; :class:`LiteLLMTransport` is the real one
(litellm, imported lazily by :func:`import_litellm` so that offline use never
loads it); the offline models in :mod:`harness_magic.core.providers.offline`
are others. Contract of :class:`LiteLLMTransport`:

- streamed text goes to ``on_text`` as it arrives; tool calls and usage are
  reassembled from the chunks, and a stream is closed even when ``on_text``
  raises (an interrupt);
- litellm's own retries are off (the adapter retries); every failure is
  mapped to :class:`~harness_magic.core.providers.errors.ProviderError`,
  retryable for throttling, transient server errors and refused connections,
  with ``request_sent=False`` when nothing reached a provider (no route, no
  key, no connection);
- API keys are registered with the scrubber and never appear in ``repr``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Protocol

from harness_magic.core.providers.errors import ModelRouteError, ProviderError
from harness_magic.core.providers.offline import OFFLINE_PREFIXES, is_offline_model
from harness_magic.core.providers.payload import thaw
from harness_magic.core.transcript.scrub import register_secret

__all__ = [
    "Transport",
    "TextCallback",
    "LiteLLMTransport",
    "check_model_route",
    "import_litellm",
    "DEFAULT_TIMEOUT_S",
    "RETRYABLE_STATUS",
]

DEFAULT_TIMEOUT_S = 120.0
"""Per-request timeout; long enough for slow models, short enough to notice a hang."""
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""HTTP statuses worth a retry: throttling and transient server trouble."""

TextCallback = Callable[[str], None]
"""Receives each streamed piece of answer text."""


class Transport(Protocol):
    """Sends one rendered payload; returns an OpenAI-style response dict."""

    def complete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]: ...

    async def acomplete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]: ...


def import_litellm() -> Any:
    """litellm, imported on first use and offline-safe: local cost map, no debug chatter."""
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
    if is_offline_model(model):
        return model.partition("/")[0]
    litellm = import_litellm()
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
            _, provider, _, base = import_litellm().get_llm_provider(model)
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
        litellm = import_litellm()
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
        litellm = import_litellm()
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
