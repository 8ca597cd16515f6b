"""Cells run again do what they say (issue 32 points 3-5): configuration cells are idempotent, the code
``%agent_code`` hands over runs as pasted (twice), and a pull never overwrites a pulled value the user edited.

Real kernels (jupyter_client) with scripted models: nothing reaches a network.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jupyter_client")

from test_first_hour_magics import next_input, script  # noqa: E402
from kernel_helpers import Kernel, agent_kernel, answer, code_turn, run_unsaved_cell, usage_error  # noqa: E402
from spark_servers import QUICK_JVM_CELL, starts_local_spark  # noqa: E402

pytestmark = pytest.mark.kernel

MAGICS = "get_ipython().magics_manager.registry['AgentMagics']"
CACHE = f"{MAGICS}.session.cache"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("idempotent"), model="offline/quickstart") as k:
        yield k


SALES = "import pandas as pd\nsales = pd.DataFrame({'region': ['n', 's', 'n', 'e'], 'revenue': [3, 5, 7, 2]})"


# -- point 4: handed-over code runs as pasted ---------------------------------------------------------


def test_agent_code_after_in_runs_as_pasted_twice_with_the_same_names(kernel: Kernel) -> None:
    assert kernel.run(SALES).ok
    model = script(kernel.cwd,
                   code_turn("by_region = sales.groupby('region').revenue.sum()\nsave('by_region', by_region)"),
                   code_turn("top = by_region.idxmax()\nsave('top', top)"),
                   answer("North."))
    assert kernel.run(f"%%agent --reset --in sales {model}\nWhich region sells most?").ok
    cell = kernel.run("%agent_code")
    assert cell.ok and "note:" not in cell.stdout, cell.stdout
    text = next_input(cell)
    assert "%agent_pull sales" not in text, "the notebook's sales is the very value pushed: no pull"
    assert "# sales: this notebook's sales is the value pushed (no pull needed)" in text
    names = []
    for _round in range(2):
        ran = kernel.run(text)
        assert ran.ok, ran.outputs
        names.append(kernel.value(f"sorted({CACHE}.names())"))
    assert names[0] == names[1] == ["by_region", "by_region_2", "sales", "top", "top_2"], names
    assert kernel.value("int(by_region['n'])") == 10 and kernel.value("top") == "n"


def test_agent_code_pulls_a_pushed_handle_the_notebook_changed_since(kernel: Kernel) -> None:
    assert kernel.run(SALES).ok
    model = script(kernel.cwd, code_turn("total = int(sales.revenue.sum())\nsave('total', total)"), answer("17."))
    assert kernel.run(f"%%agent --reset --in sales {model}\nTotal?").ok
    assert kernel.run("sales.loc[0, 'revenue'] = 1000").ok  # the user's own edit after the push
    cell = kernel.run("%agent_code")
    text = next_input(cell)
    assert "%agent_pull sales" in text, "the notebook's sales is no longer what the agent read"
    assert "note: the cell's %agent_pull sales will refuse to replace notebook variable 'sales'" in cell.stdout
    assert "not replacing notebook variable 'sales'" in usage_error(kernel.run(text))
    assert kernel.value("int(sales.revenue.sum())") == 1014, "the user's edit is kept"


def test_agent_code_pulls_a_pushed_handle_under_another_variable_name(kernel: Kernel) -> None:
    assert kernel.run(SALES + "\ndf = sales.copy()\ndel sales").ok
    model = script(kernel.cwd, code_turn("save('n', len(sales))"), answer("4 rows."))
    assert kernel.run(f"%%agent --reset --in df=sales {model}\nHow many rows?").ok
    text = next_input(kernel.run("%agent_code"))
    assert "%agent_pull sales" in text, "no notebook variable sales yet: the pull binds it"
    for _round in range(2):
        ran = kernel.run(text)
        assert ran.ok, ran.outputs
    assert kernel.value(f"sorted({CACHE}.names())") == ["n", "n_2", "sales"]


def test_the_notebooks_save_of_another_value_is_a_new_handle(kernel: Kernel) -> None:
    assert kernel.run("%%agent --reset " + script(kernel.cwd, answer("ok")) + "\nHi.").ok
    assert kernel.value("save('x', [1, 2])") == "x"
    assert kernel.value("save('x', [1, 2])") == "x", "the same value again: the same handle"
    assert kernel.value("save('x', [1, 2, 3])") == "x_2", "never a silent overwrite"
    assert kernel.value(f"{CACHE}.get('x')") == [1, 2]
    assert kernel.value(f"{CACHE}.retire('x_2') or save('x', [1, 2, 3])") == "x_2", "a retired handle is new"


# -- point 5: pulls protect edits -----------------------------------------------------------------------


@pytest.fixture
def pulled(kernel: Kernel) -> Kernel:
    """A frame the agent saved as ``frame``, pulled into the notebook once."""
    model = script(kernel.cwd, code_turn("import pandas as pd\nsave('frame', pd.DataFrame({'a': [1, 2], "
                                         "'b': ['x', 'y']}))"), answer("Saved."))
    assert kernel.run(f"%%agent --reset {model}\nSave a frame.").ok
    assert kernel.run("%agent_pull frame").ok
    return kernel


def test_pulling_again_replaces_an_unchanged_pulled_value(pulled: Kernel) -> None:
    again = pulled.run("%agent_pull frame")
    assert again.ok and "pulled frame → frame (DataFrame 2×2)" in again.stdout


@pytest.mark.parametrize("edit", [
    "frame['new'] = 1",                 # a column added
    "frame.loc[0, 'a'] = 99",           # one cell changed through .loc
    "frame.iloc[1, 1] = 'z'",           # one cell changed through .iloc
    "frame.sort_values('a', ascending=False, inplace=True)",  # the same rows, another order
    "frame['a'] = frame['a'].astype('float64')",               # a dtype changed
    "frame.rename(columns={'b': 'c'}, inplace=True)",          # a column renamed
])
def test_a_pulled_frame_edited_in_place_is_not_replaced_without_force(pulled: Kernel, edit: str) -> None:
    assert pulled.run(edit).ok
    before = pulled.value("frame.to_json()")
    message = usage_error(pulled.run("%agent_pull frame"))
    assert "not replacing notebook variable 'frame'" in message and "changed since the pull" in message
    assert "--force" in message
    assert pulled.value("frame.to_json()") == before, "the edit is kept"
    forced = pulled.run("%agent_pull frame --force")
    assert forced.ok and pulled.value("frame.shape") == [2, 2]
    assert pulled.run("%agent_pull frame").ok, "what --force pulled is ours again"


def test_a_pulled_array_and_list_edited_in_place_are_not_replaced(kernel: Kernel) -> None:
    model = script(kernel.cwd, code_turn("import numpy as np\nsave('arr', np.arange(6))\nsave('items', [1, 2])"),
                   answer("Saved."))
    assert kernel.run(f"%%agent --reset {model}\nSave.").ok
    assert kernel.run("%agent_pull arr\n%agent_pull items").ok
    assert kernel.run("arr[3] = -1\nitems.append(3)").ok
    assert "changed since the pull" in usage_error(kernel.run("%agent_pull arr"))
    assert "changed since the pull" in usage_error(kernel.run("%agent_pull items"))
    assert kernel.value("arr.tolist()") == [0, 1, 2, -1, 4, 5] and kernel.value("items") == [1, 2, 3]


def test_a_pulled_name_rebound_to_another_object_is_the_users(pulled: Kernel) -> None:
    assert pulled.run("import pandas as pd\nframe = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})").ok
    message = usage_error(pulled.run("%agent_pull frame"))
    assert "'frame' (DataFrame 2×2)" in message and "changed since" not in message, "another object: the user's"


def test_out_rebinds_its_own_value_but_not_an_edited_one(kernel: Kernel) -> None:
    model = script(kernel.cwd, code_turn("save('res', {'k': 1})"), answer("Saved."))
    assert kernel.run(f"%%agent --reset --out res {model}\nSave.").ok
    assert kernel.run(f"%%agent --reset --out res {model}\nSave.").ok, "unchanged: re-bound"
    assert kernel.run("res['k'] = 2").ok
    message = usage_error(kernel.run(f"%%agent --reset --out res {model}\nSave."))
    assert "--out" in message and "changed since the pull" in message
    assert kernel.value("res") == {"k": 2}


# -- point 3: configuration cells are idempotent ----------------------------------------------------------


def test_setting_connectors_again_keeps_the_unchanged_ones_and_says_which(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.csv").write_text("region,revenue\nnorth,3\nsouth,5\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Revenue\n\nRevenue is net of refunds.\n")
    crm = {"type": "duckdb", "name": "crm", "files": {"sales": str(tmp_path / "a.csv")}}
    docs = {"type": "docs", "name": "docs", "roots": [str(tmp_path / "docs")]}
    k = Kernel(tmp_path)
    try:
        assert k.run(f'%load_ext harness_magic\n%config AgentMagics.model = "offline/quickstart"\n'
                     f"%config AgentMagics.connectors = {[crm, docs]!r}").ok
        engine = f"id({MAGICS}.session.connectors.registry['crm'].engine)"
        first = k.value(engine)
        same = k.run(f"%config AgentMagics.connectors = {[crm, docs]!r}\n{MAGICS}.session")
        assert same.ok and "rebuilt" not in same.stdout, same.outputs
        assert k.value(engine) == first, "the DuckDB engine (its connection) is the same object"
        governed = k.run(f"%config AgentMagics.connectors = {[crm, dict(docs, environment='dev')]!r}\n"
                         f"{MAGICS}.session")
        assert governed.ok and "connectors: crm kept, docs rebuilt" in governed.stdout, governed.outputs
        assert "tools were rebuilt" not in governed.stdout, "the loop around the conversation is the same"
        moved = dict(docs, roots=[str(tmp_path)])
        changed = k.run(f"%config AgentMagics.connectors = {[crm, moved]!r}\n{MAGICS}.session")
        assert changed.ok and "connectors: crm kept, docs rebuilt" in changed.stdout, changed.outputs
        assert k.value(engine) == first
        dropped = k.run(f"%config AgentMagics.connectors = {[crm]!r}\n{MAGICS}.session")
        assert "connectors: crm kept, docs removed" in dropped.stdout
        assert k.value(f"{MAGICS}.session.connectors.registry.names") == ["crm"]
    finally:
        k.close()


def test_add_connector_in_a_cell_run_twice_keeps_or_replaces_and_says_so(kernel: Kernel) -> None:
    (kernel.cwd / "crm.csv").write_text("customer_id,region\n1,north\n")
    cell = textwrap.dedent("""\
        from harness_magic.core.execution.connectors import duckdb_connector
        from harness_magic.notebook.extension import agent_session
        crm = agent_session().add_connector(duckdb_connector({"customers": PATH}, name="crm"))
    """)
    assert kernel.run(cell.replace("PATH", repr(str(kernel.cwd / "crm.csv")))).ok
    again = kernel.run(cell.replace("PATH", repr(str(kernel.cwd / "crm.csv"))))
    assert again.ok and "connector 'crm' is already registered with this configuration: kept" in again.stdout
    (kernel.cwd / "moved.csv").write_text("customer_id,region\n1,north\n")
    moved = kernel.run(cell.replace("PATH", repr(str(kernel.cwd / "moved.csv"))))
    assert moved.ok and "connector 'crm' replaced: its configuration changed (files)" in moved.stdout
    assert kernel.value("agent_session().connectors.registry['crm'] is crm")


NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.parametrize("notebook", ["governed_data", "connectors_sql", "scale_out"])
def test_a_shipped_notebooks_add_connector_cells_run_twice_in_one_kernel(notebook: str) -> None:
    """Every cell up to the one that calls ``add_connector`` (the data set-up included), twice, in one kernel
    under the notebook's own kernelspec."""
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    if notebook == "scale_out":
        pytest.importorskip("pyspark")
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    last = max(i for i, c in enumerate(nb.cells) if "add_connector(" in c.source)
    nb.cells = nb.cells[:last + 1]
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name=nb.metadata.kernelspec.name,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    with client.setup_kernel():
        if starts_local_spark("".join(cell.source for cell in nb.cells)):
            run_unsaved_cell(client, nb, QUICK_JVM_CELL)
        outputs = []
        for _round in range(2):
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)  # raises CellExecutionError on an error
            outputs.append("".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])))
        if notebook == "scale_out":
            nb.cells.append(nbformat.v4.new_code_cell("spark.engine.close()"))
            client.execute_cell(nb.cells[-1], len(nb.cells) - 1)
    assert "already loaded" not in outputs[0] + outputs[1], "the harness kernel's %load_ext is quiet"
    assert "already registered" not in outputs[0]
    assert "replaced: its configuration changed" in outputs[1], "each pass makes a new working folder"
