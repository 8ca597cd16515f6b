"""Lineage in a dbt project: model-level from ``depends_on``, column-level from the models' compiled SQL.

Model-level lineage is exact as far as the manifest goes: an entry's parents are its ``depends_on.nodes``
(tests left out), its children every entry naming it there (models, semantic models, metrics, exposures).

Column-level lineage parses each model's compiled SQL with sqlglot (``sqlglot.lineage``), with the columns
the catalog (else the manifest) lists as its schema, and maps each source table back to the dbt entry whose
relation it is. It is a parser's answer, not dbt's: a column computed without reading any column
(``count(*)``) has no column parents, and SQL the parser cannot read (or longer than
:data:`~harness_magic.core.execution.connectors.lineage.LINEAGE_MAX_CHARS`) gives "unknown" for that model,
said as such. A semantic model's measure whose expression names the column links it to the metrics built on
that measure. Walks are bounded: :data:`MAX_DEPTH` levels and :data:`MAX_STEPS` parses per question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from harness_magic.core.execution.connectors.dbt.manifest import DbtProject, Entry
from harness_magic.core.execution.connectors.lineage import LINEAGE_MAX_CHARS, SQLGLOT_DIALECTS

__all__ = ["Lineage", "Step", "MAX_DEPTH", "MAX_STEPS"]

MAX_DEPTH = 10
"""Most levels walked up or down from the entry asked about."""
MAX_STEPS = 400
"""Most column-lineage parses per question (a wide project stops there and says so)."""
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Step:
    """One entry (and column, for column lineage) found ``level`` steps away."""

    level: int
    uid: str
    column: str = ""
    via: str = ""
    """How it is reached when not through a column (``measure order_total``)."""


@dataclass
class Lineage:
    """Lineage questions over one :class:`DbtProject` (parses are cached for its lifetime)."""

    project: DbtProject
    _parents: dict[tuple[str, str], list[tuple[str, str]] | None] = field(default_factory=dict)
    _schema: dict[str, Any] | None = None
    steps_left: int = MAX_STEPS
    unknown: set[str] = field(default_factory=set)
    """Models whose SQL could not be traced in the last question."""

    # -- model level -----------------------------------------------------------------------------------

    def walk(self, uid: str, upstream: bool, depth: int) -> list[Step]:
        """Entries ``depth`` levels up (``upstream``) or down from ``uid``, depth first, each listed once."""
        out: list[Step] = []
        seen = {uid}

        def visit(current: str, level: int) -> None:
            if level > depth:
                return
            nxt = (self.project.entries[current].parents if upstream
                   else self.project.children.get(current, []))
            for other in nxt:
                if other in seen:
                    continue
                seen.add(other)
                out.append(Step(level, other))
                visit(other, level + 1)

        visit(uid, 1)
        return out

    # -- column level ----------------------------------------------------------------------------------

    def _schema_dict(self) -> dict[str, Any]:
        if self._schema is None:
            schema: dict[str, Any] = {}
            for entry in self.project.entries.values():
                if entry.relation is None or not entry.columns:
                    continue
                database, db_schema, name = entry.relation
                schema.setdefault(database, {}).setdefault(db_schema, {})[name] = {
                    c.name: c.data_type or "TEXT" for c in entry.columns.values()}
            self._schema = schema
        return self._schema

    def entry_of_table(self, table: Any) -> str | None:
        key = tuple(str(part).lower() for part in (table.catalog, table.db, table.name))
        found = self.project.by_relation.get(key)  # type: ignore[arg-type]  # a 3-tuple of str
        if found is not None:
            return found
        named = [uid for rel, uid in self.project.by_relation.items() if rel[2] == key[2]]
        return named[0] if len(named) == 1 else None

    def column_parents(self, uid: str, column: str) -> list[tuple[str, str]] | None:
        """(entry id, column) pairs the model's ``column`` is computed from; None when unknown."""
        key = (uid, column.lower())
        if key in self._parents:
            return self._parents[key]
        entry = self.project.entries[uid]
        if not entry.compiled_sql or len(entry.compiled_sql) > LINEAGE_MAX_CHARS or self.steps_left <= 0:
            if entry.compiled_sql and self.steps_left > 0:
                self.unknown.add(uid)
            return None
        self.steps_left -= 1
        from sqlglot import exp
        from sqlglot.errors import SqlglotError
        from sqlglot.lineage import lineage

        name = next((c.name for c in entry.columns.values() if c.name.lower() == column.lower()), column)
        try:
            node = lineage(name, entry.compiled_sql, schema=self._schema_dict(),
                           dialect=SQLGLOT_DIALECTS.get(self.project.adapter_type.lower()))
            leaves = [n for n in node.walk() if not n.downstream]
        except (SqlglotError, RecursionError, ValueError, KeyError, AttributeError):
            self.unknown.add(uid)
            self._parents[key] = None
            return None
        found: list[tuple[str, str]] = []
        for leaf in leaves:
            if not isinstance(leaf.expression, exp.Table):
                continue  # computed without reading a column (count(*), a literal)
            parent = self.entry_of_table(leaf.expression)
            if parent is None:
                continue
            pair = (parent, leaf.name.rsplit(".", 1)[-1].strip('"').lower())
            if pair not in found:
                found.append(pair)
        self._parents[key] = found
        return found

    def _output_columns(self, entry: Entry) -> list[str]:
        if entry.columns:
            return [c.name.lower() for c in entry.columns.values()]
        if not entry.compiled_sql or len(entry.compiled_sql) > LINEAGE_MAX_CHARS:
            return []
        import sqlglot
        from sqlglot.errors import SqlglotError

        try:
            tree = sqlglot.parse_one(entry.compiled_sql,
                                     read=SQLGLOT_DIALECTS.get(self.project.adapter_type.lower()))
        except (SqlglotError, RecursionError, ValueError):
            return []
        return [n.lower() for n in getattr(tree, "named_selects", []) if n != "*"]

    def column_upstream(self, uid: str, column: str, depth: int) -> list[Step]:
        out: list[Step] = []
        seen = {(uid, column.lower())}

        def visit(current: str, col: str, level: int) -> None:
            if level > depth:
                return
            for parent, parent_col in self.column_parents(current, col) or []:
                if (parent, parent_col) in seen:
                    continue
                seen.add((parent, parent_col))
                out.append(Step(level, parent, parent_col))
                if self.project.entries[parent].kind in ("model", "snapshot"):
                    visit(parent, parent_col, level + 1)

        visit(uid, column.lower(), 1)
        return out

    def column_downstream(self, uid: str, column: str, depth: int) -> list[Step]:
        out: list[Step] = []
        seen = {(uid, column.lower())}

        def visit(current: str, col: str, level: int) -> None:
            if level > depth:
                return
            for child in self.project.children.get(current, []):
                entry = self.project.entries[child]
                if entry.kind in ("model", "snapshot"):
                    for child_col in self._output_columns(entry):
                        if (child, child_col) in seen:
                            continue
                        if (current, col) in (self.column_parents(child, child_col) or []):
                            seen.add((child, child_col))
                            out.append(Step(level, child, child_col))
                            visit(child, child_col, level + 1)
                elif entry.kind == "semantic_model":
                    self._measures_reading(entry, col, level, seen, out)
                elif child not in {s.uid for s in out}:
                    out.append(Step(level, child, via="reads the model"))

        visit(uid, column.lower(), 1)
        return out

    def _measures_reading(self, semantic: Entry, column: str, level: int, seen: set[tuple[str, str]],
                          out: list[Step]) -> None:
        """A semantic model's measures whose expression names ``column``, and the metrics built on them."""
        for measure, (agg, expr) in semantic.measures.items():
            if column not in {w.lower() for w in _WORD.findall(expr)}:
                continue
            if (semantic.uid, f"measure:{measure}") in seen:
                continue
            seen.add((semantic.uid, f"measure:{measure}"))
            out.append(Step(level, semantic.uid, via=f"measure {measure} = {agg}({expr})"))
            for metric in self._metrics_of(measure):
                if (metric, "") not in seen:
                    seen.add((metric, ""))
                    out.append(Step(level + 1, metric, via=f"uses measure {measure}"))

    def _metrics_of(self, measure: str) -> list[str]:
        """Metrics whose input measures include ``measure`` (a derived metric's inputs included)."""
        return [e.uid for e in self.project.entries.values()
                if e.kind == "metric" and measure in e.input_measures]
