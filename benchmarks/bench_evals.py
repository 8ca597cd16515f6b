"""Evaluation harness: overhead per task (model time excluded) and wall time against ``--jobs``.

Run::

    .venv/bin/python benchmarks/bench_evals.py              # the whole core suite
    .venv/bin/python benchmarks/bench_evals.py --tasks 12   # quicker

The model is each task's reference script (``suite:reference``): it answers
instantly, so what is measured is the harness — a fresh session, cache and
sandbox worker per attempt, loading inputs, tool calls in the worker, grading,
the run log. Model time (the run log's per-turn latency) is subtracted anyway.

Tables printed (markdown):

1. Per attempt at ``--jobs 1``: wall, model time, overhead (wall - model), and
   the parts of that overhead measured on their own: starting and closing a
   session with its worker, and a one-turn run that answers without a tool call.
   The physical floor is a bare ``python -c pass`` process start (a worker is a
   new interpreter); the ratio says how far above it one attempt's overhead is.
2. Whole-suite wall time for ``--jobs`` 1, 2, 4: speed-up over ``--jobs 1`` against
   min(jobs, CPU cores), the limit if attempts were CPU-bound. Part of an attempt is
   waiting (worker start-up handshakes, pipes), so more jobs than cores still help a
   little; efficiency above 100 % shows that waiting.

Measured on the 2-core development machine (busy with other work): 0.28 s wall per
attempt, 0.07 s of it a session with its worker; the 36-task suite in 11.7 s at
``--jobs 1``, 6.3 s at 2 (1.85x), 4.4 s at 4 (2.65x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPEATS = 3
"""Timed runs of the small measurements; the median is reported."""
JOBS = (1, 2, 4)
"""Parallelism levels timed for the scaling table."""


def _median(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def python_start() -> float:
    return _median(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))


def session_cycle(run_dir: str) -> tuple[float, float]:
    """(start + close a session whose worker ran one statement, a one-turn run answering in text)."""
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    def start_and_close() -> None:
        session = AgentSession(AgentConfig(model="suite:x", run_dir=run_dir),
                               adapter=ProviderAdapter("suite:x", transport=ScriptedModel([{"text": "ok"}])))
        session.backend.execute("x = 1", {}, set())
        session.close()

    def one_turn() -> None:
        session = AgentSession(AgentConfig(model="suite:x", run_dir=run_dir),
                               adapter=ProviderAdapter("suite:x", transport=ScriptedModel([{"text": "ANSWER: 1"}])))
        session.ask("What is 1?")
        session.close()

    return _median(start_and_close), _median(one_turn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=0, help="only the first N tasks (0: all)")
    args = parser.parse_args(argv)
    from harness_magic.evals import load_suite
    from harness_magic.evals.runner import run_suite

    suite = load_suite("core")
    ids = [t.id for t in suite.tasks][: args.tasks or None]
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        run_suite(suite, "suite:reference", tasks=ids[:2], out_dir=f"{tmp}/warm")  # imports, generated inputs
        floor = python_start()
        cycle, one_turn = session_cycle(f"{tmp}/cycle")
        walls: dict[int, float] = {}
        per_attempt = None
        for jobs in JOBS:
            data = run_suite(suite, "suite:reference", jobs=jobs, tasks=ids, out_dir=f"{tmp}/j{jobs}")
            assert all(r["passed"] for r in data["results"]), "a reference script failed"
            walls[jobs] = data["wall_s"]
            if jobs == 1:
                per_attempt = data["results"]
    wall = statistics.fmean(r["wall_s"] for r in per_attempt)
    model = statistics.fmean(r["model_s"] for r in per_attempt)
    overhead = wall - model
    print(f"## Per attempt ({len(ids)} tasks of the core suite, --jobs 1, {cores} CPU cores)\n")
    print("| measure | seconds | x python start |")
    print("|---|---:|---:|")
    rows = [("wall per attempt", wall), ("model time per attempt (scripted)", model),
            ("harness overhead per attempt (wall - model)", overhead),
            ("  of which: session + worker start and close", cycle),
            ("  one-turn text-only run in a fresh session (no worker)", one_turn),
            ("physical floor: `python -c pass` process start", floor)]
    for name, value in rows:
        print(f"| {name} | {value:.3f} | {value / floor:.1f} |")
    print(f"\n## Whole suite: wall time against --jobs ({len(ids)} attempts)\n")
    print("| jobs | wall s | speed-up | CPU-bound limit min(jobs, cores) | efficiency |")
    print("|---:|---:|---:|---:|---:|")
    for jobs in JOBS:
        speedup = walls[1] / walls[jobs]
        ideal = min(jobs, cores)
        print(f"| {jobs} | {walls[jobs]:.2f} | {speedup:.2f} | {ideal} | {speedup / ideal:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
