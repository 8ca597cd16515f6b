"""Asking the person: the session's answerer (``ask_user``) and approver (writes), in a notebook or a terminal.

Nothing that waits for the person may block the front end. Where a person can
answer is decided at each question (:meth:`PersonAsker.presence`):

``widgets``
    a kernel whose front end takes input from a person (JupyterLab, Notebook,
    VS Code: the running cell's execute request allows stdin). The question is
    a widget in the cell's live view (:class:`~.prompt_widget.PromptBox`:
    a button per option and a text box; Approve and Deny for a write), and the
    kernel keeps handling the widget's messages while the run waits
    (:mod:`.kernel_comms`). Other cells stay runnable: they queue and run once
    this one ends. A kernel that cannot route widget messages while a cell
    runs says so in the cell and gets no answer.
``terminal``
    terminal IPython on a terminal: the question as text and a prompt the
    timeout cancels (:func:`~.terminal_prompt.read_line`).
None
    no person (nbclient, nbval, CI, a pipe): answered at once, as the core
    does without an answerer: no answer, or denied.

Never a kernel stdin request (``input()``): the front end keeps its box after
the kernel stops waiting and refuses every other cell until it is answered.

Both waits are bounded: a question by its request's ``timeout_s``
(``AgentMagics.question_timeout_s``), an approval by the same setting. When
the time passes, or on an interrupt, the widget is withdrawn in place (every
control disabled, the reason shown): a question ends without an answer and the
agent goes on under an assumption it states (shown under the question once
made), an approval is denied on timeout, and an interrupt during an approval
ends the run as any interrupt does.
"""

from __future__ import annotations

import sys
from typing import IO, Any, Callable, Literal, Protocol

from harness_magic.core.control.questions import QuestionRequest
from harness_magic.core.execution.connectors import ApprovalDecision, ApprovalRequest
from harness_magic.core.transcript.scrub import escape_control
from harness_magic.notebook.approval import (
    APPROVE_ANSWERS,
    NO_PERSON_REASON,
    approve_verb,
    request_html,
    request_text,
)
from harness_magic.notebook.kernel_comms import CommRouter, kernel_comms
from harness_magic.notebook.prompt_widget import PromptBox
from harness_magic.notebook.questions import answer_for, question_html, question_text, waiting_note
from harness_magic.notebook.terminal_prompt import read_line

__all__ = ["PersonAsker", "PromptHost", "Presence", "NO_ROUTE_REASON"]

Presence = Literal["widgets", "terminal"] | None

NO_ROUTE_REASON = "this kernel cannot take a click while the cell runs (it needs ipykernel 7.4 or later)"
"""Why a front end with a person still cannot answer: the kernel cannot hear the widget during the cell."""


class PromptHost(Protocol):
    """Where a prompt shows: the run's live view (:class:`~.render.widgets.WidgetRunView`)."""

    def place_prompt(self, prompt: PromptBox) -> bool:
        """Show ``prompt`` (under its call's section); False when the view no longer shows this run."""
        ...


class PersonAsker:
    """The person at ``shell``: :meth:`answer` is the session's answerer, :meth:`approve` its approver.

    ``host`` returns the live view of the run in progress (None: the prompt is
    displayed on its own). ``approval_timeout_s`` returns how long an approval
    waits (questions carry their own). ``stdin``/``stdout`` are the terminal's.
    ``router`` is how widget messages reach the kernel while it waits (default:
    :func:`~.kernel_comms.kernel_comms` of the shell's kernel).
    """

    def __init__(self, shell: Any, *, host: Callable[[], PromptHost | None] = lambda: None,
                 approval_timeout_s: Callable[[], float | None] = lambda: None,
                 stdin: IO[Any] | None = None, stdout: IO[str] | None = None,
                 router: Callable[[], CommRouter | None] | None = None) -> None:
        self.shell = shell
        self._host = host
        self._approval_timeout_s = approval_timeout_s
        self._stdin = stdin
        self._stdout = stdout
        self._router = router if router is not None else (lambda: kernel_comms(self._kernel()))

    def _kernel(self) -> Any:
        return getattr(self.shell, "kernel", None)

    @property
    def stdin(self) -> IO[Any]:
        return self._stdin if self._stdin is not None else sys.stdin

    @property
    def stdout(self) -> IO[str]:
        return self._stdout if self._stdout is not None else sys.stdout

    def presence(self) -> Presence:
        """Where a person can answer now (see the module docstring)."""
        kernel = self._kernel()
        if kernel is not None:
            request = kernel.get_parent() or {}  # the running cell's execute request
            return "widgets" if request.get("content", {}).get("allow_stdin", False) else None
        try:
            return "terminal" if self.stdin.isatty() else None
        except (AttributeError, ValueError, OSError):  # closed or replaced by something without a tty
            return None

    # -- ask_user ---------------------------------------------------------------------------------

    def answer(self, request: QuestionRequest) -> str | None:
        """The answerer (:data:`~harness_magic.core.control.questions.Answerer`): the answer, or None for none;
        TimeoutError when the wait ran out, KeyboardInterrupt on an interrupt."""
        where = self.presence()
        if where == "terminal":
            print(question_text(request), file=self.stdout)
            prompt = f"Answer (1-{len(request.options)} or text): " if request.options else "Answer: "
            try:
                typed = read_line(prompt, request.timeout_s, stdin=self.stdin, stdout=self.stdout)
            except TimeoutError:
                print(f"no answer after {request.timeout_s:g} s: the agent goes on under an assumption it states",
                      file=self.stdout)
                raise
            except KeyboardInterrupt:
                print("question interrupted: the agent goes on under an assumption it states", file=self.stdout)
                raise
            return None if typed is None else answer_for(request, typed)
        if where is None:
            return None
        router = self._router()
        if router is None:
            print(f"The agent's question gets no answer: {NO_ROUTE_REASON}.", file=self.stdout)
            return None
        box = PromptBox("question", question_html(request),
                        [(option, option, "agent-prompt-option") for option in request.options],
                        free_text=True, note=waiting_note(request), tool_use_id=request.tool_use_id)
        try:
            reply = self._wait_in_cell(box, router, request.timeout_s,
                                       "withdrawn: interrupted; the agent goes on under an assumption it states")
        except TimeoutError:  # the core hears "timed out" and words the no-answer for the model
            box.close("withdrawn", f"withdrawn: no answer within {request.timeout_s:g} s; "
                                   "the agent goes on under an assumption it states")
            raise
        box.close("answered", f"answered: {reply}")
        return reply

    # -- approvals --------------------------------------------------------------------------------

    def approve(self, request: ApprovalRequest) -> ApprovalDecision:
        """The approver (:data:`~harness_magic.core.execution.connectors.Approver`); never waits longer than
        the approval timeout (then denies); an interrupt propagates (the run stops)."""
        timeout_s = self._approval_timeout_s()
        verb = approve_verb(request)
        where = self.presence()
        if where == "terminal":
            print(request_text(request), file=self.stdout)
            try:
                typed = read_line(escape_control(f"{verb} {request.tool}? [y/N] "), timeout_s,
                                  stdin=self.stdin, stdout=self.stdout)
            except TimeoutError:
                print(f"no answer after {timeout_s:g} s: not approved", file=self.stdout)
                return ApprovalDecision(False, f"nobody approved it within {timeout_s:g} s")
            if typed is None:
                return ApprovalDecision(False, NO_PERSON_REASON)
            return _decision(typed.strip().lower() in APPROVE_ANSWERS)
        if where is None:
            return ApprovalDecision(False, NO_PERSON_REASON)
        router = self._router()
        if router is None:
            print(f"A write the agent asked for is not approved: {NO_ROUTE_REASON}.", file=self.stdout)
            return ApprovalDecision(False, f"it needs approval, and {NO_ROUTE_REASON}")
        limit = f" No answer within {timeout_s:g} s: not approved." if timeout_s else ""
        box = PromptBox("approval", request_html(request),
                        [(verb, True, "agent-prompt-approve"), ("Deny", False, "agent-prompt-deny")],
                        note=f"{verb} runs it; Deny tells the agent you refused.{limit}",
                        tool_use_id=request.tool_use_id)
        try:
            reply = self._wait_in_cell(box, router, timeout_s, "withdrawn: interrupted; not approved, it did not run")
        except TimeoutError:
            box.close("withdrawn", f"withdrawn: no answer within {timeout_s:g} s; not approved, it did not run")
            return ApprovalDecision(False, f"nobody approved it within {timeout_s:g} s")
        box.close("answered", f"{'approved' if reply else 'denied'} by you")
        return _decision(bool(reply))

    # -- the widget's wait --------------------------------------------------------------------

    def _wait_in_cell(self, box: PromptBox, router: CommRouter, timeout_s: float | None, interrupted: str) -> Any:
        """Show ``box`` and return its answer, its controls' messages routed meanwhile; TimeoutError when
        the time passes (the caller withdraws the box); an interrupt withdraws it (``interrupted``) and
        propagates, also one that lands while the box is being shown (it may already be on screen)."""
        with router.routing(box.controls):
            try:
                self._show(box)
                return box.wait(timeout_s)
            except KeyboardInterrupt:
                box.close("withdrawn", interrupted)
                raise

    def _show(self, box: PromptBox) -> None:
        host = self._host()
        if host is not None and host.place_prompt(box):
            return
        from IPython.display import display

        display(box.widget)


def _decision(approved: bool) -> ApprovalDecision:
    return ApprovalDecision(approved, "approved by the user" if approved else "the user denied it")
