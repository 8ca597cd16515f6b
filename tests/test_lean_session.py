"""A session holds only what it uses (issue 35, a lean session): the kernel after a sandboxed cell, the launcher
and the worker it forks.

- The kernel, after one ``%%agent`` cell over HTTP (the scripted server, the path users take) whose sandboxed
  call prints a number, has imported none of the heavy packages that cell does not use: the data stack, the
  engines' drivers, charting, the MCP SDK; with a provider host, not litellm and its HTTP stack either.
- The launcher preloads :data:`~harness_magic.core.execution.sandbox.launcher.PRELOADED` and nothing else
  (matplotlib is imported by the worker at its first chart, and warmed in the launcher after it for every later
  worker), and freezes what it holds out of the garbage
  collector before it forks, so a worker's collections never copy the launcher's pages; a worker can neither
  unfreeze nor import anything into the launcher that the next worker would inherit.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness_magic.core.config import AgentConfig
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement
from harness_magic.core.execution.sandbox.launcher import PRELOADED, WARM_UPS, warm_up
from harness_magic.core.execution.sandbox.launcher_client import CHART_PRELOADS, LauncherClient, SandboxUnavailableError
from kernel_helpers import agent_kernel
from scripted_server import ScriptedServer

UNUSED_BY_A_PRINTING_CELL = (
    "pandas", "numpy", "pyarrow", "matplotlib", "duckdb", "pyspark", "psycopg", "psycopg2", "sqlalchemy",
    "polars", "scipy", "sklearn", "mcp", "starlette", "uvicorn", "fastapi", "sentence_transformers",
    "torch", "pypdf", "fitz", "docx", "openpyxl",
)
"""Top-level packages a cell whose only call prints a number has no use for in the kernel."""

LITELLM_STACK = ("litellm", "openai", "tiktoken", "tokenizers", "aiohttp", "httpx", "httpcore", "jinja2",
                 "pydantic", "requests", "rich", "click")
"""litellm and what it imports at its import or its first call (httpx imports its command line's rich and click
when they are installed): the provider host's, never the kernel's."""

PRINTED = 499500
CODE = "x = sum(range(1000)); print(x)"

needs_confinement = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")


def _reply(body: dict) -> dict:
    """One sandboxed call, then an answer quoting what the call printed."""
    last = (body.get("messages") or [{}])[-1]
    if last.get("role") == "tool":
        return {"text": f"The sum is {PRINTED}."}
    return {"text": "", "tool_calls": [{"name": "python_interpreter", "arguments": {"code": CODE}}]}


@pytest.fixture(scope="module")
def after_one_cell(tmp_path_factory):
    """The kernel's top-level modules after one cell, the cell, and what the model was sent."""
    with ScriptedServer(reply_for=_reply) as server, \
            agent_kernel(tmp_path_factory.mktemp("lean"), run_dir="runs", live="off",
                         api_base=server.api_base) as kernel:
        cell = kernel.run("%%agent -m openai/lean\nAdd up the first thousand numbers.")
        modules = set(kernel.value("sorted({m.split('.')[0] for m in __import__('sys').modules})"))
        yield modules, cell, server.requests


def test_the_cell_ran_its_call_in_the_sandbox_and_printed_the_number(after_one_cell):
    _, cell, requests = after_one_cell
    assert cell.ok, (cell.errors, cell.stderr)
    tool_results = [m for m in requests[-1]["messages"] if m.get("role") == "tool"]
    assert len(tool_results) == 1 and str(PRINTED) in json.dumps(tool_results[0]["content"]), tool_results
    assert str(PRINTED) in json.dumps(cell.outputs)


def test_the_kernel_imported_no_heavy_package_the_cell_did_not_use(after_one_cell):
    modules, _, _ = after_one_cell
    assert sorted(modules & set(UNUSED_BY_A_PRINTING_CELL)) == []


def test_with_a_provider_host_the_kernel_never_imports_litellm_or_its_http_stack(after_one_cell):
    if "provider_host" not in {field.name for field in dataclasses.fields(AgentConfig)}:
        pytest.skip("this checkout runs litellm in the kernel (no provider_host setting yet)")
    if not AgentConfig().provider_host:
        pytest.skip("provider_host is off by default: litellm is the kernel's by design")
    modules, _, _ = after_one_cell
    assert sorted(modules & set(LITELLM_STACK)) == []


INSPECT = ("import gc, json, sys\n"
           "print(json.dumps([sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'matplotlib') if m in sys.modules), "
           "gc.get_freeze_count(), len(gc.get_objects())]))")
"""What a worker inherited: the preloaded modules, the frozen objects, the objects the collector tracks."""

FROZEN_AT_LEAST = 20_000
"""The launcher's preloaded modules are some 60,000 objects, every one frozen; a fresh worker has made about a
hundred of its own by its first call. Unfrozen, the collector would track (visit, and copy) all of them."""


def _inherited(backend: SandboxedInterpreter) -> tuple[list[str], int, int]:
    result = backend.execute(INSPECT, {}, [])
    assert result.error is None, result.error
    preloaded, frozen, tracked = json.loads(result.stdout)
    return preloaded, frozen, tracked


@pytest.fixture
def private_launcher():
    """A launcher of this test's own as the process's shared one: what earlier tests' workers did to the shared
    launcher (a chart warms matplotlib in it for later workers) cannot reach this test, and the reverse."""
    saved = LauncherClient._shared
    LauncherClient._shared = launcher = LauncherClient()
    yield launcher
    LauncherClient._shared = saved
    launcher.close()


@pytest.fixture
def inspectable(private_launcher):
    """Workers whose code may import ``gc`` and ``sys`` (pre-check and audit hooks off, OS layers on), forked from
    a launcher of the test's own."""
    backends: list[SandboxedInterpreter] = []

    def start() -> SandboxedInterpreter:
        backends.append(SandboxedInterpreter(timeout=60.0, ast_precheck=False, audit_hooks=False))
        return backends[-1]

    yield start
    for backend in backends:
        backend.close()


@needs_confinement
def test_a_worker_starts_with_the_preloaded_stack_frozen_and_without_matplotlib(inspectable):
    preloaded, frozen, tracked = _inherited(inspectable())
    assert preloaded == sorted(PRELOADED)
    assert frozen >= FROZEN_AT_LEAST and tracked < frozen, (tracked, frozen)


@needs_confinement
def test_a_chart_imports_matplotlib_in_the_worker_at_first_use_and_comes_back(inspectable):
    backend = inspectable()
    result = backend.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.title('first')", {}, [])
    assert result.error is None, result.error
    assert len(result.charts) == 1
    assert "matplotlib" in _inherited(backend)[0]


@needs_confinement
def test_once_a_worker_drew_a_chart_the_launcher_warms_matplotlib_for_every_later_worker(inspectable,
                                                                                       private_launcher):
    """The first chart of a session pays matplotlib's import in its worker; the launcher then warms it (in the
    background: the call that drew does not wait), so the next cells' fresh workers start with it, frozen."""
    first = inspectable()
    assert _inherited(first)[0] == sorted(PRELOADED)
    drew = first.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])", {}, [])
    assert drew.error is None and len(drew.charts) == 1, drew.error
    assert sorted(private_launcher.preload([])) == sorted({*PRELOADED, *CHART_PRELOADS})  # after the background one
    assert private_launcher.preload_failure is None
    preloaded, frozen, tracked = _inherited(inspectable())
    assert preloaded == sorted({*PRELOADED, *CHART_PRELOADS}) and tracked < frozen, (tracked, frozen)
    assert private_launcher.preload_soon(CHART_PRELOADS) is None, "asked once per launcher"


@needs_confinement
def test_a_sessions_first_chart_prints_only_what_the_code_printed(private_launcher):
    """matplotlib imported by a worker with the friendly checks on cannot save its font list: its warning about
    that is our plumbing, never part of the output the model and the notebook see."""
    backend = SandboxedInterpreter(timeout=60.0)
    try:
        drew = backend.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nprint('drew')", {}, [])
    finally:
        backend.close()
    assert drew.error is None and len(drew.charts) == 1, drew.error
    assert drew.stdout == "drew\n"


@needs_confinement
def test_a_worker_that_imports_matplotlib_without_drawing_warms_nothing(inspectable, private_launcher):
    first = inspectable()
    quiet = first.execute("import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.close(fig)", {}, [])
    assert quiet.error is None and quiet.charts == [], quiet.error
    assert sorted(private_launcher.preload([])) == sorted(PRELOADED)
    assert _inherited(inspectable())[0] == sorted(PRELOADED)


def test_the_launcher_refuses_a_preload_it_does_not_know_by_name_and_keeps_serving(private_launcher):
    for names, named in ((["os; import socket"], "os; import socket"), (["numpy", "sklearn"], "sklearn"),
                         ("matplotlib", "a list of module names"), ([1], "a list of module names")):
        with pytest.raises(SandboxUnavailableError, match="refused a 'preload' request") as refused:
            private_launcher.request({"op": "preload", "modules": names})
        assert named in str(refused.value)
    assert private_launcher.alive() and private_launcher.broken is None
    assert sorted(private_launcher.preload([])) == sorted(PRELOADED), "nothing was imported"


@needs_confinement
def test_what_one_worker_does_to_its_collector_and_modules_never_reaches_the_next_worker(inspectable):
    """A worker that unfreezes, collects and imports matplotlib changes its own copy only: the next worker forked
    from the same launcher inherits the same frozen preloads and no matplotlib."""
    first = inspectable()
    hostile = first.execute("import gc, matplotlib.pyplot\ngc.unfreeze()\ngc.collect()\nprint(gc.get_freeze_count())",
                            {}, [])
    assert hostile.error is None and hostile.stdout.strip() == "0", (hostile.error, hostile.stdout)
    preloaded, frozen, tracked = _inherited(inspectable())
    assert preloaded == sorted(PRELOADED) and frozen >= FROZEN_AT_LEAST and tracked < frozen, (tracked, frozen)


@needs_confinement
def test_the_model_itself_cannot_reach_the_collector(tmp_path):
    """With the pre-check on (the default), ``gc`` is not importable: unfreezing is not the model's to try."""
    backend = SandboxedInterpreter(timeout=60.0)
    try:
        result = backend.execute("import gc\ngc.unfreeze()", {}, [])
    finally:
        backend.close()
    assert result.error is not None and "import of 'gc' is not available" in result.error


def test_a_preload_the_launcher_cannot_warm_is_refused_by_name_before_anything_is_imported():
    with pytest.raises(ValueError, match=r"cannot preload \['os', '../x'\]: the launcher preloads only \[") as raised:
        warm_up(["numpy", "os", "../x"])
    assert all(name in str(raised.value) for name in WARM_UPS)
    assert set(PRELOADED) <= set(WARM_UPS)
