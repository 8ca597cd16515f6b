"""How an engine that keeps files serves their columns to the agent's side: the guard's treatment of each column.

Shared by the engines whose file views serve pseudonyms (DuckDB's views,
Spark's pseudonymised copies): :func:`served_plan` asks the cache's
:class:`~harness_magic.core.cache.EntryGuard` about every column of an Arrow
schema, with the column's first values for kind detection, exactly as a frame
entering the cache is classified. Columns served real are left out.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness_magic.core.cache.guard import EntryGuard, ServedColumn

__all__ = ["ServedPlan", "served_plan"]

ServedPlan = tuple[tuple[str, ServedColumn], ...]
"""(column, treatment) for each column a view serves concealed, in the schema's order."""


def served_plan(view: str, schema: Any, samples: Mapping[str, list[Any]], guard: EntryGuard) -> ServedPlan:
    """The treatment of each column of ``schema`` (an Arrow schema) of ``view`` that is not served real."""
    import pyarrow as pa

    plan = []
    for field in schema:
        numeric = pa.types.is_integer(field.type) or pa.types.is_floating(field.type) \
            or pa.types.is_decimal(field.type)
        column = guard.served_column(view, field.name, numeric, samples.get(field.name, []))
        if column is not None:
            plan.append((field.name, column))
    return tuple(plan)
