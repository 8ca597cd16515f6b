"""The suite's guard on temporary files: each run gets its own temporary directory, checked and removed at its end.

:class:`LeftoverGuard` (registered by ``conftest.pytest_configure``):

- The process that starts the run makes a fresh folder (``suite-tmp-*`` in the system's temporary directory)
  and points ``TMPDIR`` and :data:`tempfile.tempdir` at it; pytest's own ``tmp_path`` folders stay where they
  were (``PYTEST_DEBUG_TEMPROOT``), with pytest's retention. Each pytest-xdist worker works in a subfolder of
  its own, ``<worker id>-<pid>``. Kernels, launchers, servers and tools started by tests inherit ``TMPDIR``.
- At the end of the run, after every fixture is torn down and (under xdist) every worker has exited, what is
  left in the folder is sorted. A product folder (``harness-<kind>-<pid>-...``,
  :mod:`harness_magic.core.confinement.owned_dirs`) whose owner was one of the run's pytest processes, and that
  process exited normally (:data:`EXITED`), fails the run: its exit handlers ran, so what it owned must be gone
  (a plain run's own process is still alive here: its folders go at its exit and are not judged). A product
  folder of another process (a kernel the tests killed with ``SIGKILL``, which runs no clean-up) is removed by
  the product's own sweep, as a node's next kernel would, and counted. Anything else (made by test code, an
  example notebook, a tool) is listed as a warning. Then the folder is removed.
- :class:`NotebookKernelsShutDown`: an nbval notebook's kernel is shut down as JupyterLab does it, not killed,
  so its exit handlers remove what it made.
- Folders are given :data:`SETTLE_S` to disappear before they are judged (a child that removes its parent's
  folder when it finds the parent gone, a server still exiting).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from harness_magic.core.confinement.owned_dirs import owner_pid, sweep_abandoned

SUITE_TMP_ENV = "HARNESS_SUITE_TMP"
"""The run's temporary folder, for the workers pytest-xdist starts (set by the process that starts the run)."""
TMP_MODE = 0o1777
"""The run's folders are as open as ``/tmp``: processes of other users (PostgreSQL's server, a worker that dropped
root) enter and write in them as they would in ``/tmp``."""
_WORKER_FOLDER = re.compile(r"gw[0-9]+-([0-9]+)")
"""A worker's folder in the run's: ``<worker id>-<pid>``."""
SETTLE_S = 10.0
"""How long leftovers are given to disappear before they are judged."""
SHOWN = 20
"""How many leftovers of each kind the report names (the rest are counted)."""
NOTEBOOK_SHUTDOWN_WAIT_S = 10.0
"""How long an nbval notebook's kernel is given to end after its shutdown request (a local Spark server stops
with it) before it is signalled."""
EXITED = ".exited"
"""Written in a worker's folder when it exits normally: a worker that pytest-xdist had to kill ran none of its
exit handlers, so its folders are listed as a warning, not judged."""


class LeftoverGuard:
    """See the module docstring."""

    def __init__(self, config: pytest.Config) -> None:
        # the worker's own input, not PYTEST_XDIST_WORKER: a pytest run started by a test inherits that variable
        self.worker: str | None = config.workerinput["workerid"] if hasattr(config, "workerinput") else None
        if self.worker is None:
            os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
            self.root = Path(tempfile.mkdtemp(prefix="suite-tmp-"))
            os.environ[SUITE_TMP_ENV] = str(self.root)
            here = self.root
        else:
            self.root = Path(os.environ[SUITE_TMP_ENV])
            here = self.root / f"{self.worker}-{os.getpid()}"
            here.mkdir()
            atexit.register((here / EXITED).touch)  # runs before the exit handlers registered later (LIFO)
        here.chmod(TMP_MODE)
        os.environ["TMPDIR"] = str(here)
        tempfile.tempdir = str(here)
        self.failed: list[str] = []
        self.swept: list[str] = []
        self.other: list[str] = []
        self.running: list[str] = []

    def _pytest_pids(self) -> set[int]:
        """The run's pytest processes that exited normally: each worker (named in its folder, which holds
        :data:`EXITED`), and this one."""
        pids = {os.getpid()}
        for entry in self.root.iterdir():
            worker = _WORKER_FOLDER.fullmatch(entry.name)
            if worker is not None and entry.is_dir() and (entry / EXITED).exists():
                pids.add(int(worker[1]))
        return pids

    def _left(self) -> list[Path]:
        """What is left: the entries of the run's folder, and of each worker's (not the worker folders)."""
        left = []
        for entry in sorted(self.root.iterdir()):
            if _WORKER_FOLDER.fullmatch(entry.name) and entry.is_dir():
                left.extend(sorted(path for path in entry.iterdir() if path.name != EXITED))
            else:
                left.append(entry)
        return left

    @pytest.hookimpl(trylast=True)  # after pytest-xdist's own, which ends the workers
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.worker is not None:
            return
        pids = self._pytest_pids()
        deadline = time.monotonic() + SETTLE_S
        while True:
            left = self._left()
            owned = [(path, owner_pid(path.name)) for path in left]
            judged = [path for path, pid in owned if pid in pids and pid != os.getpid()]
            if not judged or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        self.failed = [f"{path}: {_contents(path)}" for path in judged]
        for folder in {path.parent for path, pid in owned if pid is not None and pid not in pids}:
            self.swept += sweep_abandoned(str(folder), owners={pid for _, pid in owned if pid not in pids})
        self.running = [str(path) for path, pid in owned if pid is not None and pid not in pids and path.exists()]
        self.other = [f"{path}: {_contents(path)}" for path, pid in owned if pid is None]
        shutil.rmtree(self.root, ignore_errors=True)
        if self.failed and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.worker is not None or not (self.failed or self.swept or self.running or self.other):
            return
        write = terminalreporter.write_line
        terminalreporter.section("temporary files left behind", sep="-", red=bool(self.failed))
        if self.failed:
            write(f"FAILED: {len(self.failed)} product folder(s) outlived the pytest process that owned them:",
                  red=True)
            for line in self.failed[:SHOWN]:
                write(f"  {line}")
        if self.swept:
            write(f"{len(self.swept)} product folder(s) of ended processes (kernels the tests killed) removed by the "
                  "product's sweep, as the node's next kernel would (a process killed outright cleans nothing)")
        if self.running:
            write(f"warning: {len(self.running)} product folder(s) of processes still running (a process left "
                  f"behind): {', '.join(self.running[:SHOWN])}")
        if self.other:
            write(f"warning: {len(self.other)} other entries left by test code, notebooks or tools:")
            for line in self.other[:SHOWN]:
                write(f"  {line}")
        extra = max(len(self.failed), len(self.other)) - SHOWN
        if extra > 0:
            write(f"  ... and up to {extra} more")


def _contents(path: Path) -> str:
    """A few names inside ``path``, to say what made it."""
    if not path.is_dir() or path.is_symlink():
        return "(a file)"
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"
    return ", ".join(names[:6]) + (f" (+{len(names) - 6})" if len(names) > 6 else "") if names else "(empty)"


class NotebookKernelsShutDown:
    """nbval ends a notebook's kernel with ``SIGKILL`` (``shutdown_kernel(now=True)``), which runs none of the
    kernel's exit handlers: its product folders and the work folder the notebook registered for removal would stay.
    Before nbval's teardown of a notebook, its kernel is asked to shut down as JupyterLab asks (a shutdown
    request; jupyter_client signals it after :data:`NOTEBOOK_SHUTDOWN_WAIT_S` if it has not ended), its client's
    channels stopped first; nbval's own stop then finds it gone."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        notebook = item.parent
        kernel = getattr(notebook, "kernel", None)
        if (kernel is not None and hasattr(notebook, "nb") and (nextitem is None or nextitem.parent is not notebook)
                and kernel.km.has_kernel):
            # the client's channels first, as nbval's own stop does: the shutdown destroys the zmq context they
            # share, which must not happen while their threads poll its sockets (libzmq aborts the process)
            kernel.kc.stop_channels()
            kernel.km.shutdown_wait_time = NOTEBOOK_SHUTDOWN_WAIT_S
            kernel.km.shutdown_kernel(now=False)
        yield


def register(config: pytest.Config) -> None:
    """Register the guard once per process (a run's controller and each of its workers)."""
    if not config.pluginmanager.has_plugin("leftover_guard"):
        config.pluginmanager.register(LeftoverGuard(config), "leftover_guard")
        config.pluginmanager.register(NotebookKernelsShutDown(), "notebook_kernels_shut_down")


__all__ = ["LeftoverGuard", "NotebookKernelsShutDown", "register", "SUITE_TMP_ENV", "SETTLE_S"]
