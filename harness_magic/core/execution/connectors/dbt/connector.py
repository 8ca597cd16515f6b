"""The ``dbt`` connector: a dbt project's models, sources, metrics and lineage as knowledge the model cites.

``{"type": "dbt", "project": "analytics/"}`` reads ``analytics/target/manifest.json`` (and ``catalog.json``
when dbt wrote one); ``{"type": "dbt", "manifest": "...", "catalog": "..."}`` names the files. Reading never
runs dbt (see :mod:`.manifest` for the bounds). Tools (``<name>__...``, ``dbt__...`` by default):

* ``lookup(name)``: one entry by name, label or id — a model's or source's description, owner, columns with
  their descriptions, types and tests, parents and children; a metric's definition (measure and aggregation,
  or expression over other metrics), filter and owner (``meta.owner``); a semantic model's measures; an
  exposure's owner and URL;
* ``search(query, k)``: entries whose names, descriptions and columns share the most words with the query;
* ``lineage(node, column, direction, depth)``: upstream and downstream of a model, or of one of its columns
  (:mod:`.lineage`);
* ``model_sql(model)``: a model's compiled SQL, rewritten for the connector named by ``run_with`` when
  ``relation_names="identifier"``, to pass to that connector's own ``query`` tool. The SQL runs there, under
  that connector's read-only guarantees and approvals; this connector executes nothing.

Every result cites its entries as ``[dbt:<unique id>]`` (``[dbt:model.shop.orders]``,
``[dbt:metric.shop.revenue]``), recorded in the run's citation ledger like the glossary's ``[term:...]``.
The artifacts are re-read when their size or modification time changes; a broken rewrite keeps the previous
project and the tool says why.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from harness_magic.core.execution.connectors.dbt.lineage import MAX_DEPTH, Lineage, Step
from harness_magic.core.execution.connectors.dbt.manifest import (
    KINDS,
    MANIFEST_MAX_BYTES,
    RELATION_KINDS,
    DbtError,
    DbtProject,
    Entry,
    load_project,
    project_paths,
)
from harness_magic.core.execution.connectors.lineage import SQLGLOT_DIALECTS
from harness_magic.core.execution.connectors.registry import Connector, RelatedEntry, ToolContext
from harness_magic.core.execution.connectors.sameness import records_configuration
from harness_magic.core.execution.tools import ToolError
from harness_magic.core.knowledge.citations import Source, ledger_host, record_retrieval

__all__ = ["DbtConnector", "dbt_connector", "DBT_DESCRIPTION", "SEARCH_MAX_K", "RELATION_NAMES"]

DBT_DESCRIPTION = ("dbt project: models, sources, columns and their tests, metric definitions and owners, "
                   "exposures and lineage; cite with the [dbt:...] id of each entry.")
SEARCH_MAX_K = 10
"""Entries per ``search``."""
LOOKUP_MAX_MATCHES = 5
"""Entries one ``lookup`` returns when several share the name (a model and its semantic model)."""
RESULT_MAX_COLUMNS = 60
"""Columns listed in one entry's text (the rest are counted)."""
LINEAGE_MAX_LINES = 80
"""Lines of one lineage answer (the rest are counted)."""
RELATION_NAMES = ("compiled", "identifier")
"""``model_sql`` relations: as dbt compiled them (a warehouse connector), or each dbt relation by its bare
table name (a DuckDB connector whose views are named after the models)."""
_WORDS = re.compile(r"[a-z0-9]+")
_KIND_ORDER = {kind: i for i, kind in enumerate(("metric", "model", "semantic_model", "source", "seed", "snapshot",
                                                  "exposure"))}


def _words(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower().replace("_", " ")))


class DbtConnector(Connector):
    """A dbt project's knowledge; ``project`` is the parsed :class:`DbtProject`."""

    kind = "dbt"

    def __init__(self, name: str, description: str, manifest: Path, catalog: Path | None, *,
                 max_bytes: int = MANIFEST_MAX_BYTES, run_with: str | None = None,
                 relation_names: str = "compiled") -> None:
        super().__init__(name, description)
        self.manifest_path = manifest
        self.catalog_path = catalog
        self.max_bytes = max_bytes
        self.run_with = run_with
        """The connector whose ``query`` tool runs a model's SQL (None: the model picks one)."""
        self.relation_names = relation_names
        self._stamp = self._stat()
        self.project: DbtProject = load_project(manifest, catalog, max_bytes=max_bytes)
        self._words_of: tuple[DbtProject | None, dict[str, tuple[set[str], set[str], set[str]]]] = (None, {})
        """The words of each entry's name and label, column names, and texts, for the project they were taken of."""
        self.add_function(self._lookup, name="lookup")
        self.add_function(self._search, name="search")
        self.add_function(self._lineage, name="lineage")
        self.add_function(self._model_sql, name="model_sql")

    # -- artifacts ------------------------------------------------------------------------------------

    def _stat(self) -> tuple[Any, ...]:
        out: list[tuple[int, int] | None] = []
        for path in (self.manifest_path, self.catalog_path):
            try:
                st = os.lstat(path) if path is not None else None
                out.append((st.st_size, st.st_mtime_ns) if st is not None else None)
            except OSError:
                out.append(None)
        return tuple(out)

    def reload(self) -> DbtProject:
        """Re-read the artifacts when they changed; a broken rewrite keeps the previous project and raises
        :class:`ToolError` saying why."""
        stamp = self._stat()
        if stamp != self._stamp:
            try:
                project = load_project(self.manifest_path, self.catalog_path, max_bytes=self.max_bytes)
            except DbtError as exc:
                raise ToolError(f"The dbt artifacts changed and cannot be read again ({exc}); nothing was "
                                "served from them.") from None
            self.project, self._stamp = project, stamp
        return self.project

    def find(self, text: str, kinds: tuple[str, ...] = KINDS) -> list[Entry]:
        """Entries whose id (``model.shop.orders``, ``[dbt:...]``), name or label is ``text`` (case-insensitive)."""
        raw = str(text).strip().strip("[]")
        raw = raw[4:] if raw.startswith("dbt:") else raw
        entries = self.project.entries
        if raw in entries and entries[raw].kind in kinds:
            return [entries[raw]]
        wanted = raw.lower()
        found = [e for e in entries.values() if e.kind in kinds
                 and wanted in (e.name.lower(), e.label.lower(), e.name.lower().rsplit(".", 1)[-1])]
        return sorted(found, key=lambda e: (_KIND_ORDER.get(e.kind, 99), e.uid))

    def suggest(self, text: str, n: int = 5) -> list[Entry]:
        """Entries sharing the most words with ``text`` (names and labels count triple, columns double)."""
        words = _words(text)
        if not words:
            return []
        if self._words_of[0] is not self.project:
            self._words_of = (self.project, {
                entry.uid: (_words(f"{entry.name} {entry.label}"),
                            _words(" ".join(c.name for c in entry.columns.values())),
                            _words(" ".join((entry.description, *entry.details,
                                             *(c.description for c in entry.columns.values())))))
                for entry in self.project.entries.values()})
        scored = []
        for entry in self.project.entries.values():
            head, cols, body = self._words_of[1][entry.uid]
            score = 3 * len(words & head) + 2 * len(words & cols) + len(words & body)
            if score:
                scored.append((-score, _KIND_ORDER.get(entry.kind, 99), entry.uid))
        return [self.project.entries[uid] for *_, uid in sorted(scored)[:n]]

    # -- text -----------------------------------------------------------------------------------------

    def title(self, entry: Entry) -> str:
        kind = entry.kind.replace("_", " ")
        label = f" \"{entry.label}\"" if entry.label and entry.label.lower() != entry.name.lower() else ""
        return f"{entry.name}{label} ({kind})"

    def summary_line(self, entry: Entry) -> str:
        """``[dbt:id] name (kind): description`` on one line."""
        text = f"[{entry.source_id}] {self.title(entry)}"
        return f"{text}: {entry.description}" if entry.description else text

    def _ref(self, uid: str) -> str:
        entry = self.project.entries.get(uid)
        return f"[dbt:{uid}] {entry.name}" if entry is not None else f"[dbt:{uid}]"

    def entry_text(self, entry: Entry) -> str:
        """The whole entry as the model reads it (descriptions are quoted data, one line each)."""
        head = f"[{entry.source_id}] {self.title(entry)}"
        if entry.relation_name:
            head += f" — relation {entry.relation_name}"
        if entry.materialized:
            head += f", materialized {entry.materialized}"
        lines = [head]
        if entry.description:
            lines.append(f"Description: {entry.description}")
        lines.extend(entry.details)
        if entry.owner:
            lines.append(f"Owner: {entry.owner}")
        if entry.tests:
            lines.append(f"Tests: {', '.join(entry.tests)}")
        if entry.columns:
            lines.append("Columns:")
            for column in list(entry.columns.values())[:RESULT_MAX_COLUMNS]:
                bits = f"- {column.name}" + (f" {column.data_type}" if column.data_type else "")
                if column.description:
                    bits += f": {column.description}"
                if column.tests:
                    bits += f" Tests: {', '.join(column.tests)}"
                lines.append(bits)
            if len(entry.columns) > RESULT_MAX_COLUMNS:
                lines.append(f"... and {len(entry.columns) - RESULT_MAX_COLUMNS} more columns")
        if entry.parents:
            lines.append("Depends on: " + ", ".join(self._ref(p) for p in entry.parents[:20]))
        children = self.project.children.get(entry.uid, [])
        if children:
            lines.append("Used by: " + ", ".join(self._ref(c) for c in children[:20])
                         + (f" and {len(children) - 20} more" if len(children) > 20 else ""))
        if entry.path:
            lines.append(f"Defined in: {entry.path}")
        return "\n".join(lines)

    def source(self, entry: Entry, snippet: str | None = None) -> Source:
        """The ledger's :class:`Source` for ``entry`` (a derived metric carries its inputs for the answer check)."""
        names: tuple[str, ...] = ()
        components: tuple[tuple[str, ...], ...] = ()
        if entry.kind == "metric" and entry.definition_inputs:
            names = tuple(n for n in (entry.name, entry.label) if n)
            components = tuple(self._metric_names(i) for i in entry.definition_inputs)
        return Source(entry.source_id, self.title(entry), snippet if snippet is not None else self.entry_text(entry),
                      names, components)

    def _metric_names(self, name: str) -> tuple[str, ...]:
        metric = next((e for e in self.project.entries.values() if e.kind == "metric" and e.name == name), None)
        return tuple(n for n in (name, metric.label if metric is not None else "") if n)

    def related_entries(self, text: str, k: int) -> list[RelatedEntry]:
        """For ``glossary__lookup`` and ``docs__search``: the entries ``text`` names, then those sharing its words."""
        if k < 1 or not isinstance(text, str) or not text.strip():
            return []
        try:
            self.reload()
        except ToolError:
            return []  # the project's own tools name the problem; another tool's answer stands without it
        entries = self.find(text[:300])
        entries += [e for e in self.suggest(text[:500], k) if e not in entries]
        return [RelatedEntry(f"- {self.summary_line(e)}", self.source(e, self.summary_line(e))) for e in entries[:k]]

    # -- tools ----------------------------------------------------------------------------------------

    def _lookup(self, name: str, ctx: ToolContext) -> str:
        """Look up a dbt model, source, metric, semantic model or exposure: its description, owner, columns
        with descriptions and tests, metric definition, and what it depends on and feeds.

        Args:
            name: A name, label or id, e.g. "revenue", "orders" or "model.shop.orders".
        """
        if not isinstance(name, str) or not name.strip():
            raise ToolError(f"name must be non-empty text, e.g. {self.name}__lookup(name='revenue').")
        self.reload()
        found = self.find(name[:300])[:LOOKUP_MAX_MATCHES]
        if not found:
            near = self.suggest(name[:300])
            if not near:
                raise ToolError(f"No dbt entry named {name[:100]!r} in {self.project.summary()}. "
                                f"Try {self.name}__search(query=...).")
            record_retrieval(ledger_host(ctx.harness), ctx.tool_name,
                             [self.source(e, self.summary_line(e)) for e in near])
            return "\n".join([f"No dbt entry named {name[:100]!r}; closest matches:",
                              *(f"- {self.summary_line(e)}" for e in near),
                              f"Call {self.name}__lookup again with one of these names for the full entry."])
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, [self.source(e) for e in found])
        return "\n\n".join(self.entry_text(e) for e in found)

    def _search(self, query: str, ctx: ToolContext, k: int = 5) -> str:
        """Search the dbt project's models, sources, columns, metrics and exposures by words.

        Args:
            query: Words to look for, e.g. "completed order amount euros".
            k: How many entries to return (1-10).
        """
        if not isinstance(query, str) or not query.strip():
            raise ToolError(f"query must be non-empty text, e.g. {self.name}__search(query='revenue').")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= SEARCH_MAX_K:
            raise ToolError(f"k must be an integer from 1 to {SEARCH_MAX_K}, got {k!r}.")
        self.reload()
        hits = self.suggest(query[:500], k)
        header = f"{len(hits)} dbt entr{'y' if len(hits) == 1 else 'ies'} for {query[:80]!r} ({self.project.summary()})"
        if not hits:
            return header + ". Try other words."
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, [self.source(e, self.summary_line(e)) for e in hits])
        return "\n".join([header + ":", *(f"{i}. {self.summary_line(e)}" for i, e in enumerate(hits, 1)),
                          f"Read a whole entry with {self.name}__lookup(name=...)."])

    def _lineage(self, node: str, ctx: ToolContext, column: str = "",
                 direction: Literal["upstream", "downstream", "both"] = "both", depth: int = 3) -> str:
        """Upstream (what it is built from) and downstream (what reads it: models, metrics, exposures) of a dbt
        model, source or seed, or of one of its columns (column-level, traced through the compiled SQL).

        Args:
            node: A model, source or seed name or id, e.g. "orders" or "model.shop.orders".
            column: A column of that node, for column-level lineage (empty: model-level).
            direction: "upstream", "downstream" or "both".
            depth: How many levels to follow (1-10).
        """
        if not isinstance(node, str) or not node.strip():
            raise ToolError(f"node must be a model, source or seed name, e.g. {self.name}__lineage(node='orders').")
        if direction not in ("upstream", "downstream", "both"):
            raise ToolError(f"direction must be 'upstream', 'downstream' or 'both', got {direction!r}.")
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise ToolError(f"depth must be an integer from 1 to {MAX_DEPTH}, got {depth!r}.")
        if not isinstance(column, str):
            raise ToolError(f"column must be a column name or empty, got {column!r}.")
        self.reload()
        found = self.find(node[:300], (*RELATION_KINDS, "metric", "semantic_model", "exposure"))
        if not found:
            near = ", ".join(e.name for e in self.suggest(node[:300], 5) if e.kind in RELATION_KINDS)
            raise ToolError(f"No dbt model, source or seed named {node[:100]!r}." + (f" Close: {near}." if near else ""))
        entry = next((e for e in found if e.kind in RELATION_KINDS), found[0])
        graph = Lineage(self.project)
        column = column.strip()
        if column:
            if entry.kind not in RELATION_KINDS:
                raise ToolError(f"{entry.name} is a {entry.kind.replace('_', ' ')}; column lineage is for models, "
                                "sources and seeds.")
            if entry.columns and column.lower() not in entry.columns:
                raise ToolError(f"{entry.name} has no column {column[:100]!r}; its columns: "
                                + ", ".join(c.name for c in list(entry.columns.values())[:40]))
        lines: list[str] = []
        sections: list[tuple[str, list[Step]]] = []
        if column:
            head = f"Column lineage of {entry.name}.{column} [{entry.source_id}] (column-level, from compiled SQL)"
            if direction in ("upstream", "both"):
                sections.append(("Upstream (built from)", graph.column_upstream(entry.uid, column, depth)))
            if direction in ("downstream", "both"):
                sections.append(("Downstream (reads it)", graph.column_downstream(entry.uid, column, depth)))
        else:
            head = f"Lineage of {entry.name} [{entry.source_id}] (model-level, from depends_on)"
            if direction in ("upstream", "both"):
                sections.append(("Upstream (built from)", graph.walk(entry.uid, True, depth)))
            if direction in ("downstream", "both"):
                sections.append(("Downstream (reads it)", graph.walk(entry.uid, False, depth)))
        lines.append(head + ":")
        mentioned = {entry.uid}
        for title, steps in sections:
            lines.append(f"{title}:" if steps else f"{title}: none found")
            for step in steps:
                mentioned.add(step.uid)
                other = self.project.entries[step.uid]
                what = f"{other.name}.{step.column}" if step.column else self.title(other)
                via = f" — {step.via}" if step.via else ""
                lines.append(f"{'  ' * (step.level - 1)}- {what} [{other.source_id}]{via}")
        if graph.unknown:
            lines.append("Not traced (SQL the parser could not read): "
                         + ", ".join(self._ref(u) for u in sorted(graph.unknown)))
        if graph.stopped:
            lines.append("Stopped early: the project is too wide to trace in one call; ask with a smaller depth.")
        if len(lines) > LINEAGE_MAX_LINES:
            lines = lines[:LINEAGE_MAX_LINES] + [f"... and {len(lines) - LINEAGE_MAX_LINES} more lines"]
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name,
                         [self.source(self.project.entries[u], self.summary_line(self.project.entries[u]))
                          for u in mentioned])
        return "\n".join(lines)

    def rewritten_sql(self, entry: Entry) -> str:
        """``entry``'s compiled SQL with each dbt relation named by its bare identifier (``relation_names``
        ``identifier``); the compiled SQL itself otherwise."""
        if self.relation_names == "compiled":
            return entry.compiled_sql
        import sqlglot
        from sqlglot import exp
        from sqlglot.errors import SqlglotError

        dialect = SQLGLOT_DIALECTS.get(self.project.adapter_type.lower())
        try:
            tree = sqlglot.parse_one(entry.compiled_sql, read=dialect)
        except (SqlglotError, RecursionError, ValueError) as exc:
            raise ToolError(f"The compiled SQL of {entry.name} cannot be parsed to rename its relations: "
                            f"{str(exc)[:200]}") from None
        graph = Lineage(self.project)
        for table in list(tree.find_all(exp.Table)):
            uid = graph.entry_of_table(table) if table.name else None
            target = self.project.entries[uid].relation if uid is not None else None
            if target is not None:
                alias = table.alias
                table.replace(exp.to_table(target[2], dialect=dialect).as_(alias) if alias
                              else exp.to_table(target[2], dialect=dialect))
        return tree.sql(dialect=dialect, pretty=True)

    def _model_sql(self, model: str, ctx: ToolContext) -> str:
        """The compiled SQL of a dbt model, ready for the SQL/DuckDB connector's query tool (this tool runs
        nothing).

        Args:
            model: A model name or id, e.g. "customer_revenue".
        """
        if not isinstance(model, str) or not model.strip():
            raise ToolError(f"model must be a model name, e.g. {self.name}__model_sql(model='orders').")
        self.reload()
        found = self.find(model[:300], ("model", "snapshot"))
        if not found:
            raise ToolError(f"No dbt model named {model[:100]!r}.")
        entry = found[0]
        if not entry.compiled_sql:
            raise ToolError(f"The manifest holds no compiled SQL for {entry.name}; run `dbt compile` (or build) "
                            "in the project, then ask again.")
        sql = self.rewritten_sql(entry)
        record_retrieval(ledger_host(ctx.harness), ctx.tool_name, [self.source(entry, self.summary_line(entry))])
        runner = (f"Run it with {self.run_with}__query(sql=...) (load the {self.run_with} connector first)"
                  if self.run_with else "Run it with the query tool of the SQL or DuckDB connector holding the "
                                        "project's tables")
        return f"Compiled SQL of {entry.name} [{entry.source_id}]:\n{sql}\n{runner}; it runs there read-only."


@records_configuration
def dbt_connector(project: str | os.PathLike[str] | None = None, *, manifest: str | os.PathLike[str] | None = None,
                  catalog: str | os.PathLike[str] | None = None, name: str = "dbt", description: str | None = None,
                  run_with: str | None = None, relation_names: str = "compiled",
                  max_bytes: int = MANIFEST_MAX_BYTES) -> DbtConnector:
    """A dbt project's artifacts as knowledge tools (see the module docstring).

    ``project``: a dbt project directory (``target/manifest.json``, ``target/catalog.json`` if present); or
    ``manifest`` (+ optional ``catalog``): the files. ``run_with``: the connector (by name) whose ``query`` tool
    runs a model's SQL; ``relation_names``: ``compiled`` (default) or ``identifier`` (each dbt relation by
    its bare table name, for a DuckDB connector whose views carry the models' names). ``max_bytes``: the
    largest artifact read. ValueError (:class:`DbtError`) for a bad option or an unreadable artifact.
    """
    manifest_path, catalog_path = project_paths(project, manifest, catalog)
    if relation_names not in RELATION_NAMES:
        raise DbtError(f"relation_names must be one of {', '.join(RELATION_NAMES)}, got {relation_names!r}")
    if run_with is not None and (not isinstance(run_with, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,30}",
                                                                                    run_with)):
        raise DbtError(f"run_with must be a connector name, got {run_with!r}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise DbtError(f"max_bytes must be a positive integer, got {max_bytes!r}")
    return DbtConnector(name, description or DBT_DESCRIPTION, manifest_path, catalog_path, max_bytes=max_bytes,
                        run_with=run_with, relation_names=relation_names)
