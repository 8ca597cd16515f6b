"""What the loop, the tools and the notebook need of the session cache: the :class:`HandleCache` protocol.

The seam between the cache plane and everything above it. Code above the cache
types a cache as :class:`HandleCache` and calls its members; it never probes
for them (a probe for ``versions`` once hid a missing member). Every
member is part of the contract: an implementation without an optional
capability keeps the member and declares so (e.g. :attr:`guard` None: values are
stored as given). :data:`CACHE_MEMBERS` names every member, and
``tests/test_typed_seams.py`` pins each implementation to all of them;
``tests/test_types.py`` type-checks this module and its implementations strictly.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol, runtime_checkable

from harness_magic.core.cache.guard import ColumnSources, EntryGuard
from harness_magic.core.cache.session import HandleInfo

__all__ = ["CACHE_MEMBERS", "HandleCache"]


@runtime_checkable
class HandleCache(Protocol):
    """Named values the agent works with: handles, their snapshots, versions and metadata.

    Names are valid identifiers and never silently overwritten (``put`` returns
    the name it assigned); values handed out cannot change what is stored.
    """

    @property
    def guard(self) -> EntryGuard | None:
        """The entry guard every stored value passes (None: values are stored as given)."""
        ...

    def set_guard(self, guard: EntryGuard | None) -> None:
        """Install (or remove) the entry guard; values already stored are not revisited."""
        ...

    def agent_rows(self, name: str, frame: Any) -> Any:
        """Rows engine value ``name`` produced, in their agent-side form (through the guard)."""
        ...

    def user_value(self, name: str | None, value: Any) -> Any:
        """``value`` read from ``name`` with real values restored for the user (through the guard)."""
        ...

    def put(self, preferred_name: str, value: Any, *, turn: int | None = None, tool: str | None = None,
            version: str | None = None, sources: ColumnSources | None = None, derived: bool = False) -> str:
        """Store ``value`` under a fresh name derived from ``preferred_name``; the name it got."""
        ...

    def get(self, name: str) -> Any:
        """The value of handle ``name`` (an unknown name raises ``UnknownHandleError``)."""
        ...

    def view(self, name: str) -> Any:
        """A read-only view of handle ``name`` for code that only reads it."""
        ...

    def views(self, names: Iterable[str]) -> dict[str, Any]:
        """:meth:`view` of each name."""
        ...

    def snapshot(self, name: str) -> dict[str, Any]:
        """The bounded ``ls`` + ``head`` summary of handle ``name``."""
        ...

    def names(self) -> list[str]:
        """Every live handle, in insertion order."""
        ...

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a live handle."""
        ...

    def versions(self) -> dict[str, str]:
        """Handle -> a token unique to the value it holds (never hydrates)."""
        ...

    def location(self, name: str) -> str:
        """Where handle ``name``'s value lives now (``memory``, ``disk`` or ``engine``)."""
        ...

    def retire(self, name: str) -> None:
        """Forget handle ``name`` (its spill file too)."""
        ...

    def entries(self) -> list[HandleInfo]:
        """Metadata of every handle (no values)."""
        ...

    def metadata(self) -> list[dict[str, Any]]:
        """:meth:`entries` as plain dicts (for logs)."""
        ...

    def usage(self) -> dict[str, int]:
        """Counts and bytes held in memory and on disk."""
        ...

    def clear(self) -> None:
        """Forget every handle."""
        ...

    def close(self) -> None:
        """Release what the cache holds (its spill directory); it is empty after."""
        ...


CACHE_MEMBERS = ("guard", "set_guard", "agent_rows", "user_value", "put", "get", "view", "views", "snapshot",
                 "names", "__contains__", "versions", "location", "retire", "entries", "metadata", "usage", "clear", "close")
"""Every member of :class:`HandleCache`; an implementation has each of them (``tests/test_typed_seams.py``)."""
