"""The engines' own estimates of a read before it runs, checked against the run's query and write budgets.

Contract (issue 34, point 4):

* A run's query budgets (:class:`QueryLimits`: ``max_query_rows``,
  ``max_query_cost``) reach the connectors of the harness it runs in through
  :func:`budget_for` (the control plane's budget guard registers them there;
  this plane never imports it). When one is set, a query tool asks its engine
  for the plan of the read WITHOUT running it (DuckDB ``EXPLAIN (FORMAT
  JSON)``, PostgreSQL ``EXPLAIN (FORMAT JSON)``, Spark ``EXPLAIN COST``) and
  calls :func:`gate_read` with the :class:`Estimate` before it reads a row.
* An estimate over a limit is asked about through the approval path (the
  request carries ``over_budget``; the policy asks the approver, and with no
  approver, as in a non-interactive run, the read is refused). The message
  names the estimate and the limit. A read whose plan the engine cannot make
  (a syntax error) fails with the engine's own error; an engine that gives no
  estimate (SQLite, a Spark plan without statistics) runs the read and its
  result says "no estimate".
* The estimate is the tool contract's cost and risk estimate: a line in the
  tool result (``rows ≈ N, cost ≈ C``) and a ``query_estimate`` event in the
  run log holding the engine, the numbers, the limits and the outcome, never
  the statement's values.
* ``max_write_operations`` bounds the writes the approval path approves in one
  run (:meth:`QueryBudget.write_refusal`, :meth:`QueryBudget.count_write`).

``rows`` is the most rows any step of the plan is estimated to handle (a scan
of a large table counts, whatever the query returns); ``cost`` is in the
engine's own unit: PostgreSQL's planner cost (the plan's ``Total Cost``),
Spark's estimated bytes (``sizeInBytes``); DuckDB gives no cost.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from harness_magic.core.execution.tools import ToolError

if TYPE_CHECKING:
    from harness_magic.core.execution.connectors.approval import ApprovalDecision, ApprovalRequest
    from harness_magic.core.execution.connectors.host import ConnectorHost

__all__ = ["ReadContext", "Estimate", "QueryLimits", "QueryBudget", "budget_for", "gate_read", "NO_ESTIMATE",
           "duckdb_plan_estimate", "postgres_plan_estimate", "spark_plan_estimate", "explain_target",
           "ESTIMATE_EVENT"]

NO_ESTIMATE = "no estimate"
"""What a result says when its engine gave no estimate (the read ran unchecked by the query budgets)."""
ESTIMATE_EVENT = "query_estimate"
"""The run log event recording an estimate and what it decided."""
_EXPLAIN_PREFIX = re.compile(
    r"\A\s*EXPLAIN\b(?P<options>\s*\([^)]*\)|(?:\s+(?:ANALY[SZ]E|VERBOSE|COSTS|BUFFERS|FORMAT\s+\w+))*)\s*"
    r"(?P<inner>.*)\Z", re.IGNORECASE | re.DOTALL)
"""A statement that is itself an EXPLAIN: its options and the statement it explains."""
_ANALYZE = re.compile(r"\bANALY[SZ]E\b", re.IGNORECASE)


class ReadContext(Protocol):
    """What :func:`gate_read` reads of a query tool's context (:class:`~.registry.ToolContext` is one)."""

    @property
    def harness(self) -> "ConnectorHost | None": ...
    @property
    def tool_name(self) -> str: ...
    @property
    def approve(self) -> "Callable[[ApprovalRequest], ApprovalDecision] | None": ...


@dataclass(frozen=True)
class Estimate:
    """What an engine's plan says a read will cost, before it runs."""

    engine: str
    """``duckdb``, ``postgresql`` or ``spark``."""
    rows: float | None
    """The most rows any step of the plan is estimated to handle; None: the plan gives no row estimate."""
    cost: float | None = None
    """The plan's cost in :attr:`cost_unit`; None: the engine gives none."""
    cost_unit: str = ""
    """``planner units`` (PostgreSQL) or ``bytes`` (Spark)."""
    note: str = ""
    """Why there are no numbers (e.g. a plain EXPLAIN reads no rows)."""

    @property
    def empty(self) -> bool:
        """Neither rows nor cost: the engine gave no estimate."""
        return self.rows is None and self.cost is None

    def line(self) -> str:
        """The tool contract's cost and risk line, e.g. ``Estimate (duckdb plan): rows ≈ 50,000,000, cost: none``."""
        if self.empty:
            return f"Estimate ({self.engine} plan): {self.note or NO_ESTIMATE}."
        rows = f"rows ≈ {_number(self.rows)}" if self.rows is not None else "rows: no estimate"
        cost = (f"cost ≈ {_number(self.cost)} {self.cost_unit}".rstrip() if self.cost is not None
                else "cost: none")
        return f"Estimate ({self.engine} plan, before running): {rows}, {cost}."

    def fields(self) -> dict[str, Any]:
        """The run log's fields for this estimate (numbers and names only)."""
        return {"engine": self.engine, "rows": self.rows, "cost": self.cost, "cost_unit": self.cost_unit or None}


def _number(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:,.2f}"


@dataclass(frozen=True)
class QueryLimits:
    """The query and write limits in force; None: no limit."""

    max_query_rows: int | None = None
    max_query_cost: float | None = None
    max_write_operations: int | None = None

    @property
    def checks_reads(self) -> bool:
        """A read budget is set, so reads are estimated first."""
        return self.max_query_rows is not None or self.max_query_cost is not None

    def tighter(self, other: "QueryLimits") -> "QueryLimits":
        """The stricter of the two for each limit."""
        def low(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else min(a, b)

        return QueryLimits(low(self.max_query_rows, other.max_query_rows),
                           low(self.max_query_cost, other.max_query_cost),
                           low(self.max_write_operations, other.max_write_operations))

    def over(self, estimate: Estimate) -> str | None:
        """Why ``estimate`` is over these limits (naming the estimate and the limit), else None."""
        found = []
        if self.max_query_rows is not None and estimate.rows is not None and estimate.rows > self.max_query_rows:
            found.append(f"rows ≈ {_number(estimate.rows)} over max_query_rows={self.max_query_rows:,}")
        if self.max_query_cost is not None and estimate.cost is not None and estimate.cost > self.max_query_cost:
            found.append(f"cost ≈ {_number(estimate.cost)} {estimate.cost_unit} over "
                         f"max_query_cost={_number(self.max_query_cost)}".replace("  ", " "))
        return "; ".join(found) or None


@dataclass
class QueryBudget:
    """The query and write limits of one harness (from every budget installed on it) and its runs' write count."""

    sources: list[Callable[[], QueryLimits]] = field(default_factory=list)
    """Each installed budget's current limits (read at every call: a cell's own budgets swap them)."""
    _writes: tuple[int, int] = (0, 0)
    """``(id of the run, approved writes in it)``."""
    _reads: tuple[int, int, float | None, float | None] = (0, 0, None, None)
    """``(id of the run, reads checked in it, largest row estimate, largest cost estimate)``."""
    reporting: bool = False
    """True once a subscriber reports this harness's budget use after each turn (``budgets.report_budgets``)."""

    def limits(self) -> QueryLimits:
        """The strictest of every source's limits."""
        found = QueryLimits()
        for source in self.sources:
            found = found.tighter(source())
        return found

    def writes(self, run: Any) -> int:
        """Writes approved so far in ``run`` (0 for a run not seen yet)."""
        return self._writes[1] if run is not None and self._writes[0] == id(run) else 0

    def count_write(self, run: Any, writes: int = 1) -> None:
        """Count ``writes`` approved writes (one by default) in ``run``."""
        if run is not None:
            self._writes = (id(run), self.writes(run) + writes)

    def count_read(self, run: Any, estimate: Estimate) -> None:
        """Count one read of ``run`` checked against the query budget, keeping the largest estimates."""
        if run is None:
            return
        _, reads, rows, cost = self._reads if self._reads[0] == id(run) else (0, 0, None, None)

        def larger(a: float | None, b: float | None) -> float | None:
            return b if a is None else a if b is None else max(a, b)

        self._reads = (id(run), reads + 1, larger(rows, estimate.rows), larger(cost, estimate.cost))

    def reads(self, run: Any) -> tuple[int, float | None, float | None]:
        """``(reads checked, largest row estimate, largest cost estimate)`` of ``run`` so far."""
        return self._reads[1:] if run is not None and self._reads[0] == id(run) else (0, None, None)

    def latest_writes(self) -> int:
        """Writes approved in the latest run that wrote (a subagent's, read when its run has ended)."""
        return self._writes[1]

    def write_refusal(self, run: Any) -> str | None:
        """Why another write may not run in ``run`` (its ``max_write_operations`` is spent), else None."""
        limit = self.limits().max_write_operations
        used = self.writes(run)
        if limit is not None and used >= limit:
            return (f"write budget exhausted: {used} approved write{'s' if used != 1 else ''} of "
                    f"max_write_operations={limit} in this run")
        return None


_BUDGETS: "weakref.WeakKeyDictionary[Any, QueryBudget]" = weakref.WeakKeyDictionary()


def budget_for(harness: Any) -> QueryBudget:
    """The :class:`QueryBudget` of ``harness`` (made on first use; it lives as long as the harness)."""
    budget = _BUDGETS.get(harness)
    if budget is None:
        budget = _BUDGETS[harness] = QueryBudget()
    return budget


def explain_target(sql: str) -> tuple[str | None, str]:
    """``(statement to estimate, note)`` for the text of one read statement.

    A statement that is itself a plain ``EXPLAIN`` reads no rows: ``(None,
    "an EXPLAIN without ANALYZE reads no rows")``. ``EXPLAIN ANALYZE`` runs
    the statement it explains, so that statement is estimated. Anything else
    is estimated as it is.
    """
    match = _EXPLAIN_PREFIX.match(sql)
    if match is None:
        return sql, ""
    if _ANALYZE.search(match.group("options") or ""):
        return match.group("inner"), "EXPLAIN ANALYZE runs the statement it explains: that statement is estimated"
    return None, "an EXPLAIN without ANALYZE reads no rows"


def gate_read(context: ReadContext, estimate: Callable[[], Estimate | None], engine: str) -> str:
    """Check a read against the run's query budgets before it runs; returns the line its result carries.

    ``estimate()`` asks the engine's plan (it raises ToolError with the
    engine's error when the plan cannot be made; None: the engine gives no
    estimate). Nothing is estimated and ``""`` returned when no read budget
    is set. Over a limit the read is asked about (``context.approve`` with
    ``over_budget``) and a refusal raises ToolError naming the estimate and
    the limit; nothing was read then.
    """
    harness = context.harness
    limits = budget_for(harness).limits() if harness is not None else QueryLimits()
    if not limits.checks_reads:
        return ""
    found = estimate() or Estimate(engine, None)
    reason = None if found.empty else limits.over(found)
    outcome = "no estimate" if found.empty else "within budget"
    decision = None
    if reason is not None:
        decision = _ask(context, found, reason)
        outcome = "approved" if decision.approved else "refused"
    _log(context, found, limits, outcome)
    if decision is not None and not decision.approved:
        raise ToolError(f"Not run: by its own plan the engine estimates this read over the query budget of this "
                        f"run ({reason}); {decision.reason}. No row was read. Filter, aggregate or LIMIT in SQL so the plan "
                        "handles fewer rows, or ask the user to raise the budget (--max-query-rows, "
                        "--max-query-cost).")
    line = found.line()
    if found.empty and not found.note:
        return f"{line} The read ran without a check against the query budget."
    return line + (" Over the query budget; the user approved it." if decision is not None else "")


def _ask(context: ReadContext, found: Estimate, reason: str) -> Any:
    from harness_magic.core.execution.connectors.approval import ApprovalDecision, ApprovalRequest

    if context.approve is None:
        return ApprovalDecision(False, "no approval path is installed")
    harness = context.harness
    run = harness.current_run if harness is not None else None
    use = run.current_tool_use if run is not None else None
    return context.approve(ApprovalRequest(
        tool=context.tool_name, connector=None, safety="read", arguments=dict(use.input) if use is not None else {},
        summary=f"{found.line()} Over the query budget: {reason}.", over_budget=reason,
        tool_use_id=use.id if use is not None else None))


def _log(context: ReadContext, found: Estimate, limits: QueryLimits, outcome: str) -> None:
    harness = context.harness
    run = harness.current_run if harness is not None else None
    if run is None:
        return
    use = run.current_tool_use
    if harness is not None:
        budget_for(harness).count_read(run, found)
    run.logger.write("event", event=ESTIMATE_EVENT, tool=context.tool_name, **found.fields(),
                     max_query_rows=limits.max_query_rows, max_query_cost=limits.max_query_cost, outcome=outcome,
                     tool_use_id=use.id if use is not None else None, turn=run.turn)


# -- reading the engines' plans ------------------------------------------------------------------------------


def _walk(nodes: Any, children: str) -> Iterable[dict[str, Any]]:
    stack = list(nodes) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.get(children) or ())


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def duckdb_plan_estimate(plan_json: str) -> Estimate:
    """The estimate in DuckDB's ``EXPLAIN (FORMAT JSON)`` physical plan: the largest ``Estimated Cardinality``."""
    rows = [_finite((node.get("extra_info") or {}).get("Estimated Cardinality"))
            for node in _walk(json.loads(plan_json), "children") if isinstance(node.get("extra_info"), dict)]
    known = [r for r in rows if r is not None]
    return Estimate("duckdb", max(known) if known else None)


def _parallel_share(workers: float) -> float:
    """How many participants share a parallel plan's rows: the workers and the leader's part (PostgreSQL's
    own divisor: the leader contributes ``1 - 0.3 * workers`` while that is positive)."""
    return workers + max(0.0, 1.0 - 0.3 * workers)


def postgres_plan_estimate(plan: Any) -> Estimate:
    """The estimate in PostgreSQL's ``EXPLAIN (FORMAT JSON)`` output (parsed or text): the largest ``Plan Rows``
    of any node (below a ``Gather``, rows are per participant: counted for all of them), and the top node's
    ``Total Cost`` (planner units)."""
    document = json.loads(plan) if isinstance(plan, (str, bytes)) else plan
    top = document[0]["Plan"] if isinstance(document, list) and document else {}
    known: list[float] = []
    stack: list[tuple[Any, float]] = [(top, 1.0)]
    while stack:
        node, share = stack.pop()
        if not isinstance(node, dict):
            continue
        rows = _finite(node.get("Plan Rows"))
        if rows is not None:
            known.append(rows * share)
        workers = _finite(node.get("Workers Planned"))
        below = _parallel_share(workers) if workers else share
        stack.extend((child, below) for child in node.get("Plans") or ())
    return Estimate("postgresql", round(max(known)) if known else None, _finite(top.get("Total Cost")),
                    "planner units")


_SPARK_STATS = re.compile(r"Statistics\(sizeInBytes=(?P<size>[0-9.]+(?:E[+-]?[0-9]+)?)\s*(?P<unit>[KMGTPE]i?B|B)?"
                          r"(?:, rowCount=(?P<rows>[0-9.]+(?:E[+-]?[0-9]+)?))?", re.IGNORECASE)
_SPARK_UNITS = {"B": 1, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50, "EIB": 2**60}


def spark_plan_estimate(plan: str) -> Estimate:
    """The estimate in Spark's ``EXPLAIN COST`` text: the optimized logical plan's statistics, the largest
    ``rowCount`` and ``sizeInBytes`` (bytes) of any operator. Spark's "unknown" size is its maximum long
    (8.0 EiB): read as no cost estimate."""
    optimized = plan.split("== Optimized Logical Plan ==")[-1].split("== Physical Plan ==")[0]
    sizes, rows = [], []
    for match in _SPARK_STATS.finditer(optimized):
        unit = (match.group("unit") or "B").upper()
        size = _finite(match.group("size"))
        if size is not None and unit in _SPARK_UNITS:
            sizes.append(size * _SPARK_UNITS[unit])
        count = _finite(match.group("rows")) if match.group("rows") else None
        if count is not None:
            rows.append(count)
    cost = max(sizes) if sizes else None
    if cost is not None and cost >= 8 * 2**60 * 0.999:  # Long.MaxValue: Spark does not know the size
        cost = None
    return Estimate("spark", max(rows) if rows else None, cost, "bytes")
