"""dbt connector benchmark: reading a large manifest, lookups, search and lineage questions.

Run::

    .venv/bin/python benchmarks/bench_dbt.py                 # 2,000 models x 20 columns
    .venv/bin/python benchmarks/bench_dbt.py --models 500

The manifest is synthetic but shaped like dbt's: ``--models`` models in layers of 100 (each model of a layer
reads two models of the layer below through a join, passing every column through and summing one), a source
per first-layer model, a data test on each model's first column, a semantic model and a metric per ten models.
Printed (markdown): the manifest's size and its read+parse time (the connector's construction: bounded read,
nesting scan, JSON parse, entries), then per question the median of 5 runs: ``lookup`` of a model,
``search``, model-level lineage both ways (depth 3), and column-level lineage of a mid-graph model's column
upstream and downstream (depth 2), each on a fresh lineage cache as a tool call has.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors.dbt.connector import dbt_connector
from harness_magic.core.execution.connectors.registry import ToolContext

LAYER = 100


def model(i: int, columns: int) -> dict:
    layer, slot = divmod(i, LAYER)
    names = [f"c{j}" for j in range(columns)]
    if layer == 0:
        parents = [f"source.bench.raw.t{slot}"]
        sql = f'select {", ".join(names)} from "db"."raw"."t{slot}"'
    else:
        a, b = (layer - 1) * LAYER + slot, (layer - 1) * LAYER + (slot + 1) % LAYER
        parents = [f"model.bench.m{a}", f"model.bench.m{b}"]
        select = ", ".join(f"x.{n}" if j else f"x.{n} + y.{n} as {n}" for j, n in enumerate(names))
        sql = f'select {select} from "db"."main"."m{a}" as x join "db"."main"."m{b}" as y on x.c1 = y.c1'
    return {"resource_type": "model", "name": f"m{i}", "unique_id": f"model.bench.m{i}", "database": "db",
            "schema": "main", "alias": f"m{i}", "relation_name": f'"db"."main"."m{i}"',
            "description": f"Model {i} of layer {layer}: orders revenue customers sessions.",
            "config": {"materialized": "table", "meta": {"owner": f"team-{layer}"}},
            "columns": {n: {"name": n, "description": f"column {n} of m{i}", "data_type": "integer"}
                        for n in names},
            "depends_on": {"nodes": parents}, "compiled_code": sql, "original_file_path": f"models/m{i}.sql"}


def manifest(models: int, columns: int) -> dict:
    nodes = {f"model.bench.m{i}": model(i, columns) for i in range(models)}
    for i in range(models):
        nodes[f"test.bench.not_null_m{i}_c0.x"] = {
            "resource_type": "test", "attached_node": f"model.bench.m{i}", "column_name": "c0",
            "test_metadata": {"name": "not_null", "kwargs": {}}, "depends_on": {"nodes": [f"model.bench.m{i}"]}}
    sources = {f"source.bench.raw.t{i}": {
        "resource_type": "source", "name": f"t{i}", "source_name": "raw", "unique_id": f"source.bench.raw.t{i}",
        "database": "db", "schema": "raw", "identifier": f"t{i}", "relation_name": f'"db"."raw"."t{i}"',
        "columns": {f"c{j}": {"name": f"c{j}", "data_type": "integer"} for j in range(columns)}}
        for i in range(min(models, LAYER))}
    semantic = {f"semantic_model.bench.s{i}": {
        "resource_type": "semantic_model", "name": f"s{i}", "unique_id": f"semantic_model.bench.s{i}",
        "measures": [{"name": f"total_{i}", "agg": "sum", "expr": "c2"}],
        "depends_on": {"nodes": [f"model.bench.m{i}"]}} for i in range(0, models, 10)}
    metrics = {f"metric.bench.k{i}": {
        "resource_type": "metric", "name": f"k{i}", "unique_id": f"metric.bench.k{i}", "type": "simple",
        "type_params": {"measure": {"name": f"total_{i}"}, "input_measures": [{"name": f"total_{i}"}]},
        "config": {"meta": {"owner": "finance"}}, "depends_on": {"nodes": [f"semantic_model.bench.s{i}"]}}
        for i in range(0, models, 10)}
    return {"metadata": {"project_name": "bench", "dbt_version": "1.11.16", "adapter_type": "duckdb"},
            "nodes": nodes, "sources": sources, "semantic_models": semantic, "metrics": metrics, "exposures": {}}


def median_ms(fn, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=2000)
    parser.add_argument("--columns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.json"
        path.write_text(json.dumps(manifest(args.models, args.columns)))
        size = path.stat().st_size
        load_ms = median_ms(lambda: dbt_connector(manifest=path), runs=3)
        dbt = dbt_connector(manifest=path)
        ctx = ToolContext(cache=SessionCache(), harness=None, tool_name="dbt__bench")
        middle = f"m{(args.models // LAYER // 2) * LAYER + 7}"
        rows = [
            ("lookup(model)", median_ms(lambda: dbt._lookup(middle, ctx))),
            ("search(3 words)", median_ms(lambda: dbt._search("orders revenue customers", ctx, k=5))),
            ("lineage(model, both, depth 3)", median_ms(lambda: dbt._lineage(middle, ctx, depth=3))),
            ("lineage(column, upstream, depth 2)",
             median_ms(lambda: dbt._lineage(middle, ctx, column="c3", direction="upstream", depth=2))),
            ("lineage(column, downstream, depth 2)",
             median_ms(lambda: dbt._lineage(middle, ctx, column="c3", direction="downstream", depth=2))),
        ]
    print(f"| manifest | {args.models:,} models x {args.columns} columns | {size / 1e6:.1f} MB | "
          f"read+parse {load_ms:.0f} ms |")
    print("| question | median ms |\n| --- | --- |")
    for name, ms in rows:
        print(f"| {name} | {ms:.1f} |")


if __name__ == "__main__":
    main()
