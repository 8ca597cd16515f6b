"""After-tool verification: failed checks become error results the model recovers from."""

from __future__ import annotations

import pandas as pd
import pytest

from harness_magic import Harness, InProcessInterpreter, ProviderAdapter, ScriptedModel, SessionCache, make_interpreter_tools
from harness_magic.core.transcript.log import read_log
from harness_magic.core.control.verification import Verifier, handle_matches

BAD = "import pandas as pd\nsave('summary', pd.DataFrame({'region': ['N', None], 'sales': [1, 2]}))"
GOOD = ("import pandas as pd\n"
        "save('summary', pd.DataFrame({'region': ['N', 'S'], 'sales': [1, 2], 'growth': [0.1, 0.2]}))")


def run_with(verifier: Verifier, tmp_path, *codes: str):
    cache = SessionCache()
    turns = [{"tool_calls": [{"name": "python_interpreter", "arguments": {"code": c}}]} for c in codes]
    model = ScriptedModel(turns + [{"text": "Summary ready."}])
    harness = Harness(ProviderAdapter("scripted", transport=model), "sys",
                      make_interpreter_tools(cache, InProcessInterpreter()), run_dir=str(tmp_path), cache=cache)
    verifier.install(harness)
    events = []
    harness.subscribe(events.append)
    return harness.run_result("summarise"), events


def test_failed_verification_returns_an_error_and_the_model_recovers(tmp_path):
    verifier = Verifier().require_columns(["region", "growth"], handles="summary").no_nulls(["region"], handles="summary")
    result, events = run_with(verifier, tmp_path, BAD, GOOD)
    first, second = [r for m in result.messages for r in m.tool_results]
    assert first.is_error and "Verification failed: `summary` require_columns(region, growth): missing columns " \
                               "['growth']" in first.content
    assert "`summary` no_nulls(region): null values in region (1 row)" in first.content
    assert not second.is_error and "summary_2" in second.content
    assert result.status == "completed" and result.text == "Summary ready."
    checked = [e for e in events if e.kind == "verification_checked"]
    assert [(e.passed, e.tool_use_id) for e in checked] == [(False, "call_1"), (True, "call_2")]
    assert any(e.kind == "notice" and e.level == "warning" for e in events)
    logged = [r for r in read_log(result.run_file) if r["type"] == "event" and r["name"] == "verification"]
    assert [(r["turn"], r["passed"], len(r["checks"])) for r in logged] == [(1, False, 2), (2, True, 2)]


def test_row_count_bounds(tmp_path):
    verifier = Verifier().row_count(min_rows=3, handles="summary")
    result, _ = run_with(verifier, tmp_path, GOOD)
    (only,) = [r for m in result.messages for r in m.tool_results]
    assert only.is_error and "2 rows, fewer than min_rows=3" in only.content


def test_rules_apply_only_to_matching_handles_and_tools(tmp_path):
    verifier = Verifier().require_columns(["nope"], handles="other").require_columns(["nope"], tools="sql_*")
    result, events = run_with(verifier, tmp_path, GOOD)
    assert not any(r.is_error for m in result.messages for r in m.tool_results)
    assert not [e for e in events if e.kind == "verification_checked"]


def test_a_non_table_under_an_explicit_name_fails_but_a_glob_skips_it():
    verifier = Verifier().require_columns(["a"], handles="summary").require_columns(["a"], handles="s*")
    (outcome,) = verifier.check_handle("python_interpreter", "summary", [1, 2])
    assert not outcome.ok and "expected a table" in outcome.detail


def test_custom_rule_and_a_rule_that_raises():
    verifier = Verifier().add_rule("positive_sales", lambda df: None if (df["sales"] > 0).all() else "sales <= 0")
    verifier.add_rule("broken", lambda df: df["missing"])
    frame = pd.DataFrame({"sales": [1, -1]})
    outcomes = verifier.check_handle("t", "x", frame)
    assert [(o.rule, o.ok) for o in outcomes] == [("positive_sales", False), ("broken", False)]
    assert "KeyError" in outcomes[1].detail


def test_handle_names_match_cache_suffixes_and_globs():
    assert handle_matches("summary_2", "summary") and handle_matches("summary", "summary")
    assert not handle_matches("summary_total", "summary")
    assert handle_matches("sales_q1", "sales_*")


def test_developer_mistakes_raise_early():
    with pytest.raises(ValueError, match="min_rows=5 is greater than max_rows=1"):
        Verifier().row_count(5, 1)
    with pytest.raises(ValueError, match="at least one column"):
        Verifier().require_columns([])
