"""The provider seam's public face: re-exports only, so existing imports keep working.

``from harness_magic.core.providers.provider import X`` (and the old path
``harness_magic.core.provider``) still gives every public name this module
had before the seam was split into its parts:

- :mod:`~harness_magic.core.providers.payload`: harness state -> OpenAI-style
  payload, prompt-cache markers, read-only shared renderings;
- :mod:`~harness_magic.core.providers.transport`: the transport protocol and
  the litellm transport (streaming assembly, error mapping, model routes);
- :mod:`~harness_magic.core.providers.response`: response dict -> harness types;
- :mod:`~harness_magic.core.providers.adapter`: the adapters (render, call,
  retry with backoff, normalise; token estimates, cache and limit lookups);
- :mod:`~harness_magic.core.providers.errors`: :class:`ProviderError` and
  :class:`ModelRouteError`.

New code may import from the part that defines a name.
"""

from __future__ import annotations

from harness_magic.core.providers.adapter import (
    DEFAULT_MAX_RETRIES,
    PROMPT_CACHING_MODES,
    AsyncProviderAdapter,
    ProviderAdapter,
    transport_for_model,
)
from harness_magic.core.providers.errors import ModelRouteError, ProviderError
from harness_magic.core.providers.payload import (
    EMPTY_ANSWER_TEXT,
    EMPTY_TOOL_RESULT_TEXT,
    FrozenDict,
    FrozenList,
    render_message,
    render_request,
    thaw,
)
from harness_magic.core.providers.response import (
    INVALID_ARGUMENTS_KEY,
    ProviderResponse,
    normalise_response,
)
from harness_magic.core.providers.transport import LiteLLMTransport, Transport, check_model_route

# Public before the split though never in ``__all__``: still importable from here.
from harness_magic.core.providers.adapter import CHARS_PER_TOKEN_ESTIMATE, DEFAULT_BACKOFF_S  # noqa: F401,E402
from harness_magic.core.providers.payload import EMPTY_USER_TEXT  # noqa: F401,E402
from harness_magic.core.providers.response import usage_from_dict  # noqa: F401,E402
from harness_magic.core.providers.transport import DEFAULT_TIMEOUT_S, RETRYABLE_STATUS, TextCallback  # noqa: F401,E402

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
