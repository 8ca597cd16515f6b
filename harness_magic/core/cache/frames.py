"""Frames and series as Arrow tables, exactly: the frame codec of spill files (and the worker transfer).

Contract: ``table_to_frame(frame_to_table(v))`` is identical to ``v`` by
:func:`values_identical` — same type, values, dtypes, index (type, name,
RangeIndex start/step, frequency), columns (names, types, duplicates,
MultiIndex), categorical order, ``attrs`` and ``flags`` — or
:func:`frame_to_table` raises :class:`SpillUnsupported` naming the column (or
the labels, name or attrs) that has no exact code-free encoding.

Columns whose cells are Python objects (``object`` dtype), complex numbers or
sparse data travel as one tagged-JSON string per cell (:mod:`.codec`);
``object`` index levels likewise. Column labels, ``attrs``, ``flags``, the
index frequency and a series' name are stored as JSON in the table's schema
metadata (:data:`META_KEY`), and the data columns under positional names:
that is what makes duplicate, non-string and MultiIndex labels exact.
Decoding builds plain data only (no pickle, nothing imported by name);
metadata that does not fit the data raises ``ValueError``.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from harness_magic.core.cache.codec import Unencodable, decode_tagged, encode_tagged

__all__ = [
    "SpillUnsupported",
    "frame_to_table",
    "table_to_frame",
    "prepare_frame",
    "prepared_to_table",
    "values_identical",
    "register_pandas_arrow_types",
    "META_KEY",
    "SPILL_THREADED_CELLS",
]

SPILL_THREADED_CELLS = 1_000_000
"""Below this many cells, converting on one thread beats starting pyarrow's conversion threads."""
META_KEY = b"harness_magic"
"""Schema metadata key of the JSON that makes :func:`table_to_frame` exact."""
_SERIES_COLUMN = "__series__"
_CELL_DTYPES = ("object", "complex", "Sparse")
"""Column dtypes stored as tagged-JSON cells (Arrow has no exact type for them)."""


class SpillUnsupported(Exception):
    """No format can hold the value exactly (e.g. a lambda, an object column of sockets)."""


def register_pandas_arrow_types() -> None:
    """Register pandas' Arrow extension types (period, interval) before any Arrow read.

    pandas registers them lazily, on first use of those dtypes; a process that
    reads a file before that would get plain ordinals/structs back.
    """
    import pandas.core.arrays.arrow.extension_types  # noqa: F401 - registers on import


# --------------------------------------------------------------------------- encoding


def _cell_kind(dtype: Any) -> bool:
    text = str(dtype)
    return dtype == object or text.startswith(_CELL_DTYPES)


def _encode_cells(values: Any, what: str) -> list[str]:
    out = []
    for cell in values:
        try:
            out.append(json.dumps(encode_tagged(cell), allow_nan=False))
        except Unencodable as exc:
            raise SpillUnsupported(f"{what} holds {exc.kind} values, which have no exact safe encoding "
                                   "(convert them to str, numbers or dates first)") from exc
        except (ValueError, RecursionError) as exc:
            raise SpillUnsupported(f"{what} holds a value that cannot be encoded: {exc}") from exc
    return out


def _decode_cells(values: Any) -> Any:
    import numpy as np

    out = np.empty(len(values), dtype=object)
    for i, text in enumerate(values):
        out[i] = decode_tagged(json.loads(text))
    return out


def _label_text(label: Any) -> str:
    text = repr(label)
    return text if len(text) <= 80 else text[:77] + "..."


def prepare_frame(value: Any) -> tuple[Any, dict[str, Any]]:
    """(frame with positional column names and code-free cells, JSON-ready metadata).

    Raises :class:`SpillUnsupported` naming the column (or labels/attrs) that
    holds values without an exact safe encoding.
    """
    import pandas as pd

    kind = "series" if isinstance(value, pd.Series) else "frame"
    frame = value.to_frame(name=_SERIES_COLUMN) if kind == "series" else value
    cell_columns: dict[str, str] = {}
    replaced: dict[int, Any] = {}
    categorical_columns: dict[str, Any] = {}
    string_columns: dict[str, list[str]] = {}
    for position, dtype in enumerate(frame.dtypes):
        if isinstance(dtype, pd.StringDtype):
            string_columns[str(position)] = [dtype.storage, "NA" if dtype.na_value is pd.NA else "nan"]
        if isinstance(dtype, pd.CategoricalDtype):
            codes = frame.iloc[:, position].array.codes
            replaced[position] = pd.Series(codes, index=frame.index, copy=False)
            categorical_columns[str(position)] = _categorical_to_json(dtype)
        elif _cell_kind(dtype):
            label = "the series" if kind == "series" else f"column {_label_text(frame.columns[position])}"
            replaced[position] = pd.Series(_encode_cells(frame.iloc[:, position].array, label),
                                           index=frame.index, dtype=object)
            cell_columns[str(position)] = str(dtype)
    index, object_levels = _encode_object_index(frame.index)
    try:
        meta: dict[str, Any] = {
            "kind": kind,
            "columns": _index_to_json(frame.columns),
            "attrs": encode_tagged(value.attrs),
            "allows_duplicate_labels": bool(value.flags.allows_duplicate_labels),
            "name": encode_tagged(value.name) if kind == "series" else None,
            "index_freq": _freq_of(frame.index),
            "cell_columns": cell_columns,
            "categorical_columns": categorical_columns,
            "string_columns": string_columns,
            "object_levels": object_levels,
        }
        if frame.shape[1] == 0 and type(frame.index) is pd.RangeIndex and len(frame.index):
            # An Arrow table without columns has no rows either: the index is all there is to keep
            meta["row_index"] = _index_to_json(frame.index)
    except Unencodable as exc:
        raise SpillUnsupported(f"labels, name or attrs hold {exc.kind} values, which have no exact safe encoding") \
            from exc
    flat = frame.set_axis([f"c{i}" for i in range(frame.shape[1])], axis=1)
    if replaced or index is not frame.index:
        flat = flat.copy(deep=False)
        for position, series in replaced.items():
            flat.isetitem(position, series.set_axis(flat.index))
        flat.index = index
    flat.attrs = {}
    return flat, meta


def _freq_of(index: Any) -> str | None:
    import pandas as pd

    if isinstance(index, (pd.DatetimeIndex, pd.TimedeltaIndex)) and index.freq is not None:
        return index.freq.freqstr
    return None


def _categorical_to_json(dtype: Any) -> dict[str, Any]:
    return {"categories": _index_to_json(dtype.categories), "ordered": bool(dtype.ordered)}


def _categorical_from_json(data: Any) -> Any:
    import pandas as pd

    if not isinstance(data, dict) or type(data.get("ordered")) is not bool:
        raise ValueError("malformed categorical metadata")
    return pd.CategoricalDtype(_index_from_json(data["categories"]), ordered=data["ordered"])


def _encode_level(level: Any, what: str) -> tuple[Any, Any]:
    """(a plain level Arrow holds exactly, how to rebuild it) or (the level, None)."""
    import pandas as pd

    if isinstance(level, pd.CategoricalIndex):
        return pd.Index(level.codes, name=level.name), {"kind": "category", **_categorical_to_json(level.dtype)}
    if level.dtype == object:
        return pd.Index(_encode_cells(level, what), dtype=object, name=level.name), {"kind": "object"}
    return level, None


def _decode_level(level: Any, how: Any) -> Any:
    import pandas as pd

    if how["kind"] == "category":
        dtype = _categorical_from_json(how)
        return pd.CategoricalIndex(pd.Categorical.from_codes(level.to_numpy(), dtype=dtype), name=level.name)
    if how["kind"] == "object":
        return pd.Index(_decode_cells(level), dtype=object, name=level.name)
    raise ValueError("malformed index level metadata")


def _encode_object_index(index: Any) -> tuple[Any, dict[str, Any]]:
    """The index with object and categorical levels made Arrow-exact, and how to rebuild those levels."""
    import pandas as pd

    if isinstance(index, pd.MultiIndex):
        levels, hows = [], {}
        for i, level in enumerate(index.levels):
            plain, how = _encode_level(level, f"index level {i}")
            levels.append(plain)
            if how is not None:
                hows[str(i)] = how
        if not hows:
            return index, {}
        return index.set_levels(levels, verify_integrity=False), hows
    plain, how = _encode_level(index, "the index")
    return (plain, {"0": how}) if how is not None else (index, {})


def _decode_object_index(index: Any, hows: dict[str, Any]) -> Any:
    if not hows:
        return index
    import pandas as pd

    if isinstance(index, pd.MultiIndex):
        levels = [_decode_level(level, hows[str(i)]) if str(i) in hows else level
                  for i, level in enumerate(index.levels)]
        return index.set_levels(levels, verify_integrity=False)
    return _decode_level(index, hows["0"])


def _index_to_json(index: Any) -> Any:
    """Exact JSON form of a column index (labels of any Python type, MultiIndex, categorical...)."""
    import numpy as np
    import pandas as pd

    names = [encode_tagged(n) for n in index.names]
    if type(index) is pd.RangeIndex:
        return {"range": [index.start, index.stop, index.step], "names": names}
    if isinstance(index, pd.MultiIndex):
        return {"levels": [_index_to_json(level) for level in index.levels],
                "codes": [level.tolist() for level in index.codes], "names": names}
    if type(index) is pd.Index and isinstance(index.dtype, np.dtype) and index.dtype.kind in "Obiuf":
        return {"dtype": index.dtype.str if index.dtype != object else "object",
                "values": [encode_tagged(v) for v in index.tolist()] if index.dtype == object
                else [encode_tagged(v) for v in index.to_numpy()], "names": names}
    if type(index) is pd.Index and isinstance(index.dtype, pd.StringDtype):
        return {"string": [index.dtype.storage, "NA" if index.dtype.na_value is pd.NA else "nan"],
                "values": [encode_tagged(v) for v in index.tolist()], "names": names}
    # any other index (categorical, datetime, period, interval, strings): through Arrow, as its own frame
    import pyarrow as pa

    holder = pd.DataFrame(index=index.rename(None))
    table = pa.Table.from_pandas(holder, preserve_index=True)
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return {"arrow": base64.b64encode(sink.getvalue()).decode("ascii"), "names": names, "freq": _freq_of(index)}


def _index_from_json(data: Any) -> Any:
    import numpy as np
    import pandas as pd

    if not isinstance(data, dict):
        raise ValueError("malformed label metadata")
    names = [decode_tagged(n) for n in data["names"]]
    if "range" in data:
        start, stop, step = (int(x) for x in data["range"])
        return pd.RangeIndex(start, stop, step, name=names[0])
    if "levels" in data:
        return pd.MultiIndex(levels=[_index_from_json(level) for level in data["levels"]],
                             codes=data["codes"], names=names, verify_integrity=True)
    if "string" in data:
        storage, na = data["string"]
        if storage not in ("python", "pyarrow") or na not in ("NA", "nan"):
            raise ValueError("string label dtype not allowed")
        dtype = pd.StringDtype(storage=storage, na_value=pd.NA if na == "NA" else np.nan)
        return pd.Index([decode_tagged(v) for v in data["values"]], dtype=dtype, name=names[0])
    if "values" in data:
        dtype = np.dtype(data["dtype"]) if data["dtype"] != "object" else np.dtype(object)
        if dtype.kind not in "Obiuf":
            raise ValueError("label dtype not allowed")
        values = np.empty(len(data["values"]), dtype=object)
        for i, v in enumerate(data["values"]):
            values[i] = decode_tagged(v)
        return pd.Index(values, dtype=dtype, name=names[0])
    import pyarrow as pa

    register_pandas_arrow_types()
    table = pa.ipc.open_file(pa.py_buffer(base64.b64decode(data["arrow"], validate=True))).read_all()
    index = table.to_pandas().index.rename(names[0])
    if data.get("freq"):
        from pandas.tseries.frequencies import to_offset

        index = type(index)(index, freq=to_offset(data["freq"]))
    return index


def _float_positions(flat: Any) -> dict[int, Any]:
    """Positions of plain numpy float32/float64 columns -> their dtype (the ones :func:`prepared_to_table` maps as is)."""
    import numpy as np

    found = {}
    for position, dtype in enumerate(flat.dtypes):
        if isinstance(dtype, np.dtype) and dtype.kind == "f" and dtype.itemsize in (4, 8):
            found[position] = dtype
    return found


def prepared_to_table(flat: Any, meta: dict[str, Any]) -> Any:
    """``flat`` (from :func:`prepare_frame`) as an Arrow table carrying ``meta``; float columns without a copy.

    ``pa.Table.from_pandas`` scans every float column for NaN to build a
    validity bitmap (about 0.4 s per GiB, the largest cost of a result's trip
    back). Float columns are therefore handed over as same-width integer
    views (no scan, no copy) and then re-typed in place: the table holds the
    very same bytes as float, NaN stays NaN (payload included) and pandas'
    own metadata is patched to say float, exactly what ``from_pandas`` writes
    for a float column. Reading back is unchanged: ``to_pandas`` gives the
    same float column, zero-copy where the buffer allows.
    """
    import pyarrow as pa

    threads = None if flat.shape[0] * max(flat.shape[1], 1) >= SPILL_THREADED_CELLS else 1
    floats = _float_positions(flat) if len(flat) else {}
    source = flat
    if floats:
        import pandas as pd

        columns = {}  # a new frame over the same buffers: isetitem would copy each array
        for position in range(flat.shape[1]):
            column = flat.iloc[:, position]
            dtype = floats.get(position)
            columns[flat.columns[position]] = column.array if dtype is None else \
                column.to_numpy().view(f"i{dtype.itemsize}")
        source = pd.DataFrame(columns, index=flat.index, copy=False)
        source.columns = flat.columns
    table = pa.Table.from_pandas(source, preserve_index=None, nthreads=threads)
    schema_meta = dict(table.schema.metadata or {})
    if floats:
        pandas_meta = json.loads(schema_meta[b"pandas"])
        entries = {entry.get("field_name"): entry for entry in pandas_meta["columns"]}
        for position, dtype in floats.items():
            column = table.column(position)
            arrow_type = pa.from_numpy_dtype(dtype)
            chunks = [pa.Array.from_buffers(arrow_type, len(chunk), [chunk.buffers()[0], chunk.buffers()[1]],
                                            chunk.null_count, chunk.offset) for chunk in column.chunks]
            table = table.set_column(position, table.field(position).with_type(arrow_type),
                                     pa.chunked_array(chunks, type=arrow_type))
            entry = entries[table.field(position).name]
            entry["pandas_type"] = entry["numpy_type"] = dtype.name
        schema_meta[b"pandas"] = json.dumps(pandas_meta).encode("utf-8")
    schema_meta[META_KEY] = json.dumps(meta, allow_nan=False).encode("utf-8")
    return table.replace_schema_metadata(schema_meta)


def frame_to_table(value: Any) -> Any:
    """A frame or series as an Arrow table whose metadata (JSON) makes :func:`table_to_frame` exact.

    Raises :class:`SpillUnsupported` for object data without a safe encoding.
    """
    return prepared_to_table(*prepare_frame(value))


def table_to_frame(table: Any, **to_pandas: Any) -> Any:
    """The frame or series :func:`frame_to_table` encoded (raises ``ValueError`` on foreign metadata)."""
    import numpy as np
    import pandas as pd

    register_pandas_arrow_types()
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise ValueError("the file carries no harness_magic metadata")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"harness_magic metadata is not JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("kind") not in ("frame", "series"):
        raise ValueError("harness_magic metadata is malformed")
    frame = table.to_pandas(**to_pandas)  # split_blocks/self_destruct halve the peak but read ~40% slower
    del table
    if meta.get("row_index") is not None:
        frame = _rows_without_columns(frame, meta["row_index"])
    if not all(0 <= int(k) < frame.shape[1] for k in meta["cell_columns"]):
        raise ValueError("cell column positions do not match the data")
    for key, dtype_text in meta["cell_columns"].items():
        position = int(key)
        cells = _decode_cells(frame.iloc[:, position].array)
        frame.isetitem(position, pd.Series(_cells_array(cells, dtype_text), index=frame.index,
                                           dtype=object if dtype_text == "object" else None))
    for key, how in meta.get("categorical_columns", {}).items():
        position = int(key)
        codes = frame.iloc[:, position].to_numpy()
        frame.isetitem(position, pd.Series(pd.Categorical.from_codes(codes, dtype=_categorical_from_json(how)),
                                           index=frame.index))
    for key, (storage, na) in meta.get("string_columns", {}).items():
        position = int(key)
        if storage not in ("python", "pyarrow") or na not in ("NA", "nan"):
            raise ValueError("malformed string column metadata")
        dtype = pd.StringDtype(storage=storage, na_value=pd.NA if na == "NA" else np.nan)
        if frame.dtypes.iloc[position] != dtype or str(frame.dtypes.iloc[position]) != str(dtype):
            frame.isetitem(position, frame.iloc[:, position].astype(dtype))
    frame.index = _decode_object_index(frame.index, meta.get("object_levels") or {})
    frame.columns = _index_from_json(meta["columns"])
    if meta["index_freq"] is not None:
        from pandas.tseries.frequencies import to_offset

        cls = pd.DatetimeIndex if isinstance(frame.index, pd.DatetimeIndex) else pd.TimedeltaIndex
        frame.index = cls(frame.index, freq=to_offset(meta["index_freq"]))
    result = frame.iloc[:, 0].rename(decode_tagged(meta["name"])) if meta["kind"] == "series" else frame
    result.attrs = decode_tagged(meta["attrs"])
    result.flags.allows_duplicate_labels = bool(meta["allows_duplicate_labels"])
    return result


def _rows_without_columns(frame: Any, row_index: Any) -> Any:
    """A column-less frame given back its rows: ``row_index`` is its RangeIndex (as :func:`_index_to_json`)."""
    import pandas as pd

    index = _index_from_json(row_index)
    if frame.shape != (0, 0) or type(index) is not pd.RangeIndex:
        raise ValueError("row index metadata does not fit the data (it is for a range of rows without columns)")
    return frame.reindex(index)


def _cells_array(cells: Any, dtype_text: str) -> Any:
    import pandas as pd

    if dtype_text == "object":
        return cells
    if not str(dtype_text).startswith(_CELL_DTYPES[1:]):
        raise ValueError(f"cell dtype {dtype_text!r} is not allowed")
    return pd.array(list(cells), dtype=pd.api.types.pandas_dtype(dtype_text))


# --------------------------------------------------------------------------- exact comparison


def values_identical(a: Any, b: Any) -> bool:
    """Exact equality for frames/series (dtypes, categories, index, labels, attrs, flags).

    Fast on wide frames: block-wise ``equals`` plus per-column dtype checks,
    instead of ``pandas.testing`` (which the tests use).
    """
    import pandas as pd

    if type(a) is not type(b) or a.shape != b.shape or a.attrs != b.attrs or a.flags != b.flags:
        return False
    if isinstance(a, pd.Series):
        if not _labels_identical([a.name], [b.name]):
            return False
        a, b = a.to_frame(name=_SERIES_COLUMN), b.to_frame(name=_SERIES_COLUMN)
    if not (_index_identical(a.index, b.index) and _index_identical(a.columns, b.columns)):
        return False
    if not all(_dtype_identical(x, y) for x, y in zip(a.dtypes, b.dtypes)):
        return False
    flat_a = a.set_axis(range(a.shape[1]), axis=1)
    flat_b = b.set_axis(range(b.shape[1]), axis=1)
    if not flat_a.equals(flat_b):
        return False
    for position, dtype in enumerate(a.dtypes):  # object cells: same Python types, not just equal
        if dtype == object and not _cells_identical(flat_a.iloc[:, position], flat_b.iloc[:, position]):
            return False
    return True


def _cells_identical(a: Any, b: Any) -> bool:
    return all(type(x) is type(y) for x, y in zip(a.array, b.array))


def _dtype_identical(x: Any, y: Any) -> bool:
    import pandas as pd

    if x != y or str(x) != str(y):
        return False
    if isinstance(x, pd.CategoricalDtype):
        return (x.ordered == y.ordered and x.categories.dtype == y.categories.dtype
                and x.categories.equals(y.categories))
    return True


def _labels_identical(a: Any, b: Any) -> bool:
    """Same labels of the same Python types (``1`` is not ``1.0`` is not ``"1"``)."""
    return list(a) == list(b) and [type(v) for v in a] == [type(v) for v in b]


def _index_identical(a: Any, b: Any) -> bool:
    import pandas as pd

    if type(a) is not type(b) or list(a.names) != list(b.names) or a.nlevels != b.nlevels:
        return False
    if isinstance(a, pd.RangeIndex):
        return (a.start, a.stop, a.step) == (b.start, b.stop, b.step)
    if isinstance(a, pd.MultiIndex):  # same levels + equal tuples means same codes
        return len(a) == len(b) and all(_index_identical(la, lb) for la, lb in zip(a.levels, b.levels)) \
            and bool(a.equals(b))
    if not _dtype_identical(a.dtype, b.dtype) or getattr(a, "freq", None) != getattr(b, "freq", None):
        return False
    return bool(a.equals(b))