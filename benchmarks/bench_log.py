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

A session of :data:`SESSION_CELLS` cells (each cell two ``echo`` calls and an
answer, continuing the conversation) is written twice: as version 2 wrote it,
each ``run_start`` copying the whole conversation so far (O(N²) bytes over the
session), and as version 3 writes it, each ``run_start`` referring to the
previous cell's log (``history_from``). Figures: total bytes, the last cell's
file, the growth of a cell's file per cell, and the time to read the last
cell's log (version 3 reads the earlier logs it refers to).

    python benchmarks/bench_log.py [--turns 50] [--cells 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
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

SESSION_CELLS = 20
"""Cells of the multi-run figure's session."""


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


class Forgetting:
    """The writer as version 2 was: it refers to no earlier log, so each ``run_start`` copies the history whole."""

    def __init__(self) -> None:
        self.original = log_module._closed_in

    def __enter__(self) -> "Forgetting":
        log_module._closed_in = lambda directory: []  # the benchmark's "before": no earlier run to refer to
        return self

    def __exit__(self, *exc: object) -> None:
        log_module._closed_in = self.original  # restored


def session(cells: int, run_dir: str, *, refer: bool) -> dict[str, float]:
    """Write a ``cells``-cell session's logs; sizes, and the time to read the last cell's log."""
    script: list[dict[str, Any]] = []
    for cell in range(cells):
        script += [{"text": f"Cell {cell}, step 1.", "tool_calls": [{"name": "echo", "arguments": {"text": f"a{cell}"}}]},
                   {"text": f"Cell {cell}, step 2.", "tool_calls": [{"name": "echo", "arguments": {"text": f"b{cell}"}}]},
                   {"text": f"Answer of cell {cell}."}]
    tool = ToolSpec(name="echo", description="Echo.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}}, handler=lambda text: text)
    harness = Harness(ProviderAdapter("offline/bench", transport=ScriptedModel(script)), DEFAULT_SYSTEM_PROMPT,
                      [tool], max_turns=3, run_dir=run_dir, cache=SessionCache())
    with contextlib.nullcontext() if refer else Forgetting():
        results = [harness.run_result("Question of cell 0")]
        results += [harness.ask_result(f"Question of cell {cell}") for cell in range(1, cells)]
    assert all(r.status == "completed" for r in results)
    sizes = [os.path.getsize(r.run_file) for r in results]
    last = results[-1].run_file
    started = time.perf_counter()
    transcript = reconstruct_transcript(last)
    read_s = time.perf_counter() - started
    assert transcript == list(results[-1].messages)
    assert ("history_from" in read_log_raw_start(last)) == refer
    return {"total_bytes": sum(sizes), "last_cell_bytes": sizes[-1],
            "growth_per_cell": (sizes[-1] - sizes[1]) / (cells - 2), "read_last_ms": read_s * 1000}


def read_log_raw_start(path: str) -> dict[str, Any]:
    """The ``run_start`` line of a log as written."""
    with open(path, encoding="utf-8") as file:
        return json.loads(file.readline())


def session_figures(cells: int) -> dict[str, dict[str, float]]:
    """The session written both ways, each in its own directory."""
    out = {}
    for name, refer in (("before", False), ("after", True)):
        with tempfile.TemporaryDirectory() as run_dir:
            out[name] = session(cells, run_dir, refer=refer)
    return out


def hub_row() -> dict[str, Any]:
    """Issue 35's table row: bytes per turn of the 50-turn scripted run (version 2), with version 1 beside it."""
    with tempfile.TemporaryDirectory() as run_dir:
        row = run(50, run_dir)
    figures = session_figures(SESSION_CELLS)
    before, after = figures["before"], figures["after"]
    value = row["v2_bytes_per_turn"]
    return {"figure": "run log per turn, 50-turn scripted run", "value": value, "unit": "B",
            "goal": float(GOAL_BYTES_PER_TURN), "met": value <= GOAL_BYTES_PER_TURN,
            "detail": f"version 1 of the same run: {row['v1_bytes_per_turn']:,.0f} B; replay reads both alike; "
                      f"a {SESSION_CELLS}-cell session: {before['total_bytes'] / 1024:,.0f} KB with each history "
                      f"copied, {after['total_bytes'] / 1024:,.0f} KB with history_from (a cell's file grows "
                      f"{before['growth_per_cell']:,.0f} B per cell before, {after['growth_per_cell']:,.0f} B after)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--cells", type=int, default=SESSION_CELLS, help="Cells of the multi-run session.")
    parser.add_argument("--repeat", type=int, default=3, help="Runs; the fastest read counts (sizes do not vary).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        rows = [run(args.turns, run_dir) for _ in range(args.repeat)]
    sessions = [session_figures(args.cells) for _ in range(args.repeat)]
    best = {key: min(r[key] for r in rows) for key in rows[0]}
    print(json.dumps({"turns": args.turns, **{k: round(v, 1) for k, v in best.items() if k != "turns"}}))
    print(f"run log per turn, {args.turns}-turn scripted run: {best['v1_bytes_per_turn']:,.0f} B before (v1), "
          f"{best['v2_bytes_per_turn']:,.0f} B after (lean, v3), x{best['v2_bytes_per_turn'] / best['v1_bytes_per_turn']:.2f}; "
          f"goal <= {GOAL_BYTES_PER_TURN} B: {'met' if best['v2_bytes_per_turn'] <= GOAL_BYTES_PER_TURN else 'NOT met'}")
    print(f"read_log: {best['v1_read_ms']:.2f} ms (v1), {best['v2_read_ms']:.2f} ms (v2)")
    for name in ("before", "after"):
        figures = {key: min(s[name][key] for s in sessions) for key in sessions[0][name]}
        label = "each run_start copies the history (v2)" if name == "before" else "history_from (v3)"
        print(f"{args.cells}-cell session, {label}: {figures['total_bytes']:,.0f} B in all, last cell's log "
              f"{figures['last_cell_bytes']:,.0f} B, a cell's log grows {figures['growth_per_cell']:,.0f} B per cell; "
              f"reading the last cell's log {figures['read_last_ms']:.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
