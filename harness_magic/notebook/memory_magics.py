"""``%agent_memory``: what the agent carries across cells, shown and edited by the user.

``%agent_memory``
    The session entries, numbered (goals, assumptions, domains), and the
    definitions approved into the workspace memory file.
``%agent_memory add KIND TEXT``
    Record an entry yourself (KIND: goal, assumption or domain).
``%agent_memory edit N TEXT`` / ``%agent_memory remove N``
    Change or drop entry N (later entries move up).
``%agent_memory clear``
    Forget every session entry (workspace definitions are kept).
``%agent_memory forget NAME``
    Remove an approved definition from the workspace memory file.

Session memory lives as long as the kernel's session: ``%%agent --new`` and
``--reset`` keep it (they forget the conversation, not what was agreed);
``%agent_memory clear`` forgets it. The text after N or KIND is taken verbatim (quotes and apostrophes included),
then cleaned as the agent's own entries are (one line, bounded). A bad N
gives one line naming it and the range.

In a notebook, entry and definition texts render as Markdown through the
project's safe renderer (:func:`~harness_magic.core.text.safe_markdown.markdown_to_html`:
no raw HTML, no remote images, only web links): the agent writes them, and a
prompt-injected one must not become active. The terminal shows the text as written.
"""

from __future__ import annotations

import html
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand

from harness_magic.core.text.counts import count

__all__ = ["MemoryMagics", "ACTIONS"]

ACTIONS = ("add", "edit", "remove", "clear", "forget")
"""What ``%agent_memory`` does besides listing."""
_USAGE = ("%agent_memory [add KIND TEXT | edit N TEXT | remove N | clear | forget NAME]")


@magics_class
class MemoryMagics(Magics):
    """``%agent_memory`` over ``agent_magics``' session memory."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    @no_var_expand
    @line_magic
    def agent_memory(self, line: str) -> None:
        """Show the agent's memory, or: add KIND TEXT | edit N TEXT | remove N | clear | forget NAME."""
        from harness_magic.core.control.memory import MemoryEntryError
        from harness_magic.core.knowledge.workspace_memory import WorkspaceMemoryError

        parts = line.strip().split(None, 2)
        action = parts[0] if parts else ""
        if action and action not in ACTIONS:
            raise UsageError(f"%agent_memory: unknown action {action!r}; usage: {_USAGE}")
        memory = self._agent.session.memory
        try:
            if not action:
                self._show(memory)
            elif action == "clear":
                print(f"cleared {count(memory.clear(), 'entry')} of session memory (workspace definitions kept)")
            elif action == "forget":
                if len(parts) < 2:
                    raise UsageError(f"%agent_memory forget needs a NAME; usage: {_USAGE}")
                found = memory.forget_definition(line.strip().split(None, 1)[1])
                print(f"removed the definition {found.name!r} from {memory.workspace_path}")
            elif action == "remove":
                if len(parts) != 2:
                    raise UsageError(f"%agent_memory remove takes one entry number N; usage: {_USAGE}")
                entry = memory.remove(parts[1])
                print(f"removed {parts[1]}: {entry.kind}: {entry.text}")
            else:
                if len(parts) < 3:
                    what = "KIND TEXT" if action == "add" else "N TEXT"
                    raise UsageError(f"%agent_memory {action} needs {what}; usage: {_USAGE}")
                if action == "add":
                    number, new = memory.add(parts[1], parts[2], "user")
                    print(f"{'added' if new else 'already there as'} {number}: {parts[1]}")
                else:
                    entry = memory.edit(parts[1], parts[2])
                    print(f"edited {parts[1]}: {entry.kind}: {entry.text}")
        except (MemoryEntryError, WorkspaceMemoryError, OSError) as exc:
            raise UsageError(f"%agent_memory {action}: {exc}") from None

    def _show(self, memory: Any) -> None:
        from harness_magic.core.knowledge.workspace_memory import WorkspaceMemoryError

        plain = [f"session memory: {count(len(memory.entries), 'entry')}"]
        rows = []
        for n, entry in enumerate(memory.entries, 1):
            origin = {"model": "agent", "user": "you", "question": "your answer"}[entry.source]
            plain.append(f"  {n}. {entry.kind:<10} {entry.text}  ({origin})")
            rows.append((str(n), entry.kind, entry.text, origin))
        path = memory.workspace_path
        definitions, problem = [], None
        try:
            definitions = memory.definitions()
        except WorkspaceMemoryError as exc:
            problem = str(exc)
        if path is None:
            plain.append("workspace memory: off (AgentMagics.workspace_memory is None)")
        elif problem:
            plain.append(f"workspace memory: not used: {problem}")
        else:
            plain.append(f"workspace memory {path}: {count(len(definitions), 'approved definition')}")
            plain += [f"  {d.name}: {d.text}" for d in definitions]
        e, md = html.escape, _inline_markdown
        cells = "".join(f"<tr><td>{e(n)}</td><td>{e(k)}</td><td style='text-align:left'>{md(t)}</td>"
                        f"<td>{e(o)}</td></tr>" for n, k, t, o in rows)
        table = (f"<table><tr><th>#</th><th>kind</th><th>text</th><th>from</th></tr>{cells}</table>"
                 if rows else "")
        defs = "".join(f"<li><b>{e(d.name)}</b>: {md(d.text)}</li>" for d in definitions)
        html_text = (f"<div class='agent-memory'><b>{e(plain[0])}</b>{table}"
                     f"<div>{e(plain[len(rows) + 1])}</div>{f'<ul>{defs}</ul>' if defs else ''}</div>")
        self._agent.show(html_text, "\n".join(plain))


def _inline_markdown(text: str) -> str:
    """One line of Markdown as safe HTML (:func:`~harness_magic.core.text.safe_markdown.markdown_to_html`),
    without the paragraph around it, so it sits in a table cell or a list item."""
    from harness_magic.core.text.safe_markdown import markdown_to_html

    rendered = markdown_to_html(text).strip()
    inner = rendered[len("<p>"):-len("</p>")]
    return inner if rendered.startswith("<p>") and rendered.endswith("</p>") and "<p>" not in inner else rendered
