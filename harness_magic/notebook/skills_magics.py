"""``%agent_skills``: the skills the agent may load, and one skill in full.

``%agent_skills``
    A table of every skill (name, where it comes from, triggers, verification
    rules), then one line per skill file that was skipped and why.
``%agent_skills NAME``
    The skill's description, triggers, rules, escalation and action template.
    The template is the skill author's Markdown: it is rendered through
    :func:`~harness_magic.core.text.safe_markdown.markdown_to_html` (no raw
    HTML, no remote images, safe links only).

Glue over :mod:`harness_magic.core.control.skills` (the session's
``skills`` runtime, built from ``AgentMagics.skill_dirs`` and the built-in set).
"""

from __future__ import annotations

import html
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from harness_magic.notebook.tables import table_html, table_text

__all__ = ["SkillsMagics", "SKILL_COLUMNS"]

SKILL_COLUMNS = ("name", "source", "triggers", "rules")
"""Columns of the ``%agent_skills`` table."""


@magics_class
class SkillsMagics(Magics):
    """``%agent_skills`` over ``agent_magics``' session."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    @no_var_expand
    @magic_arguments()
    @argument("name", nargs="?", default=None, help="Show this skill in full (default: list every skill).")
    @line_magic
    def agent_skills(self, line: str) -> None:
        """List the skills the agent can load (skills__load), or show one."""
        args = parse_argstring(self.agent_skills, line)
        skill_set = self._agent.session.skills.skill_set
        if args.name is not None:
            try:
                skill = skill_set.get(args.name)
            except KeyError as exc:
                raise UsageError(f"%agent_skills: {exc.args[0]}") from None
            self._agent.show(*skill_views(skill))
            return
        rows = [{"name": s.name, "source": skill_source(s),
                 "triggers": "; ".join(s.triggers) or "-", "rules": ", ".join(s.rule_names) or "-"} for s in skill_set]
        if rows:
            head = f"{len(rows)} skills (the model sees each name and trigger line until it loads one):"
            self._agent.show(f"<p>{html.escape(head)}</p>" + table_html(rows, SKILL_COLUMNS),
                             head + "\n" + table_text(rows, SKILL_COLUMNS))
        else:
            print("no skills: add folders with a SKILL.md to AgentMagics.skill_dirs")
        for error in skill_set.errors:
            print(f"skipped: {error}", file=sys.stderr)


def skill_source(skill: Any) -> str:
    """Where a skill comes from: ``built-in``, ``plugin <package>`` or its folder."""
    if skill.builtin:
        return "built-in"
    return f"plugin {skill.plugin}" if skill.plugin else skill.directory


def skill_views(skill: Any) -> tuple[str, str]:
    """(HTML, plain text) of one skill; the Markdown template goes through the safe renderer."""
    from harness_magic.core.text.safe_markdown import markdown_to_html

    fields = [("description", skill.description), ("source", skill_source(skill)),
              ("triggers", "; ".join(skill.triggers) or "-"),
              ("rules", "\n".join(f"{r.name}: {r.explain()}" for r in skill.rules) or "-"),
              ("escalation", skill.escalation or "-"), ("files", ", ".join(skill.files) or "-")]
    rows = "".join(f'<tr><th style="text-align:left;vertical-align:top;padding:1px 8px">{k}</th>'
                   f'<td style="text-align:left;white-space:pre-wrap;padding:1px 8px">{html.escape(v)}</td></tr>'
                   for k, v in fields)
    page = (f"<h4>skill {html.escape(skill.name)}</h4><table class=\"agent-table\">{rows}</table>"
            f"<div class=\"agent-skill-template\">{markdown_to_html(skill.template)}</div>")
    text = "\n".join([f"skill {skill.name}"] + [f"{k}: {v}" for k, v in fields] + ["", skill.template])
    return page, text
