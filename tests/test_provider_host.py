"""litellm out of the kernel (issue 35, point 1): every provider call goes to one provider host process.

Real litellm runs in the host and talks HTTP to the scripted server; the kernel side
(:class:`HostedTransport`) must give exactly what the in-process :class:`LiteLLMTransport` gives (answers,
streamed pieces, each error class with its attributes), survive a host that is killed or exits when idle,
stop a stream on an interrupt, refuse what a hostile host sends, and leave ``litellm`` out of the kernel.
Tests that kill or idle a host use their own :class:`ProviderHost`; the others share this process's one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness_magic.core.providers.channel import FRAME_MAX_BYTES, FrameError, decode_frame, rebuild_error
from harness_magic.core.providers.errors import (
    ContextWindowExceeded,
    ModelNotServed,
    ModelRouteError,
    ProviderAuthError,
    ProviderError,
    ProviderHTTPError,
    ProviderUnreachable,
)
from harness_magic.core.providers.hosted import (
    SOCKET_PATH_MAX_BYTES,
    HostedTransport,
    HostProtocolError,
    ProviderHost,
    shared_host,
)
from harness_magic.core.providers.response import normalise_response
from harness_magic.core.providers.transport import LiteLLMTransport
from scripted_server import ScriptedServer

TESTS = Path(__file__).resolve().parent
MODEL = "openai/gpt-4o-mini"
TOOL_ANSWER = {"text": "Let me add those numbers up for you.",
               "tool_calls": [{"name": "python_interpreter", "arguments": {"code": "print(sum(range(10)))"}}]}
GONE_WAIT_S = 60.0
"""How long a test waits for a host to be gone (it exits within a second of its idle time; a loaded machine lags)."""


def payload(text: str = "Add the numbers below ten.", model: str = MODEL) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}],
            "tools": [{"type": "function", "function": {"name": "python_interpreter", "description": "Run code.",
                                                        "parameters": {"type": "object", "properties": {
                                                            "code": {"type": "string"}}}}}]}


def closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return int(port)


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + GONE_WAIT_S
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid), f"provider host {pid} still runs"


@pytest.fixture(scope="module", autouse=True)
def shared_host_warm():
    """This process's shared host, started in the background as the module begins: its litellm import
    overlaps the first test's own (the in-process transport it is compared with)."""
    shared_host().warm_up()


@pytest.fixture(scope="module")
def own_host():
    """A host of this module's own: the tests that kill it or let it idle out leave the shared one alone."""
    host = ProviderHost()
    yield host
    host.close()


@pytest.fixture(scope="module")
def module_server():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def server(module_server):
    """The module's scripted server, emptied for each test (no replies, nothing recorded)."""
    module_server.replies = []
    for record in (module_server.requests, module_server.raw_requests, module_server.headers, module_server.paths,
                   module_server.rejections):
        record.clear()
    return module_server


# -- the same answers and the same errors as in-process -----------------------------------------------


def test_a_streamed_answer_with_tool_calls_equals_the_in_process_answer_and_arrives_piecewise(server):
    server.replies = [TOOL_ANSWER, TOOL_ANSWER]
    pieces: list[str] = []
    hosted = HostedTransport(api_base=server.api_base, api_key="sk-test").complete(payload(), pieces.append)
    local = LiteLLMTransport(api_base=server.api_base, api_key="sk-test").complete(payload(), None)
    ours, theirs = normalise_response(hosted), normalise_response(local)
    assert (ours.message, ours.usage, ours.stop_reason) == (theirs.message, theirs.usage, theirs.stop_reason)
    assert ours.message.tool_uses[0].input == {"code": "print(sum(range(10)))"}
    assert ours.usage.cost > 0, "litellm's price for the model, computed in the host"
    assert len(pieces) > 1 and "".join(pieces) == TOOL_ANSWER["text"], "text arrives as the host receives it"
    assert server.requests[0] == server.requests[1], "the host sends the request the kernel would have sent"


ERROR_REPLIES = {
    "401": ({"status": 401, "error": "invalid api key"}, ProviderAuthError),
    "429": ({"status": 429, "error": "slow down"}, ProviderHTTPError),
    "500": ({"status": 500, "error": "boom\nsecond line"}, ProviderHTTPError),
    "overflow": ({"status": 400, "error": "This model's maximum context length is 4096 tokens. However, you "
                                          "requested 5000 tokens (5000 in the messages). Please reduce."},
                 ContextWindowExceeded),
}


def failure(transport: Any, request: dict[str, Any]) -> tuple[type, str, dict[str, Any]]:
    with pytest.raises(ProviderError) as info:
        transport.complete(request, None)
    return type(info.value), str(info.value), dict(info.value.__dict__)


@pytest.mark.parametrize("case", list(ERROR_REPLIES))
def test_each_http_error_comes_back_as_the_same_class_with_the_same_attributes(server, case):
    reply, kind = ERROR_REPLIES[case]
    server.replies = [reply, reply]
    hosted = failure(HostedTransport(api_base=server.api_base), payload())
    local = failure(LiteLLMTransport(api_base=server.api_base), payload())
    assert hosted == local and hosted[0] is kind, (hosted, local)


def test_a_model_not_served_comes_back_with_the_served_list():
    with ScriptedServer(served_model="smollm2", models=["smollm2", "qwen"]) as srv:
        hosted = failure(HostedTransport(api_base=srv.api_base, api_key="sk-test"), payload())
        local = failure(LiteLLMTransport(api_base=srv.api_base, api_key="sk-test"), payload())
    assert hosted == local and hosted[0] is ModelNotServed and hosted[2]["served"] == ["smollm2", "qwen"]


def test_a_refused_port_and_an_unroutable_model_come_back_unsent_and_final():
    base = f"http://127.0.0.1:{closed_port()}/v1"
    hosted = failure(HostedTransport(api_base=base, api_key="sk-test"), payload())
    local = failure(LiteLLMTransport(api_base=base, api_key="sk-test"), payload())
    assert hosted == local and hosted[0] is ProviderUnreachable
    assert hosted[2]["request_sent"] is False and hosted[2]["retryable"] is False
    with pytest.raises(ModelRouteError) as info:
        HostedTransport().route("nosuchprovider/model")
    assert isinstance(info.value, ValueError) and "litellm cannot route it" in str(info.value)


def test_the_placeholder_key_notice_is_said_once_and_names_the_variable(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.replies = [{"text": "one"}, {"text": "two"}]
    transport = HostedTransport(api_base=server.api_base)
    transport.complete(payload(), None)
    assert transport.placeholder_for == "OPENAI_API_KEY" and "placeholder key" in (transport.notice or "")
    transport.notice = None  # the adapter hands it out once
    transport.complete(payload(), None)
    assert transport.notice is None


def test_a_key_set_after_the_host_started_is_sent(server, monkeypatch):
    server.replies = [{"text": "first"}, {"text": "second"}]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    HostedTransport(api_base=server.api_base).complete(payload(), None)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-later")
    HostedTransport(api_base=server.api_base).complete(payload(), None)
    assert server.headers[-1]["Authorization"] == "Bearer sk-set-later"
    assert "sk-set-later" not in repr(HostedTransport(api_base=server.api_base, api_key="sk-set-later"))


def test_lookups_answer_as_litellm_does_here():
    transport, local = HostedTransport(), LiteLLMTransport()
    batches = [[{"role": "user", "content": "hello world"}], [{"role": "system", "content": "You are terse. " * 20}]]
    assert transport.token_counts(MODEL, batches) == local.token_counts(MODEL, batches)
    assert transport.model_info(MODEL)["max_input_tokens"] == local.model_info(MODEL)["max_input_tokens"]
    assert transport.supports_caching(MODEL) == local.supports_caching(MODEL)
    assert transport.route(MODEL) == "openai"
    with pytest.raises(LookupError):
        transport.model_info("openai/no-such-model-anywhere")


def test_concurrent_async_calls_are_served_at_once():
    def reply_for(body: dict[str, Any]) -> dict[str, Any]:
        return {"text": f"answer to {body['messages'][-1]['content']}", "delay": 0.3}

    async def three(transport: HostedTransport) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(transport.acomplete(payload(f"q{i}"), None) for i in range(3))))

    with ScriptedServer(reply_for=reply_for) as srv:
        answers = asyncio.run(three(HostedTransport(api_base=srv.api_base, api_key="sk-test")))
    assert [a["choices"][0]["message"]["content"] for a in answers] == ["answer to q0", "answer to q1", "answer to q2"]


# -- a host that ends: idle, killed between calls, killed during one, interrupted ------------------------


def test_a_warmed_host_is_started_once_and_serves_the_first_request(own_host, server):
    own_host.stop()
    starts = own_host.starts
    assert HostedTransport(host=own_host, idle_s=0.5).warm_up() is True
    warmed = own_host.pid
    assert warmed is not None and own_host.warm_up() is False, "one host, however often warmed"
    server.replies = [{"text": "served by the warmed host"}]
    answer = HostedTransport(api_base=server.api_base, api_key="sk-test", host=own_host).complete(payload(), None)
    assert answer["choices"][0]["message"]["content"] == "served by the warmed host"
    assert (own_host.pid, own_host.starts) == (warmed, starts + 1), "the request waited for the warmed host"


WARM_ARGV = ("import os, sys, time; open(sys.argv[1] + '.part', 'w').write(' '.join(sys.argv[2:])); "
             "os.rename(sys.argv[1] + '.part', sys.argv[1]); time.sleep(60)")
"""A host that never listens: it writes its command line (whole, by a rename) and sleeps."""


def test_a_warm_up_gives_the_host_the_runs_idle_time_and_does_not_wait_for_it(tmp_path):
    said = tmp_path / "argv"
    host = ProviderHost(argv=[sys.executable, "-c", WARM_ARGV, str(said)])  # a host that never listens
    try:
        assert HostedTransport(host=host, idle_s=0.5).warm_up() is True, "returned though nothing listens yet"
        deadline = time.monotonic() + GONE_WAIT_S
        while not said.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said.read_text().split()[-2:] == ["--idle-s", "0.5"]
        assert host.warm_up() is False and host.starts == 1
    finally:
        host.close()


def test_a_host_that_gets_no_request_exits_after_its_idle_time():
    _host, listener, done = serve_in_background(idle_s=0.2)
    assert done.wait(GONE_WAIT_S), "a host warmed for a run that never called the model idles out"
    assert listener.fileno() == -1, "its listener closed: a later request starts a new host"


def test_only_a_model_that_needs_the_host_warms_it_up():
    from harness_magic.core.providers.adapter import warm_up_provider

    assert warm_up_provider("offline/quickstart") is False, "an offline model needs no host"
    assert warm_up_provider(MODEL, provider_host=False) is False, "litellm here: nothing to start"
    shared_host().endpoint()
    assert warm_up_provider(MODEL) is False, "a running host is not started again"


def test_an_idle_host_exits_and_the_next_call_starts_a_new_one(own_host, server):
    server.replies = [{"text": "before"}, {"text": "after"}]
    transport = HostedTransport(api_base=server.api_base, api_key="sk-test", idle_s=0.5, host=own_host)
    assert transport.complete(payload(), None)["choices"][0]["message"]["content"] == "before"
    first = own_host.last_pid
    assert first is not None
    wait_gone(first)
    assert transport.complete(payload(), None)["choices"][0]["message"]["content"] == "after"
    assert own_host.last_pid not in (None, first)


def test_a_host_killed_between_calls_is_replaced_unseen(own_host, server):
    server.replies = [{"text": "one"}, {"text": "two"}]
    transport = HostedTransport(api_base=server.api_base, api_key="sk-test", host=own_host)
    transport.complete(payload(), None)
    pid = own_host.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    assert transport.complete(payload(), None)["choices"][0]["message"]["content"] == "two"
    assert len(server.requests) == 2, "the dead host's call was not sent twice"


class StallingServer:
    """A chat server that streams the first piece of its answer, then waits until :attr:`release` is set
    (so a test acts while the host is certainly mid-stream), then finishes; it answers one request."""

    def __init__(self) -> None:
        self.release = threading.Event()
        release = self.release

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                for delta, finish in (({"role": "assistant", "content": "First piece"}, None),
                                      ({"content": ", second piece"}, None), ({}, "stop")):
                    chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    release.wait(GONE_WAIT_S)
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.api_base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_host_killed_during_a_streamed_call_is_one_error_and_the_next_call_works(own_host, server):
    stalling = StallingServer()
    own_host.endpoint()  # running before the call, so the first piece can name it
    pid = own_host.pid
    assert pid is not None

    def kill_on_first_piece(piece: str) -> None:
        os.kill(pid, signal.SIGKILL)

    try:
        with pytest.raises(ProviderUnreachable) as info:
            HostedTransport(api_base=stalling.api_base, api_key="sk-test", host=own_host).complete(
                payload(), kill_on_first_piece)
    finally:
        stalling.close()
    assert "the provider host ended during the request" in str(info.value)
    assert info.value.retryable and info.value.request_sent and info.value.url == "the provider host"
    server.replies = [{"text": "fresh"}]
    transport = HostedTransport(api_base=server.api_base, api_key="sk-test", host=own_host)
    assert transport.complete(payload(), None)["choices"][0]["message"]["content"] == "fresh"
    assert own_host.last_pid != pid


def test_an_interrupt_during_streaming_leaves_the_host_serving(own_host, server):
    stalling = StallingServer()
    transport = HostedTransport(api_base=stalling.api_base, api_key="sk-test", host=own_host)
    seen: list[str] = []

    def stop(piece: str) -> None:
        seen.append(piece)
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            transport.complete(payload(), stop)  # the host is mid-stream: the server holds the next piece
    finally:
        stalling.close()  # the next piece meets the closed connection: the host closes litellm's stream
    pid, starts = own_host.pid, own_host.starts
    assert seen == ["First piece"]
    server.replies = [{"text": "Fresh answer."}]
    follow = HostedTransport(api_base=server.api_base, api_key="sk-test", host=own_host)
    assert follow.complete(payload(), None)["choices"][0]["message"]["content"] == "Fresh answer."
    assert (own_host.pid, own_host.starts) == (pid, starts), "the same host served the next request"
    HostedTransport(host=own_host, idle_s=0.3).route(MODEL)
    assert pid is not None
    wait_gone(pid)  # it idled out: a host with a request still in flight never does, so the interrupted one ended


# -- the host holds litellm lightly -------------------------------------------------------------------------

PACKAGE_INDEX = """\
from pathlib import Path
Path(__file__).with_name("ran").open("a").write("index\\n")
from .heavy import Thing
"""


def test_a_deferred_package_index_runs_only_when_a_name_only_it_defines_is_read(tmp_path, monkeypatch):
    from harness_magic.core.providers.host import defer_package_index

    name = f"deferred_index_{os.getpid()}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text(PACKAGE_INDEX)
    (package / "light.py").write_text("VALUE = 1\n")
    (package / "heavy.py").write_text("class Thing:\n    pass\n")
    (tmp_path / f"{name}_plain.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ran = package / "ran"
    try:
        assert defer_package_index(name) is True and defer_package_index(name) is False, "registered once"
        assert defer_package_index(f"{name}_plain") is False, "a module, not a package"
        assert defer_package_index(f"{name}_nowhere") is False
        module = sys.modules[name]
        assert __import__(f"{name}.light", fromlist=["VALUE"]).VALUE == 1, "a submodule imports as usual"
        assert not hasattr(module, "__version__") and not ran.exists(), "submodules and dunders leave the index"
        with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'nothing_here'"):
            module.nothing_here
        assert ran.read_text() == "index\n", "a name it might define ran the index, once"
        thing = __import__(name, fromlist=["Thing"]).Thing
        assert thing.__name__ == "Thing" and module.light.VALUE == 1 and ran.read_text() == "index\n"
    finally:
        for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.") or m == f"{name}_plain"]:
            del sys.modules[loaded]


LAZY_INDEX = """\
\"\"\"An index: names re-exported from its own submodules.\"\"\"
from __future__ import annotations

from .light import VALUE as VALUE
from .heavy import Thing as Thing, Other as Renamed
from . import sub as sub
"""


def lazy_package(root: Path, name: str, index: str = LAZY_INDEX) -> Path:
    """A package ``name`` under ``root`` whose submodules note in ``ran`` that they ran."""
    package = root / name
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(index)
    note = "from pathlib import Path\nPath(__file__).parent.joinpath('ran').open('a').write(__name__ + '\\n')\n"
    (package / "light.py").write_text(note + "VALUE = 1\n")
    (package / "heavy.py").write_text(note + "class Thing:\n    pass\nclass Other:\n    pass\n")
    (package / "sub" / "__init__.py").write_text("from .deep import DEEP as DEEP\n")
    (package / "sub" / "deep.py").write_text("DEEP = 'deep'\n")
    return package


def ran(package: Path) -> list[str]:
    path = package / "ran"
    return path.read_text().split() if path.exists() else []


def test_an_index_is_read_as_a_map_of_names_and_anything_else_is_not():
    from harness_magic.core.providers.host import index_names

    assert index_names(LAZY_INDEX) == {"VALUE": ("light", "VALUE"), "Thing": ("heavy", "Thing"),
                                       "Renamed": ("heavy", "Other"), "sub": ("sub", None)}
    for source in ("from .light import *\n", "import os\n", "from .light import VALUE\nX = 1\n",
                   "from ..up import Y\n", "from os import path\n", "if True:\n    from .a import B\n",
                   "from .light import (\n"):
        assert index_names(source) is None, source


@pytest.mark.parametrize("how", ["from-import", "attribute", "star"])
def test_a_lazy_index_loads_only_the_submodule_that_defines_the_name_asked(tmp_path, monkeypatch, how):
    from harness_magic.core.providers.host import LazyIndexes

    name = f"lazy_index_{os.getpid()}_{how.replace('-', '_')}"
    package = lazy_package(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = LazyIndexes([name])
    sys.meta_path.insert(0, finder)
    try:
        module = __import__(name)
        assert ran(package) == [] and module.__all__ == ["VALUE", "Thing", "Renamed", "sub"]
        if how == "from-import":
            assert __import__(name, fromlist=["Thing"]).Thing.__name__ == "Thing"
            assert ran(package) == [f"{name}.heavy"], "one submodule, not the index"
        elif how == "attribute":
            assert module.VALUE == 1 and module.sub.DEEP == "deep" and module.Renamed.__name__ == "Other"
            assert ran(package) == [f"{name}.light", f"{name}.heavy"]
            with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'nothing_here'"):
                module.nothing_here
            assert "Thing" in dir(module)
        else:
            namespace: dict[str, Any] = {}
            exec(f"from {name} import *", namespace)  # every name, as the index would give
            assert namespace["VALUE"] == 1 and namespace["sub"].DEEP == "deep"
        if how == "from-import":
            assert f"{name}.sub" not in sys.modules and f"{name}.light" not in sys.modules
        else:
            assert type(sys.modules[f"{name}.sub"].__spec__.loader).__name__ == "_LazyIndexLoader", \
                "a package below is an index too: lazy as well"
    finally:
        sys.meta_path.remove(finder)
        for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[loaded]


def test_a_package_under_a_lazy_prefix_that_is_not_an_index_runs_as_written(tmp_path, monkeypatch):
    from harness_magic.core.providers.host import LazyIndexes

    name = f"not_an_index_{os.getpid()}"
    package = lazy_package(tmp_path, name, index="from .light import VALUE\nDOUBLE = VALUE * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = LazyIndexes([name])
    sys.meta_path.insert(0, finder)
    try:
        assert __import__(name).DOUBLE == 2 and ran(package) == [f"{name}.light"]
    finally:
        sys.meta_path.remove(finder)
        for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[loaded]


CLI_PACKAGE = {
    "__init__.py": "from ._cli import main\n",
    "_cli.py": "from pathlib import Path\nPath(__file__).with_name('ran').open('a').write('cli\\n')\n"
               "OTHER = 'other'\ndef main(*args):\n    return ('real main', args)\n",
}


@pytest.mark.parametrize("first", ["call", "other name"])
def test_a_deferred_callable_loads_its_module_only_when_called_or_read(tmp_path, monkeypatch, first):
    from harness_magic.core.providers.host import defer_callable

    name = f"deferred_cli_{os.getpid()}_{first.replace(' ', '_')}"
    package = tmp_path / name
    package.mkdir()
    for file, text in CLI_PACKAGE.items():
        (package / file).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert defer_callable(f"{name}._cli", "main") is True
        assert defer_callable(f"{name}._cli", "main") is False, "registered once"
        module = __import__(name)
        assert not (package / "ran").exists(), "the package imported, its command line not"
        if first == "call":
            assert module.main(1, 2) == ("real main", (1, 2)) and module.main() == ("real main", ())
        else:
            assert sys.modules[f"{name}._cli"].OTHER == "other"
        assert (package / "ran").read_text() == "cli\n", "loaded once"
        real = sys.modules[f"{name}._cli"]
        assert real.main.__module__ == f"{name}._cli" and real.OTHER == "other"
    finally:
        for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[loaded]


HOST_AS_PREPARED = textwrap.dedent("""\
    import json, sys
    from harness_magic.core.providers.host import prepare
    litellm = prepare()
    import litellm.utils
    types = sum(1 for m in sys.modules if m.startswith("openai.types."))
    from openai.types.chat import ChatCompletion
    from openai.types import Batch
    import openai.types.beta.realtime as realtime
    cli_left_out = not any(name in sys.modules for name in ("click", "rich", "pygments"))
    import httpx._main
    from httpx._main import get_lexer_for_response
    print(json.dumps({"types_loaded": types, "leftover": hasattr(litellm.utils, "json_data"),
                      "cli_left_out": cli_left_out, "cli_loads": "click" in sys.modules
                      and get_lexer_for_response.__module__ == "httpx._main" and callable(httpx._main.main),
                      "claude_tokens": litellm.token_counter(model="claude-2.1", text="hello there, Claude"),
                      "gpt_tokens": litellm.token_counter(model="gpt-4o-mini", text="hello there"),
                      "names": [ChatCompletion.__name__, Batch.__name__, realtime.__name__]}))
""")


def test_the_host_as_prepared_imports_part_of_openais_types_and_still_finds_every_one(tmp_path):
    from harness_magic.core.providers.transport import import_litellm

    litellm = import_litellm()  # here as litellm is everywhere else: every type, the tokenizer file kept
    done = subprocess.run([sys.executable, "-c", HOST_AS_PREPARED], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    openai_types = Path(sys.modules["openai"].__file__).parent / "types"
    assert out["types_loaded"] < len(list(openai_types.rglob("*.py"))) / 2, out
    assert out["leftover"] is False
    assert out["cli_left_out"] is True and out["cli_loads"] is True, "httpx's command line: there when asked for"
    assert out["claude_tokens"] == litellm.token_counter(model="claude-2.1", text="hello there, Claude"), \
        "the Anthropic tokenizer still reads its text"
    assert out["gpt_tokens"] == litellm.token_counter(model="gpt-4o-mini", text="hello there")
    assert out["names"] == ["ChatCompletion", "Batch", "openai.types.beta.realtime"]


TINY_RANKS = {**{bytes([i]): i for i in range(256)}, b"th": 256, b"the": 257, b" the": 258, b"he": 259}


def tiny_encoding(name: str) -> Any:
    """A small tiktoken encoding (bytes and four merges), built here: no download, no bundled file."""
    import tiktoken

    return tiktoken.Encoding(name=name, pat_str=r" ?\w+| ?[^\w\s]+|\s+", mergeable_ranks=dict(TINY_RANKS),
                             special_tokens={"<|end|>": 260})


def serve_in_background(idle_s: float) -> tuple[Any, socket.socket, threading.Event]:
    """A :class:`HostServer` on an abstract Unix socket, serving on a thread; the event is set when it returns."""
    from harness_magic.core.providers.host import HostServer

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("")  # an abstract address: nothing on disk
    listener.listen(1)
    host = HostServer(listener, idle_s)
    done = threading.Event()
    threading.Thread(target=lambda: (host.serve(), done.set()), daemon=True).start()
    return host, listener, done


def test_after_a_burst_of_requests_the_host_drops_what_it_no_longer_needs(monkeypatch):
    import tiktoken.registry

    from harness_magic.core.providers.channel import read_frame, send_frame

    loaded = tiny_encoding("tiny-loaded")
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {"tiny-loaded": loaded})
    host, listener, done = serve_in_background(idle_s=60)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(listener.getsockname())
            send_frame(conn, {"op": "route"})  # refused (no model): a request all the same, litellm untouched
            ack, answer = read_frame(conn), read_frame(conn)
        assert ack is not None and "ack" in ack and "needs a model" in str(answer)
        deadline = time.monotonic() + GONE_WAIT_S
        while loaded._mergeable_ranks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loaded._mergeable_ranks == {}, "the tokenizer's Python table went once the burst was over"
        assert loaded.encode("the theme") == tiny_encoding("fresh").encode("the theme")
    finally:
        host.idle_s = 0.1
        assert done.wait(GONE_WAIT_S)


def test_a_tokenizer_without_its_python_merge_table_counts_and_pickles_the_same(monkeypatch):
    import pickle

    import tiktoken
    import tiktoken.registry

    from harness_magic.core.providers.host import shed_tokenizer_tables

    registered, loose = tiny_encoding("tiny-registered"), tiny_encoding("tiny-loose")
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {"tiny-registered": registered})
    text = "the theme of the thesis, then <|end|> again"
    before = registered.encode(text, allowed_special="all")
    assert shed_tokenizer_tables() == 1 and shed_tokenizer_tables() == 0, "each table is dropped once"
    assert registered._mergeable_ranks == {} and loose._mergeable_ranks == TINY_RANKS, "only registered encodings"
    assert registered.encode(text, allowed_special="all") == before and registered.decode(before) == text
    assert pickle.loads(pickle.dumps(registered)).encode(text, allowed_special="all") == before, "pickled by name"
    assert pickle.loads(pickle.dumps(loose)).encode(text, allowed_special="all") == before, "pickled whole"


# -- a hostile host ----------------------------------------------------------------------------------------

FAKE_HOST = textwrap.dedent("""\
    import json, os, pickle, socket, struct, sys, time
    mode, fd = sys.argv[1], int(sys.argv[sys.argv.index("--fd") + 1])
    listener = socket.socket(fileno=fd)

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + sys.argv[2],))

    def frame(obj):
        data = json.dumps(obj).encode()
        return struct.pack(">I", len(data)) + data

    while True:
        conn, _ = listener.accept()
        header = conn.recv(4)
        (length,) = struct.unpack(">I", header)
        while length:
            length -= len(conn.recv(min(length, 65536)))
        conn.sendall(frame({"ack": os.getpid()}))
        if mode == "oversized":
            conn.sendall(struct.pack(">I", 2**31) + b"x" * 65536)
        elif mode == "pickle":
            data = pickle.dumps(Boom())
            conn.sendall(struct.pack(">I", len(data)) + data)
        elif mode == "class":
            conn.sendall(frame({"error": {"class": "SystemExit", "message": "bye"}}))
        elif mode == "attribute":
            conn.sendall(frame({"error": {"class": "ProviderHTTPError", "message": "m", "__class__": "x"}}))
        elif mode == "typed":
            conn.sendall(frame({"error": {"class": "ProviderHTTPError", "message": "m", "status_code": "401"}}))
        elif mode == "list":
            conn.sendall(frame(["not", "an", "object"]))
        time.sleep(30)
        conn.close()
""")


@pytest.mark.parametrize(("mode", "words"), [
    ("oversized", f"FRAME_MAX_BYTES is {FRAME_MAX_BYTES:,}: refused unread"),
    ("pickle", "is not JSON"),
    ("class", "names class 'SystemExit'; allowed: ProviderError"),
    ("attribute", "unknown fields: __class__"),
    ("typed", "status_code is a str, not one of int, NoneType"),
    ("list", "holds a list, not a JSON object"),
])
def test_a_hostile_host_frame_is_refused_by_name_and_nothing_in_it_runs(tmp_path, mode, words):
    marker = tmp_path / "pwned"
    script = tmp_path / "fake_host.py"
    script.write_text(FAKE_HOST)
    host = ProviderHost(argv=[sys.executable, str(script), mode, str(marker)])
    try:
        with pytest.raises(HostProtocolError) as info:
            HostedTransport(api_base="http://127.0.0.1:9/v1", api_key="sk-test", timeout_s=1, host=host).complete(
                payload(), None)
    finally:
        host.close()
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not info.value.retryable and not marker.exists()


def test_a_host_that_cannot_start_is_one_error_naming_what_it_said():
    crash = "import sys; sys.stderr.write('boom: litellm is not installed here\\n'); sys.exit(3)"
    host = ProviderHost(argv=[sys.executable, "-c", crash])
    try:
        with pytest.raises(ProviderUnreachable) as info:
            HostedTransport(api_base="http://127.0.0.1:9/v1", host=host).complete(payload(), None)
    finally:
        host.close()
    assert "the provider host could not be reached twice" in str(info.value)
    assert "boom: litellm is not installed here" in str(info.value)
    assert not info.value.request_sent and not info.value.retryable and host.starts == 2


def test_frames_and_errors_are_checked_before_anything_is_built():
    with pytest.raises(FrameError, match="is not JSON: RecursionError"):
        decode_frame(b"[" * 100_000 + b"]" * 100_000)
    rebuilt = rebuild_error({"class": "ModelNotServed", "message": "model 'x' is not served", "status_code": 404,
                             "url": "http://h/v1", "model": "x", "served": ["a"], "retryable": False})
    assert type(rebuilt) is ModelNotServed and (rebuilt.status_code, rebuilt.served, rebuilt.model) == (404, ["a"], "x")
    with pytest.raises(FrameError, match="served is a list"):
        rebuild_error({"class": "ModelNotServed", "message": "m", "served": [1, 2]})


def test_a_bad_idle_time_or_a_python_object_in_extra_is_refused_by_name():
    with pytest.raises(ValueError, match="provider_idle_s must be a number of seconds above 0 .* got 0"):
        HostedTransport(idle_s=0)
    with pytest.raises(ValueError, match=r"extra\['callback'\] is a function, which cannot be sent"):
        HostedTransport(extra={"callback": lambda: None})


# -- the kernel never holds litellm ------------------------------------------------------------------------

SESSION_RUN = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, TESTS)
    from scripted_server import ScriptedServer
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession
    turns = [{"text": "Adding.", "tool_calls": [{"name": "python_interpreter",
                                                 "arguments": {"code": "print(sum(range(10)))"}}]},
             {"text": "The total is 45."}]
    with ScriptedServer(turns) as server:
        config = AgentConfig(model="openai/gpt-4o-mini", api_base=server.api_base, sandbox="inprocess",
                             run_dir="runs", extra={"api_key": "sk-test"})
        result = AgentSession(config).ask("Add the numbers below ten.")
    print(json.dumps({"status": result.status, "answer": result.text, "cost": result.usage.cost,
                      "litellm": sorted(m for m in sys.modules if m.split(".")[0] in ("litellm", "openai"))}))
""").replace("TESTS", repr(str(TESTS)))


def test_a_whole_run_through_the_session_never_imports_litellm_in_the_kernel(tmp_path):
    done = subprocess.run([sys.executable, "-c", SESSION_RUN], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "completed" and out["answer"] == "The total is 45.", out
    assert out["cost"] > 0, "priced by litellm in the host"
    assert out["litellm"] == [], out


CELL_ORDER_SPIES = textwrap.dedent("""\
    import harness_magic.core.providers.adapter as _adapter, harness_magic.notebook.agent_magics as _magics
    order = []
    _warm, _route, _session = _adapter.warm_up_provider, _adapter.route_model, _magics.AgentMagics.session
    _adapter.warm_up_provider = lambda *a, **k: order.append(f"warm_up started={_warm(*a, **k)}")
    _adapter.route_model = lambda *a, **k: order.append("route") or _route(*a, **k)
    _magics.AgentMagics.session = property(lambda self: order.append("session") or _session.fget(self))
""")
"""Records, in the kernel, the order in which an ``%%agent`` cell warms the host up, builds its session and
first asks the host (the route check)."""


@pytest.mark.kernel
def test_an_agent_cell_in_a_real_kernel_leaves_litellm_out_of_it(tmp_path):
    from kernel_helpers import agent_kernel

    with ScriptedServer([TOOL_ANSWER, {"text": "The total is 45."}]) as srv:
        with agent_kernel(tmp_path, run_dir="runs", sandbox="inprocess", api_base=srv.api_base) as kernel:
            assert kernel.run(CELL_ORDER_SPIES).ok
            cell = kernel.run("%%agent -m openai/test-model\nAdd the numbers below ten.")
            assert cell.ok, cell.outputs
            assert kernel.value("_.text") == "The total is 45."
            assert kernel.value("'litellm' in __import__('sys').modules") is False
            assert len(srv.requests) == 2
            assert kernel.value("order[:3]") == ["warm_up started=True", "session", "route"], \
                "the cell starts the host, builds its session while litellm imports, then asks the host"


def test_the_shared_host_is_one_per_process():
    assert shared_host() is shared_host()
    assert HostedTransport().host is shared_host()


# -- the settings pick the path ----------------------------------------------------------------------------


def test_the_settings_choose_the_host_or_litellm_here_and_refuse_a_bad_idle_time(tmp_path):
    from harness_magic import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession
    from harness_magic.notebook.agent_magics import AgentMagics
    from traitlets import TraitError

    assert isinstance(ProviderAdapter("openai/x").transport, HostedTransport)
    assert isinstance(ProviderAdapter("openai/x", provider_host=False).transport, LiteLLMTransport)
    assert ProviderAdapter("openai/x", provider_idle_s=7).transport.idle_s == 7.0
    config = AgentConfig(model="openai/x", sandbox="inprocess", run_dir=str(tmp_path), provider_host=False)
    assert isinstance(AgentSession(config).adapter_for("openai/x").transport, LiteLLMTransport)
    for bad in (0, -1.0, float("nan"), float("inf"), "120", True):
        with pytest.raises(ValueError, match="provider_idle_s must be a number of seconds above 0"):
            AgentConfig(provider_idle_s=bad)
    magics = AgentMagics(shell=None)
    with pytest.raises(TraitError, match="provider_idle_s must be a number of seconds above 0.*got 0"):
        magics.provider_idle_s = 0
    assert magics.provider_idle_s == 120.0 and magics.provider_host is True


def test_a_host_whose_folder_is_too_deep_for_a_socket_path_still_serves_and_leaves_nothing(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)  # with the owned folder's name, far past AF_UNIX's 107 bytes
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    host = ProviderHost()
    try:
        transport = HostedTransport(host=host)
        assert transport.route(MODEL) == "openai"
        folder = host._dir
        assert folder is not None and len(os.fsencode(os.path.join(folder, "host-1.sock"))) > SOCKET_PATH_MAX_BYTES
        assert os.listdir(folder) == ["host-1.sock"]
    finally:
        host.close()
    assert not os.listdir(deep), "the deep folder kept what the host made"
