"""The quickstart notebook in a real JupyterLab, driven in headless Chromium.

Asserts that the live widgets (tool-call sections, a snapshot table) and the
final answer render, and saves a screenshot to ``test-artifacts/``.
Needs Debian's ``chromium`` (``scripts/system-deps.sh`` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
SERVER_START_S = 60
"""JupyterLab usually answers within a few seconds; a slow shared CI box gets more."""
RUN_TIMEOUT_MS = 90_000
"""Kernel start plus the offline run: seconds normally."""
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path: Path):
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    notebook = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    root = tmp_path / "notebooks"
    root.mkdir()
    (root / "quickstart.ipynb").write_text(json.dumps(notebook))
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                            "checkForUpdates": False}))
    port = _free_port()
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    env = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--allow-root",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail(f"JupyterLab did not start:\n{(tmp_path / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield url, chromium
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def test_quickstart_renders_live_widgets_and_final_answer_in_jupyterlab(lab) -> None:
    from playwright.sync_api import sync_playwright

    url, chromium = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, chromium_sandbox=False, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1500})
            page.goto(f"{url}/lab/tree/quickstart.ipynb")
            page.wait_for_function(
                "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                " && window.jupyterapp.shell.currentWidget.sessionContext"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
                " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
                timeout=RUN_TIMEOUT_MS,
            )
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_selector(".agent-final .agent-footer", timeout=RUN_TIMEOUT_MS)
            page.wait_for_selector(".jupyter-widgets.agent-run-view", timeout=RUN_TIMEOUT_MS)

            tools = page.locator(".agent-run-view .agent-tool")
            assert tools.count() == 2
            titles = tools.locator(".jupyter-widget-Collapse-header").all_inner_texts()
            status = page.locator(".agent-status-line").inner_text()
            assert "turn 3/25" in status and "completed" in status

            tools.first.locator(".jupyter-widget-Collapse-header").first.click()
            snapshot = page.locator(".agent-run-view .agent-snapshot-table").first
            snapshot.wait_for(state="visible", timeout=10_000)
            assert "West" in snapshot.inner_text()

            answer = page.locator(".agent-final .agent-answer")
            assert "West grew fastest" in answer.inner_text()
            assert page.locator(".agent-final > img[alt=chart]").count() == 1
            assert "offline/quickstart" in page.locator(".agent-final .agent-footer").inner_text()
            assert any("python_interpreter" in t for t in titles), titles

            page.evaluate("document.querySelector('.agent-run-view').scrollIntoView({block: 'start'})")
            page.screenshot(path=str(ARTIFACTS / "jupyterlab-quickstart.png"), full_page=False)
        finally:
            browser.close()
