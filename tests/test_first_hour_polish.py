"""The small things an analyst notices in the first hour (issue 27 point 7), each through the real thing:
snapshots and people's tables keep the column-axis name and show dates as dates; a trailing expression
gets no second handle for a value the code saved and an auto name that says where it came from (in the
sandbox worker and in process); ``%agent_vars`` text reads from the left; a harness reminder says what it
is; docs snippets carry no ``##`` markup repeating the breadcrumb; counts agree with their number; the
terminal keeps a Markdown image's alt text where it stood. A real kernel runs the magics end to end.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from harness_magic.core import export
from harness_magic.core.cache import SessionCache, make_snapshot
from harness_magic.core.execution.connectors.docs.connector import docs_connector
from harness_magic.core.execution.interpreter import trailing_value_name
from harness_magic.core.text.counts import count
from harness_magic.core.text.snapshot_view import snapshot_html, snapshot_rich, snapshot_text
from harness_magic.core.text.snippets import section_text, snippet_line
from harness_magic.notebook.tables import HANDLE_COLUMNS, table_html, table_text

CORPUS = Path(__file__).parent / "knowledge_corpus"


def _pivot() -> pd.DataFrame:
    sales = pd.DataFrame({"region": ["eu", "us", "eu"], "month": ["jan", "jan", "feb"], "units": [1, 2, 3]})
    return sales.pivot_table(index="region", columns="month", values="units", aggfunc="sum")


def _rich_text(renderable) -> str:
    from rich.console import Console

    screen = io.StringIO()
    Console(file=screen, width=120, color_system=None).print(renderable)
    return screen.getvalue()


# -- a. the column-axis name ---------------------------------------------------------------------------


def test_the_model_snapshot_keeps_the_column_axis_name() -> None:
    snap = make_snapshot(_pivot())
    assert snap["column_index"]["name"] == "month" and snap["index"]["name"] == "region"


def test_peoples_tables_show_the_column_axis_name_above_the_index_names() -> None:
    snap = make_snapshot(_pivot())
    lines = snapshot_text("by_month", snap).splitlines()
    assert lines[1].split() == ["month", "feb", "jan"]  # the axis name in the header's corner, as pandas
    assert lines[2].strip() == "region"  # the index name on a row of its own
    page = snapshot_html("by_month", snap)
    assert re.search(r'<th class="agent-axis-name"[^>]*>month</th>', page)
    assert '<tr class="agent-index-names"><th' in page and ">region</th>" in page
    printed = _rich_text(snapshot_rich("by_month", snap))
    assert re.search(r"^\s*month\s.*feb.*jan", printed, re.M) and re.search(r"^\s*region\s", printed, re.M)


def test_unnamed_columns_keep_the_index_name_in_the_corner() -> None:
    frame = pd.DataFrame({"units": [1, 2]}, index=pd.Index(["eu", "us"], name="region"))
    lines = snapshot_text("f", make_snapshot(frame)).splitlines()
    assert lines[1].split() == ["region", "units"] and "agent-index-names" not in snapshot_html("f", make_snapshot(frame))


def test_multi_level_columns_name_each_level() -> None:
    columns = pd.MultiIndex.from_product([["sales", "cost"], ["q1", "q2"]], names=["metric", "quarter"])
    rows = pd.MultiIndex.from_tuples([("eu", 1), ("us", 2)], names=["region", "store"])
    frame = pd.DataFrame([[1, 2, 3, 4], [5, 6, 7, 8]], index=rows, columns=columns)
    lines = snapshot_text("f", make_snapshot(frame)).splitlines()
    assert lines[1].split()[:2] == ["metric", "sales"] and lines[2].split()[:2] == ["quarter", "q1"]
    assert lines[3].split() == ["region", "store"]


# -- b. dates ------------------------------------------------------------------------------------------


def test_midnight_dates_show_as_dates_in_the_snapshot_and_the_table() -> None:
    frame = pd.DataFrame({"units": [3, 4]}, index=pd.to_datetime(["2023-01-01", "2023-01-02"]).rename("day"))
    snap = make_snapshot(frame)
    assert snap["index"]["head"] == ["2023-01-01", "2023-01-02"]
    text = snapshot_text("daily", snap)
    assert "2023-01-01 " in text and "T00:00:00" not in text and "00:00" not in text


def test_times_show_compactly_to_the_unit_they_need() -> None:
    minutes = pd.Series(pd.to_datetime(["2023-01-01 09:30", "2023-01-02 00:00"], format="ISO8601"))
    assert make_snapshot(minutes)["sample"] == ["2023-01-01 09:30", "2023-01-02 00:00"]
    seconds = pd.Series(pd.to_datetime(["2023-01-01 09:30:05", "2023-01-02"], format="ISO8601"))
    assert make_snapshot(seconds)["sample"] == ["2023-01-01 09:30:05", "2023-01-02 00:00:00"]
    fraction = pd.Series(pd.to_datetime(["2023-01-01 09:30:05.250"]))
    assert make_snapshot(fraction)["sample"] == ["2023-01-01 09:30:05.250"]
    aware = pd.Series(pd.date_range("2024-01-01", periods=1, tz="UTC"))
    assert make_snapshot(aware)["sample"] == ["2024-01-01 00:00+00:00"]  # an aware midnight keeps its offset
    frame = pd.DataFrame({"when": pd.to_datetime(["2023-01-01 09:30", None])})
    assert make_snapshot(frame)["sample"] == [{"when": "2023-01-01 09:30"}, {"when": None}]


def test_the_cache_keeps_the_exact_timestamps() -> None:
    stamps = pd.to_datetime(["2023-01-01 00:00:00.000000001", "2023-01-02"], format="ISO8601")
    cache = SessionCache()
    handle = cache.put("t", pd.Series([1, 2], index=stamps))
    assert list(cache.get(handle).index) == list(stamps)
    assert cache.snapshot(handle)["index"]["head"][0] == "2023-01-01 00:00:00.000000001"


# -- c. trailing expressions ---------------------------------------------------------------------------


def test_a_trailing_expression_is_named_after_what_it_computes() -> None:
    assert trailing_value_name("summary = sales.sum()\nsummary", ["sales"]) == "summary"
    assert trailing_value_name("sales.groupby('region').sum()", ["sales"]) == "sales_sum"
    assert trailing_value_name("sales['amount']", ["sales"]) == "sales_amount"
    assert trailing_value_name("import pandas as pd\npd.DataFrame({'a': [1]})", [], 4) == "result_t4"


def _session(tmp_path, turns, sandbox="inprocess", **config):
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox=sandbox, **config),
                           adapter=ProviderAdapter("scripted/t", transport=ScriptedModel(turns)))
    recorder = export.RunRecorder()
    session.subscribe(recorder)
    return session, recorder


def _code(code: str) -> dict:
    return {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}


@pytest.mark.parametrize("sandbox", ["inprocess", "worker"])
def test_no_second_handle_for_a_value_the_code_saved_or_read(tmp_path, sandbox) -> None:
    if sandbox == "worker":
        from harness_magic.core.execution.sandbox import probe_confinement

        if not probe_confinement()["confined"]:
            pytest.skip("the sandbox worker does not confine on this machine")
    make = "import pandas as pd\nsales = pd.DataFrame({'region': ['eu', 'us'], 'units': [3, 4]})\n"
    session, recorder = _session(tmp_path, [
        _code(make + "save('sales', sales)\nsales"),                   # saved, then shown: one handle
        _code("sales"),                                                # a handle read back unchanged
        _code("by_region = sales.groupby('region').units.sum()\nby_region"),
        _code("sales.describe()"),
        _code("import pandas as pd\npd.Series([1.5, 2.5])"),
        {"text": "done"},
    ], sandbox)
    try:
        result = session.ask("go")
        assert result.status == "completed", result.error
        assert sorted(session.cache.names()) == ["by_region", "result_t5", "sales", "sales_describe"]
    finally:
        session.close()
    tools = recorder.current.tools
    assert "Value: `sales` (saved above)" in tools[0].result and tools[0].result.count("Saved as") == 1
    assert export.display_result_text(tools[0]).count("sales") <= 1  # people read the handle once
    assert tools[1].result.startswith("Value: `sales` (the handle, unchanged; no new handle)\nSnapshot: {")
    assert '"columns"' in tools[1].result and "units" in tools[1].result, "the look the model asked for"
    assert tools[2].result.startswith("Saved as `by_region`\n")


# -- d. tables for people ------------------------------------------------------------------------------


def test_handle_tables_read_text_from_the_left_and_numbers_from_the_right() -> None:
    rows = [{"name": "sales", "type": "DataFrame", "shape": "10×2", "size": "1.2 KB", "where": "memory",
             "run": "abc", "turn": 1, "tool": "python_interpreter"},
            {"name": "by_region_long_name", "type": "Series", "shape": "2", "size": "80 B", "where": "memory",
             "run": "abc", "turn": 12, "tool": ""}]
    page = table_html(rows, HANDLE_COLUMNS)
    assert re.search(r'<td style="text-align:left[^"]*">sales</td>', page)
    assert re.search(r'<td style="text-align:right[^"]*">12</td>', page)
    assert re.search(r'<th style="text-align:left[^"]*">name</th>', page)
    lines = table_text(rows, HANDLE_COLUMNS).splitlines()
    assert lines[1].startswith("sales ") and lines[2].startswith("by_region_long_name")
    turn_end = lines[0].index("turn") + len("turn")
    assert lines[1][turn_end - 1] == "1" and lines[2][turn_end - 2 : turn_end] == "12"


# -- e. harness reminders ------------------------------------------------------------------------------


def test_a_reminder_in_the_transcript_says_what_it_is(tmp_path) -> None:
    session, recorder = _session(tmp_path, [_code("1 + 1"), {"text": "2"}], max_turns=2)
    try:
        session.ask("add")
    finally:
        session.close()
    page = export.render_answer_html(recorder.current)
    summary = re.search(r'<details class="agent-model-saw agent-reminder"[^>]*><summary>([^<]*)</summary>', page)
    assert summary and summary.group(1).startswith("harness note to the model: This is the final turn (2/2)")
    assert "[harness reminder]" not in summary.group(1)
    assert "neither you nor the model wrote it" in page
    assert "what the model saw: harness reminder" not in page


# -- f. docs snippets ----------------------------------------------------------------------------------


def test_snippets_drop_the_heading_the_breadcrumb_already_shows() -> None:
    assert snippet_line("## Pitfalls Refunded orders claw back", ("Partner share", "Pitfalls")) == \
        "Refunded orders claw back"
    assert snippet_line("… see ### Notes below, issue #42 in C# code", ("X",)) == \
        "… see Notes below, issue #42 in C# code"
    assert section_text("## Pitfalls\n\nRefunded orders.\n\n### Detail\nmore", ("Partner share", "Pitfalls")) == \
        "Refunded orders.\n\n### Detail\nmore"
    assert section_text("Partner share starts a sentence", ("Partner share",)) == "Partner share starts a sentence"


def test_docs_search_results_carry_no_heading_markup(tmp_path) -> None:
    connector = docs_connector([CORPUS], index_path=tmp_path / "index.sqlite")
    hits = connector.search("refund partner share", 5)
    assert hits and any(h.snippet.startswith("#") for h in hits)  # the raw snippets do start with headings
    calls = {"text": "", "tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "docs"}}]}
    search = {"text": "", "tool_calls": [{"name": "docs__search",
                                          "arguments": {"query": "refund partner share", "k": 5}}]}
    session, recorder = _session(tmp_path, [calls, search, {"text": "done"}])
    session.add_connector(connector)
    try:
        assert session.ask("refunds?").status == "completed"
    finally:
        session.close()
    text = recorder.current.tools[-1].result
    titled = [line for line in text.splitlines() if re.match(r"\d+\. \[doc:", line)]
    snippets = [line for line in text.splitlines() if line.startswith("   ")]
    assert len(titled) == len(snippets) == len(hits)
    assert all(not s.strip().startswith("#") and " ## " not in s for s in snippets), snippets
    assert "Refunds > Partner share" in text  # the trail, once, as the breadcrumb


# -- g. counts -----------------------------------------------------------------------------------------


def test_counts_agree_with_their_number() -> None:
    assert [count(0, "chunk"), count(1, "chunk"), count(2, "chunk"), count(1_204, "row")] == \
        ["0 chunks", "1 chunk", "2 chunks", "1,204 rows"]
    assert count(1, "entry") == "1 entry" and count(3, "entry") == "3 entries"
    assert count(2, "more file") == "2 more files"


def test_a_reindex_report_counts_one_file_and_one_chunk_in_the_singular(tmp_path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "refunds.md").write_text("# Refunds\n\nApproved within 5 days.\n")
    connector = docs_connector([docs], index_path=tmp_path / "index.sqlite")
    (docs / "refunds.md").write_text("# Refunds\n\nApproved within 3 days.\n")
    report = connector.refresh()
    assert report.changed and report.summary().startswith("1 file, 1 chunk; updated 1: "), report.summary()


def test_snapshot_notes_count_one_row_as_a_row() -> None:
    frame = pd.DataFrame({"a": range(6)})
    assert "+1 more row" in snapshot_text("f", make_snapshot(frame)).splitlines()[-1]
    assert not snapshot_text("f", make_snapshot(frame)).endswith("rows")


# -- h. images in the terminal -------------------------------------------------------------------------


def test_the_terminal_keeps_an_images_alt_text_in_place() -> None:
    from harness_magic.notebook.render.terminal import terminal_markdown

    printed = _rich_text(terminal_markdown("See ![revenue by month](https://x.example/c.png) for the trend."))
    assert "See [image: revenue by month — https://x.example/c.png] for the trend." in " ".join(printed.split())
    inline = _rich_text(terminal_markdown("Chart: ![trend](data:image/png;base64,AAAA) above."))
    assert "Chart: [image: trend] above." in " ".join(inline.split()) and "base64" not in inline


# -- through a real kernel -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("jupyter_client")
    from kernel_helpers import agent_kernel

    cwd = tmp_path_factory.mktemp("polish")
    docs = cwd / "docs"
    docs.mkdir()
    (docs / "refunds.md").write_text("# Refunds\n\nRefunds are approved by the finance team within 5 days.\n")
    with agent_kernel(cwd, sandbox="inprocess", connectors=[{"type": "docs", "roots": [str(docs)]}]) as k:
        yield k


@pytest.mark.kernel
def test_in_a_kernel_tables_dates_handles_and_counts_read_right(kernel) -> None:
    make = ("import pandas as pd\n"
            "daily = pd.DataFrame({'region': ['eu', 'us', 'eu'], 'day': pd.to_datetime(['2023-01-01', "
            "'2023-01-01', '2023-01-02']), 'units': [1, 2, 3]}).pivot_table(index='day', columns='region', "
            "values='units', aggfunc='sum')\nsave('daily', daily)\ndaily")
    (kernel.cwd / "polish.json").write_text(json.dumps({"turns": [_code(make), {"text": "Saved `daily`."}]}))
    cell = kernel.run("%%agent --new -m scripted/polish.json\nDaily units by region")
    assert cell.ok, cell.outputs
    final = cell.data("text/html")[-1]
    assert re.search(r'<th class="agent-axis-name"[^>]*>region</th>', final)
    assert ">2023-01-01</th>" in final and "T00:00:00" not in final
    assert kernel.value("sorted(get_ipython().magics_manager.registry['AgentMagics'].session.cache.names())") \
        == ["daily"]
    listing = kernel.run("%agent_vars")
    html_table = listing.data("text/html")[-1]
    assert re.search(r'<td style="text-align:left[^"]*">daily</td>', html_table)
    docs = kernel.run("%agent_docs")
    assert docs.ok, docs.outputs
    plain = docs.result["text/plain"]
    assert "docs: 1 file, 1 chunk," in plain and "1 chunks" not in plain and "1 files" not in plain
    found = kernel.run("%agent_docs refunds approved")
    assert found.ok and "# Refunds" not in found.result["text/plain"]
    assert "Refunds are approved by the finance team" in found.result["text/plain"]


def test_a_notice_of_a_run_without_tool_calls_stays_in_the_final_form() -> None:
    from harness_magic.core.agent.result import RunResult
    from harness_magic.core.export.record import RunRecord

    record = RunRecord(run_id="r1", model="openai/local")
    record.items.append(("notice", "info", "api_base is set and OPENAI_API_KEY is not: a <placeholder> key was sent"))
    record.result = RunResult(status="completed", text="Hello.", turns=1)
    page = export.render_answer_html(record)
    assert '<div class="agent-notice"' in page and "a &lt;placeholder&gt; key was sent" in page
    assert "agent-transcript" not in page
