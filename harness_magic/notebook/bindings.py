"""Notebook variables the agent's values are bound to (``--out``, ``%agent_pull``) and the notebook's ``save``.

Nothing is replaced silently: binding onto a name the notebook already has
is refused (:class:`UsageError` naming the variable, its type and shape, and
``--force``) unless ``--force`` is given, or unless the name still holds
exactly what an earlier bind put there (so running a cell again, or Run All
twice, re-binds its own output). "Exactly" is the very object *and* its
:func:`~harness_magic.core.cache.fingerprint.fingerprint` at bind time: a pulled
frame edited in place (``df["new"] = 1``, ``df.loc[0, "x"] = 9``) is the user's
work now, and the refusal says it changed since the pull.

Pushes are remembered too (handle, the cache's version token of the pushed
value, its fingerprint), so ``%agent_code`` can leave out the pull of a handle
the notebook variable of that name already holds exactly (:meth:`Bindings.holds_pushed`).

:func:`save` is the agent's ``save`` for code copied out with ``%agent_code``:
it stores into the session cache as the agent's does; saving again, under the
same name, a value equal to what an earlier notebook ``save`` stored (the cell
run twice) returns that handle instead of a new ``_2``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable

from IPython.core.error import UsageError

from harness_magic.core.cache.fingerprint import fingerprint
from harness_magic.core.cache.protocol import HandleCache
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


@dataclass(frozen=True)
class _Bound:
    """What a bind put into a notebook variable."""

    holder: Callable[[], Any]
    """The bound object (weakly where the type allows)."""
    fingerprint: tuple[Any, ...] | None
    """Its fingerprint at bind time (None: the type has none; identity alone then decides)."""


@dataclass(frozen=True)
class _Stored:
    """A value that crossed into the cache (a push, or the notebook's ``save``)."""

    handle: str
    version: str
    """The cache's token for the stored value (``cache.versions()``): another value under ``handle`` has another."""
    fingerprint: tuple[Any, ...]


class Bindings:
    """The names this extension bound in one notebook namespace, and the refusal to replace anyone else's."""

    def __init__(self, namespace: Callable[[], dict[str, Any]]) -> None:
        self._namespace = namespace
        self._ours: dict[str, _Bound] = {}
        self._pushed: dict[str, _Stored] = {}
        self._saved: dict[str, _Stored] = {}

    @property
    def user_ns(self) -> dict[str, Any]:
        """The notebook's namespace now (``%reset`` may have replaced its contents)."""
        return self._namespace()

    def _bound_object(self, name: str) -> _Bound | None:
        """The record of ``name`` when it still holds the very object a bind put there."""
        bound = self._ours.get(name)
        if bound is None or name not in self.user_ns or bound.holder() is not self.user_ns[name]:
            return None
        return bound

    def is_ours(self, name: str) -> bool:
        """True when ``name`` still holds exactly what a bind put there: the same object, unchanged since."""
        bound = self._bound_object(name)
        return bound is not None and (bound.fingerprint is None
                                      or fingerprint(self.user_ns[name]) == bound.fingerprint)

    def conflict(self, name: str) -> str | None:
        """``"'sales' (DataFrame 10000×5)"`` when binding ``name`` would replace a notebook variable (``"...,
        changed since the pull bound it"`` for a bound value edited in place); else None."""
        if name not in self.user_ns or self.is_ours(name):
            return None
        edited = ", changed since the pull bound it" if self._bound_object(name) is not None else ""
        return f"{name!r} ({describe(self.user_ns[name])}{edited})"

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
        """Set ``name`` to ``value`` in the notebook and remember it (and its fingerprint) as ours."""
        self.user_ns[name] = value
        self._ours[name] = _Bound(_holder(value), fingerprint(value))

    def record_push(self, handle: str, value: Any, version: str | None) -> None:
        """Remember that ``value`` was pushed as ``handle`` (stored under the cache's ``version`` token)."""
        stamp = fingerprint(value)
        if version is None or stamp is None:
            self._pushed.pop(handle, None)
        else:
            self._pushed[handle] = _Stored(handle, version, stamp)

    def holds_pushed(self, name: str, handle: str, versions: dict[str, str]) -> bool:
        """True when notebook variable ``name`` holds exactly the value pushed as ``handle``, and the cache
        (``versions``: ``cache.versions()``) still holds that push under ``handle``: no pull is needed."""
        pushed = self._pushed.get(handle)
        return (pushed is not None and versions.get(handle) == pushed.version and name in self.user_ns
                and fingerprint(self.user_ns[name]) == pushed.fingerprint)

    def saved_again(self, preferred: str, stamp: tuple[Any, ...] | None, versions: dict[str, str]) -> str | None:
        """The handle an earlier notebook ``save(preferred, ...)`` stored a value of fingerprint ``stamp`` under,
        while the cache (``versions``) still holds it; else None."""
        saved = self._saved.get(preferred)
        if stamp is None or saved is None or saved.fingerprint != stamp \
                or versions.get(saved.handle) != saved.version:
            return None
        return saved.handle

    def record_save(self, preferred: str, handle: str, stamp: tuple[Any, ...] | None, version: str | None) -> None:
        """Remember that the notebook's ``save(preferred, ...)`` stored a value of fingerprint ``stamp`` as
        ``handle`` (the cache's ``version`` token)."""
        if stamp is not None and version is not None:
            self._saved[preferred] = _Stored(handle, version, stamp)


def save(name: str, value: Any) -> str:
    """Store a copy of ``value`` in the agent's cache as ``name`` (``name_2``... when taken: never a
    replacement); returns the handle. Saving under ``name`` a value equal to what this function stored under
    it before (the same cell run again) returns that handle. The agent's ``save``, for the notebook: the extension binds it as
    ``save`` where that name is free, and ``%agent_code`` cells import it where it is not."""
    from IPython import get_ipython

    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"save(name, value): name must be a non-empty string, got {name!r}")
    shell = get_ipython()
    magics = shell.magics_manager.registry.get("AgentMagics") if shell is not None else None
    if magics is None:
        raise RuntimeError("save(): harness_magic is not loaded here: run %load_ext harness_magic first")
    cache, value = magics.session.cache, copy_value(value)
    stamp = fingerprint(value)
    again = magics.bindings.saved_again(name, stamp, cache.versions())
    if again is not None:  # the same cell run again: the same handle, not a new _2
        return again
    handle = cache.put(name, value, tool="notebook")
    magics.bindings.record_save(name, handle, stamp, cache.versions().get(handle))
    return handle


def push_value(cache: HandleCache, value: Any, handle: str) -> str:
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


def pulled_value(cache: HandleCache, handle: str, name: str, max_bytes: int, max_rows: int) -> Any:
    """A copy of ``handle``'s value for the notebook variable ``name``; a lazy engine handle is materialised
    under ``max_bytes`` and ``max_rows``, and over either a UsageError names the cap and the flag to raise it."""
    from harness_magic.core.cache.errors import CacheError
    from harness_magic.core.execution.connectors.lazy import MaterializeLimitError
    from harness_magic.core.execution.interpreter import materialize_inputs

    try:
        value = materialize_inputs(cache, [handle], max_bytes, max_rows, for_user=True)[handle]
        value = cache.user_value(handle, value)  # pseudonyms made at entry back to the real values
    except CacheError as exc:  # e.g. a spilled or checkpointed file changed on disk: nothing was read
        raise UsageError(f"%agent_pull {handle}: {exc}") from None
    except MaterializeLimitError as exc:  # over a cap: nothing was kept; the message names the flag that raises it
        flag = "--max-rows" if exc.limit == "rows" else "--max-bytes"
        raise UsageError(f"{exc} To bring it in anyway: %agent_pull {handle} {name} {flag} N") from None
    return copy_value(value)
