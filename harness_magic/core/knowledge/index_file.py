"""The index's SQLite file: opened only when every file of it is ours.

Contract: :func:`open_owned` returns a connection to ``path`` (WAL journal)
after checking ``path`` and its ``-wal``/``-shm``/``-journal``
(:data:`INDEX_FILE_SUFFIXES`): a file that is a link, owned by another user or
writable by group or others is moved aside (``<name>.untrusted-<time>``) and a
fresh file is created (mode 0600), with a note saying so; it is never read.
When such a file cannot be moved aside, or appears while the index is opened,
``ValueError`` names it. An index another user can write could carry chunks
for files that do not exist (planted to rank first and be cited), or a
``-wal`` that rewrites ours on open.
"""

from __future__ import annotations

import os
import sqlite3
import stat as stat_module
import time
from pathlib import Path

__all__ = ["open_owned", "not_ours", "INDEX_FILE_SUFFIXES"]

INDEX_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")
"""The SQLite files of one index: each must be ours before the index is opened."""


def not_ours(path: str) -> str | None:
    """Why the index file ``path`` cannot be trusted, or None (also when it does not exist)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat_module.S_ISREG(info.st_mode):
        return "is not a plain file (a link or another kind)"
    if info.st_uid != os.geteuid():
        return f"is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    if info.st_mode & 0o022:
        return f"is writable by group or others (mode {stat_module.S_IMODE(info.st_mode):o})"
    return None


def open_owned(db_path: Path) -> tuple[sqlite3.Connection, list[str]]:
    """(a connection to ``db_path``, notes for people) after making sure every file of the index is ours.

    An index file another user owns or may write could carry chunks for files that do not
    exist (planted to rank first and be cited), or a ``-wal`` that rewrites ours on open.
    Such files are moved aside (``<name>.untrusted-<time>``) and the index is rebuilt; when
    they cannot be moved, the index is refused naming the file.
    """
    path = str(db_path)
    notes: list[str] = []
    problems = [(path + suffix, why) for suffix in INDEX_FILE_SUFFIXES
                if (why := not_ours(path + suffix)) is not None]
    if problems:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for suffix in INDEX_FILE_SUFFIXES:
            name = path + suffix
            if not os.path.lexists(name):
                continue
            aside = f"{path}.untrusted-{stamp}{suffix}"
            try:
                os.rename(name, aside)
            except OSError as exc:
                raise ValueError(f"index {name!r} {problems[0][1]}, so it is not used; moving it aside failed "
                                 f"({exc.strerror or exc}): pass an index_path in a directory you own") from None
        notes.append(f"index {problems[0][0]!r} {problems[0][1]}: not trusted, moved aside to "
                     f"{path}.untrusted-{stamp}{problems[0][0][len(path):]!s} and rebuilt")
    try:  # created by us, readable by us only; SQLite gives its -wal and -shm the same mode
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # the index is a rebuildable cache: no fsync per file
    for suffix in INDEX_FILE_SUFFIXES:  # a file planted between the check and the open
        why = not_ours(path + suffix)
        if why is not None:
            db.close()
            raise ValueError(f"index {path + suffix!r} {why} (it appeared while the index was opened): "
                             "pass an index_path in a directory only you can write")
    return db, notes
