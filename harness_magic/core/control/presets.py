"""Domain subagent presets: a role prompt, a tool subset and optional skills, chosen by name.

``subagent(task, preset="data_quality")`` runs the delegated task as that
preset's domain subagent. A preset is data (:class:`SubagentPreset`); the
built-in ones are :data:`PRESETS`. What a preset changes, and nothing else:

* the subagent's system prompt gets the preset's role text (and the action
  templates of its skills) after the usual subagent suffix;
* the subagent is GIVEN only the tools whose names match the preset's
  patterns (:func:`fnmatch.fnmatchcase` over full tool names, e.g.
  ``python_interpreter`` or ``*__query`` for every connector's query tool);
  with ``read_only`` also only tools of safety class ``read``. A tool outside
  the subset is not in the subagent's harness at all, so calling it is the
  loop's own "does not exist" error, whatever the model was told;
* the session's connectors reach the subagent (filtered to the subset), so a
  domain subagent can read the glossary or the warehouse. Connectors with no
  tool in the subset are left out, so ``load_connectors`` does not offer them.

Budgets, the fresh cache, the copied inputs and the run log stay exactly as
for a plain subagent (:mod:`harness_magic.core.control.subagent`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Iterable, Mapping

__all__ = ["SubagentPreset", "PRESETS", "PresetError", "get_preset", "preset_catalogue", "select_tools",
           "subset_registry", "LOAD_CONNECTORS"]

LOAD_CONNECTORS = "load_connectors"
"""The registry's discovery tool; a preset keeps it when it keeps any connector tool."""
_PRESET_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
READ_METADATA = ("*__list_databases", "*__list_tables", "*__describe_table", "*__describe")
"""Schema browsing tools of the SQL, DuckDB and Spark connectors."""


class PresetError(ValueError):
    """An unknown preset name or an invalid preset definition (the message names it)."""


@dataclass(frozen=True)
class SubagentPreset:
    """One domain subagent: ``prompt`` (its role), ``tools`` (name patterns it is given), ``skills`` (names)."""

    name: str
    description: str
    """One line: shown in the ``subagent`` tool's description and in errors."""
    prompt: str
    """Role text appended to the subagent's system prompt."""
    tools: tuple[str, ...]
    """fnmatch patterns over full tool names; a tool matching none is not given."""
    read_only: bool = True
    """Also drop every tool whose safety class is not ``read`` (writes, external calls)."""
    skills: tuple[str, ...] = ()
    """Skill names whose action templates (and verification rules) the subagent starts with."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _PRESET_NAME.fullmatch(self.name):
            raise PresetError(f"preset name {self.name!r} is invalid: lower-case letters, digits and '_', "
                              "starting with a letter, at most 40 characters")
        if not isinstance(self.description, str) or not self.description.strip() or "\n" in self.description:
            raise PresetError(f"preset {self.name!r} needs a one-line description")
        if not self.tools or not all(isinstance(p, str) and p for p in self.tools):
            raise PresetError(f"preset {self.name!r} needs a non-empty tuple of tool name patterns")
        if not all(isinstance(s, str) and s for s in self.skills):
            raise PresetError(f"preset {self.name!r}: skills must be skill names, got {self.skills!r}")

    def allows(self, spec: Any) -> bool:
        """Whether the tool ``spec`` (a ToolSpec) is in this preset's subset."""
        return self.allows_name(spec.name, getattr(spec, "safety", "read"))

    def allows_name(self, name: str, safety: str = "read") -> bool:
        """Whether a tool called ``name`` of safety class ``safety`` is in this preset's subset."""
        if self.read_only and safety != "read":
            return False
        return any(fnmatchcase(name, pattern) for pattern in self.tools)


PRESETS: dict[str, SubagentPreset] = {p.name: p for p in (
    SubagentPreset(
        name="query_investigation",
        description="Find out why a query or KPI returns what it does: reruns it, slices it, compares sources.",
        prompt=("You are a query investigation subagent. Reproduce the number first, then narrow down: "
                "slice by time and dimension, compare with the other sources you can read, and name the "
                "smallest change (filter, join, definition, late data) that explains the difference. "
                "Show the query or code behind every number you report."),
        tools=("python_interpreter", "list_variables", LOAD_CONNECTORS, *READ_METADATA, "*__query",
               "*__search", "*__read", "*__lookup", "*__list"),
        skills=("kpi-discrepancy",),
    ),
    SubagentPreset(
        name="metric_definition",
        description="Pin down how a metric is defined: glossary and docs against the SQL that computes it.",
        prompt=("You are a metric definition subagent. Find the metric's definition in the glossary and the "
                "documents, then the SQL or table that computes it, and say where they agree and where they "
                "differ (grain, filters, time window, units). Quote each definition and cite where it came "
                "from; do not compute the metric in Python."),
        tools=(LOAD_CONNECTORS, "list_variables", "*__lookup", "*__search", "*__read", *READ_METADATA,
               "*__query"),
        skills=("metric-definition",),
    ),
    SubagentPreset(
        name="data_quality",
        description="Profile data for quality problems: nulls, duplicates, ranges, freshness, broken keys.",
        prompt=("You are a data quality subagent. Profile the data you are given or can query: row counts, "
                "nulls per column, duplicate keys, out-of-range values, the latest timestamp, and keys "
                "without a match. Report each finding with its count and an example; change nothing."),
        tools=("python_interpreter", "list_variables", LOAD_CONNECTORS, *READ_METADATA, "*__query"),
        skills=("data-quality-profile",),
    ),
    SubagentPreset(
        name="lineage_impact",
        description="Trace what depends on a table or column (views, metrics, documents) before it changes.",
        prompt=("You are a lineage impact subagent. From a dbt project's lineage (its lineage tool, with a "
                "column for column-level lineage), schemas, view definitions, the glossary and the documents, "
                "list what reads the given table or column: models, views, metrics, dashboards and reports. For "
                "each, say how it would be affected by the change and cite where you found the dependency. "
                "Read metadata and definitions; do not compute on the data."),
        tools=(LOAD_CONNECTORS, "list_variables", *READ_METADATA, "*__query", "*__search", "*__read",
               "*__lookup", "*__list", "*__lineage"),
    ),
)}
"""The built-in presets, by name."""


def get_preset(name: Any, presets: Mapping[str, SubagentPreset] | None = None) -> SubagentPreset:
    """The preset called ``name``; :class:`PresetError` listing the presets when there is none."""
    table = PRESETS if presets is None else presets
    if isinstance(name, str) and name in table:
        return table[name]
    raise PresetError(f"Unknown preset {name!r}; presets: {', '.join(table) or '(none)'}")


def preset_catalogue(presets: Mapping[str, SubagentPreset] | None = None) -> str:
    """One line per preset (``- name: description``), for the tool description."""
    table = PRESETS if presets is None else presets
    return "\n".join(f"- {p.name}: {p.description}" for p in table.values())


def select_tools(preset: SubagentPreset, tools: Iterable[Any]) -> list[Any]:
    """The tools of ``tools`` in the preset's subset, in their order."""
    return [t for t in tools if preset.allows(t)]


def subset_registry(preset: SubagentPreset, registry: Any) -> Any:
    """A new ConnectorRegistry holding, of ``registry``'s connectors, copies with only the preset's tools.

    Connectors with none of them are left out; the approval policy is the same object. Copies are
    built through the public :meth:`Connector.add_function` from each tool's own function, so the
    catalogue and ``load_connectors`` name only tools the subagent has. None when nothing is left.
    """
    if registry is None:
        return None
    from harness_magic.core.execution.connectors import Connector, ConnectorRegistry
    from harness_magic.core.execution.connectors.registry import TOOL_SEPARATOR

    kept = []
    for name in registry.names:
        source = registry[name]
        tools = [t for t in source.tools if preset.allows(t)]
        if not tools:
            continue
        copy = Connector(source.name, source.description)
        for key, value in vars(source).items():  # its options (e.g. sensitivity) ride along; tools are re-added
            if not key.startswith("_"):
                setattr(copy, key, value)
        for spec in tools:
            copy.add_function(spec.handler, name=spec.name.split(TOOL_SEPARATOR, 1)[1], description=spec.description,
                              safety=spec.safety, result_name=spec.result_name, classify=source.classifier(spec.name),
                              previewed=source.previews(spec.name))
        kept.append(copy)
    return ConnectorRegistry(kept, approval=registry.approval) if kept else None
