"""A run ends with a status only for the failures a run can have; a bug in our code propagates with its traceback.

The failures a run can have: a provider that fails, a tool that fails (its
error result goes to the model), a budget or policy check that stops the run,
an interrupt. Anything else (a ValueError in a reminder hook, a ZeroDivisionError
in the result formatter, an OSError of a broken disk) is raised to the caller
unchanged, after the run log records it (``event`` ``run_failed`` with the
traceback, then ``run_end`` with status ``error``) and the conversation is left
valid, so the next run works.
"""

from __future__ import annotations

import asyncio
import traceback

import pytest

from harness_magic import Harness, ProviderAdapter, ScriptedModel, ToolSpec
from harness_magic.core.agent import run as run_module
from harness_magic.core.agent.loop import AsyncHarness
from harness_magic.core.agent.result import StopRun
from harness_magic.core.agent.run import RUN_ENDINGS
from harness_magic.core.config import AgentConfig
from harness_magic.core.providers.adapter import AsyncProviderAdapter
from harness_magic.core.providers.errors import ProviderError
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.log import read_log
from harness_magic.core.transcript.messages import unanswered_tool_uses

SYSTEM = "You test how runs end."
SECRET = "sk-proj-Zq8r5TtH3xq9VmN2pL7wK4cJ6bY1dF0a"


def echo_tool() -> ToolSpec:
    return ToolSpec(name="echo", description="Echo.", handler=lambda text="": f"echo: {text}",
                    parameters={"type": "object", "properties": {"text": {"type": "string"}}})


def tool_then_answer(answer: str = "done") -> list[dict]:
    return [{"tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}, {"text": answer}]


def make_harness(tmp_path, turns) -> Harness:
    adapter = ProviderAdapter("scripted", transport=ScriptedModel(turns))
    return Harness(adapter, SYSTEM, [echo_tool()], run_dir=str(tmp_path / "runs"))


def broken_formatter(*args, **kwargs):
    return 1 / 0  # the bug: a ZeroDivisionError deep in our own code


def test_run_endings_are_the_failures_a_run_can_have():
    assert set(RUN_ENDINGS) == {StopRun, ProviderError, KeyboardInterrupt}
    assert not any(issubclass(cls, (ValueError, OSError)) for cls in RUN_ENDINGS if cls is not ProviderError)


def test_a_bug_in_the_result_formatter_propagates_with_its_traceback_and_is_logged(tmp_path, monkeypatch):
    harness = make_harness(tmp_path, tool_then_answer("answered after the bug"))
    monkeypatch.setattr(run_module, "format_tool_output", broken_formatter)
    finished = []
    harness.subscribe(lambda event: finished.append(event.result) if event.kind == "run_finished" else None)
    with pytest.raises(ZeroDivisionError) as raised:
        harness.run_result("go")
    assert "broken_formatter" in [entry.name for entry in raised.traceback], "the traceback reaches the bug"
    records = read_log(harness.run_file)
    failed = [r for r in records if r["type"] == "event" and r.get("name") == "run_failed"]
    assert len(failed) == 1 and failed[0]["error"] == "ZeroDivisionError: division by zero"
    assert "broken_formatter" in failed[0]["traceback"] and "1 / 0" in failed[0]["traceback"]
    end = records[-1]
    assert end["type"] == "run_end" and end["status"] == "error" and "ZeroDivisionError" in end["error"]
    assert [r.status for r in finished] == ["error"], "the live view still sees the run end"
    # the harness is ready for the next run: nothing in progress, every tool use answered
    assert harness.current_run is None and unanswered_tool_uses(harness.messages) == []
    monkeypatch.undo()
    assert harness.ask_result("once more").text == "answered after the bug"  # the script's next turn


def test_the_async_loop_raises_a_bug_the_same_way(tmp_path, monkeypatch):
    adapter = AsyncProviderAdapter("scripted", transport=ScriptedModel(tool_then_answer()))
    harness = AsyncHarness(adapter, SYSTEM, [echo_tool()], run_dir=str(tmp_path / "runs"))
    monkeypatch.setattr(run_module, "format_tool_output", broken_formatter)
    with pytest.raises(ZeroDivisionError):
        asyncio.run(harness.run_result("go"))
    assert [r.get("name") for r in read_log(harness.run_file) if r["type"] == "event"] == ["run_failed"]
    assert harness.current_run is None and unanswered_tool_uses(harness.messages) == []


@pytest.mark.parametrize("error", [ValueError("a bad value in our own hook"), OSError(28, "No space left on device"),
                                   KeyError("column"), TypeError("NoneType is not iterable")])
def test_errors_that_used_to_be_a_run_status_now_propagate(tmp_path, error):
    harness = make_harness(tmp_path, [{"text": "unused"}])

    def hook(turn: int, max_turns: int) -> str | None:
        raise error

    harness.register_reminder(hook)
    with pytest.raises(type(error)) as raised:
        harness.run_result("go")
    assert raised.value is error
    end = read_log(harness.run_file)[-1]
    assert end["status"] == "error" and end["rolled_back"] is True  # nothing answered: the prompt is taken back
    assert harness.messages == []


@pytest.mark.parametrize(("raised", "status", "error"), [
    (StopRun("budget_tokens", "token budget exhausted"), "budget_tokens", "token budget exhausted"),
    (StopRun("policy_refused", "the policy refused the run"), "policy_refused", "the policy refused the run"),
    (ProviderError("the gateway is down", request_sent=False), "error", "provider error: the gateway is down"),
    (KeyboardInterrupt(), "interrupted", "interrupted by the user"),
])
def test_the_failures_a_run_can_have_still_end_it_with_their_status(tmp_path, raised, status, error):
    harness = make_harness(tmp_path, tool_then_answer())
    calls = []

    def check(run) -> None:
        calls.append(run.turn)
        if len(calls) == 2:  # after the tool call, before the answer
            raise raised

    harness.add_check(check)
    result = harness.run_result("go")
    assert result.status == status and result.error.startswith(error)
    assert not any(r.get("name") == "run_failed" for r in read_log(result.run_file))


def test_a_raising_tool_is_still_a_tool_failure_the_model_reads(tmp_path):
    def shaky(text: str = "") -> str:
        raise ValueError(f"cannot parse {text}")

    harness = Harness(ProviderAdapter("scripted", transport=ScriptedModel(
        [{"tool_calls": [{"name": "shaky", "arguments": {"text": "x"}}]}, {"text": "recovered"}])), SYSTEM,
        [ToolSpec(name="shaky", description="Fails.", handler=shaky,
                  parameters={"type": "object", "properties": {"text": {"type": "string"}}})],
        run_dir=str(tmp_path / "runs"))
    result = harness.run_result("go")
    assert result.status == "completed" and result.text == "recovered"
    (block,) = result.messages[2].tool_results
    assert block.is_error and block.content == "ValueError: cannot parse x"
    (failed,) = [r for r in read_log(result.run_file) if r.get("name") == "tool_failed"]
    assert failed["tool"] == "shaky" and failed["error"] == "ValueError: cannot parse x"
    assert "in shaky" in failed["traceback"], "the log keeps where the tool failed; the model reads one line"


def test_a_secret_in_the_bug_message_never_reaches_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    def leaky(*args, **kwargs):
        raise RuntimeError(f"request failed with key {SECRET}")

    harness = make_harness(tmp_path, tool_then_answer())
    monkeypatch.setattr(run_module, "format_tool_output", leaky)
    with pytest.raises(RuntimeError, match="request failed"):
        harness.run_result("go")
    text = open(harness.run_file, encoding="utf-8").read()
    assert SECRET not in text and "run_failed" in text


def test_a_tool_failure_quoting_a_secret_is_logged_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    def leaky_tool(text: str = "") -> str:
        raise PermissionError(f"denied for key {SECRET}")

    harness = Harness(ProviderAdapter("scripted", transport=ScriptedModel(
        [{"tool_calls": [{"name": "leaky", "arguments": {}}]}, {"text": "ok"}])), SYSTEM,
        [ToolSpec(name="leaky", description="Leaks.", handler=leaky_tool,
                  parameters={"type": "object", "properties": {"text": {"type": "string"}}})],
        run_dir=str(tmp_path / "runs"))
    result = harness.run_result("go")
    assert result.status == "completed"
    text = open(result.run_file, encoding="utf-8").read()
    assert SECRET not in text and "tool_failed" in text and "PermissionError" in text


def test_a_log_that_cannot_be_written_leaves_the_first_error_with_a_note(tmp_path, monkeypatch):
    harness = make_harness(tmp_path, tool_then_answer())
    monkeypatch.setattr(run_module, "format_tool_output", broken_formatter)
    real_write = run_module.RunLogger.write

    def full_disk(self, record_type, **fields):
        if fields.get("name") == "run_failed" or record_type == "run_end":
            raise OSError(28, "No space left on device")
        real_write(self, record_type, **fields)

    monkeypatch.setattr(run_module.RunLogger, "write", full_disk)
    with pytest.raises(ZeroDivisionError) as raised:
        harness.run_result("go")
    assert any("could not record this failure" in note and "No space left" in note
               for note in getattr(raised.value, "__notes__", []))
    assert harness.current_run is None and unanswered_tool_uses(harness.messages) == []


def test_a_bug_propagates_out_of_the_session_and_the_session_runs_again(tmp_path, monkeypatch):
    turns = [{"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "print(6 * 7)"}}]},
             {"text": "unreached"}, {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "x = 1"}}]},
             {"text": "fine now"}]
    model = ScriptedModel(turns)
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/test", transport=model))
    try:
        monkeypatch.setattr(run_module, "format_tool_output", broken_formatter)
        with pytest.raises(ZeroDivisionError) as raised:
            session.ask("compute")
        assert "broken_formatter" in "".join(traceback.format_exception(raised.value))
        failed = read_log(session.harness.run_file)
        assert [r["name"] for r in failed if r["type"] == "event" and r.get("name") == "run_failed"] == ["run_failed"]
        monkeypatch.undo()
        model.position = 2  # the script's turns for the next run
        result = session.ask("compute again")
        assert result.status == "completed" and result.text == "fine now"
    finally:
        session.close()


def test_in_a_notebook_a_bug_is_a_traceback_and_the_next_cell_runs(tmp_path):
    pytest.importorskip("jupyter_client")
    from kernel_helpers import agent_kernel, answer, code_turn, script

    with agent_kernel(tmp_path, run_dir="runs", sandbox="inprocess") as kernel:
        patched = kernel.run("import harness_magic.core.agent.run as _run\n_real = _run.format_tool_output\n"
                             "def _formatter_bug(*args, **kwargs):\n    return 1 / 0\n"
                             "_run.format_tool_output = _formatter_bug")
        assert patched.ok, patched.errors
        cell = kernel.run(f"%%agent {script(kernel, code_turn('print(6 * 7)'), answer('unreached'))}\nCompute.")
        assert [e["ename"] for e in cell.errors] == ["ZeroDivisionError"]
        assert any("_formatter_bug" in line for line in cell.errors[0]["traceback"]), "the cell shows the traceback"
        assert kernel.run("_run.format_tool_output = _real").ok
        again = kernel.run(f"%%agent {script(kernel, answer('fine again'))}\nAgain.")
        assert again.ok and kernel.value("_.status") == "completed" and kernel.value("_.text") == "fine again"
