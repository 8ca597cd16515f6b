"""Run budgets: turns, tokens, cost, wall time and tool calls; the engines' estimates of each query; writes.

A :class:`Budgets` value is plain data. :meth:`Budgets.install` turns it into
a :class:`BudgetGuard` on a harness, which

* runs before every provider call (a harness *check*) and ends the run with a
  budget status when a limit is reached — the loop then answers any pending
  tool use, writes ``run_end`` and returns a :class:`~harness_magic.core.agent.result.RunResult`
  whose ``status`` names the budget;
* refuses further tool calls of the current turn once the tool-call or wall
  time budget is spent (a *tool guard*), so a turn asking for ten calls cannot
  overrun a budget of three. Refused calls get an error result, so the
  transcript stays consistent.

Limits are checked between steps: a single long tool call is not cut short
by the wall-time budget (the interpreter's own time limit bounds it).

The query budgets (``max_query_rows``, ``max_query_cost``) and the write
budget (``max_write_operations``) never end a run: installing them registers
them with the connectors of the harness
(:func:`~harness_magic.core.execution.connectors.estimates.budget_for`), which
ask each engine's plan before a read runs and refuse (or ask about) a read
estimated over them, and refuse a write once the run's approved writes reach
``max_write_operations`` (0: no write is approved in the run).

Token and cost budgets count subagent usage too when the loop reports it
(``run.child_usage``). A subagent started during a run gets at most what is
left of every budget installed on its parent (:func:`child_budgets`), and its
tool calls are added to the parent run's count.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol

from harness_magic.core.agent.result import StopRun
from harness_magic.core.agent.run import Check, ToolGuard
from harness_magic.core.agent.state import HarnessState, StateKey
from harness_magic.core.transcript.events import BudgetsUsed, TurnFinished
from harness_magic.core.transcript.messages import Usage

if TYPE_CHECKING:
    from harness_magic.core.execution.connectors.estimates import QueryLimits

__all__ = [
    "Budgets",
    "BudgetGuard",
    "BUDGET_STATUSES",
    "BUDGET_STATUS",
    "BUDGET_WARNING_FRACTION",
    "run_usage",
    "child_budgets",
    "installed_budgets",
    "BudgetHost",
    "check_limit",
    "MAX_LIMIT",
    "BUDGET_GUARDS",
    "QUERY_BUDGETS",
    "report_budgets",
]


class BudgetHost(Protocol):
    """What installing budgets needs of a harness (:class:`~harness_magic.core.agent.loop.Harness` is one)."""

    @property
    def state(self) -> HarnessState: ...
    def add_check(self, check: Check) -> None: ...
    def add_tool_guard(self, guard: ToolGuard) -> None: ...
    @property
    def current_run(self) -> Any: ...
    def emit(self, event: Any) -> None: ...
    def subscribe(self, handler: Callable[[Any], None]) -> Callable[[], None]: ...


BUDGET_GUARDS: "StateKey[list[BudgetGuard]]" = StateKey("budget_guards", list)
"""The budget guards installed on a harness (kept on it), so a subagent tool can find its parent's limits."""

BUDGET_STATUS = {
    "max_turns": "max_turns_exceeded",
    "max_tokens": "budget_tokens",
    "max_cost_usd": "budget_cost",
    "max_wall_s": "budget_wall_time",
    "max_tool_calls": "budget_tool_calls",
}
"""The :class:`~harness_magic.core.agent.result.RunResult` status each budget ends a run with."""
BUDGET_STATUSES = tuple(v for k, v in BUDGET_STATUS.items() if k != "max_turns")
"""Statuses added by budgets (``max_turns_exceeded`` belongs to the loop already)."""
BUDGET_WARNING_FRACTION = 0.8
"""Share of a budget after which the progress tracker tells the model to wrap up."""


def run_usage(run: Any) -> Usage:
    """Usage of ``run`` including what its subagents reported."""
    usage = run.usage
    child = getattr(run, "child_usage", None)
    return usage + child if child is not None else usage


QUERY_BUDGETS = ("max_query_rows", "max_query_cost", "max_write_operations")
"""Budgets checked by the connectors (each query's estimate, each approved write), never ending a run."""
MAX_LIMIT = 2**63 - 1
"""Largest per-run limit (64-bit counts; a larger or infinite one is a mistake: None means no limit)."""
_COUNTS = ("max_turns", "max_tokens", "max_tool_calls", "max_query_rows", "max_write_operations")
"""Limits that count (whole numbers); the others are amounts (USD, seconds)."""


def check_limit(value: Any, label: str, *, integer: bool, zero: bool = False) -> Any:
    """``value`` as a per-run limit: positive (or 0 where ``zero``) and finite, at most :data:`MAX_LIMIT` (an
    integer where ``integer``), or None (no limit); ValueError naming ``label`` and the value. The one rule for
    the budget settings, whether set on :class:`Budgets`, ``AgentConfig``, ``%config`` or a ``%%agent`` flag."""
    if value is None:
        return None
    kinds = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ValueError(f"{label} must be {'an integer' if integer else 'a number'} or None, got {shown}")
    if zero and value == 0:
        return value
    if not value > 0:  # NaN too
        raise ValueError(f"{label} must be {'0 or more' if zero else 'positive'} or None, got {value!r}")
    if value > MAX_LIMIT:  # infinity too
        raise ValueError(f"{label} must be at most {MAX_LIMIT:,} (None: no limit), got {value!r}")
    return value


@dataclass(frozen=True)
class Budgets:
    """Per-run limits; ``None`` means unlimited.

    A run stops before the provider call that would start once ``used >= limit``
    (for tool calls: once a call past the limit was refused).
    """

    max_turns: int | None = None
    """Provider calls per run (the harness's own ``max_turns`` applies as well)."""
    max_tokens: int | None = None
    """Total tokens (input, cached included, plus output) per run, subagents included."""
    max_cost_usd: float | None = None
    """USD per run from litellm's price table, subagents included (unknown models cost 0)."""
    max_wall_s: float | None = None
    """Seconds since the run started, checked between steps."""
    max_tool_calls: int | None = None
    """Tool calls dispatched per run. Calls past it are refused with an error result;
    the model still gets a turn to answer, and the run stops if it calls a tool again."""
    max_query_rows: int | None = None
    """Rows one query's plan may be estimated to handle (its largest step, scans included), asked of the engine
    before the query runs; over it the read asks first or is refused."""
    max_query_cost: float | None = None
    """The engine's own cost estimate one query may have (PostgreSQL planner units, Spark bytes)."""
    max_write_operations: int | None = None
    """Approved writes per run (governed ``execute`` calls); 0: none."""

    def __post_init__(self) -> None:
        for f in fields(self):
            check_limit(getattr(self, f.name), f.name, integer=f.name in _COUNTS,
                        zero=f.name == "max_write_operations")

    @property
    def active(self) -> dict[str, float]:
        """The limits that are set, by field name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def query_limits(self) -> QueryLimits:
        """The limits the connectors check (:data:`QUERY_BUDGETS`)."""
        from harness_magic.core.execution.connectors.estimates import QueryLimits  # the connectors: only when used

        return QueryLimits(self.max_query_rows, self.max_query_cost, self.max_write_operations)

    def merged(self, **overrides: Any) -> "Budgets":
        """A copy with the given limits replaced (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def used(self, run: Any) -> dict[str, float]:
        """What ``run`` has used against each budget field."""
        usage = run_usage(run)
        return {
            "max_turns": run.turn,
            "max_tokens": usage.total_tokens,
            "max_cost_usd": usage.cost,
            "max_wall_s": run.elapsed_s,
            "max_tool_calls": run.tool_calls,
        }

    def fractions(self, used: dict[str, float]) -> dict[str, float]:
        """Share of each active budget used (``used`` as from :meth:`used`)."""
        return {name: used[name] / limit for name, limit in self.active.items() if name in used}

    def exceeded(self, run: Any) -> tuple[str, str] | None:
        """``(status, reason)`` for the first budget ``run`` has spent, else None."""
        used = self.used(run)
        for name, limit in self.active.items():
            if name in QUERY_BUDGETS:  # checked by the connectors at each query and write
                continue
            # Tool calls past the limit are refused by the guard; the model keeps the turn
            # after its last allowed call to answer, and the run stops only if it calls again.
            spent = used[name] > limit if name == "max_tool_calls" else used[name] >= limit
            if spent:
                return BUDGET_STATUS[name], _reason(name, used[name], limit)
        return None

    def install(self, harness: BudgetHost) -> "BudgetGuard":
        """Enforce these budgets on every run of ``harness``; returns the guard (kept in ``harness.state``)."""
        from harness_magic.core.execution.connectors.estimates import budget_for

        guard = BudgetGuard(self)
        budget = budget_for(harness)
        budget.sources.append(lambda: guard.budgets.query_limits())
        harness.add_check(guard.check)
        harness.add_tool_guard(guard.tool_guard)
        harness.state.get(BUDGET_GUARDS).append(guard)
        if not budget.reporting:  # one report per turn however many budgets are installed
            budget.reporting = True
            harness.subscribe(lambda event: report_budgets(harness, event))
        return guard


def report_budgets(harness: BudgetHost, event: Any) -> None:
    """After each turn of a run with a query or write budget set, send what it used of them
    (:class:`~harness_magic.core.transcript.events.BudgetsUsed`: the run footer shows it)."""
    from harness_magic.core.execution.connectors.estimates import budget_for

    run = harness.current_run
    if not isinstance(event, TurnFinished) or run is None:
        return
    budget = budget_for(harness)
    limits = budget.limits()
    if not limits.checks_reads and limits.max_write_operations is None:
        return
    queries, rows, cost = budget.reads(run)
    harness.emit(BudgetsUsed(queries=queries, largest_rows=rows, max_query_rows=limits.max_query_rows,
                             largest_cost=cost, max_query_cost=limits.max_query_cost, writes=budget.writes(run),
                             max_write_operations=limits.max_write_operations))


def installed_budgets(harness: BudgetHost) -> list[Budgets]:
    """The budgets of every :class:`BudgetGuard` installed on ``harness`` (their current values)."""
    return [guard.budgets for guard in harness.state.peek(BUDGET_GUARDS) or ()]


def child_budgets(harness: BudgetHost, run: Any, *, reserve_tool_calls: int = 1) -> "tuple[Budgets, str | None]":
    """What is left of ``harness``'s budgets for a child started now in ``run``.

    Returns ``(budgets, None)``, or ``(Budgets(), reason)`` when a budget is
    already spent. ``reserve_tool_calls`` counts the call starting the child
    (not yet in ``run.tool_calls``). Turns are left to the caller (the
    harness's own ``max_turns`` bounds them).
    """
    limits: dict[str, Any] = {}  # Budgets' fields by name: ints for counts, floats for cost and time
    if run is None:
        return Budgets(), None
    for budgets in installed_budgets(harness):
        used = budgets.used(run)
        used["max_tool_calls"] += reserve_tool_calls
        for name, limit in budgets.active.items():
            if name == "max_turns":
                continue
            if name in ("max_query_rows", "max_query_cost"):  # per query: the child's queries get the same limit
                limits[name] = min(limits.get(name, limit), limit)
                continue
            if name == "max_write_operations":  # what the parent run has not approved yet (0 allowed)
                from harness_magic.core.execution.connectors.estimates import budget_for

                left = max(0, limit - budget_for(harness).writes(run))
                limits[name] = min(limits.get(name, left), left)
                continue
            left = limit - used[name]
            if left < 1 if name == "max_tool_calls" else left <= 0:
                return Budgets(), _reason(name, used[name], limit)
            limits[name] = min(limits.get(name, left), left)
    for name in ("max_tokens", "max_tool_calls"):
        if name in limits:
            limits[name] = max(1, int(limits[name]))
    return Budgets(**limits), None


def _reason(name: str, used: float, limit: float) -> str:
    what = {
        "max_turns": "turn limit reached",
        "max_tokens": "token budget exhausted",
        "max_cost_usd": "cost budget exhausted",
        "max_wall_s": "wall-time budget exhausted",
        "max_tool_calls": "tool-call budget exhausted",
    }[name]
    if name == "max_cost_usd":
        return f"{what}: ${used:.4f} used of {name}=${limit:g}"
    if name == "max_wall_s":
        return f"{what}: {used:.1f}s elapsed of {name}={limit:g}s"
    return f"{what}: {used:g} used of {name}={limit:g}"


class BudgetGuard:
    """Budgets installed on a harness; swap :attr:`budgets` to change them per run."""

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self._run: Any | None = None

    def check(self, run: Any) -> None:
        """Harness check: stop ``run`` with a budget status when a budget is spent."""
        self._run = run
        hit = self.budgets.exceeded(run)
        if hit is not None:
            raise StopRun(*hit)

    def tool_guard(self, spec: Any, use: Any) -> str | None:
        """Tool guard: refuse calls once the tool-call or wall-time budget is spent."""
        run = self._run
        if run is None:
            return None
        limit = self.budgets.max_tool_calls
        if limit is not None and run.tool_calls >= limit:
            return f"Not run: {_reason('max_tool_calls', run.tool_calls, limit)}. Give your answer now."
        wall = self.budgets.max_wall_s
        if wall is not None and run.elapsed_s >= wall:
            return f"Not run: {_reason('max_wall_s', run.elapsed_s, wall)}. Give your answer now."
        return None
