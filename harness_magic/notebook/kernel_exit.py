"""A kernel that answered ``shutdown_request`` ends: its channel threads stop before its IOPub thread.

ipykernel 7.4 closes a kernel at exit (``IPKernelApp.close``, an exit handler)
in this order: the IOPub thread first, then the control and shell-channel
threads. The control thread is often still finishing the shutdown request
then: it publishes its "idle" status through the IOPub thread's event pipe.
When that send lands in the moment the IOPub thread has closed its end of the
pipe but is not yet dead, the send waits for a reader that never comes, and
``close`` waits for the control thread forever. A kernel answered
``shutdown_request`` and stayed alive in about one exit in thirty here (the
same hang is reported against ipykernel by other front ends).

:func:`stop_channels_first_at_exit` registers, once per process, an exit
handler that runs before ipykernel's own (exit handlers run last-registered
first; the kernel registers its own before it loads extensions): it stops the
control and shell-channel threads and waits for them, so each finishes what it
was doing while IOPub still runs. ``close`` then finds them stopped and only
has IOPub to end. Outside an ipykernel kernel nothing is registered.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

__all__ = ["stop_channels_first_at_exit", "CHANNEL_STOP_S", "CHANNEL_THREADS"]

CHANNEL_STOP_S = 5.0
"""How long to wait for each channel thread to stop (each finishes one message; milliseconds)."""
CHANNEL_THREADS = ("control_thread", "shell_channel_thread")
"""The ``IPKernelApp`` attributes of the threads that publish through IOPub and must stop before it."""

_registered = False
_lock = threading.Lock()


def _running_kernel_app() -> Any | None:
    """The process's ``IPKernelApp`` once it is initialized, else None (terminal IPython, no ipykernel)."""
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:
        return None
    # Not IPKernelApp.initialized()/instance(): the singleton slot is shared along the class tree, so under
    # terminal IPython it holds the TerminalIPythonApp and instance() raises MultipleInstanceError.
    app = getattr(IPKernelApp, "_instance", None)
    return app if isinstance(app, IPKernelApp) else None


def _stop_channels(app: Any) -> list[str]:
    """Stop and join the app's channel threads that still run; the names of those still alive after."""
    stuck = []
    for attribute in CHANNEL_THREADS:
        thread = getattr(app, attribute, None)
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            continue
        thread.stop()
        thread.join(timeout=CHANNEL_STOP_S)
        if thread.is_alive():
            stuck.append(thread.name)
    return stuck


def stop_channels_first_at_exit() -> bool:
    """Register the exit handler described in the module docstring (idempotent); whether one is registered."""
    global _registered
    with _lock:
        if _registered:
            return True
        app = _running_kernel_app()
        if app is None:
            return False
        atexit.register(_stop_channels, app)
        _registered = True
        return True
