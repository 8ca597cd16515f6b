"""The process tree, read from ``/proc``, for tests that check what a process started or left behind."""

from __future__ import annotations

import os


def children_of(pid: int) -> set[int]:
    """The live children of process ``pid``, whichever of its threads forked them.

    ``/proc/<pid>/task/<tid>/children`` lists only what that one thread forked, until the thread's task has
    fully exited (``Thread.join`` returns a moment earlier), so every task is read; a task that ends
    while being read is skipped.
    """
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found |= {int(p) for p in f.read().split()}
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found
