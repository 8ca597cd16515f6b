"""The plugin registry (harness_magic/core/plugins.py): built-ins load through the same entry-point groups as an
outside package; a broken or wrong-shaped plugin is named and never stops the others; a name clash has one winner.

Packages are installed into a temporary site directory on ``sys.path`` (``plugin_site``), read by
``importlib.metadata`` exactly as an installed wheel is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_magic.core.control.skills.loader import BUILTIN_SKILLS_DIR, SKILL_PLUGINS, load_skills
from harness_magic.core.execution.connectors.config import connector_from_config
from harness_magic.core.execution.connectors.types import CONNECTOR_TYPES
from harness_magic.core.execution.tool_plugins import TOOL_PLUGINS, install_plugin_tools
from harness_magic.core.execution.tools import ToolSpec
from harness_magic.core.plugins import GROUPS, OWN_DISTRIBUTION, PluginError, PluginGroup
from harness_magic.evals.graders import GRADERS, GradeContext, grade, validate_grader
from plugin_site import EXAMPLE_PACKAGE, EXAMPLE_TASK, install_distribution, install_example

ALL_GROUPS = (CONNECTOR_TYPES, TOOL_PLUGINS, GRADERS, SKILL_PLUGINS)
BUILTIN_CONNECTOR_TYPES = {"files", "duckdb", "sql", "spark", "docs", "glossary", "dbt", "mcp"}
BUILTIN_GRADERS = {"number", "frame", "contains", "regex", "choice", "sql", "no_writes", "chart", "judge",
                   "dabench", "dabstep"}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty site directory on sys.path; every group reads its declarations again before and after."""
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    before = set(sys.modules)
    for group in ALL_GROUPS:
        group.forget()
    yield directory
    for group in ALL_GROUPS:
        group.forget()
    for name in set(sys.modules) - before:
        if name.startswith(("plugin_", EXAMPLE_PACKAGE)):
            del sys.modules[name]


class FakeHarness:
    def __init__(self, names: list[str]) -> None:
        self._tools = [ToolSpec(n, "built-in", {"type": "object", "properties": {}}, lambda: "") for n in names]

    @property
    def tools(self) -> list[ToolSpec]:
        return list(self._tools)

    def add_tool(self, tool: ToolSpec) -> None:
        self._tools.append(tool)


def test_the_built_ins_are_declared_in_the_same_groups_an_outside_package_uses(site: Path) -> None:
    assert set(CONNECTOR_TYPES.names()) == BUILTIN_CONNECTOR_TYPES
    assert set(GRADERS.names()) == BUILTIN_GRADERS
    assert SKILL_PLUGINS.names() == ("builtin",)
    for group in ALL_GROUPS:
        loaded = group.load_all()
        assert all(plugin.distribution == OWN_DISTRIBUTION and plugin.builtin for plugin in loaded.values())
        assert group.failures() == ()
    assert SKILL_PLUGINS.get("builtin").obj == BUILTIN_SKILLS_DIR
    assert {group.group for group in ALL_GROUPS} == set(GROUPS)


def test_the_example_package_adds_a_connector_type_a_tool_a_grader_and_a_skill(site: Path, tmp_path: Path) -> None:
    install_example(site)
    assert "facts" in CONNECTOR_TYPES.names() and CONNECTOR_TYPES.names()[:len(BUILTIN_CONNECTOR_TYPES)] == tuple(sorted(BUILTIN_CONNECTOR_TYPES))
    connector = connector_from_config({"type": "facts", "facts": {"fiscal_year_start": "April"}, "environment": "prod"})
    assert connector.name == "facts" and connector.tool_names == ["facts__lookup"] and connector.environment == "prod"
    assert connector.tools[0].handler(key="fiscal_year_start") == "April"
    harness = FakeHarness(["python_interpreter"])
    assert install_plugin_tools(harness) == ["fiscal_quarter"]
    quarter = harness.tools[-1].handler
    assert [quarter(month=m) for m in (4, 6, 7, 12, 1, 3)] == ["Q1", "Q1", "Q2", "Q3", "Q4", "Q4"]
    assert quarter(month=13).startswith("month must be") and quarter(month=True).startswith("month must be")
    validate_grader("keywords", {"all": ["April", "Q1"]}, None)
    with pytest.raises(ValueError, match="all must be a non-empty list"):
        validate_grader("keywords", {"all": []}, None)
    assert grade("keywords", {"all": ["april"]}, GradeContext("The year starts in April.")).passed
    failed = grade("keywords", {"all": ["april", "Q4"]}, GradeContext("April."))
    assert not failed.passed and "Q4" in failed.detail
    skills = load_skills()
    skill = skills.get("fiscal-quarter-report")
    assert skill.plugin == "harness-magic-example-plugin" and not skill.builtin
    assert "kpi-discrepancy" in skills and skills.get("kpi-discrepancy").builtin  # the built-ins are still there
    assert skills.errors == []


def test_an_unknown_connector_type_is_named_with_every_available_type(site: Path) -> None:
    with pytest.raises(ValueError) as raised:
        connector_from_config({"type": "ftp", "host": "example.com"})
    message = str(raised.value)
    assert "connector type 'ftp' is unknown" in message
    assert all(kind in message for kind in BUILTIN_CONNECTOR_TYPES)
    for hostile in (None, 3, ["files"], "files\n", "../files", "__import__('os')"):
        with pytest.raises(ValueError, match="is unknown; available: dbt, docs, duckdb, files"):
            connector_from_config({"type": hostile, "roots": ["."]})


def test_a_plugin_that_fails_to_import_is_recorded_once_and_the_others_still_load(site: Path, tmp_path: Path) -> None:
    imports = tmp_path / "imports.log"
    install_distribution(site, "broken-engine", {"harness_magic.connectors": {"broken": "plugin_broken:make"}},
                         {"plugin_broken.py": f"open({str(imports)!r}, 'a').write('x')\n"
                                              "import a_module_that_is_not_installed\n"})
    with pytest.raises(PluginError) as raised:
        connector_from_config({"type": "broken"})
    assert "connector type 'broken' failed to load" in str(raised.value)
    assert "ModuleNotFoundError" in str(raised.value) and "a_module_that_is_not_installed" in str(raised.value)
    with pytest.raises(PluginError):
        CONNECTOR_TYPES.get("broken")
    assert imports.read_text() == "x", "a failed plugin is imported once, its failure cached"
    loaded = CONNECTOR_TYPES.load_all()
    assert set(loaded) == BUILTIN_CONNECTOR_TYPES
    (failure,) = CONNECTOR_TYPES.failures()
    assert (failure.group, failure.name, failure.distribution) == ("harness_magic.connectors", "broken", "broken-engine")
    assert failure.line.startswith("broken (harness_magic.connectors, from broken-engine): ModuleNotFoundError")
    assert "\n" not in failure.line
    assert connector_from_config({"type": "files", "roots": [str(tmp_path)]}).name == "files"


def test_objects_of_the_wrong_shape_are_named_per_group(site: Path, tmp_path: Path) -> None:
    install_distribution(site, "wrong-shapes", {
        "harness_magic.connectors": {"not_callable": "plugin_shapes:NOT_CALLABLE",
                                     "not_a_connector": "plugin_shapes:returns_a_string"},
        "harness_magic.graders": {"plain_function": "plugin_shapes:returns_a_string", "Bad-Kind": "plugin_shapes:G"},
        "harness_magic.skills": {"nowhere": "plugin_shapes:NOWHERE", "number": "plugin_shapes:NOT_CALLABLE"},
        "harness_magic.tools": {"not_specs": "plugin_shapes:returns_a_string",
                                "raises": "plugin_shapes:raises", "writes": "plugin_shapes:writing_tool",
                                "namespaced": "plugin_shapes:namespaced_tool"},
    }, {"plugin_shapes.py": (
        "from harness_magic.core.execution.tools import ToolSpec\n"
        "from harness_magic.evals.graders import GraderPlugin, Grade\n"
        "NOT_CALLABLE = 42\n"
        f"NOWHERE = {str(tmp_path / 'no-such-dir')!r}\n"
        "def returns_a_string(**options):\n    return 'not a connector'\n"
        "def raises():\n    raise RuntimeError('the factory broke')\n"
        "def writing_tool():\n"
        "    return ToolSpec('drop_table', 'x', {'type': 'object', 'properties': {}}, lambda: '', safety='destructive')\n"
        "def namespaced_tool():\n"
        "    return ToolSpec('files__read', 'x', {'type': 'object', 'properties': {}}, lambda: '')\n"
        "G = GraderPlugin(lambda options, ctx: Grade('x', True, ''), lambda options, answers: None)\n")})
    for group in ALL_GROUPS:
        group.load_all()
    errors = {f.name: f.error for group in ALL_GROUPS for f in group.failures()}
    assert errors["number"].startswith("TypeError: a skills plugin is the path of a directory")  # a skills group name
    assert errors["not_callable"].startswith("TypeError: a connector type is a callable")
    assert errors["plain_function"].startswith("TypeError: a grader is a harness_magic.evals.graders.GraderPlugin")
    assert "grader kind is 1-32 characters" in errors["Bad-Kind"]
    assert errors["nowhere"].startswith("ValueError: skills plugin 'nowhere'") and "not a directory" in errors["nowhere"]
    assert errors["not_specs"].startswith("TypeError: tool plugin 'not_specs' returned str")
    assert errors["raises"] == "RuntimeError: the factory broke"
    assert "holds '__', which marks connector tools" in errors["namespaced"]
    assert "drop_table (destructive) is not a read tool" in errors["writes"]  # no approval guard would see it
    with pytest.raises(TypeError, match="returned str, not a Connector"):
        connector_from_config({"type": "not_a_connector"})
    assert set(GRADERS.load_all()) == BUILTIN_GRADERS
    with pytest.raises(ValueError, match="grader kind 'plain_function' failed to load"):
        validate_grader("plain_function", {}, None)
    assert not grade("plain_function", {}, GradeContext("x")).passed  # a broken grader fails its grade, no crash
    assert [s.builtin for s in load_skills()] == [True] * 5
    assert any("nowhere" in e for e in load_skills().errors)
    assert install_plugin_tools(FakeHarness(["python_interpreter"])) == []


def test_a_built_in_name_declared_by_an_outside_package_keeps_the_built_in(site: Path, tmp_path: Path) -> None:
    install_distribution(site, "sneaky-sql", {"harness_magic.connectors": {"sql": "plugin_sneaky:make"},
                                              "harness_magic.graders": {"no_writes": "plugin_sneaky:ALWAYS"}},
                         {"plugin_sneaky.py": "raise SystemExit('must never be imported')\n"})
    assert CONNECTOR_TYPES.get("sql").distribution == OWN_DISTRIBUTION
    assert GRADERS.get("no_writes").distribution == OWN_DISTRIBUTION
    lines = [f.line for group in (CONNECTOR_TYPES, GRADERS) for f in group.failures()]
    assert lines == ["sql (harness_magic.connectors, from sneaky-sql): ignored: connector type 'sql' is already "
                     "declared by harness_magic, which wins",
                     "no_writes (harness_magic.graders, from sneaky-sql): ignored: grader kind 'no_writes' is already "
                     "declared by harness_magic, which wins"]
    assert "plugin_sneaky" not in sys.modules


def test_two_outside_packages_with_one_name_the_first_distribution_by_name_wins(site: Path) -> None:
    for dist, text in (("zeta-facts", "zeta"), ("alpha-facts", "alpha")):
        install_distribution(site, dist, {"harness_magic.connectors": {"memo": f"plugin_{text}:make"}},
                             {f"plugin_{text}.py": f"def make(**options):\n    raise ValueError({text!r})\n"})
    assert CONNECTOR_TYPES.get("memo").distribution == "alpha-facts"
    with pytest.raises(ValueError, match="alpha"):
        connector_from_config({"type": "memo"})
    (shadowed,) = CONNECTOR_TYPES.failures()
    assert shadowed.distribution == "zeta-facts" and "already declared by alpha-facts, which wins" in shadowed.error


def test_a_plugin_tool_never_replaces_a_session_tool(site: Path) -> None:
    install_distribution(site, "clashing-tools", {"harness_magic.tools": {
        "shadow": "plugin_tools:interpreter", "reserved": "plugin_tools:load", "fine": "plugin_tools:fine"}},
        {"plugin_tools.py": (
            "from harness_magic.core.execution.tools import ToolSpec\n"
            "def spec(name):\n    return ToolSpec(name, 'x', {'type': 'object', 'properties': {}}, lambda: 'plugin')\n"
            "def interpreter():\n    return spec('python_interpreter')\n"
            "def load():\n    return [spec('load_connectors')]\n"
            "def fine():\n    return [spec('fine_a'), spec('fine_b')]\n")})
    harness = FakeHarness(["python_interpreter", "ask_user"])
    assert install_plugin_tools(harness, reserved=("load_connectors",)) == ["fine_a", "fine_b"]
    assert [t.name for t in harness.tools] == ["python_interpreter", "ask_user", "fine_a", "fine_b"]
    assert harness.tools[0].description == "built-in"
    errors = {f.name: f.error for f in TOOL_PLUGINS.failures()}
    assert "already has a tool named python_interpreter" in errors["shadow"]
    assert "already has a tool named load_connectors" in errors["reserved"]


def test_a_group_outside_harness_magics_is_refused() -> None:
    with pytest.raises(ValueError, match="'console_scripts' is not one of harness_magic's"):
        PluginGroup("console_scripts", lambda obj, name: obj, "script")


def test_the_design_docs_show_the_example_package_as_it_is() -> None:
    """docs/design.md "Write a plugin" quotes every file of tests/plugin_example whole, so the page's example
    is the tested one."""
    from plugin_site import EXAMPLE

    page = (EXAMPLE.parent.parent / "docs" / "design.md").read_text()
    assert "## Write a plugin" in page
    files = [p for p in sorted(EXAMPLE.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) == 3, files
    for path in files:
        assert path.read_text().rstrip("\n") in page, f"docs/design.md does not show {path.relative_to(EXAMPLE)} as it is"


def test_a_missing_required_option_is_a_key_error_naming_it_for_built_ins_and_plugins_alike(site: Path) -> None:
    install_example(site)
    for entry, option in (({"type": "files"}, "roots"), ({"type": "sql", "name": "w"}, "url"),
                          ({"type": "facts", "name": "f"}, "facts")):
        with pytest.raises(KeyError) as raised:
            connector_from_config(entry)
        assert raised.value.args == (option,)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        connector_from_config({"type": "facts", "facts": {"a": "b"}, "colour": "red"})


def test_the_evals_command_grades_with_an_installed_packages_grader(tmp_path: Path) -> None:
    """``python -m harness_magic.evals run`` in a fresh process whose path holds the example package."""
    site, suite = tmp_path / "site", tmp_path / "suite"
    install_example(site)
    suite.mkdir()
    (suite / "fiscal_year_start.yaml").write_text(EXAMPLE_TASK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    for model, passed in (("suite:reference", True), ("suite:wrong", False)):
        out = tmp_path / f"{model.split(':')[1]}.json"
        done = subprocess.run([sys.executable, "-m", "harness_magic.evals", "run", str(suite), "--model", model,
                               "--out", str(out), "--sandbox", "inprocess", "--quiet"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr  # each script got the outcome it declares
        (result,) = json.loads(out.read_text())["results"]
        assert result["passed"] is passed and [g["kind"] for g in result["grades"]] == ["keywords"], result
    listed = subprocess.run([sys.executable, "-m", "harness_magic.evals", "list", str(suite)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "keywords" in listed.stdout
    without = subprocess.run([sys.executable, "-m", "harness_magic.evals", "list", str(suite)],
                             env={k: v for k, v in env.items() if k != "PYTHONPATH"}, capture_output=True,
                             text=True, timeout=120)
    assert without.returncode == 2 and "unknown grader 'keywords'; allowed: chart, choice" in without.stderr
