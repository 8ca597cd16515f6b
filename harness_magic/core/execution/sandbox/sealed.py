"""Sealed memory files: how a result's bytes leave the worker without a safety copy (and striping both ways).

Worker side (:func:`write_sealed`): the bytes of one result are written into
one or more memory files (``memfd_create``), each then sealed against
writing, growing and shrinking. A large result is *striped*: cut at
page-aligned offsets into up to :data:`STRIPE_MAX_PARTS` files written by one
thread each. Striping exists because the copy into a memory file is bounded
by page allocation, which the kernel serialises per file (the file's inode
lock), not by memory bandwidth: two files written from two threads take half
the time of one (``benchmarks/bench_sandbox.py`` prints both).

Kernel side (:func:`map_sealed`): every part must carry all four seals, be a
regular file, and every part but the last must be a whole number of pages;
the total must fit the cap. The parts are then mapped read-only, back to back
into one reserved address range, so the reader sees one contiguous read-only
buffer — the same bytes the worker wrote, which it can no longer change.
Inputs the kernel exports are striped the same way into read-only files
(:func:`write_striped`) that the worker joins with :func:`join_mapped`.
Mapping past a file's end would fault (SIGBUS), which is why sizes are read
only after the shrink seal is verified.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import queue
import stat
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from harness_magic.core.execution.sandbox.protocol import ProtocolError

__all__ = ["STRIPE_MAX_PARTS", "STRIPE_MIN_PART_BYTES", "all_seals", "join_mapped", "map_sealed", "part_layout",
           "stripe_count", "usable_cpus", "write_sealed", "write_striped"]

STRIPE_MAX_PARTS = 4
"""Most memory files one result may use (and the kernel accepts): beyond four threads nothing was gained."""

STRIPE_MIN_PART_BYTES = 32 * 2**20
"""Smallest striped part: below this a thread's start and join cost more than the parallel copy saves."""

_PAGE = mmap.PAGESIZE
_QUEUE_DEPTH = 256
"""Writes queued per part before the producer waits (each holds a reference, not a copy, of its bytes)."""


def all_seals() -> int:
    """The seals a result file must carry: no write, no grow, no shrink, no further seal changes."""
    import fcntl

    return fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except OSError:
        return 1


def stripe_count(total: int, cpus: int) -> int:
    """How many parts a result of ``total`` bytes is cut into, given ``cpus`` usable cores."""
    return max(1, min(cpus, STRIPE_MAX_PARTS, total // STRIPE_MIN_PART_BYTES))


class _PartWriter:
    """Writes the bytes it is given, in order, at increasing offsets of one memory file (own thread if asked)."""

    def __init__(self, fd: int, threaded: bool) -> None:
        self.fd = fd
        self.offset = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        if threaded:
            self._queue = queue.Queue(_QUEUE_DEPTH)
            self._thread = threading.Thread(target=self._drain, args=(self._queue,), name="harness-result-part", daemon=True)
            self._thread.start()

    def put(self, view: memoryview) -> None:
        if self._queue is None:
            self._write(view, self.offset)
        else:
            self._queue.put((view, self.offset))
        self.offset += view.nbytes

    def _write(self, view: memoryview, offset: int) -> None:
        while view.nbytes:
            done = os.pwrite(self.fd, view, offset)
            view, offset = view[done:], offset + done

    def _drain(self, jobs: queue.Queue) -> None:
        while True:
            item = jobs.get()
            if item is None:
                return
            if self.error is None:
                try:
                    self._write(*item)
                except BaseException as exc:  # noqa: BLE001 - reported by finish()
                    self.error = exc

    def finish(self) -> None:
        if self._thread is not None and self._queue is not None:  # both set together, when threaded
            self._queue.put(None)
            self._thread.join()
        if self.error is not None:
            raise self.error


class _StripedSink:
    """A write-only file object spreading a stream of known length over page-aligned memory-file parts."""

    closed = False

    def __init__(self, fds: Sequence[int], part_size: int) -> None:
        threaded = len(fds) > 1
        self._parts = [_PartWriter(fd, threaded) for fd in fds]
        self._part_size = part_size
        self._position = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        while view.nbytes:
            index = min(self._position // self._part_size, len(self._parts) - 1)
            room = view.nbytes if index == len(self._parts) - 1 else (index + 1) * self._part_size - self._position
            piece = view[:room]
            self._parts[index].put(piece)
            self._position += piece.nbytes
            view = view[piece.nbytes:]
        return size

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def finish(self) -> None:
        errors = []
        for part in self._parts:
            try:
                part.finish()
            except BaseException as exc:  # noqa: BLE001 - every thread is joined before raising
                errors.append(exc)
        if errors:
            raise errors[0]


def part_layout(total: int, parts: int) -> tuple[int, int]:
    """``(part_size, count)`` for ``total`` bytes cut into at most ``parts`` page-aligned parts."""
    if total <= 0:
        raise ValueError(f"striped bytes need at least one byte, not {total}")
    part_size = -(-total // max(1, parts))
    part_size = -(-part_size // _PAGE) * _PAGE
    return part_size, -(-total // part_size)


def write_striped(write: Callable[[Any], None], total: int, fds: Sequence[int], part_size: int) -> None:
    """Run ``write(sink)`` (exactly ``total`` bytes) into ``fds`` cut every ``part_size`` bytes (see :func:`part_layout`).

    One writer thread per descriptor when there are several; every thread is
    joined before this returns or raises.
    """
    sink = _StripedSink(fds, part_size)
    try:
        write(sink)
    finally:
        sink.finish()
    if sink.tell() != total:
        raise RuntimeError(f"the writer wrote {sink.tell()} bytes where {total} were announced")


def write_sealed(write: Callable[[Any], None], total: int, parts: int = 1) -> list[int]:
    """Run ``write(sink)`` (exactly ``total`` bytes) into ``parts`` sealed memory files; return their descriptors.

    The caller owns the descriptors. Parts are cut at page-aligned offsets;
    fewer parts are used when ``total`` is too small to fill them.
    """
    part_size, count = part_layout(total, parts)
    fds = [os.memfd_create("harness-result", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC) for _ in range(count)]
    try:
        write_striped(write, total, fds, part_size)
        import fcntl

        for fd in fds:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, all_seals())
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


# -- kernel side ----------------------------------------------------------------------------

_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = libc
    return _libc


_MAP_FAILED = ctypes.c_void_p(-1).value
_PROT_NONE = 0
_MAP_FIXED = 0x10
_MAP_NORESERVE = 0x4000


class _JoinedMapping:
    """Parts mapped read-only back to back into one reserved range; unmapped when the last reader lets go."""

    def __init__(self, fds: Sequence[int], sizes: Sequence[int]) -> None:
        libc = _c()
        self.size = sum(sizes)
        span = -(-self.size // _PAGE) * _PAGE
        base = libc.mmap(None, span, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE,
                         -1, 0)
        if base in (None, _MAP_FAILED):
            raise ProtocolError(f"cannot reserve {span} bytes of address space for the result "
                                f"({os.strerror(ctypes.get_errno())})")
        self.address = base
        self._release = weakref.finalize(self, libc.munmap, base, span)
        offset = 0
        for fd, size in zip(fds, sizes):
            got = libc.mmap(base + offset, size, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, fd, 0)
            if got != base + offset:
                self._release()
                raise ProtocolError(f"cannot map a result part ({os.strerror(ctypes.get_errno())})")
            offset += size


def join_mapped(fds: Sequence[int], sizes: Sequence[int]) -> Any:
    """One read-only buffer over files ``fds`` of ``sizes`` (all but the last whole pages), mapped back to back.

    For files the caller trusts not to shrink (the kernel's own input
    exports); results from the worker go through :func:`map_sealed`.
    """
    import pyarrow as pa

    joined = _JoinedMapping(fds, sizes)
    return pa.foreign_buffer(joined.address, joined.size, base=joined)


def _check_part(fd: int, index: int, count: int) -> int:
    import fcntl

    what = "result memory file" if count == 1 else f"result part {index + 1} of {count}"
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as exc:
        raise ProtocolError(f"{what}: the descriptor is not a sealed memory file ({exc.strerror})") from None
    if seals & all_seals() != all_seals():
        raise ProtocolError(f"{what} is not sealed against writing, growing and shrinking")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ProtocolError(f"{what} is not a plain memory file")
    if info.st_size == 0:
        raise ProtocolError(f"{what} is empty")
    if index < count - 1 and info.st_size % _PAGE:
        raise ProtocolError(f"{what} is {info.st_size} bytes, not a whole number of {_PAGE}-byte pages")
    return info.st_size


def map_sealed(fds: Sequence[int], max_bytes: int) -> tuple[Any, int]:
    """One read-only buffer over the sealed parts ``fds`` (in order) and its size; refuses anything else.

    The buffer supports the buffer protocol read-only (numpy and pyarrow see
    it as immutable); the mapping lives as long as anything references it.
    """
    if not 1 <= len(fds) <= STRIPE_MAX_PARTS:
        raise ProtocolError(f"a result comes in 1 to {STRIPE_MAX_PARTS} memory files, not {len(fds)}")
    sizes = [_check_part(fd, index, len(fds)) for index, fd in enumerate(fds)]
    if sum(sizes) > max_bytes:
        raise ProtocolError(f"result is {sum(sizes)} bytes, over the {max_bytes}-byte result limit")
    if len(fds) == 1:
        try:
            return mmap.mmap(fds[0], sizes[0], flags=mmap.MAP_SHARED, prot=mmap.PROT_READ), sizes[0]
        except OSError as exc:  # e.g. a huge-page memory file whose size is not a whole huge page
            raise ProtocolError(f"cannot map the result memory file ({exc.strerror})") from None
    return join_mapped(fds, sizes), sum(sizes)
