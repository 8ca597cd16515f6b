"""Every stored turn stays valid for every provider, through litellm over real HTTP.

The servers are strict emulations (tests/strict_apis.py): the Anthropic Messages
API (SSE, prompt caching with cache_creation/cache_read tokens) and OpenAI Chat
Completions, rejecting what the real APIs reject. Each scenario ends with a
follow-up request that must be accepted too.
"""

from __future__ import annotations

import json
import socket

import pytest

from harness_magic import Harness, ProviderAdapter, SessionCache, ToolSpec, reconstruct_transcript
from harness_magic.core.transcript.events import ContextCompacted, TextDelta
from harness_magic.core.agent.result import NO_ANSWER_TEXT, PromptTooLarge
from harness_magic.core.agent.run import INTERRUPTED_ANSWER_NOTE
from harness_magic.core.transcript.messages import Message
from harness_magic.core.providers.payload import EMPTY_TOOL_RESULT_TEXT
from harness_magic.core.providers.errors import ModelRouteError
from harness_magic.core.providers.transport import check_model_route
from scripted_server import ScriptedServer
from strict_apis import AnthropicServer, anthropic_problems, openai_problems

SYSTEM = "You are a careful analyst. " * 20
CLAUDE = "anthropic/claude-sonnet-4-20250514"


def echo(text: str = "") -> str:
    return text


def tools() -> list[ToolSpec]:
    return [ToolSpec(name="echo", description="Echo the text back.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}}, handler=echo)]


def call(text: str, call_id: str) -> dict:
    return {"text": "", "tool_calls": [{"id": call_id, "name": "echo", "arguments": {"text": text}}]}


@pytest.fixture
def anthropic():
    with AnthropicServer() as srv:
        yield srv


@pytest.fixture
def strict_openai():
    with ScriptedServer(strict=True) as srv:
        yield srv


def claude(srv: AnthropicServer, stream: bool = True, **options) -> ProviderAdapter:
    return ProviderAdapter(CLAUDE, api_base=srv.api_base, api_key="sk-test", stream=stream, sleep=lambda s: None,
                           **options)


def gpt(srv: ScriptedServer, model: str = "openai/test-model", **options) -> ProviderAdapter:
    return ProviderAdapter(model, api_base=srv.api_base, api_key="sk-test", sleep=lambda s: None, **options)


def harness(adapter, tmp_path, **options) -> Harness:
    return Harness(adapter, SYSTEM, tools(), run_dir=str(tmp_path / "runs"), cache=SessionCache(), **options)


def pairs_intact(messages: list[Message]) -> bool:
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_uses:
            following = messages[index + 1]
            if [r.tool_use_id for r in following.tool_results] != [u.id for u in message.tool_uses]:
                return False
    return True


# -- the emulations reject what the real APIs reject -------------------------------------------


def test_the_anthropic_emulation_rejects_what_the_real_api_rejects():
    ok = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert anthropic_problems(ok) is None
    assert "non-whitespace" in anthropic_problems({**ok, "messages": [
        {"role": "user", "content": [{"type": "text", "text": " \n"}]}]})
    assert "without `tool_result`" in anthropic_problems({**ok, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "echo", "input": {}}]},
        {"role": "user", "content": "next"}]})
    assert "unexpected `tool_use_id`" in anthropic_problems({**ok, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}]})
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    assert "maximum of 4" in anthropic_problems({**ok, "messages": [{"role": "user", "content": [marked] * 5}]})
    assert "Extra inputs" in anthropic_problems({**ok, "cache_markers": True})


def test_the_openai_emulation_rejects_what_the_real_api_rejects():
    user = {"role": "user", "content": "hi"}
    assert openai_problems({"messages": [user]}) is None
    assert "got null" in openai_problems({"messages": [user, {"role": "assistant", "content": None}, user]})
    assert "did not have response messages" in openai_problems({"messages": [user, {
        "role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {}}]}, user]})
    assert "preceeding" in openai_problems({"messages": [user, {"role": "tool", "tool_call_id": "c1", "content": "x"}]})
    marked = {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
    assert openai_problems({"messages": [marked]}) is None
    assert "cache_control" in openai_problems({"messages": [marked]}, strict_fields=True)


# -- empty tool results and empty answers ------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
@pytest.mark.parametrize("empty", ["", "   \n\t"], ids=["empty", "whitespace"])
def test_empty_tool_result_then_follow_up_is_accepted_by_anthropic(anthropic, tmp_path, stream, empty):
    anthropic.replies = [call(empty, "toolu_1"), {"text": "Nothing came back."}, {"text": "Still fine."}]
    h = harness(claude(anthropic, stream), tmp_path)
    first = h.run_result("Echo nothing.")
    second = h.ask_result("And now?")
    assert anthropic.rejections == []
    assert (first.status, second.status) == ("completed", "completed")
    assert h.messages[2].tool_results[0].content == EMPTY_TOOL_RESULT_TEXT
    assert second.text == "Still fine."


@pytest.mark.parametrize("empty", ["", "  \n"], ids=["empty", "whitespace"])
def test_empty_answer_then_follow_up_is_accepted_by_anthropic_and_openai(anthropic, strict_openai, tmp_path, empty):
    for srv, adapter in ((anthropic, claude(anthropic)), (strict_openai, gpt(strict_openai))):
        srv.replies = [{"text": empty}, {"text": "Here is the answer."}]
        h = harness(adapter, tmp_path)
        first = h.run_result("Say nothing.")
        assert first.status == "completed" and first.text == NO_ANSWER_TEXT, "a run with no text says so"
        follow = h.ask_result("Now answer.")
        assert srv.rejections == [] and follow.text == "Here is the answer."
        assert [m.role for m in h.messages] == ["user", "assistant", "user", "assistant"]


def test_cache_markers_only_where_the_provider_caches_and_the_trait_overrides(tmp_path):
    with ScriptedServer(strict_fields=True) as gateway:  # a gateway that rejects unknown fields
        gateway.replies = [call("a", "c1"), {"text": "ok"}] * 2
        auto = harness(gpt(gateway), tmp_path).run_result("go")  # unknown model: no caching support
        assert auto.status == "completed" and gateway.rejections == []
        assert b"cache_control" not in b"".join(gateway.raw_requests)
        forced = harness(gpt(gateway, prompt_caching="on"), tmp_path).run_result("go")
        assert forced.status == "error" and "cache_control" in gateway.rejections[0]
        assert forced.rolled_back
        # a model litellm says caches, pointed at the strict gateway: "off" overrides
        gateway.replies = [call("a", "c1"), {"text": "ok"}]
        assert gpt(gateway, model="openai/gpt-4o-mini").cache_markers
        off = harness(gpt(gateway, model="openai/gpt-4o-mini", prompt_caching="off"), tmp_path).run_result("go")
        assert off.status == "completed"
    with pytest.raises(ValueError, match="prompt_caching 'sometimes' is not valid; allowed: auto, on, off"):
        ProviderAdapter("openai/x", prompt_caching="sometimes")


def test_anthropic_prompt_caching_reports_creation_and_reads_exactly(anthropic, tmp_path):
    anthropic.replies = [call("a" * 400, "toolu_1"), call("b" * 400, "toolu_2"), {"text": "done"}]
    h = harness(claude(anthropic), tmp_path)
    result = h.run_result("Work in three steps.")
    assert result.status == "completed" and anthropic.rejections == []
    for body in anthropic.requests:
        marks = json.dumps(body).count("cache_control")
        assert 1 <= marks <= 4
    usages = anthropic.usages
    assert usages[0]["cache_read_input_tokens"] == 0 and usages[0]["cache_creation_input_tokens"] > 0
    assert all(u["cache_read_input_tokens"] > 0 for u in usages[1:]), "each request reads the previous prefix"
    assert result.usage.cached_tokens == sum(u["cache_read_input_tokens"] for u in usages)
    assert result.usage.input_tokens == sum(
        u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"] for u in usages)
    assert result.usage.output_tokens == sum(u["output_tokens"] for u in usages)


# -- failed and interrupted runs ---------------------------------------------------------------


def test_failed_run_then_follow_up_sends_one_prompt_only(anthropic, tmp_path):
    big = "x" * 5000
    anthropic.replies = [{"status": 500, "error": "overloaded"}, {"text": "Answered."}]
    h = harness(claude(anthropic, max_retries=0), tmp_path)
    failed = h.ask_result(f"First question {big}")
    assert failed.status == "error" and failed.rolled_back and failed.turns == 1
    assert "taken back out of the conversation" in failed.error
    assert h.messages == []
    follow = h.ask_result("Second question")
    assert follow.status == "completed" and anthropic.rejections == []
    sent = anthropic.requests[-1]["messages"]
    assert len(sent) == 1 and big not in json.dumps(sent), "the failed prompt is not sent again"
    records = [json.loads(line) for line in open(failed.run_file, encoding="utf-8")]
    assert records[0]["prompt"].startswith("First question") and records[-1]["rolled_back"] is True
    assert reconstruct_transcript(failed.run_file) == []


def test_interrupt_while_streaming_the_first_answer_then_follow_up(anthropic, tmp_path):
    anthropic.replies = [{"text": "A long streamed answer that is cut off."}, {"text": "Fresh answer."}]
    h = harness(claude(anthropic), tmp_path)

    def stop(event):
        if isinstance(event, TextDelta):
            raise KeyboardInterrupt

    unsubscribe = h.subscribe(stop)
    interrupted = h.ask_result("Tell me a lot.")
    unsubscribe()
    # the text already streamed is the answer so far, and stays in the conversation marked as cut off
    assert interrupted.status == "interrupted" and not interrupted.rolled_back
    assert interrupted.text and "A long streamed answer that is cut off.".startswith(interrupted.text)
    assert [m.role for m in h.messages] == ["user", "assistant"]
    assert h.messages[1].text == interrupted.text + INTERRUPTED_ANSWER_NOTE
    follow = h.ask_result("Short answer please.")
    assert follow.status == "completed" and anthropic.rejections == []


def test_interrupt_during_a_tool_then_follow_up(anthropic, tmp_path):
    def slow(text: str = "") -> str:
        raise KeyboardInterrupt

    spec = ToolSpec(name="echo", description="Echo.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}}, handler=slow)
    anthropic.replies = [{"text": "Calling.", "tool_calls": [
        {"id": "toolu_1", "name": "echo", "arguments": {"text": "a"}},
        {"id": "toolu_2", "name": "echo", "arguments": {"text": "b"}}]}, {"text": "Recovered."}]
    h = Harness(claude(anthropic), SYSTEM, [spec], run_dir=str(tmp_path / "runs"), cache=SessionCache())
    interrupted = h.ask_result("Use the tool twice.")
    assert interrupted.status == "interrupted" and not interrupted.rolled_back and pairs_intact(h.messages)
    follow = h.ask_result("Go on.")
    assert follow.status == "completed" and anthropic.rejections == []


# -- errors that say what happened -------------------------------------------------------------


def test_connection_failure_names_the_url_and_the_socket_error_and_counts_no_turn(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    base = f"http://127.0.0.1:{port}/v1"
    h = harness(ProviderAdapter("openai/test-model", api_base=base, api_key="x", max_retries=0), tmp_path)
    result = h.ask_result("hello")
    assert result.status == "error" and result.turns == 0 and result.rolled_back
    assert base in result.error and "HTTP 500" not in result.error
    assert "Connect" in result.error or "refused" in result.error.lower()


def test_a_model_litellm_cannot_route_is_refused_before_any_request(tmp_path, monkeypatch):
    for model, prefix in (("foo/bar", "'foo/'"), ("../../etc/passwd", "'../'"), ("bar", "no provider prefix")):
        with pytest.raises(ModelRouteError) as info:
            check_model_route(model)
        message = str(info.value)
        assert "\n" not in message and prefix in message and "litellm.models_by_provider" in message
    with ScriptedServer() as srv:
        h = harness(ProviderAdapter("foo/bar", api_base=srv.api_base, api_key="x"), tmp_path)
        result = h.ask_result("hello")
        assert result.status == "error" and result.turns == 0 and srv.requests == []
        assert "'foo/'" in result.error


def test_no_api_key_counts_no_turn_and_leaves_no_prompt(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    h = harness(ProviderAdapter("openai/gpt-4o-mini"), tmp_path)
    for _ in range(2):
        result = h.ask_result("hello")
        assert result.status == "error" and result.turns == 0 and "OPENAI_API_KEY" in result.error
    assert h.messages == []


# -- context windows ---------------------------------------------------------------------------


def test_a_prompt_larger_than_the_window_is_refused_before_sending(anthropic, tmp_path):
    h = harness(claude(anthropic, context_window=2_000), tmp_path)
    with pytest.raises(PromptTooLarge) as info:
        h.ask_result("data " * 5_000)
    assert "2,000-token input window" in str(info.value) and info.value.tokens > 2_000
    assert anthropic.requests == [] and h.messages == []


def test_the_input_limit_comes_from_litellm_model_info():
    assert ProviderAdapter(CLAUDE, api_key="x").max_input_tokens == 200_000
    assert ProviderAdapter("openai/unknown-model", api_key="x").max_input_tokens is None
    assert ProviderAdapter("openai/unknown-model", api_key="x", context_window=5).max_input_tokens == 5


def test_a_200_turn_run_compacts_and_every_request_is_accepted(anthropic, tmp_path):
    turns = 200
    anthropic.replies = [call(f"row {i}: " + "v" * 600, f"toolu_{i}") for i in range(turns - 1)] + [
        {"text": "All rows read."}]
    window = 6_000
    h = harness(claude(anthropic, stream=False, context_window=window), tmp_path, max_turns=turns)
    events = []
    h.subscribe(lambda e: events.append(e) if isinstance(e, ContextCompacted) else None)
    result = h.run_result("Read every row.")
    assert result.status == "completed" and result.turns == turns, result.error
    assert anthropic.rejections == []
    assert events and {e.stage for e in events} >= {"summary"}
    assert all(e.tokens_after < e.tokens_before and e.limit == window for e in events)
    assert pairs_intact(h.messages) and h.messages[0].role == "user"
    # between compactions each request extends the previous one byte for byte
    compacted_at = {e.turn for e in events}
    for index in range(1, turns):
        if index + 1 in compacted_at:
            continue
        before, after = anthropic.requests[index - 1]["messages"], anthropic.requests[index]["messages"]
        strip = lambda ms: json.dumps(ms).replace(', "cache_control": {"type": "ephemeral"}', "")  # noqa: E731
        assert strip(after).startswith(strip(before)[:-1]), f"request {index + 1} rewrote the prefix"
    assert all(u["cache_read_input_tokens"] > 0 for i, u in enumerate(anthropic.usages[1:], 2)
               if i not in compacted_at)
    assert reconstruct_transcript(result.run_file) == h.messages
    log = [json.loads(line) for line in open(result.run_file, encoding="utf-8")]
    assert sum(r["type"] == "compaction" for r in log) == len(events)
