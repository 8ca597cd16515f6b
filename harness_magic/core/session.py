"""AgentSession: one conversation, one cache, one interpreter — what a notebook holds.

The notebook layer is glue over this class: it maps its traitlets onto an
:class:`AgentConfig`, calls :meth:`AgentSession.ask`, and renders the events.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from typing import Any, Callable, Literal, Mapping

from harness_magic.core.control.budgets import Budgets
from harness_magic.core.cache import SessionCache
from harness_magic.core.transcript.events import EventHandler, WorkerReplaced
from harness_magic.core.config import AgentConfig
from harness_magic.core.execution.backend_start import BackendStart, with_data_stack
from harness_magic.core.execution.interpreter import (
    BACKEND_MEMBERS,
    InProcessInterpreter,
    InterpreterBackend,
    make_interpreter_tools,
)
from harness_magic.core.agent.loop import Harness
from harness_magic.core.agent.result import RunResult
from harness_magic.core.providers.adapter import AsyncProviderAdapter, ProviderAdapter
from harness_magic.core.execution.tools import ToolContext, ToolSpec
from harness_magic.core.agent.host import HarnessHost
from harness_magic.core.providers.protocol import SyncModelAdapter

__all__ = ["AgentSession", "SessionBackend"]

SandboxAction = Literal["start", "restart", "fork"]
"""What :class:`~harness_magic.core.transcript.events.SandboxStep` reports the worker doing."""

_ADAPTER_FIELDS = ("api_base", "stream", "extra", "prompt_caching", "context_window", "provider_host",
                   "provider_idle_s")
"""Settings baked into provider adapters: changing one rebuilds the real-provider adapters (offline ones keep
their place in the script)."""
_BACKEND_FIELDS = ("sandbox", "allow_unconfined")
"""Settings of the interpreter backend: changing one restarts the worker (the cache is kept)."""
_HARNESS_FIELDS = ("planner", "reminders", "system_prompt", "max_questions", "question_timeout_s", "skill_dirs",
                   "ask_confidence", "audit_log", "otel")
"""Settings that shape the tool list or prompt: changing one rebuilds the loop around the same history."""


def start_backend(config: AgentConfig) -> InterpreterBackend:
    """:func:`make_backend` with the kernel's data stack imported alongside (both done when it returns)."""
    return with_data_stack(lambda: make_backend(config))


def make_backend(config: AgentConfig) -> InterpreterBackend:
    """The interpreter backend a config asks for."""
    if config.sandbox == "inprocess":
        return InProcessInterpreter()
    from harness_magic.core.execution.sandbox import SandboxedInterpreter

    return SandboxedInterpreter(allow_unconfined=config.allow_unconfined or config.sandbox == "unconfined")


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
        adapter: SyncModelAdapter | None = None,
        extra_tools: list[ToolSpec] | None = None,
        backend: InterpreterBackend | None = None,
        cache: SessionCache | None = None,
        connectors: Any | None = None,
        subagents: bool | dict[str, Any] = False,
    ) -> None:
        self.config = config or AgentConfig()
        self.session_id = uuid.uuid4().hex[:12]
        self.cache = cache if cache is not None else make_cache(self.config)
        if backend is not None:
            missing = [m for m in BACKEND_MEMBERS if not hasattr(backend, m)]
            if missing:
                raise TypeError(f"backend {type(backend).__name__} lacks {', '.join(missing)} of InterpreterBackend "
                                "(a backend without workers or exports declares so and keeps no-op methods, "
                                "as InProcessInterpreter does)")
        self._backend = backend
        self._start: BackendStart | None = None
        """The backend being started in the background (:meth:`prestart`), until a call takes it over."""
        self._fork_pending = False
        """The worker was retired when this run began; its first interpreter call forks the new one."""
        self._adapters: dict[str, SyncModelAdapter] = {}
        if adapter is not None:
            self._adapters[adapter.model] = adapter
        self.runs: list[RunResult] = []
        from harness_magic.core.control.reruns import RunTimeline

        self.timeline = RunTimeline()
        """The runs in the conversation, by run key: asking with a key again replaces its run (:mod:`.control.reruns`)."""
        self._subagent_options: dict[str, Any] | None = None
        self._extra_tools = list(extra_tools or [])
        self._handlers: list[EventHandler] = []
        self._tool_backend = SessionBackend(self)
        """What the tools hold: forwards to :attr:`backend`, whichever it is now."""
        from harness_magic.core.control.memory import SessionMemory

        self.memory = SessionMemory(lambda: self.config.workspace_memory, lambda: self.default_approver)
        """Goals, assumptions and domains carried across runs; approved definitions (:mod:`.control.memory`)."""
        self.answerer: Any | None = None
        """Who answers ``ask_user`` (:data:`~harness_magic.core.control.questions.Answerer`); None: no person,
        every question gets the no-answer text at once. The notebook sets its prompt."""
        from harness_magic.core.control.masking import SessionMasking, declared_classes

        self.masking = SessionMasking(lambda: self.config.masking, lambda: declared_classes(
            self.connectors.registry if self.connectors is not None else None))
        """The one masking step between tool results and the provider (``config.masking``; issue 24)."""
        self.pseudonyms = self.masking.pseudonyms
        """Sensitive columns pseudonymised where values enter the cache, restored on pull (the first layer)."""
        self.cache.set_guard(self.pseudonyms.guard())
        self.harness = self._build_harness(adapter or self.adapter_for(self.config.model))
        self.connectors: Any | None = None
        """The :class:`~harness_magic.core.execution.connectors.InstalledConnectors` of this session, or None."""
        self.default_approver: Callable[[Any], Any] | None = None
        """Approver given to :meth:`add_connector` policies that have none (the notebook sets its prompt)."""
        self.notify: Callable[[str], None] = lambda message: None
        """Told what a configuration call did that the caller may not expect (a connector kept or replaced by
        :meth:`add_connector`); the notebook prints it in the cell."""
        if connectors is not None:
            self.connectors = connectors.install(self.harness)
        if subagents:
            self.enable_subagents(**(subagents if isinstance(subagents, dict) else {}))

    # -- connectors and subagents -------------------------------------------------------------

    def add_connector(self, connector: Any, *, approval: Any | None = None) -> Any:
        """Register a connector (hidden until the model loads it); creates the registry on first use.
        Returns the connector registered under its name now.

        Idempotent, so the cell that calls it can run again: under a name in
        use, the same configuration keeps the registered connector (its state
        too: the one returned) and another replaces it
        (:meth:`~.execution.connectors.ConnectorRegistry.put`); either is told
        to :attr:`notify`. ``approval`` (an ApprovalPolicy) replaces the
        registry's policy when given. A policy without an approver gets
        :attr:`default_approver`, if set.
        """
        from harness_magic.core.execution.connectors import ConnectorRegistry

        if self.connectors is None:
            self.connectors = ConnectorRegistry(approval=approval).install(self.harness)
        elif approval is not None:
            self.connectors.registry.approval = approval
        policy = self.connectors.registry.approval
        if policy.approver is None and self.default_approver is not None:
            policy.approver = self.default_approver
        registration = self.connectors.registry.put(connector)
        if registration.message:
            self.notify(registration.message)
        return registration.connector

    def enable_subagents(self, **options: Any) -> ToolSpec:
        """Add the ``subagent`` tool (again: the same tool, or new options replace it); each subagent run gets its
        own worker (a sibling of this session's), with the in-process backend this session's."""
        from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME, enable_subagents

        existing = next((t for t in self.harness.tools if t.name == SUBAGENT_TOOL_NAME), None)
        if existing is not None:
            if self._subagent_options == options or not options:
                return existing  # already on (the notebook enables subagents by default)
            self.harness.remove_tool(SUBAGENT_TOOL_NAME)
        self._subagent_options = dict(options)
        options.setdefault("backend", self._tool_backend)  # shared where the backend has no workers to give
        if "tools_factory" not in options:
            options.setdefault("backend_factory", self._subagent_backend)
        # a preset (domain) subagent reads this session's connectors, filtered, and skills, as they are then
        options.setdefault("preset_connectors", lambda: self.connectors.registry if self.connectors else None)
        options.setdefault("preset_skills", lambda: self.skills.skill_set)
        options.setdefault("cache_factory", self._subagent_cache)
        return enable_subagents(self.harness, **options)

    def _subagent_cache(self) -> SessionCache:
        """A subagent's fresh cache: its own values, the session's pseudonyms at entry (a preset reads connectors)."""
        cache = SessionCache()
        cache.set_guard(self.pseudonyms.guard())
        return cache

    def disable_subagents(self) -> None:
        """Withdraw the ``subagent`` tool from the next request on (a no-op when it is not offered)."""
        from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME

        if any(t.name == SUBAGENT_TOOL_NAME for t in self.harness.tools):
            self.harness.remove_tool(SUBAGENT_TOOL_NAME)
        self._subagent_options = None

    # -- construction ---------------------------------------------------------------------

    @property
    def backend(self) -> InterpreterBackend:
        """The interpreter backend, started on first use (or taken over from :meth:`prestart`, waiting for it)."""
        if self._backend is None:
            if self._start is not None:
                start = self._start
                try:
                    self._backend = start.result()  # an interrupt here leaves the start under way, still ours
                finally:
                    if start.done:
                        self._start = None  # handed over, or failed: its error is raised this once
            else:
                self._backend = make_backend(self.config)
        return self._backend

    def prestart(self) -> bool:
        """Start the interpreter backend on a background thread now; whether a start began.

        Nothing begins when the backend runs or is starting already, or for the
        in-process backend (nothing to start). The first call that needs the
        backend waits only for what is left of the start (shown as the ``start``
        step only when it waits); a start that failed raises its error there,
        once, as a start at that call would have. Each run begins with this, so
        the sandbox starts while the model prepares its first answer.
        """
        if self._backend is not None or self._start is not None or self.config.sandbox == "inprocess":
            return False
        config = self.config
        self._start = BackendStart(lambda: start_backend(config))
        return True

    @property
    def sandbox_starting(self) -> bool:
        """Whether a background start (:meth:`prestart`) is under way (not finished yet)."""
        return self._start is not None and not self._start.done

    def _cancel_start(self) -> None:
        start, self._start = self._start, None
        if start is not None:
            start.cancel()

    def _started_backend(self, harness: HarnessHost | None) -> Any:
        """:attr:`backend`, its worker running; starting it is a visible step with its time.

        ``start``: the session's first use (launcher, data stack imports and the
        first worker), or what is left of a background start (:meth:`prestart`),
        its time being this call's wait (no step when that start is done);
        ``fork``: the fresh worker of this cell (see :meth:`_fresh_worker`);
        ``restart``: a worker after the previous one was lost. Each emits :class:`~harness_magic.core.transcript.events.SandboxStep` before
        (no time) and after (with its time), for the tool call in progress.
        """
        if harness is None or self.config.sandbox == "inprocess":
            return self.backend
        if self._backend is None and self._start is not None and self._start.done:
            return self.backend  # started in the background before this call needed it: no wait to show
        action: SandboxAction
        start: Callable[[], object]
        if self._backend is None:
            action, start = "start", lambda: self.backend
        else:
            backend = self._backend
            if not backend.has_workers or backend.worker_pid is not None:
                return backend
            action, start = ("fork" if self._fork_pending else "restart"), backend.start_worker
        _sandbox_step(harness, action, None)
        started = time.monotonic()
        try:
            start()
            self._fork_pending = False
        finally:
            _sandbox_step(harness, action, time.monotonic() - started)
        return self._backend

    def _subagent_backend(self) -> Any:
        """A backend of the subagent's own (None: share this session's, which has no workers)."""
        own = self._tool_backend.sibling()
        return None if own is None else SubagentBackend(self, own)

    def _fresh_worker(self) -> None:
        """Each run (an ``%%agent`` cell) starts in a new worker: nothing a previous cell did survives.

        The old worker stops now; the new one is forked at the run's first
        interpreter call, shown as a ``fork`` step (:meth:`_started_backend`).
        """
        if self._backend is not None and self._backend.has_workers:
            self._backend.retire_worker()
            self._fork_pending = True

    def adapter_for(self, model: str) -> SyncModelAdapter:
        """One adapter per model id, kept so offline scripts advance across cells."""
        if model not in self._adapters:
            self._adapters[model] = ProviderAdapter(
                model, api_base=self.config.api_base, stream=self.config.stream, extra=self.config.extra,
                prompt_caching=self.config.prompt_caching, context_window=self.config.context_window,
                provider_host=self.config.provider_host, provider_idle_s=self.config.provider_idle_s,
            )
        return self._adapters[model]

    def _build_harness(self, adapter: SyncModelAdapter) -> Harness:
        session = self
        context = ToolContext()  # the tools report to the harness built next with them
        tools = make_interpreter_tools(
            self.cache, self._tool_backend,
            current_turn=context.current_turn,
            materialize_max_bytes=lambda: session.config.materialize_max_bytes,
            materialize_max_rows=lambda: session.config.materialize_max_rows,
            on_output=context.tool_output,
        )
        harness = Harness(
            adapter,
            self.config.system_prompt,
            tools + self._extra_tools,
            max_turns=self.config.max_turns,
            run_dir=self.config.run_dir,
            cache=self.cache,
        )
        context.bind(harness)
        harness.set_masker(self.masking)
        self._install_control_plane(harness)
        from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME
        from harness_magic.core.execution.connectors.registry import LOAD_TOOL_NAME
        from harness_magic.core.execution.tool_plugins import install_plugin_tools

        install_plugin_tools(harness, reserved=(LOAD_TOOL_NAME, SUBAGENT_TOOL_NAME))  # installed packages' tools
        for handler in self._handlers:
            harness.subscribe(handler)
        return harness

    def _install_control_plane(self, harness: Harness) -> None:
        """Budgets, the plan tool, progress reminders and the (initially empty) verifier."""
        from harness_magic.core.control.planner import Planner
        from harness_magic.core.control.reminders import ProgressTracker
        from harness_magic.core.control.verification import Verifier

        self.budget_guard = self.config.budgets().install(harness)
        self.planner: Planner | None = Planner() if self.config.planner else None
        if self.planner is not None:
            harness.add_tool(self.planner.tool())
            harness.subscribe(self.planner.finish_run)  # a completed run closes its in-progress steps
        self.progress: ProgressTracker | None = None
        if self.config.reminders:
            self.progress = ProgressTracker(track_plan=self.planner is not None,
                                            budgets=self.budget_guard.budgets).install(harness)
        from harness_magic.core.control.questions import Questions

        self.questions = Questions(lambda: self.answerer, max_questions=self.config.max_questions,
                                   timeout_s=self.config.question_timeout_s,
                                   nudge=self.config.reminders).install(harness)
        self.memory.install(harness)  # the remember tool; memory rides in each run's suffix
        self.verifier = Verifier().install(harness).require_citations()
        """Add after-tool checks here, e.g. ``session.verifier.require_columns([...], handles="summary")``."""
        if self.config.ask_confidence:  # the state panel's confidence and open questions (run_state trailer)
            from harness_magic.core.transcript.run_state import CONFIDENCE_REQUEST

            harness.register_reminder(lambda turn, _max_turns: CONFIDENCE_REQUEST if turn == 1 else None)
        from harness_magic.core.control.skills import install_skills, load_skills

        self.skills = install_skills(harness, self.verifier, load_skills(self.config.skill_dirs))
        """The ``skills__load`` tool and the rules of the skills loaded in the run (:mod:`.control.skills`)."""
        from harness_magic.core.control.audit import install_audit

        from harness_magic.core.execution.connectors.policy import current_actor

        role = self.config.actor_role
        self.audit = install_audit(harness, self.config.audit_log, actor=str(current_actor(role)) if role else None)
        """The workspace audit log (:mod:`.transcript.audit`) decisions are recorded in; None: auditing off."""
        from harness_magic.core.control.tracing import install_tracing

        self.tracing = install_tracing(harness, self.config.otel)
        """The OpenTelemetry tracer of each run (:mod:`.control.tracing`); None: not traced (nothing imported)."""

    def _set_budgets(self, budgets: Budgets) -> None:
        self.budget_guard.budgets = budgets
        if self.progress is not None:
            self.progress.budgets = budgets

    def retry(self, from_turn: int, log: str | None = None, *, model: str | None = None,
              run_key: str | None = None, replace: bool = True) -> RunResult:
        """Retry a run (default: the latest) from turn ``from_turn`` with this session's model and cache.

        ``run_key`` and ``replace`` as for :meth:`ask`: the retry's cell run again replaces its previous retry
        (which is then no longer the latest run, so the default retries the same run again).
        """
        from harness_magic.core.control.replay import retry_from

        harness = self.harness
        with self.timeline.running(self, run_key, replace=replace) as run_id:
            log = log or self.timeline.latest_log() or harness.run_file
            if log is None:
                raise ValueError("no run to retry yet: pass the path of a run log")
            with harness.overriding(adapter=self.adapter_for(model) if model is not None else None):
                self._fresh_worker()
                self.prestart()
                result = retry_from(log, from_turn, harness, run_id=run_id, session_id=self.session_id)
        self.runs.append(result)
        return result

    # -- use --------------------------------------------------------------------------------

    def subscribe(self, handler: EventHandler) -> Callable[[], None]:
        self._handlers.append(handler)
        unsubscribe = self.harness.subscribe(handler)

        def remove() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)
            unsubscribe()

        return remove

    def ask(self, prompt: str, *, model: str | None = None, max_turns: int | None = None,
            budgets: Budgets | None = None, run_key: str | None = None, replace: bool = True) -> RunResult:
        """Continue the conversation with ``prompt``; returns the run's result.

        ``budgets`` replaces the configured budgets for this run only. ``run_key``
        names where the run comes from (a notebook cell's id). Asking with a key
        that ran before replaces that run (``replace``, the default): the session
        goes back to how that run found it, later runs included (conversation,
        handles it made, memory, plan, loaded connectors, offline models' places;
        see :mod:`~harness_magic.core.control.reruns`), the run's transcript begins
        with a notice saying so, and :attr:`timeline` ``.last_rewind`` holds it.
        ``replace=False`` appends to the conversation as a run without a key does.
        """
        from harness_magic.core.control.reruns import check_run_key

        harness = self.harness
        if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        if run_key is not None:
            check_run_key(run_key)
        adapter = self.adapter_for(model) if model is not None else None
        previous_budgets = self.budget_guard.budgets
        if budgets is not None:
            self._set_budgets(budgets)
        try:
            with self.timeline.running(self, run_key, replace=replace) as run_id, \
                    harness.overriding(adapter=adapter, max_turns=max_turns):
                self._fresh_worker()
                self.prestart()  # beside the first model request
                # a sensitive value the person typed becomes the pseudonym the agent's side knows it by
                result = harness.ask_result(self.pseudonyms.mask_prompt(prompt), run_id=run_id,
                                            session_id=self.session_id)
        finally:
            self._set_budgets(previous_budgets)
        self.runs.append(result)
        return result

    def script_places(self) -> dict[str, Any]:
        """Each offline model's place in its script or recording, by model id (real models have none)."""
        return {model: adapter.script_place() for model, adapter in self._adapters.items()
                if isinstance(adapter, (ProviderAdapter, AsyncProviderAdapter)) and adapter.script_place() is not None}

    def seek_scripts(self, places: Mapping[str, Any]) -> None:
        """Put offline models back at ``places`` (from :meth:`script_places`); one not named there was first used
        after they were taken, and starts over."""
        for model, adapter in self._adapters.items():
            if not isinstance(adapter, (ProviderAdapter, AsyncProviderAdapter)):
                continue
            if model in places:
                adapter.seek(places[model])
            else:
                adapter.rewind()

    def new_conversation(self) -> None:
        """Forget the conversation; keep the cache. Scripted and replay models start over."""
        self.harness.reset_history()
        if self.planner is not None:
            self.planner.clear()
        self.rewind_offline_models()

    def reset(self) -> None:
        """Forget the conversation and clear the cache. Scripted and replay models start over."""
        self.new_conversation()
        self.cache.clear()

    def rewind_offline_models(self, model: str | None = None) -> list[str]:
        """Restart scripted/replay models (all, or the one ``model`` names); returns the ids rewound."""
        rewound = []
        for name, adapter in self._adapters.items():
            if (model is None or name == model) and isinstance(adapter, (ProviderAdapter, AsyncProviderAdapter)) \
                    and adapter.rewind():
                rewound.append(name)
        return rewound

    def reconfigure(self, config: AgentConfig, *, connectors: Any | None = None) -> list[str]:
        """Apply new settings, keeping the conversation, the cache and the offline models' places.

        Only a sandbox change restarts the interpreter worker; provider settings
        rebuild the real-provider adapters; planner/reminders/system prompt (or
        new ``connectors``) rebuild the loop around the same history. Returns a
        note per thing that was rebuilt.
        """
        old, notes = self.config, []
        changed = {f for f in vars(config) if getattr(config, f) != getattr(old, f)}
        self.config = config
        if changed & set(_ADAPTER_FIELDS):
            from harness_magic.core.providers.offline import is_offline_model

            self._adapters = {m: a for m, a in self._adapters.items() if is_offline_model(m)}
            notes.append("provider settings changed: new adapters for real models")
        if changed & set(_BACKEND_FIELDS) and (self._backend is not None or self._start is not None):
            self._cancel_start()
            if self._backend is not None:
                self._backend.close()
            self._backend = None
            notes.append("sandbox changed: the interpreter worker restarts at the next tool call (cache kept)")
        for name in ("hot_count", "memory_budget_bytes"):
            if name in changed and getattr(config, name) is not None and hasattr(self.cache, name):
                setattr(self.cache, name, getattr(config, name))
        if "spill_dir" in changed:
            notes.append("spill_dir applies to caches created from now on (--reset keeps this cache's directory)")
        if changed & set(_HARNESS_FIELDS) or connectors is not None:
            self._rebuild_harness(connectors)
            notes.append("the agent's tools were rebuilt around the same conversation")
        else:
            self.harness.adapter = self.adapter_for(config.model)
            self.harness.max_turns = config.max_turns
            self.harness.run_dir = config.run_dir
            self._set_budgets(config.budgets())
        return notes

    def _rebuild_harness(self, connectors: Any | None = None) -> None:
        """A new loop (tools, control plane, connectors, subagents) around the same conversation and cache."""
        history = self.harness.messages
        registry = connectors if connectors is not None else (
            self.connectors.registry if self.connectors is not None else None)
        self.harness = self._build_harness(self.adapter_for(self.config.model))
        self.harness.set_history(history)
        self.connectors = registry.install(self.harness) if registry is not None else None
        if self._subagent_options is not None:
            self.enable_subagents(**self._subagent_options)

    def restore_checkpoint(self, directory: str | os.PathLike[str]) -> SessionCache:
        """Replace the cache by the checkpoint in ``directory`` (``cache.save``), keeping the conversation; engine
        handles are re-bound on this session's connectors (the rest named in ``not_restored``). An unreadable
        checkpoint raises CheckpointError and leaves the session as it was."""
        from harness_magic.core.execution.connectors.checkpoint import load_checkpoint

        loaded = load_checkpoint(directory, self.connectors.registry if self.connectors is not None else None,
                                 hot_count=self.config.hot_count, memory_budget_bytes=self.config.memory_budget_bytes,
                                 spill_dir=self.config.spill_dir)
        self._guard_loaded(loaded)
        old, self.cache = self.cache, loaded
        self._rebuild_harness()
        old.close()
        return loaded

    def _guard_loaded(self, cache: SessionCache) -> None:
        """Put a loaded checkpoint's values through the entry guard: a checkpoint written elsewhere (or before
        masking) may hold real values; each handle keeps its name."""
        from harness_magic.core.cache.errors import CacheError

        guard = self.pseudonyms.guard()
        for info in cache.entries():
            if info.location not in ("memory", "disk"):
                continue  # engine handles: rows are concealed when the engine produces them
            try:
                value = cache.get(info.name)
            except CacheError:  # a damaged or changed file: never decoded, refused by name when it is read
                continue
            concealed = guard.conceal(info.name, value, None)
            if concealed is not value:
                cache.retire(info.name)
                cache.put(info.name, concealed, turn=info.turn, tool=info.tool)
        cache.set_guard(guard)
        for info in cache.entries():
            if info.location not in ("memory", "disk"):  # snapshot the engine's head rows again, concealed
                value = cache.get(info.name)
                cache.retire(info.name)
                cache.put(info.name, value, turn=info.turn, tool=info.tool)

    def close(self) -> None:
        """Close the backend (a start under way is waited for and closed: no worker is left) and the cache."""
        self._cancel_start()
        if self._backend is not None:
            self._backend.close()
        self.cache.close()


class SessionBackend:
    """A session's interpreter backend as its tools (and shared subagents) hold it.

    Implements :class:`~harness_magic.core.execution.interpreter.InterpreterBackend` by
    forwarding every member (:data:`~harness_magic.core.execution.interpreter.BACKEND_MEMBERS`)
    to the session's :attr:`AgentSession.backend` of the moment: started on
    first use, replaced when the sandbox settings change. Starting, forking or
    restarting a worker for a call is shown on the session's harness as a
    :class:`~harness_magic.core.transcript.events.SandboxStep` with its time.
    """

    name = "session"
    """The session's backend, whichever it is (its own name is ``session.backend.name``)."""

    def __init__(self, session: AgentSession) -> None:
        self._session = session

    def _current(self) -> Any:
        """The backend forwarded to, as it is (no worker started for it)."""
        return self._session.backend

    def _live(self) -> Any:
        """The session's backend, its worker running (shown as a step on the session's harness)."""
        return self._session._started_backend(self._session.harness)

    @property
    def exports_inputs(self) -> bool:
        return self._live().exports_inputs

    @property
    def streams_output(self) -> bool:
        return self._live().streams_output

    @property
    def has_workers(self) -> bool:
        return self._current().has_workers

    @property
    def restarts(self) -> int:
        return self._current().restarts

    @property
    def last_start_s(self) -> float:
        return self._current().last_start_s

    @property
    def worker_pid(self) -> int | None:
        return self._current().worker_pid

    def execute(self, code: str, inputs: dict[str, Any], taken_names: Any, *,
                versions: dict[str, str] | None = None, on_output: Any = None) -> Any:
        backend = self._live()
        restarts = backend.restarts
        result = None
        try:
            result = backend.execute(code, inputs, taken_names, versions=versions, on_output=on_output)
            return result
        finally:
            replaced = result.replaced if result is not None else None  # None when execute raised
            if replaced is not None:
                _worker_replaced(self._session.harness, replaced)
            elif backend.restarts > restarts:
                _sandbox_step(self._session.harness, "restart", backend.last_start_s)

    def start_worker(self) -> float:
        return self._current().start_worker()

    def retire_worker(self) -> None:
        self._current().retire_worker()

    def fresh_worker(self) -> None:
        self._current().fresh_worker()

    def sibling(self) -> Any:
        return self._current().sibling()

    def close(self) -> None:
        """Nothing: the session closes its backend (:meth:`AgentSession.close`)."""


class SubagentBackend(SessionBackend):
    """One subagent run's own interpreter (a sibling of the session's: its own worker), forwarding every member.

    A dead worker or launcher replaced before one of its calls is logged and shown on the session's harness like
    the session's own (a ``worker_replaced`` line against the parent's ``subagent`` call in progress); closing it
    closes the sibling, worker and session directory.
    """

    def __init__(self, session: AgentSession, own: Any) -> None:
        super().__init__(session)
        self._own = own

    def _current(self) -> Any:
        return self._own

    def _live(self) -> Any:
        return self._own

    def close(self) -> None:
        self._own.close()


def _worker_replaced(harness: HarnessHost | None, replaced: WorkerReplaced) -> None:
    """Log and emit ``replaced`` for the tool call in progress: a dead worker or launcher was replaced before the
    call ran (the call's result, which the model reads, does not mention it)."""
    if harness is None:
        return
    run = harness.current_run
    use = run.current_tool_use if run is not None else None
    event = dataclasses.replace(replaced, tool_use_id=use.id if use else None)
    fields = dataclasses.asdict(event)
    del fields["kind"]
    harness.log_event(event.kind, **fields)
    harness.emit(event)


def _sandbox_step(harness: HarnessHost, action: SandboxAction, duration_s: float | None) -> None:
    """Emit a :class:`SandboxStep` on ``harness`` for the tool call in progress."""
    from harness_magic.core.transcript.events import SandboxStep

    run = harness.current_run
    use = run.current_tool_use if run is not None else None
    harness.emit(SandboxStep(action=action, duration_s=duration_s, tool_use_id=use.id if use else None))
