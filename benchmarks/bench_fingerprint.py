"""Fingerprint benchmark: what a pull (and a pull's re-check) costs to tell an edited value from an unchanged one.

Run::

    .venv/bin/python benchmarks/bench_fingerprint.py                # frames of 1e3..1e7 rows, arrays to 1 GiB
    .venv/bin/python benchmarks/bench_fingerprint.py --max-rows 1e6

Prints one markdown table: value, cells or bytes, whether it was hashed whole or sampled
(:data:`~harness_magic.core.cache.fingerprint.FULL_HASH_MAX_CELLS`,
:data:`~harness_magic.core.cache.fingerprint.FULL_HASH_MAX_BYTES`), and the median time of
:func:`~harness_magic.core.cache.fingerprint.fingerprint` over ``--repeat`` calls. A bind computes
one; a later pull onto the same name computes one more.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd

from harness_magic.core.cache.fingerprint import FULL_HASH_MAX_BYTES, FULL_HASH_MAX_CELLS, fingerprint


def frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"i": np.arange(rows), "f": rng.random(rows), "s": np.array(["north", "south"])[
        rng.integers(0, 2, rows)], "t": pd.date_range("2024-01-01", periods=rows, freq="s"),
        "b": rng.random(rows) > 0.5})


def timed(value: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fingerprint(value)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-rows", type=float, default=1e7)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| value | size | hashed | fingerprint (median) |\n| --- | --- | --- | --- |")
    rows = 1_000
    while rows <= args.max_rows:
        value = frame(rows)
        cells = value.size
        whole = "whole" if cells <= FULL_HASH_MAX_CELLS else "sample"
        print(f"| DataFrame {rows:,}×5 | {cells:,} cells | {whole} | {timed(value, args.repeat) * 1e3:,.1f} ms |")
        rows *= 10
    for mib in (16, 64, 1024):
        value = np.ones(mib * 2**20 // 8)
        whole = "whole" if value.nbytes <= FULL_HASH_MAX_BYTES else "sample"
        print(f"| float64 array | {mib} MiB | {whole} | {timed(value, args.repeat) * 1e3:,.1f} ms |")


if __name__ == "__main__":
    main()
