"""An MCP server as a connector in a real kernel: configured with ``%config AgentMagics.connectors``, its read tool
run with the e-mail it returns masked in the cell, its external tool asked about (unanswered: denied), and the
server killed with the kernel."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from kernel_helpers import agent_kernel, answer, script  # noqa: E402

from harness_magic.core.confinement.layers import landlock_abi, probe_seccomp_library  # noqa: E402

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(landlock_abi() < 4 or probe_seccomp_library() is not True,
                                                     reason="a local MCP server needs Landlock ABI 4+ and libseccomp")]

SERVER = str(Path(__file__).parent / "mcp_server.py")


def _tool(name: str, **arguments: object) -> dict:
    return {"text": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_an_mcp_connector_in_a_real_kernel(tmp_path: Path) -> None:
    entry = {"type": "mcp", "name": "crm", "command": [sys.executable, SERVER], "read_tools": ["lookup_customer"]}
    magics = "get_ipython().magics_manager.registry['AgentMagics']"
    with agent_kernel(tmp_path, run_dir="runs", sandbox="inprocess", question_timeout_s=1.0,
                      connectors=[entry]) as kernel:
        model = script(kernel, _tool("load_connectors", connector_name="crm"),
                       _tool("crm__lookup_customer", customer_id=1), _tool("crm__delete_customer", customer_id=1),
                       answer("Customer 1 is Alice Martin; the deletion was not approved."))
        cell = kernel.run(f"%%agent {model}\nWho is customer 1? Then delete them.")
        assert cell.ok, cell.outputs
        assert kernel.value("_.status") == "completed"
        html = cell.result["text/html"]
        assert "crm__lookup_customer" in html and "Alice Martin" in html
        assert "alice.martin@example.com" not in html  # masked before the model and the cell saw it
        results = kernel.value(f"[b.content for m in {magics}.session.harness.messages for b in m.tool_results]")
        assert "alice.martin@example.com" not in str(results)
        assert any("Not run: crm__delete_customer is an external call and was denied" in r for r in results), results
        directory = kernel.value(f"{magics}.session.connectors.registry['crm'].directory")
        assert not os.path.exists(os.path.join(directory, "deleted-1"))
        layers = kernel.run("%agent_sandbox")
        shown = "\n".join(str(o.get("data", {}).get("text/plain", "")) for o in layers.outputs)
        assert layers.ok and "local MCP server 'crm': the layers it was started with" in shown, layers.outputs
        mcp_part = shown.split("local MCP server 'crm'")[1]
        assert all(layer in mcp_part for layer in ("landlock", "seccomp", "pdeathsig", "netns")), mcp_part
        server = int(kernel.value(f"{magics}.session.connectors.registry['crm'].call_tool('crm__pid', {{}})"))
        assert _alive(server)
    deadline = time.monotonic() + 10  # the kernel is gone: its server too
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server)
