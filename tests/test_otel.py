"""OpenTelemetry traces of each run (issue 34 point 3).

A run through :class:`AgentSession` against the scripted HTTP model server is one trace following the
GenAI semantic conventions: ``invoke_agent`` (root) > ``chat`` per model call and ``execute_tool`` per tool
call > ``invoke_agent subagent`` under the subagent's tool call, with its own spans. Attributes hold names,
sizes, counts and classes: never a pushed frame's values, the prompt, tool arguments or the answer (a
prompt-injected model's tool name or answer included). The SDK's in-memory exporter checks the spans in
process; a real OTLP/HTTP receiver (``http.server`` decoding the protobuf request) gets them from a session
in a subprocess configured only through ``OTEL_*`` environment variables. Off by default, with neither the
SDK nor an exporter imported.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness_magic.core.config import AgentConfig
from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME
from harness_magic.core.control.tracing import UNREGISTERED_TOOL, install_tracing, tracing_wanted
from harness_magic.core.export import RunRecorder, render_footer_text
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.log import read_log

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EMAIL = "ana.secret@example.com"
PROMPT = "Which customer spends most? Secret project Bluebird."
CODE = f"top = customers.sort_values('spend').iloc[-1]\nprint(top['email'], '{EMAIL}')"
HOSTILE_TOOL = "mail_ana.secret@example.com_password=hunter2"
ANSWER = f"The top spender is {EMAIL}; password=hunter2"
CHILD_TASK = "Count the customers named Bluebird"
DATA_VALUES = (EMAIL, "bo.private@example.org", "Bluebird", "hunter2", "sort_values", "Count the customers",
               "spends most", "top spender")

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def in_memory_provider():
    """The application's global provider (the SDK's, exporting to memory): sessions with ``otel`` on use it."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    yield


@pytest.fixture
def spans():
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def call(name, id_, **arguments):
    return {"tool_calls": [{"id": id_, "name": name, "arguments": arguments}]}


@pytest.fixture(autouse=True)
def provider_key(monkeypatch):
    """litellm wants a key for an ``openai/`` model (the scripted server takes any): set for each test and
    restored after it, so no later test of this process, or kernel it starts, finds a key it did not set."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def session_for(server, tmp_path, otel="on", **options) -> AgentSession:
    config = AgentConfig(model="openai/test-model", api_base=server.api_base, run_dir=str(tmp_path / "runs"),
                         sandbox="inprocess", audit_log="", otel=otel, **options)
    session = AgentSession(config, subagents=True)
    session.cache.put("customers", pd.DataFrame({"email": [EMAIL, "bo.private@example.org"], "spend": [10, 3]}))
    return session


def script(server):
    """Two parent model calls with tools, a subagent (two calls of its own), an error call, the answer."""
    server.replies = [
        call("python_interpreter", "call_py", code=CODE),
        call(SUBAGENT_TOOL_NAME, "call_sub", task=CHILD_TASK),
        call("list_variables", "call_child"),  # the subagent's first call
        {"text": "Bluebird: none"},  # the subagent's answer
        call(HOSTILE_TOOL, "call_bad", note=EMAIL),
        {"text": ANSWER},
    ]


def by_name(finished):
    names: dict[str, list] = {}
    for span in finished:
        names.setdefault(span.name, []).append(span)
    return names


def every_value(finished) -> str:
    """Every attribute value and span name of ``finished``, as one text."""
    return "\n".join([s.name for s in finished] + [str(v) for s in finished for v in s.attributes.values()]
                     + [str(e.attributes) for s in finished for e in s.events])


def test_a_run_is_one_trace_with_spans_per_model_call_tool_call_and_subagent(server, tmp_path, spans):
    script(server)
    session = session_for(server, tmp_path)
    try:
        result = session.ask(PROMPT)
    finally:
        session.close()
    assert result.status == "completed"
    finished = spans.get_finished_spans()
    names = by_name(finished)
    (root,) = names["invoke_agent harness_magic"]
    (child,) = names["invoke_agent subagent"]
    assert {s.context.trace_id for s in finished} == {root.context.trace_id}
    assert root.parent is None and root.kind == trace.SpanKind.INTERNAL
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.request.model"] == "openai/test-model"
    assert root.attributes["gen_ai.provider.name"] == "openai"
    assert root.attributes["harness_magic.run.id"] == result.run_id
    assert root.attributes["harness_magic.run.status"] == "completed"
    assert root.attributes["harness_magic.run.tool_calls"] == 3
    assert root.attributes["harness_magic.prompt.chars"] == len(PROMPT)
    assert root.attributes["gen_ai.usage.input_tokens"] == result.total_usage.input_tokens == 600

    chats = names["chat openai/test-model"]
    parent_chats = [s for s in chats if s.parent.span_id == root.context.span_id]
    child_chats = [s for s in chats if s.parent.span_id == child.context.span_id]
    assert len(parent_chats) == 4 and len(child_chats) == 2
    assert all(s.kind == trace.SpanKind.CLIENT and s.attributes["gen_ai.operation.name"] == "chat" for s in chats)
    first = min(parent_chats, key=lambda s: s.start_time)
    assert first.attributes["gen_ai.usage.input_tokens"] == 100
    assert first.attributes["gen_ai.usage.output_tokens"] == 20
    assert tuple(first.attributes["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    last = max(parent_chats, key=lambda s: s.start_time)
    assert tuple(last.attributes["gen_ai.response.finish_reasons"]) == ("stop",)
    assert last.attributes["harness_magic.response.text_chars"] == len(ANSWER)

    (python,) = names["execute_tool python_interpreter"]
    assert python.parent.span_id == root.context.span_id
    assert python.attributes["gen_ai.operation.name"] == "execute_tool"
    assert python.attributes["gen_ai.tool.name"] == "python_interpreter"
    assert python.attributes["gen_ai.tool.call.id"] == "call_py"
    assert python.attributes["harness_magic.tool.safety"] == "read"
    assert python.attributes["harness_magic.tool.outcome"] == "ok"
    assert python.attributes["harness_magic.tool.result.chars"] > 0
    assert python.status.status_code == trace.StatusCode.UNSET

    (delegation,) = names[f"execute_tool {SUBAGENT_TOOL_NAME}"]
    assert child.parent.span_id == delegation.context.span_id
    assert child.attributes["gen_ai.agent.name"] == "subagent"
    assert child.attributes["harness_magic.run.status"] == "completed"
    (listing,) = names["execute_tool list_variables"]
    assert listing.parent.span_id == child.context.span_id

    (bad,) = names[f"execute_tool {UNREGISTERED_TOOL}"]
    assert bad.attributes["harness_magic.tool.outcome"] == "error"
    assert bad.attributes["error.type"] == "tool_error"
    assert bad.status.status_code == trace.StatusCode.ERROR


def test_no_data_value_prompt_argument_or_hostile_name_reaches_an_attribute(server, tmp_path, spans):
    script(server)
    session = session_for(server, tmp_path)
    try:
        session.ask(PROMPT)
    finally:
        session.close()
    text = every_value(spans.get_finished_spans())
    leaked = [value for value in DATA_VALUES + (HOSTILE_TOOL, "password", CODE) if value in text]
    assert leaked == []


def test_the_trace_id_is_in_the_run_log_and_the_footer(server, tmp_path, spans):
    from rich.console import Console

    from harness_magic.core.export.render_html import render_answer_html
    from harness_magic.notebook.render import TerminalRenderer

    server.replies = [{"text": "done"}]
    session = session_for(server, tmp_path)
    recorder, screen = RunRecorder(), io.StringIO()
    session.harness.subscribe(recorder)
    session.harness.subscribe(TerminalRenderer(Console(file=screen, force_terminal=False, color_system=None,
                                                       width=400)))
    try:
        result = session.ask(PROMPT)
    finally:
        session.close()
    (root,) = spans.get_finished_spans()[-1:]
    trace_id = f"{root.context.trace_id:032x}"
    records = read_log(result.run_file)
    assert [r["type"] for r in records[:2]] == ["run_start", "event"]
    logged = records[1]
    assert (logged["name"], logged["run_id"], logged["trace_id"]) == ("trace", result.run_id, trace_id)
    assert logged["span_id"] == f"{root.context.span_id:016x}"
    assert session.tracing.trace_ids[result.run_id] == trace_id
    assert recorder.current.trace_id == trace_id
    assert f"run {result.run_id} · trace {trace_id}" in render_footer_text(recorder.current)
    assert f"trace {trace_id}" in screen.getvalue()  # the terminal's footer
    assert f"trace {trace_id}" in render_answer_html(recorder.current)  # the notebook's final output


def test_content_is_recorded_only_when_asked_and_then_masked(server, tmp_path, spans):
    server.replies = [call("python_interpreter", "call_py", code="print(customers['email'].tolist())"),
                      {"text": f"Found {EMAIL}. api_key=sk-abcdef1234567890abcdef"}]
    session = session_for(server, tmp_path, otel="content")
    try:
        session.ask("List the e-mails of the customers")
    finally:
        session.close()
    finished = spans.get_finished_spans()
    names = by_name(finished)
    (root,) = names["invoke_agent harness_magic"]
    assert "List the e-mails" in root.attributes["gen_ai.input.messages"]
    (python,) = names["execute_tool python_interpreter"]
    assert "tolist" in python.attributes["gen_ai.tool.call.arguments"]
    assert "gen_ai.tool.call.result" in python.attributes
    assert "Found " in root.attributes["gen_ai.output.messages"]  # the answer, masked and scrubbed
    text = every_value(finished)
    assert EMAIL not in text and "bo.private@example.org" not in text and "sk-abcdef1234567890abcdef" not in text


def test_off_by_default_and_when_the_sdk_is_disabled(server, tmp_path, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert AgentConfig().otel == "auto"
    assert session_for(server, tmp_path, otel="auto").tracing is None
    assert not tracing_wanted("auto", {})
    assert tracing_wanted("auto", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not tracing_wanted("on", {"OTEL_SDK_DISABLED": "true"})
    assert not tracing_wanted("auto", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"})
    assert not tracing_wanted("off", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})


@pytest.mark.parametrize("bad", ["yes", "", "ON", None, True, "content; rm -rf /"])
def test_an_unknown_otel_mode_is_refused_naming_the_modes(bad):
    with pytest.raises(ValueError, match="otel .*allowed: auto, off, on, content"):
        AgentConfig(otel=bad)
    with pytest.raises(ValueError, match="allowed: auto, off, on, content"):
        install_tracing(object(), bad) if isinstance(bad, str) else tracing_wanted(bad)


# -- real processes -------------------------------------------------------------------------------

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def _run_child(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**CLEAN_ENV, "OPENAI_API_KEY": "sk-test", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                               **env}, cwd=ROOT, timeout=timeout)


def test_load_ext_and_a_run_without_otel_config_import_no_sdk_or_exporter(server, tmp_path):
    server.replies = [{"text": "hi"}]
    code = f"""
        import json, sys
        from IPython.testing.globalipapp import start_ipython
        shell = start_ipython()
        shell.run_line_magic("load_ext", "harness_magic")
        shell.run_line_magic("config", 'AgentMagics.model = "openai/test-model"')
        shell.run_line_magic("config", 'AgentMagics.api_base = "{server.api_base}"')
        shell.run_line_magic("config", 'AgentMagics.run_dir = "{tmp_path / 'runs'}"')
        shell.run_line_magic("config", 'AgentMagics.sandbox = "inprocess"')
        shell.run_cell_magic("agent", "", "Say hi")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
    """
    out = _run_child(code, {})
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(server.requests) == 1  # the run really happened
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert [m for m in loaded if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))] == []


class _Receiver:
    """An OTLP/HTTP traces endpoint: decodes each ``ExportTraceServiceRequest`` it is sent."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.requests: list = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                receiver.paths.append(self.path)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list:
        return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def resources(self) -> list[dict]:
        return [{a.key: a.value.string_value for a in rs.resource.attributes}
                for r in self.requests for rs in r.resource_spans]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SESSION_RUN = """
    import pandas as pd
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession
    config = AgentConfig(model="openai/test-model", api_base={api_base!r}, run_dir={run_dir!r}, sandbox="inprocess",
                         audit_log="")
    session = AgentSession(config, subagents=True)
    session.cache.put("customers", pd.DataFrame({{"email": [{email!r}], "spend": [10]}}))
    result = session.ask({prompt!r})
    session.close()
    print(result.status, result.run_id, round(result.elapsed_s, 3))
"""


@pytest.fixture
def receiver():
    rec = _Receiver()
    yield rec
    rec.close()


def test_a_real_otlp_receiver_gets_the_trace_of_a_run_configured_only_by_otel_variables(server, tmp_path, receiver):
    script(server)
    code = SESSION_RUN.format(api_base=server.api_base, run_dir=str(tmp_path / "runs"), email=EMAIL, prompt=PROMPT)
    out = _run_child(code, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "analytics-nb",
                            "OTEL_BSP_SCHEDULE_DELAY": "50"})
    assert out.returncode == 0, out.stderr[-3000:]
    status, run_id, _elapsed = out.stdout.split()[-3:]
    assert status == "completed"
    assert set(receiver.paths) == {"/v1/traces"}
    assert {r.get("service.name") for r in receiver.resources()} == {"analytics-nb"}
    received = receiver.spans()
    names = sorted(s.name for s in received)
    assert names.count("invoke_agent harness_magic") == 1 and names.count("invoke_agent subagent") == 1
    assert names.count("chat openai/test-model") == 6
    assert {"execute_tool python_interpreter", "execute_tool subagent", "execute_tool list_variables",
            f"execute_tool {UNREGISTERED_TOOL}"} <= set(names)
    (root,) = [s for s in received if s.name == "invoke_agent harness_magic"]
    attributes = {a.key: a.value for a in root.attributes}
    assert attributes["harness_magic.run.id"].string_value == run_id
    assert attributes["gen_ai.operation.name"].string_value == "invoke_agent"
    assert len({s.trace_id for s in received}) == 1
    logged = [r for r in read_log(next((tmp_path / "runs").glob(f"*{run_id}.jsonl"))) if r.get("name") == "trace"]
    assert [r["trace_id"] for r in logged] == [root.trace_id.hex()]
    text = str([list(s.attributes) for s in received]) + " ".join(s.name for s in received)
    assert [v for v in DATA_VALUES + (HOSTILE_TOOL, "password") if v in text] == []


def test_an_unreachable_endpoint_never_fails_the_run(server, tmp_path):
    script(server)
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    endpoint = f"http://127.0.0.1:{closed.server_address[1]}"
    closed.server_close()  # nothing listens there now
    code = SESSION_RUN.format(api_base=server.api_base, run_dir=str(tmp_path / "runs"), email=EMAIL, prompt=PROMPT)
    out = _run_child(code, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{endpoint}/v1/traces",
                            "OTEL_EXPORTER_OTLP_TIMEOUT": "2", "OTEL_BSP_SCHEDULE_DELAY": "50"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-3] == "completed"


def test_a_run_ending_in_a_provider_error_closes_its_spans_as_errors_without_the_message(server, tmp_path, spans):
    server.replies = [{"status": 400, "error": f"bad request from {EMAIL}"}]
    session = session_for(server, tmp_path)
    try:
        result = session.ask(PROMPT)
    finally:
        session.close()
    assert result.status == "error"
    finished = spans.get_finished_spans()
    names = by_name(finished)
    (root,) = names["invoke_agent harness_magic"]
    (chat,) = names["chat openai/test-model"]
    assert chat.parent.span_id == root.context.span_id
    for span in (root, chat):
        assert span.status.status_code == trace.StatusCode.ERROR and span.status.description == "error"
        assert span.attributes["error.type"] == "error"
    assert root.attributes["harness_magic.run.status"] == "error"
    assert EMAIL not in every_value(finished) and "bad request" not in every_value(finished)
