"""The loop's protocol invariants, driven through litellm over real HTTP."""

from __future__ import annotations

import copy
import json

import pytest

from harness_magic import (
    Harness,
    InProcessInterpreter,
    ScriptedModel,
    SessionCache,
    ToolSpec,
    make_interpreter_tools,
    reconstruct_transcript,
)
from harness_magic.core.transcript.events import TextDelta, ToolCallFinished
from harness_magic.core.transcript.messages import Message, ToolResultBlock

SYSTEM = "You are a test analyst. Stable prefix."
EMPTY = {"type": "object", "properties": {}}


def echo_tool(name: str = "echo", **kwargs):
    return ToolSpec(name=name, description="Echo the text.", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        handler=lambda text: f"echo: {text}", **kwargs)


def assert_pairing(messages: list[Message]) -> None:
    """Every tool use is answered once, in order, by the next message."""
    for index, message in enumerate(messages):
        if message.role != "assistant" or not message.tool_uses:
            continue
        following = messages[index + 1]
        assert following.role == "user"
        assert [r.tool_use_id for r in following.tool_results] == [u.id for u in message.tool_uses]


def make_harness(adapter, tmp_path, tools=None, **options) -> Harness:
    cache = SessionCache()
    tools = tools if tools is not None else make_interpreter_tools(cache, InProcessInterpreter()) + [echo_tool()]
    return Harness(adapter, SYSTEM, tools, run_dir=str(tmp_path / "runs"), cache=cache, **options)


@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
def test_parallel_tool_calls_are_each_answered_in_order(server, http_adapter, tmp_path, stream):
    server.replies = [
        {"text": "Two calls.", "tool_calls": [
            {"id": "c1", "name": "echo", "arguments": {"text": "a"}},
            {"id": "c2", "name": "python_interpreter", "arguments": {"code": "6*7"}},
            {"id": "c3", "name": "echo", "arguments": {"text": "b"}}]},
        {"text": "Done: 42."},
    ]
    result = make_harness(http_adapter(stream), tmp_path).run_result("go")
    assert result.status == "completed" and result.text == "Done: 42."
    assert_pairing(list(result.messages))
    results = result.messages[2].tool_results
    assert [r.content for r in results] == ["echo: a", "42", "echo: b"]
    sent = server.requests[1]["messages"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ["c1", "c2", "c3"]


def test_unknown_tool_gets_an_error_result_naming_available_tools(server, http_adapter, tmp_path):
    server.replies = [{"tool_calls": [{"id": "x", "name": "rm_rf", "arguments": {}}]}, {"text": "ok"}]
    result = make_harness(http_adapter(), tmp_path).run_result("go")
    (block,) = result.messages[2].tool_results
    assert block.is_error and block.tool_use_id == "x"
    assert "does not exist" in block.content and "python_interpreter" in block.content
    assert_pairing(list(result.messages))


def test_hidden_tool_is_neither_offered_nor_dispatched(server, http_adapter, tmp_path):
    calls = []
    hidden = ToolSpec(name="secret", description="hidden", parameters=EMPTY,
                      handler=lambda: calls.append(1) or "ran", visible=False, connector="vault")
    server.replies = [{"tool_calls": [{"id": "h", "name": "secret", "arguments": {}}]}, {"text": "ok"}]
    result = make_harness(http_adapter(), tmp_path, tools=[echo_tool(), hidden]).run_result("go")
    assert calls == []
    offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert offered == ["echo"]
    (block,) = result.messages[2].tool_results
    assert block.is_error and "not loaded" in block.content and "load_connectors" in block.content


def test_raising_tool_becomes_a_readable_error_result(server, http_adapter, tmp_path):
    def boom(text):
        raise RuntimeError(f"cannot handle {text}")

    tool = ToolSpec(name="boom", description="fails", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}}, handler=boom)
    server.replies = [{"tool_calls": [{"id": "b", "name": "boom", "arguments": {"text": "x"}},
                                      {"id": "e", "name": "echo", "arguments": {"text": "y"}}]},
                      {"text": "recovered"}]
    result = make_harness(http_adapter(), tmp_path, tools=[tool, echo_tool()]).run_result("go")
    first, second = result.messages[2].tool_results
    assert first.is_error and first.content == "RuntimeError: cannot handle x"
    assert not second.is_error and second.content == "echo: y"
    assert result.status == "completed"


def test_bad_arguments_become_an_error_result_listing_parameters(server, http_adapter, tmp_path):
    server.replies = [{"tool_calls": [{"id": "a", "name": "echo", "arguments": {"txt": "typo"}}]}, {"text": "ok"}]
    result = make_harness(http_adapter(), tmp_path).run_result("go")
    (block,) = result.messages[2].tool_results
    assert block.is_error and "Bad arguments for 'echo'" in block.content and "text" in block.content


def test_max_turns_cut_off_answers_every_tool_use(server, http_adapter, tmp_path):
    call = {"tool_calls": [{"id": "loop", "name": "echo", "arguments": {"text": "again"}}]}
    server.replies = [copy.deepcopy(call) for _ in range(3)]
    result = make_harness(http_adapter(), tmp_path, max_turns=2).run_result("go")
    assert result.status == "max_turns_exceeded" and result.turns == 2
    assert len(server.requests) == 2
    assert_pairing(list(result.messages))
    assert result.messages[-1].role == "user"


def test_system_prompt_is_byte_identical_in_every_request(server, http_adapter, tmp_path):
    server.replies = [{"tool_calls": [{"id": f"c{i}", "name": "echo", "arguments": {"text": str(i)}}]}
                      for i in range(3)] + [{"text": "end"}]
    harness = make_harness(http_adapter(), tmp_path)
    harness.register_reminder(lambda turn, max_turns: f"Reminder at turn {turn}.")
    harness.run_result("go")
    systems = [json.dumps(r["messages"][0], sort_keys=True).encode() for r in server.requests]
    assert len(systems) == 4 and len(set(systems)) == 1
    assert SYSTEM in systems[0].decode()


def test_reminders_appear_only_in_the_suffix(server, http_adapter, tmp_path):
    server.replies = [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "1"}}]}, {"text": "end"}]
    harness = make_harness(http_adapter(), tmp_path)
    harness.register_reminder(lambda turn, max_turns: f"REMINDER turn {turn}/{max_turns}")
    harness.run_result("go")
    for number, request in enumerate(server.requests, 1):
        texts = [json.dumps(m) for m in request["messages"]]
        where = [i for i, t in enumerate(texts) if f"REMINDER turn {number}/" in t]
        assert where == [len(texts) - 1], "the newest reminder is in the last message only"
        assert "REMINDER" not in texts[0]


def test_cache_control_is_sent_but_never_stored_or_logged(server, http_adapter, tmp_path):
    server.replies = [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "1"}}]}, {"text": "end"}]
    result = make_harness(http_adapter(prompt_caching="on"), tmp_path).run_result("go")
    assert all(b"cache_control" in body for body in server.raw_requests)
    system = server.requests[0]["messages"][0]["content"][0]
    assert system["cache_control"] == {"type": "ephemeral"}
    stored = json.dumps([repr(m) for m in result.messages])
    assert "cache_control" not in stored
    with open(result.run_file, encoding="utf-8") as handle:
        assert "cache_control" not in handle.read()


def test_a_transport_cannot_mutate_the_shared_rendering_or_the_history(tmp_path):
    class MutatingTransport:
        """A provider route that edits the payload in place (as some litellm routes do)."""

        def __init__(self):
            self.model = ScriptedModel([
                {"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}, {"text": "done"}])
            self.refused = []

        def complete(self, payload, on_text):
            response = self.model.complete(payload, on_text)
            for message in payload["messages"]:
                for attempt in (lambda: message.__setitem__("content", "MUTATED"),
                                lambda: message.pop("tool_calls", None),
                                lambda: message["content"].append({"type": "text", "text": "MUTATED"})):
                    try:
                        attempt()
                    except TypeError as exc:
                        self.refused.append(str(exc))
                    except AttributeError:  # string content has no append
                        pass
            return response

    from harness_magic import ProviderAdapter

    transport = MutatingTransport()
    adapter = ProviderAdapter("offline/test", transport=transport)
    harness = make_harness(adapter, tmp_path)
    result = harness.run_result("keep me")
    assert result.status == "completed"
    assert transport.refused and all("read-only" in r for r in transport.refused)
    before = copy.deepcopy(list(result.messages))
    assert result.messages[0].text == "keep me"
    assert result.messages[1].tool_uses[0].input == {"text": "x"}
    assert "MUTATED" not in json.dumps([repr(m) for m in harness.messages])
    assert "MUTATED" not in json.dumps(adapter.render(SYSTEM, harness.messages, []))
    assert list(harness.messages) == before


def test_rate_limit_is_retried_then_succeeds(server, http_adapter, tmp_path):
    server.replies = [{"status": 429, "error": "slow down"}, {"text": "fine"}]
    result = make_harness(http_adapter(max_retries=2), tmp_path).run_result("go")
    assert result.status == "completed" and result.text == "fine"
    assert len(server.requests) == 2


def test_server_errors_are_retried_then_surfaced_clearly(server, http_adapter, tmp_path):
    server.replies = [{"status": 500, "error": "boom"} for _ in range(3)]
    harness = make_harness(http_adapter(max_retries=2), tmp_path)
    result = harness.run_result("go")
    assert result.status == "error"
    assert "HTTP 500" in result.error and "after 3 attempts" in result.error
    assert len(server.requests) == 3
    assert harness.messages == [], "no half-written assistant turn, and the unanswered prompt is taken back"
    assert result.rolled_back and "taken back out of the conversation" in result.error


def test_usage_sums_across_turns_including_cached_tokens(server, http_adapter, tmp_path):
    server.replies = [
        {"tool_calls": [{"id": "a", "name": "echo", "arguments": {"text": "1"}}],
         "usage": {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 0}},
        {"tool_calls": [{"id": "b", "name": "echo", "arguments": {"text": "2"}}],
         "usage": {"prompt_tokens": 150, "completion_tokens": 12, "cached_tokens": 90}},
        {"text": "end", "usage": {"prompt_tokens": 200, "completion_tokens": 5, "cached_tokens": 140}},
    ]
    result = make_harness(http_adapter(), tmp_path).run_result("go")
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cached_tokens) == (450, 27, 230)
    assert result.usage.calls == 3 and result.turns == 3


def test_log_reconstructs_the_transcript_exactly(server, http_adapter, tmp_path):
    server.replies = [{"text": "step", "tool_calls": [{"id": "a", "name": "python_interpreter", "arguments": {
        "code": "import pandas as pd\nsave('frame', pd.DataFrame({'x': range(1000)}))"}}]},
        {"text": "final answer"}]
    harness = make_harness(http_adapter(), tmp_path)
    first = harness.run_result("first question")
    server.replies = [{"text": "second answer"}]
    second = harness.ask_result("follow-up")
    assert reconstruct_transcript(first.run_file) == list(first.messages)
    assert reconstruct_transcript(second.run_file) == list(second.messages)
    assert first.run_file != second.run_file


def test_log_holds_metadata_not_payloads(server, http_adapter, tmp_path):
    code = "import pandas as pd\nsave('big', pd.DataFrame({'marker': ['PAYLOAD_%d' % i for i in range(5000)]}))"
    server.replies = [{"tool_calls": [{"id": "a", "name": "python_interpreter", "arguments": {"code": code}}]},
                      {"text": "done"}]
    result = make_harness(http_adapter(), tmp_path).run_result("go")
    text = open(result.run_file, encoding="utf-8").read()
    assert "PAYLOAD_4999" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["type"] for r in records] == ["run_start", "turn", "tools", "turn", "run_end"]
    turn = records[3]
    assert {"latency_s", "usage", "cache", "request", "response"} <= set(turn)
    assert turn["cache"][0]["name"] == "big" and turn["cache"][0]["shape"] == [5000, 1]
    assert records[0]["system_sha256"] == turn["request"]["system_sha256"]


def test_text_streams_as_deltas(server, http_adapter, tmp_path):
    server.replies = [{"text": "A streamed answer in several pieces."}]
    harness = make_harness(http_adapter(), tmp_path)
    deltas = []
    harness.subscribe(lambda e: deltas.append(e.text) if isinstance(e, TextDelta) else None)
    harness.run_result("go")
    assert len(deltas) > 3 and "".join(deltas) == "A streamed answer in several pieces."


def test_interrupt_during_a_tool_leaves_a_consistent_transcript(tmp_path):
    from harness_magic import ProviderAdapter

    def interrupted(text):
        raise KeyboardInterrupt

    tools = [echo_tool(), ToolSpec(name="slow", description="", parameters={
        "type": "object", "properties": {"text": {"type": "string"}}}, handler=interrupted)]
    adapter = ProviderAdapter("offline/t", transport=ScriptedModel([{"tool_calls": [
        {"name": "echo", "arguments": {"text": "1"}}, {"name": "slow", "arguments": {"text": "2"}},
        {"name": "echo", "arguments": {"text": "3"}}]}, {"text": "after"}]))
    harness = make_harness(adapter, tmp_path, tools=tools)
    events = []
    harness.subscribe(events.append)
    result = harness.run_result("go")
    assert result.status == "interrupted"
    assert_pairing(list(result.messages))
    first, second, third = result.messages[-1].tool_results
    assert not first.is_error and second.is_error and third.is_error
    assert reconstruct_transcript(result.run_file) == list(result.messages)
    assert harness.ask_result("next").text == "after"


def test_tool_results_report_cached_handles(server, http_adapter, tmp_path):
    server.replies = [{"tool_calls": [{"id": "a", "name": "python_interpreter", "arguments": {
        "code": "import numpy as np\nsave('weekly summary', np.arange(10))\nsave('weekly summary', np.ones(3))"}}]},
        {"text": "done"}]
    harness = make_harness(http_adapter(), tmp_path)
    finished = []
    harness.subscribe(lambda e: finished.append(e) if isinstance(e, ToolCallFinished) else None)
    result = harness.run_result("go")
    assert result.handles == ("weekly_summary", "weekly_summary_2")
    content = result.messages[2].tool_results[0].content
    assert "`weekly_summary`" in content and "`weekly_summary_2`" in content
    assert finished[0].snapshots[0]["type"] == "ndarray"


def test_run_and_ask_return_text_or_raise(tmp_path):
    from harness_magic import MaxTurnsExceeded, ProviderAdapter

    adapter = ProviderAdapter("offline/t", transport=ScriptedModel(
        [{"text": "one"}, {"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}]))
    harness = make_harness(adapter, tmp_path, max_turns=1)
    assert harness.run("q") == "one"
    with pytest.raises(MaxTurnsExceeded):
        harness.ask("q2")


def test_constructor_rejects_bad_values(tmp_path):
    from harness_magic import ProviderAdapter

    adapter = ProviderAdapter("offline/t", transport=ScriptedModel([]))
    with pytest.raises(ValueError, match="max_turns must be at least 1, got 0"):
        Harness(adapter, SYSTEM, [], max_turns=0)
    with pytest.raises(ValueError, match="duplicate tool names: echo"):
        Harness(adapter, SYSTEM, [echo_tool(), echo_tool()])
    with pytest.raises(ValueError, match="tool name 'bad name'"):
        echo_tool("bad name")
    with pytest.raises(ValueError, match="non-empty"):
        make_harness(adapter, tmp_path).run_result("   ")


def test_handles_made_by_a_tool_record_the_turn_and_tool(tmp_path):
    import pandas as pd

    from harness_magic import ProviderAdapter

    frame_tool = ToolSpec(name="fetch_orders", description="", parameters=EMPTY, result_name="sales_orders",
                          handler=lambda: pd.DataFrame({"amount": range(10)}))
    adapter = ProviderAdapter("offline/t", transport=ScriptedModel([
        {"text": "first"}, {"tool_calls": [{"name": "fetch_orders", "arguments": {}}]}, {"text": "done"}]))
    harness = make_harness(adapter, tmp_path, tools=[frame_tool])
    harness.run_result("warm up")
    result = harness.ask_result("fetch")
    assert result.handles == ("sales_orders",)
    (info,) = harness.cache.metadata()
    assert (info["name"], info["turn"], info["tool"]) == ("sales_orders", 1, "fetch_orders")


# -- the harness's public surface for code outside the loop ----------------------------------


def offline(replies):
    from harness_magic import ProviderAdapter

    return ProviderAdapter("offline/t", transport=ScriptedModel(replies))


def test_a_check_raising_stop_run_ends_the_run_with_its_status_and_answers_open_tool_uses(tmp_path):
    from harness_magic.core.agent.result import StopRun
    from harness_magic.core.transcript.log import read_log

    harness = make_harness(offline([{"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
                                    {"text": "never reached"}]), tmp_path)

    def stop_after_first_turn(run):
        if run.turn >= 1:
            raise StopRun("budget_custom", "custom budget spent")

    harness.add_check(stop_after_first_turn)
    result = harness.run_result("go")
    assert (result.status, result.error, result.turns) == ("budget_custom", "custom budget spent", 1)
    assert_pairing(list(result.messages))
    assert read_log(result.run_file)[-1]["status"] == "budget_custom"
    assert harness.checks == (stop_after_first_turn,)


def test_overriding_runs_with_another_adapter_turn_limit_and_log_fields_then_restores_them(tmp_path):
    from harness_magic.core.transcript.log import read_log

    own = offline([{"text": "own"}])
    other = offline([{"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}, {"text": "unused"}])
    harness = make_harness(own, tmp_path, max_turns=5, log_extra={"origin": "test"})
    with harness.overriding(adapter=other, max_turns=1, log_extra={"retry": {"from_turn": 2}}):
        assert (harness.adapter, harness.max_turns) == (other, 1)
        result = harness.run_result("go")
    assert result.status == "max_turns_exceeded" and result.turns == 1
    start = read_log(result.run_file)[0]
    assert (start["max_turns"], start["origin"], start["retry"]) == (1, "test", {"from_turn": 2})
    assert (harness.adapter, harness.max_turns, dict(harness.log_extra)) == (own, 5, {"origin": "test"})
    assert harness.run_result("again").text == "own"


def test_overriding_restores_the_harness_when_the_block_raises(tmp_path):
    own = offline([])
    harness = make_harness(own, tmp_path, max_turns=4)
    with pytest.raises(RuntimeError, match="boom"):
        with harness.overriding(adapter=offline([]), max_turns=2, log_extra={"x": 1}):
            raise RuntimeError("boom")
    assert (harness.adapter, harness.max_turns, dict(harness.log_extra)) == (own, 4, {})


def test_a_bad_turn_limit_is_refused_naming_it(tmp_path):
    harness = make_harness(offline([]), tmp_path, max_turns=3)
    with pytest.raises(ValueError, match="max_turns must be at least 1, got 0"):
        with harness.overriding(max_turns=0):
            pass
    with pytest.raises(ValueError, match="max_turns must be at least 1, got -2"):
        harness.max_turns = -2
    assert harness.max_turns == 3


def test_emit_reaches_every_subscriber_and_a_failing_one_only_warns(tmp_path):
    from harness_magic.core.transcript.events import Notice

    harness = make_harness(offline([]), tmp_path)
    seen = []

    def broken(event):
        raise RuntimeError("renderer bug")

    harness.subscribe(broken)
    harness.subscribe(seen.append)
    with pytest.warns(RuntimeWarning, match="renderer bug"):
        harness.emit(Notice(text="hello"))
    assert [e.text for e in seen] == ["hello"]


def test_remove_tool_keeps_the_others_in_order_and_names_a_missing_tool(tmp_path):
    harness = make_harness(offline([]), tmp_path, tools=[echo_tool("a"), echo_tool("b"), echo_tool("c")])
    harness.remove_tool("b")
    assert [t.name for t in harness.tools] == ["a", "c"]
    with pytest.raises(ValueError, match="no tool named 'b'; tools: a, c"):
        harness.remove_tool("b")


def test_current_turn_is_set_only_while_a_run_is_in_progress(tmp_path):
    turns = []
    probe = ToolSpec(name="probe", description="", parameters=EMPTY, handler=lambda: turns.append(harness.current_turn))
    harness = make_harness(offline([{"tool_calls": [{"name": "probe", "arguments": {}}]},
                                    {"tool_calls": [{"name": "probe", "arguments": {}}]}, {"text": "done"}]),
                           tmp_path, tools=[probe])
    assert harness.current_turn is None and harness.current_run is None
    assert harness.run_result("go").status == "completed"
    assert turns == [1, 2]
    assert harness.current_turn is None and harness.current_run is None
