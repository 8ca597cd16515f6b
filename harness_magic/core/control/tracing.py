"""OpenTelemetry traces of each run: a subscriber to the loop's events (issue 34 point 3).

Contract: :func:`install_tracing` subscribes a :class:`RunTracer` to a harness when the ``otel`` setting
(:data:`OTEL_MODES`) or the standard ``OTEL_*`` environment variables ask for traces; otherwise it does
nothing and imports nothing (not even ``opentelemetry-api``). Each run is one trace following the
OpenTelemetry GenAI semantic conventions:

``invoke_agent harness_magic`` (root, INTERNAL)
    ``gen_ai.operation.name`` ``invoke_agent``, ``gen_ai.request.model``, ``gen_ai.provider.name``, the run id
    (``harness_magic.run.id``); at the end its status, turns, tool calls, token usage and cost.
``chat <model>`` (CLIENT, one per provider call)
    ``gen_ai.usage.input_tokens`` / ``output_tokens`` / ``cache_read.input_tokens``,
    ``gen_ai.response.finish_reasons``, the count of tool calls asked for and the answer's size.
``execute_tool <tool>`` (INTERNAL, one per tool call, child of the run's span)
    ``gen_ai.tool.name`` (only a tool the harness registered: a name the model made up is
    :data:`UNREGISTERED_TOOL`), the tool's safety class, its outcome (``ok`` / ``error``), the result's size,
    the handles it made, the values masked and the approval's answer.
``invoke_agent subagent`` (INTERNAL, child of the ``execute_tool subagent`` span that started it)
    the same spans again for the subagent's run, one level down per nesting.

Attributes carry names, sizes, counts and classes, never data values: no prompt, tool argument, result or
answer text, unless the setting is ``content``, and then only after the session's masking step and the
secret scrubber (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``). The run id and the trace id go into the run log (an ``event`` record named
``trace`` right after ``run_start``) and reach the renderers as a
:class:`~harness_magic.core.transcript.events.TraceStarted` event (the footer shows it).

Export: an application that configured its own global ``TracerProvider`` gets the spans there; otherwise
the first traced run builds one for the process with a ``BatchSpanProcessor`` and the OTLP/HTTP exporter,
configured by the ``OTEL_*`` variables (endpoint, headers, timeout, ``OTEL_SERVICE_NAME``...). Spans are
exported from the processor's thread, so an unreachable endpoint never slows a run; at exit the processor
waits at most the exporter's timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default).
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from harness_magic.core.transcript.events import (
    ApprovalStep,
    AssistantMessage,
    MaskingApplied,
    RunFinished,
    RunStarted,
    SubagentEvent,
    ToolCallFinished,
    ToolCallStarted,
    TraceStarted,
    TurnStarted,
)
from harness_magic.core.transcript.scrub import scrub

__all__ = ["OTEL_MODES", "RunTracer", "install_tracing", "tracing_wanted", "tracer_for", "UNREGISTERED_TOOL",
           "TRACER_NAME", "AGENT_NAME", "SUBAGENT_NAME"]

OTEL_MODES = ("auto", "off", "on", "content")
"""``auto``: traces when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set;
``off``: never; ``on``: always (the OTLP endpoint from ``OTEL_*``, else the exporter's default
``http://localhost:4318``); ``content``: as ``on``, with the prompt, tool arguments, results and answers,
masked and scrubbed. ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turns every mode off."""
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""Setting either one turns ``auto`` on."""
TRACER_NAME = "harness_magic"
AGENT_NAME = "harness_magic"
"""``gen_ai.agent.name`` of a run's root span."""
SUBAGENT_NAME = "subagent"
"""``gen_ai.agent.name`` of a subagent's run."""
DEFAULT_SERVICE_NAME = "harness_magic"
"""``service.name`` of the process's own provider when ``OTEL_SERVICE_NAME`` does not name one."""
UNREGISTERED_TOOL = "unregistered"
"""``gen_ai.tool.name`` of a call to a tool the harness does not have (the model's name for it is never kept:
a prompt-injected model can put anything there)."""
CONTENT_MAX_CHARS = 4_096
"""Characters of one content attribute (``content`` mode) kept; the rest is cut."""
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a tool call id must look like to be recorded (ids come from the model)."""


class ContentMasker(Protocol):
    """The masking step content passes in ``content`` mode (:class:`~harness_magic.core.agent.run.ResultMasker`)."""

    def mask(self, text: str) -> tuple[str, dict[str, int]]: ...


class TracedHarness(Protocol):
    """What the tracer reads from the harness it is subscribed to."""

    @property
    def tools(self) -> list[Any]: ...
    @property
    def masker(self) -> ContentMasker | None: ...
    def emit(self, event: Any) -> None: ...
    def subscribe(self, handler: Callable[[Any], None]) -> Callable[[], None]: ...
    def log_event(self, name: str, **fields: Any) -> None: ...


def _disabled(environ: Mapping[str, str]) -> bool:
    return (environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
            or environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none")


def tracing_wanted(mode: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when runs should be traced under ``mode`` (:data:`OTEL_MODES`) and ``environ`` (default: os.environ)."""
    if mode not in OTEL_MODES:
        raise ValueError(f"otel {mode!r} is not valid; allowed: {', '.join(OTEL_MODES)}")
    environ = os.environ if environ is None else environ
    if mode == "off" or _disabled(environ):
        return False
    if mode == "auto":
        return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)
    return True


_OWN_PROVIDER: Any = None
"""The process's own SDK provider (OTLP/HTTP), built by the first traced run when the application set none:
like OpenTelemetry's global provider it is one per process, and its exporter thread flushes at exit."""
_OWN_PROVIDER_LOCK = threading.Lock()


def tracer_for(environ: Mapping[str, str] | None = None) -> Any:
    """The tracer runs report to: the application's global provider's, else the process's own OTLP/HTTP one.

    The SDK and the exporter are imported here only (a session that traces nothing never imports them).
    """
    global _OWN_PROVIDER
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):  # nobody configured one: ours
        with _OWN_PROVIDER_LOCK:
            if _OWN_PROVIDER is None:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor

                environ = os.environ if environ is None else environ
                named = environ.get("OTEL_SERVICE_NAME", "").strip()
                resource = Resource.create({} if named else {"service.name": DEFAULT_SERVICE_NAME})
                own = TracerProvider(resource=resource)
                own.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
                _OWN_PROVIDER = own
            provider = _OWN_PROVIDER
    return provider.get_tracer(TRACER_NAME)


def install_tracing(harness: TracedHarness, mode: str, *, tracer: Any | None = None) -> RunTracer | None:
    """Subscribe a :class:`RunTracer` to ``harness`` when ``mode`` (and the environment) ask for traces.

    ``tracer``: an OpenTelemetry tracer to use (default :func:`tracer_for`). Returns None, having imported
    nothing, when tracing is off.
    """
    if not tracing_wanted(mode):
        return None
    runs = RunTracer(tracer if tracer is not None else tracer_for(), harness, content=mode == "content")
    harness.subscribe(runs)
    return runs


def _provider_name(model: str) -> str:
    """``gen_ai.provider.name`` from a litellm model id (``openai/gpt-4o`` -> ``openai``)."""
    return model.split("/", 1)[0] if "/" in model else "litellm"


@dataclass
class _RunSpans:
    """The open spans of one run (the root run or a subagent's, at one nesting level)."""

    root: Any
    model: str
    agent: str
    chat: Any = None
    tools: dict[str, Any] = field(default_factory=dict)
    tool_calls: int = 0
    trace_pending: str | None = None
    """The run id whose :class:`TraceStarted` is still to be sent (root run only)."""


class RunTracer:
    """Event handler turning a harness's events into spans (see the module's contract)."""

    def __init__(self, tracer: Any, harness: TracedHarness, *, content: bool = False) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self._harness = harness
        self.content = content
        """Record masked content (``content`` mode)."""
        self._runs: dict[tuple[str, ...], _RunSpans] = {}
        """Open runs by scope: ``()`` the root run, ``(tool use id, ...)`` a subagent under that call."""
        self.trace_ids: dict[str, str] = {}
        """Run id -> hex trace id, for each run traced."""

    # -- attributes ---------------------------------------------------------------------------

    def _text(self, text: str) -> str:
        """``text`` as content may be recorded: masked by the session's step, scrubbed, bounded."""
        masker = self._harness.masker
        if masker is not None:
            text = masker.mask(text)[0]
        text = scrub(text)
        return text if len(text) <= CONTENT_MAX_CHARS else text[: CONTENT_MAX_CHARS - 1] + "…"

    def _tool(self, name: str) -> Any | None:
        return next((t for t in self._harness.tools if t.name == name), None)

    # -- events -------------------------------------------------------------------------------

    def __call__(self, event: Any) -> None:
        root = self._runs.get(())
        if root is not None and root.trace_pending is not None and not isinstance(event, RunStarted):
            self._send_trace_started(root)
        self._on(event, ())

    def _send_trace_started(self, run: _RunSpans) -> None:
        """Tell the renderers the trace id, once every subscriber has seen the run start."""
        run_id, run.trace_pending = run.trace_pending, None
        if run_id is None:  # callers send only a pending one
            return
        context = run.root.get_span_context()
        self._harness.emit(TraceStarted(run_id=run_id, trace_id=f"{context.trace_id:032x}",
                                        span_id=f"{context.span_id:016x}"))

    def _on(self, event: Any, scope: tuple[str, ...]) -> None:
        if isinstance(event, SubagentEvent):
            self._on(event.event, scope + (event.parent_tool_use_id,))
        elif isinstance(event, RunStarted):
            self._started(event, scope)
        elif isinstance(event, RunFinished):
            self._finished(event, scope)
        elif (run := self._runs.get(scope)) is not None:
            if isinstance(event, TurnStarted):
                self._turn(run, event)
            elif isinstance(event, AssistantMessage):
                self._answered(run, event)
            elif isinstance(event, ToolCallStarted):
                self._tool_started(run, event)
            elif isinstance(event, ToolCallFinished):
                self._tool_finished(run, event)
            elif isinstance(event, MaskingApplied) and event.tool_use_id in run.tools:
                masked = sum(n for _cls, n in event.counts)
                span = run.tools[event.tool_use_id]
                span.set_attribute("harness_magic.tool.masked_values", masked)
            elif isinstance(event, ApprovalStep) and event.approved is not None and event.tool_use_id in run.tools:
                run.tools[event.tool_use_id].set_attribute("harness_magic.tool.approved", event.approved)

    def _started(self, event: RunStarted, scope: tuple[str, ...]) -> None:
        trace = self._trace
        agent = AGENT_NAME if not scope else SUBAGENT_NAME
        if scope:  # a subagent: under the tool call that started it
            parent = self._runs.get(scope[:-1])
            span = parent.tools.get(scope[-1]) if parent is not None else None
            if span is None:
                return
            context = trace.set_span_in_context(span)
        else:
            for open_scope in sorted(self._runs, key=len, reverse=True):  # a run left open (never finished)
                self._close(self._runs.pop(open_scope), "abandoned")
            context = None
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.request.model": event.model,
            "gen_ai.provider.name": _provider_name(event.model),
            "harness_magic.run.id": event.run_id,
            "harness_magic.run.max_turns": event.max_turns,
            "harness_magic.prompt.chars": len(event.prompt),
        }
        if self.content and event.prompt:
            attributes["gen_ai.input.messages"] = json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": self._text(event.prompt)}]}])
        root = self._tracer.start_span(f"invoke_agent {agent}", context=context, kind=trace.SpanKind.INTERNAL,
                                       attributes=attributes)
        run = _RunSpans(root=root, model=event.model, agent=agent)
        self._runs[scope] = run
        span_context = root.get_span_context()
        if span_context.is_valid:
            trace_id = f"{span_context.trace_id:032x}"
            self.trace_ids[event.run_id] = trace_id
            if not scope:
                self._harness.log_event("trace", trace_id=trace_id, span_id=f"{span_context.span_id:016x}",
                                        trace_run_id=event.run_id)
                run.trace_pending = event.run_id

    def _turn(self, run: _RunSpans, event: TurnStarted) -> None:
        trace = self._trace
        if run.chat is not None:
            run.chat.end()
        run.chat = self._tracer.start_span(
            f"chat {run.model}", context=trace.set_span_in_context(run.root), kind=trace.SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": run.model,
                        "gen_ai.provider.name": _provider_name(run.model), "harness_magic.turn": event.turn})

    def _answered(self, run: _RunSpans, event: AssistantMessage) -> None:
        span, run.chat = run.chat, None
        if span is None:
            return
        usage = event.usage
        uses = event.message.tool_uses
        text = "".join(getattr(b, "text", "") for b in event.message.content if getattr(b, "type", "") == "text")
        finish = event.finish_reason or ("tool_calls" if uses else "stop")
        span.set_attributes({
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
            "harness_magic.usage.cost_usd": float(usage.cost),
            "gen_ai.response.finish_reasons": [finish],
            "harness_magic.response.tool_calls": len(uses),
            "harness_magic.response.text_chars": len(text),
        })
        if self.content:
            parts = [{"type": "text", "content": self._text(text)}] if text else []
            parts += [{"type": "tool_call", "name": self._tool_name(u.name)} for u in uses]
            span.set_attribute("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": parts}]))
        span.end()

    def _tool_name(self, name: str) -> str:
        return name if self._tool(name) is not None else UNREGISTERED_TOOL

    def _tool_started(self, run: _RunSpans, event: ToolCallStarted) -> None:
        trace = self._trace
        use = event.tool_use
        spec = self._tool(use.name)
        name = use.name if spec is not None else UNREGISTERED_TOOL
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "harness_magic.turn": event.turn,
            "harness_magic.tool.arguments": len(use.input) if isinstance(use.input, Mapping) else 0,
        }
        if _ID.fullmatch(use.id or ""):
            attributes["gen_ai.tool.call.id"] = use.id
        if spec is not None:
            attributes["harness_magic.tool.safety"] = spec.safety
            if spec.connector:
                attributes["harness_magic.tool.connector"] = spec.connector
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = self._text(json.dumps(use.input, default=str))
        run.tool_calls += 1
        run.tools[use.id] = self._tracer.start_span(f"execute_tool {name}", context=trace.set_span_in_context(run.root),
                                                    kind=trace.SpanKind.INTERNAL, attributes=attributes)

    def _tool_finished(self, run: _RunSpans, event: ToolCallFinished) -> None:
        span = run.tools.pop(event.tool_use.id, None)
        if span is None:
            return
        result = event.result
        span.set_attributes({
            "harness_magic.tool.outcome": "error" if result.is_error else "ok",
            "harness_magic.tool.result.chars": len(result.content),
            "harness_magic.tool.handles": len(event.handles),
            "harness_magic.tool.approval_wait_s": float(event.approval_wait_s),
        })
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", self._text(result.content))
        if result.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, "tool_error"))
        span.end()

    def _finished(self, event: RunFinished, scope: tuple[str, ...]) -> None:
        for open_scope in sorted((s for s in self._runs if s[: len(scope)] == scope and s != scope),
                                 key=len, reverse=True):  # subagents still open under this run
            self._close(self._runs.pop(open_scope), "abandoned")
        run = self._runs.pop(scope, None)
        if run is None:
            return
        if run.trace_pending is not None:
            self._send_trace_started(run)
        result = event.result
        usage = getattr(result, "total_usage", result.usage)
        run.root.set_attributes({
            "harness_magic.run.status": result.status,
            "harness_magic.run.turns": result.turns,
            "harness_magic.run.tool_calls": run.tool_calls,
            "harness_magic.run.handles": len(result.handles),
            "harness_magic.answer.chars": len(result.text),
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
            "harness_magic.usage.cost_usd": float(usage.cost),
        })
        if self.content and result.text:
            run.root.set_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": self._text(result.text)}]}]))
        self._close(run, result.status)

    def _close(self, run: _RunSpans, status: str) -> None:
        """End ``run``'s open spans, then its root; a status other than ``completed`` marks them errors."""
        error = status != "completed"
        for span in [*run.tools.values(), *([run.chat] if run.chat is not None else [])]:
            span.set_attribute("error.type", status)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, status))
            span.end()
        run.tools.clear()
        run.chat = None
        if error:
            run.root.set_attribute("error.type", status)
            run.root.set_status(self._trace.Status(self._trace.StatusCode.ERROR, status))
        run.root.end()

