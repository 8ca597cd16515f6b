"""The local Spark server's class archive: Spark's classes, parsed and verified once, mapped by every later JVM.

Java's class-data sharing maps classes from an archive instead of reading, parsing and verifying them from
Spark's ~250 jars at each start. Measured on the 2-core machine: a local server listened after 2.3 s of JVM
CPU instead of 4.5 (1.6 s of wall time instead of 3.8) and had answered its first queries after 4.0 s instead
of 8.1. Contract:

- **One archive per JVM, classpath and options** (:func:`archive_key`): the ``java`` binary and the JDK's
  class image, each jar's name, size and modification time, and the JVM options before the main class. A
  changed JDK, pyspark or option gets a new archive; the JVM also checks its own build and the classpath's
  jars when it maps one, and starts without it (never fails) on any difference.
- **Where:** the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``, then
  ``harness_magic/spark-classes/<key>.jsa``), a 0700 folder; the newest :data:`ARCHIVES_KEPT` are kept
  (each is ~180 MB).
- **Made** by the first server started without one (:meth:`ArchivePlan.making`; one server at a time, which
  holds a ``<key>.making`` marker): its JVM writes the archive into its own private directory as it exits
  (``-XX:ArchiveClassesAtExit``), which it does only when the kernel asked it to stop (``stop()``, the
  connector closed, the interpreter exiting): the supervisor then waits up to :data:`ARCHIVE_DUMP_GRACE_S`
  instead of the usual grace and, if the JVM ended by itself, moves the file into the folder read-only and
  atomically (a private temporary file renamed over the name). A kernel that dies or is signalled makes
  none: its JVM is stopped as before. The first stop takes ~10 s longer (the archive is written then).
- **Used** only when it is a regular file (not a link) owned by this user and writable by no one else, in a
  folder of this user's that no one else may write (:func:`usable_archive`); the JVM gets read access to that
  one file. Anything else is not used and is replaced by the next archive made. An archive the JVM did not map
  (damaged, or made for another JDK build) is removed once the server listens (:func:`drop_if_refused`), so the
  next server makes a good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from harness_magic.core.confinement.owned_dirs import user_cache_folder

__all__ = ["ARCHIVES_KEPT", "ARCHIVE_DUMP_GRACE_S", "ArchivePlan", "archive_folder", "archive_key",
           "drop_if_refused", "plan_archive", "usable_archive"]

ARCHIVES_KEPT = 3
"""Archives kept in the folder, newest first: one per JVM setup in use (a test suite's quicker-compiling JVM and
the default one), and the one before an upgrade. Older ones are removed when a new one is about to be made."""
ARCHIVE_DUMP_GRACE_S = 90.0
"""How long a JVM making the archive may take to exit once asked to stop: writing ~180 MB of classes takes
~10 s on an idle core, several times that on a loaded machine. Past it the JVM is killed and nothing is kept."""
ARCHIVE_MIN_BYTES = 1 << 20
"""A file smaller than this is not an archive of Spark's classes (a JVM killed as it began writing)."""
ARCHIVE_SUFFIX = ".jsa"
MAKING_SUFFIX = ".making"
MAKING_STALE_S = 600.0
"""A ``.making`` marker older than this is taken over even if its process lives (a kernel idle for hours with its
server never stopped makes no archive; another may)."""
_MADE_NAME = "classes.jsa"
"""The file the JVM writes in its private ``tmp`` folder."""
_PER_RUN_OPTIONS = ("-Djava.io.tmpdir=", "-Duser.home=")
"""JVM options that name the run's private directory: not part of the key (they differ at every start)."""


def archive_folder(environ: Mapping[str, str] | None = None) -> Path:
    """The user's archive folder (not created here)."""
    return user_cache_folder(environ) / "spark-classes"


def _identity(path: str) -> list[object]:
    info = os.stat(path)
    return [os.path.realpath(path), info.st_size, info.st_mtime_ns]


def archive_key(java: str, java_home: str, jars: Sequence[str], options: Sequence[str]) -> str:
    """A name for the archive of this JVM (``java`` and its ``lib/modules`` image), these ``jars`` (each one's
    name, size and modification time, in classpath order) and the JVM ``options`` before the main class."""
    modules = os.path.join(java_home, "lib", "modules")
    identity = {
        "java": _identity(java),
        "modules": _identity(modules) if os.path.exists(modules) else None,
        "jars": [_identity(jar) for jar in jars],
        "options": [option for option in options if not option.startswith(_PER_RUN_OPTIONS)],
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def _private_folder(path: Path) -> bool:
    """A real folder owned by this user that no one else may write."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def usable_archive(path: Path) -> bool:
    """Whether ``path`` may be handed to the JVM: a regular file, not a link, owned by this user, writable by no
    one else, at least :data:`ARCHIVE_MIN_BYTES`, in a private folder (:func:`_private_folder`)."""
    if not _private_folder(path.parent):
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022
            and info.st_size >= ARCHIVE_MIN_BYTES)


@dataclass(frozen=True)
class ArchivePlan:
    """What one server does with the archive: map ``use``, or make one (written at ``made``, kept at ``keep``)."""

    use: str | None = None
    made: str | None = None
    keep: str | None = None
    marker: str | None = None
    """While making: the folder's ``<key>.making`` file, so that servers starting meanwhile make no second copy;
    the supervisor removes it however the JVM ends."""

    @property
    def making(self) -> bool:
        return self.made is not None

    def jvm_options(self) -> list[str]:
        """The JVM options for this plan (none when the archive is neither used nor made)."""
        if self.use is not None:
            return [f"-XX:SharedArchiveFile={self.use}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        if self.made is not None:  # the dump's skipped classes (signed jars...) stay out of the server's log
            return [f"-XX:ArchiveClassesAtExit={self.made}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
        return []


def _prune(folder: Path, keep: int) -> None:
    """Remove all but the newest ``keep - 1`` archives (room for the one about to be made) and stale parts."""
    try:
        entries = [entry for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False)]
    except OSError:
        return
    archives = sorted((e for e in entries if e.name.endswith(ARCHIVE_SUFFIX)), key=lambda e: e.stat().st_mtime_ns,
                      reverse=True)
    for entry in archives[max(keep - 1, 0):]:
        try:
            os.unlink(entry.path)
        except OSError:
            pass


def plan_archive(key: str, private_tmp: str, environ: Mapping[str, str] | None = None) -> ArchivePlan:
    """The archive plan of a server whose JVM has archive ``key`` and writes into ``private_tmp``: use the
    archive when :func:`usable_archive`, else make one (creating the folder 0700; an existing folder that is
    not private to this user gets no archive at all)."""
    folder = archive_folder(environ)
    target = folder / f"{key}{ARCHIVE_SUFFIX}"
    if usable_archive(target):
        return ArchivePlan(use=str(target))
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return ArchivePlan()
    if not _private_folder(folder):
        return ArchivePlan()
    marker = folder / f"{key}{MAKING_SUFFIX}"
    if not _claim(marker):
        return ArchivePlan()  # another server is making this archive: this one starts as before
    _prune(folder, ARCHIVES_KEPT)
    return ArchivePlan(made=os.path.join(private_tmp, _MADE_NAME), keep=str(target), marker=str(marker))


def _claim(marker: Path) -> bool:
    """Take the right to make an archive: create ``marker`` (holding this process's pid) unless a live process
    made it less than :data:`MAKING_STALE_S` ago. A marker left by a process that is gone, or an old one, is
    taken over."""
    for _ in range(2):
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            if _held(marker):
                return False
            try:
                os.unlink(marker)
            except OSError:
                return False
            continue
        except OSError:
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return True
    return False


def _held(marker: Path) -> bool:
    """Whether ``marker`` is a regular file of ours, younger than :data:`MAKING_STALE_S`, naming a live process."""
    try:
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size > 32:
            return False
        if time.time() - info.st_mtime > MAKING_STALE_S:
            return False
        with open(marker, "rb") as handle:
            pid = int(handle.read(32) or b"0")
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except (OSError, ValueError):  # gone, unreadable or not a pid: not held
        return False
    return True


def drop_if_refused(plan: ArchivePlan, jvm_pid: int) -> bool:
    """After the JVM started with ``plan.use``: remove that archive if the JVM did not map it (the JVM ignores an
    archive that is damaged or does not match it, silently). Only when the JVM's ``/proc/PID/maps`` can be read
    (a JVM another user's rules made unreadable keeps the archive). Whether it was removed."""
    if plan.use is None:
        return False
    try:
        with open(f"/proc/{jvm_pid}/maps", encoding="utf-8", errors="replace") as handle:
            maps = handle.read()
    except OSError:
        return False
    if not maps or plan.use in maps:
        return False
    try:
        os.unlink(plan.use)
    except OSError:
        return False
    return True
