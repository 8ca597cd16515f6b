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

Engines that keep data themselves (files a DuckDB connector reads) ask the
guard how to serve each column (:meth:`EntryGuard.served_column`) and issue
pseudonyms through it (:meth:`EntryGuard.engine_pseudonyms`), so the model's
SQL runs over the same pseudonyms the cache holds, and a pull restores them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

__all__ = ["EntryGuard", "ColumnSources", "ServedColumn", "SERVED_ACTIONS"]

SERVED_ACTIONS = ("pseudonym", "deny")
"""How an engine serves a sensitive column: each value's pseudonym, or ``[denied CLASS]`` (missing stays missing)."""


@dataclass(frozen=True)
class ServedColumn:
    """How an engine serves one column of data it keeps (None from the guard: the real values)."""

    action: str
    """One of :data:`SERVED_ACTIONS`."""
    cls: str
    """The sensitivity class (``pii``, ``restricted``, ``financial``)."""
    kind: str
    """The pseudonym's kind: a detected kind (``email``, ``phone``...) or the class itself."""
    source: str
    """Why the column has its class (``glossary``, ``detected``...), for the model's notes and the docs."""

    def __post_init__(self) -> None:
        if self.action not in SERVED_ACTIONS:
            raise ValueError(f"served column action {self.action!r} is not one of {', '.join(SERVED_ACTIONS)}")

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

    def served_column(self, table: str, column: str, numeric: bool, sample: list[Any]) -> ServedColumn | None:
        """How an engine keeping ``table`` serves ``column`` to the agent (``numeric``: the engine's type is a
        number; ``sample``: its first values, for detection), by the same classes and policy as :meth:`conceal`;
        None: its real values."""
        ...

    def engine_pseudonyms(self, kind: str, cls: str, values: list[str]) -> list[str]:
        """The pseudonym of each of ``values`` (distinct texts), exactly as :meth:`conceal` issues it for a column
        of ``kind`` and ``cls``; each pair is kept for the user (a pull restores it), never given out."""
        ...

    def forget(self, handle: str) -> None:
        """``handle`` was retired: drop what was kept for it."""
        ...
