"""What people read of a record, as plain text: shared by the HTML and Markdown renderers and the notebook.

Contract: pure functions of a :class:`~.record.ToolRecord` or
:class:`~.record.RunRecord`; nothing here escapes text (each renderer escapes
for its own format) and nothing imports a renderer.
"""

from __future__ import annotations

import re

from harness_magic.core.export.record import RunRecord, ToolRecord
from harness_magic.core.transcript.events import BudgetsUsed

__all__ = [
    "tool_call_source",
    "display_result_text",
    "printed_output",
    "hidden_chars_note",
    "tool_summary",
    "masked_text",
    "render_footer_text",
    "render_budgets_text",
    "copy_key",
    "RESULT_PREVIEW_CHARS",
    "STDOUT_PREVIEW_LINES",
    "APPROVAL_WAIT_SHOWN_S",
]

RESULT_PREVIEW_CHARS = 4_000
"""Tool result text shown per call: results are already bounded; this keeps pages light."""
STDOUT_PREVIEW_LINES = 200
"""Lines of printed output shown per call before ``… N lines more``: long logs stay readable."""
APPROVAL_WAIT_SHOWN_S = 0.05
"""Approval waits shorter than this (a policy answering at once) are not worth a mention."""
_SNAPSHOT_LINE = re.compile(r"^Snapshot: \{.*\}$", re.M)
"""The JSON snapshot line of a tool result: shown to people as a table instead."""
_SAVED_LINE = re.compile(r"^Saved as `([A-Za-z_][A-Za-z0-9_]*)`$\n?", re.M)
"""A bare ``Saved as `handle``` line: for people, the handle's table (titled by it) says as much. A line
with a note (``(`name` was taken)``) does not match and stays."""


def tool_call_source(tool: ToolRecord) -> tuple[str, str] | None:
    """``(language, text)`` of what a call runs: ``python`` code, ``sql``, or a file ``path``; None otherwise."""
    for key, language in (("code", "python"), ("sql", "sql"), ("query", "sql"), ("path", "path")):
        value = tool.input.get(key)
        if isinstance(value, str):
            return language, value
    return None


def display_result_text(tool: ToolRecord) -> str:
    """The result as people read it: the call's text for people (:attr:`ToolRecord.display_text`: no notes meant
    only for the model) or else the model's text, without snapshot JSON or a bare ``Saved as`` line for a
    handle shown as a table (the table, titled by the handle, shows both instead)."""
    text = (tool.display_text if tool.display_text is not None else tool.result) or ""
    if tool.snapshots:
        tabled = {name for name, snapshot in zip(tool.handles, tool.snapshots) if snapshot}
        text = _SNAPSHOT_LINE.sub("", text)
        text = _SAVED_LINE.sub(lambda line: "" if line.group(1) in tabled else line.group(0), text)
        text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text if len(text) <= RESULT_PREVIEW_CHARS else text[:RESULT_PREVIEW_CHARS] + "…"


def printed_output(tool: ToolRecord, limit: int = STDOUT_PREVIEW_LINES) -> tuple[str, int]:
    """What the call printed while it ran, as ``(last lines, lines left out)``."""
    text = "".join(chunk for _, chunk in tool.output)
    lines = text.splitlines()
    if len(lines) <= limit:
        return text, 0
    return "\n".join(lines[-limit:]), len(lines) - limit


def hidden_chars_note(text: str, language: str = "python") -> str:
    """A plain-text warning naming the hidden characters of a call's code by line and character, or ``""``."""
    from harness_magic.core.text.hidden_chars import find_hidden, report_lines

    findings = find_hidden(text)
    if not findings:
        return ""
    n = len(findings)
    what = ("no copy button; %agent_code refuses it unless --escaped" if language == "python"
            else "%agent_code writes it as a Python string with the same escapes")
    return (f"⚠ {n} hidden character{'s' if n != 1 else ''} in this {'code' if language != 'path' else 'path'}, "
            f"shown as escapes ({what}): " + "; ".join(report_lines(findings)))



def tool_summary(tool: ToolRecord, now: float | None = None) -> str:
    """The one-line summary of a tool section (plain text); ``now`` ticks a running call's time."""
    if tool.interrupted and tool.result is None:
        mark = "■"
    else:
        mark = "…" if tool.result is None else ("✗" if tool.is_error else "✓")
    bits = [f"{mark} {tool.title}"]
    if tool.duration_s is not None:
        bits.append(f"{max(tool.duration_s - tool.approval_wait_s - tool.sandbox_s, 0.0):.2f} s")
        if tool.approval_wait_s >= APPROVAL_WAIT_SHOWN_S:
            bits.append(f"{tool.wait_label} wait {tool.approval_wait_s:.1f} s")
    elif tool.approval_since is not None and now is not None and not tool.interrupted:
        bits.append(f"waiting for {'your answer' if tool.wait_label == 'answer' else 'approval'} "
                    f"{now - tool.approval_since:.0f} s")
    elif now is not None and tool.started is not None and not tool.interrupted:
        bits.append(f"{max(now - tool.started - tool.approval_wait_s, 0.0):.0f} s")
    if tool.interrupted and tool.result is None:
        bits.append("interrupted")
    if tool.handles:
        bits.append("→ " + ", ".join(tool.handles))
    if tool.masked:
        bits.append(masked_text(tool.masked))
    return " · ".join(bits)


def masked_text(counts: dict[str, int]) -> str:
    """``masked: 2 pii, 1 financial`` — what a call's section says when masking changed what the model read."""
    return "masked: " + ", ".join(f"{n} {cls}" for cls, n in sorted(counts.items()))



def render_budgets_text(used: BudgetsUsed | None) -> str:
    """``queries 3 (largest 1,200/1,000,000 rows) · writes 1/5``: what a run used of the query and write budgets
    that are set (a limit not set is left out); ``""`` when none is set."""
    if used is None:
        return ""
    bits = []
    if used.max_query_rows is not None or used.max_query_cost is not None:
        largest = []
        if used.max_query_rows is not None:
            largest.append(f"{_amount(used.largest_rows)}/{used.max_query_rows:,} rows")
        if used.max_query_cost is not None:
            largest.append(f"cost {_amount(used.largest_cost)}/{_amount(used.max_query_cost)}")
        bits.append(f"queries {used.queries:,} (largest {', '.join(largest)})")
    if used.max_write_operations is not None:
        bits.append(f"writes {used.writes:,}/{used.max_write_operations:,}")
    return " · ".join(bits)


def _amount(value: float | None) -> str:
    """A row or cost estimate as the footer shows it: whole numbers grouped, ``0`` for none."""
    if value is None:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:,.2f}"


def render_footer_text(record: RunRecord) -> str:
    """``model · turns · tokens · cached · cost · budgets used (when set) · elapsed · run id · trace id (when
    traced) · log`` as one line; the budgets part is :func:`render_budgets_text`."""
    result = record.result
    usage = record.usage
    bits = [f"model {record.model or '?'}"]
    turns = result.turns if result is not None else record.turn
    bits.append(f"{turns} turn{'s' if turns != 1 else ''}")
    if usage is not None:
        bits.append(f"{usage.total_tokens:,} tokens ({usage.input_tokens:,} in, {usage.output_tokens:,} out)")
        bits.append(f"{usage.cached_tokens:,} cached")
        bits.append(f"${usage.cost:.4f}")
    budgets = render_budgets_text(record.budgets)
    if budgets:
        bits.append(budgets)
    elapsed = result.elapsed_s if result is not None else record.elapsed_s
    bits.append(f"{elapsed:.2f} s")
    if record.run_id:
        bits.append(f"run {record.run_id}")
    if record.trace_id:
        bits.append(f"trace {record.trace_id}")
    if record.run_file:
        bits.append(f"log {record.run_file}")
    return " · ".join(bits)



def copy_key(record: RunRecord, tool: ToolRecord) -> str | None:
    """``RUN_ID:TOOL_USE_ID``, naming a call whose code (Python or SQL) can be copied; None for other calls."""
    from harness_magic.core.text.hidden_chars import find_hidden

    source = tool_call_source(tool)
    if source is None or source[0] not in ("python", "sql") or not record.run_id:
        return None
    if source[0] == "python" and find_hidden(source[1]):  # never copied (hidden_chars.hand_over); SQL goes as repr
        return None
    return f"{record.run_id}:{tool.id}"

