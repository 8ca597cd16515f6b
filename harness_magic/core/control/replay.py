"""Replay a run log, retry a run from a checkpoint, and diff two runs.

Three operations over JSONL run logs (:mod:`harness_magic.core.transcript.log`).
This module re-runs recorded runs (replay, retry); reading a log lives in
:mod:`~harness_magic.core.control.recorded` and comparing two runs in
:mod:`~harness_magic.core.control.run_diff`.

:func:`replay_run`
    Plays a recorded run again with the recording as the model
    (:class:`~harness_magic.core.providers.offline.ReplayModel`): no key, deterministic.
    By default tool results are also played back from the log, so the
    replayed transcript is identical to the recorded one message for message,
    with no data needed. Pass ``tools=`` (and ``cache=``) to re-execute real
    tools instead and check that a run reproduces; pass the live harness's
    guards too (``**live_tools_of(harness)``) so every re-executed call goes
    through the same approval policy and budgets as a live run — a write the
    recording shows as denied is put to the approver again, never run
    silently, and a crafted log gets no more than the model would. Recorded reminders are
    re-applied at the same turns, and the run ends with the recorded status.
:func:`retry_from`
    Puts the transcript up to turn *N* (:func:`checkpoint_messages`) into a
    harness and calls that harness's model from there on
    (:meth:`~harness_magic.core.agent.loop.Harness.resume_result`). Handles made
    before turn *N* must still be in the harness's cache (same session).
:func:`diff_runs`
    What changed between two runs of the same question: tool calls
    (same / result changed / arguments changed / added / removed), the final
    answer, status, turns and usage, as a :class:`RunDiff` with a readable
    :meth:`RunDiff.text`.

Turns are counted from the question (the run's prompt): turn *N* is the
*N*-th model message after it. A retry's log records what it retried
(``run_start.retry``), so a retry of a retry counts turns the same way.
"""

from __future__ import annotations

import atexit
import copy
import os
import shutil
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from harness_magic.core.agent.result import StopRun
from harness_magic.core.confinement.owned_dirs import owned_tempdir
from harness_magic.core.control.recorded import RecordedRun, checkpoint_messages, first_difference, load_run
from harness_magic.core.execution.tools import ToolOutput, ToolSpec
from harness_magic.core.transcript.messages import Message, ToolResultBlock, ToolUseBlock

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost
    from harness_magic.core.agent.loop import Harness
    from harness_magic.core.cache.protocol import HandleCache
    from harness_magic.core.providers.protocol import SyncModelAdapter
    from harness_magic.core.providers.response import ProviderResponse

__all__ = [
    "ReplayResult",
    "replay_run",
    "retry_from",
    "live_tools_of",
]


class _RecordedTools:
    """Answers tool calls with the recorded results, matched by tool-use id."""

    def __init__(self, run: RecordedRun) -> None:
        self.results: dict[str, deque[ToolResultBlock]] = defaultdict(deque)
        for message in run.messages[run.own_start:]:
            for result in message.tool_results:
                self.results[result.tool_use_id].append(result)
        self._pending: str | None = None

    def guard(self, spec: ToolSpec, use: ToolUseBlock) -> str | None:
        queue = self.results.get(use.id)
        if not queue:
            return f"Replay: the recording has no result for tool call {use.id!r} ({use.name})."
        result = queue.popleft()
        if result.is_error:
            return result.content
        self._pending = result.content
        return None

    def handler(self, **_: Any) -> ToolOutput:
        text, self._pending = self._pending or "", None
        return ToolOutput(text=text)

    def specs(self, run: RecordedRun) -> list[ToolSpec]:
        specs: dict[str, ToolSpec] = {}
        for tool in run.start.get("tools", []):
            specs[tool["name"]] = ToolSpec(name=tool["name"], description=tool.get("description", ""),
                                           parameters=copy.deepcopy(tool.get("parameters") or {"type": "object"}),
                                           handler=self.handler)
        for call in run.tool_calls:
            if call.name not in specs:
                try:
                    specs[call.name] = ToolSpec(name=call.name, description="(not in the recording's tools)",
                                                parameters={"type": "object"}, handler=self.handler)
                except ValueError:  # a name no provider accepts cannot be re-dispatched
                    pass
        return list(specs.values())


class _RecordedEnding:
    """Adapter wrapper: plays the recording, then ends the run the way it ended.

    It declares no input window (``max_input_tokens`` None, so none learned either): a replay never compacts,
    so the recorded requests are sent as they were; the estimates are the wrapped adapter's.
    """

    max_input_tokens = None
    window_learned = False

    def __init__(self, adapter: SyncModelAdapter, run: RecordedRun) -> None:
        self._adapter = adapter
        self.model = adapter.model
        self._run = run
        self._left = len(run.turn_records)

    def fresh(self) -> SyncModelAdapter:
        """The wrapped adapter's fresh copy (a subagent during a replay does not end with the recording)."""
        return self._adapter.fresh()

    def estimate_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        return self._adapter.estimate_tokens(system, messages, tools)

    def estimate_messages_tokens(self, system: str, messages: Sequence[Message], tools: Sequence[Any]) -> int:
        return self._adapter.estimate_messages_tokens(system, messages, tools)

    def estimate_text_tokens(self, text: str) -> int:
        return self._adapter.estimate_text_tokens(text)

    def _end(self) -> None:
        from harness_magic.core.providers.errors import ProviderError

        error = self._run.error or ""
        if self._run.status == "interrupted":
            raise KeyboardInterrupt
        if error.startswith("provider error: "):
            raise ProviderError(error[len("provider error: "):])
        raise ProviderError(f"replay: the recording ends here (status {self._run.status})")

    def complete(self, system: str, messages: Sequence[Message], tools: Sequence[Any],
                 on_text: Callable[[str], None] | None = None) -> ProviderResponse:
        if self._left <= 0:
            self._end()
        self._left -= 1
        return self._adapter.complete(system, messages, tools, on_text=on_text)


def _stop_like_recording(run: RecordedRun) -> Callable[[Any], None]:
    recorded_turns = len(run.turn_records)

    def check(live: Any) -> None:
        if live.turn >= recorded_turns and run.status not in ("completed", "interrupted", "error"):
            raise StopRun(run.status, run.error or run.status)

    return check


def _recorded_reminders(run: RecordedRun) -> list[Callable[[int, int], "str | None"]]:
    by_turn = {r["turn"]: list(r["request"].get("reminders") or []) for r in run.turn_records}
    count = max((len(v) for v in by_turn.values()), default=0)

    def hook_for(index: int) -> Callable[[int, int], "str | None"]:
        def hook(turn: int, max_turns: int) -> str | None:
            texts = by_turn.get(turn, [])
            return texts[index] if index < len(texts) else None

        return hook

    return [hook_for(i) for i in range(count)]


@dataclass
class ReplayResult:
    """A replayed run and how it compares with the recording."""

    result: Any
    """The replay's :class:`~harness_magic.core.agent.result.RunResult` (its own log in ``run_file``)."""
    recorded: list[Message]
    """The recorded transcript."""
    replayed: list[Message]
    """The replayed transcript."""
    first_difference: int | None
    """Index of the first differing message, or None when identical."""

    @property
    def identical(self) -> bool:
        return self.first_difference is None


def live_tools_of(harness: HarnessHost) -> dict[str, Any]:
    """Options for :func:`replay_run` that re-run ``harness``'s tools under ``harness``'s guards.

    The tools, the cache, every tool guard (the connectors' approval policy,
    the budgets' tool-call and wall-time refusals) and every check (budgets
    between steps).
    """
    return {"tools": list(harness.tools), "cache": harness.cache,
            "tool_guards": list(harness.tool_guards), "checks": list(harness.checks)}


def replay_run(
    log_path: "str | os.PathLike[str]",
    *,
    tools: Sequence[ToolSpec] | None = None,
    cache: HandleCache | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    on_event: Callable[[Any], None] | None = None,
    tool_guards: Sequence[Callable[[ToolSpec, ToolUseBlock], "str | None"]] = (),
    checks: Sequence[Callable[[Any], None]] = (),
) -> ReplayResult:
    """Replay the run in ``log_path`` with its recording as the model.

    ``tools=None`` plays tool results back from the log (exact, no data
    needed); otherwise the given tools run for real against ``cache``,
    each call first passing ``tool_guards`` (approval, budgets), and
    ``checks`` run before every model step (see :func:`live_tools_of`).
    ``run_dir`` receives the replay's own log (by default a private temporary folder, removed when the
    process exits: the result's ``run_file`` is read after this returns).
    ``on_event`` receives the replay's events (live display).
    """
    from harness_magic.core.agent.loop import Harness
    from harness_magic.core.providers.offline import ReplayModel
    from harness_magic.core.providers.adapter import ProviderAdapter

    run = load_run(log_path)
    if run_dir is None:
        run_dir = owned_tempdir("replay")
        atexit.register(shutil.rmtree, run_dir, True)
    adapter = ProviderAdapter(f"replay/{Path(log_path).name}", transport=ReplayModel(Path(log_path)))
    recorded_tools = _RecordedTools(run) if tools is None else None
    specs = recorded_tools.specs(run) if recorded_tools else list(tools or [])
    harness = Harness(
        _RecordedEnding(adapter, run),
        run.start.get("system", ""),
        specs,
        max_turns=int(run.start.get("max_turns") or 25),
        run_dir=str(run_dir),
        cache=cache,
    )
    if recorded_tools is not None:
        harness.add_tool_guard(recorded_tools.guard)
    elif tools is not None:
        for guard in tool_guards:
            harness.add_tool_guard(guard)
        for check in checks:
            harness.add_check(check)
    harness.add_check(_stop_like_recording(run))
    for hook in _recorded_reminders(run):
        harness.register_reminder(hook)
    if on_event is not None:
        harness.subscribe(on_event)
    harness.set_history(run.messages[: run.own_start])
    if run.start.get("retry"):
        result = harness.resume_result()
    else:
        result = harness.ask_result(run.question)
    replayed = list(result.messages)
    return ReplayResult(result=result, recorded=run.messages, replayed=replayed,
                        first_difference=first_difference(run.messages, replayed))


def retry_from(
    log_path: "str | os.PathLike[str]",
    from_turn: int,
    harness: Harness,
    *,
    run_id: str | None = None,
    session_id: str | None = None,
) -> Any:
    """Re-use the recorded transcript up to ``from_turn`` and let ``harness``'s model continue.

    The harness's conversation is replaced by the checkpoint; its model,
    tools, checks and reminders apply from turn ``from_turn`` on. The retry's
    log records ``run_start.retry`` (the retried run, the turn, the question).
    Returns the :class:`~harness_magic.core.agent.result.RunResult`.
    """
    run = load_run(log_path)
    prefix = checkpoint_messages(run, from_turn)
    harness.set_history(prefix)
    retry = {"of_run": run.run_id, "of_log": str(run.path), "from_turn": from_turn,
             "question": run.question, "question_index": run.question_index}
    with harness.overriding(log_extra={"retry": retry}):
        return harness.resume_result(run_id=run_id, session_id=session_id)
