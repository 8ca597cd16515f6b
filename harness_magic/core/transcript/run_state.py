"""The run's state, folded from its events: goal, plan, waits, verification, assumptions, confidence.

Contract: :class:`RunState` is plain data. :meth:`RunState.apply` folds one
event (unknown events are ignored); :func:`state_from_log` rebuilds the same
state from a run's JSONL records (``event`` records and the transcript's tool
calls), so a run and its retry can be compared (``%agent_diff``). Views render
it above the transcript (:meth:`RunState.lines` is the text form); nothing here
displays anything.

Where each part comes from:

* goal: the run's prompt (:class:`~.events.RunStarted`);
* plan: the rendered plan the ``plan`` tool returns (the whole list, after each change);
* pending approvals and questions: :class:`~.events.ApprovalStep` / :class:`~.events.QuestionStep`
  still asking; answered questions are kept with their answer, who answered and the wait;
* verification: every :class:`~.events.VerificationChecked` check, the latest outcome per rule and handle
  (a handle saved again under the cache's ``_N`` suffix counts as the same, with "failed before");
* assumptions: :class:`~.events.AssumptionRecorded` (from a log: ``remember(kind="assumption")`` calls);
* skills: :class:`~.events.SkillLoaded`;
* confidence and open questions: the **trailer** of the final answer (:func:`parse_trailer`)::

      Confidence: medium — the Monday-based week is assumed
      Open questions:
      - Should bots count as active users?

  The trailer is the answer's last block: only ``Confidence:``, ``Open questions:``, list items and
  blank lines may follow it, so a "Confidence:" line in the middle of an answer is not taken for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal

__all__ = [
    "RunState",
    "PlanStep",
    "CheckState",
    "QuestionState",
    "Trailer",
    "parse_trailer",
    "parse_plan",
    "state_from_log",
    "CONFIDENCE_LEVELS",
    "TRAILER_SCAN_CHARS",
    "MAX_OPEN_QUESTIONS",
    "STATE_TEXT_CHARS",
    "CONFIDENCE_REQUEST",
]

CONFIDENCE_LEVELS = ("high", "medium", "low")
"""What ``Confidence:`` may say; anything else is not a trailer."""
TRAILER_SCAN_CHARS = 4000
"""Only the answer's tail is scanned for the trailer: parsing stays linear and bounded on any answer."""
MAX_OPEN_QUESTIONS = 10
"""Open questions kept from a trailer; more is a list of doubts, not a trailer."""
STATE_TEXT_CHARS = 300
"""Each goal, step, assumption, question or reason is cut to this many characters (one line) in the state."""
MAX_STATE_ITEMS = 50
"""Assumptions, questions and checks kept per run: the panel is a summary, the transcript has the rest."""
CONFIDENCE_REQUEST = (
    "[harness reminder] End your final answer with a trailer the notebook shows as the run's state: "
    "a line 'Confidence: high|medium|low — why', then 'Open questions:' followed by '- ' items "
    "(or 'Open questions: none')."
)
"""The suffix note that asks the model for the trailer (opt-in: ``AgentConfig.ask_confidence``)."""

PLAN_TOOL = "plan"
QUESTION_TOOL = "ask_user"
REMEMBER_TOOL = "remember"
SKILL_TOOL = "skills__load"
_PLAN_MARKS = {"[ ]": "pending", "[~]": "in_progress", "[x]": "done", "[!]": "blocked"}
"""The planner's marks (:meth:`~harness_magic.core.control.planner.Planner.render`)."""
_PLAN_LINE = re.compile(r"^(\d{1,4})\. (\[[ ~x!]\]) (.*)$")
_CONFIDENCE = re.compile(r"^[*_]{0,2}confidence[*_]{0,2}\s*:[*_]{0,2}\s*(\w+)[*_]{0,2}\s*(.*)$", re.IGNORECASE)
_OPEN = re.compile(r"^[*_]{0,2}open questions?[*_]{0,2}\s*:[*_]{0,2}\s*(.*)$", re.IGNORECASE)
_ITEM = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+(.*)$")
_SAVED_AGAIN = re.compile(r"_\d+$")
"""The cache's suffix for a name saved again (``summary_2``)."""
_NONE_WORDS = {"none", "none.", "-", "n/a", "no", "nothing"}


def _one_line(text: Any, limit: int = STATE_TEXT_CHARS) -> str:
    """``text`` on one line without control characters, cut to ``limit`` with ``…``."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Trailer:
    """What the model stated at the end of its answer."""

    confidence: str | None = None
    """``high``, ``medium`` or ``low``; None when the answer has no trailer."""
    reason: str = ""
    open_questions: tuple[str, ...] = ()
    body: str = ""
    """The answer without the trailer."""

    def shown_answer(self, answer: str) -> str:
        """What people read as the answer: ``body`` when a trailer was taken off (it shows in the state panel),
        else ``answer`` unchanged. One rule for the final form and the terminal."""
        return self.body if (self.confidence or self.open_questions) and self.body.strip() else answer


def parse_trailer(answer: str) -> Trailer:
    """The ``Confidence:`` / ``Open questions:`` trailer of ``answer`` (see the module docstring).

    Never raises; an answer without a valid trailer gives ``Trailer(body=answer)``.
    """
    if not isinstance(answer, str) or not answer:
        return Trailer(body=answer if isinstance(answer, str) else "")
    tail_start = max(0, len(answer) - TRAILER_SCAN_CHARS)
    tail_start = answer.find("\n", tail_start) + 1 if tail_start else 0
    lines = answer[tail_start:].split("\n")
    confidence, reason = None, ""
    questions: list[str] = []
    start = len(lines)
    index = len(lines) - 1
    items: list[str] = []
    while index >= 0:
        line = lines[index].strip()
        item = _ITEM.match(line)
        if not line:
            pass
        elif (match := _CONFIDENCE.match(line)) and match.group(1).lower() in CONFIDENCE_LEVELS:
            if confidence is not None or items:  # a second one, or list items under it: not a trailer line
                break
            confidence = match.group(1).lower()
            reason = re.sub(r"^[\s—–:,;(-]+|[)\s]+$", "", match.group(2)).strip("*_ ")
            start = index
        elif match := _OPEN.match(line):
            inline = match.group(1).strip()
            questions = [q for q in reversed(items)] if not inline else (
                [] if inline.lower() in _NONE_WORDS else [inline])
            items = []
            start = index
        elif item:
            items.append(item.group(1))
        else:
            break
        index -= 1
    if confidence is None and not questions:
        return Trailer(body=answer)
    body = "\n".join(lines[:start]).rstrip() if start < len(lines) else answer
    if tail_start:
        body = answer[:tail_start] + body
    kept = tuple(_one_line(q) for q in questions if q.strip() and q.strip().lower() not in _NONE_WORDS)
    return Trailer(confidence=confidence, reason=_one_line(reason), open_questions=kept[:MAX_OPEN_QUESTIONS],
                   body=body)


@dataclass
class PlanStep:
    id: int
    title: str
    status: Literal["pending", "in_progress", "done", "blocked"]
    note: str = ""


def parse_plan(rendered: str, titles: Iterable[str] = ()) -> list[PlanStep] | None:
    """Steps of a rendered plan (the ``plan`` tool's result); None when ``rendered`` is not one.

    A step's title and note are split at the first `` — ``, unless a known title (``titles``: those the
    ``plan`` calls gave) holds one itself.
    """
    if not isinstance(rendered, str):
        return None
    if rendered.startswith("The plan is empty"):
        return []
    if not rendered.startswith("Plan ("):
        return None
    steps = []
    for line in rendered.split("\n")[1:]:
        match = _PLAN_LINE.match(line)
        if match is None:
            continue
        rest = match.group(3)
        known = max((t for t in titles if rest == t or rest.startswith(t + " — ")), key=len, default=None)
        title, _, note = (known, "", rest[len(known) + 3:]) if known else rest.partition(" — ")
        steps.append(PlanStep(int(match.group(1)), _one_line(title), _PLAN_MARKS[match.group(2)],  # type: ignore[arg-type]  # the marks table maps to PlanStep's status literals
                              _one_line(note)))
    return steps


@dataclass
class CheckState:
    """The latest outcome of one verification rule on one handle."""

    rule: str
    handle: str
    ok: bool
    detail: str = ""
    tool: str = ""
    failed_before: bool = False
    """An earlier check of the same rule on this handle (or on the name it was saved again under:
    ``growth`` before ``growth_2``) failed: the model fixed it, or not."""


@dataclass
class QuestionState:
    """A question the agent asked; ``answer`` None while it waits, ``""`` when nobody answered."""

    question: str
    options: tuple[str, ...] = ()
    answer: str | None = None
    source: str | None = None
    wait_s: float | None = None
    tool_use_id: str | None = None

    @property
    def shown_answer(self) -> str:
        """The answer as the state shows it; a question nobody answered says why (withdrawn when its wait ran
        out or was interrupted, so the person sees the question was taken back, not ignored)."""
        if self.answer:
            return self.answer
        return _NO_ANSWER_SHOWN.get(self.source or "", "(no answer)")


_NO_ANSWER_SHOWN = {"timeout": "(withdrawn: no answer in time)", "interrupt": "(withdrawn: interrupted)"}
"""How an answerless question reads in the state, by its source (other sources: "(no answer)")."""


@dataclass
class RunState:
    """The run's state as the views show it above the transcript."""

    goal: str = ""
    plan: list[PlanStep] = field(default_factory=list)
    plan_changed: bool = False
    """The plan tool was used in this run (a plan from earlier runs alone is shown too, as it is)."""
    approvals_pending: list[str] = field(default_factory=list)
    """Tool names waiting for the user's approval now."""
    questions: list[QuestionState] = field(default_factory=list)
    checks: list[CheckState] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    assumption_sources: dict[str, str] = field(default_factory=dict)
    """Assumption -> where it came from (``model``, ``question``, ``memory``: carried from session memory)."""
    skills: list[str] = field(default_factory=list)
    trailer: Trailer = field(default_factory=Trailer)
    answer: str = ""
    status: str = ""
    _approvals: dict[str, str] = field(default_factory=dict, repr=False)
    _titles: set[str] = field(default_factory=set, repr=False)

    # -- folding ----------------------------------------------------------------------

    def apply(self, event: Any) -> None:
        """Fold one event (by its ``kind``); unknown kinds are ignored."""
        kind = getattr(event, "kind", None)
        if kind == "run_started":
            self.goal = _one_line(event.prompt)
        elif kind == "tool_call_finished":
            if event.tool_use.name == PLAN_TOOL and not event.result.is_error:
                self.set_plan(event.result.content, event.tool_use.input)
        elif kind == "approval_step":
            key = event.tool_use_id or event.tool
            if event.wait_s is None:
                self._approvals[key] = event.tool
            else:
                self._approvals.pop(key, None)
            self.approvals_pending = list(self._approvals.values())
        elif kind == "question_step":
            self.add_question(event.question, tuple(event.options), event.answer, event.source, event.wait_s,
                              event.tool_use_id)
        elif kind == "verification_checked":
            for check in event.checks:
                self.add_check(check, event.tool)
        elif kind == "assumption_recorded":
            self.add_assumption(event.text, event.source)
        elif kind == "skill_loaded":
            if event.name not in self.skills and len(self.skills) < MAX_STATE_ITEMS:
                self.skills.append(_one_line(event.name))
        elif kind == "run_finished":
            result = event.result
            self.status = str(getattr(result, "status", ""))
            self.close_plan()
            self.set_answer(getattr(result, "text", "") or "")
            self._approvals.clear()
            self.approvals_pending = []

    def set_plan(self, rendered: str, call_input: dict[str, Any] | None = None) -> None:
        """The plan from a ``plan`` result; ``call_input`` (the call's arguments) names titles exactly."""
        given = call_input or {}
        new = [*(given.get("titles") or []), given.get("title")] if isinstance(given.get("titles") or [], list) else []
        self._titles.update(" ".join(t.split()) for t in new if isinstance(t, str) and t.strip())
        steps = parse_plan(rendered, self._titles)
        if steps is not None:
            self.plan = steps
            self.plan_changed = True

    def add_question(self, question: str, options: tuple[str, ...] = (), answer: str | None = None,
                     source: str | None = None, wait_s: float | None = None,
                     tool_use_id: str | None = None) -> None:
        """A question asked (answer None) or answered; an answer fills the open question with its id."""
        if answer is None and source is not None:
            answer = ""  # answered by the harness's stand-in: no answer
        for asked in self.questions:
            if asked.answer is None and (asked.tool_use_id == tool_use_id if tool_use_id
                                         else asked.question == _one_line(question)):
                asked.answer = None if answer is None else _one_line(answer)
                asked.source, asked.wait_s = source, wait_s
                return
        if len(self.questions) < MAX_STATE_ITEMS:
            self.questions.append(QuestionState(_one_line(question), tuple(_one_line(o, 80) for o in options[:20]),
                                                None if answer is None else _one_line(answer), source, wait_s,
                                                tool_use_id))

    def add_check(self, check: dict[str, Any], tool: str = "") -> None:
        rule, handle = _one_line(check.get("rule", "?"), 120), _one_line(check.get("handle", ""), 120)
        ok = bool(check.get("ok"))
        detail = _one_line(check.get("detail", ""))
        for known in self.checks:  # a fix saved again (``growth`` -> ``growth_2``) is the same check
            if known.rule == rule and _SAVED_AGAIN.sub("", known.handle) == _SAVED_AGAIN.sub("", handle):
                known.failed_before = known.failed_before or not known.ok
                known.ok, known.detail, known.tool, known.handle = ok, detail, tool, handle
                return
        if len(self.checks) < MAX_STATE_ITEMS:
            self.checks.append(CheckState(rule, handle, ok, detail, tool))

    def add_assumption(self, text: str, source: str = "model") -> None:
        text = _one_line(text)
        if text and text not in self.assumptions and len(self.assumptions) < MAX_STATE_ITEMS:
            self.assumptions.append(text)
            self.assumption_sources[text] = source

    def assumption_label(self, text: str) -> str:
        """``text``, marked when it was carried from memory rather than made in this run."""
        return text + (" (from memory)" if self.assumption_sources.get(text) == "memory" else "")

    def set_answer(self, text: str) -> None:
        self.trailer = parse_trailer(text)
        self.answer = text

    # -- reading ------------------------------------------------------------------------

    @property
    def pending_questions(self) -> list[QuestionState]:
        return [q for q in self.questions if q.answer is None]

    @property
    def empty(self) -> bool:
        """Nothing beyond the goal to show (the views then show no panel)."""
        return not (self.plan or self.approvals_pending or self.questions or self.checks or self.assumptions
                    or self.skills or self.trailer.confidence or self.trailer.open_questions)

    def close_plan(self) -> None:
        """A completed run's in-progress steps are done (as :meth:`.control.planner.Planner.finish_run` marks
        them); a run that ended otherwise keeps them in progress."""
        if self.status == "completed":
            self.plan = [replace(p, status="done") if p.status == "in_progress" else p
                         for p in self.plan]

    def plan_summary(self) -> str:
        counts = {s: sum(1 for p in self.plan if p.status == s) for s in ("done", "in_progress", "blocked", "pending")}
        return ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)

    def verification_summary(self) -> str:
        passed = sum(1 for c in self.checks if c.ok)
        failed = len(self.checks) - passed
        return ", ".join(part for part in (f"{passed} passed" if passed else "",
                                           f"{failed} failed" if failed else "") if part)

    def lines(self) -> list[str]:
        """The state as plain text lines (terminal, Markdown export, %agent_diff)."""
        out = [f"goal: {self.goal}"] if self.goal else []
        if self.plan:
            out.append(f"plan ({self.plan_summary()}):")
            marks = {v: k for k, v in _PLAN_MARKS.items()}
            out.extend(f"  {marks[p.status]} {p.id}. {p.title}" + (f" — {p.note}" if p.note else "")
                       for p in self.plan)
        for tool in self.approvals_pending:
            out.append(f"waiting for you: approve {tool}")
        for q in self.questions:
            if q.answer is None:
                options = f" [{' / '.join(q.options)}]" if q.options else ""
                out.append(f"waiting for you: {q.question}{options}")
            else:
                wait = f", {q.wait_s:.1f} s" if q.wait_s is not None else ""
                out.append(f"asked: {q.question} → {q.shown_answer} ({q.source or '?'}{wait})")
        if self.skills:
            out.append("skills: " + ", ".join(self.skills))
        if self.checks:
            out.append(f"verification ({self.verification_summary()}):")
            for c in self.checks:
                where = f" on {c.handle}" if c.handle else ""
                why = f": {c.detail}" if c.detail and not c.ok else ""
                again = " (failed before)" if c.ok and c.failed_before else ""
                out.append(f"  {'passed' if c.ok else 'FAILED'} {c.rule}{where}{why}{again}")
        if self.assumptions:
            out.append("assumptions:")
            out.extend(f"  - {self.assumption_label(a)}" for a in self.assumptions)
        if self.trailer.confidence:
            out.append(f"confidence: {self.trailer.confidence}" + (f" — {self.trailer.reason}"
                                                                   if self.trailer.reason else ""))
        if self.trailer.open_questions:
            out.append("open questions:")
            out.extend(f"  - {q}" for q in self.trailer.open_questions)
        return out

    def text(self) -> str:
        return "\n".join(self.lines())


def state_from_log(records: Iterable[dict[str, Any]], tool_calls: Iterable[Any], prompt: str, answer: str,
                   status: str) -> RunState:
    """A run's state from its log: ``event`` records (verification, approvals, questions, assumptions,
    skills) and its tool calls (objects with ``name``, ``input``, ``result``, ``is_error``, ``id``)."""
    state = RunState(goal=_one_line(prompt), status=status)
    logged_questions = logged_assumptions = False
    for record in records:
        if record.get("type") != "event":
            continue
        name = record.get("name") or record.get("event")
        if name == "verification":
            for check in record.get("checks") or []:
                if isinstance(check, dict):
                    state.add_check(check, str(record.get("tool", "")))
        elif name in ("question", "question_step") and record.get("question"):
            logged_questions = True
            state.add_question(str(record["question"]), tuple(map(str, record.get("options") or ())),
                               record.get("answer"), record.get("source") or "log", record.get("wait_s"),
                               record.get("tool_use_id"))
        elif name in ("assumption", "assumption_recorded") and record.get("text"):
            logged_assumptions = True
            state.add_assumption(str(record["text"]))
        elif name == "memory" and record.get("entry_kind") == "assumption" and record.get("action") == "recorded":
            logged_assumptions = True
            state.add_assumption(str(record.get("text", "")))
        elif name in ("skill", "skill_loaded") and record.get("skill", record.get("name_")):
            state.skills.append(_one_line(record.get("skill", record.get("name_"))))
    for call in tool_calls:
        if call.name == PLAN_TOOL and not call.is_error:
            state.set_plan(call.result, call.input)
        elif call.name == QUESTION_TOOL and not logged_questions and not call.is_error:
            state.add_question(str(call.input.get("question", "")), tuple(map(str, call.input.get("options") or ())),
                               call.result, "log", None, call.id)
        elif call.name == REMEMBER_TOOL and not logged_assumptions and not call.is_error \
                and call.input.get("kind") == "assumption":
            state.add_assumption(str(call.input.get("text", "")))
        elif call.name == SKILL_TOOL and not call.is_error:
            skill = _one_line(call.input.get("name", ""))
            if skill and skill not in state.skills:
                state.skills.append(skill)
    state.close_plan()
    state.set_answer(answer)
    return state
