"""A read-only file system for DuckDB: configured files, opened ``O_RDONLY``, under fixed names.

DuckDB's own Parquet reader is much faster and leaner than scanning an Arrow
dataset from Python, but it needs file access, and with file access comes
``COPY ... TO``. So the engine gets none of the real file system: the
connection runs with ``enable_external_access = false`` and its
``allowed_paths`` are exactly the URLs of this file system
(``harness-ro-<id>://<view>/<n>.<suffix>``), registered on that connection
only. Through it, DuckDB can:

* open a configured file for reading: the file is opened with ``os.open(path,
  O_RDONLY)`` and read with ``pread`` (a descriptor the OS will not write
  through, whoever the process runs as);
* list, stat and read nothing else: unknown names are ``FileNotFoundError``;
* never write, create, rename or delete: every such call raises
  ``PermissionError`` naming the path, before any file is touched.

Reads are positional (each thread keeps its own offset), so DuckDB's
parallel readers sharing one handle never see each other's seeks.
"""

from __future__ import annotations

import datetime as _dt
import io
import itertools
import os
import threading
from pathlib import Path
from typing import Any

from fsspec import AbstractFileSystem

__all__ = ["ReadOnlyFiles"]

_SERIAL = itertools.count(1)
"""Distinguishes the protocol of every instance (one per engine), so two engines never share names."""


class _PositionalFile(io.RawIOBase):
    """A file opened ``O_RDONLY``; ``read`` uses ``pread`` at this thread's offset."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._size = os.fstat(self._fd).st_size
        self._where = threading.local()
        self.name = str(path)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return getattr(self._where, "pos", 0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        # DuckDB seeks before every read, holding the GIL: no more work here than the answer needs
        if whence == io.SEEK_SET:
            base = 0
        elif whence == io.SEEK_CUR:
            base = self.tell()
        elif whence == io.SEEK_END:
            base = self._size
        else:
            raise ValueError(f"seek whence must be 0, 1 or 2 (SEEK_SET, SEEK_CUR, SEEK_END), got {whence!r}")
        pos = self._where.pos = max(0, base + offset)
        return pos

    def read(self, size: int | None = -1) -> bytes:
        pos = self.tell()
        if size is None or size < 0:
            size = max(0, self._size - pos)
        data = os.pread(self._fd, size, pos)
        self._where.pos = pos + len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def write(self, data: Any) -> int:
        raise PermissionError(f"{self.name} is read-only")

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class ReadOnlyFiles(AbstractFileSystem):
    """Maps ``<view>/<n><suffix>`` names to configured files; reading only (see module doc)."""

    cachable = False  # fsspec would otherwise hand every engine the first instance

    def __init__(self, files: dict[str, Path]) -> None:
        self.protocol = f"harness-ro-{next(_SERIAL)}"
        super().__init__()
        self._files = {name: Path(path) for name, path in files.items()}

    def url(self, name: str) -> str:
        """The URL DuckDB reads ``name`` by."""
        return f"{self.protocol}://{name}"

    def urls(self) -> list[str]:
        return [self.url(name) for name in self._files]

    def _name(self, path: Any) -> str:
        text = str(path)
        prefix = self.protocol + "://"
        return text[len(prefix):] if text.startswith(prefix) else text

    def _path(self, path: Any) -> Path:
        name = self._name(path)
        if name not in self._files:
            raise FileNotFoundError(f"{path}: not a configured file")
        return self._files[name]

    def _strip_protocol(self, path: Any) -> str:
        return self._name(path)

    # -- reading --------------------------------------------------------------------------------

    def _open(self, path: Any, mode: str = "rb", **kwargs: Any) -> Any:
        if mode != "rb":
            raise PermissionError(f"{path} is read-only (mode {mode!r} refused)")
        return _PositionalFile(self._path(path))

    def info(self, path: Any, **kwargs: Any) -> dict[str, Any]:
        real = self._path(path)
        return {"name": self._name(path), "size": real.stat().st_size, "type": "file"}

    def modified(self, path: Any) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(self._path(path).stat().st_mtime, tz=_dt.timezone.utc)

    def ls(self, path: Any, detail: bool = True, **kwargs: Any) -> list[Any]:
        name = self._name(path).rstrip("/")
        found = [n for n in self._files if n == name or n.startswith(name + "/") or not name]
        return [self.info(n) for n in found] if detail else found

    # -- everything else is refused ---------------------------------------------------------------

    def _refuse(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"{path}: the configured files are read-only")

    rm_file = _rm = rm = mv = cp_file = copy = mkdir = makedirs = rmdir = touch = pipe_file = put_file = _refuse
