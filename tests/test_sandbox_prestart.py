"""The sandbox starts in the background: beside the first model request, or when the extension loads if asked.

Through :class:`AgentSession` with the real launcher and workers; the slow or
stuck start is a real launcher stopped with SIGSTOP. Loading the extension is
checked in fresh interpreters (what a new kernel does). Timings are measured in
``benchmarks/bench_sandbox.py --first-call``, not here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace

import pytest
from processes import children_of

from harness_magic import AgentConfig, AgentSession, ProviderAdapter, ScriptedModel
from harness_magic.core.execution.sandbox.launcher_client import LauncherClient
from harness_magic.core.transcript.events import SandboxStep, ToolCallFinished, ToolCallStarted

START_WAIT_S = 60.0
"""Bound on waiting for a background start in a test (a cold launcher on a loaded machine takes seconds)."""

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
"""Where :mod:`processes` is, for the scripts run in a fresh interpreter."""
HEAVY_MODULES = ("pandas", "pyarrow", "litellm", "duckdb")
"""What %load_ext must not import into the kernel, prestart or not."""


def call(code: str) -> dict:
    return {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}




def session_dirs(launcher: LauncherClient) -> set[str]:
    return {n for n in os.listdir(launcher.root) if n.startswith("session-")}


class GatedModel(ScriptedModel):
    """A scripted model whose first answer runs ``before_first()`` first (the model 'thinking')."""

    def __init__(self, turns: list, before_first) -> None:
        super().__init__(turns, name="scripted/gated")
        self.before_first = before_first

    def complete(self, payload, on_text):
        if self.position == 0:
            self.before_first()
        return super().complete(payload, on_text)


@pytest.fixture
def stopped_launcher():
    """The kernel's launcher, stopped (SIGSTOP) until the test resumes it; always resumed at the end."""
    launcher = LauncherClient.shared()
    before = (children_of(launcher.pid), session_dirs(launcher))
    os.kill(launcher.pid, signal.SIGSTOP)
    try:
        yield launcher, before
    finally:
        os.kill(launcher.pid, signal.SIGCONT)


def resume(launcher: LauncherClient) -> None:
    os.kill(launcher.pid, signal.SIGCONT)


# -- the first run starts the sandbox beside its first model request ---------------------------------------------


def test_the_first_run_starts_the_sandbox_while_the_model_answers_and_its_call_does_not_wait(tmp_path,
                                                                                          stopped_launcher):
    launcher, _ = stopped_launcher
    seen: dict = {}

    def model_thinks() -> None:
        seen["starting_when_asked"] = session.sandbox_starting
        resume(launcher)  # the sandbox finishes starting while the model is still "thinking"
        deadline = time.monotonic() + START_WAIT_S
        while session.sandbox_starting and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["started_before_answer"] = not session.sandbox_starting

    model = GatedModel([call("6 * 7"), {"text": "done"}], model_thinks)
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs")),
                           adapter=ProviderAdapter("scripted/gated", transport=model))
    events: list = []
    session.subscribe(events.append)
    try:
        assert not session.sandbox_starting, "nothing starts before a run"
        result = session.ask("go")
        assert result.status == "completed"
        assert seen == {"starting_when_asked": True, "started_before_answer": True}
        assert not any(isinstance(e, SandboxStep) for e in events), "the call did not wait: no start step"
        finished = [e for e in events if isinstance(e, ToolCallFinished)]
        assert not finished[0].result.is_error and "42" in finished[0].result.content
        assert session.backend.worker_pid in children_of(launcher.pid), "it ran in the started worker"
    finally:
        session.close()


def test_a_first_call_that_waits_for_the_start_shows_the_start_step_with_its_wait(tmp_path, stopped_launcher):
    launcher, _ = stopped_launcher
    model = ScriptedModel([call("6 * 7"), {"text": "done"}], name="scripted/waits")
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs")),
                           adapter=ProviderAdapter("scripted/waits", transport=model))
    events: list = []
    session.subscribe(events.append)
    timers: list[threading.Timer] = []

    def resume_once_the_call_waits(event) -> None:
        if isinstance(event, SandboxStep) and event.duration_s is None:
            timers.append(threading.Timer(0.2, resume, (launcher,)))
            timers[-1].start()

    session.subscribe(resume_once_the_call_waits)
    try:
        result = session.ask("go")
    finally:
        for timer in timers:
            timer.join()
        session.close()
    assert result.status == "completed"
    steps = [e for e in events if isinstance(e, SandboxStep)]
    assert [(s.action, s.duration_s is None) for s in steps] == [("start", True), ("start", False)]
    first_use = next(e for e in events if isinstance(e, ToolCallStarted)).tool_use.id
    assert steps[0].tool_use_id == steps[1].tool_use_id == first_use
    assert steps[1].duration_s > 0
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert not finished[0].result.is_error and "42" in finished[0].result.content


def test_an_in_process_session_starts_nothing_in_the_background(tmp_path):
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/x", transport=ScriptedModel([{"text": "hi"}])))
    try:
        assert session.prestart() is False and not session.sandbox_starting
        assert session.ask("go").status == "completed"
        assert not session.sandbox_starting
    finally:
        session.close()


def test_a_second_prestart_starts_nothing_more(tmp_path):
    launcher = LauncherClient.shared()
    before = children_of(launcher.pid)
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs")))
    try:
        assert session.prestart() is True
        assert session.prestart() is False
        backend = session.backend  # waits for the one start
        assert session.prestart() is False
        assert children_of(launcher.pid) - before == {backend.worker_pid}
    finally:
        session.close()
    assert children_of(launcher.pid) == before


# -- nothing leaks: close, settings change, interrupt while starting -------------------------------------------


def test_closing_the_session_while_its_sandbox_starts_leaves_no_worker(tmp_path, stopped_launcher):
    launcher, (children, dirs) = stopped_launcher
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs")))
    assert session.prestart()
    assert session.sandbox_starting, "the launcher is stopped: the start cannot have finished"
    timer = threading.Timer(0.2, resume, (launcher,))  # the spawn it waits for is answered during close
    timer.start()
    try:
        session.close()
    finally:
        timer.join()
    assert children_of(launcher.pid) == children, "the worker forked for the start was stopped and reaped"
    assert session_dirs(launcher) == dirs, "its session directory was removed"


def test_changing_the_sandbox_setting_while_it_starts_closes_that_start(tmp_path, stopped_launcher):
    launcher, (children, dirs) = stopped_launcher
    config = AgentConfig(run_dir=str(tmp_path / "runs"), model="scripted/x")  # the model the new settings keep
    session = AgentSession(config, adapter=ProviderAdapter("scripted/x", transport=ScriptedModel(
        [call("6 * 7"), {"text": "done"}])))
    try:
        assert session.prestart() and session.sandbox_starting
        timer = threading.Timer(0.2, resume, (launcher,))
        timer.start()
        notes = session.reconfigure(replace(config, sandbox="inprocess"))
        timer.join()
        assert any("sandbox changed" in n for n in notes)
        assert children_of(launcher.pid) == children and session_dirs(launcher) == dirs
        assert not session.sandbox_starting
        result = session.ask("go")
        assert result.status == "completed" and session.backend.name == "inprocess"
    finally:
        session.close()


def test_an_interrupt_while_the_first_call_waits_keeps_the_start_for_the_next_run(tmp_path, stopped_launcher):
    launcher, (children, dirs) = stopped_launcher
    model = ScriptedModel([call("6 * 7"), call("6 * 7"), {"text": "done"}], name="scripted/int")
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs")),
                           adapter=ProviderAdapter("scripted/int", transport=model))
    events: list = []
    session.subscribe(events.append)
    timers: list[threading.Timer] = []

    def interrupt_while_it_waits(event) -> None:
        if isinstance(event, SandboxStep) and event.duration_s is None and not timers:
            timers.append(threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)))
            timers[-1].start()

    session.subscribe(interrupt_while_it_waits)
    try:
        first = session.ask("go")
        timers[0].join()
        assert first.status == "interrupted"
        assert session.sandbox_starting, "the start goes on (the launcher is still stopped)"
        resume(launcher)
        second = session.ask("again")
        assert second.status == "completed"
        pid = session.backend.worker_pid
        last = [e for e in events if isinstance(e, ToolCallFinished)][-1]
        assert not last.result.is_error and "42" in last.result.content
        assert children_of(launcher.pid) - children == {pid}, "one worker: the interrupted start's, taken over"
    finally:
        session.close()
    assert children_of(launcher.pid) == children and session_dirs(launcher) == dirs


# -- a failed background start surfaces at the first tool call, once -------------------------------------------

FAILING_START = textwrap.dedent("""\
    import json, subprocess, sys
    from harness_magic.core.execution.sandbox import launcher_client
    from harness_magic.core.execution.sandbox.launcher_client import LauncherClient, SandboxUnavailableError

    launcher_client.LAUNCHER_MODULE = "harness_magic.no_such_launcher"  # the launcher's start fails
    starts = []
    real_popen = subprocess.Popen
    def counted(*args, **kwargs):
        starts.append(args[0])
        return real_popen(*args, **kwargs)
    subprocess.Popen = counted
    out = {}
    try:
        from harness_magic.core.execution.sandbox import SandboxedInterpreter
        SandboxedInterpreter()
    except SandboxUnavailableError as exc:
        out["foreground"] = f"{type(exc).__name__}: {exc}"
    out["starts_foreground"] = len(starts)
    if sys.argv[1] == "session":
        from harness_magic import AgentConfig, AgentSession, ProviderAdapter, ScriptedModel
        from harness_magic.core.transcript.events import ToolCallFinished
        call = lambda code: {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}
        model = ScriptedModel([call("1"), call("2"), {"text": "done"}])
        session = AgentSession(AgentConfig(run_dir=sys.argv[2]), adapter=ProviderAdapter("scripted/x", transport=model))
        events = []
        session.subscribe(events.append)
        out["status"] = session.ask("go").status
        out["results"] = [[e.result.is_error, e.result.content] for e in events if isinstance(e, ToolCallFinished)]
        session.close()
    else:
        LauncherClient.warm()
        out["starts_after_warm"] = len(starts)
        raised = []
        for _ in range(2):
            try:
                LauncherClient.shared()
            except SandboxUnavailableError as exc:
                raised.append(exc)
                out.setdefault("starts_per_shared", []).append(len(starts))
        out["shared"] = [f"{type(e).__name__}: {e}" for e in raised]
        out["distinct"] = raised[0] is not raised[1]
    out["starts"] = len(starts)
    print(json.dumps(out))
""")


def run_failing(mode: str, tmp_path) -> dict:
    done = subprocess.run([sys.executable, "-c", FAILING_START, mode, str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_failed_background_start_is_the_first_calls_error_once_with_the_foreground_message(tmp_path):
    out = run_failing("session", tmp_path)
    assert "No module named harness_magic.no_such_launcher" in out["foreground"]
    assert out["status"] == "completed", "a tool error is the model's to read, not the run's end"
    (first_error, first), (second_error, second) = out["results"]
    assert first_error and first == out["foreground"], "the same message a start in the call gives"
    assert second_error and second == out["foreground"]
    # The reference start, then the background start (its error taken by call 1), then call 2's own try:
    assert out["starts"] == out["starts_foreground"] + 2


def test_a_failed_warm_start_is_raised_by_the_next_shared_call_only(tmp_path):
    out = run_failing("warm", tmp_path)
    base = out["starts_foreground"]
    assert out["starts_after_warm"] == base + 1, "warm() started one launcher and raised nothing"
    assert out["starts_per_shared"] == [base + 1, base + 2], \
        "the first shared() raised the kept failure; the next tried anew"
    assert out["shared"] == [out["foreground"]] * 2 and out["distinct"]


# -- loading the extension: cheap, and nothing starts unless asked ---------------------------------------------

LOAD = textwrap.dedent("""\
    import json, os, sys, threading, time
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    before, after, sandbox = sys.argv[1], sys.argv[2], sys.argv[3]
    shell.run_line_magic("config", f'AgentMagics.sandbox = "{sandbox}"')
    if before == "on":
        shell.run_line_magic("config", "AgentMagics.prestart_sandbox = True")
    shell.run_line_magic("load_ext", "harness_magic")
    if after == "on":
        shell.run_line_magic("config", "AgentMagics.prestart_sandbox = True")
    for thread in threading.enumerate():
        if thread.name.startswith("harness-"):
            thread.join(120)
    me = os.getpid()
    from processes import children_of  # every thread's children: the warm thread forked the launcher
    kids = sorted(children_of(me))
    grandkids = sorted(k for pid in kids for k in children_of(pid))
    from harness_magic.core.execution.sandbox.launcher_client import LAUNCHER_MODULE
    launchers = [k for k in kids if LAUNCHER_MODULE in open(f"/proc/{k}/cmdline").read().split(chr(0))]
    out = {"children": kids, "workers": grandkids, "heavy": [m for m in HEAVY if m in sys.modules],
           "launcher": launchers[0] if launchers else None}
    failure = sys.modules.get("harness_magic.core.execution.sandbox.launcher_client")
    failure = failure and failure.LauncherClient._warm_failure
    if failure is not None:
        out["warm_failure"] = str(failure)  # absent when the start succeeded: a failure reads in the assertion
    print(json.dumps(out))
""").replace("HEAVY", repr(HEAVY_MODULES))


def load(before: str, after: str, sandbox: str = "worker") -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", LOAD, before, after, sandbox], capture_output=True, text=True,
                          timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loading_the_extension_starts_nothing_and_imports_nothing_heavy():
    out = load("off", "off")
    assert out == {"children": [], "workers": [], "heavy": [], "launcher": None}


@pytest.mark.parametrize("when", ["before", "after"])
def test_prestart_sandbox_starts_the_launcher_in_the_background_without_heavy_imports(when):
    out = load("on" if when == "before" else "off", "on" if when == "after" else "off")
    assert out["launcher"] is not None and out["children"] == [out["launcher"]], out
    assert out["workers"] == [], "no worker before an agent cell"
    assert out["heavy"] == [], "the launcher imports the data stack, not the kernel"


def test_prestart_sandbox_with_the_in_process_backend_starts_nothing():
    assert load("on", "off", sandbox="inprocess") == {"children": [], "workers": [], "heavy": [], "launcher": None}
