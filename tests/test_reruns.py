"""Spec (issue 32, point 2): running a cell again replaces what the cell did before.

Through :class:`AgentSession` with run keys (what the notebook passes: a cell's id), using the
offline scripted model (deterministic) or litellm over HTTP against the scripted server (the model is
sent exactly the request it got the first time); then in a real kernel, where the cell id travels in
the execute_request's metadata as JupyterLab sends it.
"""

from __future__ import annotations

import json
import queue
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from harness_magic.core.control.reruns import RUN_KEY_MAX_CHARS
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.transcript.log import read_log, reconstruct_transcript

_counter = iter(range(10_000))


def code(source: str, text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "python_interpreter", "arguments": {"code": source}}]}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def answer(text: str) -> dict[str, Any]:
    return {"text": text}


def scripted(tmp_path: Path, *turns: dict[str, Any], **settings: Any) -> AgentSession:
    """A session over a scripted model file (turns consumed in order across runs)."""
    path = tmp_path / f"script_{next(_counter)}.json"
    path.write_text(json.dumps({"turns": list(turns)}))
    settings.setdefault("sandbox", "inprocess")
    return AgentSession(AgentConfig(model=f"scripted/{path}", run_dir=str(tmp_path / "runs"),
                                    workspace_memory=None, audit_log=None, **settings))


def handles(session: AgentSession) -> list[tuple[Any, ...]]:
    return [(e.name, e.type, e.shape, e.turn, e.tool) for e in session.cache.entries()]


# -- the latest cell run again ------------------------------------------------------------------


def test_running_the_latest_cell_again_rewinds_the_conversation_and_gives_its_handles_the_same_names(tmp_path):
    s = scripted(tmp_path, code("save('qoq_growth', {'west': 0.17})"), answer("West grew fastest."))
    first = s.ask("Which region grew fastest?", run_key="cell-a")
    again = s.ask("Which region grew fastest?", run_key="cell-a")
    assert again.status == first.status == "completed"
    assert s.cache.names() == ["qoq_growth"] and again.handles == ("qoq_growth",), "not qoq_growth_2"
    assert s.harness.messages == list(first.messages), "the conversation reads as after the first run only"
    assert (again.text, again.usage) == (first.text, first.usage), "same answer and token use"
    rewind = s.timeline.last_rewind
    assert rewind.replaced == first.run_id and rewind.later == () and rewind.retired == ("qoq_growth",)
    assert [r.run_id for r in s.timeline.runs] == [again.run_id]


def test_the_notice_says_how_much_of_the_conversation_the_rerun_continues_from(tmp_path):
    s = scripted(tmp_path, answer("First."), answer("Second."))
    s.ask("One?", run_key="c1")
    second = s.ask("Two?", run_key="c2")
    notices = []
    s.subscribe(lambda e: notices.append(e.text) if e.kind == "notice" else None)
    s.ask("Two?", run_key="c2")
    assert notices[0] == (f"Re-run: this cell's previous run ({second.run_id}) is out of the conversation, which "
                          "continues from the 2 messages before it. The old run stays in its log, marked superseded.")


def test_a_run_without_a_key_or_with_another_key_appends(tmp_path):
    s = scripted(tmp_path, answer("One."), answer("Two."), answer("Three."))
    s.ask("Same words.")
    s.ask("Same words.")
    assert len(s.harness.messages) == 4, "no key: nothing is replaced"
    s.ask("Same words.", run_key="cell-b")
    assert len(s.harness.messages) == 6 and s.timeline.last_rewind is None


def test_editing_the_prompt_and_running_the_same_cell_replaces_its_run(tmp_path):
    s = scripted(tmp_path, answer("Draft answer."))
    s.ask("Draft question?", run_key="cell-a")
    edited = s.ask("The question, edited?", run_key="cell-a")
    assert [m.text for m in s.harness.messages] == ["The question, edited?", "Draft answer."]
    assert edited.text == "Draft answer.", "the script is back where the cell's first run found it"


# -- an earlier cell run again --------------------------------------------------------------------


def test_rerunning_an_earlier_cell_takes_back_the_runs_after_it_and_says_what_was_superseded(tmp_path):
    s = scripted(tmp_path, code("save('summary', [1, 2])"), answer("Summary saved."),
                 code("save('chart_data', summary + [3])"), answer("Chart data saved."))
    first = s.ask("Summarise.", run_key="c1")
    second = s.ask("Chart it.", run_key="c2")
    notices = []
    s.subscribe(lambda e: notices.append(e.text) if e.kind == "notice" else None)
    again = s.ask("Summarise.", run_key="c1")
    rewind = s.timeline.last_rewind
    assert rewind.superseded == (first.run_id, second.run_id)
    assert sorted(rewind.retired) == ["chart_data", "summary"]
    assert s.cache.names() == ["summary"], "the later run's handles went with it"
    assert s.harness.messages == list(first.messages), "every tool use still has its result"
    text = next(t for t in notices if t.startswith("Re-run"))
    assert first.run_id in text and second.run_id in text and "1 run after it" in text
    assert "which now starts again with this run" in text and "Run the later cells again" in text
    assert "Handles retired, so this run's get the same names: summary, chart_data." in text
    assert again.handles == ("summary",)
    again2 = s.ask("Chart it.", run_key="c2")
    assert s.timeline.last_rewind is None, "c2's run was already taken back: it simply runs"
    assert s.harness.messages == list(second.messages) and again2.handles == ("chart_data",)


def test_run_all_twice_leaves_the_conversation_handles_answers_and_token_use_of_run_all_once(tmp_path):
    turns = [call("plan", action="add", titles=["sum", "share"]), code("save('total', 6)"),
             call("remember", kind="assumption", text="Revenue is net of refunds."), answer("Total 6."),
             code("save('total', total * 2)"), answer("Doubled: 12 (as total_2).")]
    s = scripted(tmp_path, *turns)
    cells = [("c1", "Sum it.", False), ("c2", "Double it.", False), ("c3", "Anything else?", True)]

    def run_all() -> tuple[Any, ...]:
        s.rewind_offline_models()  # what the notebook's first cell does: %config AgentMagics.model = ...
        results = []
        for key, prompt, new in cells:
            if new:
                s.new_conversation()
            results.append(s.ask(prompt, run_key=key))
        return ([(r.status, r.text, r.handles, r.usage) for r in results], handles(s), s.harness.messages,
                [(e.kind, e.text) for e in s.memory.entries], s.planner.to_dict())

    once = run_all()
    twice = run_all()
    assert twice == once
    assert [h[0] for h in once[1]] == ["total", "total_2", "total_3"], "--new started the script over in c3"
    assert len(s.runs) == 6 and len(s.timeline.runs) == 3


def test_a_rerun_withdraws_the_memory_its_runs_recorded_but_keeps_the_users_own(tmp_path):
    s = scripted(tmp_path, call("remember", kind="goal", text="Find the fastest region."), answer("Noted."),
                 call("remember", kind="assumption", text="Quarters are calendar quarters."), answer("Assumed."))
    s.ask("Goal?", run_key="c1")
    s.memory.add("domain", "sales", "user")
    s.ask("Assumption?", run_key="c2")
    s.ask("Goal?", run_key="c1")
    assert [(e.kind, e.text) for e in s.memory.entries] == [("domain", "sales"), ("goal", "Find the fastest region.")]
    assert s.timeline.last_rewind.withdrawn == 2


def test_handles_replaced_since_the_run_are_not_retired(tmp_path):
    s = scripted(tmp_path, code("save('x', 1)"), answer("Saved x."))
    s.ask("Save.", run_key="c1")
    s.cache.retire("x")
    s.cache.put("x", "the user's own x")  # e.g. %agent_push x after the run
    again = s.ask("Save.", run_key="c1")
    assert s.timeline.last_rewind.retired == ()
    assert s.cache.get("x") == "the user's own x" and again.handles == ("x_2",), "never a silent overwrite"


def test_a_verification_rule_set_again_by_a_rerun_configuration_cell_checks_once(tmp_path):
    s = scripted(tmp_path, code("import pandas as pd\nsave('growth', pd.DataFrame({'region': ['west']}))"),
                 answer("Saved."))
    for _cell_run in range(2):
        s.verifier.require_columns(["region", "growth"], handles="growth*")
    s.ask("Grow?", run_key="c1")
    result = s.harness.messages[2].tool_results[0].content
    assert result.count("require_columns(region, growth)") == 1, result
    assert [o.rule for o in s.verifier.history] == ["require_columns(region, growth)"]


# -- --continue ---------------------------------------------------------------------------------


def test_replace_false_appends_as_before_and_new_handles_get_suffixes(tmp_path):
    s = scripted(tmp_path, code("save('qoq_growth', 1)"), answer("First."), code("save('qoq_growth', 2)"),
                 answer("Second."))
    first = s.ask("Grow?", run_key="cell-a")
    s.ask("Grow?", run_key="cell-a")
    s.rewind_offline_models()
    first = s.ask("Grow?", run_key="cell-a")
    assert s.timeline.last_rewind is not None
    second = s.ask("Grow?", run_key="cell-a", replace=False)
    assert second.handles == ("qoq_growth_2",) and s.cache.names() == ["qoq_growth", "qoq_growth_2"]
    assert len(s.harness.messages) == 2 * len(first.messages) and s.timeline.last_rewind is None
    s.rewind_offline_models()
    third = s.ask("Grow?", run_key="cell-a")
    assert s.timeline.last_rewind.superseded == (first.run_id, second.run_id), "both runs of the cell go"
    assert s.cache.names() == ["qoq_growth"] and third.handles == ("qoq_growth",)


def test_a_retry_cell_run_again_replaces_its_retry_and_retries_the_same_run(tmp_path):
    s = scripted(tmp_path, code("save('g', 1)"), answer("One."), code("save('g', 2)"), answer("Two."))
    first = s.ask("Grow?", run_key="c1")
    retried = s.retry(1, run_key="retry-cell")
    again = s.retry(1, run_key="retry-cell")
    assert retried.handles == again.handles == ("g_2",) and s.cache.names() == ["g", "g_2"]
    assert s.timeline.last_rewind.superseded == (retried.run_id,)
    assert read_log(again.run_file)[0]["retry"]["of_run"] == first.run_id, "not a retry of the retry"
    assert s.harness.messages == list(retried.messages)


# -- the record keeps every run ------------------------------------------------------------------


def test_a_superseded_run_stays_in_its_log_marked_and_still_replays(tmp_path):
    from harness_magic.core.control.replay import replay_run

    s = scripted(tmp_path, code("save('t', [1, 2, 3])"), answer("Saved."))
    old = s.ask("Save a list.", run_key="cell-a")
    new = s.ask("Save a list.", run_key="cell-a")
    records = read_log(old.run_file)
    assert records[-1]["type"] == "superseded" and records[-1]["by"] == new.run_id
    assert records[-1]["run_key"] == "cell-a" and records[-2]["type"] == "run_end"
    start = read_log(new.run_file)[0]
    assert start["run_key"] == "cell-a" and start["supersedes"] == [old.run_id]
    rerun = next(r for r in read_log(new.run_file) if r.get("name") == "rerun")
    assert rerun["supersedes"] == [old.run_id] and rerun["retired"] == ["t"]
    assert reconstruct_transcript(old.run_file) == list(old.messages)
    replayed = replay_run(old.run_file, run_dir=str(tmp_path / "replays"))
    assert replayed.identical and replayed.result.text == old.text
    assert len(s.runs) == 2, "the session keeps both results"


def test_a_deleted_log_of_the_old_run_does_not_stop_the_rerun(tmp_path):
    s = scripted(tmp_path, answer("Hello."))
    old = s.ask("Hi.", run_key="cell-a")
    Path(old.run_file).unlink()
    assert s.ask("Hi.", run_key="cell-a").status == "completed"


@pytest.mark.parametrize("key", ["", 7, ["cell-a"], "k" * (RUN_KEY_MAX_CHARS + 1)])
def test_a_bad_run_key_is_refused_before_anything_changes(tmp_path, key):
    s = scripted(tmp_path, answer("Hello."))
    s.ask("Hi.", run_key="cell-a")
    with pytest.raises(ValueError, match="run_key must be a non-empty string"):
        s.ask("Hi.", run_key=key)
    assert len(s.harness.messages) == 2 and len(s.runs) == 1


# -- which cell a run comes from (the notebook's run key) -------------------------------------------


def test_the_cell_tracker_keys_a_run_by_cell_id_else_by_text():
    from types import SimpleNamespace

    from harness_magic.notebook.cells import CellTracker

    cells = CellTracker()
    cells.started(SimpleNamespace(cell_id="4e1f-cell", raw_cell="%%agent --in sales\nWhich region?"))
    assert cells.run_key("%%agent --in sales\nWhich region?", "Which region?") == "cell:4e1f-cell"
    cells.started(SimpleNamespace(cell_id="4e1f-cell", raw_cell="%%agent\nEdited question?"))
    assert cells.run_key("%%agent \nEdited question?", "Edited question?") == "cell:4e1f-cell", "same cell, edited"
    cells.started(SimpleNamespace(cell_id=None, raw_cell="%%agent\nHi"))
    by_text = cells.run_key("%%agent \nHi", "Hi")
    cells.started(SimpleNamespace(cell_id=None, raw_cell="%%agent\nHi"))
    assert by_text.startswith("source:") and cells.run_key("%%agent \nHi", "Hi") == by_text


def test_hostile_or_odd_cell_ids_and_calls_outside_a_cell_still_give_bounded_distinct_keys():
    from types import SimpleNamespace

    from harness_magic.core.control.reruns import check_run_key
    from harness_magic.notebook.cells import CellTracker

    cells = CellTracker()
    source = "run_agent('a')\nrun_agent('b')"
    cells.started(SimpleNamespace(cell_id="x" * 100_000 + "\n\x1b[2J", raw_cell=source))
    first, second = cells.run_key("%%agent \na", "a"), cells.run_key("%%agent \nb", "b")
    assert check_run_key(first) and check_run_key(second) and len(first) < 100
    assert second == first + "#2", "two runs from one execution do not replace each other"
    outside = cells.run_key("%%agent \nnot in this cell", "not in this cell")
    assert outside.startswith("source:") and outside != first


# -- what the model is sent (litellm over HTTP) -----------------------------------------------------


def test_the_rerun_sends_the_model_exactly_the_requests_of_the_first_run(tmp_path, server):
    from harness_magic.core.execution.connectors import Connector, ConnectorRegistry
    from harness_magic import ProviderAdapter

    crm = Connector("crm", "Customer records.")

    @crm.tool()
    def count_customers() -> int:
        """How many customers there are."""
        return 42

    first_run = [{"tool_calls": [{"id": "t1", "name": "load_connectors", "arguments": {"connector_name": "crm"}}]},
                 {"tool_calls": [{"id": "t2", "name": "crm__count_customers", "arguments": {}}]},
                 {"text": "42 customers."}]
    server.replies = first_run + [{"text": "Later cell."}] + first_run
    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", stream=False,
                              sleep=lambda s: None)
    s = AgentSession(AgentConfig(sandbox="inprocess", run_dir=str(tmp_path / "runs"), workspace_memory=None,
                                 audit_log=None), adapter=adapter, connectors=ConnectorRegistry([crm]))
    s.ask("How many customers?", run_key="c1")
    s.ask("And later?", run_key="c2")
    s.ask("How many customers?", run_key="c1")
    sent = [(r["messages"], sorted(t["function"]["name"] for t in r.get("tools", []))) for r in server.requests]
    assert sent[4:] == sent[:3], "the re-run starts with crm hidden again and the conversation as before c1"
    assert "crm__count_customers" in sent[3][1], "the later cell had crm loaded"


# -- in a real kernel, keyed by the cell id JupyterLab sends ----------------------------------------

jupyter_client = pytest.importorskip("jupyter_client")
from kernel_helpers import Cell, Kernel, agent_kernel  # noqa: E402


def run_in_cell(kernel: Kernel, source: str, cell_id: str | None) -> Cell:
    """Execute ``source`` as JupyterLab does: the cell id in the execute_request's metadata."""
    kc = kernel.kc
    content = {"code": source, "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}
    message = kc.session.msg("execute_request", content, metadata={"cellId": cell_id} if cell_id else {})
    kc.shell_channel.send(message)
    return kernel.collect(Cell(message["header"]["msg_id"]))


SESSION = "__import__('harness_magic.notebook.extension', fromlist=['x']).agent_session()"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("reruns"), sandbox="inprocess") as k:
        yield k


def use_script(kernel: Kernel, *turns: dict[str, Any]) -> None:
    """A fresh conversation and cache, and a scripted model set as AgentMagics.model (no -m in the cells)."""
    name = f"rerun_{next(_counter)}.json"
    (kernel.cwd / name).write_text(json.dumps({"turns": list(turns)}))
    cell = kernel.run(f'%config AgentMagics.model = "scripted/{name}"\n{SESSION}.reset()')
    assert cell.ok, cell.stderr


def test_a_cell_run_twice_in_a_kernel_replaces_its_run_and_out_binds_its_own_handle(kernel: Kernel):
    use_script(kernel, code("save('qoq_growth', {'west': 17.4})"), answer("West."))
    source = "%%agent --out qoq_growth=growth\nWhich region grew fastest?"
    first = run_in_cell(kernel, source, "9f1c-cell")
    assert first.ok, (first.stderr, first.errors)
    length = kernel.value(f"len({SESSION}.harness.messages)")
    assert kernel.run("%agent_pull qoq_growth mine").ok
    again = run_in_cell(kernel, source, "9f1c-cell")
    assert again.ok, (again.stderr, again.errors)
    assert "--out: qoq_growth → growth" in again.stdout
    assert kernel.value(f"len({SESSION}.harness.messages)") == length
    assert kernel.value(f"{SESSION}.cache.names()") == ["qoq_growth"]
    assert kernel.value("growth") == {"west": 17.4}
    assert kernel.value("mine") == {"west": 17.4}, "a pull is a copy: the retired handle's value stays the user's"
    key = kernel.value(f"{SESSION}.timeline.last_rewind.run_key")
    assert key == "cell:9f1c-cell"
    html = "".join(str(d) for d in again.data("text/html"))
    assert "Re-run" in html or "Re-run" in again.stdout, "the cell says what it replaced"


def test_the_same_text_in_another_cell_is_another_run_and_continue_appends(kernel: Kernel):
    use_script(kernel, code("save('share', 1)"), answer("One."), code("save('share', 2)"),
               answer("Two."), code("save('share', 3)"), answer("Three."))
    source = "%%agent --out share\nShare?"
    assert run_in_cell(kernel, source, "cell-one").ok
    other = run_in_cell(kernel, source, "cell-two")
    assert other.ok and kernel.value(f"{SESSION}.timeline.last_rewind") is None
    assert kernel.value(f"{SESSION}.cache.names()") == ["share", "share_2"]
    assert kernel.value("share") == 2, "--out binds this run's share_2, not the older share"
    appended = run_in_cell(kernel, "%%agent --continue --out share\nShare?", "cell-two")
    assert appended.ok, appended.stderr
    assert "--out: share_3 → share" in appended.stdout and kernel.value("share") == 3
    assert kernel.value(f"len({SESSION}.harness.messages)") == 3 * 4


def test_without_a_cell_id_the_cell_is_known_by_its_text(kernel: Kernel):
    use_script(kernel, answer("Hello once."))
    source = "%%agent\nSay hello."
    assert run_in_cell(kernel, source, None).ok
    assert run_in_cell(kernel, source, None).ok, "the script is back where the first run found it"
    assert kernel.value(f"{SESSION}.timeline.last_rewind.run_key").startswith("source:")
    assert kernel.value(f"len({SESSION}.harness.messages)") == 2


def test_a_retry_cell_run_twice_in_a_kernel_gives_the_same_names(kernel: Kernel):
    use_script(kernel, code("save('g', 1)"), answer("One."), code("save('g', 2)"), answer("Two."))
    assert run_in_cell(kernel, "%%agent\nGrow?", "agent-cell").ok
    for _run in range(2):
        cell = run_in_cell(kernel, "%agent_retry --from-turn 1", "retry-cell")
        assert cell.ok, (cell.stderr, cell.errors)
    assert kernel.value(f"{SESSION}.cache.names()") == ["g", "g_2"]
    assert kernel.value(f"{SESSION}.timeline.last_rewind.run_key") == "cell:retry-cell"
