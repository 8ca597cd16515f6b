"""Column lineage of a query: which source columns each output column is computed from.

Contract of :func:`column_sources`:

* **Conservative.** An output column maps to every column its expression
  references, followed through aliases in CTEs and subqueries at any depth
  (``WITH c AS (SELECT name AS who ...) SELECT upper(who) AS memo`` maps
  ``memo`` to ``name``). Over-approximating is the safe direction: it only
  decides which outputs get a sensitivity class.
* **Aggregates that make a new number carry nothing.** A column read only
  inside ``COUNT``, ``SUM``, ``AVG`` or a spread (``COUNT(DISTINCT email)``,
  ``ROUND(SUM(amount), 2)``) is not a source: the result is not any row's
  value, and sums over financial columns must reach the model exact.
  ``MIN``/``MAX`` return a row's value, so they keep their sources.
* **Stars pass names through.** ``SELECT * FROM (SELECT name AS who ...)``
  has no projection naming ``who``: every alias defined anywhere in the query
  is listed with its closure, so ``who`` still maps to ``name``.
* **Unknown is None.** SQL the parser cannot read, or a tree too deep to walk
  (:data:`LINEAGE_MAX_DEPTH`), gives None: the caller then classifies by
  output names and values only, and says so.

References are lower-cased ``column`` and, where the query qualifies them,
``table.column`` (the table part as written, alias or name). This is a
parser, so it never is a boundary: it decides which columns are pseudonymised
at entry (see :mod:`harness_magic.core.control.pseudonyms`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlglot is imported lazily at run time (an optional extra)
    from sqlglot.expressions import Expr

__all__ = ["column_sources", "SQLGLOT_DIALECTS", "LINEAGE_MAX_DEPTH", "LINEAGE_MAX_CHARS"]

LINEAGE_MAX_DEPTH = 200
"""Deepest parse tree followed: deeper SQL is unknown lineage (a hostile tree must not exhaust the stack)."""
LINEAGE_MAX_CHARS = 200_000
"""Longest query text parsed for lineage: longer is unknown lineage."""

SQLGLOT_DIALECTS = {"postgresql": "postgres", "postgres": "postgres", "duckdb": "duckdb", "sqlite": "sqlite",
             "spark": "spark", "mysql": "mysql"}


def column_sources(sql: str, dialect: str | None = None) -> dict[str, frozenset[str]] | None:
    """``{output column (as the result names it): frozenset of referenced columns}``, or None when unknown."""
    if not isinstance(sql, str) or not sql.strip() or len(sql) > LINEAGE_MAX_CHARS:
        return None
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        tree = sqlglot.parse_one(sql, read=SQLGLOT_DIALECTS.get((dialect or "").lower()))
    except (SqlglotError, RecursionError, ValueError):
        return None
    if tree is None or _depth(tree) > LINEAGE_MAX_DEPTH:
        return None
    aliases: dict[str, set[str]] = {}
    for select in tree.find_all(exp.Select):
        for projection in select.expressions:
            name = projection.alias_or_name
            if name and name != "*":
                aliases.setdefault(name.lower(), set()).update(_references(projection))
    outputs = _outputs(tree)
    if outputs is None:
        return None
    result: dict[str, frozenset[str]] = {}
    for projection in outputs:
        name = projection.alias_or_name
        if not name or name == "*":
            continue
        refs = _closure(_references(projection), aliases)
        result[name] = result.get(name, frozenset()) | frozenset(refs)
    for name in aliases:  # a `*` passes inner columns through under their own (alias) names
        if not any(key.lower() == name for key in result):
            result[name] = frozenset(_closure({name}, aliases))
    return result


def _outputs(tree: Expr) -> list[Expr] | None:
    """The projections of the statement's result (every branch of a set operation)."""
    from sqlglot import exp

    if isinstance(tree, exp.Select):
        return list(tree.expressions)
    if isinstance(tree, exp.SetOperation):
        left, right = _outputs(tree.left), _outputs(tree.right)
        if left is None or right is None:
            return None
        # a UNION's columns take the first branch's names; the other branches' values flow into them
        merged = []
        for i, projection in enumerate(left):
            merged.append(projection)
            if i < len(right):
                merged.append(exp.alias_(right[i].copy(), projection.alias_or_name or f"_{i}"))
        return merged
    if isinstance(tree, (exp.Subquery, exp.Paren)) and tree.this is not None:
        return _outputs(tree.this)
    return None


def _references(projection: Expr) -> set[str]:
    from sqlglot import exp

    node = projection.unalias() if isinstance(projection, exp.Expression) else projection
    refs: set[str] = set()
    for column in node.find_all(exp.Column):
        if isinstance(column.this, exp.Star) or _inside_aggregate(column, node):
            continue
        name = column.name.lower()
        refs.add(name)
        if column.table:
            refs.add(f"{column.table.lower()}.{name}")
    return refs


def _inside_aggregate(column: Expr, top: Expr) -> bool:
    """The column is read only through an aggregate that yields a new number (count, sum, mean, spread)."""
    from sqlglot import exp

    node = column.parent
    while node is not None and node is not top.parent:
        if isinstance(node, _NEW_NUMBER_AGGREGATES()):
            return True
        node = node.parent
    return False


def _NEW_NUMBER_AGGREGATES() -> tuple[type, ...]:  # noqa: N802 - a constant needing a lazy import
    from sqlglot import exp

    return (exp.Count, exp.Sum, exp.Avg, exp.Stddev, exp.StddevPop, exp.StddevSamp, exp.Variance,
            exp.VariancePop)


def _closure(refs: set[str], aliases: dict[str, set[str]]) -> set[str]:
    seen = set(refs)
    todo = [r for r in refs if "." not in r]
    while todo:
        for ref in aliases.get(todo.pop(), ()):
            if ref not in seen:
                seen.add(ref)
                if "." not in ref:
                    todo.append(ref)
    return seen


def _depth(tree: object) -> int:
    """The tree's depth, walked iteratively (no recursion), stopping past :data:`LINEAGE_MAX_DEPTH`."""
    from sqlglot import exp

    stack = [(tree, 1)]
    deepest = 0
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > LINEAGE_MAX_DEPTH:
            return deepest
        for child in node.iter_expressions() if isinstance(node, exp.Expression) else ():
            stack.append((child, depth + 1))
    return deepest
