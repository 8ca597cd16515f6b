"""The product's folders: temporary ones a process owns (removed by it, or by a later one if it died first), and
the user's cache folder.

A kernel makes private folders in the temporary directory (a DuckDB engine's spill files, the session
cache's spill files, the provider host's socket, a local MCP or Spark server's home, a replay's logs).
Each owner removes its folder when it closes, is collected, or the interpreter exits; a kernel killed
outright (``SIGKILL``, the OOM killer, a node's reaper) runs none of that. Contract:

- :func:`owned_tempdir` makes ``<tmp>/harness-<kind>-<pid>-<random>`` with mode 0700; ``kind`` is one of
  :data:`OWNED_KINDS` and ``pid`` the creating process. The first call in a process first runs
  :func:`sweep_abandoned` over the temporary directory, so a node's next kernel removes what a killed one
  left, before it adds its own.
- :func:`sweep_abandoned` removes only folders named that way, of a known kind, that are real directories
  (not links) owned by this user, whose owner process is gone (no ``/proc/<pid>``; a pid that was reused
  keeps its folder until that process is gone too). ``owners`` limits it to given pids (a kernel manager
  that killed a kernel removes that kernel's folders). It returns the paths removed.

Processes that share one temporary directory must share one pid namespace (one container, one node), as
the sandbox's roots (:mod:`harness_magic.core.execution.sandbox.launcher_client`) already require.
Only the standard library is imported: children load this package's confinement modules by path.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Collection, Mapping

__all__ = ["OWNED_KINDS", "OWNED_PREFIX", "owned_tempdir", "owner_pid", "sweep_abandoned", "user_cache_folder"]

OWNED_PREFIX = "harness-"
"""Every owned folder's name starts with this."""
OWNED_KINDS = frozenset({"cache", "duckdb", "mcp", "provider", "replay", "spark", "sparkcopies"})
"""The kinds of owned folder (the sandbox's roots, ``harness-sandbox-<pid>-``, live in ``/dev/shm`` and are
swept by its launcher client)."""
_NAME = re.compile(r"harness-(?P<kind>[a-z]+)-(?P<pid>[1-9][0-9]*)-[A-Za-z0-9_.-]+")

_swept = False
_sweep_lock = threading.Lock()


def user_cache_folder(environ: Mapping[str, str] | None = None) -> Path:
    """The product's folder in the user's cache (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``harness_magic``) for
    the user whose environment is ``environ`` (default: this process's); not created here. Unlike the owned
    temporary folders, what is kept there outlives every kernel (the missing-key record, Spark's class archive)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "harness_magic"


def owner_pid(name: str, kinds: Collection[str] = OWNED_KINDS) -> int | None:
    """The owner's pid in an owned folder's ``name`` (a base name), or None when it is not one of ``kinds``."""
    match = _NAME.fullmatch(name)
    if match is None or match["kind"] not in kinds:
        return None
    return int(match["pid"])


def owned_tempdir(kind: str, label: str = "") -> str:
    """A fresh private (0700) folder ``harness-<kind>-<pid>-[<label>-]<random>`` in the temporary directory.

    ``label`` (letters, digits, ``_`` and ``-``) names what it serves, e.g. an MCP server's name.
    The caller removes it when it closes; the process's first call sweeps abandoned folders first.
    """
    if kind not in OWNED_KINDS:
        raise ValueError(f"owned folder kind {kind!r} is not one of {sorted(OWNED_KINDS)}")
    if label and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", label):
        raise ValueError(f"owned folder label {label!r} must be 1-64 letters, digits, '_' or '-'")
    _sweep_once()
    prefix = f"{OWNED_PREFIX}{kind}-{os.getpid()}-" + (f"{label}-" if label else "")
    return tempfile.mkdtemp(prefix=prefix)


def _sweep_once() -> None:
    global _swept
    with _sweep_lock:
        if _swept:
            return
        _swept = True
    sweep_abandoned()


def sweep_abandoned(base: str | None = None, owners: Collection[int] | None = None,
                    kinds: Collection[str] = OWNED_KINDS) -> list[str]:
    """Remove the owned folders of ``kinds`` in ``base`` (default: the temporary directory) whose owner process
    is gone (see the module docstring); ``owners`` limits it to those pids. Returns the paths removed. (The
    sandbox sweeps its ``/dev/shm`` roots, ``harness-sandbox-<pid>-``, with ``kinds={"sandbox"}``.)"""
    base = tempfile.gettempdir() if base is None else base
    removed: list[str] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        pid = owner_pid(entry.name, kinds)
        if pid is None or (owners is not None and pid not in owners) or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid != os.geteuid() or not entry.is_dir(follow_symlinks=False):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed
