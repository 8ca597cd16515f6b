"""Lineage in a dbt project: model-level from ``depends_on``, column-level from the models' compiled SQL.

Model-level lineage is exact as far as the manifest goes: an entry's parents are its ``depends_on.nodes``
(tests left out), its children every entry naming it there (models, semantic models, metrics, exposures).

Column-level lineage parses each model's compiled SQL with sqlglot (``sqlglot.lineage``), with the columns
the catalog (else the manifest) lists as its schema, and maps each source table back to the dbt entry whose
relation it is. It is a parser's answer, not dbt's: a column computed without reading any column
(``count(*)``) has no column parents, and SQL the parser cannot read (or longer than
:data:`~harness_magic.core.execution.connectors.lineage.LINEAGE_MAX_CHARS`) gives "unknown" for that model,
said as such. A semantic model's measure whose expression names the column links it to the metrics built on
that measure. Each model's SQL is parsed once per question, for all its columns, with only its parents'
relations as schema. Walks are bounded: :data:`MAX_DEPTH` levels and :data:`MAX_STEPS` parses per question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

from harness_magic.core.execution.connectors.dbt.manifest import DbtProject, Entry
from harness_magic.core.execution.connectors.lineage import LINEAGE_MAX_CHARS, SQLGLOT_DIALECTS

__all__ = ["Lineage", "Step", "MAX_DEPTH", "MAX_STEPS"]

MAX_DEPTH = 10
"""Most levels walked up or down from the entry asked about."""
MAX_STEPS = 400
"""Most models whose SQL one question parses (a wide project stops there and says so)."""
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
    _models: dict[str, dict[str, list[tuple[str, str]]] | None] = field(default_factory=dict)
    steps_left: int = MAX_STEPS
    stopped: bool = False
    """The last question ran out of steps (its answer is partial)."""
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

    def _schema_of(self, entry: Entry) -> dict[str, Any]:
        """The columns of the relations ``entry`` reads (its parents): all a parse of its SQL needs."""
        schema: dict[str, Any] = {}
        for uid in entry.parents:
            parent = self.project.entries[uid]
            if parent.relation is None or not parent.columns:
                continue
            database, db_schema, name = parent.relation
            schema.setdefault(database, {}).setdefault(db_schema, {})[name] = {
                c.name: c.data_type or "TEXT" for c in parent.columns.values()}
        return schema

    def entry_of_table(self, table: Any) -> str | None:
        """The entry whose relation a parsed ``table`` names (by its bare name when that is unambiguous)."""
        key = (str(table.catalog).lower(), str(table.db).lower(), str(table.name).lower())
        found = self.project.by_relation.get(key)
        if found is not None:
            return found
        named = [uid for rel, uid in self.project.by_relation.items() if rel[2] == key[2]]
        return named[0] if len(named) == 1 else None

    def model_columns(self, uid: str) -> dict[str, list[tuple[str, str]]] | None:
        """Every output column of the model ``uid`` (lower-cased) with the (entry id, column) pairs it is computed
        from, from one parse of its compiled SQL; None when unknown (no SQL, unreadable SQL, out of steps)."""
        if uid in self._models:
            return self._models[uid]
        entry = self.project.entries[uid]
        if not entry.compiled_sql or len(entry.compiled_sql) > LINEAGE_MAX_CHARS:
            if entry.compiled_sql:
                self.unknown.add(uid)
            return None
        if self.steps_left <= 0:
            self.stopped = True
            return None
        self.steps_left -= 1
        from sqlglot import exp
        from sqlglot.errors import SqlglotError
        from sqlglot.lineage import lineage

        try:
            nodes = lineage(None, entry.compiled_sql, schema=self._schema_of(entry),
                            dialect=SQLGLOT_DIALECTS.get(self.project.adapter_type.lower()))
            leaves = {name: [n for n in node.walk() if not n.downstream]
                      for name, node in cast("dict[str, Any]", nodes).items()}
        except (SqlglotError, RecursionError, ValueError, KeyError, AttributeError):
            self.unknown.add(uid)
            self._models[uid] = None
            return None
        columns: dict[str, list[tuple[str, str]]] = {}
        for name, found in leaves.items():
            pairs: list[tuple[str, str]] = []
            for leaf in found:
                if not isinstance(leaf.expression, exp.Table):
                    continue  # computed without reading a column (count(*), a literal)
                parent = self.entry_of_table(leaf.expression)
                pair = (parent, leaf.name.rsplit(".", 1)[-1].strip('"').lower()) if parent is not None else None
                if pair is not None and pair not in pairs:
                    pairs.append(pair)
            columns[str(name).lower()] = pairs
        self._models[uid] = columns
        return columns

    def column_parents(self, uid: str, column: str) -> list[tuple[str, str]] | None:
        """(entry id, column) pairs the model's ``column`` is computed from; None when unknown."""
        columns = self.model_columns(uid)
        return None if columns is None else columns.get(column.lower(), [])

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
                    for child_col, parents in (self.model_columns(child) or {}).items():
                        if (child, child_col) in seen:
                            continue
                        if (current, col) in parents:
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
