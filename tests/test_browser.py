"""The extension in a real JupyterLab, driven in headless Chromium.

* The quickstart notebook: one output per agent cell (answer, chart and footer
  exactly once), the snapshot as a table, "what the model saw" one click away.
* A long tool call: the status line and the call's time tick while it runs; a
  MultiIndex pivot snapshot renders as a table with its hidden-columns note;
  an interrupt marks the running call interrupted and keeps what it printed;
  printed lines stream into the running call's section before the run ends.
* What an analyst notices: a pivot's column-axis name and dates as dates in its
  table, no second handle for a value saved and shown, a harness reminder that
  says what it is, ``%agent_vars`` text aligned left, ``%agent_docs`` counts in
  words and snippets without ``#`` headings.
* Hostile model text, tool output and data (``<script>``, ``<img onerror>``,
  ``javascript:`` links, external images pointed at a local server that counts
  requests): nothing runs and nothing loads, live, after saving and reloading
  the notebook, and in the HTML export.

Each module runs one JupyterLab and one Chromium; every test has its own folder, workspace, browser
contexts and kernels (``browser_lab.py``). Screenshots go to ``test-artifacts/``. Needs Debian's ``chromium``
(``scripts/system-deps.sh`` installs it).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from browser_lab import lab, lab_shared, tree_url  # noqa: F401 - the fixtures this module's tests use

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
RUN_TIMEOUT_MS = 90_000
"""Kernel start plus the offline run: seconds normally."""
KERNEL_IDLE_JS = (
    "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
    " && window.jupyterapp.shell.currentWidget.sessionContext"
    " && window.jupyterapp.shell.currentWidget.sessionContext.session"
    " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
    " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'"
)


def _notebook(*sources: str) -> dict[str, Any]:
    return {
        "cells": [{"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None}
                  for s in sources],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def _open_and_run_all(page: Any, url: str, notebook: Path) -> None:
    """Open ``notebook`` (in a test's folder on the server at ``url``), wait for its kernel, then Run All."""
    page.goto(tree_url(url, notebook))
    page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_TIMEOUT_MS)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # no waiting


def _visible_count(page: Any, selector: str) -> int:
    return page.evaluate(
        "(s) => [...document.querySelectorAll(s)].filter(e => e.offsetParent !== null || e.getClientRects().length)"
        ".length", selector)


# -- the quickstart ---------------------------------------------------------------------------------


def test_quickstart_settles_into_one_final_output_with_tables_and_the_model_text_one_click_away(lab) -> None:
    notebook = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    url, browser, root = lab({"quickstart.ipynb": notebook})
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1500})
        _open_and_run_all(page, url, root / "quickstart.ipynb")
        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_TIMEOUT_MS)

        assert page.locator(".agent-run-view").count() == 0, "the live view settled into the final form"
        assert page.locator(".agent-final").count() == 1
        assert page.locator(".agent-answer").count() == 1
        assert page.locator(".agent-footer").count() == 1
        assert page.locator("img.agent-chart").count() == 1, "the chart appears once"
        assert "West grew fastest" in page.locator(".agent-final .agent-answer").inner_text()
        assert "offline/quickstart" in page.locator(".agent-final .agent-footer").inner_text()
        chart = page.locator(".agent-final img.agent-chart")
        natural = chart.evaluate("img => [img.naturalWidth, img.getBoundingClientRect().width]")
        assert natural[1] <= natural[0] + 1, f"the chart is not stretched: {natural}"

        page.locator(".agent-final .agent-transcript > summary").click()
        tool = page.locator(".agent-final .agent-tool").first
        tool.locator(":scope > summary").click()
        table = page.locator(".agent-final .agent-snapshot-table").first
        table.wait_for(state="visible", timeout=10_000)
        assert "West" in table.inner_text() and "int64" in table.inner_text()
        visible_text = page.locator(".agent-final").inner_text()
        assert "Snapshot: {" not in visible_text, "the model's JSON is not shown by default"
        tool.locator(".agent-model-saw > summary").click()
        shown = tool.locator(".agent-model-text").inner_text()
        assert "Snapshot: {" in shown
        sent = [block["content"] for log in (root / "runs").glob("*.jsonl")
                for record in map(json.loads, log.read_text().splitlines()) if record.get("type") == "turn"
                for message in record["request"].get("messages_appended", [])
                for block in message.get("content", []) if block.get("type") == "tool_result"]
        assert shown in sent, "exactly the tool text the model received (from the run log)"

        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-quickstart.png"), full_page=False)
    finally:
        browser.close()


# -- a long tool call: ticking time, pivot table, interrupt ----------------------------------------

LONG_CALL = """\
import time, pandas as pd, numpy as np
rng = np.random.default_rng(0)
df = pd.DataFrame({"year": np.repeat([2022, 2023], 360), "q": np.tile(np.repeat(np.arange(1, 19), 20), 2),
                   "region": [f"r{i:02}" for i in range(20)] * 36, "v": rng.random(720) * 1000})
pivot = df.pivot_table(index=["year", "q"], columns="region", values="v")
for i in range(5):
    print(f"step {i}", flush=True)
    time.sleep(1)
save("pivot", pivot)
"""


def test_long_tool_call_ticks_then_settles_with_a_pivot_table_and_an_interrupt_keeps_the_section(lab) -> None:
    script = {"turns": [
        {"text": "Pivoting.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": LONG_CALL}}]},
        {"text": "The pivot is **ready**."},
    ]}
    sleep = {"turns": [
        {"text": "Sleeping.", "tool_calls": [{"name": "python_interpreter",
                                                "arguments": {"code": "import time\nprint('before', flush=True)\ntime.sleep(60)"}}]},
        {"text": "unreachable"},
    ]}  # a cell naming a script with -m plays it from its start: one script per cell
    nb = _notebook("%load_ext harness_magic", "%%agent -m scripted/long.json\nPivot the data.",
                   "%%agent -m scripted/sleep.json\nSleep.")
    url, browser, root = lab({"long.ipynb": nb, "long.json": json.dumps(script), "sleep.json": json.dumps(sleep)})
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        _open_and_run_all(page, url, root / "long.ipynb")
        status = page.locator(".agent-run-view .agent-status-line")
        page.wait_for_function(
            "() => { const s = document.querySelector('.agent-run-view .agent-status-line');"
            " return s && s.innerText.includes('running python_interpreter'); }", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.agent-run-view .agent-stdout')]"
            ".some(p => p.textContent.includes('step 1'))", timeout=RUN_TIMEOUT_MS)
        streamed = page.locator(".agent-run-view .agent-stdout").first.text_content()
        assert "step 0\nstep 1" in streamed and "step 4" not in streamed, streamed
        assert page.locator(".agent-final").count() == 0, "streamed lines show before the run ends"
        first = status.inner_text()
        title_first = page.locator(".agent-run-view .agent-tool .jupyter-widget-Collapse-header").first.inner_text()
        page.wait_for_function(  # the ticker's next redraw of the status line and the call's title
            "([status, title]) => { const s = document.querySelector('.agent-run-view .agent-status-line');"
            " const h = document.querySelector('.agent-run-view .agent-tool .jupyter-widget-Collapse-header');"
            " return s && h && s.innerText !== status && h.innerText !== title; }",
            arg=[first, title_first], timeout=RUN_TIMEOUT_MS)
        second = status.inner_text()
        title_second = page.locator(".agent-run-view .agent-tool .jupyter-widget-Collapse-header").first.inner_text()
        assert first != second and "running python_interpreter" in second, (first, second)
        assert title_first != title_second, (title_first, title_second)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-long-call-running.png"), full_page=False)

        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        assert page.locator(".agent-final").count() == 1 and page.locator(".agent-answer").count() == 1
        page.locator(".agent-final .agent-transcript > summary").click()
        page.locator(".agent-final .agent-tool > summary").first.click()
        table = page.locator(".agent-final .agent-snapshot-table").first
        table.wait_for(state="visible", timeout=10_000)
        text = table.inner_text()
        assert "year" in text and "2022" in text and "[2022, 1]" not in text and "float64" in text
        notes = page.locator(".agent-final .agent-snapshot-notes").first.inner_text()
        assert "+8 more columns" in notes and "+31 more rows" in notes
        assert "step 4" in page.locator(".agent-final .agent-result").first.inner_text()
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-pivot-table.png"), full_page=False)

        page.wait_for_function(
            "() => [...document.querySelectorAll('.agent-run-view .agent-status-line')]"
            ".some(s => s.innerText.includes('running python_interpreter'))", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(  # the call printed: it is inside its 60 s sleep
            "() => [...document.querySelectorAll('.agent-run-view .agent-stdout')]"
            ".some(p => p.textContent.includes('before'))", timeout=RUN_TIMEOUT_MS)
        page.evaluate("window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.agent-final .agent-tool > summary')]"
            ".some(s => s.textContent.includes('interrupted'))", timeout=RUN_TIMEOUT_MS)
        final = page.locator(".agent-final").last
        assert "interrupted" in final.locator(".agent-status").inner_text()
        final.locator(".agent-transcript > summary").click()
        final.locator(".agent-tool > summary").first.click()
        assert "■ python_interpreter" in final.locator(".agent-tool > summary").first.inner_text()
        assert "before" in final.locator(".agent-stdout").first.inner_text(), "the partial output is kept"
        page.evaluate("[...document.querySelectorAll('.agent-final')].pop().scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-interrupted.png"), full_page=False)
    finally:
        try:
            page.screenshot(path=str(ARTIFACTS / "jupyterlab-long-call-last.png"), full_page=False)
        finally:
            browser.close()


# -- what an analyst notices (issue 27 point 7) -------------------------------------------------------

ANALYST_CALL = """\
import pandas as pd
daily = pd.DataFrame({"region": ["eu", "us", "eu"], "day": pd.to_datetime(["2023-01-01", "2023-01-01", "2023-01-02"]),
                      "units": [1, 2, 3]}).pivot_table(index="day", columns="region", values="units", aggfunc="sum")
save("daily", daily)
daily
"""


def test_an_analysts_tables_dates_handles_reminders_and_docs_read_naturally(lab) -> None:
    script = {"turns": [
        {"text": "Pivoting.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": ANALYST_CALL}}]},
        {"text": "Units per day and region are in `daily`."},
    ]}
    setup = ("%load_ext harness_magic\n%config AgentMagics.max_turns = 2\n"
             "%config AgentMagics.connectors = [{'type': 'docs', 'roots': ['docs']}]")
    nb = _notebook(setup, "%%agent -m scripted/analyst.json\nUnits per day by region.", "%agent_vars",
                   "%agent_docs", "%agent_docs refunds approved")
    url, browser, root = lab({"analyst.ipynb": nb, "analyst.json": json.dumps(script)})
    (root / "docs").mkdir()
    (root / "docs" / "refunds.md").write_text("# Refunds\n\nRefunds are approved by the finance team within 5 days.\n")
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        _open_and_run_all(page, url, root / "analyst.ipynb")
        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_TIMEOUT_MS)
        page.wait_for_selector("table.agent-vars", timeout=RUN_TIMEOUT_MS)
        page.locator(".agent-final .agent-transcript > summary").click()
        page.locator(".agent-final .agent-tool > summary").first.click()
        table = page.locator(".agent-final .agent-snapshot-table").first
        table.wait_for(state="visible", timeout=10_000)
        assert page.locator(".agent-final .agent-snapshot-table").count() == 1, "one handle, one table"
        assert table.locator("th.agent-axis-name").first.inner_text().strip() == "region"
        assert table.locator("tr.agent-index-names").inner_text().strip() == "day"
        text = table.inner_text()
        assert "2023-01-01" in text and "T00:00:00" not in text and "00:00" not in text
        reminder = page.locator(".agent-final .agent-reminder > summary")
        assert reminder.count() == 1
        assert reminder.inner_text().startswith("harness note to the model: This is the final turn (2/2)")
        reminder.click()
        assert "neither you nor the model wrote it" in page.locator(".agent-reminder-why").inner_text()

        cells = page.locator("table.agent-vars tbody tr").first.locator("td")
        aligned = cells.evaluate_all("tds => tds.map(td => [td.innerText, getComputedStyle(td).textAlign])")
        assert aligned[0] == ["daily", "left"] and aligned[1] == ["dataframe", "left"], aligned
        assert ["1", "right"] in aligned, aligned  # the turn: a number
        name_header = page.locator("table.agent-vars thead th").first
        assert name_header.evaluate("th => getComputedStyle(th).textAlign") == "left"
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        listing = next(o for o in outputs if "docs (" in o)
        assert "docs (1 file, 1 chunk)" in listing and "1 chunks" not in listing, listing
        found = next(o for o in outputs if "Search: refunds approved" in o)
        assert "Refunds are approved by the finance team" in found and "# Refunds" not in found, found
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-analyst-polish.png"), full_page=False)
    finally:
        browser.close()


# -- the copy button of each call ----------------------------------------------------------------------

COPY_CALL = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(1)\ncopied_total = sum(range(10))\nprint('copied total', copied_total)"


def test_each_calls_copy_button_copies_its_code_live_and_after_settling_and_it_runs_in_the_notebook(lab) -> None:
    script = {"turns": [
        {"text": "Adding up.", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": COPY_CALL}}]},
        {"text": "The total is 45."},
    ]}
    forged = ('<button class="agent-copy-code" data-agent-call="forged:key">copy code</button>'
              '<button class="agent-copy-code" data-agent-call="">copy code</button>')
    nb = _notebook("%load_ext harness_magic", "%%agent -m scripted/copy.json\nAdd up.",
                   f"from IPython.display import HTML\nHTML({forged!r})")
    url, browser, root = lab({"copy.ipynb": nb, "copy.json": json.dumps(script)})
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 1400})
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
        page = context.new_page()
        _open_and_run_all(page, url, root / "copy.ipynb")
        live = page.locator(".agent-run-view button.agent-copy-code").first
        live.wait_for(state="visible", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.agent-run-view .agent-stdout')]"
            ".some(p => p.textContent.includes('tick 0'))", timeout=RUN_TIMEOUT_MS)
        assert page.locator(".agent-final").count() == 0, "clicked while the kernel is busy with the run"
        live.click()
        page.wait_for_function("() => [...document.querySelectorAll('.agent-run-view button.agent-copy-code')]"
                               ".some(b => b.textContent.includes('copied'))", timeout=5_000)
        copied_live = page.evaluate("navigator.clipboard.readText()")
        assert copied_live.startswith("# agent run ") and ", turn 1: python_interpreter\n" in copied_live
        assert copied_live.endswith(COPY_CALL + "\n"), copied_live
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-copy-live.png"), full_page=False)

        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_TIMEOUT_MS)
        page.evaluate("navigator.clipboard.writeText('emptied')")
        page.locator(".agent-final .agent-transcript > summary").click()
        page.locator(".agent-final .agent-tool > summary").first.click()
        settled = page.locator(".agent-final button.agent-copy-code").first
        settled.wait_for(state="visible", timeout=10_000)
        settled.click()
        page.wait_for_function("() => [...document.querySelectorAll('.agent-final button.agent-copy-code')]"
                               ".some(b => b.textContent.includes('copied'))", timeout=5_000)
        assert page.evaluate("navigator.clipboard.readText()") == copied_live, "the settled button copies the same"
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-copy-settled.png"), full_page=False)

        forged_buttons = ("button.agent-copy-code[data-agent-call='forged:key'], "
                          "button.agent-copy-code[data-agent-call='']")
        assert page.locator(forged_buttons).count() == 2 and _visible_count(page, forged_buttons) == 0, \
            "buttons naming no call of this session stay hidden"
        page.evaluate(f"document.querySelectorAll({forged_buttons!r}).forEach(b => b.click())")
        assert page.evaluate("navigator.clipboard.readText()") == copied_live, "a forged key copies nothing"

        # paste into a new cell below and run it: the agent's code runs in the notebook's own namespace
        page.evaluate("window.jupyterapp.commands.execute('notebook:insert-cell-below')")
        page.evaluate("window.jupyterapp.commands.execute('notebook:enter-edit-mode')")
        page.keyboard.press("Control+V")
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(o => o.innerText.includes('copied total 45') && !o.closest('.agent-final')"
            " && !o.querySelector('.agent-run-view'))", timeout=RUN_TIMEOUT_MS)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-copy-pasted.png"), full_page=False)

        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function(
            "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
        saved = json.loads((root / "copy.ipynb").read_text())
        final = next("".join(o["data"]["text/html"]) for c in saved["cells"] for o in c.get("outputs", [])
                     if "agent-final" in "".join(o.get("data", {}).get("text/html", "")))
        assert 'class="agent-copy-code"' in final and " hidden " in final, "the saved fallback keeps it hidden"
        assert "<script" not in final and "onclick" not in final.lower(), "and script-free"
        static = context.new_page()
        static.set_content(final)
        assert _visible_count(static, "button.agent-copy-code") == 0, "hidden where no notebook runs it"

        # a reloaded page on the same kernel gets the clipboard widget back: the buttons work again
        page.evaluate("navigator.clipboard.writeText('emptied')")
        page.reload()
        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        page.evaluate("document.querySelectorAll('.agent-final details').forEach(d => d.open = true)")
        again = page.locator(".agent-final button.agent-copy-code").first
        again.wait_for(state="visible", timeout=30_000)
        again.click()
        page.wait_for_function("() => [...document.querySelectorAll('.agent-final button.agent-copy-code')]"
                               ".some(b => b.textContent.includes('copied'))", timeout=5_000)
        assert page.evaluate("navigator.clipboard.readText()") == copied_live
    finally:
        browser.close()


# -- an approval: the status line says so while the prompt is open ----------------------------------

APPROVAL_SETUP = """\
%load_ext harness_magic
from harness_magic.core.execution.connectors import Connector
from harness_magic.notebook.extension import agent_session
store = Connector("store", "A store that keeps rows.")
kept = []

@store.tool(safety="write")
def append(row: str) -> str:
    \"\"\"Append a row to the store.\"\"\"
    kept.append(row)
    return f"appended {row}"

agent_session().add_connector(store)"""


def test_a_write_waiting_for_approval_shows_on_the_status_line_is_approved_by_a_click_and_its_wait_apart(lab) -> None:
    script = {"turns": [
        {"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "store"}}]},
        {"text": "Appending.", "tool_calls": [{"name": "store__append", "arguments": {"row": "r1"}}]},
        {"text": "Appended."},
    ]}
    nb = _notebook(APPROVAL_SETUP, "%%agent -m scripted/approve.json\nAppend r1.", "print('kept', kept)")
    url, browser, root = lab({"approve.ipynb": nb, "approve.json": json.dumps(script)})
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        _open_and_run_all(page, url, root / "approve.ipynb")
        approve = page.locator(".agent-run-view .agent-prompt-approval .agent-prompt-approve").first
        approve.wait_for(state="visible", timeout=RUN_TIMEOUT_MS)
        status = page.locator(".agent-run-view .agent-status-line")
        assert "waiting for approval: store__append" in status.inner_text()
        title = page.locator(".agent-run-view .agent-tool .jupyter-widget-Collapse-header").last
        page.wait_for_function(
            "() => [...document.querySelectorAll('.agent-run-view .agent-tool .jupyter-widget-Collapse-header')]"
            ".some(h => /waiting for approval [2-9]/.test(h.innerText))", timeout=10_000)
        assert "store__append" in title.inner_text()
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-approval-waiting.png"), full_page=False)
        # The tick rounds to whole seconds, so "2" means at least 1.5 s of waiting; the
        # pause makes the kernel's measured wait clearly longer than that.
        time.sleep(0.6)
        approve.click()
        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(o => o.innerText.includes(\"kept ['r1']\"))", timeout=RUN_TIMEOUT_MS)
        assert page.locator(".jp-Stdin-input").count() == 0, "never a stdin box"
        page.locator(".agent-final .agent-transcript > summary").click()
        summary = page.locator(".agent-final .agent-tool > summary").last.inner_text()
        assert "store__append" in summary and "approval wait" in summary, summary
        own = float(summary.split(" · ")[1].removesuffix(" s"))
        wait = float(summary.split("approval wait ")[1].split(" s")[0])
        assert wait >= 1.5 and own < 1.0, summary
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-approval-settled.png"), full_page=False)
    finally:
        browser.close()


# -- hostile text, output and data ------------------------------------------------------------------


class _CountingServer:
    """A local HTTP server that counts every request (an exfiltration target)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _payloads(port: int, where: str) -> str:
    leak = f"http://127.0.0.1:{port}/leak-{where}"
    return (f"<script>window.__xss='{where}-script'</script>"
            f"<img src=x onerror=\"window.__xss='{where}-onerror'\">"
            f"[click](javascript:window.__xss='{where}-link') ![img]({leak}-md) "
            f"<img src=\"{leak}-html\"> <iframe src=\"{leak}-frame\"></iframe>")


def test_hostile_text_output_and_data_run_nothing_and_load_nothing(lab) -> None:
    leaks = _CountingServer()
    try:
        model_text = _payloads(leaks.port, "model")
        printed = _payloads(leaks.port, "stdout")
        data = _payloads(leaks.port, "data")
        code = f"print({printed!r})\nsave('echo', evil.assign(more=[{data!r}]))"
        script = {"turns": [
            {"text": model_text, "tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
            {"text": "Answer: " + model_text},
        ]}
        setup = (f"%load_ext harness_magic\nimport pandas as pd\n"
                 f"evil = pd.DataFrame({{{data!r}: [{data!r}]}})")
        nb = _notebook(setup, f"%%agent --in evil -m scripted/xss.json\nShow {data}",
                       "%agent_export xss.html\n%agent_vars echo")
        url, browser, root = lab({"xss.ipynb": nb, "xss.json": json.dumps(script)})
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            _open_and_run_all(page, url, root / "xss.ipynb")
            page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
            page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_TIMEOUT_MS)
            page.wait_for_selector(".jp-OutputArea-output .agent-snapshot", state="attached", timeout=RUN_TIMEOUT_MS)
            _open_everything(page)
            _click_every_link(page)
            time.sleep(1)
            assert page.evaluate("window.__xss") is None and not dialogs
            assert leaks.hits == [], leaks.hits
            assert "window.__xss" in page.locator(".agent-final").inner_text(), "payloads show as text"
            page.screenshot(path=str(ARTIFACTS / "jupyterlab-xss-live.png"), full_page=False)

            page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
            page.wait_for_function(
                "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
            saved = json.loads((root / "xss.ipynb").read_text())
            mimes = {m for c in saved["cells"] for o in c.get("outputs", []) for m in o.get("data", {})}
            assert "text/markdown" not in mimes
            page.reload()
            page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
            _open_everything(page)
            _click_every_link(page)
            time.sleep(1)
            assert page.evaluate("window.__xss") is None and not dialogs
            assert leaks.hits == [], leaks.hits

            page.goto((root / "xss.html").as_uri())
            page.wait_for_selector(".agent-footer", timeout=30_000)
            _open_everything(page)
            _click_every_link(page)
            time.sleep(1)
            assert page.evaluate("window.__xss") is None and not dialogs
            assert leaks.hits == [], leaks.hits
            page.screenshot(path=str(ARTIFACTS / "html-export-xss.png"), full_page=False)
        finally:
            browser.close()
    finally:
        leaks.close()


def _open_everything(page: Any) -> None:
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")


def _click_every_link(page: Any) -> None:
    page.evaluate("document.querySelectorAll('.agent-final a, .agent-snapshot a, body > section a')"
                  ".forEach(a => { try { a.click(); } catch (e) {} })")


# -- a clarifying question: asked in the cell, answered in its text box ------------------------------


def test_a_question_is_shown_in_the_cell_and_answered_through_its_text_box_with_enter(lab) -> None:
    script = {"turns": [
        {"text": "", "tool_calls": [{"name": "ask_user", "arguments": {
            "question": "Which **week** start? <img src=x onerror=alert(1)>", "options": ["Monday", "Sunday"],
            "why": "weekly active users depend on it"}}]},
        {"text": "Using Monday-based weeks."},
    ]}
    nb = _notebook("%load_ext harness_magic\n%config AgentMagics.sandbox = 'inprocess'",
                   "%%agent -m scripted/ask.json\nWhy did weekly active users drop?", "print('after', _.status)")
    url, browser, root = lab({"ask.ipynb": nb, "ask.json": json.dumps(script)})
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1200})
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        _open_and_run_all(page, url, root / "ask.ipynb")
        prompt = page.locator(".agent-run-view .agent-prompt-text input").first
        prompt.wait_for(state="visible", timeout=RUN_TIMEOUT_MS)
        question = page.locator(".agent-question").first
        assert "Which week start?" in question.inner_text()
        assert page.locator(".agent-prompt .agent-prompt-option").all_inner_texts() == ["Monday", "Sunday"]
        assert question.locator("strong").inner_text() == "week" and question.locator("img").count() == 0
        page.wait_for_function(
            "() => [...document.querySelectorAll('.agent-run-view .agent-status-line')]"
            ".some(s => s.innerText.includes('waiting for your answer: Which'))", timeout=10_000)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.agent-run-view .agent-tool .jupyter-widget-Collapse-header')]"
            ".some(h => /ask_user.*waiting for your answer [1-9]/.test(h.innerText))", timeout=10_000)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-waiting.png"), full_page=False)
        prompt.fill("Monday")
        prompt.press("Enter")
        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(o => o.innerText.includes('after completed'))", timeout=RUN_TIMEOUT_MS)
        page.locator(".agent-final .agent-transcript > summary").click()
        summary = page.locator(".agent-final .agent-tool > summary").last.inner_text()
        assert "ask_user" in summary and "answer wait" in summary, summary
        page.locator(".agent-final .agent-tool > summary").last.click()
        assert "The user answered: Monday" in page.locator(".agent-final").inner_text()
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-question-answered.png"), full_page=False)
        assert dialogs == [], "nothing in the question ran"
    finally:
        browser.close()


def test_the_state_panel_shows_plan_question_assumption_verification_and_confidence_live_and_settled(lab) -> None:
    hostile = "<img src=x onerror=alert(1)>"
    script = {"turns": [
        {"text": "", "tool_calls": [{"name": "plan", "arguments": {
            "action": "add", "titles": ["Pick the week", f"Compare definitions {hostile}"]}}]},
        {"text": "", "tool_calls": [{"name": "ask_user", "arguments": {
            "question": "Which week counts as last week?", "options": ["Monday-based", "Sunday-based"]}}]},
        {"text": "", "tool_calls": [{"name": "remember", "arguments": {
            "kind": "assumption", "text": "active = at least one event in the Monday-based week"}}]},
        {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {
            "code": "import pandas as pd\nsave('summary', pd.DataFrame({'wau': [9200, 8460]}))"}}]},
        {"text": "", "tool_calls": [{"name": "plan", "arguments": {
            "action": "update", "item_id": 1, "status": "done", "note": "week 47"}}]},
        {"text": "Weekly active users fell 8% in week 47.\n\nConfidence: medium — one week of data\n"
                 f"Open questions:\n- Should bots count as active? {hostile}"},
    ]}
    nb = _notebook("%load_ext harness_magic\n%config AgentMagics.sandbox = 'inprocess'\n"
                   "from harness_magic.notebook.extension import agent_session\n"
                   "agent_session().verifier.require_columns(['region'], handles='summary')",
                   "%%agent -m scripted/state.json\nWhy did weekly active users drop 8% last week?",
                   "print('after', _.status)")
    url, browser, root = lab({"state.ipynb": nb, "state.json": json.dumps(script)})
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 1200})
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        _open_and_run_all(page, url, root / "state.ipynb")
        option = page.locator(".agent-run-view .agent-prompt-option", has_text="Monday-based").first
        option.wait_for(state="visible", timeout=RUN_TIMEOUT_MS)
        live = page.locator(".agent-run-view .agent-state").first
        live.wait_for(state="visible", timeout=10_000)
        text = live.inner_text()
        assert "Pick the week" in text and "waiting for you:" in text and "Which week counts" in text, text
        assert live.locator("img").count() == 0
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-state-live.png"), full_page=False)
        option.click()
        page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')]"
            ".some(o => o.innerText.includes('after completed'))", timeout=RUN_TIMEOUT_MS)
        panel = page.locator(".agent-final .agent-state")
        assert panel.count() == 1 and _visible_count(page, ".agent-final .agent-state") == 1
        settled = panel.inner_text()
        for part in ("Pick the week", "week 47", "Which week counts as last week? → Monday-based",
                     "active = at least one event in the Monday-based week", "failed require_columns(region)",
                     "missing columns", "medium — one week of data", "Should bots count as active?"):
            assert part in settled, (part, settled)
        assert panel.locator("img").count() == 0 and "<img src=x" in settled  # shown as text, inert
        answer = page.locator(".agent-final .agent-answer").inner_text()
        assert "fell 8% in week 47" in answer and "Confidence" not in answer, "the trailer shows once, above"
        order = page.evaluate("() => { const f = document.querySelector('.agent-final');"
                              " return [f.querySelector('.agent-state'), f.querySelector('.agent-transcript')]"
                              ".map(e => e.getBoundingClientRect().top); }")
        assert order[0] < order[1], "the state sits above the transcript"
        page.evaluate("document.querySelector('.agent-final').scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "jupyterlab-state-settled.png"), full_page=False)
        assert dialogs == [], "nothing in the state ran"
    finally:
        browser.close()
