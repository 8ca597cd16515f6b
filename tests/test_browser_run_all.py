"""Run All twice in JupyterLab in headless Chromium: the second pass leaves what the first left.

For ``quickstart``, ``skills_and_questions`` and ``governed_data`` (the shipped
notebooks, their scripted models, the harness kernel), Run All, then Run All
again in the same kernel, as a person does. After each pass a probe cell
appended to the notebook prints the session's handles and conversation
length; the page gives each run's answer and token count. Neither pass may
leave an error, and the second must equal the first: same handles, same
conversation length, same answers, same tokens per run. Screenshots of both
passes go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from typing import Any

import pytest

from browser_lab import lab, lab_shared, tree_url  # noqa: F401 - the fixtures this module's tests use
from test_browser import ARTIFACTS, ROOT

pytestmark = pytest.mark.browser

NOTEBOOKS = ("quickstart", "skills_and_questions", "governed_data")
PASS_TIMEOUT_S = 300
"""A pass of the longest of these notebooks takes about a minute here; a slow shared CI box gets more."""
PROBE = ("import json as _probe_json\n"
         "_probe = get_ipython().magics_manager.registry['AgentMagics']\n"
         "print('PROBE ' + _probe_json.dumps({'handles': sorted(_probe.session.cache.names()),\n"
         "                                    'messages': len(_probe.session.harness.messages)}))")
CELLS_JS = """() => {
  const model = window.jupyterapp.shell.currentWidget.content.model;
  const cells = [];
  for (let i = 0; i < model.cells.length; i++) {
    const cell = model.cells.get(i);
    if (cell.type !== 'code') continue;
    const outputs = cell.outputs.toJSON();
    cells.push({
      count: cell.executionCount,
      errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
      stderr: outputs.filter(o => o.output_type === 'stream' && o.name === 'stderr').map(o => o.text).join(''),
      stdout: outputs.filter(o => o.output_type === 'stream' && o.name === 'stdout').map(o => o.text).join(''),
    });
  }
  return cells;
}"""
"""Each code cell's execution count, errors and streams, from the notebook model."""


def _prepared(name: str) -> dict[str, Any]:
    notebook = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    notebook["cells"].append({"cell_type": "code", "metadata": {}, "source": PROBE, "outputs": [],
                              "execution_count": None})
    return notebook


def _run_all(page: Any, after: int) -> list[dict[str, Any]]:
    """Run All; wait until every code cell has run (counts above ``after``); the cells' states."""
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    deadline = time.monotonic() + PASS_TIMEOUT_S
    while True:
        cells = page.evaluate(CELLS_JS)
        errors = [e for c in cells for e in c["errors"]]
        if errors:
            return cells  # later cells are aborted: the caller reports the error
        if all(c["count"] is not None and c["count"] > after for c in cells):
            return cells
        if time.monotonic() > deadline:
            pytest.fail(f"Run All did not finish in {PASS_TIMEOUT_S} s: {[c['count'] for c in cells]}")
        time.sleep(1.0)


def _tokens(footer: str) -> str:
    """A run's token count from its footer ("7,209 tokens"); the footer itself when it names none."""
    found = re.search(r"([\d,]+) tokens", footer)
    return found.group(1) if found else footer


def _pass_result(page: Any, cells: list[dict[str, Any]]) -> dict[str, Any]:
    probe = next(line for line in cells[-1]["stdout"].splitlines() if line.startswith("PROBE "))
    footers = page.locator(".agent-final .agent-footer").all_text_contents()
    return {
        **json.loads(probe.removeprefix("PROBE ")),
        "answers": page.locator(".agent-final .agent-answer").all_text_contents(),
        "tokens": [_tokens(f) for f in footers],
        "errors": [e for c in cells for e in c["errors"]],
        "stderr": [c["stderr"] for c in cells if c["stderr"].strip()],
    }


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_run_all_twice_leaves_what_run_all_once_left(lab, name: str) -> None:
    url, browser, root = lab({f"{name}.ipynb": _prepared(name)})
    shutil.copytree(ROOT / "notebooks" / "scripts", root / "scripts")
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1200})
        page.goto(tree_url(url, root / f"{name}.ipynb"))
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                               ".status === 'idle'", timeout=PASS_TIMEOUT_S * 1000)
        passes = []
        after = 0
        for number in (1, 2):
            started = time.monotonic()
            cells = _run_all(page, after)
            passes.append(_pass_result(page, cells))
            passes[-1]["seconds"] = round(time.monotonic() - started, 1)
            after = max(c["count"] or 0 for c in cells)
            page.evaluate("() => { const f = document.querySelector('.agent-final');"
                          " if (f) f.scrollIntoView({block: 'start'}); }")
            page.screenshot(path=str(ARTIFACTS / f"jupyterlab-run-all-{name}-pass{number}.png"), full_page=False)
        (ARTIFACTS / f"jupyterlab-run-all-{name}.json").write_text(json.dumps(passes, indent=1))
    finally:
        browser.close()
    first, second = passes
    assert first["errors"] == [] and second["errors"] == [], (first["errors"], second["errors"])
    assert first["answers"], "the notebook's agent cells answered"
    for key in ("handles", "messages", "answers", "tokens", "stderr"):
        assert second[key] == first[key], f"{key}: pass 1 {first[key]!r}, pass 2 {second[key]!r}"
