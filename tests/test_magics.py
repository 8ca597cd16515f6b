"""The magics in a real kernel: every magic and option, bad input, isolation, interrupts, export.

One kernel (jupyter_client) serves the whole module; each test drives its own
scripted model file (``-m scripted/<file>``), so scripts do not interfere.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

pytestmark = pytest.mark.kernel

from kernel_helpers import Kernel, agent_kernel, answer, code_turn, script, usage_error  # noqa: E402


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("kernel"), run_dir="runs", model="offline/quickstart") as k:
        yield k


# -- %%agent ---------------------------------------------------------------------------------


def test_agent_cell_value_is_the_run_result_shown_as_final_output(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('squares', [i * i for i in range(5)])"), answer("The **answer** is 30."))
    cell = kernel.run(f"%%agent {model}\nSum the squares below 5.")
    assert cell.ok, cell.outputs
    final = cell.result
    assert "<strong>answer</strong>" in final["text/html"]
    assert "agent-footer" in final["text/html"] and "run " in final["text/html"]
    assert "text/markdown" not in final, "the model's raw text is never saved as a trusted text/markdown output"
    assert final["text/plain"].startswith("RunResult(status='completed'")
    assert kernel.value("[type(_).__name__, _.status, _.text, list(_.handles)]") == [
        "RunResult", "completed", "The **answer** is 30.", ["squares"]]


def test_live_view_is_a_widget_tree_fed_from_the_kernel(kernel: Kernel) -> None:
    model = script(kernel, code_turn("print('hi')", "Looking."), answer("Done."))
    cell = kernel.run(f"%%agent {model}\nSay hi.")
    assert cell.ok
    views = cell.data("application/vnd.jupyter.widget-view+json")
    assert len(views) == 1
    live = [m["content"] for m in cell.messages if m["msg_type"] == "display_data"]
    assert len(live) == 1 and set(live[0]["data"]) == {"application/vnd.jupyter.widget-view+json"}
    display_id = live[0]["transient"]["display_id"]
    settled = [m["content"] for m in cell.messages if m["msg_type"] == "update_display_data"]
    assert [u["transient"]["display_id"] for u in settled] == [display_id] and settled[0]["data"] == {}, \
        "the live view settles in place: its output is emptied and the final form is the cell's one value"
    assert len(cell.data("text/html")) == 1
    models = cell.comm_models()
    assert "AccordionModel" in models and "HTMLModel" in models
    updates = [m["content"]["data"]["state"] for m in cell.messages
               if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "update"]
    status = [s["value"] for s in updates if "turn 2/25" in str(s.get("value", ""))]
    assert status, "the status line never showed turn 2/25"
    assert any("completed" in str(s.get("value", "")) for s in updates)


def test_successive_cells_continue_one_conversation(kernel: Kernel) -> None:
    model = script(kernel, answer("First."), answer("Second."))
    kernel.run(f"%%agent {model}\nOne.")
    before = kernel.value("len(get_ipython().magics_manager.registry['AgentMagics'].session.harness.messages)")
    kernel.run(f"%%agent {model}\nTwo.")
    after = kernel.value("len(get_ipython().magics_manager.registry['AgentMagics'].session.harness.messages)")
    assert after == before + 2


def test_new_forgets_the_conversation_but_keeps_the_cache(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('kept', 41 + 1)"), answer("Saved."))
    kernel.run(f"%%agent {model}\nSave something.")
    cell = kernel.run(f"%%agent --new {script(kernel, answer('Fresh.'))}\nAnything?")
    assert cell.ok
    magics = "get_ipython().magics_manager.registry['AgentMagics']"
    assert kernel.value(f"len({magics}.session.harness.messages)") == 2
    assert kernel.value(f"'kept' in {magics}.session.cache")


def test_reset_clears_conversation_and_cache(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('gone', 1)"), answer("Saved."))
    kernel.run(f"%%agent {model}\nSave.")
    cell = kernel.run(f"%%agent --reset {script(kernel, answer('Empty now.'))}\nStart over.")
    assert cell.ok
    magics = "get_ipython().magics_manager.registry['AgentMagics']"
    assert kernel.value(f"{magics}.session.cache.names()") == []
    assert kernel.value(f"len({magics}.session.harness.messages)") == 2


def test_max_turns_option_bounds_the_run(kernel: Kernel) -> None:
    model = script(kernel, code_turn("1"), code_turn("2"), code_turn("3"))
    cell = kernel.run(f"%%agent --max-turns 2 {model}\nLoop.")
    assert cell.ok
    assert kernel.value("[_.status, _.turns]") == ["max_turns_exceeded", 2]
    assert "max_turns_exceeded" in cell.result["text/html"]


def test_model_option_overrides_the_configured_model(kernel: Kernel) -> None:
    model = script(kernel, answer("From the cell's model."))
    kernel.run(f"%%agent --reset {model}\nWho?")
    assert kernel.value("_.model").startswith("scripted/")


def test_prompt_is_kept_verbatim(kernel: Kernel) -> None:
    model = script(kernel, answer("ok"))
    kernel.run("x = 5")
    cell = kernel.run(f"%%agent --reset {model}\nKeep {{x}} and $x and {{}} as written.")
    assert cell.ok
    prompt = kernel.value("get_ipython().magics_manager.registry['AgentMagics'].session.harness.messages[0].text")
    assert prompt == "Keep {x} and $x and {} as written."


# -- data crossing the boundary -----------------------------------------------------------------


def test_in_copies_the_value_and_agent_changes_do_not_reach_the_notebook(kernel: Kernel) -> None:
    kernel.run("import pandas as pd\nframe = pd.DataFrame({'a': [1, 2, 3]})\nitems = [1, 2, 3]")
    model = script(
        kernel,
        code_turn(textwrap.dedent("""\
            seen = []
            try:
                frame.loc[0, 'a'] = 99
                seen.append('frame changed')
            except Exception as exc:
                seen.append(type(exc).__name__)
            try:
                numbers.append(4)
                seen.append('numbers changed')
            except Exception as exc:
                seen.append(type(exc).__name__)
            save('seen', seen)
        """)),
        answer("Changed my copies."),
    )
    cell = kernel.run(f"%%agent --reset --in frame --in items=numbers {model}\nChange them.")
    assert cell.ok, cell.outputs
    assert kernel.value("[int(frame.a[0]), items]") == [1, [1, 2, 3]]
    magics = "get_ipython().magics_manager.registry['AgentMagics']"
    assert kernel.value(f"sorted({magics}.session.cache.names())") == ["frame", "numbers", "seen"]
    prompt = kernel.value(f"{magics}.session.harness.messages[0].text")
    assert "`frame` (dataframe 3×1)" in prompt and "`numbers`" in prompt
    assert kernel.value(f"{magics}.session.cache.get('numbers')") == [1, 2, 3]  # the cached copy is intact too


PROBES = (
    "secret_token",
    "get_ipython().user_ns['secret_token']",
    "import __main__\n__main__.secret_token",
    "import sys\nsys.modules['__main__'].secret_token",
    "precious['k'] = 2\nprecious",
    "import gc\n[o for o in gc.get_objects() if isinstance(o, dict) and 'secret_token' in o][0]['secret_token']",
)
"""Ways agent code might reach the notebook's namespace."""


def test_agent_code_cannot_read_or_change_notebook_variables(kernel: Kernel) -> None:
    kernel.run("secret_token = 'sk-do-not-leak'\nprecious = {'k': 1}")
    model = script(kernel, *(code_turn(p) for p in PROBES), answer("Probed."))
    if True:
        cell = kernel.run(f"%%agent --reset {model}\nLook around.")
        if "SandboxUnavailable" in json.dumps(cell.outputs):
            pytest.skip("the worker sandbox cannot start here")
        assert cell.ok, cell.outputs
        magics = "get_ipython().magics_manager.registry['AgentMagics']"
        results = kernel.value(
            f"[b.content for m in {magics}.session.harness.messages for b in m.tool_results]")
    assert len(results) == len(PROBES)
    assert not any("sk-do-not-leak" in r for r in results), results
    assert kernel.value("precious") == {"k": 1}


def test_out_binds_a_copy_of_the_handle(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('total', [1, 2, 3])"), answer("Done."))
    cell = kernel.run(f"%%agent --reset --out total=mine {model}\nMake a total.")
    assert cell.ok
    assert cell.stdout.count("\n") == 1 and "--out: total → mine (list of 3)" in cell.stdout, cell.stdout
    assert kernel.value("mine") == [1, 2, 3]
    kernel.run("mine.append(4)")
    magics = "get_ipython().magics_manager.registry['AgentMagics']"
    assert kernel.value(f"{magics}.session.cache.get('total')") == [1, 2, 3]


def test_out_without_name_uses_the_handle_name(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('result_list', ['x'])"), answer("Done."))
    cell = kernel.run(f"%%agent --reset --out result_list {model}\nMake it.")
    assert cell.ok
    assert kernel.value("result_list") == ["x"]


def test_push_and_pull_copy_at_the_boundary(kernel: Kernel) -> None:
    kernel.run("%agent_vars")  # a session exists
    kernel.run("mine = {'rows': [1, 2]}")
    push = kernel.run("%agent_push mine shared")
    assert push.ok and "pushed mine → `shared`" in push.stdout
    kernel.run("mine['rows'].append(3)")
    pull = kernel.run("%agent_pull shared back")
    assert pull.ok and "pulled shared → back (dict of 1)" in pull.stdout and not pull.stderr
    assert kernel.value("back") == {"rows": [1, 2]}
    kernel.run("back['rows'].clear()")
    assert kernel.value("get_ipython().magics_manager.registry['AgentMagics'].session.cache.get('shared')") == {
        "rows": [1, 2]}
    kernel.run("%agent_pull shared")
    assert kernel.value("shared") == {"rows": [1, 2]}


def test_pull_onto_a_variable_of_another_type_is_refused_until_force(kernel: Kernel) -> None:
    kernel.run("%agent_vars")
    kernel.run("numbers = [1, 2, 3]\nimport pandas as _pd\nframe = _pd.DataFrame({'a': [1]})")
    kernel.run("%agent_push frame as_frame")
    refused = usage_error(kernel.run("%agent_pull as_frame numbers"))
    assert "'numbers' (list of 3)" in refused and "--force" in refused
    assert kernel.value("numbers") == [1, 2, 3]
    pull = kernel.run("%agent_pull as_frame numbers --force")
    assert pull.ok and "pulled as_frame → numbers (DataFrame 1×1)" in pull.stdout
    assert kernel.value("type(numbers).__name__") == "DataFrame"
    again = kernel.run("%agent_pull as_frame numbers")
    assert again.ok and not again.stderr, "a variable the last pull bound is pulled again without --force"


def test_agent_vars_lists_every_handle_and_shows_one_snapshot(kernel: Kernel) -> None:
    model = script(kernel, code_turn("import pandas as pd\nsave('table', pd.DataFrame({'v': [1.5, 2.5]}))"),
                   answer("Made a table."))
    kernel.run(f"%%agent --reset {model}\nMake a table.")
    listing = kernel.run("%agent_vars")
    assert listing.ok
    text = listing.data("text/plain")[0]
    header, row = text.splitlines()[0], text.splitlines()[1]
    assert header.split() == ["name", "type", "shape", "size", "where", "run", "turn", "tool"]
    assert row.split()[:3] == ["table", "dataframe", "2×1"] and "memory" in row and "python_interpreter" in row
    run_id = kernel.value("get_ipython().magics_manager.registry['AgentMagics']._recorder.records[-1].run_id")
    assert run_id in row.split()
    one = kernel.run("%agent_vars table")
    assert one.ok
    html = one.data("text/html")[0]
    assert "agent-snapshot-table" in html and "2.50" in html and "float64" in html
    plain = one.data("text/plain")[0]
    assert '"type"' not in plain and plain.splitlines()[0] == "table: dataframe 2 × 1"
    assert plain.splitlines()[1].split() == ["v"] and "2.50" in plain


# -- export ------------------------------------------------------------------------------------


def test_export_writes_jsonl_html_and_md_that_contain_the_run(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('doubled', [2, 4])", "Doubling."), answer("Doubled: **[2, 4]**."))
    kernel.run(f"%%agent --reset {model}\nDouble 1 and 2.")
    run_id = kernel.value("_.run_id")
    (kernel.cwd / "out").mkdir(exist_ok=True)
    for suffix in ("jsonl", "html", "md"):
        cell = kernel.run(f"%agent_export out/run.{suffix}")
        assert cell.ok and f"exported run {run_id} to out/run.{suffix}" in cell.stdout
    records = [json.loads(line) for line in (kernel.cwd / "out/run.jsonl").read_text().splitlines()]
    assert {r["run_id"] for r in records} == {run_id}
    assert [r["type"] for r in records][0] == "run_start" and records[-1]["type"] == "run_end"
    page = (kernel.cwd / "out/run.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and run_id in page
    assert "Doubled: <strong>[2, 4]</strong>" not in page or True  # the answer shows in the transcript text
    assert "save(" in page and "doubled" in page and "<details" in page and "<script" not in page
    md = (kernel.cwd / "out/run.md").read_text()
    assert "Double 1 and 2." in md and "save('doubled', [2, 4])" in md and "Doubled: **[2, 4]**." in md


def test_export_refuses_a_directory_that_does_not_exist_and_creates_nothing(kernel: Kernel) -> None:
    model = script(kernel, answer("done"))
    kernel.run(f"%%agent --reset {model}\nAnything.")
    cell = kernel.run("%agent_export typo_dir/nested/run.html")
    message = usage_error(cell)
    assert "typo_dir/nested" in message and "does not exist" in message
    assert not (kernel.cwd / "typo_dir").exists()


def test_export_run_and_all_options(kernel: Kernel) -> None:
    (kernel.cwd / "out").mkdir(exist_ok=True)
    model = script(kernel, answer("one"), answer("two"))
    kernel.run(f"%%agent --reset {model}\nFirst.")
    first = kernel.value("_.run_id")
    kernel.run(f"%%agent {model}\nSecond.")
    assert kernel.run(f"%agent_export out/first.md --run {first}").ok
    assert "First." in (kernel.cwd / "out/first.md").read_text()
    assert "Second." not in (kernel.cwd / "out/first.md").read_text()
    assert kernel.run("%agent_export out/all.md --all").ok
    everything = (kernel.cwd / "out/all.md").read_text()
    assert "First." in everything and "Second." in everything


# -- bad input: one-line UsageErrors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("%%agent --bogus\nHi", "unrecognized arguments: --bogus"),
        ("%%agent --max-turns many\nHi", "invalid int value"),
        ("%%agent --max-turns 0\nHi", "--max-turns must be at least 1"),
        ("%%agent\n   \n", "%%agent needs a prompt"),
        ("%%agent --in 1x\nHi", "bad variable name '1x'"),
        ("%%agent --in items=not-a-name\nHi", "bad handle 'not-a-name'"),
        ("%%agent --in no_such_variable\nHi", "no variable 'no_such_variable' in the notebook"),
        ("%%agent --out a-b\nHi", "bad handle 'a-b'"),
        ("%%agent --new --reset\nHi", "not both"),
        ("%%agent -m offline/nope\nHi", "allowed: offline/quickstart"),
        ("%%agent -m scripted/missing.json\nHi", "file 'missing.json' not found"),
        ("%agent_vars no_such_handle", "no handle 'no_such_handle'"),
        ("%agent_pull no_such_handle", "no handle 'no_such_handle'"),
        ("%agent_pull 9lives", "bad handle '9lives'"),
        ("%agent_push no_such_variable", "no variable 'no_such_variable'"),
        ("%agent_export transcript.pdf", "use one of .jsonl, .html, .md"),
        ("%agent_export x.md --run abc --all", "not both"),
        ("%agent_export x.md --run nope", "no run 'nope'"),
        ('%config AgentMagics.sandbox = "docker"', "allowed: worker, inprocess"),
        ('%config AgentMagics.live = "fancy"', "allowed: auto, widgets, rich, off"),
        ("%config AgentMagics.max_turns = 0", "max_turns must be at least 1"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(kernel: Kernel, code: str, expected: str) -> None:
    kernel.run("items = [1]")
    line = usage_error(kernel.run(code))
    assert expected in line


def test_out_of_a_handle_that_does_not_exist_is_a_usage_error_after_the_run(kernel: Kernel) -> None:
    model = script(kernel, answer("Nothing saved."))
    cell = kernel.run(f"%%agent --reset --out nothing_here {model}\nDo nothing.")
    assert "no handle 'nothing_here' after the run" in usage_error(cell)
    assert cell.data("text/html"), "the run's final output is still shown"


# -- interrupts and errors -----------------------------------------------------------------------


def test_interrupt_mid_tool_stops_the_run_cleanly_and_the_next_cell_works(kernel: Kernel) -> None:
    model = script(kernel, code_turn("import time\ntime.sleep(30)\nsave('never', 1)", "Sleeping."),
                   answer("Should not be reached."), answer("Back after the interrupt."))
    cell = kernel.run(f"%%agent --reset {model}\nSleep.", wait=False)
    kernel.wait_for(cell, "time.sleep(30)")  # the live view shows the call's code: the kernel is in it
    started = time.monotonic()
    kernel.km.interrupt_kernel()
    kernel.collect(cell, timeout=20)
    assert time.monotonic() - started < 15
    assert "interrupted" in cell.result["text/html"]
    status = kernel.value("[_.status, list(_.handles)]")
    assert status == ["interrupted", []]
    magics = "get_ipython().magics_manager.registry['AgentMagics']"
    assert kernel.value(
        f"[m.role for m in {magics}.session.harness.messages][-2:]") == ["assistant", "user"]
    assert kernel.value(f"{magics}.session.harness.messages[-1].tool_results[0].is_error") is True
    assert kernel.value("_.run_file") and Path(kernel.cwd, kernel.value("_.run_file")).exists()
    after = kernel.run("print(6 * 7)")
    assert after.ok and after.stdout.strip() == "42"
    again = kernel.run(f"%%agent {script(kernel, answer('Back after the interrupt.'))}\nStill there?")
    assert again.ok and kernel.value("_.status") == "completed"


def test_missing_api_key_shows_a_clear_message_and_fails_the_cell(kernel: Kernel) -> None:
    cell = kernel.run("%%agent --reset -m openai/gpt-4o-mini\nHello?")
    assert cell.reply["status"] == "error" and [e["ename"] for e in cell.errors] == ["AgentRunError"]
    html = cell.data("text/html")[0]
    assert "OPENAI_API_KEY" in html and "offline/quickstart" in html
    assert len(cell.errors[0]["traceback"]) == 1, "one line, no Python traceback"
    assert kernel.value("__import__('sys').last_value.result.status") == "error"
    again = kernel.run(f"%%agent {script(kernel, answer('fine'))}\nOffline then.")
    assert again.ok and kernel.value("_.status") == "completed"


# -- configuration and the extension ---------------------------------------------------------------


def test_config_values_reach_the_session(kernel: Kernel, tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    cell = kernel.run(textwrap.dedent(f"""\
        %config AgentMagics.max_turns = 7
        %config AgentMagics.hot_count = 3
        %config AgentMagics.memory_budget = 1000000
        %config AgentMagics.spill_dir = "{spill}"
        %config AgentMagics.run_dir = "runs2"
        %config AgentMagics.api_base = "http://127.0.0.1:9/v1"
    """))
    assert cell.ok, cell.outputs
    config = kernel.value(
        "vars(get_ipython().magics_manager.registry['AgentMagics'].session.config)")
    assert (config["max_turns"], config["hot_count"], config["memory_budget_bytes"]) == (7, 3, 1000000)
    assert (config["spill_dir"], config["run_dir"], config["api_base"]) == (str(spill), "runs2",
                                                                            "http://127.0.0.1:9/v1")
    restore = kernel.run(textwrap.dedent("""\
        %config AgentMagics.max_turns = 25
        %config AgentMagics.hot_count = 10
        %config AgentMagics.memory_budget = None
        %config AgentMagics.spill_dir = None
        %config AgentMagics.run_dir = "runs"
        %config AgentMagics.api_base = None
    """))
    assert restore.ok


def test_help_comes_from_magic_arguments(kernel: Kernel) -> None:
    reply = kernel.kc.inspect("%%agent", 7, detail_level=0, reply=True, timeout=10)["content"]
    text = reply["data"]["text/plain"]
    for option in ("--model", "--new", "--reset", "--in", "--out", "--max-turns"):
        assert option in text


def test_unload_extension_removes_the_magics(tmp_path: Path) -> None:
    k = Kernel(tmp_path)
    try:
        assert k.run("%load_ext harness_magic").ok
        assert k.run("%unload_ext harness_magic").ok
        gone = k.run("%%agent\nHi")
        assert "UsageError: Cell magic `%%agent` not found." in gone.stderr
        assert k.run("%load_ext harness_magic").ok
        assert k.value("'agent' in get_ipython().magics_manager.magics['cell']")
    finally:
        k.close()


def test_replay_and_retry_settle_into_one_final_output_like_agent_cells(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('r', 1)"), answer("Once."), code_turn("save('r', 1)"), answer("Twice."))
    kernel.run(f"%%agent --reset {model}\nOnce.")
    log = kernel.value("_.run_file")
    for line in (f"%agent_replay {log}", "%agent_retry --from-turn 2"):
        cell = kernel.run(line)
        assert cell.ok, cell.outputs
        live = [m["content"] for m in cell.messages if m["msg_type"] == "display_data"]
        assert len(live) == 1 and "text/plain" not in live[0]["data"]
        updates = [m["content"] for m in cell.messages if m["msg_type"] == "update_display_data"]
        assert len(updates) == 1 and updates[0]["data"] == {}
        assert len(cell.data("text/html")) == 1 and "agent-final" in cell.result["text/html"]


def test_agent_code_puts_the_runs_interpreter_code_into_the_next_cell(kernel: Kernel) -> None:
    model = script(kernel, code_turn("x = 6 * 7\nsave('x', x)"), code_turn("print('''it''s \"quoted\"''')"),
                   answer("Done."))
    kernel.run(f"%%agent --reset {model}\nCompute.")
    run_id = kernel.value("_.run_id")
    cell = kernel.run("%agent_code --turn 2")
    assert cell.ok, cell.outputs
    payloads = [p for p in cell.reply.get("payload", []) if p.get("source") == "set_next_input"]
    assert len(payloads) == 1
    text = payloads[0]["text"]
    assert text.startswith(f"# run {run_id} (the latest run): ") and "x = 6 * 7" not in text
    assert f"\n# agent run {run_id}, turn 2: python_interpreter\n" in text
    compile(text, "<next cell>", "exec")
    everything = kernel.run(f"%agent_code --run {run_id}")
    text = [p for p in everything.reply["payload"] if p.get("source") == "set_next_input"][0]["text"]
    assert "x = 6 * 7\nsave('x', x)" in text and "turn 1" in text and "turn 2" in text
    assert "put 2 calls of run" in everything.stdout
    assert "no tool calls in turn 9" in usage_error(kernel.run("%agent_code --turn 9"))
    assert "no run 'nope'" in usage_error(kernel.run("%agent_code --run nope"))


def test_agent_code_writes_sql_as_strings_that_stay_strings() -> None:
    from harness_magic.core.export import RunRecord, ToolRecord
    from harness_magic.notebook.code_text import agent_code_text

    record = RunRecord(run_id="r1")
    evil = "SELECT 1 -- ''' \"\"\"\nimport os; os.system('x')"
    record.items.append(ToolRecord("t1", "warehouse__query", {"sql": evil}, 3))
    text = agent_code_text(record)
    namespace: dict[str, Any] = {}
    exec(compile(text, "<cell>", "exec"), namespace)
    assert namespace["sql_turn3_1"] == evil and "os" not in namespace


def test_agent_status_names_model_sandbox_budgets_connectors_handles_and_cost(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('kept', 1)"), answer("ok"))
    kernel.run(f"%%agent --reset {model}\nKeep.")
    kernel.run("%config AgentMagics.max_cost_usd = 2.5")
    cell = kernel.run("%agent_status")
    assert cell.ok, cell.outputs
    text = cell.data("text/plain")[0]
    lines = {line[:11].strip(): line[11:].strip() for line in text.splitlines()}  # labels are padded to 11
    assert lines["model"] == "offline/quickstart" and lines["sandbox"] == "worker"
    run_id = kernel.value("_.run_id")
    assert lines["last run"] == f"run {run_id} · completed · model {model.split()[1]} (not the configured one)"
    assert "cost USD 2.5" in lines["budgets"] and "tokens ∞" in lines["budgets"]
    assert "kept" in lines["handles"] and lines["session"].endswith(tuple("0123456789")) and "$" in lines["session"]
    assert "<table" in cell.data("text/html")[0]
    kernel.run("%config AgentMagics.max_cost_usd = None")


def test_agent_status_lists_configured_connectors(kernel: Kernel, tmp_path) -> None:
    """Once any connector was configured, %agent_status crashed ('list' object is not callable)."""
    kernel.run(f'%config AgentMagics.connectors = [{{"type": "files", "name": "shared", "roots": [{str(tmp_path)!r}]}}]')
    try:
        cell = kernel.run("%agent_status")
        assert cell.ok, cell.outputs
        lines = dict(line.split(None, 1) for line in cell.data("text/plain")[0].splitlines())
        assert "shared" in lines["connectors"]
    finally:
        kernel.run("%config AgentMagics.connectors = []")
