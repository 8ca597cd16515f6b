"""Writing cached values to disk and reading them back, exactly.

Contract: ``read_value(write_value(v, stem))`` is identical to ``v`` — same
type, values, dtypes, index (type, name, RangeIndex start/step, frequency),
columns (names, types, duplicates, MultiIndex), categorical order, ``attrs``
and ``flags``. Nothing is ever dropped silently: each value goes to the first
format that holds it exactly.

Formats, in order of preference:

* ``parquet`` — frames and series (pyarrow, :data:`SPILL_PARQUET_COMPRESSION`).
* ``arrow`` — Arrow IPC file, for frames Parquet cannot hold exactly (seconds
  resolution datetimes, non-string categories, ...). Same conversion, no
  Parquet type mapping.
* ``npy`` — numpy arrays without Python objects (any rank, structured too).
* ``pickle`` — everything else, and frames with ``object`` columns or index
  levels (Arrow would coerce their Python objects). Pickle is acceptable here
  because the cache reads only files it wrote itself, in the same trusted
  kernel process.

How exactness is decided for frames: rules first (``object`` data goes to
pickle), then a *probe* — the first :data:`SPILL_PROBE_ROWS` rows go through
the candidate format in memory and must come back identical (dtypes,
categories, index, attrs, flags). The probe costs the same for 10 rows or 10
million, and catches anything dtype-level a format changes. Verdicts are
remembered per dtype signature (kind, index type and dtypes, column dtypes
including categories), since without object data that is all they depend
on; a frame small enough to be its own probe is written from the probe's
bytes. Should an Arrow write still fail on the full data, pickle takes over.

Column labels are not trusted to Arrow: they are stored (pickled) in the file's
schema metadata along with ``attrs``, ``flags``, the index frequency and a
series' name, and the data columns are written under positional names. That
is what makes duplicate, non-string and MultiIndex column labels exact.

Writes are atomic (temporary file, then ``os.replace``): a failed write never
leaves a half-written file that looks valid. Disk failures raise ``OSError``;
values no format can hold raise :class:`SpillUnsupported`.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = [
    "SpillRecord",
    "SpillUnsupported",
    "write_value",
    "read_value",
    "choose_format",
    "values_identical",
    "SPILL_FORMATS",
    "SPILL_PROBE_ROWS",
    "SPILL_PARQUET_COMPRESSION",
]

SPILL_FORMATS = ("parquet", "arrow", "npy", "pickle")
"""Every on-disk format, in order of preference."""
SPILL_PROBE_ROWS = 64
"""Rows round-tripped in memory to prove a format exact: covers dtype-level losses, costs O(columns)."""
SPILL_PARQUET_COMPRESSION = None
"""Spill files are local and short-lived: uncompressed writes and reads fastest (bench_cache: ~1.5x snappy)."""
SPILL_THREADED_CELLS = 1_000_000
"""Below this many cells, converting on one thread beats starting pyarrow's conversion threads."""
SPILL_VERDICT_MEMO = 512
"""Probe verdicts remembered per dtype signature: repeated spills of similar frames skip the probe."""
PICKLE_PROTOCOL = 5
"""Protocol 5 writes numpy/pandas buffers without extra copies."""

_SUFFIX = {"parquet": ".parquet", "arrow": ".arrow", "npy": ".npy", "pickle": ".pkl"}
_META_KEY = b"harness_magic"
_SERIES_COLUMN = "__series__"
_VERDICTS: dict[tuple[Any, ...], str] = {}
"""Dtype signature -> format a probe proved exact (see :func:`_signature`)."""


class SpillUnsupported(Exception):
    """No format can hold the value (e.g. a lambda, an open socket)."""


@dataclass(frozen=True)
class SpillRecord:
    """Where one value lives on disk and in which format."""

    path: Path
    """The file (its suffix names the format)."""
    format: str
    """One of :data:`SPILL_FORMATS`."""


def format_for_path(path: Path) -> str:
    """The format a spill file's suffix stands for."""
    for name, suffix in _SUFFIX.items():
        if path.name.endswith(suffix):
            return name
    raise ValueError(f"{path} is not a spill file (suffix not one of {sorted(_SUFFIX.values())})")


# --------------------------------------------------------------------------- public


def choose_format(value: Any) -> str:
    """The first format of :data:`SPILL_FORMATS` that holds ``value`` exactly."""
    return _plan(value)[0]


def write_value(value: Any, stem: Path, fmt: str | None = None) -> SpillRecord:
    """Write ``value`` to ``stem`` + the format's suffix, atomically.

    Raises ``OSError`` when the disk refuses, :class:`SpillUnsupported` when
    the value cannot be serialised at all. If an Arrow format chosen by the
    probe still fails on the full data, the value goes to pickle instead.
    """
    ready: bytes | None = None
    if fmt is None:
        fmt, ready = _plan(value)
    try:
        return _write_file(value, stem, fmt, ready)
    except (OSError, SpillUnsupported):
        raise
    except Exception:
        if fmt not in ("parquet", "arrow"):
            raise
        return _write_file(value, stem, "pickle", None)


def _write_file(value: Any, stem: Path, fmt: str, ready: bytes | None) -> SpillRecord:
    path = Path(f"{stem}{_SUFFIX[fmt]}")
    tmp = Path(f"{path}.tmp")
    try:
        if ready is not None:  # the probe already serialised the whole value
            with open(tmp, "wb") as sink:
                sink.write(ready)
        else:
            _WRITERS[fmt](value, str(tmp))  # a path: pyarrow writes natively, without Python file calls
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return SpillRecord(path, fmt)


def _plan(value: Any) -> tuple[str, bytes | None]:
    """(format, the file's bytes when the probe already produced them)."""
    import numpy as np
    import pandas as pd

    if isinstance(value, (pd.DataFrame, pd.Series)) and type(value) in (pd.DataFrame, pd.Series):
        prepared = _prepare_frame(value)
        if prepared is None:
            return "pickle", None
        flat, meta = prepared
        key = _signature(value, flat)
        known = _VERDICTS.get(key)
        whole = len(flat) <= SPILL_PROBE_ROWS
        if known is not None and not whole:
            return known, None
        probe = flat if whole else flat.iloc[:SPILL_PROBE_ROWS]
        expected = value if whole else value.iloc[:SPILL_PROBE_ROWS]
        for fmt in ("parquet", "arrow"):
            data = _probe(fmt, probe, meta, expected)
            if data is not None:
                _remember(key, fmt)
                return fmt, (data if whole else None)
        _remember(key, "pickle")
        return "pickle", None
    if type(value) is np.ndarray and not value.dtype.hasobject:
        return "npy", None
    return "pickle", None


def _signature(value: Any, flat: Any) -> tuple[Any, ...]:
    """What a probe's verdict depends on: the kind, index and column dtypes (object data never gets here)."""
    import pandas as pd

    index = flat.index
    levels = index.levels if isinstance(index, pd.MultiIndex) else [index]
    return (
        type(value).__name__,
        type(index).__name__,
        tuple(repr(level.dtype) for level in levels),
        tuple((type(n).__name__, repr(n)[:100]) for n in index.names),
        tuple(repr(t) for t in flat.dtypes),
    )


def _remember(key: tuple[Any, ...], fmt: str) -> None:
    if len(_VERDICTS) >= SPILL_VERDICT_MEMO:
        _VERDICTS.clear()
    _VERDICTS[key] = fmt


def read_value(record: SpillRecord) -> Any:
    """The value stored in ``record``; raises whatever the format raises on a bad file."""
    return _READERS[record.format](str(record.path))


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
    return bool(flat_a.equals(flat_b))


# --------------------------------------------------------------------------- frames


def _prepare_frame(value: Any) -> tuple[Any, dict[str, Any]] | None:
    """(frame with positional column names, metadata) or None when Arrow cannot be trusted."""
    import pandas as pd

    kind = "series" if isinstance(value, pd.Series) else "frame"
    frame = value.to_frame(name=_SERIES_COLUMN) if kind == "series" else value
    levels = frame.index.levels if isinstance(frame.index, pd.MultiIndex) else [frame.index]
    if any(level.dtype == object for level in levels) or any(t == object for t in frame.dtypes):
        return None
    meta: dict[str, Any] = {
        "kind": kind,
        "columns": frame.columns,
        "attrs": value.attrs,
        "allows_duplicate_labels": value.flags.allows_duplicate_labels,
        "name": value.name if kind == "series" else None,
        "index_freq": getattr(frame.index, "freq", None)
        if isinstance(frame.index, (pd.DatetimeIndex, pd.TimedeltaIndex)) else None,
    }
    flat = frame.set_axis([f"c{i}" for i in range(frame.shape[1])], axis=1)
    flat.attrs = {}
    return flat, meta


def _to_table(flat: Any, meta: dict[str, Any]) -> Any:
    import pyarrow as pa

    threads = None if flat.shape[0] * max(flat.shape[1], 1) >= SPILL_THREADED_CELLS else 1
    table = pa.Table.from_pandas(flat, preserve_index=None, nthreads=threads)
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[_META_KEY] = pickle.dumps(meta, protocol=PICKLE_PROTOCOL)
    return table.replace_schema_metadata(schema_meta)


def _from_table(table: Any) -> Any:
    import pandas as pd

    meta = pickle.loads(table.schema.metadata[_META_KEY])
    frame = table.to_pandas()  # split_blocks/self_destruct halve the peak but read ~40% slower (bench_cache)
    del table
    frame.columns = meta["columns"]
    if meta["index_freq"] is not None:
        cls = pd.DatetimeIndex if isinstance(frame.index, pd.DatetimeIndex) else pd.TimedeltaIndex
        frame.index = cls(frame.index, freq=meta["index_freq"])
    result = frame.iloc[:, 0].rename(meta["name"]) if meta["kind"] == "series" else frame
    result.attrs = meta["attrs"]
    result.flags.allows_duplicate_labels = meta["allows_duplicate_labels"]
    return result


def _write_parquet_frame(flat: Any, meta: dict[str, Any], sink: Any) -> None:
    import pyarrow.parquet as pq

    pq.write_table(_to_table(flat, meta), sink, compression=SPILL_PARQUET_COMPRESSION)


def _write_arrow_frame(flat: Any, meta: dict[str, Any], sink: Any) -> None:
    import pyarrow as pa

    table = _to_table(flat, meta)
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _probe(fmt: str, probe: Any, meta: dict[str, Any], expected: Any) -> bytes | None:
    """The serialised probe rows if they survive ``fmt`` exactly, else None (any error means no)."""
    buffer = io.BytesIO()
    try:
        (_write_parquet_frame if fmt == "parquet" else _write_arrow_frame)(probe, meta, buffer)
        data = buffer.getvalue()
        return data if values_identical(_READERS[fmt](io.BytesIO(data)), expected) else None
    except Exception:
        return None


def _write_frame_as(fmt: str) -> Callable[[Any, Any], None]:
    def write(value: Any, sink: Any) -> None:
        prepared = _prepare_frame(value)
        if prepared is None:
            raise SpillUnsupported(f"{type(value).__name__} with object data cannot be written as {fmt}")
        (_write_parquet_frame if fmt == "parquet" else _write_arrow_frame)(*prepared, sink)

    return write


def _read_parquet(source: Any) -> Any:
    import pyarrow.parquet as pq

    return _from_table(pq.read_table(source))


def _read_arrow(source: Any) -> Any:
    import pyarrow as pa

    if isinstance(source, str):
        with pa.OSFile(source) as handle:
            return _from_table(pa.ipc.open_file(handle).read_all())
    return _from_table(pa.ipc.open_file(source).read_all())


# --------------------------------------------------------------------------- arrays and objects


def _write_npy(value: Any, path: str) -> None:
    import numpy as np

    with open(path, "wb") as sink:  # a file object: np.save would append ".npy" to a path
        np.save(sink, value, allow_pickle=False)


def _read_npy(path: str) -> Any:
    import numpy as np

    return np.load(path, allow_pickle=False)


def _write_pickle(value: Any, path: str) -> None:
    with open(path, "wb") as sink:
        try:
            pickle.dump(value, sink, protocol=PICKLE_PROTOCOL)
        except OSError:
            raise
        except Exception as exc:  # PicklingError, TypeError, AttributeError...: not a disk fault
            raise SpillUnsupported(
                f"{type(value).__name__} cannot be pickled: {type(exc).__name__}: {exc}") from exc


def _read_pickle(path: str) -> Any:
    with open(path, "rb") as source:
        return pickle.load(source)


_WRITERS: dict[str, Callable[[Any, Any], None]] = {
    "parquet": _write_frame_as("parquet"),
    "arrow": _write_frame_as("arrow"),
    "npy": _write_npy,
    "pickle": _write_pickle,
}
_READERS: dict[str, Callable[[Any], Any]] = {
    "parquet": _read_parquet,
    "arrow": _read_arrow,
    "npy": _read_npy,
    "pickle": _read_pickle,
}


# --------------------------------------------------------------------------- exact comparison helpers


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
