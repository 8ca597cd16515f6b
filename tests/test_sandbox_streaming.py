"""Live output from the sandbox worker (issue 14, point 3): streamed while the call runs, bounded, kept on interrupt.

The worker sends ``output`` frames on its reply pipe while model code prints;
the kernel's reply loop hands them to a callback, bounded in characters and in
updates per second, while it keeps the deadline and the memory watchdog. The
hostile tests forge output frames from inside the sandbox (the worker's pipe is
one of its descriptors), the way a prompt-injected model would.
"""

from __future__ import annotations

import _thread
import json
import os
import signal
import threading
import time
import warnings

import pytest

from harness_magic import Harness, ScriptedModel, SessionCache, make_interpreter_tools
from harness_magic.core.transcript.events import ToolCallFinished, ToolOutputDelta
from harness_magic.core.agent.run import INTERRUPTED_RESULT
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement
from harness_magic.core.execution.sandbox.watchdog import STREAM_MAX_CHARS, STREAM_RELAY_INTERVAL_S

PROBE = probe_confinement()

pytestmark = pytest.mark.skipif(not PROBE["confined"], reason="no OS confinement on this machine")

SLOW_PRINTS = ("import time\nfor i in range(5):\n    print(f'line {i}', flush=True)\n    time.sleep(0.6)\n"
               "print('done')")


def sandbox(**options) -> SandboxedInterpreter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SandboxedInterpreter(ast_precheck=False, audit_hooks=False, **options)


class Recorder:
    def __init__(self) -> None:
        self.chunks: list[tuple[float, str]] = []

    def __call__(self, text: str) -> None:
        self.chunks.append((time.monotonic(), text))

    @property
    def text(self) -> str:
        return "".join(t for _, t in self.chunks)


def test_lines_printed_over_seconds_arrive_before_the_call_ends():
    seen = Recorder()
    with sandbox(timeout=20.0) as box:
        result = box.execute(SLOW_PRINTS, {}, [], on_output=seen)
        ended = time.monotonic()
    assert result.error is None
    assert result.stdout == "line 0\nline 1\nline 2\nline 3\nline 4\ndone\n", "the result is the full output, as before"
    assert seen.text == result.stdout
    first = next(at for at, text in seen.chunks if "line 0" in text)
    third = next(at for at, text in seen.chunks if "line 2" in text)
    assert ended - first > 2.0, "line 0 was printed ~3 s before the end and must have arrived then"
    assert third - first > 0.8, "lines arrive as they are printed, not in one piece"


def test_without_a_callback_nothing_changes():
    with sandbox(timeout=20.0) as box:
        result = box.execute("print('a')\nprint('b', flush=True)\n1", {}, [])
    assert result.stdout == "a\nb\n" and result.value == 1


FLOOD = (
    "import os, json, struct, time\n"
    "def frame(obj):\n    data = json.dumps(obj).encode()\n    return struct.pack('>I', len(data)) + data\n"
    "tiny = frame({'op': 'output', 'seq': 1, 'text': 'x'})\n"
    "big = frame({'op': 'output', 'seq': 1, 'text': 'B' * 500000})\n"
    "odd = [frame({'op': 'output', 'seq': 1, 'text': 7}), frame({'op': 'output', 'seq': 99, 'text': 'STALE'}),\n"
    "       frame({'op': 'output', 'seq': 1}), frame({'op': 'output', 'text': 'NOSEQ'}), frame([1, 2])[:0]]\n"
    "end = time.monotonic() + 60\n"
    "while time.monotonic() < end:\n"
    "    for fd in range(3, 16):\n"
    "        for f in odd + [tiny] * 50 + [big]:\n"
    "            try: os.write(fd, f)\n"
    "            except OSError: pass\n"
)


def test_a_flood_of_forged_output_frames_is_bounded_and_the_deadline_holds():
    seen = Recorder()
    timeout = 4.0
    with sandbox(timeout=timeout) as box:
        started = time.monotonic()
        result = box.execute(FLOOD, {}, [], on_output=seen)
        took = time.monotonic() - started
        assert "time limit" in result.error  # the flood never ends by itself
        assert len(seen.text) <= STREAM_MAX_CHARS
        assert len(seen.chunks) <= took / STREAM_RELAY_INTERVAL_S + 3, "updates are coalesced, not one per frame"
        assert "STALE" not in seen.text and "NOSEQ" not in seen.text
        assert set(seen.text) <= {"x", "B"}
        assert box.execute("6 * 7", {}, []).value == 42


def test_printing_a_lot_streams_at_most_the_cap_and_the_result_keeps_its_own_bound():
    seen = Recorder()
    with sandbox(timeout=30.0, stdout_max_chars=300_000) as box:
        result = box.execute("for i in range(20000):\n    print('y' * 40)", {}, [], on_output=seen)
    assert result.error is None
    assert len(seen.text) == STREAM_MAX_CHARS and set(seen.text) <= {"y", "\n"}
    assert result.stdout.startswith("y" * 40 + "\n") and "more characters of output dropped" in result.stdout


def test_a_failing_callback_does_not_fail_the_call():
    def broken(text: str) -> None:
        raise RuntimeError("display broke")

    with sandbox(timeout=20.0) as box, warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = box.execute("print('still here', flush=True)\n2", {}, [], on_output=broken)
    assert result.value == 2 and result.stdout == "still here\n"


def test_an_interrupt_mid_call_keeps_the_partial_output_in_the_result_and_the_log(tmp_path):
    from harness_magic import ProviderAdapter

    code = "import time\nfor i in range(3):\n    print(f'partial {i}', flush=True)\n    time.sleep(0.3)\ntime.sleep(60)"
    adapter = ProviderAdapter("offline/t", transport=ScriptedModel([
        {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}, {"text": "after"}]))
    cache = SessionCache()
    holder: dict[str, Harness] = {}
    with sandbox(timeout=60.0) as box:
        tools = make_interpreter_tools(cache, box, on_output=lambda text: holder["h"].tool_output(text))
        harness = holder["h"] = Harness(adapter, "system", tools, run_dir=str(tmp_path / "runs"), cache=cache)
        events: list = []
        harness.subscribe(events.append)

        def interrupt_after_output() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if "partial 2" in "".join(e.text for e in events if isinstance(e, ToolOutputDelta)):
                    break
                time.sleep(0.05)
            _thread.interrupt_main()

        threading.Thread(target=interrupt_after_output, daemon=True).start()
        started = time.monotonic()
        result = harness.run_result("go")
        assert time.monotonic() - started < 20, "the interrupt stopped the call"
        assert result.status == "interrupted"
        deltas = [e for e in events if isinstance(e, ToolOutputDelta)]
        assert "".join(e.text for e in deltas) == "partial 0\npartial 1\npartial 2\n"
        assert not any(isinstance(e, ToolCallFinished) for e in events)
        content = result.messages[-1].tool_results[0].content
        assert content.startswith(INTERRUPTED_RESULT) and "partial 0\npartial 1\npartial 2" in content
        records = [json.loads(line) for line in open(result.run_file, encoding="utf-8")]
        tools_entry = next(r for r in records if r.get("type", r.get("event")) == "tools")
        assert tools_entry["results"] != []
        assert tools_entry["results"][0]["interrupted"] is True
        assert tools_entry["results"][0]["partial_output"] == "partial 0\npartial 1\npartial 2\n"
        assert box.execute("1 + 1", {}, []).value == 2, "the interrupted worker was replaced"


def test_tool_output_outside_a_tool_call_is_ignored(tmp_path):
    from harness_magic import ProviderAdapter

    harness = Harness(ProviderAdapter("offline/t", transport=ScriptedModel([{"text": "hi"}])), "system", [],
                      run_dir=str(tmp_path / "runs"))
    events: list = []
    harness.subscribe(events.append)
    harness.tool_output("stray")
    assert events == []


# -- the views: widgets and terminal ----------------------------------------------------------


def _events(lines: int, hostile: str = ""):
    from harness_magic.core.transcript.events import RunStarted, ToolCallStarted
    from harness_magic.core.transcript.messages import ToolUseBlock

    use = ToolUseBlock(id="t1", name="python_interpreter", input={"code": "print(...)"})
    yield RunStarted(run_id="r", model="m", max_turns=5, prompt="p", run_file=None)
    yield ToolCallStarted(turn=1, tool_use=use)
    text = hostile + "".join(f"line {i}\n" for i in range(lines))
    for start in range(0, len(text), 37):  # chunks that cut lines in the middle
        yield ToolOutputDelta(turn=1, tool_use_id="t1", text=text[start:start + 37])


def test_terminal_prints_streamed_lines_bounded_and_stripped():
    import io

    from rich.console import Console

    from harness_magic.notebook.render import TERMINAL_RESULT_LINES, TerminalRenderer

    screen = io.StringIO()
    renderer = TerminalRenderer(Console(file=screen, force_terminal=False, color_system=None, width=200))
    for event in _events(TERMINAL_RESULT_LINES + 10, hostile="\x1b]0;pwned\x07\x1b[2J\n"):
        renderer(event)
    renderer._end_live("t1")
    shown = screen.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown
    assert "│ line 0\n" in shown and f"│ line {TERMINAL_RESULT_LINES - 2}\n" in shown
    assert f"│ line {TERMINAL_RESULT_LINES}\n" not in shown
    assert "│ … 11 lines more" in shown  # 10 lines past the cap, plus the hostile first line took one


def test_widget_view_streams_into_the_running_section_escaped_and_opens_it():
    pytest.importorskip("ipywidgets")
    from harness_magic.notebook.render import WidgetRunView

    view = WidgetRunView()
    try:
        for event in _events(300, hostile="<script>alert(1)</script>\n"):
            view(event)
        accordion, body, tool = view.transcript.tools["t1"]
        assert accordion.selected_index == 0, "the running call's section opens when it prints"
        assert "line 299" in body.value and "<script>" not in body.value and "&lt;script&gt;" not in body.value
        assert "lines more above" in body.value, "the live view keeps the last lines with a count of the rest"
        assert "".join(t for _, t in tool.output).startswith("<script>alert(1)</script>\nline 0\n")
        from harness_magic.core.transcript.events import SandboxStep

        view(SandboxStep(action="restart", duration_s=None, tool_use_id="t1"))
        assert "restarting the sandbox" in view.status.value
        view(SandboxStep(action="restart", duration_s=1.5, tool_use_id="t1"))
        assert "running python_interpreter" in view.status.value
        children = view.transcript.box.children
        at = children.index(accordion)
        assert "sandbox restarted · 1.50 s" in children[at - 1].value, "the step sits above the call it ran for"
    finally:
        view.close()


# -- starting and restarting the sandbox is a visible step ------------------------------------------


def test_starting_and_restarting_the_sandbox_are_steps_with_their_time(tmp_path):
    from harness_magic import AgentConfig, AgentSession, ProviderAdapter
    from harness_magic.core.transcript.events import SandboxStep, ToolCallStarted

    def call(code):
        return {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}

    turns = [call("print('hi', flush=True)"), call("import time\ntime.sleep(5)"), call("6 * 7"), {"text": "done"}]
    adapter = ProviderAdapter("scripted/steps", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="worker"), adapter=adapter)
    events: list = []
    session.subscribe(events.append)

    def kill_worker_during_the_second_call(event) -> None:
        if isinstance(event, ToolCallStarted) and sum(isinstance(e, ToolCallStarted) for e in events) == 2:
            # the worker dies while the call sleeps (one found dead between calls is replaced silently instead:
            # tests/test_worker_revival.py)
            threading.Timer(0.5, os.kill, (session.backend.worker_pid, signal.SIGKILL)).start()

    session.subscribe(kill_worker_during_the_second_call)
    try:
        result = session.ask("go")
        assert result.status == "completed"
        kinds = [(e.kind, getattr(e, "action", None), getattr(e, "duration_s", 0) is None) for e in events
                 if isinstance(e, (SandboxStep, ToolCallStarted, ToolCallFinished, ToolOutputDelta))]
        assert kinds[:5] == [("tool_call_started", None, False), ("sandbox_step", "start", True),
                             ("sandbox_step", "start", False), ("tool_output_delta", None, False),
                             ("tool_call_finished", None, False)], kinds
        steps = [e for e in events if isinstance(e, SandboxStep)]
        first_use = events[[i for i, e in enumerate(events) if isinstance(e, ToolCallStarted)][0]].tool_use.id
        assert steps[1].tool_use_id == first_use and steps[1].duration_s > 0
        restart = [e for e in steps if e.action == "restart"]
        assert [e.duration_s is None for e in restart] == [True, False], "announced, then done with its time"
        restart = restart[1:]
        assert restart[0].duration_s < 30
        third = [e for e in events if isinstance(e, ToolCallStarted)][2].tool_use.id
        assert restart[0].tool_use_id == third, "the restart happens in the call after the one that lost the worker"
        from harness_magic.core.export import RunRecord, render_run_html
        from harness_magic.core.export.record import apply_event

        record = RunRecord()
        for event in events:
            apply_event(record, event, record)
        page = render_run_html(record)
        assert "sandbox started · " in page and "sandbox restarted · " in page
    finally:
        session.close()


def test_a_subagents_sandboxed_call_streams_into_its_nested_section(tmp_path):
    from harness_magic import AgentConfig, AgentSession, ProviderAdapter
    from harness_magic.core.transcript.events import SubagentEvent

    turns = [{"tool_calls": [{"name": "subagent", "arguments": {"task": "print things"}}]},
             {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "print('from the child', flush=True)"}}]},
             {"text": "child done"},
             {"text": "done"}]
    adapter = ProviderAdapter("scripted/sub", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="worker"), adapter=adapter,
                           subagents=True)
    events: list = []
    session.subscribe(events.append)
    try:
        assert session.ask("go").status == "completed"
    finally:
        session.close()
    nested = [e.event for e in events if isinstance(e, SubagentEvent) and isinstance(e.event, ToolOutputDelta)]
    assert "".join(e.text for e in nested) == "from the child\n"
    assert not any(isinstance(e, ToolOutputDelta) for e in events), "the parent's own calls printed nothing"


def test_each_cell_forks_a_fresh_worker_as_a_step_shown_before_its_first_call(tmp_path):
    from harness_magic import AgentConfig, AgentSession, ProviderAdapter
    from harness_magic.core.transcript.events import RunStarted, SandboxStep, ToolCallStarted
    from harness_magic.core.export import RunRecorder, render_run_html
    from harness_magic.core.export.views import tool_summary

    def call(code):
        return {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}

    turns = [call("import os\nprint(os.getpid())"), {"text": "one"},
             {"text": "no code this time"},
             call("import os\nprint(os.getpid())"), call("2"), {"text": "three"}]
    adapter = ProviderAdapter("scripted/forks", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="worker"), adapter=adapter)
    events: list = []
    recorder = RunRecorder()
    session.subscribe(events.append)
    session.subscribe(recorder)
    try:
        first = session.ask("one")
        pid_first = session.backend.worker_pid
        second = session.ask("two")
        assert session.backend.worker_pid is None, "the cell's worker stopped when it began (it ran no code)"
        third = session.ask("three")
        pid_third = session.backend.worker_pid
    finally:
        session.close()
    assert first.status == second.status == third.status == "completed"
    assert pid_first != pid_third and pid_third is not None, "a new process for the new cell"
    runs: list[list] = []
    for event in events:
        if isinstance(event, RunStarted):
            runs.append([])
        elif isinstance(event, (SandboxStep, ToolCallStarted)):
            runs[-1].append((event.kind, getattr(event, "action", None), getattr(event, "duration_s", 0) is None))
    assert runs[0][:3] == [("tool_call_started", None, False), ("sandbox_step", "start", True),
                           ("sandbox_step", "start", False)]
    assert runs[1] == [], "a cell without code forks nothing"
    assert runs[2] == [("tool_call_started", None, False), ("sandbox_step", "fork", True),
                       ("sandbox_step", "fork", False), ("tool_call_started", None, False)], \
        "one fork, at the cell's first call; the second call reuses it"
    record = recorder.records[2]
    kinds = [item[0] if isinstance(item, tuple) else "tool" for item in record.items]
    assert kinds[:2] == ["notice", "tool"], f"the fork step comes before the call it ran for: {record.items}"
    assert record.items[0][2].startswith("fresh sandbox worker forked · ")
    page = render_run_html(record)
    assert page.index("fresh sandbox worker forked") < page.index("python_interpreter")
    fork = next(e for e in events if isinstance(e, SandboxStep) and e.action == "fork" and e.duration_s)
    tool = record.tools[0]
    assert tool.sandbox_s == fork.duration_s
    shown = float(tool_summary(tool).split(" · ")[1].removesuffix(" s"))
    assert shown == pytest.approx(max(tool.duration_s - fork.duration_s, 0.0), abs=0.006), \
        "the call's own time leaves the fork out"
