"""The transport seam: send one rendered payload, return an OpenAI-style response dict.

:class:`Transport` is the protocol; :class:`LiteLLMTransport` is the real one
(litellm, imported lazily by :func:`import_litellm` so that offline use never
loads it); the offline models in :mod:`harness_magic.core.providers.offline`
are others. Contract of :class:`LiteLLMTransport`:

- streamed text goes to ``on_text`` as it arrives; tool calls and usage are
  reassembled from the chunks, and a stream is closed even when ``on_text``
  raises (an interrupt);
- litellm's own retries are off (the adapter retries); every failure is
  mapped to one line of :class:`~harness_magic.core.providers.errors.ProviderError`:
  :class:`ProviderUnreachable` (URL and socket error; a refused port or an
  unknown host is never retried), :class:`ProviderHTTPError` with the status
  the server really sent and the first line of its body (retryable for
  throttling and transient server trouble), :class:`ProviderAuthError`
  (401/403), :class:`ModelNotServed` (404 / model not found; names what
  ``GET {api_base}/models`` offers, asked once within :data:`MODELS_LIST_TIMEOUT_S`);
  a status only litellm made up is never reported as HTTP. ``request_sent``
  is False when nothing reached a provider (no route, no key, no connection);
  a request over the model's context window is :class:`ContextWindowExceeded`
  (the server's numbers when it gave them, see :mod:`.overflow`); a 404 at the
  chat endpoint of an ``api_base`` that does not end in ``/v1`` says so and
  suggests the ``/v1`` form; the server's model list (``{api_base}/models``,
  else ``{api_base}/v1/models``) is named whenever it gives one;
- a stream from an ``api_base`` that ended with nothing (no text, no tool call,
  no finish reason from the server) is asked once more without streaming
  (llama-cpp-python reports an overflow only then);
- with ``api_base`` set and the provider's key neither given nor in the
  environment, :data:`PLACEHOLDER_API_KEY` is sent (local servers ignore it)
  and :attr:`LiteLLMTransport.notice` says so once; a real key always wins;
- API keys are registered with the scrubber and never appear in ``repr``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, Callable, Protocol

from harness_magic.core.providers.errors import (
    ModelNotServed,
    ModelRouteError,
    ProviderAuthError,
    ProviderError,
    ProviderHTTPError,
    ProviderUnreachable,
)
from harness_magic.core.providers.key_record import KeyRefusal, environment_reads, record_refusal
from harness_magic.core.providers.litellm_exit import guard_litellm_finalizers
from harness_magic.core.providers.offline import OFFLINE_PREFIXES, is_offline_model
from harness_magic.core.providers.overflow import server_overflow
from harness_magic.core.providers.payload import thaw
from harness_magic.core.transcript.scrub import register_secret

__all__ = [
    "Transport",
    "TextCallback",
    "LiteLLMTransport",
    "LiteLLMLookups",
    "ModelLookups",
    "TransportOptions",
    "check_model_route",
    "import_litellm",
    "no_key_error",
    "DEFAULT_TIMEOUT_S",
    "RETRYABLE_STATUS",
    "PLACEHOLDER_API_KEY",
    "MODELS_LIST_TIMEOUT_S",
    "served_models",
    "missing_v1",
]

DEFAULT_TIMEOUT_S = 120.0
"""Per-request timeout; long enough for slow models, short enough to notice a hang."""
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""HTTP statuses worth a retry: throttling and transient server trouble."""
LITELLM_CALL_OPTIONS = {"_skip_mcp_handler": True}
"""Passed on every litellm call. Our tools are plain function tools, never litellm's MCP gateway, and without
this litellm imports its whole MCP server stack (starlette, uvicorn, the MCP SDK: about 80 MB in every kernel)
on the first call that has tools, just to find that out. litellm strips it before the request is sent."""

PLACEHOLDER_API_KEY = "no-key-needed-by-local-servers"
"""Sent to an ``api_base`` when the provider's key is missing: not a secret, local servers ignore it."""
MODELS_LIST_TIMEOUT_S = 3.0
"""Bound on asking ``GET {api_base}/models`` after a model-not-found answer (the error waits for it)."""
MODELS_LIST_MAX_BYTES = 256 * 1024
"""At most this much of the model list is read: a list of ids, not a download."""
MODELS_LISTED = 20
"""Model ids named in a model-not-served error; more are counted, not listed."""
ERROR_LINE_MAX_CHARS = 300
"""The server's error text is cut to this many characters: one line, not a page."""

TextCallback = Callable[[str], None]
"""Receives each streamed piece of answer text."""


class Transport(Protocol):
    """Sends one rendered payload; returns an OpenAI-style response dict."""

    def complete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]: ...

    async def acomplete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]: ...


def no_key_error(model: str, missing: list[str] | tuple[str, ...]) -> ProviderError:
    """The error for a model whose provider needs the keys ``missing`` (litellm's names) and got none: nothing
    was sent. One text whether litellm said so here, in the provider host, or the missing-key record did."""
    return ProviderError(
        f"No API key for model {model!r}: set {', '.join(missing)} in the environment "
        "(never in the notebook), point api_base at a local server, or use the offline model "
        "(model 'offline/quickstart', or 'scripted/<file.json>' / 'replay/<run.jsonl>').",
        request_sent=False,
    )


def import_litellm() -> Any:
    """litellm, imported on first use and offline-safe: local cost map, no debug chatter, and its HTTP
    handlers' finalizers skipped while the interpreter finalizes (:mod:`.litellm_exit`: exits never hang)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    guard_litellm_finalizers()
    return litellm


_CONNECTION_ERRORS = frozenset({"APIConnectionError", "ConnectError", "ConnectionError", "ConnectTimeout"})
"""litellm/httpx exception names that mean the request never reached a server."""
_TRANSIENT_NAMES = frozenset({"Timeout", "APITimeoutError", "RateLimitError", "InternalServerError",
                              "ServiceUnavailableError", "BadGatewayError", "APIConnectionError"})
"""litellm exception names worth a retry when no HTTP status came with them (a timeout, a broken stream)."""
_FINAL_SOCKET_ERRORS = (ConnectionRefusedError,)
"""Connection failures a retry cannot fix: nothing listens on the port (unknown hosts are matched by name)."""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its cause/context chain, outermost first (bounded; cycles cut)."""
    chain = [exc]
    while len(chain) < 20:
        inner = chain[-1].__cause__ or chain[-1].__context__
        if inner is None or any(inner is seen for seen in chain):
            break
        chain.append(inner)
    return chain


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception in ``exc``'s cause/context chain (the socket error behind a wrapper)."""
    return _chain(exc)[-1]


def _is_connection_failure(exc: BaseException) -> bool:
    for item in _chain(exc):
        if type(item).__name__ in _CONNECTION_ERRORS or isinstance(item, ConnectionError) \
                or type(item).__name__ == "gaierror":
            return True
    text = str(exc)
    return "Connection error" in text or "Cannot connect" in text or "ConnectError" in text


def _server_answer(exc: BaseException) -> tuple[int, str] | None:
    """(status, body text) of the HTTP answer behind ``exc``, or None when no server sent one.

    Only exceptions that carry the real response count (httpx's status error,
    the openai client's status errors); litellm's own wrappers invent statuses
    (a refused connection or a missing key becomes "500") and are ignored.
    """
    for item in reversed(_chain(exc)):  # innermost first: closest to the socket
        response = getattr(item, "response", None)
        status = getattr(response, "status_code", None)
        module = type(item).__module__.partition(".")[0]
        real = module in ("httpx", "openai") or "HTTPStatusError" in type(item).__name__
        if real and isinstance(status, int) and getattr(response, "request", None) is not None:
            return status, _body_text(item, response)
    return None


def _body_text(item: BaseException, response: Any) -> str:
    body = getattr(item, "body", None)  # the openai client keeps the parsed body
    if body is not None and not isinstance(body, (str, bytes)):
        return json.dumps(body)
    try:
        return str(response.text)
    except Exception:  # a streamed body that was never read: the exception's own text is all there is
        return str(getattr(item, "message", "") or item)


def _first_line(text: str) -> str:
    """The message of a JSON error body, else the first non-empty line of ``text``; one line, bounded."""
    text = text.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error", data)
        message = inner.get("message") if isinstance(inner, dict) else inner
        message = message if message is not None else data.get("detail", data.get("message"))
        if message is not None:
            text = message if isinstance(message, str) else json.dumps(message)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:ERROR_LINE_MAX_CHARS] or "(empty body)"


def _looks_like_model_not_found(status: int, body: str) -> bool:
    lowered = body.lower()
    if "model_not_found" in lowered:
        return True
    mentions_model = "model" in lowered and ("not found" in lowered or "does not exist" in lowered
                                             or "not served" in lowered or "unknown model" in lowered)
    return status == 404 or (status == 400 and mentions_model)


def missing_v1(api_base: str | None) -> bool:
    """Whether ``api_base`` lacks the ``/v1`` that OpenAI-compatible servers serve their API under."""
    if not api_base:
        return False
    return not api_base.rstrip("/").endswith("/v1")


def served_models(api_base: str, api_key: str | None = None, *,
                  timeout_s: float = MODELS_LIST_TIMEOUT_S) -> list[str] | None:
    """Model ids the server lists (OpenAI or Ollama shape), None when it gives no list.

    Asks ``GET {api_base}/models``, then ``GET {api_base}/v1/models`` when ``api_base`` does
    not end in ``/v1`` and the first gave nothing; each within ``timeout_s``, at most
    :data:`MODELS_LIST_MAX_BYTES` read; never raises.
    """
    served = _models_at(api_base.rstrip("/") + "/models", api_key, timeout_s)
    if served is None and missing_v1(api_base):
        served = _models_at(api_base.rstrip("/") + "/v1/models", api_key, timeout_s)
    return served


def _models_at(url: str, api_key: str | None, timeout_s: float) -> list[str] | None:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (the user's api_base)
            raw = response.read(MODELS_LIST_MAX_BYTES + 1)
        if len(raw) > MODELS_LIST_MAX_BYTES:
            return None
        data = json.loads(raw)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    items = data.get("data", data.get("models")) if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    ids = [item.get("id") or item.get("name") or item.get("model") if isinstance(item, dict) else item
           for item in items]
    return [str(i) for i in ids if isinstance(i, str) and i]


def _map_exception(exc: Exception, url: str | None = None, *, model: str | None = None,
                   api_key: str | None = None, key_hint: str = "", models_at: str | None = None) -> ProviderError:
    """One line of :class:`ProviderError` (or a subclass) for a failed litellm call.

    ``models_at``: the api_base whose ``/models`` is asked when the model is not served (None: not asked).
    """
    where = url or "the provider"
    answer = _server_answer(exc)
    if answer is None and _is_connection_failure(exc):
        root = _root_cause(exc)
        detail = str(root).strip().splitlines()[0] if str(root).strip() else type(root).__name__
        final = isinstance(root, _FINAL_SOCKET_ERRORS) or type(root).__name__ == "gaierror" \
            or "refused" in detail.lower() or "name or service not known" in detail.lower()
        connected = not final and "connect" not in type(root).__name__.lower()  # e.g. dropped mid-answer
        what = f"connection to {where} failed" if connected else f"cannot connect to {where}"
        return ProviderUnreachable(f"{what}: {type(root).__name__}: {detail[:ERROR_LINE_MAX_CHARS]}", url=where,
                                   retryable=not final, request_sent=connected)
    name = type(exc).__name__
    if answer is None:  # no HTTP answer: a timeout, a broken stream, or the client refused before sending
        root = _root_cause(exc)
        client_side = type(root).__name__ == "OpenAIError" and type(root).__module__.startswith("openai")
        detail = _first_line(str(exc)) if str(exc).strip() else name
        for prefix in ("litellm.", f"{name}: ", "OpenAIException - "):  # litellm repeats the class name
            detail = detail.removeprefix(prefix).removeprefix(f"{name}: ")
        return ProviderError(f"{name} (no HTTP answer from {where}): {detail}{key_hint if client_side else ''}",
                             retryable=not client_side and name in _TRANSIENT_NAMES, request_sent=not client_side)
    status, body = answer
    line = _first_line(body)
    overflow = server_overflow(body, line, where, status_code=status,
                               said_overflow=any(type(e).__name__ == "ContextWindowExceededError" for e in _chain(exc)))
    if overflow is not None:
        return overflow
    if status in (401, 403):
        return ProviderAuthError(f"authentication refused by {where} (HTTP {status}): {line}{key_hint}",
                                 status_code=status, url=where)
    named_model = "model" in body.lower()
    if status == 404 and models_at and missing_v1(models_at) and not named_model:  # the path, not the model, was not found
        served = served_models(models_at, api_key) if models_at else None
        base = models_at.rstrip("/")
        return ProviderHTTPError(
            f"{where} answered HTTP 404 at the chat endpoint ({base}/chat/completions): {line}. api_base "
            f"{models_at!r} does not end in /v1; try {base + '/v1'!r}{_offer(served)}",
            status_code=status, url=where)
    if model is not None and _looks_like_model_not_found(status, body):
        served = served_models(models_at, api_key) if models_at else None
        return ModelNotServed(f"model {model!r} is not served by {where} (HTTP {status}): {line}{_offer(served)}",
                              status_code=status, url=where, model=model, served=served)
    return ProviderHTTPError(f"{where} answered HTTP {status}: {line}", status_code=status, url=where,
                             retryable=status in RETRYABLE_STATUS)


def _offer(served: list[str] | None) -> str:
    """``; it serves 'a', 'b'`` for a model list (bounded), ``; its model list is empty``, or nothing when unknown."""
    if served:
        shown = ", ".join(repr(m) for m in served[:MODELS_LISTED])
        more = f" and {len(served) - MODELS_LISTED} more" if len(served) > MODELS_LISTED else ""
        return f"; it serves {shown}{more}"
    return "; its model list is empty" if served == [] else ""


def check_model_route(model: str) -> str:
    """The litellm provider for ``model``; :class:`ModelRouteError` (one line) when litellm has none.

    Offline ids (``offline/``, ``scripted/``, ``replay/``) route to the offline models.
    """
    if is_offline_model(model):
        return model.partition("/")[0]
    litellm = import_litellm()
    try:
        return str(litellm.get_llm_provider(model)[1])
    # broad: litellm's lookup raises its own errors (or ValueError) for an unknown model; the one-line route error below says why
    except Exception:
        prefix, sep, _ = model.partition("/")
        what = f"provider prefix {prefix + '/'!r}" if sep else "no provider prefix"
        raise ModelRouteError(
            f"model {model!r}: litellm cannot route it ({what}). Use '<provider>/<model>', e.g. "
            f"'openai/gpt-4o-mini' or 'anthropic/claude-sonnet-4-20250514', or one of "
            f"{', '.join(p + '...' for p in OFFLINE_PREFIXES)}; list providers with "
            "`litellm.provider_list` and a provider's models with `litellm.models_by_provider['openai']`."
        ) from None


class ModelLookups(Protocol):
    """What the adapter asks about a model besides completions: litellm's tables and tokenizer.

    Each method raises when litellm does not know (the adapter then falls back: no cache markers, no known
    limit, the characters / 4 estimate); :meth:`route` raises :class:`ModelRouteError`.
    """

    def route(self, model: str) -> str: ...

    def supports_caching(self, model: str) -> bool: ...

    def model_info(self, model: str) -> dict[str, Any]: ...

    def token_counts(self, model: str, batches: list[list[dict[str, Any]]]) -> list[int]: ...


class LiteLLMLookups:
    """:class:`ModelLookups` answered by litellm in this process."""

    def route(self, model: str) -> str:
        """The litellm provider for ``model`` (:func:`check_model_route`)."""
        return check_model_route(model)

    def supports_caching(self, model: str) -> bool:
        """Whether litellm's model table says ``model`` caches prompts."""
        import_litellm()  # first: it sets the offline cost map before litellm is imported
        from litellm.utils import supports_prompt_caching

        return bool(supports_prompt_caching(model=model))

    def model_info(self, model: str) -> dict[str, Any]:
        """litellm's model information for ``model`` (limits, prices)."""
        return dict(import_litellm().get_model_info(model))

    def token_counts(self, model: str, batches: list[list[dict[str, Any]]]) -> list[int]:
        """litellm's token count of each message list in ``batches``."""
        litellm = import_litellm()
        return [int(litellm.token_counter(model=model, messages=thaw(items))) for items in batches]


class TransportOptions:
    """What a litellm call is sent with (api_base, key, streaming, timeout, extra keyword arguments), and the
    placeholder-key notice; shared by :class:`LiteLLMTransport` and the provider host's kernel side."""

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
        self.placeholder_for: str | None = None
        """The environment variable the placeholder key stands in for, once one was sent (else None)."""
        self.notice: str | None = None
        """One line for the user when the placeholder key was first sent; the adapter hands it out once."""

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(api_base={self.api_base!r}, stream={self.stream})"


class LiteLLMTransport(TransportOptions, LiteLLMLookups):
    """Calls litellm in this process; streams text through ``on_text`` and reassembles tool calls.

    Used inside the provider host (:mod:`.host`), and in the kernel itself when ``provider_host`` is off.
    ``record_refusals`` (the host's): a refusal for want of keys is written to the missing-key record
    (:mod:`.key_record`), so a later kernel gives it without starting a host.
    """

    def __init__(self, *, record_refusals: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.record_refusals = record_refusals

    def _url(self, model: str) -> str:
        """Where requests for ``model`` go: the configured api_base, else litellm's default for the provider."""
        if self.api_base:
            return self.api_base
        try:
            _, provider, _, base = import_litellm().get_llm_provider(model)
            return base or f"the {provider} API"
        # broad: only naming the server for a message; litellm raises various errors for models it cannot route
        except Exception:
            return "the provider"

    def _missing_key(self, litellm: Any, model: str) -> list[str]:
        """The key variables ``model``'s provider needs that neither the caller nor the environment gives."""
        if self._api_key is not None or self.extra.get("api_key") is not None:
            return []
        try:
            missing = litellm.validate_environment(model=model).get("missing_keys") or []
        except Exception:  # litellm cannot tell: assume the key is not needed
            return []
        return [name for name in missing if "KEY" in name or "TOKEN" in name]

    def _kwargs(self, litellm: Any, payload: dict[str, Any]) -> dict[str, Any]:
        route = check_model_route(payload["model"])
        placeholder = False
        if self.api_base is not None:
            missing = self._missing_key(litellm, payload["model"])
            if missing:  # a local server: it ignores the key, but the client refuses to send none
                placeholder = True
                if self.placeholder_for is None:
                    self.placeholder_for = missing[0]
                    self.notice = (f"no {missing[0]} in the environment: sending a placeholder key to "
                                   f"{self.api_base} (local servers ignore it; set {missing[0]} if this "
                                   "server needs a real key)")
        elif self._api_key is None:
            model = payload["model"]
            if not self.record_refusals or self.extra:
                missing = litellm.validate_environment(model=model).get("missing_keys") or []
            else:
                with environment_reads() as reads:
                    missing = litellm.validate_environment(model=model).get("missing_keys") or []
                if missing:
                    record_refusal(KeyRefusal(model, route, tuple(missing), {}), reads)
            if missing:
                raise no_key_error(model, missing)
        kwargs = thaw(payload)  # plain containers: some routes mutate messages in place
        kwargs.update(self.extra)
        kwargs.update(timeout=self.timeout_s, num_retries=0, max_retries=0, **LITELLM_CALL_OPTIONS)
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        elif placeholder:
            kwargs["api_key"] = PLACEHOLDER_API_KEY
        if self.stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        return kwargs

    def _error(self, exc: Exception, kwargs: dict[str, Any]) -> ProviderError:
        """The one-line error for a failed call with ``kwargs`` (names the URL, the model the server was asked for)."""
        model = kwargs["model"]
        try:
            served_name = str(import_litellm().get_llm_provider(model, api_base=self.api_base)[0])
        # broad: only naming the model for a message; litellm raises various errors for models it cannot route
        except Exception:
            served_name = model
        hint = ""
        if kwargs.get("api_key") == PLACEHOLDER_API_KEY:
            hint = (f" (no {self.placeholder_for} in the environment, so a placeholder key was sent: set "
                    f"{self.placeholder_for} to this server's key)")
        return _map_exception(exc, self._url(model), model=served_name, api_key=kwargs.get("api_key"),
                              key_hint=hint, models_at=self.api_base)

    def _reset_while_streaming(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a streamed request to ``api_base`` whose connection was reset before any answer.

        llama-cpp-python's server sometimes resets the connection of a streamed request over its context window
        (an empty 200 other times, see :meth:`_ask_unstreamed`) and says why only when not streaming: such a
        request is asked once more without streaming. Nothing was streamed yet, so nothing is said twice.
        """
        if not (self.stream and self.api_base):
            return False
        return any(isinstance(item, ConnectionResetError) or "Connection reset by peer" in str(item)
                   for item in _chain(exc))

    def _ask_unstreamed(self, stream: Any, chunks: list[Any]) -> bool:
        """Whether a stream from a server at ``api_base`` ended carrying nothing: no text, no tool call, and no
        finish reason from the server (litellm makes one up; a model that chose to say nothing sends its own).

        llama-cpp-python answers a streamed request over its context window with an empty
        200 body and says why only when not streaming: such a request is asked once more
        without streaming, so its error (or its answer) is what the caller gets.
        """
        if not self.api_base or getattr(stream, "received_finish_reason", None) is not None:
            return False
        for chunk in chunks:
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is not None and (delta.content or getattr(delta, "tool_calls", None)):
                return False
        return True

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
            try:
                response = litellm.completion(**kwargs)
                streamed = self.stream
            # broad: only a reset of a streamed request is asked again here; anything else is mapped below
            except Exception as exc:
                if not self._reset_while_streaming(exc):
                    raise
                response, streamed = litellm.completion(**_unstreamed(kwargs)), False
            if streamed:
                chunks = []
                try:
                    for chunk in response:
                        chunks.append(chunk)
                        delta = chunk.choices[0].delta.content if chunk.choices else None
                        if delta and on_text is not None:
                            on_text(delta)
                finally:  # also when on_text raises (an interrupt): never leave the stream to the GC
                    _close_stream(response)
                if self._ask_unstreamed(response, chunks):
                    response = litellm.completion(**_unstreamed(kwargs))
                else:
                    response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
        except ProviderError:
            raise
        # broad: litellm and httpx raise many unrelated types; each is mapped to one ProviderError
        except Exception as exc:
            raise self._error(exc, kwargs) from exc
        return self._finish(litellm, response)

    async def acomplete(self, payload: dict[str, Any], on_text: TextCallback | None) -> dict[str, Any]:
        litellm = import_litellm()
        kwargs = self._kwargs(litellm, payload)
        try:
            try:
                response = await litellm.acompletion(**kwargs)
                streamed = self.stream
            # broad: only a reset of a streamed request is asked again here; anything else is mapped below
            except Exception as exc:
                if not self._reset_while_streaming(exc):
                    raise
                response, streamed = await litellm.acompletion(**_unstreamed(kwargs)), False
            if streamed:
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
                        # broad: closing a stream already being abandoned; its failure changes nothing
                        except Exception:
                            pass
                if self._ask_unstreamed(response, chunks):
                    response = await litellm.acompletion(**_unstreamed(kwargs))
                else:
                    response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
        except ProviderError:
            raise
        # broad: litellm and httpx raise many unrelated types; each is mapped to one ProviderError
        except Exception as exc:
            raise self._error(exc, kwargs) from exc
        return self._finish(litellm, response)


def _unstreamed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The same request without streaming."""
    return {key: value for key, value in kwargs.items() if key not in ("stream", "stream_options")}


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
