"""The spill directory a cache owns: created private, or accepted only if private; removed at cleanup.

Contract: :func:`check_private_directory` creates a directory with mode 0700,
or accepts an existing one only if it is a real directory (not a link) owned
by the current user and not writable by group or others; otherwise it raises
``PermissionError`` naming the directory and what is wrong. :class:`SpillDir`
creates its directory lazily (a fresh temporary one when none was asked
for), tracks the files the cache wrote there, and :meth:`SpillDir.cleanup`
removes them (and the directory, if it created it).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from harness_magic.core.confinement.owned_dirs import owned_tempdir

__all__ = ["SpillDir", "check_private_directory"]


class SpillDir:
    """The directory and files a cache owns; cleanup runs at close, GC or exit."""

    def __init__(self, path: Path | None) -> None:
        self.requested = path
        self.path: Path | None = None
        self.created = False
        self.files: set[Path] = set()

    def ensure(self) -> Path:
        """The directory, created (private) on first use."""
        if self.path is None:
            if self.requested is None:
                self.path, self.created = Path(owned_tempdir("cache")), True
            else:
                check_private_directory(self.requested)
                self.path = self.requested
        return self.path

    def forget(self, path: Path) -> None:
        """Stop tracking ``path`` and delete it."""
        self.files.discard(path)
        path.unlink(missing_ok=True)

    def cleanup(self) -> None:
        """Delete every tracked file, and the directory if this object created it."""
        for path in list(self.files):
            try:
                self.forget(path)
            except OSError:
                pass
        if self.created and self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path, self.created = None, False


def check_private_directory(path: Path) -> None:
    """Create ``path`` with mode 0700, or accept an existing one only if it is private.

    An existing directory must be a real directory (not a link), owned by the
    current user, and not writable by group or others: files another local
    user can plant there would otherwise be read back as cached values.
    Raises ``PermissionError`` naming the directory and what is wrong.
    """
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.mkdir(path, 0o700)
        return
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"spill_dir {str(path)!r} is not a plain directory (a link or a file); "
                              "use a directory you own with mode 0700, or leave spill_dir unset")
    if info.st_uid != os.geteuid():
        raise PermissionError(f"spill_dir {str(path)!r} is owned by uid {info.st_uid}, not by you "
                              f"(uid {os.geteuid()}); use a directory you own with mode 0700, or leave spill_dir unset")
    if info.st_mode & 0o022:
        raise PermissionError(f"spill_dir {str(path)!r} is writable by group or others "
                              f"(mode {stat.S_IMODE(info.st_mode):o}); chmod it to 0700, or leave spill_dir unset")

