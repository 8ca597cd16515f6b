"""Hand memory a process freed back to the operating system: glibc's heap and Arrow's allocator pool.

Allocators keep what a program frees for its next allocation. glibc keeps free pages inside its heap, and after
freeing a large block it raises its mmap threshold, so a later frame's columns live on the heap and stay resident
once dropped; Arrow's pool (mimalloc or jemalloc) keeps freed blocks for reuse. A long-lived process that built
something large once then holds about as much again: a sandbox worker after a call that built a 1e6-row frame with
a text column kept 48-64 MB of private memory, 12-14 MB once both were emptied (``benchmarks/bench_memory.py``).
Only free memory is given back: nothing in use is touched, and the next allocation simply asks the system again.

* :func:`trim_c_heap`: glibc's ``malloc_trim(0)`` (a no-op elsewhere than glibc);
* :func:`release_freed_memory`: Arrow's default pool (where pyarrow is already imported), then the C heap; for a
  process whose code is all trusted (the kernel's session cache after it drops a spilled value);
* :class:`GrowthWatch`: the same after a request, only when the process grew since it last gave back (the sandbox
  worker after each call): a request that allocated little never pays for it. Arrow's pool is emptied only through
  the pool object :func:`keep_arrow_pool` was given where the code is trusted (the launcher's warm-up), never one
  looked up in a ``sys.modules`` that model code could have planted a module in.

Nothing here imports the rest of the package (or pyarrow).
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["GIVE_BACK_AFTER_PAGES", "GrowthWatch", "ReleasablePool", "keep_arrow_pool", "release_freed_memory",
           "trim_c_heap"]

GIVE_BACK_AFTER_PAGES = 2048
"""Pages faulted in (8 MiB of 4 KiB pages) since a :class:`GrowthWatch` last gave memory back before it does again.
A request that faulted in that much took a few milliseconds for the faults alone, where giving back takes 0.3-1 ms
(after a 1e6-row frame, measured); an empty call faults in none. With transparent huge pages set to ``always``
one fault can bring 2 MiB, so a large allocation counts fewer faults there (the Python objects around it still
fault page by page)."""


class ReleasablePool(Protocol):
    """What :class:`GrowthWatch` needs of an Arrow memory pool (``pyarrow.MemoryPool``)."""

    def release_unused(self) -> None:
        """Hand the pool's free memory back to the system."""


_TRIM: list[Callable[[int], int] | None] = []
"""glibc's ``malloc_trim``, looked up once (empty: not looked up yet; ``[None]``: not glibc)."""

_KEPT_POOLS: list[ReleasablePool] = []
"""The Arrow pool :class:`GrowthWatch` empties (see :func:`keep_arrow_pool`); empty: none."""


def _find_malloc_trim() -> Callable[[int], int] | None:
    import ctypes

    try:
        libc = ctypes.CDLL(None)  # the symbols already loaded in this process: libc's, no file is opened
        if not hasattr(libc, "gnu_get_libc_version"):
            return None
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_c_heap() -> None:
    """Give glibc's free heap pages back to the system (``malloc_trim(0)``); a no-op where libc is not glibc."""
    if not _TRIM:
        _TRIM.append(_find_malloc_trim())
    trim = _TRIM[0]
    if trim is not None:
        trim(0)


def release_freed_memory() -> None:
    """Empty Arrow's default pool where pyarrow is already imported (it is never imported for this), then trim the
    C heap. For a process whose modules are all trusted: it looks pyarrow up in ``sys.modules``."""
    arrow: Any = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    trim_c_heap()


def keep_arrow_pool(pool: ReleasablePool) -> None:
    """Make ``pool`` (``pyarrow.default_memory_pool()``, taken where the code is trusted) the one every
    :class:`GrowthWatch` of this process and of the processes it forks later empties."""
    _KEPT_POOLS[:] = [pool]


def _faults() -> int:
    """Pages this process has faulted in since it started (minor faults: fresh or copied pages, no disk read)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class GrowthWatch:
    """Gives freed memory back after a request once the process has faulted in at least ``pages`` pages since the
    watch was made or last gave back: Arrow's kept pool (:func:`keep_arrow_pool`), then glibc's heap.

    Costs one ``getrusage`` (about a microsecond) after a request that allocated little. Runs no Python code of
    anyone else's: no collection (which would run finalizers), no module looked up."""

    def __init__(self, pages: int = GIVE_BACK_AFTER_PAGES) -> None:
        if type(pages) is not int or pages < 1:
            raise ValueError(f"pages must be a positive int, not {pages!r}")
        self.pages = pages
        self.mark = _faults()
        """The fault count when the watch was made or last gave back."""
        self.given_back = 0
        """How many times it gave memory back."""

    def after_request(self) -> bool:
        """Give freed memory back if the process grew by at least :attr:`pages` faulted pages; whether it did."""
        if _faults() - self.mark < self.pages:
            return False
        for pool in _KEPT_POOLS:
            pool.release_unused()
        trim_c_heap()
        self.given_back += 1
        self.mark = _faults()
        return True
