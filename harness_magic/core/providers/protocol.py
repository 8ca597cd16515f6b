"""What the loop, the tools and the session need of a provider adapter: :class:`ModelAdapter` and its drivers.

The seam between the provider plane and the agent. The loop renders nothing
itself: it hands the system prompt, the history and the visible tools to the
adapter and gets a :class:`~harness_magic.core.providers.response.ProviderResponse`
back. Every member is part of the contract, the optional capability included:
an adapter that knows no input window declares ``max_input_tokens`` None (the
loop then never compacts) and keeps the estimate methods. Callers read the
declared members; they never probe for them. :data:`ADAPTER_MEMBERS` names every
member and ``tests/test_typed_seams.py`` pins each implementation to all of them;
``tests/test_types.py`` type-checks this module and its implementations strictly.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from harness_magic.core.providers.response import ProviderResponse
from harness_magic.core.providers.transport import TextCallback
from harness_magic.core.transcript.messages import Message

__all__ = ["ADAPTER_MEMBERS", "AsyncModelAdapter", "ModelAdapter", "SyncModelAdapter"]


@runtime_checkable
class ModelAdapter(Protocol):
    """What every adapter offers, whichever way its ``complete`` is driven."""

    model: str
    """The model name the adapter sends requests to (e.g. ``ollama/qwen2.5``)."""

    @property
    def max_input_tokens(self) -> int | None:
        """The model's input-token limit; None: unknown, so the loop never compacts nor refuses a prompt."""
        ...

    @property
    def window_learned(self) -> bool:
        """Whether ``max_input_tokens`` is a window a context overflow showed (an estimate of the server's count,
        not a stated limit): a request still over it after compaction is sent and the server decides."""
        ...

    def fresh(self) -> ModelAdapter:
        """A new adapter with the same settings (for a subagent): nothing of this one's state is shared."""
        ...

    def estimate_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        """Estimated input tokens of the request for ``messages``."""
        ...

    def estimate_messages_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        """Like :meth:`estimate_tokens` for any message list (the compaction's measure)."""
        ...

    def estimate_text_tokens(self, text: str) -> int:
        """Estimated tokens of one user prompt."""
        ...


@runtime_checkable
class SyncModelAdapter(ModelAdapter, Protocol):
    """An adapter the synchronous :class:`~harness_magic.core.agent.loop.Harness` drives."""

    def fresh(self) -> SyncModelAdapter:
        """A new sync adapter with the same settings (see :meth:`ModelAdapter.fresh`)."""
        ...

    def complete(self, system: str, messages: Sequence[Message], tools: Sequence[Any],
                 on_text: TextCallback | None = None) -> ProviderResponse:
        """One provider call; streamed text goes to ``on_text``. Failures raise ``ProviderError``."""
        ...


@runtime_checkable
class AsyncModelAdapter(ModelAdapter, Protocol):
    """An adapter the :class:`~harness_magic.core.agent.loop.AsyncHarness` awaits."""

    def fresh(self) -> AsyncModelAdapter:
        """A new async adapter with the same settings (see :meth:`ModelAdapter.fresh`)."""
        ...

    async def complete(self, system: str, messages: Sequence[Message], tools: Sequence[Any],
                       on_text: TextCallback | None = None) -> ProviderResponse:
        """One provider call, awaited; same contract as :meth:`SyncModelAdapter.complete`."""
        ...


ADAPTER_MEMBERS = ("model", "max_input_tokens", "window_learned", "fresh", "estimate_tokens", "estimate_messages_tokens",
                   "estimate_text_tokens", "complete")
"""Every member of :class:`SyncModelAdapter` / :class:`AsyncModelAdapter` (``tests/test_typed_seams.py``)."""
