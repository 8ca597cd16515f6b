"""The type check runs in the suite: mypy over the whole package (pyproject's ``[tool.mypy]``).

Strict on the seams' protocols (the cache, the provider adapter, the harness host) and on every class implementing
them; the default mode on every other module of the package. Every ``# type: ignore[code]`` in the package says why.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness_magic"
MYPY_TIMEOUT_S = 600
"""A cold run (no cache) takes about 40 s on this machine; a warm one about 10 s."""
CACHE_DIR = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()) / "harness_magic-mypy-cache"
"""mypy's incremental cache, outside the tree so a run leaves nothing in it; kept from run to run beside pytest's
own folders (the suite's ``TMPDIR`` is a folder of the run, removed at its end: tests/leftovers.py)."""

PROTOCOLS = {
    "harness_magic.core.cache.protocol": "HandleCache",
    "harness_magic.core.providers.protocol": "ModelAdapter",
    "harness_magic.core.agent.host": "HarnessHost",
    "harness_magic.core.execution.connectors.host": "ConnectorHost",
}
"""The seams' protocols: module -> protocol whose methods name an implementation."""

STRICT_FLAGS = ("disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_calls", "disallow_any_generics",
                "check_untyped_defs", "warn_return_any", "strict_equality")


def _mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def _strict_modules() -> set[str]:
    modules: set[str] = set()
    for override in _mypy_config().get("overrides", []):
        if all(override.get(flag) is True for flag in STRICT_FLAGS):
            names = override["module"]
            modules |= {names} if isinstance(names, str) else set(names)
    return modules


def _checked_files() -> list[Path]:
    files: list[Path] = []
    for entry in _mypy_config()["files"]:
        path = ROOT / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _methods(tree: ast.Module, *, attributes: bool = True) -> dict[str, set[str]]:
    """Class -> the members (methods, class attributes) it defines or inherits from classes of the same module."""
    own: dict[str, tuple[set[str], list[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if attributes:  # a capability an implementation declares as a class attribute
                names |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets
                          if isinstance(t, ast.Name)}
            bases = [b.id if isinstance(b, ast.Name) else b.value.id if isinstance(b, ast.Subscript)
                     and isinstance(b.value, ast.Name) else "" for b in node.bases]
            own[node.name] = (names, bases)

    def resolve(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if name not in own or name in seen:
            return set()
        names, bases = own[name]
        return names.union(*(resolve(b, seen | {name}) for b in bases))

    return {name: resolve(name) for name in own}


def _protocol_methods() -> dict[str, set[str]]:
    required = {}
    for module, protocol in PROTOCOLS.items():
        tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        required[f"{module}.{protocol}"] = _methods(tree, attributes=False)[protocol]  # data members are set in __init__
    return required


def implementations() -> dict[str, list[str]]:
    """Protocol -> every class in the package defining all of its methods (outside the protocol modules)."""
    required = _protocol_methods()
    found: dict[str, list[str]] = {name: [] for name in required}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module in PROTOCOLS:
            continue
        for cls, methods in _methods(ast.parse(path.read_text(encoding="utf-8"))).items():
            for protocol, needed in required.items():
                if needed <= methods:
                    found[protocol].append(f"{module}.{cls}")
    return found


def test_mypy_passes_on_the_checked_set():
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(CACHE_DIR)], cwd=ROOT,
                          capture_output=True, text=True, timeout=MYPY_TIMEOUT_S,
                          env={**os.environ, "MYPY_FORCE_COLOR": "0"})
    elapsed = time.monotonic() - started
    print(f"mypy over {len(_checked_files())} modules ({len(_strict_modules())} strict): {elapsed:.1f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_the_checked_set_is_the_whole_package():
    assert _mypy_config()["files"] == ["harness_magic"]
    assert {p.relative_to(ROOT) for p in _checked_files()} == {p.relative_to(ROOT) for p in PACKAGE.rglob("*.py")}


def test_every_implementation_of_a_seam_protocol_is_checked_strictly():
    found = implementations()
    # each protocol has the implementations the seams know (a count that moves means a new class to review)
    assert sorted(found["harness_magic.core.cache.protocol.HandleCache"]) == [
        "harness_magic.core.cache.session.SessionCache"]
    assert sorted(found["harness_magic.core.providers.protocol.ModelAdapter"]) == [
        "harness_magic.core.control.replay._RecordedEnding",
        "harness_magic.core.providers.adapter.AsyncProviderAdapter",
        "harness_magic.core.providers.adapter.ProviderAdapter",
        "harness_magic.core.providers.adapter._AdapterBase",
    ]
    assert sorted(found["harness_magic.core.agent.host.HarnessHost"]) == [
        "harness_magic.core.agent.loop.AsyncHarness",
        "harness_magic.core.agent.loop.Harness",
        "harness_magic.core.agent.loop._HarnessBase",
    ]
    assert sorted(found["harness_magic.core.execution.connectors.host.ConnectorHost"]) == [
        "harness_magic.core.agent.loop.AsyncHarness",
        "harness_magic.core.agent.loop.Harness",
        "harness_magic.core.agent.loop._HarnessBase",
    ]
    strict = _strict_modules()
    needed = set(PROTOCOLS) | {name.rsplit(".", 1)[0] for names in found.values() for name in names}
    assert needed - strict == set(), "a seam protocol or an implementation of one is not checked strictly"


def test_every_strict_module_is_in_the_checked_set():
    checked = {_module_name(p) for p in _checked_files()}
    assert _strict_modules() - checked == set()


def test_the_implementation_scan_finds_a_new_cache():
    source = ("class Memo:\n" + "".join(f"    def {m}(self): ...\n" for m in
              _protocol_methods()["harness_magic.core.cache.protocol.HandleCache"]) + "class Half:\n    def put(self): ...\n")
    classes = _methods(ast.parse(source))
    needed = _protocol_methods()["harness_magic.core.cache.protocol.HandleCache"]
    assert needed <= classes["Memo"] and not needed <= classes["Half"]


_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(.*)$")


def test_every_type_ignore_in_the_package_names_its_code_and_says_why():
    bare = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = _IGNORE.search(line)
            if match and (not match.group(1) or not re.match(r"\s*#\s*\S", match.group(2))):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert bare == []
