"""The ``ask_user`` tool: a clarifying question to the person running the agent.

:class:`Questions` binds the tool into a harness. Who answers is an
:data:`Answerer`, looked up at each call (the session's ``answerer``)::

    def answerer(request: QuestionRequest) -> QuestionAnswer | str | None: ...

It is called synchronously on the agent's thread and blocks the run while the
person thinks. A ``str`` is the user's answer; :class:`QuestionAnswer` names
its source (``scripted`` for simulated users in evals); ``None`` is no answer;
``TimeoutError`` means the answerer's wait (``request.timeout_s``) ran out and
``KeyboardInterrupt`` that the person interrupted: both are no answer and the
run goes on. Any other exception is no answer too (a broken answerer must not
end the run). With no answerer (evals, replay, the core API without a
callback) the tool answers :data:`NO_ANSWER_TEXT` at once (source ``no_person``).

Each question emits :class:`~harness_magic.core.transcript.events.QuestionStep`
twice, asking (``source`` None) and answered (``answer`` the text, ``""`` for
no answer; ``source``; ``wait_s``), and one ``event`` line ``question`` in the
run log. The wait is counted apart from the tool's own time (as approvals').
Over :attr:`Questions.max_questions` per run the person is not asked: the tool
answers the no-answer text and names the limit (no step; a ``question_over_limit``
log line).

After a no-answer the model is told to state its assumption with
``remember(kind="assumption", ...)``; the memory tool records it. Where no
``remember`` tool is offered, the model is told to write a line starting with
``Assumption:``. Until the memory tool records an assumption, the model's next
``Assumption:`` line is emitted here as
:class:`~harness_magic.core.transcript.events.AssumptionRecorded` (so a stated
assumption is recorded either way, once).

The ambiguity nudge (:func:`ambiguity`): before the first provider call of a
run whose prompt names a metric with several common definitions
(:data:`AMBIGUOUS_TERMS`) without defining it, or a relative period without a
date, a suffix reminder tells the model to ask one question (or state its
assumption). Other prompts get no reminder, and the tool's description says not
to ask when the request is specific.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

from harness_magic.core.execution.tools import ToolError, ToolSpec
from harness_magic.core.transcript.events import AssistantMessage, Event, RunStarted, ToolCallFinished

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost

__all__ = [
    "Questions", "QuestionRequest", "QuestionAnswer", "Answerer", "ambiguity",
    "ASK_USER_TOOL_NAME", "NO_ANSWER_TEXT", "ASSUMPTION_PREFIX", "DEFAULT_MAX_QUESTIONS",
    "DEFAULT_QUESTION_TIMEOUT_S", "MAX_QUESTIONS_LIMIT", "check_max_questions", "check_timeout",
    "MAX_QUESTION_CHARS", "MAX_OPTIONS", "MAX_OPTION_CHARS", "MAX_WHY_CHARS",
    "MAX_ANSWER_CHARS", "AMBIGUOUS_TERMS",
]

ASK_USER_TOOL_NAME = "ask_user"
REMEMBER_TOOL_NAME = "remember"
"""The memory tool (brief M2) that records assumptions; when offered, the no-answer text points to it."""
NO_ANSWER_TEXT = "no answer: state your assumption and go on"
"""What the model gets when nobody answers (timeout, interrupt, no person, limit), before the how-to."""
ASSUMPTION_PREFIX = "Assumption:"
"""Without a ``remember`` tool, the model's line starting with this is recorded as its assumption."""
DEFAULT_MAX_QUESTIONS = 3
"""Questions one run may ask: a few clarify, more turn the agent into a questionnaire."""
MAX_QUESTIONS_LIMIT = 1_000_000
"""Most questions a run may be allowed (anything larger is a typing mistake: no person answers a million)."""
DEFAULT_QUESTION_TIMEOUT_S = 300.0
"""Seconds the notebook waits for an answer before the run goes on under a stated assumption."""
MAX_QUESTION_CHARS = 2000
"""A question longer than this is a document; the rest is cut (the person reads it in the cell)."""
MAX_OPTIONS = 10
"""Choices shown as options; a longer list is cut (a person cannot weigh 1000 buttons)."""
MAX_OPTION_CHARS = 200
"""Each option is one short line."""
MAX_WHY_CHARS = 500
"""Why the answer matters, in a sentence or two."""
MAX_ANSWER_CHARS = 4000
"""Answers are cut to this before they reach the model and the log."""
MAX_ASSUMPTION_CHARS = 500
"""An ``Assumption:`` line recorded from the model's text is cut to this."""
AMBIGUOUS_TERMS = ("active user", "active customer", "active account", "churn", "retention", "engagement",
                   "dau", "wau", "mau")
"""Metrics whose common definitions disagree on who counts (which events, which window, which base); words
such as revenue or growth usually follow the data's own columns and are left out (no nudge for them)."""
_RELATIVE_PERIOD = re.compile(r"\b(last|this|previous|past)\s+(week|month|quarter|year)\b|\brecently\b", re.I)
_EXPLICIT_DATE = re.compile(r"\b\d{4}-\d{2}(-\d{2})?\b|\b(19|20)\d{2}\b")
_DEFINED = re.compile(r"\b(defined as|counted as|means|definition|i\.e\.)|=", re.I)

Source = Literal["user", "scripted"]
AnswerSource = Literal["user", "timeout", "interrupt", "no_person", "scripted"]
"""Where a question's outcome came from (a person, a simulated user, or why nobody answered)."""


@dataclass(frozen=True)
class QuestionRequest:
    """What an answerer is asked (already bounded and stripped of surrounding space)."""

    question: str
    options: tuple[str, ...] = ()
    """Choices offered; the person may still answer in their own words."""
    why: str = ""
    """Why the answer matters (shown under the question)."""
    tool_use_id: str | None = None
    timeout_s: float | None = None
    """How long the answerer should wait; None: as long as it takes."""


@dataclass(frozen=True)
class QuestionAnswer:
    """An answer with its source: ``user`` (a person) or ``scripted`` (a simulated user in evals)."""

    text: str
    source: Source = "user"


Answerer = Callable[[QuestionRequest], "QuestionAnswer | str | None"]
"""``answerer(request) -> QuestionAnswer | str | None``; see the module docstring."""


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def no_answer_text(reason: str, has_remember: bool) -> str:
    """The tool result for no answer: :data:`NO_ANSWER_TEXT`, the reason, and how to state the assumption."""
    how = (f'Record it with {REMEMBER_TOOL_NAME}(kind="assumption", text="...") and continue with the task.'
           if has_remember else
           f"Write it as one line starting with '{ASSUMPTION_PREFIX}' and continue with the task.")
    return f"{NO_ANSWER_TEXT} ({reason}). {how}"


def ambiguity(prompt: str) -> str | None:
    """Why ``prompt`` is ambiguous enough to ask, or None.

    Ambiguous: it names one of :data:`AMBIGUOUS_TERMS` and defines nothing
    (no ``defined as``, ``counted as``, ``means``, ``definition``, ``i.e.`` or ``=``), or it names a
    relative period (``last week``, ``this month``, ``recently``) and no date.
    """
    lowered = prompt.lower()
    term = next((t for t in AMBIGUOUS_TERMS if re.search(rf"\b{re.escape(t)}(s|ed|ing)?\b", lowered)), None)
    if term is not None and not _DEFINED.search(prompt):
        return f"it names {term!r} without defining it"
    period = _RELATIVE_PERIOD.search(prompt)
    if period is not None and not _EXPLICIT_DATE.search(prompt):
        return f"it names a relative period ({period.group(0)!r}) without a date"
    return None


def check_max_questions(value: Any, label: str = "max_questions") -> int:
    """``value`` as a question count per run (0 to :data:`MAX_QUESTIONS_LIMIT`); ValueError naming ``label``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{label} must be a non-negative integer, got {_shown(value)}")
    if value > MAX_QUESTIONS_LIMIT:
        raise ValueError(f"{label} must be at most {MAX_QUESTIONS_LIMIT:,}, got {_shown(value)}")
    return value


def check_timeout(value: Any, label: str = "question_timeout_s") -> float | None:
    """``value`` as seconds a question waits (positive, at most the longest wait the OS offers), or None (no
    limit); ValueError naming ``label``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:  # NaN too
        raise ValueError(f"{label} must be a positive number of seconds or None, got {_shown(value)}")
    if value > threading.TIMEOUT_MAX:
        raise ValueError(f"{label} must be at most {threading.TIMEOUT_MAX:,.0f} seconds (None: no limit), "
                         f"got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """``repr(value)``, elided past 80 characters (a hostile value may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Questions:
    """The ``ask_user`` tool, its per-run count, and the ambiguity nudge.

    ``answerer`` is a callable returning the current :data:`Answerer` (or
    None: no person), read at each question so the session may set it later.
    ``nudge`` False turns the ambiguity reminder off.
    """

    def __init__(self, answerer: Callable[[], Answerer | None], *, max_questions: int = DEFAULT_MAX_QUESTIONS,
                 timeout_s: float | None = DEFAULT_QUESTION_TIMEOUT_S, nudge: bool = True) -> None:
        check_max_questions(max_questions)
        check_timeout(timeout_s)
        self._answerer = answerer
        self.max_questions = max_questions
        self.timeout_s = timeout_s
        self.nudge = nudge
        """Whether the ambiguity reminder is on (the session's ``reminders`` setting)."""
        self.asked = 0
        """Questions asked in the run in progress (reset when a run starts)."""
        self._harness: HarnessHost | None = None
        self._prompt = ""
        self._awaiting_assumption: str | None = None
        """Tool use id of a question left unanswered, until the model states its assumption."""

    def install(self, harness: HarnessHost) -> "Questions":
        """Add the tool to ``harness``, subscribe to its events and register the ambiguity reminder."""
        self._harness = harness
        harness.add_tool(self.tool())
        harness.subscribe(self.on_event)
        harness.register_reminder(self.reminder)
        return self

    # -- events and the nudge ------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.asked, self._prompt, self._awaiting_assumption = 0, event.prompt, None
        elif (isinstance(event, ToolCallFinished) and event.tool_use.name == REMEMBER_TOOL_NAME
              and event.tool_use.input.get("kind") == "assumption" and not event.result.is_error):
            self._awaiting_assumption = None  # recorded by the memory tool
        elif isinstance(event, AssistantMessage) and self._awaiting_assumption is not None:
            for line in event.message.text.splitlines():
                if line.strip().startswith(ASSUMPTION_PREFIX):
                    text = _clip(line.strip()[len(ASSUMPTION_PREFIX):], MAX_ASSUMPTION_CHARS)
                    if text:
                        from harness_magic.core.transcript.events import AssumptionRecorded

                        use_id, self._awaiting_assumption = self._awaiting_assumption, None
                        assert self._harness is not None  # on_event is subscribed by install(), which sets it
                        self._harness.emit(AssumptionRecorded(text=text, source="model", tool_use_id=use_id))
                        break

    def reminder(self, turn: int, max_turns: int) -> str | None:
        """Before a run's first call: a nudge to ask when the prompt is ambiguous (:func:`ambiguity`)."""
        if turn != 1 or not self.nudge or self.max_questions == 0 or not self._prompt:
            return None
        why = ambiguity(self._prompt)
        if why is None:
            return None
        from harness_magic.core.control.reminders import REMINDER_PREFIX

        return (f"{REMINDER_PREFIX} The request may be ambiguous ({why}). If the answer depends on it, ask "
                f"the user one question with {ASK_USER_TOOL_NAME} (offer the likely choices as options); if "
                "it does not, state your assumption and go on.")

    # -- the tool -----------------------------------------------------------------------------

    def _has_remember(self) -> bool:
        return self._harness is not None and any(t.name == REMEMBER_TOOL_NAME for t in self._harness.tools)

    def request(self, question: Any, options: Any = None, why: Any = "", tool_use_id: str | None = None
                ) -> tuple[QuestionRequest, str]:
        """The bounded request for the model's arguments, and a note on what was cut ('' if nothing)."""
        if not isinstance(question, str) or not question.strip():
            raise ToolError("question must be a non-empty string")
        if options is None:
            options = []
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise ToolError("options must be a list of strings (or left out for a free-text answer)")
        if not isinstance(why, str):
            raise ToolError("why must be a string")
        cut = []
        if len(question.strip()) > MAX_QUESTION_CHARS:
            cut.append(f"the question was cut to {MAX_QUESTION_CHARS} characters")
        kept = [_clip(o, MAX_OPTION_CHARS) for o in options if o.strip()]
        if len(kept) > MAX_OPTIONS:
            cut.append(f"only the first {MAX_OPTIONS} of {len(kept)} options were shown")
            kept = kept[:MAX_OPTIONS]
        request = QuestionRequest(question=_clip(question, MAX_QUESTION_CHARS), options=tuple(kept),
                                  why=_clip(why, MAX_WHY_CHARS), tool_use_id=tool_use_id, timeout_s=self.timeout_s)
        return request, "; ".join(cut)

    def handle(self, question: Any, options: Any = None, why: Any = "") -> str:
        """The ``ask_user`` handler: asks through the answerer; returns the answer or the no-answer text."""
        harness = self._harness
        run = harness.current_run if harness is not None else None
        use = run.current_tool_use if run is not None else None
        request, cut = self.request(question, options, why, use.id if use is not None else None)
        note = f" (Note: {cut}.)" if cut else ""
        if self.asked >= self.max_questions:
            if run is not None:  # not asked: its own event name, so a state read from the log lists no question
                run.logger.write("event", event="question_over_limit", question=request.question,
                                 limit=self.max_questions, tool_use_id=request.tool_use_id, turn=run.turn)
            self._awaiting_assumption = request.tool_use_id or ""
            return no_answer_text(f"the limit of {self.max_questions} questions per run is reached; "
                                  "do not ask again in this run", self._has_remember()) + note
        self.asked += 1
        answer, source, reason, waited = self._ask(request)
        from harness_magic.core.transcript.events import QuestionStep

        if harness is not None:
            harness.emit(QuestionStep(question=request.question, options=request.options, why=request.why,
                                      tool_use_id=request.tool_use_id, answer=answer or "", source=source,
                                      wait_s=waited))
        self._log(run, request, answer, source, waited)
        if run is not None and use is not None:  # shown apart from the tool's own time
            run.approval_wait_s[use.id] = run.approval_wait_s.get(use.id, 0.0) + waited
        if answer is None:
            self._awaiting_assumption = request.tool_use_id or ""
            return no_answer_text(reason, self._has_remember()) + note
        return f"The user answered: {answer}" + note

    def _ask(self, request: QuestionRequest) -> tuple[str | None, AnswerSource, str, float]:
        """``(answer or None, source, reason for no answer, seconds waited)``; emits the asking step."""
        answerer = self._answerer()
        if answerer is None:
            return None, "no_person", "there is no person to ask in this run", 0.0
        from harness_magic.core.transcript.events import QuestionStep

        if self._harness is not None:
            self._harness.emit(QuestionStep(question=request.question, options=request.options, why=request.why,
                                            tool_use_id=request.tool_use_id))
        started = time.monotonic()
        try:
            reply = answerer(request)
        except TimeoutError:
            return None, "timeout", f"nobody answered within {self.timeout_s:g} s", time.monotonic() - started
        except KeyboardInterrupt:
            return None, "interrupt", "the user interrupted the question", time.monotonic() - started
        except Exception as exc:  # a broken answerer must not end the run
            return (None, "no_person", f"the answerer failed ({type(exc).__name__})", time.monotonic() - started)
        waited = time.monotonic() - started
        source: AnswerSource
        text: object
        if isinstance(reply, QuestionAnswer):
            text, source = reply.text, reply.source
        else:
            text, source = reply, "user"
        if not isinstance(text, str) or not text.strip():
            return None, "no_person", "the question was left unanswered", waited
        return _clip(text, MAX_ANSWER_CHARS), source, "", waited

    def _log(self, run: Any, request: QuestionRequest, answer: str | None, source: str, waited: float) -> None:
        if run is None:
            return
        run.logger.write("event", event="question", question=request.question, options=list(request.options),
                         why=request.why, answer=answer, source=source, wait_s=round(waited, 6),
                         tool_use_id=request.tool_use_id, turn=run.turn)

    def tool(self) -> ToolSpec:
        """The bound ``ask_user`` tool."""
        return ToolSpec(
            name=ASK_USER_TOOL_NAME,
            description=(
                "Ask the user one clarifying question and wait for the answer. Ask only when the request is "
                "ambiguous in a way that changes the answer (e.g. which definition of a metric, which period); "
                "do not ask when the request is specific or a reasonable default is obvious. Offer the likely "
                f"choices as options. At most {self.max_questions} questions per run. If nobody answers you get "
                f"'{NO_ANSWER_TEXT}'."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "question": {"type": "string", "description": "One short question."},
                    "options": {"type": "array", "items": {"type": "string"},
                                "description": "Likely answers to choose from (optional)."},
                    "why": {"type": "string", "description": "Why the answer matters, in one sentence."},
                },
                "required": ["question"],
            },
            handler=self.handle,
        )
