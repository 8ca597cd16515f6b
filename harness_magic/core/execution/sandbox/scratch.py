"""The session directory's housekeeping: how much scratch holds, emptying it, removing files quietly.

Used by the reply watchdog (scratch bytes count against the memory limit, and
are deleted when the worker is stopped for going over it) and by the
interpreter and its input exports (files of one call, retired exports). Every
function here ignores files that are already gone or cannot be read: it never
fails the call it cleans up after.
"""

from __future__ import annotations

import os
import shutil

__all__ = ["directory_bytes", "clear_directory", "remove_quietly", "remove_result_files"]

RESULT_FILE_PREFIX = "out_"
"""Scratch files the worker writes results to (see :func:`.transfer_worker.write_result`); removed after each call."""


def directory_bytes(root: str, max_entries: int) -> int | None:
    """Allocated bytes under ``root`` (sparse files count what they hold); None past ``max_entries``."""
    total, seen, stack = 0, 0, [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    return None
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


def clear_directory(root: str) -> None:
    """Delete everything inside ``root``, keeping ``root`` itself."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            remove_quietly(path)


def remove_quietly(path: str) -> None:
    """Unlink ``path``; a file already gone (or not removable) is left as it is."""
    try:
        os.unlink(path)
    except OSError:
        pass


def remove_result_files(scratch_dir: str) -> None:
    """Remove the result files a call left in scratch (the model's own scratch files stay)."""
    try:
        names = os.listdir(scratch_dir)
    except OSError:
        return
    for name in names:
        if name.startswith(RESULT_FILE_PREFIX):
            remove_quietly(os.path.join(scratch_dir, name))
