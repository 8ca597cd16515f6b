"""``%agent_docs``: what the knowledge connectors hold, and a search for the user.

``%agent_docs``
    Each ``docs`` connector of the session: files, chunks, last update, and
    its files (path, chunks, size, indexed at), then every file it did not
    index with the reason (a link, a hard link, over an extraction limit such
    as "extraction exceeded 5 s" or "text over 8 MiB") and the files deferred
    to the next refresh; each ``glossary`` connector: its files and term
    counts; each ``dbt`` connector: its project and entry counts. The index is refreshed first (incrementally), and what the refresh
    changed is shown.
``%agent_docs QUERY... [-k N] [--connector NAME]``
    The best sections for QUERY, with their source ids, as the model would
    get them from ``docs__search``; glossary terms and dbt entries matching QUERY too.

Glue only: the work is :class:`~harness_magic.core.execution.connectors.docs.DocsConnector`'s.
Registered by the extension (:func:`harness_magic.notebook.extension.magics_classes`).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from harness_magic.core.text.counts import count, plural
from harness_magic.core.text.snippets import snippet_line

__all__ = ["DocsMagics", "DocsView"]

FILES_SHOWN = 50
"""Files listed per connector; the count says how many more there are."""
_LEFT = "text-align:left;vertical-align:top"
"""Cells read from the left (JupyterLab's stylesheet right-aligns table cells)."""


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


@dataclass
class DocsView:
    """A plain-text and HTML view of ``%agent_docs`` output (the returned value)."""

    title: str
    lines: list[str] = field(default_factory=list)
    """Text lines (the ``text/plain`` form)."""
    tables: list[tuple[str, list[str], list[list[str]]]] = field(default_factory=list)
    """(caption, header, rows) for the HTML form."""

    def __repr__(self) -> str:
        return "\n".join([self.title, *self.lines])

    def _repr_html_(self) -> str:
        parts = [f"<p><strong>{html.escape(self.title)}</strong></p>"]
        for caption, header, rows in self.tables:
            head = "".join(f'<th style="{_LEFT}">{html.escape(h)}</th>' for h in header)
            body = "".join("<tr>" + "".join(f'<td style="{_LEFT}">{html.escape(c)}</td>' for c in row) + "</tr>"
                           for row in rows)
            parts.append(f"<table><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead>"
                         f"<tbody>{body}</tbody></table>")
        return "".join(parts)


@magics_class
class DocsMagics(Magics):
    """``%agent_docs`` over the knowledge connectors of ``agent_magics``' session."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    def _connectors(self, name: str | None) -> tuple[list[Any], list[Any], list[Any]]:
        from harness_magic.core.execution.connectors.dbt.connector import DbtConnector
        from harness_magic.core.execution.connectors.docs.connector import DocsConnector, GlossaryConnector

        installed = self._agent.session.connectors
        every = list(installed.registry._connectors.values()) if installed is not None else []
        if name is not None:
            every = [c for c in every if c.name == name]
            if not every:
                known = ", ".join(c.name for c in (installed.registry._connectors.values() if installed else []))
                raise UsageError(f"%agent_docs: no connector {name!r}; connectors: {known or '(none)'}")
        docs = [c for c in every if isinstance(c, DocsConnector)]
        glossaries = [c for c in every if isinstance(c, GlossaryConnector)]
        dbts = [c for c in every if isinstance(c, DbtConnector)]
        if not docs and not glossaries and not dbts:
            raise UsageError("%agent_docs: no docs, glossary or dbt connector in this session; add one with "
                             "%config AgentMagics.connectors = [{'type': 'docs', 'roots': ['docs/']}] "
                             "or agent_session().add_connector(docs_connector([...]))")
        return docs, glossaries, dbts

    @no_var_expand
    @magic_arguments()
    @argument("query", nargs="*", help="Words to search for (none: list what is indexed).")
    @argument("-k", type=int, default=5, help="Sections to show per docs connector (1-10).")
    @argument("--connector", default=None, help="Only this connector.")
    @line_magic
    def agent_docs(self, line: str) -> DocsView:
        """List the indexed documents and glossary terms, or search them: ``%agent_docs net revenue``."""
        args = parse_argstring(self.agent_docs, line)
        docs, glossaries, dbts = self._connectors(args.connector)
        query = " ".join(args.query).strip()
        if query:
            return self._search(query, args.k, docs, glossaries, dbts)
        return self._listing(docs, glossaries, dbts)

    def _listing(self, docs: list[Any], glossaries: list[Any], dbts: list[Any]) -> DocsView:
        view = DocsView("Knowledge connectors")
        for connector in docs:
            report = connector.refresh()
            files = connector.index.files()
            view.lines.append(f"{connector.name}: {count(report.files, 'file')}, {count(report.chunks, 'chunk')}, "
                              f"last update {_when(connector.index.last_refresh)}"
                              + (f" ({report.summary()})" if report.changed or report.skipped or report.deferred
                                 or report.notes else ""))
            rows = [[f["path"], str(f["chunks"]), f"{f['bytes']:,} B", _when(f["indexed_at"])]
                    for f in files[:FILES_SHOWN]]
            for row in rows:
                view.lines.append(f"  {row[0]}  {row[1]} {plural('chunk', int(row[1]))}  {row[2]}")
            if len(files) > FILES_SHOWN:
                view.lines.append(f"  ... and {count(len(files) - FILES_SHOWN, 'more file')}")
            view.tables.append((f"{connector.name} ({count(report.files, 'file')}, {count(report.chunks, 'chunk')})",
                                ["file", "chunks", "size", "indexed at"], rows))
            left_out = [entry.partition(": ")[::2] for entry in report.skipped]
            left_out += [(path, "deferred: this refresh's extraction budget was spent") for path in report.deferred]
            for path, reason in left_out[:FILES_SHOWN]:
                view.lines.append(f"  not indexed: {path}: {reason}")
            if len(left_out) > FILES_SHOWN:
                view.lines.append(f"  ... and {len(left_out) - FILES_SHOWN} more not indexed")
            if left_out:
                view.tables.append((f"{connector.name}: not indexed", ["file", "reason"],
                                    [list(pair) for pair in left_out[:FILES_SHOWN]]))
        for connector in glossaries:
            glossary = connector.reload()
            kinds: dict[str, int] = {}
            for term in glossary.terms.values():
                kinds[term.kind] = kinds.get(term.kind, 0) + 1
            counts = ", ".join(count(n, k) for k, n in sorted(kinds.items()))
            view.lines.append(f"{connector.name}: {count(len(glossary.terms), 'term')} ({counts}), "
                              f"{count(len(glossary.owners), 'owner')}, from {', '.join(glossary.files)}")
            view.tables.append((connector.name, ["term", "kind", "owners"],
                                [[t.name, t.kind, ", ".join(t.owners)] for t in glossary.terms.values()]))
        for connector in dbts:
            project = self._dbt_project(connector)
            view.lines.append(f"{connector.name}: {project.summary()}, from {connector.manifest_path}")
            view.tables.append((connector.name, ["entry", "kind", "owner"],
                                [[f"[{e.source_id}]", e.kind, e.owner] for e in
                                 list(project.entries.values())[:FILES_SHOWN]]))
        return view

    @staticmethod
    def _dbt_project(connector: Any) -> Any:
        from harness_magic.core.execution.tools import ToolError

        try:
            return connector.reload()
        except ToolError as exc:
            raise UsageError(f"%agent_docs: {exc}") from None

    def _search(self, query: str, k: int, docs: list[Any], glossaries: list[Any], dbts: list[Any]) -> DocsView:
        from harness_magic.core.execution.tools import ToolError

        view = DocsView(f"Search: {query}")
        for connector in docs:
            try:
                hits = connector.search(query, k)
            except ToolError as exc:
                raise UsageError(f"%agent_docs: {exc}") from None
            rows = []
            for hit in hits:
                c = hit.chunk
                view.lines.append(f"[{c.source_id}] {c.title} (lines {c.start_line}-{c.end_line}, "
                                  f"score {hit.score:.3g})")
                snippet = snippet_line(hit.snippet, c.trail)  # the section column shows the trail once
                view.lines.append(f"    {snippet}")
                rows.append([f"[{c.source_id}]", c.title, f"{c.start_line}-{c.end_line}", f"{hit.score:.3g}",
                             snippet])
            if not hits:
                view.lines.append(f"{connector.name}: no sections match")
            view.tables.append((connector.name, ["source", "section", "lines", "score", "snippet"], rows))
        for connector in glossaries:
            glossary = connector.reload()
            term = glossary.find(query)
            matches = [term] if term is not None else glossary.suggest(query)
            for match in matches:
                view.lines.append(f"[{match.source_id}] {match.name} ({match.kind}): {match.definition}")
            view.tables.append((connector.name, ["term", "kind", "definition"],
                                [[f"[{m.source_id}]", m.kind, m.definition] for m in matches]))
        for connector in dbts:
            self._dbt_project(connector)
            entries = connector.find(query) or connector.suggest(query, max(1, min(k, 10)))
            for entry in entries:
                view.lines.append(connector.summary_line(entry))
            view.tables.append((connector.name, ["entry", "kind", "description"],
                                [[f"[{e.source_id}]", e.kind, e.description] for e in entries]))
        return view

