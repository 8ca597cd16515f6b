"""The code of a run's tool calls as notebook cell text.

One block per interpreter call (its Python), SQL call (a ``sql_turnN_K``
string) or file read (a comment naming the path), each headed by a comment
naming the run, turn and tool. ``%agent_code`` puts these blocks into the next
cell; the live view's "copy code" buttons hold one block each. Pure text:
no IPython, no widgets.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
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
    texts = [call_code_text(record, tool) for tool in record.tools if turn is None or tool.turn == turn]
    blocks = [b for b in texts if b is not None]
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def handles_read(record: Any, made_later: set[str], handles: set[str], turn: int | None = None) -> list[str]:
    """Cached handles ``record``'s interpreter code reads, in the order the calls read them: names a call
    mentions that are in ``handles`` (the cache now) and were not made by that call, a later call of the run,
    or a later run (``made_later``), nor assigned by an earlier call of the code handed over (run in one cell,
    that call's variable is what the later call reads: a pull would only be undone by it, and refused the
    second time the cell runs)."""
    from harness_magic.core.execution.interpreter import referenced_names

    tools = list(record.tools)
    made_from = [set(made_later) for _ in range(len(tools) + 1)]  # made_from[k]: made by call k or after
    for k in range(len(tools) - 1, -1, -1):
        made_from[k] = made_from[k + 1] | set(tools[k].handles)
    reads: list[str] = []
    assigned: set[str] = set()
    for k, tool in enumerate(tools):
        code = tool.input.get("code")
        if tool_call_language(tool) != "python" or (turn is not None and tool.turn != turn):
            continue
        mentioned = referenced_names(code) & handles - made_from[k] - set(reads) - assigned
        reads += sorted(mentioned, key=lambda n: (code.find(n), n))
        assigned |= assigned_names(code)
    return reads


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def assigned_names(code: str) -> set[str]:
    """Names ``code`` binds at its top level (assignments, loop and ``with`` targets, imports, ``def`` and
    ``class`` names), not those local to a function, class or comprehension inside it; empty when it does not
    parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names: set[str] = set()
    pending: list[ast.AST] = list(ast.iter_child_nodes(tree))
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
        if not isinstance(node, _SCOPES):
            pending.extend(ast.iter_child_nodes(node))
    return names


def tool_call_language(tool: Any) -> str | None:
    """``python``, ``sql`` or ``path``: what a call's code block is (None: no block)."""
    from harness_magic.core.export import tool_call_source

    source = tool_call_source(tool)
    return source[0] if source is not None else None


def code_cell_text(body: str, run_id: str, how: str, reads: list[str], import_save: bool,
                   held: Collection[str] = ()) -> str:
    """The whole cell ``%agent_code`` puts in: a line naming the run (``how`` it was taken), one
    ``%agent_pull`` per handle the code reads, except the handles in ``held`` (the notebook variable of that
    name already holds exactly the value pushed: a comment says so instead), the import of ``save`` where the
    notebook's ``save`` is not the agent's (``import_save``), then ``body`` (:func:`agent_code_text`)."""
    lines = [f"# run {run_id} ({how}): the agent's code, runnable here; save() stores into the agent's cache"]
    lines += [f"# {handle}: this notebook's {handle} is the value pushed (no pull needed)" if handle in held
              else f"%agent_pull {handle}" for handle in reads]
    if import_save:
        lines.append("from harness_magic.notebook.bindings import save  # the agent's save (this notebook has its own)")
    return "\n".join(lines) + "\n\n" + body
