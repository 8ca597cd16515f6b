"""Live tool output from the sandbox worker: how soon a printed line reaches the kernel, and what
streaming costs a print-heavy call.

    .venv/bin/python benchmarks/bench_streaming.py

Latency: the worker prints one line (flush=True) every 200 ms; each line carries the worker's
wall-clock time, and the callback in the kernel records when it arrived. The physical floor is
one pipe write + one read (tens of µs); the design adds up to the relay interval when lines come
faster than it. Overhead: a call printing N lines with and without a callback in the kernel (the
worker sends output frames in every call, at most STREAM_MAX_CHARS of them; past that a print costs
what it did before). The same for the in-process backend, and the time of the fork step that gives
each cell a fresh worker.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness_magic.core.execution.sandbox import SandboxedInterpreter  # noqa: E402
from harness_magic.core.execution.sandbox.watchdog import STREAM_MAX_CHARS, STREAM_RELAY_INTERVAL_S  # noqa: E402

LATENCY_CODE = ("import time\nfor i in range(15):\n    print(repr(time.time()), flush=True)\n    time.sleep(0.2)")


def main() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        box = SandboxedInterpreter(ast_precheck=False, audit_hooks=False, timeout=120)
    try:
        arrivals: list[tuple[float, str]] = []
        box.execute(LATENCY_CODE, {}, [], on_output=lambda t: arrivals.append((time.time(), t)))
        delays = []
        for at, text in arrivals:
            for line in text.splitlines():
                delays.append((at - float(line)) * 1000)
        print(f"{'measure':44} {'value':>12}")
        print(f"{'lines printed / delivered':44} {15:>5} / {len(delays):<5}")
        print(f"{'print -> callback, median (ms)':44} {statistics.median(delays):12.2f}")
        print(f"{'print -> callback, max (ms)':44} {max(delays):12.2f}")
        print(f"{'relay interval (design bound, ms)':44} {STREAM_RELAY_INTERVAL_S * 1000:12.0f}")
        _print_cost(box, "")
        print(f"{'streamed chars per call (cap)':44} {STREAM_MAX_CHARS:12,}")
        _inprocess()
        forks = []
        for _ in range(10):
            box.retire_worker()
            forks.append(box.start_worker() * 1000)
        print(f"{'fresh worker per cell (fork step), median (ms)':44} {statistics.median(forks):12.1f}")
    finally:
        box.close()


def _inprocess() -> None:
    """The same figures for the in-process backend (no pipe: the floor is a function call)."""
    from harness_magic.core.execution.interpreter import InProcessInterpreter

    backend = InProcessInterpreter()
    arrivals: list[tuple[float, str]] = []
    backend.execute(LATENCY_CODE, {}, [], on_output=lambda t: arrivals.append((time.time(), t)))
    delays = [(at - float(line)) * 1000 for at, text in arrivals for line in text.splitlines()]
    print(f"{'in-process: print -> callback, median (ms)':44} {statistics.median(delays):12.3f}")
    _print_cost(backend, "in-process: ")


def _print_cost(backend, label: str) -> None:
    """Best of 3 for 1,000 and 100,000 prints, with nobody streaming (callback off) and with a view watching."""
    for lines in (1_000, 100_000):
        code = f"for i in range({lines}):\n    print('row', i)"
        runs = {}
        for mode, callback in (("off", None), ("on", lambda t: None)):
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                backend.execute(code, {}, [], on_output=callback)
                best = min(best, time.perf_counter() - started)
            runs[mode] = best
        print(f"{f'{label}{lines:,} prints, callback off / on (ms)':44} {runs['off'] * 1000:8.1f} / "
              f"{runs['on'] * 1000:.1f}  (x{runs['on'] / runs['off']:.2f})")

if __name__ == "__main__":
    main()
