"""Memory of one analyst's session on a shared node: PSS and USS of every process a kernel owns.

    .venv/bin/python benchmarks/bench_memory.py [--kernels N] [--preloads] [--mappings]

A real kernel (``jupyter_client``) is measured at these points:

* **bare**: started, nothing run;
* **load_ext**: after ``%load_ext harness_magic``;
* **1 cell**: after one ``%%agent`` cell whose model (the scripted OpenAI-compatible server over
  HTTP, through litellm: the path users take) runs one sandboxed ``python_interpreter`` call that
  prints a number (issue 35's figure);
* **idle**: the same session once the provider host (litellm's process, when ``provider_host`` is
  on) has exited for want of requests (``provider_idle_s`` is set to :data:`IDLE_S` here);
* **10 cells**: after nine more such cells, then idle again;
* **data cell**: right after one more cell whose call builds a 1e5-row pandas frame and prints a
  number from it (what an analyst's cells do): a session's first use of pandas, imported by its
  worker, which the launcher then warms for every later worker;
* **data cells**: after a second such cell (its worker forked from the warmed launcher), idle;
* **large cell**: right after a cell whose call builds a 1e6-row frame with a text column, groups and sorts it
  (:data:`LARGE_CODE`): what its worker keeps once the call's frames are dropped (it gives freed memory back once
  its reply is out, :class:`~harness_magic.core.confinement.heap.GrowthWatch`).

Each figure is the process tree under the kernel, read from ``/proc/<pid>/smaps_rollup`` through
psutil: PSS (shared pages split between the processes that map them: what adding a session costs
the node) and USS (pages only that process holds), per process: the kernel, the provider host, the
sandbox launcher, its worker. The session is kernel + launcher + worker (the issue's figure: the
provider host is shown beside it). PSS splits a library's pages with every process on the node that
maps the same file, so it falls while other work (a test run holding pyarrow) runs; where this
process may read frame numbers (``/proc/<pid>/pagemap``, as root) the session is also counted
**alone**: each physical page its processes map counted once, split only between them (the PSS the
session has on an otherwise idle node). Each cell's wall time is printed too (the first cell starts
the launcher; the first data cell of a session imports the data stack in its worker, which the
launcher then warms for every later worker). Then ``--kernels N`` (default 5) kernels at once, each after one cell
and idle: their total PSS over the node's whole tree, divided by N, is the marginal cost of one more
analyst; and N kernels at once each after one light and one data cell, idle (the libraries' pages of the data
stack are then split between the N launchers, as on a node of many analysts who use pandas).

``--mappings`` prints where the launcher's and the worker's pages are right after the first data cell (their
``/proc/<pid>/smaps`` summed by kind of mapping: heap and anonymous memory, the data stack's libraries, the other
libraries) and which of them each holds alone (private dirty) or shares (shared dirty: the launcher's pages the
worker inherited and has not written; shared clean: library pages).

``--preloads`` measures what each module the sandbox launcher could preload costs and saves: a
model of the launcher (a fresh interpreter that runs the launcher's own ``warm_up`` for a set of
modules and freezes them as it does, then forks a worker) for each set, the worker running a
light call then a full collection (a long-lived worker's life), or its first use of the module:
PSS of launcher + worker, alone and 5 pairs at once, and the first use's time in the worker.

What one import costs is printed too (litellm, pandas + pyarrow, in a bare interpreter).

The issue's goal: at most 150 MB PSS per session after one sandboxed cell (100 analysts in 15 GB).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from kernel_helpers import Kernel  # noqa: E402  (tests/ holds the shared kernel helpers)
from scripted_server import ScriptedServer  # noqa: E402

from harness_magic.core.config import AgentConfig  # noqa: E402

GOAL_MB = 150
"""Issue 35's goal for one session after one sandboxed cell."""
MB = 1024 * 1024
SETTLE_S = 1.0
"""Seconds to let a kernel finish its idle work (history writes, comm traffic) before reading /proc."""
IDLE_S = 2.0
"""``provider_idle_s`` in the measured kernels: the provider host exits this long after the last call."""
IDLE_WAIT_S = 60.0
"""How long the idle stage waits for the provider host to exit before it reports the session anyway."""
HOST_MODULE = "harness_magic.core.providers.host"
LAUNCHER_MODULE = "harness_magic.core.execution.sandbox.launcher"
LIGHT_CELL = "%%agent -m openai/bench\nCount to one."
DATA_CELL = "%%agent -m openai/bench\nSummarise a frame."
LARGE_CELL = "%%agent -m openai/bench\nSummarise a large table."
LIGHT_CODE = "x = sum(range(1000)); print(x)"
DATA_CODE = ("import numpy as np, pandas as pd\n"
             "frame = pd.DataFrame({'id': np.arange(100_000), 'group': np.arange(100_000) % 7,\n"
             "                      'amount': np.random.default_rng(0).random(100_000)})\n"
             "print(round(float(frame.groupby('group')['amount'].mean().max()), 3))")
"""The data cell's call: a 1e5-row frame, kept in the worker's namespace as an analyst's would be."""
LARGE_CODE = ("import numpy as np, pandas as pd\n"
              "n = 1_000_000\n"
              "frame = pd.DataFrame({'id': np.arange(n), 'name': [f'n{i % 1000}' for i in range(n)],\n"
              "                      'amount': np.random.default_rng(0).random(n)})\n"
              "ordered = frame.sort_values('name')\n"
              "print(round(float(frame.groupby('name')['amount'].mean().max()), 3))")
"""The large cell's call: a 1e6-row frame with a text column (about 60 MB), grouped and sorted."""


def _role(proc: psutil.Process, kernel_pid: int, launchers: set[int]) -> str:
    """kernel, provider host, launcher (the sandbox's), worker (forked from a launcher: same command line), other."""
    if proc.pid == kernel_pid:
        return "kernel"
    parent = proc.ppid()
    if parent in launchers:
        return "worker"
    cmdline = " ".join(proc.cmdline())
    if HOST_MODULE in cmdline:
        return "provider host"
    if LAUNCHER_MODULE in cmdline and parent == kernel_pid:
        launchers.add(proc.pid)
        return "launcher"
    return "other"


SUMMARIES = ("total", "session", "alone")
"""Rows of a reading that sum processes: every process, the session's (kernel + launcher + workers), the session's
counted alone (:func:`_alone`; absent where frame numbers cannot be read)."""
SESSION_ROLES = ("kernel", "launcher", "worker")
PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT = 1 << 63
_FRAME = (1 << 55) - 1


def _frames(pid: int) -> list[int]:
    """Frame numbers of the pages process ``pid`` has in memory (zeros where this process may not read them)."""
    frames: list[int] = []
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps, open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pm:
        for line in maps:
            fields = line.split()
            if fields[-1] == "[vsyscall]":
                continue
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            pm.seek(start // PAGE * 8)
            entries = pm.read((end - start) // PAGE * 8)
            frames.extend(e & _FRAME for (e,) in struct.iter_unpack("Q", entries) if e & _PRESENT)
    return frames


def _alone(pids: list[int]) -> dict[int, dict[str, float]] | None:
    """PSS and USS (MB) of each of ``pids`` counting only these processes as the pages' mappers (each physical page
    split between those of them that map it), and ``0`` -> their distinct pages in all; None where frame numbers
    cannot be read (not root)."""
    try:
        frames = {pid: set(_frames(pid)) for pid in pids}
    except OSError:
        return None
    if not any(frames.values()) or all(f == {0} for f in frames.values() if f):
        return None  # without CAP_SYS_ADMIN every frame number reads as 0
    mappers: dict[int, int] = {}
    for own in frames.values():
        for frame in own:
            mappers[frame] = mappers.get(frame, 0) + 1
    out = {pid: {"pss": sum(1 / mappers[f] for f in own) * PAGE / MB,
                 "uss": sum(1 for f in own if mappers[f] == 1) * PAGE / MB} for pid, own in frames.items()}
    out[0] = {"pss": len(mappers) * PAGE / MB, "uss": len(mappers) * PAGE / MB}
    return out


def _figures(pid: int) -> dict[str, Any]:
    """PSS and USS (MB) of each process under ``pid`` by role; their total, the session's (:data:`SESSION_ROLES`),
    and the session's alone (:func:`_alone`) where it can be counted."""
    root = psutil.Process(pid)
    rows: dict[str, dict[str, float]] = {}
    launchers: set[int] = set()
    session: list[int] = []
    for proc in [root, *root.children(recursive=True)]:  # parents come before their children
        try:
            role = _role(proc, pid, launchers)
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        key = role if role not in rows else f"{role}:{proc.pid}"
        rows[key] = {"pss": info.pss / MB, "uss": info.uss / MB}
        if role in SESSION_ROLES:
            session.append(proc.pid)
    procs = list(rows.values())
    mine = [row for key, row in rows.items() if key.split(":")[0] in SESSION_ROLES]
    rows["total"] = {"pss": sum(r["pss"] for r in procs), "uss": sum(r["uss"] for r in procs)}
    rows["session"] = {"pss": sum(r["pss"] for r in mine), "uss": sum(r["uss"] for r in mine)}
    try:
        alone = _alone(session)
    except (FileNotFoundError, ProcessLookupError):
        alone = None  # a worker ended while it was read: the reading keeps the PSS figures
    if alone is not None:
        rows["alone"] = {"pss": alone[0]["pss"], "uss": sum(alone[p]["uss"] for p in session),
                         "parts": {key: round(alone[p]["pss"], 1) for key, p in zip(
                             [k for k in rows if k.split(":")[0] in SESSION_ROLES], session)}}
    return rows


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model: a tool call for the cell's prompt, then an answer once the tool's result is back."""
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return {"text": "Done: the call printed its number."}
    prompt = json.dumps([m for m in messages if m.get("role") == "user"][-1:])
    code = LARGE_CODE if "large table" in prompt else DATA_CODE if "frame" in prompt else LIGHT_CODE
    return {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}


def provider_host_setting() -> bool:
    """Whether this checkout has a provider host whose idle time can be set (``provider_idle_s``)."""
    return "provider_idle_s" in {field.name for field in dataclasses.fields(AgentConfig)}


def _setup(kernel: Kernel, api_base: str) -> None:
    idle = f"%config AgentMagics.provider_idle_s = {IDLE_S}\n" if provider_host_setting() else ""
    cell = kernel.run("%load_ext harness_magic\n" + _config(api_base) + idle)
    assert cell.ok, (cell.errors, cell.stderr)


def _config(api_base: str) -> str:
    return (f"%config AgentMagics.api_base = {api_base!r}\n"
            "%config AgentMagics.run_dir = 'runs'\n%config AgentMagics.live = 'off'\n")


def _cell(kernel: Kernel, code: str = LIGHT_CELL) -> float:
    """Run one ``%%agent`` cell; its wall time (s)."""
    started = time.perf_counter()
    cell = kernel.run(code)
    assert cell.ok, (cell.errors, cell.stderr)
    return time.perf_counter() - started


def _pid(kernel: Kernel) -> int:
    return kernel.km.provisioner.process.pid  # type: ignore[union-attr]  # local provisioner: a Popen


def _read(kernel: Kernel) -> dict[str, Any]:
    time.sleep(SETTLE_S)
    return _figures(_pid(kernel))


def _read_idle(kernel: Kernel) -> dict[str, Any]:
    """The session once no provider host is left under the kernel (or after :data:`IDLE_WAIT_S`)."""
    deadline = time.monotonic() + IDLE_WAIT_S
    while True:
        rows = _read(kernel)
        if not any(name.startswith("provider host") for name in rows) or time.monotonic() > deadline:
            return rows


DATA_LIBRARY_DIRS = ("/numpy/", "/numpy.libs/", "/pandas/", "/pandas.libs/", "/pyarrow/", "/pyarrow.libs/")
"""Where the data stack's extension modules and libraries lie."""
MAPPING_FIELDS = ("Rss", "Private_Dirty", "Shared_Dirty", "Shared_Clean")


def _mapping_kind(path: str) -> str:
    """The kind of memory a mapping of ``path`` (the last field of its smaps header, "" when anonymous) holds."""
    if path in ("", "[heap]"):
        return "heap and anonymous (Python objects, C allocations)"
    if any(part in path for part in DATA_LIBRARY_DIRS):
        return "data stack's libraries"
    if path.startswith("/") and (".so" in path or "/python" in path):
        return "Python and other libraries"
    return "other (stacks, vdso, locale)"


def mappings(pid: int) -> dict[str, dict[str, float]]:
    """Process ``pid``'s memory by kind of mapping (:func:`_mapping_kind`), MB of each of :data:`MAPPING_FIELDS`
    (from ``/proc/<pid>/smaps``): where a launcher's or a worker's pages are, and which it shares."""
    out: dict[str, dict[str, float]] = {}
    kind = ""
    with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            head = line.split(None, 5)
            if "-" in head[0] and ":" not in head[0]:
                kind = _mapping_kind(head[5].strip() if len(head) > 5 else "")
                out.setdefault(kind, dict.fromkeys(MAPPING_FIELDS, 0.0))
            elif head[0].rstrip(":") in MAPPING_FIELDS:
                out[kind][head[0].rstrip(":")] += int(head[1]) / 1024
    return out


def _session_mappings(kernel_pid: int) -> dict[str, dict[str, dict[str, float]]]:
    """:func:`mappings` of the launcher and the worker under ``kernel_pid``."""
    launchers: set[int] = set()
    out = {}
    for proc in psutil.Process(kernel_pid).children(recursive=True):
        role = _role(proc, kernel_pid, launchers)
        if role in ("launcher", "worker"):
            out[role if role not in out else f"{role}:{proc.pid}"] = mappings(proc.pid)
    return out


def _print(label: str, rows: dict[str, Any]) -> None:
    parts = ", ".join(f"{k} {v['pss']:.0f}/{v['uss']:.0f}" for k, v in rows.items() if k not in SUMMARIES)
    alone = rows.get("alone")
    print(f"  {label:<10} PSS {rows['total']['pss']:6.1f} MB  USS {rows['total']['uss']:6.1f} MB   ({parts}); "
          f"session PSS {rows['session']['pss']:.1f}"
          + (f", alone {alone['pss']:.1f} ({', '.join(f'{k} {v}' for k, v in alone['parts'].items())})"
             if alone else ""))


def one_session(work: Path, *, ten: bool = True, by_mapping: bool = False) -> dict[str, Any]:
    """One kernel through the stages of the module docstring (``ten=False`` skips the ten cells; ``by_mapping``
    adds the launcher's and the worker's :func:`mappings` right after the first data cell, as ``"mappings"``)."""
    with ScriptedServer(reply_for=_reply) as server:
        kernel = Kernel(work)
        try:
            out = {"bare": _read(kernel)}
            cell = kernel.run("%load_ext harness_magic")
            assert cell.ok, cell.errors
            out["load_ext"] = _read(kernel)
            _setup(kernel, server.api_base)
            times = {"first cell": _cell(kernel)}
            out["1 cell"] = _read(kernel)
            out["idle"] = _read_idle(kernel)
            if ten:
                times["light cell"] = statistics.median(_cell(kernel) for _ in range(9))
                out["10 cells"] = _read_idle(kernel)
            _cell(kernel)  # the provider host back, so the data cells' times are the sandbox's
            times["first data cell"] = _cell(kernel, DATA_CELL)
            out["data cell"] = _read(kernel)
            if by_mapping:
                out["mappings"] = _session_mappings(_pid(kernel))
            times["next data cell"] = _cell(kernel, DATA_CELL)
            out["data cells"] = _read_idle(kernel)
            times["large cell"] = _cell(kernel, LARGE_CELL)
            out["large cell"] = _read(kernel)
            out["cell_s"] = times
            return out
        finally:
            kernel.close()


def many_sessions(work: Path, n: int, *, data: bool = False) -> dict[str, Any]:
    """``n`` kernels at once, each after one light cell (``data``: then one data cell), read once every provider
    host has gone idle."""
    with ScriptedServer(reply_for=_reply) as server:
        kernels: list[Kernel] = []
        try:
            for i in range(n):
                cwd = work / f"{'d' if data else 'k'}{i}"
                cwd.mkdir()
                kernel = Kernel(cwd)
                kernels.append(kernel)
                _setup(kernel, server.api_base)
                _cell(kernel)
                if data:
                    _cell(kernel, DATA_CELL)
            totals = [_read_idle(k)["total"] for k in kernels]
            return {"kernels": n, "data": data, "pss_total": sum(t["pss"] for t in totals),
                    "pss_per_kernel": sum(t["pss"] for t in totals) / n}
        finally:
            for kernel in kernels:
                kernel.close()


IMPORTS = {"litellm": "import litellm", "pandas + pyarrow": "import pandas, pyarrow",
           "harness_magic extension": "import IPython, harness_magic.notebook.extension"}
"""Single imports whose private memory (USS, MB) is printed beside the sessions' figures."""


def import_costs() -> dict[str, float]:
    """USS (MB) of a bare interpreter after each import in :data:`IMPORTS`, less a bare interpreter's."""
    probe = "import os, psutil\n{}\nprint(psutil.Process(os.getpid()).memory_full_info().uss)"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def uss(code: str) -> float:
        out = subprocess.run([sys.executable, "-c", probe.format(code)], capture_output=True, text=True,
                             check=True, env=env)
        return int(out.stdout.split()[-1]) / MB

    base = uss("pass")
    return {label: uss(code) - base for label, code in IMPORTS.items()}


# --- what each launcher preload costs and saves -------------------------------------------------

PRELOAD_SETS = {
    "none (now, at the start)": (),
    "numpy": ("numpy",),
    "numpy, pandas, pyarrow (before; now once warmed)": ("numpy", "pandas", "pyarrow"),
    "+ matplotlib (once a session drew)": ("numpy", "pandas", "pyarrow", "matplotlib"),
}
"""Sets of modules the model launcher preloads (names in ``launcher.WARM_UPS``); the launcher's is ``PRELOADED``."""

FIRST_USES = {
    "light": "x = sum(range(1000))",
    "pandas": ("import numpy as np, pandas as pd\nf = pd.DataFrame({'a': np.arange(100_000), 'b': np.arange(100_000) % 7})\n"
               "f.groupby('b')['a'].sum()"),
    "chart": ("import io, matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2], [3, 4])\n"
              "fig.savefig(io.BytesIO(), format='png')"),
}
"""The worker's call in the preload model: none of the preloads, a frame, a chart."""

PAIR = r'''
import gc, json, os, sys, tempfile, time
from harness_magic.core.execution.sandbox import launcher
wanted, call = json.loads(sys.argv[1]), sys.argv[2]
launcher.warm_up(wanted)
gc.collect()
launcher.share_with_workers()
read, write = os.pipe()
if os.fork() == 0:
    # as the worker: a fresh matplotlib config directory, no display
    os.environ.update({"MPLCONFIGDIR": tempfile.mkdtemp(), "MPLBACKEND": "Agg"})
    started = time.perf_counter()
    exec(call, {})
    took = time.perf_counter() - started
    gc.collect()  # a long-lived worker's full collections
    os.write(write, f"{took}\n".encode())
    time.sleep(3600)
    os._exit(0)
print(os.read(read, 100).decode().strip(), flush=True)
time.sleep(3600)
'''
"""A model launcher: the launcher's own warm-up of the modules asked for and its freeze, then one fork whose
worker runs the call and a full collection; prints the call's seconds and waits to be measured."""


def _pair_pss(procs: list[subprocess.Popen]) -> float:
    """PSS (MB) of the model launchers and their workers, per pair."""
    total = 0.0
    for proc in procs:
        root = psutil.Process(proc.pid)
        total += sum(p.memory_full_info().pss for p in [root, *root.children()]) / MB
    return total / len(procs)


def preload_pairs(modules: tuple[str, ...], call: str, n: int) -> dict[str, float]:
    """``n`` model launcher + worker pairs at once: PSS per pair (MB), the first pair's call time (ms)."""
    procs = [subprocess.Popen([sys.executable, "-c", PAIR, json.dumps(list(modules)), call],
                              stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir()) for _ in range(n)]
    try:
        took = [float(proc.stdout.readline()) for proc in procs]  # type: ignore[union-attr]  # stdout is a PIPE
        time.sleep(SETTLE_S)
        return {"pss": _pair_pss(procs), "first_use_ms": took[0] * 1000}
    finally:
        for proc in procs:
            for child in psutil.Process(proc.pid).children():
                child.kill()
            proc.kill()
            proc.wait()


def preload_costs(n: int, repeats: int = 3) -> dict[str, dict[str, Any]]:
    """For each preload set and worker call: PSS per pair alone and ``n`` at once, the call's time
    (median of ``repeats`` single pairs)."""
    out: dict[str, dict[str, Any]] = {}
    for label, modules in PRELOAD_SETS.items():
        for use, call in FIRST_USES.items():
            single = [preload_pairs(modules, call, 1) for _ in range(repeats)]
            many = preload_pairs(modules, call, n)
            out[f"{label} | {use}"] = {"pss": statistics.median(s["pss"] for s in single),
                                       "pss_many": many["pss"], "n": n,
                                       "first_use_ms": statistics.median(s["first_use_ms"] for s in single)}
    return out


def hub_row() -> dict[str, Any]:
    """Issue 35's table row: total PSS of one session (every process under the kernel) after one sandboxed cell;
    the same session once idle, after a data cell, and 5 sessions at once in the detail."""
    _drop_api_keys()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "one").mkdir()
        single = one_session(work / "one", ten=False)
        many = many_sessions(work, 5)
        many_data = many_sessions(work, 5, data=True)
    rows = single["1 cell"]
    value = rows["session"]["pss"]

    def parts(stage: dict[str, Any]) -> str:
        return " + ".join(f"{name} {v['pss']:.0f}" for name, v in stage.items() if name not in SUMMARIES)

    def alone(stage: dict[str, Any]) -> str:
        return f", alone {stage['alone']['pss']:.0f}" if "alone" in stage else ""

    times = single["cell_s"]
    return {"figure": "one session after one sandboxed cell (kernel + launcher + worker), PSS", "value": value,
            "unit": "MB", "goal": float(GOAL_MB), "met": value <= GOAL_MB,
            "detail": f"{parts(rows)}{alone(rows)}; idle {single['idle']['session']['pss']:.0f}{alone(single['idle'])}"
                      f"; right after a session's first 1e5-row pandas cell {single['data cell']['session']['pss']:.0f}"
                      f"{alone(single['data cell'])}, after a second one, idle "
                      f"{single['data cells']['session']['pss']:.0f}{alone(single['data cells'])} "
                      f"({parts(single['data cells'])}); right after a 1e6-row cell "
                      f"{single['large cell']['session']['pss']:.0f}{alone(single['large cell'])}; 5 sessions at "
                      f"once {many['pss_per_kernel']:.0f} per session (idle, all processes), 5 after a data cell "
                      f"{many_data['pss_per_kernel']:.0f}; bare kernel {single['bare']['total']['pss']:.0f}; "
                      f"cells: first "
                      f"{times['first cell']:.2f} s, first data {times['first data cell']:.2f} s, next data "
                      f"{times['next data cell']:.2f} s, 1e6-row {times['large cell']:.2f} s"}


def _drop_api_keys() -> None:
    """The kernel must use the scripted server, never a real provider."""
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        del os.environ[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=5, help="kernels at once for the marginal figure")
    parser.add_argument("--preloads", action="store_true", help="also measure each launcher preload's cost")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line too")
    parser.add_argument("--mappings", action="store_true",
                        help="also print the launcher's and the worker's memory by kind of mapping after a data cell")
    args = parser.parse_args()
    _drop_api_keys()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "one").mkdir()
        single = one_session(work / "one", by_mapping=args.mappings)
        by_mapping = single.pop("mappings", {})
        print(f"one session (MB; per process PSS/USS; provider_idle_s "
              f"{IDLE_S if provider_host_setting() else 'not in this checkout'}):")
        times = single.pop("cell_s")
        for label, rows in single.items():
            _print(label, rows)
        print("  cell wall times: " + ", ".join(f"{label} {took:.2f} s" for label, took in times.items()))
        for role, kinds in by_mapping.items():
            print(f"  {role} right after the first data cell, by mapping (MB: resident, private dirty, shared dirty, "
                  "shared clean):")
            for kind, fig in kinds.items():
                print(f"    {kind:<52} " + "  ".join(f"{fig[field]:6.1f}" for field in MAPPING_FIELDS))
        many = many_sessions(work, args.kernels)
        print(f"{many['kernels']} sessions at once, idle: PSS {many['pss_total']:.0f} MB in all, "
              f"{many['pss_per_kernel']:.1f} MB per session")
        many_data = many_sessions(work, args.kernels, data=True)
        print(f"{many_data['kernels']} sessions at once after a data cell, idle: PSS {many_data['pss_total']:.0f} MB "
              f"in all, {many_data['pss_per_kernel']:.1f} MB per session")
        for label, cost in import_costs().items():
            print(f"  import {label}: USS +{cost:.0f} MB")
        preloads = preload_costs(args.kernels) if args.preloads else {}
        if preloads:
            print(f"launcher preloads (model launcher + worker PSS per pair, alone / {args.kernels} at once; "
                  "the worker's call time, median of 3):")
            for label, fig in preloads.items():
                print(f"  {label:<50} {fig['pss']:6.1f} / {fig['pss_many']:6.1f} MB  {fig['first_use_ms']:7.0f} ms")
        after_one = single["1 cell"]["session"]["pss"]
        print(f"goal: at most {GOAL_MB} MB per session (kernel + launcher + worker) after one cell: "
              f"{'met' if after_one <= GOAL_MB else 'missed'} ({after_one:.0f} MB; idle "
              f"{single['idle']['session']['pss']:.0f} MB)")
        single["cell_s"] = times
        if args.json:
            print(json.dumps({"single": single, "many": many, "many_data": many_data, "preloads": preloads,
                              "mappings": by_mapping}))


if __name__ == "__main__":
    main()
