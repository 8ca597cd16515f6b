"""AgentSession: one conversation, one cache, one interpreter — what a notebook holds.

The notebook layer is glue over this class: it maps its traitlets onto an
:class:`AgentConfig`, calls :meth:`AgentSession.ask`, and renders the events.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from harness_magic.core.cache import SessionCache
from harness_magic.core.events import EventHandler
from harness_magic.core.interpreter import InProcessInterpreter, make_interpreter_tools
from harness_magic.core.loop import Harness, RunResult
from harness_magic.core.prompts import DEFAULT_SYSTEM_PROMPT
from harness_magic.core.provider import ProviderAdapter
from harness_magic.core.tools import ToolSpec

__all__ = ["AgentConfig", "AgentSession", "SANDBOX_MODES", "DEFAULT_MODEL"]

DEFAULT_MODEL = "openai/gpt-4o-mini"
"""A cheap, capable default; needs OPENAI_API_KEY. Offline ids need no key."""
SANDBOX_MODES = ("worker", "inprocess")
"""``worker``: OS-confined subprocess (default). ``inprocess``: no security boundary."""


@dataclass
class AgentConfig:
    """Plain settings of a session (the notebook maps traitlets onto this)."""

    model: str = DEFAULT_MODEL
    api_base: str | None = None
    max_turns: int = 25
    sandbox: str = "worker"
    run_dir: str = "./runs"
    hot_count: int = 10
    memory_budget_bytes: int | None = None
    spill_dir: str | None = None
    stream: bool = True
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    allow_unconfined: bool = False
    """Let the worker run where the OS offers no confinement (with a warning)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox {self.sandbox!r} is not valid; allowed: {', '.join(SANDBOX_MODES)}")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {self.max_turns!r}")


def make_backend(config: AgentConfig) -> Any:
    """The interpreter backend a config asks for."""
    if config.sandbox == "inprocess":
        return InProcessInterpreter()
    from harness_magic.core.sandbox import SandboxedInterpreter

    return SandboxedInterpreter(allow_unconfined=config.allow_unconfined)


def make_cache(config: AgentConfig) -> SessionCache:
    options: dict[str, Any] = {"hot_count": config.hot_count, "spill_dir": config.spill_dir}
    if config.memory_budget_bytes is not None:
        options["memory_budget_bytes"] = config.memory_budget_bytes
    try:
        return SessionCache(**options)
    except TypeError:  # a cache without spill options
        return SessionCache()


class AgentSession:
    """A conversation with the agent over a session cache."""

    def __init__(
        self,
        config: AgentConfig | None = None,
        *,
        adapter: Any | None = None,
        extra_tools: list[ToolSpec] | None = None,
        backend: Any | None = None,
        cache: SessionCache | None = None,
        connectors: Any | None = None,
        subagents: bool | dict[str, Any] = False,
    ) -> None:
        self.config = config or AgentConfig()
        self.session_id = uuid.uuid4().hex[:12]
        self.cache = cache if cache is not None else make_cache(self.config)
        self._backend = backend
        self._adapters: dict[str, Any] = {}
        if adapter is not None:
            self._adapters[adapter.model] = adapter
        self.runs: list[RunResult] = []
        self._extra_tools = list(extra_tools or [])
        self._handlers: list[EventHandler] = []
        self.harness = self._build_harness(adapter or self.adapter_for(self.config.model))
        self.connectors: Any | None = None
        """The :class:`~harness_magic.core.connectors.InstalledConnectors` of this session, or None."""
        if connectors is not None:
            self.connectors = connectors.install(self.harness)
        if subagents:
            self.enable_subagents(**(subagents if isinstance(subagents, dict) else {}))

    # -- connectors and subagents -------------------------------------------------------------

    def add_connector(self, connector: Any, *, approval: Any | None = None) -> Any:
        """Register a connector (hidden until the model loads it); creates the registry on first use.

        ``approval`` (an ApprovalPolicy) replaces the registry's policy when given.
        """
        from harness_magic.core.connectors import ConnectorRegistry

        if self.connectors is None:
            self.connectors = ConnectorRegistry(approval=approval).install(self.harness)
        elif approval is not None:
            self.connectors.registry.approval = approval
        return self.connectors.registry.register(connector)

    def enable_subagents(self, **options: Any) -> ToolSpec:
        """Add the ``subagent`` tool; the subagent's interpreter uses this session's sandbox backend."""
        from harness_magic.core.subagent import enable_subagents

        session = self

        class _SessionBackend:
            name = "session"

            def execute(self, code: str, inputs: dict[str, Any], taken_names: Any) -> Any:
                return session.backend.execute(code, inputs, taken_names)

            def close(self) -> None:
                pass

        options.setdefault("backend", _SessionBackend())
        return enable_subagents(self.harness, **options)

    # -- construction ---------------------------------------------------------------------

    @property
    def backend(self) -> Any:
        """The interpreter backend, started on first use."""
        if self._backend is None:
            self._backend = make_backend(self.config)
        return self._backend

    def adapter_for(self, model: str) -> Any:
        """One adapter per model id, kept so offline scripts advance across cells."""
        if model not in self._adapters:
            self._adapters[model] = ProviderAdapter(
                model, api_base=self.config.api_base, stream=self.config.stream, extra=self.config.extra
            )
        return self._adapters[model]

    def _build_harness(self, adapter: Any) -> Harness:
        session = self

        class _LazyBackend:
            name = "lazy"

            def execute(self, code: str, inputs: dict[str, Any], taken_names: Any) -> Any:
                return session.backend.execute(code, inputs, taken_names)

            def close(self) -> None:
                pass

        holder: dict[str, Harness] = {}
        tools = make_interpreter_tools(
            self.cache, _LazyBackend(), current_turn=lambda: holder["h"].current_turn if "h" in holder else None
        )
        harness = Harness(
            adapter,
            self.config.system_prompt,
            tools + self._extra_tools,
            max_turns=self.config.max_turns,
            run_dir=self.config.run_dir,
            cache=self.cache,
        )
        holder["h"] = harness
        for handler in self._handlers:
            harness.subscribe(handler)
        return harness

    # -- use --------------------------------------------------------------------------------

    def subscribe(self, handler: EventHandler) -> Callable[[], None]:
        self._handlers.append(handler)
        unsubscribe = self.harness.subscribe(handler)

        def remove() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)
            unsubscribe()

        return remove

    def ask(self, prompt: str, *, model: str | None = None, max_turns: int | None = None) -> RunResult:
        """Continue the conversation with ``prompt``; returns the run's result."""
        harness = self.harness
        previous_adapter, previous_turns = harness._adapter, harness._max_turns
        if model is not None:
            harness._adapter = self.adapter_for(model)
        if max_turns is not None:
            if not isinstance(max_turns, int) or max_turns < 1:
                raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
            harness._max_turns = max_turns
        try:
            result = harness.ask_result(prompt, session_id=self.session_id)
        finally:
            harness._adapter, harness._max_turns = previous_adapter, previous_turns
        self.runs.append(result)
        return result

    def new_conversation(self) -> None:
        """Forget the conversation; keep the cache."""
        self.harness.reset_history()

    def reset(self) -> None:
        """Forget the conversation and clear the cache."""
        self.harness.reset_history()
        self.cache.clear()

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
        self.cache.close()
