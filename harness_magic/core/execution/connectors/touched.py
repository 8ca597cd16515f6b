"""Which tables a write names, and which sensitivity classes that puts in play.

A governed write's approval carries the sensitivity classes of the data it
touches, so a policy rule such as ``{sensitivity: pii, action: deny}`` can
refuse it. The tables come from two places, and the union of both counts:

* the statement itself (:func:`tables_named`, sqlglot in the engine's
  dialect): every table it writes or reads, in any schema or attached
  database (``crm.customers``, ``other.main.t``, quoted names), CTE names
  excepted. Read tables count too: ``INSERT INTO open_copy SELECT email FROM
  crm.customers`` moves ``pii`` data;
* what the engine's preview reports it changed (triggers and cascades
  included on PostgreSQL; every schema and attached database on DuckDB).

A statement whose tables cannot be determined (the parser fails or falls back
to an opaque command such as ``DO``/``CALL``, a table-valued function that may
read any table such as DuckDB's ``query_table('crm.customers')``, a
schema-wide ``DROP SCHEMA ... CASCADE``) is treated as touching every
sensitive table (:func:`classes_touched`). Matching a configured key
``[schema.]table.column`` to a table is by table name, case-insensitively,
whatever schema or database the statement or the engine names: a same-named
table elsewhere is over-matched, never under-matched.

This is a parser: it decides what to ask and which rule applies, never what
the engine allows (see :mod:`.preview` and the connectors).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

__all__ = ["TableRef", "Touched", "tables_named", "table_ref", "classes_touched", "count_query", "TOUCHED_MAX_CHARS",
           "PURE_TABLE_FUNCTIONS", "COUNTABLE_PARTS"]

TOUCHED_MAX_CHARS = 200_000
"""Longest statement parsed for its tables; a longer one counts as touching every sensitive table."""
PURE_TABLE_FUNCTIONS = ("GenerateSeries", "ExplodingGenerateSeries")
"""sqlglot node names of table functions that read no table (``range``, ``generate_series``)."""

COUNTABLE_PARTS = frozenset({"this", "expressions", "where"})
"""Parts an ``UPDATE``/``DELETE`` may have for its changed rows to be exactly those its ``WHERE`` matches
(anything else: ``WITH``, ``FROM``, ``USING``, ``RETURNING``, ``ORDER BY``, ``LIMIT``, hints... means no count)."""


@dataclass(frozen=True)
class TableRef:
    """One table as the statement or the engine names it (parts as written; empty when not given)."""

    name: str
    schema: str = ""
    catalog: str = ""

    def __str__(self) -> str:
        return ".".join(p for p in (self.catalog, self.schema, self.name) if p)


@dataclass(frozen=True)
class Touched:
    """The tables a statement names, or why they cannot be determined."""

    tables: tuple[TableRef, ...] = ()
    unknown: str = ""
    """Non-empty when the tables cannot be determined: the reason, in words (then every sensitive table counts)."""


class _QuietCommandFallback(logging.Filter):
    """Drops sqlglot's "Falling back to parsing as a 'Command'" warning: an opaque command is reported here instead
    (as unknown tables), and the warning would print the statement on the kernel's stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


_QUIET = _QuietCommandFallback()


def _parse(sql: str, dialect: str | None) -> Any:
    import sqlglot
    from sqlglot.errors import SqlglotError

    logger = logging.getLogger("sqlglot")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)
    try:
        return sqlglot.parse(sql, read=dialect)
    except (SqlglotError, RecursionError, ValueError) as exc:
        raise ValueError(f"the parser cannot read it ({type(exc).__name__})") from None


def tables_named(sql: str, dialect: str | None) -> Touched:
    """The tables ``sql`` names (written or read), for a sqlglot ``dialect`` (``duckdb``, ``postgres``, ...)."""
    from sqlglot import exp

    if not isinstance(sql, str) or len(sql) > TOUCHED_MAX_CHARS:
        return Touched(unknown=f"the statement is over {TOUCHED_MAX_CHARS:,} characters")
    try:
        trees = [t for t in _parse(sql, dialect) if t is not None]
    except ValueError as exc:
        return Touched(unknown=str(exc))
    found: list[TableRef] = []
    for tree in trees:
        if isinstance(tree, exp.Command):
            return Touched(unknown=f"{tree.name.upper() or 'the statement'} is opaque to the parser")
        try:
            ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
            tables = list(tree.find_all(exp.Table))
        except RecursionError:
            return Touched(unknown="the statement is nested too deeply to read")
        for table in tables:
            if not isinstance(table.this, exp.Identifier):
                if type(table.this).__name__ in PURE_TABLE_FUNCTIONS:
                    continue
                return Touched(unknown=f"it reads through a table function ({table.this.sql()[:80]})")
            if not table.name:
                if isinstance(tree, exp.Create):
                    continue  # CREATE SCHEMA touches no table
                return Touched(unknown=f"it acts on a whole schema ({table.db})")
            if not table.db and not table.catalog and table.name.lower() in ctes:
                continue
            ref = TableRef(table.name, table.db, table.catalog)
            if ref not in found:
                found.append(ref)
    return Touched(tuple(found))


def table_ref(display: str, dialect: str | None) -> TableRef | None:
    """The parts of a table name as an engine displays it (``crm.customers``, ``crm."Odd.Name"``); None if unreadable."""
    from sqlglot import exp

    try:
        table = exp.to_table(display, dialect=dialect)
    except Exception:  # the engine's own text; unreadable means the caller counts it as unknown
        return None
    return TableRef(table.name, table.db, table.catalog) if table is not None and table.name else None


def _table_part(key: str) -> str:
    """``crm.customers.email`` -> ``customers``; a bare column name -> ``""`` (it applies to every table)."""
    table = key.lower().rsplit(".", 1)[0] if "." in key else ""
    return table.rsplit(".", 1)[-1].strip('"') if table else ""


def classes_touched(tables: Iterable[TableRef], sensitivity: Mapping[str, str], *, unknown: bool = False
                    ) -> tuple[str, ...]:
    """The sensitivity classes of ``tables`` under a connector's ``{"[schema.]table.column" or "column": class}``.

    A bare column key applies to every table; with ``unknown`` every class in
    ``sensitivity`` applies (the statement's tables could not be determined).
    """
    names = {t.name.lower() for t in tables}
    found = {cls for key, cls in sensitivity.items()
             if cls != "none" and (unknown or not _table_part(key) or _table_part(key) in names)}
    return tuple(sorted(found))


def count_query(sql: str, dialect: str | None) -> str | None:
    """``SELECT COUNT(*) FROM <table> WHERE <the same condition>`` for a simple ``UPDATE``/``DELETE``, else None.

    Simple: one statement on one table, with no ``WITH``, ``FROM``/``USING``,
    join, ``RETURNING``, ``ORDER BY`` or ``LIMIT`` (the rows it changes are
    then exactly the rows its ``WHERE`` matches). The caller still classifies
    the query and runs it read-only: a condition calling a function with side
    effects is not counted.
    """
    from sqlglot import exp

    if not isinstance(sql, str) or len(sql) > TOUCHED_MAX_CHARS:
        return None
    try:
        trees = [t for t in _parse(sql, dialect) if t is not None]
    except ValueError:
        return None
    if len(trees) != 1 or not isinstance(trees[0], (exp.Update, exp.Delete)):
        return None
    tree = trees[0]
    if any(value for key, value in tree.args.items() if key not in COUNTABLE_PARTS):
        return None
    table = tree.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) or table.args.get("joins"):
        return None
    query = exp.select(exp.Count(this=exp.Star())).from_(table.copy())
    where = tree.args.get("where")
    if where is not None:
        query = query.where(where.this.copy())
    try:
        return query.sql(dialect=dialect)
    except Exception:  # a tree sqlglot cannot print back: no count rather than a wrong one
        return None
