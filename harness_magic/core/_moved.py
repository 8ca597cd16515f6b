"""Old module paths of the core, kept importable after the regrouping by plane.

Before the core was grouped by plane (see ``docs/design.md``) its modules sat in
one flat package: ``harness_magic.core.loop``, ``harness_magic.core.sandbox``,
``harness_magic.core.connectors.sql`` and so on. Notebooks, scripts and tests
written against those paths keep working: :data:`MOVED` maps each old dotted
path (a module or a package, whose submodules follow it) to its new home, and
:class:`MovedModuleFinder` answers an import of an old path with the module
object at the new path, so both names are one module (patching either patches
both). New code imports the new paths; ``tests/test_layering.py`` imports every
entry here, so a move that forgets to update this table fails the suite.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "MovedModuleFinder", "new_name", "install"]

_CORE = "harness_magic.core"

MOVED: dict[str, str] = {
    f"{_CORE}.loop": f"{_CORE}.agent.loop",
    f"{_CORE}.compaction": f"{_CORE}.agent.compaction",
    f"{_CORE}.prompts": f"{_CORE}.agent.prompts",
    f"{_CORE}.messages": f"{_CORE}.transcript.messages",
    f"{_CORE}.events": f"{_CORE}.transcript.events",
    f"{_CORE}.log": f"{_CORE}.transcript.log",
    f"{_CORE}.scrub": f"{_CORE}.transcript.scrub",
    f"{_CORE}.provider": f"{_CORE}.providers.provider",
    f"{_CORE}.offline": f"{_CORE}.providers.offline",
    f"{_CORE}.budgets": f"{_CORE}.control.budgets",
    f"{_CORE}.planner": f"{_CORE}.control.planner",
    f"{_CORE}.reminders": f"{_CORE}.control.reminders",
    f"{_CORE}.verification": f"{_CORE}.control.verification",
    f"{_CORE}.replay": f"{_CORE}.control.replay",
    f"{_CORE}.subagent": f"{_CORE}.control.subagent",
    f"{_CORE}.tools": f"{_CORE}.execution.tools",
    f"{_CORE}.format": f"{_CORE}.execution.format",
    f"{_CORE}.interpreter": f"{_CORE}.execution.interpreter",
    f"{_CORE}.sandbox.confinement": f"{_CORE}.confinement.layers",
    f"{_CORE}.sandbox": f"{_CORE}.execution.sandbox",
    f"{_CORE}.connectors._safe_open": f"{_CORE}.confinement.safe_open",
    f"{_CORE}.connectors": f"{_CORE}.execution.connectors",
    f"{_CORE}.knowledge.connectors": f"{_CORE}.execution.connectors.docs",
    f"{_CORE}.safe_markdown": f"{_CORE}.text.safe_markdown",
    f"{_CORE}.snapshot_view": f"{_CORE}.text.snapshot_view",
    f"{_CORE}.hidden_chars": f"{_CORE}.text.hidden_chars",
}
"""Old dotted path -> new dotted path. A package entry also covers its submodules."""


def new_name(fullname: str) -> str | None:
    """The current path of ``fullname`` if it is an old path (the longest matching entry wins), else None."""
    best = None
    for old in MOVED:
        if (fullname == old or fullname.startswith(old + ".")) and (best is None or len(old) > len(best)):
            best = old
    return None if best is None else MOVED[best] + fullname[len(best):]


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path is already executed."""


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Resolves an old core module path to the module now at its new path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_CORE + "."):
            return None
        current = new_name(fullname)
        if current is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(current), is_package=False)


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once.

    First, because the path finder would otherwise import an old submodule path
    (``harness_magic.core.sandbox.worker``) a second time, as a module of its own.
    """
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
