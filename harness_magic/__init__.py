"""harness_magic: a bash-free data agent inside Jupyter.

``%load_ext harness_magic`` registers the ``%%agent`` magics (the notebook
layer). Everything else here is the pure core, importable without IPython:

    from harness_magic import Harness, ProviderAdapter, ToolSpec, SessionCache

Names are resolved lazily so that ``import harness_magic`` (and loading the
extension) stays cheap: pandas and litellm load only when first needed.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # loop
    "Harness": "harness_magic.core.agent.loop",
    "AsyncHarness": "harness_magic.core.agent.loop",
    "RunResult": "harness_magic.core.agent.result",
    "MaxTurnsExceeded": "harness_magic.core.agent.result",
    # transcript
    "Message": "harness_magic.core.transcript.messages",
    "TextBlock": "harness_magic.core.transcript.messages",
    "ToolUseBlock": "harness_magic.core.transcript.messages",
    "ToolResultBlock": "harness_magic.core.transcript.messages",
    "Usage": "harness_magic.core.transcript.messages",
    # tools
    "ToolSpec": "harness_magic.core.execution.tools",
    "ToolOutput": "harness_magic.core.execution.tools",
    "ToolError": "harness_magic.core.execution.tools",
    # provider seam
    "ProviderAdapter": "harness_magic.core.providers.adapter",
    "AsyncProviderAdapter": "harness_magic.core.providers.adapter",
    "ProviderResponse": "harness_magic.core.providers.response",
    "ProviderError": "harness_magic.core.providers.errors",
    "LiteLLMTransport": "harness_magic.core.providers.transport",
    # offline models
    "ScriptedModel": "harness_magic.core.providers.offline",
    "ScriptedTurn": "harness_magic.core.providers.offline",
    "ReplayModel": "harness_magic.core.providers.offline",
    # cache and formatter
    "SessionCache": "harness_magic.core.cache.session",
    "format_tool_output": "harness_magic.core.execution.format",
    # interpreter
    "InProcessInterpreter": "harness_magic.core.execution.interpreter",
    "make_interpreter_tools": "harness_magic.core.execution.interpreter",
    # logs
    "read_log": "harness_magic.core.transcript.log",
    "reconstruct_transcript": "harness_magic.core.transcript.log",
    # events
    "Event": "harness_magic.core.transcript.events",
    # sandbox
    "SandboxedInterpreter": "harness_magic.core.execution.sandbox.backend",
    "probe_confinement": "harness_magic.core.execution.sandbox.backend",
    # connectors and subagents
    "Connector": "harness_magic.core.execution.connectors.registry",
    "ConnectorRegistry": "harness_magic.core.execution.connectors.registry",
    "ApprovalPolicy": "harness_magic.core.execution.connectors.approval",
    "files_connector": "harness_magic.core.execution.connectors.files.connector",
    "duckdb_connector": "harness_magic.core.execution.connectors.duckdb.connector",
    "sql_connector": "harness_magic.core.execution.connectors.sql.connector",
    "docs_connector": "harness_magic.core.execution.connectors.docs.connector",
    "glossary_connector": "harness_magic.core.execution.connectors.docs.connector",
    "SubagentRecursionError": "harness_magic.core.control.subagent",
    "enable_subagents": "harness_magic.core.control.subagent",
    # control plane
    "Budgets": "harness_magic.core.control.budgets",
    "Planner": "harness_magic.core.control.planner",
    "ProgressTracker": "harness_magic.core.control.reminders",
    "Verifier": "harness_magic.core.control.verification",
    "replay_run": "harness_magic.core.control.replay",
    "retry_from": "harness_magic.core.control.replay",
    "diff_runs": "harness_magic.core.control.run_diff",
    # sessions
    "AgentSession": "harness_magic.core.session",
    "AgentConfig": "harness_magic.core.config",
}

__all__ = sorted([*_EXPORTS, "load_ipython_extension", "unload_ipython_extension", "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness_magic' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics (``%load_ext harness_magic``)."""
    from harness_magic.notebook.extension import load_extension

    load_extension(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Undo :func:`load_ipython_extension`."""
    from harness_magic.notebook.extension import unload_extension

    unload_extension(ipython)
