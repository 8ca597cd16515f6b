"""Loading a cache checkpoint against the session's connectors (:func:`load_checkpoint`).

A checkpoint's engine handles (lazy DuckDB or Spark relations) are saved as
their definitions; re-binding runs each saved query through its connector's
usual classification, exactly as a model's call would. Handles whose
connector is not configured are left out and named in the loaded cache's
``not_restored``.
"""

from __future__ import annotations

import os
from typing import Any

from harness_magic.core.cache import SessionCache

__all__ = ["load_checkpoint"]


def _rebinder(registry: Any) -> Any:
    """The rebind function for ``registry`` (Spark handles, then lazy DuckDB ones); None without a registry.

    The engines' rebinders are chained here, at the shared level: the engine packages do not import each other.
    """
    if registry is None:
        return None
    from harness_magic.core.execution.connectors.duckdb.connector import lazy_rebinder
    from harness_magic.core.execution.connectors.spark.connector import spark_rebinder  # light: no pyspark

    if not (hasattr(registry, "names") and hasattr(registry, "__getitem__")):
        registry = list(registry)  # read twice: once per engine's rebinder
    return spark_rebinder(registry, others=lazy_rebinder(registry))


def load_checkpoint(directory: str | os.PathLike[str], registry: Any, *, hot_count: int | None = None,
                    memory_budget_bytes: int | None = None,
                    spill_dir: str | os.PathLike[str] | None = None) -> SessionCache:
    """A new cache from the checkpoint in ``directory`` (see :meth:`SessionCache.load`), engine handles
    re-bound on ``registry`` (a ConnectorRegistry, or None: they are left out, each named in ``not_restored``)."""
    return SessionCache.load(directory, hot_count=hot_count, memory_budget_bytes=memory_budget_bytes,
                             spill_dir=spill_dir, rebind=_rebinder(registry))
