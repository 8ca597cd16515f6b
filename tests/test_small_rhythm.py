"""The small ones of issue 32 point 8, each through the path a user takes: the plan's last step closes when the
run completes, an answer to the same question replaces the earlier one in memory, ``%agent_memory`` renders
Markdown safely, evaluating an input handle gives its snapshot, and ``make lab`` as root.

Scripted models through a real ``AgentSession`` (in-process sandbox); no network.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness_magic.core.control.planner import Planner
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.run_state import state_from_log


def scripted(tmp_path: Path, name: str, turns: list[dict], **config) -> AgentSession:
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps({"turns": turns}))
    return AgentSession(AgentConfig(model=f"scripted/{script}", sandbox="inprocess",
                                    run_dir=str(tmp_path / "runs"), **config))


def plan_call(**arguments) -> dict:
    return {"text": "", "tool_calls": [{"name": "plan", "arguments": arguments}]}


# -- the plan's last step closes when the run completes ------------------------------------------------


PLANNED = [plan_call(action="add", titles=["Load", "Compare", "Report"]),
           plan_call(action="update", item_id=1, status="done"),
           plan_call(action="update", item_id=2, status="in_progress")]


def run_state_after(session: AgentSession):
    from harness_magic.core.export import RunRecorder

    recorder = RunRecorder()
    session.subscribe(recorder)
    result = session.ask("Compare the regions.")
    return result, recorder.records[-1].state


def test_a_completed_run_closes_the_step_it_left_in_progress(tmp_path: Path) -> None:
    session = scripted(tmp_path, "done", [*PLANNED, {"text": "North grew most."}])
    result, state = run_state_after(session)
    assert result.status == "completed"
    assert [(p.title, p.status) for p in state.plan] == [("Load", "done"), ("Compare", "done"),
                                                         ("Report", "pending")], "pending steps stay pending"
    assert [i.status for i in session.planner.items] == ["done", "done", "pending"], "the next run sees it too"
    assert "in progress" not in state.plan_summary()


def test_a_run_that_stops_at_its_turn_limit_leaves_the_step_in_progress(tmp_path: Path) -> None:
    session = scripted(tmp_path, "cut", [*PLANNED, plan_call(action="list"), {"text": "never reached"}],
                       max_turns=3)
    result, state = run_state_after(session)
    assert result.status == "max_turns_exceeded"
    assert [p.status for p in state.plan] == ["done", "in_progress", "pending"]
    assert [i.status for i in session.planner.items] == ["done", "in_progress", "pending"]


def test_a_state_rebuilt_from_the_log_closes_it_the_same_way() -> None:
    planner = Planner()
    planner.add("Load", "done")
    planner.add("Compare", "in_progress")

    class Call:
        name, input, result, is_error, id = "plan", {"action": "list"}, planner.render(), False, "t1"

    assert [p.status for p in state_from_log([], [Call()], "q", "a", "completed").plan] == ["done", "done"]
    assert [p.status for p in state_from_log([], [Call()], "q", "", "error").plan] == ["done", "in_progress"]


def test_a_subagents_completion_does_not_close_the_parents_plan() -> None:
    from harness_magic.core.transcript.events import RunFinished

    planner = Planner()
    planner.add("Compare", "in_progress")

    class Wrapped:
        kind = "subagent_event"
        event = RunFinished(result=type("R", (), {"status": "completed"})())

    planner.finish_run(Wrapped())
    assert planner.items[0].status == "in_progress"
    planner.finish_run(RunFinished(result=type("R", (), {"status": "completed"})()))
    assert planner.items[0].status == "done"


# -- an answer to the same question replaces the earlier one in memory ----------------------------------


def ask_turn(call_id: str, question: str) -> dict:
    return {"text": "", "tool_calls": [{"id": call_id, "name": "ask_user", "arguments": {"question": question}}]}


def test_a_second_answer_to_the_same_question_replaces_the_first(tmp_path: Path) -> None:
    session = scripted(tmp_path, "answers", [ask_turn("q1", "Which week?"), {"text": "Week 10."},
                                             ask_turn("q2", "Which week?"), {"text": "Week 11."},
                                             ask_turn("q3", "Which region?"), {"text": "North."},
                                             {"text": "Unrelated."}])
    answers = iter(["the week of 3 March", "the week of 10 March", "north"])
    session.answerer = lambda request: next(answers)
    session.ask("Why did WAU drop last week?")
    session.ask("Actually, use the other week.")
    session.ask("And by region?")
    assert [(e.text, e.source) for e in session.memory.entries] == [
        ("Which week? → the week of 10 March", "question"), ("Which region? → north", "question")]
    session.ask("Something unrelated.")
    suffix = session.harness.messages[-2].content[-1].text
    assert "the week of 10 March" in suffix and "3 March" not in suffix, "only the latest answer rides along"


def test_the_same_answer_again_changes_nothing_and_other_entries_stay() -> None:
    from harness_magic.core.control.memory import SessionMemory

    memory = SessionMemory()
    memory.add("assumption", "weeks start on Monday", "model")
    assert memory.answered("Which week?", "the week of 3 March") == (2, True)
    assert memory.answered("Which  week?\u200b", "the week of 3 March") == (2, False), "the same question, cleaned"
    assert memory.answered("Which week?", "the week of 10 March") == (2, True)
    assert [(e.text, e.source) for e in memory.entries] == [
        ("weeks start on Monday", "model"), ("Which week? → the week of 10 March", "question")]
    assert memory.answered("Which week? → x", "y")[1] and len(memory.entries) == 3, "another question"


# -- evaluating an input handle returns its snapshot ------------------------------------------------------


def code_call(code: str) -> dict:
    return {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}


def test_evaluating_an_input_handle_returns_its_snapshot_and_no_new_handle(tmp_path: Path) -> None:
    import pandas as pd

    from harness_magic.core.export import RunRecorder

    session = scripted(tmp_path, "look", [code_call("big"), code_call("x = 1\nbig"), {"text": "seen"}])
    big = pd.DataFrame({"region": ["eu", "us"] * 50_000, "units": range(100_000)})
    session.cache.put("big", big)
    recorder = RunRecorder()
    session.subscribe(recorder)
    assert session.ask("Look at big.").status == "completed"
    for tool in recorder.records[-1].tools:
        assert tool.result.startswith("Value: `big` (the handle, unchanged; no new handle)\nSnapshot: {")
        snapshot = json.loads(tool.result.split("Snapshot: ", 1)[1])
        assert snapshot["shape"] == [100_000, 2] and [c["name"] if isinstance(c, dict) else c
                                                       for c in snapshot["columns"]] == ["region", "units"]
        assert len(tool.result) < 4_000, "a snapshot, not the data"
    assert session.cache.names() == ["big"], "no new handle"
    session.close()


# -- make lab as root ----------------------------------------------------------------------------------------


ROOT = Path(__file__).resolve().parent.parent


def make_lab_command(env_path: str | None = None, lab_args: str = "") -> str:
    import os
    import subprocess

    env = dict(os.environ, **({"PATH": env_path} if env_path else {}))
    done = subprocess.run(["make", "-n", "-s", "lab", f"LAB_ARGS={lab_args}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    return next(line for line in done.stdout.splitlines() if "jupyter lab" in line)


def test_make_lab_passes_allow_root_only_as_root_and_takes_lab_args(tmp_path: Path) -> None:
    import os
    import shutil

    if shutil.which("make") is None:
        import pytest

        pytest.skip("make is not installed")
    fake = tmp_path / "bin"
    fake.mkdir()
    for uid in ("0", "1000"):
        (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
        (fake / "id").chmod(0o755)
        line = make_lab_command(f"{fake}:{os.environ['PATH']}", "--no-browser --port 8899")
        assert line.split()[-2:] == ["--port", "8899"] and "--no-browser" in line
        assert ("--allow-root" in line) == (uid == "0"), line


def test_make_lab_starts_jupyterlab_as_the_user_running_it(tmp_path: Path) -> None:
    """The real thing: ``make lab`` serves (as root here, when the tests run as root)."""
    import os
    import signal
    import subprocess
    import time

    import pytest

    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("no .venv/bin/jupyter")
    args = (f"--no-browser --ServerApp.port=0 --ServerApp.token=test --ServerApp.root_dir={ROOT / 'notebooks'} "
            f"--ServerApp.runtime_dir={tmp_path} --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "http://" in line:  # the line after "Jupyter Server ... is running at:"
                break
        assert any("http://" in s for s in seen), "".join(seen)
        assert not any("Running as root is not recommended. Use --allow-root" in s for s in seen)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# -- %agent_memory renders Markdown safely ---------------------------------------------------------------------


def test_agent_memory_renders_markdown_safely_in_a_kernel_and_plain_text_in_the_terminal(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("jupyter_client")
    from kernel_helpers import Kernel

    hostile = "**revenue** is net of [refunds](https://example.com/r) <img src=x onerror=alert(1)> ![t](http://evil/?d=1)"
    k = Kernel(tmp_path)
    try:
        assert k.run(f"%load_ext harness_magic\n%agent_memory add assumption {hostile}").ok
        cell = k.run("%agent_memory")
        assert cell.ok, cell.outputs
        page, = cell.data("text/html")
        assert "<strong>revenue</strong>" in page and "**revenue**" not in page
        assert '<a href="https://example.com/r" rel="noopener noreferrer">refunds</a>' in page
        assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page, "raw HTML stays text"
        assert "http://evil/?d=1" in page and 'src="http://evil' not in page, "no remote image loads"
        plain, = cell.data("text/plain")
        assert "**revenue** is net of [refunds](https://example.com/r)" in plain
    finally:
        k.close()
    from IPython.testing.globalipapp import get_ipython  # the terminal: the text as written

    shell = get_ipython()
    import contextlib
    import io

    shell.run_line_magic("load_ext", "harness_magic")
    try:
        shell.run_line_magic("agent_memory", "clear")
        shell.run_line_magic("agent_memory", "add goal **revenue** by region")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            shell.run_line_magic("agent_memory", "")
        assert "1. goal       **revenue** by region  (you)" in out.getvalue()
    finally:
        shell.run_line_magic("unload_ext", "harness_magic")


# -- %load_ext harness_magic is quiet where the harness kernel loaded it ----------------------------------------


def test_load_ext_again_is_quiet_and_unloading_gives_ipython_its_own_load_ext_back() -> None:
    import contextlib
    import io

    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()

    def run(line: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            shell.run_line_magic(*line.split(" ", 1))
        return out.getvalue()

    try:
        assert run("load_ext harness_magic") == ""
        assert run("load_ext harness_magic") == "", "no 'already loaded' (the harness kernel loaded it at start)"
        assert run("load_ext  harness_magic ") == ""
        assert "%reload_ext" in run("load_ext IPython.extensions.autoreload") + run(
            "load_ext IPython.extensions.autoreload"), "other extensions: IPython's own message"
    finally:
        run("unload_ext harness_magic")
        shell.run_line_magic("unload_ext", "IPython.extensions.autoreload")
    restored = shell.magics_manager.magics["line"]["load_ext"]
    assert type(restored.__self__).__name__ == "ExtensionMagics", restored


def test_every_shipped_notebook_uses_the_harness_kernel_which_is_installed() -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    spec = json.loads((ROOT / "jupyter-config" / "kernels" / "harness-agent" / "kernel.json").read_text())
    installed = KernelSpecManager().get_kernel_spec("harness-agent")
    assert installed.argv == spec["argv"] and "--ext" in installed.argv, "the venv's kernelspec is the shipped one"
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        kernelspec = json.loads(path.read_text())["metadata"]["kernelspec"]
        assert kernelspec["name"] == "harness-agent", path.name
        assert kernelspec["display_name"] == spec["display_name"], path.name


# -- the fingerprint behind "a pull protects edits" -------------------------------------------------------------


def test_the_fingerprint_reads_every_value_kind_and_never_raises() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from value_matrix import CASES, build

    from harness_magic.core.cache.fingerprint import fingerprint

    for case in sorted(CASES):
        value = build(case)
        assert fingerprint(value) == fingerprint(build(case)), f"{case}: the same value, the same fingerprint"

    class Hostile(list):
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert fingerprint(Hostile([1])) is None and fingerprint(object()) is None


def test_the_fingerprint_sees_edits_a_version_counter_would_miss() -> None:
    import numpy as np
    import pandas as pd

    from harness_magic.core.cache.fingerprint import fingerprint

    frame = pd.DataFrame({"a": [1, 2, 3], "tags": [["x"], ["y"], ["z"]]}, index=pd.Index([1, "a", (2, 3)]))
    before = fingerprint(frame)
    frame.at[1, "tags"] = ["changed"]
    assert fingerprint(frame) != before, "an unhashable cell changed in place"
    big = pd.DataFrame({"v": np.arange(3_000_000, dtype="float64"), "w": 1.0, "x": 2.0, "y": 3.0})
    before = fingerprint(big)  # 12 M cells: over the full-hash limit, sampled
    big.iloc[0, 0] = -1.0
    assert fingerprint(big) != before, "the head is always in the sample"
    array = np.zeros((4, 4))
    before = fingerprint(array)
    array[3, 3] = 1
    assert fingerprint(array) != before and fingerprint(array.T) != fingerprint(array)
