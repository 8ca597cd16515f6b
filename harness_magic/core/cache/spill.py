"""Writing cached values to disk and reading them back, exactly and without running code.

Contract: ``read_value(write_value(v, stem))`` is identical to ``v`` — same
type, values, dtypes, index (type, name, RangeIndex start/step, frequency),
columns (names, types, duplicates, MultiIndex), categorical order, ``attrs``
and ``flags``. Nothing is ever dropped silently: each value goes to the first
format that holds it exactly, and a value no format holds exactly raises
:class:`SpillUnsupported` naming the kind (and, for frames, the column).

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

Inside the Arrow formats, columns whose cells are Python objects (``object``
dtype), complex numbers or sparse data travel as one tagged-JSON string per
cell; ``object`` index levels likewise. Column labels, ``attrs``, ``flags``,
the index frequency and a series' name are stored as JSON in the file's
schema metadata (:data:`_META_KEY`), and the data columns under positional
names: that is what makes duplicate, non-string and MultiIndex labels exact.
pandas' own schema metadata is read by pyarrow as JSON too.

How exactness is decided for frames: a *probe* — the first
:data:`SPILL_PROBE_ROWS` rows go through the candidate format in memory and
must come back identical. Verdicts are remembered per dtype signature; a
frame small enough to be its own probe is written from the probe's bytes.

Integrity: every file's digest (:data:`DIGEST_ALGORITHM`, SHA-256 over
stripes, see :func:`striped_digest`) is kept in its :class:`SpillRecord` and
checked before anything is decoded (records from older checkpoints carry
plain SHA-256 or BLAKE2b digests, checked as such); a mismatch raises
:class:`SpillIntegrityError`, never wrong data. Parquet and Arrow files are
read once into memory, stripe by stripe on parallel threads that hash each
stripe as it lands, and the digest is checked on the very bytes that are then
decoded, so a file changed after the check is never decoded.

Writes are atomic (temporary file, then ``os.replace``). Disk failures raise
``OSError``; values no format can hold raise :class:`SpillUnsupported`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness_magic.core.cache.codec import TaggedError, Unencodable, decode_tagged, encode_tagged

__all__ = [
    "SpillRecord",
    "SpillUnsupported",
    "SpillIntegrityError",
    "write_value",
    "read_value",
    "choose_format",
    "values_identical",
    "file_digest",
    "new_hasher",
    "striped_digest",
    "frame_to_table",
    "table_to_frame",
    "register_pandas_arrow_types",
    "release_freed_memory",
    "SPILL_FORMATS",
    "SPILL_PROBE_ROWS",
    "SPILL_PARQUET_COMPRESSION",
    "DIGEST_SIZE",
    "DIGEST_ALGORITHM",
    "DIGEST_ALGORITHMS",
    "DIGEST_STRIPE_BYTES",
]

SPILL_FORMATS = ("arrow", "parquet", "npy", "json")
"""Every on-disk format, in order of preference."""
SPILL_PROBE_ROWS = 64
"""Rows round-tripped in memory to prove a format exact: covers dtype-level losses, costs O(columns)."""
SPILL_PARQUET_COMPRESSION = None
"""Spill files are local and short-lived: uncompressed writes and reads fastest (bench_cache: ~1.5x snappy)."""
SPILL_THREADED_CELLS = 1_000_000
"""Below this many cells, converting on one thread beats starting pyarrow's conversion threads."""
SPILL_VERDICT_MEMO = 512
"""Probe verdicts remembered per dtype signature: repeated spills of similar frames skip the probe."""
DIGEST_ALGORITHM = "sha256-stripes"
"""Digest of new spill files (:func:`striped_digest`): SHA-256 of each stripe, hashed on parallel threads
as the file is read, then SHA-256 over the stripes' digests; as collision-resistant as SHA-256 itself."""
DIGEST_ALGORITHMS = ("sha256-stripes", "sha256", "blake2b")
"""Digests a record may carry: plain SHA-256 is what version-3 checkpoints hold, BLAKE2b version 2."""
DIGEST_SIZE = 32
"""Digest bytes per file (every algorithm): 64 hex characters."""
DIGEST_STRIPE_BYTES = 4 * 1024**2
"""Stripe of the striped digest; part of its definition (another size gives other digests): large enough
that per-stripe overhead vanishes, small enough that a 16 MiB file already splits over four threads."""
HASH_THREADS_MAX = 8
"""Threads reading and hashing one file at most: past this, memory bandwidth is the limit, not the CPU."""
HASH_PARALLEL_MIN_BYTES = 16 * 1024**2
"""Files smaller than this are read and hashed on the calling thread: starting threads would cost more."""
JSON_MAX_BYTES = 512 * 1024**2
"""A ``json`` spill file larger than this is refused on read (tagged JSON of that size is a mistake)."""
_HASH_CHUNK = 4 * 1024**2
"""Bytes hashed per read: large enough to run at memory speed, small enough to stay cache-friendly."""
_STRIPES_TAG = b"harness_magic sha256-stripes 4MiB\x00"
"""Prefix of the striped digest's final hash: names the scheme and stripe size the digests belong to."""

_SUFFIX = {"parquet": ".parquet", "arrow": ".arrow", "npy": ".npy", "json": ".json"}
_META_KEY = b"harness_magic"
_SERIES_COLUMN = "__series__"
_CELL_DTYPES = ("object", "complex", "Sparse")
"""Column dtypes stored as tagged-JSON cells (Arrow has no exact type for them)."""
_VERDICTS: dict[tuple[Any, ...], str] = {}
"""Dtype signature -> format a probe proved exact (see :func:`_signature`)."""


class SpillUnsupported(Exception):
    """No format can hold the value exactly (e.g. a lambda, an object column of sockets)."""


class SpillIntegrityError(Exception):
    """A spill file's bytes do not match the digest recorded when it was written."""


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


class _StripedHasher:
    """:data:`DIGEST_ALGORITHM` fed sequentially (``update``/``hexdigest``, as hashlib objects are)."""

    def __init__(self) -> None:
        self._digests: list[bytes] = []
        self._stripe = hashlib.sha256()
        self._filled = 0
        self._size = 0

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        self._size += len(view)
        while len(view):
            take = min(len(view), DIGEST_STRIPE_BYTES - self._filled)
            self._stripe.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == DIGEST_STRIPE_BYTES:
                self._digests.append(self._stripe.digest())
                self._stripe, self._filled = hashlib.sha256(), 0

    def hexdigest(self) -> str:
        digests = self._digests + ([self._stripe.digest()] if self._filled else [])
        return _combine(self._size, digests)


def _combine(size: int, digests: list[bytes]) -> str:
    """The striped digest of ``size`` bytes from its stripes' SHA-256 digests, in order."""
    top = hashlib.sha256(_STRIPES_TAG + size.to_bytes(8, "big"))
    for digest in digests:
        top.update(digest)
    return top.hexdigest()


def new_hasher(algorithm: str = DIGEST_ALGORITHM, data: Any = b"") -> Any:
    """A sequential hasher (``update``/``hexdigest``) for ``algorithm`` (one of :data:`DIGEST_ALGORITHMS`), fed ``data``."""
    if algorithm == "sha256-stripes":
        hasher = _StripedHasher()
        hasher.update(data)
        return hasher
    if algorithm == "sha256":
        return hashlib.sha256(data)
    if algorithm == "blake2b":
        return hashlib.blake2b(data, digest_size=DIGEST_SIZE)
    raise ValueError(f"digest algorithm {algorithm!r} is not supported; allowed: {', '.join(DIGEST_ALGORITHMS)}")


def _hash_threads(size: int) -> int:
    """Threads that read and hash a file of ``size`` bytes: one below :data:`HASH_PARALLEL_MIN_BYTES`."""
    if size < HASH_PARALLEL_MIN_BYTES:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(HASH_THREADS_MAX, cpus, -(-size // DIGEST_STRIPE_BYTES)))


def striped_digest(size: int, stripe: Callable[[int, int], bytes]) -> str:
    """:data:`DIGEST_ALGORITHM` of ``size`` bytes; ``stripe(start, end)`` returns the SHA-256 digest of
    bytes [start, end) (reading them first where they come from a file).

    Definition: SHA-256 of :data:`_STRIPES_TAG`, the size as 8 big-endian
    bytes, and the digests of consecutive :data:`DIGEST_STRIPE_BYTES` stripes
    in order (the last one shorter). Stripes are computed on up to
    :data:`HASH_THREADS_MAX` threads, each taking a contiguous run (hashlib
    releases the GIL while hashing, os.preadv while reading); the digest does
    not depend on the thread count. An exception in any stripe propagates.
    """
    count = -(-size // DIGEST_STRIPE_BYTES)
    digests = [b""] * count
    threads = _hash_threads(size)

    def run(part: int) -> None:
        for index in range(part * count // threads, (part + 1) * count // threads):
            start = index * DIGEST_STRIPE_BYTES
            digests[index] = stripe(start, min(size, start + DIGEST_STRIPE_BYTES))

    if threads == 1:
        run(0)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads, thread_name_prefix="spill-digest") as pool:
            for done in [pool.submit(run, part) for part in range(threads)]:
                done.result()
    return _combine(size, digests)


def _buffer_digest(data: Any, algorithm: str = DIGEST_ALGORITHM) -> str:
    """Hex digest of bytes in memory by ``algorithm`` (striped ones on parallel threads)."""
    view = memoryview(data).cast("B")
    if algorithm != "sha256-stripes":
        return new_hasher(algorithm, view).hexdigest()
    return striped_digest(len(view), lambda start, end: hashlib.sha256(view[start:end]).digest())


def file_digest(path: Path | str, algorithm: str = DIGEST_ALGORITHM) -> str:
    """Hex digest of a file by ``algorithm``, read in chunks (striped digests: stripes on parallel threads)."""
    with open(path, "rb", buffering=0) as source:
        if algorithm == "sha256-stripes":
            fd = source.fileno()
            local = threading.local()

            def stripe(start: int, end: int) -> bytes:
                scratch = getattr(local, "scratch", None)
                if scratch is None:
                    scratch = local.scratch = memoryview(bytearray(DIGEST_STRIPE_BYTES))
                _pread_exactly(fd, scratch[: end - start], start, path)
                return hashlib.sha256(scratch[: end - start]).digest()

            digest = striped_digest(os.fstat(fd).st_size, stripe)
            if os.pread(fd, 1, os.fstat(fd).st_size):
                raise SpillIntegrityError(f"{Path(path).name} changed size while it was read")
            return digest
        digest = new_hasher(algorithm)
        chunk = bytearray(_HASH_CHUNK)
        view = memoryview(chunk)
        while True:
            n = source.readinto(chunk)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest()


def _pread_exactly(fd: int, view: memoryview, offset: int, path: Path | str) -> None:
    """Fill ``view`` from ``fd`` at ``offset``; a file that ends early changed size while it was read."""
    filled = 0
    while filled < len(view):
        n = os.preadv(fd, [view[filled:]], offset + filled)
        if not n:
            raise SpillIntegrityError(f"{Path(path).name} changed size while it was read")
        filled += n


def _release_arrow_memory(fmt: str) -> None:
    """Hand the memory Arrow's allocator kept from a spill write or read back to the OS.

    mimalloc/jemalloc keep freed blocks for reuse: after a 20 MB spill about
    as much again stays resident, and it adds up as cache memory the budget
    does not see (``benchmarks/bench_cache.py``, peak RSS table).
    """
    if fmt in ("parquet", "arrow"):
        import pyarrow as pa

        pa.default_memory_pool().release_unused()


_LIBC_TRIM: list[Any] = []
"""glibc's ``malloc_trim``, looked up once (empty list: not looked up yet; ``[None]``: not glibc)."""


def release_freed_memory() -> None:
    """Return memory freed by dropping a spilled value to the OS (Arrow's pool and glibc's heap).

    glibc raises its mmap threshold after freeing large blocks, so the
    columns of later frames live on the heap and stay resident after the cache
    drops them; ``malloc_trim(0)`` gives back the free pages (only free memory
    is touched; a no-op elsewhere than glibc). Costs well under a millisecond
    per spill next to the write itself.
    """
    if "pyarrow" in sys.modules:  # never imported just for this
        _release_arrow_memory("arrow")
    if not _LIBC_TRIM:
        import ctypes

        trim = None
        try:
            libc = ctypes.CDLL(None)  # the symbols already loaded in this process: libc's, no lookup
            if hasattr(libc, "gnu_get_libc_version"):
                trim = libc.malloc_trim
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            trim = None
        _LIBC_TRIM.append(trim)
    if _LIBC_TRIM[0] is not None:
        _LIBC_TRIM[0](0)


def register_pandas_arrow_types() -> None:
    """Register pandas' Arrow extension types (period, interval) before any Arrow read.

    pandas registers them lazily, on first use of those dtypes; a process that
    reads a file before that would get plain ordinals/structs back.
    """
    import pandas.core.arrays.arrow.extension_types  # noqa: F401 - registers on import


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
    except Exception as exc:
        if fmt not in _TABLE_READERS:
            raise SpillUnsupported(f"{_kind(value)} could not be written as {fmt}: {type(exc).__name__}: {exc}") \
                from exc
        try:
            return _write_file(value, stem, "parquet" if fmt == "arrow" else "arrow", None)
        except (OSError, SpillUnsupported):
            raise
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
            digest = _buffer_digest(ready)
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
        flat, meta = _prepare_frame(value)
        key = _signature(value, flat)
        known = _VERDICTS.get(key)
        whole = len(flat) <= SPILL_PROBE_ROWS
        if known is not None and not whole:
            return known, None
        probe = flat if whole else flat.iloc[:SPILL_PROBE_ROWS]
        expected = value if whole else value.iloc[:SPILL_PROBE_ROWS]
        errors = []
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
        data = _read_checked(record)
        try:
            register_pandas_arrow_types()
            import pyarrow as pa

            tables = [_TABLE_READERS[record.format](pa.BufferReader(data))]
            del data  # Parquet decoded into new buffers: the file's bytes go before pandas allocates
            _release_arrow_memory(record.format)
            return _from_table(tables.pop())
        finally:
            _release_arrow_memory(record.format)
    actual = file_digest(record.path, record.algorithm)
    if actual != record.digest:
        raise SpillIntegrityError(f"{record.path.name} does not match its {record.algorithm} digest "
                                  "(the file changed)")
    return _READERS[record.format](str(record.path))


def _read_checked(record: SpillRecord) -> Any:
    """The file's bytes in one Arrow buffer, after checking them against the record's digest.

    Striped digests: each thread reads its stripes straight into the buffer and
    hashes each while it is still in cache. The buffer comes from Arrow's pool,
    which :func:`_release_arrow_memory` empties afterwards: a glibc allocation
    this large would raise glibc's mmap threshold and leave later frames'
    columns resident on its heap. A file that changes size meanwhile is refused.
    """
    import pyarrow as pa

    path = record.path
    with open(path, "rb", buffering=0) as source:
        fd = source.fileno()
        size = os.fstat(fd).st_size
        data = pa.allocate_buffer(size)
        view = memoryview(data)
        try:
            digest = _fill_and_digest(fd, view, record.algorithm, path)
            if os.pread(fd, 1, size):
                raise SpillIntegrityError(f"{path.name} changed size while it was read")
        finally:
            view.release()
    if digest != record.digest:
        raise SpillIntegrityError(f"{path.name} does not match its {record.algorithm} digest (the file changed)")
    return data


def _fill_and_digest(fd: int, view: memoryview, algorithm: str, path: Path) -> str:
    """Read the whole file into ``view`` and return the digest of those bytes by ``algorithm``."""
    if algorithm != "sha256-stripes":
        _pread_exactly(fd, view, 0, path)
        return new_hasher(algorithm, view).hexdigest()

    def stripe(start: int, end: int) -> bytes:
        _pread_exactly(fd, view[start:end], start, path)
        return hashlib.sha256(view[start:end]).digest()

    return striped_digest(len(view), stripe)


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


# --------------------------------------------------------------------------- frames


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


def _prepare_frame(value: Any) -> tuple[Any, dict[str, Any]]:
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
    """Positions of plain numpy float32/float64 columns -> their dtype (the ones :func:`_to_table` maps as is)."""
    import numpy as np

    found = {}
    for position, dtype in enumerate(flat.dtypes):
        if isinstance(dtype, np.dtype) and dtype.kind == "f" and dtype.itemsize in (4, 8):
            found[position] = dtype
    return found


def _to_table(flat: Any, meta: dict[str, Any]) -> Any:
    """``flat`` (from :func:`_prepare_frame`) as an Arrow table carrying ``meta``; float columns without a copy.

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
    schema_meta[_META_KEY] = json.dumps(meta, allow_nan=False).encode("utf-8")
    return table.replace_schema_metadata(schema_meta)


def frame_to_table(value: Any) -> Any:
    """A frame or series as an Arrow table whose metadata (JSON) makes :func:`table_to_frame` exact.

    Raises :class:`SpillUnsupported` for object data without a safe encoding.
    """
    return _to_table(*_prepare_frame(value))


def table_to_frame(table: Any, **to_pandas: Any) -> Any:
    """The frame or series :func:`frame_to_table` encoded (raises ``ValueError`` on foreign metadata)."""
    return _from_table(table, **to_pandas)


def _from_table(table: Any, **to_pandas: Any) -> Any:
    import numpy as np
    import pandas as pd

    register_pandas_arrow_types()
    raw = (table.schema.metadata or {}).get(_META_KEY)
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

    table = _to_table(flat, meta)
    pq.write_table(table, sink, compression=SPILL_PARQUET_COMPRESSION, use_dictionary=_dictionary_columns(table))


def _write_arrow_frame(flat: Any, meta: dict[str, Any], sink: Any) -> None:
    import pyarrow as pa

    table = _to_table(flat, meta)
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
        (_write_parquet_frame if fmt == "parquet" else _write_arrow_frame)(*_prepare_frame(value), sink)

    return write


def _read_parquet(source: Any) -> Any:
    import pyarrow.parquet as pq

    register_pandas_arrow_types()
    return _from_table(pq.read_table(source))


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


def _write_json(value: Any, path: str) -> None:
    _, data = _plan(value)
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
