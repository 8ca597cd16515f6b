"""The kernel's side of the worker boundary: inputs written for the worker, results checked and rebuilt.

Inputs: :func:`write_input` writes a table or array as read-only files (mode
0444) in the session's input directory, striped over one file per core when
large; other values travel inline as tagged JSON.

Results: a worker's tables and arrays arrive as sealed memory files
(:func:`receive_sealed`, :func:`read_sealed_result`: seals, type and sizes
checked, mapped read-only without a copy since the worker can no longer change
them) or as scratch files (:func:`read_result`: opened without following
links, a regular file within the size cap, copied into our memory). Either way
the Arrow message metadata is walked before anything is decoded
(:func:`check_ipc_file`: no compression, every buffer inside its body, decoded
size under the cap), then the data is validated in full. ``.npy`` loads with
``allow_pickle=False``. Anything malformed is a :class:`ProtocolError`, never
a crash; nothing is unpickled or evaluated.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import time
from typing import Any

from harness_magic.core.cache.codec import TaggedError, decode_tagged
from harness_magic.core.cache.frames import register_pandas_arrow_types
from harness_magic.core.execution.sandbox.protocol import ProtocolError, RemoteObject
from harness_magic.core.execution.sandbox.sealed import STRIPE_MAX_PARTS, map_sealed, part_layout, stripe_count, \
    usable_cpus, write_striped
from harness_magic.core.execution.sandbox.transfer_codec import RESULT_MAX_BYTES, arrow_writer, from_table, \
    is_plain_array, load_pyarrow, npy_from_buffer, npy_writer, table_kind, tagged_descriptor, to_table

__all__ = [
    "write_input",
    "receive_sealed",
    "read_result",
    "read_sealed_result",
    "check_ipc_file",
    "ROW_MATERIALISE_BYTES",
]

ROW_MATERIALISE_BYTES = 8
"""Bytes pandas may allocate per row and column beyond the Arrow buffers (object pointers, codes)."""

_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}$")
"""A result file name the worker may give: one plain name in scratch, never a path."""

_ALLOWED_EXTENSIONS = {"pandas.period", "pandas.interval"}
"""Arrow extension types the kernel accepts back (registered by pandas, rebuilt from JSON)."""


def write_input(name: str, value: Any, directory: str, tag: str) -> dict[str, Any]:
    """Write one input for the worker; returns its descriptor. Raises :class:`TransferRefused`.

    Tables and arrays go to read-only files (mode 0444), striped over one
    file per core when large (``"parts"`` lists them; ``"file"`` is the first),
    which the worker maps back to back as one buffer.
    """
    import warnings

    kind = table_kind(value)
    base = os.path.join(directory, f"in_{tag}_{name}")
    what = f"handle {name!r}"
    if kind is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = to_table(value, kind, what)
        return {"kind": "arrow", "shape": kind, **_write_input_files(arrow_writer(table), base + ".arrow")}
    if is_plain_array(value):  # keeps Fortran order: the header records it
        return {"kind": "npy", **_write_input_files(npy_writer(value, what), base + ".npy")}
    return tagged_descriptor(value, what)


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


def receive_sealed(sock: Any, limit: int) -> dict[int, list[int]]:
    """Kernel side: the descriptors waiting on the result socket, by slot (at most ``limit`` slots; extras closed).

    One slot holds the 1 to :data:`STRIPE_MAX_PARTS` parts of one result, in order.

    ``sock`` must be non-blocking (Python 3.11's ``recv_fds`` ignores its
    flags); the worker sends the descriptors before its reply frame, so they
    are queued by the time the reply has been read.
    """
    import socket

    found: dict[int, list[int]] = {}
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
        pa = load_pyarrow()
        if desc.get("shape") not in ("frame", "series", "table"):
            raise ProtocolError("malformed table descriptor")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            buffer = pa.py_buffer(handle.read(size + 1))  # private copy: the worker cannot change it now
        if buffer.size > size:
            raise ProtocolError("result file grew while being read")
        return _decode_arrow_result(buffer, desc["shape"], max_bytes)  # over our private copy: safe to share
    finally:
        os.close(fd)


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
        return npy_from_buffer(mm, size)
    if desc.get("shape") not in ("frame", "series", "table"):
        raise ProtocolError("malformed table descriptor")
    # zero-copy over the sealed mapping where pandas allows
    return _decode_arrow_result(load_pyarrow().py_buffer(mm), desc["shape"], max_bytes, stages)


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
    pa = load_pyarrow()
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
        value = from_table(table, shape)
        _lap(stages, "to pandas (split blocks, zero-copy)", started)
        return value
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything malformed is the worker's fault
        raise ProtocolError(f"invalid Arrow result: {type(exc).__name__}: {exc}") from exc


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
    pa = load_pyarrow()
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
