"""The knowledge plane in a real kernel: docs and glossary connectors from configuration,
a scripted model that searches, reads and answers with citations, the verifier catching a
fabricated citation, citations rendered as links to their snippets, and ``%agent_docs``.
"""

from __future__ import annotations

import html
import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from kernel_helpers import Kernel, agent_kernel, answer, usage_error  # noqa: E402

pytestmark = pytest.mark.kernel

CORPUS = Path(__file__).parent / "knowledge_corpus"


def calls(*pairs: tuple[str, dict]) -> dict:
    return {"text": "", "tool_calls": [{"name": n, "arguments": a} for n, a in pairs]}


def script(kernel: Kernel, name: str, *turns: dict) -> str:
    (kernel.cwd / name).write_text(json.dumps({"turns": list(turns)}))
    return f"-m scripted/{name}"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    roots = [str(CORPUS / d) for d in ("docs", "runbooks", "policies")]
    connectors = [{"type": "docs", "roots": roots}, {"type": "glossary", "files": [str(CORPUS / "definitions.yaml")]}]
    with agent_kernel(tmp_path_factory.mktemp("knowledge"), model="offline/quickstart", sandbox="inprocess",
                      connectors=connectors) as k:
        yield k


def test_scripted_model_searches_reads_and_answers_with_citations(kernel: Kernel) -> None:
    model = script(
        kernel, "cited.json",
        calls(("load_connectors", {"connector_name": "docs"}), ("load_connectors", {"connector_name": "glossary"})),
        calls(("docs__search", {"query": "refund partner share clawback", "k": 3})),
        calls(("docs__read", {"source_id": "doc:runbooks/refunds.md#partner-share"})),
        calls(("glossary__lookup", {"term": "net sales"})),
        answer("Net revenue is gross revenue minus refunds minus the partner share [term:net_revenue], "
               "owned by the Finance Data team [owner:finance-data]. A refund claws the partner share back "
               "[doc:runbooks/refunds.md#partner-share]."),
    )
    cell = kernel.run(f"%%agent --new {model}\nHow is net revenue defined and who owns it?")
    assert cell.ok, cell.outputs
    assert kernel.value("_.status") == "completed"
    checks = kernel.value("[(o.rule, o.ok) for o in get_ipython().magics_manager.registry['AgentMagics']"
                          ".session.verifier.history if o.handle == 'final_answer']")
    assert checks[-4:] == [["cited_source_retrieved", True]] * 3 + [["definition_consistent", True]]
    final = cell.result["text/html"]
    assert '<a class="hm-cite" href="#hm-src-3"' in final
    assert "<summary><code>[doc:runbooks/refunds.md#partner-share]</code> Refunds &gt; Partner share</summary>" in final
    assert html.escape("the partner share paid for it is clawed back") in final
    assert "Citation check failed" not in final


def test_fabricated_citation_is_caught_by_the_verifier(kernel: Kernel) -> None:
    model = script(
        kernel, "fabricated.json",
        calls(("load_connectors", {"connector_name": "docs"})),
        calls(("docs__search", {"query": "refund approval limit", "k": 2})),
        answer("Agents approve refunds up to 200 EUR [doc:runbooks/refunds.md#who-can-approve-a-refund]; "
               "the CFO approves the rest [doc:policies/cfo_powers.md#refunds]."),
    )
    cell = kernel.run(f"%%agent --new {model}\nWho approves refunds?")
    assert cell.ok, cell.outputs
    final = cell.result["text/html"]
    assert "Citation check failed: [doc:policies/cfo_powers.md#refunds] was cited but no tool returned it" in final
    assert "hm-cite-missing" in final
    failed = kernel.value("[o.detail for o in get_ipython().magics_manager.registry['AgentMagics']"
                          ".session.verifier.history if not o.ok]")
    assert failed == ["[doc:policies/cfo_powers.md#refunds] was cited but no tool returned it in this run"]
    log = kernel.value("_.run_file")
    records = [json.loads(line) for line in Path(kernel.cwd, log).read_text().splitlines()]
    verdicts = [r for r in records if r.get("name") == "verification"]
    assert verdicts and verdicts[-1]["passed"] is False and verdicts[-1]["tool"] == "final_answer"


def test_agent_docs_lists_the_index_and_runs_a_query(kernel: Kernel) -> None:
    listing = kernel.run("%agent_docs")
    assert listing.ok, listing.outputs
    text = listing.data("text/plain")[0]
    assert "docs: 41 files, " in text and "last update 20" in text
    assert "runbooks/refunds.md" in text
    assert "glossary: 15 terms" in text and "5 owners" in text
    query = kernel.run("%agent_docs -k 2 partner share refunded order")
    plain = query.data("text/plain")[0]
    assert plain.startswith("Search: partner share refunded order")
    assert "[doc:runbooks/refunds.md#partner-share] Refunds > Partner share" in plain
    assert "<table>" in query.data("text/html")[0]


@pytest.mark.parametrize("line, message", [
    ("%agent_docs -k 50 refunds", "k must be an integer from 1 to 10"),
    ("%agent_docs --connector nope", "no connector 'nope'"),
])
def test_agent_docs_bad_input_is_a_one_line_usage_error(kernel: Kernel, line: str, message: str) -> None:
    assert message in usage_error(kernel.run(line))
