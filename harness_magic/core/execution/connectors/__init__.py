"""Connectors: tools disclosed progressively, with safety classes and approvals.

See :mod:`.registry` for the model-facing protocol (catalogue,
``load_connectors``, ``<connector>__<tool>`` names) and :mod:`.approval` for
the approver callback the notebook implements; :mod:`.policy` (environments,
roles, the governance table) and :mod:`.preview` (writes previewed in a
transaction, then committed or rolled back) govern writes. Built-ins: :func:`files_connector`,
:func:`duckdb_connector`, :func:`sql_connector`, :func:`spark_connector` (their engines are imported on first use).

Layout: one package per engine (:mod:`.duckdb`, :mod:`.spark`, :mod:`.sql`, :mod:`.files`, :mod:`.docs`),
each importing only the shared modules here and never another engine's package (an import-linter
``independence`` contract); what they share (registry, types, config, classify, policy, approval,
guard, governed, preview, touched, lineage, lazy, sameness, progress, report, checkpoint, _results)
sits at this level.
"""

from harness_magic.core.execution.connectors.approval import (
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRequest,
    Approver,
)
from harness_magic.core.execution.connectors.classify import Classification, classify_sql
from harness_magic.core.execution.connectors.config import connectors_from_config
from harness_magic.core.execution.connectors.duckdb.connector import duckdb_connector
from harness_magic.core.execution.connectors.files.connector import files_connector
from harness_magic.core.execution.connectors.policy import Actor, GovernancePolicy, PolicyError
from harness_magic.core.execution.connectors.preview import Preflight
from harness_magic.core.execution.connectors.registry import (
    LOAD_TOOL_NAME,
    Connector,
    ConnectorRegistry,
    ConnectorResult,
    InstalledConnectors,
    ToolContext,
    tool_from_function,
)
from harness_magic.core.execution.connectors.report import connectors_report, format_report
from harness_magic.core.execution.connectors.spark.connector import spark_connector
from harness_magic.core.execution.connectors.sql.connector import sql_connector

__all__ = [
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRequest",
    "Approver",
    "Actor",
    "GovernancePolicy",
    "PolicyError",
    "Preflight",
    "Classification",
    "classify_sql",
    "Connector",
    "ConnectorRegistry",
    "ConnectorResult",
    "InstalledConnectors",
    "ToolContext",
    "tool_from_function",
    "LOAD_TOOL_NAME",
    "files_connector",
    "duckdb_connector",
    "sql_connector",
    "spark_connector",
    "connectors_from_config",
    "connectors_report",
    "format_report",
]

