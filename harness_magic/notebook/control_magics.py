"""``%agent_replay``, ``%agent_retry`` and ``%agent_diff``: glue over :mod:`harness_magic.core.control.replay`.

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
    the run's state (plan, assumptions, verification, questions, confidence,
    open questions) and answer. No arguments: the session's last two runs;
    one: that log against the latest run.

``%agent_code [--run ID] [--turn N] [--escaped]``
    Put the code of the agent's interpreter calls (and its SQL, as strings)
    into the next cell (``set_next_input``), runnable there as is: its first
    lines ``%agent_pull`` the handles the code reads, and ``save`` in the
    notebook stores into the agent's cache as the agent's does
    (:func:`harness_magic.notebook.bindings.save`). Default: the latest run
    that has code (the cell's first line says which run was taken), every turn.
    Code holding hidden characters (bidi controls, zero-width and other
    invisible characters, ESC and other control characters) is refused,
    naming each by line and character; ``--escaped`` puts it in with each
    written as a visible escape (:func:`harness_magic.core.text.hidden_chars.hand_over`,
    the policy the "copy code" button follows too).
``%agent_status``
    Model (and the last run: its status, its reason if it failed, its model
    where that is not the configured one), api_base, sandbox, budgets,
    connectors, subagents, the session's handles and its running cost
    (:mod:`.status`).

Registered by the extension (:func:`harness_magic.notebook.extension.magics_classes`);
shares the session and live view of ``AgentMagics`` through its public surface.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from harness_magic.core.text.counts import count
from harness_magic.notebook.arguments import validate_model
from harness_magic.notebook.code_text import agent_code_text, code_cell_text, handles_read
from harness_magic.notebook.live import settle, show_live
from harness_magic.notebook.status import LABEL_WIDTH, status_rows
from harness_magic.notebook.tables import pairs_html

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["ControlMagics"]


def _log_path(path: str) -> str:
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"no run log {path!r} (relative to {Path.cwd()})")
    return str(file)


@magics_class
class ControlMagics(Magics):
    """Replay, retry and diff runs of the agent session owned by ``agent_magics``."""

    if TYPE_CHECKING:
        shell: InteractiveShell  # registered magics always have their shell (Magics declares it Optional)

    def __init__(self, shell: Any, agent_magics: Any) -> None:
        super().__init__(shell=shell)
        self._agent = agent_magics

    def _handler(self) -> tuple[Any, Any]:
        """(event handler or None, live display handle or None): the same one-output live view as ``%%agent``."""
        handler, widget = self._agent.live_renderer()
        return handler, (show_live(widget) if widget is not None else None)

    @staticmethod
    def _settle(handler: Any, live: Any, result: Any) -> None:
        if live is not None:
            settle(live, handler, settled=result is not None)

    @no_var_expand
    @magic_arguments()
    @argument("log", help="Path of the run log (.jsonl) to replay.")
    @argument("--live-tools", action="store_true",
              help="Run the tools again on this session's cache instead of playing back recorded results.")
    @line_magic
    def agent_replay(self, line: str) -> Any:
        """Replay a recorded run with its recording as the model; returns its RunResult."""
        from harness_magic.core.control.replay import live_tools_of, replay_run

        args = parse_argstring(self.agent_replay, line)
        log = _log_path(args.log)
        session = self._agent.session
        handler, live = self._handler()
        recorder = self._agent.recorder
        sinks = [s for s in (recorder, handler) if s is not None]
        options: dict[str, Any] = {}
        if args.live_tools:
            options = live_tools_of(session.harness)
        replay = None

        def on_event(event: Any) -> None:
            for sink in sinks:
                sink(event)

        try:
            replay = replay_run(log, run_dir=session.config.run_dir, on_event=on_event,
                                **options)
        except ValueError as exc:
            raise UsageError(f"cannot replay {args.log!r}: {exc}") from None
        finally:
            self._settle(handler, live, replay)
        if replay.identical:
            print(f"replayed {count(replay.result.turns, 'turn')}: transcript identical to the recording "
                  f"({count(len(replay.replayed), 'message')})")
        else:
            print(f"replayed {count(replay.result.turns, 'turn')}: transcript differs from the recording at message "
                  f"{replay.first_difference}")
        return replay.result

    @no_var_expand
    @magic_arguments()
    @argument("--from-turn", type=int, required=True, help="Turn to call the model again from (1-based).")
    @argument("--log", default=None, help="Run log to retry (default: this session's latest run).")
    @argument("-m", "--model", default=None, help="Model for the retry (default: AgentMagics.model).")
    @line_magic
    def agent_retry(self, line: str) -> Any:
        """Retry a run from turn N: the transcript before it is re-used, the model continues. Run again, the cell
        replaces its previous retry (and retries the same run)."""
        args = parse_argstring(self.agent_retry, line)
        run_key = self._agent.cells.run_key(f"%agent_retry {line}", line)
        session = self._agent.session
        log = _log_path(args.log) if args.log else None
        if log is None and session.harness.run_file is None:
            raise UsageError("%agent_retry: no run yet in this session; pass --log PATH")
        model = args.model if args.model is not None else self._agent.model
        if args.model is not None:
            model = validate_model(args.model)
        handler, live = self._handler()
        unsubscribe = session.subscribe(handler) if handler is not None else None
        result = None
        try:
            result = session.retry(args.from_turn, log, model=model, run_key=run_key)
            return result
        except ValueError as exc:
            raise UsageError(f"%agent_retry: {exc}") from None
        finally:
            if unsubscribe is not None:
                unsubscribe()
            self._settle(handler, live, result)

    @line_magic
    def agent_connectors(self, line: str) -> Any:
        """List connectors, their tools with safety classes, the SQL read role's privileges, and sensitive columns."""
        from harness_magic.core.execution.connectors.report import connectors_report, format_report

        if line.strip():
            raise UsageError(f"%agent_connectors takes no arguments, got {line.strip()!r}")
        installed = self._agent.session.connectors
        report = connectors_report(installed.registry) if installed is not None else []
        print(format_report(report))
        from harness_magic.core.control.masking import sensitivity_report

        print(sensitivity_report(self._agent.session.masking, installed.registry if installed is not None else None))

    @no_var_expand
    @magic_arguments()
    @argument("--run", default=None, metavar="ID", help="Run id (default: the latest run of this session).")
    @argument("--turn", type=int, default=None, metavar="N", help="Only the calls of this turn.")
    @argument("--escaped", action="store_true",
              help="Code holding hidden characters (bidi controls, zero-width or other invisible characters, ESC "
                   "and other control characters) is refused by default, naming each by line and character; with "
                   "this flag it is put in with each written as a visible escape (\\u202e) under a comment "
                   "listing them.")
    @line_magic
    def agent_code(self, line: str) -> None:
        """Put the agent's interpreter code (and SQL) of a run into the next cell.

        Code that would run differently from how it reads (hidden characters) is refused, naming
        each by line and character, unless ``--escaped``.
        """
        args = parse_argstring(self.agent_code, line)
        records = self._agent.records
        if not records:
            raise UsageError("%agent_code: no run yet in this session: run an %%agent cell first")
        if args.run is not None:
            chosen = [r for r in records if r.run_id == args.run]
            if not chosen:
                raise UsageError(f"%agent_code: no run {args.run!r}; runs: {', '.join(str(r.run_id) for r in records)}")
            record, how = chosen[0], "--run"
        else:
            with_code = [r for r in records if agent_code_text(r)]
            if not with_code:
                raise UsageError(f"%agent_code: no run of this session ran interpreter code or SQL "
                                 f"(runs: {', '.join(str(r.run_id) for r in records)})")
            record = with_code[-1]
            how = "the latest run" if record is records[-1] else \
                f"the latest with code; {count(len(records) - records.index(record) - 1, 'later run')} had none"
        turns = sorted({t.turn for t in record.tools})
        if args.turn is not None and args.turn not in turns:
            raise UsageError(f"%agent_code: run {record.run_id} has no tool calls in turn {args.turn}; "
                             f"turns with calls: {', '.join(map(str, turns)) or '(none)'}")
        body = agent_code_text(record, args.turn)
        if not body:
            raise UsageError(f"%agent_code: run {record.run_id} ran no interpreter code or SQL")
        text = self._code_cell(record, body, how, args.turn)
        from harness_magic.core.text.hidden_chars import hand_over

        handed = hand_over(text, escaped=args.escaped)
        if handed.text is None:
            n = len(handed.findings)
            raise UsageError(
                f"%agent_code: nothing put into the next cell: the code of run {record.run_id} holds {n} hidden "
                f"character{'s' if n != 1 else ''} that would make it run differently from how it reads "
                f"(lines of the cell it would fill):\n{handed.report()}\n"
                f"%agent_code {line.strip()} --escaped puts it in with each written as a visible escape.")
        self.shell.set_next_input(handed.text, replace=False)
        calls = body.count("# agent run ")
        escaped = f", {len(handed.findings)} hidden characters written as escapes" if handed.findings else ""
        print(f"put {calls} call{'s' if calls != 1 else ''} of run {record.run_id} ({how}) into the next "
              f"cell{escaped}")

    def _code_cell(self, record: Any, body: str, how: str, turn: int | None) -> str:
        """The cell for ``body``: pulls of the handles it reads first (none for a handle the notebook variable
        of that name holds exactly as pushed; a note for each pull that would refuse to replace a notebook
        variable), and the import of ``save`` where the notebook's is not the agent's."""
        from harness_magic.notebook.bindings import SAVE_NAME, save

        records = self._agent.records
        later = {h for r in records[records.index(record) + 1:] for t in r.tools for h in t.handles}
        cache, bindings = self._agent.session.cache, self._agent.bindings
        reads = handles_read(record, later, set(cache.names()), turn)
        versions = cache.versions()
        held = [h for h in reads if bindings.holds_pushed(h, h, versions)]  # e.g. --in sales: sales is there
        for handle in reads:
            taken = None if handle in held else bindings.conflict(handle)
            if taken is not None:
                print(f"note: the cell's %agent_pull {handle} will refuse to replace notebook variable {taken}: "
                      f"add --force to that line to replace it")
        return code_cell_text(body, record.run_id, how, reads, self.shell.user_ns.get(SAVE_NAME) is not save, held)

    @line_magic
    def agent_status(self, line: str) -> None:
        """Model, api_base, sandbox, budgets, connectors, handles and the session's cost so far."""
        if line.strip():
            raise UsageError(f"%agent_status takes no arguments, got {line.strip()!r}")
        rows = status_rows(self._agent)
        self._agent.show(pairs_html(rows), "\n".join(f"{k:<{LABEL_WIDTH}} {v}" for k, v in rows))

    @no_var_expand
    @magic_arguments()
    @argument("logs", nargs="*", help="Zero, one or two run logs (default: the session's last two runs).")
    @line_magic
    def agent_diff(self, line: str) -> Any:
        """Show what changed between two runs of the same question (calls, plan, assumptions, verification,
        confidence, answer); returns the RunDiff."""
        from harness_magic.core.control.run_diff import diff_runs

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
        try:
            return diff_runs(logs[0], logs[1])
        except ValueError as exc:  # not a run log, or a malformed one (named with its line)
            raise UsageError(f"%agent_diff: {exc}") from None

