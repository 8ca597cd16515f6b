"""Open a file beneath a directory without following any link, race-free.

:func:`open_beneath` resolves ``relative`` under an open directory descriptor
in one kernel call where the kernel has ``openat2(2)`` (Linux 5.6+) with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: the kernel
refuses ``..`` past the directory and every symbolic link on the way, so a
link swapped in between a check and the open cannot take the open anywhere
else. Elsewhere it walks the components itself with ``O_NOFOLLOW`` at every
step (each directory opened relative to the previous descriptor), which the
same swap cannot escape either: a component that became a link fails with
``ELOOP``/``ENOTDIR``.

The opened file must be a regular file; a file with more than one hard link
(``st_nlink > 1``) is refused unless ``allow_hardlinks`` — a hard link inside
a root can name any file on the same file system.

:func:`open_regular` and :func:`read_regular` are the one way small
configuration-like files (workspace memory, a policy file) are read: the open
never blocks and never follows a final symbolic link (``O_NONBLOCK |
O_NOFOLLOW``), ``fstat`` on the descriptor must say regular file (a FIFO
planted in the file's place cannot hang the reader, a device cannot be read
from), optionally owned by the current user and not writable by group or
others (:class:`NotOwned`), and at most ``max_bytes`` are read
(:class:`TooLarge`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from typing import Literal

__all__ = ["open_beneath", "open_regular", "read_regular", "LinkRefused", "HardLinkRefused", "NotRegularFile",
           "NotOwned", "TooLarge", "openat2_available", "SYS_OPENAT2"]

SYS_OPENAT2 = 437
"""openat2's syscall number: the same in the generic table (x86_64, aarch64, riscv64)."""
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08


class LinkRefused(PermissionError):
    """The path passes through a symbolic link, or ``..`` leaves the directory."""


class HardLinkRefused(PermissionError):
    """The file has more than one hard link and hard links are not allowed here."""


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a socket or a directory: only regular files are read."""


class NotOwned(PermissionError):
    """The file is owned by another user, or group or others may write it: its content cannot be trusted."""


class TooLarge(OSError):
    """The file holds more than the reader's limit."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_AVAILABLE: bool | None = None


def openat2_available() -> bool:
    """Whether this kernel answers openat2 (probed once)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        try:
            fd = _openat2(os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), ".",
                          os.O_PATH | os.O_CLOEXEC, close_dir=True)
            os.close(fd)
            _AVAILABLE = True
        except OSError as exc:
            _AVAILABLE = exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL)
    return _AVAILABLE


def _openat2(dir_fd: int, relative: str, flags: int, *, close_dir: bool = False) -> int:
    how = _OpenHow(flags=flags, mode=0, resolve=RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    try:
        fd = _libc.syscall(SYS_OPENAT2, dir_fd, os.fsencode(relative), ctypes.byref(how), ctypes.sizeof(how))
    finally:
        if close_dir:
            os.close(dir_fd)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), relative)
    return fd


def _components(relative: str) -> list[str]:
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise LinkRefused(errno.EXDEV, "'..' is not allowed", relative)
    return parts


def _walk_nofollow(dir_fd: int, parts: list[str], flags: int) -> int:
    current = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise LinkRefused(exc.errno, "a path component is a symbolic link", part) from None
                raise
            os.close(current)
            current = nxt
        last = parts[-1] if parts else "."
        try:
            return os.open(last, flags | os.O_NOFOLLOW, dir_fd=current)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LinkRefused(exc.errno, "the file is a symbolic link", last) from None
            raise
    finally:
        os.close(current)


def open_beneath(root: str, relative: str, *, kind: Literal["file", "directory"] = "file",
                 allow_hardlinks: bool = False, method: Literal["auto", "openat2", "nofollow"] = "auto") -> int:
    """A read-only descriptor for ``root/relative`` opened without following links.

    Raises :class:`LinkRefused` (a link or ``..`` on the way),
    :class:`HardLinkRefused`, ``FileNotFoundError``, ``IsADirectoryError``/
    ``NotADirectoryError`` when the kind differs, or another ``OSError``.
    ``method`` forces one resolution strategy (tests use both).
    """
    parts = _components(relative.replace("\\", "/"))
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    if kind == "directory":
        flags |= os.O_DIRECTORY
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        use_openat2 = method == "openat2" or (method == "auto" and openat2_available())
        if use_openat2:
            try:
                fd = _openat2(root_fd, "/".join(parts) or ".", flags)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EXDEV):
                    raise LinkRefused(exc.errno, "the path passes through a symbolic link", relative) from None
                raise
        else:
            fd = _walk_nofollow(root_fd, parts, flags)
    finally:
        os.close(root_fd)
    try:
        info = os.fstat(fd)
        if kind == "file" and not stat.S_ISREG(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", relative)
        if kind == "file" and info.st_nlink > 1 and not allow_hardlinks:
            raise HardLinkRefused(errno.EMLINK, f"the file has {info.st_nlink} hard links", relative)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike[str], *, owned: bool = False, follow_links: bool = False) -> int:
    """A read-only descriptor for the regular file at ``path``; the open never blocks and never follows a link.

    Raises ``FileNotFoundError``, :class:`LinkRefused` (the last component is a
    symbolic link, unless ``follow_links``: then the file it names is checked), :class:`NotRegularFile` (FIFO, device, socket, directory),
    :class:`NotOwned` when ``owned`` and the file belongs to another user or is
    writable by group or others, or another ``OSError``.
    """
    where = os.fspath(path)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
                     | (0 if follow_links else os.O_NOFOLLOW))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefused(exc.errno, "the file is a symbolic link", where) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, f"{_kind(info.st_mode)}, not a regular file", where)
        if owned and info.st_uid != os.geteuid():
            raise NotOwned(errno.EPERM, f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})", where)
        if owned and info.st_mode & 0o022:
            raise NotOwned(errno.EPERM, f"writable by group or others (mode {stat.S_IMODE(info.st_mode):o})", where)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], max_bytes: int, *, owned: bool = False,
                 follow_links: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` (:func:`open_regular`), at most ``max_bytes`` of them.

    Raises what :func:`open_regular` raises, and :class:`TooLarge` when the file
    holds more than ``max_bytes`` (only ``max_bytes + 1`` are ever read).
    """
    fd = open_regular(path, owned=owned, follow_links=follow_links)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(errno.EFBIG, f"over {max_bytes:,} bytes", os.fspath(path))
    return data
