"""Provider host benchmark: what running litellm in its own process costs a model call, and what it holds.

Run::

    .venv/bin/python benchmarks/bench_provider_host.py            # 50 calls each way
    .venv/bin/python benchmarks/bench_provider_host.py --calls 200

Against the scripted OpenAI-compatible server (tests/scripted_server.py, on 127.0.0.1), one small streamed
completion (a short answer, usage included):

1. the first call through a fresh provider host (the host's start, its ``import litellm``, the call) and the
   same first call in a fresh interpreter that imports litellm itself (what a kernel paid before);
2. then ``--calls`` calls each way, interleaved (in-process :class:`LiteLLMTransport` and
   :class:`HostedTransport`): median and p90 wall milliseconds, and the median added by the host;
3. the host's memory (PSS and USS, MB, from ``/proc/<pid>/smaps_rollup``) once it has served them: what an
   idle kernel no longer holds once the host exits after ``provider_idle_s``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from scripted_server import ScriptedServer  # noqa: E402

from harness_magic.core.providers.hosted import HostedTransport, ProviderHost  # noqa: E402
from harness_magic.core.providers.transport import LiteLLMTransport  # noqa: E402

PAYLOAD = {"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "Say hi."}]}
REPLY = {"text": "Hi there."}
FIRST_CALL_HERE = """\
import sys, time
sys.path.insert(0, {tests!r})
start = time.perf_counter()
from harness_magic.core.providers.transport import LiteLLMTransport
LiteLLMTransport(api_base={base!r}, api_key="sk-bench").complete({payload!r}, None)
print(time.perf_counter() - start)
"""


def memory_mb(pid: int) -> tuple[float, float]:
    """(PSS, USS) of process ``pid`` in MB."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0])
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return fields.get("Pss", 0) / 1024, uss / 1024


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="calls each way after the first (default 50)")
    args = parser.parse_args()
    with ScriptedServer(reply_for=lambda body: REPLY) as server:
        host = ProviderHost()
        hosted = HostedTransport(api_base=server.api_base, api_key="sk-bench", host=host)
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
        pid = host.pid
        pss, uss = memory_mb(pid) if pid is not None else (0.0, 0.0)
        host.close()

    def p90(values: list[float]) -> float:
        return sorted(values)[int(len(values) * 0.9) - 1]

    print("| figure | in the kernel (litellm imported there) | through the provider host |")
    print("|---|---|---|")
    print(f"| first call (import litellm + call; host: its start too) | {first_here:,.0f} ms | {first_hosted:,.0f} ms |")
    print(f"| small streamed completion, median of {args.calls} | {statistics.median(here):.2f} ms | "
          f"{statistics.median(there):.2f} ms |")
    print(f"| same, p90 | {p90(here):.2f} ms | {p90(there):.2f} ms |")
    print(f"| added by the host (median) | | {statistics.median(there) - statistics.median(here):+.2f} ms |")
    print(f"| the host's memory after the calls | | PSS {pss:.0f} MB, USS {uss:.0f} MB |")


if __name__ == "__main__":
    main()
