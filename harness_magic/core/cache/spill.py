"""Writing cached values to disk and reading them back, exactly and without running code.

Contract: ``read_value(write_value(v, stem))`` is identical to ``v`` — same
type, values, dtypes, index, columns, categorical order, ``attrs`` and
``flags`` (see :mod:`.frames`). Nothing is ever dropped silently: each value
goes to the first format that holds it exactly, and a value no format holds
exactly raises :class:`SpillUnsupported` naming the kind (and, for frames,
the column).

Nothing read back executes code: there is no pickle anywhere. Formats, in
order of preference:

* ``arrow`` — frames and series as an Arrow IPC file (uncompressed): read
  back without decoding, the table's columns are the file's bytes.
* ``parquet`` — frames and series (pyarrow, :data:`SPILL_PARQUET_COMPRESSION`),
  where a probe finds Arrow IPC inexact; older caches and checkpoints hold
  Parquet files, read as before.
* ``npy`` — numpy arrays without Python objects (``allow_pickle=False``).
* ``json`` — everything else that :mod:`.codec`'s tagged JSON carries exactly
  (scalars, strings, bytes, containers, Decimals, object arrays...).

Frames and series become Arrow tables through :mod:`.frames` (object cells as
tagged JSON, labels and attrs in the schema metadata).

How exactness is decided for frames: a *probe* — the first
:data:`SPILL_PROBE_ROWS` rows go through the candidate format in memory and
must come back identical. Verdicts are remembered per dtype signature; a
frame small enough to be its own probe is written from the probe's bytes.

Integrity (:mod:`.digest`): every file's digest (:data:`DIGEST_ALGORITHM`,
SHA-256 over stripes) is kept in its :class:`SpillRecord` and checked before
anything is decoded (records from older checkpoints carry plain SHA-256 or
BLAKE2b digests, checked as such); a mismatch raises
:class:`SpillIntegrityError`, never wrong data. Parquet and Arrow files are
read once into memory and the digest is checked on the very bytes that are
then decoded, so a file changed after the check is never decoded.

Writes are atomic (temporary file, then ``os.replace``). Disk failures raise
``OSError``; values no format can hold raise :class:`SpillUnsupported`.
Digests live in :mod:`.digest`, the frame encoding in :mod:`.frames`.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness_magic.core.cache.codec import TaggedError, Unencodable, decode_tagged, encode_tagged
from harness_magic.core.cache.digest import (
    DIGEST_ALGORITHM,
    SpillIntegrityError,
    buffer_digest,
    file_digest,
    read_checked,
)
from harness_magic.core.cache.frames import (
    SpillUnsupported,
    prepare_frame,
    prepared_to_table,
    register_pandas_arrow_types,
    table_to_frame,
    values_identical,
)

__all__ = [
    "SpillRecord",
    "write_value",
    "read_value",
    "choose_format",
    "SPILL_FORMATS",
    "SPILL_PROBE_ROWS",
    "SPILL_PARQUET_COMPRESSION",
]

SPILL_FORMATS = ("arrow", "parquet", "npy", "json")
"""Every on-disk format, in order of preference."""
SPILL_PROBE_ROWS = 64
"""Rows round-tripped in memory to prove a format exact: covers dtype-level losses, costs O(columns)."""
SPILL_PARQUET_COMPRESSION = None
"""Spill files are local and short-lived: uncompressed writes and reads fastest (bench_cache: ~1.5x snappy)."""
SPILL_VERDICT_MEMO = 512
"""Probe verdicts remembered per dtype signature: repeated spills of similar frames skip the probe."""
JSON_MAX_BYTES = 512 * 1024**2
"""A ``json`` spill file larger than this is refused on read (tagged JSON of that size is a mistake)."""

_SUFFIX = {"parquet": ".parquet", "arrow": ".arrow", "npy": ".npy", "json": ".json"}
_VERDICTS: dict[tuple[Any, ...], str] = {}
"""Dtype signature -> format a probe proved exact (see :func:`_signature`)."""


@dataclass(frozen=True)
class SpillRecord:
    """Where one value lives on disk, in which format, and the file's digest (hex)."""

    path: Path
    """The file (its suffix names the format)."""
    format: str
    """One of :data:`SPILL_FORMATS`."""
    digest: str = ""
    """Hex digest of the file by :attr:`algorithm`; checked before every read."""
    algorithm: str = DIGEST_ALGORITHM
    """One of :data:`DIGEST_ALGORITHMS`."""


def format_for_path(path: Path) -> str:
    """The format a spill file's suffix stands for."""
    for name, suffix in _SUFFIX.items():
        if path.name.endswith(suffix):
            return name
    raise ValueError(f"{path} is not a spill file (suffix not one of {sorted(_SUFFIX.values())})")


def _release_arrow_memory(fmt: str) -> None:
    """Hand the memory Arrow's allocator kept from a spill write or read back to the OS.

    mimalloc/jemalloc keep freed blocks for reuse: after a 20 MB spill about
    as much again stays resident, and it adds up as cache memory the budget
    does not see (``benchmarks/bench_cache.py``, peak RSS table).
    """
    if fmt in ("parquet", "arrow"):
        import pyarrow as pa

        pa.default_memory_pool().release_unused()


# --------------------------------------------------------------------------- public


def choose_format(value: Any) -> str:
    """The first format of :data:`SPILL_FORMATS` that holds ``value`` exactly (raises :class:`SpillUnsupported`)."""
    return _plan(value)[0]


def write_value(value: Any, stem: Path, fmt: str | None = None) -> SpillRecord:
    """Write ``value`` to ``stem`` + the format's suffix, atomically; the record carries its digest.

    Raises ``OSError`` when the disk refuses, :class:`SpillUnsupported` when
    no format holds the value exactly (the message names the kind or column).
    If the Arrow format a probe chose (IPC or Parquet) fails on the full
    data, the other one is tried; then the value is refused.
    """
    ready: bytes | None = None
    if fmt is None:
        fmt, ready = _plan(value)
    try:
        return _write_file(value, stem, fmt, ready)
    except (OSError, SpillUnsupported):
        raise
    # broad: pyarrow/pandas writers raise many types for values they cannot write; each becomes SpillUnsupported
    except Exception as exc:
        if fmt not in _TABLE_READERS:
            raise SpillUnsupported(f"{_kind(value)} could not be written as {fmt}: {type(exc).__name__}: {exc}") \
                from exc
        try:
            return _write_file(value, stem, "parquet" if fmt == "arrow" else "arrow", None)
        except (OSError, SpillUnsupported):
            raise
        # broad: pyarrow/pandas writers raise many types for values they cannot write; each becomes SpillUnsupported
        except Exception as exc2:
            raise SpillUnsupported(f"{_kind(value)} could not be written exactly: {type(exc2).__name__}: {exc2}") \
                from exc2


def _kind(value: Any) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}.{kind.__name__}"


def _write_file(value: Any, stem: Path, fmt: str, ready: bytes | None) -> SpillRecord:
    path = Path(f"{stem}{_SUFFIX[fmt]}")
    tmp = Path(f"{path}.tmp")
    try:
        if ready is not None:  # the probe already serialised the whole value
            with open(tmp, "wb") as sink:
                sink.write(ready)
            digest = buffer_digest(ready)
        else:
            try:
                _WRITERS[fmt](value, str(tmp))  # a path: pyarrow writes natively, without Python file calls
            finally:
                _release_arrow_memory(fmt)
            digest = file_digest(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return SpillRecord(path, fmt, digest)


def _plan(value: Any) -> tuple[str, bytes | None]:
    """(format, the file's bytes when the probe already produced them)."""
    import numpy as np
    import pandas as pd

    if isinstance(value, (pd.DataFrame, pd.Series)) and type(value) in (pd.DataFrame, pd.Series):
        flat, meta = prepare_frame(value)
        key = _signature(value, flat)
        known = _VERDICTS.get(key)
        whole = len(flat) <= SPILL_PROBE_ROWS
        if known is not None and not whole:
            return known, None
        probe = flat if whole else flat.iloc[:SPILL_PROBE_ROWS]
        expected = value if whole else value.iloc[:SPILL_PROBE_ROWS]
        errors: list[str] = []
        for fmt in ("arrow", "parquet"):
            data = _probe(fmt, probe, meta, expected, errors)
            if data is not None:
                _remember(key, fmt)
                return fmt, (data if whole else None)
        raise SpillUnsupported(
            f"{_kind(value)} with dtypes {_dtype_list(value)} does not survive Parquet or Arrow exactly"
            f" ({'; '.join(errors) or 'values changed'})")
    if type(value) is np.ndarray and not value.dtype.hasobject:
        return "npy", None
    try:
        data = json.dumps({"v": encode_tagged(value)}, allow_nan=False).encode("utf-8")
    except Unencodable as exc:
        raise SpillUnsupported(str(exc)) from exc
    except (ValueError, RecursionError) as exc:
        raise SpillUnsupported(f"{_kind(value)} cannot be stored as tagged JSON: {exc}") from exc
    return "json", data


def _dtype_list(value: Any) -> str:
    import pandas as pd

    dtypes = [value.dtype] if isinstance(value, pd.Series) else list(value.dtypes)
    return ", ".join(sorted({str(t) for t in dtypes})) or "(none)"


def _signature(value: Any, flat: Any) -> tuple[Any, ...]:
    """What a probe's verdict depends on: the kind, index and column dtypes."""
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
    """The value stored in ``record``, after checking the file's digest.

    Raises :class:`SpillIntegrityError` when the bytes changed, whatever the
    format raises on a malformed file otherwise. Never executes code.
    """
    if not record.digest:
        raise SpillIntegrityError(f"{record.path.name} has no recorded digest; it is not read unchecked")
    if record.format in ("parquet", "arrow"):
        # Read once, check the digest of those very bytes, decode them: no second read of the file
        # (and nothing another process changes after the check is ever decoded).
        data = read_checked(record.path, record.digest, record.algorithm)
        try:
            register_pandas_arrow_types()
            import pyarrow as pa

            tables = [_TABLE_READERS[record.format](pa.BufferReader(data))]
            del data  # Parquet decoded into new buffers: the file's bytes go before pandas allocates
            _release_arrow_memory(record.format)
            return table_to_frame(tables.pop())
        finally:
            _release_arrow_memory(record.format)
    actual = file_digest(record.path, record.algorithm)
    if actual != record.digest:
        raise SpillIntegrityError(f"{record.path.name} does not match its {record.algorithm} digest "
                                  "(the file changed)")
    return _READERS[record.format](str(record.path))


# --------------------------------------------------------------------------- frame files


def _dictionary_columns(table: Any) -> list[str]:
    """Columns a spill file dictionary-encodes: text only (repeated labels shrink a lot).

    Numbers, times and booleans are written plain: dictionary-encoding 20 MB of
    numbers peaks at about 50 MiB of encoder memory (which Arrow's allocator
    then keeps) and writes three times slower, for files that live minutes
    (``benchmarks/bench_cache.py``, peak RSS table).
    """
    import pyarrow as pa

    text = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    return [field.name for field in table.schema if any(check(field.type) for check in text)]


def _write_parquet_frame(flat: Any, meta: dict[str, Any], sink: Any) -> None:
    import pyarrow.parquet as pq

    table = prepared_to_table(flat, meta)
    pq.write_table(table, sink, compression=SPILL_PARQUET_COMPRESSION, use_dictionary=_dictionary_columns(table))


def _write_arrow_frame(flat: Any, meta: dict[str, Any], sink: Any) -> None:
    import pyarrow as pa

    table = prepared_to_table(flat, meta)
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _probe(fmt: str, probe: Any, meta: dict[str, Any], expected: Any, errors: list[str]) -> bytes | None:
    """The serialised probe rows if they survive ``fmt`` exactly, else None (errors are collected)."""
    buffer = io.BytesIO()
    try:
        (_write_parquet_frame if fmt == "parquet" else _write_arrow_frame)(probe, meta, buffer)
        data = buffer.getvalue()
        if values_identical(_READERS[fmt](io.BytesIO(data)), expected):
            return data
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "not this format"
        errors.append(f"{fmt}: {type(exc).__name__}: {str(exc)[:200]}")
        return None


def _write_frame_as(fmt: str) -> Callable[[Any, Any], None]:
    def write(value: Any, sink: Any) -> None:
        (_write_parquet_frame if fmt == "parquet" else _write_arrow_frame)(*prepare_frame(value), sink)

    return write


def _read_parquet(source: Any) -> Any:
    import pyarrow.parquet as pq

    register_pandas_arrow_types()
    return table_to_frame(pq.read_table(source))


def _arrow_table(source: Any) -> Any:
    import pyarrow as pa

    return pa.ipc.open_file(source).read_all()


def _parquet_table(source: Any) -> Any:
    import pyarrow.parquet as pq

    # One column decoded at a time: in parallel, every column's pages are held at once and the
    # peak varies by 20 MiB per 20 MB frame from run to run (bench_cache); hydrating is as fast.
    return pq.read_table(source, use_threads=False)


_TABLE_READERS: dict[str, Callable[[Any], Any]] = {"parquet": _parquet_table, "arrow": _arrow_table}
"""Formats whose files decode to an Arrow table first (then :func:`_from_table`)."""


def _read_arrow(source: Any) -> Any:
    import pyarrow as pa

    register_pandas_arrow_types()
    if isinstance(source, str):
        with pa.OSFile(source) as handle:
            return table_to_frame(pa.ipc.open_file(handle).read_all())
    return table_to_frame(pa.ipc.open_file(source).read_all())


# --------------------------------------------------------------------------- arrays and objects


def _write_npy(value: Any, path: str) -> None:
    import numpy as np

    with open(path, "wb") as sink:  # a file object: np.save would append ".npy" to a path
        np.save(sink, value, allow_pickle=False)


def _read_npy(path: str) -> Any:
    import numpy as np

    return np.load(path, allow_pickle=False)


def _write_json(value: Any, path: str) -> None:
    fmt, data = _plan(value)
    if data is None:  # only a "json" plan reaches here, and it always carries its bytes
        raise SpillUnsupported(f"{_kind(value)} is planned as {fmt!r}, not tagged JSON")
    with open(path, "wb") as sink:
        sink.write(data)


def _read_json(path: str) -> Any:
    with open(path, "rb") as source:
        data = source.read(JSON_MAX_BYTES + 1)
    if len(data) > JSON_MAX_BYTES:
        raise ValueError(f"tagged JSON file is over {JSON_MAX_BYTES} bytes")
    document = json.loads(data.decode("utf-8"))
    if not isinstance(document, dict) or set(document) != {"v"}:
        raise ValueError("not a tagged JSON spill file")
    try:
        return decode_tagged(document["v"])
    except TaggedError as exc:
        raise ValueError(str(exc)) from exc


_WRITERS: dict[str, Callable[[Any, Any], None]] = {
    "parquet": _write_frame_as("parquet"),
    "arrow": _write_frame_as("arrow"),
    "npy": _write_npy,
    "json": _write_json,
}
_READERS: dict[str, Callable[[Any], Any]] = {
    "parquet": _read_parquet,
    "arrow": _read_arrow,
    "npy": _read_npy,
    "json": _read_json,
}
