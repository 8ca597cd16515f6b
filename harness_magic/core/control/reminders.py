"""Progress tracking and escalating suffix reminders.

:class:`ProgressTracker` subscribes to the loop's events and registers one
reminder hook (``harness.register_reminder``). The loop appends what the
hook returns to the conversation *suffix* (the last user message), records it
in the turn's log record (``request.reminders``) and emits
:class:`~harness_magic.core.transcript.events.ReminderAdded`. Nothing here can touch the
system prompt.

Signals of no progress, each with an escalation ladder (a reminder fires when
a signal first reaches a level, not on every turn):

* **no plan update** — :data:`NO_PLAN_TURNS` consecutive turns with tool calls
  but no successful ``plan`` add/update (only when a planner is tracked);
  levels at 1×, 2×, 3× the threshold;
* **failing calls** — :data:`FAILURE_STREAK` consecutive failing tool calls,
  escalating at 2× and 3×;
* **repeated call** — the same tool with the same arguments
  :data:`REPEAT_STREAK` times in a row, escalating on each further repeat.

And two wrap-up warnings: the **final turn** (``turn == max_turns``: answer
now, no more tools) and, when budgets are given, a **budget** warning once
any budget passes :data:`~harness_magic.core.control.budgets.BUDGET_WARNING_FRACTION`.

State resets at the start of each run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness_magic.core.control.budgets import BUDGET_WARNING_FRACTION, Budgets
from harness_magic.core.control.planner import PLAN_TOOL_NAME
from harness_magic.core.transcript.events import Event, RunStarted, ToolCallFinished, TurnFinished, TurnStarted

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost

__all__ = [
    "ProgressTracker",
    "NO_PLAN_TURNS",
    "FAILURE_STREAK",
    "REPEAT_STREAK",
    "MAX_LEVEL",
    "REMINDER_PREFIX",
]

NO_PLAN_TURNS = 3
"""Turns of tool work without a plan update before the first nudge; short tasks never see it."""
FAILURE_STREAK = 2
"""Consecutive failing tool calls before a nudge: one failure is normal, two means a rethink."""
REPEAT_STREAK = 2
"""Identical consecutive calls before a nudge: a repeated call returns the same result."""
MAX_LEVEL = 3
"""Escalation stops at this level; the text of the last level repeats no further."""
REMINDER_PREFIX = "[harness reminder]"
"""Marks harness text in the suffix so the model (and a reader) can tell it from the user."""

_PLAN_TEXT = {
    1: "No plan update for {n} turns. Use the plan tool to record what is done and what comes next.",
    2: ("No plan update for {n} turns; you may be going in circles. Update the plan now: mark finished "
        "steps done, mark stuck steps blocked with a note, and pick a different next step."),
    3: ("No recorded progress for {n} turns. Stop exploring: update the plan, then give the best answer "
        "you can with what you have, saying clearly what is missing."),
}
_FAIL_TEXT = {
    1: "Your last {n} tool calls failed. Read the error messages and change the approach before retrying.",
    2: ("{n} tool calls in a row have failed. Do not retry the same thing: inspect the inputs (columns, "
        "dtypes, handle names) with a small call, then fix the cause."),
    3: ("{n} consecutive failures. Stop retrying. Mark the step blocked in the plan with the reason and "
        "answer with what you have, or explain what you need from the user."),
}
_REPEAT_TEXT = {
    1: "You called {name} with the same arguments {n} times in a row; the result will not change.",
    2: "{n} identical {name} calls in a row. Use the result you already have or try something different.",
    3: "Stop repeating {name} ({n} identical calls). Answer now with the results you have.",
}
_FINAL_TEXT = ("This is the final turn ({turn}/{max_turns}): give your final answer now in plain text. "
               "Tool calls made now will not get another turn.")
_BUDGET_TEXT = ("{pct:.0f}% of the {what} budget is used. Wrap up: finish the current step and give your "
                "answer soon.")
_BUDGET_WHAT = {"max_tokens": "token", "max_cost_usd": "cost", "max_wall_s": "time",
                "max_tool_calls": "tool-call", "max_turns": "turn"}


def _level(count: int, threshold: int) -> int:
    return min(count // threshold, MAX_LEVEL) if count >= threshold else 0


@dataclass
class _State:
    turns_without_plan: int = 0
    plan_level: int = 0
    failures: int = 0
    fail_level: int = 0
    last_call: tuple[str, str] | None = None
    repeats: int = 0
    repeat_level: int = 0
    plan_updated_this_turn: bool = False
    tools_this_turn: bool = False
    tool_calls: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    started: float = field(default_factory=time.monotonic)
    budget_warned: bool = False


class ProgressTracker:
    """Watches a run's events and returns escalating reminders before each call.

    ``track_plan`` enables the no-plan-update signal (use it when the ``plan``
    tool is offered). ``budgets`` enables the wrap-up warning.
    """

    def __init__(self, *, track_plan: bool = True, budgets: Budgets | None = None,
                 plan_tool: str = PLAN_TOOL_NAME) -> None:
        self.track_plan = track_plan
        self.budgets = budgets
        self.plan_tool = plan_tool
        self.state = _State()
        self.sent: list[tuple[int, str]] = []
        """``(turn, text)`` of every reminder returned, for inspection."""

    def install(self, harness: HarnessHost) -> "ProgressTracker":
        """Subscribe to ``harness`` events and register the reminder hook."""
        harness.subscribe(self.on_event)
        harness.register_reminder(self.reminder)
        return self

    # -- events ------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.state = _State()
        elif isinstance(event, TurnStarted):
            self.state.plan_updated_this_turn = False
            self.state.tools_this_turn = False
        elif isinstance(event, ToolCallFinished):
            self._on_tool(event)
        elif isinstance(event, TurnFinished):
            state = self.state
            state.total_tokens = event.total_usage.total_tokens
            state.cost = event.total_usage.cost
            if state.plan_updated_this_turn:
                state.turns_without_plan, state.plan_level = 0, 0
            elif state.tools_this_turn:
                state.turns_without_plan += 1

    def _on_tool(self, event: ToolCallFinished) -> None:
        state = self.state
        use, result = event.tool_use, event.result
        state.tools_this_turn = True
        state.tool_calls += 1
        if result.is_error:
            state.failures += 1
        else:
            state.failures, state.fail_level = 0, 0
        if (use.name == self.plan_tool and not result.is_error
                and use.input.get("action") in ("add", "update")):
            state.plan_updated_this_turn = True
        signature = (use.name, json.dumps(use.input, sort_keys=True, default=str))
        if signature == state.last_call:
            state.repeats += 1
        else:
            state.last_call, state.repeats, state.repeat_level = signature, 1, 0

    # -- the hook ----------------------------------------------------------------------

    def reminder(self, turn: int, max_turns: int) -> str | None:
        """Reminder hook: the reminders due before provider call ``turn``, joined, or None."""
        state = self.state
        parts: list[str] = []
        if self.track_plan:
            level = _level(state.turns_without_plan, NO_PLAN_TURNS)
            if level > state.plan_level:
                state.plan_level = level
                parts.append(_PLAN_TEXT[level].format(n=state.turns_without_plan))
        level = _level(state.failures, FAILURE_STREAK)
        if level > state.fail_level:
            state.fail_level = level
            parts.append(_FAIL_TEXT[level].format(n=state.failures))
        repeat_level = min(state.repeats - REPEAT_STREAK + 1, MAX_LEVEL) if state.repeats >= REPEAT_STREAK else 0
        if repeat_level > state.repeat_level and state.last_call is not None:
            state.repeat_level = repeat_level
            parts.append(_REPEAT_TEXT[repeat_level].format(name=state.last_call[0], n=state.repeats))
        if self.budgets is not None and self.budgets.max_turns is not None:
            max_turns = min(max_turns, self.budgets.max_turns)
        if turn == max_turns and max_turns > 1:
            parts.append(_FINAL_TEXT.format(turn=turn, max_turns=max_turns))
        else:
            budget = self._budget_warning(turn)
            if budget:
                parts.append(budget)
        if not parts:
            return None
        text = "\n".join(f"{REMINDER_PREFIX} {p}" for p in parts)
        self.sent.append((turn, text))
        return text

    def _budget_warning(self, turn: int) -> str | None:
        state = self.state
        if self.budgets is None or state.budget_warned:
            return None
        used = {"max_turns": turn - 1, "max_tokens": state.total_tokens, "max_cost_usd": state.cost,
                "max_wall_s": time.monotonic() - state.started, "max_tool_calls": state.tool_calls}
        fractions = self.budgets.fractions(used)
        if not fractions:
            return None
        name, fraction = max(fractions.items(), key=lambda kv: kv[1])
        if fraction < BUDGET_WARNING_FRACTION:
            return None
        state.budget_warned = True
        return _BUDGET_TEXT.format(pct=min(fraction, 1.0) * 100, what=_BUDGET_WHAT[name])
