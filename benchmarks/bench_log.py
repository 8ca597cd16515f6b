"""Run log bytes per turn of a 50-turn scripted run: version 1 (before issue 35.2) against version 2 (lean).

The scripted run is bench_harness's: the offline scripted model answers 49
turns, each with a short text and one call of an ``echo`` tool (a short
string argument, its result echoed back), then a final answer; the default
system prompt, one tool, no network. The same run is written twice at once:
the real log (version 2, what :class:`~harness_magic.core.transcript.log.RunLogger`
writes), and, by a recorder wrapped around the logger, every record exactly as
the run handed it over — the version-1 form, with the system prompt's hash on
each turn, the provider's raw response and the three usage objects — written
as version 1 wrote it. Both files are then read back with ``read_log`` (time
per file) and must give the same transcript. Goal: at most GOAL_BYTES_PER_TURN.

    python benchmarks/bench_log.py [--turns 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness_magic import Harness, ProviderAdapter, ScriptedModel, SessionCache, ToolSpec
from harness_magic.core.agent.prompts import DEFAULT_SYSTEM_PROMPT
from harness_magic.core.transcript import log as log_module
from harness_magic.core.transcript.log import read_log, reconstruct_transcript, system_hash

GOAL_BYTES_PER_TURN = 831
"""Issue 35's goal: the log per turn of data-harness 1.3.4 on the same run."""


class V1Recorder:
    """Wraps ``RunLogger.write``: each record also goes, in the version-1 form, to ``<log>.v1``."""

    def __init__(self) -> None:
        self.original = log_module.RunLogger.write

    def __enter__(self) -> "V1Recorder":
        original = self.original

        def write(logger: Any, record_type: str, **fields: Any) -> None:
            original(logger, record_type, **fields)
            if record_type == "run_start":
                fields = {**fields, "system_sha256": system_hash(fields["system"])}
            if record_type == "turn" and "system" in fields["request"]:
                request = {k: v for k, v in fields["request"].items() if k != "system"}
                fields = {**fields, "request": {"system_sha256": system_hash(fields["request"]["system"]),
                                                **request}}
            record = {"type": record_type, "run_id": logger.run_id, "time": log_module._now(), **fields}
            with open(f"{logger.path}.v1", "a", encoding="utf-8") as file:
                file.write(log_module._dumps(record) + "\n")

        log_module.RunLogger.write = write  # type: ignore[method-assign]  # the benchmark's own recorder
        return self

    def __exit__(self, *exc: object) -> None:
        log_module.RunLogger.write = self.original  # type: ignore[method-assign]  # restored


def run(turns: int, run_dir: str) -> dict[str, float]:
    script = [{"text": f"Step {i}.", "tool_calls": [{"name": "echo", "arguments": {"text": f"value {i}"}}]}
              for i in range(turns - 1)] + [{"text": "Final answer."}]
    tool = ToolSpec(name="echo", description="Echo.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}}, handler=lambda text: text)
    harness = Harness(ProviderAdapter("offline/bench", transport=ScriptedModel(script)), DEFAULT_SYSTEM_PROMPT,
                      [tool], max_turns=turns, run_dir=run_dir, cache=SessionCache())
    with V1Recorder():
        result = harness.run_result("Benchmark question")
    assert result.status == "completed" and result.turns == turns, result
    new, old = Path(result.run_file), Path(f"{result.run_file}.v1")
    old_log = old.with_name(old.name[: -len(".v1")].replace(".jsonl", "-v1.jsonl"))
    old.rename(old_log)
    timings = {}
    for name, path in (("v1", old_log), ("v2", new)):
        started = time.perf_counter()
        read_log(path)
        timings[name] = time.perf_counter() - started
    assert reconstruct_transcript(old_log) == reconstruct_transcript(new) == list(result.messages)
    assert read_log(new)[-1]["usage"] == read_log(old_log)[-1]["usage"]
    return {"turns": turns, "v1_bytes_per_turn": os.path.getsize(old_log) / turns,
            "v2_bytes_per_turn": os.path.getsize(new) / turns,
            "v1_read_ms": timings["v1"] * 1000, "v2_read_ms": timings["v2"] * 1000}


def hub_row() -> dict[str, Any]:
    """Issue 35's table row: bytes per turn of the 50-turn scripted run (version 2), with version 1 beside it."""
    with tempfile.TemporaryDirectory() as run_dir:
        row = run(50, run_dir)
    value = row["v2_bytes_per_turn"]
    return {"figure": "run log per turn, 50-turn scripted run", "value": value, "unit": "B",
            "goal": float(GOAL_BYTES_PER_TURN), "met": value <= GOAL_BYTES_PER_TURN,
            "detail": f"version 1 of the same run: {row['v1_bytes_per_turn']:,.0f} B; replay reads both alike"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="Runs; the fastest read counts (sizes do not vary).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        rows = [run(args.turns, run_dir) for _ in range(args.repeat)]
    best = {key: min(r[key] for r in rows) for key in rows[0]}
    print(json.dumps({"turns": args.turns, **{k: round(v, 1) for k, v in best.items() if k != "turns"}}))
    print(f"run log per turn, {args.turns}-turn scripted run: {best['v1_bytes_per_turn']:,.0f} B before (v1), "
          f"{best['v2_bytes_per_turn']:,.0f} B after (v2), x{best['v2_bytes_per_turn'] / best['v1_bytes_per_turn']:.2f}; "
          f"goal <= {GOAL_BYTES_PER_TURN} B: {'met' if best['v2_bytes_per_turn'] <= GOAL_BYTES_PER_TURN else 'NOT met'}")
    print(f"read_log: {best['v1_read_ms']:.2f} ms (v1), {best['v2_read_ms']:.2f} ms (v2)")


if __name__ == "__main__":
    sys.exit(main())
