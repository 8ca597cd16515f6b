"""The clean launcher: a pre-warmed Python that forks sandbox workers on request.

Started by the kernel as ``python -m harness_magic.core.execution.sandbox.launcher FD``
(a fresh interpreter with an allowlisted environment and an empty working
directory, never a fork of the kernel). It imports what every worker uses (numpy,
pandas, pyarrow: :data:`PRELOADED`) once, freezes those objects out of the garbage
collector (:func:`gc.freeze`) so the workers forked from it keep the launcher's pages
shared, then serves requests on the SOCK_SEQPACKET socket ``FD``:

``{"op": "spawn", "config": {...}}`` + two or three descriptors (request read
end, reply write end, result socket) -> forks a worker (:func:`worker.run_worker`),
replies ``{"pid"}``.
``{"op": "reap", "pid": N, "wait": S}`` -> waits up to S s for that worker, replies
its exit status.
``{"op": "preload", "modules": [...]}`` -> warms those of :data:`WARM_UPS` not warmed yet (a
session that drew once gets matplotlib in every later worker), replies ``{"preloaded": [...]}``:
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

__all__ = ["main", "warm_up", "share_with_workers", "MAX_CONTROL_BYTES", "PRELOADED", "WARM_UPS"]

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

    pa.Table.from_pandas(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})).to_pandas()  # the frame <-> Arrow bridge


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

PRELOADED = ("numpy", "pandas", "pyarrow")
"""What the launcher preloads: what a worker's values cross in (Arrow) and what nearly every analysis uses.
Shared with the worker page for page (copied only when written); a fresh worker is forked for every cell.

Measured by ``benchmarks/bench_memory.py --preloads`` (launcher + worker PSS; the worker's first use):
matplotlib is not preloaded: preloaded it cost about 30 MB PSS per session whether or not the session ever
draws; imported by the worker at its first chart it costs about 1.4 s (the worker also builds its font list in
its fresh scratch directory). So it is warmed once a worker drew a chart (``preload``,
:data:`~.launcher_client.CHART_PRELOADS`): a session pays that once, not once per cell that draws. pandas preloaded costs about 50 MB per session
and saves about 0.9 s on each cell's first frame."""


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
