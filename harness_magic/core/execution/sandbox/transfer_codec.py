"""The one codec both sides of the worker boundary use: which values cross, as which bytes.

Tables (frames, series, Arrow tables) cross as Arrow IPC files written by the
cache's spill codec (:func:`~harness_magic.core.cache.frames.frame_to_table`,
:func:`~harness_magic.core.cache.frames.table_to_frame`), plain arrays as ``.npy``
(memory order kept), everything else as :mod:`harness_magic.core.cache.codec`
tagged JSON. A value none of these carries exactly raises
:class:`TransferRefused` naming its kind. Writers are ``(write(sink), exact
byte count)`` pairs, so a caller can size files or memfds before writing and
stripe them (:mod:`.sealed`). Both :mod:`.transfer_kernel` and
:mod:`.transfer_worker` build on these; nothing here decides where bytes go.
"""

from __future__ import annotations

import io
import json
from typing import Any, cast

from harness_magic.core.cache.codec import Unencodable, encode_tagged
from harness_magic.core.cache.frames import SpillUnsupported, frame_to_table, table_to_frame
from harness_magic.core.execution.sandbox.protocol import JSON_VALUE_MAX_BYTES, ProtocolError

__all__ = [
    "RESULT_MAX_BYTES",
    "SERIES_COLUMN",
    "TransferRefused",
    "table_kind",
    "is_plain_array",
    "to_table",
    "from_table",
    "tagged_descriptor",
    "arrow_writer",
    "npy_writer",
    "npy_from_buffer",
    "input_files",
    "load_pyarrow",
]

RESULT_MAX_BYTES = 4 * 1024**3
"""Default cap on one table or array coming back (decoded size): beyond this the result is refused."""

SERIES_COLUMN = "__series__"
"""Column name a Series travels under (kept for compatibility; the codec stores the real name as JSON)."""


class TransferRefused(ValueError):
    """A value cannot cross the worker boundary exactly; the message names its kind and what to do."""


def load_pyarrow():
    """``pyarrow`` with its IPC module loaded (imported on first use: the kernel may never need it)."""
    import pyarrow as pa
    import pyarrow.ipc  # noqa: F401

    return pa


def table_kind(value: Any) -> str | None:
    """``"frame"``, ``"series"`` or ``"table"`` for a value that crosses as Arrow IPC; None for any other."""
    kind = type(value)
    module = kind.__module__
    if module.startswith("pandas") and kind.__name__ == "DataFrame":
        return "frame"
    if module.startswith("pandas") and kind.__name__ == "Series":
        return "series"
    if module.startswith("pyarrow") and kind.__name__ in ("Table", "RecordBatch"):
        return "table"
    return None


def is_plain_array(value: Any) -> bool:
    """Whether ``value`` crosses as ``.npy``: a numpy array (or memmap) without Python objects."""
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("ndarray", "memmap") and not value.dtype.hasobject


def to_table(value: Any, kind: str, what: str) -> Any:
    """The Arrow table a value of :func:`table_kind` ``kind`` crosses as; :class:`TransferRefused` naming ``what``
    when the spill codec cannot carry it exactly (or it is a pandas subclass)."""
    import pandas as pd

    if kind == "table":
        pa = load_pyarrow()
        return value if type(value).__name__ == "Table" else pa.Table.from_batches([value])
    if type(value) not in (pd.DataFrame, pd.Series):
        raise TransferRefused(f"{what} is a {type(value).__name__} (a pandas subclass); "
                              "convert it to a plain DataFrame or Series first")
    try:
        return frame_to_table(value)
    except SpillUnsupported as exc:
        raise TransferRefused(f"{what}: {exc}") from exc


def from_table(table: Any, kind: str) -> Any:
    """The value of ``kind`` rebuilt from its Arrow table (frames zero-copy where pandas allows)."""
    if kind == "table":
        return table
    return table_to_frame(table, split_blocks=True)


def tagged_descriptor(value: Any, what: str) -> dict[str, Any]:
    """The inline descriptor of a non-tabular value (tagged JSON within ``JSON_VALUE_MAX_BYTES``);
    :class:`TransferRefused` naming ``what`` when the codec cannot carry it."""
    try:
        encoded = encode_tagged(value)
        text = json.dumps(encoded, allow_nan=False)
    except Unencodable as exc:
        raise TransferRefused(f"{what} holds {exc.kind} values, which cannot cross the sandbox boundary exactly "
                              "(send frames, arrays, numbers, strings, dates or containers of them)") from exc
    except (ValueError, RecursionError) as exc:
        raise TransferRefused(f"{what} cannot be encoded: {exc}") from exc
    if len(text) > JSON_VALUE_MAX_BYTES:
        raise TransferRefused(f"{what} is {len(text)} bytes as tagged JSON, over the {JSON_VALUE_MAX_BYTES}-byte "
                              "limit for non-tabular values; put the data in a DataFrame or ndarray")
    return {"kind": "tagged", "value": encoded}


def arrow_writer(table: Any) -> tuple[Any, int]:
    """A writer of ``table`` as an Arrow IPC file, and the exact number of bytes it writes."""
    pa = load_pyarrow()

    def write_ipc(stream: Any) -> None:
        with pa.ipc.new_file(stream, table.schema) as writer:
            writer.write_table(table)

    def write(sink: Any) -> None:
        with pa.PythonFile(sink, mode="w") as stream:
            write_ipc(stream)

    counter = pa.MockOutputStream()
    write_ipc(counter)
    return write, counter.size()


def npy_writer(value: Any, what: str = "the result") -> tuple[Any, int]:
    """A writer of an array as ``.npy`` (memory order kept), and the exact number of bytes it writes."""
    import numpy as np

    array = value if type(value) is np.ndarray else np.asarray(value)
    fmt = np.lib.format
    info = fmt.header_data_from_array_1_0(array)
    head = io.BytesIO()
    try:
        fmt.write_array_header_1_0(head, info)
    except ValueError:
        head = io.BytesIO()
        try:
            fmt.write_array_header_2_0(head, info)
        except (ValueError, UnicodeError) as exc:
            raise TransferRefused(f"{what}: an array of dtype {array.dtype} has no .npy header version 1 or 2 "
                                  f"({exc}); rename its fields in ASCII") from exc
    header = head.getvalue()

    def write(sink: Any) -> None:
        sink.write(header)
        if array.flags.c_contiguous or array.flags.f_contiguous:
            flat = (array if array.flags.c_contiguous else array.T).reshape(-1)
            sink.write(flat.view(np.uint8))
            return
        for chunk in np.nditer(array, flags=["external_loop", "buffered", "zerosize_ok"],
                               buffersize=max(2**24 // max(array.itemsize, 1), 1), order="C"):
            sink.write(cast(Any, chunk).tobytes("C"))  # one operand: nditer yields arrays, not tuples

    return write, len(header) + array.nbytes


def npy_from_buffer(mm: Any, size: int) -> Any:
    """A read-only array over the ``.npy`` bytes in ``mm`` (``size`` long), no copy; :class:`ProtocolError`
    for an unknown header version, object dtype, or a header claiming more data than there is."""
    import numpy as np

    head = io.BytesIO(mm[: min(size, 1 << 16)])
    fmt = np.lib.format
    version = fmt.read_magic(head)
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    if version not in readers:
        raise ProtocolError(f".npy format version {version} is not accepted")
    try:
        shape, fortran, dtype = readers[version](head)
    except ValueError as exc:
        raise ProtocolError(f"bad .npy header: {exc}") from exc
    if dtype.hasobject:
        raise ProtocolError("object arrays are not accepted")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    offset = head.tell()
    if count < 0 or offset + count * dtype.itemsize > size:
        raise ProtocolError("array header claims more data than the file holds")
    flat = np.frombuffer(mm, dtype=dtype, count=count, offset=offset)  # read-only: the mapping is
    return flat.reshape(shape, order="F" if fortran else "C")


def input_files(desc: dict[str, Any]) -> list[str]:
    """File names of an input descriptor, in order (one, or the parts of a striped input); [] when inline."""
    if "parts" in desc:
        return list(desc["parts"])
    return [desc["file"]] if "file" in desc else []
