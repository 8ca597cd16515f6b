"""Secrets and control bytes (issue 11, point 7): attacks with canaries.

A gateway that echoes the ``Authorization`` header into its error body must not
put the key into ``RunResult.error``, the JSONL log or any export; tool errors
that quote a key are scrubbed before the model, the log or a human sees them;
ESC/OSC/CR bytes in model text and in data never reach the terminal raw.
"""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness_magic.core import export
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.transcript.scrub import REDACTED, escape_control, register_secret, scrub
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.execution.tools import ToolError, ToolSpec

KEY = "sk-live-CANARY0123456789abcdefXYZ"
ENV_KEY = "Zq9-env-canary-77a1b2c3"
HOSTILE = "\x1b]0;pwned-title\x07\x1b[2J\x1b[1A\rfake: approved\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\\x9b31m"


# -- the scrubber ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    f"401: invalid key, got header Authorization: Bearer {KEY}",
    f"{{'authorization': 'Bearer {KEY}', 'x': 1}}",
    f'{{"headers": {{"Authorization":"Bearer {KEY}"}}}}',
    f"api-key: {KEY}",
    f"x-api-key={KEY}&q=1",
    f"Bearer {KEY}",
    f"the key is {KEY}.",
])
def test_header_values_and_key_shaped_tokens_are_removed(text):
    cleaned = scrub(text)
    assert "CANARY0123456789" not in cleaned
    assert REDACTED in cleaned
    assert scrub(cleaned) == cleaned  # idempotent


def test_configured_keys_are_removed_whatever_their_shape(monkeypatch):
    monkeypatch.setenv("ACME_API_KEY", ENV_KEY)
    register_secret("plain-registered-secret-value")
    cleaned = scrub(f"failed with {ENV_KEY} and plain-registered-secret-value")
    assert ENV_KEY not in cleaned and "plain-registered-secret-value" not in cleaned


def test_ordinary_text_hashes_and_base64_images_are_left_alone(monkeypatch):
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Lovelace the analyst")  # not a credential by its name
    text = ("sha256 3f786850e387550fdab836ed7e6dc881de23001b0b4c4c2d5a1f5c9d8e4b7a6f, "
            "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAIzaSyAKIAABCDEFGHIJKLMNOPsk+xx== ok, "
            "by Ada Lovelace the analyst")
    assert scrub(text) == text


def test_control_characters_are_shown_escaped_newlines_and_tabs_kept():
    shown = escape_control("a\x1b[31mb\rc\x07d\x9be\tf\ng")
    assert shown == "a\\x1b[31mb\\rc\\x07d\\x9be\tf\ng"


# -- a key-echoing gateway ------------------------------------------------------------------------


class EchoingGateway:
    """Answers every request 401 with the request's Authorization header in the error body."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.dumps({"error": {"message": f"Invalid credentials: Authorization: "
                                                        f"{self.headers.get('Authorization')} (api-key "
                                                        f"{self.headers.get('api-key')})",
                                             "type": "invalid_request_error", "code": 401}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.api_base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _exports(tmp_path: Path, recorder) -> str:
    texts = []
    for suffix in (".jsonl", ".html", ".md"):
        path = export.export_runs(recorder.records, tmp_path / f"export{suffix}")
        texts.append(path.read_text(encoding="utf-8"))
    return "\n".join(texts)


def test_a_gateway_echoing_the_key_leaks_it_nowhere(tmp_path):
    gateway = EchoingGateway()
    try:
        adapter = ProviderAdapter("openai/test-model", api_base=gateway.api_base, api_key=KEY, stream=False,
                                  max_retries=0)
        session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"), adapter=adapter)
        recorder = export.RunRecorder()
        session.subscribe(recorder)
        result = session.ask("hello")
    finally:
        gateway.close()
    assert result.status != "completed"
    assert "401" in result.error or "Invalid credentials" in result.error  # the error still says what went wrong
    assert KEY not in result.error and "CANARY0123456789" not in result.error
    log_text = Path(result.run_file).read_text(encoding="utf-8")
    assert "Invalid credentials" in log_text or "401" in log_text
    assert "CANARY0123456789" not in log_text
    assert "CANARY0123456789" not in _exports(tmp_path, recorder)
    session.close()


def test_a_tool_error_quoting_a_key_is_scrubbed_for_the_model_log_and_exports(tmp_path):
    def leaky(**_):
        raise ToolError(f"connection failed: password=hunter2 token {KEY} Authorization: Basic dXNlcjpwYXNzd29yZA==")

    tool = ToolSpec(name="leaky", description="fails", parameters={"type": "object", "properties": {}},
                    handler=leaky)
    turns = [{"tool_calls": [{"name": "leaky", "arguments": {}}]}, {"text": "done"}]
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/t", transport=ScriptedModel(turns)), extra_tools=[tool])
    recorder = export.RunRecorder()
    session.subscribe(recorder)
    result = session.ask("go")
    seen = [b.content for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    assert "connection failed" in seen[0]
    for text in (seen[0], Path(result.run_file).read_text(encoding="utf-8"), _exports(tmp_path, recorder)):
        assert "CANARY0123456789" not in text and "dXNlcjpwYXNzd29yZA" not in text
    session.close()


# -- control bytes from model text and data ------------------------------------------------------


def test_escape_and_osc_bytes_from_the_model_and_the_data_never_reach_the_terminal(tmp_path):
    from rich.console import Console

    from harness_magic.notebook.render import TerminalRenderer

    code = f"label = {HOSTILE!r}\nlabel"
    turns = [{"text": f"thinking {HOSTILE}", "tool_calls": [{"name": "python_interpreter",
                                                              "arguments": {"code": code}}]},
             {"text": f"# Answer {HOSTILE}"}]
    session = AgentSession(AgentConfig(run_dir=str(tmp_path), sandbox="inprocess", stream=True),
                           adapter=ProviderAdapter("scripted/t", transport=ScriptedModel(turns)))
    screen = io.StringIO()
    session.subscribe(TerminalRenderer(Console(file=screen, force_terminal=False, color_system=None, width=200)))
    result = session.ask("go")
    session.close()
    assert result.ok
    printed = screen.getvalue()
    for raw in ("\x1b", "\x07", "\r", "\x9b"):
        assert raw not in printed
    assert "\\x1b]0;pwned-title\\x07" in printed  # shown, escaped
    assert "Answer" in printed


def test_the_text_approval_prompt_shows_control_bytes_escaped():
    import io
    import os
    import threading

    from harness_magic.core.execution.connectors import ApprovalRequest
    from harness_magic.notebook.approval import request_text
    from harness_magic.notebook.asking import PersonAsker

    request = ApprovalRequest(tool=f"sql_query{HOSTILE}", connector="db", safety="write",
                              summary=f"DROP TABLE users{HOSTILE}", arguments={"sql": f"select 1 {HOSTILE}"})
    keyboard, tty = os.openpty()  # a real terminal: the prompt is read from it, "n" typed on it
    screen = io.StringIO()
    with os.fdopen(tty, "rb", buffering=0) as stdin:
        threading.Timer(0.1, os.write, args=(keyboard, b"n\n")).start()
        decision = PersonAsker(None, stdin=stdin, stdout=screen, approval_timeout_s=lambda: 10.0).approve(request)
    os.close(keyboard)
    assert not decision.approved
    for text in (request_text(request), screen.getvalue()):
        assert "\x1b" not in text and "\r" not in text and "\x07" not in text
        assert "\\x1b" in text
