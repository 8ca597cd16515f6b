"""The magics with the core's control plane in a real kernel: handle sizes, budgets,
approvals asked in the cell, the sandbox report and connectors from configuration.

One kernel serves the module (plus one started with a config file); models are
scripted files, so nothing needs a key.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from kernel_helpers import Cell, Kernel, agent_kernel, answer, code_turn, usage_error  # noqa: E402
from lab_frontend import run_answering  # noqa: E402

pytestmark = pytest.mark.kernel

_counter = iter(range(10_000))


def script(kernel: Kernel, *turns: dict) -> str:
    """Write a scripted model into the kernel's folder; returns ``-m scripted/<file>``."""
    name = f"integration_{next(_counter)}.json"
    (kernel.cwd / name).write_text(json.dumps({"turns": list(turns)}))
    return f"-m scripted/{name}"


def calls(*pairs: tuple[str, dict]) -> dict:
    return {"text": "", "tool_calls": [{"name": n, "arguments": a} for n, a in pairs]}


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("integration"), model="offline/quickstart") as k:
        yield k


def magics_expr(attribute: str) -> str:
    return f"get_ipython().magics_manager.registry['AgentMagics'].{attribute}"


# -- %agent_vars -------------------------------------------------------------------------------


def test_agent_vars_size_column_is_human_readable(kernel: Kernel) -> None:
    model = script(kernel, code_turn("save('numbers', list(range(5000)))"), answer("Saved."))
    assert kernel.run(f"%%agent --reset {model}\nSave numbers.").ok
    listing = kernel.run("%agent_vars")
    header, row = listing.data("text/plain")[0].splitlines()[:2]
    size = row[header.index("size"):header.index("where")].strip()
    assert re.fullmatch(r"\d+(\.\d)? (B|KB|MB|GB)", size), row
    assert size.endswith("KB")
    assert re.search(r"<td[^>]*>\d+\.\d KB</td>", listing.data("text/html")[0])


# -- budgets -----------------------------------------------------------------------------------


def test_max_tool_calls_flag_ends_the_run_with_a_budget_status_in_the_output(kernel: Kernel) -> None:
    model = script(kernel, code_turn("x = 1"), code_turn("x = 2"), code_turn("x = 3"), answer("never"))
    cell = kernel.run(f"%%agent --max-tool-calls 1 {model}\nCount.")
    assert cell.ok, cell.outputs
    final = cell.result
    assert "budget_tool_calls" in final["text/html"] and "tool-call budget exhausted" in final["text/html"]
    assert kernel.value("[_.status, _.error]")[0] == "budget_tool_calls"
    # the flag applies to that cell only
    assert kernel.value(magics_expr("session.budget_guard.budgets.max_tool_calls")) is None


def test_budget_traits_reach_the_config_and_apply_without_a_new_session(kernel: Kernel) -> None:
    session_id = kernel.value(magics_expr("session.session_id"))
    cell = kernel.run(textwrap.dedent("""\
        %config AgentMagics.max_tokens = 100000
        %config AgentMagics.max_cost_usd = 0.5
        %config AgentMagics.max_wall_s = 60
        %config AgentMagics.max_tool_calls = 1
    """))
    assert cell.ok, cell.outputs
    config = kernel.value(f"vars({magics_expr('session.config')})")
    assert (config["max_tokens"], config["max_cost_usd"], config["max_wall_s"], config["max_tool_calls"]) == (
        100000, 0.5, 60.0, 1)
    assert kernel.value(magics_expr("session.session_id")) == session_id
    model = script(kernel, code_turn("x = 1"), code_turn("x = 2"), code_turn("x = 3"), answer("never"))
    assert kernel.run(f"%%agent {model}\nCount.").ok
    assert kernel.value("_.status") == "budget_tool_calls"
    model = script(kernel, code_turn("x = 1"), code_turn("x = 2"), answer("Two calls."))
    assert kernel.run(f"%%agent --max-tool-calls 5 {model}\nCount.").ok
    assert kernel.value("_.status") == "completed"
    restore = kernel.run("\n".join(f"%config AgentMagics.{name} = None"
                                   for name in ("max_tokens", "max_cost_usd", "max_wall_s", "max_tool_calls")))
    assert restore.ok and kernel.value(magics_expr("session.config.budgets().active")) == {}


@pytest.mark.parametrize("code, expected", [
    ("%%agent --max-cost 0\nHi", "--max-cost must be positive or None, got 0.0"),
    ("%%agent --max-tool-calls -1\nHi", "--max-tool-calls must be positive or None, got -1"),
    ("%config AgentMagics.max_wall_s = 0", "max_wall_s must be positive or None, got 0.0"),
    ("%config AgentMagics.max_tokens = -5", "max_tokens must be positive or None, got -5"),
])
def test_bad_budgets_are_one_line_usage_errors(kernel: Kernel, code: str, expected: str) -> None:
    assert expected in usage_error(kernel.run(code))


# -- approval in the cell ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def notes(kernel: Kernel) -> None:
    """A connector with one write tool, added with no approver: the notebook's prompt asks."""
    cell = kernel.run(textwrap.dedent('''\
        from harness_magic.core.execution.connectors import Connector
        from harness_magic.notebook.extension import agent_session

        written = []
        notes = Connector("notes", "Notes kept in the notebook.")

        @notes.tool(name="add", safety="write")
        def add_note(text: str) -> str:
            """Add a note.

            Args:
                text: The note.
            """
            written.append(text)
            return f"added {text!r}"

        agent_session().add_connector(notes)
    '''))
    assert cell.ok, cell.outputs


def _write_model(kernel: Kernel, text: str) -> str:
    return script(kernel, calls(("load_connectors", {"connector_name": "notes"})),
                  calls(("notes__add", {"text": text})), answer("Done."))


def test_approved_write_runs_after_the_prompt_in_the_cell(kernel: Kernel, notes: None) -> None:
    cell, prompts = run_answering(kernel, f"%%agent --new {_write_model(kernel, 'yes please')}\nNote it.", "y")
    assert cell.ok, cell.outputs
    (prompt,) = prompts
    assert prompt.labels == ["Approve", "Deny"] and prompt.state == "answered"
    request = prompt.header
    assert "agent-approval" in request and "notes__add" in request and "write" in request and "yes please" in request
    assert kernel.value("written") == ["yes please"]
    assert kernel.value("_.status") == "completed"


def test_denied_write_does_not_run_and_the_model_gets_an_error(kernel: Kernel, notes: None) -> None:
    cell, prompts = run_answering(kernel, f"%%agent --new {_write_model(kernel, '<b>no</b>')}\nNote it.", "n")
    assert cell.ok and prompts, cell.outputs
    request = prompts[0].header
    assert "&lt;b&gt;no&lt;/b&gt;" in request and "<b>no</b>" not in request
    assert "<b>no</b>" not in kernel.value("written")
    assert "the user denied it" in cell.result["text/html"]


def test_without_a_person_the_write_is_denied_with_a_reason(kernel: Kernel, notes: None) -> None:
    # nbclient and nbval execute with allow_stdin=False
    cell = kernel.collect(Cell(kernel.kc.execute(f"%%agent --new {_write_model(kernel, 'unseen')}\nNote it.",
                                                 allow_stdin=False)))
    assert cell.ok, cell.outputs
    assert "unseen" not in kernel.value("written")
    assert "nobody can approve it here" in cell.result["text/html"]


# -- %agent_sandbox ------------------------------------------------------------------------------


def test_agent_sandbox_lists_each_layer_and_its_state(kernel: Kernel) -> None:
    cell = kernel.run("%agent_sandbox")
    assert cell.ok, cell.outputs
    lines = cell.data("text/plain")[0].splitlines()
    assert lines[0].startswith("sandbox: worker")
    assert lines[1].split()[:3] == ["layer", "state", "detail"]
    states = {line.split()[0]: line.split()[1] for line in lines[2:]}
    for layer in ("env", "rlimits", "landlock", "seccomp", "confined"):
        assert states[layer] in ("on", "off")
    assert "<table" in cell.data("text/html")[0]


def test_agent_sandbox_says_inprocess_is_no_security_boundary(kernel: Kernel) -> None:
    cell = kernel.run('%config AgentMagics.sandbox = "inprocess"\n%agent_sandbox')
    try:
        assert cell.ok, cell.outputs
        assert "NOT a security boundary" in cell.data("text/plain")[0]
    finally:
        assert kernel.run('%config AgentMagics.sandbox = "worker"').ok


def test_agent_sandbox_unconfined_is_the_opt_in_the_refusal_names(kernel: Kernel) -> None:
    cell = kernel.run('%config AgentMagics.sandbox = "unconfined"\n%agent_sandbox')
    try:
        assert cell.ok, cell.outputs
        assert cell.data("text/plain")[0].startswith("sandbox: unconfined")
    finally:
        assert kernel.run('%config AgentMagics.sandbox = "worker"').ok


def test_agent_sandbox_rejects_an_unknown_mode_naming_the_allowed_ones(kernel: Kernel) -> None:
    cell = kernel.run('%config AgentMagics.sandbox = "chroot"')
    assert not cell.ok
    assert "sandbox 'chroot' is not valid; allowed: worker, inprocess, unconfined" in str(cell.outputs)
    assert kernel.value("get_ipython().magics_manager.registry['AgentMagics'].sandbox") == "worker"


# -- connectors from configuration ----------------------------------------------------------------


def test_connectors_and_budgets_from_a_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sales.csv").write_text("region,revenue\nnorth,3\nsouth,5\n")
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(textwrap.dedent("""\
        c.AgentMagics.connectors = [{"type": "files", "roots": ["data"]}]
        c.AgentMagics.max_tool_calls = 4
        c.AgentMagics.model = "offline/quickstart"
    """))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    k = Kernel(tmp_path)
    try:
        assert k.run("%load_ext harness_magic").ok
        session = "get_ipython().magics_manager.registry['AgentMagics'].session"
        assert k.value(f"{session}.config.max_tool_calls") == 4
        assert k.value(f"{session}.connectors.registry.names") == ["files"]
        assert k.value(f"{session}.connectors.registry.approval.approver is not None")
        model = script(k, calls(("load_connectors", {"connector_name": "files"})),
                       calls(("files__list", {})), answer("One file."))
        assert k.run(f"%%agent {model}\nWhich files are there?").ok
        assert k.value("_.status") == "completed"
        assert "sales.csv" in k.value("str(_.messages)")
    finally:
        k.close()


def test_budget_flags_are_in_the_magic_help(kernel: Kernel) -> None:
    reply = kernel.kc.inspect("%%agent", 7, detail_level=0, reply=True, timeout=10)["content"]
    for option in ("--max-tokens", "--max-cost", "--max-wall", "--max-tool-calls"):
        assert option in reply["data"]["text/plain"]


def test_a_bad_connector_setting_is_a_one_line_usage_error(kernel: Kernel) -> None:
    bad_type = kernel.run('%config AgentMagics.connectors = [{"type": "ftp"}]')
    assert "needs a 'type' of dbt, docs, duckdb, files, glossary, mcp, spark, sql" in usage_error(bad_type)
    assert kernel.run('%config AgentMagics.connectors = [{"type": "files"}]').ok
    try:
        assert "AgentMagics.connectors: KeyError" in usage_error(kernel.run("%agent_vars"))
    finally:
        assert kernel.run("%config AgentMagics.connectors = []").ok
    assert kernel.run("%agent_vars").ok
