"""Reading a run from its JSONL log: :class:`RecordedRun`, its tool calls, and checkpoints.

:func:`load_run` rebuilds the whole transcript from the log's records
(``run_start`` history, each ``turn``'s appended messages and response,
``run_end``'s last appended messages). Turns are counted from the question
(the run's prompt): turn *N* is the *N*-th model message after it; a retry's
log records what it retried (``run_start.retry``), so a retry of a retry
counts turns the same way. Nothing here runs a model or a tool.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness_magic.core.transcript.log import read_log
from harness_magic.core.transcript.messages import (
    Block,
    Message,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    message_from_dict,
)

__all__ = ["RecordedRun", "ToolCallRecord", "load_run", "first_difference", "checkpoint_messages", "LogLike"]

LogLike = "str | os.PathLike[str] | RecordedRun"
"""What the functions taking a run accept: a log path or an already loaded :class:`RecordedRun`."""


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
        if not retry:
            return self.start.get("prompt") or ""
        question = retry.get("question")  # replay_from_turn always records it; a hand-edited log may not
        return question if isinstance(question, str) else ""

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
            matched = results[use.id].popleft() if results[use.id] else None
            out.append(ToolCallRecord(turn=turn, id=use.id, name=use.name, input=use.input,
                                      result=matched.content if matched else "",
                                      is_error=matched.is_error if matched else True))
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
    kept: tuple[Block, ...]
    if last.tool_results:
        kept = tuple(b for b in last.content if isinstance(b, ToolResultBlock))
    else:
        kept = last.content[:1]  # the prompt; reminders were appended after it
    prefix[-1] = Message(role="user", content=kept)
    return prefix
