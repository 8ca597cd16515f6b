"""Code handed to the notebook shows what it is (issue 22, point 7).

The model's code is untrusted. Bidi overrides, zero-width and other invisible characters, ESC
sequences and a lone carriage return make a cell run differently from how it reads. Each class
goes through ``%agent_code`` in a real kernel with a scripted model: the next cell is never filled
with a hidden character; the user is told the line and the character; ``--escaped`` puts the code
in with visible escapes that mean the same inside string literals; clean code passes unchanged.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from harness_magic.core.text.hidden_chars import MAX_FINDINGS_SHOWN, find_hidden, hand_over, reveal

HOSTILE = {
    "bidi override": ("\u202e", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    "bidi isolate": ("\u2066", "U+2066 LEFT-TO-RIGHT ISOLATE"),
    "bidi pop isolate": ("\u2069", "U+2069 POP DIRECTIONAL ISOLATE"),
    "right-to-left mark": ("\u200f", "U+200F RIGHT-TO-LEFT MARK"),
    "arabic letter mark": ("\u061c", "U+061C ARABIC LETTER MARK"),
    "zero width space": ("\u200b", "U+200B ZERO WIDTH SPACE"),
    "zero width joiner": ("\u200d", "U+200D ZERO WIDTH JOINER"),
    "word joiner": ("\u2060", "U+2060 WORD JOINER"),
    "byte order mark": ("\ufeff", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    "soft hyphen": ("\u00ad", "U+00AD SOFT HYPHEN"),
    "invisible times": ("\u2062", "U+2062 INVISIBLE TIMES"),
    "tag character": ("\U000e0041", "U+E0041 TAG LATIN CAPITAL LETTER A"),
    "escape": ("\x1b", "U+001B ESCAPE"),
    "carriage return": ("\r", "U+000D CARRIAGE RETURN"),
    "backspace": ("\x08", "U+0008 BACKSPACE"),
    "C1 control sequence introducer": ("\x9b", "U+009B CONTROL SEQUENCE INTRODUCER"),
    "delete": ("\x7f", "U+007F DELETE"),
    "line separator": ("\u2028", "U+2028 LINE SEPARATOR"),
    "paragraph separator": ("\u2029", "U+2029 PARAGRAPH SEPARATOR"),
    "private use": ("\ue000", "U+E000 private-use character"),
    "unassigned": ("\u0378", "U+0378 unassigned code point"),
    "no-break space": ("\u00a0", "U+00A0 NO-BREAK SPACE"),
    "ideographic space": ("\u3000", "U+3000 IDEOGRAPHIC SPACE"),
    "hangul filler": ("\u3164", "U+3164 HANGUL FILLER"),
    "variation selector": ("\ufe00", "U+FE00 VARIATION SELECTOR-1"),
}
"""One character of each class, with how a report names it."""
CLEAN = "total = 0\nfor name in ['ä', 'ß', '中', 'é']:\n\ttotal += len(name)  # tabs, accents, CJK\nprint('⚠️ done', total)\n"


def _code(char: str) -> str:
    """Agent code with ``char`` inside a string literal on line 2 (column 12)."""
    return f"x = 1\nlabel = 'ab{char}cd'\nprint(x)"


# -- the finder and the policy, without a kernel ---------------------------------------------


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_each_hidden_class_is_found_with_line_column_and_name(kind: str) -> None:
    char, name = HOSTILE[kind]
    findings = find_hidden(_code(char))
    assert [str(f) for f in findings] == [f"line 2, column 12: {name}"]


def test_clean_code_passes_unchanged() -> None:
    assert find_hidden(CLEAN) == [] and hand_over(CLEAN).text == CLEAN


def test_crlf_line_ends_become_lf_and_a_lone_cr_is_refused() -> None:
    assert hand_over("a = 1\r\nb = 2\r\n").text == "a = 1\nb = 2\n"
    # Python ends a line at a lone CR: the comment hides a statement that runs.
    handed = hand_over("x = 1  # harmless note\rx = 2\n")
    assert handed.refused and handed.report() == "line 1, column 23: U+000D CARRIAGE RETURN"


def test_trojan_source_comment_is_refused_naming_every_control() -> None:
    code = 'if access != "user\u202e \u2066# Check if admin\u2069 \u2066":\n    grant()\n'
    handed = hand_over(code)
    assert handed.refused
    assert handed.report().splitlines() == [
        "line 1, column 19: U+202E RIGHT-TO-LEFT OVERRIDE", "line 1, column 21: U+2066 LEFT-TO-RIGHT ISOLATE",
        "line 1, column 38: U+2069 POP DIRECTIONAL ISOLATE", "line 1, column 40: U+2066 LEFT-TO-RIGHT ISOLATE"]


@pytest.mark.parametrize("kind", [k for k in HOSTILE if k not in ("carriage return",)])
def test_escaped_code_is_visible_and_means_the_same_inside_strings(kind: str) -> None:
    char, name = HOSTILE[kind]
    handed = hand_over(_code(char), escaped=True)
    assert handed.text is not None and find_hidden(handed.text) == []
    lines = handed.text.splitlines()
    finding = next(line for line in lines if name in line)
    line_no, column = (int(v) for v in finding.split("line ")[1].split(":")[0].split(", column "))
    assert lines[line_no - 1][column - 1] == "\\", "the report points at the escape in the returned text"
    namespace: dict[str, Any] = {}
    exec(compile(handed.text, "<cell>", "exec"), namespace)
    assert namespace["label"] == f"ab{char}cd"


def test_a_report_names_a_bounded_number_and_counts_the_rest() -> None:
    handed = hand_over("s = '" + "\u200b" * (MAX_FINDINGS_SHOWN + 7) + "'")
    lines = handed.report().splitlines()
    assert len(lines) == MAX_FINDINGS_SHOWN + 1 and lines[-1] == "... and 7 more"


def test_emoji_presentation_selector_after_a_symbol_is_not_hidden() -> None:
    assert find_hidden("print('⚠️ ✅ ❤️')") == []
    assert [str(f) for f in find_hidden("a\ufe0fb")] == ["line 1, column 2: U+FE0F VARIATION SELECTOR-16"]
    assert reveal("x\u202ey") == "x\\u202ey" and reveal("\x1b[2K") == "\\x1b[2K"


def test_a_model_sent_tool_name_cannot_end_the_header_comment() -> None:
    from harness_magic.core.export import RunRecord, ToolRecord
    from harness_magic.notebook.code_text import agent_code_text

    record = RunRecord(run_id="r1")
    record.items.append(ToolRecord("t1", "python_interpreter\nimport os", {"code": "1"}, 1))
    text = agent_code_text(record)
    assert text.splitlines()[0] == "# agent run r1, turn 1: 'python_interpreter\\nimport os'"
    assert "\nimport os" not in text


# -- a real kernel ---------------------------------------------------------------------------

pytest.importorskip("jupyter_client")

from kernel_helpers import Kernel, agent_kernel, usage_error  # noqa: E402


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("hidden"), run_dir="runs", model="offline/quickstart",
                      sandbox="inprocess") as k:
        yield k


def _next_cell(cell: Any) -> list[str]:
    return [p["text"] for p in cell.reply.get("payload", []) if p.get("source") == "set_next_input"]


@pytest.fixture(scope="module")
def hostile_run(kernel: Kernel) -> tuple[str, list[str]]:
    """One run whose turn k runs code with the k-th hostile character; the last turn is clean."""
    kinds = list(HOSTILE)
    turns = [{"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": _code(HOSTILE[k][0])}}]}
             for k in kinds]
    turns.append({"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": CLEAN}}]})
    turns.append({"text": "Done."})
    (kernel.cwd / "hostile.json").write_text(json.dumps({"turns": turns}))
    cell = kernel.run("%%agent --new -m scripted/hostile.json --max-turns 40\nRun these.")
    assert cell.ok, cell.outputs
    return kernel.value("_.run_id"), kinds


def test_agent_code_refuses_each_hidden_class_naming_line_and_character(kernel: Kernel, hostile_run) -> None:
    run_id, kinds = hostile_run
    for turn, kind in enumerate(kinds, 1):
        cell = kernel.run(f"%agent_code --turn {turn}")
        assert _next_cell(cell) == [], f"{kind}: the next cell must not be filled"
        assert not cell.errors and "UsageError: %agent_code: nothing put into the next cell" in cell.stderr
        # Line 1 of the cell names the run, line 2 is blank, line 3 is the call's header comment, so the
        # agent's line 2 is the cell's line 5.
        assert f"line 5, column 12: {HOSTILE[kind][1]}" in cell.stderr, (kind, cell.stderr)
        assert "--escaped" in cell.stderr


def test_agent_code_for_the_whole_run_names_every_character(kernel: Kernel, hostile_run) -> None:
    run_id, kinds = hostile_run
    cell = kernel.run(f"%agent_code --run {run_id}")
    assert _next_cell(cell) == []
    assert f"holds {len(kinds)} hidden characters" in cell.stderr
    assert f"... and {len(kinds) - MAX_FINDINGS_SHOWN} more" in cell.stderr


def test_agent_code_escaped_fills_the_next_cell_with_visible_escapes(kernel: Kernel, hostile_run) -> None:
    run_id, kinds = hostile_run
    for turn, kind in enumerate(kinds, 1):
        cell = kernel.run(f"%agent_code --turn {turn} --escaped")
        assert cell.ok, (kind, cell.outputs)
        [text] = _next_cell(cell)
        assert find_hidden(text) == [], kind
        assert HOSTILE[kind][1] in text.splitlines()[1] and "written as escapes" in cell.stdout
        if kind == "carriage return":
            continue
        ran = kernel.run(text + "\nimport json as _j; print(_j.dumps(label))")
        assert ran.ok, (kind, ran.outputs)
        assert json.loads(ran.stdout.strip().splitlines()[-1]) == f"ab{HOSTILE[kind][0]}cd", kind


def test_agent_code_passes_clean_code_unchanged(kernel: Kernel, hostile_run) -> None:
    run_id, kinds = hostile_run
    cell = kernel.run(f"%agent_code --turn {len(kinds) + 1}")
    assert cell.ok, cell.outputs
    [text] = _next_cell(cell)
    assert text.startswith(f"# run {run_id} (the latest run): ")
    assert text.endswith(f"\n\n# agent run {run_id}, turn {len(kinds) + 1}: python_interpreter\n{CLEAN.rstrip()}\n")


def test_the_transcript_shows_hidden_characters_and_has_no_copy_button_for_them(kernel: Kernel, hostile_run) -> None:
    run_id, kinds = hostile_run
    page = kernel.value("get_ipython().display_formatter.formatters['text/html'](_)")
    assert "agent-hidden-chars" in page and "line 2, column 12: U+202E RIGHT-TO-LEFT OVERRIDE" in page
    assert "\u202e" not in page and "\x1b" not in page and "\\u202e" in page
    assert page.count('class="agent-copy-code"') == 1, "only the clean call can be copied"
    held = kernel.value("list(get_ipython().magics_manager.registry['AgentMagics']._code_clipboard.calls.values())")
    assert all(find_hidden(code) == [] for code in held) and any(CLEAN.rstrip() in code for code in held)
    assert usage_error(kernel.run("%agent_code --turn 99")).startswith("UsageError: %agent_code: run")
