"""Local models fail loudly and recover: context overflows, an interrupted stream, an api_base without /v1.

A windowed scripted server plays llama-cpp-python with a small ``n_ctx``: it
counts a request's tokens (characters / 4 of its messages; like that server it
leaves the tool schemas out), answers one that leaves no room for an answer
with an empty streamed body, and says why (HTTP 400, its numbers) only when the
request does not stream. Before the fix the run "completed" with no answer and
every later cell did the same until ``--new``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness_magic.core.agent.compaction import SUMMARY_HEADER
from harness_magic.core.agent.result import NO_ANSWER_TEXT
from harness_magic.core.agent.run import INTERRUPTED_ANSWER_NOTE
from harness_magic.core.providers.errors import ContextWindowExceeded, ModelNotServed
from harness_magic.core.providers.overflow import learned_window, server_overflow
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.events import ContextCompacted, TextDelta
from scripted_server import ScriptedServer

ANSWER_ROOM = 60
"""Tokens the fake server needs free to answer: a request over its window less this overflows."""
PROMPT_CHARS = 400
"""Each long prompt: ~100 of the fake server's tokens."""
ANSWER_CHARS = 800
"""Each scripted answer: ~200 tokens, so the history grows to near the window in two cells."""
WINDOW_OVER_SYSTEM = 560
"""The window less the system prompt: two cells fit (~460), a third long one (~760) or any fourth cell
after two long answers (~665) does not, unless the conversation is compacted."""


def server_tokens(body: dict[str, Any]) -> int:
    """The fake server's count of a request: characters / 4 of its messages (tools left out, as llama-cpp-python)."""
    return len(json.dumps(body["messages"])) // 4


def windowed_server(answers: list[str], streamed_overflow: str = "empty_stream") -> ScriptedServer:
    """A scripted server answering ``answers`` in order to requests that fit its ``window`` (set it before use);
    a streamed request over it gets ``streamed_overflow`` (an empty 200, or ``reset_stream``: the connection reset)."""
    server = ScriptedServer([{"text": text} for text in answers])
    server.window = None

    def overflow_as_llama_cpp_python(headers: dict[str, str], body: dict[str, Any]) -> None:
        tokens, window = server_tokens(body), server.window
        if tokens + ANSWER_ROOM <= window:
            return
        if body.get("stream"):
            server.replies.insert(0, {streamed_overflow: True})
        else:
            server.replies.insert(0, {"status": 400, "error": (
                f"This model's maximum context length is {window} tokens. However, you requested {tokens} tokens "
                f"({tokens} in the messages, None in the completion). Please reduce the length of the messages "
                "or completion.")})

    server.on_request = overflow_as_llama_cpp_python
    return server


def session(api_base: str, tmp_path, **config: Any) -> AgentSession:
    return AgentSession(AgentConfig(model="openai/smollm2", api_base=api_base, sandbox="inprocess",
                                    run_dir=str(tmp_path / "runs"), **config))


def long_prompt(topic: str) -> str:
    return f"Summarise the {topic} notes: " + (f"{topic} " * PROMPT_CHARS)[:PROMPT_CHARS]


def long_answer(topic: str) -> str:
    return f"The {topic} answer. " + (f"{topic} grew. " * ANSWER_CHARS)[:ANSWER_CHARS]


@pytest.mark.parametrize(("streamed_overflow", "provider_host"),
                         [("empty_stream", True), ("reset_stream", True), ("reset_stream", False)])
def test_an_overflow_names_the_prompt_size_the_window_and_context_window_and_the_next_cell_works(
        tmp_path, streamed_overflow, provider_host):
    """However the server ends a streamed request over its window (an empty 200, or the connection reset, as
    llama-cpp-python does either), the request is asked once more without streaming and its refusal is told."""
    answers = [long_answer("north"), long_answer("south"), "Hello after the overflow.", "And again."]
    with windowed_server(answers, streamed_overflow) as srv:
        agent = session(srv.api_base, tmp_path, provider_host=provider_host)
        window = srv.window = server_tokens({"messages": [{"role": "system", "content": agent.harness.system}]}) \
            + WINDOW_OVER_SYSTEM
        compactions: list[ContextCompacted] = []
        agent.subscribe(lambda e: compactions.append(e) if isinstance(e, ContextCompacted) else None)
        assert agent.ask(long_prompt("north")).text == answers[0]
        assert agent.ask(long_prompt("south")).text == answers[1]
        before = list(agent.harness.messages)

        overflow = agent.ask(long_prompt("east"))  # the history has grown to near the window
        counted = server_tokens(srv.requests[-1])
        assert overflow.status == "error" and overflow.rolled_back
        assert f"the request is {counted:,} tokens, over the {window:,}-token context window" in overflow.error
        assert "context_window is not set" in overflow.error and "compacted" in overflow.error
        assert f"maximum context length is {window} tokens" in overflow.error, "the server's own words are quoted"
        assert [r.get("stream") for r in srv.requests[-2:]] == [True, None], "asked once more without streaming"
        assert agent.harness.messages == before, "the failed prompt is taken back out"
        assert not compactions

        hello = agent.ask("Say hello.")  # the same history: without compaction it overflows too
        assert hello.status == "completed" and hello.text == "Hello after the overflow."
        assert compactions and compactions[0].stage == "summary"
        sent = srv.requests[-1]
        assert server_tokens(sent) + ANSWER_ROOM <= window
        assert SUMMARY_HEADER in json.dumps(sent["messages"])
        assert "Summarise the north notes" in json.dumps(sent["messages"]), "the summary keeps what was asked"

        again = agent.ask("Once more.")
        assert again.status == "completed" and again.text == "And again."


def test_a_window_the_server_states_in_its_own_body_is_read(tmp_path):
    """llama.cpp's server: its error body carries n_prompt_tokens and n_ctx."""
    body = {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                      "type": "exceed_context_size_error", "n_prompt_tokens": 1234, "n_ctx": 512}}
    with ScriptedServer([{"status": 400, "body": body}]) as srv:
        result = session(srv.api_base, tmp_path).ask("Hello.")
    assert result.status == "error"
    assert "the request is 1,234 tokens, over the 512-token context window" in result.error
    assert "exceeds the available context size" in result.error
    assert len(srv.requests) == 1, "an overflow is never retried"


@pytest.mark.parametrize("body, prompt, window", [
    ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
     "(4900 in the messages, 100 in the completion).", 4900, 4096),  # vLLM, OpenAI
    ("Requested tokens (515) exceed context window of 512", 515, 512),  # llama-cpp-python's own exception
    ("prompt is too long: 210000 tokens > 200000 maximum", 210000, 200000),  # Anthropic
    ('{"error": {"type": "exceed_context_size_error", "n_prompt_tokens": 9, "n_ctx": 8}}', 9, 8),
    ("context_length_exceeded", None, None),  # the code alone: the adapter's estimate stands in
])
def test_servers_overflow_wordings_are_recognised_with_their_numbers(body, prompt, window):
    found = server_overflow(body, body[:80], "http://127.0.0.1:8000/v1", status_code=400)
    assert isinstance(found, ContextWindowExceeded)
    assert (found.prompt_tokens, found.window) == (prompt, window)


@pytest.mark.parametrize("body", [
    "Invalid 'tools[0].function.name': string does not match pattern",
    "model 'context' not found",  # a model named like the word is not an overflow
    "rate limit exceeded, retry in 20 s",
    "",
])
def test_other_errors_are_not_taken_for_an_overflow(body):
    assert server_overflow(body, body, "http://127.0.0.1:8000/v1", status_code=400) is None


def test_a_hostile_servers_numbers_never_make_the_window_unusable():
    assert learned_window(10 ** 12, 5, 1_000) == 850, "a window claimed far above the request leaves room to answer"
    assert learned_window(None, None, 1_000) == 999, "an unknown window is just below the request"
    assert learned_window(512, 10 ** 9, 1_000) == 1, "never zero or negative"
    assert learned_window(512, 837, 2_000) == 2_000 - 325 - 76, "the server's excess is taken off the estimate"


def test_an_empty_answer_near_the_window_is_an_overflow_and_far_from_it_is_an_empty_answer(tmp_path):
    with ScriptedServer([{"text": ""}, {"text": ""}]) as srv:
        agent = session(srv.api_base, tmp_path)
        far = agent.ask("Say nothing.")
        assert far.status == "completed" and far.text == NO_ANSWER_TEXT, "no known window: an empty answer as before"

        estimate = agent.harness.adapter.estimate_tokens(agent.harness.system, agent.harness.messages,
                                                         agent.harness.visible_tools())
        near = session(srv.api_base, tmp_path, context_window=estimate + 60)
        result = near.ask("Say nothing.")
    assert result.status == "error" and result.rolled_back
    assert "answered nothing to a request of about" in result.error
    assert "context window" in result.error and f"context_window is set to {estimate + 60:,}" in result.error


def test_an_api_base_without_v1_is_named_with_the_fix_and_the_servers_models(tmp_path):
    with ScriptedServer([{"text": "unused"}], v1_only=True, models=["smollm2", "qwen2.5"]) as srv:
        base = srv.api_base.removesuffix("/v1")
        result = session(base, tmp_path).ask("Hello.")
        assert result.status == "error"
        assert f"api_base {base!r} does not end in /v1; try '{base}/v1'" in result.error
        assert "it serves 'smollm2', 'qwen2.5'" in result.error, "the list from /v1/models"
        assert "is not served" not in result.error, "the model was never the problem"
        assert srv.replies, "no completion was consumed"
        assert "GET /v1/models" in srv.paths

        fixed = session(base + "/v1", tmp_path).ask("Hello.")
        assert fixed.status == "completed" and fixed.text == "unused"


def test_a_404_without_v1_and_without_a_model_list_still_says_so(tmp_path):
    with ScriptedServer([], v1_only=True) as srv:
        base = srv.api_base.removesuffix("/v1") + "/"
        error = session(base, tmp_path).ask("Hello.").error
    assert "does not end in /v1; try" in error and "serves" not in error


def test_a_model_the_server_does_not_serve_under_v1_still_lists_what_it_serves(tmp_path):
    with ScriptedServer([], served_model="qwen2.5", models=["qwen2.5"]) as srv:
        adapter = session(srv.api_base, tmp_path).harness.adapter
        with pytest.raises(ModelNotServed, match=r"model 'smollm2' is not served .*it serves 'qwen2.5'"):
            adapter.complete("system", [], [])


def test_text_streamed_before_an_interrupt_is_kept_as_the_answer_so_far(tmp_path):
    paragraphs = "First paragraph of the answer.\n\nSecond paragraph, already on screen.\n\nThird, never sent."
    with ScriptedServer([{"text": paragraphs}, {"text": "Continuing."}]) as srv:
        agent = session(srv.api_base, tmp_path)
        seen: list[str] = []

        def interrupt_midway(event: object) -> None:
            if isinstance(event, TextDelta):
                seen.append(event.text)
                if len("".join(seen)) >= 60:
                    raise KeyboardInterrupt  # the stop button, while the model streams

        unsubscribe = agent.subscribe(interrupt_midway)
        cut = agent.ask("Explain it at length.")
        unsubscribe()
        on_screen = "".join(seen)
        assert cut.status == "interrupted" and not cut.rolled_back
        assert cut.text == on_screen and paragraphs.startswith(on_screen) and "Second paragraph" in cut.text
        assert "answer so far" in cut.error
        assert agent.harness.messages[-1].text == on_screen + INTERRUPTED_ANSWER_NOTE

        follow = agent.ask("Go on.")
        assert follow.status == "completed" and follow.text == "Continuing."
        sent = json.dumps(srv.requests[-1]["messages"])
        assert json.dumps(on_screen + INTERRUPTED_ANSWER_NOTE)[1:-1] in sent and "Third" not in sent
