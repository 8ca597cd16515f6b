"""Spark's own estimate of a query before it runs: the optimized logical plan's statistics (``EXPLAIN COST``).

The query's handles are bound and its plan passes the read check first
(:meth:`~.engine.SparkEngine.checked`: a refused query is refused here, before
any estimate); the cost mode of the same analyze request then gives each
operator's ``sizeInBytes`` and, where Spark knows it, ``rowCount``
(:func:`~harness_magic.core.execution.connectors.estimates.spark_plan_estimate`).
Nothing runs: no Spark job starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness_magic.core.execution.connectors.estimates import Estimate, spark_plan_estimate

if TYPE_CHECKING:
    from harness_magic.core.cache.protocol import HandleCache
    from harness_magic.core.execution.connectors.spark.engine import SparkEngine

__all__ = ["spark_estimate"]


def spark_estimate(engine: "SparkEngine", cache: "HandleCache", sql: str) -> Estimate:
    """Spark's estimate of one query (ToolError with Spark's error when it cannot be planned)."""

    def plan(spark: object) -> str:
        engine.bind(spark, cache, sql)
        return str(engine.checked(spark, sql)._explain_string(mode="cost"))

    return spark_plan_estimate(engine.run(plan))
