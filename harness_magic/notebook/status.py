"""The rows of ``%agent_status``: what the session is set to and what it has done, read through public surfaces.

Pure reading: building the rows changes nothing (no connector is loaded, no
worker started); the ``plugins`` row imports every installed plugin once, so a
broken one is named (a ``broken`` row each: entry point, group, one-line error). Each row is ``(label, text)``; the magic shows them as a
two-column table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.session import AgentSession

__all__ = ["status_rows", "LABEL_WIDTH"]

LABEL_WIDTH = 11
"""Plain-text labels are padded to this many characters (the longest label, ``connectors``, plus one)."""
ERROR_PREVIEW_CHARS = 160
"""A failed run's reason is cut here: the status table is a summary, the run's output holds the rest."""


def _connectors(session: AgentSession) -> str:
    """``"shared (files: 3 tools, loaded); warehouse (2 tools)"``, or ``(none)``."""
    installed = session.connectors
    if installed is None or not installed.registry.names:
        return "(none)"
    parts = []
    for name in installed.registry.names:
        tools = installed.registry[name].tool_names
        loaded = ", loaded" if installed.is_loaded(name) else ""
        parts.append(f"{name} ({len(tools)} tool{'s' if len(tools) != 1 else ''}{loaded})")
    return "; ".join(parts)


def _subagents(session: AgentSession) -> str:
    from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME

    on = any(tool.name == SUBAGENT_TOOL_NAME for tool in session.harness.tools)
    return "on (the agent may delegate to a subagent)" if on else "off"


def _last_run(record: Any, configured: str) -> str:
    """``"run ID · completed"``, the reason of a failed run, and its model where it is not ``configured``."""
    result = record.result
    status = getattr(result, "status", None) or "running"
    text = f"run {record.run_id} · {status}"
    error = (getattr(result, "error", None) or "").strip()
    if error and status != "completed":
        first = error.splitlines()[0]
        text += ": " + (first if len(first) <= ERROR_PREVIEW_CHARS else first[: ERROR_PREVIEW_CHARS - 1] + "…")
    model = record.model or getattr(result, "model", None)
    if model and model != configured:
        text += f" · model {model} (not the configured one)"
    return text


def _plugin_rows() -> list[tuple[str, str]]:
    """``("plugins", "6 connector types, 11 grader kinds, ...")`` then a ``broken`` row per plugin that failed."""
    from harness_magic.core.control.skills.loader import SKILL_PLUGINS
    from harness_magic.core.execution.connectors.types import CONNECTOR_TYPES
    from harness_magic.core.execution.tool_plugins import TOOL_PLUGINS
    from harness_magic.evals.graders import GRADERS

    groups = ((CONNECTOR_TYPES, "connector types"), (TOOL_PLUGINS, "tools"), (GRADERS, "grader kinds"),
              (SKILL_PLUGINS, "skill sets"))
    counts = [(len(group.load_all()), what) for group, what in groups]
    outside = sorted({p.distribution for group, _ in groups for p in group.load_all().values() if not p.builtin})
    text = ", ".join(f"{n} {what}" for n, what in counts)
    text += f" · from {', '.join(outside)}" if outside else " · built-in only"
    return [("plugins", text)] + [("broken", f.line) for group, _ in groups for f in group.failures()]


def _handles(cache: SessionCache) -> str:
    names = cache.names()
    text = f"{len(names)}: " + ", ".join(names) if names else "(none)"
    missing = cache.not_restored
    if missing:
        text += " · not restored from the checkpoint: " + "; ".join(f"{n} ({why})" for n, why in missing.items())
    return text


def status_rows(agent: Any) -> list[tuple[str, str]]:
    """The rows for ``agent`` (an :class:`~harness_magic.notebook.agent_magics.AgentMagics`)."""
    session = agent.session
    budgets = session.config.budgets()
    limits = {"turns": agent.max_turns, "tokens": budgets.max_tokens, "cost USD": budgets.max_cost_usd,
              "wall s": budgets.max_wall_s, "tool calls": budgets.max_tool_calls,
              "query rows": budgets.max_query_rows, "query cost": budgets.max_query_cost,
              "writes": budgets.max_write_operations}
    records = agent.records
    cost = sum(r.usage.cost for r in records if r.usage is not None)
    tokens = sum(r.usage.total_tokens for r in records if r.usage is not None)
    return [
        ("model", agent.model),
        *([("last run", _last_run(records[-1], agent.model))] if records else []),
        ("api_base", agent.api_base or "(provider default)"),
        ("sandbox", agent.sandbox),
        ("budgets", ", ".join(f"{k} {'∞' if v is None else v}" for k, v in limits.items())),
        ("connectors", _connectors(session)),
        ("subagents", _subagents(session)),
        ("handles", _handles(session.cache)),
        *_plugin_rows(),
        ("session", f"{len(records)} run{'s' if len(records) != 1 else ''} · {tokens:,} tokens · ${cost:.4f}"),
    ]
