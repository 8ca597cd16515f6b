"""The extension: ``%load_ext harness_magic`` and ``%unload_ext harness_magic``.

One list drives both directions (:func:`magics_classes`): :func:`load_extension`
registers an instance of each class and the final-output formatter for
``RunResult``; :func:`unload_extension` removes exactly what it registered
(magics still owned by these instances, registry entries, configurables,
formatters) and closes the session.

``%load_ext harness_magic`` where it is already loaded (the harness kernel
loads it at start, and the example notebooks' first cell loads it too, so they
also run in a plain kernel) is quiet: the extension wraps IPython's
``%load_ext`` for its own name only, and unloading puts IPython's back.
"""

from __future__ import annotations

from typing import Any, Callable, cast

from IPython.core.magic import Magics
from traitlets import TraitError

from harness_magic.notebook.agent_magics import AgentMagics

__all__ = ["load_extension", "unload_extension", "magics_classes", "agent_session"]

_RESULT_TYPE = ("harness_magic.core.agent.result", "RunResult")
"""Module and class name of ``RunResult``, the cell value the final form is registered for (by name: loading
stays cheap)."""
_LOADED: dict[int, list[Magics]] = {}
"""Shell id -> the Magics instances the extension registered there, in :func:`magics_classes` order."""
_EXTENSION_NAME = "harness_magic"
_IPYTHON_LOAD_EXT: dict[int, Any] = {}
"""Shell id -> IPython's ``%load_ext`` function that :func:`_quiet_load_ext` wrapped there."""


def magics_classes() -> tuple[type[Magics], ...]:
    """Every Magics class the extension registers, :class:`AgentMagics` first (the others drive it).

    One list drives both directions: :func:`load_extension` registers an
    instance of each, :func:`unload_extension` removes exactly what each
    instance registered.
    """
    from harness_magic.notebook.checkpoint_magics import CheckpointMagics  # %agent_checkpoint
    from harness_magic.notebook.control_magics import ControlMagics  # %agent_replay/_retry/_diff/_status/...
    from harness_magic.notebook.docs_magics import DocsMagics  # %agent_docs
    from harness_magic.notebook.session_magics import SessionMagics  # %agent_export, %agent_sandbox
    from harness_magic.notebook.eval_magics import EvalMagics  # %agent_eval
    from harness_magic.notebook.memory_magics import MemoryMagics  # %agent_memory
    from harness_magic.notebook.audit_magics import AuditMagics  # %agent_audit
    from harness_magic.notebook.skills_magics import SkillsMagics  # %agent_skills

    return (AgentMagics, ControlMagics, SessionMagics, DocsMagics, EvalMagics, CheckpointMagics, MemoryMagics,
            AuditMagics, SkillsMagics)


def _formatters(shell: Any) -> dict[str, Any]:
    formatters = shell.display_formatter.formatters
    return {m: formatters[m] for m in ("text/html", "text/markdown") if m in formatters}


def _make_magics(shell: Any) -> AgentMagics:
    """The magics with the shell's ``AgentMagics`` settings; a bad one is dropped and reported in one line."""
    config = getattr(shell, "config", None)
    saved = config.pop("AgentMagics", None) if config is not None and "AgentMagics" in config else None
    try:
        magics = AgentMagics(shell=shell, parent=shell)
    finally:
        if saved is not None and config is not None:  # saved implies config: both are checked for mypy
            config["AgentMagics"] = saved
    if saved:
        import sys

        for key, value in list(saved.items()):
            try:
                if not magics.has_trait(key):
                    raise TraitError(f"no setting named {key!r}; settings: {', '.join(sorted(magics.class_own_traits(config=True)))}")
                setattr(magics, key, value)
            except TraitError as exc:
                saved.pop(key, None)
                print(f"UsageError: AgentMagics.{key} = {value!r} ignored: {str(exc).splitlines()[0]}", file=sys.stderr)
    return magics


def load_extension(shell: Any) -> None:
    """Register an instance of each of :func:`magics_classes` and the final-output formatter for RunResult."""
    if id(shell) in _LOADED:
        return
    magics = _make_magics(shell)
    registered: list[Magics] = []
    for cls in magics_classes():
        # every class after AgentMagics is built from (shell, agent_magics): see magics_classes
        instance = magics if cls is AgentMagics else cast(Callable[[Any, AgentMagics], Magics], cls)(shell, magics)
        shell.register_magics(instance)
        registered.append(instance)
    if magics not in shell.configurables:  # register_magics already lists it: %config would run twice
        shell.configurables.append(magics)
    shell.events.register("pre_run_cell", magics.cells.started)  # which cell each %%agent run comes from
    from harness_magic.core import export

    def as_html(result: Any) -> str:
        return export.render_answer_html(magics.record_for(result), copy_buttons=True)

    # Only sanitized HTML is registered: a text/markdown entry would carry the model's raw text,
    # which a front end renders as trusted Markdown (its raw HTML and remote images included).
    formatters = _formatters(shell)
    if "text/html" in formatters:
        formatters["text/html"].for_type_by_name(*_RESULT_TYPE, as_html)
    _LOADED[id(shell)] = registered
    from harness_magic.notebook.bindings import SAVE_NAME, save

    if SAVE_NAME not in shell.user_ns:  # the agent's save, for %agent_code cells; a notebook's own is kept
        shell.push({SAVE_NAME: save}, interactive=False)
    magics.observe(_prestart_when_asked, names="prestart_sandbox")  # %config ... = True after loading
    if magics.prestart_sandbox:
        _prestart_sandbox(magics)
    _quiet_load_ext(shell)
    from harness_magic.notebook.kernel_exit import stop_channels_first_at_exit

    stop_channels_first_at_exit()


def _quiet_load_ext(shell: Any) -> None:
    """Wrap ``%load_ext`` so that loading this extension again prints nothing (IPython prints "already
    loaded"); every other name goes to IPython's own."""
    table = shell.magics_manager.magics.get("line", {})
    original = table.get("load_ext")
    if original is None or id(shell) in _IPYTHON_LOAD_EXT:
        return

    def load_ext(module_str: str) -> Any:
        if module_str.strip() == _EXTENSION_NAME and id(shell) in _LOADED:
            return None
        return original(module_str)

    load_ext.__doc__ = original.__doc__
    load_ext.__wrapped_load_ext__ = original  # type: ignore[attr-defined]  # what _restore_load_ext looks for
    _IPYTHON_LOAD_EXT[id(shell)] = original
    shell.magics_manager.register_function(load_ext, "line", "load_ext")


def _restore_load_ext(shell: Any) -> None:
    """Put IPython's ``%load_ext`` back (unless another extension has replaced the wrapper since)."""
    original = _IPYTHON_LOAD_EXT.pop(id(shell), None)
    table = shell.magics_manager.magics.get("line", {})
    current = table.get("load_ext")
    if original is not None and getattr(current, "__wrapped_load_ext__", None) is original:
        table["load_ext"] = original


def _prestart_when_asked(change: Any) -> None:
    if change["new"]:
        _prestart_sandbox(change["owner"])


def _prestart_sandbox(magics: AgentMagics) -> None:
    """``AgentMagics.prestart_sandbox``: start the sandbox's launcher on a background thread (imports included),
    so loading stays cheap; a failure surfaces at the first tool call. Nothing for the in-process backend."""
    if magics.sandbox == "inprocess":
        return
    import threading

    def warm() -> None:
        from harness_magic.core.execution.sandbox.launcher_client import LauncherClient

        LauncherClient.warm()

    threading.Thread(target=warm, name="harness-sandbox-prestart", daemon=True).start()


def unload_extension(shell: Any) -> None:
    """Undo :func:`load_extension`: every magic each instance registered, configurables, formatters, session."""
    registered = _LOADED.pop(id(shell), None)
    if registered is None:
        return
    agent = _agent_magics(registered)
    agent.unobserve(_prestart_when_asked, names="prestart_sandbox")
    if agent.cells.started in shell.events.callbacks["pre_run_cell"]:
        shell.events.unregister("pre_run_cell", agent.cells.started)
    _restore_load_ext(shell)
    manager = shell.magics_manager
    for instance in registered:
        for kind, names in instance.magics.items():
            table = manager.magics.get(kind, {})
            for name, method in names.items():
                if table.get(name) == method:  # still ours: a later extension may have taken the name
                    del table[name]
        if manager.registry.get(type(instance).__name__) is instance:
            del manager.registry[type(instance).__name__]
    shell.configurables[:] = [c for c in shell.configurables if not any(c is i for i in registered)]
    for formatter in _formatters(shell).values():
        formatter.deferred_printers.pop(_RESULT_TYPE, None)
        for cls in list(formatter.type_printers):
            if (cls.__module__, cls.__name__) == _RESULT_TYPE:
                formatter.type_printers.pop(cls)
    from harness_magic.notebook.bindings import SAVE_NAME, save

    if shell.user_ns.get(SAVE_NAME) is save:
        del shell.user_ns[SAVE_NAME]
        shell.user_ns_hidden.pop(SAVE_NAME, None)
    agent.close()


def agent_session(shell: Any = None) -> Any:
    """The :class:`~harness_magic.core.session.AgentSession` behind ``%%agent`` in ``shell``.

    ``shell`` defaults to the running IPython. Use it to add connectors or
    subagents from a cell (after any ``%config AgentMagics.*`` change, which
    starts a new session)::

        from harness_magic.notebook.extension import agent_session
        agent_session().add_connector(files_connector(["data"]))
        agent_session().enable_subagents()
    """
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    registered = _LOADED.get(id(shell))
    if registered is None:
        raise RuntimeError("harness_magic is not loaded here: run %load_ext harness_magic first")
    return _agent_magics(registered).session


def _agent_magics(registered: list[Magics]) -> AgentMagics:
    """The :class:`AgentMagics` of a shell's registered instances (the first, as :func:`magics_classes` orders them)."""
    return cast(AgentMagics, registered[0])
