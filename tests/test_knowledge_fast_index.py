"""Spec (issue 35 point 4): the faster docs index keeps every result and every guarantee.

* **Same chunks.** Markdown and text are chunked in one pass (``text_chunks``): the same
  chunks, slugs, heading trails, line numbers and ``TextTooLong`` as chunking the extracted
  lines (``chunk_lines(extract_lines(...))``), on hostile files too (fences, headings in
  fences, seven ``#``, trailing ``#``, long sections cut in parts, repeated headings,
  Unicode line separators, CR/LF, bytes that are not UTF-8, an empty file).
* **Same ranking.** The full-text table keeps no copy of the text (contentless): the text is
  stored once, in ``chunks``, and BM25 scores are those of a table that keeps it.
* **Exact deletes.** A contentless row is taken out by giving FTS5 its words again: after
  files are edited and removed, every score equals a fresh index's of the same files.
* **Interrupted, the old index stays.** A refresh cut short after files changed leaves the
  previous index searchable as it was; the next refresh brings it up to date.
* **Incremental.** A refresh after one edit re-indexes that file only; other chunks keep their ids.
* **Older and planted indexes.** An index of schema 1 is rebuilt (a note says so), one of a
  newer schema is refused naming the file; full-text rows planted without a chunk, and chunks
  planted outside their file's id range (schema 4), are found when the index is opened: the
  chunks are dropped and the full-text table is rebuilt from the others.
* **The pool reads what the kernel would.** A corpus over ``POOL_MIN_BYTES`` is read, hashed and
  chunked by forked workers: the same chunk, file and failure rows, report and scores as the
  kernel alone. A file a worker cannot read, or whose chunking refuses it, fails alone with its
  reason named; a worker that dies, or cannot be forked, leaves the rest to the kernel (a note
  says so) and the index is the same; an interrupt in a worker or in the kernel's writer leaves
  the old index as it was and no worker behind. In a real kernel (its threads running) the pool
  forks cleanly and output buffered before it is printed once.
* **Derived data, checked on open.** The index is written without fsync; a damaged file (torn
  pages, a header that is not SQLite's) is moved aside and rebuilt, with a note.
* **Full text from the chunk rows.** Each chunk keeps its full-text title (schema 3; an index of
  schema 2 is rebuilt); a file's chunks are the id range its row names, with no other index on
  ``chunks`` (schema 4; an index of schema 3 is rebuilt, and answers ``get`` and ``file_chunks``
  as a fresh one), through deletes, edits and additions in batches of any size; the full-text rows
  are inserted from the chunk rows by SQL, one statement a batch in the writer's thread when a core
  is left for it (two cores or more, at most one other task runnable on two), else one at the end:
  the same tables and scores
  either way, whatever the batch size. An interrupt while a batch's statement runs stops it and keeps
  the old index; a statement that fails fails the refresh and keeps the old index; no thread is left
  behind; a planted chunk id at SQLite's last rowid is refused, not numbered at random.

Indexing speed is measured in ``benchmarks/bench_docs.py``, never here.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import signal
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
from test_knowledge_batch import cut_short_at

from harness_magic.core.knowledge import index as index_module
from harness_magic.core.knowledge import prepare as prepare_module
from harness_magic.core.knowledge.extract import (
    CHUNK_MAX_CHARS,
    ExtractionLimits,
    TextTooLong,
    chunk_lines,
    extract_lines,
    text_chunks,
)
from harness_magic.core.knowledge.index import SCHEMA_VERSION, DocIndex
from harness_magic.core.knowledge.tree import READ_CHUNK_BYTES, DocTree, read_up_to

QUERIES = ["refund window", "partner share policy", "owner team", "fenced code sample", "escalation runbook",
           "it owns the", "refund", "quarterly revenue"]

HOSTILE_PIECES = [
    "# Title", "## Sub", "### Deep ###", "#", "# ", "#no space", "####### seven", "```", "~~~", "  ```py", "\t```",
    "text line", "", "   ", "x" * 700, "y" * (CHUNK_MAX_CHARS + 100), "## Sub", "#\tTab", "## a-2", "## a",
    "\x0bvertical tab", "line\u2028separator", "\r", "a\r\nb", "# Ünïcode héading", "####", "## ##",
    "# code `x`", "#`", "`# x`", "  ~~~ ", "# ~~~", "## Refunds (EU) / partner share", "<script>x</script>",
]


def both_ways(path: str, suffix: str, data: bytes, max_chars: int):
    """(two-step result, one-pass result): a chunk list or "too long" for each."""
    try:
        reference = chunk_lines(path, extract_lines(Path("f" + suffix), data, max_chars=max_chars)[0])
    except TextTooLong:
        reference = "too long"
    try:
        fast = text_chunks(path, suffix, data, max_chars=max_chars)
    except TextTooLong:
        fast = "too long"
    return reference, fast


@pytest.mark.parametrize("suffix", [".md", ".markdown", ".txt"])
def test_one_pass_chunks_equal_the_two_step_chunks_on_hostile_files(suffix):
    rng = random.Random(35)  # seeded: the same files every run
    documents = [b"", b"\xff\xfe# not utf-8\n\nbody \xc3", b"# Only a heading", b"# A\n## B\n### C\n",
                 b"```\n# fenced, not a heading\n```\n# Real\nbody\n", ("## Long\n" + "word " * 2000).encode()]
    documents += ["\n".join(rng.choice(HOSTILE_PIECES) for _ in range(rng.randint(1, 40))).encode()
                  for _ in range(400)]
    for data in documents:
        for max_chars in (1_000_000, 500):
            reference, fast = both_ways("docs/f" + suffix, suffix, data, max_chars)
            assert fast == reference, data


def test_the_test_corpus_is_chunked_the_same_both_ways():
    corpus = Path(__file__).parent / "knowledge_corpus"
    files = [p for p in sorted(corpus.rglob("*")) if p.suffix in (".md", ".markdown", ".txt")]
    assert files
    for path in files:
        reference, fast = both_ways(str(path.relative_to(corpus)), path.suffix, path.read_bytes(), 1_000_000)
        assert fast == reference != [], path


@pytest.mark.parametrize("suffix", [".pdf", ".html", ".htm"])
def test_one_pass_chunking_refuses_files_that_need_the_confined_worker(suffix):
    with pytest.raises(ValueError, match="extract_lines"):
        text_chunks("docs/f" + suffix, suffix, b"<h1>x</h1>")


# --------------------------------------------------------------------------- the index


def write_docs(root: Path, count: int, word: str = "refund") -> None:
    root.mkdir(exist_ok=True)
    for i in range(count):
        (root / f"doc{i}.md").write_text(
            f"# Doc {i}\n\n## Refunds {i}\n\n{word} window policy{i} partner share\n\n"
            f"## Owner\n\nteam{i} owns it; escalation runbook {i % 3}\n\n"
            f"```\n# fenced code sample {i}\n```\n\n## Revenue\n\nquarterly revenue {'refund ' * (i % 4)}\n")


def scores(index: DocIndex) -> dict[str, list[tuple[str, float]]]:
    return {q: [(h.source_id, round(h.score, 9)) for h in index.keyword(q, 20)] for q in QUERIES}


def test_the_full_text_table_keeps_no_text_and_ranks_as_a_table_that_does(tmp_path):
    write_docs(tmp_path / "docs", 12)
    index = DocIndex([tmp_path / "docs"], tmp_path / "index.sqlite")
    index.refresh()
    db = index._db
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name='chunks_fts_content'").fetchone()[0] == 0
    assert {row[0] for row in db.execute("SELECT body FROM chunks_fts")} == {None}
    kept = sqlite3.connect(":memory:")
    kept.execute("CREATE VIRTUAL TABLE t USING fts5(title, body, tokenize='porter unicode61')")
    kept.executemany("INSERT INTO t (rowid, title, body) VALUES (?,?,?)",
                     [(r[0], prepare_module.fts_title(json.loads(r[2]), r[1]), r[3])
                      for r in db.execute("SELECT id, path, trail, text FROM chunks")])
    for query in QUERIES:
        expression = index_module.fts_query(query)
        sql = "SELECT rowid, round(bm25({t}, 3.0, 1.0), 9) AS s FROM {t} WHERE {t} MATCH ? ORDER BY s, rowid"
        ours = db.execute(sql.format(t="chunks_fts"), (expression,)).fetchall()
        assert ours and ours == kept.execute(sql.format(t="t"), (expression,)).fetchall(), query
    index.close()


def test_after_edits_and_removals_every_score_equals_a_fresh_index(tmp_path):
    root = tmp_path / "docs"
    write_docs(root, 10)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    (root / "doc3.md").unlink()
    (root / "doc5.md").write_text("# Doc 5\n\n## Refunds\n\nrewritten refund window, no partner share\n")
    (root / "doc7.md").write_text("# Seven\n\nonly a top section about quarterly revenue\n")
    (root / "doc11.md").write_text("# Eleven\n\n## Owner\n\nescalation runbook owner team\n")
    report = index.refresh()
    assert (report.removed, report.updated, report.added) == (
        ["docs/doc3.md"], ["docs/doc5.md", "docs/doc7.md"], ["docs/doc11.md"])
    fresh = DocIndex([root], tmp_path / "fresh.sqlite")
    fresh.refresh()
    assert scores(index) == scores(fresh)
    assert index._db.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'policy3'").fetchone()[0] == 0
    index._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0)")
    index.close()
    fresh.close()


def test_a_refresh_cut_short_after_changes_leaves_the_old_index_searchable(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    write_docs(root, 6)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    before, counts = scores(index), index.counts()
    write_docs(root, 6, word="chargeback")  # every file changes
    (root / "doc9.md").write_text("# Nine\n\nnew file\n")
    real = cut_short_at(monkeypatch, "doc4.md")  # the user stops the cell half-way
    with pytest.raises(KeyboardInterrupt):
        index.refresh()
    assert scores(index) == before and index.counts() == counts
    assert index.keyword("chargeback", 5) == []
    reopened = DocIndex([root], tmp_path / "index.sqlite")  # another kernel opening the same file
    assert scores(reopened) == before
    reopened.close()
    monkeypatch.setattr(index_module, "text_chunks", real)
    report = index.refresh()
    assert len(report.updated) == 6 and report.added == ["docs/doc9.md"]
    assert [h.chunk.path for h in index.keyword("chargeback policy4", 1)] == ["docs/doc4.md"]
    index.close()


def test_a_refresh_after_one_edit_reindexes_that_file_only(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    write_docs(root, 8)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    ids = dict(index._db.execute("SELECT path || '#' || slug, id FROM chunks WHERE path != 'docs/doc2.md'"))
    (root / "doc2.md").write_text("# Doc 2\n\n## Refunds\n\nvoucher rules changed\n")
    chunked: list[str] = []
    real = index_module.text_chunks

    def counting(path, suffix, data, **limits):
        chunked.append(path)
        return real(path, suffix, data, **limits)

    monkeypatch.setattr(index_module, "text_chunks", counting)
    report = index.refresh()
    assert chunked == ["docs/doc2.md"] and report.updated == ["docs/doc2.md"] and report.unchanged == 7
    assert dict(index._db.execute("SELECT path || '#' || slug, id FROM chunks WHERE path != 'docs/doc2.md'")) == ids
    assert [h.source_id for h in index.keyword("voucher", 5)] == ["doc:docs/doc2.md#refunds"]
    assert index.keyword("policy2", 5) == []
    index.close()


def test_an_index_of_schema_1_is_rebuilt_and_a_newer_one_is_refused(tmp_path):
    root = tmp_path / "docs"
    write_docs(root, 3)
    path = tmp_path / "index.sqlite"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        INSERT INTO meta VALUES ('schema', '1');
        CREATE TABLE files (path TEXT PRIMARY KEY, sha256 TEXT, size INTEGER, mtime_ns INTEGER,
                            chunks INTEGER, indexed_at REAL, note TEXT);
        CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT, slug TEXT, trail TEXT, start_line INTEGER,
                             end_line INTEGER, text TEXT, UNIQUE(path, slug));
        CREATE INDEX chunks_path ON chunks(path);
        CREATE VIRTUAL TABLE chunks_fts USING fts5(title, body, tokenize='porter unicode61');
        INSERT INTO files VALUES ('docs/doc0.md', 'x', 1, 1, 1, 0, '');
        INSERT INTO chunks VALUES (1, 'docs/doc0.md', 'old', '["Old"]', 1, 2, 'stale text');
        INSERT INTO chunks_fts (rowid, title, body) VALUES (1, 'Old', 'stale text');
    """)
    old.commit()
    old.close()
    path.chmod(0o600)
    index = DocIndex([root], path)
    assert any("had schema 1" in note for note in index.notes)
    report = index.refresh()
    assert len(report.added) == 3 and index.keyword("stale", 5) == []
    assert index._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == str(SCHEMA_VERSION)
    index._db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION + 1),))
    index.close()
    with pytest.raises(ValueError, match=f"index.sqlite' has schema {SCHEMA_VERSION + 1}"):
        DocIndex([root], path)


@pytest.mark.parametrize("planted", ["stray-row", "row-for-an-orphan-chunk", "chunk-without-row"])
def test_planted_full_text_rows_are_found_on_open_and_the_table_rebuilt(tmp_path, planted):
    root = tmp_path / "docs"
    write_docs(root, 5)
    path = tmp_path / "index.sqlite"
    index = DocIndex([root], path)
    index.refresh()
    expected = scores(index)
    index.close()
    db = sqlite3.connect(path)
    if planted == "stray-row":  # words that rank first, with no chunk behind them
        db.execute("INSERT INTO chunks_fts (rowid, title, body) VALUES (999, 'refund refund', 'refund window')")
    elif planted == "row-for-an-orphan-chunk":
        db.execute("INSERT INTO chunks VALUES (998, 'docs/ghost.md', 'x', '[\"Refunds\"]', 1, 2, 'refund window', "
                   "'Refunds planted')")
        db.execute("INSERT INTO chunks_fts (rowid, title, body) VALUES (998, 'Refunds planted', 'refund window')")
    else:
        db.execute("INSERT INTO chunks VALUES (997, 'docs/doc1.md', 'extra', '[]', 1, 2, 'refund window', ' x')")
    db.commit()
    db.close()
    reopened = DocIndex([root], path)
    rows = reopened._db.execute("SELECT (SELECT group_concat(id) FROM (SELECT id FROM chunks_fts_docsize ORDER BY id)),"
                                " (SELECT group_concat(id) FROM (SELECT id FROM chunks ORDER BY id))").fetchone()
    assert rows[0] == rows[1]
    assert scores(reopened) == expected  # a chunk outside its file's id range is dropped too
    reopened._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0)")
    reopened.close()


# --------------------------------------------------------------------------- the pool of processes


def write_big_docs(root: Path, seed: int = 35) -> list[Path]:
    """Markdown, .markdown and .txt files in two folders, at least POOL_MIN_BYTES in all (the pool's side)."""
    rng = random.Random(seed)
    words = ["refund", "window", "partner", "share", "owner", "team", "revenue", "churn", "voucher", "policy",
             "escalation", "runbook", "quarterly", "invoice", "payout", "région", "naïve"]
    paths, total, number = [], 0, 0
    while total < prepare_module.POOL_MIN_BYTES + 64 * 1024:
        suffix = (".md", ".md", ".markdown", ".txt")[number % 4]
        lines = [f"# Doc {number}", ""]
        for section in range(rng.randint(3, 12)):
            lines += [f"## {rng.choice(words).title()} {section}", "",
                      " ".join(rng.choices(words, k=rng.randint(20, 400)))]
            if rng.random() < 0.2:
                lines += ["```", f"# fenced {number}", "```"]
            lines.append(rng.choice(HOSTILE_PIECES))
        path = root / f"d{number % 2}" / f"doc{number:04d}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines))
        paths.append(path)
        total += path.stat().st_size
        number += 1
    return paths


def tables(index: DocIndex) -> tuple[list, list, list]:
    """Every row of chunks, files (but the time) and failures, in order."""
    db = index._db
    return (db.execute("SELECT * FROM chunks ORDER BY id").fetchall(),
            db.execute("SELECT path, sha256, size, mtime_ns, chunks, note FROM files ORDER BY path").fetchall(),
            db.execute("SELECT * FROM failures ORDER BY path").fetchall())


@pytest.fixture
def three_cores(monkeypatch):
    """The pool is used whatever this machine's cores and load: three free, so two workers (one core is the
    writer's); returns a switch for the kernel-only path."""
    monkeypatch.setattr(prepare_module, "host_cores", lambda: 3)
    monkeypatch.setattr(prepare_module, "busy_cores", lambda: 0)
    monkeypatch.setattr(sys.modules[__name__], "CHILDREN_BEFORE", set(multiprocessing.active_children()))

    def kernel_only() -> None:
        monkeypatch.setattr(prepare_module, "POOL_MIN_BYTES", 1 << 62)

    return kernel_only


CHILDREN_BEFORE: set = set()
"""This process's children when the test started (another test's may still run): the pool's must be gone."""


def no_pool_left() -> bool:
    return set(multiprocessing.active_children()) <= CHILDREN_BEFORE


@pytest.mark.parametrize(("cores", "busy", "workers"), [(1, 0, 0), (2, 0, 0), (3, 0, 2), (6, 0, 5), (3, 1, 0),
                                                      (5, 2, 2), (2, 7, 0)])
def test_a_corpus_over_the_threshold_gives_the_same_rows_as_the_kernel_alone(tmp_path, three_cores, monkeypatch,
                                                                             cores, busy, workers):
    root = tmp_path / "docs"
    write_big_docs(root)
    monkeypatch.setattr(prepare_module, "host_cores", lambda: cores)  # the writer keeps one free core
    monkeypatch.setattr(prepare_module, "busy_cores", lambda: busy)  # others running on the node now
    limits = ExtractionLimits(text_max_chars=6_000)  # a few of the files are over it: failures, the same ones
    pooled = DocIndex([root], tmp_path / "pooled.sqlite", limits=limits)
    report = pooled.refresh()
    assert report.workers == workers and no_pool_left()
    three_cores()
    alone = DocIndex([root], tmp_path / "alone.sqlite", limits=limits)
    alone_report = alone.refresh()
    assert alone_report.workers == 0
    assert tables(pooled) == tables(alone)
    assert tables(pooled)[2], "some files are over text_max_chars"
    for field_name in ("added", "updated", "removed", "skipped", "chunks_written", "bytes_read", "files", "chunks"):
        assert getattr(report, field_name) == getattr(alone_report, field_name), field_name
    assert scores(pooled) == scores(alone)
    pooled.close()
    alone.close()


def test_a_file_that_fails_in_a_worker_fails_alone_with_its_reason_named(tmp_path, three_cores, monkeypatch):
    root = tmp_path / "docs"
    paths = write_big_docs(root)
    unreadable, hostile = paths[5], paths[17]
    real_read, real_chunks = DocTree.read, index_module.text_chunks

    def read(self, doc_root, rel):  # what a file the kernel may not read gives (the tests run as root)
        if rel.endswith(unreadable.name):
            raise PermissionError(13, "Permission denied")
        return real_read(self, doc_root, rel)

    def chunks(path, suffix, data, **limits):  # a file its chunking refuses, as a hostile one is
        if path.endswith(hostile.name):
            raise TextTooLong(1234)
        return real_chunks(path, suffix, data, **limits)

    monkeypatch.setattr(DocTree, "read", read)  # set before the pool forks: the workers run these
    monkeypatch.setattr(index_module, "text_chunks", chunks)
    index = DocIndex([root], tmp_path / "index.sqlite")
    report = index.refresh()
    assert report.workers == 2 and no_pool_left()
    unreadable_id, hostile_id = (f"docs/{p.parent.name}/{p.name}" for p in (unreadable, hostile))
    assert report.skipped == [f"{unreadable_id}: Permission denied", f"{hostile_id}: text over 1,234 characters"]
    assert len(report.added) == len(paths) - 2 and unreadable_id not in report.added
    assert index._db.execute("SELECT path, reason FROM failures").fetchall() == [
        (hostile_id, "text over 1,234 characters")]
    assert index._db.execute("SELECT count(*) FROM chunks WHERE path IN (?, ?)", (unreadable_id, hostile_id)
                             ).fetchone()[0] == 0
    index._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0)")
    three_cores()  # the same files, the same refusals, without a pool
    alone = DocIndex([root], tmp_path / "alone.sqlite")
    assert alone.refresh().skipped == report.skipped and tables(alone) == tables(index)
    index.close()
    alone.close()


def test_a_worker_that_dies_leaves_its_files_to_the_kernel_and_a_note(tmp_path, three_cores, monkeypatch):
    root = tmp_path / "docs"
    paths = write_big_docs(root)
    kernel, real = os.getpid(), index_module.text_chunks

    def dying(path, suffix, data, **limits):  # killed half-way through (out of memory, a stray kill -9)
        if os.getpid() != kernel and path.endswith(paths[len(paths) // 2].name):
            os._exit(137)
        return real(path, suffix, data, **limits)

    monkeypatch.setattr(index_module, "text_chunks", dying)
    index = DocIndex([root], tmp_path / "index.sqlite")
    report = index.refresh()
    assert report.workers == 2 and no_pool_left()
    assert len(report.added) == len(paths) and report.skipped == []
    assert [n for n in report.notes if "docs indexing worker stopped" in n and "read and chunked in the kernel" in n]
    three_cores()
    alone = DocIndex([root], tmp_path / "alone.sqlite")
    alone.refresh()
    assert tables(index) == tables(alone) and scores(index) == scores(alone)
    index.close()
    alone.close()


@pytest.mark.parametrize("where", ["in-a-worker", "in-the-kernel"])
def test_an_interrupted_pool_build_leaves_the_old_index_intact(tmp_path, three_cores, monkeypatch, where):
    root = tmp_path / "docs"
    paths = write_big_docs(root)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    before, rows = scores(index), tables(index)
    for path in paths:  # every file changes
        path.write_text(re.sub("(?i)refund", "chargeback", path.read_text()))
    if where == "in-a-worker":  # the user's interrupt, raised while a worker chunks a file half-way
        cut_short_at(monkeypatch, paths[len(paths) // 2].name)
    else:  # raised in the kernel while it writes the rows the workers sent
        real_add = index_module._RowWriter.add

        def add(self, doc_path, prepared):
            if doc_path.endswith(paths[len(paths) // 2].name):
                raise KeyboardInterrupt
            real_add(self, doc_path, prepared)

        monkeypatch.setattr(index_module._RowWriter, "add", add)
    with pytest.raises(KeyboardInterrupt):
        index.refresh()
    assert no_pool_left()
    assert scores(index) == before and tables(index) == rows and index.keyword("chargeback", 5) == []
    monkeypatch.undo()
    monkeypatch.setattr(prepare_module, "host_cores", lambda: 3)
    monkeypatch.setattr(prepare_module, "busy_cores", lambda: 0)
    report = index.refresh()
    assert report.workers == 2 and len(report.updated) == len(paths)
    assert index.keyword("chargeback", 5) != [] and index.keyword("refund", 5) == []
    index.close()


def test_when_no_worker_can_be_forked_the_kernel_prepares_every_file(tmp_path, three_cores, monkeypatch):
    root = tmp_path / "docs"
    paths = write_big_docs(root)

    def no_fork():  # what a kernel at its process limit (EAGAIN) or out of memory (ENOMEM) gets
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    index = DocIndex([root], tmp_path / "index.sqlite")
    report = index.refresh()
    assert len(report.added) == len(paths) and no_pool_left()
    assert [n for n in report.notes if "could not start" in n and f"last {len(paths)} files" in n]
    monkeypatch.undo()
    three_cores()
    alone = DocIndex([root], tmp_path / "alone.sqlite")
    alone.refresh()
    assert tables(index) == tables(alone)
    index.close()
    alone.close()


@pytest.mark.kernel
def test_in_a_real_kernel_the_pool_forks_cleanly_and_prints_nothing_twice(tmp_path):
    from kernel_helpers import Kernel

    root = tmp_path / "docs"
    paths = write_big_docs(root)
    kernel = Kernel(tmp_path)
    try:  # the kernel's own threads (iopub, heartbeat, control) run while the pool forks
        cell = kernel.run(
            "import multiprocessing\n"
            "from harness_magic.core.knowledge import prepare\n"
            "from harness_magic.core.knowledge.index import DocIndex\n"
            "prepare.host_cores, prepare.busy_cores = lambda: 3, lambda: 0\n"
            "print('printed before the refresh', end='')  # still in the kernel's output buffer when it forks\n"
            f"report = DocIndex([{str(root)!r}], {str(tmp_path / 'index.sqlite')!r}).refresh()\n"
            "print('|', report.workers, len(report.added), report.notes, multiprocessing.active_children())\n")
        assert cell.ok, cell.outputs
        assert cell.stdout == f"printed before the refresh| 2 {len(paths)} [] []\n"
    finally:
        kernel.close()


@pytest.mark.parametrize("damage", ["torn-pages", "not-a-database"])
def test_a_damaged_index_is_moved_aside_and_rebuilt(tmp_path, damage):
    root = tmp_path / "docs"
    write_docs(root, 40)
    path = tmp_path / "index.sqlite"
    index = DocIndex([root], path)
    index.refresh()
    expected = scores(index)
    assert index._db.execute("PRAGMA synchronous").fetchone()[0] == 0  # derived data: written without fsync
    page = index._db.execute("PRAGMA page_size").fetchone()[0]
    index.close()
    data = bytearray(path.read_bytes())
    if damage == "torn-pages":  # what a power loss can leave of pages written without fsync: the 2nd and 3rd
        data[page:page * 3] = random.Random(35).randbytes(page * 2)
    else:
        data[:100] = b"not sqlite " * 9 + b"x"
    path.write_bytes(bytes(data))
    reopened = DocIndex([root], path)
    assert [n for n in reopened.notes if "was damaged" in n and ".damaged-" in n and "rebuilt" in n]
    assert reopened.counts() == (0, 0) and len(list(tmp_path.glob("index.sqlite.damaged-*"))) == 1
    report = reopened.refresh()
    assert len(report.added) == 40 and scores(reopened) == expected
    assert [n for n in report.notes if "was damaged" in n]  # said once, in the first refresh's report
    reopened.close()


@pytest.mark.parametrize(("loadavg", "busy", "running"), [
    (b"0.50 0.40 0.30 1/120 4242\n", 0, 0), (b"5.0 6.0 5.9 4/117 3301\n", 5, 3), (b"0.90 2.0 3.0 4/117 3301\n", 3, 3),
    (b"1.7 0.2 0.1 1/99 7\n", 1, 0), (b"0.0 0.0 0.0 0/1 1\n", 0, 0), (b"", 0, 0), (b"1 2 3\n", 0, 0),
    (b"1 2 3 x/y 4\n", 0, 0), (b"\xff\xfe 1 2 -5/1 7", 0, 0), (b"nan 1 1 3/9 1", 0, 0), (b"inf 1 1 3/9 1", 0, 0),
    (b"-4 1 1 1/9 1", 0, 0), (b"1 2 3 99999999999999999999/1 5", 10**20 - 2, 10**20 - 2)])
def test_busy_cores_reads_the_load_and_takes_what_it_cannot_read_for_idle(tmp_path, monkeypatch, loadavg, busy,
                                                                            running):
    """busy_cores: the runnable tasks or the 1-minute average, the higher; running_now: the runnable tasks alone."""
    (tmp_path / "loadavg").write_bytes(loadavg)
    monkeypatch.setattr(prepare_module, "LOADAVG_PATH", str(tmp_path / "loadavg"))
    assert (prepare_module.busy_cores(), prepare_module.running_now()) == (busy, running)
    monkeypatch.setattr(prepare_module, "LOADAVG_PATH", str(tmp_path / "missing"))
    assert (prepare_module.busy_cores(), prepare_module.running_now()) == (0, 0)


@pytest.mark.parametrize(("size", "expected", "limit"), [
    (0, 0, 100), (7_000, 7_000, 20_000), (100_000, 10, 1_000_000), (100_000, 100_000, 4_096),
    (5_000, 9_000, 1_000_000), (3 * READ_CHUNK_BYTES + 5, 0, 10 * READ_CHUNK_BYTES), (10, 10, 10)])
def test_a_file_is_read_to_its_end_or_the_limit_whatever_its_fstat_said(tmp_path, size, expected, limit):
    """The expected size only sizes the first read: a file that grew or shrank since is read as it is now."""
    data = random.Random(size).randbytes(size)
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        assert read_up_to(fd, expected, limit) == data[:limit]
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the writer's full-text thread


def writer_threads() -> list[threading.Thread]:
    """The refresh writer's full-text threads still alive (each refresh's is stopped when it ends)."""
    return [t for t in threading.enumerate() if t.name.startswith("docs-index-fts")]


def test_an_index_of_schema_2_is_rebuilt_with_each_chunks_full_text_title(tmp_path):
    root = tmp_path / "docs"
    write_docs(root, 4)
    path = tmp_path / "index.sqlite"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        INSERT INTO meta VALUES ('schema', '2');
        CREATE TABLE files (path TEXT PRIMARY KEY, sha256 TEXT, size INTEGER, mtime_ns INTEGER,
                            chunks INTEGER, indexed_at REAL, note TEXT);
        CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT, slug TEXT, trail TEXT, start_line INTEGER,
                             end_line INTEGER, text TEXT, UNIQUE(path, slug));
        CREATE VIRTUAL TABLE chunks_fts USING fts5(title, body, content='', tokenize='porter unicode61');
        CREATE TABLE vectors (chunk_id INTEGER PRIMARY KEY, model TEXT, vec BLOB);
        CREATE TABLE failures (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, limits TEXT, reason TEXT);
        INSERT INTO files VALUES ('docs/doc0.md', 'x', 1, 1, 1, 0, '');
        INSERT INTO chunks VALUES (1, 'docs/doc0.md', 'old', '["Old"]', 1, 2, 'stale text');
        INSERT INTO chunks_fts (rowid, title, body) VALUES (1, 'Old docs/doc0.md', 'stale text');
    """)
    old.commit()
    old.close()
    path.chmod(0o600)
    index = DocIndex([root], path)
    assert any(f"had schema 2: rebuilt for schema {SCHEMA_VERSION}" in note for note in index.notes)
    report = index.refresh()
    assert len(report.added) == 4 and index.keyword("stale", 5) == []
    rows = index._db.execute("SELECT path, trail, title FROM chunks").fetchall()
    assert rows and all(title == prepare_module.fts_title(json.loads(trail), doc) for doc, trail, title in rows)
    fresh = DocIndex([root], tmp_path / "fresh.sqlite")
    fresh.refresh()
    assert scores(index) == scores(fresh) and tables(index) == tables(fresh)
    index.close()
    fresh.close()


def test_an_index_of_schema_3_is_rebuilt_without_its_path_and_slug_index(tmp_path):
    root = tmp_path / "docs"
    write_docs(root, 4)
    path = tmp_path / "index.sqlite"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        INSERT INTO meta VALUES ('schema', '3');
        CREATE TABLE files (path TEXT PRIMARY KEY, sha256 TEXT, size INTEGER, mtime_ns INTEGER,
                            chunks INTEGER, indexed_at REAL, note TEXT);
        CREATE TABLE chunks (id INTEGER PRIMARY KEY, path TEXT, slug TEXT, trail TEXT, start_line INTEGER,
                             end_line INTEGER, text TEXT, title TEXT, UNIQUE(path, slug));
        CREATE VIRTUAL TABLE chunks_fts USING fts5(title, body, content='', tokenize='porter unicode61');
        CREATE TABLE vectors (chunk_id INTEGER PRIMARY KEY, model TEXT, vec BLOB);
        CREATE TABLE failures (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, limits TEXT, reason TEXT);
        INSERT INTO files VALUES ('docs/doc0.md', 'x', 1, 1, 1, 0, '');
        INSERT INTO chunks VALUES (1, 'docs/doc0.md', 'old', '["Old"]', 1, 2, 'stale text', 'Old docs/doc0.md');
        INSERT INTO chunks_fts (rowid, title, body) VALUES (1, 'Old docs/doc0.md', 'stale text');
    """)
    old.commit()
    old.close()
    path.chmod(0o600)
    index = DocIndex([root], path)
    assert any(f"had schema 3: rebuilt for schema {SCHEMA_VERSION}" in note for note in index.notes)
    report = index.refresh()
    assert len(report.added) == 4 and index.keyword("stale", 5) == []
    assert index._db.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='chunks'").fetchall() == []
    assert_id_ranges(index)
    fresh = DocIndex([root], tmp_path / "fresh.sqlite")
    fresh.refresh()
    assert scores(index) == scores(fresh) and tables(index) == tables(fresh)
    assert index.get("doc:docs/doc2.md#owner") == fresh.get("doc:docs/doc2.md#owner") is not None
    assert index.file_chunks("docs/doc2.md") == fresh.file_chunks("docs/doc2.md") != []
    index.close()
    fresh.close()


def assert_id_ranges(index: DocIndex) -> None:
    """Each file's chunks are exactly the id range its row names (schema 4), and no chunk is outside one."""
    db = index._db
    files = db.execute("SELECT path, first_id, chunks FROM files").fetchall()
    for path, first, count in files:
        ids = [row[0] for row in db.execute("SELECT id FROM chunks WHERE path=? ORDER BY id", (path,))]
        assert ids == list(range(first, first + count)), path
    assert db.execute("SELECT count(*) FROM chunks").fetchone()[0] == sum(count for _, _, count in files)


@pytest.mark.parametrize(("cores", "others", "overlapped"), [(1, 0, False), (2, 0, True), (2, 1, True), (2, 2, False),
                                                           (8, 7, True), (8, 8, False)])
def test_full_text_runs_in_the_writers_thread_with_a_core_left_for_it(tmp_path, monkeypatch, cores, others,
                                                                      overlapped):
    root = tmp_path / "docs"
    write_docs(root, 6)
    monkeypatch.setattr(index_module, "host_cores", lambda: cores)
    monkeypatch.setattr(prepare_module, "LOADAVG_PATH", str(tmp_path / "loadavg"))
    # runnable tasks now: this one and `others` (the 1-minute average is not what counts)
    (tmp_path / "loadavg").write_text(f"40.00 40.00 40.00 {others + 1}/900 12345\n")
    index = DocIndex([root], tmp_path / "index.sqlite")
    report = index.refresh()
    assert report.overlapped == overlapped and len(report.added) == 6
    fresh = DocIndex([root], tmp_path / "fresh.sqlite")
    monkeypatch.setattr(index_module, "host_cores", lambda: 1)
    fresh.refresh()
    assert tables(index) == tables(fresh) and scores(index) == scores(fresh) and writer_threads() == []
    index.close()
    fresh.close()


@pytest.mark.parametrize("overlap", [True, False])
def test_batches_of_a_few_rows_index_what_one_batch_does(tmp_path, monkeypatch, overlap):
    root = tmp_path / "docs"
    write_docs(root, 12)
    one = DocIndex([root], tmp_path / "one.sqlite")
    one.refresh()
    monkeypatch.setattr(index_module, "FTS_BATCH_ROWS", 3)  # a batch after each file
    # with a core left for it, a full-text statement in flight after each file; without, one at the end
    monkeypatch.setattr(index_module, "FTS_OVERLAP_CORES", -10**6 if overlap else 10**6)
    many = DocIndex([root], tmp_path / "many.sqlite")
    many.refresh()
    assert tables(many) == tables(one) and scores(many) == scores(one)
    (root / "doc3.md").unlink()  # the next refresh deletes, updates and adds while batches run
    (root / "doc5.md").write_text("# Doc 5\n\n## Refunds\n\nrewritten refund window\n")
    write_docs(root / "more", 5, word="chargeback")
    for index in (one, many):
        index.refresh()
        assert_id_ranges(index)
    assert tables(many) == tables(one) and scores(many) == scores(one)
    many._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0)")
    assert writer_threads() == []
    one.close()
    many.close()


@pytest.mark.timeout(120)
def test_an_interrupt_while_a_full_text_batch_runs_stops_it_and_keeps_the_old_index(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    write_docs(root, 12)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    before, rows = scores(index), tables(index)
    write_docs(root, 12, word="chargeback")  # every file changes
    monkeypatch.setattr(index_module, "FTS_BATCH_ROWS", 4)
    monkeypatch.setattr(index_module, "FTS_OVERLAP_CORES", -10**6)  # full text in the writer's thread
    # The first batch's full-text statement never ends by itself, so the refresh waits for it; the user's
    # interrupt (SIGINT, as the notebook's stop button sends) comes then: only the writer stopping the
    # statement (sqlite3_interrupt) lets the refresh roll back and return.
    monkeypatch.setattr(index_module, "_FTS_FROM_CHUNKS", index_module._FTS_FROM_CHUNKS + " AND (WITH RECURSIVE "
                        "n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n) > 0")
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever the runner set
    stop = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    stop.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            index.refresh()
    finally:
        stop.cancel()
        signal.signal(signal.SIGINT, handler)
    assert writer_threads() == []
    assert scores(index) == before and tables(index) == rows and index.keyword("chargeback", 5) == []
    monkeypatch.undo()
    report = index.refresh()
    assert len(report.updated) == 12 and writer_threads() == []
    assert [h.chunk.path for h in index.keyword("chargeback policy4", 1)] == ["docs/doc4.md"]
    index.close()


def test_a_full_text_batch_that_fails_fails_the_refresh_and_keeps_the_old_index(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    write_docs(root, 6)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    before, rows = scores(index), tables(index)
    write_docs(root, 6, word="chargeback")
    monkeypatch.setattr(index_module, "FTS_OVERLAP_CORES", -10**6)  # the error is raised in the writer's thread
    monkeypatch.setattr(index_module, "_FTS_FROM_CHUNKS", "INSERT INTO chunks_fts (rowid, title, body) "
                        "SELECT id, no_such_column, text FROM chunks WHERE id > ?")
    with pytest.raises(sqlite3.OperationalError, match="no_such_column"):
        index.refresh()
    assert writer_threads() == []
    assert scores(index) == before and tables(index) == rows
    index.close()


def test_a_planted_chunk_id_at_sqlites_last_rowid_is_refused_not_numbered_at_random(tmp_path):
    root = tmp_path / "docs"
    write_docs(root, 3)
    path = tmp_path / "index.sqlite"
    index = DocIndex([root], path)
    index.refresh()
    index.close()
    db = sqlite3.connect(path)  # past the last rowid SQLite draws new ids at random: a batch could not be found
    first, count, last = db.execute("SELECT first_id, chunks, path FROM files ORDER BY first_id DESC").fetchone()
    moved = index_module.ROWID_MAX - count + 1  # the last file's chunks end at the last rowid, its row naming them
    db.execute("UPDATE chunks SET id = id - ? + ? WHERE path = ?", (first, moved, last))
    db.execute("UPDATE files SET first_id = ? WHERE path = ?", (moved, last))
    db.commit()
    db.close()
    reopened = DocIndex([root], path)  # its full-text rows no longer match: rebuilt from the chunks on open
    expected = scores(reopened)
    assert expected["refund"]
    write_docs(root / "more", 1)
    with pytest.raises(ValueError, match="chunk ids are spent .* delete the index file to rebuild it"):
        reopened.refresh()
    assert scores(reopened) == expected and writer_threads() == []
    reopened.close()
