"""One question or approval as widgets in the cell: what is asked, the ways to answer, a status line.

A :class:`PromptBox` is built kernel-side and shown in the run's live view
(or on its own when there is none). Its controls are buttons (the model's
options, or Approve/Deny) and, for a question, a text box with an Answer
button (Enter answers too). An answer may arrive on any thread (the kernel
handles the controls' messages on a subshell while the run waits, see
:mod:`.kernel_comms`): the first one wins and wakes :meth:`PromptBox.wait`.
The asking thread then closes the box in place with :meth:`PromptBox.close`:
every control disabled, the status line saying what happened (answered,
approved, denied, or withdrawn and why). A withdrawn question later shows the
assumption the agent went on with (:meth:`PromptBox.show_assumption`).

Everything the model wrote reaches the page as text: the header is built by
the caller from escaped or sanitized HTML, button labels are plain text
(ipywidgets sets them as text, never as HTML), and status lines are escaped here.
"""

from __future__ import annotations

import html
import threading
import time
import warnings
from typing import Any, Callable, Literal, Sequence

__all__ = ["PromptBox", "WAIT_SLICE_S", "Choice"]

WAIT_SLICE_S = 0.25
"""The waiting thread wakes this often to check its deadline (an answer wakes it at once)."""

Kind = Literal["question", "approval"]
State = Literal["open", "answered", "withdrawn"]
Choice = tuple[str, Any, str]
"""A button: (label, the value it answers, its CSS class)."""

_MUTED = "color:#57606a;font-size:0.9em"


class PromptBox:
    """Widgets for one question (``kind="question"``) or approval (``kind="approval"``); see the module docstring.

    ``choices`` are the buttons; ``free_text`` adds a text box whose
    non-empty text is the answer; ``note`` is the status line while open.
    """

    def __init__(self, kind: Kind, header_html: str, choices: Sequence[Choice], *, free_text: bool = False,
                 note: str = "", tool_use_id: str | None = None) -> None:
        import ipywidgets as w

        self.kind: Kind = kind
        self.tool_use_id = tool_use_id
        """The call that asks (the live view shows the box under its section)."""
        self.state: State = "open"
        self.reply: Any = None
        """The first answer given (a choice's value, or the typed text)."""
        self.assumption: str | None = None
        """What the agent assumed after this question was withdrawn, once it said."""
        self._answered = threading.Event()
        self._lock = threading.Lock()
        self.header = w.HTML(header_html)
        self.buttons = []
        for label, value, css in choices:
            button = w.Button(description=label, tooltip=label, layout=w.Layout(width="auto", max_width="100%"))
            button.add_class("agent-prompt-choice")
            button.add_class(css)
            button.on_click(self._answers(value))
            self.buttons.append(button)
        rows: list[Any] = [self.header, w.HBox(self.buttons, layout=w.Layout(flex_flow="row wrap"))]
        self.text: Any = None
        self.submit: Any = None
        if free_text:
            self.text = w.Text(placeholder="or type your own answer", continuous_update=True,
                               layout=w.Layout(width="28em", max_width="100%"))
            self.text.add_class("agent-prompt-text")  # synced as typed: Enter's message comes after the text
            self.submit = w.Button(description="Answer", layout=w.Layout(width="auto"))
            self.submit.add_class("agent-prompt-submit")
            self.submit.on_click(lambda _: self._typed())
            with warnings.catch_warnings():  # Enter answers: the one message ipywidgets 8 sends for it
                warnings.simplefilter("ignore", DeprecationWarning)
                self.text.on_submit(lambda _: self._typed())
            rows.append(w.HBox([self.text, self.submit]))
        self.note = w.HTML(_note_html(note))
        self.note.add_class("agent-prompt-note")
        rows.append(self.note)
        self.widget = w.VBox(rows, layout=w.Layout(margin="2px 0 6px 0"))
        for css in ("agent-prompt", f"agent-prompt-{kind}", "agent-prompt-open"):
            self.widget.add_class(css)

    @property
    def controls(self) -> list[Any]:
        """The widgets a person acts on (their messages must reach the kernel while it waits)."""
        return [*self.buttons, *([self.text, self.submit] if self.text is not None else [])]

    # -- answers (any thread) -------------------------------------------------------------------

    def _answers(self, value: Any) -> Callable[[Any], object]:
        return lambda _button: self.offer(value)

    def _typed(self) -> None:
        typed = (self.text.value or "").strip()
        if typed:
            self.offer(typed)

    def offer(self, value: Any) -> bool:
        """Give ``value`` as the answer; True when it is taken (the box is open and unanswered)."""
        with self._lock:
            if self.state != "open" or self._answered.is_set():
                return False
            self.reply = value
            self._answered.set()
            return True

    # -- the asking thread ------------------------------------------------------------------------

    def wait(self, timeout_s: float | None) -> Any:
        """Block until an answer (returned) or ``timeout_s`` (TimeoutError); an interrupt propagates."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                with self._lock:  # an answer that lands now still counts; after this, none does
                    if not self._answered.is_set():
                        self.state = "withdrawn"
                        raise TimeoutError(timeout_s)
                return self.reply
            if self._answered.wait(WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S)):
                return self.reply

    def close(self, state: State, note: str) -> None:
        """Disable every control and show ``note`` (plain text) as the status line, in place."""
        with self._lock:
            self.state = state
        for control in self.controls:
            control.disabled = True
        self.note.value = _note_html(note, strong=True)
        self.widget.remove_class("agent-prompt-open")
        self.widget.add_class(f"agent-prompt-{state}")

    def show_assumption(self, text: str) -> bool:
        """Show what the agent assumed; True when this box took it (a withdrawn question not yet showing one)."""
        if self.kind != "question" or self.state != "withdrawn" or self.assumption is not None:
            return False
        self.assumption = text
        self.note.value += (f'<div class="agent-prompt-assumed" style="{_MUTED}">assumed: '
                            f"{html.escape(text)}</div>")
        return True


def _note_html(text: str, strong: bool = False) -> str:
    body = f"<b>{html.escape(text)}</b>" if strong else html.escape(text)
    return f'<div style="{_MUTED}">{body}</div>'
