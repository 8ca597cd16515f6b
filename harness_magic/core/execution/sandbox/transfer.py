"""Moving values between the kernel and the worker through files, with the cache's one codec.

Both directions use the same encoder/decoder as the cache's spill files
(:func:`harness_magic.core.cache.spill.frame_to_table` /
:func:`~harness_magic.core.cache.spill.table_to_frame` for frames and series,
``.npy`` for arrays, :mod:`harness_magic.core.cache.codec` tagged JSON for
everything else), so a kind that survives a spill survives the worker:
labels of any type, ``freq``, ``flags``, ``attrs``, categoricals in indexes
and columns, Python objects in object columns, memory order. A value the
codec cannot carry exactly is refused with an error naming its kind — never
turned into a placeholder or a repr string. Nothing is pickled either way.

Inputs (kernel -> worker): Arrow IPC files (uncompressed) and ``.npy`` in the
session's input directory (striped over one file per core when large, like
results); the worker memory-maps them read-only.

Results (worker -> kernel): the worker writes each table or array into
memory files (``memfd_create``; a large one striped over several, written in
parallel), seals them against writing, growing and shrinking
(``F_ADD_SEALS``) and passes the descriptors over a socketpair made before it
confined itself (:func:`receive_sealed`). The kernel checks the seals, the
type and the sizes, and maps them read-only as one buffer: sealed means the
worker can no longer change it, so no safety copy is made
(:func:`read_sealed_result`, :mod:`harness_magic.core.execution.sandbox.sealed`).
Without that channel, results are scratch files: the kernel opens them
without following links, checks they are regular files within the size cap
and copies them into its own memory. Either way it then walks the Arrow
message metadata *before decoding anything*: compressed bodies are refused,
every buffer must lie inside its message body, and the decoded size
(buffers plus what pandas materialises per row) must stay under the cap.
Then the data is validated in full before pandas sees it. ``.npy`` loads
with ``allow_pickle=False``. Nothing is unpickled or evaluated.

Trailing-expression values of a kind the codec does not know (a figure, a
model object) come back as a bounded :class:`RemoteObject` repr for the model
to read; *saved* values are never placeholders: they are exact or refused.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import struct
import time
from collections.abc import Iterable
from typing import Any

from harness_magic.core.cache.codec import TaggedError, Unencodable, decode_tagged, encode_tagged
from harness_magic.core.cache.spill import SpillUnsupported, frame_to_table, register_pandas_arrow_types, \
    table_to_frame
from harness_magic.core.execution.sandbox.protocol import JSON_VALUE_MAX_BYTES, ProtocolError, RemoteObject, safe_repr
from harness_magic.core.execution.sandbox.sealed import STRIPE_MAX_PARTS, join_mapped, map_sealed, part_layout, \
    stripe_count, usable_cpus, write_sealed, write_striped

__all__ = [
    "RESULT_MAX_BYTES",
    "TransferRefused",
    "write_input",
    "read_input",
    "write_result",
    "read_result",
    "check_ipc_file",
    "SERIES_COLUMN",
]

RESULT_MAX_BYTES = 4 * 1024**3
"""Default cap on one table or array coming back (decoded size): beyond this the result is refused."""

SERIES_COLUMN = "__series__"
"""Column name a Series travels under (kept for compatibility; the codec stores the real name as JSON)."""

ROW_MATERIALISE_BYTES = 8
"""Bytes pandas may allocate per row and column beyond the Arrow buffers (object pointers, codes)."""

_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}$")

_ALLOWED_EXTENSIONS = {"pandas.period", "pandas.interval"}
"""Arrow extension types the kernel accepts back (registered by pandas, rebuilt from JSON)."""


class TransferRefused(ValueError):
    """A value cannot cross the worker boundary exactly; the message names its kind and what to do."""


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


def _to_table(value: Any, kind: str, what: str) -> Any:
    import pandas as pd

    if kind == "table":
        pa = _pa()
        return value if type(value).__name__ == "Table" else pa.Table.from_batches([value])
    if type(value) not in (pd.DataFrame, pd.Series):
        raise TransferRefused(f"{what} is a {type(value).__name__} (a pandas subclass); "
                              "convert it to a plain DataFrame or Series first")
    try:
        return frame_to_table(value)
    except SpillUnsupported as exc:
        raise TransferRefused(f"{what}: {exc}") from exc


def _from_table(table: Any, kind: str) -> Any:
    if kind == "table":
        return table
    return table_to_frame(table, split_blocks=True)


def _write_npy(value: Any, path: str) -> None:
    import numpy as np

    with open(path, "wb") as sink:
        np.save(sink, value if type(value) is np.ndarray else np.asarray(value), allow_pickle=False)


def _tagged(value: Any, what: str) -> dict[str, Any]:
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


# -- kernel -> worker -----------------------------------------------------------------------


def write_input(name: str, value: Any, directory: str, tag: str) -> dict[str, Any]:
    """Write one input for the worker; returns its descriptor. Raises :class:`TransferRefused`.

    Tables and arrays go to read-only files (mode 0444), striped over one
    file per core when large (``"parts"`` lists them; ``"file"`` is the first),
    which the worker maps back to back as one buffer.
    """
    import warnings

    kind = _table_kind(value)
    base = os.path.join(directory, f"in_{tag}_{name}")
    what = f"handle {name!r}"
    if kind is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = _to_table(value, kind, what)
        return {"kind": "arrow", "shape": kind, **_write_input_files(_arrow_to(table), base + ".arrow")}
    if _is_plain_array(value):  # keeps Fortran order: the header records it
        return {"kind": "npy", **_write_input_files(_npy_to(value, what), base + ".npy")}
    return _tagged(value, what)


def _write_input_files(writer: tuple[Any, int], path: str) -> dict[str, Any]:
    write, size = writer
    part_size, count = part_layout(size, stripe_count(size, usable_cpus()))
    paths = [path] + [f"{path}.{index}" for index in range(1, count)]
    fds: list[int] = []
    try:
        for part in paths:
            _unlink_quietly(part)
            fds.append(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444))
        write_striped(write, size, fds, part_size)
    except BaseException:
        for part in paths[:len(fds)]:
            _unlink_quietly(part)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    names = [os.path.basename(part) for part in paths]
    return {"file": names[0], "parts": names} if count > 1 else {"file": names[0]}


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def input_files(desc: dict[str, Any]) -> list[str]:
    """File names of an input descriptor, in order (one, or the parts of a striped input); [] when inline."""
    if "parts" in desc:
        return list(desc["parts"])
    return [desc["file"]] if "file" in desc else []


def _map_input(desc: dict[str, Any], directory: str) -> Any:
    """A read-only buffer over an input's file, or its parts mapped back to back."""
    pa = _pa()
    names = input_files(desc)
    if len(names) == 1:
        return pa.memory_map(os.path.join(directory, names[0]), "r")
    fds: list[int] = []
    try:
        for name in names:
            fds.append(os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC))
        return join_mapped(fds, [os.fstat(fd).st_size for fd in fds])
    finally:
        for fd in fds:
            os.close(fd)


_INPUT_TABLES: dict[tuple[str, ...], tuple[tuple[tuple[int, int, int], ...], Any]] = {}
"""Worker side: file names -> (their inode, size, mtime; the Arrow table mapped over them), for the
inputs of the latest call. An input file never changes (one per value version), so a later call in
the same worker reuses the table; every call still builds fresh pandas objects from it."""


def read_input(desc: dict[str, Any], directory: str) -> Any:
    """Worker side: attach an input, memory-mapped read-only where possible."""
    kind = desc["kind"]
    if kind == "tagged":
        return decode_tagged(desc["value"])
    if kind == "arrow":
        register_pandas_arrow_types()
        return _from_table(_input_table(desc, directory), desc["shape"])
    if kind == "npy":
        import numpy as np

        if "parts" in desc:
            buffer = _map_input(desc, directory)
            array = _npy_from_buffer(buffer, buffer.size)
        else:
            array = np.load(os.path.join(directory, desc["file"]), mmap_mode="r", allow_pickle=False)
        return array.view(np.ndarray) if array.ndim else np.array(array)
    raise ProtocolError(f"unknown input kind {kind!r}")


def _input_table(desc: dict[str, Any], directory: str) -> Any:
    """The Arrow table of an input's file(s): the one mapped for an earlier call when it is the same file."""
    names = tuple(input_files(desc))
    identity = tuple((info.st_ino, info.st_size, info.st_mtime_ns)
                     for info in (os.stat(os.path.join(directory, name), follow_symlinks=False) for name in names))
    held = _INPUT_TABLES.get(names)
    if held is not None and held[0] == identity:
        return held[1]
    table = _pa().ipc.open_file(_map_input(desc, directory)).read_all()
    _INPUT_TABLES[names] = (identity, table)
    return table


def keep_input_tables(descs: Iterable[dict[str, Any]]) -> None:
    """Worker side: drop the mapped tables of inputs not in ``descs`` (the call about to run), unmapping them."""
    wanted = {tuple(input_files(desc)) for desc in descs}
    for names in [names for names in _INPUT_TABLES if names not in wanted]:
        del _INPUT_TABLES[names]


# -- worker -> kernel -----------------------------------------------------------------------


_CHANNEL: dict[str, Any] = {"sock": None, "slot": 0, "cpus": 1}
"""Worker side: the result socket (one end of a socketpair made before confinement), the next slot, usable cores."""


def set_result_channel(fd: int) -> None:
    """Worker side: send tables and arrays back as sealed memory files over this socket."""
    import socket

    _CHANNEL["sock"] = socket.socket(fileno=fd)
    _CHANNEL["cpus"] = usable_cpus()


def _send_sealed(writer: tuple[Any, int], desc: dict[str, Any]) -> dict[str, Any]:
    """Write into fresh memory files (striped when large), seal them, pass the descriptors; return the reply's."""
    import socket

    write, size = writer
    fds = write_sealed(write, size, stripe_count(size, _CHANNEL["cpus"]))
    try:
        slot = _CHANNEL["slot"] = _CHANNEL["slot"] + 1
        socket.send_fds(_CHANNEL["sock"], [json.dumps({"slot": slot}).encode()], fds)
    finally:
        for fd in fds:
            os.close(fd)
    return {**desc, "fd_slot": slot}


def _arrow_to(table: Any) -> tuple[Any, int]:
    """A writer of ``table`` as an Arrow IPC file, and the exact number of bytes it writes."""
    pa = _pa()

    def write_ipc(stream: Any) -> None:
        with pa.ipc.new_file(stream, table.schema) as writer:
            writer.write_table(table)

    def write(sink: Any) -> None:
        with pa.PythonFile(sink, mode="w") as stream:
            write_ipc(stream)

    counter = pa.MockOutputStream()
    write_ipc(counter)
    return write, counter.size()


def _npy_to(value: Any, what: str = "the result") -> tuple[Any, int]:
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
            sink.write(chunk.tobytes("C"))

    return write, len(header) + array.nbytes


def write_result(value: Any, directory: str, tag: str, notes: list[str], *, saved_as: str | None = None,
                 max_bytes: int = RESULT_MAX_BYTES) -> dict[str, Any]:
    """Worker side: serialise one result exactly, or raise :class:`TransferRefused` naming its kind.

    ``saved_as`` names the handle for ``save()`` results; a trailing
    expression value (``saved_as=None``) of an unknown kind comes back as a
    bounded repr for the model to read instead of an error. A table or array
    over ``max_bytes`` is refused naming the limit before anything is written.
    """
    import warnings

    what = f"save({saved_as!r}, ...)" if saved_as is not None else "the result"
    kind = _table_kind(value)
    base = os.path.join(directory, f"out_{tag}")
    if kind is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = _to_table(value, kind, what)
        _check_size(table.nbytes, max_bytes, what)
        if _CHANNEL["sock"] is not None:
            return _send_sealed(_arrow_to(table), {"kind": "arrow", "shape": kind})
        _write_arrow(table, base + ".arrow")
        return {"kind": "arrow", "shape": kind, "file": os.path.basename(base) + ".arrow"}
    if _is_plain_array(value):
        _check_size(value.nbytes, max_bytes, what)
        if _CHANNEL["sock"] is not None:
            return _send_sealed(_npy_to(value, what), {"kind": "npy"})
        _write_npy(value, base + ".npy")
        return {"kind": "npy", "file": os.path.basename(base) + ".npy"}
    try:
        return _tagged(value, what)
    except TransferRefused:
        if saved_as is not None:
            raise
        return {"kind": "repr", "type": f"{type(value).__module__}.{type(value).__qualname__}"[:200],
                "text": safe_repr(value)}


def _check_size(nbytes: int, max_bytes: int, what: str) -> None:
    if nbytes > max_bytes:
        raise TransferRefused(f"{what} is {nbytes / 2**20:.1f} MiB, over the {max_bytes / 2**20:.1f} MiB result "
                              "limit (result_max_bytes); aggregate or filter it in the sandbox first")


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
        data_type = data_type.storage_type
    name = str(data_type)
    if name.startswith(("run_end_encoded", "string_view", "binary_view", "list_view", "large_list_view")):
        raise ProtocolError(f"Arrow type {name} is not accepted in results")
    for index in range(getattr(data_type, "num_fields", 0)):
        _check_schema_types(pa, data_type.field(index).type)


# -- Arrow IPC metadata walk (before any decoding) ------------------------------------------

_MESSAGE_DICTIONARY_BATCH = 2
_MESSAGE_RECORD_BATCH = 3


class _Flat:
    """The few FlatBuffers reads the Arrow ``Message`` metadata needs, each bounds-checked."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def _unpack(self, fmt: str, pos: int) -> Any:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.data):
            raise ProtocolError("Arrow message metadata points outside itself")
        return struct.unpack_from(fmt, self.data, pos)[0]

    def root(self) -> int:
        return self._unpack("<I", 0)

    def field(self, table: int, index: int) -> int | None:
        """Absolute position of field ``index`` of the table at ``table``, or None when absent."""
        vtable = table - self._unpack("<i", table)
        vsize = self._unpack("<H", vtable)
        slot = 4 + 2 * index
        if slot + 2 > vsize:
            return None
        offset = self._unpack("<H", vtable + slot)
        return table + offset if offset else None

    def ref(self, pos: int) -> int:
        return pos + self._unpack("<I", pos)

    def vector(self, pos: int) -> tuple[int, int]:
        start = self.ref(pos)
        return start + 4, self._unpack("<I", start)


def _record_batch_sizes(flat: _Flat, batch: int, body_size: int) -> tuple[int, int]:
    """(buffer bytes, rows x columns) of one RecordBatch table; refuses compression and stray buffers."""
    if flat.field(batch, 3) is not None:
        raise ProtocolError("compressed Arrow buffers are not accepted in results")
    length_pos = flat.field(batch, 0)
    rows = flat._unpack("<q", length_pos) if length_pos is not None else 0
    nodes_total = 0
    nodes_pos = flat.field(batch, 1)
    if nodes_pos is not None:
        start, count = flat.vector(nodes_pos)
        for i in range(count):
            node_length = flat._unpack("<q", start + 16 * i)
            if node_length < 0:
                raise ProtocolError("negative Arrow node length")
            nodes_total += node_length
    if rows < 0:
        raise ProtocolError("negative Arrow batch length")
    total = 0
    buffers_pos = flat.field(batch, 2)
    if buffers_pos is not None:
        start, count = flat.vector(buffers_pos)
        for i in range(count):
            offset = flat._unpack("<q", start + 16 * i)
            length = flat._unpack("<q", start + 16 * i + 8)
            if offset < 0 or length < 0 or offset + length > body_size:
                raise ProtocolError("an Arrow buffer lies outside its message body")
            total += length
    return total, max(nodes_total, rows)


def check_ipc_file(buffer: Any, max_bytes: int) -> int:
    """Walk an Arrow IPC file's messages without decoding them; return the decoded size estimate.

    Refuses compressed bodies, buffers outside their body, and a decoded
    size (buffers + :data:`ROW_MATERIALISE_BYTES` per row and column) over
    ``max_bytes`` — the bound holds before anything is materialised.
    """
    pa = _pa()
    if buffer.size < 16 or buffer[:6].to_pybytes() != b"ARROW1" or buffer[-6:].to_pybytes() != b"ARROW1":
        raise ProtocolError("not an Arrow IPC file")
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(buffer.slice(8)))
    estimate = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        meta = message.metadata.to_pybytes()
        flat = _Flat(meta)
        root = flat.root()
        header_type_pos = flat.field(root, 1)
        header_type = flat._unpack("<B", header_type_pos) if header_type_pos is not None else 0
        header_pos = flat.field(root, 2)
        body_size = message.body.size if message.body is not None else 0
        if header_type in (_MESSAGE_RECORD_BATCH, _MESSAGE_DICTIONARY_BATCH):
            if header_pos is None:
                raise ProtocolError("Arrow batch message without a header")
            table = flat.ref(header_pos)
            if header_type == _MESSAGE_DICTIONARY_BATCH:
                data_pos = flat.field(table, 1)
                if data_pos is None:
                    raise ProtocolError("Arrow dictionary batch without data")
                table = flat.ref(data_pos)
            buffers, cells = _record_batch_sizes(flat, table, body_size)
            estimate += buffers + cells * ROW_MATERIALISE_BYTES
            if estimate > max_bytes:
                raise ProtocolError(f"the result would decode to more than the {max_bytes}-byte result limit "
                                    f"({max_bytes / 2**20:.0f} MiB)")
        elif header_type not in (1,):  # 1 = Schema; tensors and anything else are refused
            raise ProtocolError(f"Arrow message type {header_type} is not accepted in results")
    return estimate


def receive_sealed(sock: Any, limit: int) -> dict[int, list[int]]:
    """Kernel side: the descriptors waiting on the result socket, by slot (at most ``limit`` slots; extras closed).

    One slot holds the 1 to :data:`STRIPE_MAX_PARTS` parts of one result, in order.

    ``sock`` must be non-blocking (Python 3.11's ``recv_fds`` ignores its
    flags); the worker sends the descriptors before its reply frame, so they
    are queued by the time the reply has been read.
    """
    import socket

    found: dict[int, int] = {}
    for _ in range(limit * 2 + 2):
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 256, STRIPE_MAX_PARTS + 1, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:  # the worker was stopped and its socket closed: nothing to collect
            break
        if not data and not fds:
            break
        try:
            slot = json.loads(data)["slot"]
        except (ValueError, KeyError, TypeError):
            slot = None
        if type(slot) is int and 1 <= len(fds) <= STRIPE_MAX_PARTS and slot not in found and len(found) < limit:
            found[slot] = list(fds)
        else:
            for fd in fds:
                os.close(fd)
    return found


def _npy_from_buffer(mm: Any, size: int) -> Any:
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


def read_sealed_result(desc: dict[str, Any], fds: int | list[int], max_bytes: int = RESULT_MAX_BYTES,
                       stages: dict[str, float] | None = None) -> Any:
    """Kernel side: rebuild a result from its sealed memory file(s) without copying (sealed = immutable).

    ``fds`` is one descriptor or the parts of a striped result in order
    (:func:`harness_magic.core.execution.sandbox.sealed.map_sealed` joins them).

    ``stages``, when given, receives the seconds each step took (``map``,
    then those of :func:`_decode_arrow_result`); ``benchmarks/bench_sandbox.py`` prints them.
    """
    started = time.perf_counter()
    mm, size = map_sealed([fds] if isinstance(fds, int) else fds, max_bytes)
    _lap(stages, "map (check seals, sizes; read-only mmap of each part)", started)
    if desc.get("kind") == "npy":
        return _npy_from_buffer(mm, size)
    if desc.get("shape") not in ("frame", "series", "table"):
        raise ProtocolError("malformed table descriptor")
    # zero-copy over the sealed mapping where pandas allows
    return _decode_arrow_result(_pa().py_buffer(mm), desc["shape"], max_bytes, stages)


def _lap(stages: dict[str, float] | None, name: str, started: float) -> float:
    now = time.perf_counter()
    if stages is not None:
        stages[name] = stages.get(name, 0.0) + now - started
    return now


def _decode_arrow_result(buffer: Any, shape: str, max_bytes: int, stages: dict[str, float] | None = None) -> Any:
    """Validate an Arrow IPC result buffer the worker cannot change any more, then rebuild the value.

    Bounds (compression, buffer extents, decoded size) are checked before anything is read;
    anything malformed is a :class:`ProtocolError`, never a crash. Full validation reads
    metadata, offsets, bitmaps and dictionary indices, not the values of fixed-width
    columns: well under a millisecond per GiB of numbers (strings are checked for UTF-8).
    """
    pa = _pa()
    try:
        started = time.perf_counter()
        check_ipc_file(buffer, max_bytes)
        started = _lap(stages, "walk Arrow metadata (bounds, compression, size)", started)
        register_pandas_arrow_types()
        table = pa.ipc.open_file(buffer).read_all()
        started = _lap(stages, "open IPC file (zero-copy)", started)
        for field in table.schema:
            _check_schema_types(pa, field.type)
        table.validate(full=True)
        started = _lap(stages, "validate schema, offsets, UTF-8", started)
        value = _from_table(table, shape)
        _lap(stages, "to pandas (split blocks, zero-copy)", started)
        return value
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything malformed is the worker's fault
        raise ProtocolError(f"invalid Arrow result: {type(exc).__name__}: {exc}") from exc


def read_result(desc: Any, directory: str, max_bytes: int = RESULT_MAX_BYTES,
                sealed: dict[int, Any] | None = None) -> Any:
    """Kernel side: rebuild a result from its descriptor, validating type, size and content.

    A descriptor with ``fd_slot`` names sealed memory files from ``sealed``
    (see :func:`receive_sealed`: a descriptor or a list of parts per slot);
    otherwise ``file`` names a scratch file.
    """
    if isinstance(desc, dict) and "fd_slot" in desc:
        slot = desc["fd_slot"]
        if sealed is None or type(slot) is not int or slot not in sealed:
            raise ProtocolError("result names a memory file the worker did not send")
        return read_sealed_result(desc, sealed[slot], max_bytes)
    if not isinstance(desc, dict) or desc.get("kind") not in ("arrow", "npy", "tagged", "repr"):
        raise ProtocolError("malformed result descriptor")
    kind = desc["kind"]
    if kind == "tagged":
        try:
            return decode_tagged(desc.get("value"))
        except TaggedError as exc:
            raise ProtocolError(f"malformed tagged value: {exc}") from exc
    if kind == "repr":
        if not isinstance(desc.get("text"), str) or not isinstance(desc.get("type"), str):
            raise ProtocolError("malformed repr descriptor")
        return RemoteObject(desc["type"][:200], desc["text"][:40_000])
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
        return _decode_arrow_result(buffer, desc["shape"], max_bytes)  # over our private copy: safe to share
    finally:
        os.close(fd)
