"""Deterministic context compaction: make a history fit the model's input window.

:func:`compact` is a pure function of the messages (same input, same output),
so the compacted history is a stable prefix that later requests extend: the
provider's prompt cache keeps working between compactions. Two stages, the
second only when the first is not enough:

1. **Older tool results** (all but the last :data:`KEEP_RECENT_MESSAGES`
   messages) longer than :data:`RESULT_KEEP_CHARS` are replaced by their first
   line — for a cached value, ``Saved as `handle``` — and, when the result holds
   one, its ``Snapshot:`` line cut to :data:`SNAPSHOT_KEEP_CHARS`. The value
   itself stays in the session cache under its handle.
2. **Older turns** are replaced by one summary block (what the user asked, what
   the assistant said last, which tools ran how often, which handles were
   announced), cut at a point where no tool use loses its result: the summary
   becomes the first user message, or is merged into the user prompt where the
   cut falls on one.

Every tool use keeps its result in the next message; the kept suffix is
untouched.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from harness_magic.core.transcript.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = ["compact", "CompactionReport", "KEEP_RECENT_MESSAGES", "COMPACTED_MARK", "SUMMARY_HEADER"]

KEEP_RECENT_MESSAGES = 6
"""The latest messages (about three tool rounds) are never compacted: the model is working with them."""
RESULT_KEEP_CHARS = 300
"""Older tool results up to this size are kept as they are; a handle line plus a short snapshot fits."""
SNAPSHOT_KEEP_CHARS = 240
"""Characters of a snapshot line kept in a compacted result (type, shape, columns)."""
SUMMARY_ITEM_CHARS = 300
"""Each prompt or answer quoted in a summary is cut to this many characters."""
SUMMARY_MAX_PROMPTS = 8
"""At most this many user prompts (the latest) are quoted in a summary."""
COMPACTED_MARK = "[compacted]"
"""Starts every compacted tool result (and makes compaction idempotent)."""
SUMMARY_HEADER = "[Summary of the earlier conversation, compacted to fit the model's context window]"
"""First line of a summary block."""

_HANDLE = re.compile(r"Saved as `([A-Za-z_][A-Za-z0-9_]*)`")

Estimator = Callable[[Sequence[Message]], int]


@dataclass(frozen=True)
class CompactionReport:
    """What one compaction did."""

    stage: str
    """``tool_results`` or ``summary``."""
    tokens_before: int
    tokens_after: int
    results_compacted: int
    """Tool results replaced by their handle/snapshot line."""
    messages_summarised: int
    """Messages replaced by the summary block (0 in the first stage)."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact_result(block: ToolResultBlock) -> ToolResultBlock:
    text = block.content
    if len(text) <= RESULT_KEEP_CHARS or text.startswith(COMPACTED_MARK):
        return block
    lines = text.splitlines()
    kept = [_cut(lines[0], RESULT_KEEP_CHARS)]
    snapshot = next((line for line in lines[1:] if line.startswith("Snapshot:")), None)
    if snapshot is not None:
        kept.append(_cut(snapshot, SNAPSHOT_KEEP_CHARS))
    note = f"{COMPACTED_MARK} {len(text)} characters cut; cached values are still available by handle"
    return ToolResultBlock(tool_use_id=block.tool_use_id, content="\n".join([note, *kept]), is_error=block.is_error)


def _stage_results(messages: Sequence[Message], keep: int) -> tuple[list[Message], int]:
    out, count = [], 0
    for index, message in enumerate(messages):
        if index >= len(messages) - keep or not message.tool_results:
            out.append(message)
            continue
        blocks = tuple(_compact_result(b) if isinstance(b, ToolResultBlock) else b for b in message.content)
        changed = sum(a is not b for a, b in zip(blocks, message.content))
        count += changed
        out.append(Message(role=message.role, content=blocks) if changed else message)
    return out, count


def _summary(removed: Sequence[Message]) -> str:
    prompts, answers, handles = [], [], []
    tools: Counter[str] = Counter()
    for message in removed:
        for block in message.content:
            if isinstance(block, TextBlock) and block.text.strip():
                if block.text.startswith(SUMMARY_HEADER):
                    prompts.append(block.text.splitlines()[-1] if block.text.splitlines() else "")
                elif message.role == "user":
                    prompts.append(block.text)
                else:
                    answers.append(block.text)
            elif isinstance(block, ToolUseBlock):
                tools[block.name] += 1
            elif isinstance(block, ToolResultBlock):
                for name in _HANDLE.findall(block.content):
                    if name not in handles:
                        handles.append(name)
    lines = [SUMMARY_HEADER, f"{len(removed)} earlier messages were replaced by this summary."]
    for prompt in prompts[-SUMMARY_MAX_PROMPTS:]:
        lines.append(f"- The user asked: {_cut(' '.join(prompt.split()), SUMMARY_ITEM_CHARS)}")
    if tools:
        lines.append("- Tool calls: " + ", ".join(f"{name} ×{n}" for name, n in sorted(tools.items())))
    if handles:
        lines.append("- Handles announced (still in the cache): " + ", ".join(handles))
    if answers:
        lines.append(f"- The assistant last said: {_cut(' '.join(answers[-1].split()), SUMMARY_ITEM_CHARS)}")
    return "\n".join(lines)


def _cut_points(messages: Sequence[Message], keep: int) -> list[int]:
    """Indexes where the kept suffix may start without splitting a tool use from its result."""
    points = []
    for index in range(1, max(1, len(messages) - keep + 1)):
        message = messages[index]
        if message.role == "assistant" or (message.role == "user" and not message.tool_results):
            points.append(index)
    return points


def _summarised(messages: Sequence[Message], cut: int) -> list[Message]:
    block = TextBlock(text=_summary(messages[:cut]))
    first = messages[cut]
    if first.role == "user":  # a prompt: the summary goes in front of it
        return [Message(role="user", content=(block, *first.content)), *messages[cut + 1 :]]
    return [Message(role="user", content=(block,)), *messages[cut:]]


def compact(messages: Sequence[Message], estimate: Estimator, target: int,
            keep_recent: int = KEEP_RECENT_MESSAGES) -> tuple[list[Message], CompactionReport | None]:
    """A history whose estimate is at most ``target`` tokens if compaction can get there.

    Returns the new list and a report, or the messages unchanged and None when
    nothing could be compacted. The result may still exceed ``target`` when the
    kept suffix alone does; the caller decides what that means.
    """
    before = estimate(messages)
    staged, count = _stage_results(messages, keep_recent)
    after = estimate(staged) if count else before
    if after <= target:
        if not count:
            return list(messages), None
        return staged, CompactionReport("tool_results", before, after, count, 0)
    points = _cut_points(staged, keep_recent)
    if not points:
        if not count:
            return list(messages), None
        return staged, CompactionReport("tool_results", before, after, count, 0)
    low, high = 0, len(points) - 1  # the earliest cut that fits (keeps the most), by bisection
    best = points[-1]
    while low <= high:
        middle = (low + high) // 2
        if estimate(_summarised(staged, points[middle])) <= target:
            best, high = points[middle], middle - 1
        else:
            low = middle + 1
    result = _summarised(staged, best)
    return result, CompactionReport("summary", before, estimate(result), count, best)
