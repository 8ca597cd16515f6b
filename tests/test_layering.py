"""The package's shape: planes import downward, no module circles, no private names across modules.

The contract itself is ``[tool.importlinter]`` in ``pyproject.toml`` (import-linter's
``layers`` contract over the planes ``docs/design.md`` describes); this file runs it,
proves it can fail, and adds the two rules import-linter has no contract for.
"""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness_magic"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": str(root), "LANG": "C.UTF-8"}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=240)


def test_the_planes_import_downward_only():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "harness_magic", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    names = tmp_path / "harness_magic" / "core" / "cache" / "names.py"
    names.write_text(names.read_text() + "\nfrom harness_magic.core.agent.loop import Harness  # upward\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "harness_magic.core.cache.names -> harness_magic.core.agent.loop" in result.stdout


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("harness_magic", cache_dir=None)


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges.get(nxt, []))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _is_package_face(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()


def test_no_module_imports_itself_back_through_others():
    graph = _graph()
    for package in [m for m in graph.modules if _is_package_face(m)]:
        # A package's __init__ re-exporting its own modules is not a circle of the design.
        for child in list(graph.find_modules_directly_imported_by(package)):
            if child.startswith(package + "."):
                graph.remove_import(importer=package, imported=child)
    assert _circles(graph) == []


def test_the_circle_finder_sees_a_circle():
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _circles(graph) == [["p.a", "p.b", "p.c"]]


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness_magic"):
            package_dir = PACKAGE.parent / node.module.replace(".", "/")
            for alias in node.names:
                is_module = (package_dir / f"{alias.name}.py").exists() or (package_dir / alias.name).is_dir()
                if alias.name.startswith("_") and not alias.name.startswith("__") and not is_module:
                    found.append(f"{path.name}:{node.lineno}: {node.module}.{alias.name}")
    return found


def test_no_private_name_is_imported_across_modules():
    offenders = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _private_imports(path)]
    assert offenders == []


def test_the_private_import_check_sees_one(tmp_path):
    sample = tmp_path / "harness_magic_sample.py"
    sample.write_text("from harness_magic.core.agent.loop import _Hidden\n")
    assert _private_imports(sample) == ["harness_magic_sample.py:1: harness_magic.core.agent.loop._Hidden"]


def test_the_result_formatter_is_registered_under_runresults_real_path():
    """The notebook registers its final-output formatter by module and class name (loading stays cheap): a move of
    ``RunResult`` must fail here, not leave cells showing a repr."""
    from harness_magic import RunResult
    from harness_magic.notebook import extension

    module, name = extension._RESULT_TYPE
    assert getattr(importlib.import_module(module), name) is RunResult
    assert (RunResult.__module__, RunResult.__name__) == extension._RESULT_TYPE
