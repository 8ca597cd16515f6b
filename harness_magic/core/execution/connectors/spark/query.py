"""How model SQL reaches Spark: as the only content of a subquery, so Spark's parser accepts nothing but a query.

:func:`wrap_query` is the one form every query text takes on its way to Spark
(the model's queries, lazy handles' views, their snapshots and pulls, cost
estimates); :func:`parse_query` has Spark parse it into a DataFrame (nothing
runs) and words a refusal; :func:`estimate_rows` reads Spark's own ``rowCount``
estimate. Errors are :class:`~harness_magic.core.execution.tools.ToolError`
carrying the first line of Spark's message (:func:`first_line`).
"""

from __future__ import annotations

import re
from typing import Any

from harness_magic.core.execution.tools import ToolError

__all__ = ["wrap_query", "parse_query", "estimate_rows", "first_line"]

_ROW_COUNT = re.compile(r"rowCount=([0-9.]+(?:E[+-]?[0-9]+)?)")
_TRAILING = re.compile(r"[\s;]+\Z")


def wrap_query(sql: str) -> str:
    """``sql`` as the only content of a subquery: Spark's parser accepts nothing but a query there.

    Trailing semicolons and blanks are dropped; the text sits on its own lines,
    so a trailing ``--`` comment cannot swallow the closing parenthesis.
    """
    return f"SELECT * FROM (\n{_TRAILING.sub('', sql)}\n) AS __harness_query"


def parse_query(spark: Any, sql: str) -> Any:
    """A DataFrame for ``sql``, which Spark's own parser must accept as a query (see :func:`wrap_query`)."""
    from pyspark.errors import PySparkException

    try:
        return spark.sql(wrap_query(sql))
    except PySparkException as exc:
        text = first_line(exc)
        if "PARSE_SYNTAX_ERROR" in text or "ParseException" in type(exc).__name__:
            raise ToolError(f"Refused by Spark's parser: the text is not one query ({text}); spark__query runs "
                            "a single SELECT/WITH/FROM query.") from None
        raise ToolError(f"spark error: {text}") from None


def estimate_rows(spark: Any, sql: str) -> int | None:
    """Spark's ``rowCount`` estimate for the query's top operator (``EXPLAIN COST``), if it has one."""
    try:
        plan = spark.sql(f"EXPLAIN COST {wrap_query(sql)}").collect()[0][0]
    except Exception:  # broad: pyspark raises its own error types; the estimate is optional
        return None
    optimized = plan.split("== Optimized Logical Plan ==")[-1].strip().splitlines()
    match = _ROW_COUNT.search(optimized[0]) if optimized else None  # the top operator's own statistics
    return int(float(match.group(1))) if match else None


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (at most 500 characters), or its type's name when it has none."""
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:500]
