"""Engine-held values: handles whose data stays in an engine (a lazy DuckDB relation, ...).

The cache stores such a value like any other, but it is only a small
description of a query, so the cache treats it specially through two hooks
the value's class provides:

* ``__harness_engine__``: a short string naming the engine (``"duckdb"``);
  it is the handle's *location* in listings (instead of memory/disk). Engine
  values are never spilled and never count against the hot set.
* ``__harness_snapshot__(describe_frame)``: the snapshot, computed by the
  engine (pushdown); ``describe_frame(head)`` turns a small pandas frame of
  head rows into the usual frame snapshot, which the value then completes
  with its row count and engine.

This module only recognises them; the values themselves live with their
connector (see :mod:`harness_magic.core.connectors.lazy`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["engine_of", "is_engine_value"]


def engine_of(value: Any) -> str | None:
    """The engine a value lives in, or None for ordinary (in-kernel) values."""
    engine = getattr(type(value), "__harness_engine__", None)
    return engine if isinstance(engine, str) and engine else None


def is_engine_value(value: Any) -> bool:
    return engine_of(value) is not None
