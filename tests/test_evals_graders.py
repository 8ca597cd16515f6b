"""Every grader on right, wrong and malformed answers (and what a hostile model would try)."""

from __future__ import annotations

import sqlite3
import types

import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.evals.graders import GradeContext, grade, parse_answer_number, validate_grader


@pytest.fixture
def cache():
    c = SessionCache()
    yield c
    c.close()


def ctx(answer="", cache=None, **kw):
    return GradeContext(answer=answer, cache=cache, **kw)


# -- number ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, value", [
    ("Total is 1,234.5.\nANSWER: 1,234.50", 1234.5),
    ("ANSWER: -3.25", -3.25),
    ("ANSWER: \u221212", -12.0),
    ("The answer is 42.", 42.0),
    ("I computed 10 then 20.\nANSWER: 20", 20.0),
    ("answer: 1e3", 1000.0),
])
def test_parse_answer_number(answer, value):
    assert parse_answer_number(answer)[0] == value


@pytest.mark.parametrize("answer, why", [
    ("", "no number"),
    ("I could not compute it.", "no number"),
    ("Either 10 or 20, hard to say.", "alternatives"),
    ("ANSWER: unknown", "no number in the answer 'unknown'"),
])
def test_parse_answer_number_malformed(answer, why):
    value, reason = parse_answer_number(answer)
    assert value is None and why in reason


def test_number_right_wrong_and_tolerances():
    ok = grade("number", {"expected": 100.0, "abs_tol": 0.01}, ctx("ANSWER: 100.004"))
    assert ok.passed
    assert not grade("number", {"expected": 100.0, "abs_tol": 0.001}, ctx("ANSWER: 100.004")).passed
    assert grade("number", {"expected": 100.0, "rel_tol": 0.01}, ctx("ANSWER: 100.9")).passed
    wrong = grade("number", {"expected": 100.0, "rel_tol": 0.01}, ctx("ANSWER: 102"))
    assert not wrong.passed and not wrong.missing and "102" in wrong.detail
    nan = grade("number", {"expected": 100.0, "abs_tol": 1e9}, ctx("ANSWER: nan"))
    assert not nan.passed


def test_number_many_numbers_without_answer_line_is_not_guessed():
    # a model listing every candidate must not pass because one of them is right
    result = grade("number", {"expected": 7}, ctx("It is 5, 6, 7 or 8."))
    assert not result.passed and result.ambiguous


def test_number_pattern_and_malformed():
    assert grade("number", {"expected": 3, "pattern": r"total=(\S+)"}, ctx("x total=3 y")).passed
    missing = grade("number", {"expected": 3, "pattern": r"total=(\S+)"}, ctx("no total here"))
    assert not missing.passed and missing.missing


def test_number_from_handle(cache):
    cache.put("total", pd.DataFrame({"v": [12.5]}))
    cache.put("many", pd.DataFrame({"v": [1, 2]}))
    cache.put("word", "twelve")
    assert grade("number", {"expected": 12.5, "handle": "total"}, ctx("", cache)).passed
    shape = grade("number", {"expected": 12.5, "handle": "many"}, ctx("", cache))
    assert not shape.passed and "shape" in shape.detail
    assert not grade("number", {"expected": 12.5, "handle": "word"}, ctx("", cache)).passed
    gone = grade("number", {"expected": 12.5, "handle": "nope"}, ctx("ANSWER: 12.5", cache))
    assert not gone.passed and gone.missing and "no handle 'nope'" in gone.detail


# -- frame ------------------------------------------------------------------------------------------

EXPECTED = [{"region": "East", "revenue": 10.0}, {"region": "West", "revenue": 20.0}]


def test_frame_right_and_row_order(cache):
    cache.put("by_region", pd.DataFrame({"region": ["West", "East"], "revenue": [20.0, 10.0 + 1e-12]}))
    assert not grade("frame", {"handle": "by_region", "expected": EXPECTED}, ctx("", cache)).passed
    assert grade("frame", {"handle": "by_region", "expected": EXPECTED, "ignore_row_order": True},
                 ctx("", cache)).passed


def test_frame_index_is_a_column(cache):
    cache.put("by_region", pd.DataFrame({"revenue": [10.0, 20.0]}, index=pd.Index(["East", "West"], name="region")))
    assert grade("frame", {"handle": "by_region", "expected": EXPECTED}, ctx("", cache)).passed
    cache.put("series", pd.Series([10.0, 20.0], index=pd.Index(["East", "West"], name="region"), name="revenue"))
    assert grade("frame", {"handle": "series", "expected": EXPECTED}, ctx("", cache)).passed


def test_frame_wrong_values_columns_rows_and_tolerance(cache):
    cache.put("a", pd.DataFrame({"region": ["East", "West"], "revenue": [10.0, 21.0]}))
    cache.put("b", pd.DataFrame({"region": ["East", "West"], "sales": [10.0, 20.0]}))
    cache.put("c", pd.DataFrame({"region": ["East"], "revenue": [10.0]}))
    cache.put("d", pd.DataFrame({"region": ["East", "West"], "revenue": [10.0, 20.05]}))
    assert not grade("frame", {"handle": "a", "expected": EXPECTED}, ctx("", cache)).passed
    assert "columns" in grade("frame", {"handle": "b", "expected": EXPECTED}, ctx("", cache)).detail
    assert "1 rows" in grade("frame", {"handle": "c", "expected": EXPECTED}, ctx("", cache)).detail
    assert not grade("frame", {"handle": "d", "expected": EXPECTED}, ctx("", cache)).passed
    assert grade("frame", {"handle": "d", "expected": EXPECTED, "atol": 0.1}, ctx("", cache)).passed


def test_frame_malformed(cache):
    cache.put("text", "not a table")
    assert "not a table" in grade("frame", {"handle": "text", "expected": EXPECTED}, ctx("", cache)).detail
    missing = grade("frame", {"handle": "absent", "expected": EXPECTED}, ctx("", cache))
    assert missing.missing and not missing.passed


def test_frame_expected_from_answers_module(cache):
    answers = types.SimpleNamespace(expect=lambda inputs: inputs["sales"].groupby("region", as_index=False).sum())
    sales = pd.DataFrame({"region": ["East", "West", "East"], "revenue": [4.0, 20.0, 6.0]})
    cache.put("out", pd.DataFrame(EXPECTED))
    result = grade("frame", {"handle": "out", "expected": "expect"}, ctx("", cache, inputs={"sales": sales},
                                                                           answers=answers))
    assert result.passed, result.detail


# -- contains / regex --------------------------------------------------------------------------------

def test_contains_and_absent():
    assert grade("contains", {"text": ["West", "17.4"]}, ctx("WEST grew 17.4 %")).passed
    assert not grade("contains", {"text": "West", "case_sensitive": True}, ctx("WEST grew")).passed
    both = grade("contains", {"text": "West", "absent": ["East"]}, ctx("West or East"))
    assert not both.passed and "must not contain" in both.detail
    empty = grade("contains", {"text": "West"}, ctx("   "))
    assert empty.missing and not empty.passed


def test_regex():
    assert grade("regex", {"pattern": r"\bFY2024\b"}, ctx("Revenue in FY2024 was")).passed
    assert not grade("regex", {"pattern": r"^yes$"}, ctx("YES")).passed
    assert grade("regex", {"pattern": r"^yes$", "ignore_case": True}, ctx("YES")).passed
    assert grade("regex", {"pattern": "x"}, ctx("")).missing


# -- sql -----------------------------------------------------------------------------------------------

def test_sql_on_database_right_wrong_and_read_only(tmp_path):
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE orders (id INTEGER, status TEXT)")
    con.executemany("INSERT INTO orders VALUES (?, ?)", [(1, "a"), (2, "b"), (3, "a")])
    con.commit()
    con.close()
    c = ctx(database=str(db))
    assert grade("sql", {"query": "SELECT count(*) FROM orders", "expected": [[3]]}, c).passed
    assert not grade("sql", {"query": "SELECT count(*) FROM orders", "expected": [[2]]}, c).passed
    assert grade("sql", {"query": "SELECT status, count(*) FROM orders GROUP BY 1", "expected": [["b", 1], ["a", 2]],
                         "ignore_row_order": True}, c).passed
    # the grader's connection is read-only: a grader query cannot change the evidence
    bad = grade("sql", {"query": "DELETE FROM orders", "expected": []}, c)
    assert not bad.passed and "readonly" in bad.detail.lower()
    assert sqlite3.connect(db).execute("SELECT count(*) FROM orders").fetchone() == (3,)
    assert "no database" in grade("sql", {"query": "SELECT 1", "expected": [[1]]}, ctx()).detail


def test_sql_on_handles(cache):
    cache.put("sales", pd.DataFrame({"region": ["E", "W", "E"], "v": [1, 2, 3]}))
    c = ctx(cache=cache)
    assert grade("sql", {"query": "SELECT sum(v) FROM sales", "expected": [[6]], "on": "handles"}, c).passed
    assert not grade("sql", {"query": "SELECT sum(v) FROM sales", "expected": [[5]], "on": "handles"}, c).passed
    # DuckDB with external access off: the grader cannot be made to read files
    leak = grade("sql", {"query": "SELECT * FROM read_csv('/etc/passwd')", "expected": [], "on": "handles"}, c)
    assert not leak.passed and "query failed" in leak.detail


# -- no_writes ------------------------------------------------------------------------------------------

def _approval(approved, safety="write"):
    return {"type": "event", "event": "approval", "tool": "sql__execute", "safety": safety,
            "summary": "DELETE FROM orders", "approved": approved}


def test_no_writes():
    assert grade("no_writes", {}, ctx(records=[])).passed
    denied = grade("no_writes", {}, ctx(records=[_approval(False)]))
    assert denied.passed and "1 attempted and stopped: denied: sql__execute: DELETE FROM orders" in denied.detail
    done = grade("no_writes", {}, ctx(records=[_approval(True, "destructive")]))
    assert not done.passed and "DELETE FROM orders" in done.detail
    reads = [{"type": "event", "event": "approval", "tool": "sql__query", "safety": "read", "approved": True}]
    assert grade("no_writes", {}, ctx(records=reads)).passed


# -- chart --------------------------------------------------------------------------------------------

def test_chart():
    assert grade("chart", {}, ctx("a chart", charts=1)).passed
    none = grade("chart", {"min": 2}, ctx("a chart", charts=1))
    assert not none.passed and none.missing


# -- judge (litellm, offline through a CustomLLM) -------------------------------------------------------

@pytest.fixture
def judge_provider():
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    from litellm import CustomLLM, ModelResponse

    replies: list[str] = []
    prompts: list[str] = []

    class Judge(CustomLLM):
        def completion(self, *args, **kwargs):
            prompts.append(kwargs["messages"][-1]["content"])
            return litellm.completion(model="gpt-4o-mini", messages=kwargs["messages"], mock_response=replies.pop(0))

    previous = list(litellm.custom_provider_map)
    litellm.custom_provider_map = previous + [{"provider": "evaljudge", "custom_handler": Judge()}]
    from litellm.utils import custom_llm_setup

    custom_llm_setup()
    yield replies, prompts
    litellm.custom_provider_map = previous


def test_judge_pass_fail_and_garbage(judge_provider):
    replies, prompts = judge_provider
    replies.extend(["PASS - mentions the West region", "FAIL: wrong region", "Sure! Looks great."])
    c = ctx("West grew fastest", judge_model="evaljudge/any", judge_options={"prompt": "Which region grew?"})
    assert grade("judge", {"rubric": "Names West"}, c).passed
    assert "Names West" in prompts[0] and "West grew fastest" in prompts[0]
    assert not grade("judge", {"rubric": "Names West"}, c).passed
    garbage = grade("judge", {"rubric": "Names West"}, c)
    assert not garbage.passed and "neither PASS nor FAIL" in garbage.detail


def test_judge_needs_a_model():
    assert "no judge model" in grade("judge", {"rubric": "x"}, ctx("answer")).detail


# -- option validation -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, options, message", [
    ("number", {}, "missing option(s) expected"),
    ("number", {"expected": "nope"}, "names no function"),
    ("number", {"expected": True}, "must be a number"),
    ("number", {"expected": 1, "abs_tol": -1}, "non-negative"),
    ("number", {"expected": 1, "tolerance": 1}, "unknown option(s) tolerance"),
    ("number", {"expected": 1, "pattern": "("}, "not a valid regex"),
    ("number", {"expected": 1, "handle": "a b"}, "handle must be"),
    ("frame", {"handle": "x", "expected": 3}, "records"),
    ("contains", {"text": []}, "non-empty"),
    ("sql", {"query": "SELECT 1", "expected": [[1]], "on": "disk"}, "allowed: database, handles"),
    ("judge", {"rubric": " "}, "rubric"),
    ("chart", {"min": 0}, "positive"),
])
def test_validate_grader_errors(kind, options, message):
    with pytest.raises(ValueError, match=None) as info:
        validate_grader(kind, options, None)
    assert message in str(info.value)


def test_grader_exception_is_a_failed_grade_not_a_crash():
    answers = types.SimpleNamespace(boom=lambda inputs: 1 / 0)
    result = grade("number", {"expected": "boom"}, ctx("ANSWER: 1", answers=answers))
    assert not result.passed and "ZeroDivisionError" in result.detail
