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
from harness_magic.core.session import AgentConfig, AgentSession

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
    from harness_magic.core.events import (AssistantMessage, RunFinished, RunStarted, SubagentEvent,
                                           ToolCallFinished, ToolCallStarted)
    from harness_magic.core.loop import RunResult
    from harness_magic.core.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage

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


def test_loading_the_extension_is_cheap_and_imports_neither_litellm_nor_pandas() -> None:
    code = textwrap.dedent("""\
        import sys, time
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        started = time.perf_counter()
        shell.run_line_magic("load_ext", "harness_magic")
        elapsed = time.perf_counter() - started
        print(elapsed, "litellm" in sys.modules, "pandas" in sys.modules, "ipywidgets" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    elapsed, litellm, pandas, widgets = out.stdout.split()
    assert (litellm, pandas, widgets) == ("False", "False", "False")
    assert float(elapsed) < 0.5


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
