"""MCP servers as connectors (issue 34.1): a real test server (``tests/mcp_server.py``) run locally over stdio,
confined, and over streamable HTTP; its tools disclosed progressively, approved unless marked read, bounded,
masked, restarted after a crash; what the confinement refuses a compromised server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness_magic.core.execution.connectors.mcp.connector import (RESULT_MAX_CHARS, McpConnector, mcp_connector,
                                                                 parse_options, tool_name_for)
from harness_magic.core.execution.tools import ToolError

from harness_magic.core.confinement.layers import landlock_abi, probe_seccomp_library

TESTS = Path(__file__).parent
SERVER = str(TESTS / "mcp_server.py")
LOCAL = {"command": [sys.executable, SERVER]}


CONFINABLE = landlock_abi() >= 4 and probe_seccomp_library() is True
"""A local server starts only where Landlock and seccomp hold (TCP rules need Landlock ABI 4)."""
confined = pytest.mark.skipif(not CONFINABLE, reason="Landlock ABI 4+ and libseccomp are needed for a local server")


def call(tool, /, **arguments):
    return {"name": tool, "arguments": arguments}


@pytest.fixture(scope="module")
def crm():
    """A local server marked: count_orders and lookup_customer read, annotations not trusted."""
    connector = mcp_connector(name="crm", read_tools=["count_orders", "lookup_customer", "read_path", "environment",
                                                      "parent_environment", "run_shell", "write_path", "connect",
                                                      "crash", "garbage", "huge", "pid", "udp"], env=["HM_MCP_GIVEN"],
                              **LOCAL)
    yield connector
    connector.close()


# -- configuration ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of 'command'"),
    ({"command": ["x"], "url": "http://h/mcp"}, "exactly one of 'command'"),
    ({"command": "python server.py"}, "command 'python server.py' is invalid; allowed: a non-empty list"),
    ({"command": ["python"], "headers": {"A": "$B"}}, "option 'headers' does not apply to a local server"),
    ({"url": "http://h/mcp", "env": ["A"]}, "option 'env' does not apply to a remote server"),
    ({"url": "file:///etc/passwd"}, "url 'file:///etc/passwd' is invalid; allowed: an http:// or https:// URL"),
    ({"url": "https://h/mcp", "headers": {"Authorization": "Bearer sk-live-123"}},
     "header 'Authorization' must name an environment variable"),
    ({"command": ["python"], "network": "yes"}, "network 'yes' is invalid; allowed: false"),
    ({"command": ["python"], "network": [0]}, "network [0] is invalid"),
    ({"command": ["python"], "env": ["A B"]}, "env ['A B'] is invalid; allowed: a list of strings naming"),
    ({"command": ["python"], "trust_annotations": "true"}, "trust_annotations 'true' is invalid"),
    ({"command": ["python"], "timeout_s": 0}, "timeout_s 0 is invalid; allowed: seconds"),
    ({"command": ["python"], "tools": ["x"]}, "unknown option 'tools'; allowed: name, description, command"),
])
def test_a_bad_option_is_named_with_what_is_allowed(options, message):
    with pytest.raises(ValueError) as caught:
        parse_options("crm", options)
    assert message in str(caught.value) and "mcp connector 'crm'" in str(caught.value)


def test_the_type_is_registered_and_a_literal_secret_never_reaches_the_configuration():
    from harness_magic.core.execution.connectors.config import connector_from_config
    from harness_magic.core.execution.connectors.types import CONNECTOR_TYPES

    assert "mcp" in CONNECTOR_TYPES.names()
    with pytest.raises(ValueError, match="must name an environment variable"):
        connector_from_config({"type": "mcp", "url": "https://h/mcp", "headers": {"X-Key": "sk-live-123"}})


def test_server_tool_names_become_valid_connector_tool_names():
    taken: set[str] = set()
    names: list[str] = []
    for raw in ("get-user.v2", "get_user_v2", "9lives", "a__b", "x" * 80):
        name = tool_name_for(raw, taken)
        taken.add(name)
        names.append(name)
    assert names == ["get_user_v2", "get_user_v2_2", "t_9lives", "a_b", "x" * 31]


@confined
def test_a_command_that_cannot_start_or_a_read_tool_it_lacks_is_a_clear_error():
    with pytest.raises(ConnectionError, match="'/nonexistent/server' of MCP connector 'ghost' is not an executable"):
        mcp_connector(name="ghost", command=["/nonexistent/server"])
    with pytest.raises(ValueError, match="read_tools names 'drop_all', which the server does not have; its tools: "):
        mcp_connector(name="crm2", read_tools=["drop_all"], **LOCAL)


# -- the local server, confined ----------------------------------------------------------------------------------


@confined
def test_the_local_server_runs_with_every_required_layer(crm):
    layers = crm.confinement
    for layer in ("pdeathsig", "no_new_privs"):
        assert layers[layer] is True, layers
    for layer in ("netns", "ipcns"):  # as root; without, network: false is Landlock's no TCP alone
        assert layers[layer] is True if os.geteuid() == 0 else layers[layer].startswith("unavailable: not root")
    assert layers["landlock"].startswith("ABI ") and layers["seccomp"].endswith(" rules"), layers


@confined
def test_a_compromised_server_cannot_read_secrets_the_kernels_environment_or_exec_a_shell(crm, tmp_path):
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert secret.read_text().startswith("-----BEGIN")  # the kernel can
    refused = crm.call_tool("crm__read_path", {"path": str(secret)})
    assert refused.startswith("DENIED: PermissionError"), refused
    real_ssh = Path.home() / ".ssh"
    assert crm.call_tool("crm__read_path", {"path": str(real_ssh / "id_rsa")}).startswith("DENIED")
    assert crm.call_tool("crm__read_path", {"path": "/etc/shadow"}).startswith("DENIED")
    assert crm.call_tool("crm__parent_environment", {}).startswith("DENIED: PermissionError")
    shell = crm.call_tool("crm__run_shell", {"command": "id > /tmp/hm_mcp_pwned"})
    assert shell.startswith("DENIED: PermissionError") and not os.path.exists("/tmp/hm_mcp_pwned"), shell
    outside = tmp_path / "written"
    assert crm.call_tool("crm__write_path", {"path": str(outside)}).startswith("DENIED") and not outside.exists()
    inside = crm.call_tool("crm__write_path", {"path": "~/notes.txt"})  # its HOME: the private directory
    assert inside.startswith("WROTE") and (Path(crm.directory) / "notes.txt").exists()


@confined
def test_only_the_named_variables_reach_the_server(monkeypatch):
    monkeypatch.setenv("HM_MCP_GIVEN", "given-value")
    monkeypatch.setenv("HM_MCP_SECRET", "kernel-only-secret")
    monkeypatch.setenv("HM_MCP_SERVICE_TOKEN", "tok-given-to-the-server-9431")
    connector = mcp_connector(name="envcheck", env=["HM_MCP_GIVEN", "HM_MCP_SERVICE_TOKEN"],
                              read_tools=["environment"], **LOCAL)
    try:
        seen = connector.call_tool("envcheck__environment", {})
    finally:
        connector.close()
    assert "HM_MCP_GIVEN=given-value" in seen
    assert "HM_MCP_SERVICE_TOKEN=" in seen and "tok-given-to-the-server-9431" not in seen  # passed, then scrubbed
    assert "kernel-only-secret" not in seen and "HM_MCP_SECRET" not in seen
    assert "PATH=/nonexistent" in seen
    names = {line.split("=", 1)[0] for line in seen.splitlines()}
    assert not names & {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SSH_AUTH_SOCK", "USER", "SHELL"}


@confined
def test_network_is_off_unless_configured(crm):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert crm.call_tool("crm__connect", {"port": port}).startswith("DENIED")
        udp = crm.call_tool("crm__udp", {"port": port})  # seccomp refuses the socket itself (EPERM), root or not,
        assert udp.startswith("DENIED") and "Operation not permitted" in udp, udp  # not the namespace's no route
        allowed = mcp_connector(name="net", network=[port], read_tools=["connect", "udp"], **LOCAL)
        try:
            assert allowed.confinement.get("netns") is None  # a network of its own would reach nothing
            assert allowed.call_tool("net__connect", {"port": port}) == f"CONNECTED: {port}"
            assert allowed.call_tool("net__connect", {"port": 9}).startswith("DENIED")  # not a listed port
            udp = allowed.call_tool("net__udp", {"port": port})
            assert udp.startswith("DENIED") and "Operation not permitted" in udp, udp  # listed ports are TCP only
        finally:
            allowed.close()
        anywhere = mcp_connector(name="net2", network=True, read_tools=["connect", "udp"], **LOCAL)
        try:
            assert anywhere.call_tool("net2__connect", {"port": port}) == f"CONNECTED: {port}"
            assert anywhere.call_tool("net2__udp", {"port": port}) == f"SENT: {port}"
        finally:
            anywhere.close()


@confined
def test_a_crash_mid_call_is_a_clear_tool_error_and_the_next_call_restarts_it(crm):
    before = crm.client.starts
    first_pid = crm.call_tool("crm__pid", {})
    with pytest.raises(ToolError, match=r"crm__crash failed: the local MCP server 'crm' failed during the call of "
                                        r"'crash' .*the next call starts it again"):
        crm.call_tool("crm__crash", {})
    assert crm.call_tool("crm__count_orders", {"region": "north"}) == "north: 35 orders"
    assert crm.client.starts == before + 1 and crm.call_tool("crm__pid", {}) != first_pid


@confined
def test_a_malformed_message_is_a_clear_tool_error_and_the_next_call_works(crm):
    started = time.monotonic()
    with pytest.raises(ToolError, match="it sent a message that is not MCP"):
        crm.call_tool("crm__garbage", {})
    assert time.monotonic() - started < 30  # at once, not at the call's timeout
    assert crm.call_tool("crm__lookup_customer", {"customer_id": 2}).startswith("customer 2: Bob Stone")


@confined
def test_a_hanging_server_times_out_and_is_restarted():
    connector = mcp_connector(name="slow", timeout_s=2, read_tools=["hang", "pid"], **LOCAL)
    try:
        hung = connector.call_tool("slow__pid", {})
        started = time.monotonic()
        with pytest.raises(ToolError, match="did not answer the call of 'hang' within 2 s; it was stopped"):
            connector.call_tool("slow__hang", {})
        assert time.monotonic() - started < 15
        assert _ended(int(hung))  # the hung process is gone
        assert connector.call_tool("slow__pid", {}) != hung
    finally:
        connector.close()


@confined
def test_results_are_bounded(crm):
    text = crm.call_tool("crm__huge", {"chars": RESULT_MAX_CHARS * 3})
    assert len(text) < RESULT_MAX_CHARS + 200 and text.endswith(f"of {RESULT_MAX_CHARS * 3:,} characters]")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@confined
def _ended(pid: int, within_s: float = 10.0) -> bool:
    """Whether process ``pid`` is gone within ``within_s`` (a stopped server may take a moment on a busy host)."""
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_the_server_dies_with_the_kernel(tmp_path):
    """A kernel killed with SIGKILL takes its server along (PR_SET_PDEATHSIG), and close() stops it too."""
    kernel = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from harness_magic.core.execution.connectors.mcp.connector import mcp_connector
        c = mcp_connector(name="k", command=[sys.executable, {SERVER!r}], read_tools=["pid"])
        print(c.call_tool("k__pid", {{}}), flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        server = int(kernel.stdout.readline())
        assert _alive(server)
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(10)
        assert _ended(server)
    finally:
        kernel.kill()
    closing = mcp_connector(name="c", read_tools=["pid"], **LOCAL)
    server, directory = int(closing.call_tool("c__pid", {})), closing.directory
    closing.close()
    assert _ended(server) and not os.path.exists(directory)


# -- remote over streamable HTTP ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, SERVER, "--http", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(10)


def test_a_remote_server_over_http_trusting_its_annotations(http_url, monkeypatch):
    monkeypatch.setenv("HM_MCP_TOKEN", "tok-123")
    connector = mcp_connector(name="tickets", url=http_url, headers={"Authorization": "Bearer $HM_MCP_TOKEN"},
                              trust_annotations=True)
    try:
        safety = {t.name.split("__")[1]: t.safety for t in connector.tools}
        assert safety["lookup_customer"] == "read" and safety["pid"] == "read"  # readOnlyHint, trusted
        assert safety["delete_customer"] == "external" and safety["count_orders"] == "external"  # no claim
        assert connector.call_tool("tickets__lookup_customer", {"customer_id": 1}).startswith("customer 1: Alice")
        assert "tok-123" not in json.dumps(connector.configuration, default=str)
        assert connector.confinement == {}
    finally:
        connector.close()
    monkeypatch.delenv("HM_MCP_TOKEN")
    with pytest.raises(ConnectionError, match="the environment variable 'HM_MCP_TOKEN' that a header of MCP "
                                              "connector 'tickets' names is not set"):
        mcp_connector(name="tickets", url=http_url, headers={"Authorization": "Bearer ${HM_MCP_TOKEN}"})


def test_an_unreachable_remote_server_is_a_clear_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionError, match="remote MCP server 'gone' could not be started or reached"):
        mcp_connector(name="gone", url=f"http://127.0.0.1:{port}/mcp", connect_timeout_s=10)


# -- through a session: progressive tools, approval, masking, resources with citations -------------------------


def _session(tmp_path, server, connectors, approver):
    from harness_magic import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.execution.connectors.approval import ApprovalPolicy
    from harness_magic.core.execution.connectors.config import connectors_from_config
    from harness_magic.core.session import AgentSession

    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", sleep=lambda s: None)
    registry = connectors_from_config(connectors, approval=ApprovalPolicy(approver=approver))
    session = AgentSession(AgentConfig(model="openai/test-model", sandbox="inprocess", run_dir=str(tmp_path),
                                       planner=False, reminders=False), adapter=adapter, connectors=registry)
    return session, registry


@pytest.mark.parametrize("transport", [pytest.param("local", marks=confined), "http"])
def test_a_session_loads_the_tools_progressively_asks_for_external_ones_and_masks_results(
        transport, http_url, tmp_path):
    from scripted_server import ScriptedServer

    where = LOCAL if transport == "local" else {"url": http_url}
    entry = {"type": "mcp", "name": "crm", "read_tools": ["lookup_customer"], **where}
    asked = []
    with ScriptedServer() as server:
        server.replies = [
            {"tool_calls": [{"id": "c1", **call("load_connectors", connector_name="crm")}]},
            {"tool_calls": [{"id": "c2", **call("crm__lookup_customer", customer_id=1)}]},
            {"tool_calls": [{"id": "c3", **call("crm__delete_customer", customer_id=1)}]},
            {"tool_calls": [{"id": "c4", **call("crm__search_resources", query="refund approver")}]},
            {"tool_calls": [{"id": "c5", **call("crm__read_resource", uri="docs://refunds")}]},
            {"tool_calls": [{"id": "c6", **call("crm__read_resource", uri="file:///etc/passwd")}]},
            {"text": "Refunds above 500 EUR need a second approver [doc:docs://refunds]."},
        ]
        session, registry = _session(tmp_path, server, [entry], lambda r: asked.append(r) or False)
        try:
            result = session.ask("What does customer 1 need for a refund?")
            connector = registry["crm"]
        finally:
            connector.close()
        requests = server.requests
    assert result.status == "completed", result.error
    offered = [[t["function"]["name"] for t in r.get("tools", [])] for r in requests]
    assert not any(n.startswith("crm__") for n in offered[0])  # hidden until loaded
    assert "crm__lookup_customer" in offered[1] and "crm__search_resources" in offered[1]
    results = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    lookup, delete, search, read, outside = (r["content"] for r in results[1:6])
    assert "No resource 'file:///etc/passwd' on crm; its resources: docs://refunds, docs://returns" in outside
    assert "Alice Martin" in lookup and "alice.martin@example.com" not in json.dumps(requests)  # masked e-mail
    assert [r.tool for r in asked] == ["crm__delete_customer"] and asked[0].safety == "external"
    assert "Not run: crm__delete_customer is an external call and was denied" in delete
    if transport == "local":
        assert not (Path(connector.directory or "") / "deleted-1").exists()
    assert "[doc:docs://refunds]" in search and "second approver" in read
    log = [json.loads(line) for line in Path(result.run_file).read_text().splitlines()]
    cited = {s["id"] for r in log if r.get("name") == "retrieval" for s in r["sources"]}
    assert "doc:docs://refunds" in cited
    assert any(r.get("event") == "approval" and r.get("tool") == "crm__delete_customer" and r["approved"] is False
               for r in log)


@confined
def test_a_server_whose_connector_the_configuration_drops_or_changes_stops_at_once():
    """%agent_connectors (apply_config) taking an MCP connector out, or rebuilding it, stops its server then,
    not at kernel exit; a connector kept as it was keeps its server."""
    from harness_magic.core.execution.connectors import ConnectorRegistry
    from harness_magic.core.execution.connectors.config import apply_config

    entry = {"type": "mcp", "name": "crm", "command": [sys.executable, SERVER], "read_tools": ["pid"]}
    registry = ConnectorRegistry([])
    apply_config(registry, [entry])
    first = registry["crm"]
    server, directory = int(first.call_tool("crm__pid", {})), first.directory
    assert apply_config(registry, [entry]).kept == ("crm",) and _alive(server), "the same entry keeps its server"
    apply_config(registry, [{**entry, "timeout_s": 45}])
    assert registry["crm"] is not first
    assert _ended(server) and not os.path.exists(directory), "the rebuilt connector's old server stopped"
    second = registry["crm"]
    server, directory = int(second.call_tool("crm__pid", {})), second.directory
    assert apply_config(registry, []).removed == ("crm",)
    assert _ended(server) and not os.path.exists(directory), "the removed connector's server stopped"
