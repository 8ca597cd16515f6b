"""Run records as Markdown: the ``.md`` export and the answer in Markdown.

Contract: code, results, prompts and snapshots are fenced (a fence longer than
any backtick run inside); model text keeps its Markdown but its raw HTML and
image syntax are made literal (:func:`~harness_magic.core.text.safe_markdown.escape_markdown_html`),
and harness lines that quote the model are one escaped line. Charts are
``data:`` URIs: the file needs no other file.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

from harness_magic.core.export.record import RunRecord, ToolRecord
from harness_magic.core.export.views import (
    display_result_text,
    hidden_chars_note,
    printed_output,
    render_footer_text,
    tool_call_source,
    tool_summary,
)
from harness_magic.core.export.state_view import state_markdown
from harness_magic.core.text.counts import count
from harness_magic.core.text.safe_markdown import escape_markdown_html

__all__ = ["render_markdown_document", "render_answer_markdown"]


def _cited_markdown(text: str, record: RunRecord) -> str:
    """Model Markdown for the ``.md`` export: raw HTML and images literal, citations linked to their own snippets."""
    from harness_magic.core.knowledge.citations import CITATION_RE, citations_markdown, sources_from_run_file

    if not CITATION_RE.search(text):
        return escape_markdown_html(text)
    return citations_markdown(text, sources_from_run_file(record.run_file))



def render_answer_markdown(record: RunRecord) -> str:
    result = record.result
    lines = []
    if result is not None and result.status != "completed":
        lines.append(f"**{result.status}**: {result.error or ''}\n")
    if result is not None and result.text:
        lines.append(_cited_markdown(result.text, record) + "\n")
    lines.append(f"*{_md_inline(render_footer_text(record))}*")
    return "\n".join(lines)



def _fence(text: str, language: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{text}\n{ticks}"


def _md_inline(text: str) -> str:
    """One line of harness text that may quote the model: no raw HTML, no images, no line breaks."""
    return escape_markdown_html(" ".join(str(text).split()))


def _md_record(record: RunRecord, depth: int = 2) -> list[str]:
    from harness_magic.core.text.snapshot_view import snapshot_text

    out: list[str] = []
    for item in record.items:
        if isinstance(item, ToolRecord):
            out.append(f"{'#' * min(depth + 1, 6)} {_md_inline(tool_summary(item))}\n")
            source = tool_call_source(item)
            shown_key = None
            if source is not None:
                from harness_magic.core.text.hidden_chars import reveal

                language, text = source
                shown_key = {"python": "code", "path": "path"}.get(language) or ("sql" if "sql" in item.input else "query")
                note = hidden_chars_note(text, language)
                if note:
                    out.append(f"> {_md_inline(note)}\n")
                text = reveal(text)
                out.append((f"Path: {_fence(text)}" if language == "path" else _fence(text, language)) + "\n")
            others = {k: v for k, v in item.input.items() if k != shown_key}
            if others:
                out.append(_fence(json.dumps(others, ensure_ascii=False, indent=1, default=str), "json") + "\n")
            if item.subagent is not None:
                out.append(f"Subagent transcript (task: {_md_inline(item.subagent.prompt)}):\n")
                out.extend(_md_record(item.subagent, depth + 1))
            if item.result is None:
                printed, more = printed_output(item)
                if printed:
                    out.append(("Printed" + (f" (… {count(more, 'line')} more above)" if more else "") + ":\n\n")
                               + _fence(printed) + "\n")
                if item.interrupted:
                    out.append("*interrupted*\n")
            else:
                shown = display_result_text(item)
                if shown:
                    out.append(("Error:" if item.is_error else "Result:") + "\n\n" + _fence(shown) + "\n")
            for name, snap in zip(item.handles, item.snapshots):
                if snap:
                    out.append(_fence(snapshot_text(name, snap)) + "\n")
            for chart in item.charts:
                out.append(f"![chart](data:image/png;base64,{re.sub(r'[^A-Za-z0-9+/=]', '', chart)})\n")
        elif item[0] == "text":
            out.append(_cited_markdown(item[1], record) + "\n")
        elif item[0] == "notice":
            level = "" if item[1] == "info" else f"{_md_inline(item[1])}: "
            out.append(f"> {level}{_md_inline(item[2])}\n")
    return out


def render_markdown_document(records: Sequence[RunRecord], title: str = "harness_magic transcript") -> str:
    """Runs as Markdown: prompts and results fenced, model text with its raw HTML and images made literal."""
    out = [f"# {_md_inline(title)}\n"]
    for record in records:
        out.append(f"## run {_md_inline(record.run_id or '?')}\n")
        out.append("**Prompt:**\n\n" + _fence(record.prompt) + "\n")
        if not record.state.empty:
            out.append(state_markdown(record.state))
        out.extend(_md_record(record))
        result = record.result
        if result is not None and result.status != "completed":
            out.append(f"**{_md_inline(result.status)}**: {_md_inline(result.error or '')}\n")
        out.append(f"*{_md_inline(render_footer_text(record))}*\n")
    return "\n".join(out)

