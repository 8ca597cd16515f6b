"""One JupyterLab server and one headless Chromium per browser test module; each test its own folder and pages.

Starting a JupyterLab server (~2 s of CPU) and a Chromium with its Playwright driver (~1 s) for every test cost
more than many of the tests' own checks. The ``lab`` fixture now gives each test:

- its own folder under the module's server root (its notebooks, scripts and what its kernel writes: a kernel
  starts in its notebook's folder), opened through its own JupyterLab workspace (:func:`tree_url`), so no tab
  of an earlier test is restored into its page;
- its own browser contexts (:class:`TestBrowser`: a context is a fresh profile, as a new browser was: no
  cookies, storage, cache or permissions carried over), closed when the test ends;
- its kernels shut down when it ends (the server's sessions under its folder), so no later test shares a kernel,
  a launcher or a worker with it.

A server or browser that died is started again for the next test. Needs Debian's ``chromium``
(``scripts/system-deps.sh`` installs it).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

SERVER_START_S = 60
"""JupyterLab usually answers within a few seconds; a slow shared CI box gets more."""
SERVER_STOP_S = 15
"""A server asked to stop (SIGTERM: it shuts its kernels down) is killed after this long."""
REQUEST_TIMEOUT_S = 30
"""A REST call to the server (listing or ending a test's sessions)."""
PAGE_CONFIG = {"buildCheck": False, "buildAvailable": False}
"""The server's page config (``labconfig/page_config.json`` on its ``JUPYTER_CONFIG_PATH``): no check, at each
page load, whether the installed extensions need a JupyterLab build (it ran yarn, npm and node, ~0.6 s of CPU a
page) and no build button. What a page shows and runs is the same."""
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_url(url: str, path: Path) -> str:
    """The page that opens notebook ``path`` (in a test's folder) in that folder's own workspace: a new
    workspace starts with no tab open, where the server's default one would restore an earlier test's."""
    folder = path.parent.name
    return f"{url}/lab/workspaces/{folder}/tree/{urllib.parse.quote(folder)}/{urllib.parse.quote(path.name)}"


class LabServer:
    """A JupyterLab server on ``base``'s ``notebooks`` folder (news, update and build checks off, no token, no
    ``*_API_KEY`` in its or its kernels' environment), in its own process group; :meth:`stop` ends it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "notebooks"
        self.root.mkdir(exist_ok=True)
        settings = base / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                                "checkForUpdates": False}))
        labconfig = base / "config" / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        (labconfig / "page_config.json").write_text(json.dumps(PAGE_CONFIG))
        self.log_path = base / "lab.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        port = _free_port()
        env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(self.base / "settings"),
               "JUPYTERLAB_WORKSPACES_DIR": str(self.base / "workspaces"),
               "JUPYTER_CONFIG_PATH": os.pathsep.join(filter(None, [str(self.base / "config"),
                                                                    os.environ.get("JUPYTER_CONFIG_PATH")]))}
        env = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                 "--allow-root", "--IdentityProvider.token=", "--ServerApp.password=",
                 f"--ServerApp.root_dir={self.root}", "--LabApp.expose_app_in_browser=True"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/api/status", timeout=2)
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    pytest.fail(f"JupyterLab did not start:\n{self.log_path.read_text()[-3000:]}")
                time.sleep(0.3)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _request(self, method: str, path: str) -> Any:
        """A REST call; a call that changes something carries the ``_xsrf`` cookie the server set and its value
        as ``X-XSRFToken``, as JupyterLab's own requests do (the server refuses it otherwise)."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        headers = {}
        if method != "GET":
            opener.open(f"{self.url}/lab", timeout=REQUEST_TIMEOUT_S).close()
            headers = {"X-XSRFToken": next(c.value for c in jar if c.name == "_xsrf")}
        request = urllib.request.Request(f"{self.url}{path}", method=method, headers=headers)
        with opener.open(request, timeout=REQUEST_TIMEOUT_S) as reply:
            body = reply.read()
        return json.loads(body) if body else None

    def end_sessions_under(self, folder: str) -> None:
        """Shut down the kernel of every session whose notebook is in ``folder`` (the server waits for each)."""
        for session in self._request("GET", "/api/sessions"):
            if session.get("path", "").startswith(f"{folder}/"):
                self._request("DELETE", f"/api/sessions/{session['id']}")

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=SERVER_STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is gone already (a server that died, and its kernels)
            pass
        self.proc.wait(timeout=SERVER_STOP_S)
        self.proc = None


class TestBrowser:
    """One test's view of the module's Chromium: :meth:`new_page` and :meth:`new_context` open fresh contexts
    (each a new profile, as a new browser was); :meth:`close` closes them all (the ``lab`` fixture does, after the
    test)."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, browser: Any) -> None:
        self._browser = browser
        self._contexts: list[Any] = []

    def new_context(self, **options: Any) -> Any:
        context = self._browser.new_context(**options)
        self._contexts.append(context)
        return context

    def new_page(self, **options: Any) -> Any:
        """A page in a new context made with ``options`` (``viewport``...), as ``Browser.new_page`` does."""
        return self.new_context(**options).new_page()

    def close(self) -> None:
        while self._contexts:
            self._contexts.pop().close()


class _Shared:
    """The module's server and browser, each started on first use and again if it died."""

    def __init__(self, base: Path, chromium: str) -> None:
        self.server = LabServer(base)
        self.chromium = chromium
        self._playwright: Any = None
        self._browser: Any = None
        self._tests = 0

    def lab_server(self) -> LabServer:
        if not self.server.alive():
            self.server.stop()  # a server that died: reaped (a no-op before the first start)
            self.server.start()
        return self.server

    def browser(self) -> Any:
        if self._playwright is None:
            from playwright.sync_api import sync_playwright

            self._playwright = sync_playwright().start()
        if self._browser is None or not self._browser.is_connected():
            self._browser = self._playwright.chromium.launch(executable_path=self.chromium, chromium_sandbox=False,
                                                             args=CHROMIUM_ARGS)
        return self._browser

    def folder(self, name: str) -> Path:
        self._tests += 1
        folder = self.server.root / f"t{self._tests:02d}-{name}"[:60]
        folder.mkdir()
        return folder

    def close(self) -> None:
        try:
            if self._browser is not None and self._browser.is_connected():
                self._browser.close()
            if self._playwright is not None:
                self._playwright.stop()
        finally:
            self.server.stop()


@pytest.fixture(scope="module")
def lab_shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Shared]:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    shared = _Shared(tmp_path_factory.mktemp("lab"), chromium)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def lab(lab_shared: _Shared, request: pytest.FixtureRequest) -> Iterator[Callable[[dict[str, Any]], tuple]]:
    """Factory: ``url, browser, root = lab({"name.ipynb": notebook_dict, "file": text})`` writes those files into
    this test's folder ``root`` on the module's running JupyterLab (``url``); open a notebook with
    :func:`tree_url`. ``browser`` is this test's :class:`TestBrowser`. Its pages and kernels end with the test."""
    made: list[tuple[Path, TestBrowser]] = []

    def start(files: dict[str, Any]) -> tuple[str, TestBrowser, Path]:
        server = lab_shared.lab_server()
        root = lab_shared.folder(request.node.originalname.removeprefix("test_"))
        for name, content in files.items():
            (root / name).write_text(content if isinstance(content, str) else json.dumps(content))
        browser = TestBrowser(lab_shared.browser())
        made.append((root, browser))
        return server.url, browser, root

    try:
        yield start
    finally:
        for root, browser in made:
            try:
                browser.close()
            finally:
                if lab_shared.server.alive():
                    lab_shared.server.end_sessions_under(root.name)
