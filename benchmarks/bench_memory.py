"""Memory of one analyst's session on a shared node: PSS and USS of every process a kernel owns.

    .venv/bin/python benchmarks/bench_memory.py [--kernels N]

A real kernel (``jupyter_client``) is measured at four points:

* **bare**: started, nothing run;
* **load_ext**: after ``%load_ext harness_magic``;
* **1 cell**: after one ``%%agent`` cell whose model (the scripted OpenAI-compatible server over
  HTTP, through litellm: the path users take) runs one sandboxed ``python_interpreter`` call;
* **10 cells**: after ten such cells.

Each figure is the process tree under the kernel (kernel, sandbox launcher, worker), read from
``/proc/<pid>/smaps_rollup`` through psutil: PSS (shared pages split between the processes that map
them: what adding a session costs the node) and USS (pages only that process holds). Then
``--kernels N`` (default 5) kernels at once, each after one cell: their total PSS over the node's
whole tree, divided by N, is the marginal cost of one more analyst.

What one import costs is printed too (litellm, pandas + pyarrow, in a bare interpreter), since the
kernel's share is mostly theirs.

The issue's goal: at most 150 MB PSS per session after one sandboxed cell (100 analysts in 15 GB).
"""

from __future__ import annotations

import argparse
import json
import os
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

GOAL_MB = 150
"""Issue 35's goal for one session after one sandboxed cell."""
MB = 1024 * 1024
SETTLE_S = 1.0
"""Seconds to let a kernel finish its idle work (history writes, comm traffic) before reading /proc."""
CELL = "%%agent -m openai/bench\nCount to one."
TURNS_PER_CELL = 2


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _figures(pid: int) -> dict[str, Any]:
    """PSS and USS (MB) of each process under ``pid``: the kernel, its launcher, the workers forked from it."""
    rows: dict[str, dict[str, float]] = {}
    for proc in _tree(pid):
        try:
            info = proc.memory_full_info()
            parent = proc.ppid()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        # The worker is forked from the launcher, so both show the launcher's command line: tell them by depth.
        name = "kernel" if proc.pid == pid else "launcher" if parent == pid else "worker"
        key = name if name not in rows else f"{name}:{proc.pid}"
        rows[key] = {"pss": info.pss / MB, "uss": info.uss / MB}
    rows["total"] = {"pss": sum(r["pss"] for r in rows.values()), "uss": sum(r["uss"] for r in rows.values())}
    return rows


def _turns(n_cells: int) -> list[dict[str, Any]]:
    call = {"name": "python_interpreter", "arguments": {"code": "x = sum(range(1000)); print(x)"}}
    return [{"text": "", "tool_calls": [call]} if i % TURNS_PER_CELL == 0 else {"text": "499500"}
            for i in range(n_cells * TURNS_PER_CELL)]


def _setup(kernel: Kernel, api_base: str) -> None:
    cell = kernel.run("%load_ext harness_magic\n"
                      f"%config AgentMagics.api_base = {api_base!r}\n"
                      "%config AgentMagics.run_dir = 'runs'\n"
                      "%config AgentMagics.live = 'off'\n")
    assert cell.ok, (cell.errors, cell.stderr)


def _agent_cell(kernel: Kernel) -> None:
    cell = kernel.run(CELL)
    assert cell.ok, (cell.errors, cell.stderr)


def _pid(kernel: Kernel) -> int:
    return kernel.km.provisioner.process.pid  # type: ignore[union-attr]  # local provisioner: a Popen


def _read(kernel: Kernel) -> dict[str, Any]:
    time.sleep(SETTLE_S)
    return _figures(_pid(kernel))


def _print(label: str, rows: dict[str, Any]) -> None:
    parts = ", ".join(f"{k} {v['pss']:.0f}/{v['uss']:.0f}" for k, v in rows.items() if k != "total")
    print(f"  {label:<10} PSS {rows['total']['pss']:6.1f} MB  USS {rows['total']['uss']:6.1f} MB   ({parts})")


def one_session(work: Path) -> dict[str, Any]:
    with ScriptedServer(_turns(11)) as server:
        return _one_session(work, server)


def _one_session(work: Path, server: ScriptedServer) -> dict[str, Any]:
    kernel = Kernel(work)
    try:
        out = {"bare": _read(kernel)}
        cell = kernel.run("%load_ext harness_magic")
        assert cell.ok, cell.errors
        out["load_ext"] = _read(kernel)
        cell = kernel.run(f"%config AgentMagics.api_base = {server.api_base!r}\n"
                          "%config AgentMagics.run_dir = 'runs'\n%config AgentMagics.live = 'off'")
        assert cell.ok, (cell.errors, cell.stderr)
        _agent_cell(kernel)
        out["1 cell"] = _read(kernel)
        for _ in range(9):
            _agent_cell(kernel)
        out["10 cells"] = _read(kernel)
        return out
    finally:
        kernel.close()


def many_sessions(work: Path, n: int) -> dict[str, Any]:
    with ScriptedServer(_turns(n)) as server:
        return _many_sessions(work, n, server)


def _many_sessions(work: Path, n: int, server: ScriptedServer) -> dict[str, Any]:
    kernels: list[Kernel] = []
    try:
        for i in range(n):
            cwd = work / f"k{i}"
            cwd.mkdir()
            kernel = Kernel(cwd)
            kernels.append(kernel)
            _setup(kernel, server.api_base)
            _agent_cell(kernel)
        time.sleep(SETTLE_S)
        totals = [_figures(_pid(k))["total"] for k in kernels]
        return {"kernels": n, "pss_total": sum(t["pss"] for t in totals),
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


def hub_row() -> dict[str, Any]:
    """Issue 35's table row: total PSS of one session (kernel, launcher, worker) after one sandboxed cell."""
    _drop_api_keys()
    with tempfile.TemporaryDirectory() as tmp:
        single = one_session(Path(tmp))
    rows = single["1 cell"]
    value = rows["total"]["pss"]
    parts = " + ".join(f"{name} {v['pss']:.0f}" for name, v in rows.items() if name != "total")
    costs = import_costs()
    return {"figure": "one session after one sandboxed cell, PSS", "value": value, "unit": "MB",
            "goal": float(GOAL_MB), "met": value <= GOAL_MB,
            "detail": f"{parts}; bare kernel {single['bare']['total']['pss']:.0f}; "
                      f"import litellm alone +{costs['litellm']:.0f} MB USS, "
                      f"pandas + pyarrow +{costs['pandas + pyarrow']:.0f}"}


def _drop_api_keys() -> None:
    """The kernel must use the scripted server, never a real provider."""
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        del os.environ[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=5, help="kernels at once for the marginal figure")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line too")
    args = parser.parse_args()
    _drop_api_keys()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "one").mkdir()
        single = one_session(work / "one")
        print("one session (MB; per process PSS/USS):")
        for label, rows in single.items():
            _print(label, rows)
        many = many_sessions(work, args.kernels)
        print(f"{many['kernels']} sessions at once: PSS {many['pss_total']:.0f} MB in all, "
              f"{many['pss_per_kernel']:.1f} MB per session")
        for label, cost in import_costs().items():
            print(f"  import {label}: USS +{cost:.0f} MB")
        after_one = single["1 cell"]["total"]["pss"]
        print(f"goal: at most {GOAL_MB} MB per session after one cell: "
              f"{'met' if after_one <= GOAL_MB else 'missed'} ({after_one:.0f} MB)")
        if args.json:
            print(json.dumps({"single": single, "many": many}))


if __name__ == "__main__":
    main()
