"""Build connectors from plain configuration (a list of dicts, e.g. from a config file).

Each entry names a built-in with ``type`` and passes the rest as options::

    [{"type": "files", "roots": ["data"]},
     {"type": "duckdb", "files": {"sales": "data/sales.parquet"}},
     {"type": "sql", "name": "warehouse", "url": "postgresql+psycopg://...",
      "sensitivity": {"customers.email": "pii", "customers.note": "restricted"}},
     {"type": "spark", "remote": "sc://host:15002"},   # or {"type": "spark", "master": "local[2]"}
     {"type": "docs", "roots": ["docs/", "runbooks/"]},
     {"type": "glossary", "files": ["definitions.yaml"]}]

Every entry may also say ``"environment": "dev" | "staging" | "prod"`` (default
``dev``; see :mod:`.policy`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from harness_magic.core.execution.connectors.approval import ApprovalPolicy
from harness_magic.core.execution.connectors.governed import govern
from harness_magic.core.execution.connectors.registry import Connector, ConnectorRegistry

__all__ = ["connectors_from_config", "BUILTIN_TYPES"]

BUILTIN_TYPES = ("files", "duckdb", "sql", "spark", "docs", "glossary")


def connector_from_config(entry: Mapping[str, Any]) -> Connector:
    options = dict(entry)
    sensitivity = options.pop("sensitivity", None)
    environment = options.pop("environment", "dev")
    connector = _built_in(options)
    govern(connector, environment, True if connector.allow_writes else None)
    from harness_magic.core.text.sensitivity import check_sensitivity_map

    connector.sensitivity = check_sensitivity_map(sensitivity, f"connector {connector.name!r}")
    return connector


def _built_in(options: dict[str, Any]) -> Connector:
    kind = options.pop("type", None)
    if kind == "files":
        from harness_magic.core.execution.connectors.files import files_connector

        return files_connector(options.pop("roots"), **options)
    if kind == "duckdb":
        from harness_magic.core.execution.connectors.duckdb_connector import duckdb_connector

        return duckdb_connector(options.pop("files", None), **options)
    if kind == "sql":
        from harness_magic.core.execution.connectors.sql import sql_connector

        return sql_connector(options.pop("url"), **options)
    if kind == "spark":
        from harness_magic.core.execution.connectors.spark_connector import spark_connector

        return spark_connector(options.pop("remote", None), **options)
    if kind == "docs":
        from harness_magic.core.execution.connectors.docs import docs_connector

        return docs_connector(options.pop("roots"), **options)
    if kind == "glossary":
        from harness_magic.core.execution.connectors.docs import glossary_connector

        return glossary_connector(options.pop("files"), **options)
    raise ValueError(f"connector type {kind!r} is unknown; built-ins: {', '.join(BUILTIN_TYPES)}")


def connectors_from_config(entries: Iterable[Mapping[str, Any]], *, approval: ApprovalPolicy | None = None
                           ) -> ConnectorRegistry:
    """A registry holding one connector per entry."""
    return ConnectorRegistry([connector_from_config(e) for e in entries], approval=approval)
