"""A dbt project in a real kernel: a model served over HTTP (tests/scripted_server.py, behind litellm) loads the
``dbt`` connector from ``AgentMagics.connectors``, reads a metric's definition, a model's column descriptions and
a column's lineage, and answers with ``[dbt:...]`` citations that the verifier checks and the answer links to;
``%agent_docs`` lists and searches the project for the user.

The project is the shop project dbt builds during the test run (tests/dbt_project.py), shared with test_dbt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from dbt_project import build_shop_project  # noqa: E402
from kernel_helpers import agent_kernel  # noqa: E402

pytestmark = pytest.mark.kernel

ANSWER = ("Revenue is the sum of completed order amounts in euros [dbt:metric.shop.revenue], owned by finance-data. "
          "The amount column is the order amount in euros before refunds [dbt:model.shop.orders]; changing it "
          "changes customer_revenue.revenue [dbt:model.shop.customer_revenue] and the revenue dashboard "
          "[dbt:exposure.shop.revenue_dashboard].")
VERIFIER_HISTORY = ("[(o.rule, o.ok, o.detail) for o in get_ipython().magics_manager.registry['AgentMagics']"
                    ".session.verifier.history if o.handle == 'final_answer']")


@pytest.fixture(scope="module")
def shop(run_tmp: Path) -> Path:
    return build_shop_project(run_tmp / "dbt_shop")  # built once per run, whichever worker comes first


def calls(tool: str, **arguments) -> dict:
    return {"text": "", "tool_calls": [{"name": tool, "arguments": arguments}]}


def tool_results(request: dict) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in request["messages"] if m.get("role") == "tool"]


def test_a_metric_definition_column_descriptions_and_lineage_answer_with_citations(server, shop: Path,
                                                                                   tmp_path: Path) -> None:
    server.replies = [
        calls("load_connectors", connector_name="dbt"),
        calls("dbt__lookup", name="revenue"),
        calls("dbt__lookup", name="model.shop.orders"),
        calls("dbt__lineage", node="orders", column="amount", direction="downstream"),
        {"text": ANSWER},
        calls("dbt__search", query="margin"),
        {"text": "Margin is revenue less costs [dbt:metric.shop.margin]."},
    ]
    with agent_kernel(tmp_path, sandbox="inprocess", api_base=server.api_base, model="openai/test-model",
                      connectors=[{"type": "dbt", "project": str(shop)}]) as kernel:
        cell = kernel.run("%%agent\nHow is revenue defined, what is the amount column, and what reads it?")
        assert cell.ok, cell.outputs
        assert kernel.value("_.status") == "completed"
        checks = kernel.value(VERIFIER_HISTORY)
        assert [(rule, ok) for rule, ok, _ in checks] == [("cited_source_retrieved", True)] * 4
        final = cell.result["text/html"]
        assert "Citation check failed" not in final
        assert "<summary><code>[dbt:metric.shop.revenue]</code> revenue (metric)</summary>" in final
        assert "<summary><code>[dbt:exposure.shop.revenue_dashboard]</code>" in final
        assert '<a class="hm-cite" href="#hm-src-1"' in final

        listing = kernel.run("%agent_docs").data("text/plain")[0]
        assert (f"dbt: shop (dbt 1.11.16, duckdb): 5 models, 2 sources, 2 seeds, 3 metrics, 1 semantic model, "
                f"1 exposure, from {shop / 'target' / 'manifest.json'}") in listing
        search = kernel.run("%agent_docs average order value").data("text/plain")[0]
        assert ('[dbt:metric.shop.average_order_value] average_order_value "Average order value" (metric): '
                "Revenue divided by completed orders.") in search

        fabricated = kernel.run("%%agent\nAnd margin?")
        assert fabricated.ok, fabricated.outputs
        assert ("Citation check failed: [dbt:metric.shop.margin] was cited but no tool returned it"
                in fabricated.result["text/html"])

    seen = tool_results(server.requests[4])  # what the model had read when it answered
    assert seen[1].startswith("[dbt:metric.shop.revenue] revenue (metric)")
    assert "Definition: sum(amount), measure order_total of semantic model orders" in seen[1]
    assert "Filter: {{ Dimension('order__status') }} = 'completed'" in seen[1] and "Owner: finance-data" in seen[1]
    assert "- amount DOUBLE: Order amount in euros, before refunds." in seen[2]
    assert seen[3].startswith("Column lineage of orders.amount [dbt:model.shop.orders]")
    assert "- customer_revenue.revenue [dbt:model.shop.customer_revenue]" in seen[3]
    assert "  - revenue (metric) [dbt:metric.shop.revenue] — uses measure order_total" in seen[3]
