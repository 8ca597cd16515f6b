"""Build connectors from plain configuration (a list of dicts, e.g. from a config file).

Each entry names a connector type with ``type`` and passes the rest as options (the types are
plugins, :mod:`.types`: the built-ins below and any an installed package declares)::

    [{"type": "files", "roots": ["data"]},
     {"type": "duckdb", "files": {"sales": "data/sales.parquet"}},
     {"type": "sql", "name": "warehouse", "url": "postgresql+psycopg://...",
      "sensitivity": {"customers.email": "pii", "customers.note": "restricted"}},
     {"type": "spark", "remote": "sc://host:15002"},   # or {"type": "spark", "master": "local[2]"}
     {"type": "docs", "roots": ["docs/", "runbooks/"]},
     {"type": "glossary", "files": ["definitions.yaml"]}]

Every entry may also say ``"environment": "dev" | "staging" | "prod"`` (default
``dev``; see :mod:`.policy`).

Applying a list again (``%config AgentMagics.connectors`` set twice) is
idempotent: :func:`apply_config` keeps every connector whose entry is
unchanged, with its state (an open DuckDB connection, a built docs index),
rebuilds those whose entry changed, adds the new ones and removes those no
longer listed; connectors added by hand (``add_connector``) are left alone.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from harness_magic.core.execution.connectors.approval import ApprovalPolicy
from harness_magic.core.execution.connectors.governed import govern
from harness_magic.core.execution.connectors.registry import Connector, ConnectorRegistry
from harness_magic.core.execution.connectors.types import build_connector

__all__ = ["connectors_from_config", "connector_from_config", "apply_config", "ConfigChanges"]


def connector_from_config(entry: Mapping[str, Any]) -> Connector:
    """One governed connector from one entry; ValueError naming an unknown ``type`` and the available ones."""
    options = dict(entry)
    sensitivity = options.pop("sensitivity", None)
    environment = options.pop("environment", "dev")
    connector = build_connector(options.pop("type", None), options)
    govern(connector, environment, True if connector.allow_writes else None)
    from harness_magic.core.text.sensitivity import check_sensitivity_map

    connector.sensitivity = check_sensitivity_map(sensitivity, f"connector {connector.name!r}")
    connector.configuration = {**(connector.configuration or {}), ENTRY_KEY: copy.deepcopy(dict(entry))}
    return connector


ENTRY_KEY = "config_entry"
"""Where a connector built from configuration keeps its entry (in ``Connector.configuration``)."""


def connectors_from_config(entries: Iterable[Mapping[str, Any]], *, approval: ApprovalPolicy | None = None
                           ) -> ConnectorRegistry:
    """A registry holding one connector per entry."""
    return ConnectorRegistry([connector_from_config(e) for e in entries], approval=approval)


@dataclass(frozen=True)
class ConfigChanges:
    """What :func:`apply_config` did, connector names in list order."""

    kept: tuple[str, ...] = ()
    """Entries unchanged: the registered connector stays, state and all."""
    rebuilt: tuple[str, ...] = ()
    """Entries changed: a new connector replaced the one of that name."""
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    """Connectors built from an earlier list that the new one no longer has."""

    @property
    def summary(self) -> str:
        """``"connectors: crm kept, docs rebuilt"`` (``""`` when there is nothing to say)."""
        parts = [f"{name} {what}" for names, what in ((self.kept, "kept"), (self.rebuilt, "rebuilt"),
                                                       (self.added, "added"), (self.removed, "removed"))
                 for name in names]
        return "connectors: " + ", ".join(parts) if parts else ""


def _configured_entry(connector: Connector) -> Mapping[str, Any] | None:
    return (connector.configuration or {}).get(ENTRY_KEY)


def apply_config(registry: ConnectorRegistry, entries: Iterable[Mapping[str, Any]], *,
                 approval: ApprovalPolicy | None = None) -> ConfigChanges:
    """Bring ``registry``'s configured connectors to ``entries`` (see the module docstring); ``approval``
    replaces its policy when given. An entry that fails to build raises (ValueError, TypeError, KeyError,
    OSError) before anything of ``registry`` changed."""
    from harness_magic.core.execution.connectors.sameness import same_value

    entries = [dict(e) for e in entries]
    configured: dict[str, Mapping[str, Any]] = {}  # name -> the entry it was built from
    for name in registry.names:
        built_from = _configured_entry(registry[name])
        if built_from is not None:
            configured[name] = built_from
    plan: list[tuple[str, Connector | None]] = []  # (name of a kept connector, None) or ("", new connector)
    for entry in entries:
        same = next((n for n, c in configured.items() if same_value(dict(c), entry)), None)
        plan.append((same, None) if same is not None else ("", connector_from_config(entry)))
    names = [new.name if new is not None else name for name, new in plan]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"connector names must be unique; listed more than once: {', '.join(duplicates)}")
    if approval is not None:
        registry.approval = approval
    kept: list[str] = []
    rebuilt: list[str] = []
    added: list[str] = []
    for name, new in plan:
        if new is None:
            kept.append(name)
            continue
        outcome = registry.put(new).outcome
        {"added": added, "replaced": rebuilt, "kept": kept}[outcome].append(new.name)
    removed = [name for name in configured if name not in names]
    for name in removed:
        registry.remove(name)
    return ConfigChanges(tuple(kept), tuple(rebuilt), tuple(added), tuple(removed))
