"""What people read of a tool result versus what the model saw.

The interpreter tells the model ``[N chart(s) drawn and shown to the user]`` and, when
``save(...)`` is the code's last line, repeats the handle ``save`` returned. People see
the charts themselves and the ``Saved as`` line, so the notebook, the terminal and the
exports show the result without those, and keep the model's exact text one click away.
Hostile code cannot hide its own output by printing or raising the same words.
"""

from __future__ import annotations

import io
import re

import pytest

from harness_magic.core import export
from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.interpreter import InProcessInterpreter, chart_note, make_interpreter_tools
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.transcript.scrub import REDACTED, register_secret
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession

CHART = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
         "plt.figure(figsize=(2, 1))\nplt.plot([1, 2])\n")
FRAME = "pd.DataFrame({'region': ['North', 'South'], 'revenue': [1200.5, 80.25]})"


@pytest.fixture
def interpreter(tmp_path):
    cache = SessionCache(spill_dir=tmp_path / "spill")
    tools = {t.name: t for t in make_interpreter_tools(cache, InProcessInterpreter())}
    yield lambda code: tools["python_interpreter"].handler(code=code)
    cache.close()


def test_the_model_is_told_about_charts_and_people_are_not(interpreter) -> None:
    out = interpreter(CHART + "print('drawn')")
    assert out.text == "stdout:\ndrawn\n\n" + chart_note(1), "the model's text is unchanged"
    assert out.display_text == "stdout:\ndrawn\n"
    assert len(out.artifacts) == 1, "people get the chart itself"


def test_a_saved_handle_as_the_last_line_is_not_repeated_for_people(interpreter) -> None:
    out = interpreter(f"import pandas as pd\nsave('frame', {FRAME})")
    assert out.text.endswith("\nframe") and out.handles == ["frame"], "the model still sees save()'s value"
    assert out.display_text.startswith("Saved as `frame`\nSnapshot: ")
    assert re.findall(r"\bframe\b", out.display_text) == ["frame"], "the handle once"
    both = interpreter("import pandas as pd\n(save('a', 1), save('b', [2]))")
    assert both.display_text.count("Saved as `a`") == 1 and '["a", "b"]' not in both.display_text


def test_a_value_that_is_not_what_save_returned_is_kept(interpreter) -> None:
    interpreter("save('frame', 1)")
    # a string naming an older handle, or text that only looks like a handle: the code's real value
    for code, value in [("save('other', 2)\n'frame'", "frame"), ("save('x', 3)\n'x '", "x "),
                        ("save('y', 4)\n['y', 'z']", '["y", "z"]'), ("save('w', 5)\n[]", "[]")]:
        out = interpreter(code)
        people = out.text if out.display_text is None else out.display_text
        assert people.endswith("\n" + value), (code, out)


def test_hostile_code_printing_or_raising_the_chart_note_keeps_its_own_words(interpreter) -> None:
    note = chart_note(1)
    out = interpreter(CHART + f"print({note!r})\nprint('frame')\nsave('frame', 1)\nraise ValueError({note!r})")
    assert out.is_error
    assert out.text.count(note) == 3, "printed, the harness's own, raised"
    assert out.display_text.count(note) == 2, "only the harness's own line is left out"
    assert out.display_text.startswith(f"stdout:\n{note}\nframe\n")
    assert out.display_text.rstrip().endswith(f"ValueError: {note}")


def test_no_chart_and_no_save_gives_people_the_models_text(interpreter) -> None:
    out = interpreter("print('plain')\n6 * 7")
    assert out.text == "stdout:\nplain\n\n42" and out.display_text is None
    only_chart = interpreter(CHART + "None")
    assert only_chart.text == chart_note(1) and only_chart.display_text == ""


def _run(tmp_path, turns, *, subscribe=()):
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/t", transport=ScriptedModel(turns)))
    recorder = export.RunRecorder()
    session.subscribe(recorder)
    for handler in subscribe:
        session.subscribe(handler)
    try:
        result = session.ask("go")
    finally:
        session.close()
    return result, recorder.current


def _call(code: str) -> dict:
    return {"text": "Working.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}


def test_notebook_and_exports_show_people_the_result_and_the_model_its_own_text(tmp_path) -> None:
    result, record = _run(tmp_path, [_call(f"import pandas as pd\n{CHART}save('frame', {FRAME})"), {"text": "done"}])
    seen = [b.content for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][0]
    assert seen.endswith("}\nframe\n" + chart_note(1)), "the model receives what it always did"
    tool = record.tools[0]
    assert export.display_result_text(tool) == "", "the handle's table, titled by it, says all of it"
    body = export.render_tool_body_html(tool)
    shown, model_saw = body.split('class="agent-model-saw"')
    assert "chart(s) drawn" not in shown and "Saved as" not in shown and "\nframe<" not in shown
    assert ">result<" not in shown and shown.count("<b>frame</b>") == 1, "no empty result section; one table"
    assert "chart(s) drawn and shown to the user]" in model_saw and "Saved as `frame`" in model_saw
    markdown = export.render_markdown_document([record])
    assert "chart(s) drawn" not in markdown and "Saved as" not in markdown and "Result:" not in markdown
    assert markdown.count("frame: dataframe") == 1


def test_an_errors_text_for_people_is_scrubbed_like_the_models(tmp_path) -> None:
    secret = "people-view-secret-0a1b2c3d"
    register_secret(secret)
    result, record = _run(tmp_path, [_call(CHART + f"raise RuntimeError('token ' + {secret!r})"),
                                     {"text": "done"}])
    tool = record.tools[0]
    assert tool.is_error and tool.display_text is not None
    assert secret not in tool.display_text and REDACTED in tool.display_text
    assert chart_note(1) not in tool.display_text


def test_the_terminal_shows_the_chart_line_and_the_handle_once(tmp_path) -> None:
    from rich.console import Console

    from harness_magic.notebook.render import TerminalRenderer

    screen = io.StringIO()
    renderer = TerminalRenderer(Console(file=screen, force_terminal=False, color_system=None, width=120))
    _run(tmp_path, [_call(f"import pandas as pd\n{CHART}save('frame', {FRAME})"), {"text": "done"}],
         subscribe=[renderer])
    printed = screen.getvalue()
    assert "chart(s) drawn" not in printed
    assert len(re.findall(r"chart 1 of 1: \d+×\d+ PNG", printed)) == 1
    assert "Saved as" not in printed and len(re.findall(r"^frame dataframe", printed, re.M)) == 1
    assert not re.search(r"^frame$", printed, re.M), "no bare repeat of the handle"


def test_the_live_widget_shows_people_the_result_without_the_models_note(tmp_path) -> None:
    pytest.importorskip("ipywidgets")
    from harness_magic.notebook.render import WidgetRunView

    view = WidgetRunView()
    try:
        _run(tmp_path, [_call(f"import pandas as pd\n{CHART}save('frame', {FRAME})"), {"text": "done"}],
             subscribe=[view])
        (_, body, _), = view.transcript.tools.values()
        shown, model_saw = body.value.split('class="agent-model-saw"')
        assert "chart(s) drawn" not in shown and "<img" in shown and "Saved as" not in shown
        assert shown.count("<b>frame</b>") == 1
        assert "chart(s) drawn and shown to the user]" in model_saw
    finally:
        view.close()


def test_people_still_read_that_a_results_name_was_taken(tmp_path) -> None:
    code = f"import pandas as pd\nframe = {FRAME}\nframe"  # a trailing name asks for that handle name
    other = "import pandas as pd\nframe = pd.DataFrame({'x': [1]})\nframe"
    result, record = _run(tmp_path, [_call(code), _call(other), {"text": "done"}])
    assert export.display_result_text(record.tools[0]) == ""
    assert export.display_result_text(record.tools[1]) == "Saved as `frame_2` (`frame` was taken)"
