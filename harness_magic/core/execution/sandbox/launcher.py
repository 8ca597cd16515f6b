"""The clean launcher: a pre-warmed Python that forks sandbox workers on request.

Started by the kernel as ``python -m harness_magic.core.execution.sandbox.launcher FD``
(a fresh interpreter with an allowlisted environment and an empty working
directory, never a fork of the kernel). It imports what every worker needs (the
worker's own modules and libseccomp; :data:`PRELOADED` adds nothing else) once,
freezes those objects out of the garbage collector (:func:`gc.freeze`) so the
workers forked from it keep the launcher's pages shared, then serves requests on
the SOCK_SEQPACKET socket ``FD``. The data stack (numpy, pandas, pyarrow:
:data:`DATA_STACK`) and matplotlib are warmed on request (``preload``), by the
kernel of a session that uses them:

``{"op": "spawn", "config": {...}}`` + two or three descriptors (request read
end, reply write end, result socket) -> forks a worker (:func:`worker.run_worker`),
replies ``{"pid"}``.
``{"op": "reap", "pid": N, "wait": S}`` -> waits up to S s for that worker, replies
its exit status.
``{"op": "preload", "modules": [...]}`` -> warms those of :data:`WARM_UPS` not warmed yet (a
session that drew once gets matplotlib in every later worker, one that used pandas the data stack), replies
``{"preloaded": [...]}``:
everything now warm. An unknown name is refused by name and nothing is imported.

Every reply echoes the request's ``"id"`` (the kernel matches replies to requests
by it, see :mod:`.launcher_client`); a request that cannot be served (malformed,
oversized, unknown op, wrong descriptors) gets ``{"id", "error"}`` and its
descriptors are closed: the launcher keeps serving.

When the kernel goes away the socket reaches EOF: the launcher kills every
worker's process group and exits. Workers also hold ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main", "warm_up", "share_with_workers", "MAX_CONTROL_BYTES", "PRELOADED", "WARM_UPS", "DATA_STACK"]

MAX_CONTROL_BYTES = 1 << 16
"""Control messages carry paths and limits only."""

MAX_REAP_WAIT_S = 10.0
"""A reap waits at most this long: the launcher serves every session and must answer the next request."""


def _parse(data: bytes, flags: int) -> dict:
    """The request in ``data``, or ``{"error": why}`` (its reply then has no id: the kernel's protocol error)."""
    if flags & socket.MSG_TRUNC:
        return {"error": f"request over {MAX_CONTROL_BYTES} bytes"}
    try:
        message = json.loads(data)
    except ValueError:
        return {"error": "request is not JSON"}
    if not isinstance(message, dict):
        return {"error": "request is not a JSON object"}
    if type(message.get("id")) is not int:
        return {"error": "request has no integer id"}
    return message


def _numpy() -> None:
    import numpy as np

    np.arange(5).sum()


def _pandas() -> None:
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"a": np.arange(5), "b": list("abcde"), "t": pd.date_range("2024-01-01", periods=5)})
    frame.groupby("b")["a"].sum().describe()
    repr(frame)


def _pyarrow() -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.ipc  # noqa: F401

    from harness_magic.core.confinement.heap import keep_arrow_pool

    pa.Table.from_pandas(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})).to_pandas()  # the frame <-> Arrow bridge
    keep_arrow_pool(pa.default_memory_pool())  # taken here, before any model code: what workers' GrowthWatch empties


def _matplotlib() -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    ax.set_title("warm")
    fig.savefig(io.BytesIO(), format="png")
    plt.close("all")


WARM_UPS: dict[str, Callable[[], None]] = {"numpy": _numpy, "pandas": _pandas, "pyarrow": _pyarrow,
                                            "matplotlib": _matplotlib}
"""How each module a launcher can preload is imported and exercised once (its first calls fill caches and
import submodules that a worker would otherwise pay for on its first use)."""

PRELOADED: tuple[str, ...] = ()
"""What the launcher warms at its start beyond the worker's own modules: nothing. Whatever it holds is shared with
every worker page for page (copied only when written); a fresh worker is forked for every cell.

Measured by ``benchmarks/bench_memory.py`` (a lone session after one sandboxed cell that prints a number, its
processes' own pages): numpy, pandas and pyarrow preloaded cost about 78 MB of the launcher (pandas 3 imports
pyarrow, whose libraries alone are about 31 MB of touched pages) whether or not the session ever makes a frame,
and the launcher's cold start about 1 s. So the data stack is warmed on request (:data:`DATA_STACK`): at once where
the kernel already holds pandas (the user works with data), before a cell's first call whose code names it (that
call waits for the warm-up, about 0.5-1 s, once per session), and once a worker imported it otherwise (it says so in
its reply); every later worker inherits it. matplotlib likewise once a worker drew a chart
(:data:`~.launcher_client.CHART_PRELOADS`; preloaded it cost about 30 MB, imported at a chart about 1.4 s)."""

DATA_STACK = ("numpy", "pandas", "pyarrow")
"""Warmed by ``preload`` for a session that works with data: the kernel names them in each worker's spawn config
(``data_stack``), the worker reports which of them it imported that its launcher had not warmed (the ``imported``
field of its reply), and the kernel asks the launcher for those."""


SYSTEM_LIBRARIES = ("libstdc++.so.6", "libgcc_s.so.1", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                    "libutil.so.1", "libresolv.so.2", "libnsl.so.1", "libz.so.1")
"""The system libraries a binary wheel may link against outside its own files (the manylinux policy's list, less the
X11, GL and GLib ones; zlib too), loaded by the launcher before any worker is confined: a confined worker reads
only the Python install (:func:`~harness_magic.core.confinement.layers.python_read_paths`), so it could not open
them, while a library already loaded satisfies the loader by its name. So a worker imports numpy, pandas, pyarrow,
matplotlib (every extension module of a wheel) itself when its launcher did not warm them. About 1 MB of pages
shared with every worker, where preloading numpy to get them cost about 12 MB."""


def _load_system_libraries() -> None:
    """Load :data:`SYSTEM_LIBRARIES` into this process (one missing here is left to the import that needs it)."""
    import ctypes

    for name in SYSTEM_LIBRARIES:
        try:
            ctypes.CDLL(name)
        except OSError:
            pass  # not installed under that name: a module linking it fails its import in the worker, with its name


def warm_up(modules: Sequence[str] = PRELOADED) -> None:
    """Import what a worker needs to start (its own modules, libseccomp) and warm each of ``modules``
    (names in :data:`WARM_UPS`), so forked workers start warm."""
    unknown = [name for name in modules if name not in WARM_UPS]
    if unknown:
        raise ValueError(f"cannot preload {unknown}: the launcher preloads only {sorted(WARM_UPS)}")
    import collections, csv, datetime, decimal, fractions, hashlib, itertools, math, random  # noqa: E401,F401
    import re, statistics, string, textwrap, zoneinfo  # noqa: E401,F401

    from harness_magic.core.execution import interpreter  # noqa: F401
    from harness_magic.core.confinement import layers as confinement  # noqa: F401
    from harness_magic.core.execution.sandbox import worker  # noqa: F401

    confinement.probe_seccomp_library()  # loads libseccomp before any worker is confined
    _load_system_libraries()
    for name in modules:
        WARM_UPS[name]()


def share_with_workers() -> None:
    """Move every object the launcher holds now into the collector's permanent generation.

    A worker's full collection would otherwise write the header of each object it inherited (the
    collector's bookkeeping), copying every page of the preloaded modules into the worker: about 20 MB
    per worker, and as much more in the launcher, which then holds the only copy of the originals.
    Frozen objects are never visited; the launcher's own garbage is a few small requests, so nothing of
    note is kept alive. Called before each fork (cheap: a list splice), so objects made since are
    frozen too."""
    gc.freeze()


def _preload(names: Any, warmed: set[str]) -> dict:
    """The reply to a ``preload`` request: warm the named modules not yet warm (into ``warmed``)."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return {"error": "preload needs a list of module names"}
    unknown = sorted({name for name in names if name not in WARM_UPS})
    if unknown:
        return {"error": f"cannot preload {unknown}: the launcher preloads only {sorted(WARM_UPS)}"}
    for name in names:
        if name not in warmed:
            try:
                WARM_UPS[name]()
            # broad: a module that fails to warm is named in the reply; the launcher keeps serving
            except Exception as exc:
                return {"error": f"preloading {name} failed: {type(exc).__name__}: {exc}"[:500]}
            warmed.add(name)
    gc.collect()  # the warm-up's garbage goes before the next fork freezes the rest for good
    return {"preloaded": sorted(warmed)}


def _describe(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"status": None, "signal": os.WTERMSIG(status)}
    return {"status": os.WEXITSTATUS(status), "signal": None}


def _reap(pid: int, wait_s: float) -> dict:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return {"status": None, "signal": None}
        if done:
            return _describe(status)
        if time.monotonic() > deadline:
            return {"status": None, "signal": None, "running": True}
        time.sleep(0.005)


def main(control_fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=control_fd)
    warm_up()
    from harness_magic.core.execution.sandbox.worker import run_worker

    gc.collect()  # the warm-up's garbage goes before the rest is frozen (and shared) for good

    sock.send(json.dumps({"op": "ready", "pid": os.getpid()}).encode())
    children: set[int] = set()
    exited: dict[int, dict] = {}
    warmed = set(PRELOADED)
    try:
        while True:
            data, fds, flags, _addr = socket.recv_fds(sock, MAX_CONTROL_BYTES, 3)
            if not data:
                break
            message = _parse(data, flags)
            op = message.get("op")
            if op == "spawn" and len(fds) in (2, 3) and isinstance(message.get("config"), dict):
                share_with_workers()
                pid = os.fork()
                if pid == 0:
                    try:
                        sock.close()
                        config = dict(message["config"], launcher_pid=os.getppid())
                        run_worker(fds[0], fds[1], config, fds[2] if len(fds) == 3 else None)
                    finally:
                        os._exit(1)
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                reply: dict[str, Any] = {"pid": pid}
            elif op == "reap" and type(message.get("pid")) is int and isinstance(message.get("wait", 2.0), (int, float)):
                pid, wait = message["pid"], float(message.get("wait", 2.0))
                if pid in exited:
                    reply = exited.pop(pid)
                elif pid in children:
                    reply = _reap(pid, wait if 0.0 <= wait <= MAX_REAP_WAIT_S else MAX_REAP_WAIT_S)
                    if not reply.get("running"):
                        children.discard(pid)
                else:
                    reply = {"status": None, "signal": None}
            elif op == "preload" and not fds:
                reply = _preload(message.get("modules"), warmed)
            else:
                for fd in fds:
                    os.close(fd)
                reply = {"error": message.get("error") or f"bad request {op!r} with {len(fds)} descriptors"}
            reply["id"] = message.get("id")
            # Opportunistically collect workers that died without anyone asking.
            for pid in list(children):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    children.discard(pid)
                    exited[pid] = _describe(status)
            while len(exited) > 256:
                exited.pop(next(iter(exited)))
            sock.send(json.dumps(reply).encode())
    except (ConnectionError, OSError, EOFError):
        pass
    finally:
        for pid in children:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
