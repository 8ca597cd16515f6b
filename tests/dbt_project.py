"""A real small dbt project ("shop") built with dbt-core and dbt-duckdb, for the dbt connector's tests and demos.

:func:`build_shop_project` writes the project (seeds behind a source, staging views, mart models exported as
Parquet, column descriptions and tests, a semantic model with metrics owned through ``meta.owner``, an exposure)
into a folder and runs ``dbt build`` and ``dbt docs generate`` there, so ``target/manifest.json`` and
``target/catalog.json`` are what dbt itself writes. A second call on a built folder returns at once.

dbt pins many packages, so it lives in its own virtual environment (:data:`DBT_VENV`, made by ``make venv`` or,
when missing, by :func:`dbt_executable` from :data:`DBT_CONSTRAINTS`), never in the project's.

From a notebook or a shell (the repository root as working directory)::

    import sys; sys.path.insert(0, "tests")
    from dbt_project import build_shop_project
    project = build_shop_project("runs/dbt_shop")   # -> Path; {"type": "dbt", "project": str(project)}
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["build_shop_project", "dbt_executable", "DBT_VENV", "DBT_CONSTRAINTS", "MART_MODELS"]

ROOT = Path(__file__).resolve().parent.parent
DBT_VENV = ROOT / ".venv" / "dbt"
"""dbt's own virtual environment (its pins differ from the project's)."""
DBT_CONSTRAINTS = ROOT / "constraints-dbt.txt"
"""The pinned versions dbt's environment is installed from."""
BUILD_TIMEOUT_S = 600
"""One dbt command (a cold start parses the project and loads DuckDB): longer is a hang."""
MART_MODELS = ("orders", "customer_revenue")
"""The models materialized as Parquet files under ``exports/`` (a DuckDB connector can read them)."""

_FILES: dict[str, str] = {
    "dbt_project.yml": """
        name: shop
        version: "1.0.0"
        profile: shop
        model-paths: [models]
        seed-paths: [seeds]
        target-path: target
        seeds:
          shop:
            +schema: raw
        models:
          shop:
            staging:
              +materialized: view
            marts:
              +materialized: external
    """,
    "profiles.yml": """
        shop:
          target: dev
          outputs:
            dev:
              type: duckdb
              path: "{root}/shop.duckdb"
              threads: 1
              external_root: "{root}/exports"
    """,
    "seeds/raw_orders.csv": """
        id,customer_id,status,amount_cents,ordered_at
        1,1,completed,12000,2026-01-03
        2,1,completed,3000,2026-01-09
        3,2,returned,4500,2026-01-11
        4,3,completed,20000,2026-02-01
        5,2,completed,1500,2026-02-14
        6,3,placed,7000,2026-02-20
    """,
    "seeds/raw_customers.csv": """
        id,first_name,last_name,email
        1,Ada,Lovelace,ada@example.com
        2,Alan,Turing,alan@example.com
        3,Grace,Hopper,grace@example.com
    """,
    "models/sources.yml": """
        version: 2
        sources:
          - name: shop_raw
            description: Raw exports of the shop's order system, loaded nightly.
            schema: main_raw
            tables:
              - name: raw_orders
                description: One row per order as the order system wrote it.
              - name: raw_customers
                description: One row per customer account.
    """,
    "models/staging/stg_orders.sql": """
        select
            id as order_id,
            customer_id,
            status,
            amount_cents / 100.0 as amount,
            cast(ordered_at as date) as ordered_at
        from {{ source('shop_raw', 'raw_orders') }}
    """,
    "models/staging/stg_customers.sql": """
        select
            id as customer_id,
            first_name || ' ' || last_name as customer_name,
            email
        from {{ source('shop_raw', 'raw_customers') }}
    """,
    "models/staging/staging.yml": """
        version: 2
        models:
          - name: stg_orders
            description: Orders cleaned from the raw export, amounts in euros.
            columns:
              - name: order_id
                description: The order's id in the order system.
                data_tests: [unique, not_null]
              - name: amount
                description: Order amount in euros (the raw export holds cents).
          - name: stg_customers
            description: Customers with their display name.
            columns:
              - name: customer_id
                description: The customer's account id.
                data_tests: [unique, not_null]
    """,
    "models/marts/orders.sql": """
        select
            o.order_id,
            o.customer_id,
            c.customer_name,
            o.status,
            o.amount,
            o.ordered_at
        from {{ ref('stg_orders') }} as o
        join {{ ref('stg_customers') }} as c on o.customer_id = c.customer_id
    """,
    "models/marts/customer_revenue.sql": """
        select
            customer_id,
            customer_name,
            sum(amount) as revenue,
            count(*) as order_count
        from {{ ref('orders') }}
        where status = 'completed'
        group by customer_id, customer_name
    """,
    "models/metricflow_time_spine.sql": """
        {{ config(materialized='table') }}
        select cast(range as date) as date_day
        from range(date '2025-01-01', date '2027-01-01', interval 1 day)
    """,
    "models/marts/marts.yml": """
        version: 2
        models:
          - name: orders
            description: One row per order with its customer; the grain of every revenue metric.
            config:
              meta:
                owner: finance-data
            columns:
              - name: order_id
                description: The order's id.
                data_tests: [unique, not_null]
              - name: customer_id
                description: The customer who placed the order.
                data_tests:
                  - relationships:
                      arguments:
                        to: ref('stg_customers')
                        field: customer_id
              - name: status
                description: Where the order is; only completed orders count as revenue.
                data_tests:
                  - accepted_values:
                      arguments:
                        values: [placed, completed, returned]
              - name: amount
                description: Order amount in euros, before refunds.
          - name: customer_revenue
            description: Revenue and completed orders per customer.
            columns:
              - name: revenue
                description: Sum of completed order amounts in euros.
              - name: order_count
                description: Number of completed orders.
          - name: metricflow_time_spine
            description: One row per day, for the semantic layer.
            time_spine:
              standard_granularity_column: date_day
            columns:
              - name: date_day
                granularity: day
    """,
    "models/marts/semantic.yml": """
        version: 2
        semantic_models:
          - name: orders
            description: Orders as the semantic layer sees them.
            model: ref('orders')
            defaults:
              agg_time_dimension: ordered_at
            entities:
              - name: order
                type: primary
                expr: order_id
              - name: customer
                type: foreign
                expr: customer_id
            dimensions:
              - name: ordered_at
                type: time
                type_params:
                  time_granularity: day
              - name: status
                type: categorical
            measures:
              - name: order_total
                description: Sum of order amounts.
                agg: sum
                expr: amount
              - name: order_count
                agg: sum
                expr: "1"
        metrics:
          - name: revenue
            label: Revenue
            description: Revenue is the sum of completed order amounts in euros (returned and placed orders do not count).
            type: simple
            type_params:
              measure: order_total
            filter: "{{ Dimension('order__status') }} = 'completed'"
            config:
              meta:
                owner: finance-data
          - name: completed_orders
            label: Completed orders
            description: Number of completed orders.
            type: simple
            type_params:
              measure: order_count
            filter: "{{ Dimension('order__status') }} = 'completed'"
            config:
              meta:
                owner: finance-data
          - name: average_order_value
            label: Average order value
            description: Revenue divided by completed orders.
            type: derived
            type_params:
              expr: revenue / completed_orders
              metrics:
                - name: revenue
                - name: completed_orders
            config:
              meta:
                owner: growth-analytics
    """,
    "models/exposures.yml": """
        version: 2
        exposures:
          - name: revenue_dashboard
            label: Revenue dashboard
            type: dashboard
            maturity: high
            url: https://bi.example.com/revenue
            description: The finance team's weekly revenue review.
            depends_on:
              - ref('customer_revenue')
            owner:
              name: Finance Data team
              email: finance-data@example.com
    """,
}


def dbt_executable() -> Path:
    """The ``dbt`` command of :data:`DBT_VENV`, installing that environment from :data:`DBT_CONSTRAINTS` first
    when it is missing (``make venv`` does the same)."""
    dbt = DBT_VENV / "bin" / "dbt"
    if not dbt.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DBT_VENV)], check=True, timeout=BUILD_TIMEOUT_S)
        subprocess.run([str(DBT_VENV / "bin" / "pip"), "install", "-q", "-r", str(DBT_CONSTRAINTS)],
                       check=True, timeout=BUILD_TIMEOUT_S)
    return dbt


def _run_dbt(dbt: Path, root: Path, *args: str) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DBT_")},
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "DBT_VERSION_CHECK": "false",
           "DBT_PARTIAL_PARSE": "false"}
    done = subprocess.run([str(dbt), *args, "--project-dir", str(root), "--profiles-dir", str(root)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"dbt {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-4000:]}"
                           f"\n{done.stderr[-2000:]}")


def build_shop_project(dest: str | os.PathLike[str]) -> Path:
    """Write the shop project into ``dest`` and build it with dbt (seeds, models, tests, docs); its path.

    Idempotent: a folder that already holds ``target/catalog.json`` from a finished build is returned as is.
    Builders of the same folder at once (parallel test workers, a notebook and a test) take turns on a lock
    file beside it: one builds, the others then find it built.
    """
    root = Path(dest).resolve()
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(root)


def _build(root: Path) -> Path:
    if (root / "target" / "catalog.json").is_file() and (root / ".built").is_file():
        return root
    root.mkdir(parents=True, exist_ok=True)
    for relative, text in _FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).strip().replace("{root}", str(root)) + "\n")
    (root / "exports").mkdir(exist_ok=True)
    dbt = dbt_executable()
    _run_dbt(dbt, root, "seed")  # the source reads the seeds' tables: they exist before any model builds
    _run_dbt(dbt, root, "build")
    _run_dbt(dbt, root, "docs", "generate")
    (root / ".built").write_text("ok\n")
    return root


if __name__ == "__main__":
    print(build_shop_project(sys.argv[1] if len(sys.argv) > 1 else "runs/dbt_shop"))
