"""A kernel imports the heavy data stack only when it is used (issue 35, a lean session).

A sandboxed ``%%agent`` cell that moves no frame leaves pandas, pyarrow and numpy out of the kernel
(about 84 MB private memory per analyst on a shared node); a kernel that already holds pandas gets
pyarrow imported beside the sandbox start, as before, so its first frame result costs no import wait.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

DATA_STACK = ("pandas", "pyarrow", "numpy")

CELL = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from IPython.core.interactiveshell import InteractiveShell
    preload, code = sys.argv[1], sys.argv[2]
    if preload == "pandas":
        import pandas
    turns = [{"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
             {"text": "done"}]
    Path("script.json").write_text(json.dumps({"turns": turns}))
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harness_magic")
    shell.run_line_magic("config", "AgentMagics.live = 'off'")
    shell.run_line_magic("config", "AgentMagics.run_dir = 'runs'")
    result = shell.run_cell_magic("agent", "-m scripted/script.json", "Work.")
    tool_text = [str(block) for m in result.messages for block in m.content if "ToolResult" in type(block).__name__]
    print(json.dumps({"loaded": [m for m in DATA_STACK if m in sys.modules], "status": result.status,
                      "answer": result.text, "tool": str(tool_text)}))
""").replace("DATA_STACK", repr(DATA_STACK))


def run_cell(tmp_path, preload: str, code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CELL, preload, code], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_sandboxed_cell_that_moves_no_frame_leaves_the_data_stack_unimported(tmp_path):
    out = run_cell(tmp_path, "none", "print(sum(range(10)))")
    assert out["loaded"] == [], out
    assert out["status"] == "completed" and out["answer"] == "done" and "45" in out["tool"], out


def test_a_kernel_that_holds_pandas_gets_pyarrow_beside_the_sandbox_start(tmp_path):
    out = run_cell(tmp_path, "pandas", "print(1)")
    assert set(out["loaded"]) == set(DATA_STACK), out


def test_a_frame_made_in_the_worker_still_comes_back_described_without_a_preload(tmp_path):
    """The lazy path is still correct: a frame result makes the kernel import what reads it, when needed."""
    code = "import pandas as pd\nframe = pd.DataFrame({'a': [1, 2, 3]})\nframe"
    out = run_cell(tmp_path, "none", code.replace("\\\\n", "\\n"))
    assert "done" in out["answer"]


HTTP_CELL = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, TESTS)
    from scripted_server import ScriptedServer
    from IPython.core.interactiveshell import InteractiveShell
    turns = [{"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": "print(6 * 7)"}}]},
             {"text": "42"}]
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harness_magic")
    shell.run_line_magic("config", "AgentMagics.live = 'off'")
    shell.run_line_magic("config", "AgentMagics.run_dir = 'runs'")
    with ScriptedServer(turns, strict_fields=True) as server:
        shell.run_line_magic("config", f"AgentMagics.api_base = {server.api_base!r}")
        result = shell.run_cell_magic("agent", "-m openai/lean", "Work.")
    print(json.dumps({"status": result.status, "answer": result.text, "rejections": server.rejections,
                      "tools_sent": [len(r.get("tools") or []) for r in server.requests],
                      "loaded": [m for m in ("mcp", "starlette", "uvicorn") if m in sys.modules]}))
""").replace("TESTS", repr(str(__import__("pathlib").Path(__file__).resolve().parent)))


def test_a_model_call_with_tools_over_http_does_not_load_litellms_mcp_gateway(tmp_path):
    """litellm imports its MCP server stack (about 80 MB) on any call with tools unless told to skip it; the
    option is internal to litellm: a server that rejects unknown fields accepts every request."""
    done = subprocess.run([sys.executable, "-c", HTTP_CELL], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "completed" and out["answer"] == "42", out
    assert out["rejections"] == [] and all(n > 0 for n in out["tools_sent"]), out
    assert out["loaded"] == [], out
