"""The code of a run's tool calls as notebook cell text.

One block per interpreter call (its Python), SQL call (a ``sql_turnN_K``
string) or file read (a comment naming the path), each headed by a comment
naming the run, turn and tool. ``%agent_code`` puts these blocks into the next
cell; the live view's "copy code" buttons hold one block each. Pure text:
no IPython, no widgets.
"""

from __future__ import annotations

from typing import Any

__all__ = ["agent_code_text", "call_code_text"]


def call_code_text(record: Any, tool: Any) -> str | None:
    """One call's block as :func:`agent_code_text` writes it (None for a call with no code or SQL)."""
    from harness_magic.core.export import tool_call_source

    source = tool_call_source(tool)
    if source is None:
        return None
    language, text = source
    k = next((i for i, t in enumerate(record.tools, 1) if t is tool), 0)
    name = tool.name if tool.name.isidentifier() else repr(tool.name)  # a model-sent name cannot end the comment
    head = f"# agent run {record.run_id}, turn {tool.turn}: {name}"
    if language == "python":
        return f"{head}\n{text.rstrip()}"
    if language == "sql":
        return f"{head} (SQL)\nsql_turn{tool.turn}_{k} = {text!r}"
    return f"{head} read {text!r}"


def agent_code_text(record: Any, turn: int | None = None) -> str:
    """The code of ``record``'s interpreter calls and its SQL (as Python strings), one block per call.

    Each block starts with a comment naming the run, turn and tool; SQL is
    written as ``sql_turnN_K = '...'`` (``repr``, so any quoting in it stays a
    string), file reads as a comment naming the path. ``""`` when there is none.
    """
    blocks = [call_code_text(record, tool) for tool in record.tools if turn is None or tool.turn == turn]
    blocks = [b for b in blocks if b is not None]
    return "\n\n".join(blocks) + ("\n" if blocks else "")
