"""Docs connector attacks (issue 22, points 4 and 5): every document may be hostile.

Real PDFs written byte by byte with zlib, real file trees with hard links and symbolic
links, real SQLite index files owned by another uid; each test asserts the safe outcome:

* a PDF whose pages share one 16 MiB Flate stream is stopped by the per-file timeout and
  named in the report, the tool result and ``%agent_docs``, and not tried again until it
  changes; a flood of them is cut by the per-refresh budget; the memory limit and the text
  cap stop what inflates; a Markdown line that made the old heading pattern backtrack for
  minutes is indexed at once;
* a hard link into a root, a file swapped for a symbolic link between the walk and the
  read, and a file swapped after indexing are neither indexed nor served;
* an index file that is not ours is moved aside, never read; chunks for files that do
  not exist are never returned, read or citable.
"""

from __future__ import annotations

import io
import os
import shutil
import sqlite3
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import ConnectorRegistry
from harness_magic.core.execution.connectors.registry import ToolContext
from harness_magic.core.transcript.events import VerificationChecked
from harness_magic.core.execution.connectors.docs import connector as docs_connectors
from harness_magic.core.execution.connectors.docs.connector import docs_connector
from harness_magic.core.knowledge.extract import ExtractionLimits, ExtractionTimeout
from harness_magic.core.knowledge.extract_worker import ExtractionWorker
from harness_magic.core.knowledge.index import DocIndex
from harness_magic.core.knowledge.tree import DocTree
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.confinement.layers import landlock_abi
from harness_magic.core.execution.tools import ToolError
from harness_magic.core.control.verification import Verifier

CORPUS = Path(__file__).parent / "knowledge_corpus"
SECRET = "hunter2 the vault code"
OTHER_UID = 4242
"""A uid that owns nothing here: 'another user' for the index-ownership attacks."""
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


# --------------------------------------------------------------------------- hostile files


def pdf_bytes(content: bytes, pages: int = 1) -> bytes:
    """A PDF whose ``pages`` pages all draw the same Flate-compressed content stream."""
    packed = zlib.compress(content, 9)
    font = 4 + pages
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (4 + i) for i in range(pages)) + b"] /Count %d >>" % pages,
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream",
        *[b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
          b"/Resources << /Font << /F1 %d 0 R >> >> >>" % font for _ in range(pages)],
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def text_pdf(text: str) -> bytes:
    return pdf_bytes(b"BT /F1 12 Tf 72 712 Td (" + text.encode("latin-1") + b") Tj ET\n")


def bomb_pdf() -> bytes:
    """~20 KB on disk; three pages share one stream inflating to 16 MiB of text operators (~10 s a page)."""
    operator = b"BT /F1 12 Tf 72 712 Td (" + b"A" * 8000 + b") Tj ET\n"
    return pdf_bytes(operator * (16 * 1024 * 1024 // len(operator)), pages=3)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return bomb_pdf()


def ctx(tool: str = "docs__read") -> ToolContext:
    return ToolContext(cache=None, harness=None, tool_name=tool)


def make_root(tmp_path: Path, name: str = "docs") -> Path:
    root = tmp_path / name
    root.mkdir()
    (root / "ok.md").write_text("# Refunds\n\nRefunds are paid back within five days.\n")
    return root


def source_ids(connector) -> set[str]:
    return {c.source_id for f in connector.index.files() for c in connector.index.file_chunks(f["path"])}


# --------------------------------------------------------------------------- 4: bounded extraction


@pytest.mark.timeout(60)
def test_pdf_bomb_is_skipped_naming_the_time_limit_and_the_rest_is_indexed(tmp_path, bomb):
    root = make_root(tmp_path)
    (root / "bomb.pdf").write_bytes(bomb)
    assert len(bomb) < 32 * 1024
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")  # default limits
    report = connector.report
    assert report.added == ["docs/ok.md"]
    assert "docs/bomb.pdf: extraction exceeded 5 s" in report.skipped
    assert "docs/bomb.pdf: extraction exceeded 5 s" in report.summary()
    assert connector.search("refunds paid", 1)[0].source_id == "doc:docs/ok.md#refunds"


@pytest.mark.timeout(60)
def test_a_skipped_bomb_is_not_tried_again_until_it_changes(tmp_path, bomb):
    root = make_root(tmp_path)
    (root / "bomb.pdf").write_bytes(bomb)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite", extract_timeout_s=1)
    again = connector.refresh()
    assert again.skipped == ["docs/bomb.pdf: extraction exceeded 1 s (not tried again until the file changes)"]
    (root / "bomb.pdf").write_bytes(text_pdf("Vendor settlement is in EUR"))
    fixed = connector.refresh()
    assert fixed.added == ["docs/bomb.pdf"] and not fixed.skipped
    assert connector.search("vendor settlement", 1)[0].source_id == "doc:docs/bomb.pdf#page-1"


@pytest.mark.timeout(60)
def test_a_flood_of_bombs_is_cut_by_the_refresh_budget_and_deferred(tmp_path, bomb):
    root = make_root(tmp_path)
    for i in range(4):
        (root / f"bomb{i}.pdf").write_bytes(bomb)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite", extract_timeout_s=1, refresh_budget_s=1.5)
    report = connector.report
    assert report.added == ["docs/ok.md"]
    assert report.skipped == ["docs/bomb0.pdf: extraction exceeded 1 s"]
    assert report.deferred == ["docs/bomb1.pdf", "docs/bomb2.pdf", "docs/bomb3.pdf"]
    assert "deferred to the next refresh 3" in report.summary()


def _open_pipes() -> set[str]:
    """The pipes this process holds (``pipe:[inode]``): other tests' descriptors may close meanwhile, pipes of the
    extraction worker must not stay open."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            found.add(target)
    return found


@pytest.mark.timeout(60)
def test_the_worker_is_killed_on_timeout_and_a_fresh_one_serves_the_next_file(bomb):
    pipes_before = _open_pipes()
    with ExtractionWorker(ExtractionLimits(extract_timeout_s=1)) as worker:
        lines, _ = worker.extract("a.html", b"<h1>Refunds</h1><p>paid back</p>")
        first = worker.pid
        with pytest.raises(ExtractionTimeout, match="extraction exceeded 1 s"):
            worker.extract("bomb.pdf", bomb)
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)  # reaped: no stray process keeps inflating
        assert worker.extract("b.pdf", text_pdf("Page text"))[0][1].text == "Page text"
        assert worker.started == 2
    assert [line.text for line in lines] == ["# Refunds", "paid back"]
    assert _open_pipes() <= pipes_before  # the killed child's pipes were closed too


def test_the_worker_reports_its_confinement_layers():
    with ExtractionWorker() as worker:
        worker.extract("a.html", b"<p>x</p>")
        layers = worker.layers
    assert layers["rlimits"] == "ok" and layers["pdeathsig"] == "ok"
    if landlock_abi() > 0:
        assert layers["landlock"] == "ok"


@pytest.mark.timeout(120)
def test_a_pdf_that_inflates_past_the_memory_limit_is_skipped_naming_it(tmp_path):
    root = make_root(tmp_path)
    (root / "big.pdf").write_bytes(pdf_bytes(b"BT /F1 12 Tf (" + b"A" * (60 << 20) + b") Tj ET\n"))
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite", extract_memory_bytes=256 << 20,
                               extract_timeout_s=100)
    assert connector.report.skipped == ["docs/big.pdf: extraction ran out of memory (limit 256 MiB)"]
    assert connector.report.added == ["docs/ok.md"]


def test_text_over_the_cap_is_skipped_naming_it_pdf_and_markdown(tmp_path):
    root = make_root(tmp_path)
    (root / "long.pdf").write_bytes(text_pdf("word " * 5000))
    (root / "long.md").write_text("# Long\n\n" + "word " * 5000 + "\n")
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite", text_max_chars=10_000)
    assert sorted(connector.report.skipped) == ["docs/long.md: text over 10,000 characters",
                                                "docs/long.pdf: text over 10,000 characters"]
    assert connector.report.added == ["docs/ok.md"]


@pytest.mark.timeout(30)
def test_a_markdown_line_that_made_the_heading_pattern_backtrack_is_indexed(tmp_path):
    root = make_root(tmp_path)
    (root / "spaces.md").write_text("# a" + " " * 200_000 + "x\n\n## Payout ##\n\nPartners are paid monthly.\n")
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    assert "docs/spaces.md" in connector.report.added
    assert [c.trail for c in connector.index.file_chunks("docs/spaces.md")][-1][-1] == "Payout"


@pytest.mark.parametrize("option, value, message", [
    ("extract_timeout_s", 0, "extract_timeout_s must be seconds in"),
    ("refresh_budget_s", "10", "refresh_budget_s must be seconds in"),
    ("extract_memory_bytes", 1024, "extract_memory_bytes must be an int of at least"),
    ("text_max_chars", True, "text_max_chars must be a positive int"),
])
def test_bad_limits_are_refused_naming_them(tmp_path, option, value, message):
    root = make_root(tmp_path)
    with pytest.raises(ValueError, match=message) as caught:
        docs_connector([root], index_path=tmp_path / "i.sqlite", **{option: value})
    assert repr(value) in str(caught.value)


@pytest.mark.timeout(60)
def test_the_tool_result_and_agent_docs_name_the_skipped_bomb(tmp_path, bomb, monkeypatch):
    from harness_magic.notebook.docs_magics import DocsMagics

    root = make_root(tmp_path)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite", extract_timeout_s=1)
    (root / "bomb.pdf").write_bytes(bomb)
    monkeypatch.setattr(docs_connectors, "REFRESH_INTERVAL_S", 0.0)  # the next call re-checks the files
    text = connector._search("refunds", ctx("docs__search"))
    assert "docs/bomb.pdf: extraction exceeded 1 s" in text.splitlines()[0]
    installed = SimpleNamespace(registry=ConnectorRegistry([connector]))
    agent = SimpleNamespace(session=SimpleNamespace(connectors=installed))  # what DocsMagics reads of AgentMagics
    view = DocsMagics(None, agent).agent_docs("")
    assert "  not indexed: docs/bomb.pdf: extraction exceeded 1 s (not tried again until the file changes)" \
        in repr(view).splitlines()
    assert "docs: not indexed" in view._repr_html_()


# --------------------------------------------------------------------------- 5: reads stay under the roots


def test_a_hard_link_to_a_file_outside_the_root_is_neither_indexed_nor_served(tmp_path):
    root = make_root(tmp_path)
    secret = tmp_path / "secret.md"
    secret.write_text(f"# Vault\n\n{SECRET}\n")
    os.link(secret, root / "notes.md")
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    assert connector.report.added == ["docs/ok.md"]
    assert any(s.startswith("docs/notes.md: has 2 hard links") for s in connector.report.skipped)
    assert not connector.search("hunter2 vault", 5)
    with pytest.raises(ToolError, match="No document section"):
        connector._read("doc:docs/notes.md#vault", ctx())


def test_hard_links_are_indexed_when_allowed(tmp_path):
    root = make_root(tmp_path)
    shared = tmp_path / "shared.md"
    shared.write_text("# Shared\n\nShared settlement notes.\n")
    os.link(shared, root / "shared.md")
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite", allow_hardlinks=True)
    assert connector.report.added == ["docs/ok.md", "docs/shared.md"]
    assert connector.search("settlement notes", 1)[0].source_id == "doc:docs/shared.md#shared"


def test_an_indexed_file_that_gains_a_hard_link_is_no_longer_served(tmp_path):
    root = make_root(tmp_path)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    assert connector.index.search("refunds", 1)
    os.link(root / "ok.md", tmp_path / "elsewhere.md")
    assert connector.index.search("refunds", 1) == []
    assert connector.index.get("doc:docs/ok.md#refunds") is None


def test_a_file_swapped_for_a_symlink_between_walk_and_read_is_not_followed(tmp_path, monkeypatch):
    root = make_root(tmp_path)
    (root / "policy.md").write_text("# Policy\n\nA harmless policy.\n")
    secret = tmp_path / "secret.md"
    secret.write_text(f"# Vault\n\n{SECRET}\n")
    walk = DocTree.walk

    def walk_then_swap(self, skipped):
        for item in walk(self, skipped):
            if item[0] == "docs/policy.md":  # the walk saw a regular file; swap it before the read
                (root / "policy.md").unlink()
                (root / "policy.md").symlink_to(secret)
            yield item

    monkeypatch.setattr(DocTree, "walk", walk_then_swap)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    assert connector.report.added == ["docs/ok.md"]
    assert "docs/policy.md: became a symbolic link (links are not followed)" in connector.report.skipped
    assert not connector.search("hunter2 vault", 5)


def test_a_file_swapped_for_a_symlink_after_indexing_is_not_served(tmp_path):
    root = make_root(tmp_path)
    secret = tmp_path / "secret.md"
    secret.write_text(f"# Refunds\n\n{SECRET}\n")
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    (root / "ok.md").unlink()
    (root / "ok.md").symlink_to(secret)
    assert connector.index.search("refunds", 5) == []  # before any refresh
    with pytest.raises(ToolError, match="No document section"):
        connector._read("doc:docs/ok.md#refunds", ctx())
    report = connector.refresh()
    assert report.removed == ["docs/ok.md"]
    assert "docs/ok.md: links outside its root" in report.skipped
    assert not connector.search("hunter2", 5)


def test_a_symlinked_directory_inside_a_root_is_not_walked_into(tmp_path):
    root = make_root(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "vault.md").write_text(f"# Vault\n\n{SECRET}\n")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    assert connector.report.added == ["docs/ok.md"]
    assert not connector.search("hunter2", 5)


# --------------------------------------------------------------------------- 5: the index file must be ours


def planted_index(tmp_path: Path) -> Path:
    """A real index of another root whose only file, ``docs/ghost.md``, does not exist under ours."""
    elsewhere = tmp_path / "elsewhere" / "docs"
    elsewhere.mkdir(parents=True)
    (elsewhere / "ghost.md").write_text("# Refunds\n\nRefunds are wired to account 999 by the attacker.\n")
    path = tmp_path / "shared" / "i.sqlite"
    path.parent.mkdir()
    docs_connector([elsewhere], index_path=path).index.close()
    return path


@needs_root
def test_an_index_owned_by_another_user_is_moved_aside_not_adopted(tmp_path):
    path = planted_index(tmp_path)
    os.chown(path, OTHER_UID, OTHER_UID)
    root = make_root(tmp_path)
    connector = docs_connector([root], index_path=path)
    assert any(f"owned by uid {OTHER_UID}" in n and "moved aside" in n for n in connector.report.notes)
    assert f"owned by uid {OTHER_UID}" in connector.report.summary()
    assert source_ids(connector) == {"doc:docs/ok.md#refunds"}
    assert all("999" not in h.chunk.text for h in connector.search("refunds wired account", 5))
    aside = [p for p in path.parent.iterdir() if ".untrusted-" in p.name]
    assert aside and all(p.stat().st_uid == OTHER_UID for p in aside if not p.name.endswith(("-wal", "-shm")))
    assert path.stat().st_uid == os.geteuid() and path.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("mode", [0o666, 0o620])
def test_a_group_or_world_writable_index_is_not_trusted(tmp_path, mode):
    path = planted_index(tmp_path)
    os.chmod(path, mode)
    connector = docs_connector([make_root(tmp_path)], index_path=path)
    assert any(f"writable by group or others (mode {mode:o})" in n for n in connector.report.notes)
    assert source_ids(connector) == {"doc:docs/ok.md#refunds"}


@needs_root
def test_a_foreign_wal_file_beside_our_index_is_not_replayed(tmp_path):
    path = planted_index(tmp_path)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.remove(f"{path}{suffix}")
    (path.parent / "i.sqlite-wal").write_bytes(b"\0" * 64)
    os.chown(path.parent / "i.sqlite-wal", OTHER_UID, OTHER_UID)
    connector = docs_connector([make_root(tmp_path)], index_path=path)
    assert any("i.sqlite-wal" in n and f"owned by uid {OTHER_UID}" in n for n in connector.report.notes)
    assert source_ids(connector) == {"doc:docs/ok.md#refunds"}


def test_an_index_path_that_is_a_symlink_is_not_followed(tmp_path):
    target = planted_index(tmp_path)
    link = tmp_path / "link.sqlite"
    link.symlink_to(target)
    before = target.read_bytes()
    connector = docs_connector([make_root(tmp_path)], index_path=link)
    assert any("is not a plain file" in n for n in connector.report.notes)
    assert not link.is_symlink() and target.read_bytes() == before


def test_our_own_index_is_reused_and_created_private(tmp_path):
    root = make_root(tmp_path)
    path = tmp_path / "i.sqlite"
    docs_connector([root], index_path=path).index.close()
    assert path.stat().st_mode & 0o077 == 0
    again = docs_connector([root], index_path=path)
    assert not again.report.notes and again.report.unchanged == 1


# --------------------------------------------------------------------------- 5: planted chunks are never served


def plant(path: Path, doc_path: str, text: str, *, file_row: bool) -> None:
    db = sqlite3.connect(path)
    cursor = db.execute("INSERT INTO chunks (path, slug, trail, start_line, end_line, text) VALUES (?,?,?,?,?,?)",
                        (doc_path, "refunds", '["Refunds"]', 1, 2, text))
    if file_row:  # naming the planted chunk's id as its range, as the index's own rows do
        db.execute("INSERT INTO files (path, sha256, size, mtime_ns, chunks, indexed_at, note, first_id) "
                   "VALUES (?, 'x', 1, 1, 1, 0, '', ?)", (doc_path, cursor.lastrowid))
    db.execute("INSERT INTO chunks_fts (rowid, title, body) VALUES (?,?,?)", (cursor.lastrowid, "Refunds", text))
    db.commit()
    db.close()


@pytest.mark.parametrize("file_row", [True, False], ids=["with-a-file-row", "orphan-chunk"])
def test_a_planted_chunk_for_a_missing_file_is_never_returned_or_read(tmp_path, file_row):
    root = make_root(tmp_path)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    plant(tmp_path / "i.sqlite", "docs/ghost.md", "Refunds refunds refunds are wired to account 999.",
          file_row=file_row)
    hits = connector.index.search("refunds wired account", 5)  # no refresh in between
    assert [h.source_id for h in hits] == ["doc:docs/ok.md#refunds"]
    assert connector.index.get("doc:docs/ghost.md#refunds") is None
    with pytest.raises(ToolError, match="No document section"):
        connector._read("doc:docs/ghost.md#refunds", ctx())
    connector.refresh()
    reopened = DocIndex([root], tmp_path / "i.sqlite")
    rows = sqlite3.connect(tmp_path / "i.sqlite").execute("SELECT count(*) FROM chunks WHERE path = 'docs/ghost.md'")
    assert rows.fetchone()[0] == 0  # pruned
    reopened.close()


def test_a_planted_chunk_cannot_be_cited(tmp_path):
    root = make_root(tmp_path)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    plant(tmp_path / "i.sqlite", "docs/ghost.md", "Refunds refunds are wired to account 999.", file_row=True)
    turns = [
        {"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "docs"}}]},
        {"tool_calls": [{"name": "docs__search", "arguments": {"query": "refunds wired account", "k": 5}}]},
        {"tool_calls": [{"name": "docs__read", "arguments": {"source_id": "doc:docs/ghost.md#refunds"}}]},
        {"text": "Refunds go to account 999 [doc:docs/ghost.md#refunds]."},
    ]
    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(turns))
    harness = Harness(adapter, "You analyse data.", [], run_dir=str(tmp_path / "runs"), cache=SessionCache())
    ConnectorRegistry([connector]).install(harness)
    Verifier().install(harness).require_citations()
    events: list = []
    harness.subscribe(events.append)
    result = harness.run_result("Where do refunds go?")
    texts = [b.content for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    assert "[doc:docs/ghost.md" not in texts[1] and "[doc:docs/ok.md#refunds]" in texts[1]
    assert "No document section" in texts[2]
    check = next(e for e in events if isinstance(e, VerificationChecked))
    assert not check.passed
    assert any("doc:docs/ghost.md#refunds" in c["detail"] for c in check.checks if not c["ok"])


# --------------------------------------------------------------------------- legit use is unchanged


def test_the_test_corpus_indexes_as_before_with_html_through_the_worker(tmp_path):
    roots = [CORPUS / d for d in ("docs", "runbooks", "policies")]
    connector = docs_connector(roots, index_path=tmp_path / "i.sqlite")
    report = connector.report
    assert not report.skipped and not report.deferred and not report.notes
    assert report.files == 41
    assert [c.slug for c in connector.index.file_chunks("policies/access_control.html")] == [
        "access-control-policy", "role-review", "production-writes", "break-glass-access"]


def test_a_symlink_within_the_root_is_skipped_and_its_target_indexed_once(tmp_path):
    root = make_root(tmp_path)
    (root / "alias.md").symlink_to(root / "ok.md")
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    assert connector.report.added == ["docs/ok.md"]
    assert any(s.startswith("docs/alias.md: a symbolic link") for s in connector.report.skipped)


def test_copied_trees_keep_working_after_edits(tmp_path):
    root = tmp_path / "runbooks"
    shutil.copytree(CORPUS / "runbooks", root)
    connector = docs_connector([root], index_path=tmp_path / "i.sqlite")
    (root / "refunds.md").write_text("# Refunds\n\n## Holdback\n\nA 10 percent holdback applies.\n")
    report = connector.refresh()
    assert report.updated == ["runbooks/refunds.md"]
    assert connector.search("holdback", 1)[0].source_id == "doc:runbooks/refunds.md#holdback"
