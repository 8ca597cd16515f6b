"""Moving values between the kernel and the worker through files, not pickles.

Inputs (kernel -> worker): frames, series and Arrow tables as Arrow IPC files,
arrays as ``.npy``, in the session's input directory (under ``/dev/shm`` when it
exists). The worker memory-maps them read-only, so attaching a large frame
costs page-table work, not a copy. Plain data goes as tagged JSON; anything else
falls back to pickle — safe in this direction only, since the kernel made it.

Results (worker -> kernel): the same formats in the worker's scratch directory.
The kernel opens them without following links, checks they are regular files
within the size cap, copies them into its own memory (the worker could still
write to a mapping it shares) and validates Arrow data fully before pandas sees
it. ``.npy`` loads with ``allow_pickle=False``. Nothing is unpickled or evaluated.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from harness_magic.core.sandbox.protocol import ProtocolError, decode_value, encode_value

__all__ = [
    "RESULT_MAX_BYTES",
    "write_input",
    "read_input",
    "write_result",
    "read_result",
    "SERIES_COLUMN",
]

RESULT_MAX_BYTES = 4 * 1024**3
"""Default cap on one table or array coming back: beyond this the result is refused."""

SERIES_COLUMN = "__series__"
"""Column name a Series travels under; its real name goes in the descriptor."""

_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}$")

_ALLOWED_EXTENSIONS = {"pandas.period", "pandas.interval"}
"""Arrow extension types the kernel accepts back (registered by pandas, rebuilt from JSON)."""


def _pa():
    import pyarrow as pa
    import pyarrow.ipc  # noqa: F401

    return pa


def _write_arrow(table: Any, path: str) -> None:
    pa = _pa()
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _table_kind(value: Any) -> str | None:
    kind = type(value)
    module = kind.__module__
    if module.startswith("pandas") and kind.__name__ == "DataFrame":
        return "frame"
    if module.startswith("pandas") and kind.__name__ == "Series":
        return "series"
    if module.startswith("pyarrow") and kind.__name__ in ("Table", "RecordBatch"):
        return "table"
    return None


def _is_plain_array(value: Any) -> bool:
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("ndarray", "memmap") and not value.dtype.hasobject


def _to_arrow(value: Any, kind: str) -> tuple[Any, dict[str, Any]]:
    pa = _pa()
    extra: dict[str, Any] = {}
    if kind == "frame":
        return pa.Table.from_pandas(value, preserve_index=None), extra
    if kind == "series":
        extra["name"] = encode_value(value.name)
        return pa.Table.from_pandas(value.to_frame(name=SERIES_COLUMN), preserve_index=None), extra
    table = value if type(value).__name__ == "Table" else pa.Table.from_batches([value])
    return table, extra


def _from_arrow(table: Any, desc: dict[str, Any], *, zero_copy: bool) -> Any:
    kind = desc["shape"]
    if kind == "table":
        return table
    frame = table.to_pandas(split_blocks=zero_copy)
    if kind == "frame":
        return frame
    series = frame[SERIES_COLUMN]
    series.name = decode_value(desc.get("name", {"t": "none"}))
    return series


# -- kernel -> worker -----------------------------------------------------------------------


def write_input(name: str, value: Any, directory: str, tag: str) -> dict[str, Any]:
    """Write one input for the worker; returns its descriptor."""
    import warnings

    kind = _table_kind(value)
    base = os.path.join(directory, f"in_{tag}_{name}")
    if kind is not None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table, extra = _to_arrow(value, kind)
            _write_arrow(table, base + ".arrow")
            os.chmod(base + ".arrow", 0o444)
            return {"kind": "arrow", "shape": kind, "file": os.path.basename(base) + ".arrow", **extra}
        except Exception:  # noqa: BLE001 - mixed object columns and the like: fall through to pickle
            pass
    elif _is_plain_array(value):
        import numpy as np

        np.save(base + ".npy", value, allow_pickle=False)
        os.chmod(base + ".npy", 0o444)
        return {"kind": "npy", "file": os.path.basename(base) + ".npy"}
    encoded = encode_value(value)
    if encoded["t"] != "repr":
        return {"kind": "json", "value": encoded}
    import pickle

    # Kernel-made objects only: the worker unpickles data the kernel trusts, never the reverse.
    with open(base + ".pkl", "wb") as handle:
        pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
    os.chmod(base + ".pkl", 0o444)
    return {"kind": "pickle", "file": os.path.basename(base) + ".pkl"}


def read_input(desc: dict[str, Any], directory: str) -> Any:
    """Worker side: attach an input, memory-mapped read-only where possible."""
    kind = desc["kind"]
    if kind == "json":
        return decode_value(desc["value"])
    path = os.path.join(directory, desc["file"])
    if kind == "arrow":
        pa = _pa()
        table = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
        return _from_arrow(table, desc, zero_copy=True)
    if kind == "npy":
        import numpy as np

        return np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)
    if kind == "pickle":
        import pickle

        with open(path, "rb") as handle:
            return pickle.load(handle)
    raise ProtocolError(f"unknown input kind {kind!r}")


# -- worker -> kernel -----------------------------------------------------------------------


def _stringify_failing_columns(frame: Any) -> tuple[Any, list[str]]:
    """Object columns Arrow cannot type become strings; returns the frame and what changed."""
    pa = _pa()
    changed = []
    frame = frame.copy()
    for position, column in enumerate(frame.columns):
        series = frame.iloc[:, position]
        if series.dtype == object:
            try:
                pa.array(series, from_pandas=True)
            except Exception:  # noqa: BLE001
                frame.isetitem(position, series.map(repr))
                changed.append(str(column))
    return frame, changed


def write_result(value: Any, directory: str, tag: str, notes: list[str]) -> dict[str, Any]:
    """Worker side: serialise one result; notes about lossy conversions are appended to ``notes``."""
    import warnings

    kind = _table_kind(value)
    base = os.path.join(directory, f"out_{tag}")
    if kind is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                table, extra = _to_arrow(value, kind)
            except Exception:  # noqa: BLE001
                if kind == "table":
                    raise
                frame = value if kind == "frame" else value.to_frame(name=SERIES_COLUMN)
                frame, changed = _stringify_failing_columns(frame)
                notes.append(f"columns {changed} held mixed objects and were sent back as their repr strings")
                table, extra = _to_arrow(frame if kind == "frame" else frame[SERIES_COLUMN], kind)
        _write_arrow(table, base + ".arrow")
        return {"kind": "arrow", "shape": kind, "file": os.path.basename(base) + ".arrow", **extra}
    if _is_plain_array(value):
        import numpy as np

        np.save(base + ".npy", np.asarray(value), allow_pickle=False)
        return {"kind": "npy", "file": os.path.basename(base) + ".npy"}
    return {"kind": "json", "value": encode_value(value)}


def _open_result(directory: str, name: Any, max_bytes: int) -> tuple[int, int]:
    if not isinstance(name, str) or not _FILE_NAME.match(name):
        raise ProtocolError(f"bad result file name {name!r}")
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise ProtocolError(f"result {name!r} is not a plain file")
    if info.st_size > max_bytes:
        os.close(fd)
        raise ProtocolError(f"result {name!r} is {info.st_size} bytes, over the {max_bytes}-byte cap")
    return fd, info.st_size


def _check_schema_types(pa: Any, data_type: Any) -> None:
    if isinstance(data_type, pa.BaseExtensionType):
        if data_type.extension_name not in _ALLOWED_EXTENSIONS:
            raise ProtocolError(f"extension type {data_type.extension_name!r} is not accepted")
    for index in range(getattr(data_type, "num_fields", 0)):
        _check_schema_types(pa, data_type.field(index).type)


def read_result(desc: Any, directory: str, max_bytes: int = RESULT_MAX_BYTES) -> Any:
    """Kernel side: rebuild a result from its descriptor, validating type, size and content."""
    if not isinstance(desc, dict) or desc.get("kind") not in ("arrow", "npy", "json"):
        raise ProtocolError("malformed result descriptor")
    kind = desc["kind"]
    if kind == "json":
        return decode_value(desc.get("value"))
    fd, size = _open_result(directory, desc.get("file"), max_bytes)
    try:
        if kind == "npy":
            import numpy as np

            with os.fdopen(fd, "rb", closefd=False) as handle:
                fmt = np.lib.format
                version = fmt.read_magic(handle)
                readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
                if version not in readers:
                    raise ProtocolError(f".npy format version {version} is not accepted")
                reader = readers[version]
                shape, _, dtype = reader(handle)
                if dtype.hasobject:
                    raise ProtocolError("object arrays are not accepted")
                if int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > size:
                    raise ProtocolError("array header claims more data than the file holds")
                handle.seek(0)
                return np.load(handle, allow_pickle=False)
        pa = _pa()
        if desc.get("shape") not in ("frame", "series", "table"):
            raise ProtocolError("malformed table descriptor")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            buffer = pa.py_buffer(handle.read(size + 1))  # private copy: the worker cannot change it now
        if buffer.size > size:
            raise ProtocolError("result file grew while being read")
        try:
            table = pa.ipc.open_file(buffer).read_all()
            for field in table.schema:
                _check_schema_types(pa, field.type)
            table.validate(full=True)
            return _from_arrow(table, desc, zero_copy=True)  # over our private copy: safe to share
        except ProtocolError:
            raise
        except Exception as exc:  # noqa: BLE001 - anything malformed is the worker's fault
            raise ProtocolError(f"invalid Arrow result: {type(exc).__name__}: {exc}") from exc
    finally:
        os.close(fd)
