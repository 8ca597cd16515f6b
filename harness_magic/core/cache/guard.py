"""The entry seam: what the cache asks before it stores a value the agent's side will read.

A cache with an :class:`EntryGuard` (:meth:`SessionCache.set_guard`) hands
every value to :meth:`EntryGuard.conceal` before storing it, so what the
worker, snapshots, spill files, checkpoints and subagents read is the
guard's version of the value (for masking: sensitive columns pseudonymised).
The guard keeps whatever it needs to give the user the real value back
(:meth:`EntryGuard.reveal`); the cache itself never holds it.

Engine values (lazy relations) are not rows yet: the guard sees their rows
when the engine produces them, through :meth:`EntryGuard.conceal_rows`
(the snapshot's head rows, and rows materialised for the interpreter).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

__all__ = ["EntryGuard", "ColumnSources"]

ColumnSources = Mapping[str, frozenset[str]]
"""Output column -> the source columns it is computed from (query lineage), as given by a connector."""


class EntryGuard(Protocol):
    """Decides the agent-side form of every value entering one cache."""

    def conceal(self, handle: str, value: Any, sources: ColumnSources | None, *, derived: bool = False) -> Any:
        """The value to store as ``handle`` (may be ``value`` itself); engine values are returned unchanged.

        ``derived``: the value was computed on the agent's side (an interpreter save), not brought in."""
        ...

    def conceal_rows(self, handle: str, frame: Any) -> Any:
        """Rows an engine value ``handle`` produced (head or materialised), in their agent-side form."""
        ...

    def reveal(self, handle: str | None, value: Any) -> Any:
        """``value`` (read from ``handle``, or derived from such values) with the real values restored."""
        ...

    def query_for_engine(self, sql: str, dialect: str | None) -> str:
        """What an engine is asked for the model's ``sql`` (pseudonyms the query compares against made real)."""
        ...

    def forget(self, handle: str) -> None:
        """``handle`` was retired: drop what was kept for it."""
        ...
