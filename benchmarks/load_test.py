"""Many analysts at once: N kernels started through a real ``jupyter_server``, each running sandboxed cells.

    .venv/bin/python benchmarks/load_test.py [--kernels 50] [--cells 1]

What a shared hub node does, end to end:

1. a scripted OpenAI-compatible server (``tests/scripted_server.py``) answers every conversation by
   its content (a ``python_interpreter`` call first, then an answer once the tool result is in), so
   concurrent kernels need no shared script order;
2. ``jupyter_server`` is started on a free port with a token; N kernels are created through its REST
   API (``POST /api/kernels``) and driven over its kernel websockets (the protocol JupyterLab uses);
3. every kernel loads the extension and runs ``--cells`` ``%%agent`` cells, all kernels at once, each
   cell a sandboxed interpreter call through the confined worker;
4. reported: cells completed, p50/p95 cell time, total PSS of the server's process tree at the end
   (kernels, launchers, workers) and per kernel; then every kernel is shut down through the API, the
   server is stopped, and the run fails if any process it started is still alive.

No timed assertion anywhere: the figures are printed (``--json`` for one JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from scripted_server import ScriptedServer  # noqa: E402  (tests/ holds the scripted model server)

MB = 1024 * 1024
SERVER_START_S = 60
CELL_TIMEOUT_S = 600
"""A cell still running after this is counted as not completed (the node is overloaded, not hung)."""
SHUTDOWN_GRACE_S = 30
"""Seconds every process the server started has to be gone after the server stops."""
TOOL_CODE = "total = sum(i * i for i in range(100_000)); print(total)"
SETUP = ("%load_ext harness_magic\n%config AgentMagics.api_base = {api_base!r}\n"
         "%config AgentMagics.live = 'off'\n%config AgentMagics.run_dir = 'runs/k{index}'")
CELL = "%%agent -m openai/load\nSum the squares below 100000."


def reply_for(request: dict[str, Any]) -> dict[str, Any]:
    """A tool call for a fresh question, the answer once the tool's result is the last message."""
    last = request["messages"][-1]
    if last.get("role") == "tool":
        return {"text": "The sum is 333328333350000."}
    return {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": TOOL_CODE}}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Hub:
    """A ``jupyter_server`` process on 127.0.0.1 with a token, and an HTTP client for its REST API."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.token = secrets.token_hex(16)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        args = [sys.executable, "-m", "jupyter_server", f"--ServerApp.port={self.port}",
                f"--IdentityProvider.token={self.token}", "--ServerApp.open_browser=False",
                f"--ServerApp.root_dir={root}", "--ServerApp.ip=127.0.0.1"]
        if os.geteuid() == 0:
            args.append("--allow-root")
        self.log = open(root / "server.log", "w")
        self.process = subprocess.Popen(args, env=env, cwd=root, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        self.client = AsyncHTTPClient()

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"token {self.token}"}
        payload = json.dumps(body) if body is not None else (None if method in ("GET", "DELETE") else "")
        response = await self.client.fetch(HTTPRequest(f"{self.base}{path}", method=method, headers=headers,
                                                        body=payload, request_timeout=120))
        return json.loads(response.body) if response.body else None

    async def ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                await self.request("GET", "/api/status")
                return
            except (ConnectionError, OSError, Exception):  # noqa: BLE001  (not up yet: refused or 5xx)
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter_server did not start; see {self.log.name}") from None
                await asyncio.sleep(0.25)

    def tree(self) -> list[psutil.Process]:
        root = psutil.Process(self.process.pid)
        return [root, *root.children(recursive=True)]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=SHUTDOWN_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


class KernelSocket:
    """One kernel's websocket: send an execute request, wait for its reply and idle status."""

    def __init__(self, hub: Hub, kernel_id: str) -> None:
        self.hub = hub
        self.kernel_id = kernel_id
        self.session = uuid.uuid4().hex

    async def connect(self) -> None:
        url = f"ws://127.0.0.1:{self.hub.port}/api/kernels/{self.kernel_id}/channels?session_id={self.session}"
        request = HTTPRequest(url, headers={"Authorization": f"token {self.hub.token}"})
        self.ws = await websocket_connect(request)

    async def execute(self, code: str) -> tuple[bool, float, str]:
        """Run ``code``; (ok, seconds, error text)."""
        msg_id = uuid.uuid4().hex
        message = {"header": {"msg_id": msg_id, "username": "load", "session": self.session,
                              "msg_type": "execute_request", "version": "5.3"},
                   "parent_header": {}, "metadata": {}, "channel": "shell",
                   "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                               "allow_stdin": False, "stop_on_error": True}}
        start = time.perf_counter()
        await self.ws.write_message(json.dumps(message))
        status, idle, errors = None, False, []
        while status is None or not idle:
            raw = await asyncio.wait_for(self.ws.read_message(), CELL_TIMEOUT_S)
            if raw is None:
                return False, time.perf_counter() - start, "websocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "execute_reply":
                status = msg["content"]["status"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
            elif kind == "error":
                errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
            elif kind == "stream" and msg["content"]["name"] == "stderr" and "Error" in msg["content"]["text"]:
                errors.append(msg["content"]["text"].strip()[-300:])
        return status == "ok" and not errors, time.perf_counter() - start, "; ".join(errors)

    def close(self) -> None:
        self.ws.close()


async def analyst(hub: Hub, index: int, api_base: str, cells: int) -> dict[str, Any]:
    kernel = await hub.request("POST", "/api/kernels", {"name": "python3"})
    sock = KernelSocket(hub, kernel["id"])
    await sock.connect()
    try:
        ok, _, error = await sock.execute(SETUP.format(api_base=api_base, index=index))
        if not ok:
            return {"kernel": kernel["id"], "setup_error": error, "cells": []}
        times = []
        for _ in range(cells):
            ok, seconds, error = await sock.execute(CELL)
            times.append({"ok": ok, "s": seconds, "error": error})
        return {"kernel": kernel["id"], "cells": times}
    finally:
        sock.close()


def tree_pss(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        try:
            total += proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / MB


async def load(kernels: int, cells: int, root: Path) -> dict[str, Any]:
    with ScriptedServer(reply_for=reply_for) as model:
        hub = Hub(root)
        started: set[int] = set()
        try:
            await hub.ready()
            base_pss = tree_pss(hub.tree())
            t0 = time.perf_counter()
            results = await asyncio.gather(*(analyst(hub, i, model.api_base, cells) for i in range(kernels)))
            wall = time.perf_counter() - t0
            tree = hub.tree()
            started = {p.pid for p in tree} - {hub.process.pid}
            pss = tree_pss(tree)
            for kernel in await hub.request("GET", "/api/kernels"):
                await hub.request("DELETE", f"/api/kernels/{kernel['id']}")
        finally:
            hub.stop()
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        while time.monotonic() < deadline and any(psutil.pid_exists(pid) and _alive(pid) for pid in started):
            await asyncio.sleep(0.5)
        left = sorted(pid for pid in started if psutil.pid_exists(pid) and _alive(pid))
        tool_results = sum(1 for r in model.requests if r["messages"][-1].get("role") == "tool")
    times = [c["s"] for r in results for c in r["cells"] if c["ok"]]
    failures = [c["error"] or "failed" for r in results for c in r["cells"] if not c["ok"]]
    failures += [r["setup_error"] for r in results if "setup_error" in r]
    quantiles = statistics.quantiles(times, n=20) if len(times) >= 2 else times * 19
    return {"kernels": kernels, "cells": kernels * cells, "completed": len(times), "failures": failures[:5],
            "p50_s": statistics.median(times) if times else None, "p95_s": quantiles[18] if times else None,
            "wall_s": wall, "server_pss_mb": base_pss, "tree_pss_mb": pss,
            "pss_per_kernel_mb": (pss - base_pss) / kernels, "processes": len(started), "left_behind": left,
            "model_requests": len(model.requests), "tool_results": tool_results}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=50)
    parser.add_argument("--cells", type=int, default=1, help="%%agent cells per kernel, one after the other")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(load(args.kernels, args.cells, Path(tmp)))
    print(f"{out['kernels']} kernels through jupyter_server, {out['cells']} sandboxed %%agent cells: "
          f"{out['completed']} completed in {out['wall_s']:.1f} s "
          f"({out['model_requests']} model requests, {out['tool_results']} after a tool result)")
    if out["completed"]:
        print(f"  cell time p50 {out['p50_s']:.2f} s, p95 {out['p95_s']:.2f} s (all kernels at once)")
    print(f"  PSS of the server's tree: {out['tree_pss_mb']:.0f} MB ({out['server_pss_mb']:.0f} MB the server "
          f"alone), {out['pss_per_kernel_mb']:.0f} MB per kernel; {out['processes']} processes started")
    print(f"  left behind after shutdown: {out['left_behind'] or 'none'}")
    for failure in out["failures"]:
        print(f"  failure: {failure}")
    if args.json:
        print(json.dumps(out))
    if out["left_behind"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
