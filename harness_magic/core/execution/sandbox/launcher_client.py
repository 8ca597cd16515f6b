"""The kernel's side of the launcher protocol: requests matched to replies, bounded in time and size.

One :class:`LauncherClient` per launcher process (:mod:`.launcher`), shared by
every :class:`~harness_magic.core.execution.sandbox.SandboxedInterpreter` of the kernel
(:meth:`LauncherClient.shared`). The wire, one SOCK_SEQPACKET datagram each way:

``{"op": ..., "id": N, ...}`` (+ descriptors) -> ``{"id": N, ...}``

Contracts:

- Every request carries a fresh id and the launcher echoes it. A reply with an
  older id answers a request this side stopped waiting for (an interrupt): it
  is discarded, and any descriptors it carries are closed. A reply without an
  id, with an id never sent, that is not a JSON object, or that is over
  :data:`MAX_REPLY_BYTES`, is a protocol error. Replies never carry
  descriptors: any that arrive are closed (received close-on-exec).
- A whole request (send, stale replies, its reply) is bounded by one deadline
  (:data:`REPLY_TIMEOUT_S`); nothing blocks past it.
- A launcher that did not answer in time, broke the protocol or exited is
  *retired*: its process is killed and reaped (its workers die with it through
  ``PR_SET_PDEATHSIG``) and it is never used again; :meth:`shared` starts a new
  one. Its root directory stays until exit (live sessions keep their files there).
- At exit a launcher still starting is killed, not waited for (:meth:`LauncherClient.stop_starting`):
  the thread waiting for it reads EOF and its start fails; a ready one is closed.
- Every failure raises :class:`SandboxUnavailableError` saying what happened,
  e.g. "the sandbox launcher (pid 123) did not answer a 'spawn' request within 30 s".
"""

from __future__ import annotations

import array
import importlib.util
import atexit
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from harness_magic.core.confinement import layers as confinement
from harness_magic.core.confinement.owned_dirs import OWNED_PREFIX, sweep_abandoned

LAUNCHER_MODULE = f"{__package__}.launcher"
"""The launcher's module, named from this package (they move together), run with ``python -m``."""

__all__ = [
    "LauncherClient",
    "SandboxUnavailableError",
    "sweep_stale_roots",
    "LAUNCHER_START_TIMEOUT_S",
    "PRELOAD_TIMEOUT_S",
    "CHART_PRELOADS",
    "REPLY_TIMEOUT_S",
    "MAX_REPLY_BYTES",
]

LAUNCHER_START_TIMEOUT_S = 120.0
"""Cold start imports the worker's own modules (:data:`~.launcher.PRELOADED` adds none): about 0.1 s idle, seconds
on a busy node."""

REPLY_TIMEOUT_S = 30.0
"""A spawn is one fork and a reap waits at most its own few seconds: past this the launcher is stuck."""

CHART_PRELOADS = ("matplotlib",)
"""Warmed in the launcher once a call of its workers drew a chart: not preloaded at the start (a session that never
draws saves about 30 MB), then inherited by every later worker (a fresh one per cell would each pay about 1.4 s)."""

PRELOAD_TIMEOUT_S = 120.0
"""Beyond :data:`REPLY_TIMEOUT_S`, how long a ``preload`` may take: importing matplotlib is about a second idle,
far more on a busy node; past this the launcher is stuck."""

MAX_REPLY_BYTES = 1 << 16
"""Launcher replies are a pid or an exit status; the launcher reads requests with the same bound."""

STRAY_FDS_RECEIVED = 8
"""Descriptors taken (and closed at once) from one reply: replies carry none, extra ones are dropped by the OS."""

EXIT_WAIT_S = 5.0
"""How long a killed or closed launcher is waited for; SIGKILL takes effect well within it."""

_PREVIEW_CHARS = 120
"""How much of a malformed reply an error message quotes."""

_ROOT_PREFIX = "harness-sandbox-"


class SandboxUnavailableError(RuntimeError):
    """The sandbox cannot run code: no OS confinement (and no unconfined opt-in), or its launcher failed."""


def _shm_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def sweep_stale_roots(base: str) -> list[str]:
    """Delete sandbox roots (inputs, scratch) left in ``base`` by kernels that died without closing.

    Only directories this user owns whose creating process is gone; returns their paths.
    """
    return sweep_abandoned(base, kinds={_ROOT_PREFIX[len(OWNED_PREFIX):-1]})


class _Fault(Exception):
    """The launcher broke the protocol or went away: it is retired with this message."""


def _preview(data: bytes) -> str:
    text = data[:_PREVIEW_CHARS].decode("utf-8", "replace")
    return repr(text) + (f" ... ({len(data)} bytes)" if len(data) > _PREVIEW_CHARS else "")


class LauncherClient:
    """The kernel's handle on one launcher process (see the module docstring for the contracts).

    ``command`` replaces the launcher's command line (tests run fake launchers
    speaking the same protocol); the control socket's descriptor number is
    appended to it.
    """

    _shared: LauncherClient | None = None
    _shared_lock = threading.Lock()
    _warm_failure: SandboxUnavailableError | None = None
    """Why the latest :meth:`warm` start failed, kept for the next :meth:`shared` call to raise (once)."""
    _starting: set[LauncherClient] = set()
    """Launchers started but not ready yet (:meth:`stop_starting` kills them at exit)."""
    _starting_lock = threading.Lock()

    def __init__(self, command: Sequence[str] | None = None) -> None:
        sweep_stale_roots(_shm_root())
        self.root = tempfile.mkdtemp(prefix=f"{_ROOT_PREFIX}{os.getpid()}-", dir=_shm_root())
        os.chmod(self.root, 0o711)
        empty = os.path.join(self.root, "empty")
        os.mkdir(empty, 0o555)
        self.broken: str | None = None
        """Why this launcher was taken out of service (None while it serves)."""
        self._sessions: set[str] = set()
        """Session folders made in :attr:`root` and not closed yet (see :meth:`open_session`)."""
        self.reply_timeout = REPLY_TIMEOUT_S
        """Seconds one request may take (send, stale replies, its reply) before the launcher is retired."""
        self.discarded = 0
        """Stale replies (to requests abandoned by an interrupt) read and dropped so far."""
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._preload_asked: set[str] = set()
        self.preload_failure: str | None = None
        """Why the latest background :meth:`preload_soon` failed (None: none did); the launcher serves on."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # This module is part of harness_magic, so its spec exists and has a file origin.
        spec = importlib.util.find_spec("harness_magic")
        assert spec is not None and spec.origin is not None
        package_root = os.path.dirname(os.path.dirname(spec.origin))
        env = confinement.clean_environment({"PYTHONPATH": package_root})
        argv = list(command) if command is not None else [
            sys.executable, "-s", "-m", LAUNCHER_MODULE]
        self.log_path = os.path.join(self.root, "launcher.log")
        try:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    [*argv, str(child.fileno())],
                    env=env, cwd=empty, pass_fds=[child.fileno()], close_fds=True, start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                )
        except OSError as exc:
            parent.close()
            shutil.rmtree(self.root, ignore_errors=True)
            raise SandboxUnavailableError(f"the sandbox launcher could not be started: {exc}") from exc
        finally:
            child.close()
        self.sock = parent
        self.pid = self.process.pid
        with LauncherClient._starting_lock:
            LauncherClient._starting.add(self)
        try:
            self._await_ready()
        except _Fault as exc:
            self.retire(str(exc))
            why = str(exc) if "; its log ends:" in str(exc) else f"{exc}{self._log_tail()}"
            shutil.rmtree(self.root, ignore_errors=True)
            raise SandboxUnavailableError(why) from None
        except BaseException:
            self.retire("its start was interrupted")
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        finally:
            with LauncherClient._starting_lock:
                LauncherClient._starting.discard(self)

    def _await_ready(self) -> None:
        """The launcher's first datagram: ``{"op": "ready", "pid": <its pid>}``."""
        what = "the sandbox launcher failed to start"
        data = self._receive_until(time.monotonic() + LAUNCHER_START_TIMEOUT_S,
                                   f"{what}: it did not report ready within {LAUNCHER_START_TIMEOUT_S:g} s",
                                   f"{what}")
        ready = self._decode(data, f"{what}: it sent")
        if ready.get("op") != "ready" or ready.get("pid") != self.pid:
            raise _Fault(f"{what}: it sent {_preview(data)} instead of {{'op': 'ready', 'pid': {self.pid}}}")

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 2000))
                tail = log.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; its log ends: {tail}" if tail else ""

    # -- sharing --------------------------------------------------------------------------------

    @classmethod
    def shared(cls) -> LauncherClient:
        """The kernel's launcher: the current one while it serves, else a newly started one.

        One that exited is retired (reaped) first; one retired stays retired.
        A :meth:`warm` start that failed is raised here, once: its error, as a
        start here would have raised it. A :meth:`warm` start under way is waited for.
        """
        with cls._shared_lock:
            failure, cls._warm_failure = cls._warm_failure, None
            if failure is not None:
                raise failure
            current = cls._shared
            if current is None or not current.alive():
                if current is not None and current.broken is None:
                    current.retire(f"the sandbox launcher (pid {current.pid}) {current._exit_detail()}")
                if current is not None and not current._sessions:  # nobody's folder is in its root
                    shutil.rmtree(current.root, ignore_errors=True)
                current = cls._shared = cls()
                atexit.register(current.close)
            return current

    def open_session(self) -> str:
        """A new session folder in :attr:`root`, kept until :meth:`close_session` (a session keeps its folder when
        this launcher is replaced: its inputs and scratch are where its code left them)."""
        with self.lock:
            path = tempfile.mkdtemp(prefix="session-", dir=self.root)
            self._sessions.add(path)
            return path

    def close_session(self, path: str) -> None:
        """Remove a session folder of :meth:`open_session`; once this launcher is retired, its last session's
        close removes its root too (its log and ``empty/``), which would otherwise stay until the kernel exits."""
        shutil.rmtree(path, ignore_errors=True)
        with self.lock:
            self._sessions.discard(path)
            drained = self.broken is not None and not self._sessions
        if drained:
            shutil.rmtree(self.root, ignore_errors=True)

    @classmethod
    def warm(cls) -> None:
        """Start the kernel's launcher now unless one serves (for a background thread, ahead of use).

        Nothing is raised here: a failed start is kept and raised by the next
        :meth:`shared` call, so it surfaces where the sandbox is used, with the
        message a start there would have given. Concurrent calls start one launcher.
        """
        try:
            cls.shared()
        except SandboxUnavailableError as exc:
            with cls._shared_lock:
                cls._warm_failure = exc

    @classmethod
    def stop_starting(cls) -> int:
        """Kill every launcher still starting; how many. Run at exit: a start is stopped, never waited for.

        The thread waiting for its ready message then reads EOF at once and its
        start fails (:class:`SandboxUnavailableError`, raised in that thread).
        Without this, an exit right after the first model request failed left
        a launcher warming up (seconds of imports) after the kernel was gone.
        """
        with cls._starting_lock:
            starting = list(cls._starting)
        for client in starting:
            try:
                client.process.kill()
            except OSError:
                pass  # it ended on its own
        return len(starting)

    def alive(self) -> bool:
        """Whether this launcher still serves requests (not retired, process running)."""
        return self.broken is None and self.process.poll() is None

    def loss(self) -> str | None:
        """Why this launcher no longer serves (retired, or its process ended), without waiting; None if it does."""
        if self.broken is not None:
            return self.broken
        code = self.process.poll()
        if code is None:
            return None
        return f"the sandbox launcher (pid {self.pid}) {_ended(code)}"

    # -- requests -------------------------------------------------------------------------------

    def request(self, message: dict[str, Any], fds: Iterable[int] = (), timeout: float | None = None) -> dict:
        """Send ``message`` (with ``fds``) and return the launcher's reply to it.

        ``timeout`` (default :attr:`reply_timeout`) bounds the whole request.
        Raises :class:`SandboxUnavailableError` when the launcher is retired,
        does not answer in time, breaks the protocol or exits (all but the first
        retire it), and when it refuses the request (it stays in service).
        An interrupt abandons the request: its late reply is discarded by the next one.
        """
        op = str(message.get("op"))
        limit = self.reply_timeout if timeout is None else float(timeout)
        with self.lock:
            if self.broken is not None:
                raise SandboxUnavailableError(f"the sandbox launcher (pid {self.pid}) is out of service: {self.broken}")
            request_id = next(self._ids)
            data = json.dumps({**message, "id": request_id}).encode()
            if len(data) > MAX_REPLY_BYTES:
                raise ValueError(f"launcher request {op!r} is {len(data)} bytes, over {MAX_REPLY_BYTES}")
            deadline = time.monotonic() + limit
            late = (f"the sandbox launcher (pid {self.pid}) did not answer a {op!r} request within {limit:g} s; "
                    "it was stopped and will be replaced")
            try:
                self._send(data, list(fds), deadline, late)
                reply = self._reply_to(request_id, op, deadline, late)
            except _Fault as exc:
                self.retire(str(exc))
                raise SandboxUnavailableError(str(exc)) from None
        if "error" in reply:
            raise SandboxUnavailableError(
                f"the sandbox launcher refused a {op!r} request: {str(reply['error'])[:_PREVIEW_CHARS]}")
        return reply

    def spawn(self, config: dict[str, Any], fds: Sequence[int]) -> int:
        """Fork a worker on ``fds`` (request read end, reply write end[, result socket]); its pid."""
        reply = self.request({"op": "spawn", "config": config}, fds)
        pid = reply.get("pid")
        if type(pid) is not int or pid <= 1:
            why = (f"the sandbox launcher (pid {self.pid}) answered a 'spawn' request without a valid pid "
                   f"({_preview(json.dumps(reply).encode())}); it was stopped and will be replaced")
            self.retire(why)
            raise SandboxUnavailableError(why)
        return pid

    def reap(self, pid: int, wait: float) -> dict[str, Any]:
        """Wait up to ``wait`` s for worker ``pid``: ``{"status": int|None, "signal": int|None[, "running"]}``."""
        reply = self.request({"op": "reap", "pid": pid, "wait": wait}, timeout=self.reply_timeout + wait)
        status, sig = reply.get("status"), reply.get("signal")
        valid_signals = {s.value for s in signal.Signals}
        if not ((status is None or (type(status) is int and 0 <= status <= 255))
                and (sig is None or (type(sig) is int and sig in valid_signals))):
            why = (f"the sandbox launcher (pid {self.pid}) answered a 'reap' request with an invalid status "
                   f"({_preview(json.dumps(reply).encode())}); it was stopped and will be replaced")
            self.retire(why)
            raise SandboxUnavailableError(why)
        return {"status": status, "signal": sig, **({"running": True} if reply.get("running") else {})}

    def preload(self, modules: Sequence[str]) -> list[str]:
        """Have the launcher warm ``modules`` (names it knows) for the workers it forks from now on; what is warm.

        Warming imports in the launcher (matplotlib: about a second): waited for up to
        :data:`PRELOAD_TIMEOUT_S` beyond the usual reply time. A name the launcher does not know, or a module
        that fails to warm, is :class:`SandboxUnavailableError` naming it (the launcher stays in service)."""
        reply = self.request({"op": "preload", "modules": list(modules)},
                             timeout=self.reply_timeout + PRELOAD_TIMEOUT_S)
        warm = reply.get("preloaded")
        if not isinstance(warm, list) or not all(isinstance(name, str) for name in warm):
            why = (f"the sandbox launcher (pid {self.pid}) answered a 'preload' request without its list "
                   f"({_preview(json.dumps(reply).encode())}); it was stopped and will be replaced")
            self.retire(why)
            raise SandboxUnavailableError(why)
        return warm

    def preload_soon(self, modules: Sequence[str]) -> threading.Thread | None:
        """:meth:`preload` ``modules`` on a background thread, once per name (the call that asks need not wait; the
        next spawn waits for the launcher's lock). The thread started, or None when nothing was left to ask."""
        with self.lock:
            wanted = [name for name in modules if name not in self._preload_asked]
            if not wanted or self.broken is not None:
                return None
            self._preload_asked.update(wanted)

        def run() -> None:
            try:
                self.preload(wanted)
            except SandboxUnavailableError as exc:
                self.preload_failure = str(exc)

        thread = threading.Thread(target=run, name="sandbox-launcher-preload", daemon=True)
        thread.start()
        return thread

    def _send(self, data: bytes, fds: list[int], deadline: float, late: str) -> None:
        self.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
        try:
            socket.send_fds(self.sock, [data], fds)
        except TimeoutError:
            raise _Fault(late) from None
        except OSError as exc:
            raise _Fault(f"the sandbox launcher (pid {self.pid}) could not be sent a request "
                         f"({exc.strerror or exc}): it {self._exit_detail()}{self._log_tail()}") from None

    def _reply_to(self, request_id: int, op: str, deadline: float, late: str) -> dict[str, Any]:
        """The reply carrying ``request_id``; older ones are dropped, anything else is a :class:`_Fault`."""
        what = f"the sandbox launcher (pid {self.pid})"
        while True:
            data = self._receive_until(deadline, late, f"{what} did not answer a {op!r} request")
            reply = self._decode(data, f"{what} answered a {op!r} request with")
            reply_id = reply.get("id")
            if type(reply_id) is not int:
                raise _Fault(f"{what} answered a {op!r} request without its request id ({_preview(data)}); "
                             "it was stopped and will be replaced")
            if reply_id < request_id:
                self.discarded += 1  # the late answer to a request abandoned by an interrupt
                continue
            if reply_id > request_id:
                raise _Fault(f"{what} answered request {reply_id}, which was never sent (the latest is "
                             f"{request_id}); it was stopped and will be replaced")
            return reply

    def _receive_until(self, deadline: float, late: str, gone: str) -> bytes:
        """One datagram before ``deadline``; descriptors it carried are closed. EOF, size, time: :class:`_Fault`."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Fault(late)
        self.sock.settimeout(left)
        try:
            data, ancdata, flags, _ = self.sock.recvmsg(
                MAX_REPLY_BYTES, socket.CMSG_SPACE(STRAY_FDS_RECEIVED * array.array("i").itemsize),
                socket.MSG_CMSG_CLOEXEC)
        except TimeoutError:
            raise _Fault(late) from None
        except OSError as exc:
            raise _Fault(f"{gone}: its socket failed ({exc.strerror or exc})") from None
        _close_passed_fds(ancdata)
        if flags & socket.MSG_TRUNC:
            raise _Fault(f"{gone}: it sent a reply over {MAX_REPLY_BYTES} bytes (a protocol error); "
                         "it was stopped and will be replaced")
        if not data:
            raise _Fault(f"{gone}: it {self._exit_detail()}{self._log_tail()}")
        return data

    @staticmethod
    def _decode(data: bytes, context: str) -> dict[str, Any]:
        try:
            value = json.loads(data)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise _Fault(f"{context} {_preview(data)}, which is not a JSON object (a protocol error); "
                         "it was stopped and will be replaced")
        return value

    # -- ending -----------------------------------------------------------------------------------

    def _exit_detail(self) -> str:
        """How the process ended, waiting briefly for it (it may still be closing)."""
        try:
            code = self.process.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return "closed its socket but is still running"
        return _ended(code)

    def retire(self, why: str) -> None:
        """Take this launcher out of service for good: socket closed, process killed and reaped.

        Idempotent; the first reason is kept. The root directory stays (see :meth:`close`).
        """
        with self.lock:
            if self.broken is None:
                self.broken = why
            self.sock.close()
            if self.process.poll() is None:
                try:
                    self.process.kill()
                except OSError:
                    pass
            try:
                self.process.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pass  # SIGKILL is pending (the process is in an uninterruptible wait): the OS finishes it

    def close(self) -> None:
        """End the launcher (at exit): EOF makes it kill its workers and exit; then its root is removed."""
        with self.lock:
            self.sock.close()
            if self.broken is None:
                self.broken = "it was closed"
                try:
                    self.process.wait(timeout=EXIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass
            self.retire(self.broken)
        shutil.rmtree(self.root, ignore_errors=True)


atexit.register(LauncherClient.stop_starting)


def _ended(code: int) -> str:
    """How a process with this ``Popen.returncode`` ended."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def _close_passed_fds(ancdata: list[tuple[int, int, bytes]]) -> None:
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
