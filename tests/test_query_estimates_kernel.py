"""Query and write budgets in a real kernel: ``%config`` settings, the ``%%agent`` flags that override them for one
cell (``--max-query-rows``, ``--max-query-cost``, ``--max-write-operations``), their one-line usage errors, and
``%agent_status`` listing them."""

from __future__ import annotations

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

from kernel_helpers import Kernel, agent_kernel, answer, script, usage_error  # noqa: E402

pytestmark = pytest.mark.kernel

COUNT_SQL = "SELECT count(*) AS n FROM range(5000)"
"""DuckDB estimates 5,000 rows for it before it runs."""
APPROVAL_WAIT_S = 1.0


def magics_expr(attribute: str) -> str:
    return f"get_ipython().magics_manager.registry['AgentMagics'].{attribute}"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    # the notebook asks about a read over budget in the cell; nobody answers here, so the approval is withdrawn
    # after APPROVAL_WAIT_S and the read refused
    with agent_kernel(tmp_path_factory.mktemp("kernel"), run_dir="runs", model="offline/quickstart",
                      connectors=[{"type": "duckdb"}], question_timeout_s=APPROVAL_WAIT_S) as k:
        yield k


def count_turns() -> list[dict]:
    return [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]},
            {"tool_calls": [{"name": "duckdb__query", "arguments": {"sql": COUNT_SQL}}]}, answer("counted")]


def last_tool_result(kernel: Kernel) -> list:
    return kernel.value("[[b.is_error, b.content] for m in _.messages for b in m.content "
                        "if getattr(b, 'type', '') == 'tool_result'][-1]")


def test_the_cell_flag_refuses_a_query_its_estimate_puts_over_the_budget_for_that_cell_only(kernel: Kernel) -> None:
    cell = kernel.run(f"%%agent --max-query-rows 1000 {script(kernel, *count_turns())}\nCount.")
    assert cell.ok, cell.outputs
    is_error, content = last_tool_result(kernel)
    assert is_error and "rows ≈ 5,000 over max_query_rows=1,000" in content and "No row was read" in content
    assert f"nobody approved it within {APPROVAL_WAIT_S:g} s" in content  # the cell asked; nobody answered
    assert kernel.value(magics_expr("session.budget_guard.budgets.max_query_rows")) is None  # that cell only
    cell = kernel.run(f"%%agent {script(kernel, *count_turns())}\nCount again.")
    assert cell.ok, cell.outputs
    is_error, content = last_tool_result(kernel)
    assert not is_error and "Estimate" not in content  # no query budget: nothing estimated


def test_the_settings_apply_to_every_run_and_a_flag_overrides_them(kernel: Kernel) -> None:
    assert kernel.run("%config AgentMagics.max_query_rows = 1000").ok
    try:
        assert kernel.run(f"%%agent {script(kernel, *count_turns())}\nCount.").ok
        assert last_tool_result(kernel)[0]
        assert kernel.run(f"%%agent --max-query-rows 100000 {script(kernel, *count_turns())}\nCount.").ok
        is_error, content = last_tool_result(kernel)
        assert not is_error and "Estimate (duckdb plan, before running): rows ≈ 5,000" in content
    finally:
        assert kernel.run("%config AgentMagics.max_query_rows = None").ok


def test_agent_status_lists_the_query_and_write_budgets(kernel: Kernel) -> None:
    setup = kernel.run("%config AgentMagics.max_query_cost = 250.5\n%config AgentMagics.max_write_operations = 0")
    assert setup.ok, setup.outputs
    try:
        cell = kernel.run("%agent_status")
        assert cell.ok, cell.outputs
        lines = {line[:11].strip(): line[11:].strip() for line in cell.data("text/plain")[0].splitlines()}
        assert "query rows ∞" in lines["budgets"] and "query cost 250.5" in lines["budgets"]
        assert "writes 0" in lines["budgets"]
    finally:
        kernel.run("%config AgentMagics.max_query_cost = None\n%config AgentMagics.max_write_operations = None")


@pytest.mark.parametrize("code, expected", [
    ("%%agent --max-query-rows 0\nHi", "--max-query-rows must be positive or None, got 0"),
    ("%%agent --max-query-cost -1\nHi", "--max-query-cost must be positive or None, got -1.0"),
    ("%%agent --max-write-operations -1\nHi", "--max-write-operations must be 0 or more or None, got -1"),
    ("%config AgentMagics.max_query_cost = float('nan')", "max_query_cost must be positive or None, got nan"),
])
def test_bad_query_and_write_budgets_are_one_line_usage_errors(kernel: Kernel, code: str, expected: str) -> None:
    assert expected in usage_error(kernel.run(code))
