"""The worker's side of the boundary: inputs mapped read-only, results written back exactly.

Runs inside the confined worker. :func:`read_input` attaches an input from the
session's input directory: Arrow IPC and ``.npy`` files are memory-mapped
read-only (the parts of a striped input back to back as one buffer), and a
table mapped for one call is reused by the next while its files are the same
(:func:`keep_input_tables` drops the rest). :func:`write_result` serialises a
result with the shared codec (:mod:`.transfer_codec`): tables and arrays into
sealed memory files passed over the result socket (:func:`set_result_channel`),
or into scratch files when there is no socket; values the codec does not know
come back as a bounded repr when they are a trailing expression, and are
refused when saved.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from harness_magic.core.cache.codec import decode_tagged
from harness_magic.core.cache.frames import register_pandas_arrow_types
from harness_magic.core.execution.sandbox.protocol import ProtocolError, safe_repr
from harness_magic.core.execution.sandbox.sealed import join_mapped, stripe_count, usable_cpus, write_sealed
from harness_magic.core.execution.sandbox.transfer_codec import RESULT_MAX_BYTES, TransferRefused, arrow_writer, \
    from_table, input_files, is_plain_array, load_pyarrow, npy_from_buffer, npy_writer, table_kind, \
    tagged_descriptor, to_table

__all__ = ["read_input", "keep_input_tables", "set_result_channel", "write_result"]

def _map_input(desc: dict[str, Any], directory: str) -> Any:
    """A read-only buffer over an input's file, or its parts mapped back to back."""
    pa = load_pyarrow()
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
        return from_table(_input_table(desc, directory), desc["shape"])
    if kind == "npy":
        import numpy as np

        if "parts" in desc:
            buffer = _map_input(desc, directory)
            array = npy_from_buffer(buffer, buffer.size)
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
    table = load_pyarrow().ipc.open_file(_map_input(desc, directory)).read_all()
    _INPUT_TABLES[names] = (identity, table)
    return table


def keep_input_tables(descs: Iterable[dict[str, Any]]) -> None:
    """Worker side: drop the mapped tables of inputs not in ``descs`` (the call about to run), unmapping them."""
    if not _INPUT_TABLES:
        return  # nothing mapped (most calls of a worker that was given no table)
    wanted = {tuple(input_files(desc)) for desc in descs}
    for names in [names for names in _INPUT_TABLES if names not in wanted]:
        del _INPUT_TABLES[names]


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
    kind = table_kind(value)
    base = os.path.join(directory, f"out_{tag}")
    if kind is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = to_table(value, kind, what)
        _check_size(table.nbytes, max_bytes, what)
        if _CHANNEL["sock"] is not None:
            return _send_sealed(arrow_writer(table), {"kind": "arrow", "shape": kind})
        _write_arrow(table, base + ".arrow")
        return {"kind": "arrow", "shape": kind, "file": os.path.basename(base) + ".arrow"}
    if is_plain_array(value):
        _check_size(value.nbytes, max_bytes, what)
        if _CHANNEL["sock"] is not None:
            return _send_sealed(npy_writer(value, what), {"kind": "npy"})
        _write_npy(value, base + ".npy")
        return {"kind": "npy", "file": os.path.basename(base) + ".npy"}
    try:
        return tagged_descriptor(value, what)
    except TransferRefused:
        if saved_as is not None:
            raise
        return {"kind": "repr", "type": f"{type(value).__module__}.{type(value).__qualname__}"[:200],
                "text": safe_repr(value)}


def _check_size(nbytes: int, max_bytes: int, what: str) -> None:
    if nbytes > max_bytes:
        raise TransferRefused(f"{what} is {nbytes / 2**20:.1f} MiB, over the {max_bytes / 2**20:.1f} MiB result "
                              "limit (result_max_bytes); aggregate or filter it in the sandbox first")


def _write_arrow(table: Any, path: str) -> None:
    pa = load_pyarrow()
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _write_npy(value: Any, path: str) -> None:
    import numpy as np

    with open(path, "wb") as sink:
        np.save(sink, value if type(value) is np.ndarray else np.asarray(value), allow_pickle=False)
