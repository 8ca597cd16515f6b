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
* **Files.** Spill files live in ``spill_dir`` (default: a fresh temporary
  directory per cache) and are removed by :meth:`retire`, :meth:`clear` and
  :meth:`close` (also when the cache is garbage-collected or the process exits).
* **Checkpoints.** :meth:`save` writes every value, snapshot and provenance to
  a directory; :meth:`load` rebuilds a cache from it, lazily (values stay on
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
import json
import os
import shutil
import tempfile
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness_magic.core.cache.boundary import boundary_copy
from harness_magic.core.cache.engine_value import DEFINITION_MAX_CHARS, checkpoint_definition, engine_of
from harness_magic.core.cache.errors import (
    CheckpointError,
    CheckpointWarning,
    SpillReadError,
    SpillWarning,
    UnknownHandleError,
)
from harness_magic.core.cache.names import resolve_handle_name, sanitize_identifier
from harness_magic.core.cache.sizing import estimate_nbytes
from harness_magic.core.cache.snapshot import make_snapshot
from harness_magic.core.cache.spill import (
    DIGEST_ALGORITHMS,
    DIGEST_SIZE,
    SPILL_FORMATS,
    SpillIntegrityError,
    SpillRecord,
    SpillUnsupported,
    format_for_path,
    read_value,
    release_freed_memory,
    write_value,
)

__all__ = [
    "SessionCache",
    "HandleInfo",
    "DEFAULT_HOT_COUNT",
    "DEFAULT_MEMORY_BUDGET_BYTES",
    "CHECKPOINT_MANIFEST",
    "CHECKPOINT_VERSION",
    "READABLE_CHECKPOINT_VERSIONS",
]

DEFAULT_HOT_COUNT = 10
"""Handles kept in memory: enough for a working set of derivations, small enough to bound memory."""
DEFAULT_MEMORY_BUDGET_BYTES = 2 * 1024**3
"""In-memory bytes the hot set may hold: comfortable on a laptop kernel next to the user's own data."""
CHECKPOINT_MANIFEST = "manifest.json"
"""File in a checkpoint directory listing handles, formats, snapshots and provenance."""
CHECKPOINT_VERSION = 4
"""Bumped when the manifest layout changes; :meth:`SessionCache.load` refuses versions outside
:data:`READABLE_CHECKPOINT_VERSIONS`.

Version 2: no pickle format, JSON metadata in every file, a BLAKE2b digest per file (``"blake2b"``).
Version 3: a SHA-256 digest per file (``"sha256"``), hashed 2.5x faster on CPUs with SHA extensions.
Version 4: striped SHA-256 digests (``"sha256-stripes"``, checked on parallel threads while the file is
read); frames are Arrow IPC files. A row carried over from an older checkpoint keeps its digest."""
READABLE_CHECKPOINT_VERSIONS = (2, 3, 4)
"""Versions :meth:`SessionCache.load` reads: each row is checked by the digest it names (``"blake2b"`` in
version 2, ``"sha256"`` in version 3)."""
MANIFEST_MAX_BYTES = 64 * 1024**2
"""A manifest larger than this is refused: snapshots are small, so it is not a real checkpoint."""
_DIGEST_CHARS = frozenset("0123456789abcdef")

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


class _SpillDir:
    """The directory and files a cache owns; cleanup runs at close, GC or exit."""

    def __init__(self, path: Path | None) -> None:
        self.requested = path
        self.path: Path | None = None
        self.created = False
        self.files: set[Path] = set()

    def ensure(self) -> Path:
        if self.path is None:
            if self.requested is None:
                self.path, self.created = Path(tempfile.mkdtemp(prefix="harness_magic_cache_")), True
            else:
                check_private_directory(self.requested)
                self.path = self.requested
        return self.path

    def forget(self, path: Path) -> None:
        self.files.discard(path)
        path.unlink(missing_ok=True)

    def cleanup(self) -> None:
        for path in list(self.files):
            try:
                self.forget(path)
            except OSError:
                pass
        if self.created and self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path, self.created = None, False


def check_private_directory(path: Path) -> None:
    """Create ``path`` with mode 0700, or accept an existing one only if it is private.

    An existing directory must be a real directory (not a link), owned by the
    current user, and not writable by group or others: files another local
    user can plant there would otherwise be read back as cached values.
    Raises ``PermissionError`` naming the directory and what is wrong.
    """
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.mkdir(path, 0o700)
        return
    info = os.lstat(path)
    import stat

    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"spill_dir {str(path)!r} is not a plain directory (a link or a file); "
                              "use a directory you own with mode 0700, or leave spill_dir unset")
    if info.st_uid != os.geteuid():
        raise PermissionError(f"spill_dir {str(path)!r} is owned by uid {info.st_uid}, not by you "
                              f"(uid {os.geteuid()}); use a directory you own with mode 0700, or leave spill_dir unset")
    if info.st_mode & 0o022:
        raise PermissionError(f"spill_dir {str(path)!r} is writable by group or others "
                              f"(mode {stat.S_IMODE(info.st_mode):o}); chmod it to 0700, or leave spill_dir unset")


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
        self._dir = _SpillDir(Path(spill_dir) if spill_dir is not None else None)
        if spill_dir is not None and os.path.lexists(spill_dir):
            check_private_directory(Path(spill_dir))  # refuse a foreign or shared directory now
        self._serial = 0
        self.not_restored: dict[str, str] = {}
        """After :meth:`load`: engine handles of the checkpoint that could not be re-bound -> why."""
        self._lock = threading.RLock()
        self._finalizer = weakref.finalize(self, self._dir.cleanup)

    # ------------------------------------------------------------------ handles

    def put(self, preferred_name: str, value: Any, *, turn: int | None = None, tool: str | None = None,
            version: str | None = None) -> str:
        """Store ``value``; return its handle (``preferred_name`` made valid and unique).

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
            self._entries[name] = _Entry(name, value, make_snapshot(value), estimate_nbytes(value), turn, tool,
                                         version=version or _new_version(), spillable=engine is None, engine=engine)
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
            return _copy_snapshot(self._require(name).snapshot)

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
            manifest = {
                "kind": "harness_magic.session_cache", "version": CHECKPOINT_VERSION,
                "hot_count": self.hot_count, "memory_budget_bytes": self.memory_budget_bytes,
                "recency": list(self._recency), "entries": rows,
            }
            path = root / CHECKPOINT_MANIFEST
            tmp = root / f"{CHECKPOINT_MANIFEST}.tmp"
            tmp.write_text(json.dumps(manifest, indent=1, allow_nan=False), encoding="utf-8")
            os.replace(tmp, path)
            return path

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
        :func:`harness_magic.core.execution.connectors.duckdb_connector.lazy_rebinder`,
        which runs the saved query through the connector's usual
        classification, exactly as a model's call). A definition is data: it
        is never decoded into code, and one that ``rebind`` refuses (or no
        ``rebind``) leaves that handle out, named with the reason in
        :attr:`not_restored` and one :class:`CheckpointWarning`; the rest loads.
        """
        root = Path(directory)
        manifest = _read_manifest(root)
        rows = _validated_rows(root, manifest)
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
            _link_or_copy(source, target)
            cache._dir.files.add(target)
            algorithm = _digest_algorithm(row)
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
            _link_or_copy(entry.record.path, target)
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


def _read_manifest(root: Path) -> dict[str, Any]:
    path = root / CHECKPOINT_MANIFEST
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MANIFEST_MAX_BYTES + 1)
        if len(data) > MANIFEST_MAX_BYTES:
            raise ValueError(f"over {MANIFEST_MAX_BYTES} bytes")
        manifest = json.loads(data.decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"no readable checkpoint manifest in {root}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("kind") != "harness_magic.session_cache" \
            or manifest.get("version") not in READABLE_CHECKPOINT_VERSIONS \
            or not isinstance(manifest.get("entries"), list):
        *rest, last = (str(v) for v in READABLE_CHECKPOINT_VERSIONS)
        versions = f"{', '.join(rest)} or {last}" if rest else last
        raise CheckpointError(f"{path} is not a version {versions} cache checkpoint")
    for key in ("hot_count", "memory_budget_bytes"):
        if type(manifest.get(key)) is not int or manifest[key] < 0:
            raise CheckpointError(f"{path}: {key} must be a non-negative integer, got {manifest.get(key)!r}")
    return manifest


def _digest_algorithm(row: dict[str, Any]) -> str:
    """The digest a manifest row carries: the first of :data:`DIGEST_ALGORITHMS` it names (striped SHA-256 first)."""
    return next((algorithm for algorithm in DIGEST_ALGORITHMS if algorithm in row), DIGEST_ALGORITHMS[0])


def _validated_rows(root: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every manifest entry checked before any file is touched: an error names the first bad entry.

    Names must be valid handles; files plain basenames of regular files (no
    links) inside ``root`` whose suffix matches a known format; each with a
    striped SHA-256 (version 3: SHA-256; version 2: BLAKE2b) digest. Snapshots must be JSON objects.
    """
    import stat

    rows, seen = [], set()
    for position, row in enumerate(manifest["entries"]):
        label = f"entry {position}"
        if not isinstance(row, dict):
            raise CheckpointError(f"checkpoint {root}: {label} is not an object")
        name = row.get("name")
        if not isinstance(name, str) or sanitize_identifier(name) != name or name in seen:
            raise CheckpointError(f"checkpoint {root}: {label} has name {name!r}, which is not a valid, unique "
                                  "handle (letters, digits and _ only)", handle=str(name))
        label = f"handle {name!r}"
        if "engine" in row:
            rows.append(_validated_engine_row(root, row, label))
            seen.add(name)
            continue
        file = row.get("file")
        if not isinstance(file, str) or not file or os.path.basename(file) != file or file in (".", "..") \
                or "\x00" in file or os.sep in file:
            raise CheckpointError(f"checkpoint {root}: {label} names file {file!r}; only plain file names inside "
                                  "the checkpoint directory are allowed", handle=name)
        fmt = row.get("format")
        if fmt not in SPILL_FORMATS:
            raise CheckpointError(f"checkpoint {root}: {label} has format {fmt!r}; allowed: {', '.join(SPILL_FORMATS)}"
                                  " (pickle files are never read)", handle=name)
        try:
            if format_for_path(Path(file)) != fmt:
                raise ValueError
        except ValueError:
            raise CheckpointError(f"checkpoint {root}: {label}: file {file!r} does not match format {fmt}",
                                  handle=name) from None
        digest = row.get(_digest_algorithm(row))
        if not isinstance(digest, str) or len(digest) != 2 * DIGEST_SIZE or not set(digest) <= _DIGEST_CHARS:
            raise CheckpointError(f"checkpoint {root}: {label} lacks a digest ({' or '.join(DIGEST_ALGORITHMS)}: "
                                  f"{2 * DIGEST_SIZE} hex characters)", handle=name)
        try:
            info = os.lstat(root / file)
        except OSError:
            raise CheckpointError(f"checkpoint {root} lacks the file of {label} ({file})", handle=name) from None
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"checkpoint {root}: the file of {label} ({file}) is a link or not a plain file",
                                  handle=name)
        if not isinstance(row.get("snapshot"), dict) or type(row.get("size_bytes")) is not int:
            raise CheckpointError(f"checkpoint {root}: {label} has a malformed snapshot or size", handle=name)
        for key in ("turn", "tool"):
            if row.get(key) is not None and type(row[key]) is not (int if key == "turn" else str):
                raise CheckpointError(f"checkpoint {root}: {label} has a malformed {key}", handle=name)
        seen.add(name)
        rows.append(row)
    return rows


_ENGINE_ROW_KEYS = frozenset({"name", "engine", "definition", "snapshot", "size_bytes", "turn", "tool"})


def _validated_engine_row(root: Path, row: dict[str, Any], label: str) -> dict[str, Any]:
    """An engine handle's manifest entry: a definition of short strings and nothing else (no file, no code)."""
    extra = set(row) - _ENGINE_ROW_KEYS
    if extra:
        raise CheckpointError(f"checkpoint {root}: {label} is an engine handle with unexpected fields "
                              f"{sorted(extra)!r}", handle=row["name"])
    engine, definition = row.get("engine"), row.get("definition")
    if not isinstance(engine, str) or sanitize_identifier(engine) != engine:
        raise CheckpointError(f"checkpoint {root}: {label} names engine {engine!r}; an identifier is required",
                              handle=row["name"])
    if not isinstance(definition, dict) or not definition or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= DEFINITION_MAX_CHARS
            for k, v in definition.items()):
        raise CheckpointError(f"checkpoint {root}: {label} has a malformed definition (an object of strings up to "
                              f"{DEFINITION_MAX_CHARS:,} characters is required)", handle=row["name"])
    if not isinstance(row.get("snapshot"), dict) or type(row.get("size_bytes")) is not int:
        raise CheckpointError(f"checkpoint {root}: {label} has a malformed snapshot or size", handle=row["name"])
    for key in ("turn", "tool"):
        if row.get(key) is not None and type(row[key]) is not (int if key == "turn" else str):
            raise CheckpointError(f"checkpoint {root}: {label} has a malformed {key}", handle=row["name"])
    return row


def _link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (O(1); files are never modified), else copy it."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copyfile(source, target, follow_symlinks=False)
