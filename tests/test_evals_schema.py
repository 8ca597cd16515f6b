"""Task files: every validation error names the file and the field; hostile files are refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness_magic.evals.schema import MAX_TASK_FILE_BYTES, SuiteError, load_suite

GOOD = """\
id: t1
prompt: "What is 1 + 1? End with ANSWER: <number>."
graders:
  - number: {expected: 2}
scripts:
  reference: [{text: "ANSWER: 2"}]
  wrong: [{name: off_by_one, expect: wrong_answer, turns: [{text: "ANSWER: 3"}]}]
"""


def suite_with(tmp_path: Path, text: str, name: str = "t1.yaml", extra: dict[str, str] | None = None) -> Path:
    root = tmp_path / "suite"
    root.mkdir(exist_ok=True)
    (root / name).write_text(textwrap.dedent(text), encoding="utf-8")
    for file, body in (extra or {}).items():
        target = root / file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(body), encoding="utf-8")
    return root


def error_of(tmp_path: Path, text: str, **kw) -> str:
    root = suite_with(tmp_path, text, **kw)
    with pytest.raises(SuiteError) as info:
        load_suite(root)
    message = str(info.value)
    assert str(root) in message  # names the file
    return message


def test_good_task_loads_and_shorthand_expands(tmp_path):
    root = suite_with(tmp_path, GOOD.replace('reference: [{text: "ANSWER: 2"}]',
                                             'reference: [{python: "print(2)"}, {text: "ANSWER: 2"}]'))
    suite = load_suite(root)
    task = suite.tasks[0]
    assert task.reference.turns[0] == {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "print(2)"}}]}
    assert task.script("wrong").expect == "wrong_answer"
    assert task.script("off_by_one").name == "off_by_one"


@pytest.mark.parametrize("change, field, allowed", [
    (("id: t1", "id: T-1"), ": id:", "[a-z0-9_]"),
    (('prompt: "What is 1 + 1? End with ANSWER: <number>."', "prompt: ''"), ": prompt:", "non-empty"),
    (("graders:\n  - number: {expected: 2}", "graders: []"), ": graders:", "non-empty list"),
    (("- number: {expected: 2}", "- numbr: {expected: 2}"), "graders[0]", "allowed: chart, choice, contains"),
    (("- number: {expected: 2}", "- number: {expected: 2, tolerance: 1}"), "graders[0].number", "allowed: abs_tol"),
    (("- number: {expected: 2}", "- number: {expected: 2, abs_tol: -1}"), "graders[0].number", "non-negative"),
    (("- number: {expected: 2}", "- number: {expected: nothing_here}"), "graders[0].number", "answers.py"),
    (("- number: {expected: 2}", "- judge: {rubric: 'is it right?'}"), ": graders:", "only grader"),
    (("expect: wrong_answer", "expect: meh"), "scripts.wrong[0].expect", "allowed: wrong_answer"),
    (("name: off_by_one", "name: reference"), "scripts.wrong[0].name", "unique"),
    (('reference: [{text: "ANSWER: 2"}]', 'reference: [{txt: "ANSWER: 2"}]'), "scripts.reference[0]", "allowed: text"),
    (('reference: [{text: "ANSWER: 2"}]', "reference: [{python: [1]}]"), "scripts.reference[0].python", "string"),
    (("scripts:", "limits: {max_turns: 0}\nscripts:"), "limits.max_turns", "positive integer"),
    (("scripts:", "limits: {max_minutes: 3}\nscripts:"), ": limits:", "allowed: max_cost_usd"),
    (("scripts:", "connectors: {postgres: {}}\nscripts:"), ": connectors:", "allowed: duckdb, files, sql"),
    (("scripts:", "inputs: {x: {generator: nope, seed: 1}}\nscripts:"), "inputs.x.generator", "generators.py"),
    (("scripts:", "inputs: {'a b': {file: x.csv}}\nscripts:"), "inputs.a b", "identifier"),
    (("scripts:", "inputs: {x: {sample: passwd}}\nscripts:"), "inputs.x.sample", "allowed: msft.csv"),
    (("scripts:", "colour: red\nscripts:"), "(top level)", "unknown key(s) colour"),
])
def test_errors_name_file_and_field(tmp_path, change, field, allowed):
    old, new = change
    assert old in GOOD
    message = error_of(tmp_path, GOOD.replace(old, new))
    assert field in message and allowed in message, message


def test_input_file_must_stay_inside_the_suite(tmp_path):
    (tmp_path / "secret.csv").write_text("a\n1\n")
    for path, why in (("../secret.csv", "outside the suite directory"), ("/etc/passwd", "is absolute"),
                      ("datasets/missing.csv", "no such file in the suite directory")):
        message = error_of(tmp_path, GOOD + f"inputs: {{x: {{file: {path!r}}}}}\n")
        assert "inputs.x.file" in message and why in message, message
    root = suite_with(tmp_path, GOOD + "inputs: {x: {file: data.txt}}\n", extra={"data.txt": "a\n"})
    with pytest.raises(SuiteError, match="allowed formats are .csv, .parquet"):
        load_suite(root)


def test_yaml_cannot_construct_python_objects(tmp_path):
    hostile = GOOD.replace("expected: 2", "expected: !!python/object/apply:os.system ['touch /tmp/pwned']")
    message = error_of(tmp_path, hostile)
    assert "not valid YAML" in message
    assert not Path("/tmp/pwned").exists()


def test_names_cannot_reach_private_or_builtin_functions(tmp_path):
    extra = {"answers.py": "import os\n\ndef _secret(inputs):\n    return 2\n"}
    assert "answers.py" in error_of(tmp_path, GOOD.replace("expected: 2", "expected: _secret"), extra=extra)
    assert "answers.py" in error_of(tmp_path, GOOD.replace("expected: 2", "expected: __import__"), extra=extra)


def test_duplicate_ids_invalid_yaml_and_size(tmp_path):
    root = suite_with(tmp_path, GOOD)
    (root / "t2.yaml").write_text(GOOD)
    with pytest.raises(SuiteError, match="'t1' is already used by"):
        load_suite(root)
    (root / "t2.yaml").write_text("id: [unclosed\n")
    with pytest.raises(SuiteError, match="t2.yaml: not valid YAML"):
        load_suite(root)
    (root / "t2.yaml").write_text("- just\n- a list\n")
    with pytest.raises(SuiteError, match=r"t2.yaml: \(top level\): expected a mapping"):
        load_suite(root)
    (root / "t2.yaml").write_text("#" * (MAX_TASK_FILE_BYTES + 1))
    with pytest.raises(SuiteError, match="a task file may have at most"):
        load_suite(root)


def test_empty_or_unknown_suite(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SuiteError, match="no task files"):
        load_suite(tmp_path / "empty")
    with pytest.raises(SuiteError, match="built-in: core"):
        load_suite("no_such_suite")
