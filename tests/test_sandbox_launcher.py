"""The launcher protocol: replies matched to requests, bounded reads, broken launchers retired and replaced.

The real launcher is made slow by stopping it (SIGSTOP); hostile launchers are
small fake processes speaking the same protocol (``LauncherClient(command=...)``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import textwrap
import threading
import time
import warnings

import pytest
from processes import children_of

from harness_magic.core.execution.sandbox import SandboxedInterpreter, SandboxUnavailableError
from harness_magic.core.execution.sandbox import launcher_client
from harness_magic.core.execution.sandbox.launcher_client import LauncherClient

FRIENDLY_OFF = {"ast_precheck": False, "audit_hooks": False}
PID_CODE = "import os\nprint(os.getpid())"

FAKE_LAUNCHER = textwrap.dedent(r'''
    import json, os, socket, sys, time
    mode, sock = sys.argv[1], socket.socket(fileno=int(sys.argv[2]))

    def send(obj=None, raw=None, fds=()):
        socket.send_fds(sock, [raw if raw is not None else json.dumps(obj).encode()], list(fds))

    if mode == "never_ready":
        time.sleep(60)
    if mode == "ready_as_someone_else":
        send({"op": "ready", "pid": 1})
    elif mode == "dies_before_ready":
        sys.stderr.write("fake launcher: cannot import the data stack\n")
        sys.exit(4)
    else:
        send({"op": "ready", "pid": os.getpid()})
    while True:
        data, fds, flags, _ = socket.recv_fds(sock, 1 << 16, 8)
        if not data:
            break
        for fd in fds:
            os.close(fd)
        rid = json.loads(data)["id"]
        good = {"id": rid, "pid": 4242, "status": 0, "signal": None}
        if mode == "stale_with_fds":
            r, w = os.pipe()
            send({"id": rid - 1, "pid": 1111}, fds=[r, w])
            os.close(r); os.close(w)
            send(good)
        elif mode == "many_fds":
            pipes = [os.pipe() for _ in range(6)]
            send(good, fds=[fd for pair in pipes for fd in pair])
        elif mode == "silent":
            time.sleep(60)
        elif mode == "stale_flood":
            while True:
                send({"id": rid - 1, "pid": 1111})
        elif mode == "oversized":
            send(raw=b'{"id": %d, "pad": "' % rid + b"x" * 70000 + b'"}')
        elif mode == "not_json":
            send(raw=b"{not json")
        elif mode == "not_an_object":
            send([rid, 4242])
        elif mode == "no_id":
            send({"pid": 4242})
        elif mode == "future_id":
            send({"id": rid + 5, "pid": 4242})
        elif mode == "dies_mid_reply":
            send(raw=b'{"id": %d, "pi' % rid)
            os._exit(3)
        elif mode == "dies":
            os._exit(3)
        elif mode == "bad_pid":
            send({"id": rid, "pid": True})
        elif mode == "bad_status":
            send({"id": rid, "status": "0; rm -rf /", "signal": 999})
        elif mode == "refuses":
            send({"id": rid, "error": "bad request 'spawn' with 0 descriptors"})
        else:
            send(good)
''')


def fake(mode: str) -> LauncherClient:
    return LauncherClient(command=[sys.executable, "-c", FAKE_LAUNCHER, mode])


def open_fds() -> list[int]:
    return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))


FD_SETTLE_S = 5.0
"""How long the process's descriptors are given to come back to a test's starting set: in the full suite another
test file's background thread (a provider host's connection, a warm-up) may hold one for a moment; a descriptor the
launcher's client leaked is never closed, so it still fails."""


def assert_fds_back_to(before: list[int]) -> None:
    """The process holds exactly the descriptors it held in ``before`` (within :data:`FD_SETTLE_S`)."""
    deadline = time.monotonic() + FD_SETTLE_S
    while (now := open_fds()) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    extra = {fd: _target(fd) for fd in sorted(set(now) - set(before))}
    assert now == before, f"descriptors not closed: {extra}; closed meanwhile: {sorted(set(before) - set(now))}"


def _target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def own_roots() -> set[str]:
    """This process's sandbox root directories."""
    return {n for n in os.listdir(launcher_client._shm_root()) if n.startswith(f"harness-sandbox-{os.getpid()}-")}


def assert_reaped(client: LauncherClient) -> None:
    assert client.process.returncode is not None  # waited for: no zombie, no stray process
    assert not os.path.exists(f"/proc/{client.pid}")


def sandbox(**options) -> SandboxedInterpreter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SandboxedInterpreter(**FRIENDLY_OFF, allow_unconfined=True, **options)


def pid_inside(interp: SandboxedInterpreter) -> int:
    result = interp.execute(PID_CODE, {}, [])
    assert result.error is None, result.error
    return int(result.stdout.strip())


# -- the real launcher, made slow ---------------------------------------------------------------

@pytest.mark.parametrize("late_op", ["reap", "spawn"])
def test_a_launcher_that_misses_the_deadline_is_replaced_and_replies_stay_matched(late_op):
    interp = sandbox()
    try:
        old = interp._launcher
        old.reply_timeout = 0.5  # its replacement keeps the normal deadline
        if late_op == "spawn":
            interp.retire_worker()  # the reap is answered now; the spawn is the late request
        os.kill(old.pid, signal.SIGSTOP)
        if late_op == "spawn":
            interp.start_worker()
        else:
            interp.fresh_worker()
        assert interp._launcher is not old and interp._launcher.alive()
        assert f"did not answer a '{late_op}' request within" in old.broken
        assert "it was stopped and will be replaced" in old.broken
        assert_reaped(old)
        for _ in range(3):  # every later reply is this request's own: the pid is the worker that runs the code
            assert pid_inside(interp) == interp.worker_pid
            interp.fresh_worker()
        with pytest.raises(SandboxUnavailableError, match=f"pid {old.pid}.* is out of service: .*did not answer"):
            old.request({"op": "reap", "pid": 1, "wait": 0})
    finally:
        interp.close()


def test_an_interrupted_request_leaves_no_reply_behind():
    interp = sandbox()
    try:
        launcher = interp._launcher
        interp.retire_worker()
        os.kill(launcher.pid, signal.SIGSTOP)
        sent = threading.Event()
        send = launcher._send

        def send_then_tell(data, *args):  # the interrupt waits for the spawn to be on the socket, not for a moment
            send(data, *args)
            if json.loads(data)["op"] == "spawn":
                sent.set()

        launcher._send = send_then_tell
        main = threading.main_thread().ident
        interrupt = threading.Thread(target=lambda: sent.wait(60) and signal.pthread_kill(main, signal.SIGINT))
        before = open_fds()
        interrupt.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                interp.start_worker()  # the spawn is sent; the interrupt comes while its reply is awaited
        finally:
            del launcher._send
        interrupt.join()
        assert sent.is_set()
        os.kill(launcher.pid, signal.SIGCONT)  # it runs again and answers the abandoned spawn late
        assert select.select([launcher.sock], [], [], 30)[0], "the late answer has arrived (unread yet)"
        assert_fds_back_to(before)  # the abandoned attempt's pipes and socket are closed
        interp.start_worker()
        assert launcher.alive() and interp._launcher is launcher  # not a fault: the launcher stays
        assert launcher.discarded == 1
        assert pid_inside(interp) == interp.worker_pid
        # The worker forked for the abandoned request met closed pipes and exited (the launcher reaps it).
        deadline = time.monotonic() + 10
        while children_of(launcher.pid) != {interp.worker_pid} and time.monotonic() < deadline:
            launcher.reap(0, 0.0)
            time.sleep(0.05)
        assert children_of(launcher.pid) == {interp.worker_pid}
    finally:
        interp.close()


def test_a_sandbox_whose_launcher_breaks_the_protocol_starts_on_a_new_one():
    broken = fake("not_json")
    LauncherClient._shared = broken  # what SandboxedInterpreter() and its retry get from shared()
    interp = sandbox()
    try:
        assert interp._launcher is not broken and interp._launcher is LauncherClient.shared()
        assert "which is not a JSON object" in broken.broken
        assert_reaped(broken)
        assert pid_inside(interp) == interp.worker_pid
    finally:
        interp.close()
        broken.close()


# -- hostile or broken launchers: every read bounded, every error says what happened ------------

@pytest.mark.parametrize("mode, message", [
    ("silent", r"did not answer a 'spawn' request within 0\.3 s; it was stopped"),
    ("stale_flood", r"did not answer a 'spawn' request within 0\.3 s; it was stopped"),
    ("oversized", r"sent a reply over 65536 bytes \(a protocol error\)"),
    ("not_json", r"answered a 'spawn' request with '\{not json', which is not a JSON object"),
    ("not_an_object", r"which is not a JSON object"),
    ("no_id", r"answered a 'spawn' request without its request id"),
    ("future_id", r"answered request 6, which was never sent \(the latest is 1\)"),
    ("dies_mid_reply", r"with '\{\"id\": 1, \"pi', which is not a JSON object"),
    ("dies", r"did not answer a 'spawn' request: it exited with status 3"),
    ("bad_pid", r"answered a 'spawn' request without a valid pid"),
])
def test_a_broken_spawn_reply_retires_the_launcher_with_a_clear_error(mode, message):
    before = open_fds()
    client = fake(mode)
    if "within 0" in message:  # the others answer at once: a short deadline would only race them
        client.reply_timeout = 0.3
    r, w = os.pipe()
    try:
        started = time.monotonic()
        with pytest.raises(SandboxUnavailableError, match=message):
            client.spawn({}, [r, w])
        assert time.monotonic() - started < 10  # no hang (the deadline is 0.3 s)
        assert not client.alive()
        assert_reaped(client)
        with pytest.raises(SandboxUnavailableError, match="is out of service"):
            client.spawn({}, [r, w])
    finally:
        os.close(r)
        os.close(w)
        client.close()
    assert_fds_back_to(before)


def test_a_reap_reply_with_an_invalid_status_is_refused():
    client = fake("bad_status")
    try:
        with pytest.raises(SandboxUnavailableError, match="answered a 'reap' request with an invalid status"):
            client.reap(4242, 0.0)
        assert_reaped(client)
    finally:
        client.close()


def test_stale_replies_are_discarded_and_their_descriptors_closed():
    client = fake("stale_with_fds")
    try:
        baseline = open_fds()
        assert client.spawn({}, []) == 4242  # request 1: the reply to "request 0" comes first
        assert client.reap(4242, 0.0) == {"status": 0, "signal": None}
        assert client.discarded == 2 and client.alive()
        assert_fds_back_to(baseline)
    finally:
        client.close()


def test_descriptors_in_a_reply_are_closed_even_past_the_receive_bound():
    client = fake("many_fds")  # 12 descriptors: more than are taken from one reply
    try:
        baseline = open_fds()
        assert client.spawn({}, []) == 4242
        assert_fds_back_to(baseline)
    finally:
        client.close()


def test_a_refused_request_names_the_reason_and_keeps_the_launcher():
    client = fake("refuses")
    try:
        with pytest.raises(SandboxUnavailableError, match="refused a 'spawn' request: bad request 'spawn'"):
            client.spawn({}, [])
        assert client.alive()
    finally:
        client.close()


@pytest.mark.parametrize("mode, message", [
    ("never_ready", r"failed to start: it did not report ready within 0\.3 s"),
    ("ready_as_someone_else", r"failed to start: it sent .*\"pid\": 1.* instead of"),
    ("dies_before_ready", r"failed to start: it exited with status 4; its log ends: fake launcher: cannot import"),
])
def test_a_launcher_that_does_not_start_properly_is_stopped(monkeypatch, mode, message):
    if mode == "never_ready":
        monkeypatch.setattr(launcher_client, "LAUNCHER_START_TIMEOUT_S", 0.3)
    before = open_fds()
    roots = own_roots()
    with pytest.raises(SandboxUnavailableError, match=message) as refused:
        fake(mode)
    assert str(refused.value).count("its log ends") <= 1
    assert_fds_back_to(before)
    assert own_roots() == roots  # its root directory is gone too


def test_a_launcher_still_starting_at_exit_is_killed_not_waited_for():
    """The exit handler (:meth:`LauncherClient.stop_starting`) ends a start at once: no launcher outlives the kernel."""
    roots = own_roots()
    outcome: list[BaseException] = []

    def start() -> None:
        try:
            fake("never_ready")  # would wait LAUNCHER_START_TIMEOUT_S (120 s) for its ready message
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while LauncherClient.stop_starting() == 0:  # as soon as the launcher process exists
        assert time.monotonic() < deadline, "the fake launcher never started"
        time.sleep(0.01)
    thread.join(timeout=10)
    assert not thread.is_alive(), "the start ended at once"
    assert isinstance(outcome[0], SandboxUnavailableError)
    assert "failed to start: it was killed by SIGKILL" in str(outcome[0])  # killed and reaped
    assert own_roots() == roots
    assert LauncherClient.stop_starting() == 0, "a finished start is no longer listed"


def test_an_oversized_request_is_refused_before_it_is_sent():
    client = fake("ok")
    try:
        with pytest.raises(ValueError, match="launcher request 'spawn' is .* bytes, over 65536"):
            client.spawn({"pad": "x" * 70000}, [])
        assert client.alive() and client.spawn({}, []) == 4242
    finally:
        client.close()


def test_the_real_launcher_refuses_malformed_requests_and_keeps_serving():
    interp = sandbox()
    try:
        launcher = interp._launcher
        r, w = os.pipe()
        try:
            with pytest.raises(SandboxUnavailableError, match="refused a 'spawn' request: bad request 'spawn' with 1"):
                launcher.request({"op": "spawn", "config": {}}, [r])
            with pytest.raises(SandboxUnavailableError, match="refused a 'reap' request"):
                launcher.request({"op": "reap", "pid": "1; kill"})
            with pytest.raises(SandboxUnavailableError, match="refused a 'fork_bomb' request"):
                launcher.request({"op": "fork_bomb"}, [r, w])
        finally:
            os.close(r)
            os.close(w)
        assert launcher.alive()
        assert pid_inside(interp) == interp.worker_pid
    finally:
        interp.close()


def test_a_launcher_lost_between_calls_is_replaced_and_the_next_call_runs_on_a_new_one():
    from test_worker_revival import dead

    interp = sandbox()
    try:
        old, worker = interp._launcher, interp.worker_pid
        os.kill(old.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (old.process.poll() is None or not dead(worker)) and time.monotonic() < deadline:
            time.sleep(0.01)  # reaped, and its worker (SIGKILL by PR_SET_PDEATHSIG) has closed its descriptors
        result = interp.execute("1", {}, [])
        assert result.error is None and result.value == 1  # found dead before the call: replaced, then run
        assert result.replaced is not None and result.replaced.process == "launcher"
        assert result.replaced.pid == old.pid and result.replaced.why == "killed by SIGKILL"
        assert pid_inside(interp) == interp.worker_pid
        assert interp._launcher is not old and interp._launcher is LauncherClient.shared()
        assert "was killed by SIGKILL" in old.broken  # retired, with the reason, when it was replaced
    finally:
        interp.close()
