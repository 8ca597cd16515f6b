"""Asking the person without ever blocking the front end: questions and approvals as widgets, or a terminal prompt.

Unit tests drive :class:`~harness_magic.notebook.asking.PersonAsker` with a fake
front end (it delivers comm messages to the prompt's widgets from another
thread, as the kernel's subshell does) and a real pseudo-terminal; kernel tests
run ``%%agent`` in a real kernel and answer by sending the comm messages
JupyterLab sends (:mod:`lab_frontend`), checking that no stdin request is ever
made. The browser tests are in ``test_browser_prompts.py``.
"""

from __future__ import annotations

import _thread
import json
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from harness_magic.core.control.questions import QuestionRequest
from harness_magic.core.execution.connectors import ApprovalDecision, ApprovalRequest
from harness_magic.notebook.approval import NO_PERSON_REASON
from harness_magic.notebook.asking import NO_ROUTE_REASON, PersonAsker
from harness_magic.notebook.prompt_widget import PromptBox

pytest.importorskip("ipywidgets")

QUESTION = QuestionRequest("Which **week** start? <img src=x onerror=alert(1)>", ("Monday", "Sunday"),
                           "weekly users depend on it", tool_use_id="call_1", timeout_s=5.0)
WRITE = ApprovalRequest(tool="store__append", connector="store", safety="write", arguments={"row": "r1"},
                        summary="append r1", tool_use_id="call_2")


class FakeKernel:
    """The part of a kernel the asker reads: the running cell's execute request."""

    def __init__(self, allow_stdin: bool) -> None:
        self.request = {"header": {"msg_type": "execute_request"}, "content": {"allow_stdin": allow_stdin}}

    def get_parent(self) -> dict[str, Any]:
        return self.request


class FakeShell:
    def __init__(self, allow_stdin: bool = True) -> None:
        self.kernel = FakeKernel(allow_stdin)


class FrontEnd:
    """A fake front end: the router the asker uses, and a person who acts on the prompt from another thread
    (the kernel handles a real front end's messages on a subshell thread while the cell waits)."""

    def __init__(self, act: Callable[[PromptBox], None] | None = None, delay_s: float = 0.05) -> None:
        self.act = act
        self.delay_s = delay_s
        self.routed: list[Any] = []
        self.box: PromptBox | None = None

    @contextmanager
    def routing(self, widgets: Any) -> Iterator[None]:
        self.routed = list(widgets)
        yield

    def place_prompt(self, prompt: PromptBox) -> bool:  # a live view that shows the box
        self.box = prompt
        if self.act is not None:
            threading.Timer(self.delay_s, self.act, args=(prompt,)).start()
        return True


def message(widget: Any, data: dict[str, Any]) -> None:
    """Deliver a front end's comm message to ``widget`` through its comm."""
    widget.comm.handle_msg({"content": {"comm_id": widget.comm.comm_id, "data": data}, "buffers": []})


def clicking(label: str) -> Callable[[PromptBox], None]:
    def act(box: PromptBox) -> None:
        message(next(b for b in box.buttons if b.description == label), {"method": "custom",
                                                                         "content": {"event": "click"}})
    return act


def typing(text: str, submit: str = "enter") -> Callable[[PromptBox], None]:
    def act(box: PromptBox) -> None:
        message(box.text, {"method": "update", "state": {"value": text}, "buffer_paths": []})
        if submit == "enter":
            message(box.text, {"method": "custom", "content": {"event": "submit"}})
        else:
            message(box.submit, {"method": "custom", "content": {"event": "click"}})
    return act


def asker_with(front: FrontEnd, shell: Any = None, approval_timeout_s: float | None = 5.0) -> PersonAsker:
    return PersonAsker(shell or FakeShell(), host=lambda: front, router=lambda: front,
                       approval_timeout_s=lambda: approval_timeout_s)


# -- questions in the cell ----------------------------------------------------------------------------


def test_a_click_on_an_option_answers_and_the_box_closes_in_place_saying_so() -> None:
    front = FrontEnd(clicking("Sunday"))
    assert asker_with(front).answer(QUESTION) == "Sunday"
    box = front.box
    assert box is not None and box.state == "answered" and "answered: Sunday" in box.note.value
    assert all(control.disabled for control in box.controls), "nothing left to click"
    assert "agent-prompt-answered" in box.widget._dom_classes and "agent-prompt-open" not in box.widget._dom_classes
    assert front.routed == box.controls, "every control's messages are routed while the cell waits"


@pytest.mark.parametrize("submit", ["enter", "button"])
def test_typed_words_answer_with_enter_or_the_answer_button(submit: str) -> None:
    front = FrontEnd(typing("ISO weeks, Monday first", submit))
    assert asker_with(front).answer(QUESTION) == "ISO weeks, Monday first"


def test_an_empty_typed_answer_is_not_an_answer_and_the_question_waits_on() -> None:
    front = FrontEnd(typing("   ", "button"))
    with pytest.raises(TimeoutError):
        asker_with(front).answer(QuestionRequest("Which week?", timeout_s=0.4))


def test_the_question_box_shows_model_markdown_inert_and_options_as_plain_labels() -> None:
    front = FrontEnd(clicking("<b>bold</b>"))
    request = QuestionRequest("Pick **one** <img src=x onerror=alert(1)> [x](javascript:alert(1))",
                              ("<b>bold</b>",), "<script>why</script>", timeout_s=60)
    asker_with(front).answer(request)
    header = front.box.header.value
    assert "<strong>one</strong>" in header and "<img" not in header and "href" not in header
    assert "<script>" not in header and "&lt;script&gt;why&lt;/script&gt;" in header
    assert [b.description for b in front.box.buttons] == ["<b>bold</b>"], "a label is text, never HTML"


def test_an_unanswered_question_is_withdrawn_in_place_when_its_time_passes() -> None:
    front = FrontEnd()
    with pytest.raises(TimeoutError):  # raised only when the wait's own deadline passed
        asker_with(front).answer(QuestionRequest("Which week?", ("Monday",), tool_use_id="c", timeout_s=0.3))
    box = front.box
    assert box.state == "withdrawn" and all(control.disabled for control in box.controls)
    assert "withdrawn: no answer within 0.3 s" in box.note.value and "assumption" in box.note.value


def test_a_click_after_the_question_was_withdrawn_is_ignored() -> None:
    front = FrontEnd()
    with pytest.raises(TimeoutError):
        asker_with(front).answer(QuestionRequest("Which week?", ("Monday",), timeout_s=0.2))
    clicking("Monday")(front.box)
    assert front.box.reply is None and front.box.state == "withdrawn"


def test_a_withdrawn_question_then_shows_the_assumption_the_agent_went_on_with() -> None:
    front = FrontEnd()
    with pytest.raises(TimeoutError):
        asker_with(front).answer(QuestionRequest("Which week?", timeout_s=0.2))
    assert front.box.show_assumption("weeks start on <b>Monday</b>")
    assert "assumed: weeks start on &lt;b&gt;Monday&lt;/b&gt;" in front.box.note.value
    assert not front.box.show_assumption("a second one"), "one assumption per question"


def test_an_interrupt_withdraws_the_question_and_reaches_the_caller() -> None:
    front = FrontEnd(lambda box: _thread.interrupt_main(), delay_s=0.2)
    with pytest.raises(KeyboardInterrupt):
        asker_with(front).answer(QUESTION)
    assert front.box.state == "withdrawn" and "withdrawn: interrupted" in front.box.note.value
    assert all(control.disabled for control in front.box.controls)


class InterruptedWhileShowing(FrontEnd):
    """A front end whose box goes on screen just as the interrupt lands (before the asker starts waiting):
    what a loaded kernel meets when the person presses Stop as the box appears."""

    def place_prompt(self, prompt: PromptBox) -> bool:
        super().place_prompt(prompt)
        raise KeyboardInterrupt


def test_an_interrupt_that_lands_as_the_box_shows_still_withdraws_it() -> None:
    front = InterruptedWhileShowing()
    with pytest.raises(KeyboardInterrupt):
        asker_with(front).answer(QUESTION)
    assert front.box.state == "withdrawn" and "withdrawn: interrupted" in front.box.note.value
    assert all(control.disabled for control in front.box.controls), "no open box is left that nobody waits on"
    with pytest.raises(KeyboardInterrupt):
        asker_with(front).approve(WRITE)
    assert front.box.state == "withdrawn" and "not approved, it did not run" in front.box.note.value


def test_without_a_person_the_question_gets_no_answer_at_once_and_nothing_is_shown() -> None:
    front = FrontEnd()
    # QUESTION waits 5 s for a person: None rather than TimeoutError means it never waited
    assert asker_with(front, FakeShell(allow_stdin=False)).answer(QUESTION) is None
    assert front.box is None


def test_a_kernel_that_cannot_route_widget_messages_says_so_and_nobody_is_asked(capsys) -> None:
    front = FrontEnd()
    asker = PersonAsker(FakeShell(), host=lambda: front, router=lambda: None, approval_timeout_s=lambda: 5.0)
    assert asker.answer(QUESTION) is None
    assert asker.approve(WRITE) == ApprovalDecision(False, f"it needs approval, and {NO_ROUTE_REASON}")
    shown = capsys.readouterr().out
    assert shown.count(NO_ROUTE_REASON) == 2 and front.box is None, "said in the cell; no box nobody can click"


# -- approvals in the cell ----------------------------------------------------------------------------


@pytest.mark.parametrize("label, approved, reason", [("Approve", True, "approved by the user"),
                                                     ("Deny", False, "the user denied it")])
def test_approve_and_deny_are_buttons(label: str, approved: bool, reason: str) -> None:
    front = FrontEnd(clicking(label))
    decision = asker_with(front).approve(WRITE)
    assert decision == ApprovalDecision(approved, reason)
    assert front.box.kind == "approval" and [b.description for b in front.box.buttons] == ["Approve", "Deny"]
    assert "store__append" in front.box.header.value and front.box.state == "answered"
    assert ("approved by you" if approved else "denied by you") in front.box.note.value


def test_a_previewed_write_asks_to_commit() -> None:
    from types import SimpleNamespace

    preview = SimpleNamespace(previewed=True, undo="rolled back", notes=(), before={}, after={},
                              headline=lambda: "3 rows affected", text=lambda: "3 rows affected")
    request = ApprovalRequest(tool="ledger__execute", connector="ledger", safety="write", arguments={},
                              preflight=preview)
    front = FrontEnd(clicking("Commit"))
    assert asker_with(front).approve(request).approved


def test_an_unanswered_approval_is_withdrawn_and_denied_when_its_time_passes() -> None:
    front = FrontEnd()
    decision = asker_with(front, approval_timeout_s=0.3).approve(WRITE)
    assert decision == ApprovalDecision(False, "nobody approved it within 0.3 s")
    assert front.box.state == "withdrawn" and "not approved, it did not run" in front.box.note.value
    assert all(control.disabled for control in front.box.controls)


def test_an_interrupt_during_an_approval_withdraws_it_and_propagates() -> None:
    front = FrontEnd(lambda box: _thread.interrupt_main(), delay_s=0.2)
    with pytest.raises(KeyboardInterrupt):
        asker_with(front).approve(WRITE)
    assert front.box.state == "withdrawn" and "interrupted" in front.box.note.value


def test_without_a_person_a_write_is_denied_at_once() -> None:
    front = FrontEnd()
    assert asker_with(front, FakeShell(allow_stdin=False)).approve(WRITE) == ApprovalDecision(False, NO_PERSON_REASON)
    assert front.box is None


# -- the kernel seam -----------------------------------------------------------------------------------


def test_only_a_kernel_with_a_shell_channel_thread_can_route_widget_messages() -> None:
    from types import SimpleNamespace

    from harness_magic.notebook.kernel_comms import kernel_comms

    assert kernel_comms(None) is None, "terminal IPython"
    assert kernel_comms(SimpleNamespace(shell_channel_thread=None)) is None, "a kernel without subshells"


def test_routing_sends_the_widgets_messages_to_one_subshell_and_stops_on_exit() -> None:
    from types import SimpleNamespace

    from harness_magic.notebook.kernel_comms import SubshellComms

    created: list[str] = []

    class Loop:  # the shell-channel thread's loop runs the callback on its own thread
        def add_callback(self, fn: Callable[[], None]) -> None:
            threading.Thread(target=fn).start()

    class Manager:
        def _create_subshell(self) -> str:
            assert threading.current_thread() is not threading.main_thread()
            created.append("sub-1")
            return "sub-1"

    kernel = SimpleNamespace(shell_channel_thread=SimpleNamespace(io_loop=Loop(), manager=Manager()))
    comm = SimpleNamespace()
    comms = SubshellComms(kernel)
    with comms.routing([SimpleNamespace(comm=comm), SimpleNamespace(comm=None)]):
        assert comm._reply_subshell_for({"content": {"event": "click"}}, None) == "sub-1"
    assert not hasattr(comm, "_reply_subshell_for"), "after the wait the main shell gets them again"
    with comms.routing([SimpleNamespace(comm=comm)]):
        pass
    assert created == ["sub-1"] and comms.subshell_id == "sub-1", "one subshell per kernel"


# -- where the box shows -------------------------------------------------------------------------------


def _tool_started(view: Any, tool_use_id: str, name: str = "ask_user") -> None:
    from harness_magic.core.transcript.events import RunStarted, ToolCallStarted
    from harness_magic.core.transcript.messages import ToolUseBlock

    if not view.record.run_id:
        view(RunStarted(run_id="r1", model="scripted/x", max_turns=5, prompt="p", run_file=None))
    view(ToolCallStarted(turn=1, tool_use=ToolUseBlock(id=tool_use_id, name=name, input={})))


def test_the_live_view_shows_the_box_just_below_its_calls_section_and_then_what_was_assumed() -> None:
    from harness_magic.core.transcript.events import AssumptionRecorded
    from harness_magic.notebook.render import WidgetRunView

    view = WidgetRunView()
    try:
        _tool_started(view, "call_1")
        _tool_started(view, "call_9", "python_interpreter")
        asker = PersonAsker(FakeShell(), host=lambda: view, router=lambda: FrontEnd())
        with pytest.raises(TimeoutError):
            asker.answer(QuestionRequest("Which week?", tool_use_id="call_1", timeout_s=0.2))
        children = list(view.transcript.box.children)
        section = view.transcript.tools["call_1"][0]
        box = next(c for c in children if "agent-prompt" in c._dom_classes)
        assert children.index(box) == children.index(section) + 1
        view(AssumptionRecorded(text="Monday-based weeks", source="model", tool_use_id="call_5"))
        note = next(c for c in box.children if "agent-prompt-note" in c._dom_classes)
        assert "assumed: Monday-based weeks" in note.value
    finally:
        view.close()


def test_a_view_whose_run_ended_refuses_the_box_and_it_is_displayed_on_its_own(monkeypatch) -> None:
    import IPython.display

    from harness_magic.notebook.render import WidgetRunView

    shown: list[Any] = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    view = WidgetRunView()
    view.stop()
    asker = PersonAsker(FakeShell(), host=lambda: view, router=lambda: FrontEnd())
    with pytest.raises(TimeoutError):
        asker.answer(QuestionRequest("Which week?", timeout_s=0.1))
    assert len(shown) == 1 and "agent-prompt" in shown[0]._dom_classes
    view.close()


# -- the terminal ------------------------------------------------------------------------------------


@pytest.fixture
def terminal() -> Iterator[tuple[int, Any]]:
    """A pseudo-terminal: (the keyboard's end, the terminal as the asker's stdin)."""
    keyboard, tty = os.openpty()
    stdin = os.fdopen(tty, "rb", buffering=0)
    try:
        yield keyboard, stdin
    finally:
        stdin.close()
        os.close(keyboard)


class Screen:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def _typed_later(keyboard: int, data: bytes, delay_s: float = 0.1) -> None:
    threading.Timer(delay_s, os.write, args=(keyboard, data)).start()


def test_in_a_terminal_a_typed_number_picks_an_option(terminal: tuple[int, Any]) -> None:
    keyboard, stdin = terminal
    screen = Screen()
    _typed_later(keyboard, b"2\n")
    asker = PersonAsker(None, stdin=stdin, stdout=screen)
    assert asker.presence() == "terminal"
    assert asker.answer(QUESTION) == "Sunday"
    assert "question from the agent: Which **week** start?" in screen.text and "  2. Sunday" in screen.text
    assert "Answer (1-2 or text): " in screen.text


def test_in_a_terminal_the_timeout_cancels_the_prompt_and_discards_what_was_half_typed(
        terminal: tuple[int, Any]) -> None:
    import select

    keyboard, stdin = terminal
    screen = Screen()
    os.write(keyboard, b"Mon")  # typed, never sent
    with pytest.raises(TimeoutError):  # raised only when the prompt's own deadline passed
        PersonAsker(None, stdin=stdin, stdout=screen).answer(QuestionRequest("Which week?", timeout_s=0.4))
    assert "no answer after 0.4 s" in screen.text
    os.write(keyboard, b"\n")
    assert select.select([stdin], [], [], 30)[0], "the terminal still works"  # returns as soon as it is readable
    assert os.read(stdin.fileno(), 100) == b"\n", "'Mon' cannot become the next command"


def test_in_a_terminal_an_approval_asks_y_or_n_with_control_bytes_escaped(terminal: tuple[int, Any]) -> None:
    keyboard, stdin = terminal
    screen = Screen()
    hostile = ApprovalRequest(tool="sql_query\x1b]0;pwned\x07", connector="db", safety="write",
                              summary="DROP TABLE users\x1b[2J", arguments={"sql": "select 1 \r\x1b[31m"})
    _typed_later(keyboard, b"y\n")
    decision = PersonAsker(None, stdin=stdin, stdout=screen, approval_timeout_s=lambda: 5.0).approve(hostile)
    assert decision.approved
    assert "\x1b" not in screen.text and "\x07" not in screen.text and "\\x1b" in screen.text
    assert "Approve sql_query\\x1b]0;pwned\\x07? [y/N] " in screen.text


def test_in_a_terminal_an_unanswered_approval_is_denied_when_its_time_passes(terminal: tuple[int, Any]) -> None:
    _, stdin = terminal
    decision = PersonAsker(None, stdin=stdin, stdout=Screen(), approval_timeout_s=lambda: 0.3).approve(WRITE)
    assert decision == ApprovalDecision(False, "nobody approved it within 0.3 s")


def test_without_a_terminal_nobody_is_asked(tmp_path: Path) -> None:
    with open(tmp_path / "piped", "w+b") as piped:
        asker = PersonAsker(None, stdin=piped, stdout=Screen())
        assert asker.presence() is None and asker.answer(QUESTION) is None
        assert asker.approve(WRITE) == ApprovalDecision(False, NO_PERSON_REASON)


# -- a real kernel: the front end's clicks, never a stdin request ----------------------------------------

jupyter_client = pytest.importorskip("jupyter_client")

from lab_frontend import Prompt, click, run_answering  # noqa: E402
from kernel_helpers import Cell, Kernel, agent_kernel  # noqa: E402
from kernel_helpers import script as scripted  # noqa: E402
from harness_magic.core.transcript.log import read_log  # noqa: E402


def ask(question: str, options: list[str] | None = None, why: str = "") -> dict[str, Any]:
    arguments: dict[str, Any] = {"question": question, "why": why}
    if options is not None:
        arguments["options"] = options
    return {"text": "", "tool_calls": [{"name": "ask_user", "arguments": arguments}]}


def last_log_questions(kernel: Kernel) -> list[dict[str, Any]]:
    logs = sorted((kernel.cwd / "runs").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    return [r for r in read_log(str(logs[-1])) if r.get("type") == "event" and r.get("event") == "question"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("asking"), run_dir="runs", sandbox="inprocess", live="off") as k:
        yield k


@pytest.mark.kernel
def test_in_a_kernel_a_click_on_an_option_answers_while_the_cell_runs(kernel: Kernel) -> None:
    model = scripted(kernel, ask("Which **week** start? <script>alert(1)</script>", ["Monday", "Sunday"],
                                 "WAU depends on it"), {"text": "Done."})
    cell, prompts = run_answering(kernel, f"%%agent --new {model}\nWhy did weekly active users drop?", "1")
    assert cell.ok, cell.outputs
    (prompt,) = prompts
    assert prompt.labels == ["Monday", "Sunday"] and prompt.state == "answered"
    assert "<strong>week</strong>" in prompt.header and "&lt;script&gt;" in prompt.header
    assert all(prompt.controls_disabled)
    (logged,) = last_log_questions(kernel)
    assert logged["answer"] == "Monday" and logged["source"] == "user"


@pytest.mark.kernel
def test_in_a_kernel_words_typed_into_the_box_answer(kernel: Kernel) -> None:
    model = scripted(kernel, ask("Which week start?", ["Monday", "Sunday"]), {"text": "Done."})
    cell, _ = run_answering(kernel, f"%%agent --new {model}\nWhy?", "ISO weeks")
    assert cell.ok, cell.outputs
    (logged,) = last_log_questions(kernel)
    assert logged["answer"] == "ISO weeks"


@pytest.mark.kernel
def test_in_a_kernel_an_unanswered_question_is_withdrawn_and_the_queued_next_cell_runs(kernel: Kernel) -> None:
    assert kernel.run("%config AgentMagics.question_timeout_s = 1.0").ok
    model = scripted(kernel, ask("Which definition of active?"),
                     {"text": "", "tool_calls": [{"name": "remember", "arguments": {
                         "kind": "assumption", "text": "active = at least one event in the week"}}]},
                     {"text": "WAU fell 8%."})
    queued: list[str] = []

    def queue_next_cell(k: Kernel, prompt: Prompt) -> None:  # Run All: the next cell is sent at once
        queued.append(k.kc.execute("print('next cell ran')"))

    try:
        cell, prompts = run_answering(kernel, f"%%agent --new {model}\nWhy did weekly active users drop?", None,
                                      while_waiting=queue_next_cell)
        nxt = kernel.collect(Cell(queued[0]))
    finally:
        kernel.run("%config AgentMagics.question_timeout_s = 300.0")
    assert cell.ok, cell.outputs
    (prompt,) = prompts
    assert prompt.state == "withdrawn" and all(prompt.controls_disabled)
    assert "withdrawn: no answer within 1 s" in prompt.note
    assert nxt.ok and nxt.stdout == "next cell ran\n"
    (logged,) = last_log_questions(kernel)
    assert logged["source"] == "timeout" and logged["answer"] is None
    assumptions = kernel.value("get_ipython().magics_manager.registry['AgentMagics'].records[-1].state.assumptions")
    assert "active = at least one event in the week" in " ".join(assumptions)


@pytest.mark.kernel
def test_in_a_kernel_an_interrupt_withdraws_the_question_and_the_run_finishes(kernel: Kernel) -> None:
    model = scripted(kernel, ask("Which week?", ["Monday"]), {"text": "Went on without it."})
    cell, prompts = run_answering(kernel, f"%%agent --new {model}\nCount orders last week.",
                                  lambda k, prompt: k.km.interrupt_kernel())
    assert cell.ok, cell.outputs
    (prompt,) = prompts
    assert prompt.state == "withdrawn" and "interrupted" in prompt.note
    (logged,) = last_log_questions(kernel)
    assert logged["source"] == "interrupt"
    assert kernel.value("_.text") == "Went on without it."


@pytest.mark.kernel
def test_in_a_kernel_without_stdin_the_question_gets_no_answer_at_once(kernel: Kernel) -> None:
    # nbclient and nbval execute with allow_stdin=False
    model = scripted(kernel, ask("Which week?"), {"text": "Done."})
    cell = kernel.collect(Cell(kernel.kc.execute(f"%%agent --new {model}\nCount orders.", allow_stdin=False)))
    assert cell.ok, cell.outputs
    assert not any("agent-prompt" in m["content"]["data"].get("state", {}).get("_dom_classes", [])
                   for m in cell.messages if m["msg_type"] == "comm_open"), "no prompt is shown"
    (logged,) = last_log_questions(kernel)
    assert logged["source"] == "no_person"


@pytest.mark.kernel
def test_in_a_kernel_the_live_view_holds_the_box_and_a_write_is_approved_by_a_click(kernel: Kernel) -> None:
    setup = kernel.run(
        "from harness_magic.core.execution.connectors import Connector\n"
        "from harness_magic.notebook.extension import agent_session\n"
        "store = Connector('store', 'A store that keeps rows.')\nkept = []\n"
        "@store.tool(safety='write')\ndef append(row: str) -> str:\n"
        "    '''Append a row to the store.'''\n    kept.append(row)\n    return f'appended {row}'\n"
        "agent_session().add_connector(store)\n%config AgentMagics.live = 'widgets'")
    assert setup.ok, setup.outputs
    model = scripted(kernel, {"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "store"}}]},
                     {"tool_calls": [{"name": "store__append", "arguments": {"row": "r1"}}]}, {"text": "Appended."})
    try:
        cell, prompts = run_answering(kernel, f"%%agent --new {model}\nAppend r1.", "y")
    finally:
        kernel.run("%config AgentMagics.live = 'off'")
    assert cell.ok, cell.outputs
    (prompt,) = prompts
    assert prompt.kind == "approval" and prompt.labels == ["Approve", "Deny"] and prompt.state == "answered"
    assert "store__append" in prompt.header and "r1" in prompt.header
    assert kernel.value("kept") == ["r1"]


# -- terminal IPython in a pseudo-terminal -------------------------------------------------------------


def _ipython_in_a_terminal(tmp_path: Path, turns: list[dict[str, Any]]) -> Any:
    pexpect = pytest.importorskip("pexpect")
    ipython = Path(sys.executable).with_name("ipython")
    if not ipython.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    (tmp_path / "model.json").write_text(json.dumps({"turns": turns}))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "xterm-256color",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = pexpect.spawn(str(ipython), ["--simple-prompt", "--no-banner", "--colors=NoColor"], cwd=str(tmp_path),
                          env=env, dimensions=(50, 120), encoding="utf-8", timeout=120)
    child.expect(r"In \[1\]: ")
    child.sendline("%load_ext harness_magic")
    child.expect(r"In \[2\]: ")
    child.sendline("%config AgentMagics.sandbox = 'inprocess'")
    child.expect(r"In \[3\]: ")
    child.sendline("%config AgentMagics.question_timeout_s = 2.0")
    child.expect(r"In \[4\]: ")
    child.sendline("run = get_ipython().run_cell_magic('agent', '-m scripted/model.json', 'Which week?')")
    return child


def test_in_terminal_ipython_a_typed_number_answers_the_question(tmp_path: Path) -> None:
    child = _ipython_in_a_terminal(tmp_path, [ask("Which week start?", ["Monday", "Sunday"]), {"text": "Done."}])
    try:
        child.expect_exact("Answer (1-2 or text): ")
        child.sendline("2")
        child.expect(r"In \[5\]: ")
        child.sendline("print('result:', run.status, any('The user answered: Sunday' in str(b.content) "
                       "for m in run.messages for b in m.content if hasattr(b, 'tool_use_id')))")
        child.expect("result: completed True")
        child.expect(r"In \[6\]: ")
    finally:
        child.sendline("exit")
        child.close(force=True)


def test_in_terminal_ipython_the_timeout_cancels_the_prompt_and_half_typed_text_never_runs(tmp_path: Path) -> None:
    child = _ipython_in_a_terminal(tmp_path, [ask("Which week start?", ["Monday", "Sunday"]), {"text": "Done."}])
    try:
        child.expect_exact("Answer (1-2 or text): ")
        child.send("marker_never_run = 1")  # typed, never sent: discarded when the question is withdrawn
        child.expect_exact("no answer after 2 s")
        child.expect(r"In \[5\]: ")
        child.sendline("print('defined:', 'marker_never_run' in globals(), run.status)")
        child.expect("defined: False completed")
    finally:
        child.sendline("exit")
        child.close(force=True)
