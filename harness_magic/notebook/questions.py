"""Answer the agent's ``ask_user`` question from the cell that is running.

As with approvals (:mod:`.approval`), the agent asks while the cell executes,
and a busy kernel processes no widget clicks, so buttons could never answer.
The kernel's stdin request can: the answerer shows the question (the model's
Markdown rendered inert by :func:`~harness_magic.core.text.safe_markdown.markdown_to_html`,
the options as a numbered list) and then calls ``input()``, which JupyterLab and
Notebook render as a text box in the cell and terminal IPython as a prompt.
The person types an option's number or their own words; an empty line is no
answer. A front end without stdin (nbclient, nbval) is no person.

The wait is bounded by the request's ``timeout_s``: on the main thread a
``SIGALRM`` timer ends ``input()`` with :class:`TimeoutError` (a
``BaseException`` inside, so the kernel's own input loop does not swallow it).
An interrupt (``KeyboardInterrupt``) ends the question, not the run: the tool
answers "no answer" and the model goes on under a stated assumption.
"""

from __future__ import annotations

import html
import signal
import threading
from typing import Any

from harness_magic.core.transcript.scrub import escape_control

__all__ = ["StdinAnswerer", "question_html", "question_text", "answer_for", "deadline", "AnswerTimedOut"]


class AnswerTimedOut(BaseException):
    """Raised by the alarm inside ``input()``; a BaseException so ipykernel's input loop lets it through."""


def question_text(request: Any) -> str:
    """The question as plain text: the question, why, and the numbered options."""
    lines = [f"question from the agent: {request.question}"]
    if request.why:
        lines.append(f"why: {request.why}")
    lines += [f"  {n}. {option}" for n, option in enumerate(request.options, 1)]
    return escape_control("\n".join(lines))


def question_html(request: Any) -> str:
    """The question as an HTML box: the question's Markdown rendered inert, why and options escaped."""
    from harness_magic.core.text.safe_markdown import markdown_to_html

    e = html.escape
    why = f'<div style="color:#57606a">why: {e(request.why)}</div>' if request.why else ""
    options = "".join(f"<li>{e(option)}</li>" for option in request.options)
    listed = f'<ol style="margin:2px 0">{options}</ol>' if options else ""
    how = ("type an option's number or your own answer" if request.options else "type your answer")
    limit = f"; no answer after {request.timeout_s:g} s means the agent states its assumption" \
        if request.timeout_s else ""
    return (f'<div class="agent-question" style="border:1px solid #0969da;border-radius:4px;padding:4px 8px">'
            f'<b style="color:#0969da">The agent asks</b>{markdown_to_html(request.question)}{why}{listed}'
            f'<div style="color:#57606a;font-size:0.9em">{e(how)} below, or leave it empty for no answer'
            f"{e(limit)}</div></div>")


def answer_for(request: Any, typed: str) -> str | None:
    """What a typed line answers: an option's number picks it, other text is the answer, empty is None."""
    typed = typed.strip()
    if not typed:
        return None
    if typed.isdigit() and 1 <= int(typed) <= len(request.options):
        return request.options[int(typed) - 1]
    return typed


class StdinAnswerer:
    """``answerer(request) -> str | None`` that asks in the running cell through ``input()``."""

    def __call__(self, request: Any) -> str | None:
        from IPython.core.error import StdinNotImplementedError
        from IPython.display import display

        display({"text/html": question_html(request), "text/plain": question_text(request)}, raw=True)
        prompt = f"Answer (1-{len(request.options)} or text): " if request.options else "Answer: "
        try:
            with deadline(request.timeout_s):
                typed = input(prompt)
        except AnswerTimedOut:
            print(f"no answer after {request.timeout_s:g} s: the agent goes on under a stated assumption")
            raise TimeoutError(request.timeout_s) from None
        except KeyboardInterrupt:
            print("question interrupted: the agent goes on under a stated assumption")
            raise
        except (StdinNotImplementedError, EOFError):
            return None
        return answer_for(request, typed)


class deadline:  # noqa: N801 (a context manager read as a phrase: ``with deadline(s):``)
    """Raise :class:`AnswerTimedOut` in the main thread after ``seconds`` (no-op off the main thread or for None)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.armed = seconds is not None and threading.current_thread() is threading.main_thread() \
            and hasattr(signal, "setitimer")
        self.previous: Any = None

    def _fire(self, signum: int, frame: Any) -> None:
        raise AnswerTimedOut()

    def __enter__(self) -> "deadline":
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, float(self.seconds))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
