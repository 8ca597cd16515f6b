"""``%agent_export`` and ``%agent_sandbox``: the session's runs written out, and its sandbox's layers.

``%agent_export PATH [--run RUN_ID | --all]``
    Write runs as ``.jsonl`` (the log), ``.html`` (self-contained) or ``.md``.
``%agent_sandbox``
    The interpreter's sandbox mode and which confinement layers hold here.

Glue over :mod:`harness_magic.core.export` and the sandbox's probe; registered
by the extension (:func:`harness_magic.notebook.extension.magics_classes`).
"""

from __future__ import annotations

import html
import sys
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from harness_magic.notebook.tables import SANDBOX_COLUMNS, sandbox_rows, table_html, table_text

__all__ = ["SessionMagics"]


@magics_class
class SessionMagics(Magics):
    """``%agent_export`` and ``%agent_sandbox`` over ``agent_magics``' session."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    @no_var_expand
    @magic_arguments()
    @argument("path", help="Target file: .jsonl (log), .html (self-contained transcript) or .md.")
    @argument("--run", default=None, metavar="RUN_ID", help="Export this run (default: the latest).")
    @argument("--all", action="store_true", help="Export every run of this session.")
    @line_magic
    def agent_export(self, line: str) -> None:
        """Write runs of this session to a file."""
        from harness_magic.core import export

        args = parse_argstring(self.agent_export, line)
        if args.run and args.all:
            raise UsageError("use --run RUN_ID or --all, not both")
        suffix = Path(args.path).suffix.lower()
        if suffix not in export.EXPORT_FORMATS:
            raise UsageError(f"cannot export to {args.path!r}: use one of {', '.join(export.EXPORT_FORMATS)}")
        records = [r for r in self._agent.records if r.result is not None]
        if not records:
            raise UsageError("no runs to export yet: run an %%agent cell first")
        if args.run:
            chosen = [r for r in records if r.run_id == args.run]
            if not chosen:
                raise UsageError(f"no run {args.run!r}; runs: {', '.join(str(r.run_id) for r in records)}")
        elif args.all:
            chosen = records
        else:
            chosen = records[-1:]
        try:
            path = export.export_runs(chosen, args.path)
        except (OSError, ValueError) as exc:
            raise UsageError(f"export failed: {exc}") from None
        what = f"{len(chosen)} runs" if len(chosen) > 1 else f"run {chosen[0].run_id}"
        print(f"exported {what} to {path}")
        from harness_magic.core.control.audit import record_transfer
        from harness_magic.core.transcript.audit import AuditError

        try:
            record_transfer(self._agent.session.audit, "export", columns=[], path=str(Path(path).resolve()),
                            format=suffix[1:], runs=[str(r.run_id) for r in chosen])
        except AuditError as exc:
            print(f"the export is not in the audit log: {exc}", file=sys.stderr)

    @no_var_expand
    @magic_arguments()
    @line_magic
    def agent_sandbox(self, line: str) -> None:
        """Show the sandbox mode and each confinement layer the worker gets on this machine."""
        parse_argstring(self.agent_sandbox, line)
        from harness_magic.core.execution.sandbox import probe_confinement

        rows = sandbox_rows(probe_confinement())
        if self._agent.sandbox == "inprocess":
            head = ("sandbox: inprocess — the agent's code runs inside this kernel: this is NOT a security "
                    "boundary. The worker sandbox (AgentMagics.sandbox = 'worker') would have these layers:")
        elif self._agent.sandbox == "unconfined":
            head = ("sandbox: unconfined — the agent's code runs in a subprocess with whichever of these layers "
                    "hold, even where they do not confine it (AgentMagics.sandbox = 'worker' refuses then):")
        else:
            head = "sandbox: worker — the agent's code runs in a confined subprocess with these layers:"
        self._show_layers(head, rows)
        if any(isinstance(c, dict) and c.get("type") == "spark" and c.get("master") for c in self._agent.connectors or ()):
            from harness_magic.core.execution.connectors.spark.server import spark_confinement_report

            state, report = spark_confinement_report()
            head = f"local Spark server (connectors with 'master'): {state}:"
            rows = sandbox_rows(report)
            self._show_layers(head, rows)
        if any(isinstance(c, dict) and c.get("type") == "mcp" and "command" in c for c in self._agent.connectors or ()):
            from harness_magic.core.execution.connectors.mcp.connector import McpConnector

            installed = self._agent.session.connectors
            for connector in [installed.registry[n] for n in installed.registry.names] if installed is not None else ():
                if isinstance(connector, McpConnector) and connector.directory is not None:
                    report = connector.confinement
                    head = (f"local MCP server {connector.name!r}: "
                            f"{'the layers it was started with' if report else 'not started yet'}:")
                    self._show_layers(head, sandbox_rows(report))

    def _show_layers(self, head: str, rows: list[dict[str, Any]]) -> None:
        """A heading line and a table of confinement layers (layer, state, detail)."""
        self._agent.show(f"<p>{html.escape(head)}</p>" + table_html(rows, SANDBOX_COLUMNS),
                         head + "\n" + table_text(rows, SANDBOX_COLUMNS))
