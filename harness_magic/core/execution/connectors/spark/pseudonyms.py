"""The Spark connector's configured files as the agent's side may see them: pseudonymised copies the kernel writes.

Spark SQL has no keyed hash, and a UDF holding the session's key would put the key on the server, where the
model's SQL could read it (a plan's text, ``SHOW CREATE``). So the key never leaves the kernel. Contract of
:class:`PseudonymCopies` (one per :class:`~.engine.SparkEngine`), used when the cache a call runs for has an
:class:`~harness_magic.core.cache.EntryGuard` (every session's does):

* **The view reads a copy that holds what the cache would hold.** For each configured file whose columns the
  guard serves concealed (:meth:`EntryGuard.served_column`: the same configured or detected class and policy
  as a frame entering the cache), the kernel reads the file with pyarrow in one pass of
  :data:`COPY_BATCH_ROWS`-row batches and writes a Parquet copy into a private directory (mode 0700) where:

  - ``pii`` / ``restricted`` (and text classed ``financial``) under ``mask``: each value is replaced by exactly
    the pseudonym the cache issues for it (:meth:`EntryGuard.engine_pseudonyms`, which keeps each
    real <-> pseudonym pair in the kernel, so a pull restores it); distinct values of a batch are hashed once;
  - ``deny`` (``restricted`` by default): ``[denied CLASS]``, missing stays missing: no value is there at all;
  - numbers classed ``financial``, ``allow`` and unclassified columns: as they are (sums stay exact).

  The Spark view is registered over that copy instead of the original, so ``WHERE email = '<pseudonym>'``,
  joins, ``GROUP BY`` and ``COUNT(DISTINCT ...)`` work on pseudonyms, and ``substr(email, 1, 1)`` sees a
  pseudonym's character. A file whose columns are all served real keeps its original view.
* **Made once.** A copy is kept while the source's fingerprint (each file's path, size, modification time and
  inode) and the treatment of its columns are unchanged; a changed file, glossary or policy makes a new copy
  at the next call (the old one is removed).
* **Fails closed.** A local file the kernel cannot read or copy is not served at all while a guard is set:
  its view is dropped and a query naming it is refused with the reason (:attr:`PseudonymCopies.problems`).
  A file that is not on the kernel's file system (``s3://...``) keeps its original view: its rows are
  concealed when they enter the cache, and a pseudonym the model compares against is widened to its real
  value (:meth:`EntryGuard.query_for_engine`); ``docs/guarantees.md`` says so.
* **Outside a session** (no guard) every view reads its original file.
"""

from __future__ import annotations

import glob as _glob
import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Mapping

from harness_magic.core.cache.guard import EntryGuard, ServedColumn
from harness_magic.core.confinement.owned_dirs import owned_tempdir
from harness_magic.core.execution.connectors.served import ServedPlan, served_plan
from harness_magic.core.text.masking import denied_text
from harness_magic.core.text.sensitivity import DETECT_SAMPLE_VALUES

__all__ = ["PseudonymCopies", "COPY_BATCH_ROWS", "CopyState"]

COPY_BATCH_ROWS = 65_536
"""Rows read, pseudonymised and written per batch: one pass over the file in bounded memory."""
_ARROW_FORMATS = {"parquet": "parquet", "csv": "csv", "json": "json", "orc": "orc"}
"""Spark reader format -> pyarrow dataset format (Spark's ``json`` reads JSON lines, as pyarrow's does)."""
_HIDDEN = (".", "_")
"""Spark and pyarrow skip files and directories whose names start with these (``_SUCCESS``, ``.crc``)."""

CopyState = tuple[tuple[Any, ...], ServedPlan, str | None]
"""What a view shows now: (source fingerprint, plan, copy path or None for the original file)."""


def local_path(path: str) -> str | None:
    """``path`` on the kernel's file system (``file:`` stripped), None for another scheme (``s3://``)."""
    if path.startswith("file:"):
        path = path[len("file:"):]
        while path.startswith("//"):
            path = path[1:]
        return path
    return None if "://" in path else path


class PseudonymCopies:
    """The pseudonymised copies of one engine's file views (see module doc)."""

    def __init__(self, files: Mapping[str, tuple[str, str]]) -> None:
        self._files = dict(files)
        """View -> (Spark reader format, path as configured)."""
        self._state: dict[str, CopyState] = {}
        self._samples: dict[tuple[str, tuple[Any, ...]], tuple[Any, dict[str, list[Any]]]] = {}
        """(view, fingerprint) -> (Arrow schema, column -> its first values for kind detection), read once."""
        self._owned: str | None = None
        """A private directory this object created (removed by :meth:`close`)."""
        self.problems: dict[str, str] = {}
        """View -> why it cannot be served now (its view is dropped; a query naming it is refused)."""

    def refresh(self, guard: EntryGuard | None, directory: str | None) -> dict[str, str | None]:
        """The views whose source must change now: view -> the copy to read, or None for the original file.

        ``directory``: where copies go (a private directory the Spark server can read; None: one this object
        creates). A view that cannot be served is named in :attr:`problems` and mapped to ``""`` (drop it)."""
        changed: dict[str, str | None] = {}
        for view, (kind, path) in self._files.items():
            local = local_path(path)
            if guard is None or local is None:
                state: CopyState = ((), (), None)
                self.problems.pop(view, None)
            else:
                try:
                    state = self._served(view, kind, local, guard, directory)
                    self.problems.pop(view, None)
                except (OSError, ValueError, TypeError) as exc:  # pyarrow raises ArrowInvalid (a ValueError)
                    self.problems[view] = f"its file cannot be copied with pseudonyms: {type(exc).__name__}: {exc}"
                    state = ((), (), "")
            old = self._state.get(view)
            if old is None and state[2] is None:
                self._state[view] = state  # registered over the original when the session started
                continue
            if old is not None and old[2] == state[2]:
                self._state[view] = state
                continue
            self._state[view] = state
            changed[view] = state[2]
            if old is not None and old[2] and old[2] != state[2]:
                _remove(old[2])
        return changed

    def _served(self, view: str, kind: str, path: str, guard: EntryGuard, directory: str | None) -> CopyState:
        fmt = _ARROW_FORMATS.get(kind)
        if fmt is None:
            raise ValueError(f"a {kind} file is not copied by the kernel (supported: {', '.join(_ARROW_FORMATS)})")
        members = _members(path)
        fingerprint = tuple(_fingerprint(m) for m in members)
        plan = self._plan(view, fingerprint, lambda: _dataset(members, fmt, path), guard)
        old = self._state.get(view)
        if old is not None and old[0] == fingerprint and old[1] == plan and (old[2] or not plan):
            return old
        if not plan:
            return fingerprint, plan, None
        target = os.path.join(self._directory(directory), f"{view}-{_digest(fingerprint, plan)}.parquet")
        _write_copy(_dataset(members, fmt, path), dict(plan), guard, target)
        return fingerprint, plan, target

    def _plan(self, view: str, fingerprint: tuple[Any, ...], open_dataset: Callable[[], Any],
              guard: EntryGuard) -> ServedPlan:
        known = self._samples.get((view, fingerprint))
        if known is None:  # the file is opened only when it changed: a query's refresh costs its stat calls
            dataset = open_dataset()
            known = dataset.schema, dataset.head(DETECT_SAMPLE_VALUES).to_pydict()
            self._samples = {k: v for k, v in self._samples.items() if k[0] != view}
            self._samples[(view, fingerprint)] = known
        return served_plan(view, *known, guard)

    def _directory(self, directory: str | None) -> str:
        if directory is not None:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            if stat.S_IMODE(os.stat(directory).st_mode) & 0o077:
                raise ValueError(f"pseudonym copy directory {directory!r} is readable by others; it must be 0700")
            return directory
        if self._owned is None:
            self._owned = owned_tempdir("sparkcopies")  # 0700
        return self._owned

    def reset(self) -> None:
        """Forget what each view shows (its Spark session ended); copies in an owned directory are removed."""
        self._state.clear()
        self.problems.clear()
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)
            self._owned = None

    close = reset


def _members(path: str) -> list[Path]:
    """The files ``path`` (a file, a directory read recursively, or a glob) names, as Spark would read them."""
    if any(c in path for c in "*?["):
        found: list[Path] = []
        for match in sorted(_glob.glob(path)):
            found += _members(match) if os.path.isdir(match) else [Path(match)]
        members = found
    elif os.path.isdir(path):
        members = sorted(p for p in Path(path).rglob("*") if p.is_file()
                         and not any(part.startswith(_HIDDEN) for part in p.relative_to(path).parts))
    else:
        members = [Path(path)]
    if not members:
        raise ValueError(f"{path!r} names no file")
    return members


def _fingerprint(path: Path) -> tuple[str, int, int, int]:
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{str(path)!r} is not a regular file")
    return str(path), info.st_size, info.st_mtime_ns, info.st_ino


def _dataset(members: list[Path], fmt: str, path: str) -> Any:
    """A pyarrow dataset over the files (hive partitions of a directory become columns, as in Spark)."""
    import pyarrow.dataset as ds

    if os.path.isdir(path) and not any(c in path for c in "*?["):
        return ds.dataset(path, format=fmt, partitioning="hive")
    return ds.dataset([str(m) for m in members], format=fmt)


def _digest(fingerprint: tuple[Any, ...], plan: ServedPlan) -> str:
    return hashlib.blake2b(repr((fingerprint, plan)).encode(), digest_size=8).hexdigest()


def _write_copy(dataset: Any, served: Mapping[str, ServedColumn], guard: EntryGuard, target: str) -> None:
    """One pass over ``dataset``: each served column replaced, written to ``target`` (atomically)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([pa.field(f.name, pa.string()) if f.name in served else f for f in dataset.schema])
    partial = target + ".partial"
    try:
        with pq.ParquetWriter(partial, schema) as writer:
            for batch in dataset.to_batches(batch_size=COPY_BATCH_ROWS):
                columns = [_served_array(batch.column(i), served[name], guard) if name in served
                           else batch.column(i) for i, name in enumerate(batch.schema.names)]
                writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _served_array(values: Any, column: ServedColumn, guard: EntryGuard) -> Any:
    """``values`` as the agent's side may see them (see module doc); missing stays missing."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.action == "deny":
        return pc.if_else(pc.is_null(values), pa.scalar(None, pa.string()), denied_text(column.cls))
    text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
    encoded = pc.dictionary_encode(text)
    distinct = encoded.dictionary.to_pylist()
    issued = pa.array(guard.engine_pseudonyms(column.kind, column.cls, distinct) if distinct else [], pa.string())
    return pc.take(issued, encoded.indices)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
