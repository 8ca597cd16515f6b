"""Spec (issue 35 point 4): a docs refresh writes in one transaction, and computes vectors only when configured.

* **All or nothing.** Every chunk, full-text row and file row a refresh writes
  goes into one transaction (FTS5 merges its terms once): a refresh cut short
  (an error, an interrupt) leaves the index as it was before it, and the next
  refresh indexes every file again; ids stay unique across refreshes, so an
  edited file's new chunks never collide with another file's.
* **Embeddings only when configured.** Without an embedder no vector is
  computed or stored.

Indexing speed is measured in ``benchmarks/bench_docs.py``, never here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_magic.core.knowledge import index as index_module
from harness_magic.core.knowledge.index import DocIndex


def write_docs(root: Path, count: int) -> None:
    for i in range(count):
        (root / f"doc{i}.md").write_text(f"# Doc {i}\n\n## Refunds {i}\n\nrefund window policy{i}\n\n"
                                        f"## Owner\n\nteam{i} owns it\n")


def cut_short_at(monkeypatch, name: str):
    """Make the index's chunking raise KeyboardInterrupt (the user stopping the cell) at the file ``name``;
    returns the real chunking function, to put back."""
    real = index_module.text_chunks

    def interrupted(path, suffix, data, **limits):
        if path.endswith(name):
            raise KeyboardInterrupt
        return real(path, suffix, data, **limits)

    monkeypatch.setattr(index_module, "text_chunks", interrupted)
    return real


def test_a_refresh_cut_short_keeps_nothing_and_the_next_one_indexes_everything(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    root.mkdir()
    write_docs(root, 6)
    index = DocIndex([root], tmp_path / "index.sqlite")
    real_text_chunks = cut_short_at(monkeypatch, "doc4.md")
    with pytest.raises(KeyboardInterrupt):
        index.refresh()
    assert index.counts() == (0, 0)
    assert index.keyword("policy1", 5) == []
    monkeypatch.setattr(index_module, "text_chunks", real_text_chunks)
    report = index.refresh()
    assert len(report.added) == 6 and index.counts() == (6, 12)
    assert [h.chunk.path for h in index.keyword("policy4", 5)] == ["docs/doc4.md"]
    index.close()


def test_ids_stay_unique_when_files_are_edited_added_and_removed(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    write_docs(root, 3)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    (root / "doc2.md").unlink()
    (root / "doc0.md").write_text("# Doc 0\n\n## Refunds\n\nrewritten refund rules\n\n## Extra\n\nnew part\n\n"
                                  "## More\n\nmore text\n")
    (root / "doc9.md").write_text("# Nine\n\n## Nine\n\nninth document body\n")
    report = index.refresh()
    assert report.updated == ["docs/doc0.md"] and report.removed == ["docs/doc2.md"] and report.added == ["docs/doc9.md"]
    ids = [row[0] for row in index._db.execute("SELECT id FROM chunks")]
    fts = [row[0] for row in index._db.execute("SELECT rowid FROM chunks_fts")]
    assert len(ids) == len(set(ids)) == 6 and sorted(fts) == sorted(ids)
    assert [h.chunk.path for h in index.keyword("ninth", 5)] == ["docs/doc9.md"]
    assert [h.chunk.path for h in index.keyword("rewritten", 5)] == ["docs/doc0.md"]
    assert index.keyword("policy2", 5) == []
    index.close()


def test_no_vector_is_computed_without_an_embedder(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    write_docs(root, 2)
    index = DocIndex([root], tmp_path / "index.sqlite")
    index.refresh()
    assert index._db.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0
    assert index.vector("refund", 5) == []
    index.close()
