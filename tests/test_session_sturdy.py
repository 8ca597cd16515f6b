"""A sturdy notebook session, in a real kernel: reloads, setting changes, re-runs, delegation.

Models are scripted files (no key needed); each test states one behaviour.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from kernel_helpers import Kernel, agent_kernel, answer, code_turn, usage_error  # noqa: E402

pytestmark = pytest.mark.kernel

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
_counter = iter(range(10_000))


def script_file(kernel: Kernel, *turns: dict) -> str:
    """Write a scripted model into the kernel's folder; returns its model id."""
    name = f"sturdy_{next(_counter)}.json"
    (kernel.cwd / name).write_text(json.dumps({"turns": list(turns)}))
    return f"scripted/{name}"


def magics(attribute: str) -> str:
    return f"get_ipython().magics_manager.registry['AgentMagics'].{attribute}"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("sturdy")) as k:
        yield k


def test_reload_after_a_rejected_setting_works_and_reports_one_line(kernel: Kernel) -> None:
    for hostile in ("not a model", "x\\nUsageError: fake second line"):
        line = usage_error(kernel.run(f'%config AgentMagics.model = "{hostile}"'))
        assert "bad model" in line or "litellm" in line or "model" in line
        reload = kernel.run("%reload_ext harness_magic")
        assert reload.ok, (reload.stderr, reload.errors)
        assert kernel.run("%agent_vars").ok, "the magics are still there"
    # a bad value that reached the shell's configuration another way: dropped at reload, one line
    assert kernel.run("get_ipython().config.AgentMagics.sandbox = 'chroot'").ok
    reload = kernel.run("%reload_ext harness_magic")
    assert not reload.errors and reload.reply.get("status") == "ok"
    lines = [line for line in reload.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "AgentMagics.sandbox = 'chroot' ignored" in lines[0] and "allowed" in lines[0]
    assert kernel.value(magics("sandbox")) == "worker"
    again = kernel.run("%reload_ext harness_magic")
    assert again.ok and not again.stderr.strip(), "the bad value is gone for good"


def test_changing_model_api_base_and_budgets_keeps_history_and_handles(kernel: Kernel) -> None:
    first = script_file(kernel, code_turn("save('kept', [1, 2, 3])"), answer("Saved kept."))
    assert kernel.run(f'%config AgentMagics.model = "{first}"').ok
    assert kernel.run("%%agent --reset\nSave three numbers.").ok
    before = kernel.value("len(__import__('harness_magic.notebook.extension', fromlist=['x']).agent_session()"
                          ".harness.messages)")
    session_id = kernel.value("__import__('harness_magic.notebook.extension', fromlist=['x']).agent_session()"
                              ".session_id")
    second = script_file(kernel, code_turn("len(kept)"), answer("kept has 3 items."))
    for line in (f'%config AgentMagics.model = "{second}"', '%config AgentMagics.api_base = "http://127.0.0.1:9/v1"',
                 "%config AgentMagics.max_turns = 7", "%config AgentMagics.max_tool_calls = 5",
                 '%config AgentMagics.prompt_caching = "off"'):
        assert kernel.run(line).ok, line
    cell = kernel.run("%%agent\nHow many items are in kept?")
    assert cell.ok, cell.outputs
    assert "new session" not in cell.stdout and "fresh" not in cell.stdout
    session = "__import__('harness_magic.notebook.extension', fromlist=['x']).agent_session()"
    assert kernel.value(f"{session}.session_id") == session_id
    assert kernel.value(f"len({session}.harness.messages)") == before + 4
    assert kernel.value(f"{session}.harness.messages[0].text") == "Save three numbers."
    assert kernel.value(f"'kept' in {session}.cache")
    assert kernel.value(f"{session}.harness.max_turns") == 7
    # a sandbox change restarts the worker only: conversation and cache stay
    third = script_file(kernel, code_turn("kept[-1]"), answer("The last is 3."))
    assert kernel.run(f'%config AgentMagics.model = "{third}"').ok
    assert kernel.run('%config AgentMagics.sandbox = "inprocess"').ok
    cell = kernel.run("%%agent\nLast item?")
    assert cell.ok and "conversation and cache kept" in cell.stdout
    assert kernel.value(f"len({session}.harness.messages)") == before + 8
    assert kernel.run('%config AgentMagics.sandbox = "worker"').ok
    bad = usage_error(kernel.run('%config AgentMagics.prompt_caching = "always"'))
    assert "allowed: auto, on, off" in bad


@pytest.mark.parametrize("model", ["foo/bar", "../../etc/passwd"])
def test_a_model_litellm_cannot_route_is_a_one_line_usage_error(kernel: Kernel, model: str) -> None:
    cell = kernel.run(f"%%agent -m {model}\nHello")
    line = usage_error(cell)
    assert f"model {model!r}" in line and "provider prefix" in line and "models_by_provider" in line
    assert not list(kernel.cwd.glob("runs/*.jsonl")) or "Hello" not in "".join(
        p.read_text() for p in kernel.cwd.glob("runs/*.jsonl")), "nothing ran"


def test_run_all_twice_on_a_notebook_with_a_scripted_model(kernel: Kernel) -> None:
    model = script_file(kernel, code_turn("save('answer_table', {'a': 1})"), answer("First answer."),
                        answer("Second answer."))
    cells = [f'%load_ext harness_magic\n%config AgentMagics.model = "{model}"', "%%agent\nFirst question.",
             "%agent_vars", "%%agent\nSecond question."]
    texts = []
    for _ in range(2):
        for source in cells:
            cell = kernel.run(source)
            assert cell.ok, (source, cell.stderr, cell.errors)
        texts.append(kernel.value("_.text"))
    assert texts == ["Second answer.", "Second answer."]


def test_run_all_twice_on_the_quickstart_notebook(kernel: Kernel) -> None:
    notebook = json.loads((NOTEBOOKS / "quickstart.ipynb").read_text())
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    for run in range(2):
        for source in cells:
            cell = kernel.run(source)
            assert cell.ok, (run, source, cell.stderr, cell.errors)


def test_new_and_reset_rewind_a_scripted_model(kernel: Kernel) -> None:
    model = script_file(kernel, answer("Only turn."))
    assert kernel.run(f'%config AgentMagics.model = "{model}"').ok
    for flags in ("--reset", "--new", "--reset"):
        cell = kernel.run(f"%%agent {flags}\nAgain.")
        assert cell.ok and kernel.value("_.text") == "Only turn.", cell.outputs


def test_agent_delegates_to_a_subagent_with_no_set_up(kernel: Kernel) -> None:
    model = script_file(
        kernel,
        {"text": "", "tool_calls": [{"name": "subagent", "arguments": {
            "task": "Add up the numbers and save the total as total.", "input_handles": ["numbers"]}}]},
        code_turn("save('total', sum(numbers))"),
        answer("The total is 6."),
        answer("The subagent says the total is 6."),
    )
    assert kernel.run("numbers = [1, 2, 3]").ok
    cell = kernel.run(f"%%agent --reset -m {model} --in numbers\nDelegate the sum.")
    assert cell.ok, cell.outputs
    assert kernel.value("[_.status, _.text]") == ["completed", "The subagent says the total is 6."]
    session = "__import__('harness_magic.notebook.extension', fromlist=['x']).agent_session()"
    assert kernel.value(f"'total' in {session}.cache")
    results = kernel.value(f"[r.content for m in {session}.harness.messages for r in m.tool_results]")
    assert "does not exist" not in json.dumps(results)
    assert kernel.run("%config AgentMagics.subagents = False").ok  # the trait exists and takes a bool
