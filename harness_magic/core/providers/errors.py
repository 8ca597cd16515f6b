"""What a provider call raises when it fails for good.

::

    Exception
    └── ProviderError            the call failed (after retries, or not retryable)
        └── ModelRouteError      (also a ValueError) litellm cannot route the model id; nothing was sent

Every transport (litellm's and the offline models) raises these and nothing
else for provider trouble, so the adapter's retry loop and the agent loop see
one error type. Messages are scrubbed of registered secrets on construction.
"""

from __future__ import annotations

from harness_magic.core.transcript.scrub import scrub

__all__ = ["ProviderError", "ModelRouteError"]


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
