"""Connector types: the plugin group ``harness_magic.connectors`` and the built-in types it declares.

A connector type is a callable taking a configuration entry's options as
keywords (the entry less ``type``, ``environment`` and ``sensitivity``, which
:func:`~harness_magic.core.execution.connectors.config.connector_from_config`
applies to every connector alike) and returning a
:class:`~harness_magic.core.execution.connectors.registry.Connector`.

The built-ins below are declared in ``pyproject.toml`` under
``[project.entry-points."harness_magic.connectors"]`` exactly as an outside
package declares its own (``docs/design.md``, "Write a plugin"). Each imports
its engine's module only when called, so listing or loading the types is cheap.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, cast

from harness_magic.core.execution.connectors.registry import Connector
from harness_magic.core.plugins import PluginGroup

__all__ = ["ConnectorType", "CONNECTOR_TYPES", "build_connector", "files_type", "duckdb_type", "sql_type",
           "spark_type", "docs_type", "glossary_type", "dbt_type", "mcp_type"]

ConnectorType = Callable[..., Connector]
"""``type(**options) -> Connector``."""


def _check(obj: object, name: str) -> ConnectorType:
    if not callable(obj):
        raise TypeError(f"a connector type is a callable taking the entry's options as keywords and returning a "
                        f"Connector; {name!r} is a {type(obj).__name__}")
    return cast(ConnectorType, obj)  # callable; build_connector checks that it returns a Connector


CONNECTOR_TYPES: PluginGroup[ConnectorType] = PluginGroup("harness_magic.connectors", _check, "connector type")
"""Every connector type installed (built-in and outside packages), by the name an entry's ``type`` gives."""


def build_connector(kind: object, options: dict[str, Any]) -> Connector:
    """The connector of type ``kind`` built from ``options``.

    ValueError when no type is called ``kind`` (listing the available ones) or its plugin failed to load;
    KeyError naming a required option the entry lacks; TypeError when the type returns something other
    than a Connector; whatever the type raises for bad options (TypeError for an unknown option,
    ValueError, OSError) passes through.
    """
    plugin = CONNECTOR_TYPES.get(kind)  # type: ignore[arg-type]  # a non-str kind is named in the PluginError
    missing = _missing_options(plugin.obj, options)
    if missing:
        raise KeyError(missing[0])
    connector = plugin.obj(**options)
    if not isinstance(connector, Connector):
        raise TypeError(f"connector type {kind!r} (from {plugin.distribution or plugin.value}) returned "
                        f"{type(connector).__name__}, not a Connector")
    return connector


def _missing_options(factory: ConnectorType, options: dict[str, Any]) -> list[str]:
    """The keyword parameters ``factory`` requires that ``options`` lacks (none when it has no signature)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a callable without an introspectable signature: it raises for itself
        return []
    return [p.name for p in parameters if p.default is p.empty and p.name not in options
            and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def files_type(*, roots: Any, **options: Any) -> Connector:
    """``{"type": "files", "roots": [...]}``: :func:`~.files.connector.files_connector`."""
    from harness_magic.core.execution.connectors.files.connector import files_connector

    return files_connector(roots, **options)


def duckdb_type(*, files: Any = None, **options: Any) -> Connector:
    """``{"type": "duckdb", "files": {...}}``: :func:`~.duckdb.connector.duckdb_connector`."""
    from harness_magic.core.execution.connectors.duckdb.connector import duckdb_connector

    return duckdb_connector(files, **options)


def sql_type(*, url: Any, **options: Any) -> Connector:
    """``{"type": "sql", "url": "..."}``: :func:`~.sql.connector.sql_connector`."""
    from harness_magic.core.execution.connectors.sql.connector import sql_connector

    return sql_connector(url, **options)


def spark_type(*, remote: Any = None, **options: Any) -> Connector:
    """``{"type": "spark", "remote": "sc://..."}`` or ``"master"``: :func:`~.spark.connector.spark_connector`."""
    from harness_magic.core.execution.connectors.spark.connector import spark_connector

    return spark_connector(remote, **options)


def docs_type(*, roots: Any, **options: Any) -> Connector:
    """``{"type": "docs", "roots": [...]}``: :func:`~.docs.connector.docs_connector`."""
    from harness_magic.core.execution.connectors.docs.connector import docs_connector

    return docs_connector(roots, **options)


def glossary_type(*, files: Any, **options: Any) -> Connector:
    """``{"type": "glossary", "files": [...]}``: :func:`~.docs.connector.glossary_connector`."""
    from harness_magic.core.execution.connectors.docs.connector import glossary_connector

    return glossary_connector(files, **options)


def dbt_type(*, project: Any = None, **options: Any) -> Connector:
    """``{"type": "dbt", "project": "analytics/"}`` or ``"manifest"``: :func:`~.dbt.connector.dbt_connector`."""
    from harness_magic.core.execution.connectors.dbt.connector import dbt_connector

    return dbt_connector(project, **options)


def mcp_type(**options: Any) -> Connector:
    """``{"type": "mcp", "command": [...]}`` or ``"url"``: :func:`~.mcp.connector.mcp_connector`."""
    from harness_magic.core.execution.connectors.mcp.connector import mcp_connector

    return mcp_connector(**options)
