"""The ``plan`` tool: the model's own short list of steps and their statuses.

:class:`Planner` is plain state (items with an id, a title, a status and a
note); :meth:`Planner.tool` binds it into a :class:`~harness_magic.core.execution.tools.ToolSpec`.
The tool's result is the rendered plan, so the model always sees the whole
list after a change. The progress tracker in
:mod:`harness_magic.core.control.reminders` treats a successful ``add`` or ``update``
as progress.

The plan lives with the conversation: it survives across runs of one session
and is cleared by :meth:`Planner.clear` (a new conversation). A run that
completes (the model gave its answer) closes the steps it left in progress
(:meth:`Planner.finish_run`): the answer is that step's end, and the plan the
next run sees, and the state panel shows, must not say it is still under way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from harness_magic.core.execution.tools import ToolError, ToolSpec
from harness_magic.core.transcript.events import RunFinished

__all__ = ["Planner", "PlanItem", "PLAN_STATUSES", "PLAN_ACTIONS", "PLAN_TOOL_NAME", "MAX_PLAN_ITEMS",
           "MAX_TITLE_CHARS"]

PLAN_STATUSES = ("pending", "in_progress", "done", "blocked")
"""Statuses a plan item can have."""
PLAN_ACTIONS = ("add", "update", "list")
"""What the ``plan`` tool can do."""
PLAN_TOOL_NAME = "plan"
MAX_PLAN_ITEMS = 30
"""A plan longer than this is a backlog, not a plan; it would also bloat every result."""
MAX_TITLE_CHARS = 200
"""Titles and notes are cut to this length so the rendered plan stays small."""

_MARK = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "blocked": "[!]"}


@dataclass
class PlanItem:
    """One step of the plan."""

    id: int
    """1-based, stable for the life of the plan."""
    title: str
    """What the step is."""
    status: str = "pending"
    """One of :data:`PLAN_STATUSES`."""
    note: str = ""
    """Why it is blocked, what was found, ..."""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "status": self.status, "note": self.note}


def _check_status(status: str) -> str:
    if status not in PLAN_STATUSES:
        raise ToolError(f"status {status!r} is not valid; use one of: {', '.join(PLAN_STATUSES)}")
    return status


def _clip(text: Any, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ToolError(f"{what} must be a non-empty string")
    text = " ".join(text.split())
    return text if len(text) <= MAX_TITLE_CHARS else text[: MAX_TITLE_CHARS - 1] + "…"


class Planner:
    """Plan state plus the ``plan`` tool over it."""

    def __init__(self) -> None:
        self.items: list[PlanItem] = []
        self.version = 0
        """Incremented on every change (add or update)."""

    # -- state ----------------------------------------------------------------------

    def add(self, title: str, status: str = "pending", note: str = "") -> PlanItem:
        """Append an item; raises :class:`ToolError` for a bad status or a full plan."""
        _check_status(status)
        if len(self.items) >= MAX_PLAN_ITEMS:
            raise ToolError(f"the plan already has {MAX_PLAN_ITEMS} items; update existing ones instead")
        item = PlanItem(id=len(self.items) + 1, title=_clip(title, "title"), status=status,
                        note=_clip(note, "note") if note else "")
        self.items.append(item)
        self.version += 1
        return item

    def update(self, item_id: int, *, status: str | None = None, note: str | None = None,
               title: str | None = None) -> PlanItem:
        """Change an item's status, note or title."""
        item = self.get(item_id)
        if status is None and note is None and title is None:
            raise ToolError("update needs at least one of: status, note, title")
        if status is not None:
            item.status = _check_status(status)
        if note is not None:
            item.note = _clip(note, "note") if note else ""
        if title is not None:
            item.title = _clip(title, "title")
        self.version += 1
        return item

    def get(self, item_id: Any) -> PlanItem:
        if isinstance(item_id, bool) or not isinstance(item_id, int):
            raise ToolError(f"item_id must be an integer, got {item_id!r}")
        for item in self.items:
            if item.id == item_id:
                return item
        known = ", ".join(str(i.id) for i in self.items) or "none yet"
        raise ToolError(f"no plan item {item_id}; known ids: {known}")

    def finish_run(self, event: Any) -> None:
        """Event handler (``harness.subscribe``): when a run finishes ``completed``, its in-progress steps are
        done; other endings (turn or budget limit, error, interrupt) leave them in progress, as they are."""
        if isinstance(event, RunFinished) and event.result.status == "completed":
            for item in self.items:
                if item.status == "in_progress":
                    item.status = "done"
                    self.version += 1

    def clear(self) -> None:
        """Forget the plan (a new conversation)."""
        self.items = []
        self.version += 1

    def state(self) -> tuple[PlanItem, ...]:
        """A copy of the plan as it is now (for :meth:`restore`)."""
        return tuple(replace(item) for item in self.items)

    def restore(self, state: Sequence[PlanItem]) -> None:
        """Put back a plan from :meth:`state` (a re-run cell starts from the plan its previous run found)."""
        self.items = [replace(item) for item in state]
        self.version += 1

    def counts(self) -> dict[str, int]:
        return {status: sum(1 for i in self.items if i.status == status) for status in PLAN_STATUSES}

    def render(self) -> str:
        """The plan as short text lines, e.g. ``2. [~] Compute growth``."""
        if not self.items:
            return "The plan is empty. Add steps with plan(action='add', titles=[...])."
        lines = [f"{i.id}. {_MARK[i.status]} {i.title}" + (f" — {i.note}" if i.note else "") for i in self.items]
        counts = self.counts()
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return "Plan (" + summary + "):\n" + "\n".join(lines)

    def to_dict(self) -> list[dict[str, Any]]:
        return [i.to_dict() for i in self.items]

    # -- the tool -------------------------------------------------------------------------

    def handle(self, action: str, titles: list[str] | None = None, title: str | None = None,
               item_id: int | None = None, status: str | None = None, note: str | None = None) -> str:
        """The ``plan`` tool's handler; returns the rendered plan."""
        if action == "add":
            new = list(titles or [])
            if title:
                new.append(title)
            if not new:
                raise ToolError("add needs `titles` (a list of steps) or `title`")
            for text in new:
                self.add(text, status or "pending", note or "")
        elif action == "update":
            if item_id is None:
                raise ToolError("update needs `item_id`")
            self.update(item_id, status=status, note=note, title=title)
        elif action != "list":
            raise ToolError(f"action {action!r} is not valid; use one of: {', '.join(PLAN_ACTIONS)}")
        return self.render()

    def tool(self) -> ToolSpec:
        """The bound ``plan`` tool."""
        return ToolSpec(
            name=PLAN_TOOL_NAME,
            description=(
                "Keep a short plan for the task. action='add' with titles=[...] adds steps; "
                "action='update' with item_id and status (pending, in_progress, done, blocked) and an "
                "optional note records progress; action='list' shows the plan. Update it as you work."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": list(PLAN_ACTIONS)},
                    "titles": {"type": "array", "items": {"type": "string"}, "description": "Steps to add."},
                    "title": {"type": "string", "description": "One step to add, or a new title on update."},
                    "item_id": {"type": "integer", "description": "Id of the step to update."},
                    "status": {"type": "string", "enum": list(PLAN_STATUSES)},
                    "note": {"type": "string", "description": "What was found, or why a step is blocked."},
                },
                "required": ["action"],
            },
            handler=self.handle,
        )
