"""Local and custom OpenAI-compatible servers, the way users point at them: ``api_base`` and no key.

The server is a real process (``tests/scripted_server.py`` run as a script, its
own socket and pid) validating requests as llama-cpp-python's server does:
system, assistant and tool content must be strings. No provider key is in the
environment unless a test puts one there. Errors are checked for what they
claim: a closed port fails at once and names the URL, statuses are the ones
the server sent, a missing model lists what the server serves.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness_magic import ProviderAdapter
from harness_magic.core.providers.errors import (
    ModelNotServed,
    ProviderAuthError,
    ProviderError,
    ProviderHTTPError,
    ProviderUnreachable,
)
from harness_magic.core.providers.payload import TEXT_JOINER, render_request
from harness_magic.core.providers.transport import PLACEHOLDER_API_KEY
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.events import Notice
from harness_magic.core.transcript.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

TESTS = Path(__file__).resolve().parent
SERVER_START_TIMEOUT_S = 30
"""The server process prints its address within this (a Python start on a loaded machine)."""
MODEL = "openai/my-local-model"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed when the block ends: nothing listens there


class ServerProcess:
    """``scripted_server.py`` as a child process; :attr:`requests` reads what it received."""

    def __init__(self, tmp: Path, replies: list[dict[str, Any]], *flags: str) -> None:
        self.log = tmp / f"requests-{id(self)}.jsonl"
        replies_file = tmp / f"replies-{id(self)}.json"
        replies_file.write_text(json.dumps(replies))
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "scripted_server.py"), "--replies", str(replies_file),
             "--requests", str(self.log), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_keyless_env())
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(self.proc.stdout.readline()), daemon=True).start()
        try:
            self.api_base = lines.get(timeout=SERVER_START_TIMEOUT_S).strip()
        except queue.Empty:
            self.close()
            raise RuntimeError("the scripted server process printed no address") from None
        assert self.api_base.startswith("http://127.0.0.1:"), (self.api_base, self.proc.stderr.read())

    @property
    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _keyless_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.endswith("_API_KEY"):
            monkeypatch.delenv(name)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[ServerProcess] = []

    def start(replies: list[dict[str, Any]], *flags: str) -> ServerProcess:
        started.append(ServerProcess(tmp_path, replies, *flags))
        return started[-1]

    yield start
    for server in started:
        server.close()


def session(tmp_path: Path, api_base: str, model: str = MODEL) -> tuple[AgentSession, list[Any]]:
    events: list[Any] = []
    agent = AgentSession(AgentConfig(model=model, api_base=api_base, sandbox="inprocess",
                                     run_dir=str(tmp_path / "runs")))
    agent.subscribe(events.append)
    return agent, events


def tool_call(code: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"text": "", "tool_calls": [{"id": call_id, "name": "python_interpreter", "arguments": {"code": code}}]}


def no_sleep() -> tuple[list[float], Any]:
    slept: list[float] = []
    return slept, slept.append


# -- what is sent --------------------------------------------------------------------------


def test_a_strict_local_server_gets_string_content_and_the_placeholder_key(serve, tmp_path):
    server = serve([tool_call("save('answer', 6 * 7)"), {"text": "The answer is 42."},
                    {"text": "Still 42."}], "--string-content")
    agent, events = session(tmp_path, server.api_base)
    first = agent.ask("What is six times seven?")
    assert first.status == "completed", first.error
    assert first.text == "The answer is 42."
    second = agent.ask("And again?")
    assert second.status == "completed" and second.text == "Still 42."

    received = server.requests
    assert len(received) == 3, "every request was accepted on its first try"
    messages = received[1]["body"]["messages"]
    assert messages[0] == {"role": "system", "content": agent.config.system_prompt}
    assert messages[1] == {"role": "user", "content": "What is six times seven?"}
    assert messages[2]["role"] == "assistant" and messages[2]["tool_calls"][0]["id"] == "call_1"
    assert messages[3]["role"] == "tool" and isinstance(messages[3]["content"], str)
    assert all(isinstance(m["content"], str) for r in received for m in r["body"]["messages"]
               if m["role"] != "assistant"), "no content-part list reaches a server that rejects them"
    assert received[1]["body"]["model"] == "my-local-model"
    assert {r["headers"]["Authorization"] for r in received} == {f"Bearer {PLACEHOLDER_API_KEY}"}

    notices = [e.text for e in events if isinstance(e, Notice) and "placeholder key" in e.text]
    assert notices == [f"no OPENAI_API_KEY in the environment: sending a placeholder key to {server.api_base} "
                       "(local servers ignore it; set OPENAI_API_KEY if this server needs a real key)"], \
        "said once, across runs"


def test_a_real_key_is_preferred_to_the_placeholder(serve, tmp_path, monkeypatch):
    server = serve([{"text": "env"}, {"text": "given"}], "--string-content")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    agent, events = session(tmp_path, server.api_base)
    assert agent.ask("hi").status == "completed"
    given = ProviderAdapter(MODEL, api_base=server.api_base, api_key="sk-given-explicitly")
    monkeypatch.delenv("OPENAI_API_KEY")
    assert given.complete("system", [Message(role="user", content=(TextBlock("hi"),))], []).message.text == "given"
    assert [r["headers"]["Authorization"] for r in server.requests] == [
        "Bearer sk-from-the-environment", "Bearer sk-given-explicitly"]
    assert not [e for e in events if isinstance(e, Notice)], "no placeholder, no notice"


def test_text_parts_are_strings_unless_cache_markers_need_parts():
    history = [
        Message(role="user", content=(TextBlock("first"), TextBlock("second"))),
        Message(role="assistant", content=(ToolUseBlock(id="c1", name="t", input={}),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="c1", content="out"), TextBlock("reminder"))),
    ]
    plain = render_request(MODEL, "sys", history, [], cache_markers=False)["messages"]
    assert plain[0] == {"role": "system", "content": "sys"}
    assert plain[1] == {"role": "user", "content": f"first{TEXT_JOINER}second"}
    assert plain[3] == {"role": "tool", "tool_call_id": "c1", "content": "out"}
    assert plain[4] == {"role": "user", "content": "reminder"}
    marked = render_request(MODEL, "sys", history, [], cache_markers=True)["messages"]
    assert marked[0]["content"] == [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]
    assert marked[1]["content"] == [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    assert marked[4]["content"][-1]["cache_control"] == {"type": "ephemeral"}


# -- what a failure says -------------------------------------------------------------------


def test_a_closed_port_fails_at_once_naming_the_url_and_the_socket_error(tmp_path):
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    agent, _ = session(tmp_path, base)
    result = agent.ask("hello")
    assert result.status == "error" and result.turns == 0
    assert f"cannot connect to {base}: ConnectionRefusedError: [Errno 111] Connection refused" in result.error
    assert "HTTP" not in result.error and "attempts" not in result.error
    slept, sleep = no_sleep()
    with pytest.raises(ProviderUnreachable) as info:
        ProviderAdapter(MODEL, api_base=base, sleep=sleep).complete("s", [Message(role="user",
                                                                                  content=(TextBlock("x"),))], [])
    assert slept == [], "a refused port is never retried"
    assert info.value.status_code is None and info.value.url == base and not info.value.request_sent
    assert len(str(info.value).splitlines()) == 1


def test_a_server_that_drops_the_connection_is_not_given_a_status(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def drop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()  # read the request, answer nothing

    threading.Thread(target=drop, daemon=True).start()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    slept, sleep = no_sleep()
    try:
        with pytest.raises(ProviderUnreachable) as info:
            ProviderAdapter(MODEL, api_base=base, sleep=sleep, max_retries=1).complete(
                "s", [Message(role="user", content=(TextBlock("x"),))], [])
    finally:
        stop.set()
        listener.close()
    message = str(info.value)
    assert message.startswith(f"connection to {base} failed: ") and "(after 2 attempts)" in message
    assert "HTTP" not in message and info.value.status_code is None and len(slept) == 1


@pytest.mark.parametrize(("reply", "kind", "expected", "tries"), [
    ({"status": 503, "error": "loading model\nretry later"}, ProviderHTTPError,
     "{base} answered HTTP 503: loading model (after 4 attempts)", 4),
    ({"status": 400, "error": "max_tokens is too large"}, ProviderHTTPError,
     "{base} answered HTTP 400: max_tokens is too large", 1),
    ({"status": 401, "error": "invalid api key"}, ProviderAuthError,
     "authentication refused by {base} (HTTP 401): invalid api key (no OPENAI_API_KEY in the environment, so a "
     "placeholder key was sent: set OPENAI_API_KEY to this server's key)", 1),
    ({"status": 403, "error": "forbidden"}, ProviderAuthError, "authentication refused by {base} (HTTP 403): "
     "forbidden (no OPENAI_API_KEY in the environment, so a placeholder key was sent: set OPENAI_API_KEY to this "
     "server's key)", 1),
], ids=["503-retried", "400", "401", "403"])
def test_http_errors_name_the_status_the_server_sent_and_its_first_line(serve, reply, kind, expected, tries):
    server = serve([reply] * 4)
    slept, sleep = no_sleep()
    with pytest.raises(ProviderError) as info:
        ProviderAdapter(MODEL, api_base=server.api_base, sleep=sleep).complete(
            "s", [Message(role="user", content=(TextBlock("x"),))], [])
    assert type(info.value) is kind
    assert str(info.value) == expected.format(base=server.api_base)
    assert info.value.status_code == reply["status"] and len(server.requests) == tries and len(slept) == tries - 1


def test_a_model_the_server_does_not_serve_lists_what_it_serves(serve, tmp_path):
    server = serve([{"text": "never"}], "--served-model", "smollm2", "--models", "smollm2,qwen2.5:0.5b")
    agent, _ = session(tmp_path, server.api_base)
    result = agent.ask("hello")
    assert result.status == "error"
    assert (f"model 'my-local-model' is not served by {server.api_base} (HTTP 404): The model `my-local-model` "
            "does not exist.; it serves 'smollm2', 'qwen2.5:0.5b'") in result.error
    assert len(server.requests) == 1, "not retried"
    silent = serve([{"text": "never"}], "--served-model", "smollm2")  # GET /models answers 404
    with pytest.raises(ModelNotServed) as info:
        ProviderAdapter(MODEL, api_base=silent.api_base).complete(
            "s", [Message(role="user", content=(TextBlock("x"),))], [])
    assert info.value.served is None and info.value.status_code == 404
    assert str(info.value).endswith("(HTTP 404): The model `my-local-model` does not exist.")


# -- the notebook path ---------------------------------------------------------------------


@pytest.mark.kernel
def test_the_readme_recipe_in_a_real_kernel_with_no_key(serve, tmp_path):
    from kernel_helpers import Kernel

    server = serve([tool_call("save('total', sum(range(10)))"), {"text": "The total is 45."}], "--string-content")
    closed = f"http://127.0.0.1:{_closed_port()}/v1"
    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(textwrap.dedent(f"""\
            %load_ext harness_magic
            %config AgentMagics.run_dir = "runs"
            %config AgentMagics.api_base = "{server.api_base}"
            import os; assert not [k for k in os.environ if k.endswith("_API_KEY")]
        """))
        assert setup.ok, setup.outputs
        cell = kernel.run("%%agent -m openai/my-local-model\nAdd the numbers below ten.")
        assert kernel.value("[r.status for r in get_ipython().magics_manager.registry['AgentMagics']"
                            ".session.runs]") == ["completed"], cell.outputs
        assert kernel.value("_.text") == "The total is 45."
        shown = json.dumps([m["content"] for m in cell.messages])
        assert shown.count("sending a placeholder key to") >= 1
        assert len(server.requests) == 2
        assert all(isinstance(m["content"], str) for r in server.requests for m in r["body"]["messages"]
                   if m["role"] != "assistant")

        kernel.run(f'%config AgentMagics.api_base = "{closed}"')
        failed = kernel.run("%%agent -m openai/my-local-model\nAgain.")
        last = kernel.value("(lambda r: [r.status, r.error])(get_ipython().magics_manager.registry['AgentMagics']"
                            ".session.runs[-1])")
        assert last[0] == "error" and f"cannot connect to {closed}: ConnectionRefusedError" in last[1]
        assert "HTTP 500" not in json.dumps([m["content"] for m in failed.messages])
    finally:
        kernel.close()
