"""The ``python_interpreter`` and ``list_variables`` tools over a backend.

A backend executes model code with a fresh namespace per call. The tool
decides which cache handles the code references, hands the backend copies
(never the cached objects), and stores whatever the code ``save``-d under new
handles, reporting the resolved names.

Backends implement :class:`InterpreterBackend`. :class:`InProcessInterpreter`
runs code in this process: convenient, **not a security boundary**. The
sandboxed worker lives in :mod:`harness_magic.core.execution.sandbox`.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import io
import json
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Protocol

from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.cache.names import resolve_handle_name, sanitize_identifier
from harness_magic.core.cache.engine_value import engine_of
from harness_magic.core.execution.format import format_exception, format_tool_output, truncate_middle
from harness_magic.core.execution.tools import ToolOutput, ToolSpec
from harness_magic.core.transcript.events import WorkerReplaced

__all__ = [
    "ExecutionResult",
    "InterpreterBackend",
    "BACKEND_MEMBERS",
    "InProcessInterpreter",
    "referenced_names",
    "handles_named",
    "make_interpreter_tools",
    "STDOUT_MAX_CHARS",
]

DEFAULT_MATERIALIZE_MAX_BYTES = 1024**3
"""Bytes (Arrow) a lazy handle may bring into the kernel by default: a big frame, not a lake."""
DEFAULT_MATERIALIZE_MAX_ROWS = 10_000_000
"""Rows a lazy handle may bring into the kernel by default: more than anyone reads, fewer than pandas chokes on."""
STDOUT_MAX_CHARS = 4_000
"""Printed output beyond this is cut to head and tail: the model reads it all."""
STREAM_INTERVAL_S = 0.1
"""Printed text is handed on at most this often (on a newline or flush), as the sandbox worker does."""
STREAM_MAX_CHARS = 64_000
"""Characters of one call's output handed on live (the result keeps the full output): a display, not a log."""

_NO_VALUE = object()


@dataclass
class ExecutionResult:
    """What one interpreter call produced."""

    stdout: str = ""
    """Everything printed (already captured; the tool bounds it)."""
    value: Any = _NO_VALUE
    """Value of a trailing expression, if the code ended with one."""
    saved: list[tuple[str, Any]] = field(default_factory=list)
    """``save(name, value)`` calls in order, with the names ``save`` returned."""
    charts: list[bytes] = field(default_factory=list)
    """PNG images of figures the code drew."""
    error: str | None = None
    """Readable traceback when the code raised, else None."""
    replaced: WorkerReplaced | None = None
    """The worker (or its launcher) was found dead when this call started and was replaced before the code ran
    (the event, without its ``tool_use_id``, which the session fills in). For the log and the live view only:
    the call itself ran once, in the new worker, and its result is complete. Never part of what the model reads."""

    @property
    def has_value(self) -> bool:
        return self.value is not _NO_VALUE


class InterpreterBackend(Protocol):
    """Runs model code; the seam between the interpreter tools and whatever executes the code.

    Every member is part of the contract, optional capabilities included: a
    backend without a capability declares so (``exports_inputs = False``,
    ``has_workers = False``) and keeps the matching methods as no-ops, and a
    wrapper forwards every member (see ``AgentSession``'s backend). Callers
    read the declared flags; they never probe for members. Implementations
    must not share state between calls.
    """

    # The declared capabilities and counters are read-only here: a backend may keep them as plain attributes,
    # a wrapper (AgentSession's SessionBackend) forwards them as properties.

    @property
    def name(self) -> str:
        """Short name for logs and status (``inprocess``, ``sandbox``...)."""
        ...

    @property
    def exports_inputs(self) -> bool:
        """``execute`` honours ``versions``: an input is exported once per value version and reused after."""
        ...

    @property
    def streams_output(self) -> bool:
        """``execute`` honours ``on_output``: printed text is handed on while the call runs."""
        ...

    @property
    def has_workers(self) -> bool:
        """Code runs in worker processes this backend forks, retires and replaces; the worker members below
        mean something only then (otherwise: ``worker_pid`` None, the methods do nothing)."""
        ...

    @property
    def restarts(self) -> int:
        """Workers started to replace one that was lost (crash, memory or time limit, interrupt)."""
        ...

    @property
    def last_start_s(self) -> float:
        """Seconds the latest worker took to start (0.0 without workers)."""
        ...

    @property
    def worker_pid(self) -> int | None:
        """The running worker's process id; None when none runs (retired, lost, or no workers)."""
        ...

    def execute(self, code: str, inputs: dict[str, Any], taken_names: Collection[str], *,
                versions: dict[str, str] | None = None,
                on_output: Callable[[str], None] | None = None) -> ExecutionResult:
        """Run ``code`` with ``inputs`` as locals.

        ``save(name, value)`` inside the code returns the handle the cache will
        assign, computed from ``taken_names`` plus earlier saves of this call.
        ``versions`` (handle -> value token, every live handle) lets a backend
        that ``exports_inputs`` reuse what it exported for an unchanged value;
        ``on_output`` receives printed text as it is printed where the backend
        ``streams_output``. Either is ignored by a backend without the capability.
        """
        ...

    def start_worker(self) -> float:
        """Start a worker now if none runs; seconds it took (0.0 when one ran, or without workers)."""
        ...

    def retire_worker(self) -> None:
        """Stop the worker now; the next call (or :meth:`start_worker`) starts a fresh one."""
        ...

    def fresh_worker(self) -> None:
        """Replace the worker with a new one at once: nothing earlier code did in it survives."""
        ...

    def sibling(self) -> InterpreterBackend | None:
        """A backend of the same settings with workers of its own (for a subagent); None: share this one."""
        ...

    def close(self) -> None:
        """Stop workers and remove files; the backend is unusable afterwards."""
        ...


BACKEND_MEMBERS = ("name", "exports_inputs", "streams_output", "has_workers", "restarts", "last_start_s",
                   "worker_pid", "execute", "start_worker", "retire_worker", "fresh_worker", "sibling", "close")
"""Every member of :class:`InterpreterBackend`: what an implementation defines and a wrapper forwards."""


def referenced_names(code: str) -> set[str]:
    """Identifiers the code mentions (a superset of the handles it reads)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def handles_named(code: str, handles: Collection[str]) -> set[str]:
    """The ``handles`` the code names (:func:`referenced_names` among them), parsing only when it may name one.

    ASCII code names an identifier only by writing it, so a handle that is not
    in its text is not among its names; other code is parsed (Python reads
    identifiers in NFKC form: fullwidth letters can write an ASCII name).
    """
    if not handles or (code.isascii() and not any(handle in code for handle in handles)):
        return set()
    return referenced_names(code) & set(handles)


def split_trailing_expression(code: str | ast.Module, filename: str = "<agent>") -> tuple[Any, Any]:
    """Compile ``code`` (source, or a module tree parsed from it, which this consumes) into
    (body, trailing expression or None). The code gets only its own ``from __future__`` statements, never this
    module's (``dont_inherit``): its annotations are objects, as in a notebook cell, unless it asks otherwise."""
    tree = code if isinstance(code, ast.Module) else ast.parse(code, filename=filename, mode="exec")
    last = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)
    body = compile(tree, filename, "exec", dont_inherit=True)
    return body, (compile(last, filename, "eval", dont_inherit=True) if last is not None else None)


def _capture_figures() -> list[bytes]:
    """PNG bytes of open matplotlib figures, closing them; [] without matplotlib."""
    import sys

    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    images = []
    for number in plt.get_fignums():
        buffer = io.BytesIO()
        plt.figure(number).savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        images.append(buffer.getvalue())
    plt.close("all")
    return images


class _StreamingCapture(io.StringIO):
    """Captures what the code prints (stdout and stderr) and hands it to ``on_output`` while the call runs.

    The same policy as the sandbox worker's output frames: text goes on at a
    newline or ``flush()`` once :data:`STREAM_INTERVAL_S` has passed since the
    last hand-off, at most :data:`STREAM_MAX_CHARS` in all, the rest at
    :meth:`finish`. The callback runs with the real ``sys.stdout`` back in
    place (a terminal view prints there, not into this capture), and a
    failing callback never fails the model's code.
    """

    def __init__(self, on_output: Callable[[str], None] | None, outer: Any, outer_err: Any = None) -> None:
        super().__init__()
        self.on_output, self.outer = on_output, outer
        self.outer_err = outer_err if outer_err is not None else outer
        self.pending: list[str] = []
        self.room = STREAM_MAX_CHARS
        self.last = 0.0

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.on_output is not None and self.room > 0 and text:
            piece = text if len(text) <= self.room else text[: self.room]
            self.room -= len(piece)
            self.pending.append(piece)
            if "\n" in piece and time.monotonic() - self.last >= STREAM_INTERVAL_S:
                self._send(force=False)
        return written

    def flush(self) -> None:
        self._send(force=False)

    def finish(self) -> None:
        """Hand on whatever is still pending (the call ended)."""
        self._send(force=True)

    def _send(self, *, force: bool) -> None:
        now = time.monotonic()
        if not self.pending or (not force and now - self.last < STREAM_INTERVAL_S):
            return
        text, self.pending, self.last = "".join(self.pending), [], now
        inner, inner_err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.outer, self.outer_err
        try:
            self.on_output(text)  # type: ignore[misc]  # not None: write() queues text only when on_output is set
        except Exception as exc:  # noqa: BLE001 - the display is not the result
            warnings.warn(f"output callback failed: {exc!r}", RuntimeWarning)
        finally:
            sys.stdout, sys.stderr = inner, inner_err


class InProcessInterpreter:
    """Runs code in this process with a fresh namespace per call.

    **Not a security boundary**: code here can reach anything the process can,
    including the user's namespace and the environment's API keys. With
    ``checks=True`` an AST pre-check and a PEP 578 audit hook (see
    :mod:`harness_magic.core.execution.sandbox.checks`) refuse the obvious — imports outside
    the data stack, ``eval``/``open``, dunder walks, processes, sockets, file
    writes — with friendly messages. They stop honest mistakes, not an attacker:
    use :class:`harness_magic.core.execution.sandbox.SandboxedInterpreter` for untrusted code.
    """

    name = "inprocess"
    exports_inputs = False
    """Inputs are the cache's copies, handed over directly: there is nothing to export."""
    streams_output = True
    """``execute`` takes ``on_output``: printed text is handed to it while the call runs."""
    has_workers = False
    """Code runs in this process: the worker members are no-ops."""
    restarts = 0
    last_start_s = 0.0
    worker_pid = None

    def __init__(self, *, checks: bool = False) -> None:
        self.checks = checks

    def execute(self, code: str, inputs: dict[str, Any], taken_names: Collection[str], *,
                versions: dict[str, str] | None = None,
                on_output: Callable[[str], None] | None = None) -> ExecutionResult:
        """Run ``code``; ``on_output(text)`` receives what it prints as it prints it (bounded, see
        :class:`_StreamingCapture`); the result holds the full output either way. ``versions`` is
        ignored (nothing is exported)."""
        result = ExecutionResult()
        taken = set(taken_names)

        def save(name: str, value: Any) -> str:
            handle = resolve_handle_name(name, taken)
            taken.add(handle)
            result.saved.append((handle, value))
            return handle

        namespace: dict[str, Any] = {"__name__": "__agent__", "save": save, **inputs}
        # stderr is captured too, as in the worker; a plain StringIO (a C-level write) when nobody watches
        stdout: Any = _StreamingCapture(on_output, sys.stdout, sys.stderr) if on_output is not None else io.StringIO()
        armed: Any = contextlib.nullcontext()
        if self.checks:
            from harness_magic.core.execution.sandbox import checks

            refusal = checks.precheck(code)
            if refusal is not None:
                result.error = f"SandboxViolation: {refusal}"
                return result
            armed = checks.install_audit_hook(None)
        try:
            body, trailing = split_trailing_expression(code)
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stdout), armed:
                exec(body, namespace)
                if trailing is not None:
                    result.value = eval(trailing, namespace)
        except Exception as exc:  # the model's code failed: report, never raise
            frames = traceback.extract_tb(exc.__traceback__)
            agent_frames = [f for f in frames if f.filename == "<agent>"]
            lines = traceback.format_list(agent_frames) + traceback.format_exception_only(type(exc), exc)
            result.error = "Traceback (most recent call last):\n" + "".join(lines)
        finally:
            if on_output is not None:
                stdout.finish()
        result.stdout = stdout.getvalue()
        result.charts = _capture_figures()
        return result

    def start_worker(self) -> float:
        return 0.0

    def retire_worker(self) -> None:
        pass

    def fresh_worker(self) -> None:
        pass

    def sibling(self) -> None:
        """None: a subagent shares this interpreter (there is no worker to give it)."""
        return None

    def close(self) -> None:
        pass


def chart_note(count: int) -> str:
    """The line that tells the model how many charts a call drew (people see the charts themselves)."""
    return f"[{count} chart(s) drawn and shown to the user]"


def _only_saved_handles(value: Any, saved: Collection[str]) -> bool:
    """True when ``value`` is what ``save`` returned and nothing else: a saved handle, or a tuple/list of them."""
    if isinstance(value, str):
        return value in saved
    return isinstance(value, (tuple, list)) and bool(value) and all(
        isinstance(v, str) and v in saved for v in value)


def trailing_value_name(code: str, known: Collection[str], turn: int | None = None) -> str:
    """The handle name a trailing expression's value asks for, read from the expression.

    ``summary`` -> ``summary``; ``sales.groupby("region").sum()`` -> ``sales_sum``; ``df["amount"]`` ->
    ``df_amount``, where the root is a name the code assigns or a handle in ``known`` (not a module such
    as ``pd``). Anything else is ``result_t<turn>`` (``result`` without a turn): auto names say which
    turn made them instead of reading as copies of each other (``result``, ``result_2``).
    """
    fallback = "result" if turn is None else f"result_t{turn}"
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return fallback
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return fallback
    node = tree.body[-1].value
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    label = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        label = node.func.attr
    elif isinstance(node, ast.Attribute):
        label = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(
            node.slice.value, str):
        label = node.slice.value
    root = node
    while isinstance(root, (ast.Call, ast.Attribute, ast.Subscript)):
        root = root.func if isinstance(root, ast.Call) else root.value
    if not isinstance(root, ast.Name) or (root.id not in assigned and root.id not in known):
        return fallback
    if root is node:
        return root.id
    return sanitize_identifier(f"{root.id}_{label}") if label else fallback


def _same_value(a: Any, b: Any) -> bool:
    """``a`` and ``b`` hold the same data (frames, series, indexes, arrays, strings, bytes); False when unsure."""
    import numpy as np
    import pandas as pd

    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        if isinstance(a, pd.Index):
            return a.shape == b.shape and a.names == b.names and a.dtype == b.dtype and bool(a.equals(b))
        if isinstance(a, (pd.DataFrame, pd.Series)):
            names = (a.columns.names == b.columns.names) if isinstance(a, pd.DataFrame) else a.name == b.name
            return a.shape == b.shape and names and a.index.names == b.index.names and bool(a.equals(b))
        if isinstance(a, np.ndarray):
            return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
        if isinstance(a, (str, bytes)):
            return a == b
    except Exception:  # an odd value that cannot be compared is not called the same
        return False
    return False


def _describe_result(
    execution: ExecutionResult, cache: HandleCache, turn: Callable[[], int | None], *, code: str = "",
    inputs: dict[str, Any] | None = None,
) -> ToolOutput:
    """The model's text of one call, and what people read of it (:attr:`ToolOutput.display_text`): the same
    parts without the chart note (people see the charts) and without a trailing value that only repeats a
    handle saved in the call (``save(...)`` as the last line: the ``Saved as`` line already names it).

    A trailing value that holds the same data as a value saved in the call, or as a handle the call read
    unchanged, gets no handle of its own: the text names the existing one (with that handle's snapshot when
    it was read, not saved: the model asked to look at it, and must see it). Others are cached under
    :func:`trailing_value_name`."""
    parts: list[str] = []
    shown: list[str] = []
    handles: list[str] = []
    saved_names: set[str] = set()
    artifacts: list[dict[str, Any]] = []
    if execution.stdout:
        parts.append("stdout:\n" + truncate_middle(execution.stdout, STDOUT_MAX_CHARS))
        shown.append(parts[-1])
    for expected, value in execution.saved:
        handle = cache.put(expected, value, turn=turn(), tool="python_interpreter", derived=True)
        handles.append(handle)
        saved_names.update((expected, handle))
        snapshot = json.dumps(cache.snapshot(handle), ensure_ascii=False)
        parts.append(f"Saved as `{handle}`\nSnapshot: {snapshot}")
        shown.append(parts[-1])
    same = None
    if execution.error is None and execution.has_value and execution.value is not None:
        value = execution.value
        same = next((h for h, v in zip(handles, (v for _, v in execution.saved)) if _same_value(value, v)), None)
        if same is None:
            same = next((n for n, v in sorted((inputs or {}).items()) if _same_value(value, v)), None)
            if same is not None:
                snapshot = json.dumps(cache.snapshot(same), ensure_ascii=False)
                parts.append(f"Value: `{same}` (the handle, unchanged; no new handle)\nSnapshot: {snapshot}")
                shown.append(parts[-1])
        else:
            parts.append(f"Value: `{same}` (saved above)")
    if same is None and execution.error is None and execution.has_value and execution.value is not None:
        formatted = format_tool_output(execution.value, cache, trailing_value_name(code, cache.names(), turn()),
                                       turn=turn(), tool="python_interpreter", derived=True)
        handles.extend(formatted.handles)
        parts.append(formatted.text)
        if formatted.handles or not _only_saved_handles(execution.value, saved_names):
            shown.append(parts[-1])

    for png in execution.charts:
        artifacts.append({"kind": "image/png", "data": base64.b64encode(png).decode("ascii")})
    if execution.charts:
        parts.append(chart_note(len(execution.charts)))  # for the model only
    if execution.error is not None:
        parts.append(truncate_middle(execution.error, STDOUT_MAX_CHARS))
        shown.append(parts[-1])
    text = "\n".join(parts) if parts else "(no output)"
    display = "\n".join(shown) if parts else text
    return ToolOutput(text=text, is_error=execution.error is not None, handles=handles, artifacts=artifacts,
                      display_text=None if display == text else display)


def materialize_inputs(cache: HandleCache, names: Collection[str], max_bytes: int,
                       max_rows: int | None = None, *, for_user: bool = False) -> dict[str, Any]:
    """Copy-boundary values of ``names``; engine values (lazy handles) brought in as frames under ``max_bytes``
    bytes and ``max_rows`` rows (None: no row cap).

    The rows of an engine value are in their agent-side form (``cache.agent_rows``: sensitive columns
    pseudonymised), unless ``for_user`` (a pull: the caller restores real values with ``cache.user_value``).

    Raises whatever the engine raises when a value is over the cap or fails
    (e.g. :class:`~harness_magic.core.execution.connectors.lazy.MaterializeLimitError`).
    """
    inputs = {}
    for name in sorted(names):
        value = cache.view(name)
        if engine_of(value) is not None:
            value = value.materialize(cache, max_bytes, max_rows=max_rows, handle=name)
            if not for_user:
                value = cache.agent_rows(name, value)
        inputs[name] = value
    return inputs


def make_interpreter_tools(
    cache: HandleCache,
    backend: InterpreterBackend,
    *,
    current_turn: Callable[[], int | None] = lambda: None,
    materialize_max_bytes: Callable[[], int] = lambda: DEFAULT_MATERIALIZE_MAX_BYTES,
    materialize_max_rows: Callable[[], int] = lambda: DEFAULT_MATERIALIZE_MAX_ROWS,
    on_output: Callable[[str], None] | None = None,
) -> list[ToolSpec]:
    """Build the bound ``python_interpreter`` and ``list_variables`` tools.

    ``on_output(text)`` receives what the code prints while it runs, where the
    backend streams (``streams_output``); the tool's result is the full
    captured output either way. ``cache`` is a
    :class:`~harness_magic.core.cache.protocol.HandleCache`; its ``versions()`` let a backend that
    ``exports_inputs`` export each input once per value version.

    Code that names a lazy (engine-held) handle gets its rows as a frame,
    streamed under ``materialize_max_bytes()`` bytes and ``materialize_max_rows()``
    rows; past either the call fails
    with an error telling the model to aggregate or filter in the engine.
    """

    def python_interpreter(code: str) -> ToolOutput:
        if not isinstance(code, str) or not code.strip():
            return ToolOutput(text="`code` must be a non-empty string of Python source.", is_error=True)
        wanted = handles_named(code, cache.names())
        try:
            inputs = materialize_inputs(cache, wanted, materialize_max_bytes(), materialize_max_rows())
        except Exception as exc:  # over the cap, or the engine failed: nothing ran
            return ToolOutput(text=f"Not run: {format_exception(exc)}", is_error=True)
        # an exporting backend writes each value's input file once and reuses it while the handle lives
        versions = cache.versions() if backend.exports_inputs else None
        execution = backend.execute(code, inputs, cache.names(), versions=versions,
                                    on_output=on_output if backend.streams_output else None)
        return _describe_result(execution, cache, current_turn, code=code, inputs=inputs)

    def list_variables() -> ToolOutput:
        names = cache.names()
        if not names:
            return ToolOutput(text="The cache is empty: no handles yet.")
        lines = [json.dumps({"name": n, **_listing(cache.snapshot(n)), **_where(cache, n)}, ensure_ascii=False)
                 for n in names]
        return ToolOutput(text=truncate_middle("\n".join(lines), STDOUT_MAX_CHARS * 2))

    return [
        ToolSpec(
            name="python_interpreter",
            description=(
                "Run Python code. Cached handles are available as local variables by name. "
                "pandas (pd), numpy (np) and matplotlib are importable. The namespace is fresh on "
                "every call: keep results with save(name, value), which returns the handle they get. "
                "The value of a trailing expression is returned."
            ),
            parameters={
                "type": "object",
                "properties": {"code": {"type": "string", "description": "Python source to run."}},
                "required": ["code"],
            },
            handler=python_interpreter,
        ),
        ToolSpec(
            name="list_variables",
            description="List the cached handles with type and shape.",
            parameters={"type": "object", "properties": {}},
            handler=list_variables,
        ),
    ]


def _where(cache: HandleCache, name: str) -> dict[str, Any]:
    """``{"location": engine}`` for engine-held handles (memory/disk are not the model's concern)."""
    try:
        location = cache.location(name)
    except Exception:  # broad: location() may ask an engine; the location is only a hint in the tool result
        return {}
    return {} if location in ("memory", "disk") else {"location": location}


def _listing(snapshot: dict[str, Any]) -> dict[str, Any]:
    keep = ("type", "shape", "rows_estimated", "columns", "dtype", "length")
    return {k: snapshot[k] for k in keep if k in snapshot}
