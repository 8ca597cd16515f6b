"""Exits are clean after a provider error: terminal IPython and the kernel end promptly.

The first ``%%agent`` run asks a cloud model with no key: the provider refuses
before sending anything, while the sandbox start that began beside that request
is still importing and warming its launcher. Before the fix, terminal IPython's
``exit`` then hung (litellm's HTTP handlers' finalizers imported a module while
the interpreter was finalizing, and the import lock was held by the frozen
importing thread) and a kernel answered ``shutdown_request`` but stayed alive.

The bounds below are liveness bounds (a hang never ends), not benchmarks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

IPYTHON = Path(sys.executable).with_name("ipython")
TERMINAL_EXIT_S = 5.0
"""Terminal IPython must be gone this long after ``exit`` (the issue's bound)."""
KERNEL_EXIT_S = 10.0
"""A kernel must be gone this long after answering ``shutdown_request`` (the issue's bound)."""
KERNELS_IN_A_ROW = 20
"""Kernels started one after another, each failing its first run for a missing key, then shut down."""
RUN_TIMEOUT_S = 120
"""IPython or a kernel starting, and one run that fails before anything is sent."""
NO_KEY_MODEL = "openai/gpt-4o-mini"
"""A cloud model: with no OPENAI_API_KEY and no api_base the run fails before any request."""
NO_KEY_MESSAGE = "No API key for model"


def _keyless_environment(home: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.endswith("_API_KEY")}
    env.update(HOME=str(home), TERM="xterm-256color", LITELLM_LOCAL_MODEL_COST_MAP="True")
    return env


def _gone_within(pid: int, limit_s: float) -> float | None:
    """Seconds until process ``pid`` (our child) has exited, or None when it still runs after ``limit_s``."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # already reaped by its manager
            return time.monotonic() - started
        if done:
            return time.monotonic() - started
        time.sleep(0.05)
    return None


def test_terminal_ipython_exits_promptly_after_a_run_failed_for_a_missing_key(tmp_path: Path) -> None:
    if not IPYTHON.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    child = pexpect.spawn(str(IPYTHON), ["--simple-prompt", "--no-banner", "--colors=NoColor"],
                          cwd=str(tmp_path), env=_keyless_environment(tmp_path), dimensions=(50, 110),
                          encoding="utf-8", timeout=RUN_TIMEOUT_S)
    try:
        child.expect(r"In \[1\]: ")
        child.sendline("%load_ext harness_magic")  # the default sandbox: its start runs beside the request
        child.expect(r"In \[2\]: ")
        child.sendline(f"%%agent -m {NO_KEY_MODEL}")
        child.sendline("What is 1 + 1?")
        child.sendline("")
        child.sendline("")
        child.expect(r"In \[3\]: ")
        assert NO_KEY_MESSAGE in child.before, child.before[-2000:]
        child.sendline("exit")
        started = time.monotonic()
        child.expect(pexpect.EOF, timeout=TERMINAL_EXIT_S)
        print(f"terminal IPython exited {time.monotonic() - started:.2f} s after `exit`", file=sys.stderr)
    finally:
        if child.isalive():
            child.kill(signal.SIGKILL)
        child.close(force=True)


@pytest.mark.kernel
def test_kernels_exit_promptly_after_shutdown_request_when_their_first_run_failed_for_a_missing_key(
        tmp_path: Path) -> None:
    from jupyter_client import KernelManager

    env = _keyless_environment(tmp_path)
    took = []
    for attempt in range(KERNELS_IN_A_ROW):
        manager = KernelManager(kernel_name="harness-agent")  # the extension loads with the kernel
        manager.start_kernel(cwd=str(tmp_path), env=env)
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=RUN_TIMEOUT_S)
            said: list[str] = []

            def keep(message: dict) -> None:
                content = message["content"]
                said.append(" ".join(str(content.get(key, "")) for key in ("text", "data", "evalue")))

            client.execute_interactive(f"%%agent -m {NO_KEY_MODEL}\nWhat is 1 + 1?", timeout=RUN_TIMEOUT_S,
                                       output_hook=keep)
            assert any(NO_KEY_MESSAGE in text for text in said), said
            pid = manager.provisioner.process.pid
            client.shutdown()
            gone = _gone_within(pid, KERNEL_EXIT_S)
            assert gone is not None, (f"kernel {attempt + 1} of {KERNELS_IN_A_ROW} (pid {pid}) is still alive "
                                      f"{KERNEL_EXIT_S:g} s after shutdown_request")
            took.append(gone)
        finally:
            client.stop_channels()
            if manager.has_kernel and manager.is_alive():
                manager.shutdown_kernel(now=True)
            manager.cleanup_resources()
    print(f"{len(took)} kernels exited in {min(took):.2f}-{max(took):.2f} s after shutdown_request",
          file=sys.stderr)


def test_litellms_handler_finalizers_do_nothing_while_the_interpreter_finalizes() -> None:
    """The guard alone: a process whose daemon thread holds the import lock at exit still ends.

    A thread frozen inside an import holds that lock forever; without the guard
    this process never exits (litellm's finalizer imports during finalization).
    """
    script = (
        "import threading, time\n"
        "from harness_magic.core.providers.transport import import_litellm\n"
        "import_litellm()\n"
        "from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler\n"
        "alive_at_exit = AsyncHTTPHandler()\n"
        "held = threading.Event()\n"
        "def frozen_in_an_import():\n"
        "    import _imp\n"
        "    _imp.acquire_lock()\n"
        "    held.set()\n"
        "    time.sleep(3600)\n"
        "threading.Thread(target=frozen_in_an_import, daemon=True).start()\n"
        "held.wait()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=_keyless_environment(Path.cwd()))
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_finalizer_guard_wraps_litellms_own_finalizer_once() -> None:
    from harness_magic.core.providers.litellm_exit import guard_litellm_finalizers, is_guarded
    from harness_magic.core.providers.transport import import_litellm

    import_litellm()
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler, HTTPHandler

    first = HTTPHandler.__del__
    assert guard_litellm_finalizers() == [f"{AsyncHTTPHandler.__module__}.AsyncHTTPHandler",
                                          f"{HTTPHandler.__module__}.HTTPHandler"]
    assert HTTPHandler.__del__ is first, "a second call wraps nothing twice"
    for cls in (AsyncHTTPHandler, HTTPHandler):
        assert is_guarded(cls)
        original = cls.__del__.__wrapped__  # what runs while the process lives: litellm's own finalizer
        assert original.__module__ == cls.__module__ and not is_guarded(type("Plain", (), {"__del__": original}))


_RECORD_IOPUB_STOP = '''
from ipykernel.iostream import IOPubThread

def _recording(original_stop):
    # IPython clears the user namespace at exit: everything the wrapper needs is bound here.
    import json, os
    from ipykernel.kernelapp import IPKernelApp

    def stop(self):
        app = IPKernelApp.instance()
        alive = {name: bool(getattr(app, name, None) and getattr(app, name).is_alive())
                 for name in ("control_thread", "shell_channel_thread")}
        with open(os.environ["HARNESS_TEST_IOPUB_RECORD"], "a") as record:
            record.write(json.dumps(alive) + "\\n")
        return original_stop(self)

    return stop

IOPubThread.stop = _recording(IOPubThread.stop)


def _slow_control_idle(kernel, publish):
    # Widens the race to always: the control thread is still publishing when the main thread exits.
    import time

    def publish_status_and_flush(status, channel, *args, **kwargs):
        if status == "idle" and channel == "control":
            time.sleep(0.5)
        return publish(status, channel, *args, **kwargs)

    return publish_status_and_flush


from ipykernel.kernelapp import IPKernelApp as _App

_App.instance().kernel._publish_status_and_flush = _slow_control_idle(
    _App.instance().kernel, _App.instance().kernel._publish_status_and_flush)
'''


@pytest.mark.kernel
def test_a_kernels_channel_threads_have_stopped_when_its_iopub_thread_stops(tmp_path: Path) -> None:
    """The order that removes the exit race (see ``notebook/kernel_exit.py``), seen from inside the kernel.

    ipykernel alone stops IOPub first, while the control thread may still be publishing the
    shutdown request's idle status (the startup file below makes that publish slow, so the race
    is lost every time): the record then shows the control thread alive.
    """
    from jupyter_client import KernelManager

    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-record-iopub-stop.py").write_text(_RECORD_IOPUB_STOP)
    record = tmp_path / "iopub-stop.jsonl"
    env = _keyless_environment(tmp_path)
    env.update(IPYTHONDIR=str(tmp_path / "ipython"), HARNESS_TEST_IOPUB_RECORD=str(record))
    manager = KernelManager(kernel_name="harness-agent")
    manager.start_kernel(cwd=str(tmp_path), env=env)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=RUN_TIMEOUT_S)
        reply = client.execute_interactive("import harness_magic.notebook.kernel_exit as k; k._registered",
                                           timeout=RUN_TIMEOUT_S)
        assert reply["content"]["status"] == "ok", reply["content"]
        pid = manager.provisioner.process.pid
        client.shutdown()
        assert _gone_within(pid, KERNEL_EXIT_S) is not None, f"kernel (pid {pid}) still alive after shutdown"
    finally:
        client.stop_channels()
        if manager.has_kernel and manager.is_alive():
            manager.shutdown_kernel(now=True)
        manager.cleanup_resources()
    lines = record.read_text().splitlines()
    assert lines, "IOPubThread.stop never ran (the startup file did not load?)"
    assert json.loads(lines[0]) == {"control_thread": False, "shell_channel_thread": False}, lines
