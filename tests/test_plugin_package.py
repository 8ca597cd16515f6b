"""An outside package's plugins in a real kernel (issue 33, point 5).

``tests/plugin_example`` (a connector type, a tool, a grader and a skill, declared by entry points in its
own ``pyproject.toml``) is installed into a site directory on the kernel's ``PYTHONPATH``, beside a broken
package whose connector type fails to import. The kernel then uses the example's connector type from
``%config AgentMagics.connectors`` and its tool in a run, its skill through ``%agent_skills``, its grader
through ``%agent_eval``; ``%agent_status`` names the broken plugin, and the built-ins still work.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("jupyter_client")

from plugin_site import EXAMPLE_TASK, install_distribution, install_example  # noqa: E402
from kernel_helpers import Kernel, agent_kernel, answer, script, usage_error  # noqa: E402

pytestmark = pytest.mark.kernel

MAGICS = "get_ipython().magics_manager.registry['AgentMagics']"
BROKEN = "harness-magic-broken-plugin"


def call(name: str, **arguments: object) -> dict:
    return {"text": "", "tool_calls": [{"name": name, "arguments": arguments}]}


@contextmanager
def python_path(site: Path) -> Iterator[None]:
    """``site`` first on ``PYTHONPATH`` while a kernel starts (the kernel inherits this process's environment)."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), before) if p)
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    site = tmp_path_factory.mktemp("site")
    install_example(site)
    install_distribution(site, BROKEN, {"harness_magic.connectors": {"warehouse_x": "plugin_warehouse_x:make"}},
                         {"plugin_warehouse_x.py": "import a_driver_that_is_not_installed\n"})
    cwd = tmp_path_factory.mktemp("plugin_kernel")
    (cwd / "data").mkdir()
    (cwd / "data" / "months.csv").write_text("month,revenue\n4,10\n5,12\n")
    connectors = [{"type": "facts", "facts": {"fiscal_year_start": "April"}},
                  {"type": "files", "roots": [str(cwd / "data")]}]
    with ExitStack() as stack:
        with python_path(site):
            k = stack.enter_context(agent_kernel(cwd, run_dir="runs", sandbox="inprocess", connectors=connectors))
        k.connectors = connectors
        yield k


def test_the_plugin_connector_type_and_tool_serve_a_run_beside_a_built_in_connector(kernel: Kernel) -> None:
    model = script(kernel, call("load_connectors", connector_name="facts"),
                   call("facts__lookup", key="fiscal_year_start"), call("fiscal_quarter", month=5),
                   call("load_connectors", connector_name="files"), call("files__list"),
                   answer("The fiscal year starts in April; May is in Q1."))
    cell = kernel.run(f"%%agent --reset {model}\nWhen does the fiscal year start, and which quarter is May in?")
    assert cell.ok, cell.outputs
    assert kernel.value("_.status") == "completed"
    results = kernel.value(f"[(r.is_error, r.content) for m in {MAGICS}.session.harness.messages "
                           "for r in (m.tool_results or [])]")
    contents = [content for _, content in results]
    assert not any(error for error, _ in results), results
    assert "April" in contents[1] and "Q1" in contents[2] and "months.csv" in contents[4]
    tools = kernel.value(f"[t.name for t in {MAGICS}.session.harness.tools]")
    assert "fiscal_quarter" in tools and "python_interpreter" in tools and "facts__lookup" in tools


def test_the_plugin_skill_is_listed_and_shown_by_agent_skills(kernel: Kernel) -> None:
    listing = kernel.run("%agent_skills")
    assert listing.ok, listing.outputs
    text = listing.data("text/plain")[0]
    line = next(line for line in text.splitlines() if "fiscal-quarter-report" in line)
    assert f"plugin harness-magic-example-plugin" in line and "fiscal quarter" in line
    assert "kpi-discrepancy" in text and "built-in" in text  # the built-in skills are still there
    shown = kernel.run("%agent_skills fiscal-quarter-report")
    assert shown.ok, shown.outputs
    assert "Map each month to its quarter with `fiscal_quarter`" in shown.data("text/plain")[0]


def test_the_plugin_grader_grades_an_eval_suite(kernel: Kernel) -> None:
    suite = kernel.cwd / "plugin_suite"
    suite.mkdir()
    (suite / "fiscal_year_start.yaml").write_text(EXAMPLE_TASK)
    for model, passed in (("suite:reference", True), ("suite:wrong", False)):
        out = f"{model.split(':')[1]}.json"
        cell = kernel.run(f"%agent_eval {suite} -m {model} --out {out}")
        assert cell.ok, cell.outputs
        (result,) = json.loads((kernel.cwd / out).read_text())["results"]
        assert result["passed"] is passed, result
        (grade,) = result["grades"]
        assert grade["kind"] == "keywords"
        assert grade["detail"] == ("names April" if passed else "the answer does not name April")


def test_agent_status_names_the_broken_plugin_and_the_built_ins_still_work(kernel: Kernel) -> None:
    cell = kernel.run("%agent_status")
    assert cell.ok, cell.outputs
    lines = cell.data("text/plain")[0].splitlines()
    plugins = next(line for line in lines if line.startswith("plugins"))
    assert "9 connector types" in plugins and "1 tools" in plugins and "12 grader kinds" in plugins
    assert "harness-magic-example-plugin" in plugins
    broken = [line for line in lines if line.startswith("broken")]
    print("\n".join([plugins, *broken]), file=sys.stderr)
    assert len(broken) == 1, lines
    assert (f"warehouse_x (harness_magic.connectors, from {BROKEN}): ModuleNotFoundError: No module named "
            "'a_driver_that_is_not_installed'") in broken[0]
    assert kernel.run('%config AgentMagics.connectors = [{"type": "warehouse_x"}]').ok  # applied on next use
    refused = usage_error(kernel.run("%agent_status"))
    assert "connector type 'warehouse_x' failed to load" in refused and "a_driver_that_is_not_installed" in refused
    assert kernel.run(f"%config AgentMagics.connectors = {kernel.connectors!r}").ok
    again = kernel.run("%agent_status")
    assert again.ok, again.outputs
    row = next(line for line in again.data("text/plain")[0].splitlines() if line.startswith("connectors"))
    assert "facts (1 tool" in row and "files (" in row
