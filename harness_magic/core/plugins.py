"""Plugins: what installed packages declare under harness_magic's entry-point groups.

Four groups, one per kind of extension::

    harness_magic.connectors   a connector type usable in AgentMagics.connectors ({"type": NAME, ...})
    harness_magic.tools        a tool every session offers the model
    harness_magic.graders      a grader kind usable in evals task files
    harness_magic.skills       a directory of skill folders (each holding a SKILL.md)

The package's own connector types, graders and skills are declared in its
``pyproject.toml`` under the same groups, so they load exactly as an outside
package's would (``docs/design.md``, "Write a plugin"). Each kind's module owns
one :class:`PluginGroup` and the check that says what shape its objects have.

Contract of :class:`PluginGroup`:

* :meth:`~PluginGroup.names` lists the declared names without importing anything.
* :meth:`~PluginGroup.get` imports one entry point the first time it is asked
  for, checks the object's shape and caches the outcome: a plugin that fails to
  import, or whose object has the wrong shape, is recorded once (name, group,
  distribution, one-line error) and never retried, and never stops the others.
* A name declared by more than one distribution: harness_magic's own
  declaration wins (an installed package cannot silently replace a built-in and
  its governance); between outside packages the distribution whose name sorts
  first wins. Every other declaration is recorded as a failure naming the
  winner, so ``%agent_status`` shows it.
* :meth:`~PluginGroup.load_all` loads every declared plugin (for a status view);
  :meth:`~PluginGroup.failures` lists what failed so far.

Pure standard library (``importlib.metadata``): the lowest plane, importable from every other.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Callable, Generic, TypeVar

__all__ = ["PluginGroup", "PluginError", "PluginFailure", "Plugin", "OWN_DISTRIBUTION", "GROUPS",
           "MAX_ERROR_CHARS"]

OWN_DISTRIBUTION = "harness_magic"
"""The distribution whose declarations are the built-ins (they win a name clash)."""
GROUPS = ("harness_magic.connectors", "harness_magic.tools", "harness_magic.graders", "harness_magic.skills")
"""Every entry-point group harness_magic reads."""
MAX_ERROR_CHARS = 300
"""A failure's error is cut to this many characters (it is shown as one line of a status table)."""

T = TypeVar("T")


class PluginError(ValueError):
    """A name that no plugin declares, or whose plugin failed to load; ``str()`` says which and why."""


@dataclass(frozen=True)
class PluginFailure:
    """One plugin that could not be used."""

    group: str
    name: str
    """The entry point's name (the connector type, grader kind, ...)."""
    distribution: str
    """The installed package that declared it ("" when unknown)."""
    error: str
    """One line: the exception's type and message, or why the declaration was ignored."""

    @property
    def line(self) -> str:
        """``name (group, from distribution): error``."""
        origin = f", from {self.distribution}" if self.distribution else ""
        return f"{self.name} ({self.group}{origin}): {self.error}"


@dataclass(frozen=True)
class Plugin(Generic[T]):
    """One loaded plugin: its name, where it came from, and its checked object."""

    name: str
    distribution: str
    value: str
    """The entry point's ``module:attribute``."""
    obj: T

    @property
    def builtin(self) -> bool:
        """Declared by harness_magic itself."""
        return self.distribution == OWN_DISTRIBUTION


_SCAN_LOCK = threading.Lock()
_scanned: dict[str, list[EntryPoint]] | None = None


def _declared(group: str) -> list[EntryPoint]:
    """The entry points of ``group``, from one scan of the installed distributions shared by every group
    (a scan reads every distribution's metadata: tens of milliseconds, paid once per process)."""
    global _scanned
    with _SCAN_LOCK:
        if _scanned is None:
            every = entry_points()  # one scan; of two distributions of one name, the first on sys.path counts
            _scanned = {name: list(every.select(group=name)) for name in GROUPS}
        return list(_scanned[group])


def _rescan() -> None:
    global _scanned
    with _SCAN_LOCK:
        _scanned = None


def _distribution(point: EntryPoint) -> str:
    return point.dist.name if point.dist is not None else ""


def _normalised(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 1] + "…"


class PluginGroup(Generic[T]):
    """The plugins of one entry-point group, loaded lazily, once.

    ``check(obj, name)`` returns the object typed as the group needs it, or raises
    TypeError/ValueError saying what shape was expected; ``what`` names one plugin
    of the group in messages ("connector type", "grader kind").
    """

    def __init__(self, group: str, check: Callable[[object, str], T], what: str) -> None:
        if group not in GROUPS:
            raise ValueError(f"entry-point group {group!r} is not one of harness_magic's: {', '.join(GROUPS)}")
        self.group, self.what, self._check = group, what, check
        self._lock = threading.RLock()
        self._declared: dict[str, EntryPoint] | None = None
        self._shadowed: list[PluginFailure] = []
        self._loaded: dict[str, Plugin[T]] = {}
        self._failed: dict[str, PluginFailure] = {}

    # -- declarations (no imports) --------------------------------------------------------

    def _points(self) -> dict[str, EntryPoint]:
        with self._lock:
            if self._declared is None:
                self._declared, self._shadowed = self._resolve(_declared(self.group))
            return self._declared

    def _resolve(self, points: list[EntryPoint]) -> tuple[dict[str, EntryPoint], list[PluginFailure]]:
        """One entry point per name (the rule in the module docstring); the others as failures."""
        def rank(point: EntryPoint) -> tuple[int, str]:
            dist = _normalised(_distribution(point))
            return (0 if dist == OWN_DISTRIBUTION else 1, dist)

        by_name: dict[str, list[EntryPoint]] = {}
        for point in points:
            by_name.setdefault(point.name, []).append(point)
        chosen: dict[str, EntryPoint] = {}
        shadowed: list[PluginFailure] = []
        for name, candidates in by_name.items():
            winner, *losers = sorted(candidates, key=rank)
            chosen[name] = winner
            shadowed += [PluginFailure(self.group, name, _distribution(p),
                                       f"ignored: {self.what} {name!r} is already declared by "
                                       f"{_distribution(winner) or winner.value}, which wins")
                         for p in losers if p.value != winner.value]
        own = sorted(n for n in chosen if rank(chosen[n])[0] == 0)  # the built-ins first, then the others
        return {n: chosen[n] for n in own + sorted(set(chosen) - set(own))}, shadowed

    def names(self) -> tuple[str, ...]:
        """Every declared name: the built-ins sorted, then the others sorted."""
        return tuple(self._points())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._points()

    # -- loading --------------------------------------------------------------------------

    def get(self, name: str) -> Plugin[T]:
        """The plugin called ``name``, loaded on first use; PluginError when none is declared or it failed."""
        with self._lock:
            if isinstance(name, str) and name in self._loaded:
                return self._loaded[name]
            points = self._points()
            if not isinstance(name, str) or name not in points:
                raise PluginError(f"{self.what} {name!r} is unknown; available: {', '.join(points) or '(none)'}")
            if name not in self._failed:
                self._load(name, points[name])
            if name in self._failed:
                raise PluginError(f"{self.what} {name!r} failed to load: {self._failed[name].line}")
            return self._loaded[name]

    def _load(self, name: str, point: EntryPoint) -> None:
        distribution = _distribution(point)
        try:
            obj = point.load()
            checked = self._check(obj, name)
        # Importing a plugin runs someone else's module: any exception it raises (ImportError, a
        # SyntaxError, a RuntimeError of its own) is that plugin's failure, recorded and shown, never ours.
        except Exception as exc:
            self._failed[name] = PluginFailure(self.group, name, distribution, _one_line(exc))
            return
        self._loaded[name] = Plugin(name, distribution, point.value, checked)

    def load_all(self) -> dict[str, Plugin[T]]:
        """Every plugin that loads, by name (declared order); the others are in :meth:`failures`."""
        with self._lock:
            for name in self.names():
                if name not in self._loaded and name not in self._failed:
                    self._load(name, self._points()[name])
            return {n: self._loaded[n] for n in self.names() if n in self._loaded}

    def record_failure(self, name: str, exc: BaseException) -> None:
        """Record that the loaded plugin ``name`` failed when used (a tool factory that raised in a session);
        :meth:`failures` then lists it."""
        with self._lock:
            point = self._points().get(name)
            distribution = _distribution(point) if point is not None else ""
            self._failed[name] = PluginFailure(self.group, name, distribution, _one_line(exc))

    def failures(self) -> tuple[PluginFailure, ...]:
        """Declarations ignored for a name clash, then plugins that failed to load so far."""
        with self._lock:
            self._points()
            return (*self._shadowed, *(self._failed[n] for n in self.names() if n in self._failed))

    def forget(self) -> None:
        """Read the installed packages' declarations again on next use (after installing a package into a
        running process; the scan is shared, so the other groups see the new packages when they forget too)."""
        _rescan()
        with self._lock:
            self._declared, self._shadowed = None, []
            self._loaded.clear()
            self._failed.clear()
