"""``%agent_replay``, ``%agent_retry`` and ``%agent_diff``: glue over :mod:`harness_magic.core.replay`.

``%agent_replay LOG [--live-tools]``
    Replay a run log with the recording as the model (no key needed). Tool
    results are played back from the log unless ``--live-tools`` re-runs them
    on this session's cache, through this session's approval policy and
    budgets (a write is asked again, whatever the log says). Says whether the
    transcript is identical.
``%agent_retry --from-turn N [--log LOG] [-m MODEL]``
    Re-use the transcript of a run (default: the latest) up to turn N and let
    the model continue from there, in this session (its cache holds the
    handles made before turn N).
``%agent_connectors``
    Each connector of this session, its tools with their safety classes, and
    for SQL connectors the read role's privileges with warnings (superuser,
    signalling backends, server files, dblink, foreign servers).
``%agent_diff [A] [B]``
    What changed between two runs of the same question: tool calls, results,
    answer. No arguments: the session's last two runs; one: that log against
    the latest run.

Registered by :func:`register_control_magics` from the extension's
``load_extension``; shares the session and live view of ``AgentMagics``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

__all__ = ["ControlMagics", "register_control_magics"]


def _log_path(path: str) -> str:
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"no run log {path!r} (relative to {Path.cwd()})")
    return str(file)


@magics_class
class ControlMagics(Magics):
    """Replay, retry and diff runs of the agent session owned by ``agent_magics``."""

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    def _handler(self) -> Any:
        handler, widget = self._agent._live_renderer()
        if widget is not None:
            from IPython.display import display

            display(widget)
        return handler

    @no_var_expand
    @magic_arguments()
    @argument("log", help="Path of the run log (.jsonl) to replay.")
    @argument("--live-tools", action="store_true",
              help="Run the tools again on this session's cache instead of playing back recorded results.")
    @line_magic
    def agent_replay(self, line: str) -> Any:
        """Replay a recorded run with its recording as the model; returns its RunResult."""
        from harness_magic.core.replay import live_tools_of, replay_run

        args = parse_argstring(self.agent_replay, line)
        log = _log_path(args.log)
        session = self._agent.session
        handler = self._handler()
        recorder = getattr(self._agent, "_recorder", None)
        sinks = [s for s in (recorder, handler) if s is not None]
        options: dict[str, Any] = {}
        if args.live_tools:
            options = live_tools_of(session.harness)
        try:
            replay = replay_run(log, run_dir=session.config.run_dir, on_event=lambda e: [s(e) for s in sinks],
                                **options)
        except ValueError as exc:
            raise UsageError(f"cannot replay {args.log!r}: {exc}") from None
        if replay.identical:
            print(f"replayed {replay.result.turns} turns: transcript identical to the recording "
                  f"({len(replay.replayed)} messages)")
        else:
            print(f"replayed {replay.result.turns} turns: transcript differs from the recording at message "
                  f"{replay.first_difference}")
        return replay.result

    @no_var_expand
    @magic_arguments()
    @argument("--from-turn", type=int, required=True, help="Turn to call the model again from (1-based).")
    @argument("--log", default=None, help="Run log to retry (default: this session's latest run).")
    @argument("-m", "--model", default=None, help="Model for the retry (default: AgentMagics.model).")
    @line_magic
    def agent_retry(self, line: str) -> Any:
        """Retry a run from turn N: the transcript before it is re-used, the model continues."""
        args = parse_argstring(self.agent_retry, line)
        session = self._agent.session
        log = _log_path(args.log) if args.log else session.harness.run_file
        if log is None:
            raise UsageError("%agent_retry: no run yet in this session; pass --log PATH")
        model = args.model if args.model is not None else self._agent.model
        if args.model is not None:
            from harness_magic.notebook.magics import _validate_model

            model = _validate_model(args.model)
        handler = self._handler()
        unsubscribe = session.subscribe(handler) if handler is not None else None
        try:
            return session.retry(args.from_turn, log, model=model)
        except ValueError as exc:
            raise UsageError(f"%agent_retry: {exc}") from None
        finally:
            if unsubscribe is not None:
                unsubscribe()

    @line_magic
    def agent_connectors(self, line: str) -> Any:
        """List connectors, their tools with safety classes, and the SQL read role's privileges."""
        from harness_magic.core.connectors.report import connectors_report, format_report

        if line.strip():
            raise UsageError(f"%agent_connectors takes no arguments, got {line.strip()!r}")
        installed = self._agent.session.connectors
        report = connectors_report(installed.registry) if installed is not None else []
        print(format_report(report))

    @no_var_expand
    @magic_arguments()
    @argument("logs", nargs="*", help="Zero, one or two run logs (default: the session's last two runs).")
    @line_magic
    def agent_diff(self, line: str) -> Any:
        """Show what changed between two runs of the same question; returns the RunDiff."""
        from harness_magic.core.replay import diff_runs

        args = parse_argstring(self.agent_diff, line)
        if len(args.logs) > 2:
            raise UsageError("%agent_diff takes at most two run logs")
        known = [r.run_file for r in self._agent.session.runs if r.run_file]
        logs = [_log_path(p) for p in args.logs]
        if len(logs) < 2:
            needed = 2 - len(logs)
            if len(known) < needed:
                raise UsageError("%agent_diff needs two runs: pass their logs, or run the agent twice first")
            logs = logs + known[-needed:] if logs else known[-2:]
        return diff_runs(logs[0], logs[1])


def register_control_magics(shell: Any, agent_magics: Any) -> ControlMagics:
    """Register the replay/retry/diff magics next to ``agent_magics``."""
    magics = ControlMagics(shell, agent_magics)
    shell.register_magics(magics)
    return magics
