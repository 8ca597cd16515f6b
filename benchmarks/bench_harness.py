"""Harness overhead per turn, its growth with run length, and request-prefix stability.

Uses the offline scripted model (no network). Model time is measured inside
the transport and subtracted, so the figures are the harness's own cost:
rendering, normalising, dispatch, formatting, events and the JSONL log. Times
are CPU time of this process (``time.process_time``), best of ``--repeat`` runs,
so other load on the machine does not inflate them. Target: at most
TARGET_MS_PER_TURN at 800 turns, flat from 10 to 800 turns (late/early near 1).

Prefix stability: for each request, the share of the previous request's bytes
that the new request repeats verbatim at its start. A provider's prompt cache
can serve exactly that share; 1.0 would mean nothing before the suffix moved.

    python benchmarks/bench_harness.py [--turns 10 50 200 800]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness_magic import Harness, ProviderAdapter, ScriptedModel, SessionCache, ToolSpec
from harness_magic.core.providers.offline import _common_prefix
from harness_magic.core.agent.prompts import DEFAULT_SYSTEM_PROMPT


TARGET_MS_PER_TURN = 0.5
"""Harness overhead per turn the loop must stay under at 800 turns (issue 13)."""
clock = time.process_time


class TimedTransport:
    """Wraps a scripted model; records model time and every payload's bytes."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.model_s = 0.0
        self.payloads: list[bytes] = []

    def complete(self, payload, on_text):
        started = clock()  # the payload capture is the benchmark's own cost, like the model's
        self.payloads.append(json.dumps(payload).encode())
        response = self.model.complete(payload, on_text)
        self.model_s += clock() - started
        return response


def run(turns: int, run_dir: str) -> dict[str, float]:
    script = [{"text": f"Step {i}.", "tool_calls": [{"name": "echo", "arguments": {"text": f"value {i}"}}]}
              for i in range(turns - 1)] + [{"text": "Final answer."}]
    transport = TimedTransport(ScriptedModel(script))
    tool = ToolSpec(name="echo", description="Echo.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}}, handler=lambda text: text)
    harness = Harness(ProviderAdapter("offline/bench", transport=transport), DEFAULT_SYSTEM_PROMPT, [tool],
                      max_turns=turns, run_dir=run_dir, cache=SessionCache())
    started = clock()
    result = harness.run_result("Benchmark question")
    total = clock() - started
    assert result.status == "completed" and result.turns == turns, result
    ratios = [_common_prefix(b.decode(), a.decode()) / len(a)
              for a, b in zip(transport.payloads, transport.payloads[1:])]
    log_bytes = os.path.getsize(result.run_file)
    return {
        "turns": turns,
        "overhead_ms_per_turn": (total - transport.model_s) / turns * 1000,
        "log_bytes_per_turn": log_bytes / turns,
        "last_request_kb": len(transport.payloads[-1]) / 1024,
        "prefix_reuse_min": min(ratios) if ratios else 1.0,
        "prefix_reuse_mean": statistics.mean(ratios) if ratios else 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 50, 200, 800])
    parser.add_argument("--repeat", type=int, default=3, help="Runs per size; the fastest counts.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        run(5, run_dir)  # warm up imports
        rows = [min((run(n, run_dir) for _ in range(args.repeat)), key=lambda r: r["overhead_ms_per_turn"])
                for n in args.turns]
    header = f"{'turns':>6} {'overhead ms/turn':>17} {'log B/turn':>11} {'last req KiB':>13} " \
             f"{'prefix reuse min':>17} {'mean':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['turns']:>6} {r['overhead_ms_per_turn']:>17.3f} {r['log_bytes_per_turn']:>11.0f} "
              f"{r['last_request_kb']:>13.1f} {r['prefix_reuse_min']:>17.4f} {r['prefix_reuse_mean']:>7.4f}")
    first, last = rows[0], rows[-1]
    growth = last["overhead_ms_per_turn"] / first["overhead_ms_per_turn"]
    print(f"\noverhead per turn at {last['turns']} turns: {last['overhead_ms_per_turn']:.3f} ms "
          f"(target <= {TARGET_MS_PER_TURN} ms); late/early ratio x{growth:.2f} from {first['turns']} to "
          f"{last['turns']} turns (flat = 1: only new messages are rendered; the log is append-only: "
          f"log bytes/turn x{last['log_bytes_per_turn'] / first['log_bytes_per_turn']:.2f})")


if __name__ == "__main__":
    sys.exit(main())
