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
* ``__harness_checkpoint__()`` (optional): the value's *definition* for a
  checkpoint, a small JSON object of strings (for a lazy DuckDB relation:
  ``{"connector": "duckdb", "sql": "SELECT ..."}``) with no engine state and
  nothing executable by decoding. :meth:`SessionCache.load` hands it to a
  ``rebind`` callable, which re-creates the value through the connector's
  usual checks (or reports why it cannot).

This module only recognises them; the values themselves live with their
connector (see :mod:`harness_magic.core.execution.connectors.lazy`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["engine_of", "is_engine_value", "checkpoint_definition", "DEFINITION_MAX_CHARS"]

DEFINITION_MAX_CHARS = 100_000
"""Longest string in a checkpointed definition: a long SQL query, not a payload."""


def engine_of(value: Any) -> str | None:
    """The engine a value lives in, or None for ordinary (in-kernel) values."""
    engine = getattr(type(value), "__harness_engine__", None)
    return engine if isinstance(engine, str) and engine else None


def is_engine_value(value: Any) -> bool:
    return engine_of(value) is not None


def checkpoint_definition(value: Any) -> dict[str, str] | None:
    """The engine value's checkpoint definition (validated: string keys and values, bounded), or None."""
    hook = getattr(type(value), "__harness_checkpoint__", None)
    if hook is None:
        return None
    definition = hook(value)
    if not isinstance(definition, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= DEFINITION_MAX_CHARS
            for k, v in definition.items()):
        raise TypeError(f"{type(value).__name__}.__harness_checkpoint__ must return a dict of strings")
    return dict(definition)
