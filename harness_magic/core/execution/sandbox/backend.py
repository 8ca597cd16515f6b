"""``SandboxedInterpreter``: the interpreter backend whose boundary is an OS-confined process.

One launcher per kernel process (started on first use, shared by every session)
forks the workers of every :class:`SandboxedInterpreter`: a new one per cell
(:meth:`~SandboxedInterpreter.fresh_worker`) and per subagent
(:meth:`~SandboxedInterpreter.sibling`). A call writes the inputs the code
references into the session's input directory, sends the code over a pipe and
reads the reply frame a chunk at a time in the loop that enforces the
wall-clock timeout and the memory watchdog (anonymous + shared memory, memfds
and deleted files held open, scratch bytes; a memory cgroup backs it in the OS).
A worker that crashes, times out or is killed is restarted on the next call; the
call that lost it gets a readable error result.
"""

from __future__ import annotations

import base64
import itertools
import os
import select
import shutil
import signal
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any

from harness_magic.core.cache.names import resolve_handle_name
from harness_magic.core.execution.interpreter import ExecutionResult
from harness_magic.core.confinement import layers as confinement
from harness_magic.core.execution.sandbox.launcher_client import (
    LAUNCHER_START_TIMEOUT_S,  # noqa: F401 - re-exported for callers of the former home
    LauncherClient,
    SandboxUnavailableError,
    sweep_stale_roots,  # noqa: F401 - re-exported for callers of the former home
)
from harness_magic.core.execution.sandbox.memcg import CgroupUnavailable, MemoryCgroup, cgroup_limit
from harness_magic.core.execution.sandbox.protocol import FrameReader, ProtocolError, send_frame
from harness_magic.core.execution.sandbox.transfer import (
    RESULT_MAX_BYTES,
    TransferRefused,
    input_files,
    read_result,
    receive_sealed,
    write_input,
)

__all__ = [
    "SandboxedInterpreter",
    "SandboxUnavailableError",
    "UnconfinedWarning",
    "probe_confinement",
    "DEFAULT_TIMEOUT_S",
    "CONFINING_LAYERS",
    "FILE_CONFINING_LAYERS",
    "confinement_gap",
]

DEFAULT_TIMEOUT_S = 60.0
"""Wall-clock seconds one call may run: analyses taking longer should be split."""

SPAWN_TIMEOUT_S = 30.0
"""A forked worker confines itself in milliseconds; this only guards a stuck launcher."""

REAP_WAIT_S = 2.0
"""How long the launcher waits for a killed worker to exit before answering that it still runs."""

WATCHDOG_INTERVAL_S = 0.05
"""How often the parent samples the worker's memory while it runs (also while a reply is arriving)."""

SCRATCH_SCAN_EVERY = 4
"""Scratch is walked every this many watchdog ticks: a directory walk costs more than a /proc read."""

SCRATCH_MAX_FILES = 10_000
"""More scratch entries than this count as over the limit: keeps each walk short."""

STDOUT_CAP_CHARS = 1_000_000
"""Printed characters the worker keeps per call; the rest is counted, not stored."""

OPEN_FILES_LIMIT = 256
"""Descriptors the worker may hold: enough for inputs, results and fonts."""

CPU_SECONDS_LIMIT = 3600
"""CPU seconds over a worker's whole life (it is restarted when it hits this)."""

CONFINING_LAYERS = ("landlock", "seccomp")
"""At least one of these must hold for untrusted code to run without the unconfined opt-in."""

FILE_CONFINING_LAYERS = ("landlock", "drop_root")
"""And one of these too: seccomp alone leaves every file the kernel's user owns writable
(``~/.ipython/profile_default/startup/`` runs in the next kernel; exported inputs could be swapped)."""


def confinement_gap(layers: Mapping[str, Any]) -> str | None:
    """Why ``layers`` (layer -> status, as a worker reports them) do not confine untrusted code; None when they do."""
    if not any(_holds(layers.get(n)) for n in CONFINING_LAYERS):
        detail = {n: layers.get(n, "not requested") for n in CONFINING_LAYERS}
        return f"no OS confinement is available here ({detail})"
    if not any(_holds(layers.get(n)) for n in FILE_CONFINING_LAYERS):
        detail = {n: layers.get(n, "not requested") for n in FILE_CONFINING_LAYERS}
        return ("nothing confines the worker's file access here "
                f"({detail}): model code could write every file this kernel's user can")
    return None

_MAX_SAVES = 100
"""Matches the worker's cap on save() calls per run."""

STREAM_MAX_CHARS = 64_000
"""Streamed output characters handed on per call: past this, output frames are read and dropped."""

STREAM_RELAY_INTERVAL_S = 0.1
"""Streamed text is handed to the callback at most this often: a frame flood cannot flood the display."""

def _total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class UnconfinedWarning(UserWarning):
    """Untrusted code is about to run without OS confinement."""


_Launcher = LauncherClient
"""The kernel's handle on the launcher process (see :mod:`.launcher_client`)."""


class _Worker:
    def __init__(self, pid: int, req_fd: int, resp_fd: int, hello: dict[str, Any],
                 result_sock: socket.socket | None = None, launcher: LauncherClient | None = None) -> None:
        self.pid, self.req_fd, self.resp_fd, self.hello = pid, req_fd, resp_fd, hello
        self.launcher = launcher
        """The launcher that forked it (and reaps it)."""
        self.cgroup: MemoryCgroup | None = None
        self.result_sock = result_sock
        """Kernel end of the socketpair the worker passes sealed result memfds over."""

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
        if self.result_sock is not None:
            self.result_sock.close()

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


class SandboxedInterpreter:
    """Runs model code in an OS-confined worker process (see the package docstring).

    ``layers`` picks the optional OS layers (default: all of ``confinement.OS_LAYERS``
    the machine offers); tests pass one layer at a time. ``ast_precheck`` and
    ``audit_hooks`` add friendly refusals only. Where neither Landlock nor seccomp
    holds, construction raises :class:`SandboxUnavailableError` unless
    ``allow_unconfined=True``, which warns with :class:`UnconfinedWarning`.

    ``rss_limit`` bounds the worker's anonymous plus shared resident memory plus
    the bytes of memfds and deleted files it holds open plus the bytes in its
    scratch directory; ``scratch_max_bytes`` (default: the same)
    bounds scratch alone. Going over either kills the worker and empties scratch.
    :meth:`fresh_worker` replaces the worker (one per ``%%agent`` cell);
    :meth:`sibling` gives a subagent its own interpreter on the same launcher.
    """

    name = "sandbox"

    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        memory_limit: int | None = None,
        rss_limit: int | None = None,
        scratch_max_bytes: int | None = None,
        cpu_seconds: int = CPU_SECONDS_LIMIT,
        result_max_bytes: int = RESULT_MAX_BYTES,
        stdout_max_chars: int = STDOUT_CAP_CHARS,
        layers: Collection[str] | None = None,
        ast_precheck: bool = True,
        audit_hooks: bool = True,
        allow_unconfined: bool = False,
    ) -> None:
        unknown = set(layers or ()) - set(confinement.OS_LAYERS)
        if unknown:
            raise ValueError(f"unknown sandbox layers {sorted(unknown)}; known: {confinement.OS_LAYERS}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        total = _total_memory()
        self.timeout = float(timeout)
        self.rss_limit = int(rss_limit) if rss_limit is not None else int(total * 0.75)
        self.scratch_max_bytes = int(scratch_max_bytes) if scratch_max_bytes is not None else self.rss_limit
        self._scratch_bytes: int | None = 0
        self._held_bytes = 0
        self._options = dict(timeout=timeout, memory_limit=memory_limit, rss_limit=rss_limit,
                             scratch_max_bytes=scratch_max_bytes, cpu_seconds=cpu_seconds,
                             result_max_bytes=result_max_bytes, stdout_max_chars=stdout_max_chars, layers=layers,
                             ast_precheck=ast_precheck, audit_hooks=audit_hooks, allow_unconfined=allow_unconfined)
        self.result_max_bytes = int(result_max_bytes)
        self.allow_unconfined = allow_unconfined
        self._layers = tuple(confinement.OS_LAYERS if layers is None else layers)
        self._limits = {
            "cpu_seconds": int(cpu_seconds),
            # Generous: the data, Arrow's and BLAS's reservations, and mapped inputs.
            "address_space": int(memory_limit) if memory_limit is not None else total + 8 * 1024**3,
            "file_size": self.result_max_bytes + (1 << 20),
            "open_files": OPEN_FILES_LIMIT,
            "stdout_chars": int(stdout_max_chars),
        }
        self._ast_precheck, self._audit_hooks = ast_precheck, audit_hooks
        self._launcher = _Launcher.shared()
        self.session_dir = tempfile.mkdtemp(prefix="session-", dir=self._launcher.root)
        self.input_dir = os.path.join(self.session_dir, "inputs")
        self.scratch_dir = os.path.join(self.session_dir, "scratch")
        os.mkdir(self.input_dir, 0o755)
        os.mkdir(self.scratch_dir, 0o700)
        self._worker: _Worker | None = None
        self._seq = 0
        self._exports: dict[str, tuple[list[str], dict[str, Any]]] = {}
        """Value version -> (input file, descriptor): written once, mapped by every later call."""
        self._export_origin: SandboxedInterpreter | None = None
        """The interpreter this one is a :meth:`sibling` of: its exports are linked, never rewritten."""
        self._export_serial = itertools.count(1)
        self.inputs_written = 0
        """Inputs serialised so far (exports and one-call inputs alike): a call whose inputs were all
        exported before, or linked from the :meth:`sibling` origin, adds none."""
        self._lock = threading.Lock()
        self.restarts = 0
        self._retired = False
        self.last_start_s = 0.0
        self._closed = False
        self._start_worker()  # fail early (and refuse) rather than on the model's first call

    # -- public ----------------------------------------------------------------------------

    @property
    def layers(self) -> dict[str, Any]:
        """Which confinement layers hold in the current worker (``True``/description, or why not)."""
        status = dict(self._worker.hello["layers"]) if self._worker else {}
        for name in confinement.OS_LAYERS:
            status.setdefault(name, "not requested")
        status["rss_watchdog"] = ("anonymous + shared memory + memfds + scratch bytes, checked every "
                                  f"{WATCHDOG_INTERVAL_S * 1000:g} ms, also while a reply arrives")
        status["ast_precheck"] = self._ast_precheck
        status["audit_hooks"] = self._audit_hooks
        return status

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker else None

    exports_inputs = True
    """``execute`` takes ``versions``: inputs are exported once per value version (see :meth:`execute`)."""

    streams_output = True
    """``execute`` takes ``on_output``: printed text is handed to it while the call runs."""

    has_workers = True
    """Code runs in forked, confined workers (see :meth:`fresh_worker`, :meth:`retire_worker`, :meth:`sibling`)."""

    restarts: int = 0
    """Workers started to replace one that was lost (not counting retired ones)."""

    last_start_s: float = 0.0
    """Seconds the latest worker took to fork, confine itself and report in."""

    def execute(self, code: str, inputs: dict[str, Any], taken_names: Collection[str], *,
                versions: dict[str, str] | None = None,
                on_output: Callable[[str], None] | None = None) -> ExecutionResult:
        """Run ``code`` in the worker with ``inputs`` attached read-only.

        ``versions`` (handle -> token unique to the value, from
        :meth:`SessionCache.versions`) lists every live handle: an input whose
        token was exported before reuses that file (the worker maps it again,
        nothing is rewritten), and files of tokens no longer listed (retired
        or replaced handles) are removed. Without ``versions`` every input is
        written for this call only.

        ``on_output(text)`` receives stdout/stderr as the code prints it (the
        worker's ``output`` frames), at most ``STREAM_MAX_CHARS`` per call, on
        this thread, inside the loop that keeps the deadline and the memory
        watchdog. The returned result holds the full captured output as before.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("this SandboxedInterpreter is closed")
            self._seq += 1
            seq = self._seq
            written: list[str] = []
            try:
                worker = self._ensure_worker()
                descs = {}
                if versions is not None:
                    self._drop_exports(set(versions.values()))
                for name, value in inputs.items():
                    token = versions.get(name) if versions is not None else None
                    if token is not None and token in self._exports:
                        descs[name] = self._exports[token][1]
                        continue
                    if token is not None and self._export_origin is not None:
                        try:
                            shared = self._link_shared_export(token, name, value)
                        except TransferRefused as exc:
                            result = ExecutionResult()
                            result.error = f"TransferRefused: {exc}"
                            return result
                        if shared is not None:
                            descs[name] = shared
                            continue
                    try:
                        self.inputs_written += 1
                        desc = write_input(name, value, self.input_dir,
                                           f"v{len(self._exports)}_{seq}" if token is not None else str(seq))
                    except TransferRefused as exc:  # the model's input, not a broken worker: state stays
                        result = ExecutionResult()
                        result.error = f"TransferRefused: {exc}"
                        return result
                    paths = [os.path.join(self.input_dir, f) for f in input_files(desc)]
                    if paths and token is not None:
                        self._exports[token] = (paths, desc)
                    else:
                        written.extend(paths)
                    descs[name] = desc
                for parts in receive_sealed(worker.result_sock, _MAX_SAVES + 1).values():
                    for fd in parts:
                        os.close(fd)  # anything a previous call left queued is stale
                send_frame(worker.req_fd, {"op": "exec", "seq": seq, "code": code, "inputs": descs,
                                           "taken": sorted(taken_names)})
                reply = self._wait(worker, seq, on_output)
                if isinstance(reply, ExecutionResult):
                    return reply
                sealed = receive_sealed(worker.result_sock, _MAX_SAVES + 1)
                try:
                    return self._build_result(reply, taken_names, sealed)
                finally:
                    for parts in sealed.values():
                        for fd in parts:
                            os.close(fd)  # the mappings made from them stay valid
            except (BrokenPipeError, EOFError, ProtocolError) as exc:
                return self._lost_worker(f"the sandbox worker failed: {type(exc).__name__}: {exc}")
            except KeyboardInterrupt:
                self._stop_worker()  # the code is still running: stop it, the next call gets a fresh worker
                raise
            finally:
                for path in written:
                    _unlink(path)
                self._clean_scratch_outputs()

    def fresh_worker(self) -> None:
        """Replace the worker with a newly forked one: nothing the model did in it survives.

        Module state, monkeypatches and threads die with the old process. The
        session directory (inputs, scratch files) is kept. Costs one fork from
        the warm launcher (see ``benchmarks/bench_sandbox.py``).
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("this SandboxedInterpreter is closed")
            self._stop_worker()
            self._start_worker()

    def retire_worker(self) -> None:
        """Stop the worker now; the next call (or :meth:`start_worker`) forks a fresh one.

        What :meth:`fresh_worker` does, in two halves: the session retires the
        worker when a cell starts and forks the new one at the cell's first
        interpreter call, as a step the user sees with its time.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("this SandboxedInterpreter is closed")
            self._stop_worker()
            self._retired = True

    def start_worker(self) -> float:
        """Fork a worker now if none runs (retired, or lost); seconds it took (0.0 when one was running).

        A worker lost to a crash, a memory kill or an interrupt counts in
        :attr:`restarts`; one replacing a retired worker does not.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("this SandboxedInterpreter is closed")
            if self._worker is not None:
                return 0.0
            if not self._retired:
                self.restarts += 1
            self._retired = False
            self._start_worker()
            return self.last_start_s

    def _drop_exports(self, live: set[str]) -> None:
        for token in [t for t in self._exports if t not in live]:
            paths, _ = self._exports.pop(token)
            for path in paths:
                _unlink(path)

    def _link_shared_export(self, token: str, name: str, value: Any) -> dict[str, Any] | None:
        """Our descriptor for the origin's export of ``token`` (exported there first if needed), or None.

        The file is hard-linked into this interpreter's input directory: the
        same inode, no byte written, and this worker sees only the inputs it
        was given. The file stays read-only (mode 0444, owned by the kernel's
        user; the worker's Landlock rules grant its input directory reads
        only). None when the origin is closed or the link fails (another file
        system): the caller then exports the value itself.
        """
        origin = self._export_origin
        try:
            paths, desc = origin._export_once(token, name, value)  # type: ignore[union-attr]
        except RuntimeError:
            return None
        if not paths:
            return desc  # carried inline (tagged JSON): there is no file
        serial = next(self._export_serial)
        own = [os.path.join(self.input_dir, f"in_s{serial}_{os.path.basename(path)[3:]}") for path in paths]
        try:
            for source, target in zip(paths, own):
                os.link(source, target, follow_symlinks=False)
        except OSError:
            for target in own:
                _unlink(target)
            return None
        names = [os.path.basename(path) for path in own]
        desc = {**desc, "file": names[0], **({"parts": names} if len(names) > 1 else {})}
        self._exports[token] = (own, desc)
        return desc

    def _export_once(self, token: str, name: str, value: Any) -> tuple[list[str], dict[str, Any]]:
        """(files, descriptor) of this interpreter's export of ``token``, written now if it was not yet.

        Called by siblings (subagents) with the value they hold under the same
        token, i.e. the same value. Raises ``RuntimeError`` once closed,
        :class:`TransferRefused` when the value cannot cross.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("this SandboxedInterpreter is closed")
            if token not in self._exports:
                self.inputs_written += 1
                desc = write_input(name, value, self.input_dir, f"x{next(self._export_serial)}")
                if not input_files(desc):
                    return [], desc
                self._exports[token] = ([os.path.join(self.input_dir, f) for f in input_files(desc)], desc)
            return self._exports[token]

    def exported_files(self) -> list[str]:
        """Input files kept for later calls (one per live value version that was used, or its parts when large)."""
        with self._lock:
            return sorted(path for paths, _ in self._exports.values() for path in paths)

    def sibling(self) -> SandboxedInterpreter:
        """A new interpreter with these settings and its own worker and session directory (for a subagent)."""
        with warnings.catch_warnings():
            if self.allow_unconfined:
                warnings.simplefilter("ignore", UnconfinedWarning)  # the parent already warned
            child = SandboxedInterpreter(**self._options)
        child._export_origin = self  # inputs it shares with us (same value token) map our files
        return child

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_worker()
            shutil.rmtree(self.session_dir, ignore_errors=True)

    def __enter__(self) -> SandboxedInterpreter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- worker lifecycle ------------------------------------------------------------------

    def _start_worker(self) -> _Worker:
        started = time.monotonic()
        try:
            return self._spawn_worker()
        finally:
            self.last_start_s = time.monotonic() - started

    def _spawn_worker(self) -> _Worker:
        config = {"session_dir": self.session_dir, "input_dir": self.input_dir, "scratch_dir": self.scratch_dir,
                  "layers": list(self._layers), "limits": self._limits, "ast_precheck": self._ast_precheck,
                  "audit_hooks": self._audit_hooks}
        if not self._launcher.alive():
            self._launcher = LauncherClient.shared()  # ours exited or was retired (maybe by another session)
        try:
            worker = self._fork_worker(config)
        except SandboxUnavailableError as first:
            if self._launcher.alive():
                raise  # it answered and refused: a new launcher would refuse too
            # It died, hung or broke the protocol and was retired: one fresh launcher, once.
            self._launcher = LauncherClient.shared()
            try:
                worker = self._fork_worker(config)
            except SandboxUnavailableError as second:
                raise SandboxUnavailableError(f"{second} (the launcher before it had failed too: {first})") from second
        os.set_blocking(worker.resp_fd, False)
        try:
            hello = _read_hello(worker.resp_fd)
        except (EOFError, ProtocolError) as exc:
            worker.kill()
            worker.close_fds()
            raise SandboxUnavailableError(f"sandbox worker failed to start: {exc}") from exc
        except BaseException:  # an interrupt while it reports in: it must not outlive the call
            worker.kill()
            worker.close_fds()
            raise
        if hello.get("op") != "hello":
            worker.kill()
            worker.close_fds()
            raise SandboxUnavailableError(f"sandbox worker failed to confine itself: {hello.get('error')}")
        if hello.get("pid") != worker.pid:
            worker.kill()
            worker.close_fds()
            raise SandboxUnavailableError(f"the sandbox worker that reported in (pid {hello.get('pid')!r}) is not "
                                          f"the one the launcher forked (pid {worker.pid})")
        worker.hello = hello
        self._worker = worker
        hello["layers"]["memory_cgroup"] = self._join_memory_cgroup(worker)
        requested = {n: status for n, status in hello["layers"].items() if n in self._layers}
        gap = confinement_gap(requested)
        if gap is not None:
            if not self.allow_unconfined:
                self._stop_worker()
                raise SandboxUnavailableError(
                    f"{gap}; refusing to run untrusted code. "
                    "Pass allow_unconfined=True (AgentMagics.sandbox = 'unconfined') to run it anyway."
                )
            warnings.warn(f"sandbox worker runs WITHOUT full OS confinement (allow_unconfined=True): {gap}",
                          UnconfinedWarning, stacklevel=3)
        return worker

    def _fork_worker(self, config: dict[str, Any]) -> _Worker:
        """A worker forked by the current launcher on descriptors made for this attempt only.

        Nothing is shared between attempts: a worker forked late for an attempt
        that was given up holds only ends this side has closed, so it meets
        EPIPE/EOF and exits, and can never answer for another worker.
        """
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        # Made before the worker confines itself (it may create no sockets after): sealed results come back here.
        result_parent, result_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        launcher = self._launcher
        try:
            pid = launcher.spawn(config, [req_r, resp_w, result_child.fileno()])
            result_parent.setblocking(False)  # drained without waiting: results are queued before the reply
            return _Worker(pid, req_w, resp_r, {}, result_parent, launcher)
        except BaseException:
            os.close(req_w)
            os.close(resp_r)
            result_parent.close()
            raise
        finally:
            os.close(req_r)
            os.close(resp_w)
            result_child.close()

    def _ensure_worker(self) -> _Worker:
        if self._worker is None:
            if not self._retired:
                self.restarts += 1
            self._retired = False
            return self._start_worker()
        return self._worker

    def _join_memory_cgroup(self, worker: _Worker) -> str:
        """Put the idle, just-confined worker in a memory cgroup of its own; how that went."""
        try:
            cgroup = MemoryCgroup(cgroup_limit(self.rss_limit))
        except CgroupUnavailable as exc:
            return f"unavailable: {exc}"
        try:
            cgroup.add(worker.pid)
        except CgroupUnavailable as exc:
            cgroup.remove()
            return f"unavailable: {exc}"
        worker.cgroup = cgroup
        return cgroup.describe()

    def _stop_worker(self) -> dict[str, Any]:
        worker, self._worker = self._worker, None
        if worker is None:
            return {}
        worker.kill()
        worker.close_fds()
        try:
            return (worker.launcher or self._launcher).reap(worker.pid, REAP_WAIT_S)
        except SandboxUnavailableError:
            return {}  # killed above; a retired launcher's workers died with it
        finally:
            if worker.cgroup is not None:
                worker.cgroup.remove()

    def _lost_worker(self, why: str) -> ExecutionResult:
        worker = self._worker
        gone = (worker.launcher or self._launcher).loss() if worker is not None else None
        status = self._stop_worker()
        if status.get("signal"):
            why += f" (killed by {signal.Signals(status['signal']).name})"
        elif status.get("status") is not None:
            why += f" (exit status {status['status']})"
        if gone is not None:  # the launcher's end took its workers with it (PR_SET_PDEATHSIG)
            why += f"; its launcher is gone: {gone}"
        return ExecutionResult(error=f"SandboxError: {why}. The worker was restarted; the session is intact.")

    def _wait(self, worker: _Worker, seq: int,
              on_output: Callable[[str], None] | None = None) -> dict[str, Any] | ExecutionResult:
        """The reply to call ``seq``, or an error result: one loop owns the deadline and the watchdog.

        The reply pipe is non-blocking and read a chunk at a time (:class:`FrameReader`),
        so a worker that sends half a frame and stalls, or trickles bytes while it
        allocates, still meets the wall-clock limit and the memory limit: both are
        checked every ``WATCHDOG_INTERVAL_S`` on this same loop, whether or not bytes
        arrived (a flood of frames cannot starve the check).

        ``output`` frames of this call go to ``on_output`` (see :class:`_OutputRelay`);
        any other frame that is not this call's result is dropped.
        """
        relay = _OutputRelay(seq, on_output)
        try:
            return self._wait_reply(worker, seq, relay)
        finally:
            relay.flush()  # what was printed before the end, the interrupt or the kill

    def _wait_reply(self, worker: _Worker, seq: int, relay: _OutputRelay) -> dict[str, Any] | ExecutionResult:
        deadline = time.monotonic() + self.timeout
        reader = FrameReader(worker.resp_fd)
        tick = 0
        next_check = time.monotonic() + WATCHDOG_INTERVAL_S  # a quick reply pays for no check
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                worker.kill()
                return self._lost_worker(f"the code ran past the {self.timeout:g}-second time limit and was stopped")
            ready, _, _ = select.select([worker.resp_fd], [], [], min(WATCHDOG_INTERVAL_S, left))
            if ready:
                try:
                    reply = reader.feed()
                except EOFError:
                    if worker.cgroup is not None and worker.cgroup.oom_killed():
                        _clear_directory(self.scratch_dir)
                        return self._lost_worker(
                            f"the code went over the {self.rss_limit / 2**20:.0f} MiB memory limit (stopped by "
                            "its memory cgroup); its scratch files were deleted")
                    return self._lost_worker("the sandbox worker died (crash or memory limit)")
                if reply is not None and reply.get("op") == "output":
                    relay.take(reply)
                    reply = None
                if reply is not None and reply.get("op") == "result" and reply.get("seq") != seq:
                    reply = None  # a stale or forged frame: the real reply follows (the watchdog still runs)
                if reply is not None:
                    if reply.get("recycle"):
                        self._stop_worker()
                    if reply.get("op") != "result":
                        return self._lost_worker(f"the sandbox worker failed: {str(reply.get('error'))[-2000:]}")
                    return reply
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + WATCHDOG_INTERVAL_S
            relay.tick()
            over = self._over_memory(worker, scan_scratch=tick % SCRATCH_SCAN_EVERY == 0)
            tick += 1
            if over is not None:
                worker.kill()
                _clear_directory(self.scratch_dir)
                return self._lost_worker(over + "; its scratch files were deleted")

    def _over_memory(self, worker: _Worker, *, scan_scratch: bool) -> str | None:
        """Why the worker is over its memory limit (anonymous + shared + scratch bytes), or None."""
        if scan_scratch:
            self._scratch_bytes = _directory_bytes(self.scratch_dir, SCRATCH_MAX_FILES)
            self._held_bytes = worker.held_file_bytes()
        used = worker.memory() + self._held_bytes
        scratch = self._scratch_bytes
        if scratch is None:
            return f"the code created more than {SCRATCH_MAX_FILES} scratch files"
        if scratch > self.scratch_max_bytes:
            return (f"the code wrote {scratch / 2**20:.0f} MiB of scratch files, over the "
                    f"{self.scratch_max_bytes / 2**20:.0f} MiB scratch limit")
        if used + scratch > self.rss_limit:
            return (f"the code used {(used + scratch) / 2**20:.0f} MiB (memory, shared memory, memfds and "
                    f"scratch files), over the {self.rss_limit / 2**20:.0f} MiB memory limit")
        return None

    def _build_result(self, reply: dict[str, Any], taken_names: Collection[str],
                      sealed: dict[int, list[int]] | None = None) -> ExecutionResult:
        result = ExecutionResult()
        stdout = reply.get("stdout", "")
        if not isinstance(stdout, str):
            raise ProtocolError("stdout is not text")
        dropped = reply.get("stdout_dropped", 0)
        if isinstance(dropped, int) and dropped > 0:
            stdout += f"\n... [{dropped} more characters of output dropped]"
        notes = reply.get("notes", [])
        if isinstance(notes, list):
            for note in notes[:20]:
                stdout += f"\n[sandbox] {str(note)[:500]}"
        result.stdout = stdout
        error = reply.get("error")
        if error is not None:
            result.error = str(error)
        taken = set(taken_names)
        saved = reply.get("saved", [])
        if not isinstance(saved, list) or len(saved) > _MAX_SAVES:
            raise ProtocolError("malformed saved list")
        for item in saved:
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                raise ProtocolError("malformed saved entry")
            handle = resolve_handle_name(item[0], taken)  # never trust the worker's arithmetic
            taken.add(handle)
            result.saved.append((handle, self._read(item[1], sealed)))
        if reply.get("value") is not None:
            result.value = self._read(reply["value"], sealed)
        charts = reply.get("charts", [])
        if isinstance(charts, list):
            for chart in charts[:20]:
                png = base64.b64decode(chart, validate=True) if isinstance(chart, str) else b""
                if png.startswith(b"\x89PNG\r\n\x1a\n"):
                    result.charts.append(png)
        return result

    def _read(self, desc: Any, sealed: dict[int, list[int]] | None = None) -> Any:
        try:
            return read_result(desc, self.scratch_dir, self.result_max_bytes, sealed)
        except ProtocolError as exc:
            raise ProtocolError(f"result refused: {exc}") from exc

    def _clean_scratch_outputs(self) -> None:
        try:
            names = os.listdir(self.scratch_dir)
        except OSError:
            return
        for name in names:
            if name.startswith("out_"):
                _unlink(os.path.join(self.scratch_dir, name))


class _OutputRelay:
    """Hands a call's ``output`` frames to ``on_output``: bounded, coalesced, never failing the call.

    Text of frames for another ``seq``, malformed frames and characters past
    ``STREAM_MAX_CHARS`` are dropped. Text is handed on at most every
    ``STREAM_RELAY_INTERVAL_S`` (and on :meth:`flush`), so a worker flooding
    tiny frames costs the display a bounded number of updates per second.
    """

    def __init__(self, seq: int, on_output: Callable[[str], None] | None) -> None:
        self.seq, self.on_output = seq, on_output
        self.taken = 0
        self.pending: list[str] = []
        self.last = 0.0

    def take(self, frame: dict[str, Any]) -> None:
        text = frame.get("text")
        if self.on_output is None or frame.get("seq") != self.seq or not isinstance(text, str) or not text:
            return
        room = STREAM_MAX_CHARS - self.taken
        if room <= 0:
            return
        text = text[:room]
        self.taken += len(text)
        self.pending.append(text)
        self.tick()

    def tick(self) -> None:
        """Hand pending text on if the interval has passed (called from the watchdog tick too)."""
        if self.pending and time.monotonic() - self.last >= STREAM_RELAY_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if not self.pending or self.on_output is None:
            return
        text, self.pending, self.last = "".join(self.pending), [], time.monotonic()
        try:
            self.on_output(text)
        except Exception as exc:  # noqa: BLE001 - the display is not the result
            warnings.warn(f"output callback failed: {exc!r}", RuntimeWarning)


def _read_hello(fd: int) -> dict[str, Any]:
    reader, deadline = FrameReader(fd), time.monotonic() + SPAWN_TIMEOUT_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProtocolError("worker did not report in time")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            frame = reader.feed()
            if frame is not None:
                return frame


def _holds(status: Any) -> bool:
    return status is True or (isinstance(status, str) and not status.startswith(("unavailable", "not ")))


def _directory_bytes(root: str, max_entries: int) -> int | None:
    """Allocated bytes under ``root`` (sparse files count what they hold); None past ``max_entries``."""
    total, seen, stack = 0, 0, [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    return None
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


def _clear_directory(root: str) -> None:
    """Delete everything inside ``root``, keeping ``root`` itself."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def probe_confinement() -> dict[str, bool | str]:
    """Which confinement layers this machine offers, tried for real in a throwaway worker.

    Keys: ``env``, ``fds``, ``process_group``, ``pdeathsig``, ``rlimits``, ``netns``,
    ``ipcns``, ``drop_root``, ``landlock``, ``seccomp``, ``rss_watchdog``, ``memory_cgroup``, plus ``confined``
    (whether untrusted code may run without the unconfined opt-in).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnconfinedWarning)
        sandbox = SandboxedInterpreter(allow_unconfined=True, ast_precheck=False, audit_hooks=False)
    try:
        layers = sandbox.layers
    finally:
        sandbox.close()
    report: dict[str, bool | str] = {}
    for name in (*confinement.BASE_LAYERS, *confinement.OS_LAYERS, "rss_watchdog", "memory_cgroup"):
        value = layers.get(name, False)
        report[name] = value if isinstance(value, (bool, str)) else str(value)
    report["confined"] = confinement_gap(report) is None
    return report
