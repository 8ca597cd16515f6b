"""Sensitive values pseudonymised where they enter the agent's side, restored only for the user.

The first layer of masking (the scanner, :class:`~harness_magic.core.text.masking.Masker`,
is the second). Contract:

* **At entry.** Every value stored in a session cache passes
  :meth:`CacheGuard.conceal` (the cache's :class:`~harness_magic.core.cache.EntryGuard`):
  pushes (``--in``, ``%agent_push``), connector results (files, SQL, DuckDB,
  Spark), subagent results and interpreter saves alike. Each column of a
  frame or series (and a plain index) is classified — by configuration and
  glossary for its name *or any column it was computed from*
  (:func:`~harness_magic.core.execution.connectors.lineage.column_sources`
  of the connector's query), else by detection on a bounded sample — and
  then, by the masking policy of its class:

  - ``mask`` pii or restricted: every value replaced by a stable keyed pseudonym shaped like it;
  - ``mask`` financial: numbers kept real (sums must be exact; the scanner masks the values by value on
    the way out), text (card numbers, IBANs) pseudonymised like pii;
  - ``deny`` (any class): every value replaced by ``[denied CLASS]`` (missing cells stay missing);
  - ``allow``: kept real.

  So the worker, snapshots, printed text, errors, spill files, checkpoints
  and subagents only ever hold pseudonyms: nothing needs to recognise a
  real value on the way out.
* **Stable and consistent.** The same value of the same kind gets the same
  pseudonym in every handle of the session (joins, group-bys and distinct
  counts stay right); a pseudonym seen again (a derived frame saved back) is
  left as it is, never pseudonymised twice.
* **Restored only for the user.** The real value of each concealed handle
  and the map pseudonym -> real stay in the kernel (never the worker, the
  log or an export): ``%agent_pull``/``--out`` of a pushed or loaded handle
  returns exactly what came in, and a derived value has its pseudonyms
  mapped back (:meth:`Pseudonyms.reveal_value`). Denied values were never
  there: a derived value holds ``[denied CLASS]``.
* **Engines that keep the data serve the pseudonyms.** A DuckDB connector's
  configured files are views that apply this map's keyed function
  (:meth:`Pseudonyms.served_column`, :meth:`Pseudonyms.engine_pseudonyms`;
  see :mod:`~harness_magic.core.execution.connectors.duckdb.pseudonyms`): the
  model's SQL runs over the pseudonyms the cache holds, and their results
  arrive already pseudonymised (never pseudonymised again). A Spark connector's
  configured files are views over a copy the kernel writes with the same
  function (:mod:`~harness_magic.core.execution.connectors.spark.pseudonyms`):
  the key never reaches Spark.
* **Other engines get real values for pseudonyms the model compares against**
  (only where no such view exists: SQL databases, Spark catalog tables and
  remote files, a DuckDB database's governed writes). :meth:`Pseudonyms.query_for_engine` widens a quoted pseudonym that is an
  operand of ``=``, ``<>`` or ``IN`` against a column to the pseudonym *and*
  its real value (``email IN ('<pseudonym>', '<real>')``), so ``WHERE email =
  '<pseudonym>'`` finds the row in a database table (real values) and in a
  cached handle (pseudonyms) alike; what comes back is concealed again at
  entry. A pseudonym used anywhere else in the query (a selected literal)
  is never replaced.
* **Never crash on data.** A column whose values cannot be read
  (unhashable cells, an exotic dtype) is left as it is and named in
  :attr:`Pseudonyms.notes`; the run goes on.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable, Mapping

from harness_magic.core.cache.engine_value import engine_of
from harness_magic.core.cache.guard import ColumnSources, ServedColumn
from harness_magic.core.text.masking import ColumnClass, Masker, denied_text
from harness_magic.core.text.sensitivity import DETECT_SAMPLE_VALUES, DETECTED_KINDS, classify_column, find_sensitive

__all__ = ["Pseudonyms", "CacheGuard", "CLASS_STRENGTH", "NOTES_MAX"]

CLASS_STRENGTH = {"restricted": 3, "pii": 2, "financial": 1}
"""When a column is computed from several classified ones, it takes the strongest class."""
NOTES_MAX = 200
"""Notes kept about columns that could not be classified or concealed (oldest dropped)."""
_STRING_KINDS = "OSU"
"""numpy kinds whose values are text (object, str, bytes-as-text)."""


class Pseudonyms:
    """The session's pseudonym map and the rules above; shared by the session's caches (subagents too)."""

    def __init__(self, masker: Masker) -> None:
        self.masker = masker
        self._reverse: dict[str, Any] = {}
        """Pseudonym -> the real value it stands for (kernel only)."""
        self._lock = threading.RLock()
        self.notes: list[str] = []
        """Columns left as they were, and why (bounded by :data:`NOTES_MAX`)."""
        self._served_classes: dict[tuple[str, str], ColumnClass] = {}
        """(view, column), lower-cased -> the class an engine's view serves it with (:meth:`served_column`): a
        query's result column computed from it is classified by it, though its values arrive already concealed."""
        self._served: dict[tuple[str, str], dict[str, str]] = {}
        """(kind, class) -> real text -> pseudonym, for what engines' views asked (:meth:`engine_pseudonyms`)."""
        self._entered: dict[str, dict[str, int]] = {}
        """Handle -> values replaced at entry per class, until the tool result announcing it is marked."""

    def guard(self) -> CacheGuard:
        """A new :class:`CacheGuard` for one cache, over this map."""
        return CacheGuard(self)

    @property
    def size(self) -> int:
        """Pseudonyms issued so far."""
        return len(self._reverse)

    def is_pseudonym(self, text: str) -> bool:
        return text in self._reverse

    # -- entry ---------------------------------------------------------------------------------

    def conceal(self, handle: str, value: Any, sources: ColumnSources | None, *, derived: bool = False) -> Any:
        """``value`` in its agent-side form (frames, series and indexes; anything else as it is).

        ``derived``: computed on the agent's side from cached values (an interpreter save). Its pii and
        restricted columns are concealed again all the same (idempotent on pseudonyms), but the values of
        its financial columns are not learned for the scanner: a sum the model computed must reach it.
        """
        import pandas as pd

        if not self.masker.active or engine_of(value) is not None:
            return value
        policy = dict(self.masker.policy)
        if derived:
            policy["_derived"] = "yes"
        if isinstance(value, pd.DataFrame):
            return self._conceal_frame(handle, value, sources, policy)
        if isinstance(value, pd.Series):
            label = "" if value.name is None else str(value.name)
            cc = self._classify(handle, label, value, sources)
            out = self._apply(handle, label, value, cc, policy) if cc is not None else value
            return self._conceal_index(handle, out, sources, policy)
        if isinstance(value, pd.Index) and not isinstance(value, pd.MultiIndex):
            label = "" if value.name is None else str(value.name)
            series = value.to_series()
            cc = self._classify(handle, label, series, sources)
            concealed = series if cc is None else self._apply(handle, label, series, cc, policy)
            return value if concealed is series else pd.Index(concealed.to_numpy(), name=value.name,
                                                                dtype=concealed.dtype)
        return value

    def _conceal_frame(self, handle: str, frame: Any, sources: ColumnSources | None,
                       policy: Mapping[str, str]) -> Any:
        out = None
        for i, column in enumerate(frame.columns):
            label = str(column)
            series = frame.iloc[:, i]
            cc = self._classify(handle, label, series, sources)
            if cc is None:
                continue
            concealed = self._apply(handle, label, series, cc, policy)
            if concealed is not series:
                if out is None:
                    out = frame.copy(deep=False)
                out.isetitem(i, concealed)
        return self._conceal_index(handle, frame if out is None else out, sources, policy)

    def _conceal_index(self, handle: str, value: Any, sources: ColumnSources | None,
                       policy: Mapping[str, str]) -> Any:
        import pandas as pd

        index = value.index
        if isinstance(index, (pd.MultiIndex, pd.RangeIndex)) or index.dtype.kind not in _STRING_KINDS \
                and not isinstance(index.dtype, (pd.StringDtype, pd.CategoricalDtype)):
            return value
        label = "" if index.name is None else str(index.name)
        cc = self._classify(handle, label or "(index)", index.to_series(), sources)
        if cc is None:
            return value
        series = index.to_series()
        concealed = self._apply(handle, label or "(index)", series, cc, policy)
        if concealed is series:
            return value
        out = value.copy(deep=False)
        out.index = pd.Index(concealed.to_numpy(), name=index.name, dtype=concealed.dtype)
        return out

    def _classify(self, handle: str, label: str, series: Any, sources: ColumnSources | None) -> ColumnClass | None:
        declared = self._with_detection(f"{handle}.{label}", self._declared(handle, label, sources),
                                        lambda: series.head(DETECT_SAMPLE_VALUES).tolist())
        if declared is None:
            declared = self._arrived_concealed(series)
        if declared is not None:
            self.masker.columns.setdefault(handle, {})[label] = declared
        return declared

    def _arrived_concealed(self, series: Any) -> ColumnClass | None:
        """The class of a column whose sampled values all arrived concealed (an engine's view served them, and
        lineage could not name the view's column, e.g. ``SELECT *``): a denied column's class, or the kind
        detected in the real values its pseudonyms stand for (``pii`` when none is). None otherwise."""
        try:
            values = [v for v in series.head(DETECT_SAMPLE_VALUES).tolist() if isinstance(v, str)]
        except (TypeError, ValueError, AttributeError):
            return None
        if not values:
            return None
        for cls in CLASS_STRENGTH:
            if all(v == denied_text(cls) for v in values):
                return ColumnClass(cls, "denied by its engine")
        with self._lock:
            if not all(v in self._reverse for v in values):
                return None
            real = [self._reverse[v] for v in values]
        try:
            kind = classify_column(real)
        except (TypeError, ValueError, AttributeError, OverflowError):
            kind = None
        if kind is None:
            return ColumnClass("pii", "served as pseudonyms")
        return ColumnClass(DETECTED_KINDS[kind], "detected", kind)

    def _with_detection(self, where: str, declared: ColumnClass | None,
                        sample: Callable[[], list[Any]]) -> ColumnClass | None:
        """``declared`` with the kind detection finds in ``sample()`` (or the detected class when none is
        declared); a sample that cannot be read is noted, and the declared class alone counts."""
        try:
            kind = classify_column(sample())
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:
            self._note(f"{where}: not classified by its values ({type(exc).__name__}: {exc})")
            kind = None
        if declared is None:
            return None if kind is None else ColumnClass(DETECTED_KINDS[kind], "detected", kind)
        if kind is not None and declared.kind is None:
            return ColumnClass(declared.cls, declared.source, kind)
        return declared

    def served_column(self, table: str, column: str, numeric: bool, sample: list[Any]) -> ServedColumn | None:
        """How an engine keeping ``table`` serves ``column`` (see :meth:`CacheGuard.served_column`): the class
        configured for ``table.column`` or ``column``, else detected in ``sample``, and the policy of that class,
        exactly as :meth:`conceal` treats the same column of a frame."""
        if not self.masker.active:
            return None
        cc = self._with_detection(f"{table}.{column}", self.masker.declared_class(column, table), lambda: sample)
        action = None if cc is None else _action(cc, numeric, self.masker.policy)
        if cc is None or action is None:
            self._served_classes.pop((table.lower(), column.lower()), None)
            return None
        self._served_classes[(table.lower(), column.lower())] = cc
        return ServedColumn(action, cc.cls, cc.kind or cc.cls, cc.source)

    def engine_pseudonyms(self, kind: str, cls: str, values: list[str]) -> list[str]:
        """The pseudonyms :meth:`conceal` issues for ``values`` (distinct) of a column of ``kind`` and ``cls``,
        registered for the user like theirs (an engine serving a view calls this)."""
        if cls not in CLASS_STRENGTH:
            raise ValueError(f"sensitivity class {cls!r} is not one of {', '.join(CLASS_STRENGTH)}")
        with self._lock:
            memo = self._served.setdefault((kind, cls), {})
            missing = [v for v in dict.fromkeys(values) if v not in memo]
            if missing:  # a view is read again by every query: each value's keyed hash is made once
                memo.update(zip(missing, self._pseudonyms_of(kind, cls, missing)))
            return [memo[v] for v in values]

    def _declared(self, handle: str, label: str, sources: ColumnSources | None) -> ColumnClass | None:
        """The strongest configured class of ``label`` or of any column it is computed from (for a query's result,
        the classes of the cached handles it may read count too)."""
        refs = {label}
        if sources:
            wanted = label.lower()
            for output, inputs in sources.items():
                if output.lower() == wanted:
                    refs |= set(inputs)
        best: ColumnClass | None = None
        for ref in sorted(refs):
            table, _, column = ref.rpartition(".")
            found = self.masker.declared_class(column, table or None)
            if found is None and sources is not None and table:
                found = self._served_classes.get((table.lower(), column.lower()))
            if found is None and sources is not None:
                found = self._handle_class(column, table, handle)
            if found is None:
                continue
            if ref.lower() != label.lower():
                found = ColumnClass(found.cls, f"{found.source}, computed from {ref}", found.kind)
            if best is None or CLASS_STRENGTH[found.cls] > CLASS_STRENGTH[best.cls]:
                best = found
        return best

    def _handle_class(self, column: str, table: str, result: str) -> ColumnClass | None:
        """The class a cached handle's column got (a query over a lazy handle reads the engine's real rows):
        ``table``'s when the query names it, else the strongest of any other handle's column of that name."""
        wanted = column.lower()
        best: ColumnClass | None = None
        for handle, classes in list(self.masker.columns.items()):
            if handle == result or table and handle.lower() != table.lower():
                continue
            for name, cc in classes.items():
                if name.lower() == wanted and (best is None or CLASS_STRENGTH[cc.cls] > CLASS_STRENGTH[best.cls]):
                    best = ColumnClass(cc.cls, f"{cc.source} in {handle}", cc.kind)
        return best

    def _apply(self, handle: str, label: str, series: Any, cc: ColumnClass, policy: Mapping[str, str]) -> Any:
        """``series`` concealed by the policy for its class (see the module table)."""
        try:
            action = _action(cc, _numeric(series), policy)
            counted = "_derived" not in policy  # values an engine's view concealed count like ours; a save's do not
            if action == "deny":
                out = self._map(series, lambda values: [denied_text(cc.cls)] * len(values))
                if out is not series or counted:
                    self._count(handle, cc.cls, series)
                return out
            if action is None:
                if cc.cls == "financial" and policy.get(cc.cls, "mask") != "allow" and "_derived" not in policy:
                    self.masker.learn_column(handle, label, cc, _safe_list(series))  # amounts: the scanner masks them
                return series
            kind = cc.kind or cc.cls
            out = self._map(series, lambda values: self._pseudonyms_of(kind, cc.cls, values))
            if out is not series or counted:
                self._count(handle, cc.cls, series)
            return out
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:  # unhashable cells and the like
            self._note(f"{handle}.{label}: left as it is ({type(exc).__name__}: {exc}); the scanner still applies")
            self.masker.learn_column(handle, label, cc, _safe_list(series))
            return series

    def _map(self, series: Any, fn: Callable[[list[Any]], list[str]]) -> Any:
        """``series`` with each distinct non-missing value replaced (``fn`` maps the list of distinct values)."""
        import numpy as np
        import pandas as pd

        if isinstance(series.dtype, pd.CategoricalDtype):
            categories = fn(list(series.cat.categories))
            if categories == list(series.cat.categories):
                return series
            if len(set(categories)) == len(categories):
                return series.cat.rename_categories(categories)
            series = series.astype(object)  # two categories denied alike: no longer categories
        arrow = _arrow_text(series)
        if arrow is not None:  # Arrow-backed text (pandas' default): encoded, mapped and taken back in Arrow
            return self._map_arrow(series, arrow, fn)
        codes, uniques = pd.factorize(series, use_na_sentinel=True)
        uniques = np.asarray(uniques, dtype=object).tolist()
        replaced = fn(uniques)
        if all(isinstance(u, str) and r == u for r, u in zip(replaced, uniques)):
            return series  # every value already in its agent-side form (pseudonyms saved back)
        mapped = np.array(replaced + [None], dtype=object)
        values = mapped[codes]  # -1 (missing) takes the last slot, then the original missing marker below
        missing = codes < 0
        if missing.any():
            values[missing] = series.to_numpy(dtype=object)[missing]
        dtype = series.dtype if isinstance(series.dtype, pd.StringDtype) else object
        return pd.Series(values, index=series.index, name=series.name, dtype=dtype)

    @staticmethod
    def _map_arrow(series: Any, arrow: Any, fn: Callable[[list[Any]], list[str]]) -> Any:
        """:meth:`_map` of Arrow-backed text: each distinct value mapped once, taken back by its index (nulls stay
        null), the dtype kept."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.compute as pc

        encoded = pc.dictionary_encode(arrow)
        uniques = encoded.dictionary.to_pylist()
        replaced = fn(uniques)
        if replaced == uniques:
            return series  # every value already in its agent-side form (pseudonyms saved back)
        taken = pc.take(pa.array(replaced, arrow.type), encoded.indices)
        return pd.Series(pd.array(taken, dtype=series.dtype), index=series.index, name=series.name)

    def _pseudonyms_of(self, kind: str, cls: str, values: list[Any]) -> list[str]:
        """The pseudonym of each of ``values`` (distinct), issuing new ones (one keyed hash each, in bulk)."""
        texts = [v if isinstance(v, str) else str(v) for v in values]
        reverse = self._reverse
        with self._lock:
            out = list(texts)
            fresh = [i for i, t in enumerate(texts) if t not in reverse]  # a pseudonym saved back stays itself
            fresh_texts = [texts[i] for i in fresh]
            made = self.masker.pseudonyms(kind, fresh_texts)
            if len(set(made)) == len(made) and reverse.keys().isdisjoint(made) \
                    and not any(map(str.__eq__, made, fresh_texts)):  # the usual case: all new, in bulk
                issued = list(zip(fresh_texts, made))
                if len(fresh) == len(texts):  # nothing seen before (a column's first entry)
                    reverse.update(zip(made, values))
                    out = made
                else:
                    reverse.update(zip(made, (values[i] for i in fresh)))
                    for i, pseudonym in zip(fresh, made):
                        out[i] = pseudonym
                self.masker.register_pseudonyms(issued, cls)
                return out
            issued = []
            for i, pseudonym in zip(fresh, made):
                held = reverse.get(pseudonym, _NONE)
                if held is not _NONE and held != values[i] or pseudonym == texts[i]:
                    pseudonym = self.masker.pseudonym(cls, texts[i])  # a shaped pseudonym collided: unshaped
                if pseudonym not in reverse:
                    reverse[pseudonym] = values[i]
                    issued.append((texts[i], pseudonym))
                out[i] = pseudonym
            self.masker.register_pseudonyms(issued, cls)
        return out

    def mask_prompt(self, text: str) -> str:
        """What the person typed, with each sensitive value replaced by its pseudonym (the one the cache uses for
        a known value), each pseudonym registered so a query the model writes with it finds the rows."""
        if not isinstance(text, str) or not text or not self.masker.active:
            return text
        masked = self.masker.mask_text(text).text
        if masked == text:
            return text
        for found in find_sensitive(text):
            pseudonym = self.masker.pseudonym(found.kind, found.value)
            with self._lock:
                if pseudonym in masked and pseudonym not in self._reverse:
                    self._reverse[pseudonym] = found.value
                    self.masker.register_pseudonym(found.value, pseudonym, found.cls)
        return masked

    def take_entry_counts(self, handles: Any) -> dict[str, int]:
        """Values replaced at entry per class for ``handles`` (each handle's counts are given once)."""
        total: dict[str, int] = {}
        for handle in handles:
            for cls, n in self._entered.pop(handle, {}).items():
                total[cls] = total.get(cls, 0) + n
        return total

    def _count(self, handle: str, cls: str, series: Any) -> None:
        try:
            n = int(series.notna().sum())
        except (TypeError, ValueError):
            n = len(series)
        if n:
            counts = self._entered.setdefault(handle, {})
            counts[cls] = counts.get(cls, 0) + n

    def _note(self, text: str) -> None:
        self.notes.append(text)
        del self.notes[:-NOTES_MAX]

    # -- the user's side -----------------------------------------------------------------------

    def reveal_value(self, value: Any) -> Any:
        """``value`` with every pseudonym (in text columns, indexes, strings, lists) mapped back to its real value."""
        import pandas as pd

        if not self._reverse:
            return value
        if isinstance(value, str):
            return self._reverse.get(value, value)
        if isinstance(value, pd.DataFrame):
            out = None
            for i in range(value.shape[1]):
                series = value.iloc[:, i]
                revealed = self._reveal_series(series)
                if revealed is not series:
                    if out is None:
                        out = value.copy(deep=False)
                    out.isetitem(i, revealed)
            out = value if out is None else out
            columns = value.columns
            if not isinstance(columns, pd.MultiIndex):  # a pivot puts values in the column labels
                labels = self._reveal_plain_index(columns)
                if labels is not columns:
                    out = out.copy(deep=False) if out is value else out
                    out.columns = labels
            return self._reveal_index(out)
        if isinstance(value, pd.Series):
            return self._reveal_index(self._reveal_series(value))
        if isinstance(value, pd.Index):
            return self._reveal_plain_index(value)
        if isinstance(value, list):
            return [self.reveal_value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.reveal_value(v) for v in value)
        return value

    def reveal_text(self, text: str) -> str:
        """``text`` with each pseudonym issued this session replaced by its real value (for the person at the
        keyboard only: the live view with ``show_real_values``; never the log, the history or an output).

        Found by their shapes: ``<kind:hex>``, ``user-…@…`` e-mails and the digit-group pseudonyms the masker
        protects (phones, cards, ids, IBANs); a shorter digit pseudonym (an IPv4 address) stays as it is."""
        if not isinstance(text, str) or not text or not self._reverse:
            return text
        spans = [m.span() for m in _SHAPED_PSEUDONYM.finditer(text)] + self.masker.issued_digit_spans(text)
        out, end = [], 0
        for start, stop in sorted(spans):
            if start < end:
                continue
            found = text[start:stop]
            if found not in self._reverse and "@" in found:
                stop = start + len(found.rpartition(".")[0])  # an e-mail followed by a dot: try without it
                found = text[start:stop]
            real = self._reverse.get(found, _NONE)
            if real is _NONE:
                continue
            out += [text[end:start], str(real)]
            end = stop
        return "".join(out) + text[end:] if out else text

    def _reveal_series(self, series: Any) -> Any:
        import numpy as np
        import pandas as pd

        if isinstance(series.dtype, pd.CategoricalDtype):
            categories = list(series.cat.categories)
            restored = [self._reverse.get(c, c) if isinstance(c, str) else c for c in categories]
            if restored == categories:
                return series
            if len(set(map(repr, restored))) == len(restored):
                return series.cat.rename_categories(restored)
            series = series.astype(object)
        if series.dtype.kind not in _STRING_KINDS and not isinstance(series.dtype, pd.StringDtype):
            return series
        arrow = _arrow_text(series)
        if arrow is not None:
            reverse = self._reverse
            try:
                return self._map_arrow(series, arrow, lambda uniques: [reverse.get(u, u) for u in uniques])
            except (TypeError, ValueError):  # a real value that is not text (Arrow's type errors): as objects below
                pass
        try:
            codes, uniques = pd.factorize(series, use_na_sentinel=True)
        except TypeError:
            return series
        uniques = np.asarray(uniques, dtype=object).tolist()
        hits = [isinstance(u, str) and u in self._reverse for u in uniques]
        if not any(hits):
            return series
        restored = [self._reverse[u] if hit else u for u, hit in zip(uniques, hits)]
        values = np.array(restored + [None], dtype=object)[codes]
        missing = codes < 0
        if missing.any():
            values[missing] = series.to_numpy(dtype=object)[missing]
        out = pd.Series(values, index=series.index, name=series.name, dtype=object)
        if isinstance(series.dtype, pd.StringDtype) and all(isinstance(r, str) for r in restored):
            out = out.astype(series.dtype)
        return out

    def _reveal_index(self, value: Any) -> Any:
        import pandas as pd

        index = value.index
        if isinstance(index, pd.MultiIndex):
            levels = [self._reveal_plain_index(level) for level in index.levels]
            if all(new is old for new, old in zip(levels, index.levels)):
                return value
            try:
                restored = index.set_levels(levels, verify_integrity=True)
            except ValueError:
                return value
        else:
            restored = self._reveal_plain_index(index)
            if restored is index:
                return value
        out = value.copy(deep=False)
        out.index = restored
        return out

    def _reveal_plain_index(self, index: Any) -> Any:
        import pandas as pd

        if isinstance(index, pd.RangeIndex):
            return index
        series = index.to_series()
        revealed = self._reveal_series(series)
        if revealed is series:
            return index
        return pd.Index(revealed.to_numpy(), name=index.name, dtype=revealed.dtype)

    def query_for_engine(self, sql: str, dialect: str | None = None) -> str:
        """``sql`` with each quoted pseudonym compared against a column widened to its real value too (see module
        doc); only for engines holding real values: a tool over views serving pseudonyms
        (``Connector.serves_pseudonyms``) gets the model's SQL as written."""
        if not self._reverse or not isinstance(sql, str) or "'" not in sql:
            return sql
        candidates = {p for p in _quoted_strings(sql) if p in self._reverse and isinstance(self._reverse[p], str)}
        if not candidates:
            return sql
        import sqlglot
        from sqlglot import exp
        from sqlglot.errors import SqlglotError

        from harness_magic.core.execution.connectors.lineage import LINEAGE_MAX_CHARS, SQLGLOT_DIALECTS

        if len(sql) > LINEAGE_MAX_CHARS:
            return sql
        try:
            trees = [t for t in sqlglot.parse(sql, read=SQLGLOT_DIALECTS.get((dialect or "").lower())) if t is not None]
        except (SqlglotError, RecursionError, ValueError):
            return sql
        compared: list[Any] = []
        elsewhere: set[str] = set()
        for tree in trees:
            for literal in tree.find_all(exp.Literal):
                if literal.is_string and literal.this in candidates:
                    if _compared_with_column(literal):
                        compared.append(literal)
                    else:
                        elsewhere.add(literal.this)
        targets = [lit for lit in compared if lit.this not in elsewhere]
        if not targets:
            return sql
        for literal in targets:  # `email = 'p'` -> `email IN ('p', 'real')`: a cached handle holds p, an engine real
            real = exp.Literal.string(str(self._reverse[literal.this]))
            parent = literal.parent.parent if isinstance(literal.parent, exp.Tuple) else literal.parent
            if isinstance(parent, exp.In):
                parent.append("expressions", real)
            elif isinstance(parent, (exp.EQ, exp.NEQ)):  # what _compared_with_column kept: `=`/`<>` otherwise
                column = parent.right if parent.left is literal else parent.left
                widened = exp.In(this=column.copy(), expressions=[literal.copy(), real])
                parent.replace(exp.Not(this=widened) if isinstance(parent, exp.NEQ) else widened)
        write = SQLGLOT_DIALECTS.get((dialect or "").lower())
        return ";\n".join(tree.sql(dialect=write) for tree in trees)


_SHAPED_PSEUDONYM = re.compile(r"<[a-z_]+:[0-9a-f]{10}>|user-[0-9a-f]{8}@[0-9a-f]{6}(?:\.[\w-]+)?")
"""A bracketed class pseudonym or an e-mail one, as :meth:`Masker.pseudonyms` makes them."""
_NONE = object()
"""No value held for a pseudonym (a real value may be None)."""
_LEARN_ROWS = 10_000
"""Rows of a kept-real classified column (financial) whose values the scanner learns: bounded time per entry."""


def _action(cc: ColumnClass, numeric: bool, policy: Mapping[str, str]) -> str | None:
    """What the agent's side gets for a column of class ``cc``: ``"deny"``, ``"pseudonym"``, or None for its real
    values (``allow``; numbers classed financial under ``mask``: sums must be exact)."""
    action = policy.get(cc.cls, "mask")
    if action == "allow":
        return None
    if action == "deny":
        return "deny"
    return None if cc.cls == "financial" and numeric else "pseudonym"


def _arrow_text(series: Any) -> Any:
    """The Arrow array behind a series of Arrow-backed text (pandas' ``str``/``string[pyarrow]``, or an
    ``ArrowDtype`` of strings), in one chunk; None for any other series."""
    import pandas as pd
    import pyarrow as pa

    dtype = series.dtype
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        pass
    elif not (isinstance(dtype, pd.ArrowDtype) and (pa.types.is_string(dtype.pyarrow_dtype)
                                                    or pa.types.is_large_string(dtype.pyarrow_dtype))):
        return None
    arrow = pa.array(series.array)
    return arrow.combine_chunks() if isinstance(arrow, pa.ChunkedArray) else arrow


def _numeric(series: Any) -> bool:
    """Numbers (plain or nullable), not text: a card or IBAN classed financial is an identifier, pseudonymised."""
    import pandas as pd

    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def _safe_list(series: Any) -> list[Any]:
    try:
        return series.head(_LEARN_ROWS).tolist()
    except (TypeError, ValueError, AttributeError):
        return []


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quoted_strings(sql: str) -> set[str]:
    """Every single-quoted string of ``sql`` (doubled quotes unescaped): a cheap pre-check before parsing."""
    return {m.group(1).replace("''", "'") for m in re.finditer(r"'((?:[^']|'')*)'", sql)}


def _compared_with_column(literal: Any) -> bool:
    """The literal is an operand of ``=``/``<>``/``IN`` whose other side is a column."""
    from sqlglot import exp

    parent = literal.parent
    if isinstance(parent, exp.Tuple):  # IN ('a', 'b') may be parsed as a tuple
        parent = parent.parent
    if isinstance(parent, (exp.EQ, exp.NEQ)):
        if isinstance(parent.parent, exp.Update) and parent.arg_key == "expressions":
            return False  # `SET email = '<pseudonym>'` is an assignment: the pseudonym is what gets written
        other = parent.right if parent.left is literal else parent.left
        return isinstance(other, exp.Column)
    if isinstance(parent, exp.In):
        return isinstance(parent.this, exp.Column) and literal is not parent.this
    return False


class CacheGuard:
    """The :class:`~harness_magic.core.cache.EntryGuard` of one cache: conceals at entry, keeps the real values."""

    def __init__(self, pseudonyms: Pseudonyms) -> None:
        self.pseudonyms = pseudonyms
        self._real: dict[str, Any] = {}
        """Handle -> the value as it came in, for the user (only where concealing changed it)."""
        self._sources: dict[str, ColumnSources | None] = {}
        """Engine handle -> its query lineage, for the rows it produces later."""

    def conceal(self, handle: str, value: Any, sources: ColumnSources | None, *, derived: bool = False) -> Any:
        if engine_of(value) is not None:
            self._sources[handle] = sources
            return value
        concealed = self.pseudonyms.conceal(handle, value, sources, derived=derived)
        if concealed is not value:
            self._real[handle] = value
        return concealed

    def conceal_rows(self, handle: str, frame: Any) -> Any:
        return self.pseudonyms.conceal(handle, frame, self._sources.get(handle))

    def reveal(self, handle: str | None, value: Any) -> Any:
        if handle is not None and handle in self._real:  # as it came in; an engine's view may have served pseudonyms
            return self.pseudonyms.reveal_value(self._real[handle])
        return self.pseudonyms.reveal_value(value)

    def served_column(self, table: str, column: str, numeric: bool, sample: list[Any]) -> ServedColumn | None:
        return self.pseudonyms.served_column(table, column, numeric, sample)

    def engine_pseudonyms(self, kind: str, cls: str, values: list[str]) -> list[str]:
        return self.pseudonyms.engine_pseudonyms(kind, cls, values)

    def forget(self, handle: str) -> None:
        self._real.pop(handle, None)
        self._sources.pop(handle, None)

    def query_for_engine(self, sql: str, dialect: str | None = None) -> str:
        return self.pseudonyms.query_for_engine(sql, dialect)
