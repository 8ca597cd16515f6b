"""litellm at process exit: its HTTP handlers' finalizers never run once the interpreter is finalizing.

litellm builds ``AsyncHTTPHandler`` / ``HTTPHandler`` objects at import (module
singletons of several providers) and in its client cache. Their ``__del__``
closes the client, and the async one first imports a litellm module to decide
how. Objects still alive at exit are finalized while the interpreter is being
torn down: ``sys.modules`` is already emptied, so that ``__del__`` starts a
fresh import, and the import lock may be held forever by a daemon thread that
was frozen in the middle of an import (a sandbox start importing pandas beside
the first model request, for instance). The process then never exits and
ignores Ctrl-C: terminal IPython's ``exit`` hung, and a kernel answered
``shutdown_request`` but stayed alive.

:func:`guard_litellm_finalizers` wraps those ``__del__`` methods once: while
``sys.is_finalizing()`` they do nothing (the OS closes the sockets of a
process that is ending; there is nothing left to flush), at any other time
they run as litellm wrote them. A litellm without these classes is left as it is.

litellm's import also leaves ~300,000 long-lived objects for the cyclic
garbage collector: each full collection walks them (0.3-1 s on a busy
machine), and the interpreter runs several while it finalizes, so an exit
took 2-5 s. :func:`guard_litellm_finalizers` also registers, once,
``gc.freeze`` as an exit handler: from the moment exit handlers run, no
collection walks the objects alive then (the process is ending; its memory
goes back to the OS as a whole). Objects still free themselves by reference
counting, and nothing changes while the process lives.
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
import sys
import threading
from typing import Any, Callable

__all__ = ["guard_litellm_finalizers", "GUARDED_FINALIZERS", "is_guarded"]

GUARDED_FINALIZERS = (
    ("litellm.llms.custom_httpx.http_handler", "AsyncHTTPHandler"),
    ("litellm.llms.custom_httpx.http_handler", "HTTPHandler"),
)
"""(module, class) whose ``__del__`` is skipped during interpreter finalization."""

_GUARD_MARK = "__harness_exit_guard__"
"""Attribute set on a wrapped ``__del__`` (so a second call wraps nothing twice)."""
_lock = threading.Lock()
_exit_freeze_registered = False


def _guarded(finalizer: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(finalizer)
    def __del__(self: Any) -> None:
        if sys.is_finalizing():  # an import here can wait forever for a lock a frozen thread holds
            return
        finalizer(self)

    setattr(__del__, _GUARD_MARK, True)
    return __del__


def is_guarded(cls: type) -> bool:
    """Whether ``cls.__del__`` is the exit-guarded wrapper."""
    return getattr(cls.__dict__.get("__del__"), _GUARD_MARK, False)


def guard_litellm_finalizers() -> list[str]:
    """Wrap the ``__del__`` of :data:`GUARDED_FINALIZERS` (idempotent); the classes guarded now or before.

    Call it after ``import litellm``; classes litellm no longer has are skipped. The first call also
    registers ``gc.freeze`` to run at exit (see the module docstring).
    """
    global _exit_freeze_registered
    guarded = []
    with _lock:
        if not _exit_freeze_registered:
            atexit.register(gc.freeze)
            _exit_freeze_registered = True
        for module_name, class_name in GUARDED_FINALIZERS:
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError):
                continue
            finalizer = cls.__dict__.get("__del__")
            if finalizer is None:
                continue
            if not is_guarded(cls):
                cls.__del__ = _guarded(finalizer)
            guarded.append(f"{module_name}.{class_name}")
    return guarded
