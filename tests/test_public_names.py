"""The public names stay where the README shows them, and each module's ``__all__`` says so.

Read from the documents themselves, so a name the README shows cannot move without this failing:

- every ``from harness_magic... import NAME`` in README.md and docs/*.md (code blocks and prose)
  imports, and NAME is in that module's ``__all__``;
- every ``python -m harness_magic.X`` names a module with a runnable ``__main__`` and a ``main``;
- ``%load_ext harness_magic`` finds ``load_ipython_extension`` and ``unload_ipython_extension``
  in the package's ``__all__``;
- the names the README's prose leans on (``AgentSession``, ``AgentConfig``, ``Harness``,
  ``RunResult``) are attributes of ``harness_magic`` and are the objects defined at their homes;
- every name a package's ``__all__`` lists resolves, and the package resolves no name it does not list.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

import harness_magic

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_IMPORT = re.compile(r"from (harness_magic(?:\.\w+)*) import (\([^)]*\)|[\w, ]+)")
_CLI = re.compile(r"python -m (harness_magic(?:\.\w+)*)")

PROSE_NAMES = {
    "AgentSession": "harness_magic.core.session",
    "AgentConfig": "harness_magic.core.config",
    "Harness": "harness_magic.core.agent.loop",
    "RunResult": "harness_magic.core.agent.result",
}
"""Names the README's prose shows on ``harness_magic`` -> the module that defines each."""


def shown_imports(text: str) -> list[tuple[str, str]]:
    """(module, name) of each ``from harness_magic... import ...`` in ``text``; ``as`` aliases name the original."""
    found = []
    for match in _IMPORT.finditer(text):
        for part in match.group(2).strip("()").split(","):
            name = part.split(" as ")[0].strip()
            if name:
                found.append((match.group(1), name))
    return found


def _documented_imports() -> list[tuple[str, str]]:
    pairs = {pair for path in DOCUMENTS for pair in shown_imports(path.read_text(encoding="utf-8"))}
    return sorted(pairs)


def _documented_clis() -> list[str]:
    return sorted({m for path in DOCUMENTS for m in _CLI.findall(path.read_text(encoding="utf-8"))})


def test_the_documents_show_imports_and_commands_to_check():
    """The readers below have something to read: the README's own example and its CLIs."""
    assert ("harness_magic", "AgentSession") in _documented_imports()
    assert {"harness_magic.evals", "harness_magic.audit"} <= set(_documented_clis())


def test_the_import_reader_handles_the_forms_the_documents_use():
    text = ("from harness_magic import (Harness,\n    ProviderAdapter)\n"
            "`from harness_magic.notebook.extension import agent_session as s`")
    assert shown_imports(text) == [("harness_magic", "Harness"), ("harness_magic", "ProviderAdapter"),
                                   ("harness_magic.notebook.extension", "agent_session")]


@pytest.mark.parametrize(("module", "name"), _documented_imports())
def test_every_documented_import_works_and_is_in_the_modules_all(module, name):
    imported = importlib.import_module(module)
    assert hasattr(imported, name), f"{module} has no {name}, yet the documents import it from there"
    assert name in getattr(imported, "__all__", ()), f"{name} is shown imported from {module}; its __all__ must say so"


@pytest.mark.parametrize("module", _documented_clis())
def test_every_documented_command_line_is_a_runnable_module(module):
    spec = importlib.util.find_spec(f"{module}.__main__")
    assert spec is not None, f"python -m {module} is documented but {module} has no __main__"
    assert callable(getattr(importlib.import_module(f"{module}.__main__"), "main", None))


def test_load_ext_finds_the_extension_hooks_in_the_package_face():
    for hook in ("load_ipython_extension", "unload_ipython_extension"):
        assert hook in harness_magic.__all__
        assert callable(getattr(harness_magic, hook))


@pytest.mark.parametrize(("name", "home"), sorted(PROSE_NAMES.items()))
def test_the_readme_names_are_the_objects_at_their_homes(name, home):
    assert name in harness_magic.__all__
    assert getattr(harness_magic, name) is getattr(importlib.import_module(home), name)


def _package_faces() -> list[str]:
    faces = []
    for init in sorted((ROOT / "harness_magic").rglob("__init__.py")):
        module = ".".join(init.parent.relative_to(ROOT).parts)
        if "__all__" in init.read_text(encoding="utf-8"):
            faces.append(module)
    return faces


@pytest.mark.parametrize("package", _package_faces())
def test_every_name_a_package_lists_resolves(package):
    face = importlib.import_module(package)
    missing = [name for name in face.__all__ if not hasattr(face, name)]
    assert missing == [], f"{package}.__all__ lists names it does not have: {missing}"


@pytest.mark.parametrize("name", ["os", "_EXPORTS", "provider", "magics", "agent_session", "Harness.run"])
def test_the_lazy_face_resolves_no_name_it_does_not_list(name):
    """``harness_magic`` resolves names lazily: a name outside ``__all__`` (a module it happens to import,
    its private table, a former module path, a notebook helper, a dotted path) is an AttributeError."""
    with pytest.raises(AttributeError, match=re.escape(repr(name))):
        harness_magic.__getattr__(name)
    assert name not in dir(harness_magic)
