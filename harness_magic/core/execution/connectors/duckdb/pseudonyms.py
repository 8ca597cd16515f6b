"""The DuckDB connector's configured files as the agent's side may see them: views that serve pseudonyms.

Contract of :class:`PseudonymViews` (one per :class:`~.engine.DuckDBEngine`), used when the cache a
query runs for has an :class:`~harness_magic.core.cache.EntryGuard` (every session's does):

* **The engine serves what the cache would hold.** Each configured file is a view of the engine's database
  over an Arrow dataset (or table) that Python opened read-only; before each query every column gets the
  treatment the guard gives it (:meth:`EntryGuard.served_column`: the same configured or detected class and
  policy as a frame entering the cache):

  - ``pii`` / ``restricted`` (and text classed ``financial``) under ``mask``:
    ``harness_pseudonym(CAST(col AS VARCHAR), kind, class)``, a vectorised Python scalar function computing
    exactly the pseudonym the cache issues for that value (:meth:`EntryGuard.engine_pseudonyms`), which keeps
    each real <-> pseudonym pair in the kernel so a pull restores it;
  - ``deny``: ``'[denied CLASS]'`` (missing stays missing);
  - numbers classed ``financial``, ``allow`` and unclassified columns: as they are (sums stay exact).

  So ``WHERE email = '<pseudonym>'``, joins between two views, ``GROUP BY`` and ``COUNT(DISTINCT ...)`` work
  on pseudonyms, and ``substr(email, 1, 1) = 'a'`` or a ``CAST`` sees the pseudonym, never the real value.
* **The raw rows have no name.** The views scan Python objects (``python_arrow_scan``), which no SQL can
  name; DuckDB itself opens no file (no ``allowed_paths``, external access off), so ``read_parquet`` or
  ``read_csv`` of the configured path fails, and ``query_table``/``query`` only reach the views.
* **The function cannot invert.** ``harness_pseudonym`` is callable from the model's SQL: it returns the
  pseudonym of what it is given (a guessed value's pseudonym; a pseudonym stays itself) and nothing else; no
  function of the engine maps a pseudonym back. Its kind must be a detected kind or a class (ValueError
  naming the allowed ones otherwise).
* **Decided again before each query.** A glossary loaded or a policy changed since the last query replaces
  the view (:meth:`PseudonymViews.refresh`); the samples a column's kind is detected on are read once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Mapping

from harness_magic.core.cache.guard import EntryGuard, ServedColumn
from harness_magic.core.execution.connectors.duckdb.sources import open_source
from harness_magic.core.execution.connectors.served import ServedPlan, served_plan
from harness_magic.core.text.masking import denied_text
from harness_magic.core.text.sensitivity import DETECT_SAMPLE_VALUES, DETECTED_KINDS, SENSITIVITY_CLASSES

__all__ = ["PseudonymViews", "PSEUDONYM_FUNCTION", "PSEUDONYM_KINDS"]

PSEUDONYM_FUNCTION = "harness_pseudonym"
"""The scalar function the views call: ``harness_pseudonym(text, kind, class)`` -> the pseudonym."""
PSEUDONYM_KINDS = frozenset(DETECTED_KINDS) | frozenset(SENSITIVITY_CLASSES)
"""Kinds a pseudonym is shaped by: a detected kind (``email``, ``phone``...) or a class (``<pii:hex>``)."""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class PseudonymViews:
    """The file views of one engine's database, each projected by the guard's treatment of its columns."""

    def __init__(self, sources: Mapping[str, tuple[str, list[Path]]]) -> None:
        self._sources = dict(sources)
        self._opened: dict[str, Any] = {}
        """View -> the Arrow dataset/table it scans (kept alive here: the view holds only a pointer to it)."""
        self._samples: dict[str, dict[str, list[Any]]] = {}
        """View -> column -> its first values (kind detection), read once."""
        self._plans: dict[str, ServedPlan] = {}
        """View -> the treatment its current definition applies (a different one replaces the view)."""
        self._guard: EntryGuard | None = None
        """The guard the function issues pseudonyms through (the last query's)."""
        self._lock = threading.Lock()
        self._con: Any = None
        """The engine's own cursor the views are (re)defined on (under the lock)."""

    def install(self, db: Any) -> Any:
        """Register :data:`PSEUDONYM_FUNCTION` on the engine's database ``db`` (once, while it is set up); the
        cursor returned is the one the views are defined on (the engine closes it before ``db``)."""
        import duckdb

        text = duckdb.sqltype("VARCHAR")
        db.create_function(PSEUDONYM_FUNCTION, self._function, [text, text, text], text, type="arrow",
                           side_effects=False)
        self._con = db.cursor()
        return self._con

    def refresh(self, guard: EntryGuard | None) -> None:
        """Every file view defined by ``guard``'s treatment of its columns now (None: real values)."""
        with self._lock:
            db = self._con
            self._guard = guard
            for view in self._sources:
                source = self._source(view)
                plan = () if guard is None else self._plan(view, source, guard)
                if self._plans.get(view) == plan:
                    continue
                served = dict(plan)
                columns = []
                for field in source.schema:
                    column = served.get(field.name)
                    columns.append(_ident(field.name) if column is None else
                                   f"{_expression(field.name, column)} AS {_ident(field.name)}")
                db.from_arrow(source).project(", ".join(columns)).create_view(view, replace=True)
                self._plans[view] = plan

    def _source(self, view: str) -> Any:
        if view not in self._opened:
            self._opened[view] = open_source(*self._sources[view])
        return self._opened[view]

    def _plan(self, view: str, source: Any, guard: EntryGuard) -> ServedPlan:
        import pyarrow as pa

        samples = self._samples.get(view)
        if samples is None:
            head = source.slice(0, DETECT_SAMPLE_VALUES) if isinstance(source, pa.Table) \
                else source.head(DETECT_SAMPLE_VALUES)
            samples = self._samples[view] = head.to_pydict()
        return served_plan(view, source.schema, samples, guard)

    def _function(self, values: Any, kinds: Any, classes: Any) -> Any:
        """``harness_pseudonym`` over one Arrow batch: the distinct values issued in bulk, mapped back by index."""
        import pyarrow as pa
        import pyarrow.compute as pc

        guard = self._guard
        if guard is None:
            raise ValueError(f"{PSEUDONYM_FUNCTION} is only available while a session's masking serves the views")
        if isinstance(values, pa.ChunkedArray):
            values, kinds, classes = values.combine_chunks(), kinds.combine_chunks(), classes.combine_chunks()
        one_kind, one_class = pc.unique(kinds).to_pylist(), pc.unique(classes).to_pylist()
        if len(one_kind) == 1 and len(one_class) == 1:  # what the views send: one column, one kind
            return _issue(guard, values, one_kind[0], one_class[0])
        out = pa.nulls(len(values), pa.string())  # a kind or class varying by row: each group on its own
        for kind, cls in sorted(set(zip(kinds.to_pylist(), classes.to_pylist())), key=repr):
            mask = pc.and_(pc.equal(kinds, kind), pc.equal(classes, cls))
            out = pc.if_else(mask, _issue(guard, values, kind, cls), out)
        return out


def _issue(guard: EntryGuard, values: Any, kind: Any, cls: Any) -> Any:
    """The pseudonym of each of ``values`` (an Arrow string array) for ``kind`` and ``cls``; nulls stay null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind not in PSEUDONYM_KINDS or cls not in SENSITIVITY_CLASSES:
        raise ValueError(f"{PSEUDONYM_FUNCTION}(value, kind, class): kind {kind!r} must be one of "
                         f"{', '.join(sorted(PSEUDONYM_KINDS))} and class {cls!r} one of "
                         f"{', '.join(SENSITIVITY_CLASSES)}")
    encoded = pc.dictionary_encode(values)
    distinct = encoded.dictionary.to_pylist()
    issued = pa.array(guard.engine_pseudonyms(kind, cls, distinct) if distinct else [], pa.string())
    return pc.take(issued, encoded.indices)


def _expression(name: str, column: ServedColumn) -> str:
    """The SQL a view serves ``name`` by (see the module contract)."""
    if column.action == "deny":
        return f"CASE WHEN {_ident(name)} IS NULL THEN NULL ELSE {_quote(denied_text(column.cls))} END"
    return (f"{PSEUDONYM_FUNCTION}(CAST({_ident(name)} AS VARCHAR), {_quote(column.kind)}, "
            f"{_quote(column.cls)})")
