"""Engines: group-bys through the agent's lazy DuckDB handles vs plain ``duckdb``, same run, same data.

Run::

    .venv/bin/python benchmarks/bench_engines.py                    # 1e6 and 1e7 rows
    .venv/bin/python benchmarks/bench_engines.py --rows 5e7 --rounds 3 --no-spark  # issue 22's size: 0.9 GB
    .venv/bin/python benchmarks/bench_engines.py --rows 1e6 1e7 1e8 # 1e8: ~1.5 GB of Parquet, minutes
    .venv/bin/python benchmarks/bench_engines.py --spark-only 1e7  # only the Spark section (see spark_section)
    .venv/bin/python -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_engines as b; print(b.hub_row())"
                                                                    # issue 35's row: lazy+pull / plain at 5e7 rows

For each size a Parquet dataset of several files is generated once by DuckDB's
``COPY`` and cached under ``benchmarks/data/`` (ignored by git). Two queries::

    SELECT k, count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM events GROUP BY k       -- 1,000 groups
    SELECT region AS k, count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM events GROUP BY region  -- 4

(the second is issue 22's case: a 4-row aggregate whose snapshot once showed an
estimate of millions of rows and ran the query three times when its count
passed the budget). Each path runs in its own fresh Python process (so its
peak RSS is that path's alone) under the same DuckDB ``memory_limit`` and
thread count:

* ``plain``: ``duckdb.connect()``, ``read_parquet('<glob>')``, result to Arrow.
  The physical limit for this machine: nothing between the engine and the rows.
* ``agent fetch``: what ``duckdb__query`` does when the SQL names a lazy handle:
  a lazy handle over the dataset (``SELECT * FROM events``), then the group-by
  over that handle on a fresh cursor of the engine's locked database (Parquet
  read through the read-only file system, external access off, private spill
  dir), result streamed as Arrow batches.
* ``agent lazy+pull``: the group-by kept as a lazy handle (its snapshot: the
  query computed once into a temporary table, at most ``ONE_PASS_MAX_ROWS`` + 1
  rows; DuckDB's answer to that ``CREATE TABLE AS`` is the exact count, the
  head rows are read from it and it is kept for the pulls; one EXPLAIN, as
  the text groups, no count query, no SET), then materialised into the kernel
  under the byte cap, as python code naming it does (one statement: the kept table's rows). The
  group-by runs once (``tests/test_duckdb_single_pass.py`` reads DuckDB's
  query log).
* ``agent lazy+pull, budget 50 ms``: the same with ``COUNT_BUDGET_S`` forced to
  50 ms, which reproduces a result whose count takes longer than the 2 s
  budget (the aggregate of 5e7 rows did in issue 22, on two loaded cores).

Printed per path: the median and best of the timed runs after one untimed
warm-up run (so every path reads the files from the OS page cache; one timed
run from 1e8 rows), the median's ratio to plain's median (wall clock, and the process's CPU time), the spread (slowest / fastest
run: the noise from other jobs on the machine), the process's peak RSS during
the timed queries in MB (``VmHWM`` after resetting it with
``/proc/self/clear_refs``; baseline: the RSS just before, after imports and
setup), and how time grows with the row count.

Measured on the 2-core development machine (load average 2-8 from other jobs,
spread 1.5-4x within a path), 5e7 rows. Fresh processes taking turns (this
table) are at the mercy of that load: the same lazy path read 0.96-1.39x plain
in one run; :func:`hub_row` interleaves plain and lazy+pull in one process
(issue 35's row). With DuckDB's prefetching (the code before) the lazy handle + pull was 1.28-1.32x plain
there (CPU 1.18-1.22x); now 0.84-1.16x over four runs (CPU 0.90-1.12x), 1.00x
in the quietest. What separated them was the read-only file system: DuckDB
prefetched whole column chunks (~6 MB) through it and copied each Python
``bytes`` once more, out of the CPU caches; the engine now has it read page by
page (``READ_SETTINGS`` in the engine), and the snapshot's count is DuckDB's
answer to its one ``CREATE TABLE AS``. The lazy path's fixed cost (plan, kept
table, head, pull) is ~15 ms a handle: 1.6-1.8x plain at 1e6 rows, a few
percent at 5e7.

Then (issue 35 point 4, second pass) the lazy path still ran, beside its one
execution: two SETs on each of its two cursors, an EXPLAIN (the query planned a
second time: 2-3 ms of CPU, 10-20 ms of wall at load 6-7, waiting on DuckDB's
threads) and a read-only transaction around the pull's read of the kept table.
Now a cursor nobody polls for progress runs no SET, the plan is read only when
the text may group (about 1.5 ms on an idle machine: an aggregate runs whole,
once, however many groups it has) and the pull is one statement; time
outside the one execution at 5e7 rows went from 28 ms best / 36 ms median to
14 / 26 ms (load 6-7). What remains between the two paths is the read-only
file system: DuckDB's Python file system copies every page it reads while
holding the GIL, so its two threads queue there (a Python thread sleeping
0.5 ms woke 140 us later on average during such a scan than during the native
one); the CPU is the same (0.97-1.05x in every hub_row run).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REPEATS = 5
"""Timed runs per path; the median is compared (the best is printed too: least disturbed by other jobs)."""
ONCE_FROM_ROWS = 10**8
"""From this size on each path runs once: on two cores a 1e8-row group-by takes seconds per run."""
FILES = 8
"""Parquet files per dataset: a dataset, not one file."""
GROUPS = 1_000
"""Distinct keys of the group-by: a realistic dashboard-sized answer."""
REGIONS = 4
"""Distinct regions: the 4-row aggregate of issue 22."""
MEMORY_LIMIT = "1GB"
"""DuckDB memory_limit for every path: the out-of-core setting under test."""
THREADS = 2
"""DuckDB threads for every path: this machine has two cores."""
RSS_HEADROOM_MB = 300
"""The issue's target: the kernel's peak RSS during the query within memory_limit plus this."""
TINY_BUDGET_S = 0.05
"""COUNT_BUDGET_S forced on the 'budget 50 ms' path: shorter than any group-by of these datasets here, as the
5e7-row count took longer than 2 s in issue 22 (not microseconds: the code before the fix lost an interrupt that
came before its statement started, so its 'past the budget' case did not reproduce reliably)."""
ROUNDS = 1
"""Rounds of fresh processes per path (--rounds): the paths take turns, so the load of other jobs hits each alike."""
QUERY = "SELECT k, count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM {src} GROUP BY k"
QUERY_FOUR = ("SELECT region AS k, count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM {src} "
              "GROUP BY region")
QUERIES = {"1k": (QUERY, GROUPS), "4": (QUERY_FOUR, REGIONS)}
"""Query name -> (SQL with {src}, groups it returns)."""
MODES = {"plain": "plain duckdb", "fetch": "agent fetch over lazy handle", "lazy": "agent lazy handle + pull",
         "lazy-tiny": "agent lazy handle + pull, budget 50 ms"}


DATA_DIR = ROOT / "benchmarks" / "data"
"""Generated datasets are cached here (ignored by git): 1e8 rows take a minute to write and ~1.5 GB."""
DATA_VERSION = 2
"""Bumped when the generated columns change: a cached dataset of another version is written again."""


def generate(rows: int) -> tuple[str, float]:
    """A cached Parquet dataset of ``rows`` rows over FILES files, written by DuckDB's COPY; (glob, MB on disk).

    Columns: id (sequential), k (GROUPS keys), region (4 strings), amount and
    price (doubles from a hash of id: deterministic, incompressible enough that
    1e8 rows take more than 1.5 GB).
    """
    import duckdb

    root = DATA_DIR / f"events-{rows}"
    marker = root / "complete.json"
    want = {"rows": rows, "files": FILES, "version": DATA_VERSION}
    if not (marker.is_file() and json.loads(marker.read_text()) == want):
        shutil.rmtree(root, ignore_errors=True)
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".events-{rows}-", dir=DATA_DIR))
        con = duckdb.connect(":memory:", config={"threads": THREADS, "memory_limit": MEMORY_LIMIT})
        con.execute("SET enable_progress_bar = false")  # hub_row's output is a table row, not a progress bar
        per_file = rows // FILES
        for part in range(FILES):
            lo, hi = part * per_file, rows if part == FILES - 1 else (part + 1) * per_file
            con.execute(f"""COPY (SELECT range AS id, (range * 7919 % {GROUPS})::INTEGER AS k,
                                 ['north', 'south', 'east', 'west'][(range % 4)::INTEGER + 1] AS region,
                                 (hash(range) % 10000000) / 100000.0 AS amount,
                                 (hash(range + 1) % 100000000)::DOUBLE / 7.0 AS price
                            FROM range({lo}, {hi}))
                            TO '{work / f"part-{part:03d}.parquet"}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)""")
        con.close()
        (work / "complete.json").write_text(json.dumps(want))
        os.replace(work, root)
    size = sum(p.stat().st_size for p in root.glob("part-*.parquet")) / 1024**2
    return str(root / "part-*.parquet"), size


def path_runner(mode: str, pattern: str, query: str) -> Callable[[], Any]:
    """One path of the table (a key of MODES) over ``pattern``: a function running ``query`` once, returning the frame.

    The lazy paths check what the handle shows on every run: the exact row count (no estimate, not skipped).
    """
    import duckdb
    import pyarrow  # noqa: F401  (imported before the baseline RSS, as in a kernel)

    from harness_magic.core.cache import SessionCache
    # the modules themselves (the package re-exports a function named like one): the engine reads its own
    # binding of COUNT_BUDGET_S when it times the count, the connector its own when it words the skip
    budget_readers = [importlib.import_module(f"harness_magic.core.execution.connectors.duckdb.{name}")
                      for name in ("engine", "connector")]
    from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine

    sql = QUERIES[query][0]
    if mode == "plain":
        # no progress bar: past 2 s DuckDB would print one to stderr, time plain DuckDB need not spend
        con = duckdb.connect(":memory:", config={"memory_limit": MEMORY_LIMIT, "threads": THREADS})
        con.execute("SET enable_progress_bar = false")

        def plain() -> Any:
            return con.sql(sql.format(src=f"read_parquet('{pattern}')")).to_arrow_table().to_pandas()
        return plain
    if mode == "lazy-tiny":
        for module in budget_readers:
            module.COUNT_BUDGET_S = TINY_BUDGET_S
    engine = DuckDBEngine({"events": pattern}, memory_limit=MEMORY_LIMIT, threads=THREADS)
    cache = SessionCache()
    cache.put("events_all", engine.lazy(cache, "SELECT * FROM events"))
    if mode == "fetch":
        def fetch() -> Any:
            frame, truncated = engine.query(cache, sql.format(src="events_all"))
            assert not truncated
            return frame
        return fetch

    def lazy_pull() -> Any:
        relation = engine.lazy(cache, sql.format(src="events_all"))
        assert (relation.rows, relation.rows_estimated, relation.count_skipped) == (QUERIES[query][1], False, False)
        handle = cache.put("by_k", relation)
        frame = relation.materialize(cache, 64 * 1024**2, handle=handle)
        cache.retire(handle)
        return frame
    return lazy_pull


def child(mode: str, pattern: str, repeats: int, query: str) -> dict:
    """One path in this (fresh) process: every run's seconds, result checksum, peak RSS."""
    from harness_magic.core.execution.connectors.lazy import materialize_count

    run = path_runner(mode, pattern, query)
    run()  # warm-up, untimed: the OS page cache holds the files for every path alike
    times, cpu, frame = [], [], None
    before = materialize_count()
    baseline = _reset_peak_rss()  # the peak below is the query's (setup such as the lazy handle's count excluded)
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        frame = run()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"times": times, "cpu": cpu, "groups": len(frame), "rows": int(frame["n"].sum()),
            "total": float(frame["total"].sum()), "rss_mb": _peak_rss(), "baseline_mb": baseline,
            "materialised": materialize_count() - before}


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS mark (``clear_refs`` 5, Linux) and return the current RSS in MB."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass  # then the peak is the process's since it started: an upper bound
    return _status_mb("VmRSS")


def _peak_rss() -> float:
    """Peak RSS (MB) since :func:`_reset_peak_rss`: ``VmHWM``."""
    return _status_mb("VmHWM")


def run_child(mode: str, pattern: str, repeats: int, query: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", mode, pattern, str(repeats), query],
                         capture_output=True, text=True, check=True, timeout=3_600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="fresh processes per path, taking turns")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "GLOB", "REPEATS", "QUERY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]), args.child[3])))
        return
    print(f"DuckDB group-bys ({GROUPS:,} and {REGIONS} groups), {FILES} Parquet files, memory_limit={MEMORY_LIMIT}, "
          f"threads={THREADS}, median and best of {REPEATS} runs x {args.rounds} rounds (1 run from "
          f"{ONCE_FROM_ROWS:.0e} rows); each path in fresh processes, taking turns\n")
    print(f"load average (1 min) at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| rows | size on disk | groups | path | median s | best s | median × plain | CPU × plain | spread | "
          "Mrows/s | peak RSS MB (before) | peak − (limit + 300 MB) |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    limit_mb = 1024
    growth: dict[str, list[tuple[int, float]]] = {}
    for rows in (int(r) for r in args.rows):
        pattern, size = generate(rows)
        repeats = 1 if rows >= ONCE_FROM_ROWS else REPEATS
        for query, (_, groups) in QUERIES.items():
            results: dict[str, dict] = {}
            for _ in range(args.rounds):  # the paths take turns; every round's runs count
                for mode in MODES:
                    r = run_child(mode, pattern, repeats, query)
                    if mode in results:
                        kept = results[mode]
                        r = {**r, "times": kept["times"] + r["times"], "cpu": kept["cpu"] + r["cpu"], "rss_mb": max(kept["rss_mb"], r["rss_mb"]),
                             "materialised": kept["materialised"] + r["materialised"]}
                    results[mode] = r
            plain = results["plain"]
            base, base_cpu = statistics.median(plain["times"]), statistics.median(plain["cpu"])
            for mode, label in MODES.items():
                r = results[mode]
                assert (r["groups"], r["rows"]) == (plain["groups"], plain["rows"]) == (groups, rows), (mode, r)
                assert abs(r["total"] - plain["total"]) <= 1e-6 * abs(plain["total"])
                median, best = statistics.median(r["times"]), min(r["times"])
                growth.setdefault(f"{label} ({groups} groups)", []).append((rows, median))
                print(f"| {rows:,.0f} | {size:,.0f} MB | {groups:,} | {label} | {median:.3f} | {best:.3f} | "
                      f"{median / base:.2f} | {statistics.median(r['cpu']) / base_cpu:.2f} | "
                      f"{max(r['times']) / best:.2f} | {rows / median / 1e6:,.1f} | "
                      f"{r['rss_mb']:,.0f} ({r['baseline_mb']:,.0f}) | "
                      f"{r['rss_mb'] - limit_mb - RSS_HEADROOM_MB:+,.0f} |", flush=True)
            assert results["fetch"]["materialised"] == 0
            assert results["lazy"]["materialised"] == results["lazy-tiny"]["materialised"] == repeats * args.rounds
    if len(args.rows) > 1:
        print("\nGrowth (median seconds per 10× rows):")
        for label, points in growth.items():
            steps = ", ".join(f"{b[1] / a[1]:.1f}×" for a, b in zip(points, points[1:]))
            print(f"- {label}: {steps}")
    print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
          "(other jobs on the machine make single runs noisy: see the spread column)")
    print(f"\n(peak RSS: the whole process during the timed queries; target: at most memory_limit + "
          f"{RSS_HEADROOM_MB} MB, i.e. a negative last column. Target for lazy handle + pull: at most 1.1× plain "
          "at the median, with either budget.)")


HUB_ROWS = 5 * 10**7
"""Issue 35's size for the hub row: 0.9 GB of Parquet (generated once, ~40 s on two cores, if absent)."""
HUB_ROUNDS = 15
"""Timed rounds of the hub row: plain and lazy+pull once each per query, taking turns (order alternating). Nine
rounds left the ratio of medians 0.85-1.16x between two runs of the same code at load average 7-8 on two cores;
more rounds narrow the median, not the bias (~18 s of timed queries on a quiet machine)."""
HUB_GOAL = 1.1
"""Issue 35's goal: lazy handle + pull within this ratio of plain DuckDB at the median."""


def hub_row() -> dict:
    """Issue 35's table row "DuckDB lazy handle + pull at 5e7 rows, against plain DuckDB": measured now, here.

    The same paths as the table (:func:`path_runner`: ``plain`` and ``lazy``, the
    handle's exact count checked on every run), both in this process and
    interleaved round by round (the order alternating), so the load of other
    jobs on the machine hits both alike; one untimed warm-up each. The value is
    the worse of the two queries' ratios of medians (wall clock); the detail
    gives the medians, the CPU-time ratio and the paired ratios' median.
    """
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    generated = time.perf_counter()
    pattern, size = generate(HUB_ROWS)
    generated = time.perf_counter() - generated
    parts, worst = [], 0.0
    for query, (_, groups) in QUERIES.items():
        runs = {mode: path_runner(mode, pattern, query) for mode in ("plain", "lazy")}
        wall: dict[str, list[float]] = {mode: [] for mode in runs}
        cpu: dict[str, list[float]] = {mode: [] for mode in runs}
        for mode, run in runs.items():
            run()  # warm-up, untimed: the OS page cache holds the files for both paths alike
        for round_ in range(HUB_ROUNDS):
            for mode in (list(runs) if round_ % 2 == 0 else list(runs)[::-1]):
                start, start_cpu = time.perf_counter(), time.process_time()
                frame = runs[mode]()
                wall[mode].append(time.perf_counter() - start)
                cpu[mode].append(time.process_time() - start_cpu)
                assert (len(frame), int(frame["n"].sum())) == (groups, HUB_ROWS), (mode, len(frame))
        ratio = statistics.median(wall["lazy"]) / statistics.median(wall["plain"])
        paired = statistics.median(lazy / plain for lazy, plain in zip(wall["lazy"], wall["plain"]))
        cpu_ratio = statistics.median(cpu["lazy"]) / statistics.median(cpu["plain"])
        best = min(wall["lazy"]) / min(wall["plain"])
        worst = max(worst, ratio)
        parts.append(f"{groups:,} groups: {ratio:.2f}x ({statistics.median(wall['lazy']):.2f} s vs "
                     f"{statistics.median(wall['plain']):.2f} s; CPU {cpu_ratio:.2f}x; paired {paired:.2f}x; "
                     f"best {best:.2f}x)")
    made = f"; data generated in {generated:.0f} s" if generated > 5 else ""
    return {"figure": "DuckDB lazy handle + pull at 5e7 rows, against plain DuckDB", "value": round(worst, 3),
            "unit": "x", "goal": HUB_GOAL, "met": worst <= HUB_GOAL,
            "detail": f"{'; '.join(parts)}; medians of {HUB_ROUNDS} interleaved runs, {size:,.0f} MB of Parquet, "
                      f"threads={THREADS}, memory_limit={MEMORY_LIMIT}, load average {os.getloadavg()[0]:.1f} on "
                      f"{os.cpu_count()} cores{made}"}


# --------------------------------------------------------------------------- Spark

SPARK_REPEATS = 5
"""Timed runs per Spark path, interleaved; the best is reported (a Spark job on two shared cores is noisy)."""
SPARK_CONF = {"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "2g"}
"""Server settings for both Spark paths: few shuffle partitions suit two cores; 2 GB keeps 1e7 rows in memory."""


def spark_section(rows_list: list[int]) -> None:
    """The group-by through the agent's Spark lazy handles vs plain PySpark, one local Connect server, same run.

    * ``plain``: ``spark.read.parquet(glob).groupBy("k").agg(...)`` on its own
      Connect session, result to Arrow: the physical limit of this engine here.
    * ``agent fetch``: ``spark__query`` with ``lazy=false`` naming a lazy handle
      over the dataset (temp view of the handle, tagged job, Arrow result).
    * ``agent lazy+pull``: the group-by kept as a lazy handle (snapshot by
      pushdown: schema, one LIMIT job for the head that also counts a small
      result and keeps its rows) and materialised under the byte cap, as python
      code naming it does; Spark runs the group-by once: the pull reads the
      rows the snapshot's job already brought in.
    """
    import warnings

    warnings.filterwarnings("ignore")
    from pyspark.sql.connect import functions as F
    from pyspark.sql.connect.session import SparkSession

    from harness_magic.core.cache import SessionCache
    from harness_magic.core.execution.connectors.lazy import materialize_count
    from harness_magic.core.execution.connectors.spark.engine import SparkEngine
    from harness_magic.core.execution.connectors.spark.server import LocalSparkConnect

    started = time.perf_counter()
    server = LocalSparkConnect("local[2]", SPARK_CONF, read_paths=[str(DATA_DIR)])  # all it may read
    print(f"\nSpark group-by ({GROUPS:,} groups), {FILES} Parquet files, local[2] through Spark Connect "
          f"(server start {time.perf_counter() - started:.1f} s), best of {SPARK_REPEATS} interleaved; "
          f"load average (1 min) at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| rows | path | seconds | × plain | Mrows/s |")
    print("|---:|---|---:|---:|---:|")
    try:
        plain_session = SparkSession.builder.remote(server.url).create()
        for rows in rows_list:
            pattern, _ = generate(rows)
            # a file view: SQL on raw paths is off in the connector's sessions (spark.plan.PINNED_CONF)
            engine = SparkEngine(server.url, files={"events": pattern}, count_budget_s=30.0, timeout_s=3_600)
            cache = SessionCache()
            cache.put("events_all", engine.lazy(cache, "SELECT * FROM events"))
            query = QUERY.format(src="events_all")

            def plain():
                frame = (plain_session.read.parquet(pattern).groupBy("k")
                         .agg(F.count("*").alias("n"), F.sum("amount").alias("total"), F.avg("amount").alias("mean"))
                         .toArrow().to_pandas())
                return frame

            def fetch():
                frame, truncated = engine.query(cache, query)
                assert not truncated
                return frame

            def lazy_pull():
                relation = engine.lazy(cache, query)
                handle = cache.put("by_k", relation)
                frame = relation.materialize(cache, 64 * 1024**2, handle=handle)
                cache.retire(handle)
                return frame

            paths = {"plain PySpark": plain, "agent fetch over lazy handle": fetch,
                     "agent lazy handle + pull": lazy_pull}
            before = materialize_count()
            for run in paths.values():
                run()  # warm-up: the JVM compiles each plan shape's code once
            times: dict[str, list[float]] = {label: [] for label in paths}
            checksums: dict[str, float] = {}
            for _ in range(SPARK_REPEATS):  # interleaved, so load from other jobs hits every path alike
                for label, run in paths.items():
                    start = time.perf_counter()
                    frame = run()
                    times[label].append(time.perf_counter() - start)
                    assert len(frame) == GROUPS and int(frame["n"].sum()) == rows, (label, len(frame))
                    checksums[label] = float(frame["total"].sum())
            results = {label: (min(times[label]), checksums[label]) for label in paths}
            assert materialize_count() - before == SPARK_REPEATS + 1  # only the pull path brings rows in
            base, total = results["plain PySpark"]
            for label, (seconds, checksum) in results.items():
                assert abs(checksum - total) <= 1e-6 * abs(total), label
                print(f"| {rows:,.0f} | {label} | {seconds:.3f} | {seconds / base:.2f} | "
                      f"{rows / seconds / 1e6:,.1f} |", flush=True)
            engine.close()
        plain_session.stop()
    finally:
        server.stop()
    print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("(target: agent fetch within 1.2× plain PySpark; lazy+pull computes the group-by once: the "
          "snapshot's LIMIT job counts a small result and keeps its rows for the pull)")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    if "--spark-only" in sys.argv:  # e.g. --spark-only 1e7
        spark_section([int(float(r)) for r in sys.argv[sys.argv.index("--spark-only") + 1:]] or [10**7])
    else:
        with_spark = "--no-spark" not in sys.argv and "--child" not in sys.argv
        sys.argv = [a for a in sys.argv if a != "--no-spark"]
        main()
        if with_spark:
            spark_section([10**7])
