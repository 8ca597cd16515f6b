"""Notebook variables the agent's values are bound to (``--out``, ``%agent_pull``) and the notebook's ``save``.

Nothing is replaced silently: binding onto a name the notebook already has
is refused (:class:`UsageError` naming the variable, its type and shape, and
``--force``) unless ``--force`` is given, or unless the name still holds the
very value an earlier bind put there (so running a cell again, or Run All
twice, re-binds its own output). :func:`save` is the agent's ``save`` for
code copied out with ``%agent_code``: it stores into the session cache as the
agent's does.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from IPython.core.error import UsageError

from harness_magic.notebook.values import copy_value, describe

__all__ = ["Bindings", "save", "push_value", "pulled_value", "SAVE_NAME"]

SAVE_NAME = "save"
"""The name agent code stores values with; the extension binds :func:`save` to it in the notebook."""


def _holder(value: Any) -> Callable[[], Any]:
    """A reference to ``value``: weak where the type allows (frames, arrays), else strong (lists, dicts, ints)."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


class Bindings:
    """The names this extension bound in one notebook namespace, and the refusal to replace anyone else's."""

    def __init__(self, namespace: Callable[[], dict[str, Any]]) -> None:
        self._namespace = namespace
        self._ours: dict[str, Callable[[], Any]] = {}

    @property
    def user_ns(self) -> dict[str, Any]:
        """The notebook's namespace now (``%reset`` may have replaced its contents)."""
        return self._namespace()

    def is_ours(self, name: str) -> bool:
        """True when ``name`` still holds the value a bind put there (not reassigned since)."""
        holder = self._ours.get(name)
        return holder is not None and name in self.user_ns and holder() is self.user_ns[name]

    def conflict(self, name: str) -> str | None:
        """``"'sales' (DataFrame 10000×5)"`` when binding ``name`` would replace a notebook variable; else None."""
        if name not in self.user_ns or self.is_ours(name):
            return None
        return f"{name!r} ({describe(self.user_ns[name])})"

    def refuse(self, pairs: list[tuple[str, str]], what: str, retry: str) -> None:
        """A one-line UsageError naming every ``(handle, name)`` whose ``name`` holds a notebook variable (its
        type and shape), what refused (``what``, e.g. ``--out``) and how to replace anyway (``retry``)."""
        taken = [(h, c) for h, n in pairs if (c := self.conflict(n)) is not None]
        if not taken:
            return
        listed = "; ".join(f"{c} with handle {h!r}" for h, c in taken)
        noun = "variable" if len(taken) == 1 else "variables"
        raise UsageError(f"{what}: not replacing notebook {noun} {listed}: {retry}")

    def bind(self, name: str, value: Any) -> None:
        """Set ``name`` to ``value`` in the notebook and remember it as ours."""
        self.user_ns[name] = value
        self._ours[name] = _holder(value)


def save(name: str, value: Any) -> str:
    """Store a copy of ``value`` in the agent's cache as ``name`` (``name_2``... when taken: never a
    replacement); returns the handle. The agent's ``save``, for the notebook: the extension binds it as
    ``save`` where that name is free, and ``%agent_code`` cells import it where it is not."""
    from IPython import get_ipython

    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"save(name, value): name must be a non-empty string, got {name!r}")
    shell = get_ipython()
    magics = shell.magics_manager.registry.get("AgentMagics") if shell is not None else None
    if magics is None:
        raise RuntimeError("save(): harness_magic is not loaded here: run %load_ext harness_magic first")
    return magics.session.cache.put(name, copy_value(value), tool="notebook")


def push_value(cache: Any, value: Any, handle: str) -> str:
    """Copy ``value`` into ``cache`` as ``handle`` (replacing an older value of that handle); returns
    ``"`HANDLE` (type shape)"`` from the cached snapshot."""
    if handle in cache:
        cache.retire(handle)
    actual = cache.put(handle, copy_value(value))
    snap = cache.snapshot(actual)
    shape = snap.get("shape")
    described = snap.get("type", type(value).__name__)
    if isinstance(shape, (list, tuple)):
        described += " " + "×".join(str(s) for s in shape)
    return f"`{actual}` ({described})"


def pulled_value(cache: Any, handle: str, name: str, max_bytes: int, max_rows: int) -> Any:
    """A copy of ``handle``'s value for the notebook variable ``name``; a lazy engine handle is materialised
    under ``max_bytes`` and ``max_rows``, and over either a UsageError names the cap and the flag to raise it."""
    from harness_magic.core.cache.errors import CacheError
    from harness_magic.core.execution.interpreter import materialize_inputs

    try:
        value = materialize_inputs(cache, [handle], max_bytes, max_rows)[handle]
    except CacheError as exc:  # e.g. a spilled or checkpointed file changed on disk: nothing was read
        raise UsageError(f"%agent_pull {handle}: {exc}") from None
    except Exception as exc:
        if type(exc).__name__ == "MaterializeLimitError":
            flag = "--max-rows" if getattr(exc, "limit", "bytes") == "rows" else "--max-bytes"
            raise UsageError(f"{exc} To bring it in anyway: %agent_pull {handle} {name} {flag} N") from None
        raise
    return copy_value(value)
