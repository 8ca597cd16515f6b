"""The session's masking step: classifies cached columns and masks what goes to the model.

:class:`SessionMasking` is the :class:`~harness_magic.core.agent.run.ResultMasker`
a session installs on its harness (and its subagents' harnesses). For each
handle a tool result announces it classifies the columns — by configuration
(connector ``sensitivity`` options, glossary entries) first, else by detection
on a sample: at most :data:`CLASSIFY_SAMPLE_ROWS` rows spread evenly over a
frame held in memory (the first, the last and rows between), or the
snapshot's sample rows — and tracks the values of the first :data:`SCAN_ROWS`
rows of each classified column, so values no pattern recognises (names,
notes, codes configured ``pii`` or ``restricted``) are masked wherever they
later appear: a printed line, an error, a column name, a subagent's answer.
The text itself is masked by :class:`~harness_magic.core.text.masking.Masker`.

Time per new handle is bounded whatever its size: a sample for the classes, at
most :data:`SCAN_ROWS` values per classified column learned in one pass. A
column whose sensitive values all lie outside the sample (an e-mail only in
row 5,000 of a notes column) is not classified: its values are not tracked as
known values, but any that a pattern recognises (e-mails, phones, cards...)
are still masked wherever they are printed, and a configured column is
classified whatever its values.

Engine values (SQL, Spark relations) are never materialised for this: their
snapshot's sample is what is scanned; values that match a pattern (e-mails,
phones, cards...) are masked anywhere regardless.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.text.masking import ColumnClass, Masker
from harness_magic.core.text.sensitivity import DETECTED_KINDS, classify_column

__all__ = ["SessionMasking", "SCAN_ROWS", "CLASSIFY_SAMPLE_ROWS", "column_classes_text", "declared_classes",
           "sensitivity_report"]

SCAN_ROWS = 10_000
"""Rows of an in-memory frame whose classified columns' values are tracked: bounded time per tool result."""
CLASSIFY_SAMPLE_ROWS = 200
"""Rows of an in-memory frame read to classify its columns, spread evenly over it: detection needs a share of
values of one kind (:data:`~harness_magic.core.text.sensitivity.DETECT_MIN_SHARE`), not every row."""
NOTES_MAX = 100
"""Notes kept about columns that could not be read: enough to name the problem, bounded for long sessions."""


class SessionMasking:
    """Masks tool results for one session (see the module docstring).

    ``policy``: callable returning ``{class: action}`` (read at each call).
    ``declared``: callable returning ``{"table.column" or "column": ColumnClass}``.
    """

    def __init__(self, policy: Callable[[], Mapping[str, str]],
                 declared: Callable[[], Mapping[str, ColumnClass]] | None = None) -> None:
        self.masker = Masker(policy, declared=declared)
        self.notes: list[str] = []
        """Columns whose values could not be read, each named (the run goes on; ``%agent_connectors`` lists them)."""
        self._seen: dict[str, str] = {}
        """Handle -> version already scanned (a handle's value never changes; a new version is rescanned)."""
        from harness_magic.core.control.pseudonyms import Pseudonyms

        self.pseudonyms = Pseudonyms(self.masker)
        """The first layer: sensitive columns pseudonymised where values enter a cache (its guards)."""
        self._entry_counts: dict[str, int] = {}

    # -- ResultMasker --------------------------------------------------------------------------

    def observe(self, cache: HandleCache, handles: Sequence[str]) -> None:
        """Classify the columns of each new handle and track their values (bounded by :data:`SCAN_ROWS`)."""
        if not handles or not self.masker.active:
            return
        if cache.guard is not None:
            # classified and concealed where the values came in (core/control/pseudonyms.py): what was
            # replaced there is counted with this tool result, so the mark shows where the model reads it
            if self.pseudonyms is not None:
                for cls, n in self.pseudonyms.take_entry_counts(handles).items():
                    self._entry_counts[cls] = self._entry_counts.get(cls, 0) + n
            return
        versions = cache.versions()
        for name in handles:
            version = versions.get(name, "")
            if name not in cache or self._seen.get(name) == version:
                continue
            self._seen[name] = version
            try:
                self.classify(cache, name)
            except Exception as exc:  # never crash on data: the handle is named, the run goes on
                self._note(f"{name}: not classified ({type(exc).__name__}: {str(exc)[:120]})")

    def mask(self, text: str) -> tuple[str, dict[str, int]]:
        masked = self.masker.mask_text(text)
        counts = dict(masked.counts)
        for cls, n in self._entry_counts.items():  # values concealed at entry of the handles just observed
            counts[cls] = counts.get(cls, 0) + n
        self._entry_counts = {}
        return masked.text, counts

    def mask_snapshot(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        return self.masker.mask_value(snapshot)

    # -- classification ------------------------------------------------------------------------

    def classify(self, cache: HandleCache, name: str) -> dict[str, ColumnClass]:
        """Classify ``name``'s columns (configuration first, then detection); returns column -> class."""
        snapshot = cache.snapshot(name)
        columns = [str(c) for c in snapshot.get("columns") or ([snapshot["name"]] if snapshot.get("name") else [])]
        sample = snapshot.get("sample") or []
        frame = _in_memory_frame(cache, name)
        spread = _spread_rows(frame)
        found: dict[str, ColumnClass] = {}
        for column in columns:
            cls = self.masker.declared_class(column)
            try:  # never crash on data: a column that cannot be read keeps its configured class, if any
                kind = classify_column(_column_values(spread, column, sample, CLASSIFY_SAMPLE_ROWS))
                if cls is None and kind is None:
                    continue
                values = _column_values(frame, column, sample, SCAN_ROWS)
            except Exception as exc:  # broad: never crash on data: the values are any cell type an engine returns
                values, kind = [], None
                self._note(f"{name}.{column}: values not read ({type(exc).__name__}); "
                           f"{'classed by configuration only' if cls else 'left unclassified'}")
            if cls is None:
                if kind is None:
                    continue
                cls = ColumnClass(DETECTED_KINDS[kind], "detected", kind)
            found[column] = cls
            # every value of a classified column is tracked, even those a pattern recognises: the free-text
            # pattern can miss a value where printing puts others beside it (a phone next to a card)
            unread = self.masker.unread
            self.masker.learn_column(name, column, cls, values)
            if self.masker.unread > unread:
                self._note(f"{name}.{column}: {self.masker.unread - unread} value(s) not one value "
                           f"(lists, bytes...): not tracked")
        return found

    def _note(self, text: str) -> None:
        if len(self.notes) < NOTES_MAX:
            self.notes.append(text)

    def column_rows(self, cache: HandleCache, name: str) -> list[tuple[str, str]]:
        """``(column, "pii (detected email)")`` for each sensitive column of ``name`` (classified now if new)."""
        classes = self.column_classes(name) or self.classify(cache, name)
        return [(column, f"{c.cls} ({c.source} {c.kind})" if c.kind else f"{c.cls} ({c.source})")
                for column, c in classes.items()]

    def column_classes(self, name: str) -> dict[str, ColumnClass]:
        """The classes recorded for handle ``name`` (empty when it has none or was never scanned)."""
        return dict(self.masker.columns.get(name, {}))


def _in_memory_frame(cache: HandleCache, name: str) -> Any:
    """The cached pandas frame/series when it is in memory (never hydrates a spilled one or runs an engine)."""
    info = next((e for e in cache.entries() if e.name == name), None)
    if info is None or info.location != "memory" or info.type not in ("dataframe", "series"):
        return None
    return cache.get(name)


def _spread_rows(frame: Any) -> Any:
    """At most :data:`CLASSIFY_SAMPLE_ROWS` rows of ``frame`` spread evenly over it (the first and the last among
    them), or ``frame`` itself when it is that short or None; the frame as it is when it cannot be indexed so."""
    if frame is None:
        return None
    try:
        rows = len(frame)
        if rows <= CLASSIFY_SAMPLE_ROWS:
            return frame
        step = (rows - 1) / (CLASSIFY_SAMPLE_ROWS - 1)
        return frame.iloc[[round(i * step) for i in range(CLASSIFY_SAMPLE_ROWS)]]
    except Exception:  # broad: an exotic frame or index; the first rows (head) are read instead
        return frame


def _column_values(frame: Any, column: str, sample: list[Any], rows: int) -> list[Any]:
    """The first ``rows`` values of ``column`` of ``frame`` (a frame, or a series for its one column), or the
    snapshot's ``sample`` rows' when there is no frame in memory or the column cannot be read from it."""
    if frame is not None:
        try:
            data = frame[column] if hasattr(frame, "columns") else frame
            return list(data.head(rows).tolist())
        except Exception:  # not one column (a duplicate or MultiIndex label), or an exotic dtype: the sample
            pass
    return [row.get(column) for row in sample if isinstance(row, dict)]


def column_classes_text(classes: Mapping[str, ColumnClass]) -> str:
    """``email: pii (detected email), name: restricted (config)`` — one line for listings."""
    parts = []
    for column, c in classes.items():
        how = f"{c.source} {c.kind}" if c.kind else c.source
        parts.append(f"{column}: {c.cls} ({how})")
    return ", ".join(parts) or "no sensitive columns"


def declared_classes(registry: Any) -> dict[str, ColumnClass]:
    """``{"table.column": ColumnClass}`` from glossary entries' ``sensitivity`` and each connector's option.

    ``registry``: a :class:`~harness_magic.core.execution.connectors.ConnectorRegistry` or None.
    """
    if registry is None:
        return {}
    declared = {column: ColumnClass(cls, "glossary") for column, cls in registry.glossary_classes().items()}
    for connector in (registry[name] for name in registry.names):  # a connector's own option wins over glossaries
        for column, cls in connector.sensitivity.items():
            declared[column] = ColumnClass(cls, "config")
    return declared


def sensitivity_report(masking: SessionMasking, registry: Any) -> str:
    """What ``%agent_connectors`` prints about masking: the policy, configured columns, classes found in results."""
    policy = ", ".join(f"{cls} {action}" for cls, action in masking.masker.policy.items())
    lines = [f"Masking (what the model sees): {policy}"]
    for column, c in declared_classes(registry).items():
        lines.append(f"  {column}: {c.cls} ({c.source})")
    for handle, classes in masking.masker.columns.items():
        lines.append(f"  result {handle}: {column_classes_text(classes)}")
    lines.extend(f"  note: {note}" for note in masking.notes)
    if len(lines) == 1:
        lines.append("  no sensitive columns configured or found yet")
    return "\n".join(lines)
