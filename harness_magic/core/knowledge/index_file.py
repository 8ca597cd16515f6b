"""The index's SQLite file: opened only when every file of it is ours.

Contract: :func:`open_owned` returns a connection to ``path`` (WAL journal)
after checking ``path`` and its ``-wal``/``-shm``/``-journal``
(:data:`INDEX_FILE_SUFFIXES`): a file that is a link, owned by another user or
writable by group or others is moved aside (``<name>.untrusted-<time>``) and a
fresh file is created (mode 0600), with a note saying so; it is never read.
When such a file cannot be moved aside, or appears while the index is opened,
``ValueError`` names it. An index another user can write could carry chunks
for files that do not exist (planted to rank first and be cited), or a
``-wal`` that rewrites ours on open. The index is derived data, written without
fsync: every open runs SQLite's quick check, and a damaged index is moved aside
(``<name>.damaged-<time>``) and rebuilt, with a note.
"""

from __future__ import annotations

import os
import sqlite3
import stat as stat_module
import time
from pathlib import Path

__all__ = ["open_owned", "not_ours", "damage", "INDEX_FILE_SUFFIXES", "PAGE_BYTES"]

INDEX_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")
"""The SQLite files of one index: each must be ours before the index is opened."""
PAGE_BYTES = 16 * 1024
"""SQLite's page size for a new index file (an existing one keeps its own): a full index of 6.7 MB in
10,000 chunks writes ~14 MB, which 4 KiB pages (SQLite's default) write in four times the page writes and
B-tree splits: its chunk rows, full-text rows and commit took 164 ms of CPU against 171 ms at 4 KiB (through the
rollback journal; 169 against 197 ms in WAL), and a keyword search the same time (0.63 against 0.65 ms at the
median, 300 queries: ``bench_docs.py``)."""


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


def _move_aside(path: str, tag: str, why: str) -> str:
    """Rename every file of the index at ``path`` to ``<path>.<tag>-<time><suffix>``; returns the main file's
    new name. ``ValueError`` (saying ``why`` the file is not used) when a rename fails."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in INDEX_FILE_SUFFIXES:
        name = path + suffix
        if not os.path.lexists(name):
            continue
        try:
            os.rename(name, f"{path}.{tag}-{stamp}{suffix}")
        except OSError as exc:
            raise ValueError(f"index {name!r} {why}, so it is not used; moving it aside failed "
                             f"({exc.strerror or exc}): pass an index_path in a directory you own") from None
    return f"{path}.{tag}-{stamp}"


def _connect(path: str) -> sqlite3.Connection:
    """A connection to ``path``, created mode 0600 when missing; WAL journal, no fsync (the index is derived data)."""
    try:  # created by us, readable by us only; SQLite gives its -wal and -shm the same mode
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.execute(f"PRAGMA page_size={PAGE_BYTES}")  # a new (empty) file only: it must come before WAL
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")  # derived data: a power loss may damage it; damage() finds it on open
    except BaseException:
        db.close()
        raise
    return db


def damage(db: sqlite3.Connection) -> str | None:
    """What SQLite's quick check finds wrong with the open index ``db`` (its pages and b-trees), or None when
    it is sound. Run on every open, ~1.5 ms a MB: an index written without fsync may be torn by a power loss."""
    try:
        row = db.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return None if row is not None and row[0] == "ok" else str(row[0] if row else "no answer")


def open_owned(db_path: Path) -> tuple[sqlite3.Connection, list[str]]:
    """(a connection to ``db_path``, notes for people) after making sure every file of the index is ours and sound.

    An index file another user owns or may write could carry chunks for files that do not
    exist (planted to rank first and be cited), or a ``-wal`` that rewrites ours on open.
    Such files are moved aside (``<name>.untrusted-<time>``) and the index is rebuilt; when
    they cannot be moved, the index is refused naming the file.

    The index is derived data, a cache of the files: it is written without any fsync
    (``synchronous=OFF``: a refresh's commit waits on no disk), so an OS crash or a power loss
    may tear it. Every open runs SQLite's quick check (:func:`damage`); a damaged index (or a
    file that is not a database) is moved aside (``<name>.damaged-<time>``) and rebuilt, with a note.
    """
    path = str(db_path)
    notes: list[str] = []
    problems = [(path + suffix, why) for suffix in INDEX_FILE_SUFFIXES
                if (why := not_ours(path + suffix)) is not None]
    if problems:
        aside = _move_aside(path, "untrusted", problems[0][1])
        notes.append(f"index {problems[0][0]!r} {problems[0][1]}: not trusted, moved aside to "
                     f"{aside}{problems[0][0][len(path):]!s} and rebuilt")
    try:
        db = _connect_ours(path)
    except sqlite3.DatabaseError as exc:  # the header itself is not SQLite's ("file is not a database")
        found = str(exc)
    else:
        checked = damage(db)
        if checked is None:
            return db, notes
        db.close()
        found = checked
    aside = _move_aside(path, "damaged", f"is damaged ({found})")
    notes.append(f"index {path!r} was damaged ({found}): moved aside to {aside} and rebuilt")
    return _connect_ours(path), notes


def _connect_ours(path: str) -> sqlite3.Connection:
    """:func:`_connect`, then every file of the index checked ours again: ``ValueError`` for one planted
    between the first check and the open."""
    db = _connect(path)
    for suffix in INDEX_FILE_SUFFIXES:
        why = not_ours(path + suffix)
        if why is not None:
            db.close()
            raise ValueError(f"index {path + suffix!r} {why} (it appeared while the index was opened): "
                             "pass an index_path in a directory only you can write")
    return db
