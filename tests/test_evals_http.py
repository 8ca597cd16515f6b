"""A real-model run path: ``--model openai/...`` over HTTP against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest

from harness_magic.evals.__main__ import main


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def test_core_task_over_http_end_to_end(server, api_key, tmp_path):
    server.replies = [
        {"text": "Summing revenue.", "tool_calls": [{"id": "c1", "name": "python_interpreter",
                                                      "arguments": {"code": "print(round(sales['revenue'].sum(), 2))"}}],
         "usage": {"prompt_tokens": 900, "completion_tokens": 30, "cached_tokens": 600}},
        {"text": "Total revenue was 79,231.70.\nANSWER: 79231.70",
         "usage": {"prompt_tokens": 1000, "completion_tokens": 12, "cached_tokens": 900}},
    ]
    out = tmp_path / "http.json"
    code = main(["run", "core", "--model", "openai/test-model", "--api-base", server.api_base, "--task",
                 "total_revenue", "--out", str(out), "--quiet"])
    assert code == 0
    result = json.loads(out.read_text())["results"][0]
    assert result["passed"] and result["turns"] == 2
    assert result["input_tokens"] == 1900 and result["output_tokens"] == 42 and result["cached_tokens"] == 1500
    # the server saw a real chat-completions request with the tools and the task prompt
    first = server.requests[0]
    assert first["model"] == "test-model"
    assert any(t["function"]["name"] == "python_interpreter" for t in first["tools"])
    assert "total revenue of the year" in json.dumps(first["messages"])
    # the tool result the model got back came from the sandbox worker running on the task's data
    assert "79231.7" in json.dumps(server.requests[1]["messages"])


def test_wrong_answer_over_http_is_graded_wrong(server, api_key, tmp_path):
    server.replies = [{"text": "ANSWER: 198.08"}]
    out = tmp_path / "http.json"
    assert main(["run", "core", "--model", "openai/test-model", "--api-base", server.api_base, "--task",
                 "total_revenue", "--out", str(out), "--quiet"]) == 1
    result = json.loads(out.read_text())["results"][0]
    assert not result["passed"] and result["failure"] == "wrong_answer"


def test_provider_error_over_http(server, api_key, tmp_path):
    server.replies = [{"status": 400, "error": "model not found"}]
    out = tmp_path / "http.json"
    assert main(["run", "core", "--model", "openai/test-model", "--api-base", server.api_base, "--task",
                 "total_revenue", "--out", str(out), "--quiet"]) == 1
    result = json.loads(out.read_text())["results"][0]
    assert result["failure"] == "provider_error" and "model not found" in (result["error"] or "")


def test_budget_limit_over_http_in_a_user_suite(server, api_key, tmp_path):
    suite = tmp_path / "mysuite"
    suite.mkdir()
    (suite / "two.yaml").write_text(
        "id: two\n"
        "prompt: 'What is 1 + 1? End with ANSWER: <number>.'\n"
        "limits: {max_tokens: 1000}\n"
        "graders:\n  - number: {expected: 2}\n"
        "scripts:\n  reference: [{text: 'ANSWER: 2'}]\n"
        "  wrong: [{name: three, expect: wrong_answer, turns: [{text: 'ANSWER: 3'}]}]\n")
    call = {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": "print(1 + 1)"}}],
            "usage": {"prompt_tokens": 700, "completion_tokens": 10}}
    server.replies = [call, dict(call), {"text": "ANSWER: 2"}]
    out = tmp_path / "budget.json"
    assert main(["run", str(suite), "--model", "openai/test-model", "--api-base", server.api_base, "--out", str(out),
                 "--quiet"]) == 1
    result = json.loads(out.read_text())["results"][0]
    assert result["status"] == "budget_tokens" and result["failure"] == "limit"
    assert len(server.requests) == 2  # stopped at the budget, the third reply was never asked for


def test_judge_grader_over_http_next_to_a_deterministic_one(server, api_key, tmp_path):
    suite = tmp_path / "judged"
    suite.mkdir()
    (suite / "why.yaml").write_text(
        "id: why\n"
        "prompt: 'What is 1 + 1, and why? End with ANSWER: <number>.'\n"
        "graders:\n  - number: {expected: 2}\n  - judge: {rubric: 'Explains that one plus one is two.'}\n"
        "scripts:\n  reference: [{text: 'ANSWER: 2'}]\n"
        "  wrong: [{name: three, expect: wrong_answer, turns: [{text: 'ANSWER: 3'}]}]\n")
    server.replies = [{"text": "One and one make two.\nANSWER: 2"}, {"text": "PASS: it explains the sum."},
                      {"text": "ANSWER: 2"}, {"text": "FAIL: no explanation."}]
    out = tmp_path / "judged.json"
    args = ["run", str(suite), "--model", "openai/test-model", "--api-base", server.api_base,
            "--judge-model", "openai/judge-model", "--out", str(out), "--quiet", "--no-stream"]
    assert main(args) == 0
    assert server.requests[1]["model"] == "judge-model"
    assert "Explains that one plus one is two." in server.requests[1]["messages"][0]["content"]
    assert main(args) == 1
    result = json.loads(out.read_text())["results"][0]
    grades = {g["kind"]: g["passed"] for g in result["grades"]}
    assert grades == {"number": True, "judge": False} and result["failure"] == "wrong_answer"
