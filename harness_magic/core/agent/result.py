"""What a run ends with: :class:`RunResult`, the statuses, and the exceptions around a run.

:class:`StopRun` is the control signal a check raises to end a run with a
status (budgets, replay); the loop turns it into a :class:`RunResult`, it never
reaches the caller. :class:`PromptTooLarge` is raised before a run starts;
:class:`MaxTurnsExceeded` only by the text-returning ``run``/``ask``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness_magic.core.text.counts import count
from harness_magic.core.transcript.messages import Message, Usage

__all__ = ["RunResult", "RUN_STATUSES", "NO_ANSWER_TEXT", "StopRun", "MaxTurnsExceeded", "PromptTooLarge"]

RUN_STATUSES = ("completed", "max_turns_exceeded", "error", "interrupted")
"""Statuses a run can end with (budget statuses are added by the control plane)."""
NO_ANSWER_TEXT = "(The model ended the run without writing an answer.)"
"""``RunResult.text`` of a completed run whose model wrote no text at all."""


class PromptTooLarge(ValueError):
    """A prompt that alone does not fit the model's input window; refused before anything is sent."""

    def __init__(self, tokens: int, limit: int, model: str) -> None:
        super().__init__(f"the prompt is about {tokens:,} tokens, over the {limit:,}-token input window of "
                         f"{model!r}: nothing was sent. Put large data in the cache (--in NAME) and refer to "
                         "it by handle instead of pasting it.")
        self.tokens = tokens
        self.limit = limit


class MaxTurnsExceeded(Exception):
    """Raised by :meth:`Harness.run` / :meth:`Harness.ask` when the turn limit is hit."""

    def __init__(self, turns: int) -> None:
        super().__init__(f"the run stopped after {count(turns, 'turn')} without a final answer")
        self.turns = turns


class StopRun(Exception):
    """Raised by a check (``Harness.add_check``) to end the run in progress with ``status``.

    The loop answers any open tool uses, logs ``run_end`` and returns a
    :class:`RunResult` with this ``status`` and ``reason`` as its error.
    """

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class RunResult:
    """Outcome of one run (one prompt and the turns it took)."""

    status: str
    """One of :data:`RUN_STATUSES` or a budget status such as ``budget_cost``."""
    text: str
    """Final model text (empty when the run did not complete)."""
    turns: int
    """Provider calls made in this run."""
    usage: Usage = field(default_factory=Usage)
    """Tokens (cached included) and cost summed over the run."""
    run_id: str | None = None
    session_id: str | None = None
    run_file: str | None = None
    """Path of the JSONL log of this run."""
    error: str | None = None
    """Readable reason when ``status`` is not ``completed``."""
    model: str | None = None
    elapsed_s: float = 0.0
    handles: tuple[str, ...] = ()
    """Cache handles created during the run, in order."""
    messages: tuple[Message, ...] = ()
    """The whole transcript after the run."""
    charts: tuple[str, ...] = ()
    """Base64 PNG charts drawn during the run, in order."""
    subagent_usage: Usage = field(default_factory=Usage)
    """Usage reported by subagents of this run (``add_child_usage``); not in ``usage``."""
    rolled_back: bool = False
    """True when the run failed before the model answered and its prompt was taken out of the history."""

    @property
    def total_usage(self) -> Usage:
        """``usage`` plus ``subagent_usage``: what the run cost in all."""
        return self.usage + self.subagent_usage

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def __repr__(self) -> str:
        return (
            f"RunResult(status={self.status!r}, turns={self.turns}, tokens={self.usage.total_tokens}, "
            f"cost=${self.usage.cost:.4f}, run_id={self.run_id!r})"
        )
