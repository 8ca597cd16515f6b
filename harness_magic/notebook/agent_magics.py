"""``%%agent`` and the value line magics (vars, push, pull): IPython glue over :class:`~harness_magic.core.session.AgentSession`.

Magics (``%load_ext harness_magic``):

``%%agent [-m M] [--new] [--reset] [--in NAME[=HANDLE] ...] [--out HANDLE[=NAME] ...] [--force] [--continue] [--max-turns N]
[--max-tokens N] [--max-cost USD] [--max-wall S] [--max-tool-calls N]``
    Ask the agent; the cell body is the prompt, verbatim. The cell's value is
    the :class:`~harness_magic.core.agent.result.RunResult`, shown as the final output
    (a budget stop shows its status, e.g. ``budget_cost``, and the reason). A
    run that ends in error raises :class:`~.errors.AgentRunError` after its
    output is shown (``raise_on_error``), so Run All stops there. A cell naming
    an offline model with ``-m`` plays it from its start each time it runs.
    Running a cell again replaces its previous run (the cell is known by the
    id the front end sends, see :mod:`.cells`; what is taken back:
    :mod:`harness_magic.core.control.reruns`); ``--continue`` appends instead.
``%agent_vars [HANDLE]``
    Every cached handle, or one handle's snapshot.
``%agent_push NAME [HANDLE]`` / ``%agent_pull HANDLE [NAME] [--force]``
    Copy a value into the agent's cache / out of it. Nothing else crosses, and
    nothing is replaced silently: a pull (or ``--out``) onto a notebook
    variable is refused without ``--force`` (see :mod:`.bindings`).
``%agent_export`` and ``%agent_sandbox`` are in :mod:`.session_magics`.

Connector tools that are not read-only ask before they run: the cell shows the
request and an ``Approve ...? [y/N]`` prompt (see :mod:`.approval`).

Settings are traitlets on :class:`AgentMagics` (``%config AgentMagics.model =
"..."`` or ``c.AgentMagics.model`` in a config file), derived from the core's
table of settings (:data:`harness_magic.core.config.SETTINGS`, see
:mod:`.settings`): each is declared once there, with its type, default, help
and its one validator, and mapped onto a plain
:class:`~harness_magic.core.config.AgentConfig`. Bad input raises a one-line
:class:`UsageError` (magic arguments are checked by :mod:`.arguments`). The other magics
classes (:mod:`.control_magics`, :mod:`.session_magics`, :mod:`.docs_magics`, :mod:`.eval_magics`, :mod:`.checkpoint_magics`) drive
this one's session through its public surface: :attr:`~AgentMagics.session`,
:attr:`~AgentMagics.records`, :meth:`~AgentMagics.live_renderer`, :meth:`~AgentMagics.show`.
"""


from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import TraitError, observe, validate

from harness_magic.core.transcript.scrub import escape_control
from harness_magic.core.text.masking import sensitivity_text
from harness_magic.notebook.arguments import (
    BUDGET_FLAGS,
    OFFLINE_PREFIXES,
    cap_arg,
    check_handle,
    flag_value,
    split_pair,
    validate_model,
)
from harness_magic.notebook.bindings import Bindings, pulled_value, push_value
from harness_magic.notebook.cells import CellTracker
from harness_magic.notebook.errors import AgentRunError
from harness_magic.notebook.live import live_renderer, settle, show_live
from harness_magic.notebook.settings import check_trait, config_from, setting_traits, trait_names
from harness_magic.notebook.tables import export_rows_html, handle_rows, pairs_html, rows_text
from harness_magic.notebook.values import describe

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from harness_magic.core.session import AgentSession

__all__ = ["AgentMagics"]

_SESSION_TRAITS = trait_names(applies="session")
"""Settings of the session: a change is applied at the next use, keeping the conversation and the cache."""
_RUN_TRAITS = trait_names(applies="run")
"""Settings every run reads from the session's config (budgets, materialize caps): copied into it at once."""
_RECONNECT_TRAITS = trait_names(reconnects=True)
"""Settings whose change rebuilds the session's connectors."""


@magics_class
class AgentMagics(Magics):
    """The agent magics and their settings."""

    vars().update(setting_traits())  # one trait per setting of harness_magic.core.config.SETTINGS (help included)

    if TYPE_CHECKING:
        shell: InteractiveShell  # registered magics always have their shell (Magics declares it Optional)

        def __getattr__(self, name: str) -> Any:
            """The setting traits above: made from the table at class creation, so mypy cannot list them."""

    # -- validation -------------------------------------------------------------------------

    def update_config(self, config: Any) -> None:
        """``%config`` entry point: a rejected value is kept out and reported as a one-line UsageError.

        The shell keeps a copy of every ``%config`` line; a rejected value is
        dropped from it too, so ``%reload_ext`` does not trip over it. Setting
        the model (even to the same id, as when a notebook's first cell runs
        again) restarts a scripted or replay model.
        """
        section = config.get("AgentMagics", {}) if hasattr(config, "get") else {}
        try:
            super().update_config(config)
        except TraitError as exc:
            import sys

            self._rejected.update(dict(section))
            events = getattr(self.shell, "events", None)
            if events is not None and self._prune_rejected not in events.callbacks["post_run_cell"]:
                events.register("post_run_cell", self._prune_rejected)  # after the shell merged it too
            print(f"UsageError: {exc}", file=sys.stderr)
            return
        if "model" in section and self._session is not None:
            self._session.rewind_offline_models(self.model)

    def _prune_rejected(self, *args: Any) -> None:
        """Drop values ``%config`` rejected from the shell's copy of the configuration."""
        section = getattr(getattr(self.shell, "config", None), "AgentMagics", None)
        for key, value in self._rejected.items():
            if section is not None and key in section and section[key] == value:
                section.pop(key)
        self._rejected.clear()
        self.shell.events.unregister("post_run_cell", self._prune_rejected)

    @validate(*trait_names())
    def _valid_setting(self, proposal: Any) -> Any:
        """Each setting's one validator (:func:`.settings.check_trait`); the model must also be usable in this
        kernel, and a governance table and file are not set together."""
        name, value = proposal["trait"].name, proposal["value"]
        try:
            value = validate_model(value) if name == "model" else check_trait(name, value)
            if name in ("policy", "policy_file") and value and (self.policy_file if name == "policy" else self.policy):
                from harness_magic.core.execution.connectors.policy import governance_from

                governance_from(**{"policy": self.policy, "policy_file": self.policy_file, name: value})
        except (ValueError, UsageError) as exc:
            raise TraitError(str(exc)) from None
        return value

    @observe(*_SESSION_TRAITS)
    def _settings_changed(self, change: Any) -> None:
        self._stale = True
        if change["name"] in _RECONNECT_TRAITS:
            self._connectors_dirty = True

    @observe(*_RUN_TRAITS)
    def _budget_changed(self, change: Any) -> None:
        session = getattr(self, "_session", None)  # None too before __init__ ran (traits set by config)
        if session is not None:
            setattr(session.config, change["name"], change["new"])

    @observe("subagents")
    def _on_subagents(self, change: Any) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            if change["new"]:
                session.enable_subagents()  # already on: keeps its tool and options
            else:
                session.disable_subagents()

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._session: AgentSession | None = None
        self._recorder: Any = None
        self._stale = False
        self._connectors_dirty = False
        self._rejected: dict[str, Any] = {}
        self._code_clipboard: Any = None  # the clipboard widget, made on first use (see .clipboard)
        self._prompt_host: Any = None
        """The live view of the latest run (its questions show in it while it runs), or None."""
        self.cells = CellTracker()
        """Names the cell each ``%%agent`` run comes from (fed by the shell's ``pre_run_cell``; see :mod:`.cells`)."""
        self.bindings = Bindings(lambda: self.shell.user_ns)
        """The notebook variables ``--out``/``%agent_pull`` bound (they may be bound again without --force)."""

    # -- session ----------------------------------------------------------------------------

    def _config(self) -> Any:
        """The core settings these traits ask for."""
        return config_from(self)

    @property
    def session(self) -> AgentSession:
        """The agent session, created on first use; a settings change is applied to it in place
        (conversation, cache and offline models' places are kept)."""
        if self._session is not None and self._stale:
            self._stale = False
            connectors = None
            if self._connectors_dirty:
                installed = self._session.connectors
                connectors = self._configured_connectors(self._session.default_approver,
                                                         installed.registry if installed is not None else None)
                self._connectors_dirty = False
            for note in self._session.reconfigure(self._config(), connectors=connectors):
                print(f"agent settings changed: {note}; conversation and cache kept")
        if self._session is None:
            from harness_magic.core.export import RunRecorder
            from harness_magic.core.session import AgentSession

            from harness_magic.notebook.asking import PersonAsker

            asker = PersonAsker(self.shell, host=lambda: self._prompt_host,
                                approval_timeout_s=lambda: self.question_timeout_s)
            approver = asker.approve  # a widget in the cell, a prompt in a terminal: never a stdin request
            connectors = self._configured_connectors(approver)
            self._session = AgentSession(self._config(), connectors=connectors, subagents=self.subagents)
            self._session.default_approver = approver
            self._session.notify = print  # add_connector run again: "connector 'crm' ... kept" / "replaced"
            self._session.answerer = asker.answer
            self._recorder = RunRecorder()
            self._session.subscribe(self._recorder)
            self._stale = self._connectors_dirty = False
        return self._session

    def _configured_connectors(self, approver: Any, registry: Any = None) -> Any:
        """The registry for :attr:`connectors` (asking through ``approver``), or None when there are none.
        Given the session's ``registry``, the list is applied to it in place instead (unchanged entries keep
        their connectors, state and all; the cell says which were kept and rebuilt) and None is returned."""
        if not self.connectors and registry is None:
            return None
        from harness_magic.core.execution.connectors import ApprovalPolicy, connectors_from_config
        from harness_magic.core.execution.connectors.config import apply_config
        from harness_magic.core.execution.connectors.policy import current_actor, governance_from

        try:
            approval = ApprovalPolicy(approver=approver, governance=governance_from(self.policy, self.policy_file),
                                      actor=current_actor(self.actor_role))
            entries = [dict(c, workspace_memory=c.get("workspace_memory", self.workspace_memory))
                       if c.get("type") == "glossary" else c for c in self.connectors]  # approved definitions
            if registry is None:
                return connectors_from_config(entries, approval=approval)
            summary = apply_config(registry, entries, approval=approval if entries else None).summary
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise UsageError(f"AgentMagics.connectors: {type(exc).__name__}: {exc}") from None
        if summary:
            print(summary)
        return None

    def record_for(self, result: Any) -> Any:
        """The run record a result belongs to (a bare one for foreign results); its usage includes subagents."""
        from harness_magic.core.export import RunRecord

        usage = getattr(result, "total_usage", result.usage)
        if self._recorder is not None and result.run_id:
            found = self._recorder.find(result.run_id)
            if found is not None:
                found.usage = usage
                return found
        return RunRecord(run_id=result.run_id, model=result.model, run_file=result.run_file,
                         turn=result.turns, usage=usage, elapsed_s=result.elapsed_s, result=result)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        if getattr(self, "_code_clipboard", None) is not None:  # see harness_magic.notebook.clipboard
            self._code_clipboard.close()
            self._code_clipboard = None

    def _in_kernel(self) -> bool:
        return getattr(self.shell, "kernel", None) is not None

    def live_renderer(self) -> tuple[Any, Any]:
        """(event handler or None, widget to display or None) for a run now, as :attr:`live` asks; a widget
        view is also where that run's questions and approvals show."""
        handler, widget = live_renderer(self.live, self._in_kernel(), self)
        self._prompt_host = handler if widget is not None else None
        return handler, widget

    @property
    def recorder(self) -> Any:
        """The :class:`~harness_magic.core.export.RunRecorder` folding this session's runs (None before it)."""
        return self._recorder

    @property
    def records(self) -> list[Any]:
        """The run records of this session, oldest first (empty before the session)."""
        return list(self._recorder.records) if self._recorder is not None else []

    # -- %%agent ----------------------------------------------------------------------------

    @no_var_expand
    @magic_arguments()
    @argument("-m", "--model", default=None, help="Model for this cell (default: AgentMagics.model).")
    @argument("--new", action="store_true", help="Start a fresh conversation (the cache is kept).")
    @argument("--reset", action="store_true", help="Clear the conversation and the cache first.")
    @argument("--in", dest="inputs", action="append", default=[], metavar="NAME[=HANDLE]",
              help="Copy notebook variable NAME into the cache as HANDLE (default NAME). Repeatable.")
    @argument("--out", dest="outputs", action="append", default=[], metavar="HANDLE[=NAME]",
              help="After the run, copy handle HANDLE into the notebook as NAME (default HANDLE). Repeatable.")
    @argument("--force", action="store_true", help="With --out: replace notebook variables of those names.")
    @argument("--continue", dest="continue_run", action="store_true",
              help="Add this run after the latest one, keeping this cell's earlier runs in the conversation (handles "
                   "made again get suffixes). Without it, running the cell again replaces its previous run.")
    @argument("--max-turns", type=int, default=None, help="Turn limit for this cell.")
    @argument("--max-tokens", type=int, default=None, metavar="N",
              help="Token budget for this cell (default: AgentMagics.max_tokens).")
    @argument("--max-cost", type=float, default=None, metavar="USD",
              help="Cost budget in USD for this cell (default: AgentMagics.max_cost_usd).")
    @argument("--max-wall", type=float, default=None, metavar="S",
              help="Wall-time budget in seconds for this cell (default: AgentMagics.max_wall_s).")
    @argument("--max-tool-calls", type=int, default=None, metavar="N",
              help="Tool-call budget for this cell (default: AgentMagics.max_tool_calls).")
    @argument("--max-query-rows", type=int, default=None, metavar="N",
              help="Rows one query's plan may be estimated to handle, asked of the engine before it runs "
                   "(default: AgentMagics.max_query_rows).")
    @argument("--max-query-cost", type=float, default=None, metavar="COST",
              help="The engine's own cost estimate one query may have (default: AgentMagics.max_query_cost).")
    @argument("--max-write-operations", type=int, default=None, metavar="N",
              help="Approved writes in this cell's run; 0: none (default: AgentMagics.max_write_operations).")
    @cell_magic
    def agent(self, line: str, cell: str) -> Any:
        """Ask the data agent; the cell body is the prompt.

        Successive cells continue one conversation over one session cache.
        Running a cell again replaces its previous run (and the runs after
        it): the conversation and handles read as before it, so Run All twice
        ends as Run All once; ``--continue`` appends instead. The agent's code
        runs in its own interpreter: it sees only cached handles, never this
        notebook's variables.
        """
        args = parse_argstring(self.agent, line)
        run_key = self.cells.run_key(f"%%agent {line}\n{cell or ''}", cell or "")
        prompt = (cell or "").strip("\n")
        if not prompt.strip():
            raise UsageError("%%agent needs a prompt: write it in the cell body below the %%agent line")
        if args.new and args.reset:
            raise UsageError("use --new or --reset, not both (--reset already starts a new conversation)")
        model = validate_model(args.model) if args.model is not None else self.model
        if args.max_turns is not None:
            flag_value("max_turns", args.max_turns, "--max-turns")
        limits = {"max_tokens": args.max_tokens, "max_cost_usd": args.max_cost, "max_wall_s": args.max_wall,
                  "max_tool_calls": args.max_tool_calls, "max_query_rows": args.max_query_rows,
                  "max_query_cost": args.max_query_cost, "max_write_operations": args.max_write_operations}
        for field_name, flag in BUDGET_FLAGS.items():
            flag_value(field_name, limits[field_name], flag)
        inputs = [self._input_pair(spec) for spec in args.inputs]
        outputs = []
        for spec in args.outputs:
            handle, name = split_pair(spec, "--out")
            outputs.append((check_handle(handle, "handle"), check_handle(name, "variable name")))

        if not model.startswith(OFFLINE_PREFIXES):  # a model litellm cannot route fails here, before any request
            from harness_magic.core.providers.adapter import route_model, warm_up_provider
            from harness_magic.core.providers.errors import ModelRouteError, ProviderError

            warm_up_provider(model, provider_host=self.provider_host, provider_idle_s=self.provider_idle_s,
                             api_base=self.api_base)  # nothing started for a model the missing-key record refuses
            session = self.session  # built (a session's first cell) while the provider host imports litellm
            try:
                route_model(model, provider_host=self.provider_host, api_base=session.config.api_base,
                            extra=session.config.extra)  # asked of the provider host: litellm stays out
            except ModelRouteError as exc:
                raise UsageError(str(exc)) from None
            except ProviderError:
                pass  # the provider host could not answer: the run's first call reports it as provider trouble
        session = self.session
        if args.reset:
            session.reset()
        elif args.new:
            session.new_conversation()
        if args.model is not None and model.startswith(OFFLINE_PREFIXES):
            session.rewind_offline_models(model)  # this cell plays its script from the start (Run All twice)
        notes = [self._push(value, handle) for value, handle in inputs]
        pushed = [handle for _value, handle in inputs]
        if notes:
            prompt += "\n\n(Inputs copied from the notebook into the cache: " + "; ".join(notes) + ".)"

        handler, widget = self.live_renderer()
        unsubscribe = session.subscribe(handler) if handler is not None else None
        live = show_live(widget) if widget is not None else None
        result = None
        from harness_magic.core.agent.result import PromptTooLarge

        try:
            result = session.ask(prompt, model=model, max_turns=args.max_turns,
                                 budgets=session.config.budgets().merged(**limits), run_key=run_key,
                                 replace=not args.continue_run)
        except PromptTooLarge as exc:
            raise UsageError(str(exc)) from None
        finally:
            if unsubscribe is not None:
                unsubscribe()
            if live is not None:
                settle(live, handler, settled=result is not None)

        if result.status == "error" and self.raise_on_error:
            self._show_result(result)
            raise AgentRunError(result)
        found = {h: self._out_handle(h, result.handles, pushed) for h, _ in outputs}
        bound = [(got, n) for h, n in outputs if (got := found[h]) is not None]
        missing = [h for h, _ in outputs if found[h] is None]
        if not args.force:
            try:
                self.bindings.refuse(bound, "--out", "add --force to the %%agent line to replace (nothing was bound)")
            except UsageError:
                self._show_result(result)
                raise
        for handle, name in bound:
            print(f"--out: {self._bind(handle, name)}")
        if missing:
            self._show_result(result)
            older = [h for h in missing if h in session.cache]
            raise UsageError(f"--out: no handle {', '.join(map(repr, missing))} after the run"
                             + (f" (this run saved none under that name: the cache's {', '.join(map(repr, older))} "
                                f"is from an earlier run; %agent_pull copies it)" if older else "")
                             + f"; this run's handles: {', '.join(result.handles) or '(none)'}")
        return result

    def _out_handle(self, handle: str, made: Any, pushed: list[str]) -> str | None:
        """The handle ``--out HANDLE`` binds: the last one this run saved under that name (``HANDLE`` or a
        suffixed ``HANDLE_2``...), else the one this cell pushed as ``HANDLE``; None: never an older run's."""
        from harness_magic.core.cache.names import saved_as

        own = saved_as(handle, tuple(made))
        if own is not None and own in self.session.cache:
            return own
        return handle if handle in pushed and handle in self.session.cache else None

    def _show_result(self, result: Any) -> None:
        """Display the final form now (before an error ends the cell and the value is not shown)."""
        from IPython.display import display

        display(result)

    def _input_pair(self, spec: str) -> tuple[Any, str]:
        name, handle = split_pair(spec, "--in")
        check_handle(name, "variable name")
        check_handle(handle, "handle")
        if name not in self.shell.user_ns:
            raise UsageError(f"--in: no variable {name!r} in the notebook")
        return self.shell.user_ns[name], handle

    def _push(self, value: Any, handle: str) -> str:
        """Copy ``value`` into the cache as ``handle`` (replacing an older value of that handle); the push is
        remembered so ``%agent_code`` needs no pull where the variable still holds exactly this value."""
        cache = self.session.cache
        note = push_value(cache, value, handle)
        self.bindings.record_push(handle, value, cache.versions().get(handle))
        return note

    # -- line magics ------------------------------------------------------------------------

    @no_var_expand
    @magic_arguments()
    @argument("handle", nargs="?", default=None, help="Show this handle's snapshot instead of the list.")
    @line_magic
    def agent_vars(self, line: str) -> None:
        """List the agent's cached handles (name, type, shape, size, where, run, turn, tool), or one handle as a table."""
        args = parse_argstring(self.agent_vars, line)
        cache = self.session.cache
        from harness_magic.core import export

        if args.handle is not None:
            check_handle(args.handle, "handle")
            if args.handle not in cache:
                raise UsageError(f"no handle {args.handle!r}; handles: {', '.join(cache.names()) or '(none)'}")
            snap, sens = cache.snapshot(args.handle), self.session.masking.column_rows(cache, args.handle)
            from harness_magic.core.text.snapshot_view import snapshot_rich, snapshot_text
            if self._in_kernel():
                self.show(export.render_snapshot_html(args.handle, snap) + pairs_html(sens),
                          snapshot_text(args.handle, snap) + sensitivity_text(sens))
            else:
                from rich.console import Console

                from harness_magic.notebook.render import strip_tree

                Console(highlight=False).print(snapshot_rich(args.handle, strip_tree(snap)), sensitivity_text(sens),
                                               markup=False)
            return
        rows = handle_rows(cache, self._handle_runs())
        if not rows:
            self.show("<i>The agent's cache is empty.</i>", "The agent's cache is empty.")
            return
        self.show(export_rows_html(rows), rows_text(rows))

    @no_var_expand
    @magic_arguments()
    @argument("name", help="Notebook variable to copy into the agent's cache.")
    @argument("handle", nargs="?", default=None, help="Handle to store it under (default: NAME).")
    @line_magic
    def agent_push(self, line: str) -> None:
        """Copy a notebook variable into the agent's cache."""
        args = parse_argstring(self.agent_push, line)
        value, handle = self._input_pair(f"{args.name}={args.handle or args.name}")
        note = self._push(value, handle)
        print(f"pushed {args.name} → {note}")

    @no_var_expand
    @magic_arguments()
    @argument("handle", help="Cached handle to copy out.")
    @argument("name", nargs="?", default=None, help="Notebook variable to bind (default: HANDLE).")
    @argument("--force", action="store_true", help="Replace a notebook variable of that name.")
    @argument("--max-bytes", default=None, metavar="BYTES",
              help="For a lazy engine handle: bring in at most this many bytes (default: materialize_max_bytes).")
    @argument("--max-rows", default=None, metavar="ROWS",
              help="For a lazy engine handle: bring in at most this many rows (default: materialize_max_rows).")
    @line_magic
    def agent_pull(self, line: str) -> None:
        """Copy a cached handle into a notebook variable (a lazy engine handle is brought in within a row and
        byte cap)."""
        args = parse_argstring(self.agent_pull, line)
        handle = check_handle(args.handle, "handle")
        name = check_handle(args.name or handle, "variable name")
        max_bytes = None if args.max_bytes is None else cap_arg(args.max_bytes, "--max-bytes", "bytes")
        max_rows = None if args.max_rows is None else cap_arg(args.max_rows, "--max-rows", "rows")
        cache = self.session.cache
        if handle not in cache:
            raise UsageError(f"no handle {handle!r}; handles: {', '.join(cache.names()) or '(none)'}")
        if not args.force:
            self.bindings.refuse([(handle, name)], "%agent_pull",
                                 f"%agent_pull {handle} {name} --force replaces it; %agent_pull {handle} NAME binds another name")
        print(f"pulled {self._bind(handle, name, max_bytes=max_bytes, max_rows=max_rows)}")

    def _bind(self, handle: str, name: str, *, max_bytes: int | None = None, max_rows: int | None = None) -> str:
        """Copy ``handle`` into the notebook as ``name`` (the caller refused a replacement already); returns
        ``"HANDLE → NAME (type shape)"``. Caps default to :attr:`materialize_max_bytes`/``_rows``."""
        value = pulled_value(self.session.cache, handle, name, max_bytes or self.materialize_max_bytes,
                             max_rows or self.materialize_max_rows)
        from harness_magic.core.control.audit import record_pull
        from harness_magic.core.transcript.audit import AuditError

        try:  # the real values reach the notebook only once the pull is on record
            record_pull(self.session.audit, value, handle=handle, name=name,
                        known=self.session.masking.column_classes(handle))
        except AuditError as exc:
            raise UsageError(f"{handle} not pulled: {exc}") from None
        self.bindings.bind(name, value)
        return f"{handle} → {name} ({describe(value)})"

    # -- display ----------------------------------------------------------------------------

    def _handle_runs(self) -> dict[str, str]:
        """handle -> id of the run whose tool call made it (from this session's run records)."""
        runs: dict[str, str] = {}
        for record in self.records:
            for tool in record.tools:
                for handle in tool.handles:
                    runs[handle] = record.run_id or ""
        return runs

    def show(self, html_text: str, plain: str) -> None:
        """Display a table or note: HTML (with its plain text) in a kernel, control-safe text in a terminal."""
        if self._in_kernel():
            from IPython.display import display

            display({"text/html": html_text, "text/plain": plain}, raw=True)
        else:
            print(escape_control(plain))  # handle names are safe; data values and model text may not be

