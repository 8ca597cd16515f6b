"""Spec (issue 32): every shipped notebook, run twice in one kernel, ends as it ended after one run.

Each notebook's cells are executed in order twice in ONE kernel with nbclient, as Run All twice does
(nbclient sends no cell id: a cell is known by its text, as in terminal IPython). Neither pass may raise
an error, and after the second pass the session holds the same handles (name, type, shape, turn and
tool that made them), a conversation of the same length, and its runs of that pass gave the same
answers with the same token use as the first pass's: the second pass replaced the first, it did not
pile on top of it. The models are the notebooks' offline scripts, so this needs no key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kernel_helpers import run_unsaved_cell
from spark_servers import QUICK_JVM_CELL, starts_local_spark

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.kernel

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT_S = 180
"""A cell that runs longer is a hang: every model is offline (the Spark cell starts a local server in ~30 s)."""
STATE_MARK = "@@state "

_STATE = f"""
from harness_magic.notebook.extension import agent_session as _agent_session
import json as _json
_s = _agent_session()
print({STATE_MARK!r} + _json.dumps({{
    "handles": [[e.name, e.type, e.shape, e.turn, e.tool] for e in _s.cache.entries()],
    "conversation": len(_s.harness.messages),
    "runs": [[r.status, r.text, r.usage.input_tokens, r.usage.output_tokens, r.usage.cached_tokens]
             for r in _s.runs],
}}, default=str))
"""
"""Run after each pass: what the session holds (``%agent_vars``' rows, without the run ids that differ)."""


def _state(client: Any, nb: Any) -> dict[str, Any]:
    cell = run_unsaved_cell(client, nb, _STATE)
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    return json.loads(text[text.index(STATE_MARK) + len(STATE_MARK):])


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_run_all_twice_ends_as_run_all_once(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    cells = list(nb.cells)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=nb.metadata.kernelspec.name,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}}, store_widget_state=False)
    states = []
    with client.setup_kernel():
        if starts_local_spark("".join(cell.source for cell in cells)):
            run_unsaved_cell(client, nb, QUICK_JVM_CELL)
        for _pass in range(2):
            for index, cell in enumerate(cells):
                client.execute_cell(cell, index)  # CellExecutionError (with the cell and its error) on any error
            states.append(_state(client, nb))
    once, twice = states
    assert twice["handles"] == once["handles"]
    assert twice["conversation"] == once["conversation"]
    first_pass = once["runs"]
    assert twice["runs"][len(first_pass):] == first_pass, "the second pass's answers and token use"
