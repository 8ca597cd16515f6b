"""Terminal IPython in a real pseudo-terminal: what a user sees when the agent runs in a shell.

Tool stdout keeps its line breaks, answers render as Markdown (no raw ``**`` or
``|---|``), snapshots print as tables, and control sequences from the data or
the model (a colour change, an OSC title change) never reach the terminal.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

IPYTHON = Path(sys.executable).with_name("ipython")
RUN_TIMEOUT_S = 120
"""IPython start plus an offline run: seconds normally."""
PINK = "\x1b[38;5;201m"
OSC_TITLE = "\x1b]0;pwned\x07"

CODE = (
    "import pandas as pd\n"
    "print('line one')\n"
    f"print('line two' + {PINK!r} + 'PINK' + {OSC_TITLE!r} + ' end')\n"
    "save('frame', pd.DataFrame({'region': ['North', 'South'], 'revenue': [1200.5, 80.25]}))\n"
    "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
    "plt.figure(figsize=(3, 2))\nplt.plot([1, 2])"
)
ANSWER = f"**Bold claim** here{OSC_TITLE}.\n\n| a | b |\n|---|---|\n| 1 | 2 |"


def run_in_terminal(tmp_path: Path, script: str) -> str:
    (tmp_path / "session.ipy").write_text(script)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "xterm-256color",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = pexpect.spawn(str(IPYTHON), ["--simple-prompt", "--no-banner", "--colors=NoColor", "session.ipy"],
                          cwd=str(tmp_path), env=env, dimensions=(50, 110), encoding="utf-8",
                          timeout=RUN_TIMEOUT_S)
    child.expect(pexpect.EOF)
    child.close()
    return child.before


@pytest.fixture(scope="module")
def transcript(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp_path = tmp_path_factory.mktemp("terminal")
    if not IPYTHON.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    turns = [{"text": "Looking at **the data**.",
              "tool_calls": [{"name": "python_interpreter", "arguments": {"code": CODE}}]},
             {"text": ANSWER}]
    (tmp_path / "model.json").write_text(json.dumps({"turns": turns}))
    return run_in_terminal(tmp_path, (
        "%load_ext harness_magic\n"
        "%config AgentMagics.sandbox = 'inprocess'\n"
        "_run = get_ipython().run_cell_magic('agent', '-m scripted/model.json', 'Go.')\n"
        "%agent_vars frame\n"
    ))


def test_tool_stdout_keeps_its_line_breaks(transcript: str) -> None:
    # in-process mode streams what the code prints as it prints it, one line per line
    plain = re.sub(r"\x1b\[[0-9;]*m", "", transcript)  # the renderer's own styles (dim)
    assert "│ line one\r\n│ line two" in plain


def test_control_sequences_from_data_and_model_never_reach_the_terminal(transcript: str) -> None:
    assert PINK not in transcript and OSC_TITLE not in transcript
    assert "\\x1b]0;pwned" in transcript, "shown as a visible escape instead"


def test_answers_render_as_markdown_not_raw(transcript: str) -> None:
    assert "Bold claim" in transcript and "**Bold claim**" not in transcript
    assert "|---|" not in transcript and "──" in transcript
    assert "**the data**" not in transcript


def test_snapshots_print_as_tables_in_the_run_and_from_agent_vars(transcript: str) -> None:
    assert transcript.count("1,200.50") == 2 and transcript.count("┃") >= 4
    assert '"type": "dataframe"' not in transcript and "region" in transcript


def test_each_chart_is_one_line_naming_its_size_and_where_to_see_it(transcript: str) -> None:
    plain = re.sub(r"\x1b\[[0-9;]*m", "", transcript)
    assert re.search(r"chart 1 of 1: \d+×\d+ PNG — %agent_export run\.html shows it", plain), plain[-1500:]
    assert "iVBOR" not in plain, "never the image bytes"


def test_a_running_duckdb_query_shows_its_progress_in_place(tmp_path: Path) -> None:
    """DuckDB's query_progress reaches the terminal as one line rewritten in place, cleared when done."""
    if not IPYTHON.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    sql = ("SELECT count(*) AS n FROM range(20000) a, range(40000) b "
           "WHERE (a.range * 7 + b.range) % 1000003 = 5")  # 8e8 pairs: a few seconds on two cores
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]},
             {"text": "Counting.", "tool_calls": [{"name": "duckdb__query", "arguments": {"sql": sql}}]},
             {"text": "Counted."}]
    (tmp_path / "model.json").write_text(json.dumps({"turns": turns}))
    out = run_in_terminal(tmp_path, (
        "%load_ext harness_magic\n"
        "%config AgentMagics.sandbox = 'inprocess'\n"
        "%config AgentMagics.connectors = [{'type': 'duckdb', 'files': {}}]\n"
        "_run = get_ipython().run_cell_magic('agent', '-m scripted/model.json', 'Go.')\n"
    ))
    import re

    shown = re.findall(r"\rduckdb query (\d+)%\x1b\[K", out)
    assert shown, out[-2000:]
    assert all(0 <= int(p) <= 100 for p in shown)
    tail = out[out.rindex("duckdb query"):]
    assert "\r\x1b[K" in tail and tail.index("\r\x1b[K") < tail.index("Counted."), "cleared before what follows"


def test_progress_lines_in_a_log_are_bounded_and_control_free() -> None:
    """Not a terminal: one line per quarter, engine names cannot drive the terminal, percents are clamped."""
    import io

    from rich.console import Console

    from harness_magic.core.transcript.events import EngineProgress
    from harness_magic.notebook.render import TerminalRenderer

    buffer = io.StringIO()
    renderer = TerminalRenderer(Console(file=buffer, force_terminal=False, width=100))
    name = "duck\x1b]0;pwned\x07db"
    for percent in [None, 1, 2, 26, 27, 55, 80, 99, 250, -5]:
        renderer(EngineProgress(engine=name, percent=percent))
    renderer(EngineProgress(engine=name, percent=None, done=True))
    lines = buffer.getvalue().splitlines()
    assert [line.split()[-1] for line in lines] == ["1%", "26%", "55%", "80%", "100%"]
    assert "\x1b]0;pwned" not in buffer.getvalue() and "\\x1b]0;pwned" in lines[0]
    terminal = io.StringIO()
    renderer = TerminalRenderer(Console(file=terminal, force_terminal=True, width=100))
    for percent in [10, 10, 10.2, 40]:
        renderer(EngineProgress(engine="duckdb", percent=percent))
    renderer(EngineProgress(engine="duckdb", percent=None, done=True))
    assert terminal.getvalue() == "\rduckdb query 10%\x1b[K\rduckdb query 40%\x1b[K\r\x1b[K"


# -- a sandbox step prints above the call it ran for, with its time, as in the notebook ---------------------


def _renderer(terminal: bool, wait_s: float = 5.0):
    import io

    from rich.console import Console

    from harness_magic.notebook.render import TerminalRenderer

    screen = io.StringIO()
    return TerminalRenderer(Console(file=screen, force_terminal=terminal, color_system=None, width=100),
                            header_wait_s=wait_s), screen


def _started(tool_use_id: str, code: str = "print('hi')"):
    from harness_magic.core.transcript.events import ToolCallStarted
    from harness_magic.core.transcript.messages import ToolUseBlock

    return ToolCallStarted(turn=1, tool_use=ToolUseBlock(id=tool_use_id, name="python_interpreter",
                                                         input={"code": code}))


def _finished(tool_use_id: str, content: str = "stdout:\nhi\n", duration_s: float = 2.5):
    from harness_magic.core.transcript.events import ToolCallFinished
    from harness_magic.core.transcript.messages import ToolResultBlock, ToolUseBlock

    use = ToolUseBlock(id=tool_use_id, name="python_interpreter", input={"code": "print('hi')"})
    return ToolCallFinished(turn=1, tool_use=use, result=ToolResultBlock(tool_use_id=tool_use_id, content=content),
                            duration_s=duration_s)


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "log"])
def test_a_sandbox_step_prints_above_the_call_it_ran_for_with_its_time(terminal: bool) -> None:
    from harness_magic.core.transcript.events import RunStarted, SandboxStep, ToolOutputDelta

    renderer, screen = _renderer(terminal)
    renderer(RunStarted(run_id="r", model="m", max_turns=5, prompt="p", run_file=None))
    renderer(_started("t1"))
    renderer(SandboxStep(action="fork", tool_use_id="t1"))
    renderer(SandboxStep(action="fork", duration_s=1.25, tool_use_id="t1"))
    renderer(ToolOutputDelta(turn=1, tool_use_id="t1", text="hi\n"))
    renderer(_finished("t1"))
    shown = screen.getvalue()
    plain = re.sub(r"\x1b\[[0-9;]*[mK]", "", shown)
    done, header = plain.find("fresh sandbox worker forked · 1.25 s"), plain.find("╭─ python_interpreter")
    assert -1 < done < header < plain.find("│ hi") < plain.find("✓ python_interpreter · 1.25 s"), plain
    assert plain.count("╭─ python_interpreter") == 1
    running = plain.find("forking a fresh sandbox worker…")
    assert -1 < running < done, "announced while it runs"
    if terminal:  # rewritten in place, then cleared for the line with its time
        assert "\rforking a fresh sandbox worker…\x1b[K\r\x1b[K" in shown


def test_a_call_without_a_step_shows_its_header_at_its_first_event_or_after_the_wait() -> None:
    import time

    from harness_magic.core.transcript.events import Notice, ToolOutputDelta

    renderer, screen = _renderer(False, wait_s=0.2)
    renderer(_started("t1", "print('quick')"))
    assert screen.getvalue() == "", "held briefly for a step of its own"
    renderer(ToolOutputDelta(turn=1, tool_use_id="t1", text="quick\n"))
    assert screen.getvalue().index("print('quick')") < screen.getvalue().index("│ quick"), "output prints under it"
    renderer(_finished("t1", "stdout:\nquick\n"))
    renderer(_started("t2", "silent_and_slow()"))
    deadline = time.monotonic() + 5
    while "silent_and_slow" not in screen.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "silent_and_slow" in screen.getvalue(), "a silent call shows its header after the wait"
    renderer(Notice(text="a notice"))
    renderer(_finished("t2", "done"))
    text = screen.getvalue()
    assert text.count("silent_and_slow") == 1 and text.index("silent_and_slow") < text.index("a notice")


def test_a_call_waiting_for_approval_shows_its_header_before_the_question() -> None:
    from harness_magic.core.transcript.events import ApprovalStep

    renderer, screen = _renderer(False, wait_s=60.0)
    renderer(_started("t1", "DELETE FROM orders"))
    renderer(ApprovalStep(tool="sql__execute", tool_use_id="t1"))  # the approver asks right after this
    assert "DELETE FROM orders" in screen.getvalue(), "the user sees what they are asked to approve"


def test_a_step_for_another_call_or_none_never_moves_a_header() -> None:
    from harness_magic.core.transcript.events import SandboxStep

    renderer, screen = _renderer(False)
    renderer(_started("t1", "first_call()"))
    renderer(SandboxStep(action="restart", duration_s=0.5, tool_use_id="t0"))  # a stale or forged id
    renderer(SandboxStep(action="restart", duration_s=0.75, tool_use_id=None))
    renderer(_finished("t1"))
    text = screen.getvalue()
    header = text.index("first_call()")
    assert header < text.index("sandbox restarted · 0.50 s") < text.index("sandbox restarted · 0.75 s"), text


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run in the sandbox worker (the default): its start step, live output, a chart, save() as the last line."""
    if not IPYTHON.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    tmp_path = tmp_path_factory.mktemp("sandboxed")
    code = ("print('zebra' + '-stripe', flush=True)\nimport matplotlib\nmatplotlib.use('Agg')\n"
            "import matplotlib.pyplot as plt\nplt.figure(figsize=(3, 2))\nplt.plot([1, 2])\nsave('n', 1)")
    turns = [{"text": "Printing.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
             {"text": "Done."}]
    (tmp_path / "model.json").write_text(json.dumps({"turns": turns}))
    out = run_in_terminal(tmp_path, (
        "%load_ext harness_magic\n"
        "_run = get_ipython().run_cell_magic('agent', '-m scripted/model.json', 'Go.')\n"
        "print('model saw:', repr(_run.messages[2].content[0].content[-60:]))\n"
    ))
    return out


def test_output_streamed_from_the_sandbox_prints_once(sandboxed: str) -> None:
    assert "│ zebra-stripe" in sandboxed, "streamed live from the worker"
    assert sandboxed.count("zebra-stripe") == 1, "not repeated in the finished call's result"


def test_the_sandbox_start_prints_above_the_call_it_ran_for(sandboxed: str) -> None:
    plain = re.sub(r"\x1b\[[0-9;]*[mK]", "", sandboxed)
    waiting, done = plain.find("starting the sandbox…"), plain.find("sandbox started · ")
    header = plain.find("╭─ python_interpreter")
    assert -1 < waiting < done < header < plain.find("│ zebra-stripe"), plain
    assert re.search(r"sandbox started · \d+\.\d\d s", plain)


def test_the_models_chart_note_and_saves_value_are_not_shown_twice(sandboxed: str) -> None:
    plain = re.sub(r"\x1b\[[0-9;]*[mK]", "", sandboxed).replace("\r\n", "\n")
    shown, model_saw = plain.split("model saw:")
    assert "chart(s) drawn" not in shown, "the note is for the model"
    assert len(re.findall(r"chart 1 of 1: \d+×\d+ PNG", shown)) == 1, "the chart line, once"
    assert "Saved as" not in shown and not re.search(r"^n$", shown, re.M), "the handle once: its table's title"
    assert len(re.findall(r"^n int$", shown, re.M)) == 1 and "→ n" in shown
    assert "\\nn\\n[1 chart(s) drawn and shown to the user]" in model_saw, "the model's text is unchanged"


def test_a_header_shown_while_in_process_code_runs_never_lands_in_the_codes_output(tmp_path: Path) -> None:
    """In-process code runs with sys.stdout redirected into its capture: the header's timer prints past it."""
    import contextlib
    import io

    from rich.console import Console

    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession
    from harness_magic.notebook.render import TerminalRenderer

    code = "import time\ntime.sleep(0.6)\nprint('after the wait')"
    turns = [{"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}, {"text": "done"}]
    session = AgentSession(AgentConfig(run_dir=str(tmp_path), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/t", transport=ScriptedModel(turns)))
    screen = io.StringIO()
    with contextlib.redirect_stdout(screen):  # the console writes to sys.stdout as it is at each write
        session.subscribe(TerminalRenderer(Console(color_system=None, width=100), header_wait_s=0.1))
        try:
            result = session.ask("go")
        finally:
            session.close()
    seen = [b.content for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][0]
    assert seen == "stdout:\nafter the wait\n", "the model's output holds only what the code printed"
    shown = screen.getvalue()
    assert shown.count("time.sleep(0.6)") == 1 and shown.index("time.sleep(0.6)") < shown.index("after the wait")


# -- what an analyst notices (issue 27 point 7) ----------------------------------------------------

PIVOT = ("import pandas as pd\n"
         "daily = pd.DataFrame({'region': ['eu', 'us', 'eu'], 'day': pd.to_datetime(['2023-01-01', '2023-01-01', "
         "'2023-01-02']), 'units': [1, 2, 3]}).pivot_table(index='day', columns='region', values='units', "
         "aggfunc='sum')\nsave('daily', daily)\ndaily")
IMAGE_ANSWER = "Units rose; see ![units by day](https://example.invalid/units.png) for the trend, then decide."


@pytest.fixture(scope="module")
def analyst(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp_path = tmp_path_factory.mktemp("analyst")
    if not IPYTHON.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "refunds.md").write_text("# Refunds\n\nRefunds are approved by the finance team within 5 days.\n")
    turns = [{"text": "Pivoting.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": PIVOT}}]},
             {"text": IMAGE_ANSWER}]
    (tmp_path / "model.json").write_text(json.dumps({"turns": turns}))
    return run_in_terminal(tmp_path, (
        "%load_ext harness_magic\n"
        "%config AgentMagics.sandbox = 'inprocess'\n"
        f"%config AgentMagics.connectors = [{{'type': 'docs', 'roots': [{str(docs)!r}]}}]\n"
        "_run = get_ipython().run_cell_magic('agent', '-m scripted/model.json', 'Go.')\n"
        "print('HANDLES', sorted(get_ipython().magics_manager.registry['AgentMagics'].session.cache.names()))\n"
        "%agent_vars\n"
        "print(repr(get_ipython().run_line_magic('agent_docs', '')))\n"
        "print(repr(get_ipython().run_line_magic('agent_docs', 'refunds approved')))\n"
    ))


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


def test_a_markdown_images_alt_text_stays_where_it_stood(analyst: str) -> None:
    flat = " ".join(_plain(analyst).split())
    assert "see [image: units by day — https://example.invalid/units.png] for the trend" in flat, flat[-1500:]
    assert "🌆" not in analyst


def test_the_snapshot_table_names_the_column_axis_and_shows_dates_as_dates(analyst: str) -> None:
    plain = _plain(analyst)
    assert re.search(r"^\s*region\s*┃", plain, re.M), plain[-2500:]  # the column axis above the index
    assert re.search(r"^\s*day\s*│", plain, re.M)  # the index name on its own row
    assert "2023-01-01" in plain and "T00:00:00" not in plain


def test_a_saved_value_shown_again_gets_no_second_handle(analyst: str) -> None:
    assert "HANDLES ['daily']" in _plain(analyst)


def test_agent_vars_and_agent_docs_read_naturally(analyst: str) -> None:
    plain = _plain(analyst)
    header = next(line for line in plain.splitlines() if line.startswith("name ") and " type " in line)
    row = next(line for line in plain.splitlines() if line.startswith("daily ") and "memory" in line)
    assert header.index("type") == row.index("dataframe"), (header, row)  # names and text read from the left
    assert "docs: 1 file, 1 chunk," in plain and "1 chunks" not in plain
    hit = plain[plain.index("Search: refunds approved"):]
    assert "Refunds are approved by the finance team" in hit and "# Refunds" not in hit


# -- a clarifying question: asked at the prompt, answered by typing --------------------------------------


def test_a_question_is_asked_at_the_prompt_and_the_typed_answer_reaches_the_model(tmp_path: Path) -> None:
    if not IPYTHON.exists():
        pytest.skip("ipython script not installed next to the interpreter")
    turns = [{"text": "", "tool_calls": [{"name": "ask_user", "arguments": {
                 "question": f"Which week start?{OSC_TITLE}", "options": ["Monday", "Sunday"]}}]},
             {"text": "Using the week you chose."}]
    (tmp_path / "model.json").write_text(json.dumps({"turns": turns}))
    (tmp_path / "session.ipy").write_text(
        "%load_ext harness_magic\n"
        "%config AgentMagics.sandbox = 'inprocess'\n"
        "_run = get_ipython().run_cell_magic('agent', '-m scripted/model.json', 'Why did WAU drop?')\n"
        "print('RESULT', [b.content for m in _run.messages for b in m.content if hasattr(b, 'tool_use_id')])\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TERM": "xterm-256color",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    child = pexpect.spawn(str(IPYTHON), ["--simple-prompt", "--no-banner", "--colors=NoColor", "session.ipy"],
                          cwd=str(tmp_path), env=env, dimensions=(50, 110), encoding="utf-8",
                          timeout=RUN_TIMEOUT_S)
    child.expect_exact("Answer (1-2 or text): ")
    asked = child.before
    child.sendline("2")
    child.expect(pexpect.EOF)
    child.close()
    shown = asked + child.before
    assert "question from the agent: Which week start?" in asked and "2. Sunday" in asked
    assert "\x1b]0;pwned" not in asked, "the model's control sequence is shown escaped, not sent to the terminal"
    assert "answer (user, waited" in shown and "RESULT ['The user answered: Sunday']" in shown
