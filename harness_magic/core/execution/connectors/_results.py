"""Shared limits and the batch collector that turns streamed rows into a frame."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

__all__ = ["DEFAULT_MAX_ROWS", "DEFAULT_BATCH_ROWS", "DEFAULT_TIMEOUT_S", "rows_to_frame", "cap_rows",
           "truncation_note", "arrow_to_frame"]

DEFAULT_MAX_ROWS = 1_000_000
"""Row cap per result: enough for real work in a notebook, bounded memory; the model sees when it bites."""
DEFAULT_BATCH_ROWS = 50_000
"""Rows fetched per round trip when streaming a result (bounded driver buffers)."""
DEFAULT_TIMEOUT_S = 60.0
"""Statement timeout: a runaway query must not hang the notebook cell."""


def cap_rows(requested: int | None, default: int) -> int:
    """The row cap for one call: the model may lower it, never raise it above ``default``."""
    if requested is None:
        return default
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        from harness_magic.core.execution.tools import ToolError

        raise ToolError(f"max_rows must be a positive integer, got {requested!r}")
    return min(requested, default)


def rows_to_frame(columns: Sequence[str], batches: Iterable[Sequence[Sequence[Any]]]) -> Any:
    """A DataFrame from row batches, built column-wise through Arrow (fast, typed).

    Decimal columns become numbers (see :func:`arrow_to_frame`); columns Arrow
    cannot type fall back to objects.
    """
    import pandas as pd
    import pyarrow as pa

    names = [str(c) for c in columns]
    chunks: list[list[Any]] = [[] for _ in names]
    for batch in batches:
        if not batch:
            continue
        for i, column in enumerate(zip(*batch)):
            chunks[i].extend(column)
    data: dict[str, Any] = {}
    for name, values in zip(_unique(names), chunks):
        try:
            data[name] = _decimal_to_number(pa.array(values)).to_pandas()
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            data[name] = pd.Series(values, dtype=object)
    return pd.DataFrame(data, columns=list(data))


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            seen[name] += 1
            out.append(f"{name}_{seen[name]}")
        else:
            seen[name] = 1
            out.append(name)
    return out


def truncation_note(rows: int, cap: int, truncated: bool) -> str:
    if truncated:
        return (f"Result truncated at {cap:,} rows (the query returned more). Aggregate or filter in SQL "
                "to see everything.")
    return f"Query returned {rows:,} rows."



def _decimal_to_number(array: Any) -> Any:
    """Decimals (PostgreSQL numeric, DuckDB HUGEINT sums) as int64 when whole and in range, else float64.

    Analysts and models work with numbers; an object column of ``Decimal`` is
    slow and surprising. Whole values that overflow int64 also become float64.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_decimal(array.type):
        return array
    if array.type.scale == 0:
        try:
            return pc.cast(array, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return pc.cast(array, pa.float64(), safe=False)


def arrow_to_frame(table: Any) -> Any:
    """A DataFrame from an Arrow table, decimals converted as in :func:`_decimal_to_number`."""
    import pyarrow as pa

    columns = [_decimal_to_number(c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)) if pa.types.is_decimal(c.type)
               else c for c in table.columns]
    return pa.Table.from_arrays(columns, names=table.column_names).to_pandas()


def lazy_handle_note(relation: Any, engine: str, connector: str, unknown_rows: str) -> str:
    """What the model is told about a new lazy handle: where it stays, its row count (or ``unknown_rows``)."""
    if relation.rows is None:
        rows = f"an unknown number of rows: {unknown_rows}"
    else:
        rows = f"{'about ' if relation.rows_estimated else ''}{relation.rows:,} rows"
    return (f"Lazy handle: the result stays in {engine} ({rows}); name it in later {connector} queries, or in "
            "python code to bring its rows in.")
