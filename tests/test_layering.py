"""The package's shape: planes import downward, no module circles, no private names across modules,
one import path per name.

The contracts are ``[tool.importlinter]`` in ``pyproject.toml``: import-linter ``layers`` contracts,
one per container (``harness_magic`` and ``harness_magic.core``), each ``exhaustive`` so a package
nobody placed fails. This file runs them, proves they fail on an upward import (through an existing
module and through a new package) and on an unplaced package, that an ``independence`` contract keeps
the connector engine packages (``connectors/duckdb``, ``spark``, ``sql``, ``files``, ``docs``) from
importing each other, and adds the rules import-linter has
no contract for: no module circles, no private names across modules, no re-exports (every import
names the module that defines the name, or a package whose ``__all__`` lists it).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
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


def _copy(tmp_path: Path) -> Path:
    """A copy of the package and its contracts to break on purpose."""
    shutil.copytree(PACKAGE, tmp_path / "harness_magic", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path / "harness_magic"


def _add_package(package: Path, body: str) -> None:
    package.mkdir()
    (package / "__init__.py").write_text(f'"""A package nobody placed."""\n{body}')


def _unlisted(output: str) -> list[str]:
    """The modules import-linter reports as not listed in an exhaustive contract."""
    _, found, rest = output.partition("The following modules are not listed as layers:")
    return [line.strip()[2:] for line in rest.splitlines() if line.strip().startswith("- ")] if found else []


def test_an_upward_import_breaks_the_contract(tmp_path):
    package = _copy(tmp_path)
    names = package / "core" / "cache" / "names.py"
    names.write_text(names.read_text() + "\nfrom harness_magic.core.agent.loop import Harness  # upward\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "harness_magic.core.cache.names -> harness_magic.core.agent.loop" in result.stdout
    assert _unlisted(result.stdout) == []


def test_an_upward_import_through_a_new_core_package_breaks_the_contract(tmp_path):
    """The hole the exhaustive contracts close: a package the layers do not name was unconstrained."""
    package = _copy(tmp_path)
    _add_package(package / "core" / "newplane", "from harness_magic.notebook import extension  # upward\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "harness_magic.core is not allowed to import harness_magic.notebook" in result.stdout
    assert "harness_magic.core.newplane -> harness_magic.notebook.extension" in result.stdout
    assert _unlisted(result.stdout) == ["harness_magic.core.newplane"]


@pytest.mark.parametrize(("where", "named"), [
    (("core", "newplane"), "harness_magic.core.newplane"),
    (("newtop",), "harness_magic.newtop"),
])
def test_a_package_no_layer_names_breaks_the_contract_even_with_harmless_imports(tmp_path, where, named):
    package = _copy(tmp_path)
    _add_package(package.joinpath(*where), "from harness_magic.core.text import counts  # downward only\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert _unlisted(result.stdout) == [named]
    assert "is not allowed to import" not in result.stdout


def test_a_new_module_is_unlisted_too_not_only_a_package(tmp_path):
    package = _copy(tmp_path)
    (package / "core" / "helpers.py").write_text('"""A flat module beside the planes."""\n')
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert _unlisted(result.stdout) == ["harness_magic.core.helpers"]


ENGINE_PACKAGES = ["harness_magic.core.execution.connectors." + name for name in ("duckdb", "spark", "sql", "files", "docs", "dbt", "mcp")]
"""One package per engine under ``connectors/``; the shared governance pieces sit beside them."""


def test_every_contract_is_exhaustive_over_its_container():
    """Each container of the design has one exhaustive layers contract; the one other contract keeps the
    connector engine packages independent; nothing else is configured."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = config["contracts"]
    layers = [c for c in contracts if c["type"] == "layers"]
    others = [c for c in contracts if c["type"] != "layers"]
    assert sorted(c["containers"][0] for c in layers) == ["harness_magic", "harness_magic.core"]
    for contract in layers:
        assert contract["exhaustive"] is True, contract["name"]
        assert len(contract["containers"]) == 1 and not contract.get("exhaustive_ignores"), contract["name"]
        assert not contract.get("ignore_imports"), contract["name"]
    assert len(others) == 1 and others[0]["type"] == "independence", others
    assert others[0]["modules"] == ENGINE_PACKAGES and not others[0].get("ignore_imports")


def test_the_engine_packages_are_exactly_the_connectors_subpackages():
    """A new engine package under connectors/ must join the independence contract."""
    connectors = PACKAGE / "core" / "execution" / "connectors"
    found = sorted(f"harness_magic.core.execution.connectors.{d.name}" for d in connectors.iterdir()
                   if (d / "__init__.py").exists())
    assert found == sorted(ENGINE_PACKAGES)


def test_one_engine_importing_another_breaks_the_contract(tmp_path):
    """What the independence contract is for: the Spark connector once imported the DuckDB connector for one
    helper; such an import, even lazy inside a function, fails."""
    package = _copy(tmp_path)
    spark = package / "core" / "execution" / "connectors" / "spark" / "connector.py"
    spark.write_text(spark.read_text() + "\n\ndef _borrowed():\n"
                     "    from harness_magic.core.execution.connectors.duckdb.connector import lazy_rebinder\n"
                     "    return lazy_rebinder\n")
    result = _lint(tmp_path)
    report = " ".join(result.stdout.split())  # import-linter wraps long lines
    assert result.returncode != 0
    assert ("harness_magic.core.execution.connectors.spark.connector -> "
            "harness_magic.core.execution.connectors.duckdb.connector") in report
    assert "1 broken" in report and _unlisted(result.stdout) == []


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


_IMPORT_FROM = re.compile(r"^[ \t]*from (harness_magic(?:\.\w+)*) import (\([^)]*\)|[^\n#]+)", re.M)
SCANNED = ["harness_magic", "tests", "benchmarks", "scripts", "notebooks", "docs", "README.md"]
"""Where imports of the package are written: code, tests, benchmarks, notebooks, and the documents."""


def _module_file(module: str) -> Path | None:
    base = PACKAGE.parent / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements at module level, including those under a module-level if/try."""
    found = []
    for node in body:
        found.append(node)
        if isinstance(node, (ast.If, ast.Try)):
            for block in (node.body, node.orelse, *(h.body for h in getattr(node, "handlers", [])),
                          getattr(node, "finalbody", [])):
                found.extend(_top_level(block))
    return found


def _defines(path: Path) -> tuple[set[str], list[str] | None]:
    """(names the module itself binds by def, class or assignment; its ``__all__`` or None)."""
    defined: set[str] = set()
    listed = None
    for node in _top_level(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in getattr(node, "targets", [])):
                listed = [e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)]
    return defined, listed


def _import_through_other_homes(module: str, names: list[str]) -> list[str]:
    """The names ``from module import ...`` takes from a module that does not define them."""
    path = _module_file(module)
    if path is None:
        return [f"{module} (no such module)"]
    defined, listed = _defines(path)
    is_package = path.name == "__init__.py"
    wrong = []
    for name in names:
        if _module_file(f"{module}.{name}") is not None or name in defined:
            continue
        if is_package and name in getattr(importlib.import_module(module), "__all__", ()):
            continue  # a package's face: its __all__ says the name is public there
        wrong.append(f"{module}.{name}")
    return wrong


def _imports_in(text: str) -> list[tuple[str, list[str]]]:
    found = []
    for match in _IMPORT_FROM.finditer(text):
        listed = re.sub(r"#[^\n]*", "", match.group(2)).strip(" ()\\\n")  # comments out, parentheses off
        names = [part.split(" as ")[0].strip(" \t\n\\\"'") for part in listed.split(",")]
        found.append((match.group(1), [name for name in names if name.isidentifier()]))
    return found


def _scanned_files() -> list[Path]:
    files = []
    for entry in SCANNED:
        path = ROOT / entry
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(p for p in sorted(path.rglob("*")) if p.suffix in {".py", ".ipynb", ".md"}
                         and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts)
    return files


def test_every_import_names_the_module_that_defines_the_name():
    """No compatibility layer: an import (in code, a test, a notebook cell, a kernel's source in a string
    or a document) names the module that defines the name, or a package whose ``__all__`` lists it."""
    offenders = []
    for path in _scanned_files():
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            text = "".join("".join(cell["source"]) + "\n" for cell in json.loads(text)["cells"])
        for module, names in _imports_in(text):
            offenders += [f"{path.relative_to(ROOT)}: {wrong}" for wrong in _import_through_other_homes(module, names)]
    assert offenders == []


def test_no_module_lists_a_name_it_does_not_define():
    """A module's ``__all__`` is what it defines; only a package's ``__init__`` gathers its modules' names."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        defined, listed = _defines(path)
        if path.name != "__init__.py" and listed is not None:
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in listed if name not in defined]
    assert offenders == []


def test_the_home_check_sees_an_import_through_another_module():
    text = ("from harness_magic.core.session import AgentConfig\n"  # defined in core.config
            "    from harness_magic.core.agent.loop import (\n        Harness,\n        RunResult,\n    )\n"
            "from harness_magic.core.providers.provider import ProviderAdapter\n"  # a deleted re-export module
            "from harness_magic.core.cache import SessionCache, SpillRecord\n"  # a face lists the first only
            "from harness_magic.core.execution import interpreter\n")  # a submodule
    wrong = [w for module, names in _imports_in(text) for w in _import_through_other_homes(module, names)]
    assert wrong == ["harness_magic.core.session.AgentConfig", "harness_magic.core.agent.loop.RunResult",
                     "harness_magic.core.providers.provider (no such module)", "harness_magic.core.cache.SpillRecord"]
