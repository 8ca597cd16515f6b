"""A memory cgroup per sandbox worker, where this process may create one.

The kernel-side watchdog samples memory every few milliseconds; a memory
cgroup makes the same bound hold inside the OS between samples: anonymous
memory, tmpfs pages (scratch files, memfds, deleted files) and page cache the
worker causes are charged to it, and going over its limit gets the worker
OOM-killed by the OS. Works with cgroup v2 (``memory.max``) and v1
(``memory.limit_in_bytes``), under the cgroup this process already belongs to.
Where neither can be created (no permission, no memory controller) the layer
is reported unavailable and the watchdog alone holds the limit.
"""

from __future__ import annotations

import os
import uuid

__all__ = ["MemoryCgroup", "CgroupUnavailable", "cgroup_limit", "SLACK_BYTES", "SLACK_FRACTION"]

SLACK_BYTES = 64 * 1024 * 1024
"""At least this much above the watchdog's limit: page cache and kernel memory the watchdog does not count."""

SLACK_FRACTION = 0.25
"""And at least this share of it: the OS's OOM path can take seconds of reclaim, so the watchdog should speak
first and the cgroup only catch what grows faster than the watchdog samples."""


def cgroup_limit(watchdog_limit: int) -> int:
    """The cgroup's hard limit for a worker whose watchdog stops it at ``watchdog_limit`` bytes."""
    return watchdog_limit + max(SLACK_BYTES, int(watchdog_limit * SLACK_FRACTION))

_ROOT = "/sys/fs/cgroup"
_PREFIX = "harness-worker-"


def _sweep(parent: str) -> None:
    """Remove empty cgroups left by kernels that exited without closing their sandboxes."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(_PREFIX)]
    except OSError:
        return
    for name in names:
        owner = name[len(_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or os.path.exists(f"/proc/{owner}"):
            continue
        try:
            os.rmdir(os.path.join(parent, name))
        except OSError:
            pass  # still populated: its worker is dying; a later sweep takes it


class CgroupUnavailable(OSError):
    """No memory cgroup can be created here."""


def _parent_directory() -> tuple[str, int]:
    """This process's memory cgroup directory and the cgroup version (2 or 1)."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as listing:
            lines = [line.rstrip("\n").split(":", 2) for line in listing]
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read /proc/self/cgroup: {exc}") from exc
    for _id, controllers, path in lines:
        if controllers == "" and os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
            with open(os.path.join(_ROOT, "cgroup.controllers"), encoding="ascii") as available:
                if "memory" in available.read().split():
                    return os.path.join(_ROOT, path.lstrip("/")), 2
    for _id, controllers, path in lines:
        if "memory" in controllers.split(","):
            return os.path.join(_ROOT, "memory", path.lstrip("/")), 1
    raise CgroupUnavailable("no memory controller is mounted for this process")


class MemoryCgroup:
    """One worker's cgroup: created with a limit, joined by the worker, removed after it dies."""

    def __init__(self, limit_bytes: int) -> None:
        parent, self.version = _parent_directory()
        _sweep(parent)
        self.path = os.path.join(parent, f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(self.path, 0o755)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create a memory cgroup under {parent}: {exc.strerror}") from exc
        try:
            if self.version == 2:
                self._write("memory.max", str(limit_bytes))
                if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                    self._write("memory.swap.max", "0")
            else:
                self._write("memory.limit_in_bytes", str(limit_bytes))
        except OSError as exc:
            self.remove()
            raise CgroupUnavailable(f"cannot set the memory cgroup's limit: {exc.strerror}") from exc
        self.limit_bytes = limit_bytes

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w", encoding="ascii") as control:
            control.write(value)

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into this cgroup."""
        try:
            self._write("cgroup.procs", str(pid))
        except OSError as exc:
            raise CgroupUnavailable(f"cannot move the worker into its memory cgroup: {exc.strerror}") from exc

    def oom_killed(self) -> bool:
        """Whether the OS killed a process here for going over the limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.path, name), encoding="ascii") as events:
                for line in events:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self) -> None:
        """Delete the cgroup (its processes must be gone; charges move to the parent)."""
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def describe(self) -> str:
        return f"cgroup v{self.version}, limit {self.limit_bytes / 2**20:.0f} MiB"
