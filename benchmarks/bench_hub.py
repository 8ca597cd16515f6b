"""Issue 35's table in one run: every figure a shared hub node depends on, measured now, beside the goal.

    .venv/bin/python benchmarks/bench_hub.py                # every row but the suite (about 10 minutes)
    .venv/bin/python benchmarks/bench_hub.py --only log docs
    .venv/bin/python benchmarks/bench_hub.py --suite        # also time the whole test suite (about 15 minutes)

Each row is measured by its own benchmark's ``hub_row()`` (the same measuring code as that benchmark's
table) in a fresh interpreter, one after another, so no row pays for another's imports, caches or
memory. A row that fails or passes :data:`ROW_TIMEOUT_S` is printed as such and the others still run;
the exit status is then 1. "Before" is the figure the issue was filed with (measured by its filer on
the same kind of machine), for comparison only: "now" is what this run measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROW_TIMEOUT_S = 900
"""Wall-clock limit for one row's fresh interpreter."""
SUITE_TIMEOUT_S = 3600
SUITE_GOAL_S = 600.0
"""Issue 35's goal for the whole suite on two cores: under 10 minutes."""


@dataclass(frozen=True)
class Row:
    """One table row: the benchmark module and function that measure it, and the issue's figure before."""

    key: str
    module: str
    function: str
    before: str


ROWS = (
    Row("memory", "bench_memory", "hub_row", "219 MB"),
    Row("log", "bench_log", "hub_row", "1,452 B"),
    Row("sandbox", "bench_sandbox", "hub_row", "4.1x"),
    Row("duckdb", "bench_engines", "hub_row", "1.19-1.25x"),
    Row("docs", "bench_docs", "hub_row", "58.9x"),
    Row("masking", "bench_masking", "hub_row", "3.5x"),
    Row("classify", "bench_masking", "hub_row_classify", "797 ms"),
)
SUITE_BEFORE = "10m46s idle"

PROBE = ("import json, sys; sys.path.insert(0, 'benchmarks'); import {module} as bench; "
         "print('\\n' + json.dumps(bench.{function}()))")


def measure(row: Row) -> dict[str, Any]:
    """Run ``row``'s function in a fresh interpreter; its figures, or ``{"error": ...}``."""
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", PROBE.format(module=row.module, function=row.function)],
                              cwd=ROOT, capture_output=True, text=True, timeout=ROW_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"no figure within {ROW_TIMEOUT_S} s"}
    seconds = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {done.returncode}: {tail}"}
    try:
        figures = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"its last line is not a JSON row: {lines[-1][:200]!r}"}
    return {**figures, "seconds": seconds}


def suite_row() -> dict[str, Any]:
    """The whole suite, as ``make test`` runs it (its installs done already), timed from outside."""
    started = time.monotonic()
    done = subprocess.run(["make", "-s", "test"], cwd=ROOT, capture_output=True, text=True,
                          timeout=SUITE_TIMEOUT_S, env={**os.environ, "CI": "true"})
    seconds = time.monotonic() - started
    summary = re.findall(r"^=*\s*(\d+ passed.*?) in [\d.]+s", done.stdout, re.MULTILINE)
    detail = summary[-1] if summary else (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode != 0:
        return {"error": f"make test exited {done.returncode}: {detail}"}
    return {"figure": "the project's own suite (make test)", "value": seconds / 60, "unit": "min",
            "goal": SUITE_GOAL_S / 60, "met": seconds <= SUITE_GOAL_S, "detail": detail}


def shown(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "B":
        return f"{value:,.0f} B"
    return f"{value:,.1f} {unit}"


def print_row(before: str, figures: dict[str, Any], label: str) -> None:
    if "error" in figures:
        print(f"| {label} | {before} | failed: {figures['error']} | | |", flush=True)
        return
    unit = figures["unit"]
    verdict = "met" if figures["met"] else "not met"
    print(f"| {figures['figure']} | {before} | **{shown(figures['value'], unit)}** | "
          f"at most {shown(figures['goal'], unit)}: {verdict} | {figures['detail']} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=[row.key for row in ROWS], help="these rows only")
    parser.add_argument("--suite", action="store_true", help="also run and time the whole suite (make test)")
    args = parser.parse_args()
    print("| figure | before (issue filed) | now | goal | measured |")
    print("|---|---|---|---|---|", flush=True)
    failed = False
    for row in ROWS:
        if args.only and row.key not in args.only:
            continue
        figures = measure(row)
        failed |= "error" in figures
        print_row(row.before, figures, row.key)
    if args.suite:
        figures = suite_row()
        failed |= "error" in figures
        print_row(SUITE_BEFORE, figures, "suite")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
