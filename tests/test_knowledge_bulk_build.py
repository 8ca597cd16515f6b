"""Spec (issue 35 point 4): a first build writes its pages once, and answers every search as before.

* **A first build goes through a rollback journal.** An index with no file yet is built in one
  transaction through SQLite's rollback journal (``index.BULK_JOURNAL``: the new pages are written
  once, into the file, not to the WAL and then copied), and the file is back in WAL when the
  build ends, however it ends (committed, interrupted, failed). A new index file has
  ``index_file.PAGE_BYTES`` pages. Another connection open on the file keeps the build in WAL.
* **The walk goes on while files are written.** Where no pool of processes can run (fewer than
  ``POOL_MIN_WORKERS`` cores free besides the writer's), each file is read, hashed and chunked as the
  walk finds it, and the first batch is written before the walk ends; where a pool can run, the walk
  ends first (the pool's size depends on the files'). The index is the same either way, and a file
  the walk listed that becomes a link before its read is refused.
* **Quick handoffs while batches run.** The interpreter's switch interval is lowered to
  ``index.FTS_SWITCH_INTERVAL_S`` while full-text batches run in the writer's thread and put back
  when the refresh ends, however it ends, unless something else changed it meanwhile.
* **Killed mid-way, the index is as before.** A process killed (SIGKILL) in the middle of a first
  build leaves the journal behind; the next open rolls it back: an empty index, not a half one,
  no damage found, and the next refresh builds it whole. Killed in the middle of a re-index (in
  WAL), the previous index answers as it did.
* **Same answers.** However an index is built (a first build through the journal with its batches
  left as FTS5 segments and its FTS5 leaves filling its 16 KiB pages, or the build as before: 4 KiB
  pages, FTS5's default leaf size, WAL, one full-text statement), every
  labelled question and test query gets the same hits with the same scores, on the test corpus and
  on hostile files (a line over the text limit, a file over the size limit, NUL bytes, a hundred
  nested directories, headings six deep repeated, a file swapped for a symbolic link mid-build):
  the same chunk, file and failure rows and the same skips.

Indexing speed is measured in ``benchmarks/bench_docs.py``, never here.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from test_knowledge_batch import cut_short_at
from test_knowledge_fast_index import QUERIES, scores, tables, write_docs, writer_threads

from harness_magic.core.knowledge import index as index_module
from harness_magic.core.knowledge import index_file
from harness_magic.core.knowledge import prepare as prepare_module
from harness_magic.core.knowledge.index import DocIndex
from harness_magic.core.knowledge.tree import FILE_MAX_BYTES, DocTree

CORPUS = Path(__file__).parent / "knowledge_corpus"
LABELLED = [item["q"] for item in yaml.safe_load((Path(__file__).parent / "knowledge_queries.yaml").read_text())]
HOSTILE_QUERIES = ["after the nul", "nested deep leaf", "level six heading", "refund window", "section"]


def journal_mode(index: DocIndex) -> str:
    return index._db.execute("PRAGMA journal_mode").fetchone()[0]


def in_batches(monkeypatch, rows: int = 4) -> None:
    """Every refresh runs its full text batch by batch in the writer's thread, ``rows`` chunks a batch."""
    monkeypatch.setattr(index_module, "FTS_OVERLAP_CORES", -10**6)
    monkeypatch.setattr(index_module, "FTS_BATCH_ROWS", rows)
    monkeypatch.setattr(index_module, "FTS_IDLE_BATCH_ROWS", 1)


def answers(index: DocIndex, queries: list[str]) -> dict[str, list[tuple[str, float]]]:
    return {q: [(h.source_id, round(h.score, 9)) for h in index.keyword(q, 10)] for q in queries}


def leaf_bytes(index: DocIndex) -> int:
    """FTS5's ``pgsz`` (its leaf size) in the index's full-text table."""
    return index._db.execute("SELECT v FROM chunks_fts_config WHERE k='pgsz'").fetchone()[0]


def segments(index: DocIndex) -> int:
    """FTS5 segments of the full-text table: its ``_data`` rows past the structure are numbered segment id << 37."""
    return index._db.execute("SELECT count(DISTINCT id >> 37) FROM chunks_fts_data WHERE id >> 37 > 0").fetchone()[0]


def test_a_first_build_goes_through_a_rollback_journal_and_the_file_returns_to_wal(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    write_docs(root, 12)
    path = tmp_path / "index.sqlite"
    index = DocIndex([root], path)
    assert index._db.execute("PRAGMA page_size").fetchone()[0] == index_file.PAGE_BYTES
    in_batches(monkeypatch)
    seen = []
    real = index_module._RowWriter.flush

    def flush(writer):
        real(writer)
        seen.append((journal_mode(index), Path(f"{path}-journal").exists(), Path(f"{path}-wal").exists()))

    monkeypatch.setattr(index_module._RowWriter, "flush", flush)
    report = index.refresh()
    assert report.bulk and report.overlapped and len(report.added) == 12
    assert seen and all(s == (index_module.BULK_JOURNAL, True, False) for s in seen), seen
    assert journal_mode(index) == "wal" and not Path(f"{path}-journal").exists()
    assert segments(index) > 1  # the batches are left as segments ...
    assert index._db.execute("SELECT v FROM chunks_fts_config WHERE k='automerge'").fetchone()[0] == \
        index_module.FTS_AUTOMERGE  # ... and merging is back on for the next writes
    (root / "doc3.md").write_text("# Doc 3\n\n## Refunds\n\nrewritten refund window\n")
    seen.clear()
    report = index.refresh()  # not a first build: WAL throughout
    assert not report.bulk and report.updated == ["docs/doc3.md"]
    assert seen and all(s == ("wal", False, True) for s in seen), seen
    index._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0)")
    index.close()


def test_another_connection_on_the_file_keeps_a_first_build_in_wal_with_the_same_answers(tmp_path):
    root = tmp_path / "docs"
    write_docs(root, 12)
    alone = DocIndex([root], tmp_path / "alone.sqlite")
    assert alone.refresh().bulk
    shared = DocIndex([root], tmp_path / "shared.sqlite")
    other = sqlite3.connect(tmp_path / "shared.sqlite")  # another kernel reading the same index
    assert other.execute("SELECT count(*) FROM chunks").fetchone() == (0,)
    report = shared.refresh()
    assert not report.bulk and journal_mode(shared) == "wal" and len(report.added) == 12
    assert other.execute("SELECT count(*) FROM chunks").fetchone() == (alone.counts()[1],)
    assert tables(shared) == tables(alone) and scores(shared) == scores(alone)
    other.close()
    for index in (alone, shared):
        index.close()


@pytest.mark.parametrize("stop", ["interrupt", "error"])
def test_a_first_build_cut_short_keeps_nothing_and_returns_to_wal(tmp_path, monkeypatch, stop):
    root = tmp_path / "docs"
    write_docs(root, 12)
    path = tmp_path / "index.sqlite"
    index = DocIndex([root], path)
    in_batches(monkeypatch)
    if stop == "interrupt":
        real = cut_short_at(monkeypatch, "doc7.md")  # the user stops the cell after a few batches
        with pytest.raises(KeyboardInterrupt):
            index.refresh()
    else:
        real = index_module.text_chunks
        monkeypatch.setattr(index_module, "_FTS_FROM_CHUNKS", "INSERT INTO chunks_fts (rowid, title, body) "
                            "SELECT id, no_such_column, text FROM chunks WHERE id > ?")
        with pytest.raises(sqlite3.OperationalError, match="no_such_column"):
            index.refresh()
    assert index.counts() == (0, 0) and journal_mode(index) == "wal" and writer_threads() == []
    assert not Path(f"{path}-journal").exists()
    monkeypatch.undo()
    report = index.refresh()
    assert report.bulk and len(report.added) == 12 and journal_mode(index) == "wal"
    fresh = DocIndex([root], tmp_path / "fresh.sqlite")
    fresh.refresh()
    assert scores(index) == scores(fresh)
    assert index_module.text_chunks is real
    index.close()
    fresh.close()


@pytest.mark.parametrize("ending", ["committed", "interrupted", "changed by someone else"])
def test_the_switch_interval_is_lowered_while_batches_run_and_put_back_when_the_refresh_ends(tmp_path, monkeypatch,
                                                                                              ending):
    root = tmp_path / "docs"
    write_docs(root, 12)
    index = DocIndex([root], tmp_path / "index.sqlite")
    in_batches(monkeypatch)
    before, during = sys.getswitchinterval(), []
    real = index_module._RowWriter.flush

    def flush(writer):
        real(writer)
        during.append(sys.getswitchinterval())
        if ending == "changed by someone else":
            sys.setswitchinterval(0.01)

    monkeypatch.setattr(index_module._RowWriter, "flush", flush)
    try:
        if ending == "interrupted":
            cut_short_at(monkeypatch, "doc7.md")
            with pytest.raises(KeyboardInterrupt):
                index.refresh()
        else:
            assert len(index.refresh().added) == 12
        assert index_module.FTS_SWITCH_INTERVAL_S < before
        assert during and during[0] == pytest.approx(index_module.FTS_SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() == pytest.approx(0.01 if ending == "changed by someone else" else before)
        assert writer_threads() == []
    finally:
        sys.setswitchinterval(before)
        index.close()


KILLED_BUILD = textwrap.dedent("""
    import os, signal, sys
    from harness_magic.core.knowledge import index as index_module
    root, path = sys.argv[1:3]
    index_module.FTS_OVERLAP_CORES = -10**6  # batches in the writer's thread
    index_module.FTS_BATCH_ROWS = index_module.FTS_IDLE_BATCH_ROWS = 4
    real, done = index_module._RowWriter.flush, []

    def flush(writer):
        real(writer)
        done.append(1)
        if len(done) == 3:  # three batches written, more to come: the machine loses the process
            writer.settle()
            print("journal" if os.path.exists(path + "-journal") else "wal", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    index_module._RowWriter.flush = flush
    index_module.DocIndex([root], path).refresh()
    print("finished", flush=True)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("build", ["first build", "re-index"])
def test_a_build_killed_mid_way_leaves_the_previous_index_whole(tmp_path, build):
    root = tmp_path / "docs"
    write_docs(root, 12)
    path = tmp_path / "index.sqlite"
    before: dict = {}
    if build == "re-index":
        index = DocIndex([root], path)
        index.refresh()
        before, rows = scores(index), tables(index)
        index.close()
        write_docs(root, 12, word="chargeback")  # every file changes
    done = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(root), str(path)], capture_output=True,
                          text=True, timeout=100, cwd=Path(__file__).parents[1])
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout == ("journal\n" if build == "first build" else "wal\n")
    reopened = DocIndex([root], path)  # the journal is rolled back (or the WAL's unfinished frames ignored)
    assert not [n for n in reopened.notes if "damaged" in n] and journal_mode(reopened) == "wal"
    assert not Path(f"{path}-journal").exists()
    if build == "first build":
        assert reopened.counts() == (0, 0) and not any(scores(reopened).values())
    else:
        assert scores(reopened) == before and tables(reopened) == rows
        assert reopened.keyword("chargeback", 5) == []
    report = reopened.refresh()
    assert len(report.added if build == "first build" else report.updated) == 12
    assert report.bulk == (build == "first build")
    fresh = DocIndex([root], tmp_path / "fresh.sqlite")
    fresh.refresh()
    assert scores(reopened) == scores(fresh) and tables(reopened)[0] == tables(fresh)[0]
    reopened.close()
    fresh.close()


def test_where_no_pool_can_run_files_are_read_as_the_walk_finds_them_with_the_same_index(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    write_docs(root, 12)
    in_batches(monkeypatch)
    monkeypatch.setattr(prepare_module, "busy_cores", lambda: 0)
    events: list[str] = []
    walk, flush = DocTree.walk, index_module._RowWriter.flush

    def walking(tree, skipped):
        for found in walk(tree, skipped):
            events.append(f"walked {found[0]}")
            yield found

    def flushing(writer):
        events.append("batch")
        flush(writer)

    monkeypatch.setattr(DocTree, "walk", walking)
    monkeypatch.setattr(index_module._RowWriter, "flush", flushing)
    built = {}
    for cores in (2, 3):  # two cores: no pool possible, whatever the files; three: the walk ends first
        monkeypatch.setattr(prepare_module, "host_cores", lambda: cores)
        events.clear()
        index = DocIndex([root], tmp_path / f"cores{cores}.sqlite")
        report = index.refresh()
        assert len(report.added) == 12 and report.workers == 0 and report.bulk
        last_walked = max(n for n, event in enumerate(events) if event.startswith("walked"))
        assert (events.index("batch") < last_walked) == (cores == 2), events
        built[cores] = index
    assert tables(built[2]) == tables(built[3]) and scores(built[2]) == scores(built[3])
    for index in built.values():
        index.close()


def build_as_before(monkeypatch, roots: list[Path], path: Path) -> DocIndex:
    """An index built the way it was before first builds went through a journal: 4 KiB pages, WAL throughout
    (another connection holds the file open), one full-text statement at the end."""
    with monkeypatch.context() as patch:
        patch.setattr(index_file, "PAGE_BYTES", 4096)
        patch.setattr(index_module, "FTS_OVERLAP_CORES", 10**6)
        index = DocIndex(roots, path)
        other = sqlite3.connect(path)
        other.execute("SELECT count(*) FROM files").fetchone()
        report = index.refresh()
        other.close()
    assert not report.bulk and not report.overlapped
    assert index._db.execute("PRAGMA page_size").fetchone()[0] == 4096
    return index


def test_the_labelled_questions_get_the_same_hits_and_scores_however_the_index_was_built(tmp_path, monkeypatch):
    roots = [CORPUS / "docs", CORPUS / "runbooks", CORPUS / "policies"]
    before = build_as_before(monkeypatch, roots, tmp_path / "before.sqlite")
    in_batches(monkeypatch, rows=7)
    now = DocIndex(roots, tmp_path / "now.sqlite")
    report = now.refresh()
    assert report.bulk and report.overlapped and segments(now) > 1 and segments(before) == 1
    assert leaf_bytes(before) == index_module.FTS_MIN_LEAF_BYTES  # FTS5's default, with 4 KiB pages
    assert leaf_bytes(now) == index_file.PAGE_BYTES - index_module.FTS_LEAF_SLACK
    expected = answers(before, LABELLED + QUERIES)
    assert sum(map(bool, expected.values())) == len(expected)  # every question finds something
    assert answers(now, LABELLED + QUERIES) == expected
    assert tables(now) == tables(before)
    for index in (before, now):
        index.close()


def hostile_tree(root: Path) -> None:
    """Files a prompt-injected author could leave in a docs folder."""
    write_docs(root, 6)
    (root / "one_line.md").write_bytes(b"x" * (9 * 1024 * 1024))  # one line over the 8 MiB text limit
    with open(root / "huge.md", "wb") as handle:  # over the size limit: never read (sparse, no disk spent)
        handle.truncate(FILE_MAX_BYTES + 1)
    (root / "nul.md").write_bytes(b"# Nul\n\n## Before\n\nbefore the nul\x00after the nul\n\x00\x00\x00\n")
    deep = root.joinpath(*[f"n{i}" for i in range(100)])
    deep.mkdir(parents=True)
    (deep / "leaf.md").write_text("# Nested\n\n## Deep\n\nnested deep leaf\n")
    (root / "levels.md").write_text("".join(f"{'#' * (i % 6 + 1)} Level {i} heading\n\nlevel six heading {i}\n\n"
                                            for i in range(600)))
    (root / "zz_swapped.md").write_text("# Swapped\n\nrefund window swapped\n")


def test_hostile_files_give_the_same_rows_skips_and_answers_however_the_index_was_built(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    hostile_tree(root)
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n\nrefund window secret outside the root\n")
    monkeypatch.setattr(prepare_module, "POOL_MIN_BYTES", 1 << 62)  # read in this order, here, whatever the cores
    read = DocTree.read

    def swap_mid_build(tree, where, rel):  # the last file, walked as a plain file (batches written before it),
        if rel == "zz_swapped.md":         # becomes a link out of the root just before it is read
            (root / "zz_swapped.md").unlink()
            (root / "zz_swapped.md").symlink_to(outside)
        return read(tree, where, rel)

    built = {}
    for name in ("before", "now"):
        (root / "zz_swapped.md").unlink()
        (root / "zz_swapped.md").write_text("# Swapped\n\nrefund window swapped\n")
        with monkeypatch.context() as patch:
            patch.setattr(DocTree, "read", swap_mid_build)
            if name == "before":
                index = build_as_before(patch, [root], tmp_path / "before.sqlite")
            else:
                in_batches(patch)
                index = DocIndex([root], tmp_path / "now.sqlite")
                report = index.refresh()
                assert report.bulk and report.overlapped
        built[name] = index
    before, now = built["before"], built["now"]
    for index in (before, now):
        skipped = "\n".join(index.last_report.skipped)
        assert "docs/one_line.md: " in skipped and "docs/huge.md: " in skipped and "symbolic link" in skipped
        assert "secret" not in str(scores(index)) and not index.keyword("secret outside", 5)
    assert now.last_report.skipped == before.last_report.skipped
    assert tables(now) == tables(before)
    assert answers(now, HOSTILE_QUERIES) == answers(before, HOSTILE_QUERIES)
    assert [h.chunk.path for h in now.keyword("after the nul", 1)] == ["docs/nul.md"]
    assert now.keyword("nested deep leaf", 1)[0].chunk.path.endswith("/n99/leaf.md")
    now._db.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0)")
    for index in (before, now):
        index.close()
