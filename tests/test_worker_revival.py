"""Calls survive our plumbing: a worker or launcher found dead when a call starts is replaced and the call runs.

Contracts (issue 35, point 3), with real launchers and workers killed with real signals:

- A worker killed between two calls, or the launcher that forked it, is found dead by the next call, which
  replaces it and runs once in the new worker: the model reads an ordinary result (no error, none of our
  plumbing), the run log holds a ``worker_replaced`` event (which process, its pid, how it ended) and the live
  view a line; cached handles are inputs of the new worker as they are of any fresh one.
- A worker that dies while a call runs gives that call one clear error (what died, that its work was lost, which
  cached handles survive); the code is not run again, and the next call works. Code that kills its own worker
  is such a call: it is never retried in a loop.

Between-call kills come from the scripted model server's request hook (``tests/scripted_server.py``): the model
"thinks" while the worker is killed, as a real kill would land, and the test waits until the killed process
holds no descriptor (a kill landing in the very microseconds a call starts is a kill during that call).
"""

from __future__ import annotations

import io
import json
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
from processes import children_of
from rich.console import Console

from harness_magic import AgentConfig, AgentSession, ProviderAdapter
from harness_magic.core.execution.sandbox import SandboxedInterpreter
from harness_magic.core.execution.sandbox.backend import SURVIVORS_LISTED
from harness_magic.core.execution.sandbox.launcher_client import LauncherClient
from harness_magic.core.export.record import RunRecord, ToolRecord, apply_event, sandbox_step_text
from harness_magic.core.transcript.events import WorkerReplaced
from harness_magic.core.transcript.log import read_log
from harness_magic.notebook.render import TerminalRenderer

FRIENDLY_OFF = {"ast_precheck": False, "audit_hooks": False}
"""The friendly refusals are off where code kills its own worker (the OS layers still hold)."""

DEATH_WAIT_S = 10.0
"""Bound on waiting for a killed process to be gone (SIGKILL lands in milliseconds)."""

PLUMBING_WORDS = ("SandboxError", "sandbox", "worker", "launcher", "SIGKILL", "replaced")
"""What a model must never read after a between-calls kill."""


def sandbox(**options) -> SandboxedInterpreter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SandboxedInterpreter(**FRIENDLY_OFF, allow_unconfined=True, **options)


def dead(pid: int) -> bool:
    """Gone, or a zombie whose every thread has ended: only then are its descriptors closed (a zombie leader
    whose other threads still exit lists no descriptors, yet its threads hold them)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X") and os.listdir(f"/proc/{pid}/task") == [str(pid)]
    except FileNotFoundError:
        return True


def kill_and_wait(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    deadline = time.monotonic() + DEATH_WAIT_S
    while not dead(pid):
        assert time.monotonic() < deadline, f"pid {pid} survived {sig.name}"
        time.sleep(0.01)


def kill_launcher(launcher: LauncherClient, worker_pid: int | None) -> None:
    """SIGKILL the launcher and wait for it and its worker, which dies with it (PR_SET_PDEATHSIG)."""
    os.kill(launcher.pid, signal.SIGKILL)
    deadline = time.monotonic() + DEATH_WAIT_S
    while launcher.process.poll() is None or (worker_pid is not None and not dead(worker_pid)):
        assert time.monotonic() < deadline, "the launcher or its worker survived SIGKILL"
        time.sleep(0.01)


def call(code: str, call_id: str) -> dict:
    return {"tool_calls": [{"id": call_id, "name": "python_interpreter", "arguments": {"code": code}}]}


def tool_messages(body: dict) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in body["messages"] if m["role"] == "tool"]


# -- the backend ---------------------------------------------------------------------------------------------------


@pytest.fixture
def interp():
    backend = sandbox(timeout=10.0)
    yield backend
    backend.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_a_worker_killed_between_calls_is_replaced_and_the_call_runs_in_the_new_one(interp, sig):
    frame = pd.DataFrame({"x": range(1000)})
    versions = {"frame": "v1"}
    first = interp.execute("int(frame.x.sum())", {"frame": frame}, ["frame"], versions=versions)
    assert first.value == 499500 and first.replaced is None
    old, restarts = interp.worker_pid, interp.restarts
    kill_and_wait(old, sig)

    result = interp.execute("print('ran'); int(frame.x.sum())", {"frame": frame}, ["frame"], versions=versions)

    assert result.error is None and result.value == 499500
    assert result.stdout == "ran\n", "the code ran once"
    replaced = result.replaced
    assert replaced is not None and replaced.process == "worker" and replaced.pid == old
    assert replaced.signal == sig.name and replaced.why == f"killed by {sig.name}" and replaced.exit_status is None
    assert replaced.new_pid == interp.worker_pid != old and replaced.duration_s > 0
    assert interp.restarts == restarts + 1
    assert len(interp.exported_files()) == 1, "the cached input's file served the new worker (not written again)"
    after = interp.execute("7", {}, [])
    assert after.value == 7 and after.replaced is None, "a live worker is not replaced"


def test_a_launcher_killed_between_calls_is_replaced_with_its_worker_and_the_call_runs(interp):
    assert interp.execute("1", {}, []).value == 1
    old_launcher, old_worker = interp._launcher, interp.worker_pid
    kill_launcher(old_launcher, old_worker)

    result = interp.execute("6 * 7", {}, ["kept"])

    assert result.error is None and result.value == 42
    replaced = result.replaced
    assert replaced is not None and replaced.process == "launcher" and replaced.pid == old_launcher.pid
    assert replaced.why == "killed by SIGKILL" and replaced.signal == "SIGKILL"
    assert interp._launcher is not old_launcher and interp._launcher is LauncherClient.shared()
    assert interp._launcher.alive() and replaced.new_pid == interp.worker_pid != old_worker


def test_a_worker_killed_during_a_call_gives_one_clear_error_and_the_next_call_works(interp):
    pid, restarts = interp.worker_pid, interp.restarts
    threading.Timer(0.5, kill_and_wait, (pid,)).start()

    result = interp.execute("import time\nprint('started', flush=True)\ntime.sleep(5)\nsave('late', 1)", {},
                            ["sales", "customers"])

    error = result.error or ""
    assert error.startswith("SandboxError: the sandbox worker running this code died before the code finished "
                            "(killed by SIGKILL).")
    assert "was lost and nothing it saved was kept" in error
    assert error.endswith("Every cached handle is intact and usable in the next call: customers, sales.")
    assert result.replaced is None and result.saved == []
    after = interp.execute("print('again'); 6 * 7", {}, [])
    assert after.error is None and after.value == 42 and after.stdout == "again\n", "the killed code was not re-run"
    assert interp.worker_pid != pid and interp.restarts == restarts + 1


def test_code_that_kills_its_own_worker_fails_once_and_is_never_retried(interp):
    restarts = interp.restarts
    result = interp.execute("import os, signal\nprint('once', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)",
                            {}, [])
    assert "SandboxError" in (result.error or "") and "SIGKILL" in result.error
    assert result.replaced is None
    assert interp.restarts == restarts, "the call was not retried in a new worker"
    assert interp.execute("'alive'", {}, []).value == "alive"
    assert interp.restarts == restarts + 1


def test_code_that_leaves_a_self_kill_for_later_is_found_dead_by_the_next_call_which_runs(interp):
    """The hostile version of a between-calls death: the model's code arms a timer that kills its worker after
    the reply. The next call still runs (once, in a new worker), and the log says which signal ended the old one."""
    armed = interp.execute("import os, signal\nsignal.signal(signal.SIGALRM, signal.SIG_DFL)\n"
                           "signal.setitimer(signal.ITIMER_REAL, 0.2)\n'armed'", {}, [])
    assert armed.value == "armed"
    pid = interp.worker_pid
    deadline = time.monotonic() + DEATH_WAIT_S
    while not dead(pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    result = interp.execute("6 * 7", {}, [])
    assert result.value == 42 and result.error is None
    assert result.replaced is not None and result.replaced.signal == "SIGALRM"


def test_a_lost_worker_error_lists_at_most_a_bounded_number_of_surviving_handles(interp):
    names = [f"h{i:03d}" for i in range(SURVIVORS_LISTED + 70)]
    pid = interp.worker_pid
    threading.Timer(0.3, kill_and_wait, (pid,)).start()
    result = interp.execute("import time\ntime.sleep(5)", {}, names)
    error = result.error or ""
    assert f"{', '.join(names[:SURVIVORS_LISTED])} and 70 more." in error
    assert names[SURVIVORS_LISTED] not in error


def test_no_handles_is_said_plainly(interp):
    threading.Timer(0.3, kill_and_wait, (interp.worker_pid,)).start()
    result = interp.execute("import time\ntime.sleep(5)", {}, [])
    assert (result.error or "").endswith("The cache holds no handles yet.")


# -- through AgentSession and the model server -------------------------------------------------------------------


@pytest.fixture
def session(server, tmp_path):
    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", sleep=lambda s: None)
    agent = AgentSession(AgentConfig(model="openai/test-model", run_dir=str(tmp_path / "runs"),
                                     planner=False, reminders=False), adapter=adapter)
    yield agent
    agent.close()


def kill_at_request(server, number: int, kill) -> None:
    """Run ``kill()`` when the model server receives request ``number`` (1-based), before it answers."""
    def hook(headers, body):
        if len(server.requests) == number:
            kill()
    server.on_request = hook


@pytest.mark.parametrize("process", ["worker", "launcher"])
def test_a_process_killed_between_calls_leaves_the_model_no_trace_and_the_log_a_line(server, session, process):
    server.replies = [call("save('nums', [1, 2, 3])", "c1"), call("print(sum(nums))", "c2"), {"text": "six"}]
    killed: dict = {}

    def kill() -> None:
        backend = session.backend
        if process == "worker":
            killed["pid"] = backend.worker_pid
            kill_and_wait(backend.worker_pid)
        else:
            killed["pid"] = backend._launcher.pid
            kill_launcher(backend._launcher, backend.worker_pid)

    kill_at_request(server, 2, kill)
    events: list = []
    session.subscribe(events.append)
    screen = io.StringIO()
    session.subscribe(TerminalRenderer(Console(file=screen, force_terminal=False, color_system=None, width=200)))

    result = session.ask("sum three numbers")

    assert result.status == "completed", result.error
    assert len(server.requests) == 3 and killed
    answered = tool_messages(server.requests[2])[-1]
    assert answered == "stdout:\n6\n", answered
    for body in server.requests:
        for text in tool_messages(body):
            assert not any(word in text for word in PLUMBING_WORDS), text
    replaced = [e for e in events if isinstance(e, WorkerReplaced)]
    assert len(replaced) == 1 and replaced[0].process == process and replaced[0].pid == killed["pid"]
    assert replaced[0].tool_use_id == "c2" and replaced[0].signal == "SIGKILL"
    logged = [r for r in read_log(result.run_file) if r.get("type") == "event" and r.get("name") == "worker_replaced"]
    assert len(logged) == 1
    assert logged[0]["process"] == process and logged[0]["pid"] == killed["pid"] and logged[0]["tool_use_id"] == "c2"
    assert logged[0]["why"] == "killed by SIGKILL" and logged[0]["new_pid"] == session.backend.worker_pid
    replaced_words = "replaced" if process == "worker" else "replaced with its worker"
    line = f"sandbox {process} (pid {killed['pid']}) was found dead (killed by SIGKILL) and {replaced_words} " \
           "before the call ran · "
    assert screen.getvalue().count(line) == 1, screen.getvalue()


def test_a_worker_killed_during_a_call_tells_the_model_once_and_the_next_call_works(server, session):
    server.replies = [call("save('nums', [1, 2, 3])", "c1"),
                      call("import time\ntime.sleep(5)", "c2"),
                      call("print(sum(nums))", "c3"), {"text": "six"}]

    def kill_soon() -> None:
        pid = session.backend.worker_pid
        threading.Timer(0.5, kill_and_wait, (pid,)).start()

    kill_at_request(server, 2, kill_soon)  # the worker is killed while call c2 sleeps
    events: list = []
    session.subscribe(events.append)

    result = session.ask("sum three numbers slowly")

    assert result.status == "completed", result.error
    lost = tool_messages(server.requests[2])[-1]
    assert "SandboxError: the sandbox worker running this code died before the code finished" in lost
    assert "Every cached handle is intact and usable in the next call: nums." in lost
    assert tool_messages(server.requests[3])[-1] == "stdout:\n6\n"
    errors = [text for text in tool_messages(server.requests[3]) if "SandboxError" in text]
    assert len(errors) == 1, "one error, for the call that lost its worker"
    assert not any(isinstance(e, WorkerReplaced) for e in events), "nothing was found dead at a call's start"


# -- the live view --------------------------------------------------------------------------------------------------


def test_the_live_view_places_the_replacement_line_above_the_call_it_ran_for():
    record = RunRecord(run_id="r1", model="m")
    tool = ToolRecord("c2", "python_interpreter", {"code": "1"}, 1)
    record.items.append(tool)
    event = WorkerReplaced(process="launcher", pid=812, why="killed by SIGKILL", signal="SIGKILL", new_pid=900,
                           duration_s=1.25, tool_use_id="c2")
    apply_event(record, event, object())
    text = "sandbox launcher (pid 812) was found dead (killed by SIGKILL) and replaced with its worker " \
           "before the call ran · 1.25 s"
    assert sandbox_step_text(event) == text
    assert record.items == [("notice", "info", text), tool]
    assert tool.sandbox_s == 1.25


# -- in a real kernel -------------------------------------------------------------------------------------------


def test_in_a_kernel_a_worker_killed_between_calls_is_replaced_and_the_cell_shows_it(server, tmp_path: Path):
    from kernel_helpers import agent_kernel

    server.replies = [call("save('nums', [1, 2, 3])", "c1"), call("print(sum(nums))", "c2"), {"text": "six"}]
    with agent_kernel(tmp_path, run_dir="runs", model="openai/test-model", api_base=server.api_base,
                      live="rich") as kernel:
        kernel_pid = kernel.value("__import__('os').getpid()")

        def kill_worker() -> None:
            workers = {w for launcher in children_of(kernel_pid) for w in children_of(launcher)}
            assert len(workers) == 1, workers
            kill_and_wait(workers.pop())

        kill_at_request(server, 2, kill_worker)
        cell = kernel.run("%%agent\nsum three numbers")
        assert cell.ok, cell.outputs
        assert len(server.requests) == 3
        assert tool_messages(server.requests[2])[-1] == "stdout:\n6\n"
        for text in tool_messages(server.requests[2]):
            assert not any(word in text for word in PLUMBING_WORDS), text
        logs = list((tmp_path / "runs").rglob("*.jsonl"))
        names = [r.get("name") for path in logs for r in read_log(path) if r.get("type") == "event"]
        assert names.count("worker_replaced") == 1
        shown = "".join(o.get("text") or o.get("data", {}).get("text/plain", "") for o in cell.outputs)
        assert shown.count("was found dead (killed by SIGKILL) and replaced before the call ran") == 1, shown


def test_a_launcher_found_dead_by_the_fork_after_a_retired_worker_is_reported_by_the_next_call(interp):
    """Between two cells the worker is retired; a launcher that dies then is found by the next cell's fork."""
    interp.retire_worker()
    old = interp._launcher
    kill_launcher(old, None)
    assert interp.start_worker() > 0  # the next cell's fork step: a new launcher, then its worker
    result = interp.execute("6 * 7", {}, [])
    assert result.error is None and result.value == 42
    replaced = result.replaced
    assert replaced is not None and replaced.process == "launcher" and replaced.pid == old.pid
    assert replaced.why == "killed by SIGKILL" and replaced.new_pid == interp.worker_pid
    assert interp.execute("1", {}, []).replaced is None, "reported once"


def test_a_subagents_worker_killed_between_its_calls_is_replaced_and_logged_against_the_subagent_call(
        server, session):
    """A subagent runs in a worker of its own (a sibling of the session's): one found dead at a call's start is
    replaced like the session's, the subagent's model sees no trace of it, and the parent's log and live view get
    the one ``worker_replaced`` line, against the parent's ``subagent`` call in progress."""
    made: list = []
    make = session._subagent_backend
    session._subagent_backend = lambda: made.append(make()) or made[-1]
    session.enable_subagents()
    server.replies = [
        {"tool_calls": [{"id": "p1", "name": "subagent", "arguments": {"task": "sum three numbers"}}]},
        call("save('nums', [1, 2, 3])", "s1"),
        call("print(sum(nums))", "s2"),
        {"text": "six"},
        {"text": "the subagent says six"},
    ]
    killed: dict = {}

    def hook(headers, body):
        if len(server.requests) == 3:  # the subagent's second request: its first call ran in its worker
            (own,) = made
            killed["pid"] = own.worker_pid
            kill_and_wait(killed["pid"])
    server.on_request = hook
    events: list = []
    session.subscribe(events.append)

    result = session.ask("ask a subagent to sum three numbers")

    assert result.status == "completed", result.error
    assert killed and killed["pid"] != session.backend.worker_pid, "the subagent ran in a worker of its own"
    assert tool_messages(server.requests[3])[-1] == "stdout:\n6\n"
    for body in server.requests[1:4]:
        for text in tool_messages(body):
            assert not any(word in text for word in PLUMBING_WORDS), text
    replaced = [e for e in events if isinstance(e, WorkerReplaced)]
    assert [(e.process, e.pid, e.tool_use_id) for e in replaced] == [("worker", killed["pid"], "p1")]
    logged = [r for r in read_log(result.run_file) if r.get("type") == "event" and r.get("name") == "worker_replaced"]
    assert [(r["pid"], r["tool_use_id"], r["why"]) for r in logged] == [(killed["pid"], "p1", "killed by SIGKILL")]
