"""Markdown and text files read, hashed and chunked into the index's rows: here, or in a pool of processes.

Contract: a :class:`TextPreparer` yields one :class:`Prepared` per :class:`TextTask`, in the
tasks' order, and the same ones whichever way it made them (``tests/test_knowledge_fast_index.py``
compares the two). Each task is one file: read beneath its root the safe way
(:func:`read_checked`: the refusals and messages of every read the index makes), hashed
(sha256), and, when the hash differs from the one indexed, chunked by the chunker the index
gives (:func:`~.extract.text_chunks`) straight into table rows (:func:`chunk_row`): no
:class:`~.extract.Chunk` is built to be taken apart. The index's one writer inserts the rows,
in one transaction (:meth:`.index.DocIndex.refresh`).

When the files to read add up to ``POOL_MIN_BYTES`` or more and at least ``POOL_MIN_WORKERS``
of the cores this process may run on (``os.sched_getaffinity``) are free besides the writer's
(``POOL_WRITER_CORES``; free: neither running another task now nor counted in the 1-minute load
average, :func:`busy_cores`), the tasks go to a pool of forked processes, one for each of those
cores (at most ``POOL_MAX_WORKERS`` and one a batch), in batches of about
``POOL_BATCH_BYTES``, never more than ``POOL_AHEAD`` batches a worker in flight (however big
the corpus, the results waiting for the writer stay bounded). Forked: a worker starts in about a
millisecond and runs the very functions the index was given (nothing imported, no code
pickled); the pool lives for one refresh and is shut down when it ends, however it ends. A
worker ignores SIGINT (an interrupt sent to the kernel's process group stops the refresh in the
kernel; the workers finish their batch and exit). A worker that dies (killed, out of memory)
breaks the pool, and a fork that fails (no memory, no process ids left) leaves it short: the
batch waited for and every later one are then prepared in this process, and
:attr:`TextPreparer.notes` says so. An exception a chunker raises (other than a file's own
:class:`~.extract.ExtractionError`, which fails that file alone) reaches the writer as it would
in this process.

Smaller refreshes, hosts with fewer than three cores, and busy hosts prepare the files here: a
pool costs more than it saves below ``POOL_MIN_BYTES``, a single worker was measured slower than
the kernel alone (``POOL_MIN_WORKERS``), and without free cores workers only take turns with the writer.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from json.encoder import encode_basestring_ascii
from typing import Callable, Iterator, NamedTuple, Protocol, Sequence

from harness_magic.core.confinement.safe_open import HardLinkRefused, LinkRefused
from harness_magic.core.knowledge.extract import ChunkMaker, ExtractionError, ExtractionTimeout
from harness_magic.core.knowledge.tree import FILE_MAX_BYTES, HARDLINK_REASON, DocRoot, DocTree

__all__ = ["TextTask", "Prepared", "TextPreparer", "TextChunker", "Row", "chunk_row", "read_checked", "prepare_file",
           "fts_title", "trail_json", "host_cores", "busy_cores", "running_now", "pool_workers", "LOADAVG_PATH",
           "cores_free_now", "may_pool", "prepare_text",
           "POOL_MIN_BYTES", "POOL_BATCH_BYTES", "POOL_AHEAD", "POOL_MAX_WORKERS", "POOL_MIN_WORKERS",
           "POOL_WRITER_CORES", "ROWS", "SAME", "SKIP", "FAILED"]

POOL_MIN_BYTES = 1024 * 1024
"""Bytes of Markdown and text to read in one refresh from which a pool of processes prepares them.
A worker takes reading, hashing and chunking (~17 ms a MB on the 2-core machine) off the writer, which
pays part of it back taking the rows in (unpickling ~2 ms a MB, copy-on-write faults after the fork)
and the fork itself: below about 1 MiB the pool costs more than it saves. Without a free core the two
take turns and the writer saves nothing (measured: :func:`busy_cores`). ``bench_docs.py --stages``
times each step, and a refresh with and without the pool."""
POOL_BATCH_BYTES = 128 * 1024
"""Bytes of files sent to a worker at once (a file larger than this is a batch of its own)."""
POOL_AHEAD = 2
"""Batches in flight per worker: enough to keep each busy while the writer takes the last one."""
POOL_MAX_WORKERS = 8
"""Workers at most, whatever the cores: the one writer (SQLite FTS5) is the bound past a few."""
POOL_MIN_WORKERS = 2
"""Fewer workers than this and the refresh stays in the kernel: one worker, measured on the 2-core
machine, was slower than the kernel alone (453 ms against 351 ms for 6.7 MB with both cores free;
20-40% slower under load): the writer takes its rows in at about what the worker saves it, and
waits on the handoffs between the executor's threads and the worker."""
POOL_WRITER_CORES = 1
"""Cores left to the kernel, which writes every row: a refresh is bound by its one writer (SQLite
FTS5 tokenising, ~8x the read floor), and a worker on the writer's core slows it down more than it
helps (on 2 cores: one worker reads and chunks while the kernel writes)."""

ROWS, SAME, SKIP, FAILED = "rows", "same", "skip", "failed"
"""What became of one file: chunked into rows; read, with the hash already indexed; not read
(``reason`` says why: a link, unreadable, too large); refused by its extraction (``reason``)."""

Row = tuple[str, str, str, int, int, str, str]
"""One chunk as the writer inserts it, the ``chunks`` table's columns after the id: (path, slug, trail JSON,
start line, end line, text, full-text title). The writer inserts a batch of them as they come (SQLite gives the ids)."""


class TextChunker(Protocol):
    """Chunks one Markdown or text file, building each chunk with ``make`` (:func:`~.extract.text_chunks`)."""

    def __call__(self, path: str, suffix: str, data: bytes, *, max_chars: int,
                 make: ChunkMaker[Row]) -> list[Row]: ...


class TextTask(NamedTuple):
    """One Markdown or text file to prepare."""

    doc_path: str
    root: int
    """Index of the file's root in the tree's ``roots``."""
    rel: str
    """Path under the root."""
    size: int
    """Bytes by the walk's lstat (what the pool threshold and the batches count)."""
    previous_sha256: str | None
    """The hash indexed for this file, or None: the same hash means nothing to chunk."""


class Prepared(NamedTuple):
    """What became of one :class:`TextTask`: ``kind`` is ROWS, SAME, SKIP or FAILED."""

    kind: str
    sha256: str
    size: int
    """Bytes by the fstat of the open file (0 when not read)."""
    mtime_ns: int
    read_bytes: int
    rows: list[Row]
    """The file's chunks (ROWS only)."""
    reason: str
    """SKIP and FAILED: why, said after the file's path; ROWS: what extraction cut (pages past the limit), or ""."""


def fts_title(trail: Sequence[str], path: str) -> str:
    """A chunk's full-text title column: its heading trail and its file's path (weighted ``TITLE_WEIGHT``).

    Stored with the chunk (``chunks.title``): the full-text table keeps no text, so a row is indexed
    from, and deleted by giving again, these same words.
    """
    return " ".join(trail) + " " + path


def trail_json(trail: Sequence[str]) -> str:
    """``json.dumps(list(trail))`` for a trail of strings, without the encoder's per-call set-up."""
    return "[" + ", ".join(map(encode_basestring_ascii, trail)) + "]"


def chunk_row(path: str, slug: str, trail: tuple[str, ...], start_line: int, end_line: int, text: str) -> Row:
    """The :data:`Row` of one chunk (a :data:`~.extract.ChunkMaker`)."""
    return path, slug, trail_json(trail), start_line, end_line, text, fts_title(trail, path)


def read_checked(tree: DocTree, root: DocRoot, rel: str) -> tuple[bytes, os.stat_result] | str:
    """(bytes, fstat) of one file read beneath its root (:meth:`.tree.DocTree.read`), or why it was not read.

    The reason is what the refresh reports after the file's path: it became a symbolic link, it
    has hard links, the system's error, or it grew past ``FILE_MAX_BYTES``.
    """
    try:
        data, info = tree.read(root, rel)
    except LinkRefused:
        return "became a symbolic link (links are not followed)"
    except HardLinkRefused as exc:
        return f"{exc.strerror} ({HARDLINK_REASON})"
    except OSError as exc:
        return str(exc.strerror or exc)
    if len(data) > FILE_MAX_BYTES:
        return f"over the {FILE_MAX_BYTES} bytes limit"
    return data, info


def prepare_file(tree: DocTree, root: DocRoot, rel: str, previous_sha256: str | None,
                 chunk: Callable[[bytes], tuple[list[Row], str]]) -> Prepared:
    """Read and hash one file and, when the hash is not ``previous_sha256``, ``chunk`` its bytes into
    (rows, note). A file's :class:`~.extract.ExtractionError` makes it FAILED; an
    :class:`~.extract.ExtractionTimeout` is raised (the caller tells its own limit from a spent budget)."""
    got = read_checked(tree, root, rel)
    if isinstance(got, str):
        return Prepared(SKIP, "", 0, 0, 0, [], got)
    data, info = got
    digest = hashlib.sha256(data).hexdigest()
    if digest == previous_sha256:
        return Prepared(SAME, digest, info.st_size, info.st_mtime_ns, len(data), [], "")
    try:
        rows, note = chunk(data)
    except ExtractionTimeout:
        raise
    except ExtractionError as exc:
        return Prepared(FAILED, digest, info.st_size, info.st_mtime_ns, len(data), [], str(exc))
    return Prepared(ROWS, digest, info.st_size, info.st_mtime_ns, len(data), rows, note)


def prepare_text(tree: DocTree, task: TextTask, chunker: TextChunker, max_chars: int) -> Prepared:
    """:func:`prepare_file` of one Markdown or text file, chunked by ``chunker`` into rows (no note)."""
    suffix = os.path.splitext(task.rel)[1].lower()
    return prepare_file(tree, tree.roots[task.root], task.rel, task.previous_sha256,
                        lambda data: (chunker(task.doc_path, suffix, data, max_chars=max_chars, make=chunk_row), ""))


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


LOADAVG_PATH = "/proc/loadavg"
"""Linux's load figures: the 1-minute load average first, the fourth field ``runnable/total`` tasks now."""


def _load() -> tuple[float, int] | None:
    """(1-minute load average, tasks runnable now) from ``LOADAVG_PATH``, or None where it cannot be read or
    says nothing (not Linux, not the format it documents, nan, inf)."""
    try:
        with open(LOADAVG_PATH, "rb") as handle:
            fields = handle.read(256).split()
        average, runnable = float(fields[0]), int(fields[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):  # not Linux, or not the format it documents
        return None
    if not 0 <= average < 1e6:  # nan, inf or nonsense: the figure says nothing
        return None
    return average, runnable


def busy_cores() -> int:
    """Cores a pool would have to share with other work: the tasks runnable right now besides this one, or the
    whole 1-minute load average if higher (it counts this kernel's own recent work too: refreshes back to back
    keep their writer's core busy). 0 where ``LOADAVG_PATH`` cannot be read."""
    load = _load()
    return 0 if load is None else max(0, load[1] - 1, int(load[0]))


def running_now() -> int:
    """Tasks runnable on the host this instant besides this one (0 where ``LOADAVG_PATH`` cannot be read): what a
    second thread of this process would share a core with now (the load average's recent past is left out)."""
    load = _load()
    return 0 if load is None else max(0, load[1] - 1)


def cores_free_now() -> int:
    """Cores a pool could use now: :func:`host_cores` less :func:`busy_cores` (a :class:`TextPreparer`'s default)."""
    return host_cores() - busy_cores()


def may_pool(cores: int) -> bool:
    """Whether ``cores`` free cores could run a pool at all (``POOL_MIN_WORKERS`` besides the writer's
    ``POOL_WRITER_CORES``), whatever the files: when not, they are prepared in this process, and a refresh
    reads each as the walk finds it rather than after the walk (:meth:`.index.DocIndex.refresh`)."""
    return cores - POOL_WRITER_CORES >= POOL_MIN_WORKERS


def batches(tasks: Sequence[TextTask]) -> list[tuple[int, int]]:
    """``tasks`` cut in order into (start, end) runs of about ``POOL_BATCH_BYTES``."""
    out: list[tuple[int, int]] = []
    start, size = 0, 0
    for index, task in enumerate(tasks):
        if index > start and size + task.size > POOL_BATCH_BYTES:
            out.append((start, index))
            start, size = index, 0
        size += task.size
    if start < len(tasks):
        out.append((start, len(tasks)))
    return out


def pool_workers(tasks: Sequence[TextTask], cuts: Sequence[tuple[int, int]], cores: int) -> int:
    """Workers for preparing ``tasks`` cut in ``cuts`` on ``cores`` free cores: 0 (in this process) below
    ``POOL_MIN_BYTES`` or when fewer than ``POOL_MIN_WORKERS`` cores are left once the writer has
    ``POOL_WRITER_CORES``."""
    if sum(task.size for task in tasks) < POOL_MIN_BYTES:
        return 0
    workers = min(cores - POOL_WRITER_CORES, POOL_MAX_WORKERS, len(cuts))
    return workers if workers >= POOL_MIN_WORKERS else 0


_worker_job: tuple[DocTree, TextChunker, int] | None = None
"""In a pool worker: the tree, chunker and text limit it prepares with (inherited through fork)."""


def _worker_start(tree: DocTree, chunker: TextChunker, max_chars: int) -> None:
    global _worker_job
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel stops the refresh; the pool is then shut down
    _worker_job = (tree, chunker, max_chars)


def _prepare_batch(tasks: list[TextTask]) -> list[Prepared]:
    assert _worker_job is not None, "a pool worker is started by _worker_start"
    tree, chunker, max_chars = _worker_job
    return [prepare_text(tree, task, chunker, max_chars) for task in tasks]


class TextPreparer:
    """The :class:`Prepared` of ``tasks``, in order (iterate once, inside ``with``); see the module's contract.

    ``cores`` defaults to the cores free now: :func:`host_cores` less :func:`busy_cores` (on a busy
    node a pool would only take turns with the writer). :attr:`workers` says how the files are
    prepared: 0 in this process, else the pool's size.
    """

    def __init__(self, tree: DocTree, tasks: Sequence[TextTask], chunker: TextChunker, max_chars: int, *,
                 cores: int | None = None) -> None:
        self.tree = tree
        self.tasks = list(tasks)
        self.chunker = chunker
        self.max_chars = max_chars
        self._cuts = batches(self.tasks)
        self.workers = pool_workers(self.tasks, self._cuts, cores_free_now() if cores is None else cores)
        self.notes: list[str] = []
        """What a person should know: a pool worker stopped and the rest was prepared here."""
        self._executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> TextPreparer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut the pool down (if any): batches not started are dropped, running ones finish (a batch is
        ``POOL_BATCH_BYTES`` of linear work); safe to call twice."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def __iter__(self) -> Iterator[Prepared]:
        if not self.workers:
            return self._here(0)
        return self._pooled()

    def _here(self, start: int) -> Iterator[Prepared]:
        for task in self.tasks[start:]:
            yield prepare_text(self.tree, task, self.chunker, self.max_chars)

    def _pooled(self) -> Iterator[Prepared]:
        self._executor = executor = ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start,
            initargs=(self.tree, self.chunker, self.max_chars))
        pending: deque[Future[list[Prepared]]] = deque()
        cuts = self._cuts
        sent = taken = 0
        while taken < len(cuts):
            try:
                while sent < len(cuts) and len(pending) < self.workers * POOL_AHEAD:
                    start, end = cuts[sent]
                    pending.append(executor.submit(_prepare_batch, self.tasks[start:end]))
                    sent += 1
                results = pending.popleft().result()
            except (BrokenProcessPool, OSError) as exc:  # a worker died, or none could be forked (no memory, no pids)
                start = cuts[taken][0]
                self.notes.append(f"a docs indexing worker stopped or could not start ({exc}): the last "
                                  f"{len(self.tasks) - start} files were read and chunked in the kernel")
                self.close()
                yield from self._here(start)
                return
            taken += 1
            yield from results
