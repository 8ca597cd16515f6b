"""Diff two runs of the same question: tool calls, the run's state, final answer, status, turns and usage.

:func:`diff_runs` aligns the two runs' tool calls by name and arguments
(same / result changed / arguments changed / added / removed), compares the
two runs' states (:func:`~harness_magic.core.transcript.run_state.state_from_log`:
plan, assumptions, verification, questions, confidence and open questions) and
returns a :class:`RunDiff` with a readable :meth:`RunDiff.text`. Reads logs only.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Literal

from harness_magic.core.text.counts import count
from harness_magic.core.control.recorded import RecordedRun, ToolCallRecord, first_difference, load_run
from harness_magic.core.transcript.run_state import RunState, state_from_log

__all__ = ["CallDiff", "RunDiff", "diff_runs", "DIFF_VALUE_CHARS"]

DIFF_VALUE_CHARS = 300
"""Arguments and results are cut to this length in :meth:`RunDiff.text`; the structure keeps them whole."""


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
    state_a: RunState | None = None
    state_b: RunState | None = None
    """Each run's state as its log describes it."""

    @property
    def state_changes(self) -> dict[str, tuple[list[str], list[str]]]:
        """Per part of the state that differs (``plan``, ``assumptions``, ``verification``, ``questions``,
        ``confidence``, ``open questions``, ``skills``): (lines only in a, lines only in b)."""
        if self.state_a is None or self.state_b is None:
            return {}
        parts_a, parts_b = _state_parts(self.state_a), _state_parts(self.state_b)
        out = {}
        for part in parts_a:
            left, right = parts_a[part], parts_b[part]
            if left != right:
                out[part] = ([x for x in left if x not in right], [x for x in right if x not in left])
        return out

    @property
    def same_question(self) -> bool:
        return self.a.question == self.b.question

    @property
    def answer_changed(self) -> bool:
        return self.a.answer != self.b.answer

    @property
    def identical(self) -> bool:
        return (not self.answer_changed and self.a.status == self.b.status
                and all(c.op == "same" for c in self.calls) and not self.state_changes)

    def to_dict(self) -> dict[str, Any]:
        def summary(run: RecordedRun) -> dict[str, Any]:
            return {"run_id": run.run_id, "log": str(run.path), "model": run.model, "status": run.status,
                    "turns": run.turns, "tool_calls": len(run.tool_calls), "usage": run.usage.to_dict(),
                    "answer": run.answer}

        return {"a": summary(self.a), "b": summary(self.b), "same_question": self.same_question,
                "first_divergence_turn": self.first_divergence_turn, "answer_changed": self.answer_changed,
                "calls": [c.to_dict() for c in self.calls], "answer_diff": list(self.answer_diff),
                "state_changes": {k: {"a": a, "b": b} for k, (a, b) in self.state_changes.items()}}

    def text(self) -> str:
        """A readable report."""
        lines = []
        for label, run in (("a", self.a), ("b", self.b)):
            usage = run.usage
            lines.append(f"{label}: run {run.run_id} [{run.model}] {run.status}, {count(run.turns, 'turn')}, "
                         f"{count(len(run.tool_calls), 'tool call')}, {count(usage.total_tokens, 'token')} "
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
        changes = self.state_changes
        if self.state_a is not None and not changes:
            lines.append("state (plan, assumptions, verification, confidence): same")
        for part, (only_a, only_b) in changes.items():
            lines.append(f"{part} changed:")
            lines.extend(f"  - a: {_clip(x)}" for x in only_a)
            lines.extend(f"  + b: {_clip(x)}" for x in only_b)
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


def _state_parts(state: RunState) -> dict[str, list[str]]:
    """The comparable parts of a state, each as text lines (order kept)."""
    marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "blocked": "[!]"}
    trailer = state.trailer
    return {
        "plan": [f"{marks[p.status]} {p.id}. {p.title}" + (f" — {p.note}" if p.note else "") for p in state.plan],
        "assumptions": list(state.assumptions),
        "verification": [f"{'passed' if c.ok else 'FAILED'} {c.rule}"
                         + (f" on {re.sub(r'_[0-9]+$', '', c.handle)}" if c.handle else "")  # growth_2: growth
                         + (f": {c.detail}" if c.detail and not c.ok else "")
                         + (" (failed before)" if c.ok and c.failed_before else "") for c in state.checks],
        "questions": [f"{q.question} → {q.answer if q.answer is not None else '(no answer)'}" for q in state.questions],
        "skills": list(state.skills),
        "confidence": [f"{trailer.confidence}" + (f" — {trailer.reason}" if trailer.reason else "")]
        if trailer.confidence else [],
        "open questions": list(trailer.open_questions),
    }


def _state(run: RecordedRun) -> RunState:
    return state_from_log(run.records, run.tool_calls, run.question, run.answer, run.status)


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
                   first_divergence_turn=None if index is None else index + 1, state_a=_state(a), state_b=_state(b))
