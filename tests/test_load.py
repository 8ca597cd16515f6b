"""The hub-node load test runs end to end and leaves nothing behind (issue 35 point 6).

``benchmarks/load_test.py`` at a small size: kernels started through a real ``jupyter_server`` and
driven over its websockets each run a sandboxed ``%%agent`` cell against the scripted model server;
every cell completes with one tool call, and after the kernels are shut down through the API and the
server stops, no process the server started is alive. The figures themselves are the benchmark's.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

LOAD_TEST = Path(__file__).resolve().parent.parent / "benchmarks" / "load_test.py"


@pytest.fixture(scope="module")
def load_test():
    spec = importlib.util.spec_from_file_location("load_test", LOAD_TEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernels_started_through_jupyter_server_run_sandboxed_cells_and_leave_no_process(load_test, tmp_path):
    out = asyncio.run(load_test.load(kernels=2, cells=1, root=tmp_path))
    assert out["failures"] == [] and out["completed"] == 2, out
    assert out["model_requests"] == 4 and out["tool_results"] == 2, "each cell: one tool call, then the answer"
    assert out["processes"] >= 2 * 3, "each kernel, its launcher and a worker were running"
    assert out["left_behind"] == [], out


def test_the_scripted_model_answers_each_conversation_by_its_content(load_test):
    fresh = load_test.reply_for({"messages": [{"role": "user", "content": "Sum."}]})
    assert fresh["tool_calls"][0]["name"] == "python_interpreter"
    after_tool = load_test.reply_for({"messages": [{"role": "user", "content": "Sum."},
                                                   {"role": "tool", "content": "333328333350000"}]})
    assert "tool_calls" not in after_tool and after_tool["text"]
