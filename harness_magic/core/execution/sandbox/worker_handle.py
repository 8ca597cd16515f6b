"""One forked sandbox worker as the kernel holds it: its pipes, its memory, its start and its end.

:func:`fork_worker` has a launcher fork a worker on descriptors made for that
attempt only; :meth:`WorkerHandle.await_hello` accepts it only once it reported
in with the pid the launcher forked (its *hello* frame lists the confinement
layers that held). A :class:`WorkerHandle` reads the worker's memory from
``/proc``, puts it in a memory cgroup, kills it, closes the kernel's ends and
has the launcher that forked it reap it. Which launcher to use, when to
replace a worker and whether its layers confine untrusted code are the
interpreter's decisions (:mod:`.backend`).
"""

from __future__ import annotations

import math
import os
import select
import signal
import socket
import time
from typing import Any

from harness_magic.core.execution.sandbox.launcher_client import LauncherClient, SandboxUnavailableError
from harness_magic.core.execution.sandbox.memcg import CgroupUnavailable, MemoryCgroup, cgroup_limit
from harness_magic.core.execution.sandbox.protocol import FrameReader, ProtocolError

__all__ = ["WorkerHandle", "fork_worker", "SPAWN_TIMEOUT_S", "REAP_WAIT_S", "EXITED_REAP_WAIT_S"]

SPAWN_TIMEOUT_S = 30.0
"""A forked worker confines itself in milliseconds; this only guards a stuck launcher."""

REAP_WAIT_S = 2.0
"""How long the launcher waits for a killed worker to exit before answering that it still runs."""

EXITED_REAP_WAIT_S = 1.0
"""How long the launcher waits for a worker found dead to be reapable: its pipes closed as it exited."""


class WorkerHandle:
    """The kernel's ends of one worker: request and reply pipes, the sealed-result socket, its launcher."""

    def __init__(self, pid: int, req_fd: int, resp_fd: int, result_sock: socket.socket,
                 launcher: LauncherClient) -> None:
        self.pid, self.req_fd, self.resp_fd = pid, req_fd, resp_fd
        self.hello: dict[str, Any] = {}
        """The frame it reported in with (set by :meth:`await_hello`)."""
        self.launcher = launcher
        """The launcher that forked it (and reaps it)."""
        self.cgroup: MemoryCgroup | None = None
        self.result_sock = result_sock
        """Kernel end of the socketpair the worker passes sealed result memfds over."""
        self.frames = FrameReader(resp_fd)
        """The one reader of the reply pipe, for its whole life: bytes read past a frame wait in it."""
        self.taken_sent: list[str] | None = None
        """The cache's handle names as last sent to it (a request leaves them out while they are the same)."""
        self._result_poll = select.poll()
        self._result_poll.register(result_sock, select.POLLIN)
        self._reply_poll = select.poll()
        self._reply_poll.register(resp_fd, select.POLLIN)

    def results_queued(self) -> bool:
        """Whether anything waits on the result socket (one poll that never blocks; true once it is closed)."""
        return bool(self._result_poll.poll(0))

    def reply_readable(self, seconds: float) -> bool:
        """Whether the reply pipe has bytes to read, or was closed, within ``seconds`` (rounded up to a whole
        millisecond; a registered poll: no descriptor set built per wait, and no limit on the descriptor's number)."""
        return bool(self._reply_poll.poll(math.ceil(seconds * 1000)))

    def await_hello(self) -> None:
        """Wait for the worker's hello frame; raise :class:`SandboxUnavailableError` (worker killed) if it is
        late, malformed, a failure report, or from another pid than the one forked."""
        os.set_blocking(self.resp_fd, False)
        try:
            hello = self._read_hello()
        except (EOFError, ProtocolError) as exc:
            self.kill()
            self.close_fds()
            raise SandboxUnavailableError(f"sandbox worker failed to start: {exc}") from exc
        except BaseException:  # an interrupt while it reports in: it must not outlive the call
            self.kill()
            self.close_fds()
            raise
        if hello.get("op") != "hello":
            self.kill()
            self.close_fds()
            raise SandboxUnavailableError(f"sandbox worker failed to confine itself: {hello.get('error')}")
        if hello.get("pid") != self.pid:
            self.kill()
            self.close_fds()
            raise SandboxUnavailableError(f"the sandbox worker that reported in (pid {hello.get('pid')!r}) is not "
                                          f"the one the launcher forked (pid {self.pid})")
        self.hello = hello

    def _read_hello(self) -> dict[str, Any]:
        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("worker did not report in time")
            if self.reply_readable(left):
                frame = self.frames.feed()
                if frame is not None:
                    return frame

    def join_memory_cgroup(self, watchdog_limit: int) -> str:
        """Put the idle, just-confined worker in a memory cgroup of its own; how that went (a layer status)."""
        try:
            cgroup = MemoryCgroup(cgroup_limit(watchdog_limit))
        except CgroupUnavailable as exc:
            return f"unavailable: {exc}"
        try:
            cgroup.add(self.pid)
        except CgroupUnavailable as exc:
            cgroup.remove()
            return f"unavailable: {exc}"
        self.cgroup = cgroup
        return cgroup.describe()

    def kill(self) -> None:
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, signal.SIGKILL)
            except OSError:
                pass

    def close_fds(self) -> None:
        for fd in (self.req_fd, self.resp_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.result_sock.close()

    def end_found_dead(self) -> dict[str, Any]:
        """End a worker found dead (its request pipe has no reader); its exit status (``{"status", "signal"}``,
        ``{}`` when unknown).

        Reaped through its launcher first, without a kill: the status says how it
        really ended. One still running (it closed its own pipe) is stopped, and
        ``{"running": True}`` says so. Our ends are closed either way.
        """
        try:
            status = self.launcher.reap(self.pid, EXITED_REAP_WAIT_S)
        except SandboxUnavailableError:
            status = {}
        if not status or status.get("running"):
            self.stop()  # alive, or its launcher is gone: the kill makes sure
            return {"running": True} if status else {}
        self.release()  # reaped: its pid may be reused, so it is not signalled again
        return status

    def release(self) -> None:
        """Close our ends and remove its memory cgroup, for a worker already reaped."""
        self.close_fds()
        if self.cgroup is not None:
            self.cgroup.remove()

    def stop(self) -> dict[str, Any]:
        """Kill it, close our ends, have its launcher reap it; its exit status (``{}`` when unknown)."""
        self.kill()
        self.close_fds()
        try:
            return self.launcher.reap(self.pid, REAP_WAIT_S)
        except SandboxUnavailableError:
            return {}  # killed above; a retired launcher's workers died with it
        finally:
            if self.cgroup is not None:
                self.cgroup.remove()

    def _status(self, *keys: bytes) -> dict[bytes, int]:
        found: dict[bytes, int] = {}
        try:
            with open(f"/proc/{self.pid}/status", "rb") as status:
                for line in status:
                    key = line.split(b":", 1)[0]
                    if key in keys:
                        found[key] = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return found

    def memory(self) -> int:
        """Resident bytes the worker holds: anonymous plus shared memory (tmpfs, SysV, memfd) it maps."""
        found = self._status(b"RssAnon", b"RssShmem")
        return (found.get(b"RssAnon", 0) + found.get(b"RssShmem", 0)) * 1024

    def held_file_bytes(self) -> int:
        """Bytes in files only the worker's descriptors keep alive: memfds and deleted files.

        They hold memory (on tmpfs) without being mapped or visible in scratch.
        Scratch files and inputs are not counted here (scratch is walked on its own).
        """
        total, seen = 0, set()
        base = f"/proc/{self.pid}/fd"
        try:
            names = os.listdir(base)
        except OSError:
            return 0
        for name in names:
            path = f"{base}/{name}"
            try:
                target = os.readlink(path)
                if not (target.startswith("/memfd:") or target.endswith(" (deleted)")):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
        return total


def fork_worker(launcher: LauncherClient, config: dict[str, Any]) -> WorkerHandle:
    """A worker forked by ``launcher`` on descriptors made for this attempt only (not yet heard from).

    Nothing is shared between attempts: a worker forked late for an attempt
    that was given up holds only ends this side has closed, so it meets
    EPIPE/EOF and exits, and can never answer for another worker.
    """
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    # Made before the worker confines itself (it may create no sockets after): sealed results come back here.
    result_parent, result_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid = launcher.spawn(config, [req_r, resp_w, result_child.fileno()])
        result_parent.setblocking(False)  # drained without waiting: results are queued before the reply
        return WorkerHandle(pid, req_w, resp_r, result_parent, launcher)
    except BaseException:
        os.close(req_w)
        os.close(resp_r)
        result_parent.close()
        raise
    finally:
        os.close(req_r)
        os.close(resp_w)
        result_child.close()
