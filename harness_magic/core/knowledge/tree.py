"""The files under the docs roots: walked and opened beneath their root without following links.

Contract: :meth:`DocTree.walk` yields every indexable file (a known suffix, not
hidden, a regular file) under the roots, sorted, as ``(doc path, root, path
under the root, lstat)``; it never follows a link — a symbolic link is
skipped and reported, so is a file with more than one hard link unless
``allow_hardlinks`` (a hard link can name any file on the disk) — and stops
after :data:`MAX_FILES`. :meth:`DocTree.read` and :meth:`DocTree.servable`
open a file again beneath its root with
:func:`~harness_magic.core.confinement.safe_open.open_beneath` (``openat2`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``), so whatever changes after the walk
cannot lead a read elsewhere: a refusal raises ``OSError``
(:class:`~harness_magic.core.confinement.safe_open.LinkRefused`, ...).
"""

from __future__ import annotations

import os
import stat as stat_module
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from harness_magic.core.confinement.safe_open import open_beneath
from harness_magic.core.knowledge.extract import SUFFIXES

__all__ = ["DocTree", "DocRoot", "FILE_MAX_BYTES", "MAX_FILES", "HARDLINK_REASON", "READ_CHUNK_BYTES", "read_up_to"]

FILE_MAX_BYTES = 20 * 1024 * 1024
"""Larger files are skipped (and reported): business docs are small; a 1 GB log is not a doc."""
MAX_FILES = 50_000
"""Files indexed per connector; the walk stops here so a mis-pointed root cannot run away."""
READ_CHUNK_BYTES = 64 * 1024
"""Bytes asked for at a time past a file's expected size (to find its end, or what it grew by)."""
HARDLINK_REASON = "a hard link can name any file on the disk; allow_hardlinks=True indexes such files"
"""Said with every file refused for its hard links."""


@dataclass(frozen=True)
class DocRoot:
    """One docs root: its resolved directory and the name its files' doc paths start with."""

    path: Path
    prefix: str


def read_up_to(fd: int, expected: int, limit: int) -> bytes:
    """``fd``'s bytes until end of file or ``limit``, asking first for ``expected`` (its size by fstat).

    A file that grew after the fstat is read on, ``READ_CHUNK_BYTES`` at a time, up to ``limit``. The
    buffer is the file's size, not the limit's: a buffered ``read(limit)`` sets aside ``limit`` bytes
    for every file (20 MiB for a 7 KB file: twice the read and hash floor over 1,000 files).
    """
    parts: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.read(fd, min(limit - got, max(expected - got, READ_CHUNK_BYTES)))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


class DocTree:
    """The docs roots (each an existing directory with its own name); raises ``ValueError`` naming a bad root."""

    def __init__(self, roots: Sequence[str | os.PathLike], *, allow_hardlinks: bool = False) -> None:
        if isinstance(roots, (str, os.PathLike)):
            roots = [roots]
        if not roots:
            raise ValueError("the docs connector needs at least one root directory")
        self.roots: list[DocRoot] = []
        prefixes: dict[str, str] = {}
        for raw in roots:
            path = Path(raw).expanduser().resolve()
            if not path.is_dir():
                raise ValueError(f"docs root {str(raw)!r} is not a directory")
            prefix = path.name or "root"
            if prefix in prefixes:
                raise ValueError(f"docs roots {prefixes[prefix]!r} and {str(raw)!r} share the name {prefix!r}; "
                                 "source ids start with the root's name, so give them different names")
            prefixes[prefix] = str(raw)
            self.roots.append(DocRoot(path, prefix))
        self._by_prefix = {root.prefix: root for root in self.roots}
        self.allow_hardlinks = bool(allow_hardlinks)

    def walk(self, skipped: list[str]) -> Iterator[tuple[str, DocRoot, str, os.stat_result]]:
        """(id path, root, path under the root, lstat) of every indexable file, sorted.

        Links are never followed: a symbolic link is skipped (and reported), so is a file with
        more than one hard link unless ``allow_hardlinks``. The read opens the file again
        beneath its root without following links (:meth:`read`), so what changes after the
        walk cannot lead it elsewhere. Files left out are appended to ``skipped`` as ``"path: reason"``.
        """
        count = 0
        for root in self.roots:
            stack = [(root.path, "")]
            while stack:
                directory, rel_dir = stack.pop()
                try:
                    entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
                except OSError as exc:
                    skipped.append(f"{root.prefix}/{rel_dir}: {exc.strerror or exc}")
                    continue
                files = []
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    rel = f"{rel_dir}{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), rel + "/"))
                    elif os.path.splitext(entry.name)[1].lower() in SUFFIXES:  # (a name with no dot: "")
                        files.append((rel, entry))
                for rel, entry in sorted(files):
                    doc_path = f"{root.prefix}/{rel}"
                    try:
                        info = entry.stat(follow_symlinks=False)
                        if entry.is_symlink():
                            target = Path(entry.path).resolve()
                            where = ("links outside its root" if not target.is_relative_to(root.path)
                                     else "a symbolic link (links are not followed; the file it names is "
                                          "indexed under its own path)")
                            skipped.append(f"{doc_path}: {where}")
                            continue
                    except OSError as exc:
                        skipped.append(f"{doc_path}: {exc.strerror or exc}")
                        continue
                    if not stat_module.S_ISREG(info.st_mode):
                        continue
                    if info.st_nlink > 1 and not self.allow_hardlinks:
                        skipped.append(f"{doc_path}: has {info.st_nlink} hard links ({HARDLINK_REASON})")
                        continue
                    count += 1
                    if count > MAX_FILES:
                        skipped.append(f"{doc_path}: more than {MAX_FILES} files under the roots")
                        return
                    yield doc_path, root, rel, info

    def open(self, root: DocRoot, rel: str) -> int:
        """A descriptor of ``rel`` opened beneath ``root`` without following links (see :mod:`.safe_open`)."""
        return open_beneath(str(root.path), rel, allow_hardlinks=self.allow_hardlinks)

    def read(self, root: DocRoot, rel: str) -> tuple[bytes, os.stat_result]:
        """(bytes up to FILE_MAX_BYTES + 1, fstat) of one file, opened safely; OSError (LinkRefused...) otherwise."""
        fd = self.open(root, rel)
        try:
            info = os.fstat(fd)
            return read_up_to(fd, info.st_size, FILE_MAX_BYTES + 1), info
        finally:
            os.close(fd)

    def servable(self, doc_path: str) -> bool:
        """Whether ``doc_path`` names a regular file that opens beneath its root the safe way now.

        Every chunk the index serves (search hits, ``get``, ``file_chunks``) passes this first:
        one ``openat2`` and ``fstat``, a few microseconds.
        """
        prefix, _, rel = doc_path.partition("/")
        root = self._by_prefix.get(prefix)
        if root is None or not rel:
            return False
        try:
            os.close(self.open(root, rel))
        except OSError:
            return False
        return True
