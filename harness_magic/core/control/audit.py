"""The session's side of the audit log: events it subscribes to, values it describes.

:class:`AuditRecorder` is a harness event handler: each
:class:`~harness_magic.core.transcript.events.MaskingApplied` becomes a
``masking`` record (where, tool use, counts per class), a subagent's too
(``where`` "subagent ...", with its parent tool call). Approval decisions are
recorded where they are made (``ConnectorRegistry._guard`` through
:func:`~harness_magic.core.transcript.audit.record_decision`), governed writes
by the connector that runs them; :func:`record_transfer` records pulls and
exports. None of them ever records a value: only names, classes and counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from harness_magic.core.text.sensitivity import DETECT_SAMPLE_VALUES, DETECTED_KINDS, classify_column, find_sensitive
from harness_magic.core.transcript.audit import AuditLog, audit
from harness_magic.core.transcript.events import Event, MaskingApplied, SubagentEvent

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost

__all__ = ["AuditRecorder", "column_classes", "column_names", "install_audit", "record_pull", "record_transfer",
           "redact_sensitive"]

CLASSIFIED_COLUMNS_MAX = 200
"""Columns of a pulled frame checked for sensitive values: a very wide frame is listed, its tail unclassified."""


class AuditRecorder:
    """``harness.subscribe(AuditRecorder(log))``: audit the events that carry governance decisions."""

    def __init__(self, log: AuditLog) -> None:
        self.log = log

    def __call__(self, event: Event) -> None:
        parent: dict[str, Any] = {}
        while isinstance(event, SubagentEvent):  # a subagent's masking, recorded with its parent call
            parent.setdefault("parent_tool_use_id", event.parent_tool_use_id)
            event = event.event
        if isinstance(event, MaskingApplied):
            audit(self.log, "masking", where=f"subagent {event.where}" if parent else event.where,
                  tool_use_id=event.tool_use_id, counts={cls: int(n) for cls, n in event.counts}, **parent)


def column_names(value: Any) -> list[str]:
    """The column names of a frame-like value (a Series: its name), never its values; [] for anything else."""
    columns = getattr(value, "columns", None)
    if columns is not None:
        try:
            return [str(c) for c in list(columns)]
        except TypeError:
            return []
    name = getattr(value, "name", None)
    if name is not None and hasattr(value, "dtype"):
        return [str(name)]
    return []


def column_classes(value: Any) -> dict[str, str]:
    """Sensitivity class per column of a frame-like value, detected on a bounded sample of each column
    (:func:`~harness_magic.core.text.sensitivity.classify_column`); only columns that have one."""
    classes: dict[str, str] = {}
    names = column_names(value)[:CLASSIFIED_COLUMNS_MAX]
    if not names:
        return classes
    head = value.head(DETECT_SAMPLE_VALUES)
    for position, name in enumerate(names):
        try:
            column = head.iloc[:, position] if hasattr(head, "columns") else head
            found = classify_column(column.tolist())
        except Exception:  # an exotic column type: not classified, still listed by name
            continue
        if found is not None:
            classes[name] = DETECTED_KINDS[found]
    return classes


def record_transfer(sink: AuditLog | None, kind: str, *, columns: list[str],
                    sensitive: Mapping[str, str] | None = None, **fields: Any) -> dict[str, Any] | None:
    """Audit a ``pull`` (agent value into the notebook) or an ``export`` (a file written), with column names
    and the sensitivity class of those that have one."""
    if kind not in ("pull", "export"):
        raise ValueError(f"record_transfer kind {kind!r}: expected 'pull' or 'export'")
    return audit(sink, kind, columns=list(columns), sensitive=dict(sensitive or {}), **fields)


def redact_sensitive(text: str) -> str:
    """``text`` with each validated sensitive value (e-mail, phone, card, IBAN, national id, IP) replaced by
    ``[pii:email]``-style markers: a statement or summary in the log names what it touched, not the values."""
    found = list(find_sensitive(text))
    if not found:
        return text
    parts, at = [], 0
    for hit in found:
        parts.append(text[at:hit.start])
        parts.append(f"[{hit.cls}:{hit.kind}]")
        at = hit.end
    parts.append(text[at:])
    return "".join(parts)


def install_audit(harness: HarnessHost, path: str | None, *, actor: str | None = None) -> AuditLog | None:
    """Point ``harness.audit`` at the log at ``path`` (None or "": auditing off) and subscribe the recorder.

    Every string the log records passes :func:`redact_sensitive`."""
    log = AuditLog(path, actor=actor, redact=redact_sensitive) if path else None
    harness.audit = log
    if log is not None:
        harness.subscribe(AuditRecorder(log))
    return log


def record_pull(sink: AuditLog | None, value: Any, *, handle: str, name: str,
                known: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Audit a pull of ``value`` (handle ``handle`` bound as ``name``): its column names and the class of each
    sensitive one — detected on the value, overridden by ``known`` (the masker's classes: column -> an object
    with ``cls``, from configuration, a glossary or detection)."""
    sensitive = column_classes(value)
    sensitive.update({str(column): known_class.cls for column, known_class in (known or {}).items()})
    return record_transfer(sink, "pull", columns=column_names(value), sensitive=sensitive, handle=handle, name=name)

