"""Shared fixtures: a scripted OpenAI-compatible server and harness builders; the order files run in."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# As the Spark engine sets it (GRPC_FORK_SUPPORT), before any test imports gRPC: with gRPC's fork handlers on, a
# fork after a Spark Connect session in the same worker (a terminal test's pseudo-terminal) sometimes died before
# its exec.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import leftovers  # noqa: E402
from scripted_server import ScriptedServer  # noqa: E402
from spark_servers import QUICK_JVM_CELL, starts_local_spark  # noqa: E402

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "harness_magic"
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
"""Seconds each test file took in a recorded run (``pytest --record-file-seconds ...`` rewrites it): under
pytest-xdist the files are handed out longest first, so the long ones overlap from the start and the run ends
on short ones instead of one worker finishing a long file while the other idles."""
UNRECORDED_SECONDS_PER_TEST = 0.5
"""A file missing from :data:`FILE_SECONDS` (new since the recording) counts this long per test."""


def _file_of(nodeid: str) -> str:
    """The file part of a node id, as ``--dist loadfile`` groups tests (``notebooks/x.ipynb::Cell 0`` too)."""
    return nodeid.split("::", 1)[0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-file-seconds", action="store_true",
                     help=f"write each test file's total seconds (setup + call + teardown) to {FILE_SECONDS.name}")


def _compile_package() -> None:
    """Write the package's bytecode once, before any worker, kernel or sandbox process imports it. Where the
    environment sets ``PYTHONDONTWRITEBYTECODE`` (this machine does), a fresh clone has none and would never get
    any: each of the suite's hundreds of kernels, launchers and workers compiled every module it imports from
    source again (about 0.4 s of CPU per kernel that runs an agent cell). Up-to-date files are skipped."""
    import compileall

    compileall.compile_dir(str(PACKAGE), quiet=1)


def _compile_tests(config: pytest.Config) -> None:
    """Write the bytecode of this folder's modules once, in the process that starts the run, before any worker
    imports them: the test files and conftest as pytest's assertion rewriting caches them (a checked hash of the
    source), the helpers as Python does. With ``PYTHONDONTWRITEBYTECODE`` nobody else writes them, so every worker
    rewrote and compiled all 160 test files at collection, each run (about 5 s of a 12 s collection's CPU per
    worker). Where that rewriting is off (``--assert=plain``), only the helpers are compiled."""
    import compileall
    from fnmatch import fnmatch

    from _pytest.assertion import rewrite

    state = config.stash.get(rewrite.assertstate_key, None)
    patterns = [*config.getini("python_files"), "conftest.py"]
    for path in sorted(TESTS.glob("*.py")):
        if not any(fnmatch(path.name, pattern) for pattern in patterns):
            compileall.compile_file(str(path), quiet=1)
            continue
        pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
        if state is not None and rewrite._read_pyc(path, pyc) is None and rewrite.try_makedirs(pyc.parent):
            source_key, code = rewrite._rewrite_test(path, config)
            rewrite._write_pyc(state, code, source_key, pyc)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        _compile_package()
        _compile_tests(config)
    # xdist's own order (files with the most tests first) ran a 4-test file of 20 kernels last; the suite orders
    # its files itself (pytest_collection_modifyitems) and xdist keeps that order.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.pluginmanager.register(_QuickJvmForNotebooks(), "quick_jvm_for_notebooks")
    leftovers.register(config)  # the run's own TMPDIR, checked at its end (tests/leftovers.py)
    if config.getoption("--record-file-seconds") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_FileSecondsRecorder(), "file_seconds_recorder")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the longest files first (a stable sort: each file's tests keep their order and stay
    together). Every worker sorts the same collection the same way, as xdist requires. A plain run keeps the
    collection's order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    recorded = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}
    tests = Counter(_file_of(item.nodeid) for item in items)

    def seconds(path: str) -> float:
        return recorded.get(path, tests[path] * UNRECORDED_SECONDS_PER_TEST)

    items.sort(key=lambda item: -seconds(_file_of(item.nodeid)))


QUICK_JVM_CELL_TIMEOUT_S = 60
"""The quick-JVM cell only imports a module and sets a tuple: past this the kernel is stuck."""


class _QuickJvmForNotebooks:
    """Registered as a plugin (not a hook of this file, which pytest calls only for items under ``tests/``), so
    that it sees nbval's notebook cells too when a run collects ``tests`` and ``notebooks`` together (``make test``)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        """A shipped notebook that nbval runs and that starts a local Spark server (:func:`starts_local_spark`)
        gets :data:`spark_servers.QUICK_JVM_CELL` in its kernel once that kernel has started, before its first
        cell runs (nbval starts a notebook's kernel in its first cell's setup); the notebook runs unchanged."""
        yield
        notebook = item.parent
        kernel = getattr(notebook, "kernel", None)
        if kernel is None or getattr(notebook, "quick_jvm_sent", False) or not hasattr(notebook, "nb"):
            return
        notebook.quick_jvm_sent = True  # type: ignore[attr-defined]  # nbval's notebook node: marked once
        if not starts_local_spark("".join(cell.source for cell in notebook.nb.cells if cell.cell_type == "code")):
            return
        reply = kernel.kc.execute_interactive(QUICK_JVM_CELL, store_history=False, output_hook=lambda message: None,
                                              timeout=QUICK_JVM_CELL_TIMEOUT_S)
        assert reply["content"]["status"] == "ok", f"the quick-JVM cell failed in {item.nodeid}: {reply['content']}"


class _FileSecondsRecorder:
    """Sums every test report's duration per file (the controller sees all workers' reports) and writes
    :data:`FILE_SECONDS` at the end of a run with no failure (a failed run's times are not the suite's)."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus != 0:
            return
        ranked = {path: round(total, 1) for path, total in self.seconds.most_common()}
        FILE_SECONDS.write_text(json.dumps(ranked, indent=0) + "\n")


@pytest.fixture(scope="session")
def run_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by every process of this test run: under pytest-xdist each worker's basetemp is a
    folder inside it (``pytest-N/popen-gw0``), so a heavy read-only build kept here (the dbt shop project,
    :func:`dbt_project.build_shop_project`, which takes a lock) is made once per run, not once per worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="module", autouse=True)
def interrupt_handler_stays_as_found():
    """A test module leaves this process's SIGINT handler as it found it: the stop button's tests interrupt the
    main thread (``_thread.interrupt_main``, ``SIGINT``), which does nothing once the handler is ``SIG_IGN`` or
    ``SIG_DFL``, so a module that leaked one made every later interrupt test on its worker fail."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)  # the next modules get Python's handler back
    assert after is before, f"this module left SIGINT's handler changed: {before!r} -> {after!r}"


def _provider_keys() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name.endswith("_API_KEY")}


@pytest.fixture(scope="module", autouse=True)
def provider_keys_stay_as_found():
    """A test module leaves this process's provider keys (``*_API_KEY``) as it found them: every kernel or child
    a later module starts inherits them, and under pytest-xdist which module runs later on a worker changes
    from run to run (a leaked key once turned a "no key" test into a network error). Set them with monkeypatch."""
    before = _provider_keys()
    yield
    after = _provider_keys()
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"this module left provider keys changed: {changed} (set them with monkeypatch)"


@pytest.fixture
def server():
    """A running scripted server; set ``server.replies`` before the run."""
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def http_adapter(server):
    """Factory: a ProviderAdapter talking litellm over HTTP to ``server``."""
    from harness_magic import ProviderAdapter

    def make(stream: bool = True, **options: Any) -> ProviderAdapter:
        options.setdefault("sleep", lambda s: None)
        return ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", stream=stream,
                               **options)

    return make
