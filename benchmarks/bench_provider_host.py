"""Provider host benchmark: what running litellm in its own process costs a model call, and what it holds.

Run::

    .venv/bin/python benchmarks/bench_provider_host.py            # 50 calls each way, 3 restarts each way
    .venv/bin/python benchmarks/bench_provider_host.py --calls 200 --restarts 5

Against the scripted OpenAI-compatible server (tests/scripted_server.py, on 127.0.0.1), one small streamed
completion (a short answer, usage included):

1. the first call through a fresh provider host (the host's start, its ``import litellm``, the call) and the
   same first call in a fresh interpreter that imports litellm itself (what a kernel paid before);
2. then ``--calls`` calls each way, interleaved (in-process :class:`LiteLLMTransport` and
   :class:`HostedTransport`): median and p90 wall milliseconds, and the median added by the host;
3. the host's memory (PSS, USS and RSS, MB, from ``/proc/<pid>/smaps_rollup``) once started (litellm
   imported) and once it has served the calls and a token count (a tokenizer loaded): what an idle kernel no
   longer holds once the host exits after ``provider_idle_s``. PSS and USS depend on which other processes
   map the same libraries (another host, a test run); RSS does not;
4. the restart: an ``%%agent`` cell (IPython in this process, the sandboxed worker, a one-answer model) run
   after the host exited idle, a session's first cell and a later one, ``--restarts`` times each with the
   cell's background start of the host (``warm_up_provider``, as shipped: the session is built while
   litellm imports) and as many without it (replaced by nothing), interleaved: median wall seconds each
   way, against a cell whose host is alive;
5. a kernel whose model lacks its key (``openai/gpt-4o-mini``, no ``OPENAI_API_KEY``, no ``api_base``): started,
   its first ``%%agent`` cell refused, shut down, ``--no-key-kernels`` times each way, interleaved, with a
   fresh cache folder (the host starts, imports litellm and says "No API key") and with the missing-key record
   the first one wrote (no host): median CPU seconds of the kernel and everything it started (the kernel is
   reaped, so its children's time is in ours) and median wall seconds of the cell.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from scripted_server import ScriptedServer  # noqa: E402

from harness_magic.core.providers.hosted import HostedTransport, ProviderHost, shared_host  # noqa: E402
from harness_magic.core.providers.transport import LiteLLMTransport  # noqa: E402

MODEL = "openai/gpt-4o-mini"
PAYLOAD = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}]}
REPLY = {"text": "Hi there."}
RESTART_IDLE_S = 1.0
"""``provider_idle_s`` of the restart runs: the host exits this long after a run's last request."""
GONE_WAIT_S = 120.0
"""How long a restart round waits for the host to exit idle."""
FIRST_CALL_HERE = """\
import sys, time
sys.path.insert(0, {tests!r})
start = time.perf_counter()
from harness_magic.core.providers.transport import LiteLLMTransport
LiteLLMTransport(api_base={base!r}, api_key="sk-bench").complete({payload!r}, None)
print(time.perf_counter() - start)
"""


def memory_mb(pid: int) -> tuple[float, float, float]:
    """(PSS, USS, RSS) of process ``pid`` in MB."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0])
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return fields.get("Pss", 0) / 1024, uss / 1024, fields.get("Rss", 0) / 1024


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def wait_exited(host: ProviderHost) -> None:
    deadline = time.monotonic() + GONE_WAIT_S
    while host.pid is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if host.pid is not None:
        raise RuntimeError(f"the provider host did not exit within {GONE_WAIT_S:g} s of idling")


def restarts(server: ScriptedServer, rounds: int) -> dict[str, list[float]]:
    """Seconds of an ``%%agent`` cell (an in-process IPython shell, the sandboxed worker, a one-answer model)
    asked after the host exited idle: a session's first cell and a later one, each with the cell's warm-up
    (:func:`warm_up_provider`, as shipped) and without it (replaced by nothing); and a cell whose host is alive."""
    from IPython.core.interactiveshell import InteractiveShell

    from harness_magic.core.providers import adapter as adapter_module

    shipped = adapter_module.warm_up_provider

    def without(*args: Any, **kwargs: Any) -> bool:
        return False

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harness_magic")
    magics = shell.magics_manager.registry["AgentMagics"]
    host = shared_host()
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as run_dir:
        for setting in (f"api_base = {server.api_base!r}", f"run_dir = {run_dir!r}", "live = 'off'",
                        f"provider_idle_s = {RESTART_IDLE_S}"):
            shell.run_line_magic("config", f"AgentMagics.{setting}")

        def cell() -> float:
            with contextlib.redirect_stdout(io.StringIO()):
                return timed(lambda: shell.run_cell_magic("agent", f"-m {MODEL}", "Say hi.")) / 1000

        try:
            cell()  # the sandbox's launcher and worker started, the host running
            times["host alive"] = [cell()]
            for _ in range(rounds):
                for way, hook in (("no warm-up", without), ("warm-up", shipped)):
                    adapter_module.warm_up_provider = hook  # type: ignore[assignment]  # the bench's switch
                    try:
                        magics.close()  # the next cell builds a new session
                        wait_exited(host)
                        times.setdefault(f"first cell, {way}", []).append(cell())
                        wait_exited(host)
                        times.setdefault(f"later cell, {way}", []).append(cell())
                    finally:
                        adapter_module.warm_up_provider = shipped
        finally:
            magics.close()
    return times


NO_KEY_MODEL = "openai/gpt-4o-mini"
NO_KEY_CELL = f"%%agent -m {NO_KEY_MODEL}\nWhat is 1 + 1?"


def no_key_kernel(home: Path) -> tuple[float, float]:
    """(CPU seconds of a kernel and its children, wall seconds of its cell) for one missing-key first cell."""
    import resource

    from jupyter_client import KernelManager

    env = {name: value for name, value in os.environ.items() if not name.endswith("_API_KEY")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / "cache"), LITELLM_LOCAL_MODEL_COST_MAP="True")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    manager = KernelManager(kernel_name="harness-agent")
    manager.start_kernel(cwd=str(home), env=env)
    client = manager.client()
    client.start_channels()
    said: list[str] = []
    try:
        client.wait_for_ready(timeout=120)
        cell_s = timed(lambda: client.execute_interactive(
            NO_KEY_CELL, timeout=120, output_hook=lambda message: said.append(str(message["content"])))) / 1000
    finally:
        client.stop_channels()
        manager.shutdown_kernel()
        manager.cleanup_resources()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not any("No API key for model" in text for text in said):
        raise RuntimeError(f"the cell did not say 'No API key for model': {said[-3:]}")
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), cell_s


def no_key_kernels(rounds: int) -> dict[str, list[tuple[float, float]]]:
    """:func:`no_key_kernel` ``rounds`` times with no record (the host answers) and with the record, interleaved."""
    import shutil

    ways: dict[str, list[tuple[float, float]]] = {"no record: the host imports litellm": [],
                                                  "the missing-key record": []}
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        for _ in range(rounds):
            shutil.rmtree(home / "cache", ignore_errors=True)
            ways["no record: the host imports litellm"].append(no_key_kernel(home))
            ways["the missing-key record"].append(no_key_kernel(home))
    return ways


def main() -> None:
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")  # the cells' model is the scripted server
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="calls each way after the first (default 50)")
    parser.add_argument("--restarts", type=int, default=3, help="runs after an idle exit, each way (default 3)")
    parser.add_argument("--no-key-kernels", type=int, default=3,
                        help="missing-key kernels each way (default 3; 0 skips them)")
    args = parser.parse_args()
    with ScriptedServer(reply_for=lambda body: REPLY) as server:
        host = ProviderHost()
        hosted = HostedTransport(api_base=server.api_base, api_key="sk-bench", host=host)
        hosted.route(MODEL)
        pid = host.pid
        started = memory_mb(pid) if pid is not None else (0.0, 0.0, 0.0)
        host.stop()
        first_hosted = timed(lambda: hosted.complete(PAYLOAD, None))
        code = FIRST_CALL_HERE.format(tests=str(ROOT / "tests"), base=server.api_base, payload=PAYLOAD)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
        first_here = float(done.stdout.strip().splitlines()[-1]) * 1000
        local = LiteLLMTransport(api_base=server.api_base, api_key="sk-bench")
        local.complete(PAYLOAD, None)  # litellm imported and warm in this process too
        here, there = [], []
        for _ in range(args.calls):
            here.append(timed(lambda: local.complete(PAYLOAD, None)))
            there.append(timed(lambda: hosted.complete(PAYLOAD, None)))
        hosted.token_counts(MODEL, [PAYLOAD["messages"]])
        pid = host.pid
        served = memory_mb(pid) if pid is not None else (0.0, 0.0, 0.0)
        host.close()
        restart = restarts(server, args.restarts)

    def p90(values: list[float]) -> float:
        return sorted(values)[int(len(values) * 0.9) - 1]

    print("| figure | in the kernel (litellm imported there) | through the provider host |")
    print("|---|---|---|")
    print(f"| first call (import litellm + call; host: its start too) | {first_here:,.0f} ms | {first_hosted:,.0f} ms |")
    print(f"| small streamed completion, median of {args.calls} | {statistics.median(here):.2f} ms | "
          f"{statistics.median(there):.2f} ms |")
    print(f"| same, p90 | {p90(here):.2f} ms | {p90(there):.2f} ms |")
    print(f"| added by the host (median) | | {statistics.median(there) - statistics.median(here):+.2f} ms |")
    for label, (pss, uss, rss) in (("started (litellm imported)", started),
                                   (f"after {args.calls + 1} calls and a token count", served)):
        print(f"| the host's memory, {label} | | PSS {pss:.0f} MB, USS {uss:.0f} MB, RSS {rss:.0f} MB |")
    print()
    print(f"| %%agent cell (sandboxed worker, one answer), median of {args.restarts} | seconds |")
    print("|---|---|")
    for way in ("first cell, no warm-up", "first cell, warm-up", "later cell, no warm-up", "later cell, warm-up",
                "host alive"):
        values = restart[way]
        label = way if way == "host alive" else f"after the host exited idle: {way}"
        print(f"| {label} | {statistics.median(values):.2f} (each: {', '.join(f'{v:.2f}' for v in values)}) |")
    if args.no_key_kernels > 0:
        print()
        print(f"| a kernel whose model lacks its key, median of {args.no_key_kernels} | CPU s (kernel + children) "
              "| cell wall s |")
        print("|---|---|---|")
        for way, rows in no_key_kernels(args.no_key_kernels).items():
            print(f"| {way} | {statistics.median(r[0] for r in rows):.2f} "
                  f"(each: {', '.join(f'{r[0]:.2f}' for r in rows)}) | {statistics.median(r[1] for r in rows):.2f} |")


if __name__ == "__main__":
    main()
