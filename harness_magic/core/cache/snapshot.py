"""Snapshots: ``ls`` + ``head`` for one cached value.

Contract of :func:`make_snapshot`:

* **Structured.** A dict with at least ``type``; frames add ``shape``,
  ``columns``, ``dtypes``, ``index`` and ``sample`` rows; series add ``name``,
  ``dtype``, ``index``; arrays add ``dtype``, ``ndim`` and the first values;
  dicts add the key count and first keys; strings their length, head and tail.
* **Valid JSON.** ``json.dumps(snapshot, allow_nan=False)`` always succeeds:
  NaN, NA and NaT become ``null``, infinities the strings ``"inf"``/``"-inf"``,
  timestamps ISO strings, anything else a truncated ``str()``.
* **Dates read as dates.** The timestamps shown together (one column's sample,
  one index level's head) are written as ``2023-01-01`` when every one is a
  naive midnight, else as ``2023-01-01 09:30`` with only as much of the seconds
  and fraction as any of them needs (and the UTC offset when aware). Only the
  text changes: the cached value keeps its exact timestamps.
* **Bounded.** ``len(json.dumps(snapshot))`` (ASCII-escaped, so an upper bound
  on the UTF-8 size too) never exceeds :data:`SNAPSHOT_MAX_BYTES`, however many
  columns the frame has or however long its cells are: when a snapshot is too
  big it is rebuilt with tighter limits, and as a last resort reduced to type
  and shape with ``"truncated": true``.
* **Size independent.** Only ``head``/``iloc`` slices, ``shape`` and dtype
  metadata are read, never every row, so a 10-million-row frame costs what a
  100-row frame costs. (Unknown objects are summarised by ``repr``, whose cost
  is the object's own business.)
"""

from __future__ import annotations

import datetime as _dt
import decimal
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

from harness_magic.core.cache.engine_value import engine_of

__all__ = [
    "make_snapshot",
    "snapshot_json",
    "SNAPSHOT_MAX_BYTES",
    "SNAPSHOT_SAMPLE_ROWS",
    "SNAPSHOT_MAX_COLUMNS",
    "SNAPSHOT_SAMPLE_COLUMNS",
    "SNAPSHOT_CELL_CHARS",
    "SNAPSHOT_STR_HEAD_CHARS",
    "SNAPSHOT_STR_TAIL_CHARS",
    "SNAPSHOT_ARRAY_VALUES",
    "SNAPSHOT_DICT_KEYS",
]

SNAPSHOT_MAX_BYTES = 8_192
"""Hard ceiling on a snapshot's JSON: about 2k tokens, cheap to repeat in context."""
SNAPSHOT_SAMPLE_ROWS = 5
"""Enough rows to see what the data looks like, few enough to stay cheap."""
SNAPSHOT_MAX_COLUMNS = 40
"""Column names and dtypes listed; wider frames report how many were omitted."""
SNAPSHOT_SAMPLE_COLUMNS = 12
"""Columns shown in sample rows: rows stay readable on wide frames."""
SNAPSHOT_CELL_CHARS = 60
"""A cell, label or key longer than this is cut: one long text must not crowd out the rest."""
SNAPSHOT_STR_HEAD_CHARS = 600
"""Start of a cached string shown to the model (where headers and structure usually are)."""
SNAPSHOT_STR_TAIL_CHARS = 200
"""End of a cached string shown (totals, last lines, trailing errors)."""
SNAPSHOT_ARRAY_VALUES = 10
"""First values (C order) of an array shown."""
SNAPSHOT_DICT_KEYS = 20
"""Keys of a mapping listed; the count is always given."""


@dataclass(frozen=True)
class _Limits:
    rows: int = SNAPSHOT_SAMPLE_ROWS
    columns: int = SNAPSHOT_MAX_COLUMNS
    sample_columns: int = SNAPSHOT_SAMPLE_COLUMNS
    cell_chars: int = SNAPSHOT_CELL_CHARS
    str_head: int = SNAPSHOT_STR_HEAD_CHARS
    str_tail: int = SNAPSHOT_STR_TAIL_CHARS
    array_values: int = SNAPSHOT_ARRAY_VALUES
    dict_keys: int = SNAPSHOT_DICT_KEYS


_DEFAULT = _Limits()
_TIGHTER = (
    _Limits(rows=3, columns=20, sample_columns=6, cell_chars=30, str_head=300, str_tail=100,
            array_values=5, dict_keys=10),
    _Limits(rows=1, columns=8, sample_columns=3, cell_chars=16, str_head=100, str_tail=40,
            array_values=3, dict_keys=4),
)
"""Progressively tighter limits tried when a snapshot exceeds the byte bound."""


def snapshot_json(snapshot: dict[str, Any]) -> str:
    """The canonical JSON text of a snapshot (what the byte bound applies to)."""
    return json.dumps(snapshot, allow_nan=False)


def make_snapshot(value: Any, head_filter: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Structured, JSON-serialisable, size-bounded summary of ``value`` (see module doc).

    ``head_filter`` is applied to the head rows an engine value produces for its snapshot (the cache's
    :class:`~.guard.EntryGuard` puts them in their agent-side form).
    """
    for limits in (_DEFAULT, *_TIGHTER):
        try:
            snapshot = _describe(value, limits, head_filter)
            if len(snapshot_json(snapshot)) <= SNAPSHOT_MAX_BYTES:
                return snapshot
        except Exception as exc:  # a summary must never take the caller down
            snapshot = {"type": _type_name(value), "error": _short(f"{type(exc).__name__}: {exc}", 200)}
            return snapshot
    minimal = {"type": snapshot.get("type"), "truncated": True}
    if "shape" in snapshot:
        minimal["shape"] = snapshot["shape"]
    if "length" in snapshot:
        minimal["length"] = snapshot["length"]
    return minimal


# --------------------------------------------------------------------------- dispatch


def _describe(value: Any, lim: _Limits, head_filter: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    import numpy as np
    import pandas as pd

    if engine_of(value) is not None:  # computed by the engine (pushdown), see .engine_value
        return value.__harness_snapshot__(lambda head: _frame(head_filter(head) if head_filter else head, lim))
    if isinstance(value, pd.DataFrame):
        return _frame(value, lim)
    if isinstance(value, pd.Series):
        return _series(value, lim)
    if isinstance(value, pd.Index):
        return {"type": "index", **_index(value, lim), "shape": [len(value)]}
    if isinstance(value, np.ndarray):
        return _ndarray(value, lim)
    if isinstance(value, pd.api.extensions.ExtensionArray):
        return {"type": "extension_array", "array_type": type(value).__name__, "dtype": str(value.dtype),
                "shape": [len(value)], "sample": _cells(list(value[: lim.array_values]), lim.cell_chars)}
    if isinstance(value, str):
        return _string(value, lim)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value[: lim.str_head])
        return {"type": type(value).__name__, "length": len(value), "head": repr(data)[: lim.str_head]}
    if isinstance(value, dict):
        return _mapping(value, lim)
    if isinstance(value, (list, tuple, set, frozenset)):
        head = list(itertools.islice(iter(value), lim.rows))
        return {"type": type(value).__name__, "length": len(value), "head": _cells(head, lim.cell_chars)}
    if value is None or isinstance(value, (bool, int, float, complex, decimal.Decimal, np.generic,
                                           _dt.date, _dt.time, _dt.timedelta)):
        return {"type": _type_name(value), "value": _cells([value], lim.cell_chars)[0]}
    return {"type": _type_name(value), "repr": _short(_safe_repr(value, lim.str_head), lim.str_head)}


def _type_name(value: Any) -> str:
    cls = type(value)
    if cls.__module__ in ("builtins", "numpy"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


# --------------------------------------------------------------------------- pandas


def _frame(df: Any, lim: _Limits) -> dict[str, Any]:
    import pandas as pd

    n_rows, n_cols = df.shape
    listed = df.columns[: lim.columns].tolist()  # plain labels: iterating an Index costs per element
    keys = [_label_key(c, lim.cell_chars) for c in listed]
    dtypes = df.dtypes.tolist()[: lim.columns]  # metadata only: O(columns), no row slice built
    snap: dict[str, Any] = {
        "type": "dataframe",
        "shape": [n_rows, n_cols],
        "columns": [_label(c, lim.cell_chars) for c in listed],
    }
    if n_cols > len(listed):
        snap["columns_omitted"] = n_cols - len(listed)
    names: dict[Any, str] = {}  # str(dtype) once per distinct dtype
    snap["dtypes"] = {k: names[t] if t in names else names.setdefault(t, str(t)) for k, t in zip(keys, dtypes)}
    if not _is_plain_columns(df.columns, listed if lim.columns >= SNAPSHOT_MAX_COLUMNS else None):
        snap["column_index"] = {k: v for k, v in _index(df.columns[:0], lim).items() if k != "head"}
        snap["column_index"]["nlevels"] = df.columns.nlevels
    categories = {k: _categories(t, lim) for k, t in zip(keys, dtypes) if isinstance(t, pd.CategoricalDtype)}
    if categories:
        snap["categories"] = categories
    snap["index"] = _index(df.index, lim)
    sub = df.iloc[: lim.rows]  # a row slice is a view: cheap whatever the width
    if n_cols > lim.sample_columns:
        sub = sub.iloc[:, : lim.sample_columns]
    columns = [_cells(_column_head(sub, j), lim.cell_chars) for j in range(sub.shape[1])]
    rows = [list(r) for r in zip(*columns)] if columns else [[] for _ in range(len(sub))]
    sample_keys = keys[: sub.shape[1]]
    if len(set(sample_keys)) == len(sample_keys):
        snap["sample"] = [dict(zip(sample_keys, r)) for r in rows]
    else:  # duplicate labels cannot be dict keys: rows as lists plus a header
        snap["sample_columns"] = sample_keys
        snap["sample"] = rows
    if n_cols > sub.shape[1]:
        snap["sample_columns_omitted"] = n_cols - sub.shape[1]
    return snap


def _column_head(sub: Any, position: int) -> list[Any]:
    """Values of column ``position`` of the (already row-sliced) frame ``sub``, as ``Series.tolist()`` gives them.

    Reads the column's array straight from the block manager (what
    ``Series._values`` is) instead of building a Series per column, which is
    most of a snapshot's cost on a narrow frame; falls back to the public
    ``iloc`` path when that internal is missing or changes shape.
    """
    try:
        values = sub._mgr.iget_values(position)
        if len(values) == len(sub) and getattr(values, "ndim", 1) == 1:
            return values.tolist()
    except Exception:  # pandas internals moved: the public path is always right
        pass
    return sub.iloc[:, position].tolist()


def _series(s: Any, lim: _Limits) -> dict[str, Any]:
    import pandas as pd

    snap: dict[str, Any] = {
        "type": "series",
        "name": _label(s.name, lim.cell_chars),
        "shape": [len(s)],
        "dtype": str(s.dtype),
    }
    if isinstance(s.dtype, pd.CategoricalDtype):
        snap["categories"] = _categories(s.dtype, lim)
    snap["index"] = _index(s.index, lim)
    snap["sample"] = _cells(s.iloc[: lim.rows].tolist(), lim.cell_chars)
    return snap


def _index(idx: Any, lim: _Limits) -> dict[str, Any]:
    import pandas as pd

    info: dict[str, Any] = {"type": type(idx).__name__}
    if isinstance(idx, pd.MultiIndex):
        info["names"] = [_label(n, lim.cell_chars) for n in idx.names]
        info["nlevels"] = idx.nlevels
        info["dtypes"] = [str(level.dtype) for level in idx.levels]
    else:
        info["name"] = _label(idx.name, lim.cell_chars)
        info["dtype"] = str(idx.dtype)
    if isinstance(idx, pd.RangeIndex):
        info["start"], info["step"] = idx.start, idx.step  # stop follows from the shape
        return info
    freq = getattr(idx, "freq", None)  # stored attribute: O(1), never inferred
    if freq is not None and not isinstance(idx, pd.PeriodIndex):
        info["freq"] = freq.freqstr
    head = idx[: lim.rows].tolist()
    if isinstance(idx, pd.MultiIndex):  # formatted level by level, so each level's dates read alike
        levels = [_cells(list(level), lim.cell_chars) for level in zip(*head)] if head else []
        info["head"] = [list(row) for row in zip(*levels)] if levels else [[] for _ in head]
    else:
        info["head"] = _cells(head, lim.cell_chars)
    return info


def _categories(dtype: Any, lim: _Limits) -> dict[str, Any]:
    cats = dtype.categories
    return {"count": len(cats), "ordered": bool(dtype.ordered),
            "head": _cells(cats[: lim.rows].tolist(), lim.cell_chars)}


def _is_plain_columns(columns: Any, listed: list[Any] | None = None) -> bool:
    """A flat, unnamed column index of strings (``listed``: its first labels, already as a list)."""
    import pandas as pd

    if listed is None:
        listed = columns[:SNAPSHOT_MAX_COLUMNS].tolist()
    return type(columns) is pd.Index and columns.name is None and all(
        isinstance(c, str) for c in listed[:SNAPSHOT_MAX_COLUMNS]
    )


# --------------------------------------------------------------------------- numpy and builtins


def _ndarray(arr: Any, lim: _Limits) -> dict[str, Any]:
    snap: dict[str, Any] = {"type": "ndarray", "shape": list(arr.shape), "ndim": arr.ndim, "dtype": str(arr.dtype)}
    if arr.dtype.names:
        snap["fields"] = {_short(n, lim.cell_chars): str(arr.dtype.fields[n][0]) for n in arr.dtype.names[: lim.columns]}
    if arr.ndim == 0:
        snap["value"] = _cell(arr[()], lim.cell_chars)
    else:
        first = arr.flat[: lim.array_values]  # copies only these elements
        snap["first_values"] = _cells(first.tolist(), lim.cell_chars)
    return snap


def _string(text: str, lim: _Limits) -> dict[str, Any]:
    if len(text) <= lim.str_head + lim.str_tail:
        return {"type": "str", "length": len(text), "head": text, "tail": ""}
    return {"type": "str", "length": len(text), "head": text[: lim.str_head], "tail": text[-lim.str_tail :]}


def _mapping(mapping: dict[Any, Any], lim: _Limits) -> dict[str, Any]:
    keys = list(itertools.islice(iter(mapping), lim.dict_keys))
    snap: dict[str, Any] = {"type": _type_name(mapping), "length": len(mapping),
                            "keys": [_label_key(k, lim.cell_chars) for k in keys]}
    if len(mapping) > len(keys):
        snap["keys_omitted"] = len(mapping) - len(keys)
    snap["sample"] = {_label_key(k, lim.cell_chars): _cell(mapping[k], lim.cell_chars) for k in keys[: lim.rows]}
    return snap


# --------------------------------------------------------------------------- cells


def _short(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit} chars)"


def _safe_repr(value: Any, limit: int) -> str:
    """``repr`` bounded for builtin containers (reprlib) and guarded against failure."""
    import reprlib

    bounded = reprlib.Repr()  # keyword arguments need Python 3.12
    bounded.maxlevel, bounded.maxdict, bounded.maxlist, bounded.maxtuple, bounded.maxset = 2, 4, 4, 4, 4
    bounded.maxstring = bounded.maxother = bounded.maxlong = limit
    try:
        return bounded.repr(value)
    except Exception as exc:  # a broken __repr__ still gets a summary
        return f"<{_type_name(value)}: repr failed: {type(exc).__name__}>"


def _label(label: Any, chars: int) -> Any:
    """A label as JSON: strings and numbers as is, tuples as lists, others as text."""
    if isinstance(label, tuple):
        return [_label(part, chars) for part in label[:8]]
    return _cell(label, chars)


def _label_key(label: Any, chars: int) -> str:
    """A label as a dict key: strings as is, anything else as its Python repr."""
    return _short(label if isinstance(label, str) else _safe_repr(label, chars), chars)


def _cells(values: list[Any], chars: int) -> list[Any]:
    """Values shown together (a column's sample, an index level's head) as bounded JSON; timestamps compact."""
    stamps = _timestamps(values)
    if stamps is None:
        return [_cell(v, chars) for v in values]
    return _stamp_texts(stamps)


def _timestamps(values: list[Any]) -> list[Any] | None:
    """``values`` as datetimes (None for missing), or None unless every present value is a timestamp."""
    import numpy as np
    import pandas as pd

    out: list[Any] = []
    for value in values:
        if value is None or value is pd.NaT:
            out.append(None)
            continue
        if isinstance(value, np.datetime64):
            if np.isnat(value):
                out.append(None)
                continue
            try:
                value = pd.Timestamp(value)
            except (ValueError, OverflowError):  # outside pandas' range: the generic text says it exactly
                return None
        if not isinstance(value, _dt.datetime) or not _dt.MINYEAR <= value.year <= _dt.MAXYEAR:
            return None  # (a non-nanosecond pandas Timestamp can lie past year 9999: its str() says it)
        out.append(value)
    return out if any(v is not None for v in out) else None


def _stamp_texts(stamps: list[Any]) -> list[str | None]:
    """Dates for naive midnights, else ``date time`` to the finest unit any of them needs (offset when aware)."""
    present = [s for s in stamps if s is not None]
    nanos = [int(getattr(s, "nanosecond", 0)) for s in present]
    if all(s.tzinfo is None and s.time() == _dt.time() for s in present) and not any(nanos):
        return [None if s is None else s.date().isoformat() for s in stamps]
    if any(nanos):
        spec = "nanoseconds"
    elif any(s.microsecond % 1000 for s in present):
        spec = "microseconds"
    elif any(s.microsecond for s in present):
        spec = "milliseconds"
    elif any(s.second for s in present):
        spec = "seconds"
    else:
        spec = "minutes"
    return [None if s is None else s.isoformat(sep=" ", timespec=spec) for s in stamps]


def _cell(value: Any, chars: int) -> Any:
    """One value as bounded, strictly valid JSON."""
    import numpy as np
    import pandas as pd

    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _short(value, chars)
    if isinstance(value, (int, np.integer)):
        text = str(int(value))
        return int(value) if len(text) <= chars else _short(text, chars)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(value, np.bool_):
        return bool(value)
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (np.datetime64, _dt.datetime)):
        stamps = _timestamps([value])  # None: NaT, or outside pandas' range
        if stamps is not None:
            return _stamp_texts(stamps)[0]
        return None if isinstance(value, np.datetime64) and np.isnat(value) else _short(str(value), chars)
    if isinstance(value, np.timedelta64):
        return None if np.isnat(value) else str(value)
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_cell(v, chars) for v in value[:8]]
    if isinstance(value, (bytes, bytearray)):
        return _short(repr(bytes(value[: chars + 1])), chars)
    if isinstance(value, (pd.Interval, pd.Period, pd.Timedelta, decimal.Decimal, complex, _dt.timedelta)):
        return _short(str(value), chars)
    return _short(_safe_repr(value, chars), chars)
