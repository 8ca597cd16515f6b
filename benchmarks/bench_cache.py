"""Session cache benchmark: flat snapshots and injection, spill throughput, bounded memory.

Run::

    .venv/bin/python benchmarks/bench_cache.py                 # 1e3..1e7 rows, 30 x 20 MB under 100 MiB
    .venv/bin/python benchmarks/bench_cache.py --full-rss      # 30 x 200 MB under 1 GiB (6 GB of spill files)
    .venv/bin/python benchmarks/bench_cache.py --max-rows 1e6  # skip the 1e7-row frame

Tables printed (markdown):

1. For frames of 1e3..1e7 rows (5 columns: int, float, str, datetime, bool):
   snapshot time, ``view`` time, and a whole ``python_interpreter`` call that
   reads the handle — all should stay flat as rows grow.
2. Spill (write) and hydrate (read) time through :mod:`harness_magic.core.cache.spill`
   (an Arrow IPC file whose striped SHA-256 is checked while it is read, then ``to_pandas``)
   against raw pyarrow on the same frame in the same run: ``pa.Table.from_pandas`` +
   ``pq.write_table`` / ``pq.read_table().to_pandas()`` (pyarrow defaults, snappy, no
   integrity check), as ratios (baseline time / our time; > 1 means faster than raw pyarrow).
   Each ratio is the median over ``--repeat`` back-to-back (baseline, ours) pairs: the
   machine's load drifts less within a pair than between runs.
3. Peak resident memory of a fresh process putting 30 frames into a cache with a byte
   budget (each frame dropped by the caller after the put), next to the budget. The peak
   is Linux's VmHWM, reset after imports (``/proc/self/clear_refs``), so it measures the
   cache's work: the hot set, the frame being put, and spill buffers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness_magic.core.cache import SessionCache, estimate_nbytes, make_snapshot  # noqa: E402
from harness_magic.core.cache.spill import read_value, write_value  # noqa: E402
from harness_magic.core.execution.interpreter import InProcessInterpreter, make_interpreter_tools  # noqa: E402

WORDS = np.array(["north", "south", "east", "west", "central", "online", "partner", "other"])
MiB = 1024 * 1024


def make_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    """~5 columns a connector might return: ids, amounts, a label, a timestamp, a flag."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "order_id": np.arange(rows, dtype="int64"),
        "amount": rng.random(rows) * 100,
        "region": pd.array(WORDS[rng.integers(0, len(WORDS), rows)], dtype="str"),
        "ordered_at": pd.date_range("2024-01-01", periods=rows, freq="s"),
        "returned": rng.random(rows) < 0.05,
    })


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def flat_table(sizes: list[int], repeat: int) -> list[dict]:
    rows = []
    for n in sizes:
        frame = make_frame(n)
        with SessionCache() as cache:
            handle = cache.put("orders", frame)
            tool = {t.name: t for t in make_interpreter_tools(cache, InProcessInterpreter())}["python_interpreter"]
            rows.append({
                "rows": n,
                "MB": estimate_nbytes(frame) / 1e6,
                "snapshot_ms": best_of(lambda: make_snapshot(frame), repeat) * 1e3,
                "put_ms": best_of(lambda: cache.retire(cache.put("tmp", frame)), repeat) * 1e3,
                "put+snapshot_ms": best_of(lambda: (cache.snapshot(cache.put("tmp2", frame)), cache.retire("tmp2")),
                                           repeat) * 1e3,
                "head5_json_ms": best_of(lambda: bare_snapshot(frame), repeat) * 1e3,
                "view_ms": best_of(lambda: cache.view(handle), repeat) * 1e3,
                "interpreter_call_ms": best_of(lambda: tool.handler(code="orders.shape"), repeat) * 1e3,
            })
        rows[-1]["put_vs_head5_ratio"] = rows[-1]["put+snapshot_ms"] / rows[-1]["head5_json_ms"]
        del frame
    return rows


def bare_snapshot(frame: pd.DataFrame) -> str:
    """The floor a snapshot is measured against: shape, dtypes and head(5) as JSON, nothing else."""
    return json.dumps({"shape": list(frame.shape), "dtypes": {str(k): str(v) for k, v in frame.dtypes.items()},
                       "head": json.loads(frame.head(5).to_json(orient="split", date_format="iso"))})


def paired_ratio(baseline, ours, repeat: int) -> tuple[float, float, float]:
    """(median of baseline/ours over back-to-back pairs, best baseline time, best time of ours)."""
    pairs = [(best_of(baseline, 1), best_of(ours, 1)) for _ in range(repeat)]
    return (statistics.median(b / o for b, o in pairs), min(b for b, _ in pairs), min(o for _, o in pairs))


def spill_table(sizes: list[int], repeat: int, workdir: Path) -> list[dict]:
    rows = []
    for n in sizes:
        frame = make_frame(n)
        nbytes = estimate_nbytes(frame)
        base_path = workdir / "baseline.parquet"
        holder = {}

        def spill() -> None:
            holder["record"] = write_value(frame, workdir / "spill")

        write_ratio, base_w, ours_w = paired_ratio(lambda: pq.write_table(pa.Table.from_pandas(frame), base_path),
                                                   spill, repeat)
        read_ratio, base_r, ours_r = paired_ratio(lambda: pq.read_table(base_path).to_pandas(),
                                                  lambda: read_value(holder["record"]), repeat)
        rows.append({
            "rows": n, "MB": nbytes / 1e6, "format": holder["record"].format,
            "base_write_MB/s": nbytes / base_w / 1e6, "spill_MB/s": nbytes / ours_w / 1e6,
            "write_ratio": write_ratio,
            "base_read_MB/s": nbytes / base_r / 1e6, "hydrate_MB/s": nbytes / ours_r / 1e6,
            "read_ratio": read_ratio,
        })
        del frame
    return rows


RSS_CHILD = r"""
import json, sys, time, numpy as np, pandas as pd
sys.path.insert(0, {root!r})
from harness_magic.core.cache import SessionCache
import pyarrow, pyarrow.parquet  # loaded before the peak is reset: library code is not cache memory
frames, frame_mb, budget = {frames}, {frame_mb}, {budget}
rows = frame_mb * 1024 * 1024 // 40  # 5 x 8-byte columns
def make(seed):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({{"a": np.arange(rows, dtype="int64") + seed, "b": rng.random(rows), "c": rng.random(rows),
                         "d": pd.date_range("2024", periods=rows, freq="s"), "e": rng.integers(0, 9, rows)}},
                        copy=False)  # no consolidation copy: the caller's frame is the only transient
def rss(field):  # VmRSS: now; VmHWM: peak since the last reset
    line = next(l for l in open("/proc/self/status") if l.startswith(field))
    return int(line.split()[1]) * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak: imports (litellm, pandas, pyarrow) are not the cache's memory
base = rss("VmRSS")
start = time.perf_counter()
with SessionCache(memory_budget_bytes=budget, hot_count=1000, spill_dir={spill!r}) as cache:
    for i in range(frames):
        frame = make(i)
        cache.put(f"frame_{{i}}", frame)
        del frame
    usage = cache.usage()
    cache.get("frame_0")  # hydrate the oldest: still within budget afterwards
    usage_after = cache.usage()
peak = rss("VmHWM")
print(json.dumps({{"baseline_rss": base, "peak_rss": peak, "seconds": time.perf_counter() - start,
                  "in_memory": usage["in_memory"], "on_disk": usage["on_disk"],
                  "hot_bytes": usage["memory_bytes"], "hot_bytes_after_hydrate": usage_after["memory_bytes"]}}))
"""


def rss_run(frames: int, frame_mb: int, budget: int, workdir: Path) -> dict:
    code = RSS_CHILD.format(root=str(ROOT), frames=frames, frame_mb=frame_mb, budget=budget,
                            spill=str(workdir / f"rss_{frame_mb}"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(frames=frames, frame_mb=frame_mb, budget=budget, total_mb=frames * frame_mb)
    return result


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n### {title}\n")
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        cells = [f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)
                 for v in row.values()]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-rows", type=float, default=1e7, help="largest frame (default 1e7)")
    parser.add_argument("--repeat", type=int, default=5, help="timings: best (or median ratio) of this many runs")
    parser.add_argument("--full-rss", action="store_true", help="30 x 200 MB under 1 GiB (slow, 6 GB of disk)")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--skip-flat", action="store_true")
    parser.add_argument("--skip-spill", action="store_true")
    args = parser.parse_args()
    sizes = [n for n in (1_000, 10_000, 100_000, 1_000_000, 10_000_000) if n <= args.max_rows]
    print(f"pandas {pd.__version__}, pyarrow {pa.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="bench_cache_") as tmp:
        workdir = Path(tmp)
        if not args.skip_flat:
            print_table("Snapshot, view and interpreter injection (ms, best of runs): should be flat",
                        flat_table(sizes, args.repeat))
        if not args.skip_spill:
            print_table("Spill/hydrate vs raw pyarrow in the same run (ratio = raw time / our time, median of pairs)",
                        spill_table(sizes, args.repeat, workdir))
        if not args.skip_rss:
            runs = [rss_run(30, 20, 100 * MiB, workdir)]
            if args.full_rss:
                runs.append(rss_run(30, 200, 1024 * MiB, workdir))
            print_table("Peak RSS: 30 frames put under a byte budget", [{
                "frames x MB": f"{r['frames']} x {r['frame_mb']}", "total_MB": r["total_mb"],
                "budget_MB": r["budget"] / MiB, "baseline_rss_MB": r["baseline_rss"] / MiB,
                "peak_rss_MB": r["peak_rss"] / MiB, "peak_minus_baseline_MB": (r["peak_rss"] - r["baseline_rss"]) / MiB,
                "target_MB": 130.0,
                "hot_MB_end": r["hot_bytes"] / MiB, "in_memory/on_disk": f"{r['in_memory']}/{r['on_disk']}",
                "seconds": r["seconds"]} for r in runs])


if __name__ == "__main__":
    main()
