"""One run's state and its protocol steps; the drivers in :mod:`~harness_magic.core.agent.loop` call them in order.

A driver calls :meth:`Run.begin`, then per turn :meth:`Run.before_call`, the
provider, :meth:`Run.handle_response` (which answers every tool use), until
the model answers; then :meth:`Run.finish` — or :meth:`Run.stopped_by` for any
of :data:`RUN_ENDINGS`. A run reads its harness only through :class:`RunHost`
and writes only the history list it was given, in place.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from harness_magic.core.agent.result import NO_ANSWER_TEXT, RunResult, StopRun
from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.execution.format import format_exception, format_tool_output
from harness_magic.core.execution.tools import ToolError, ToolOutput, ToolSpec
from harness_magic.core.providers.payload import EMPTY_ANSWER_TEXT, EMPTY_TOOL_RESULT_TEXT
from harness_magic.core.providers.response import INVALID_ARGUMENTS_KEY, ProviderResponse
from harness_magic.core.providers.errors import ProviderError
from harness_magic.core.transcript.events import (
    AssistantMessage,
    ContextCompacted,
    Event,
    MaskingApplied,
    Notice,
    ReminderAdded,
    RunStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolOutputDelta,
    TurnFinished,
    TurnStarted,
)
from harness_magic.core.transcript.log import RunLogger
from harness_magic.core.transcript.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    message_to_dict,
    unanswered_tool_uses,
)
from harness_magic.core.transcript.scrub import scrub

if TYPE_CHECKING:
    from harness_magic.core.providers.protocol import ModelAdapter

__all__ = ["Run", "RunHost", "ReminderHook", "Check", "ToolGuard", "ToolValidator", "ResultMasker", "RUN_ENDINGS",
           "PARTIAL_OUTPUT_MAX_CHARS", "INTERRUPTED_RESULT", "SKIPPED_RESULT", "ROLLED_BACK_NOTE",
           "INTERRUPTED_ANSWER_NOTE", "COMPACT_AT", "COMPACT_TO", "TRACEBACK_LOG_MAX_CHARS"]

ReminderHook = Callable[[int, int], "str | None"]
"""``hook(turn, max_turns) -> text | None``: text is appended to the conversation suffix."""
Check = Callable[["Run"], None]
"""``check(run)`` before each provider call; raises :class:`StopRun` to end the run."""
ToolGuard = Callable[[ToolSpec, ToolUseBlock], "str | None"]
"""``guard(spec, use) -> refusal | None`` before a tool runs; a refusal becomes its error result."""
ToolValidator = Callable[[ToolSpec, ToolUseBlock, ToolOutput], "str | None"]
"""``validator(spec, use, output) -> problem | None`` after a tool ran; a problem turns its result into an error."""

PRINTED_HOLD_MAX_CHARS = 4_096
"""Printed text held back waiting for a line break before it is masked and shown anyway (progress bars, long lines)."""
PARTIAL_OUTPUT_MAX_CHARS = 16_000
"""Printed text kept per tool call for an interrupted call's result and log: the head is what matters."""
INTERRUPTED_RESULT = "Interrupted by the user before this tool call finished; it had no effect on the cache."
"""Error result that answers tool calls cut off by an interrupt."""
SKIPPED_RESULT = "Not run: the run stopped ({reason}) before this tool call."
"""Error result for tool calls left unanswered when a run stops early."""
ROLLED_BACK_NOTE = "no model answer yet, so the prompt was taken back out of the conversation"
"""Added to the error of a run that failed before the model answered anything."""
INTERRUPTED_ANSWER_NOTE = "\n\n[interrupted by the user here]"
"""Ends the kept part of an answer an interrupt cut off (in the conversation; the run's text is the part itself)."""
TRACEBACK_LOG_MAX_CHARS = 8_000
"""Traceback kept in the log per failure (``tool_failed``, ``run_failed``): the end, where the innermost frames are."""
COMPACT_AT = 0.9
"""Compact when a request's estimate passes this share of the input window (estimates are approximate)."""
COMPACT_TO = 0.6
"""Compact down to this share: room for many more turns before the next compaction (prefix stays stable)."""

RUN_ENDINGS = (StopRun, ProviderError, KeyboardInterrupt)
"""Exceptions that end a run with a status instead of propagating (:meth:`Run.stopped_by`): a check's stop
(budgets, replay, a policy), a provider failure, an interrupt. A tool's failure never gets here: it is the call's
error result. Anything else is a bug (or a broken machine): :meth:`Run.crashed` records it, then it propagates."""


class ResultMasker(Protocol):
    """The one masking step between tool results and the history the provider gets (``Harness.set_masker``).

    Every tool result (output, errors, snapshots, subagent answers, output cut
    off by an interrupt) passes through :meth:`mask` before it enters the
    history; what people see of the call (printed chunks, its text and
    snapshots) passes through it too, so the log and exports hold only what the
    model saw.
    """

    def observe(self, cache: HandleCache, handles: Sequence[str]) -> None:
        """Learn the sensitive columns of ``handles`` in ``cache`` (before their text is masked)."""
        ...

    def mask(self, text: str) -> tuple[str, dict[str, int]]:
        """``text`` masked by the policy, and the values masked per sensitivity class."""
        ...

    def mask_snapshot(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """A snapshot with every string (cells, column names) masked."""
        ...


class RunHost(Protocol):
    """What a :class:`Run` reads from the harness driving it (the harness's public surface).

    Everything is read when it is needed, so tools, hooks and the adapter
    changed during a run apply from the next step on.
    """

    @property
    def adapter(self) -> ModelAdapter: ...
    @property
    def system(self) -> str: ...
    @property
    def tools(self) -> list[ToolSpec]: ...
    def visible_tools(self) -> list[ToolSpec]: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def run_dir(self) -> str: ...
    @property
    def log_extra(self) -> Mapping[str, Any]: ...
    @property
    def cache(self) -> HandleCache: ...
    @property
    def checks(self) -> tuple[Check, ...]: ...
    @property
    def reminder_hooks(self) -> tuple[ReminderHook, ...]: ...
    @property
    def tool_guards(self) -> tuple[ToolGuard, ...]: ...
    @property
    def tool_validators(self) -> tuple[ToolValidator, ...]: ...
    @property
    def masker(self) -> ResultMasker | None: ...
    def emit(self, event: Event) -> None: ...


class Run:
    """State and protocol steps of one run; drivers call the steps in order.

    ``history`` is the host's canonical message list: the run appends to it and
    rewrites it (compaction, roll-back) in place. Constructing a run opens its
    log and writes ``run_start``; :meth:`begin` adds the prompt.
    """

    def __init__(self, host: RunHost, history: list[Message], prompt: str | None, run_id: str,
                 session_id: str | None) -> None:
        self.h = host
        self.history = history
        self.prompt = prompt
        self.run_id = run_id
        self.session_id = session_id
        self.turn = 0
        self.usage = Usage()
        self.child_usage = Usage()
        """Usage reported by subagents (``add_child_usage``)."""
        self.tool_calls = 0
        self.handles: list[str] = []
        self.charts: list[str] = []
        self.started = time.monotonic()
        self.model = host.adapter.model
        self.start_len = len(history)
        """History length before this run: a run with no answer truncates back to it."""
        self.responses = 0
        """Model responses received in this run."""
        self.calling = False
        """True while the driver waits for the provider (an ending then counts the request as a turn)."""
        self.logger = RunLogger(host.run_dir, run_id)
        self.logger.start(
            session_id=session_id,
            model=self.model,
            system=host.system,
            tools=host.tools,
            history=list(history),
            prompt=prompt,
            max_turns=host.max_turns,
            extra=dict(host.log_extra) or None,
        )
        self.current_tool_use: ToolUseBlock | None = None
        """The tool use being dispatched right now (tools that link child runs read its id)."""
        self.approval_wait_s: dict[str, float] = {}
        """Tool use id -> seconds its approval took (written by approval guards)."""
        self.partial_output: dict[str, str] = {}
        self._held: dict[str, str] = {}
        """Tool use id -> printed text after its last line break, held back until the line is whole."""
        """Tool use id -> text it printed so far (:meth:`tool_printed`), bounded."""
        self.logged_upto = len(history)
        self.final_text = ""
        self.streamed: list[str] = []
        """Text the model streamed in the provider call in progress (kept as the answer so far on an interrupt)."""
        self.kept_partial = False
        """True when an interrupt cut the model's answer and its streamed text was kept (:meth:`stopped_by`)."""

    @property
    def run_file(self) -> str:
        """Path of this run's JSONL log."""
        return str(self.logger.path)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    # -- steps --------------------------------------------------------------------------

    def begin(self) -> None:
        """Add the prompt to the history (none: resume as it is) and emit :class:`RunStarted`."""
        if self.prompt is not None:
            self.history.append(Message(role="user", content=(TextBlock(text=self.prompt),)))
        self.h.emit(RunStarted(run_id=self.run_id, model=self.model, max_turns=self.h.max_turns,
                               prompt=self.prompt or "", run_file=self.run_file))

    def before_call(self) -> tuple[str, list[Message], list[ToolSpec], list[str]]:
        """Run checks, add reminders; returns what the provider call needs."""
        h = self.h
        for check in h.checks:
            check(self)
        max_turns = h.max_turns
        if self.turn >= max_turns:
            raise StopRun("max_turns_exceeded", f"reached max_turns={max_turns} without a final answer")
        self.turn += 1
        h.emit(TurnStarted(turn=self.turn, max_turns=max_turns))
        self.streamed = []
        reminders = []
        for hook in h.reminder_hooks:
            text = hook(self.turn, max_turns)
            if text:
                reminders.append(text)
        for text in reminders:
            self._append_suffix_text(text)
            h.emit(ReminderAdded(turn=self.turn, text=text))
        tools = h.visible_tools()
        self._fit_window(tools)
        return h.system, list(self.history), tools, reminders

    def _fit_window(self, tools: list[ToolSpec]) -> None:
        """Compact the history when the request would pass :data:`COMPACT_AT` of the input window; when keeping
        the latest turns whole is still over it, everything but the last message is summarised."""
        h = self.h
        adapter = h.adapter
        system = h.system
        limit = adapter.max_input_tokens
        if not limit:
            return
        tokens = adapter.estimate_tokens(system, self.history, tools)
        if tokens <= limit * COMPACT_AT:
            return
        from harness_magic.core.agent.compaction import compact

        def estimate(messages: Sequence[Message]) -> int:
            return adapter.estimate_messages_tokens(system, messages, tools)

        compacted, report = compact(self.history, estimate, int(limit * COMPACT_TO))
        if (report.tokens_after if report is not None else tokens) > limit:
            # the latest turns alone are over the window (e.g. one a context overflow showed): keep only the last
            deeper, deep_report = compact(self.history, estimate, int(limit * COMPACT_TO), keep_recent=1)
            if deep_report is not None:
                compacted, report = deeper, deep_report
        if report is not None:
            self.history[:] = compacted
            self.logged_upto = len(self.history)
            self.logger.write("compaction", turn=self.turn, stage=report.stage, tokens_before=report.tokens_before,
                              tokens_after=report.tokens_after, limit=limit,
                              results_compacted=report.results_compacted,
                              messages_summarised=report.messages_summarised,
                              history=[message_to_dict(m) for m in compacted])
            h.emit(ContextCompacted(turn=self.turn, stage=report.stage, tokens_before=report.tokens_before,
                                    tokens_after=report.tokens_after, limit=limit,
                                    results_compacted=report.results_compacted,
                                    messages_summarised=report.messages_summarised))
            what = (f"{report.results_compacted} older tool results cut to their handle line"
                    if report.stage == "tool_results" else f"{report.messages_summarised} older messages summarised")
            h.emit(Notice(text=f"context compacted to fit {limit:,} tokens: {what} "
                               f"(~{report.tokens_before:,} → ~{report.tokens_after:,} tokens)"))
            tokens = report.tokens_after
        if tokens > limit and not adapter.window_learned:  # a learned window: the server decides
            raise StopRun("error", f"the conversation needs about {tokens:,} tokens, over the {limit:,}-token input "
                                   f"window of {self.model!r}, even after compaction: nothing was sent")

    def _append_suffix_text(self, text: str) -> None:
        messages = self.history
        block = TextBlock(text=text)
        if messages and messages[-1].role == "user":
            messages[-1] = Message(role="user", content=messages[-1].content + (block,))
        else:
            messages.append(Message(role="user", content=(block,)))

    def on_text(self, text: str) -> None:
        self.streamed.append(text)
        self.h.emit(TextDelta(turn=self.turn, text=text))

    def tool_printed(self, text: str) -> None:
        """Text the running tool call printed: emit a :class:`ToolOutputDelta`, keep it for an interrupt.

        Ignored outside a tool call. Up to :data:`PARTIAL_OUTPUT_MAX_CHARS` per call are kept.
        With a masker, text is passed on masked a whole line at a time (a value printed in two
        flushes is masked whole); a line longer than :data:`PRINTED_HOLD_MAX_CHARS` goes as it is cut.
        """
        use = self.current_tool_use
        if use is None or not isinstance(text, str) or not text:
            return
        masker = self.h.masker
        if masker is not None:  # counted when the whole result is masked
            text = self._held.pop(use.id, "") + text
            cut = max(text.rfind("\n"), text.rfind("\r")) + 1
            if not cut and len(text) >= PRINTED_HOLD_MAX_CHARS:
                cut = len(text)
            if text[cut:]:
                self._held[use.id] = text[cut:]
            if not cut:
                return
            text = masker.mask(text[:cut])[0]
        self._show_printed(use, text)

    def _flush_printed(self, use: ToolUseBlock) -> None:
        """Pass on the held end of a call's printed text (masked) when the call ends."""
        held = self._held.pop(use.id, "")
        if held and self.h.masker is not None:
            self._show_printed(use, self.h.masker.mask(held)[0])

    def _show_printed(self, use: ToolUseBlock, text: str) -> None:
        kept = self.partial_output.get(use.id, "")
        if len(kept) < PARTIAL_OUTPUT_MAX_CHARS:
            self.partial_output[use.id] = kept + text[:PARTIAL_OUTPUT_MAX_CHARS - len(kept)]
        self.h.emit(ToolOutputDelta(turn=self.turn, tool_use_id=use.id, text=text))

    def after_response(self, response: ProviderResponse, latency_s: float, tools: list[ToolSpec],
                       reminders: list[str]) -> list[ToolUseBlock]:
        """Record and log the response; returns its tool uses."""
        h = self.h
        self.responses += 1
        if not response.message.text.strip() and not response.message.tool_uses:
            # an empty answer is stored in a form every provider accepts on the next request
            response = dataclasses.replace(
                response, message=Message(role="assistant", content=(TextBlock(text=EMPTY_ANSWER_TEXT),)))
        appended = self.history[self.logged_upto :]
        self.history.append(response.message)
        self.logged_upto = len(self.history)
        self.usage = self.usage + response.usage
        raw = {k: v for k, v in response.raw.items() if k != "_cost"}
        cache = h.cache
        self.logger.write(
            "turn",
            turn=self.turn,
            request={
                "system": h.system,  # the log holds it by hash after its first appearance
                "messages_appended": [message_to_dict(m) for m in appended],
                "visible_tools": [t.name for t in tools],
                "reminders": reminders,
            },
            response={
                "message": message_to_dict(response.message),
                "usage": response.usage.to_dict(),
                "stop_reason": response.stop_reason,
                "model": response.model,
            },
            provider_response=raw,
            latency_s=round(latency_s, 6),
            usage=response.usage.to_dict(),
            cumulative_usage=self.usage.to_dict(),
            cache=cache.metadata(),
        )
        h.emit(AssistantMessage(turn=self.turn, message=response.message, usage=response.usage,
                                finish_reason=response.stop_reason))
        if response.message.text.strip() and response.message.text != EMPTY_ANSWER_TEXT:
            self.final_text = response.message.text
        return response.message.tool_uses

    def dispatch_all(self, uses: list[ToolUseBlock]) -> None:
        """Answer every tool use, in order, with exactly one result."""
        h = self.h
        results: list[ToolResultBlock] = []
        meta: list[dict[str, Any]] = []
        try:
            for use in uses:
                started = time.monotonic()
                h.emit(ToolCallStarted(turn=self.turn, tool_use=use))
                self.current_tool_use = use
                try:
                    output = self._dispatch_one(use)
                finally:
                    self._flush_printed(use)
                    self.current_tool_use = None
                duration = time.monotonic() - started
                text = scrub(output.text) if output.is_error else output.text  # errors echo configs and headers
                text = self._masked(text, use, output)
                block = ToolResultBlock(tool_use_id=use.id, content=text if text.strip() else EMPTY_TOOL_RESULT_TEXT,
                                        is_error=output.is_error)
                results.append(block)
                self.tool_calls += 1
                self.handles.extend(output.handles)
                self.charts.extend(a["data"] for a in output.artifacts if a.get("kind") == "image/png")
                snapshots = tuple(self._snapshot(name) for name in output.handles)
                if h.masker is not None:  # what people see of the call is what the model saw
                    snapshots = tuple(h.masker.mask_snapshot(s) if s else s for s in snapshots)
                waited = min(self.approval_wait_s.get(use.id, 0.0), duration)
                meta.append({"tool_use_id": use.id, "name": use.name, "is_error": output.is_error,
                             "duration_s": round(duration, 6), "handles": list(output.handles),
                             "content_chars": len(output.text)}
                            | ({"approval_wait_s": round(waited, 6)} if waited else {}))
                shown = output.display_text
                if shown is not None and output.is_error:
                    shown = scrub(shown)  # as the model's text: errors echo configs and headers
                if shown is not None and h.masker is not None:
                    shown = h.masker.mask(shown)[0]
                h.emit(ToolCallFinished(turn=self.turn, tool_use=use, result=block, duration_s=duration,
                                        handles=tuple(output.handles), artifacts=tuple(output.artifacts),
                                        snapshots=snapshots, approval_wait_s=waited, display_text=shown))
        finally:
            # On interrupt, answer what is left so the transcript stays consistent.
            answered = {r.tool_use_id for r in results}
            for use in uses:
                if use.id not in answered:
                    partial = scrub(self.partial_output.get(use.id, ""))
                    if partial and h.masker is not None:  # chunks were masked one by one: mask the joined text too
                        partial = self._masked(partial, use, None, where="interrupted")
                    content = INTERRUPTED_RESULT + (f"\nOutput printed before the interrupt:\n{partial}" if partial else "")
                    results.append(ToolResultBlock(tool_use_id=use.id, content=content, is_error=True))
                    if partial:
                        meta.append({"tool_use_id": use.id, "name": use.name, "is_error": True, "interrupted": True,
                                     "partial_output": partial})
            self.history.append(Message(role="user", content=tuple(results)))
            self.logger.write("tools", turn=self.turn, results=meta)

    def _masked(self, text: str, use: ToolUseBlock, output: ToolOutput | None, where: str | None = None) -> str:
        """``text`` through the harness's masker (the one choke point); logs and emits :class:`MaskingApplied`."""
        masker = self.h.masker
        if masker is None:
            return text
        if output is not None:
            masker.observe(self.h.cache, output.handles)
            where = where or ("subagent" if use.name == "subagent" else "error" if output.is_error else "tool_result")
        text, counts = masker.mask(text)
        if counts:
            pairs = tuple(sorted(counts.items()))
            self.logger.write("event", name="masking_applied", turn=self.turn, where=where, tool_use_id=use.id,
                              counts=dict(pairs))
            self.h.emit(MaskingApplied(where=where or "tool_result", tool_use_id=use.id, counts=pairs))
        return text

    def _snapshot(self, name: str) -> dict[str, Any]:
        try:
            return self.h.cache.snapshot(name)
        except Exception:  # broad: a snapshot is display metadata of any cached type; one that fails shows nothing
            return {}

    def _failure_text(self, exc: BaseException) -> tuple[str, str]:
        """``(type: message, traceback)`` of ``exc`` for the log: masked, the traceback's last
        :data:`TRACEBACK_LOG_MAX_CHARS` (the innermost frames)."""
        what = f"{type(exc).__name__}: {exc}"
        trace = "".join(traceback.format_exception(exc))[-TRACEBACK_LOG_MAX_CHARS:]
        masker = self.h.masker
        if masker is not None:  # an exception's message can quote a value the model never saw unmasked
            try:
                what, trace = masker.mask(what)[0], masker.mask(trace)[0]
            except Exception:  # broad: the masking step may be the bug itself; then nothing unmasked is written
                what, trace = f"{type(exc).__name__} (message withheld: the masking step failed on it)", ""
        return what, trace

    def _tool_failed(self, use: ToolUseBlock, exc: Exception) -> ToolOutput:
        """The error result for a handler that raised ``exc``; its traceback goes to the log (``tool_failed``)."""
        what, trace = self._failure_text(exc)
        self.logger.write("event", name="tool_failed", turn=self.turn, tool_use_id=use.id, tool=use.name,
                          error=what, traceback=trace)
        return ToolOutput(text=format_exception(exc), is_error=True)

    def _dispatch_one(self, use: ToolUseBlock) -> ToolOutput:
        h = self.h
        spec = next((t for t in h.tools if t.name == use.name), None)
        visible = [t.name for t in h.visible_tools()]
        if spec is None or not spec.visible:
            what = "is not loaded yet" if spec is not None else "does not exist"
            hint = (f" Call load_connectors(connector_name={spec.connector!r}) first."
                    if spec is not None and spec.connector else "")
            return ToolOutput(
                text=f"Tool {use.name!r} {what}.{hint} Available tools: {', '.join(visible) or '(none)'}.",
                is_error=True,
            )
        if INVALID_ARGUMENTS_KEY in use.input:
            return ToolOutput(text=f"Arguments for {use.name!r} were not valid JSON: {use.input[INVALID_ARGUMENTS_KEY]}",
                              is_error=True)
        for guard in h.tool_guards:
            refusal = guard(spec, use)
            if refusal:
                return ToolOutput(text=refusal, is_error=True)
        try:
            value = spec.handler(**use.input)
        except TypeError as exc:
            if _is_argument_error(exc, spec.handler):
                expected = ", ".join(spec.parameters.get("properties", {})) or "none"
                return ToolOutput(text=f"Bad arguments for {use.name!r}: {exc}. Parameters: {expected}.",
                                  is_error=True)
            return self._tool_failed(use, exc)
        except ToolError as exc:
            return ToolOutput(text=str(exc), is_error=True)
        # Broad: the handler is tool code (a connector's, a plugin's, the interpreter's); what it raises is this
        # call's failure, which the model reads as the error result: a tool failure, one a run can have.
        except Exception as exc:
            return self._tool_failed(use, exc)
        output = format_tool_output(value, h.cache, spec.result_name or spec.name, turn=self.turn, tool=spec.name)
        for validator in h.tool_validators:
            problem = validator(spec, use, output)
            if problem:
                output = dataclasses.replace(output, text=f"{output.text}\nVerification failed: {problem}",
                                             is_error=True)
        return output

    def finish(self, status: str, error: str | None = None, *, sent: bool = False) -> RunResult:
        """End the run: answer open tool uses, write ``run_end``, close the log; returns the result.

        ``sent``: the call in flight when it ended had reached the provider. The
        driver emits :class:`~harness_magic.core.transcript.events.RunFinished`.
        """
        history = self.history
        rolled_back = status != "completed" and self.responses == 0 and not self.kept_partial
        if rolled_back:  # nothing answered: the conversation is as before the run (the log keeps the attempt)
            del history[self.start_len :]
            self.logged_upto = len(history)
            error = f"{error or status} ({ROLLED_BACK_NOTE})"
        leftover = unanswered_tool_uses(history)
        if leftover:
            reason = error or status
            history.append(Message(role="user", content=tuple(
                ToolResultBlock(tool_use_id=u.id, content=SKIPPED_RESULT.format(reason=reason), is_error=True)
                for u in leftover)))
        appended = history[self.logged_upto :]
        self.logged_upto = len(history)
        error = scrub(error)
        text = (self.final_text or NO_ANSWER_TEXT) if status == "completed" else \
            (self.final_text if self.kept_partial else "")
        turns = self.responses + (1 if sent else 0)
        result = RunResult(
            status=status,
            text=text,
            turns=turns,
            usage=self.usage,
            run_id=self.run_id,
            session_id=self.session_id,
            run_file=self.run_file,
            error=error,
            model=self.model,
            elapsed_s=self.elapsed_s,
            handles=tuple(self.handles),
            messages=tuple(history),
            charts=tuple(self.charts),
            subagent_usage=self.child_usage,
            rolled_back=rolled_back,
        )
        self.logger.write(
            "run_end",
            status=status,
            text=text,
            error=error,
            rolled_back=rolled_back,
            turns=turns,
            tool_calls=self.tool_calls,
            usage=self.usage.to_dict(),
            subagent_usage=self.child_usage.to_dict(),
            elapsed_s=round(self.elapsed_s, 6),
            handles=list(self.handles),
            messages_appended=[message_to_dict(m) for m in appended],
        )
        self.logger.close()
        return result

    def handle_response(self, response: ProviderResponse, latency_s: float, tools: list[ToolSpec],
                        reminders: list[str]) -> bool:
        """Record the response, answer its tool uses; True when the model gave its final answer."""
        for text in getattr(response, "notices", ()):  # e.g. "a placeholder key was sent" (said once)
            self.h.emit(Notice(text=text))
        uses = self.after_response(response, latency_s, tools, reminders)
        if uses:
            self.dispatch_all(uses)
        self.turn_finished(response)
        return not uses

    def stopped_by(self, exc: BaseException) -> RunResult:
        """End the run for one of :data:`RUN_ENDINGS` (or a cancellation) with the matching status."""
        calling, self.calling = self.calling, False
        if isinstance(exc, StopRun):
            return self.finish(exc.status, exc.reason)
        if isinstance(exc, ProviderError):
            return self.finish("error", f"provider error: {exc}", sent=calling and exc.request_sent)
        if calling and "".join(self.streamed).strip():  # paragraphs already on screen stay the answer so far
            partial = "".join(self.streamed)
            kept = TextBlock(text=partial + INTERRUPTED_ANSWER_NOTE)
            self.history.append(Message(role="assistant", content=(kept,)))
            self.final_text, self.kept_partial = partial, True
            return self.finish("interrupted", "interrupted by the user while the model was answering; the text it "
                                              "had written is kept as the answer so far", sent=True)
        return self.finish("interrupted", "interrupted by the user", sent=calling)

    def crashed(self, exc: Exception) -> RunResult:
        """End the run for an exception that is not one of :data:`RUN_ENDINGS`; the driver then re-raises it.

        The log gets an ``event`` record (``name="run_failed"``) with the traceback,
        masked and scrubbed like everything else in it, and a ``run_end`` with status
        ``error``; open tool uses are answered, so the conversation stays valid.
        """
        calling, self.calling = self.calling, False
        what, trace = self._failure_text(exc)
        try:
            self.logger.write("event", name="run_failed", turn=self.turn, error=what, traceback=trace)  # scrubbed
        finally:  # the conversation is left valid even when the log cannot be written
            result = self.finish("error", f"{what} (raised to the caller with its traceback)", sent=calling)
        return result

    def turn_finished(self, response: ProviderResponse) -> None:
        self.h.emit(TurnFinished(turn=self.turn, usage=response.usage, total_usage=self.usage,
                                 elapsed_s=self.elapsed_s))


def _is_argument_error(exc: TypeError, handler: Callable[..., Any]) -> bool:
    """True when ``exc`` came from calling ``handler`` with wrong arguments."""
    tb = exc.__traceback__
    depth = 0
    while tb is not None:
        depth += 1
        tb = tb.tb_next
    return depth <= 1
