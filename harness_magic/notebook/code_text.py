"""The code of a run's tool calls as notebook cell text.

One block per interpreter call (its Python), SQL call (a ``sql_turnN_K``
string) or file read (a comment naming the path), each headed by a comment
naming the run, turn and tool. ``%agent_code`` puts these blocks into the next
cell; the live view's "copy code" buttons hold one block each. Pure text:
no IPython, no widgets.
"""

from __future__ import annotations

from typing import Any

__all__ = ["agent_code_text", "call_code_text", "code_cell_text", "handles_read"]


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


def handles_read(record: Any, made_later: set[str], handles: set[str], turn: int | None = None) -> list[str]:
    """Cached handles ``record``'s interpreter code reads, in the order the calls read them: names a call
    mentions that are in ``handles`` (the cache now) and were not made by that call, a later call of the run,
    or a later run (``made_later``)."""
    from harness_magic.core.execution.interpreter import referenced_names

    tools = list(record.tools)
    made_from = [set(made_later) for _ in range(len(tools) + 1)]  # made_from[k]: made by call k or after
    for k in range(len(tools) - 1, -1, -1):
        made_from[k] = made_from[k + 1] | set(tools[k].handles)
    reads: list[str] = []
    for k, tool in enumerate(tools):
        code = tool.input.get("code")
        if tool_call_language(tool) != "python" or (turn is not None and tool.turn != turn):
            continue
        mentioned = referenced_names(code) & handles - made_from[k] - set(reads)
        reads += sorted(mentioned, key=lambda n: (code.find(n), n))
    return reads


def tool_call_language(tool: Any) -> str | None:
    """``python``, ``sql`` or ``path``: what a call's code block is (None: no block)."""
    from harness_magic.core.export import tool_call_source

    source = tool_call_source(tool)
    return source[0] if source is not None else None


def code_cell_text(body: str, run_id: str, how: str, reads: list[str], import_save: bool) -> str:
    """The whole cell ``%agent_code`` puts in: a line naming the run (``how`` it was taken), one
    ``%agent_pull`` per handle the code reads, the import of ``save`` where the notebook's ``save`` is not the
    agent's (``import_save``), then ``body`` (:func:`agent_code_text`)."""
    lines = [f"# run {run_id} ({how}): the agent's code, runnable here; save() stores into the agent's cache"]
    lines += [f"%agent_pull {handle}" for handle in reads]
    if import_save:
        lines.append("from harness_magic.notebook.bindings import save  # the agent's save (this notebook has its own)")
    return "\n".join(lines) + "\n\n" + body
