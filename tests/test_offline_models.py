"""Offline models: scripted (Python or JSON) and replay of a recorded log."""

from __future__ import annotations

import json
import os

import pytest

from harness_magic import (
    AsyncHarness,
    Harness,
    InProcessInterpreter,
    ProviderAdapter,
    ProviderError,
    ReplayModel,
    ScriptedModel,
    SessionCache,
    make_interpreter_tools,
    reconstruct_transcript,
)
from harness_magic.core.transcript.events import RunFinished, TextDelta
from harness_magic.core.providers.adapter import AsyncProviderAdapter

TURNS = [
    {"text": "Looking.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": "sum(range(10))"}}]},
    {"text": "The sum is 45."},
]


def harness_for(adapter, tmp_path, cls=Harness):
    cache = SessionCache()
    return cls(adapter, "sys", make_interpreter_tools(cache, InProcessInterpreter()), run_dir=str(tmp_path),
               cache=cache)


def test_scripted_model_from_a_json_file_drives_a_run(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": TURNS}))
    result = harness_for(ProviderAdapter(f"scripted/{script}"), tmp_path).run_result("sum?")
    assert result.text == "The sum is 45."
    assert result.messages[2].tool_results[0].content == "45"
    assert result.usage.input_tokens > 0 and result.usage.calls == 2


def test_scripted_model_reports_prefix_reuse_as_cached_tokens(tmp_path):
    result = harness_for(ProviderAdapter("offline/t", transport=ScriptedModel(TURNS)), tmp_path).run_result("q")
    assert result.usage.cached_tokens > 0


def test_exhausted_script_ends_the_run_with_a_clear_error(tmp_path):
    harness = harness_for(ProviderAdapter("offline/t", transport=ScriptedModel([])), tmp_path)
    result = harness.run_result("q")
    assert result.status == "error" and "no scripted turn left" in result.error


def test_bad_scripts_and_model_ids_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown keys in scripted turn"):
        ScriptedModel([{"txt": "typo"}])
    with pytest.raises(ValueError, match="no built-in offline script 'nope'"):
        ProviderAdapter("offline/nope")
    with pytest.raises(FileNotFoundError, match="scripted model file not found"):
        ProviderAdapter(f"scripted/{tmp_path}/missing.json")


def test_replay_reproduces_a_recorded_transcript_exactly(tmp_path):
    first = harness_for(ProviderAdapter("offline/t", transport=ScriptedModel(TURNS)), tmp_path / "a").run_result("q")
    replayed = harness_for(ProviderAdapter(f"replay/{first.run_file}"), tmp_path / "b").run_result("q")
    assert list(replayed.messages) == list(first.messages)
    assert replayed.usage == first.usage
    assert reconstruct_transcript(replayed.run_file) == list(first.messages)


def test_replay_model_rejects_a_log_without_turns(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no recorded turns"):
        ReplayModel(empty)


def test_async_harness_streams_events_to_the_end(tmp_path):
    import asyncio

    adapter = AsyncProviderAdapter("offline/t", transport=ScriptedModel(TURNS))
    harness = harness_for(adapter, tmp_path, cls=AsyncHarness)

    async def collect():
        return [event async for event in harness.run_stream("q")]

    events = asyncio.run(collect())
    assert isinstance(events[-1], RunFinished) and events[-1].result.text == "The sum is 45."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Looking.The sum is 45."


def test_async_harness_over_http(server, tmp_path):
    import asyncio

    server.replies = [{"tool_calls": [{"id": "a", "name": "python_interpreter", "arguments": {"code": "2**10"}}]},
                      {"text": "1024"}]
    adapter = AsyncProviderAdapter("openai/test", api_base=server.api_base, api_key="k")
    result = asyncio.run(harness_for(adapter, tmp_path, cls=AsyncHarness).run_result("q"))
    assert result.text == "1024" and result.messages[2].tool_results[0].content == "1024"


def test_missing_api_key_names_the_variable_and_the_offline_model(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = harness_for(ProviderAdapter("openai/gpt-4o-mini"), tmp_path).run_result("q")
    assert result.status == "error"
    assert "OPENAI_API_KEY" in result.error and "offline/quickstart" in result.error


def test_api_key_never_appears_in_logs_or_reprs(server, tmp_path):
    server.replies = [{"text": "hi"}]
    adapter = ProviderAdapter("openai/test", api_base=server.api_base, api_key="sk-SECRET-123")
    result = harness_for(adapter, tmp_path).run_result("q")
    assert "sk-SECRET-123" not in open(result.run_file).read()
    assert "sk-SECRET-123" not in repr(adapter.transport)
