"""Text extraction of HTML and PDF in a confined, time- and memory-limited child process.

HTML and PDF parsers are not linear-time by construction: pypdf inflates streams and walks
their operators, so an 18 KB PDF whose pages share one 16 MiB Flate stream keeps it busy about
10 s a page. The kernel never runs them. :class:`ExtractionWorker` starts ``python -I <this
file>`` and hands it one file's bytes at a time (read by the kernel through the safe open); the
child sends the lines back as JSON (never pickle: decoding runs no code), and the kernel kills it
when a file overruns its time, then starts a fresh one for the next file.

Wire protocol, on the child's stdin and stdout:

* the child starts with one line ``{"ready": true, "layers": {name: "ok" | why not}}``;
* request: one JSON line ``{"name", "suffix", "size", "max_chars", "max_pages"}``, then ``size`` bytes;
* reply: one JSON line, ``{"lines": [[number, text, heading], ...], "note": str}`` or
  ``{"error": str, "kind": "unreadable" | "too_long" | "memory"}``.

The child applies, in this order (layers of :mod:`harness_magic.core.confinement.layers`): an
allowlisted environment and its own session (set by the parent), ``PR_SET_PDEATHSIG``, rlimits
(CPU seconds, address space, no file writes, few descriptors), ``no_new_privs``, Landlock (read
only the Python install, write nothing) and seccomp (no exec, fork, sockets). Landlock and
seccomp hold where the kernel and libseccomp have them (``layers`` says which did); the time,
CPU and memory bounds hold everywhere.

Run as a script, this file loads ``extract.py`` and ``confinement.py`` by path: importing them
through their packages would pull in the connectors and the sandbox backend (~300 ms a child).
Only the standard library is imported at the top for the same reason.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the class by its import path: at run time ``extract`` may be loaded by file path (below)
    from harness_magic.core.knowledge.extract import ExtractionLimits

__all__ = ["ExtractionWorker", "WorkerError", "WORKER_START_TIMEOUT_S"]

WORKER_START_TIMEOUT_S = 15.0
"""Time for a child to start and report ready (an interpreter start on a loaded machine)."""
WORKER_OPEN_FILES = 64
"""Descriptors the child may hold: its pipes, /dev/null, module files while importing."""
HEADER_MAX_BYTES = 4096
"""A request's JSON header line; anything longer is a protocol error."""
REPLY_BYTES_PER_CHAR = 24
"""A reply's JSON is at most ~4 bytes a character plus ~16 a line (lines count against max_chars):
a reply longer than this many bytes per allowed character is refused and the worker killed."""
_CHUNK = 1 << 20


def _load_sibling(name: str, path: Path) -> Any:
    """Load a module of this package by file path, skipping its package's ``__init__``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_hm_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    extract = _load_sibling("extract", Path(__file__).with_name("extract.py"))
else:
    from harness_magic.core.knowledge import extract


class WorkerError(RuntimeError):
    """The worker could not be started or broke the protocol (not the file's fault)."""


# --------------------------------------------------------------------------- the kernel's side


class ExtractionWorker:
    """One confined child, started on first use and reused for the files of one refresh.

    :meth:`extract` returns ``(lines, note)`` or raises ``ExtractionError`` (the file is
    unreadable), ``ExtractionLimitError`` (over a limit: ``ExtractionTimeout``, ``TextTooLong``,
    memory, CPU), or :class:`WorkerError` (no worker could be started; not the file's fault). After a
    timeout or a crash the child is gone; the next call starts another. :meth:`close` ends it.
    """

    def __init__(self, limits: ExtractionLimits | None = None) -> None:
        self.limits = limits or extract.ExtractionLimits()
        self.layers: dict[str, str] = {}
        """What the last child reported of its confinement layers: ``"ok"`` or why not."""
        self.started = 0
        """Children started so far (tests and benchmarks read it)."""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ExtractionWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        """Stop the child (if any); safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]  # the worker is started with both pipes
            except OSError:
                pass
        try:
            proc.wait(timeout=1.0)  # EOF on stdin ends it
        except subprocess.TimeoutExpired:
            self._kill(proc)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the child, reap it and close our ends of its pipes."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session (start_new_session): the child and anything it made
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.kill()
        except ProcessLookupError:
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]  # the worker is started with both pipes
            except OSError:
                pass

    def _drop(self) -> None:
        """Forget the current child after killing it (a timeout, a crash, a broken reply)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            self._kill(proc)

    def _start(self) -> subprocess.Popen[bytes]:
        from harness_magic.core.confinement.layers import clean_environment

        cpu = int(self.limits.refresh_budget_s + self.limits.extract_timeout_s) + 2
        argv = [sys.executable, "-I", "-B", str(Path(__file__).resolve()), str(os.getpid()), str(cpu),
                str(self.limits.extract_memory_bytes)]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    env=clean_environment(), cwd="/", close_fds=True, start_new_session=True,
                                    bufsize=0)
        except OSError as exc:
            raise WorkerError(f"the extraction worker could not be started: {exc}") from exc
        self.started += 1
        for stream in (proc.stdin, proc.stdout):
            os.set_blocking(stream.fileno(), False)  # type: ignore[union-attr]  # the worker is started with both pipes
        self._proc = proc
        try:
            hello = self._exchange(b"", WORKER_START_TIMEOUT_S)
        except _Died as exc:
            self._drop()
            raise WorkerError(f"the extraction worker exited while starting ({exc})") from None
        except _TimedOut:
            self._drop()
            raise WorkerError(f"the extraction worker did not start within {WORKER_START_TIMEOUT_S:g} s") from None
        if not (isinstance(hello, dict) and hello.get("ready") is True and isinstance(hello.get("layers"), dict)):
            self._drop()
            raise WorkerError(f"the extraction worker sent {str(hello)[:200]!r} instead of its ready line")
        self.layers = {str(k): str(v) for k, v in hello["layers"].items()}
        return proc

    def extract(self, name: str, data: bytes, *, timeout_s: float | None = None) -> tuple[list[Any], str]:
        """Lines and note of one file's bytes (``name`` gives the type by its suffix)."""
        timeout = self.limits.extract_timeout_s if timeout_s is None else min(timeout_s, self.limits.extract_timeout_s)
        if self._proc is not None and self._proc.poll() is not None:
            self._drop()  # it exited between files (e.g. its CPU limit): reap it and start another
        proc = self._proc if self._proc is not None else self._start()
        header = {"name": Path(name).name, "suffix": Path(name).suffix.lower(), "size": len(data),
                  "max_chars": self.limits.text_max_chars, "max_pages": extract.PDF_MAX_PAGES}
        request = json.dumps(header).encode() + b"\n" + data
        try:
            reply = self._exchange(request, timeout, cap=REPLY_BYTES_PER_CHAR * self.limits.text_max_chars + _CHUNK)
        except _TimedOut:
            self._drop()
            raise extract.ExtractionTimeout(timeout) from None
        except _TooLong:
            self._drop()
            raise extract.TextTooLong(self.limits.text_max_chars) from None
        except _Died as exc:
            self._drop()
            raise extract.ExtractionLimitError(f"the extraction worker died ({exc})") from None
        return self._lines(reply)

    def _lines(self, reply: Any) -> tuple[list[Any], str]:
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            kind = reply.get("kind")
            if kind == "too_long":
                raise extract.TextTooLong(self.limits.text_max_chars)
            if kind == "memory":
                self._drop()  # a MemoryError can leave the child's heap unusable
                raise extract.ExtractionLimitError(
                    f"extraction ran out of memory (limit {self.limits.extract_memory_bytes // (1024 * 1024)} MiB)")
            raise extract.ExtractionError(reply["error"][:500])
        raw = reply.get("lines") if isinstance(reply, dict) else None
        note = reply.get("note", "") if isinstance(reply, dict) else ""
        if not isinstance(raw, list) or not isinstance(note, str):
            self._drop()
            raise WorkerError(f"the extraction worker sent a malformed reply: {str(reply)[:200]!r}")
        lines = []
        for item in raw:
            if not (isinstance(item, list) and len(item) == 3 and type(item[0]) is int and isinstance(item[1], str)
                    and type(item[2]) is int and 0 <= item[2] <= 6):
                self._drop()
                raise WorkerError(f"the extraction worker sent a malformed line: {str(item)[:200]!r}")
            lines.append(extract.Line(item[0], item[1], item[2]))
        return lines, note[:500]

    def _exchange(self, request: bytes, timeout: float, cap: int = HEADER_MAX_BYTES) -> Any:
        """Send ``request`` and read one reply line within ``timeout`` seconds (never blocking past it)."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        deadline = time.monotonic() + timeout
        out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()
        view = memoryview(request)
        sent = 0
        buffer = bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(out_fd, selectors.EVENT_READ)
            if view:
                selector.register(in_fd, selectors.EVENT_WRITE)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _TimedOut()
                for key, _ in selector.select(remaining):
                    if key.fd == in_fd:
                        try:
                            sent += os.write(in_fd, view[sent : sent + _CHUNK])
                        except BlockingIOError:
                            continue
                        except (BrokenPipeError, ConnectionResetError):
                            sent = len(view)  # the child is gone: its stdout will say so
                        if sent >= len(view):
                            selector.unregister(in_fd)
                        continue
                    try:
                        chunk = os.read(out_fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        raise _Died(self._exit_reason(proc))
                    start = len(buffer)
                    buffer += chunk
                    end = buffer.find(b"\n", start)
                    if end >= 0:
                        try:
                            return json.loads(bytes(buffer[:end]))
                        except ValueError:
                            raise _Died("it sent a reply that is not JSON") from None
                    if len(buffer) > cap:
                        raise _TooLong()

    @staticmethod
    def _exit_reason(proc: subprocess.Popen[bytes]) -> str:
        try:
            code = proc.wait(timeout=2.0)  # it closed its stdout: it is exiting
        except subprocess.TimeoutExpired:
            return "it closed its output and did not exit"
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            why = {"SIGXCPU": "over its CPU time limit", "SIGKILL": "killed: over its CPU time or memory limit",
                   "SIGSEGV": "crashed"}.get(name, "")
            return f"{name}{': ' + why if why else ''}"
        return f"exit status {code}"


class _TimedOut(Exception):
    pass


class _TooLong(Exception):
    pass


class _Died(Exception):
    pass


# --------------------------------------------------------------------------- the child


def _confine(parent: int, cpu_seconds: int, memory_bytes: int) -> dict[str, str]:
    """Apply the child's layers (see the module docstring); returns each layer's outcome."""
    confinement = _load_sibling("confinement", Path(__file__).resolve().parents[1] / "confinement" / "layers.py")
    layers: dict[str, str] = {}
    confinement.apply_pdeathsig(parent)
    layers["pdeathsig"] = "ok"
    confinement.apply_rlimits(cpu_seconds=cpu_seconds, address_space=memory_bytes, file_size=0,
                              open_files=WORKER_OPEN_FILES)
    layers["rlimits"] = "ok"
    read_paths = confinement.python_read_paths()
    try:  # locating libseccomp runs ldconfig and needs /tmp: before Landlock takes both away
        import pyseccomp  # noqa: F401
    except Exception:  # noqa: BLE001 - apply_seccomp below reports it unavailable
        pass
    for name, apply in (("no_new_privs", confinement.apply_no_new_privs),
                        ("landlock", lambda: confinement.apply_landlock(read_paths, [])),
                        ("seccomp", lambda: confinement.apply_seccomp(os.getpid()))):
        try:
            apply()
            layers[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - LayerError or a library's: the kernel or libseccomp lacks it
            layers[name] = f"unavailable: {type(exc).__name__}: {exc}"
    return layers


def _read_exactly(stream: Any, size: int) -> bytes:
    parts = []
    while size:
        part = stream.read(size)
        if not part:
            raise EOFError
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _serve(request: dict[str, Any], data: bytes) -> dict[str, Any]:
    try:
        lines, note = extract.extract_lines(Path("file" + request["suffix"]).with_name(request["name"]), data,
                                            max_chars=int(request["max_chars"]), max_pages=int(request["max_pages"]))
    except extract.TextTooLong as exc:
        return {"error": str(exc), "kind": "too_long"}
    except extract.ExtractionError as exc:
        return {"error": str(exc), "kind": "unreadable"}
    except MemoryError:
        return {"error": "out of memory", "kind": "memory"}
    except RecursionError as exc:
        return {"error": f"{request['name']}: too deeply nested ({exc})", "kind": "unreadable"}
    return {"lines": [[line.number, line.text, line.heading] for line in lines], "note": note}


def main(argv: list[str]) -> int:
    """The child: confine, say ready, then answer requests until stdin closes."""
    parent, cpu_seconds, memory_bytes = (int(a) for a in argv[1:4])
    reply_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # stray prints (a library's) must not corrupt the replies
    os.close(devnull)
    import logging

    logging.disable(logging.CRITICAL)  # pypdf logs a warning per odd object; nobody reads them here
    out = os.fdopen(reply_fd, "wb")
    layers = _confine(parent, cpu_seconds, memory_bytes)

    def send(message: dict[str, Any]) -> None:
        try:
            # No indent: JSON escapes newlines in strings, so the reply is one line. A lone
            # surrogate (pypdf can produce one) becomes "?": SQLite could not store it.
            body = json.dumps(message, ensure_ascii=False).encode("utf-8", "replace")
        except MemoryError:
            body = b'{"error": "out of memory", "kind": "memory"}'
        out.write(body + b"\n")
        out.flush()

    send({"ready": True, "layers": layers})
    stdin = sys.stdin.buffer
    while True:
        header = stdin.readline(HEADER_MAX_BYTES)
        if not header:
            return 0
        request = json.loads(header)
        data = _read_exactly(stdin, int(request["size"]))
        send(_serve(request, data))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
