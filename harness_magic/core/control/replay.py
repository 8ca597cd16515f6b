"""Replay a run log, retry a run from a checkpoint, and diff two runs.

Three operations over JSONL run logs (:mod:`harness_magic.core.transcript.log`):

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

import copy
import difflib
import json
import os
import tempfile
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from harness_magic.core.transcript.log import read_log
from harness_magic.core.transcript.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    message_from_dict,
)
from harness_magic.core.execution.tools import ToolOutput, ToolSpec

__all__ = [
    "RecordedRun",
    "ToolCallRecord",
    "ReplayResult",
    "CallDiff",
    "RunDiff",
    "load_run",
    "replay_run",
    "checkpoint_messages",
    "retry_from",
    "diff_runs",
    "first_difference",
    "live_tools_of",
    "DIFF_VALUE_CHARS",
]

DIFF_VALUE_CHARS = 300
"""Arguments and results are cut to this length in :meth:`RunDiff.text`; the structure keeps them whole."""

LogLike = "str | os.PathLike[str] | RecordedRun"


# --------------------------------------------------------------------------- reading a run


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call of a run and the result it got."""

    turn: int
    """Turn (counted from the question) whose model message made the call."""
    id: str
    name: str
    input: dict[str, Any]
    result: str
    is_error: bool

    @property
    def signature(self) -> str:
        return self.name + json.dumps(self.input, sort_keys=True, default=str)


@dataclass(repr=False)
class RecordedRun:
    """A run as its log describes it."""

    def __repr__(self) -> str:
        return f"RecordedRun({self.run_id!r}, status={self.status!r}, turns={self.turns}, path={str(self.path)!r})"

    path: Path
    records: list[dict[str, Any]]
    messages: list[Message]
    """The whole transcript at the end of the run (history included)."""
    question_index: int
    """Index in ``messages`` of the user message holding the question."""

    @property
    def start(self) -> dict[str, Any]:
        return next(r for r in self.records if r.get("type") == "run_start")

    @property
    def end(self) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("type") == "run_end"), None)

    @property
    def turn_records(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == "turn"]

    @property
    def run_id(self) -> str:
        return str(self.start.get("run_id"))

    @property
    def model(self) -> str:
        return str(self.start.get("model"))

    @property
    def question(self) -> str:
        retry = self.start.get("retry") or {}
        return retry.get("question") if retry else (self.start.get("prompt") or "")

    @property
    def status(self) -> str:
        end = self.end
        return end.get("status", "unfinished") if end else "unfinished"

    @property
    def error(self) -> str | None:
        end = self.end
        return end.get("error") if end else None

    @property
    def usage(self) -> Usage:
        """This run's own usage plus its subagents' (not the retried prefix)."""
        end = self.end or {}
        return Usage.from_dict(end.get("usage") or {}) + Usage.from_dict(end.get("subagent_usage") or {})

    @property
    def own_start(self) -> int:
        """Index of the first message this run itself added (after a retry's re-used prefix)."""
        return len(self.start.get("history", [])) if self.start.get("retry") else self.question_index

    @property
    def run_messages(self) -> list[Message]:
        """The transcript from the question on."""
        return self.messages[self.question_index:]

    @property
    def answer(self) -> str:
        if self.status != "completed":
            return ""
        return next((m.text for m in reversed(self.run_messages) if m.role == "assistant"), "")

    @property
    def turns(self) -> int:
        """Model messages after the question (a retry's prefix included)."""
        return sum(1 for m in self.run_messages if m.role == "assistant")

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        results: dict[str, deque[ToolResultBlock]] = defaultdict(deque)
        calls: list[tuple[int, ToolUseBlock]] = []
        turn = 0
        for message in self.run_messages:
            if message.role == "assistant":
                turn += 1
                calls.extend((turn, use) for use in message.tool_uses)
            for result in message.tool_results:
                results[result.tool_use_id].append(result)
        out = []
        for turn, use in calls:
            result = results[use.id].popleft() if results[use.id] else None
            out.append(ToolCallRecord(turn=turn, id=use.id, name=use.name, input=use.input,
                                      result=result.content if result else "",
                                      is_error=result.is_error if result else True))
        return out


def load_run(path: "str | os.PathLike[str] | RecordedRun") -> RecordedRun:
    """Read a run log; a clear error when it is not one."""
    if isinstance(path, RecordedRun):
        return path
    records = read_log(path)
    start = next((r for r in records if r.get("type") == "run_start"), None)
    if start is None:
        raise ValueError(f"{path}: not a run log (no run_start record)")
    messages = [message_from_dict(m) for m in start.get("history", [])]
    retry = start.get("retry") or {}
    # A run's first appended message is its prompt; a retry's question lies in its history.
    question_index = int(retry["question_index"]) if retry else len(messages)
    for record in records:
        kind = record.get("type")
        if kind == "turn":
            messages.extend(message_from_dict(m) for m in record["request"]["messages_appended"])
            messages.append(message_from_dict(record["response"]["message"]))
        elif kind == "run_end":
            messages.extend(message_from_dict(m) for m in record.get("messages_appended", []))
    return RecordedRun(path=Path(path), records=records, messages=messages, question_index=question_index)


def first_difference(a: Sequence[Message], b: Sequence[Message]) -> int | None:
    """Index of the first message that differs (or where one list ends), else None."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


# --------------------------------------------------------------------------- replay


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
    """Adapter wrapper: plays the recording, then ends the run the way it ended."""

    def __init__(self, adapter: Any, run: RecordedRun) -> None:
        self._adapter = adapter
        self.model = adapter.model
        self._run = run
        self._left = len(run.turn_records)

    def _end(self) -> None:
        from harness_magic.core.providers.provider import ProviderError

        error = self._run.error or ""
        if self._run.status == "interrupted":
            raise KeyboardInterrupt
        if error.startswith("provider error: "):
            raise ProviderError(error[len("provider error: "):])
        raise ProviderError(f"replay: the recording ends here (status {self._run.status})")

    def complete(self, system: str, messages: Sequence[Message], tools: Sequence[Any],
                 on_text: Callable[[str], None] | None = None) -> Any:
        if self._left <= 0:
            self._end()
        self._left -= 1
        return self._adapter.complete(system, messages, tools, on_text=on_text)


def _stop_like_recording(run: RecordedRun) -> Callable[[Any], None]:
    from harness_magic.core.agent.loop import _Stop

    recorded_turns = len(run.turn_records)

    def check(live: Any) -> None:
        if live.turn >= recorded_turns and run.status not in ("completed", "interrupted", "error"):
            raise _Stop(run.status, run.error or run.status)

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
    """The replay's :class:`~harness_magic.core.agent.loop.RunResult` (its own log in ``run_file``)."""
    recorded: list[Message]
    """The recorded transcript."""
    replayed: list[Message]
    """The replayed transcript."""
    first_difference: int | None
    """Index of the first differing message, or None when identical."""

    @property
    def identical(self) -> bool:
        return self.first_difference is None


def live_tools_of(harness: Any) -> dict[str, Any]:
    """Options for :func:`replay_run` that re-run ``harness``'s tools under ``harness``'s guards.

    The tools, the cache, every tool guard (the connectors' approval policy,
    the budgets' tool-call and wall-time refusals) and every check (budgets
    between steps).
    """
    return {"tools": list(harness.tools), "cache": harness.cache,
            "tool_guards": list(getattr(harness, "_tool_guards", [])), "checks": list(getattr(harness, "_checks", []))}


def replay_run(
    log_path: "str | os.PathLike[str]",
    *,
    tools: Sequence[ToolSpec] | None = None,
    cache: Any | None = None,
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
    ``run_dir`` receives the replay's own log (a temporary folder by default).
    ``on_event`` receives the replay's events (live display).
    """
    from harness_magic.core.agent.loop import Harness
    from harness_magic.core.providers.offline import ReplayModel
    from harness_magic.core.providers.provider import ProviderAdapter

    run = load_run(log_path)
    adapter = ProviderAdapter(f"replay/{Path(log_path).name}", transport=ReplayModel(log_path))
    recorded_tools = _RecordedTools(run) if tools is None else None
    specs = recorded_tools.specs(run) if recorded_tools else list(tools or [])
    harness = Harness(
        _RecordedEnding(adapter, run),
        run.start.get("system", ""),
        specs,
        max_turns=int(run.start.get("max_turns") or 25),
        run_dir=str(run_dir) if run_dir is not None else tempfile.mkdtemp(prefix="harness-replay-"),
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


# --------------------------------------------------------------------------- retry


def checkpoint_messages(log_path: "str | os.PathLike[str] | RecordedRun", turn: int) -> list[Message]:
    """The transcript right before turn ``turn``'s model call, without that turn's reminders."""
    run = load_run(log_path)
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise ValueError(f"turn must be a positive integer, got {turn!r}")
    if turn > run.turns + (0 if run.status == "completed" else 1):
        raise ValueError(f"{run.path.name} has {run.turns} turns; cannot retry from turn {turn}")
    messages = list(run.messages)
    seen = 0
    cut = len(messages)
    for index in range(run.question_index, len(messages)):
        if messages[index].role == "assistant":
            seen += 1
            if seen == turn:
                cut = index
                break
    prefix = messages[:cut]
    last = prefix[-1]
    if last.role != "user":
        raise ValueError(f"{run.path.name}: no user message before turn {turn}")
    if last.tool_results:
        kept = tuple(b for b in last.content if isinstance(b, ToolResultBlock))
    else:
        kept = last.content[:1]  # the prompt; reminders were appended after it
    prefix[-1] = Message(role="user", content=kept)
    return prefix


def retry_from(
    log_path: "str | os.PathLike[str]",
    from_turn: int,
    harness: Any,
    *,
    run_id: str | None = None,
    session_id: str | None = None,
) -> Any:
    """Re-use the recorded transcript up to ``from_turn`` and let ``harness``'s model continue.

    The harness's conversation is replaced by the checkpoint; its model,
    tools, checks and reminders apply from turn ``from_turn`` on. The retry's
    log records ``run_start.retry`` (the retried run, the turn, the question).
    Returns the :class:`~harness_magic.core.agent.loop.RunResult`.
    """
    run = load_run(log_path)
    prefix = checkpoint_messages(run, from_turn)
    harness.set_history(prefix)
    saved_extra = getattr(harness, "_log_extra", None)
    if saved_extra is not None:
        harness._log_extra = {**saved_extra, "retry": {
            "of_run": run.run_id, "of_log": str(run.path), "from_turn": from_turn,
            "question": run.question, "question_index": run.question_index}}
    try:
        return harness.resume_result(run_id=run_id, session_id=session_id)
    finally:
        if saved_extra is not None:
            harness._log_extra = saved_extra


# --------------------------------------------------------------------------- diff


@dataclass(frozen=True)
class CallDiff:
    """One aligned pair of tool calls from two runs."""

    op: Literal["same", "result_changed", "changed", "added", "removed"]
    """``changed``: same position, different tool or arguments; ``added``: only in b."""
    a: ToolCallRecord | None
    b: ToolCallRecord | None

    def to_dict(self) -> dict[str, Any]:
        def side(call: ToolCallRecord | None) -> dict[str, Any] | None:
            if call is None:
                return None
            return {"turn": call.turn, "name": call.name, "input": call.input, "result": call.result,
                    "is_error": call.is_error}

        return {"op": self.op, "a": side(self.a), "b": side(self.b)}


@dataclass(frozen=True, repr=False)
class RunDiff:
    """What changed between two runs of the same question (IPython shows :meth:`text`)."""

    def __repr__(self) -> str:
        ops = [c.op for c in self.calls]
        return (f"RunDiff({self.a.run_id!r} vs {self.b.run_id!r}: identical={self.identical}, "
                f"calls={ {op: ops.count(op) for op in dict.fromkeys(ops)} }, answer_changed={self.answer_changed})")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    a: RecordedRun
    b: RecordedRun
    calls: tuple[CallDiff, ...]
    answer_diff: tuple[str, ...]
    """Unified diff lines of the final answers (empty when equal)."""
    first_divergence_turn: int | None
    """First turn whose model message differs, or None."""

    @property
    def same_question(self) -> bool:
        return self.a.question == self.b.question

    @property
    def answer_changed(self) -> bool:
        return self.a.answer != self.b.answer

    @property
    def identical(self) -> bool:
        return (not self.answer_changed and self.a.status == self.b.status
                and all(c.op == "same" for c in self.calls))

    def to_dict(self) -> dict[str, Any]:
        def summary(run: RecordedRun) -> dict[str, Any]:
            return {"run_id": run.run_id, "log": str(run.path), "model": run.model, "status": run.status,
                    "turns": run.turns, "tool_calls": len(run.tool_calls), "usage": run.usage.to_dict(),
                    "answer": run.answer}

        return {"a": summary(self.a), "b": summary(self.b), "same_question": self.same_question,
                "first_divergence_turn": self.first_divergence_turn, "answer_changed": self.answer_changed,
                "calls": [c.to_dict() for c in self.calls], "answer_diff": list(self.answer_diff)}

    def text(self) -> str:
        """A readable report."""
        lines = []
        for label, run in (("a", self.a), ("b", self.b)):
            usage = run.usage
            lines.append(f"{label}: run {run.run_id} [{run.model}] {run.status}, {run.turns} turns, "
                         f"{len(run.tool_calls)} tool calls, {usage.total_tokens} tokens "
                         f"({usage.cached_tokens} cached), ${usage.cost:.4f}")
        lines.append("question: same" if self.same_question
                     else f"question differs:\n  a: {_clip(self.a.question)}\n  b: {_clip(self.b.question)}")
        if self.first_divergence_turn is None:
            lines.append("model messages: identical")
        else:
            lines.append(f"first divergence: turn {self.first_divergence_turn}")
        lines.append("tool calls:")
        marks = {"same": "=", "result_changed": "~", "changed": "!", "added": "+", "removed": "-"}
        for call in self.calls:
            ref = call.a or call.b
            assert ref is not None
            head = f"  {marks[call.op]} {_call_text(ref, call.b if call.a is not None else None)}"
            if call.op == "same":
                lines.append(head)
            elif call.op == "result_changed":
                lines.append(head + "  (result changed)")
                lines.append(f"      a: {_result_text(call.a)}")
                lines.append(f"      b: {_result_text(call.b)}")
            elif call.op == "changed":
                lines.append(f"  ! a: {_call_text(call.a)}")
                lines.append(f"    b: {_call_text(call.b)}")
                lines.append(f"      a -> {_result_text(call.a)}")
                lines.append(f"      b -> {_result_text(call.b)}")
            else:
                side = "only in b" if call.op == "added" else "only in a"
                lines.append(f"{head}  ({side})")
                lines.append(f"      -> {_result_text(ref)}")
        if not self.calls:
            lines.append("  (none)")
        if self.answer_changed:
            lines.append("answer changed:")
            lines.extend("  " + line for line in self.answer_diff)
        else:
            lines.append("answer: same")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def _clip(text: str, limit: int = DIFF_VALUE_CHARS) -> str:
    """One line, head and tail kept (errors such as verification failures sit at the end)."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head] + " … " + text[-(limit - head - 3):]


def _call_text(call: ToolCallRecord | None, other: ToolCallRecord | None = None) -> str:
    if call is None:
        return "(none)"
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in call.input.items())
    turn = f"turn {call.turn}" if other is None or other.turn == call.turn else f"turn a{call.turn}/b{other.turn}"
    return f"{turn}: {call.name}({_clip(args)})"


def _result_text(call: ToolCallRecord | None) -> str:
    if call is None:
        return "(none)"
    return ("ERROR " if call.is_error else "") + _clip(call.result)


def diff_runs(log_a: "str | os.PathLike[str] | RecordedRun", log_b: "str | os.PathLike[str] | RecordedRun") -> RunDiff:
    """Compare two runs (their logs) of the same question."""
    a, b = load_run(log_a), load_run(log_b)
    calls_a, calls_b = a.tool_calls, b.tool_calls
    matcher = difflib.SequenceMatcher(a=[c.signature for c in calls_a], b=[c.signature for c in calls_b],
                                      autojunk=False)
    diffs: list[CallDiff] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for x, y in zip(calls_a[i1:i2], calls_b[j1:j2]):
                same = x.result == y.result and x.is_error == y.is_error
                diffs.append(CallDiff("same" if same else "result_changed", x, y))
            continue
        left, right = calls_a[i1:i2], calls_b[j1:j2]
        paired = min(len(left), len(right)) if op == "replace" else 0
        diffs.extend(CallDiff("changed", x, y) for x, y in zip(left[:paired], right[:paired]))
        diffs.extend(CallDiff("removed", x, None) for x in left[paired:])
        diffs.extend(CallDiff("added", None, y) for y in right[paired:])
    answer_diff = tuple(difflib.unified_diff(a.answer.splitlines(), b.answer.splitlines(), "a", "b", lineterm="",
                                             n=1)) if a.answer != b.answer else ()
    assistant_a = [m for m in a.run_messages if m.role == "assistant"]
    assistant_b = [m for m in b.run_messages if m.role == "assistant"]
    index = first_difference(assistant_a, assistant_b)
    return RunDiff(a=a, b=b, calls=tuple(diffs), answer_diff=answer_diff,
                   first_divergence_turn=None if index is None else index + 1)
