"""``%agent_audit [-n N]``: the latest records of the workspace audit log, and whether its chain holds.

The log is the session's (``AgentMagics.audit_log``; see
:mod:`harness_magic.core.transcript.audit`). The first line says whether the
whole hash chain verifies, or names the first broken record; then one line
per record, oldest first: sequence number, UTC time, kind, actor, and what was
decided. Text from the file is shown with control characters escaped.
"""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from harness_magic.core.text.counts import count
from harness_magic.core.transcript.audit import read_tail, verify_file
from harness_magic.core.transcript.scrub import escape_control

__all__ = ["AuditMagics", "describe_record"]

DEFAULT_ENTRIES = 20
"""Records shown without ``-n``: a screenful."""

LINE_MAX_CHARS = 160
"""A longer description (a long statement) is cut on screen; the record keeps it (within its own bound)."""


def _sensitive(record: dict[str, Any]) -> str:
    sensitive = record.get("sensitive")
    if isinstance(sensitive, dict) and sensitive:
        return "; sensitive: " + ", ".join(f"{c} ({k})" for c, k in sensitive.items())
    return ""


def describe_record(record: dict[str, Any]) -> str:
    """One line saying what a record decided (names and counts, as recorded)."""
    kind, get = record.get("kind"), record.get
    if kind in ("approval", "denial", "refusal"):
        verb = {"approval": f"approved by {get('by', '?')}", "denial": "denied", "refusal": "refused"}[kind]
        text = f"{get('tool')} ({get('safety')}) {verb}"
        detail = (get("summary") or "") if kind == "approval" else (get("reason") or "")
        return f"{text}: {detail}" if detail else text
    if kind == "governed_write":
        tables = ", ".join(map(str, get("tables") or [])) or "?"
        rows = get("rows")
        rows_text = count(rows, "row") if isinstance(rows, int) else "? rows"
        return f"{get('connector')} [{get('environment', '?')}] {get('outcome')}: {rows_text} in {tables}: " \
               f"{get('statement', '')}"
    if kind == "masking":
        counts = get("counts") or {}
        parts = [f"{n} {cls}" for cls, n in counts.items()] if isinstance(counts, dict) else []
        return f"{get('where')}: masked {', '.join(parts) or 'nothing'}"
    if kind == "pull":
        columns = get("columns") or []
        return f"{get('handle')} -> {get('name')} ({count(len(columns), 'column')}){_sensitive(record)}"
    if kind == "export":
        return f"{get('path')} ({get('format')}){_sensitive(record)}"
    return ", ".join(f"{k}={v}" for k, v in record.items() if k not in ("seq", "ts", "kind", "actor", "prev", "hash"))


def _line(record: dict[str, Any]) -> str:
    ts = str(record.get("ts", ""))
    ts = ts.split(".")[0] + "Z" if "." in ts else ts
    text = describe_record(record)
    if len(text) > LINE_MAX_CHARS:
        text = text[:LINE_MAX_CHARS - 1] + "…"
    return escape_control(f"{record.get('seq', '?'):>4}  {ts}  {record.get('kind', '?'):<14} "
                          f"{record.get('actor', '?')}: {text}")


@magics_class
class AuditMagics(Magics):
    """``%agent_audit`` over ``agent_magics``' session audit log."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    @no_var_expand
    @magic_arguments()
    @argument("-n", type=int, default=DEFAULT_ENTRIES,
              help=f"How many of the latest records (default {DEFAULT_ENTRIES}).")
    @line_magic
    def agent_audit(self, line: str) -> None:
        """Show the latest audit records and check the log's hash chain."""
        args = parse_argstring(self.agent_audit, line)
        if args.n < 1:
            raise UsageError(f"%agent_audit -n {args.n}: must be at least 1")
        log = self._agent.session.audit
        if log is None:
            print("auditing is off (AgentMagics.audit_log is empty)")
            return
        try:
            result = verify_file(log.path)
        except FileNotFoundError:
            print(f"audit log {log.path}: no records yet")
            return
        except OSError as exc:
            raise UsageError(f"%agent_audit: cannot read {log.path}: {exc.strerror or exc}") from None
        if result.ok:
            print(f"audit log {log.path}: chain verified, {count(result.records, 'record')}")
        else:
            print(f"audit log {log.path}: CHAIN BROKEN at line {result.line}: {result.problem}: {result.detail}")
        for record in read_tail(log.path, args.n):
            print(_line(record))
