"""DuckDB in a real kernel: the stop button interrupts a running query.

A KeyboardInterrupt in the kernel reaches the waiting thread at once, DuckDB's
``interrupt()`` stops the statement, the tool call is answered as interrupted,
the run ends ``interrupted``, and the same connector answers the next query.
"""

from __future__ import annotations

import re
import textwrap
import time

import pytest

pytest.importorskip("jupyter_client")

from kernel_helpers import Kernel, agent_kernel, answer, script  # noqa: E402

pytestmark = pytest.mark.kernel

LONG_SQL = ("SELECT count(*) AS n FROM range(1000000) a, range(1000000) b "
            "WHERE (a.range * 7 + b.range) % 1000003 = 5")
"""10^12 pairs: hours on two cores, so only an interrupt ends it within the test."""


def query(sql: str, name: str | None = None) -> dict:
    arguments = {"sql": sql} | ({"name": name} if name else {})
    return {"text": "", "tool_calls": [{"name": "duckdb__query", "arguments": arguments}]}


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("duckdb_kernel"), run_dir="runs", sandbox="inprocess",
                      connectors=[{"type": "duckdb", "files": {}}]) as k:
        yield k


def test_the_stop_button_interrupts_a_running_duckdb_query_and_the_next_query_works(kernel: Kernel) -> None:
    load = {"text": "", "tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]}
    model = script(kernel, load, query(LONG_SQL, "pairs"), answer("Should not be reached."))
    cell = kernel.run(f"%%agent --reset {model}\nCount the pairs.", wait=False)
    kernel.wait_for(cell, "1000003")  # the live view shows the query's SQL: the kernel is in its call
    started = time.monotonic()
    kernel.km.interrupt_kernel()
    kernel.collect(cell, timeout=30)
    assert time.monotonic() - started < 15, "the query stopped at the interrupt, not when it finished"
    html = cell.result["text/html"]
    assert "interrupted" in html and "duckdb__query" in html
    assert kernel.value("[_.status, list(_.handles)]") == ["interrupted", []]
    magics = "get_ipython().magics_manager.registry['AgentMagics']"
    last = kernel.value(f"[(r.is_error, r.content) for r in {magics}.session.harness.messages[-1].tool_results]")
    assert len(last) == 1 and last[0][0] is True and last[0][1].startswith("Interrupted by the user")
    assert kernel.value(f"{magics}.session.cache.names()") == []
    # the statement is gone: no DuckDB thread keeps running in the kernel
    threads = kernel.value("[t.name for t in __import__('threading').enumerate()]")
    assert not [t for t in threads if t.startswith("duckdb-")], threads
    after = kernel.run("print(6 * 7)")
    assert after.ok and after.stdout.strip() == "42"
    again = script(kernel, load, query("SELECT 6 * 7 AS answer", "answer"), answer("It is 42."))
    cell = kernel.run(f"%%agent {again}\nAnd now?")
    assert cell.ok, cell.outputs
    assert kernel.value("_.status") == "completed"
    assert kernel.value(f"{magics}.session.cache.get('answer').answer.tolist()") == [42]
    assert re.search(r"It is 42", cell.result["text/html"])
