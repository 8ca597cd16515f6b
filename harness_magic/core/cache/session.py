"""SessionCache (first version: in memory only)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from harness_magic.core.cache.names import resolve_handle_name
from harness_magic.core.cache.snapshot import make_snapshot

__all__ = ["SessionCache"]


@dataclass
class _Entry:
    value: Any
    snapshot: dict[str, Any]
    turn: int | None = None
    tool: str | None = None


class SessionCache:
    """Named values the agent works with; handles are valid identifiers."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def put(self, preferred_name: str, value: Any, *, turn: int | None = None, tool: str | None = None) -> str:
        name = resolve_handle_name(preferred_name, self._entries)
        self._entries[name] = _Entry(value, make_snapshot(value), turn, tool)
        return name

    def get(self, name: str) -> Any:
        try:
            return self._entries[name].value
        except KeyError:
            raise KeyError(f"no handle {name!r}; known handles: {', '.join(self._entries) or '(none)'}") from None

    def view(self, name: str) -> Any:
        """A copy of the value that cannot change what the cache holds."""
        return copy.deepcopy(self.get(name))

    def snapshot(self, name: str) -> dict[str, Any]:
        self.get(name)
        return self._entries[name].snapshot

    def names(self) -> list[str]:
        return list(self._entries)

    def location(self, name: str) -> str:
        self.get(name)
        return "memory"

    def retire(self, name: str) -> None:
        self.get(name)
        del self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def metadata(self) -> list[dict[str, Any]]:
        """Per-handle metadata for logs: never payloads."""
        return [
            {"name": n, "type": e.snapshot.get("type"), "shape": e.snapshot.get("shape"),
             "location": "memory", "turn": e.turn, "tool": e.tool}
            for n, e in self._entries.items()
        ]

    def clear(self) -> None:
        self._entries.clear()

    def close(self) -> None:
        self.clear()
