"""The first hour in a real kernel (issue 27 points 2-5): %agent_status in every configuration, %agent_code
output that runs in the notebook, nothing replaced silently, Run All twice and a failed run stopping Run All.

Real kernels (jupyter_client, and nbclient for Run All); every model is a scripted file or a real provider id
with no key in the environment, so nothing reaches a network.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_client")

from kernel_helpers import Kernel, agent_kernel, answer, code_turn, usage_error  # noqa: E402

pytestmark = pytest.mark.kernel

_counter = iter(range(10_000))
MAGICS = "get_ipython().magics_manager.registry['AgentMagics']"
GLOSSARY = Path(__file__).parent / "knowledge_corpus" / "definitions.yaml"


def script(cwd: Path, *turns: dict[str, Any]) -> str:
    """A scripted model file in ``cwd``; returns ``-m scripted/<file>``."""
    name = f"first_hour_{next(_counter)}.json"
    (cwd / name).write_text(json.dumps({"turns": list(turns)}))
    return f"-m scripted/{name}"


def status_lines(kernel: Kernel) -> dict[str, str]:
    cell = kernel.run("%agent_status")
    assert cell.ok, cell.outputs
    return {line[:11].strip(): line[11:].strip() for line in cell.data("text/plain")[0].splitlines()}


def next_input(cell: Any) -> str:
    payloads = [p for p in cell.reply.get("payload", []) if p.get("source") == "set_next_input"]
    assert len(payloads) == 1, cell.reply
    return payloads[0]["text"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("first_hour"), model="offline/quickstart") as k:
        yield k


# -- point 2: %agent_status ---------------------------------------------------------------------


def test_status_with_connectors_of_every_type_and_subagents_off_then_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "sales.csv").write_text("region,revenue\nnorth,3\nsouth,5\n")
    with sqlite3.connect(tmp_path / "shop.db") as db:
        db.execute("create table orders (id integer, total real)")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Revenue\n\nRevenue is net of refunds.\n")
    connectors = [
        {"type": "files", "name": "shared", "roots": [str(data)]},
        {"type": "sql", "name": "shop", "url": f"sqlite:///{tmp_path / 'shop.db'}"},
        {"type": "duckdb", "name": "lake", "files": {"sales": str(data / "sales.csv")}},
        {"type": "docs", "name": "handbook", "roots": [str(tmp_path / "docs")]},
        {"type": "glossary", "name": "terms", "files": [str(GLOSSARY)]},
        {"type": "spark", "name": "cluster", "master": "local[1]"},  # nothing starts before its first tool call
    ]
    k = Kernel(tmp_path)
    try:
        setup = k.run(textwrap.dedent(f"""\
            %load_ext harness_magic
            %config AgentMagics.model = "offline/quickstart"
            %config AgentMagics.subagents = False
            %config AgentMagics.connectors = {connectors!r}
        """))
        assert setup.ok, setup.outputs
        lines = status_lines(k)
        for name in ("shared", "shop", "lake", "handbook", "terms", "cluster"):
            assert f"{name} (" in lines["connectors"], lines["connectors"]
        assert "loaded" not in lines["connectors"], "reading the status loads no connector"
        assert lines["subagents"] == "off" and "last run" not in lines
        assert lines["session"].startswith("0 runs")
        assert k.run("%config AgentMagics.subagents = True").ok
        assert status_lines(k)["subagents"].startswith("on")
        tools = f"[t.name for t in {MAGICS}.session.harness.tools]"
        assert "subagent" in k.value(tools)
        assert k.run("%config AgentMagics.subagents = False").ok  # withdrawn from the live session too
        assert status_lines(k)["subagents"] == "off" and "subagent" not in k.value(tools)
    finally:
        k.close()


def test_status_names_the_last_runs_model_and_a_failed_runs_reason(kernel: Kernel) -> None:
    model = script(kernel.cwd, answer("Fine."))
    assert kernel.run(f"%%agent --reset {model}\nHi.").ok
    run_id = kernel.value("_.run_id")
    lines = status_lines(kernel)
    assert lines["model"] == "offline/quickstart"
    assert lines["last run"] == f"run {run_id} · completed · model {model.split()[1]} (not the configured one)"
    failed = kernel.run("%%agent -m openai/gpt-4o-mini\nHello?")
    assert [e["ename"] for e in failed.errors] == ["AgentRunError"]
    lines = status_lines(kernel)
    assert " · error: " in lines["last run"] and "OPENAI_API_KEY" in lines["last run"]
    assert lines["last run"].endswith("model openai/gpt-4o-mini (not the configured one)")
    assert lines["session"].startswith("2 runs")


# -- point 3: %agent_code output runs as is -----------------------------------------------------------


def test_agent_code_output_runs_in_the_notebook_and_saves_the_same_values(kernel: Kernel) -> None:
    model = script(
        kernel.cwd,
        code_turn("import pandas as pd\nframe = pd.DataFrame({'v': [1, 2, 3]})\nsave('base', frame)"),
        code_turn("doubled = base * 2\nsave('doubled', doubled)\nsave('total', int(doubled.v.sum()))"),
        answer("Total 12."),
    )
    assert kernel.run(f"%%agent --reset {model}\nDouble and add.").ok
    run_id = kernel.value("_.run_id")
    assert kernel.run(f"%%agent {script(kernel.cwd, answer('No code this time.'))}\nThanks.").ok
    cell = kernel.run("%agent_code")
    assert cell.ok, cell.outputs
    text = next_input(cell)
    first, pulls = text.splitlines()[0], [line for line in text.splitlines() if line.startswith("%")]
    assert first.startswith(f"# run {run_id} (the latest with code; "), first
    assert f"of run {run_id} (the latest with code" in cell.stdout
    assert pulls == ["%agent_pull base"], "turn 2 reads the handle turn 1 made; nothing else is read"
    assert "import save" not in text, "the extension's save is already the notebook's"
    ran = kernel.run(text)
    assert ran.ok, ran.outputs
    cache = f"{MAGICS}.session.cache"
    assert kernel.value(f"sorted(n for n in {cache}.names() if n.endswith('_2'))") == ["base_2", "doubled_2",
                                                                                      "total_2"]
    for handle in ("base", "doubled", "total"):
        same = kernel.value(f"repr({cache}.get('{handle}')) == repr({cache}.get('{handle}_2'))")
        assert same, f"{handle}: the notebook's save stored another value than the agent's"
    again = kernel.run(text)
    assert again.ok, "running the cell again re-pulls what its own pull bound"


def test_one_line_save_is_the_agents_save_not_ipythons_save_magic(kernel: Kernel) -> None:
    cell = kernel.run("save('one_line', 41 + 1)")
    assert cell.ok, cell.outputs
    assert kernel.value(f"{MAGICS}.session.cache.get('one_line')") == 42
    assert not (kernel.cwd / "one_line.py").exists(), "the %save magic did not run"


def test_agent_code_imports_save_where_the_notebook_has_its_own(tmp_path: Path) -> None:
    k = Kernel(tmp_path)
    try:
        assert k.run("def save(*args):\n    return 'mine'\n%load_ext harness_magic").ok
        assert k.run("save('x', 1)").stdout == "" and k.value("save('x', 1)") == "mine", "the user's save is kept"
        model = script(tmp_path, code_turn("save('seven', 7)"), answer("ok"))
        assert k.run(f"%%agent {model}\nSeven.").ok
        text = next_input(k.run("%agent_code"))
        assert "\nfrom harness_magic.notebook.bindings import save" in text
        assert k.run(text).ok
        assert k.value(f"{MAGICS}.session.cache.get('seven_2')") == 7
    finally:
        k.close()


# -- point 4: nothing replaced silently ------------------------------------------------------------------


def test_pull_onto_an_existing_variable_is_refused_and_force_replaces_it(kernel: Kernel) -> None:
    kernel.run("import pandas as pd\nsales = pd.DataFrame({'region': ['n'] * 10_000, 'revenue': range(10_000)})")
    model = script(kernel.cwd, code_turn("import pandas as pd\nsave('sales', pd.DataFrame({'q': [1, 2, 3, 4]}))"),
                   answer("Aggregated."))
    assert kernel.run(f"%%agent --reset {model}\nAggregate.").ok
    message = usage_error(kernel.run("%agent_pull sales"))
    assert "'sales' (DataFrame 10000×2)" in message and "--force" in message
    assert kernel.value("len(sales)") == 10_000
    forced = kernel.run("%agent_pull sales --force")
    assert forced.ok and "pulled sales → sales (DataFrame 4×1)" in forced.stdout
    assert kernel.value("len(sales)") == 4
    kernel.run("sales = 'mine again'")
    assert "'sales' (str of 10)" in usage_error(kernel.run("%agent_pull sales")), "a reassigned name is the user's"


def test_out_onto_an_existing_variable_shows_the_result_then_refuses(kernel: Kernel) -> None:
    kernel.run("kept = {'mine': True}")
    model = script(kernel.cwd, code_turn("save('kept', [1, 2])"), answer("Saved."))
    cell = kernel.run(f"%%agent --reset --out kept {model}\nSave.")
    assert "agent-final" in cell.data("text/html")[0], "the run's result shows before the refusal"
    message = usage_error(cell)
    assert "--out" in message and "'kept' (dict of 1)" in message and "--force" in message
    assert kernel.value("kept") == {"mine": True}
    forced = kernel.run(f"%%agent --reset --out kept --force {model}\nSave.")
    assert forced.ok and kernel.value("kept") == [1, 2]
    rerun = kernel.run(f"%%agent --reset --out kept {model}\nSave.")
    assert rerun.ok, "running the cell again re-binds its own --out without --force"


# -- point 5: Run All twice; a failed run stops Run All -----------------------------------------------


def printed(cell: Any) -> str:
    """What ``cell`` printed, as a front end shows it: the kernel flushes its stdout when it likes (a loaded
    machine splits one print into several stream outputs), so the stream outputs are read joined."""
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == "stdout")


def _notebook(*sources: str) -> Any:
    import nbformat

    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def test_run_all_twice_with_scripted_models_named_by_cells(tmp_path: Path) -> None:
    nbclient = pytest.importorskip("nbclient")
    first = script(tmp_path, code_turn("save('total', sum(range(5)))"), answer("Total 10."))
    second = script(tmp_path, answer("Still 10."))
    nb = _notebook("%load_ext harness_magic", f"%%agent --out total {first}\nAdd.", f"%%agent {second}\nAgain?",
                   "print(total, _.status)")
    client = nbclient.NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        for _round in range(2):
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)  # raises CellExecutionError on a failing cell
    assert printed(nb.cells[-1]) == "10 completed\n"


def test_a_failed_run_stops_run_all_before_the_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    from nbclient.exceptions import CellExecutionError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the kernel inherits this process's environment
    nb = _notebook("%load_ext harness_magic", "%%agent -m openai/gpt-4o-mini\nHello?", "%agent_export out.html")
    client = nbclient.NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError) as raised:
        client.execute()
    assert raised.value.ename == "AgentRunError" and "OPENAI_API_KEY" in raised.value.evalue
    assert not (tmp_path / "out.html").exists()
    assert nb.cells[2].outputs == []
    shown = nb.cells[1].outputs
    assert any("text/html" in o.get("data", {}) for o in shown), "the failed run's output is shown first"
    assert [len(o["traceback"]) for o in shown if o["output_type"] == "error"] == [1], "one line, no traceback"


def test_raise_on_error_false_keeps_a_failed_run_a_passing_cell(kernel: Kernel) -> None:
    kernel.run("%config AgentMagics.raise_on_error = False")
    try:
        cell = kernel.run("%%agent -m openai/gpt-4o-mini\nHello?")
        assert cell.ok and kernel.value("_.status") == "error"
    finally:
        kernel.run("%config AgentMagics.raise_on_error = True")


def test_an_exhausted_script_names_new_and_reset() -> None:
    from harness_magic.core.providers.errors import ProviderError
    from harness_magic.core.providers.offline import ScriptedModel

    model = ScriptedModel([{"text": "only"}])
    model.complete({"messages": []}, None)
    with pytest.raises(ProviderError) as raised:
        model.complete({"messages": []}, None)
    assert "--new" in str(raised.value) and "--reset" in str(raised.value) and "-m" in str(raised.value)
