"""After-tool verification: checks a user registers on result handles.

A :class:`Verifier` holds rules. Installed on a harness
(:meth:`Verifier.install`), it runs after every successful tool call on the
cache handles the call created (``ToolOutput.handles``), reading the values
from the session cache. Each rule selects handles by name (``"summary"``
matches ``summary`` and the cache's suffixed ``summary_2``; glob patterns such
as ``"sales_*"`` work too) and optionally by tool name.

When a check fails, the loop turns the tool's result into an error result
ending in ``Verification failed: ...`` with every failed check named, so the
model sees what is wrong and can fix it. Every verification (passed or
failed) is

* emitted as :class:`~harness_magic.core.transcript.events.VerificationChecked`, plus a
  warning :class:`~harness_magic.core.transcript.events.Notice` when it failed, and
* written to the run's JSONL log as an ``event`` record
  (``name="verification"``).

Built-in rules: :meth:`~Verifier.require_columns`, :meth:`~Verifier.no_nulls`,
:meth:`~Verifier.row_count`; anything else through :meth:`~Verifier.add_rule`
with a function ``value -> problem text | None``.

:meth:`~Verifier.require_citations` checks final answers instead of handles:
every cited source id (``[doc:...]``, ``[term:...]``) must have been returned
by a knowledge tool in the conversation, and a retrieved metric definition restated in
the answer must not leave out part of its formula. The answer is final, so a
failure is reported (event, log record, warning notice; handle
``final_answer``), not sent back to the model.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from harness_magic.core.text.counts import count
from harness_magic.core.transcript.events import AssistantMessage, Notice, VerificationChecked

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost

__all__ = ["Verifier", "Rule", "CheckOutcome", "handle_matches"]

_GLOB_CHARS = re.compile(r"[*?\[]")
FINAL_ANSWER = "final_answer"
"""The ``handle``/``tool`` name under which final-answer (citation) checks are reported."""


def _missing_columns(frame: Any, wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """(wanted columns the frame lacks, the frame's column names as strings)."""
    present = [str(c) for c in frame.columns]
    return [c for c in wanted if c not in present], present


def handle_matches(handle: str, pattern: str) -> bool:
    """True when ``handle`` is ``pattern``, a cache-suffixed ``pattern_N``, or matches the glob."""
    if _GLOB_CHARS.search(pattern):
        return fnmatch.fnmatchcase(handle, pattern)
    return handle == pattern or re.fullmatch(re.escape(pattern) + r"_\d+", handle) is not None


@dataclass(frozen=True)
class CheckOutcome:
    """One rule applied to one handle."""

    rule: str
    handle: str
    ok: bool
    detail: str = ""
    """The problem when not ``ok``."""


@dataclass(frozen=True)
class Rule:
    """A named check on the values of matching handles."""

    name: str
    """Shown to the model and in logs, e.g. ``require_columns(region, growth)``."""
    check: Callable[[Any], "str | None"]
    """``check(value) -> problem | None``; exceptions count as a failure."""
    handles: str = "*"
    """Handle name or glob the rule applies to."""
    tools: str = "*"
    """Tool name or glob the rule applies to."""

    def applies(self, tool: str, handle: str) -> bool:
        return fnmatch.fnmatchcase(tool, self.tools) and handle_matches(handle, self.handles)


def _is_table(value: Any) -> bool:
    return hasattr(value, "columns") and hasattr(value, "shape")


def _table_only(rule: str, explicit: bool, check: Callable[[Any], "str | None"]) -> Callable[[Any], "str | None"]:
    """Wrap a table check: non-tables fail when named explicitly, else the rule does not apply."""

    def wrapped(value: Any) -> str | None:
        if not _is_table(value):
            if explicit:
                return f"expected a table (DataFrame), got {type(value).__name__}"
            return _NOT_APPLICABLE
        return check(value)

    wrapped.__name__ = rule
    return wrapped


_NOT_APPLICABLE = "\x00n/a"


class Verifier:
    """After-tool checks on result handles; chainable builders return ``self``."""

    def __init__(self, rules: Sequence[Rule] = ()) -> None:
        self.rules: list[Rule] = list(rules)
        self.history: list[CheckOutcome] = []
        """Every outcome so far, in order."""
        self._harness: HarnessHost | None = None
        self.citations = False
        """Whether final answers are checked (:meth:`require_citations`)."""

    # -- building rules ------------------------------------------------------------------

    def add_rule(self, name: str, check: Callable[[Any], "str | None"], *, handles: str = "*",
                 tools: str = "*") -> "Verifier":
        """Register ``check(value) -> problem | None`` for matching handles."""
        if not callable(check):
            raise TypeError(f"check must be callable, got {check!r}")
        if not isinstance(handles, str) or not handles:
            raise ValueError(f"handles must be a handle name or glob, got {handles!r}")
        self.rules.append(Rule(name=name, check=check, handles=handles, tools=tools))
        return self

    def require_columns(self, columns: Sequence[str], *, handles: str = "*", tools: str = "*") -> "Verifier":
        """Matching table handles must have all of ``columns``."""
        wanted = _names(columns, "columns")
        name = f"require_columns({', '.join(wanted)})"

        def check(frame: Any) -> str | None:
            missing, present = _missing_columns(frame, wanted)
            if missing:
                return f"missing columns {missing}; it has {present[:20]}"
            return None

        return self.add_rule(name, _table_only(name, _explicit(handles), check), handles=handles, tools=tools)

    def no_nulls(self, columns: Sequence[str], *, handles: str = "*", tools: str = "*") -> "Verifier":
        """Matching table handles must have no nulls in ``columns`` (for example a key)."""
        wanted = _names(columns, "columns")
        name = f"no_nulls({', '.join(wanted)})"

        def check(frame: Any) -> str | None:
            missing, _ = _missing_columns(frame, wanted)
            if missing:
                return f"missing columns {missing} (needed for the null check)"
            counts = {c: int(frame[c].isna().sum()) for c in wanted}
            bad = {c: n for c, n in counts.items() if n}
            if bad:
                return "null values in " + ", ".join(f"{c} ({count(n, 'row')})" for c, n in bad.items())
            return None

        return self.add_rule(name, _table_only(name, _explicit(handles), check), handles=handles, tools=tools)

    def row_count(self, min_rows: int | None = None, max_rows: int | None = None, *, handles: str = "*",
                  tools: str = "*") -> "Verifier":
        """Matching table handles must have between ``min_rows`` and ``max_rows`` rows (inclusive)."""
        if min_rows is None and max_rows is None:
            raise ValueError("row_count needs min_rows, max_rows or both")
        if min_rows is not None and max_rows is not None and min_rows > max_rows:
            raise ValueError(f"min_rows={min_rows} is greater than max_rows={max_rows}")
        low = "" if min_rows is None else str(min_rows)
        high = "" if max_rows is None else str(max_rows)
        name = f"row_count({low}..{high})"

        def check(frame: Any) -> str | None:
            rows = int(frame.shape[0])
            if min_rows is not None and rows < min_rows:
                return f"{count(rows, 'row')}, fewer than min_rows={min_rows}"
            if max_rows is not None and rows > max_rows:
                return f"{count(rows, 'row')}, more than max_rows={max_rows}"
            return None

        return self.add_rule(name, _table_only(name, _explicit(handles), check), handles=handles, tools=tools)

    def require_citations(self) -> "Verifier":
        """Check final answers: cited ids retrieved in the run, retrieved definitions not contradicted."""
        self.citations = True
        return self

    # -- running --------------------------------------------------------------------------

    def install(self, harness: HarnessHost) -> "Verifier":
        """Run these checks after every tool call of ``harness`` (and on final answers)."""
        self._harness = harness
        harness.add_tool_validator(self.validate)
        harness.subscribe(self._on_event)
        return self

    def _on_event(self, event: Any) -> None:
        if not self.citations or not isinstance(event, AssistantMessage):
            return
        message = event.message
        if message.tool_uses or not message.text:
            return
        outcomes = self.check_answer(message.text)
        if not outcomes:
            return
        self.history.extend(outcomes)
        failed = [o for o in outcomes if not o.ok]
        harness = self._harness
        checks = [asdict(o) for o in outcomes]
        if harness is None:
            return
        harness.log_event("verification", tool_use_id="", tool=FINAL_ANSWER, passed=not failed, checks=checks)
        emit = harness.emit
        emit(VerificationChecked(turn=event.turn, tool_use_id="", tool=FINAL_ANSWER, passed=not failed,
                                 checks=tuple(checks)))
        if failed:
            emit(Notice(text="Citation check failed: " + "; ".join(o.detail for o in failed), level="warning"))

    def check_answer(self, text: str) -> list[CheckOutcome]:
        """Citation outcomes for ``text`` against what the current run retrieved."""
        from harness_magic.core.knowledge.citations import check_answer, retrieved_sources

        sources = retrieved_sources(self._harness) if self._harness is not None else {}
        return [CheckOutcome(rule=f.rule, handle=FINAL_ANSWER, ok=f.ok, detail=f.detail)
                for f in check_answer(text, sources)]

    def check_handle(self, tool: str, handle: str, value: Any) -> list[CheckOutcome]:
        """Apply every matching rule to ``value``; a rule added again under the same name, handles and tools (a
        configuration cell run twice) is applied once, as its latest definition."""
        latest: dict[tuple[str, str, str], Rule] = {}
        for rule in self.rules:
            latest[(rule.name, rule.handles, rule.tools)] = rule
        outcomes = []
        for rule in latest.values():
            if not rule.applies(tool, handle):
                continue
            try:
                problem = rule.check(value)
            except Exception as exc:  # a broken rule is a failed check, not a crashed run
                problem = f"the check raised {type(exc).__name__}: {exc}"
            if problem == _NOT_APPLICABLE:
                continue
            outcomes.append(CheckOutcome(rule=rule.name, handle=handle, ok=not problem, detail=problem or ""))
        return outcomes

    def validate(self, spec: Any, use: Any, output: Any) -> str | None:
        """Tool validator: ``problem text`` when a check failed on the output's handles."""
        harness = self._harness
        cache = harness.cache if harness is not None else None
        outcomes: list[CheckOutcome] = []
        for handle in getattr(output, "handles", None) or []:
            if not any(rule.applies(spec.name, handle) for rule in self.rules):
                continue
            try:
                if cache is None:  # not installed on a harness: no cache to read the handle from
                    raise LookupError("no cache: the verifier is not installed on a harness")
                value = cache.get(handle)
            # broad: reading a handle may run an engine query or read a spill file; the failure is this check's outcome
            except Exception as exc:
                outcomes.append(CheckOutcome(rule="readable", handle=handle, ok=False,
                                             detail=f"could not read the handle: {exc}"))
                continue
            outcomes.extend(self.check_handle(spec.name, handle, value))
        if not outcomes:
            return None
        self.history.extend(outcomes)
        failed = [o for o in outcomes if not o.ok]
        self._report(spec.name, use.id, outcomes, not failed)
        if not failed:
            return None
        lines = "; ".join(f"`{o.handle}` {o.rule}: {o.detail}" for o in failed)
        return f"{lines}. Fix the result and save it again under the same name."

    def _report(self, tool: str, tool_use_id: str, outcomes: list[CheckOutcome], passed: bool) -> None:
        harness = self._harness
        if harness is None:
            return
        turn = harness.current_turn
        checks = tuple(asdict(o) for o in outcomes)
        harness.log_event("verification", tool_use_id=tool_use_id, tool=tool, passed=passed, checks=list(checks))
        emit = harness.emit
        emit(VerificationChecked(turn=turn, tool_use_id=tool_use_id, tool=tool, passed=passed, checks=checks))
        if not passed:
            failed = ", ".join(f"{o.handle}: {o.rule}" for o in outcomes if not o.ok)
            emit(Notice(text=f"Verification failed ({failed}); the model was told to fix it.", level="warning"))


def _explicit(pattern: str) -> bool:
    return not _GLOB_CHARS.search(pattern)


def _names(columns: Sequence[str], what: str) -> list[str]:
    if isinstance(columns, str):
        columns = [columns]
    names = [str(c) for c in columns]
    if not names:
        raise ValueError(f"{what} must name at least one column")
    return names
