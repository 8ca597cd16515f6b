"""Widget messages that reach the kernel while a cell waits (ipykernel's kernel subshells).

A running cell holds the kernel's main shell: the front end's widget messages
queue behind it, so a button in a cell that waits for that very button could
never be clicked. ipykernel 7 receives every shell message on its
shell-channel thread and hands it to a shell (the main one, or a subshell with
a thread of its own, JEP 91); from 7.4 a comm may name the shell that handles
the front end's messages to it (``BaseComm._reply_subshell_for``).
:class:`SubshellComms` starts one subshell for the harness (once per kernel,
on first use) and, while a question waits, routes the messages of that
question's widgets there: their handlers run on the subshell's thread and the
waiting cell wakes on a :class:`threading.Event`. Execute requests (the next
cells of a Run All) stay queued on the main shell and run after the cell, in
order; nothing is read on the kernel's behalf and nothing is replayed.

jupyter-ui-poll, the usual answer, calls ``kernel.do_one_iteration()``, which
ipykernel 7.4 no longer has (it swallows the AttributeError: clicks are never
seen), so this module talks to the kernel itself. It is the one place that
touches ipykernel's internals: :func:`kernel_comms` answers None where they are
absent (another kernel, ipykernel before 7.4), and the asker then says the
question cannot be answered here.
"""

from __future__ import annotations

import concurrent.futures
import threading
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Protocol

__all__ = ["CommRouter", "SubshellComms", "kernel_comms", "SUBSHELL_START_S"]

SUBSHELL_START_S = 10.0
"""The shell-channel thread starts a subshell in milliseconds; longer means that thread is stuck."""


class CommRouter(Protocol):
    """Makes the front end's messages to some widgets reach the kernel while the main shell is busy."""

    def routing(self, widgets: Iterable[Any]) -> Any:
        """A context manager: inside it, messages to ``widgets`` are handled although the cell still runs
        (on another thread: handlers must only record what they got)."""
        ...


class SubshellComms:
    """:class:`CommRouter` over ipykernel's subshells (see the module docstring)."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self._subshell_id: str | None = None
        self._lock = threading.Lock()

    @property
    def subshell_id(self) -> str | None:
        """The harness's subshell, once started."""
        return self._subshell_id

    def _subshell(self) -> str:
        with self._lock:
            if self._subshell_id is None:
                thread = self._kernel.shell_channel_thread
                started: concurrent.futures.Future[str] = concurrent.futures.Future()

                def create() -> None:  # runs on the shell-channel thread, the only one that may
                    try:
                        started.set_result(thread.manager._create_subshell())
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                        started.set_exception(exc)

                thread.io_loop.add_callback(create)
                self._subshell_id = started.result(SUBSHELL_START_S)
            return self._subshell_id

    @contextmanager
    def routing(self, widgets: Iterable[Any]) -> Iterator[None]:
        subshell = self._subshell()
        comms = [w.comm for w in widgets if getattr(w, "comm", None) is not None]

        def route(data: Any, default: Any) -> str:
            return subshell

        for comm in comms:
            comm._reply_subshell_for = route  # the hook ipykernel's shell-channel thread asks per message
        try:
            yield
        finally:
            for comm in comms:
                comm.__dict__.pop("_reply_subshell_for", None)


_COMMS: dict[int, SubshellComms] = {}
"""One router (one subshell) per kernel object, keyed by its id (a kernel lives as long as its process)."""


def kernel_comms(kernel: Any) -> SubshellComms | None:
    """The router for ``kernel``, or None where its ipykernel cannot route a comm to a subshell."""
    if kernel is None or getattr(kernel, "shell_channel_thread", None) is None:
        return None
    try:
        from ipykernel.comm.comm import BaseComm
    except ImportError:
        return None
    if not callable(getattr(BaseComm, "_reply_subshell_for", None)):  # ipykernel before 7.4
        return None
    if id(kernel) not in _COMMS:
        _COMMS[id(kernel)] = SubshellComms(kernel)
    return _COMMS[id(kernel)]
