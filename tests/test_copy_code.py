"""The "copy code" button of each tool call (issue 14, point 6), below the browser.

The button is inert HTML naming its call; the session's clipboard widget holds
each call's code (what ``%agent_code`` writes for it) and its front end copies
it. The browser test (tests/test_browser.py) clicks it live and after settling.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("anywidget")

from harness_magic.core.transcript.events import RunStarted, ToolCallStarted  # noqa: E402
from harness_magic.core.export import RunRecord, ToolRecord, render_answer_html, render_html_document  # noqa: E402
from harness_magic.core.transcript.messages import ToolUseBlock  # noqa: E402
from harness_magic.notebook.clipboard import MAX_CALLS, CodeClipboard  # noqa: E402
from harness_magic.notebook.code_text import agent_code_text, call_code_text  # noqa: E402
from harness_magic.notebook.render import WidgetRunView  # noqa: E402

HOSTILE_ID = 'call"><img src=x onerror=alert(1)>'
"""A tool-use id as a hostile provider could send it."""


def _started(view: Any, use_id: str, name: str, arguments: dict[str, Any], turn: int = 1) -> None:
    view(ToolCallStarted(turn=turn, tool_use=ToolUseBlock(id=use_id, name=name, input=arguments)))


def test_each_code_or_sql_call_gets_a_button_whose_code_the_clipboard_holds() -> None:
    clipboard = CodeClipboard()
    view = WidgetRunView(clipboard=clipboard)
    try:
        view(RunStarted(run_id="abc123", model="m", max_turns=5, prompt="p", run_file=None))
        _started(view, "t1", "python_interpreter", {"code": "x = 1\nprint(x)\n"})
        _started(view, "t2", "warehouse__query", {"sql": "SELECT '</button><script>' AS s"}, turn=2)
        _started(view, "t3", "list_variables", {})
        _started(view, HOSTILE_ID, "python_interpreter", {"code": "2"}, turn=3)
        bodies = {k: v[1].value for k, v in view.transcript.tools.items()}
        assert 'data-agent-call="abc123:t1"' in bodies["t1"] and 'data-agent-call="abc123:t2"' in bodies["t2"]
        assert "agent-copy-code" not in bodies["t3"], "a call without code has no button"
        assert clipboard.calls["abc123:t1"] == "# agent run abc123, turn 1: python_interpreter\nx = 1\nprint(x)\n"
        assert clipboard.calls["abc123:t1"] == agent_code_text(view.record, turn=1), "the same as %agent_code"
        namespace: dict[str, Any] = {}
        exec(compile(clipboard.calls["abc123:t2"], "<pasted>", "exec"), namespace)
        assert namespace["sql_turn2_2"] == "SELECT '</button><script>' AS s", "SQL is pasted as a string"
        hostile = bodies[HOSTILE_ID]
        assert "<img src=x" not in hostile and 'data-agent-call="abc123:call&quot;&gt;&lt;img' in hostile
        assert clipboard.calls[f"abc123:{HOSTILE_ID}"].endswith("\n2\n"), "the key is kept exactly, only escaped in HTML"
        for body in bodies.values():
            assert "<script" not in body and "onclick" not in body.lower()
    finally:
        view.close()
        clipboard.close()


def test_without_a_clipboard_the_live_view_has_no_buttons() -> None:
    view = WidgetRunView()
    try:
        view(RunStarted(run_id="abc123", model="m", max_turns=5, prompt="p", run_file=None))
        _started(view, "t1", "python_interpreter", {"code": "1"})
        assert "agent-copy-code" not in view.transcript.tools["t1"][1].value
    finally:
        view.close()


def test_the_clipboard_keeps_the_latest_calls_only() -> None:
    clipboard = CodeClipboard()
    try:
        for i in range(MAX_CALLS + 5):
            clipboard.add(f"r:{i}", f"code {i}")
        assert len(clipboard.calls) == MAX_CALLS and "r:0" not in clipboard.calls and "r:4" not in clipboard.calls
        clipboard.add("r:5", "changed")
        assert list(clipboard.calls)[-1] == "r:5" and clipboard.calls["r:5"] == "changed"
    finally:
        clipboard.close()


def _record() -> RunRecord:
    record = RunRecord(run_id="abc123", model="m")
    record.items.append(ToolRecord("t1", "python_interpreter", {"code": "print(1)"}, 1, result="1"))
    record.items.append(ToolRecord(HOSTILE_ID, "python_interpreter", {"code": "2"}, 2, result="2"))
    record.items.append(ToolRecord("t3", "files__read", {"path": "a.csv"}, 2, result="x"))
    return record


def test_the_final_form_carries_hidden_inert_buttons_and_exports_none() -> None:
    final = render_answer_html(_record(), copy_buttons=True)
    buttons = re.findall(r"<button[^>]*>", final)
    assert len(buttons) == 2, "code calls only (not the file read)"
    for button in buttons:
        assert " hidden " in button and "display:none" in button \
            and not re.search(r"\son\w*=", re.sub(r'"[^"]*"', '""', button)), "no event handler attribute"
    assert "<script" not in final and "<img src=x" not in final
    assert "agent-copy-code" not in render_answer_html(_record()), "off unless asked (the notebook asks)"
    assert "agent-copy-code" not in render_html_document([_record()]), "exports carry no buttons"


def test_call_code_text_is_one_block_of_agent_code_text() -> None:
    record = _record()
    blocks = [call_code_text(record, tool) for tool in record.tools]
    assert "\n\n".join(b for b in blocks if b) + "\n" == agent_code_text(record)


def test_a_subagents_calls_get_buttons_in_the_final_form_too() -> None:
    parent = RunRecord(run_id="parent1", model="m")
    child = RunRecord(run_id="child1", model="m")
    child.items.append(ToolRecord("c1", "python_interpreter", {"code": "print('child')"}, 1, result="child"))
    sub = ToolRecord("s1", "subagent", {"task": "look"}, 1, result="done")
    sub.subagent = child
    parent.items.append(sub)
    final = render_answer_html(parent, copy_buttons=True)
    assert 'data-agent-call="child1:c1"' in final and "parent1:s1" not in final
    assert "agent-copy-code" not in render_answer_html(parent)


TROJAN = 'if access != "user\u202e \u2066# admin\u2069 \u2066":\n    grant()\n'
"""Reads as a comparison with "user" followed by a comment; runs as a comparison with the whole string."""


def test_the_clipboard_never_holds_code_with_hidden_characters() -> None:
    clipboard = CodeClipboard()
    try:
        assert clipboard.add("r:1", "x = 1\n") is True and clipboard.calls["r:1"] == "x = 1\n"
        assert clipboard.add("r:1", "x = 1  # note\rimport os\n") is False and "r:1" not in clipboard.calls, \
            "a key whose code turned hostile is dropped"
        for hostile in (TROJAN, "a\u200b = 1", "print('\x1b[2Kok')"):
            assert clipboard.add("r:2", hostile) is False and "r:2" not in clipboard.calls
        assert clipboard.add("r:3", "a = 1\r\nb = 2\r\n") and clipboard.calls["r:3"] == "a = 1\nb = 2\n"
    finally:
        clipboard.close()


def test_a_call_with_hidden_characters_gets_no_button_and_a_warning_naming_them() -> None:
    clipboard = CodeClipboard()
    view = WidgetRunView(clipboard=clipboard)
    try:
        view(RunStarted(run_id="abc123", model="m", max_turns=5, prompt="p", run_file=None))
        _started(view, "t1", "python_interpreter", {"code": TROJAN})
        _started(view, "t2", "python_interpreter", {"code": "print(1)"}, turn=2)
        body = view.transcript.tools["t1"][1].value
        assert "agent-copy-code" not in body and "abc123:t1" not in clipboard.calls
        assert "line 1, column 19: U+202E RIGHT-TO-LEFT OVERRIDE" in body and "no copy button" in body
        assert "\u202e" not in body and "\\u202e" in body, "the code is shown with visible escapes"
        assert 'data-agent-call="abc123:t2"' in view.transcript.tools["t2"][1].value
        final = render_answer_html(view.record, copy_buttons=True)
        assert 'data-agent-call="abc123:t1"' not in final and 'data-agent-call="abc123:t2"' in final
        assert "\u202e" not in final
    finally:
        view.close()
        clipboard.close()


def test_exports_show_hidden_characters_as_escapes_with_a_warning(tmp_path) -> None:
    from harness_magic.core.export import export_runs

    record = RunRecord(run_id="abc123", model="m")
    record.items.append(ToolRecord("t1", "python_interpreter", {"code": TROJAN}, 1, result="ok"))
    record.items.append(ToolRecord("t2", "warehouse__query", {"sql": "SELECT '\x1b[31m'"}, 2, result="ok"))
    page = export_runs([record], tmp_path / "t.html").read_text()
    markdown = export_runs([record], tmp_path / "t.md").read_text()
    for text in (page, markdown):
        assert "\u202e" not in text and "\x1b" not in text
        assert "line 1, column 19: U+202E RIGHT-TO-LEFT OVERRIDE" in text and "U+001B ESCAPE" in text
    assert "\\u202e" in markdown and "SELECT '\\x1b[31m'" in markdown
