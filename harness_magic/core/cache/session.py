"""SessionCache: the agent's working memory.

Contract:

* **Handles.** :meth:`SessionCache.put` stores a value under a handle derived
  from the preferred name (:func:`resolve_handle_name`: a valid identifier,
  ``name``, ``name_2``, ...) and returns it. Nothing is ever overwritten.
* **Snapshots and listings never hydrate.** A snapshot is computed once, at
  put time; :meth:`names`, :meth:`snapshot`, :meth:`location`,
  :meth:`entries` and :meth:`metadata` read only bookkeeping.
* **Hot set.** At most ``hot_count`` values and ``memory_budget_bytes``
  (estimated by :func:`estimate_nbytes`) stay in memory; the least recently
  used values beyond either bound spill to disk (:mod:`.spill`) and come back
  transparently on :meth:`get`/:meth:`view`. Recency is updated by
  :meth:`put`, :meth:`get`, :meth:`view`/:meth:`views` (interpreter
  injection) and :meth:`copy_to` (subagent input). The value just touched is
  never spilled by that same call, so a single value larger than the whole
  budget stays in memory while it is the most recent one.
* **Immutability.** Cached values are treated as immutable: :meth:`view`
  returns a copy-boundary value (:func:`boundary_copy`) that in-place
  mutation cannot turn back into the cache. :meth:`get` returns the cached
  object itself, for trusted harness code that only reads it. Because values
  never change, a spill file, once written, stays valid: spilling a value
  again after it was hydrated just drops the in-memory copy.
* **Faults.** A spill that the disk refuses (unwritable or full directory) or
  that no format can hold leaves the value in memory with a
  :class:`SpillWarning` (once per handle); nothing is lost, and that value
  stays in memory until retired. A spill file that was deleted or
  corrupted raises :class:`SpillReadError` naming the handle when the value is
  needed; the other handles keep working.
* **Files.** Spill files live in ``spill_dir`` (:mod:`.spill_dir`; default: a fresh temporary
  directory per cache) and are removed by :meth:`retire`, :meth:`clear` and
  :meth:`close` (also when the cache is garbage-collected or the process exits).
* **Checkpoints.** :meth:`save` writes every value, snapshot and provenance to
  a directory (manifest format and its checks: :mod:`.checkpoint`); :meth:`load` rebuilds a cache from it, lazily (values stay on
  disk until used). An engine handle (a lazy DuckDB relation) is saved as its
  definition only (connector name and query: no rows, no engine state);
  :meth:`load` re-binds it through a ``rebind`` callable (the connector's
  usual checks), else loads everything else and names what it left out
  (:attr:`not_restored`, a :class:`CheckpointWarning`).
* **Threads.** Every public method holds one re-entrant lock.
"""

from __future__ import annotations

import copy
import itertools
import os
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness_magic.core.cache.boundary import boundary_copy
from harness_magic.core.cache.checkpoint import (
    CHECKPOINT_MANIFEST,
    digest_algorithm,
    link_or_copy,
    read_manifest,
    validated_rows,
    write_manifest,
)
from harness_magic.core.cache.engine_value import checkpoint_definition, engine_of
from harness_magic.core.cache.errors import (
    CheckpointError,
    CheckpointWarning,
    SpillReadError,
    SpillWarning,
    UnknownHandleError,
)
from harness_magic.core.cache.guard import ColumnSources, EntryGuard
from harness_magic.core.cache.names import resolve_handle_name
from harness_magic.core.cache.sizing import estimate_nbytes
from harness_magic.core.cache.snapshot import make_snapshot
from harness_magic.core.cache.digest import SpillIntegrityError
from harness_magic.core.cache.spill import SpillRecord, read_value, write_value
from harness_magic.core.cache.frames import SpillUnsupported
from harness_magic.core.cache.spill_dir import SpillDir, check_private_directory
from harness_magic.core.confinement.heap import release_freed_memory

__all__ = [
    "SessionCache",
    "HandleInfo",
    "DEFAULT_HOT_COUNT",
    "DEFAULT_MEMORY_BUDGET_BYTES",
]

DEFAULT_HOT_COUNT = 10
"""Handles kept in memory: enough for a working set of derivations, small enough to bound memory."""
DEFAULT_MEMORY_BUDGET_BYTES = 2 * 1024**3
"""In-memory bytes the hot set may hold: comfortable on a laptop kernel next to the user's own data."""

_VERSIONS = itertools.count(1)
"""Process-wide serial for value versions (with the pid, unique across caches and forks)."""


def _new_version() -> str:
    return f"{os.getpid()}-{next(_VERSIONS)}"


_ABSENT: Any = object()
"""Marks an entry whose value is on disk only."""


@dataclass
class _Entry:
    name: str
    value: Any
    snapshot: dict[str, Any]
    size_bytes: int
    turn: int | None
    tool: str | None
    record: SpillRecord | None = None
    """File that holds the value exactly (kept after hydration: values never change)."""
    spillable: bool = True
    """False after a spill failed; the value then stays in memory until retired."""
    version: str = ""
    """Unique per stored value (handles are never overwritten): keys exports of this exact value."""
    engine: str | None = None
    """Engine holding the data of an engine value (see :mod:`.engine_value`): never spilled, not in the hot set."""

    @property
    def in_memory(self) -> bool:
        return self.value is not _ABSENT


@dataclass(frozen=True)
class HandleInfo:
    """One row of a handle listing (``%agent_vars``, logs). Never holds the payload."""

    name: str
    """The handle."""
    type: str
    """Snapshot type: ``dataframe``, ``series``, ``ndarray``, ``str``, ``dict``, ..."""
    shape: list[int] | None
    """Shape for frames and arrays, ``[length]`` for strings and containers, else None."""
    size_bytes: int
    """Estimated in-memory size (see :func:`estimate_nbytes`)."""
    location: str
    """``"memory"``, ``"disk"``, or the engine of an engine value (``"duckdb"``)."""
    storage: str | None
    """Format of its spill file (``parquet``, ``arrow``, ``npy``, ``json``) or None if never spilled."""
    turn: int | None
    """Turn that created it."""
    tool: str | None
    """Tool that created it."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SessionCache:
    """Named values the agent works with (see the module docstring for the contract)."""

    def __init__(
        self,
        *,
        hot_count: int = DEFAULT_HOT_COUNT,
        memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
        spill_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not isinstance(hot_count, int) or hot_count < 0:
            raise ValueError(f"hot_count must be a non-negative int, got {hot_count!r}")
        if not isinstance(memory_budget_bytes, int) or memory_budget_bytes < 0:
            raise ValueError(f"memory_budget_bytes must be a non-negative int, got {memory_budget_bytes!r}")
        self.hot_count = hot_count
        self.memory_budget_bytes = memory_budget_bytes
        self._entries: dict[str, _Entry] = {}
        self._recency: OrderedDict[str, None] = OrderedDict()  # least recent first
        self._dir = SpillDir(Path(spill_dir) if spill_dir is not None else None)
        if spill_dir is not None and os.path.lexists(spill_dir):
            check_private_directory(Path(spill_dir))  # refuse a foreign or shared directory now
        self._serial = 0
        self.not_restored: dict[str, str] = {}
        """After :meth:`load`: engine handles of the checkpoint that could not be re-bound -> why."""
        self._lock = threading.RLock()
        self._finalizer = weakref.finalize(self, self._dir.cleanup)
        self._guard: EntryGuard | None = None

    @property
    def guard(self) -> EntryGuard | None:
        """The :class:`~.guard.EntryGuard` every stored value passes (None: values are stored as given)."""
        return self._guard

    def set_guard(self, guard: EntryGuard | None) -> None:
        """Install (or remove) the entry guard; values already stored are not revisited."""
        self._guard = guard

    def agent_rows(self, name: str, frame: Any) -> Any:
        """Rows engine value ``name`` produced, in their agent-side form (through the guard)."""
        return frame if self._guard is None else self._guard.conceal_rows(name, frame)

    def user_value(self, name: str | None, value: Any) -> Any:
        """``value`` read from ``name`` (or derived from cached values) with real values restored for the user."""
        return value if self._guard is None else self._guard.reveal(name, value)

    # ------------------------------------------------------------------ handles

    def put(self, preferred_name: str, value: Any, *, turn: int | None = None, tool: str | None = None,
            version: str | None = None, sources: ColumnSources | None = None, derived: bool = False) -> str:
        """Store ``value``; return its handle (``preferred_name`` made valid and unique).

        With a guard, what is stored is ``guard.conceal(handle, value, sources)``
        (``sources``: the query lineage of a connector's result, see :mod:`.guard`; ``derived``: computed on the
        agent's side, e.g. an interpreter save).

        ``version`` is only for an exact copy of a value another cache holds
        (a subagent's inputs, :meth:`copy_to`): the copy keeps that value's
        token from :meth:`versions`, so what was exported for it (the sandbox's
        input files) is reused rather than written again.
        """
        if version is not None and (not isinstance(version, str) or not version):
            raise ValueError(f"version must be a non-empty token from SessionCache.versions(), got {version!r}")
        with self._lock:
            name = resolve_handle_name(preferred_name, self._entries)
            engine = engine_of(value)
            head_filter = None
            if self._guard is not None:
                guard = self._guard
                value = guard.conceal(name, value, sources, derived=derived)
                head_filter = (lambda head: guard.conceal_rows(name, head)) if engine is not None else None
            self._entries[name] = _Entry(name, value, make_snapshot(value, head_filter), estimate_nbytes(value),
                                         turn, tool, version=version or _new_version(), spillable=engine is None,
                                         engine=engine)
            self._touch(name)
            self._enforce(pinned={name})
            return name

    def get(self, name: str) -> Any:
        """The cached object itself (hydrated if on disk; treat as read-only)."""
        with self._lock:
            entry = self._require(name)
            self._make_room([entry])
            value = self._hydrate(entry)
            self._touch(name)
            self._enforce(pinned={name})
            return value

    def view(self, name: str) -> Any:
        """A copy-boundary value for the interpreter or a subagent: mutating it cannot change the cache."""
        return self.views([name])[name]

    def views(self, names: Iterable[str]) -> dict[str, Any]:
        """Copy-boundary values of several handles, hydrated together (none spills another)."""
        with self._lock:
            wanted = list(dict.fromkeys(names))
            entries = [self._require(n) for n in wanted]
            self._make_room(entries)
            values = {e.name: self._hydrate(e) for e in entries}
            for n in wanted:
                self._touch(n)
            self._enforce(pinned=set(wanted))
            return {n: boundary_copy(v, handle=n) for n, v in values.items()}

    def copy_to(
        self,
        target: SessionCache,
        names: Iterable[str],
        *,
        turn: int | None = None,
        tool: str | None = None,
    ) -> dict[str, str]:
        """Put boundary copies of ``names`` into ``target``; map each to its handle there.

        Used for subagent inputs (and publishing results back): the handles
        count as used here, and collisions in ``target`` are suffixed, never
        overwritten.
        """
        values = self.views(names)
        with self._lock:
            tokens = {n: self._entries[n].version for n in values}
        return {n: target.put(n, v, turn=turn, tool=tool, version=tokens[n]) for n, v in values.items()}

    def snapshot(self, name: str) -> dict[str, Any]:
        """The snapshot made at put time (a copy; never hydrates)."""
        with self._lock:
            snapshot: dict[str, Any] = _copy_snapshot(self._require(name).snapshot)
            return snapshot

    def names(self) -> list[str]:
        """Handles in creation order (never hydrates)."""
        with self._lock:
            return list(self._entries)

    def versions(self) -> dict[str, str]:
        """Handle -> a token unique to the value it holds (never hydrates).

        A token never comes back once its handle is retired, so a consumer
        that exported a value (the sandbox's input files) can key the export
        by it and drop exports whose token is no longer listed.
        """
        with self._lock:
            return {name: entry.version for name, entry in self._entries.items()}

    def location(self, name: str) -> str:
        """``"memory"``, ``"disk"``, or the engine holding an engine value (e.g. ``"duckdb"``); never hydrates."""
        with self._lock:
            entry = self._require(name)
            return entry.engine or ("memory" if entry.in_memory else "disk")

    def retire(self, name: str) -> None:
        """Forget a handle explicitly: its value and spill file are dropped."""
        with self._lock:
            entry = self._require(name)
            del self._entries[name]
            self._recency.pop(name, None)
            if entry.record is not None:
                self._dir.forget(entry.record.path)
            if self._guard is not None:
                self._guard.forget(name)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # ------------------------------------------------------------------ listings

    def entries(self) -> list[HandleInfo]:
        """One :class:`HandleInfo` per handle, in creation order (never hydrates)."""
        with self._lock:
            return [self._info(e) for e in self._entries.values()]

    def metadata(self) -> list[dict[str, Any]]:
        """Per-handle metadata for logs, JSON-serialisable: never payloads."""
        return [info.as_dict() for info in self.entries()]

    def usage(self) -> dict[str, int]:
        """Counts and bytes of the hot set against its bounds."""
        with self._lock:
            hot = [e for e in self._entries.values() if e.in_memory and e.engine is None]
            return {
                "handles": len(self._entries),
                "in_memory": len(hot),
                "on_disk": sum(1 for e in self._entries.values() if not e.in_memory),
                "in_engine": sum(1 for e in self._entries.values() if e.engine is not None),
                "memory_bytes": sum(e.size_bytes for e in hot),
                "hot_count": self.hot_count,
                "memory_budget_bytes": self.memory_budget_bytes,
            }

    # ------------------------------------------------------------------ lifecycle

    def clear(self) -> None:
        """Drop every handle and its spill file."""
        with self._lock:
            for name in list(self._entries):
                self.retire(name)

    def close(self) -> None:
        """Drop every handle and remove the spill directory (if the cache created it)."""
        with self._lock:
            self.clear()
            self._dir.cleanup()

    def __enter__(self) -> SessionCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ checkpoints

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write every handle (value, snapshot, provenance) to ``directory``; return the manifest path.

        All or nothing: if any value cannot be written, :class:`CheckpointError`
        names them and no manifest is written. Spilled values are hard-linked
        (or copied) from their spill files, so nothing is hydrated. Engine
        handles are written as their definition (see :mod:`.engine_value`),
        in the cache's order, so a handle comes after the handles it uses.
        """
        with self._lock:
            root = Path(directory)
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            rows, failures = [], []
            for entry in self._entries.values():
                if entry.engine is not None:
                    try:
                        definition = checkpoint_definition(entry.value)
                    # broad: an engine handle's definition is read from the engine; its failure is named in the checkpoint
                    except Exception as exc:
                        definition, why = None, f"{type(exc).__name__}: {exc}"
                    else:
                        why = "it has no checkpoint definition"
                    if definition is None:
                        failures.append(f"{entry.name} (a {entry.engine} handle: {why})")
                        continue
                    rows.append({"name": entry.name, "engine": entry.engine, "definition": definition,
                                 "snapshot": entry.snapshot, "size_bytes": entry.size_bytes,
                                 "turn": entry.turn, "tool": entry.tool})
                    continue
                try:
                    record = self._checkpoint_file(entry, root)
                except (OSError, SpillUnsupported, SpillReadError) as exc:
                    failures.append(f"{entry.name} ({type(exc).__name__}: {exc})")
                    continue
                rows.append({
                    "name": entry.name, "file": record.path.name, "format": record.format,
                    record.algorithm: record.digest,
                    "snapshot": entry.snapshot, "size_bytes": entry.size_bytes,
                    "turn": entry.turn, "tool": entry.tool,
                })
            if failures:
                raise CheckpointError(f"checkpoint to {root} failed for: {'; '.join(failures)}")
            return write_manifest(root, hot_count=self.hot_count, memory_budget_bytes=self.memory_budget_bytes,
                                  recency=list(self._recency), rows=rows)

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike[str],
        *,
        hot_count: int | None = None,
        memory_budget_bytes: int | None = None,
        spill_dir: str | os.PathLike[str] | None = None,
        rebind: Any = None,
    ) -> SessionCache:
        """A cache rebuilt from a :meth:`save` checkpoint; values stay on disk until used.

        Files are hard-linked (or copied) into the new cache's spill directory,
        so the checkpoint stays independent of the cache. Raises
        :class:`CheckpointError` for a missing or foreign manifest or a missing file.

        Engine handles are re-bound after every file-backed handle is in
        place, in the checkpoint's order: ``rebind(engine, definition, cache)``
        returns the value again (e.g.
        :func:`harness_magic.core.execution.connectors.duckdb.connector.lazy_rebinder`,
        which runs the saved query through the connector's usual
        classification, exactly as a model's call). A definition is data: it
        is never decoded into code, and one that ``rebind`` refuses (or no
        ``rebind``) leaves that handle out, named with the reason in
        :attr:`not_restored` and one :class:`CheckpointWarning`; the rest loads.
        """
        root = Path(directory)
        manifest = read_manifest(root)
        rows = validated_rows(root, manifest)
        engine_rows = [row for row in rows if "engine" in row]
        rows = [row for row in rows if "engine" not in row]
        cache = cls(
            hot_count=manifest["hot_count"] if hot_count is None else hot_count,
            memory_budget_bytes=manifest["memory_budget_bytes"] if memory_budget_bytes is None
            else memory_budget_bytes,
            spill_dir=spill_dir,
        )
        for row in rows:
            source = root / row["file"]
            target = Path(f"{cache._new_stem(row['name'])}{source.suffix}")
            link_or_copy(source, target)
            cache._dir.files.add(target)
            algorithm = digest_algorithm(row)
            record = SpillRecord(target, row["format"], row[algorithm], algorithm)
            cache._entries[row["name"]] = _Entry(row["name"], _ABSENT, row["snapshot"], row["size_bytes"],
                                                 row["turn"], row["tool"], record=record, version=_new_version())
        recency = manifest.get("recency", [])
        for name in recency if isinstance(recency, list) else []:
            if isinstance(name, str) and name in cache._entries:
                cache._recency[name] = None
        for row in engine_rows:
            cache._rebind(row, rebind)
        for name in list(cache._recency):
            if name not in cache._entries:
                del cache._recency[name]
        for name in cache._entries:
            cache._recency.setdefault(name, None)
        if cache.not_restored:
            warnings.warn(CheckpointWarning(
                f"checkpoint {root}: {len(cache.not_restored)} engine handle(s) not restored: "
                + "; ".join(f"{n} ({why})" for n, why in cache.not_restored.items())), stacklevel=2)
        return cache

    def _rebind(self, row: dict[str, Any], rebind: Any) -> None:
        """Re-create one engine handle from its definition through ``rebind``; a refusal is recorded, not raised."""
        name, engine = row["name"], row["engine"]
        if rebind is None:
            self.not_restored[name] = (f"a {engine} handle needs its connector to be re-bound: load with "
                                       f"rebind=... (e.g. lazy_rebinder(connectors))")
            return
        try:
            value = rebind(engine, dict(row["definition"]), self)
        except Exception as exc:  # the connector's refusal or error, as it words it
            self.not_restored[name] = f"{type(exc).__name__}: {str(exc).strip()[:500]}"
            return
        if engine_of(value) != engine:
            self.not_restored[name] = f"re-binding gave a {type(value).__name__}, not a {engine} handle"
            return
        self._entries[name] = _Entry(name, value, make_snapshot(value), estimate_nbytes(value), row.get("turn"),
                                     row.get("tool"), version=_new_version(), spillable=False, engine=engine)

    # ------------------------------------------------------------------ internals

    def _require(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            known = ", ".join(self._entries) or "(none)"
            raise UnknownHandleError(f"no handle {name!r}; known handles: {known}", handle=str(name)) from None

    def _touch(self, name: str) -> None:
        self._recency[name] = None
        self._recency.move_to_end(name)

    def _info(self, entry: _Entry) -> HandleInfo:
        snap = entry.snapshot
        shape = snap.get("shape")
        if shape is None and isinstance(snap.get("length"), int):
            shape = [snap["length"]]
        return HandleInfo(
            name=entry.name, type=str(snap.get("type")), shape=shape, size_bytes=entry.size_bytes,
            location=entry.engine or ("memory" if entry.in_memory else "disk"),
            storage=entry.record.format if entry.record else None, turn=entry.turn, tool=entry.tool,
        )

    def _new_stem(self, name: str) -> Path:
        self._serial += 1
        return self._dir.ensure() / f"{name}-{self._serial}"

    def _make_room(self, incoming: list[_Entry]) -> None:
        """Before hydrating ``incoming``, spill what their arrival would push out (bounds the peak)."""
        absent = [e for e in incoming if not e.in_memory]
        if absent:
            self._enforce(pinned={e.name for e in incoming}, extra_count=len(absent),
                          extra_bytes=sum(e.size_bytes for e in absent))

    def _enforce(self, pinned: set[str], extra_count: int = 0, extra_bytes: int = 0) -> None:
        """Spill least-recently-used values until the hot set (plus values about to arrive) fits both bounds."""
        hot = [self._entries[n] for n in self._recency if self._entries[n].in_memory and self._entries[n].engine is None]
        count, total = len(hot) + extra_count, sum(e.size_bytes for e in hot) + extra_bytes
        for entry in hot:  # least recent first
            if count <= self.hot_count and total <= self.memory_budget_bytes:
                return
            if entry.name in pinned or not entry.spillable:
                continue
            if self._spill(entry):
                count, total = count - 1, total - entry.size_bytes

    def _spill(self, entry: _Entry) -> bool:
        """Move one value to disk; on failure warn, keep it in memory and return False."""
        if entry.record is None:
            try:
                entry.record = write_value(entry.value, self._new_stem(entry.name))
            except (OSError, SpillUnsupported) as exc:
                entry.spillable = False
                reason = "the disk refused it" if isinstance(exc, OSError) else "no format can hold it"
                warnings.warn(
                    f"handle {entry.name!r} could not be spilled to disk ({reason}: {type(exc).__name__}: {exc}); "
                    "it stays in memory and nothing is lost",
                    SpillWarning,
                    stacklevel=4,
                )
                return False
            self._dir.files.add(entry.record.path)
        entry.value = _ABSENT
        release_freed_memory()  # resident memory follows the budget, not the allocator's high-water mark
        return True

    def _hydrate(self, entry: _Entry) -> Any:
        if entry.in_memory:
            return entry.value
        assert entry.record is not None
        try:
            value = read_value(entry.record)
        except SpillIntegrityError as exc:
            raise SpillReadError(
                f"handle {entry.name!r}: its file on disk was changed since it was written ({exc}); "
                "nothing was read from it: retire it or recompute it",
                handle=entry.name,
            ) from exc
        # broad: pyarrow/pandas readers raise many types for a corrupt file; each becomes SpillReadError naming the handle
        except Exception as exc:
            raise SpillReadError(
                f"handle {entry.name!r} could not be read back from disk "
                f"({type(exc).__name__}: {exc}); its snapshot is still listed: retire it or recompute it",
                handle=entry.name,
            ) from exc
        entry.value = value
        return value

    def _checkpoint_file(self, entry: _Entry, root: Path) -> SpillRecord:
        if entry.record is not None:
            target = root / f"{entry.name}{entry.record.path.suffix}"
            if not entry.record.path.is_file():
                raise SpillReadError(f"spill file of {entry.name!r} is missing", handle=entry.name)
            if target.exists() and target.resolve() == entry.record.path.resolve():
                return entry.record if target == entry.record.path else \
                    replace(entry.record, path=target)
            link_or_copy(entry.record.path, target)
            return replace(entry.record, path=target)
        for stale in root.glob(f"{entry.name}.*"):
            if stale.name != CHECKPOINT_MANIFEST:
                stale.unlink(missing_ok=True)
        return write_value(entry.value, root / entry.name)


_IMMUTABLE_LEAVES = (str, int, float, bool, type(None))
"""What a snapshot's leaves are (JSON scalars): shared, never copied."""


def _copy_snapshot(value: Any) -> Any:
    """Deep copy of a snapshot: dicts, lists and tuples rebuilt, JSON scalars shared.

    Same result as ``copy.deepcopy`` for the JSON-shaped values snapshots are,
    at a fraction of its cost; any other object is handed to ``copy.deepcopy``.
    """
    if isinstance(value, _IMMUTABLE_LEAVES):
        return value
    if type(value) is dict:
        return {k: _copy_snapshot(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy_snapshot(v) for v in value]
    if type(value) is tuple:
        return tuple(_copy_snapshot(v) for v in value)
    return copy.deepcopy(value)


