"""Tool plugins: the entry-point group ``harness_magic.tools``, tools every session offers the model.

An entry point names a factory: a callable taking no arguments and returning
one :class:`~harness_magic.core.execution.tools.ToolSpec` or a list of them.
It is called once when the plugin loads (its result checked, so a wrong shape
is named in ``%agent_status``) and again for each harness, so no two sessions
share a handler's state. A plugin tool reads (``safety="read"``): a tool that
writes, deletes or calls out belongs in a connector type, whose tools the
approval policy and governance see (a session without connectors has no
approval guard), so any other safety class is refused when the plugin loads.
Its results go through the one formatter like every tool's.

A plugin tool never replaces a tool of the session: its name may not hold
``__`` (the ``<connector>__<tool>`` namespace), and a plugin whose tool is named
like a tool the session has or adds later (``reserved``: ``load_connectors``,
``subagent``) is left out and recorded as that plugin's failure. The session's own tools need its state (cache, interpreter,
questions) and are wired by :mod:`harness_magic.core.session`, not declared here.
"""

from __future__ import annotations

from typing import Callable, Collection, Protocol, Sequence, cast

from harness_magic.core.execution.tools import ToolSpec
from harness_magic.core.plugins import PluginGroup

__all__ = ["ToolFactory", "TOOL_PLUGINS", "install_plugin_tools", "ToolTable"]

ToolFactory = Callable[[], "ToolSpec | Sequence[ToolSpec]"]
"""``factory() -> ToolSpec | list[ToolSpec]``."""


class ToolTable(Protocol):
    """What installing plugin tools needs of a harness."""

    @property
    def tools(self) -> list[ToolSpec]: ...

    def add_tool(self, tool: ToolSpec) -> None: ...


def _specs(factory: ToolFactory, name: str) -> list[ToolSpec]:
    made = factory()
    specs = [made] if isinstance(made, ToolSpec) else list(made) if isinstance(made, (list, tuple)) else None
    if specs is None or not specs or not all(isinstance(s, ToolSpec) for s in specs):
        raise TypeError(f"tool plugin {name!r} returned {type(made).__name__}; a tool factory returns a ToolSpec "
                        "or a non-empty list of ToolSpec")
    unsafe = sorted(f"{s.name} ({s.safety})" for s in specs if s.safety != "read")
    if unsafe:
        raise ValueError(f"tool plugin {name!r}: {', '.join(unsafe)} is not a read tool; a tool that writes, "
                         "deletes or calls out belongs in a connector type, where the approval policy sees it")
    namespaced = sorted(s.name for s in specs if "__" in s.name)
    if namespaced:
        raise ValueError(f"tool plugin {name!r}: tool name {', '.join(namespaced)} holds '__', which marks "
                         "connector tools (<connector>__<tool>)")
    return specs


def _check(obj: object, name: str) -> ToolFactory:
    if not callable(obj):
        raise TypeError(f"a tool plugin is a factory returning ToolSpec(s); {name!r} is a {type(obj).__name__}")
    factory = cast(ToolFactory, obj)  # callable; what it returns is checked on the next line
    _specs(factory, name)  # the shape is checked when the plugin loads, not in the middle of a session
    return factory


TOOL_PLUGINS: PluginGroup[ToolFactory] = PluginGroup("harness_magic.tools", _check, "tool plugin")
"""Every installed tool plugin (entry-point group ``harness_magic.tools``)."""


def install_plugin_tools(harness: ToolTable, reserved: Collection[str] = ()) -> list[str]:
    """Add every loaded plugin's tools to ``harness`` after its own; returns the names added.

    A plugin whose factory raises now, or with a tool named like one ``harness`` already has or one in
    ``reserved`` (tools the session adds later), is left out and recorded in :data:`TOOL_PLUGINS`
    ``.failures()``; the other plugins' tools are still added.
    """
    added: list[str] = []
    for name, plugin in TOOL_PLUGINS.load_all().items():
        try:
            specs = _specs(plugin.obj, name)
        # A plugin's factory is someone else's code: whatever it raises is that plugin's failure, shown in
        # %agent_status, and the session is built without its tools.
        except Exception as exc:
            TOOL_PLUGINS.record_failure(name, exc)
            continue
        taken, names = {t.name for t in harness.tools} | set(reserved), [s.name for s in specs]
        clashes = sorted({n for n in names if n in taken or names.count(n) > 1})
        if clashes:
            TOOL_PLUGINS.record_failure(name, ValueError(f"left out: the session already has a tool named "
                                                         f"{', '.join(clashes)} (or the plugin lists it twice)"))
            continue
        for spec in specs:
            harness.add_tool(spec)
            added.append(spec.name)
    return added
