"""A sandbox backend made on a background thread and handed over once (:class:`BackendStart`).

The session starts its interpreter backend beside the first model request,
so the first tool call waits only for what is left of the start.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Callable

from harness_magic.core.execution.interpreter import InterpreterBackend

__all__ = ["BackendStart", "with_data_stack", "KERNEL_DATA_STACK", "DATA_STACK_TRIGGER"]

KERNEL_DATA_STACK = ("pandas", "pyarrow")
"""Imported beside a background start when the kernel already holds pandas (the user has data, so the first
result is likely a frame the kernel reads and describes with them: ~0.7 s cold the first tool call would otherwise
pay). A kernel without pandas keeps them unimported (about 84 MB) until a value needs them."""
DATA_STACK_TRIGGER = "pandas"
"""The module whose presence in ``sys.modules`` says the user works with data in this kernel."""


class BackendStart:
    """An interpreter backend being made on a background thread (``make()``), handed over once.

    :meth:`result` waits for it and returns the backend, or raises what
    ``make`` raised, the same exception, once (the caller then holds the
    backend, or tries again on its own). An interrupt while waiting leaves the
    start under way. :meth:`cancel` closes what the start made, or has the
    start close it when it finishes, and waits for that: no worker outlives a
    cancelled start, even when the wait is interrupted.
    """

    def __init__(self, make: Callable[[], InterpreterBackend]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._backend: InterpreterBackend | None = None
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, name="harness-sandbox-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            backend = self._make()
        except BaseException as exc:  # kept for the first call that needs the backend
            self._error = exc
        else:
            with self._lock:
                cancelled = self._cancelled
                if not cancelled:
                    self._backend = backend
            if cancelled:
                backend.close()
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        """Whether the start has finished (made the backend or failed)."""
        return self._done.is_set()

    def result(self) -> InterpreterBackend:
        """Wait for the start; the backend, or the start's exception (raised by this call only)."""
        self._done.wait()
        with self._lock:
            backend, self._backend = self._backend, None
            error, self._error = self._error, None
        if error is not None:
            raise error
        if backend is None:
            raise RuntimeError("this sandbox start was cancelled or already handed over")
        return backend

    def cancel(self) -> None:
        """Stop caring about the start: wait for it to finish and close what it made (nothing is left running)."""
        with self._lock:
            self._cancelled = True
            backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()
        self._thread.join()  # a start still under way saw the flag and closes its backend itself


def _import_data_stack() -> None:
    for name in KERNEL_DATA_STACK:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # the call that needs it raises it where it is used


def with_data_stack(make: Callable[[], InterpreterBackend]) -> InterpreterBackend:
    """``make()``, with :data:`KERNEL_DATA_STACK` imported on a thread alongside when the kernel already uses
    pandas (both done when it returns); otherwise just ``make()``: nothing heavy is imported before it is used."""
    if DATA_STACK_TRIGGER not in sys.modules:
        return make()
    imports = threading.Thread(target=_import_data_stack, name="harness-data-stack-import", daemon=True)
    imports.start()
    try:
        return make()
    finally:
        imports.join()
