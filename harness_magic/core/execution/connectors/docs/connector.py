"""The ``docs`` and ``glossary`` connectors (built-in types of the connector config).

``{"type": "docs", "roots": ["docs/", "runbooks/"]}`` gives ``docs__search(query, k)``
and ``docs__read(source_id)``; ``{"type": "glossary", "files": ["definitions.yaml"]}``
gives ``glossary__lookup(term)``. Results are text that carries source ids
(``[doc:runbooks/refunds.md#partner-share]``, ``[term:net_revenue]``), passed
through the one formatter like every tool result; what each call returned is
recorded in the run's citation ledger (:mod:`.citations`).

The model never names a file: ``docs__read`` looks its id up in the index, so
it can only reach chunks of files under the configured roots, and a chunk is
served only while its file still opens beneath its root without following a
link (see :mod:`.index` for the guarantees and the extraction limits).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any, Sequence

from harness_magic.core.execution.connectors.registry import Connector, RelatedEntry, ToolContext
from harness_magic.core.execution.connectors.sameness import records_configuration
from harness_magic.core.knowledge.citations import Source, ledger_host, record_retrieval
from harness_magic.core.knowledge.embed import make_embedder
from harness_magic.core.knowledge.extract import ExtractionLimits
from harness_magic.core.knowledge.glossary import Glossary, GlossaryError, load_glossary, sensitive_columns
from harness_magic.core.knowledge.index import DocIndex
from harness_magic.core.knowledge.ranking import Hit, normalize_doc_id
from harness_magic.core.knowledge.workspace_memory import WorkspaceMemoryError, read_definitions, with_workspace_terms
from harness_magic.core.execution.tools import ToolError
from harness_magic.core.text.counts import count
from harness_magic.core.text.snippets import section_text, snippet_line

__all__ = ["DocsConnector", "GlossaryConnector", "docs_connector", "glossary_connector", "SEARCH_MAX_K",
           "DEFAULT_INDEX_DIR"]

SEARCH_MAX_K = 10
"""Hits per ``docs__search``: ten snippets keep the result inline; read the rest by id."""
RESULT_BUDGET_CHARS = 1_900
"""Search text is fitted under the formatter's inline limit (2,000) by shortening snippets."""
RELATED_MAX = 3
"""Entries of other knowledge connectors (a dbt project) shown beside a search's or lookup's own results."""
REFRESH_INTERVAL_S = 1.0
"""Tool calls re-check the files at most this often: a model's burst of searches costs one stat walk
(1,000 files: ~40 ms), while an edit is seen by the next call a second later."""
DEFAULT_INDEX_DIR = "runs/knowledge"
"""Where an index lives when no ``index_path`` is given (next to the session's run logs)."""
DOCS_DESCRIPTION = ("Business documents (runbooks, policies, metric definitions); cite each business claim "
                    "with the [doc:...] id of the section it comes from.")
GLOSSARY_DESCRIPTION = ("Glossary of metrics, terms, tables and owners; cite definitions with their "
                        "[term:...] id.")


def _default_index_path(name: str, roots: Sequence[str | os.PathLike]) -> Path:
    key = "\n".join(str(Path(r).expanduser().resolve()) for r in roots)
    return Path(DEFAULT_INDEX_DIR) / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:10]}.sqlite"


def _related_lines(related: list[RelatedEntry], ctx: ToolContext) -> list[str]:
    """The other knowledge connectors' entries (dbt models and metrics) under their own heading, recorded in the
    citation ledger so the answer may cite their ids."""
    if not related:
        return []
    record_retrieval(ledger_host(ctx.harness), ctx.tool_name, [entry.source for entry in related])
    return ["Related entries from the session's other knowledge connectors (cite their ids):",
            *(entry.line for entry in related)]


def _hit_lines(hits: list[Hit], budget: int) -> list[str]:
    per_hit = max(60, budget // max(1, len(hits)) - 90)
    lines = []
    for i, hit in enumerate(hits, 1):
        c = hit.chunk
        text = snippet_line(hit.snippet, c.trail)  # the title line shows the trail once
        snippet = text if len(text) <= per_hit else text[: per_hit - 1] + "…"
        lines.append(f"{i}. [{c.source_id}] {c.title} (lines {c.start_line}-{c.end_line}, score {hit.score:.3g})")
        lines.append(f"   {snippet}")
    return lines


class DocsConnector(Connector):
    """A docs connector; ``index`` is its :class:`~harness_magic.core.knowledge.index.DocIndex`."""

    kind = "docs"

    def __init__(self, name: str, description: str, index: DocIndex) -> None:
        super().__init__(name, description)
        self.index = index
        self.report = index.refresh()
        """What the last refresh did (the first one runs at construction)."""
        self.add_function(self._search, name="search")
        self.add_function(self._read, name="read")

    def refresh(self):
        """Bring the index up to date now; returns the :class:`IndexReport`."""
        self.report = self.index.refresh()
        return self.report

    def refresh_if_due(self):
        """Refresh unless the last refresh is under ``REFRESH_INTERVAL_S`` old (tool calls use this)."""
        last = self.index.last_refresh
        if last is None or time.time() - last >= REFRESH_INTERVAL_S or time.time() < last:
            return self.refresh()
        return self.report

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Hits for ``query`` after bringing the index up to date (for people: ``%agent_docs``)."""
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be non-empty text, e.g. docs__search(query='refund partner share').")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= SEARCH_MAX_K:
            raise ToolError(f"k must be an integer from 1 to {SEARCH_MAX_K}, got {k!r}.")
        self.refresh_if_due()
        return self.index.search(query, k)

    def _search(self, query: str, ctx: ToolContext, k: int = 5) -> str:
        """Search the business documents; returns the best sections with their source ids and scores.

        Args:
            query: Words to look for (keywords work best, e.g. "net revenue partner share").
            k: How many sections to return (1-10).
        """
        before = self.report
        hits = self.search(query, k)
        report = self.report
        header = (f"{count(len(hits), 'section')} for {query[:80]!r} "
                  f"(index: {count(report.files, 'file')}, {count(report.chunks, 'chunk')}")
        news = report is not before and (report.changed or report.deferred or report.notes
                                         or report.skipped != before.skipped)
        header += f"; reindexed: {report.summary()})" if news else ")"
        related = ctx.related(query[:500], RELATED_MAX)
        if not hits and not related:
            return header + ". Try other words, or glossary lookup for a defined term."
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, [
            Source(h.source_id, h.chunk.title, snippet_line(h.snippet, h.chunk.trail)) for h in hits])
        extra = _related_lines(related, ctx)
        body = _hit_lines(hits, RESULT_BUDGET_CHARS - len(header) - 80 - sum(len(line) + 1 for line in extra))
        tail = [f"Read a whole section with {self.name}__read(source_id=...)."] if hits else []
        return "\n".join([header + ":", *body, *extra, *tail])

    def _read(self, source_id: str, ctx: ToolContext) -> str:
        """Read one whole section of a document by its source id.

        Args:
            source_id: An id from the search results, e.g. "doc:runbooks/refunds.md#partner-share".
        """
        if not isinstance(source_id, str) or not source_id.strip():
            raise ToolError("source_id must be an id from docs search, e.g. 'doc:runbooks/refunds.md#partner-share'.")
        self.refresh_if_due()
        wanted = normalize_doc_id(source_id)
        chunk = self.index.get(wanted)
        if chunk is None:
            path = wanted.partition("#")[0]
            sections = self.index.file_chunks(path)
            if not sections:
                raise ToolError(f"No document section {source_id[:200]!r} in the index; use ids that "
                                f"{self.name}__search returned.")
            listing = "\n".join(f"- [{c.source_id}] {c.title} (lines {c.start_line}-{c.end_line})"
                                for c in sections[:40])
            more = f"\n... and {len(sections) - 40} more" if len(sections) > 40 else ""
            prefix = "" if "#" not in wanted else f"No section {wanted.partition('#')[2][:80]!r} in {path}. "
            return f"{prefix}Sections of {path}:\n{listing}{more}"
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, [Source(chunk.source_id, chunk.title,
                                                             section_text(chunk.text, chunk.trail))])
        siblings = self.index.file_chunks(chunk.path)
        position = next((i for i, c in enumerate(siblings) if c.slug == chunk.slug), -1)
        after = (f"\n(next section: [{siblings[position + 1].source_id}])"
                 if 0 <= position < len(siblings) - 1 else "")
        return (f"[{chunk.source_id}] {chunk.title} ({chunk.path}, lines {chunk.start_line}-{chunk.end_line})\n"
                f"{chunk.text}{after}")


@records_configuration
def docs_connector(roots: Sequence[str | os.PathLike] | str, *, name: str = "docs", description: str | None = None,
                   index_path: str | os.PathLike | None = None, embedding_model: str | None = None,
                   embedding_options: dict[str, Any] | None = None, extract_timeout_s: float | None = None,
                   refresh_budget_s: float | None = None, extract_memory_bytes: int | None = None,
                   text_max_chars: int | None = None, allow_hardlinks: bool = False) -> DocsConnector:
    """Index the Markdown/text/HTML/PDF files under ``roots`` and expose search/read tools.

    ``index_path`` is the SQLite file (default: ``runs/knowledge/<name>-<hash of roots>.sqlite``);
    it must be yours (else it is moved aside and rebuilt). ``embedding_model`` adds vector
    retrieval fused by reciprocal rank (``"offline/hashing"`` needs no network; any litellm
    embedding model id otherwise). Extraction limits (defaults in :mod:`.extract`):
    ``extract_timeout_s`` per HTML/PDF file, ``refresh_budget_s`` per refresh,
    ``extract_memory_bytes`` for the worker, ``text_max_chars`` per file.
    ``allow_hardlinks`` indexes files with more than one hard link.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    roots = list(roots)
    given: dict[str, Any] = {"extract_timeout_s": extract_timeout_s, "refresh_budget_s": refresh_budget_s,
             "extract_memory_bytes": extract_memory_bytes, "text_max_chars": text_max_chars}
    limits = ExtractionLimits(**{k: v for k, v in given.items() if v is not None})
    if not isinstance(allow_hardlinks, bool):
        raise ValueError(f"allow_hardlinks must be true or false, got {allow_hardlinks!r}")
    path = Path(index_path) if index_path is not None else _default_index_path(name, roots)
    embedder = make_embedder(embedding_model, **(embedding_options or {}))
    index = DocIndex(roots, path, embedder=embedder, limits=limits, allow_hardlinks=allow_hardlinks)
    return DocsConnector(name, description or DOCS_DESCRIPTION, index)


class GlossaryConnector(Connector):
    """A glossary connector; ``glossary`` is reloaded when a file changes."""

    kind = "glossary"

    def __init__(self, name: str, description: str, files: Sequence[str | os.PathLike],
                 workspace_memory: str | os.PathLike | None = None) -> None:
        super().__init__(name, description)
        self.files = [Path(f) for f in files]
        self.workspace_memory = Path(workspace_memory) if workspace_memory is not None else None
        """The workspace memory file whose approved definitions join the terms (None: none)."""
        self.workspace_error: str | None = None
        """Why the workspace memory file was left out (malformed), or None."""
        self._file_glossary: Glossary = load_glossary(self.files)
        self.glossary: Glossary = self._with_workspace()
        self._stamp = self._stat()
        self.add_function(self._lookup, name="lookup")

    def glossary_classes(self) -> dict[str, str]:
        """The ``sensitivity`` of this glossary's entries, by their columns (:func:`sensitive_columns`)."""
        return sensitive_columns(self.glossary)

    def _with_workspace(self) -> Glossary:
        """The files' glossary plus the workspace memory's definitions (a malformed file is left out, named)."""
        self.workspace_error = None
        if self.workspace_memory is None:
            return self._file_glossary
        try:
            return with_workspace_terms(self._file_glossary, read_definitions(self.workspace_memory))
        except WorkspaceMemoryError as exc:
            self.workspace_error = str(exc)
            return self._file_glossary

    def _stat(self) -> tuple[Any, ...]:
        out: list[tuple[int, int] | None] = []
        for f in (*self.files, *((self.workspace_memory,) if self.workspace_memory is not None else ())):
            try:
                st = f.stat()
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def reload(self) -> Glossary:
        """Re-read the files when they changed; a broken edit keeps the previous glossary and raises."""
        stamp = self._stat()
        if stamp != self._stamp:
            self._file_glossary = load_glossary(self.files)
            self.glossary = self._with_workspace()
            self._stamp = stamp
        return self.glossary

    def sources_for(self, text: str) -> tuple[str, list[Source]]:
        glossary = self.reload()
        body, found = glossary.lookup_text(text)
        sources = []
        for sid, snippet in found:
            term = glossary.terms.get(sid[5:]) if sid.startswith("term:") else None
            names: tuple[str, ...] = ()
            components: tuple[tuple[str, ...], ...] = ()
            if term is not None and term.formula:
                names = (term.name, *term.synonyms)
                components = tuple(
                    (c, *(glossary.terms[c].synonyms if c in glossary.terms else ()))
                    for c in term.formula_components())
            title = term.name if term is not None else sid
            sources.append(Source(sid, title, snippet, names, components))
        return body, sources

    def _lookup(self, term: str, ctx: ToolContext) -> str:
        """Look up a metric, term or table: its definition, formula or SQL, tables, owners and linked entries.

        Args:
            term: A name or synonym, e.g. "net revenue" or "finance.orders".
        """
        if not isinstance(term, str) or not term.strip():
            raise ToolError("term must be non-empty text, e.g. glossary__lookup(term='net revenue').")
        related = ctx.related(term[:200], RELATED_MAX)
        try:
            body, sources = self.sources_for(term[:200])
        except LookupError as exc:
            if not related:
                raise ToolError(str(exc)) from None
            body, sources = f"No glossary term {term[:100]!r}.", []
        except GlossaryError as exc:
            raise ToolError(f"The glossary could not be reloaded: {exc}") from None
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, sources)
        return "\n".join([body, *_related_lines(related, ctx)])


@records_configuration
def glossary_connector(files: Sequence[str | os.PathLike] | str, *, name: str = "glossary",
                       description: str | None = None,
                       workspace_memory: str | os.PathLike | None = None) -> GlossaryConnector:
    """Terms, metrics, tables and owners from YAML ``files`` with a ``lookup`` tool; ``workspace_memory``: a
    workspace memory file whose user-approved definitions are terms too (source ``workspace memory``)."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    return GlossaryConnector(name, description or GLOSSARY_DESCRIPTION, list(files), workspace_memory)
