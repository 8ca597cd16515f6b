"""The sandbox worker: confines itself, then runs model code one request at a time.

Runs only in a process forked from the clean launcher. :func:`run_worker`
applies the confinement layers in order, reports which held (the *hello*
frame), then serves ``exec`` requests until its request pipe closes. Each call
gets a fresh namespace; inputs are attached from the session's input directory;
results are written to scratch (see :mod:`.transfer_worker`) and described in the reply.
"""

from __future__ import annotations

import _thread
import ast
import base64
import builtins
import io
import logging
import os
import signal
import sys
import threading
import time
import traceback
import types
from typing import Any

from harness_magic.core.cache.names import resolve_handle_name
from harness_magic.core.confinement import layers as confinement
from harness_magic.core.confinement.heap import GrowthWatch
from harness_magic.core.execution.interpreter import split_trailing_expression
from harness_magic.core.execution.sandbox import checks
from harness_magic.core.execution.sandbox.protocol import FrameReader, send_frame, send_reply
from harness_magic.core.execution.sandbox.transfer_codec import TransferRefused
from harness_magic.core.execution.sandbox.transfer_worker import (
    keep_input_tables,
    read_input,
    set_result_channel,
    write_result,
)

_thread_count = _thread._count  # taken before model code can replace it

_taken: list[str] = []
"""The cache's handle names as the kernel last sent them: a request names them only when they changed."""

_unreported: list[str] = []
"""Modules of the data stack (the config's ``data_stack``) this worker neither inherited from its launcher nor
reported importing yet (set when it starts): the first reply after one is imported names it (``imported``), so the
kernel has the launcher warm it for the session's later workers."""

__all__ = ["run_worker", "MAX_CHARTS", "CHART_MAX_BYTES", "MAX_SAVES", "STREAM_INTERVAL_S", "STREAM_MAX_CHARS"]

MAX_CHARTS = 20
"""Figures beyond this in one call are dropped: nobody reads twenty charts."""

CHART_MAX_BYTES = 8 * 1024 * 1024
"""A PNG larger than this is dropped rather than shipped through the frame pipe."""

MAX_SAVES = 100
"""save() calls beyond this in one call fail: a loop saving rows is a mistake."""


STREAM_INTERVAL_S = 0.1
"""Output frames are sent at most this often (on a newline or flush): a print loop is not a frame flood."""

STREAM_MAX_CHARS = 64_000
"""Characters streamed live per call; the rest still lands in the final reply's captured stdout."""

STREAM_FRAME_CHARS = 8_000
"""Pending text past this is sent at the next newline or flush regardless of the interval."""


class _BoundedText(io.TextIOBase):
    """A text sink keeping the first ``limit`` characters and counting the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        room = self.limit - self.kept
        if room > 0:
            piece = text[:room]
            self.parts.append(piece)
            self.kept += len(piece)
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def value(self) -> str:
        return "".join(self.parts)


class _StreamingText(_BoundedText):
    """:class:`_BoundedText` that also sends what is printed as ``output`` frames while the call runs.

    Frames are ``{"op": "output", "seq": seq, "text": ...}`` on the reply pipe,
    sent on a newline or ``flush()`` once ``STREAM_INTERVAL_S`` has passed since
    the last one (or once ``STREAM_FRAME_CHARS`` are pending), and at most
    ``STREAM_MAX_CHARS`` in all. The kernel bounds them again: this is courtesy, not a limit.
    """

    def __init__(self, limit: int, fd: int, seq: int) -> None:
        super().__init__(limit)
        self.fd = fd
        self.reset(limit, seq)

    def reset(self, limit: int, seq: int) -> None:
        """Empty it for call ``seq``: every field set again, as a new one would have it."""
        self.limit, self.seq = limit, seq
        self.parts = []
        self.kept = self.dropped = 0
        self.pending: list[str] = []
        self.pending_chars = self.streamed = 0
        self.last = 0.0

    def write(self, text: str) -> int:
        text = str(text)
        room = STREAM_MAX_CHARS - self.streamed - self.pending_chars
        if room > 0 and text:
            piece = text[:room]
            self.pending.append(piece)
            self.pending_chars += len(piece)
            if "\n" in piece:
                self._send(force=False)
        return super().write(text)

    def flush(self) -> None:
        if self.pending:  # closing the stream flushes it too, after close_stream sent the rest
            self._send(force=False)

    def _send(self, *, force: bool) -> None:
        now = time.monotonic()
        if not self.pending or (not force and now - self.last < STREAM_INTERVAL_S
                                and self.pending_chars < STREAM_FRAME_CHARS):
            return
        text, self.pending, self.streamed = "".join(self.pending), [], self.streamed + self.pending_chars
        self.pending_chars, self.last = 0, now
        try:
            send_frame(self.fd, {"op": "output", "seq": self.seq, "text": text})
        except Exception:  # noqa: BLE001 - the final reply still carries everything printed
            pass

    def close_stream(self) -> None:
        """Send what is still pending (before the result frame)."""
        if self.pending:
            self._send(force=True)


def _stream_fields() -> frozenset[str]:
    sample = _StreamingText(0, -1, 0)  # held while read: freeing it closes it, which adds IOBase's own names
    return frozenset(vars(sample))


_STREAM_FIELDS = _stream_fields()
"""What a :class:`_StreamingText` holds in its ``__dict__``: one holding more (a method the code replaced on it,
or IOBase's mark of a closed stream) is not used again."""

_stream: list[_StreamingText] = []
"""The worker's output capture, kept between calls (building one costs more than the rest of an empty call's
bookkeeping) and emptied for each (see :func:`_output`)."""


def _output(limit: int, fd: int | None, seq: int) -> _BoundedText:
    """Call ``seq``'s output capture: the worker's :class:`_StreamingText` on ``fd``, emptied; a new one when
    there is none yet, or the code before closed it or set anything on it but its fields (which ``reset`` sets
    again); a :class:`_BoundedText` without a reply descriptor."""
    if fd is None:
        return _BoundedText(limit)
    if _stream:
        kept = _stream[0]
        if kept.fd == fd and not kept.closed and vars(kept).keys() == _STREAM_FIELDS:
            kept.reset(limit, seq)
            return kept
    _stream[:] = [_StreamingText(limit, fd, seq)]
    return _stream[0]


def _apply_layers(config: dict[str, Any], req_fd: int, resp_fd: int, result_fd: int | None = None) -> dict[str, Any]:
    wanted = set(config["layers"])
    limits = config["limits"]
    status: dict[str, Any] = {}
    confinement.apply_process_group()
    status["process_group"] = True
    confinement.apply_fds([req_fd, resp_fd] + ([result_fd] if result_fd is not None else []))
    status["fds"] = True
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail with EFBIG instead of killing
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    confinement.apply_rlimits(cpu_seconds=limits["cpu_seconds"], address_space=limits["address_space"],
                              file_size=limits["file_size"], open_files=limits["open_files"])
    status["rlimits"] = True
    read_paths = confinement.python_read_paths() + [config["input_dir"]]
    for layer, apply in (("netns", confinement.apply_netns), ("ipcns", confinement.apply_ipcns)):
        if layer in wanted:
            try:
                apply()
                status[layer] = True
            except OSError as exc:
                status[layer] = f"unavailable: {exc}"
    if "drop_root" in wanted:
        try:
            status["drop_root"] = confinement.apply_drop_root(
                read_paths, [config["session_dir"], config["input_dir"], config["scratch_dir"]])
        except OSError as exc:
            status["drop_root"] = f"unavailable: {exc}"
    confinement.apply_pdeathsig(config["launcher_pid"])
    status["pdeathsig"] = True
    confinement.apply_no_new_privs()
    if "landlock" in wanted:
        try:
            abi = confinement.apply_landlock(read_paths, [config["scratch_dir"]])
            status["landlock"] = f"ABI {abi}"
        except OSError as exc:
            status["landlock"] = f"unavailable: {exc}"
    os.chdir(config["scratch_dir"])
    scratch = config["scratch_dir"]
    os.environ.clear()
    os.environ.update({"HOME": scratch, "TMPDIR": scratch, "MPLCONFIGDIR": scratch, "LANG": "C.UTF-8",
                       "MPLBACKEND": "Agg", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    status["env"] = True
    if "seccomp" in wanted:
        try:
            status["seccomp"] = f"{confinement.apply_seccomp(os.getpid())} rules"
        except OSError as exc:
            status["seccomp"] = f"unavailable: {exc}"
    return status


FONT_CACHE_NOTICE = "Could not save font_manager cache"
"""How matplotlib's warning starts when it cannot write its font list: a worker importing matplotlib builds the list
in memory and may not save it (the friendly checks refuse the write), which is our plumbing, not the code's output."""


def _not_font_cache_notice(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(FONT_CACHE_NOTICE)


def run_worker(req_fd: int, resp_fd: int, config: dict[str, Any], result_fd: int | None = None) -> None:
    """Entry point in the forked child. Never returns."""
    code = 0
    try:
        logging.getLogger("matplotlib.font_manager").addFilter(_not_font_cache_notice)
        status = _apply_layers(config, req_fd, resp_fd, result_fd)
        _unreported[:] = [name for name in config.get("data_stack", ()) if name not in sys.modules]
        if result_fd is not None:
            set_result_channel(result_fd)
        arm = checks.install_audit_hook(config["scratch_dir"]) if config.get("audit_hooks") else None
        send_frame(resp_fd, {"op": "hello", "layers": status, "pid": os.getpid(),
                             "uid": os.getuid()})
        requests = FrameReader(req_fd)
        heap = GrowthWatch()  # after a call that built something large, its freed memory goes back to the system
        while True:
            try:
                request = requests.next_frame()
            except EOFError:
                break
            reply = _serve(request, config, arm, resp_fd)
            send_reply(resp_fd, reply)
            if reply.get("recycle"):
                break
            heap.after_request()  # once the reply is out: the kernel never waits for it
    except BaseException:  # noqa: BLE001 - report and die; the parent restarts us
        code = 1
        try:
            send_frame(resp_fd, {"op": "fatal", "error": traceback.format_exc()[-4000:]})
        except Exception:  # noqa: BLE001 - the pipe may be what failed; the exit code still tells the parent
            pass
    finally:
        os._exit(code)


def _format_error(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<agent>"]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    return "Traceback (most recent call last):\n" + "".join(lines)


def _capture_charts(notes: list[str]) -> list[str]:
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    numbers = plt.get_fignums()
    if not numbers:
        return []  # nothing to draw or close (pyplot may be loaded, warmed by the launcher: most calls draw nothing)
    images = []
    for number in numbers[:MAX_CHARTS]:
        buffer = io.BytesIO()
        try:
            plt.figure(number).savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        except Exception as exc:  # noqa: BLE001 - the model's figure is user code: a bad one is a note, not a failure
            notes.append(f"a figure could not be drawn: {type(exc).__name__}: {exc}")
            continue
        if buffer.tell() <= CHART_MAX_BYTES:
            images.append(base64.b64encode(buffer.getvalue()).decode("ascii"))
        else:
            notes.append("a figure was too large to send back and was dropped")
    plt.close("all")
    return images


def _parse(code: str) -> ast.Module | None:
    """The call's code parsed once (for the pre-check and the compile), or None when it cannot be parsed:
    compiling it again inside the call then raises the same error (a syntax error with its location, or the
    parser giving up on nesting too deep), as the model's error and never the worker's end."""
    try:
        return ast.parse(code, filename="<agent>", mode="exec")
    except (SyntaxError, RecursionError, MemoryError):
        return None


def _serve(request: dict[str, Any], config: dict[str, Any], arm: Any, resp_fd: int | None = None) -> dict[str, Any]:
    """Run one ``exec`` request; its ``result`` frame, which leaves out every field at its default
    (``error``, ``value``: None; ``saved``, ``charts``, ``notes``, ``imported``: empty; ``stdout``: "";
    ``stdout_dropped``: 0; ``recycle``: false): an empty call's reply is ``{"op": "result", "seq": N}``.
    ``imported`` names the modules of the data stack this call imported that the worker's launcher had not warmed
    (each once per worker). A request names the cache's handles (``taken``, which ``save()`` avoids) only when
    they changed since the request before: the worker keeps the last ones it was sent."""
    global _taken
    seq = int(request["seq"])
    reply: dict[str, Any] = {"op": "result", "seq": seq}
    if "taken" in request:
        _taken = request["taken"]
    code = request["code"]
    tree = _parse(code)
    if config.get("ast_precheck") and tree is not None:
        refusal = checks.precheck_tree(tree)
        if refusal is not None:
            reply["error"] = f"SandboxViolation: {refusal}"
            return reply
    taken: set[str] = set()
    saved: list[tuple[str, Any]] = []
    notes: list[str] = []
    limit = int(config["limits"]["stdout_chars"])
    out = _output(limit, resp_fd, seq)

    def save(name: str, value: Any) -> str:
        if len(saved) >= MAX_SAVES:
            raise RuntimeError(f"at most {MAX_SAVES} save() calls per run")
        if not saved:  # the cache's names, read at the first save (a call that saves nothing never reads them)
            taken.update(_taken)
        handle = resolve_handle_name(str(name), taken)
        taken.add(handle)
        saved.append((handle, value))
        return handle

    # A real module object, registered while the code runs: dataclasses, pickling by
    # reference and typing look classes up through sys.modules[cls.__module__].
    module = types.ModuleType("__agent__")
    namespace: dict[str, Any] = module.__dict__
    namespace.update({"__builtins__": builtins, "save": save})
    sys.modules["__agent__"] = module
    value: Any = None
    has_value = False
    error: str | None = None
    old_out, old_err = sys.stdout, sys.stderr
    try:
        inputs = request.get("inputs") or {}
        keep_input_tables(inputs.values())
        for name, desc in inputs.items():
            namespace[name] = read_input(desc, config["input_dir"])
        body, trailing = split_trailing_expression(tree if tree is not None else code)
        sys.stdout = sys.stderr = out
        if arm is not None:
            with arm:
                exec(body, namespace)
                if trailing is not None:
                    value, has_value = eval(trailing, namespace), True
        else:
            exec(body, namespace)
            if trailing is not None:
                value, has_value = eval(trailing, namespace), True
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
        error = _format_error(exc)
    finally:
        sys.stdout, sys.stderr = old_out, old_err
        if isinstance(out, _StreamingText):
            out.close_stream()
    if error is None and (saved or (has_value and value is not None)):
        cap = int(config["limits"]["file_size"]) - (1 << 20)
        try:
            kept = [[h, write_result(v, config["scratch_dir"], f"{seq}_{i}", notes, saved_as=h, max_bytes=cap)]
                    for i, (h, v) in enumerate(saved)]
            if has_value and value is not None:
                reply["value"] = write_result(value, config["scratch_dir"], f"{seq}_value", notes, max_bytes=cap)
            if kept:
                reply["saved"] = kept
        except TransferRefused as exc:
            reply.pop("value", None)
            error = f"TransferRefused: {exc}"
        except Exception as exc:  # noqa: BLE001 - encoding the model's values runs their code; the reply names it
            reply.pop("value", None)
            error = "Sending the result back failed:\n" + _format_error(exc)
    try:
        charts = _capture_charts(notes)
    except Exception as exc:  # noqa: BLE001 - matplotlib state is user code's: charts are optional, a note says so
        charts = []
        notes.append(f"charts could not be captured: {exc}")
    namespace.clear()
    sys.modules.pop("__agent__", None)
    # A thread the model started would outlive the call and could touch later ones: recycle.
    # _thread._count() sees raw _thread threads too (threading does not); native pools
    # (Arrow, BLAS) do not count. The boundary is the fresh worker per cell
    # (SandboxedInterpreter.fresh_worker): this only stops a thread early, and misses
    # one started so late that it has not run yet.
    if threading.active_count() > 1 or _thread_count() > 0:
        reply["recycle"] = True
        notes.append("background threads were still running; the worker was restarted")
    imported = [name for name in _unreported if name in sys.modules] if _unreported else []
    if imported:
        _unreported[:] = [name for name in _unreported if name not in imported]
    if error:
        reply["error"] = error
    if charts:
        reply["charts"] = charts
    if notes:
        reply["notes"] = notes
    stdout = out.value() if out.parts else ""
    if stdout:
        reply["stdout"] = stdout
    if out.dropped:
        reply["stdout_dropped"] = out.dropped
    if imported:
        reply["imported"] = imported
    return reply
