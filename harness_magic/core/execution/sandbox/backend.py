"""``SandboxedInterpreter``: the interpreter backend whose boundary is an OS-confined process.

One launcher per kernel process (started on first use, shared by every session)
forks the workers of every :class:`SandboxedInterpreter`: a new one per cell
(:meth:`~SandboxedInterpreter.fresh_worker`) and per subagent
(:meth:`~SandboxedInterpreter.sibling`). A call has its inputs exported into the
session's input directory (:mod:`.exports`), sends the code over a pipe and
waits for the reply in the loop that enforces the wall-clock timeout and the
memory watchdog (:mod:`.watchdog`; a memory cgroup backs it in the OS), then
rebuilds the results (:mod:`.transfer_kernel`). The worker itself is a
:class:`~.worker_handle.WorkerHandle`. A worker that crashes, times out or is
killed while a call runs is restarted on the next call; the call that lost it
gets one readable error result (what died, that its work was lost, which cached
handles survive). A worker found dead when a call starts (killed between calls,
or with its launcher) is found at no cost to a live worker's call: the request
finds no reader on its pipe. It is replaced, the request is sent again and the
call runs once, in the new worker; its result says so in ``replaced`` (for the
log and the live view, never for the model). This module decides when workers start and
stop and whether their layers confine untrusted code (:func:`confinement_gap`).
"""

from __future__ import annotations

import base64
import os
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

from harness_magic.core.cache.names import resolve_handle_name
from harness_magic.core.confinement import layers as confinement
from harness_magic.core.execution.backend_start import DATA_STACK_TRIGGER
from harness_magic.core.execution.interpreter import ExecutionResult
from harness_magic.core.execution.sandbox.exports import InputExports
from harness_magic.core.execution.sandbox.launcher import DATA_STACK
from harness_magic.core.execution.sandbox.launcher_client import CHART_PRELOADS, LauncherClient, SandboxUnavailableError
from harness_magic.core.execution.sandbox.protocol import ProtocolError, send_exec
from harness_magic.core.execution.sandbox.scratch import remove_quietly, remove_result_files
from harness_magic.core.execution.sandbox.transfer_codec import RESULT_MAX_BYTES, TransferRefused
from harness_magic.core.execution.sandbox.transfer_kernel import read_result, receive_sealed
from harness_magic.core.execution.sandbox.watchdog import WATCHDOG_INTERVAL_S, MemoryLimits, WorkerLost, await_reply
from harness_magic.core.execution.sandbox.worker_handle import WorkerHandle, fork_worker
from harness_magic.core.transcript.events import WorkerReplaced

__all__ = [
    "SandboxedInterpreter",
    "UnconfinedWarning",
    "probe_confinement",
    "DEFAULT_TIMEOUT_S",
    "CONFINING_LAYERS",
    "FILE_CONFINING_LAYERS",
    "confinement_gap",
]

DEFAULT_TIMEOUT_S = 60.0
"""Wall-clock seconds one call may run: analyses taking longer should be split."""

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


def _holds(status: Any) -> bool:
    return status is True or (isinstance(status, str) and not status.startswith(("unavailable", "not ")))


LOST_STATE_NOTE = ("Everything this call had computed in the worker was lost and nothing it saved was kept; "
                   "the next call runs in a fresh worker.")
"""Said to the model after the worker died during its call (what it lost; :func:`_surviving` says what it kept)."""

SURVIVORS_LISTED = 30
"""Cached handle names a lost-worker error lists; the rest are counted."""

_MAX_SAVES = 100
"""Matches the worker's cap on save() calls per run."""


def _total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class UnconfinedWarning(UserWarning):
    """Untrusted code is about to run without OS confinement."""


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
        rss = int(rss_limit) if rss_limit is not None else int(total * 0.75)
        self._options: dict[str, Any] = dict(timeout=timeout, memory_limit=memory_limit, rss_limit=rss_limit,
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
        self._launcher = LauncherClient.shared()
        self._session_launcher = self._launcher
        """The launcher whose root holds :attr:`session_dir` (it stays there when the launcher is replaced)."""
        self.session_dir = self._launcher.open_session()
        self.input_dir = os.path.join(self.session_dir, "inputs")
        self.scratch_dir = os.path.join(self.session_dir, "scratch")
        self._memory = MemoryLimits(rss, int(scratch_max_bytes) if scratch_max_bytes is not None else rss,
                                    self.scratch_dir)
        """What every call's worker may hold (built once: the reply wait reads it on each call)."""
        os.mkdir(self.input_dir, 0o755)
        os.mkdir(self.scratch_dir, 0o700)
        self._worker: WorkerHandle | None = None
        self._unused: WorkerHandle | None = None
        """The worker while it has run no call (see :meth:`_with_data_stack`)."""
        self._lost_launcher: tuple[int, str, dict[str, Any]] | None = None
        """A launcher found dead by a worker start and replaced (pid, how it ended, its status), until a call's
        result reports it."""
        self._seq = 0
        self._lock = threading.Lock()
        self._exports = InputExports(self.input_dir, self._lock)
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
    def rss_limit(self) -> int:
        """Bytes of memory, memfds and scratch a worker may hold (see the class docstring); set at construction."""
        return self._memory.rss_limit

    @property
    def scratch_max_bytes(self) -> int:
        """Bytes of scratch files a worker may hold; set at construction."""
        return self._memory.scratch_max_bytes

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
            replaced: WorkerReplaced | None = None
            tidy = True  # result files may lie in scratch: removed after the call (see _may_name_scratch_files)
            try:
                worker = self._ensure_worker()
                if self._lost_launcher is not None:  # found dead when this worker was forked (after a retire)
                    replaced = self._launcher_replaced(worker)
                worker = self._with_data_stack(worker, code)
                try:
                    descs, written = self._exports.prepare(inputs, versions, seq)
                except TransferRefused as exc:  # the model's input, not a broken worker: state stays
                    return ExecutionResult(error=f"TransferRefused: {exc}", replaced=replaced)
                taken = sorted(taken_names)
                try:
                    self._send_request(worker, seq, code, descs, taken)
                except BrokenPipeError:
                    # No reader: the worker died before this call (killed between calls, or with its launcher
                    # through PR_SET_PDEATHSIG) and the code never reached it. Found at no cost to a live worker's
                    # call; replaced once.
                    if replaced is not None:
                        raise  # the worker just started is gone too: not our plumbing to hide any more
                    worker, replaced = self._replace_found_dead(worker)
                    self._send_request(worker, seq, code, descs, taken)
                self._unused = None  # the worker has a call now
                reply = self._wait(worker, seq, on_output, taken_names)
                if isinstance(reply, ExecutionResult):
                    reply.replaced = replaced
                    return reply
                if len(reply) == 2:  # {"op": "result", "seq": N} (checked by the wait): an empty call's reply
                    tidy = False  # names no result file, and no result: nothing to sweep or collect
                    return ExecutionResult(replaced=replaced)
                tidy = _may_name_scratch_files(reply)
                # Sent before the reply, so queued by now. Only a reply naming results reads the socket: anything
                # queued beside a reply that names none is closed before the next request (_send_request).
                sealed = (receive_sealed(worker.result_sock, _MAX_SAVES + 1)
                          if _may_name_results(reply) and worker.results_queued() else {})
                try:
                    result = self._build_result(reply, taken_names, sealed)
                    result.replaced = replaced
                    if result.charts:  # a session that draws: its later workers start with the charting stack
                        self._launcher.preload_soon(CHART_PRELOADS)
                    if "imported" in reply:  # a session that works with data: its later workers start with it
                        self._launcher.preload_soon(_data_stack_named(reply["imported"]))
                    return result
                finally:
                    for parts in sealed.values():
                        for fd in parts:
                            os.close(fd)  # the mappings made from them stay valid
            except (BrokenPipeError, EOFError, ProtocolError) as exc:
                lost = self._lost_worker(f"the sandbox worker failed: {type(exc).__name__}: {exc}", taken_names)
                lost.replaced = replaced
                return lost
            except KeyboardInterrupt:
                self._stop_worker()  # the code is still running: stop it, the next call gets a fresh worker
                raise
            finally:
                for path in written:
                    remove_quietly(path)
                if tidy:
                    remove_result_files(self.scratch_dir)

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

    @property
    def inputs_written(self) -> int:
        """Inputs serialised so far (exports and one-call inputs alike): a call whose inputs were all
        exported before, or linked from the :meth:`sibling` origin, adds none."""
        return self._exports.inputs_written

    def exported_files(self) -> list[str]:
        """Input files kept for later calls (one per live value version that was used, or its parts when large)."""
        return self._exports.files()

    def sibling(self) -> SandboxedInterpreter:
        """A new interpreter with these settings and its own worker and session directory (for a subagent)."""
        with warnings.catch_warnings():
            if self.allow_unconfined:
                warnings.simplefilter("ignore", UnconfinedWarning)  # the parent already warned
            child = SandboxedInterpreter(**self._options)
        child._exports.origin = self._exports  # inputs it shares with us (same value token) map our files
        return child

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._exports.close()
            self._stop_worker()
            self._session_launcher.close_session(self.session_dir)

    def __enter__(self) -> SandboxedInterpreter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- worker lifecycle ------------------------------------------------------------------

    def _start_worker(self) -> WorkerHandle:
        started = time.monotonic()
        try:
            self._unused = self._spawn_worker()
            return self._unused
        finally:
            self.last_start_s = time.monotonic() - started

    def _with_data_stack(self, worker: WorkerHandle, code: str) -> WorkerHandle:
        """``worker``; or, when it has run nothing yet, ``code`` names a module of the data stack and its launcher
        was never asked to warm it: a worker forked once the launcher has (nothing is lost: the one replaced had
        run nothing). The session's first use of pandas then waits for the launcher's warm-up instead of an import
        of the worker's own, which it would hold beside the launcher's until the next cell's fresh worker."""
        if worker is not self._unused or _NAMES_DATA_STACK.search(code) is None:
            return worker
        warming = self._launcher.preload_soon(DATA_STACK)
        if warming is None:
            return worker  # asked before: warm, or warming for a worker that will report what it imports
        warming.join()
        if self._launcher.preload_failure is not None:
            return worker  # the launcher could not warm it: the worker imports what it uses itself
        self._stop_worker()
        return self._start_worker()

    def _spawn_worker(self) -> WorkerHandle:
        config = {"session_dir": self.session_dir, "input_dir": self.input_dir, "scratch_dir": self.scratch_dir,
                  "layers": list(self._layers), "limits": self._limits, "ast_precheck": self._ast_precheck,
                  "audit_hooks": self._audit_hooks, "data_stack": list(DATA_STACK)}
        if not self._launcher.alive():  # ours exited or was retired (maybe by another session)
            self._lost_launcher = self._lost_launcher or (self._launcher.pid, *_launcher_ending(self._launcher))
            self._launcher = LauncherClient.shared()
        if DATA_STACK_TRIGGER in sys.modules:  # the kernel works with data, so will its workers: warm them with it
            warming = self._launcher.preload_soon(DATA_STACK)
            if warming is not None:
                warming.join()  # once per launcher; a failure leaves the worker to import what it uses
        try:
            worker = fork_worker(self._launcher, config)
        except SandboxUnavailableError as first:
            if self._launcher.alive():
                raise  # it answered and refused: a new launcher would refuse too
            # It died, hung or broke the protocol and was retired: one fresh launcher, once.
            self._lost_launcher = self._lost_launcher or (self._launcher.pid, *_launcher_ending(self._launcher))
            self._launcher = LauncherClient.shared()
            try:
                worker = fork_worker(self._launcher, config)
            except SandboxUnavailableError as second:
                raise SandboxUnavailableError(f"{second} (the launcher before it had failed too: {first})") from second
        worker.await_hello()
        self._worker = worker
        hello = worker.hello
        hello["layers"]["memory_cgroup"] = worker.join_memory_cgroup(self.rss_limit)
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

    def _ensure_worker(self) -> WorkerHandle:
        if self._worker is None:
            if not self._retired:
                self.restarts += 1
            self._retired = False
            return self._start_worker()
        return self._worker

    @staticmethod
    def _send_request(worker: WorkerHandle, seq: int, code: str, inputs: dict[str, Any], taken: list[str]) -> None:
        """Send call ``seq``'s request to ``worker``: its code, the descriptors of its ``inputs`` when it has any,
        and the cache's handle names (``taken``) when they are not the ones it was last sent: a worker keeps them
        for its ``save()`` (the kernel resolves saved names again, whatever the worker answers)."""
        if worker.results_queued():
            for parts in receive_sealed(worker.result_sock, _MAX_SAVES + 1).values():
                for fd in parts:
                    os.close(fd)  # anything a previous call left queued is stale
        fields: dict[str, Any] = {"inputs": inputs} if inputs else {}
        if taken == worker.taken_sent:
            send_exec(worker.req_fd, seq, code, fields)
        else:
            send_exec(worker.req_fd, seq, code, {**fields, "taken": taken})
            worker.taken_sent = taken

    def _replace_found_dead(self, worker: WorkerHandle) -> tuple[WorkerHandle, WorkerReplaced]:
        """Replace ``worker``, found dead (or its launcher gone) before a call ran: the new worker and what died.

        Counts in :attr:`restarts`. A launcher that is gone is replaced with the
        worker (:meth:`_spawn_worker`); a failure to start raises as any start does.
        """
        started = time.monotonic()
        gone = worker.launcher.loss()
        self._worker = None
        process: Literal["worker", "launcher"]
        if gone is not None:  # its workers died with it (PR_SET_PDEATHSIG)
            why, status = _launcher_ending(worker.launcher)
            process, pid = "launcher", worker.launcher.pid
            worker.stop()
        else:
            status = worker.end_found_dead()
            process, pid, why = "worker", worker.pid, _ending(status)
        self.restarts += 1
        new = self._start_worker()
        self._lost_launcher = None  # reported here, with the worker
        sig = status.get("signal")
        return new, WorkerReplaced(
            process=process, pid=pid, why=why, exit_status=status.get("status"),
            signal=_signal_name(sig) if sig else None, new_pid=new.pid,
            duration_s=time.monotonic() - started)

    def _launcher_replaced(self, worker: WorkerHandle) -> WorkerReplaced:
        """What a worker start found: its launcher dead and replaced (reported once, by the call that follows)."""
        lost, self._lost_launcher = self._lost_launcher, None
        assert lost is not None, "called only when a start found its launcher dead"
        pid, why, status = lost
        sig = status.get("signal")
        return WorkerReplaced(process="launcher", pid=pid, why=why, exit_status=status.get("status"),
                                 signal=_signal_name(sig) if sig else None, new_pid=worker.pid,
                                 duration_s=self.last_start_s)

    def _stop_worker(self) -> dict[str, Any]:
        worker, self._worker = self._worker, None
        return worker.stop() if worker is not None else {}

    def _lost_worker(self, why: str, taken_names: Collection[str]) -> ExecutionResult:
        """The error result of a call whose worker was lost while it ran: what died, what was lost, what survives."""
        worker = self._worker
        gone = worker.launcher.loss() if worker is not None else None
        status = self._stop_worker()
        if status.get("signal"):
            why += f" (killed by {signal.Signals(status['signal']).name})"
        elif status.get("status") is not None:
            why += f" (exit status {status['status']})"
        if gone is not None:  # the launcher's end took its workers with it (PR_SET_PDEATHSIG)
            why += f"; its launcher is gone: {gone}"
        return ExecutionResult(error=f"SandboxError: {why}. {LOST_STATE_NOTE} {_surviving(taken_names)}")

    def _wait(self, worker: WorkerHandle, seq: int, on_output: Callable[[str], None] | None,
              taken_names: Collection[str]) -> dict[str, Any] | ExecutionResult:
        """The reply to call ``seq``, or an error result (see :func:`.watchdog.await_reply`)."""
        reply = await_reply(worker, seq, self.timeout, self._memory, on_output)
        if isinstance(reply, WorkerLost):
            return self._lost_worker(reply.why, taken_names)
        if reply.get("recycle"):
            self._stop_worker()
        if reply.get("op") != "result":
            return self._lost_worker(f"the sandbox worker failed: {str(reply.get('error'))[-2000:]}", taken_names)
        return reply

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
        saved = reply.get("saved", [])
        if not isinstance(saved, list) or len(saved) > _MAX_SAVES:
            raise ProtocolError("malformed saved list")
        taken = set(taken_names) if saved else set()
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


def _may_name_scratch_files(reply: Mapping[str, Any]) -> bool:
    """Whether a worker's reply may have left result files in scratch: an error (a result half written), or a
    value or saved result that is not an inline or sealed descriptor. Sealed and inline results leave none, and
    a reply without ``saved`` saved nothing (the worker leaves out fields at their defaults)."""
    saved = reply.get("saved", [])
    if reply.get("error") is not None or not isinstance(saved, list):
        return True
    if not saved and reply.get("value") is None:
        return False  # nothing was sent back (an empty call)
    descs = [reply.get("value"), *(item[1] if isinstance(item, list) and len(item) == 2 else item for item in saved)]
    return any(desc is not None and (not isinstance(desc, dict) or "file" in desc) for desc in descs)


def _may_name_results(reply: Mapping[str, Any]) -> bool:
    """Whether a worker's reply names results (a value, or saved values) that may be sealed memory files on the
    result socket: only then is the socket read after the reply."""
    return reply.get("value") is not None or "saved" in reply


def _ending(status: Mapping[str, Any]) -> str:
    """How a process found dead had ended, from a reap's ``{"status", "signal"[, "running"]}``."""
    if status.get("running"):
        return "closed its request pipe while still running (it was stopped)"
    if status.get("signal"):
        return f"killed by {_signal_name(status['signal'])}"
    if status.get("status") is not None:
        return f"exited with status {status['status']}"
    return "ended (its exit status is no longer known)"


_NAMES_DATA_STACK = re.compile(r"\b(?:" + "|".join(DATA_STACK) + r")\b")
"""Code that names a module of the data stack (an import, ``pd = __import__('pandas')``, a string): a cell's first
call in a worker of a launcher that never warmed it has the launcher warm it first (``_with_data_stack``)."""


def _data_stack_named(imported: Any) -> list[str]:
    """The modules of :data:`~.launcher.DATA_STACK` a worker's reply says it imported (anything else it names, or a
    reply field that is not a list, asks for nothing: the worker runs the model's code)."""
    return [name for name in DATA_STACK if isinstance(imported, list) and name in imported]


def _launcher_ending(launcher: LauncherClient) -> tuple[str, dict[str, Any]]:
    """How a launcher that no longer serves ended: the phrase (its retirement's reason when it was retired) and
    ``{"status", "signal"}`` from its process's return code."""
    code = launcher.process.poll()
    status = {"status": code if code is not None and code >= 0 else None,
              "signal": -code if code is not None and code < 0 else None}
    return (_ending(status) if launcher.broken is None else launcher.broken), status


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _surviving(taken_names: Collection[str]) -> str:
    """The sentence naming the cached handles a lost worker did not take with it (at most SURVIVORS_LISTED)."""
    names = sorted(taken_names)
    if not names:
        return "The cache holds no handles yet."
    listed = ", ".join(names[:SURVIVORS_LISTED])
    more = f" and {len(names) - SURVIVORS_LISTED} more" if len(names) > SURVIVORS_LISTED else ""
    return f"Every cached handle is intact and usable in the next call: {listed}{more}."


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
