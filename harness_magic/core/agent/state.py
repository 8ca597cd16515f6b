"""Per-harness state that a plane above the agent keeps on the harness it describes.

A plane that needs state per harness (the budget guards installed on it, for
example) declares a :class:`StateKey` once, at module level, and keeps its
values in the harness's :class:`HarnessState` (``harness.state``). The value
lives and dies with the harness: there is no module-level table keyed by
harnesses, and the key types the value it names.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

__all__ = ["StateKey", "HarnessState"]

T = TypeVar("T")


class StateKey(Generic[T]):
    """Names one piece of per-harness state and how to make its first value.

    Keys compare by identity: two keys with the same ``name`` are different
    state (the name is for messages and ``repr`` only).
    """

    __slots__ = ("name", "factory")

    def __init__(self, name: str, factory: Callable[[], T]) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a state key needs a non-empty name, got {name!r}")
        if not callable(factory):
            raise TypeError(f"the factory of state key {name!r} must be callable, got {factory!r}")
        self.name = name
        self.factory = factory

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


class HarnessState:
    """The values of the :class:`StateKey` s used on one harness (``harness.state``)."""

    def __init__(self) -> None:
        self._values: dict[StateKey[Any], Any] = {}

    def get(self, key: StateKey[T]) -> T:
        """The value of ``key`` on this harness, made by ``key.factory()`` on first use."""
        if not isinstance(key, StateKey):
            raise TypeError(f"harness state is read by a StateKey, got {key!r}")
        if key not in self._values:
            self._values[key] = key.factory()
        value: T = self._values[key]
        return value

    def peek(self, key: StateKey[T]) -> T | None:
        """The value of ``key`` if it was ever made on this harness, else None (nothing is created)."""
        value: T | None = self._values.get(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return f"HarnessState({', '.join(k.name for k in self._values) or 'empty'})"
