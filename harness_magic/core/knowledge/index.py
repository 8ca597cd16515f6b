"""A document index in one SQLite file: chunks, BM25 through FTS5, optional vectors.

:class:`DocIndex` keeps, per indexed file, its content hash, size, mtime and
chunk count; :meth:`DocIndex.refresh` walks the roots and re-indexes only what
changed (a file whose size and mtime are unchanged is not even read; one whose
bytes hash the same is not re-chunked), drops files that disappeared, and
returns an :class:`IndexReport` saying what it did. Markdown and text are read,
hashed and chunked into rows by :mod:`.prepare` (a pool of forked processes from
``POOL_MIN_BYTES`` to read, one core left to the writer); this one connection
writes in one transaction (chunk rows inserted in batches, FTS5 merging its terms
once): a refresh cut short by an error or an interrupt leaves the index as it was,
and the next refresh does its work again. The full-text rows are taken from the
chunk rows by SQL (:class:`_RowWriter`): with a core left for it, one statement
a batch in a thread of its own (SQLite runs it without the GIL, so FTS5 tokenises
one batch while the kernel reads and chunks the next), else one statement at the
end. A first build (an index with no file yet) is written through SQLite's rollback
journal, each new page once, and the file is put back in WAL when it ends
(``BULK_JOURNAL``). Vectors are computed only when an embedder is configured.

Keyword search is FTS5's ``bm25()`` over the heading trail (weighted higher)
and the text, with the Porter stemmer. The user's or model's query is never
passed as FTS5 syntax: it is split into word tokens, each quoted, joined with
OR, so ``"NEAR(" OR x`` or ``title:*`` are plain words.

With an embedder (see :mod:`.embed`) every chunk also gets a vector (float32
blobs, read back with ``numpy.frombuffer``: decoding runs no code) and
:meth:`DocIndex.search` fuses keyword and vector rankings by reciprocal rank.

Its parts: :mod:`.tree` walks and reads the files beneath the roots,
:mod:`.prepare` turns Markdown and text into rows, :mod:`.index_file` opens the
SQLite file only when it is ours and sound, :mod:`.ranking` holds hits, fusion and
snippets; this module keeps the schema, refresh and the retrievers.

What the index guarantees (``tests/test_knowledge_attacks.py`` tries each):

* **Reads stay under the roots.** Every file is opened with the files connector's
  :func:`~harness_magic.core.confinement.safe_open.open_beneath` (``openat2`` with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``): no symbolic link is followed, so a file
  swapped for a link between the walk and the read is refused, and a file with more
  than one hard link is refused unless ``allow_hardlinks`` (a hard link can name any
  file on the disk). Up to ``FILE_MAX_BYTES`` a file and ``MAX_FILES`` in all.
* **Extraction is bounded.** Markdown and text are split here (linear in their size);
  HTML and PDF go to the confined worker of :mod:`.extract_worker`, one wall-clock
  timeout per file, CPU and memory rlimits, ``text_max_chars`` of text a file and
  ``refresh_budget_s`` of worker time a refresh (later HTML/PDF files are deferred). A file over
  a limit is skipped with the limit named in :attr:`IndexReport.skipped` and is not
  tried again until it changes (or the limits do).
* **The index file must be ours.** A file at ``db_path`` (or its ``-wal``/``-shm``/
  ``-journal``) that is a link, owned by another user, or writable by group or others
  is moved aside and the index rebuilt (:attr:`DocIndex.notes` says so); it is never read.
  The index is derived data, written without fsync: one a power loss damaged is found by the
  quick check on open, moved aside and rebuilt the same way.
* **Only chunks of existing files are served.** Chunks whose file row is gone are
  pruned; every hit, ``get`` and ``file_chunks`` first opens its file beneath its root
  the same safe way and drops the chunk when that fails.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from itertools import chain
from typing import Any, Iterable, Iterator, Sequence

from harness_magic.core.knowledge.extract import (
    CONFINED_SUFFIXES,
    Chunk,
    ExtractionLimits,
    ExtractionTimeout,
    chunk_lines,
    text_chunks,
)
from harness_magic.core.knowledge.extract_worker import ExtractionWorker, WorkerError
from harness_magic.core.knowledge.index_file import open_owned
from harness_magic.core.knowledge.prepare import (
    FAILED,
    ROWS,
    SAME,
    SKIP,
    Prepared,
    Row,
    TextPreparer,
    TextTask,
    chunk_row,
    cores_free_now,
    host_cores,
    may_pool,
    prepare_file,
    prepare_text,
    running_now,
)
from harness_magic.core.knowledge.ranking import Hit, fuse, lead, normalize_doc_id, snippet
from harness_magic.core.knowledge.tree import FILE_MAX_BYTES, DocRoot, DocTree
from harness_magic.core.text.counts import count

__all__ = ["DocIndex", "IndexReport", "QUERY_MAX_TOKENS", "fts_query", "fts_settings"]

QUERY_MAX_TOKENS = 64
"""Query words kept; the rest are dropped (a pasted page is not a query)."""
CANDIDATES = 50
"""Hits taken from each retriever before fusion."""
TITLE_WEIGHT = 3.0
"""BM25 weight of the heading trail relative to the body (1.0)."""
FTS_BATCH_ROWS = 4_000
"""Chunks per batch of a refresh at most: one ``executemany`` of chunk rows and, with a core left for the writer
(``FTS_OVERLAP_CORES``), one full-text statement in the writer's thread while the next batch is read and chunked.
Each statement writes one FTS5 segment holding every distinct term of its batch: 5 batches of 2,000 chunks cost
FTS5 ~10% more than one statement, 20 of 500 ~50% more (merges off, measured), so batches grow to this size."""
FTS_IDLE_BATCH_ROWS = 250
"""With ``overlap``: chunks from which a batch is sent as soon as the writer's thread is idle (the first batch, and
whenever reading and chunking fell behind FTS5): the writer's one connection, which inserts every row, is what
a refresh waits on, so it is kept busy rather than left waiting for a full ``FTS_BATCH_ROWS``."""
FTS_SWITCH_INTERVAL_S = 0.0005
"""The interpreter's switch interval (``sys.setswitchinterval``; 5 ms by default) while a refresh's full text runs
in the writer's thread. That thread needs the GIL only between two statements (to start the next, to hand back
the last one's end), while the kernel's thread reads and chunks in Python and holds it: the writer waited a
switch interval each time, up to 10 ms a batch with FTS5 idle. Put back when the refresh ends."""
FTS_OVERLAP_CORES = 1
"""Cores left for the writer's thread from which a refresh runs each batch's full-text statement there, overlapped
with reading and chunking the next batch: the host's cores (:func:`~.prepare.host_cores`) less the kernel's own
thread or the other tasks runnable this instant (:func:`~.prepare.running_now`), whichever is more. On 2 cores:
with at most one other task runnable; below it the full-text rows of every chunk the refresh wrote are inserted by
one statement at the end. Measured on the shared 2-core machine, 10,000 chunks, builds interleaved: with a core
of its own 187-193 ms wall against 258-266 ms in one statement at the end; at load 2 a median of 310 against
371 ms (fastest 232 against 266) for 8-12% more CPU (more segments, two threads sharing busy cores and caches);
at load 3-3.8 the median was 10-20% slower (the kernel's thread, descheduled holding the GIL, holds up the next
statement), hence the bound. It ran only with no other task runnable before, which at load ~1 left most builds
in one statement at the end (``bench_docs.py --stages`` times both)."""
FTS_AUTOMERGE = 4
"""FTS5's ``automerge`` (its default): segments of one level merged once this many are written. Each full-text
statement writes its rows as one segment; a first build whose batches run in the writer's thread turns it off
while it runs (merging its first segments into one as the next are written cost 20-30 ms of 130 for 10,000
chunks, measured) and back on before it commits: searches score the same over any number of segments (a few
more lookups a term: a keyword search with its hits fetched 0.65 -> 0.72 ms at the median over 300 queries on
10,000 chunks), and the next refreshes merge them, a little each write."""
DF_CACHE_TERMS = 100_000
"""Query terms whose chunk counts are memoised (cleared when the index changes)."""
SCHEMA_VERSION = 4
"""Bumped when the tables change: an index of an older version is rebuilt (it is a cache of the files), one of
a newer version is refused (a newer harness_magic wrote it; delete the file to rebuild). 2: the full-text
table is contentless (the text is stored once, in ``chunks``). 3: ``chunks.title`` keeps each chunk's
full-text title (:func:`~.prepare.fts_title`), so full-text rows are inserted, deleted and rebuilt from
``chunks`` by SQL alone. 4: a file's chunks are the id range ``files.first_id`` to ``first_id + chunks - 1``
(written together, in order), found by that range: ``chunks`` has no ``UNIQUE(path, slug)`` index to keep up
(inserting 10,000 chunk rows took 18-19 ms of CPU without it, 25-27 ms with it, on the writer's one connection);
``files`` is keyed by its path alone (``WITHOUT ROWID``: one lookup a chunk when the index is opened and checked)."""
FTS_HASH_BYTES = 8 * 1024 * 1024
"""FTS5's ``hashsize``: terms gathered in memory before they are written as one segment. The default
(1 MiB) writes a 7 MB corpus as ~50 segments that FTS5 then merges; 8 MiB writes it once."""
FTS_LEAF_SLACK = 384
"""Bytes of a database page left to SQLite's own headers when FTS5's ``pgsz`` (its leaf size; 4,050 bytes by
default) is set to fill one page of the index file (:func:`fts_settings`): the 16 KiB pages of a new file
(``index_file.PAGE_BYTES``) then hold one 16,000-byte leaf each rather than four small ones, and a full index
writes a quarter of the leaf rows and their ``%_idx`` entries (FTS5 alone on 10,000 chunks: 154-158 ms of CPU
against 168-181 ms at the default, fastest of 15 interleaved rounds, ``bench_docs.py --fts-options``). The
largest leaf of that index was 16,003 bytes: within one page, no overflow page. What a search returns and how it
ranks do not depend on the leaf size (``tests/test_knowledge_bulk_build.py`` compares the answers)."""
FTS_MIN_LEAF_BYTES = 4050
"""FTS5's own default ``pgsz``, kept for a file whose pages are too small to gain from a page-sized leaf."""
BULK_JOURNAL = "delete"
"""The journal of a first build (an index with no file yet): SQLite's rollback journal keeps the old content of
the pages a transaction changes, and an empty index has almost none, so the ~14 MB of a 10,000-chunk build are
written once, into the file, and the commit deletes a journal of a few pages. In WAL every page goes to the
``-wal`` file first and is copied into the index by a checkpoint (the commit alone took 32 ms of a 290 ms build;
through the journal, with ``index_file.PAGE_BYTES`` pages, the build takes 36 ms less CPU, measured). A crash
leaves the journal, which the next open rolls back: the index is as before (empty), never half built. The file
is switched back to WAL after the build (readers of other processes then never wait for a refresh)."""
ROWID_MAX = 2**63 - 1
"""SQLite's largest rowid: past it new chunk ids would be drawn at random, not counted on."""
_TABLES = ("meta", "files", "chunks", "chunks_fts", "vectors", "failures")
"""The index's tables, dropped together when an older schema is rebuilt."""

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
_IN_RANGE = "BETWEEN f.first_id AND f.first_id + f.chunks - 1"
"""A chunk id within the id range of the file row ``f`` (schema 4: a file's chunks are written together)."""
_FILE_CHUNKS = ("SELECT c.path, c.slug, c.trail, c.start_line, c.end_line, c.text FROM files f "
                f"JOIN chunks c ON c.id {_IN_RANGE} WHERE f.path=? AND c.path = f.path")
"""The chunks of the file ``?``, found by its id range (a range scan of ``chunks``)."""
_CHUNK_COUNT = "SELECT coalesce(sum(chunks), 0) FROM files"
"""The chunks in the index: each file's count of the chunks in its id range (opening the index dropped any other).
``count(*)`` over ``chunks`` reads every page of it (~3 ms at 10,000 chunks, on every refresh that a tool call
makes, with no index on ``chunks`` to count instead)."""
_FTS_FROM_CHUNKS = "INSERT INTO chunks_fts (rowid, title, body) SELECT id, title, text FROM chunks WHERE id > ?"
"""The full-text rows of the chunks with ids past ``?`` (the batch just inserted)."""


def fts_settings(page_bytes: int) -> dict[str, int]:
    """FTS5's configuration for a full-text table in a file of ``page_bytes`` pages: ``hashsize``
    (``FTS_HASH_BYTES``) and ``pgsz``, a leaf filling one page (``FTS_LEAF_SLACK``), never below FTS5's default."""
    return {"hashsize": FTS_HASH_BYTES, "pgsz": max(FTS_MIN_LEAF_BYTES, page_bytes - FTS_LEAF_SLACK)}


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for free text: quoted word tokens joined with OR ("" when none)."""
    tokens = _TOKEN_RE.findall(text.lower())[:QUERY_MAX_TOKENS]
    seen: list[str] = []
    for token in tokens:
        if token not in seen:
            seen.append(token)
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in seen)


@dataclass
class IndexReport:
    """What one :meth:`DocIndex.refresh` did."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)
    """``"path: reason"`` for files not indexed (too large, unreadable, a link, over an extraction limit)."""
    deferred: list[str] = field(default_factory=list)
    """Files left for the next refresh: this refresh's extraction budget was spent."""
    notes: list[str] = field(default_factory=list)
    """What else a person should know (an untrusted index file moved aside)."""
    chunks_written: int = 0
    workers: int = 0
    """Processes that read and chunked the Markdown and text (0: the kernel itself, below ``POOL_MIN_BYTES``)."""
    bulk: bool = False
    """Whether this refresh was a first build written through a rollback journal (``BULK_JOURNAL``), not WAL."""
    overlapped: bool = False
    """Whether each batch's full-text rows were inserted in the writer's thread while the next batch was read
    and chunked (a core was left for it: ``FTS_OVERLAP_CORES``), rather than by one statement at the end."""
    files: int = 0
    """Files in the index after the refresh."""
    chunks: int = 0
    """Chunks in the index after the refresh."""
    bytes_read: int = 0
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def summary(self) -> str:
        parts = [f"{count(self.files, 'file')}, {count(self.chunks, 'chunk')}"]
        for label, names in (("added", self.added), ("updated", self.updated), ("removed", self.removed)):
            if names:
                shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
                parts.append(f"{label} {len(names)}: {shown}")
        if self.skipped:
            parts.append(f"skipped {len(self.skipped)}: " + "; ".join(self.skipped[:3])
                         + (f" (+{len(self.skipped) - 3} more)" if len(self.skipped) > 3 else ""))
        if self.deferred:
            parts.append(f"deferred to the next refresh {len(self.deferred)} (extraction budget spent): "
                         + ", ".join(self.deferred[:3]) + (" ..." if len(self.deferred) > 3 else ""))
        parts.extend(self.notes)
        return "; ".join(parts)


class _RowWriter:
    """The rows of one refresh, ``FTS_BATCH_ROWS`` chunks at a time: chunk and file rows inserted here, their
    full-text rows then taken from ``chunks`` by SQL: with ``overlap``, one statement a batch in a thread of the
    writer's own, else one statement for the whole refresh in :meth:`finish`.

    SQLite runs a statement without the GIL: with ``overlap`` FTS5 tokenises one batch (most of a refresh's
    cost) while the kernel reads and chunks the next, on the core that is free. One thread uses the connection
    at a time: :meth:`settle` waits for the statement in flight (and raises its error) before this thread runs
    another, and :meth:`close` interrupts it, waits for it and stops the thread (before a rollback; safe to
    call twice). Chunk ids are SQLite's (one more than the largest, so every row a refresh writes has an id
    past the largest before its first batch); used inside the refresh's transaction.
    """

    def __init__(self, db: sqlite3.Connection, overlap: bool) -> None:
        self.db = db
        self.overlap = overlap
        self._since: int | None = None
        """Without ``overlap``: the largest chunk id before the refresh's first batch (None: no batch yet)."""
        self._chunks: list[Row] = []
        self._files: list[tuple[str, str, int, int, int, float, str, int]] = []
        """``files`` rows but the last column: (path, sha256, size, mtime_ns, chunks, indexed_at, note, the
        offset of the file's first row in ``_chunks``), made ``first_id`` by :meth:`flush`."""
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="docs-index-fts")
        self._pending: Future[Any] | None = None
        self._switch: tuple[float, float] | None = None
        """(the interpreter's switch interval before this writer lowered it, the one it set), until :meth:`close`."""

    def add(self, doc_path: str, prepared: Prepared) -> None:
        """Queue one file's rows (its old rows already deleted) and its ``files`` row."""
        self._files.append((doc_path, prepared.sha256, prepared.size, prepared.mtime_ns, len(prepared.rows),
                            time.time(), prepared.reason, len(self._chunks)))
        self._chunks += prepared.rows
        queued = len(self._chunks)
        if queued >= FTS_BATCH_ROWS or (self.overlap and queued >= FTS_IDLE_BATCH_ROWS
                                        and (self._pending is None or self._pending.done())):
            self.flush()

    def settle(self) -> None:
        """Wait for the full-text statement in flight, if any (its error is raised here). An interrupt while
        waiting leaves it in flight, for :meth:`close` to stop."""
        pending = self._pending
        if pending is not None:
            pending.result()
            self._pending = None

    def flush(self) -> None:
        """Insert what is queued; the batch's full-text rows are left running in the writer's thread.

        The chunk rows are inserted in order, each given one more than the largest id (SQLite's rowid below
        ``ROWID_MAX``), so each file's rows are the id range its ``files`` row names (``first_id``, ``chunks``);
        ``ValueError`` (the refresh rolled back) when the ids are spent or did not come out that way."""
        self.settle()
        db = self.db
        before = db.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0]
        if before > ROWID_MAX - len(self._chunks):
            raise ValueError(f"the index's chunk ids are spent (a chunk has id {before}, written by something "
                             "else): delete the index file to rebuild it")
        if self._files:
            db.executemany("INSERT OR REPLACE INTO files (path, sha256, size, mtime_ns, chunks, indexed_at, note, "
                           "first_id) VALUES (?,?,?,?,?,?,?,?)",
                           [(*row[:7], before + 1 + row[7]) for row in self._files])
        if self._chunks:
            db.executemany("INSERT INTO chunks (path, slug, trail, start_line, end_line, text, title) "
                           "VALUES (?,?,?,?,?,?,?)", self._chunks)
            after = db.execute("SELECT max(id) FROM chunks").fetchone()[0]
            if after != before + len(self._chunks):
                raise ValueError(f"{len(self._chunks)} chunk rows inserted after id {before} end at id {after}: "
                                 "the index file was changed by something else; delete it to rebuild it")
            if self.overlap:
                self._quick_handoffs()
                self._pending = self._thread.submit(db.execute, _FTS_FROM_CHUNKS, (before,))
            elif self._since is None:
                self._since = before
        self._chunks, self._files = [], []

    def finish(self) -> None:
        """Insert what is queued and every full-text row still to come; nothing is left running."""
        self.flush()
        self.settle()
        if self._since is not None:
            self.db.execute(_FTS_FROM_CHUNKS, (self._since,))
            self._since = None

    def close(self) -> None:
        """Stop the statement in flight (``sqlite3_interrupt``), wait for it, stop the thread, put the switch
        interval back (unless something else changed it meanwhile)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            if not pending.done():
                self.db.interrupt()
            wait([pending])
        self._thread.shutdown(wait=True)
        switch, self._switch = self._switch, None
        if switch is not None and sys.getswitchinterval() == switch[1]:
            sys.setswitchinterval(switch[0])

    def _quick_handoffs(self) -> None:
        """Lower the interpreter's switch interval to ``FTS_SWITCH_INTERVAL_S`` until :meth:`close` (once)."""
        if self._switch is None and sys.getswitchinterval() > FTS_SWITCH_INTERVAL_S:
            before = sys.getswitchinterval()
            sys.setswitchinterval(FTS_SWITCH_INTERVAL_S)
            self._switch = (before, sys.getswitchinterval())


class DocIndex:
    """Chunks of the files under ``roots`` in the SQLite file ``db_path``.

    ``limits`` bounds extraction (:class:`~.extract.ExtractionLimits`); ``allow_hardlinks``
    lets files with more than one hard link be indexed (off: such a link can name any file).
    """

    def __init__(self, roots: Sequence[str | os.PathLike], db_path: str | os.PathLike, *,
                 embedder: Any | None = None, limits: ExtractionLimits | None = None,
                 allow_hardlinks: bool = False) -> None:
        self.tree = DocTree(roots, allow_hardlinks=allow_hardlinks)
        """The files under the roots, walked and read beneath them (:mod:`.tree`)."""
        self.roots: list[DocRoot] = self.tree.roots
        self.allow_hardlinks = self.tree.allow_hardlinks
        self.limits = limits or ExtractionLimits()
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self._lock = threading.RLock()
        self._db, notes = open_owned(self.db_path)
        self._journal_mode = "wal"
        """The index file's journal: WAL, or ``BULK_JOURNAL`` during a first build (:meth:`_journal`)."""
        self.notes: list[str] = notes
        """Said once, in the first refresh's report: e.g. an index file that was not ours, moved aside."""
        self._create()
        self._prune()
        self._vectors: tuple[list[int], Any] | None = None
        self._df: dict[str, int] = {}
        self._df_total: int | None = None
        self.last_report: IndexReport | None = None
        self.last_refresh: float | None = None

    # -- schema ---------------------------------------------------------------------------

    def _create(self) -> None:
        db = self._db
        stored = None
        if db.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            stored = row[0] if row else None
        if stored is not None and stored != str(SCHEMA_VERSION):
            if not stored.isdigit() or int(stored) > SCHEMA_VERSION:
                raise ValueError(f"index {str(self.db_path)!r} has schema {stored}, expected {SCHEMA_VERSION} "
                                 "(a newer harness_magic wrote it); delete the file to rebuild it")
            db.execute("BEGIN")
            for table in _TABLES:
                db.execute(f"DROP TABLE IF EXISTS {table}")
            db.execute("COMMIT")
            self.notes.append(f"index {str(self.db_path)!r} had schema {stored}: rebuilt for schema {SCHEMA_VERSION}")
        db.executescript(f"""
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE IF NOT EXISTS files (
                path TEXT PRIMARY KEY, sha256 TEXT, size INTEGER, mtime_ns INTEGER,
                chunks INTEGER, indexed_at REAL, note TEXT, first_id INTEGER) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS chunks (
                id INTEGER PRIMARY KEY, path TEXT, slug TEXT, trail TEXT, start_line INTEGER,
                end_line INTEGER, text TEXT, title TEXT);
            CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
                title, body, content='', tokenize='porter unicode61');
            CREATE TABLE IF NOT EXISTS vectors (chunk_id INTEGER PRIMARY KEY, model TEXT, vec BLOB);
            CREATE TABLE IF NOT EXISTS failures (
                path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, limits TEXT, reason TEXT);
            INSERT OR IGNORE INTO meta VALUES ('schema', '{SCHEMA_VERSION}');
        """)
        page_bytes = db.execute("PRAGMA page_size").fetchone()[0]
        configured = {row[0] for row in db.execute("SELECT k FROM chunks_fts_config")}
        for key, value in fts_settings(page_bytes).items():
            if key not in configured:  # a new table (or one an older version made: its later segments)
                db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES (?, ?)", (key, value))


    def _prune(self) -> None:
        """Drop chunks, full-text rows and vectors whose file row is gone, and chunks outside their file's id range.

        A refresh writes chunks, full-text rows and file rows together, so a difference means the file
        was written by something else. The full-text table keeps no text (contentless): a row is taken
        out by giving FTS5 its words again, and a planted row's words are unknown, so any difference
        rebuilds the full-text table from ``chunks`` (exact whatever was planted; a few seconds at most).
        """
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                orphans = db.execute(f"DELETE FROM chunks WHERE NOT EXISTS (SELECT 1 FROM files f "
                                     f"WHERE f.path = chunks.path AND chunks.id {_IN_RANGE})").rowcount
                stray = db.execute("SELECT EXISTS (SELECT 1 FROM chunks_fts_docsize d WHERE d.id NOT IN "
                                   "(SELECT id FROM chunks))").fetchone()[0]
                missing = db.execute("SELECT EXISTS (SELECT 1 FROM chunks c WHERE c.id NOT IN "
                                     "(SELECT id FROM chunks_fts_docsize))").fetchone()[0]
                if orphans > 0 or stray or missing:
                    self._rebuild_fts()
                db.execute("DELETE FROM vectors WHERE chunk_id NOT IN (SELECT id FROM chunks)")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _rebuild_fts(self) -> None:
        """Empty the full-text table and index every row of ``chunks`` again (inside the caller's transaction)."""
        db = self._db
        db.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('delete-all')")
        db.execute("INSERT INTO chunks_fts (rowid, title, body) SELECT id, title, text FROM chunks")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _journal(self, mode: str) -> bool:
        """Switch the index file's journal to ``mode`` (``BULK_JOURNAL`` or ``"wal"``); whether it switched.

        Outside a transaction only. SQLite switches only when no other connection has the file open
        ("database is locked" otherwise): into ``BULK_JOURNAL`` it is tried once, without waiting (the
        refresh then stays in WAL, as fast as before); back into WAL it waits as any write does, and a
        reader that keeps it busy longer leaves the rollback journal on until the next refresh or open
        (every transaction stays atomic either way, readers of other processes wait for a refresh).
        """
        db = self._db
        waits = mode != "wal"
        if waits:
            saved = db.execute("PRAGMA busy_timeout").fetchone()[0]
            db.execute("PRAGMA busy_timeout=0")
        try:
            self._journal_mode = db.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
        except sqlite3.OperationalError:  # another connection has the file open ("database is locked")
            pass
        finally:
            if waits:
                db.execute(f"PRAGMA busy_timeout={int(saved)}")
        return self._journal_mode == mode

    # -- indexing -------------------------------------------------------------------------

    def servable(self, doc_path: str) -> bool:
        """Whether ``doc_path`` names a regular file that opens beneath its root the safe way now
        (:meth:`.tree.DocTree.servable`): every chunk served passes this first."""
        return self.tree.servable(doc_path)

    def refresh(self) -> IndexReport:
        """Bring the index up to date with the files; returns what changed.

        Spends about ``limits.refresh_budget_s`` at most on HTML and PDF extraction (files past
        the budget are deferred to the next refresh); Markdown and text, linear in their
        size, are always indexed, so hostile PDFs cannot starve them. Markdown and text are
        read, hashed and chunked by :class:`~.prepare.TextPreparer` (a pool of processes when
        there are ``POOL_MIN_BYTES`` of them to read); this connection alone writes, in one
        transaction, the rows inserted in batches (:class:`_RowWriter`).
        """
        started = time.perf_counter()
        report = IndexReport()
        report.notes, self.notes = self.notes, []
        with self._lock, ExtractionWorker(self.limits) as worker:
            db = self._db
            known = {row[0]: row[1:] for row in db.execute("SELECT path, sha256, size, mtime_ns FROM files")}
            failures = {row[0]: row[1:] for row in db.execute("SELECT path, size, mtime_ns, limits, reason "
                                                              "FROM failures")}
            limits_key = self.limits.key()
            seen: set[str] = set()
            walked: set[str] = set()
            planned = self._plan(report, known, failures, limits_key, seen, walked)
            roots = {root.prefix: number for number, root in enumerate(self.tree.roots)}

            def task(doc_path: str, root: DocRoot, rel: str, stat: os.stat_result, previous: Any) -> TextTask:
                return TextTask(doc_path, roots[root.prefix], rel, stat.st_size, previous[0] if previous else None)

            cores = cores_free_now()
            streamed = not may_pool(cores)
            plan: Iterable[tuple[str, DocRoot, str, os.stat_result, Any, bool]]
            if streamed:  # read, hashed and chunked here as the walk finds them: it goes on while the first are written
                first = next(planned, None)
                plan, tasks, anything = (chain([first], planned) if first else ()), [], first is not None
            else:  # a pool's size depends on the files' sizes: the walk ends before any file is read
                plan = listed = list(planned)
                tasks = [task(*item[:5]) for item in listed if not item[5]]
                anything = bool(listed)
            writer = _RowWriter(db, host_cores() - max(running_now(), 1) >= FTS_OVERLAP_CORES)
            report.overlapped = writer.overlap
            # a first build writes every page new: a rollback journal keeps none of them (WAL writes each twice)
            report.bulk = not known and anything and self._journal(BULK_JOURNAL)
            if not report.bulk and self._journal_mode != "wal":  # a first build could not switch back (a reader)
                self._journal("wal")
            with TextPreparer(self.tree, tasks, text_chunks, self.limits.text_max_chars, cores=cores) as preparer:
                prepared = iter(preparer)
                db.execute("BEGIN")  # one transaction for the whole refresh: FTS5 merges its terms once, at the end
                try:
                    unmerged = report.bulk and writer.overlap
                    if unmerged:  # a first build's batches are left as segments (see FTS_AUTOMERGE)
                        db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('automerge', 0)")
                    spent = 0.0
                    for doc_path, root, rel, stat, previous, confined in plan:
                        if not confined:
                            result = (prepare_text(self.tree, task(doc_path, root, rel, stat, previous), text_chunks,
                                                   self.limits.text_max_chars) if streamed else next(prepared))
                        elif spent >= self.limits.refresh_budget_s:
                            report.deferred.append(doc_path)
                            if previous is not None:
                                seen.add(doc_path)  # its last indexed text stays searchable meanwhile
                            continue
                        else:
                            clock = time.monotonic()
                            try:
                                result = self._prepare_confined(worker, doc_path, root, rel, previous,
                                                                self.limits.refresh_budget_s - spent)
                            except ExtractionTimeout as exc:
                                if exc.seconds < self.limits.extract_timeout_s:  # cut short by the budget
                                    report.deferred.append(doc_path)
                                    if previous is not None:
                                        seen.add(doc_path)
                                    continue
                                result = Prepared(FAILED, "", stat.st_size, stat.st_mtime_ns, 0, [], str(exc))
                            except WorkerError as exc:  # not the file's fault: it is tried again next refresh
                                report.skipped.append(f"{doc_path}: {exc}")
                                if previous is not None:
                                    seen.add(doc_path)
                                continue
                            finally:
                                spent += time.monotonic() - clock
                        self._apply(report, writer, doc_path, previous, result, failures, limits_key, seen)
                    writer.finish()
                    if unmerged:
                        db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('automerge', ?)",
                                   (FTS_AUTOMERGE,))
                    for gone in sorted(set(known) - seen):
                        self._delete_file(gone)
                        report.removed.append(gone)
                    stale = [path for path in failures if path not in walked]
                    if stale:
                        db.executemany("DELETE FROM failures WHERE path=?", [(path,) for path in stale])
                except BaseException:
                    writer.close()  # the full-text statement in flight is stopped before this thread rolls back
                    if db.in_transaction:  # (a statement SQLite interrupted has rolled the transaction back itself)
                        db.execute("ROLLBACK")  # nothing of a refresh cut short is kept: the next one does it again
                    if report.bulk:
                        self._journal("wal")
                    raise
                writer.close()
                db.execute("COMMIT")
                if report.bulk:
                    self._journal("wal")
            report.workers = preparer.workers
            report.notes.extend(preparer.notes)
            if self.embedder is not None:
                self._embed_missing(self.embedder)
            report.files = db.execute("SELECT count(*) FROM files").fetchone()[0]
            report.chunks = db.execute(_CHUNK_COUNT).fetchone()[0]
            if report.changed:
                self._vectors = None
                self._df_total = None
        report.seconds = time.perf_counter() - started
        self.last_report = report
        self.last_refresh = time.time()
        return report

    def _plan(self, report: IndexReport, known: dict[str, Any], failures: dict[str, Any], limits_key: str,
              seen: set[str], walked: set[str]) -> Iterator[tuple[str, DocRoot, str, os.stat_result, Any, bool]]:
        """The files a refresh must read, in walk order, as the walk finds them: (doc path, root, path under it,
        lstat, indexed (sha256, size, mtime_ns) or None, HTML/PDF); files too large, unchanged by size and
        mtime, or failed before with the same size, mtime and limits are reported here and left out."""
        for doc_path, root, rel, stat in self.tree.walk(report.skipped):
            walked.add(doc_path)
            if stat.st_size > FILE_MAX_BYTES:
                report.skipped.append(f"{doc_path}: {stat.st_size} bytes, over the {FILE_MAX_BYTES} limit")
                continue
            previous = known.get(doc_path)
            if previous is not None and previous[1] == stat.st_size and previous[2] == stat.st_mtime_ns:
                seen.add(doc_path)
                report.unchanged += 1
                continue
            failed = failures.get(doc_path)
            if failed is not None and failed[:3] == (stat.st_size, stat.st_mtime_ns, limits_key):
                report.skipped.append(f"{doc_path}: {failed[3]} (not tried again until the file changes)")
                continue
            yield doc_path, root, rel, stat, previous, os.path.splitext(rel)[1].lower() in CONFINED_SUFFIXES

    def _prepare_confined(self, worker: ExtractionWorker, doc_path: str, root: DocRoot, rel: str, previous: Any,
                          budget_left: float) -> Prepared:
        """:func:`~.prepare.prepare_file` of one HTML or PDF file, extracted in the confined worker within
        ``budget_left`` seconds (raises ``ExtractionTimeout`` past it, ``WorkerError`` without a worker)."""
        name = os.path.basename(rel)

        def extracted(data: bytes) -> tuple[list[Row], str]:
            lines, note = worker.extract(name, data, timeout_s=max(budget_left, 0.001))
            return [chunk_row(c.path, c.slug, c.trail, c.start_line, c.end_line, c.text)
                    for c in chunk_lines(doc_path, lines)], note

        return prepare_file(self.tree, root, rel, previous[0] if previous else None, extracted)

    def _apply(self, report: IndexReport, writer: _RowWriter, doc_path: str, previous: Any, result: Prepared,
               failures: dict[str, Any], limits_key: str, seen: set[str]) -> None:
        """Record what became of one file read by a refresh: its rows to the writer, a skip, a failure."""
        if result.kind == SKIP:
            report.skipped.append(f"{doc_path}: {result.reason}")
            return
        report.bytes_read += result.read_bytes
        if result.kind != ROWS or previous is not None or doc_path in failures:
            writer.settle()  # this thread writes below: the writer's full-text statement ends first
        if result.kind == SAME:
            seen.add(doc_path)
            self._db.execute("UPDATE files SET size=?, mtime_ns=? WHERE path=?",
                             (result.size, result.mtime_ns, doc_path))
            report.unchanged += 1
            return
        if result.kind == FAILED:
            self._failed(report, doc_path, previous, result.size, result.mtime_ns, limits_key, result.reason)
            return
        seen.add(doc_path)
        if result.reason:  # ROWS: a note on what was cut (pages past PDF_MAX_PAGES)
            report.skipped.append(result.reason)
        if previous is not None:
            self._delete_file(doc_path)
        writer.add(doc_path, result)
        if doc_path in failures:
            self._db.execute("DELETE FROM failures WHERE path=?", (doc_path,))
        report.chunks_written += len(result.rows)
        (report.updated if previous is not None else report.added).append(doc_path)

    def _failed(self, report: IndexReport, doc_path: str, previous: Any, size: int, mtime_ns: int, limits_key: str,
                reason: str) -> None:
        """Skip a file its extraction refused, remember why until it changes, drop its old chunks."""
        report.skipped.append(f"{doc_path}: {reason}")
        self._db.execute("INSERT OR REPLACE INTO failures VALUES (?,?,?,?,?)",
                         (doc_path, size, mtime_ns, limits_key, reason))
        if previous is not None:
            self._delete_file(doc_path)
            report.removed.append(doc_path)

    def _delete_file(self, doc_path: str) -> None:
        """Drop one file's rows (its chunks: the id range of its ``files`` row); its full-text rows are taken out
        with the words they were indexed with."""
        db = self._db
        row = db.execute("SELECT first_id, first_id + chunks - 1 FROM files WHERE path=?", (doc_path,)).fetchone()
        if row is not None and row[0] is not None:
            ids = (*row, doc_path)
            db.execute("INSERT INTO chunks_fts (chunks_fts, rowid, title, body) "
                       "SELECT 'delete', id, title, text FROM chunks WHERE id BETWEEN ? AND ? AND path=?", ids)
            db.execute("DELETE FROM vectors WHERE chunk_id IN (SELECT id FROM chunks WHERE id BETWEEN ? AND ? "
                       "AND path=?)", ids)
            db.execute("DELETE FROM chunks WHERE id BETWEEN ? AND ? AND path=?", ids)
        db.execute("DELETE FROM files WHERE path=?", (doc_path,))

    def _embed_missing(self, embedder: Any) -> None:
        import numpy as np

        model = embedder.name
        db = self._db
        rows = db.execute(
            "SELECT c.id, c.trail, c.text FROM chunks c LEFT JOIN vectors v ON v.chunk_id = c.id "
            "WHERE v.chunk_id IS NULL OR v.model != ?", (model,)).fetchall()
        batch = embedder.batch_size
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            vectors = embedder.embed([" ".join(json.loads(r[1])) + "\n" + r[2] for r in part])
            db.execute("BEGIN")
            for (rowid, _, _), vec in zip(part, vectors):
                blob = np.asarray(vec, dtype=np.float32).tobytes()
                db.execute("INSERT OR REPLACE INTO vectors VALUES (?,?,?)", (rowid, model, blob))
            db.execute("COMMIT")
        self._vectors = None

    # -- reading --------------------------------------------------------------------------

    def _chunk(self, row: Sequence[Any]) -> Chunk:
        return Chunk(row[0], row[1], tuple(json.loads(row[2])), row[3], row[4], row[5])

    def get(self, source_id: str) -> Chunk | None:
        """The chunk with id ``doc:<path>#<slug>`` (brackets and the ``doc:`` prefix are optional).

        None also when its file no longer opens safely beneath its root (:meth:`servable`).
        """
        path, _, slug = normalize_doc_id(source_id).partition("#")
        with self._lock:
            row = self._db.execute(f"{_FILE_CHUNKS} AND c.slug=?", (path, slug)).fetchone()
        return self._chunk(row) if row and self.servable(row[0]) else None

    def file_chunks(self, path: str) -> list[Chunk]:
        """The chunks of one file in order ([] when the file no longer opens safely beneath its root)."""
        with self._lock:
            rows = self._db.execute(f"{_FILE_CHUNKS} ORDER BY c.start_line", (path,)).fetchall()
        return [self._chunk(r) for r in rows] if rows and self.servable(path) else []

    def files(self) -> list[dict[str, Any]]:
        """One dict per indexed file: path, chunks, bytes, sha256 (first 12), indexed_at."""
        with self._lock:
            rows = self._db.execute("SELECT path, chunks, size, sha256, indexed_at, note FROM files "
                                    "ORDER BY path").fetchall()
        return [{"path": r[0], "chunks": r[1], "bytes": r[2], "sha256": r[3][:12], "indexed_at": r[4],
                 "note": r[5] or ""} for r in rows]

    def counts(self) -> tuple[int, int]:
        with self._lock:
            files = self._db.execute("SELECT count(*) FROM files").fetchone()[0]
            chunks = self._db.execute(_CHUNK_COUNT).fetchone()[0]
        return files, chunks

    # -- search ---------------------------------------------------------------------------

    def keyword(self, query: str, k: int) -> list[Hit]:
        """BM25 hits, best first.

        Two steps: rank row ids inside FTS5 (no text read, no snippet), then
        fetch the top ``k`` chunks and their snippets. Asking for snippets in
        the ranking query would compute one for every matching row.
        """
        full = fts_query(query)
        if not full or k < 1:
            return []
        rank_sql = (f"SELECT rowid, bm25(chunks_fts, {TITLE_WEIGHT}, 1.0) AS score FROM chunks_fts "
                    "WHERE chunks_fts MATCH ? ORDER BY score LIMIT ?")
        with self._lock:
            expression = self._informative(full)
            ranked = self._db.execute(rank_sql, (expression, k)).fetchall()
            if len(ranked) < k and expression != full:
                expression = full
                ranked = self._db.execute(rank_sql, (expression, k)).fetchall()
            if not ranked:
                return []
            marks = ",".join("?" * len(ranked))
            ids = [r[0] for r in ranked]
            rows = {r[0]: r[1:] for r in self._db.execute(
                "SELECT c.id, c.path, c.slug, c.trail, c.start_line, c.end_line, c.text FROM chunks c "
                f"JOIN files f ON f.path = c.path WHERE c.id IN ({marks})", ids)}
        rows = self._servable_rows(rows)
        terms = [t.strip('"').replace('""', '"') for t in full.split(" OR ")]
        hits = []
        for rowid, score in ranked:
            if rowid in rows:
                chunk = self._chunk(rows[rowid])
                hits.append(Hit(chunk, -float(score), snippet(chunk.text, terms)))
        return hits

    def _servable_rows(self, rows: dict[int, Sequence[Any]]) -> dict[int, Sequence[Any]]:
        """``rows`` (id -> (path, ...)) without those whose file does not open safely now (one check a file)."""
        ok = {path: self.servable(path) for path in {row[0] for row in rows.values()}}
        return {rowid: row for rowid, row in rows.items() if ok[row[0]]}

    def _informative(self, expression: str) -> str:
        """``expression`` without the terms BM25 gives no weight, or itself when nothing would be left.

        FTS5's bm25() uses idf = log((N - n + 0.5) / (n + 0.5)), clamped to 1e-6 when not positive:
        a term in at least half of the chunks adds (almost exactly) nothing to any score, yet scoring
        it costs a pass over half the index. Those terms are dropped (the caller retries with all
        terms when fewer than k chunks match the rest). Document counts are memoised per index state.
        """
        terms = expression.split(" OR ")
        if len(terms) < 2:
            return expression
        if self._df_total is None:
            self._df_total = self._db.execute(_CHUNK_COUNT).fetchone()[0]
            self._df.clear()
        total = self._df_total
        kept = []
        for term in terms:
            count = self._df.get(term)
            if count is None:
                count = self._db.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                                         (term,)).fetchone()[0]
                if len(self._df) >= DF_CACHE_TERMS:
                    self._df.clear()
                self._df[term] = count
            if 0 < count and 2 * count < total:
                kept.append(term)
        return " OR ".join(kept) if kept else expression

    def _vector_matrix(self, embedder: Any) -> tuple[list[int], Any]:
        import numpy as np

        if self._vectors is None:
            with self._lock:
                rows = self._db.execute("SELECT chunk_id, vec FROM vectors WHERE model=? ORDER BY chunk_id",
                                        (embedder.name,)).fetchall()
            ids = [r[0] for r in rows]
            matrix = (np.vstack([np.frombuffer(r[1], dtype=np.float32) for r in rows]) if rows
                      else np.zeros((0, 1), dtype=np.float32))
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            self._vectors = (ids, matrix / norms)
        return self._vectors

    def vector(self, query: str, k: int) -> list[Hit]:
        """Cosine-similarity hits from the embedder, best first (empty without an embedder)."""
        import numpy as np

        if self.embedder is None or not query.strip() or k < 1:
            return []
        ids, matrix = self._vector_matrix(self.embedder)
        if not ids:
            return []
        q = np.asarray(self.embedder.embed([query])[0], dtype=np.float32)
        if q.shape[0] != matrix.shape[1]:
            raise ValueError(f"the embedder returned {q.shape[0]} dimensions; the index holds {matrix.shape[1]}")
        q = q / (np.linalg.norm(q) or 1.0)
        # einsum runs single-threaded: a matrix-vector product this size gains nothing from BLAS
        # threads, and on a busy machine their spinning costs 10-20x.
        scores = np.einsum("ij,j->i", matrix, q)
        if k < len(scores):
            top = np.argpartition(-scores, k)[:k]
        else:
            top = np.arange(len(scores))
        order = [int(i) for i in top[np.argsort(-scores[top], kind="stable")]]
        wanted = [ids[i] for i in order]
        with self._lock:
            rows = {r[0]: r[1:] for r in self._db.execute(
                "SELECT c.id, c.path, c.slug, c.trail, c.start_line, c.end_line, c.text FROM chunks c "
                f"JOIN files f ON f.path = c.path WHERE c.id IN ({','.join('?' * len(wanted))})", wanted)}
        rows = self._servable_rows(rows)
        hits = []
        for i in order:
            row = rows.get(ids[i])
            if row is not None:
                chunk = self._chunk(row)
                hits.append(Hit(chunk, float(scores[i]), lead(chunk.text)))
        return hits

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Keyword hits, fused with vector hits by reciprocal rank when an embedder is set."""
        if self.embedder is None:
            return self.keyword(query, k)
        return fuse([self.keyword(query, CANDIDATES), self.vector(query, CANDIDATES)], k)

