"""What a provider call raises when it fails for good.

::

    Exception
    └── ProviderError            the call failed (after retries, or not retryable)
        ├── ModelRouteError      (also a ValueError) litellm cannot route the model id; nothing was sent
        ├── ProviderUnreachable  no connection to the server (refused, unresolvable, timed out); no HTTP status
        ├── ContextWindowExceeded the request did not fit the model's context window (the server said so, or
        │                        answered nothing to a prompt near it); ``prompt_tokens``, ``window``
        └── ProviderHTTPError    the server answered with an HTTP error status (``status_code`` is what it sent)
            ├── ProviderAuthError    401/403: the server refused the credentials
            └── ModelNotServed       404 / model not found; ``served`` lists what ``GET {api_base}/models`` offered

Every transport (litellm's and the offline models) raises these and nothing
else for provider trouble, so the adapter's retry loop and the agent loop see
one error type. Messages are scrubbed of registered secrets on construction.
"""

from __future__ import annotations

from harness_magic.core.transcript.scrub import scrub

__all__ = ["ProviderError", "ModelRouteError", "ProviderUnreachable", "ProviderHTTPError", "ProviderAuthError",
           "ModelNotServed", "ContextWindowExceeded"]


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


class ProviderUnreachable(ProviderError):
    """No HTTP answer came from the server (``url``): no connection, or it dropped; no status exists."""

    def __init__(self, message: str, *, url: str, retryable: bool = False, request_sent: bool = False) -> None:
        super().__init__(message, retryable=retryable, request_sent=request_sent)
        self.url = url


class ProviderHTTPError(ProviderError):
    """The server at ``url`` answered with HTTP ``status_code`` (the status it really sent)."""

    def __init__(self, message: str, *, status_code: int, url: str, retryable: bool = False) -> None:
        super().__init__(message, status_code=status_code, retryable=retryable)
        self.url = url


class ProviderAuthError(ProviderHTTPError):
    """The server refused the credentials (HTTP 401 or 403); never retried."""


class ModelNotServed(ProviderHTTPError):
    """The server does not serve the requested model; ``served`` is its model list (None when unknown)."""

    def __init__(self, message: str, *, status_code: int, url: str, model: str,
                 served: list[str] | None = None) -> None:
        super().__init__(message, status_code=status_code, url=url)
        self.model = model
        self.served = served


class ContextWindowExceeded(ProviderError):
    """The request did not fit the model's context window; never retried (the same request fails the same way).

    ``prompt_tokens`` and ``window`` are the server's numbers when it gave them
    (else None: the adapter fills in its estimate); ``server_said`` is its error
    line (None for an empty answer); ``status_code`` the HTTP status it sent, if any.
    """

    def __init__(self, message: str, *, url: str, prompt_tokens: int | None = None, window: int | None = None,
                 server_said: str | None = None, status_code: int | None = None) -> None:
        super().__init__(message, status_code=status_code)
        self.url = url
        self.prompt_tokens = prompt_tokens
        self.window = window
        self.server_said = server_said
