"""A streamed answer abandoned mid-way gives its HTTP connection back at once, not when the GC gets to it.

An abandoned litellm stream finalised by the garbage collector can run on a
thread that holds httpcore's (non-reentrant) pool lock and wait for it
forever (encode/httpcore#990): the hang seen under load in
test_provider_validity's interrupt tests. These tests switch the cyclic GC
off, interrupt a stream through real litellm over real HTTP, and look at the
client's connection pools: no connection to the server may still be busy. They run litellm in this
process (``provider_host=False``); the provider host closes a stream the same way (tests/test_provider_host.py).
"""

from __future__ import annotations

import gc

import pytest

from harness_magic import Harness, ProviderAdapter, SessionCache
from harness_magic.core.transcript.events import TextDelta
from scripted_server import ScriptedServer
from strict_apis import AnthropicServer

LONG = "A long streamed answer that is cut off. " * 40


def busy_connections(port: int) -> list[str]:
    """httpcore connections to 127.0.0.1:``port`` still serving a request (their repr says ACTIVE)."""
    import httpcore

    found = []
    for pool in [o for o in gc.get_objects() if isinstance(o, httpcore.ConnectionPool)]:
        for connection in pool.connections:
            text = repr(connection)
            if f":{port}" in text and "ACTIVE" in text:
                found.append(text)
    return found


def interrupt_first_text(h: Harness) -> None:
    def stop(event):
        if isinstance(event, TextDelta):
            raise KeyboardInterrupt

    unsubscribe = h.subscribe(stop)
    try:
        result = h.ask_result("Tell me a lot.")
    finally:
        unsubscribe()
    assert result.status == "interrupted"


@pytest.fixture
def no_cyclic_gc():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_an_interrupted_stream_releases_its_connection_at_once(provider, tmp_path, no_cyclic_gc):
    server = AnthropicServer() if provider == "anthropic" else ScriptedServer()
    with server as srv:
        srv.replies = [{"text": LONG}, {"text": "Fresh answer."}]
        model = "anthropic/claude-sonnet-4-20250514" if provider == "anthropic" else "openai/test-model"
        adapter = ProviderAdapter(model, api_base=srv.api_base, api_key="sk-test", stream=True, sleep=lambda s: None,
                                  provider_host=False)  # litellm's pools in this process (the host's: its own test)
        h = Harness(adapter, "You are terse.", [], run_dir=str(tmp_path / "runs"), cache=SessionCache())
        port = int(srv.api_base.split(":")[-1].split("/")[0])
        interrupt_first_text(h)
        assert busy_connections(port) == []
        follow = h.ask_result("Short answer please.")  # the next request works and finds the pool usable
        assert follow.status == "completed" and follow.text == "Fresh answer."
        assert busy_connections(port) == []
