"""A session holds only what it uses (issue 35, a lean session): the kernel after a sandboxed cell, the launcher
and the worker it forks.

- The kernel, after one ``%%agent`` cell over HTTP (the scripted server, the path users take) whose sandboxed
  call prints a number, has imported none of the heavy packages that cell does not use: the data stack, the
  engines' drivers, charting, the MCP SDK; with a provider host, not litellm and its HTTP stack either. Its
  launcher has loaded none of the data stack's libraries either.
- The launcher preloads :data:`~harness_magic.core.execution.sandbox.launcher.PRELOADED` (nothing beyond the
  worker's own modules) and the system libraries wheels link against, so a confined worker imports numpy, pandas,
  pyarrow and matplotlib itself. The data stack is warmed in the launcher for every later worker once a worker
  reported importing it, or at once where the kernel holds pandas; matplotlib once a worker drew a chart.
- The launcher freezes what it holds out of the garbage collector before it forks, so a worker's collections never
  copy the launcher's pages; a worker can neither unfreeze nor import anything into the launcher that the next
  worker would inherit, and what it reports asks the launcher for nothing but the data stack.
- A worker whose call built something large gives the freed memory back once its reply is out (Arrow's pool the
  launcher kept at its warm-up, then glibc's heap: :class:`~harness_magic.core.confinement.heap.GrowthWatch`), and
  keeps working: frames still cross both ways. A call that allocated little pays nothing, and a ``pyarrow`` that
  model code planted in ``sys.modules`` is never called.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import time

import psutil
import pytest

from harness_magic.core.config import AgentConfig
from harness_magic.core.confinement.heap import GIVE_BACK_AFTER_PAGES, GrowthWatch
from harness_magic.core.execution.sandbox import SandboxedInterpreter, backend as sandbox_backend, probe_confinement
from harness_magic.core.execution.sandbox.launcher import DATA_STACK, PRELOADED, WARM_UPS, warm_up
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


DATA_LIBRARIES = ("/numpy/", "/pandas/", "/pyarrow/", "/matplotlib/")
"""Where the data stack's and matplotlib's extension modules and libraries lie: a process that loaded them maps
files under these."""

LAUNCHER_MODULE = "harness_magic.core.execution.sandbox.launcher"


def _mapped_data_libraries(pid: int) -> list[str]:
    """The data stack's library files process ``pid`` maps."""
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
    return sorted(path for path in paths if any(part in path for part in DATA_LIBRARIES))


def _launcher_of(kernel) -> psutil.Process:
    kernel_pid = kernel.km.provisioner.process.pid
    launchers = [child for child in psutil.Process(kernel_pid).children()
                 if LAUNCHER_MODULE in " ".join(child.cmdline())]
    assert len(launchers) == 1, launchers
    return launchers[0]


@pytest.fixture(scope="module")
def after_one_cell(tmp_path_factory):
    """The kernel's top-level modules after one cell, the cell, what the model was sent, and the data stack's
    libraries the session's launcher maps."""
    with ScriptedServer(reply_for=_reply) as server, \
            agent_kernel(tmp_path_factory.mktemp("lean"), run_dir="runs", live="off",
                         api_base=server.api_base) as kernel:
        cell = kernel.run("%%agent -m openai/lean\nAdd up the first thousand numbers.")
        modules = set(kernel.value("sorted({m.split('.')[0] for m in __import__('sys').modules})"))
        launcher_libraries = _mapped_data_libraries(_launcher_of(kernel).pid)
        yield modules, cell, server.requests, launcher_libraries


def test_the_cell_ran_its_call_in_the_sandbox_and_printed_the_number(after_one_cell):
    _, cell, requests, _ = after_one_cell
    assert cell.ok, (cell.errors, cell.stderr)
    tool_results = [m for m in requests[-1]["messages"] if m.get("role") == "tool"]
    assert len(tool_results) == 1 and str(PRINTED) in json.dumps(tool_results[0]["content"]), tool_results
    assert str(PRINTED) in json.dumps(cell.outputs)


def test_the_kernel_imported_no_heavy_package_the_cell_did_not_use(after_one_cell):
    modules, _, _, _ = after_one_cell
    assert sorted(modules & set(UNUSED_BY_A_PRINTING_CELL)) == []


def test_the_sessions_launcher_loaded_none_of_the_data_stack_for_a_cell_that_made_no_frame(after_one_cell):
    """numpy, pandas and pyarrow preloaded were about 78 MB of a lone session's launcher whether it made a frame
    or not: a session whose kernel holds no pandas and whose workers imported none starts without them."""
    _, cell, _, launcher_libraries = after_one_cell
    assert cell.ok, (cell.errors, cell.stderr)
    assert launcher_libraries == []


def test_with_a_provider_host_the_kernel_never_imports_litellm_or_its_http_stack(after_one_cell):
    if "provider_host" not in {field.name for field in dataclasses.fields(AgentConfig)}:
        pytest.skip("this checkout runs litellm in the kernel (no provider_host setting yet)")
    if not AgentConfig().provider_host:
        pytest.skip("provider_host is off by default: litellm is the kernel's by design")
    modules, _, _, _ = after_one_cell
    assert sorted(modules & set(LITELLM_STACK)) == []


INSPECT = ("import gc, json, sys\n"
           "names = [part[::-1] for part in ('ypmun', 'sadnap', 'worrayp', 'biltolptam')]\n"
           "print(json.dumps([sorted(m for m in names if m in sys.modules), "
           "gc.get_freeze_count(), len(gc.get_objects())]))")
"""What a worker inherited: the preloaded modules, the frozen objects, the objects the collector tracks. The names
are spelled backwards: code that names the data stack would have the launcher warm it before a worker's first
call (see ``test_a_cells_first_call_that_names_pandas_...``)."""

FROZEN_AT_LEAST = 10_000
"""A lean launcher holds some 18,000 objects (the standard library the worker uses and its own modules), the data
stack some 60,000 more, every one frozen; a fresh worker has made about a hundred of its own by its first call.
Unfrozen, the collector would track (visit, and copy) all of them."""

WARMED_WITHIN_S = 120.0
"""How long a test waits for the launcher's background warm-up (importing pandas on a loaded machine)."""

FRAME_CODE = ("import pandas as pd\n"
              "frame = pd.DataFrame({'group': [1, 2, 1, 2], 'amount': [1.0, 2.0, 3.0, 4.0]})\n"
              "print(frame.groupby('group')['amount'].sum().to_dict())")
FRAME_PRINTED = "{1: 4.0, 2: 6.0}"


def _inherited(backend: SandboxedInterpreter) -> tuple[list[str], int, int]:
    result = backend.execute(INSPECT, {}, [])
    assert result.error is None, result.error
    preloaded, frozen, tracked = json.loads(result.stdout)
    return preloaded, frozen, tracked


def _warm_once_asked(launcher: LauncherClient, expected: set[str]) -> list[str]:
    """What the launcher has warmed, once it holds ``expected`` (its background warm-ups are asked for by the call
    that returned, and may not have reached the launcher yet)."""
    deadline = time.monotonic() + WARMED_WITHIN_S
    while True:
        warm = launcher.preload([])
        if expected <= set(warm) or time.monotonic() > deadline:
            return sorted(warm)
        time.sleep(0.05)


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
def kernel_without_data(monkeypatch):
    """This process as a kernel that holds no pandas (whatever other tests imported): its sandbox warms nothing at
    a worker's start."""
    monkeypatch.setattr(sandbox_backend, "DATA_STACK_TRIGGER", "harness_magic_test_module_never_imported")


@pytest.fixture
def kernel_with_data():
    """This process as a kernel that holds pandas (the user works with data)."""
    import pandas  # noqa: F401

    assert sandbox_backend.DATA_STACK_TRIGGER == "pandas"


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
def test_a_lean_launchers_worker_starts_with_its_own_modules_frozen_and_no_data_stack(inspectable,
                                                                                    private_launcher,
                                                                                    kernel_without_data):
    preloaded, frozen, tracked = _inherited(inspectable())
    assert preloaded == sorted(PRELOADED) == []
    assert frozen >= FROZEN_AT_LEAST and tracked < frozen, (tracked, frozen)
    assert _mapped_data_libraries(private_launcher.pid) == []


LIGHT = "print(6 * 7)"


@needs_confinement
def test_a_confined_worker_imports_the_data_stack_itself_and_the_launcher_warms_it_for_later_workers(
        inspectable, private_launcher, kernel_without_data):
    """The launcher loaded the system libraries the wheels link (a confined worker cannot open them), so a worker
    that already ran a call imports pandas itself (it is never replaced mid-cell); it says so in its reply and the
    launcher warms the data stack in the background: the next cells' fresh workers start with it, frozen, and it
    is asked for once."""
    first = inspectable()
    assert first.execute(LIGHT, {}, []).stdout == "42\n"
    pid = first.worker_pid
    result = first.execute(FRAME_CODE, {}, [])
    assert first.worker_pid == pid
    assert result.error is None and result.stdout.strip() == FRAME_PRINTED, (result.error, result.stdout)
    assert _warm_once_asked(private_launcher, set(DATA_STACK)) == sorted(DATA_STACK)
    assert private_launcher.preload_failure is None
    later = inspectable()
    preloaded, frozen, tracked = _inherited(later)
    assert preloaded == sorted(DATA_STACK) and frozen >= FROZEN_AT_LEAST and tracked < frozen, (tracked, frozen)
    assert later.execute(FRAME_CODE, {}, []).stdout.strip() == FRAME_PRINTED
    assert private_launcher.preload_soon(DATA_STACK) is None, "asked once per launcher"


@needs_confinement
def test_a_cells_first_call_that_names_pandas_runs_in_a_worker_forked_once_the_launcher_warmed_it(
        inspectable, private_launcher, kernel_without_data):
    """A worker that has run nothing is replaced, at no loss, by one forked from the launcher once it warmed the
    data stack: the session's first pandas cell holds one copy of it (the launcher's, shared), not a second one
    of the worker's own until the next cell."""
    lean_frozen = _inherited(inspectable())[1]
    fresh = inspectable()
    pid = fresh.worker_pid
    result = fresh.execute(FRAME_CODE, {}, [])
    assert result.error is None and result.stdout.strip() == FRAME_PRINTED, (result.error, result.stdout)
    assert fresh.worker_pid != pid and fresh.restarts == 0
    assert private_launcher.preload([]) == sorted(DATA_STACK)  # warmed before the call ran, not after
    preloaded, frozen, tracked = _inherited(fresh)  # the same worker: it inherited the data stack, frozen
    assert preloaded == sorted(DATA_STACK) and frozen > lean_frozen + FROZEN_AT_LEAST, (frozen, lean_frozen)


@needs_confinement
def test_a_cells_first_call_that_names_no_data_module_keeps_its_worker_and_warms_nothing(inspectable,
                                                                                      private_launcher,
                                                                                      kernel_without_data):
    fresh = inspectable()
    pid = fresh.worker_pid
    assert fresh.execute("import json\nprint(json.dumps({'pandas_like': 1}))", {}, []).error is None
    assert fresh.worker_pid == pid and private_launcher.preload([]) == []


@needs_confinement
def test_a_frame_crosses_into_and_out_of_a_worker_that_imports_the_data_stack_itself(private_launcher,
                                                                                      kernel_without_data):
    """The input is read (Arrow, mapped from the session's input directory) and the saved frame written back by
    a worker whose launcher warmed none of the data stack."""
    import pandas as pd

    sales = pd.DataFrame({"region": ["north", "south", "north"], "amount": [10, 20, 30]})
    backend = SandboxedInterpreter(timeout=120.0)
    try:
        result = backend.execute("totals = sales.groupby('region', as_index=False)['amount'].sum()\n"
                                 "save('totals', totals)", {"sales": sales}, [])
    finally:
        backend.close()
    assert result.error is None, result.error
    saved = dict(result.saved)["totals"]
    assert saved.to_dict("list") == {"region": ["north", "south"], "amount": [40, 20]}


@needs_confinement
def test_where_the_kernel_holds_pandas_the_first_worker_already_inherits_the_data_stack(inspectable,
                                                                                       private_launcher,
                                                                                       kernel_with_data):
    preloaded, frozen, tracked = _inherited(inspectable())
    assert preloaded == sorted(DATA_STACK) and frozen >= FROZEN_AT_LEAST and tracked < frozen, (tracked, frozen)
    assert private_launcher.preload([]) == sorted(DATA_STACK)


@needs_confinement
def test_a_worker_that_fakes_modules_gets_the_launcher_to_warm_only_data_stack_modules(inspectable,
                                                                                     private_launcher,
                                                                                     kernel_without_data):
    """Model code can plant entries in ``sys.modules``: the kernel asks the launcher for the data stack's names only
    (warming pandas is what a session that imports it gets anyway), never a name the code chose."""
    first = inspectable()
    assert first.execute(LIGHT, {}, []).error is None  # a worker that ran a call is kept whatever the code names
    planted = first.execute("import sys, types\nfor name in ('pandas', 'os; import socket', 'sklearn', '../x'):\n"
                            "    sys.modules[name] = types.ModuleType('fake')", {}, [])
    assert planted.error is None, planted.error
    assert _warm_once_asked(private_launcher, {"pandas"}) == ["pandas"]
    assert private_launcher.preload_failure is None and private_launcher.alive()


@needs_confinement
def test_a_chart_imports_matplotlib_in_the_worker_at_first_use_and_comes_back(inspectable, kernel_without_data):
    backend = inspectable()
    result = backend.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.title('first')", {}, [])
    assert result.error is None, result.error
    assert len(result.charts) == 1
    assert "matplotlib" in _inherited(backend)[0]


@needs_confinement
def test_once_a_worker_drew_a_chart_the_launcher_warms_matplotlib_for_every_later_worker(inspectable,
                                                                                       private_launcher,
                                                                                       kernel_without_data):
    """The first chart of a session pays matplotlib's import in its worker; the launcher then warms it (in the
    background: the call that drew does not wait), so the next cells' fresh workers start with it, frozen (and
    with numpy, which matplotlib imported and the worker reported)."""
    first = inspectable()
    assert _inherited(first)[0] == sorted(PRELOADED)
    drew = first.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])", {}, [])
    assert drew.error is None and len(drew.charts) == 1, drew.error
    expected = {*PRELOADED, *CHART_PRELOADS, "numpy"}
    assert _warm_once_asked(private_launcher, expected) == sorted(expected)
    assert private_launcher.preload_failure is None
    preloaded, frozen, tracked = _inherited(inspectable())
    assert preloaded == sorted(expected) and tracked < frozen, (tracked, frozen)
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
def test_a_worker_that_imports_matplotlib_without_drawing_warms_no_matplotlib(inspectable, private_launcher,
                                                                             kernel_without_data):
    first = inspectable()
    quiet = first.execute("import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.close(fig)", {}, [])
    assert quiet.error is None and quiet.charts == [], quiet.error
    assert _warm_once_asked(private_launcher, {"numpy"}) == ["numpy"]  # what it imported of the data stack
    assert "matplotlib" not in _inherited(inspectable())[0]


def test_the_launcher_refuses_a_preload_it_does_not_know_by_name_and_keeps_serving(private_launcher):
    for names, named in ((["os; import socket"], "os; import socket"), (["numpy", "sklearn"], "sklearn"),
                         ("matplotlib", "a list of module names"), ([1], "a list of module names")):
        with pytest.raises(SandboxUnavailableError, match="refused a 'preload' request") as refused:
            private_launcher.request({"op": "preload", "modules": names})
        assert named in str(refused.value)
    assert private_launcher.alive() and private_launcher.broken is None
    assert sorted(private_launcher.preload([])) == sorted(PRELOADED), "nothing was imported"
    assert _mapped_data_libraries(private_launcher.pid) == []


@needs_confinement
def test_what_one_worker_does_to_its_collector_and_modules_never_reaches_the_next_worker(inspectable,
                                                                                       kernel_without_data):
    """A worker that unfreezes, collects and imports matplotlib changes its own copy only: the next worker forked
    from the same launcher inherits the same frozen objects and no matplotlib."""
    first = inspectable()
    hostile = first.execute("import gc, matplotlib.pyplot\ngc.unfreeze()\ngc.collect()\nprint(gc.get_freeze_count())",
                            {}, [])
    assert hostile.error is None and hostile.stdout.strip() == "0", (hostile.error, hostile.stdout)
    preloaded, frozen, tracked = _inherited(inspectable())
    assert "matplotlib" not in preloaded and frozen >= FROZEN_AT_LEAST and tracked < frozen, (tracked, frozen)


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
    assert set(PRELOADED) <= set(WARM_UPS) and set(DATA_STACK) <= set(WARM_UPS)


# --- memory hygiene: a worker gives back what a large call freed ---------------------------------------------------

LARGE_FRAME_CODE = ("import numpy as np, pandas as pd\n"
                    "n = 1_000_000\n"
                    "frame = pd.DataFrame({'id': np.arange(n), 'name': [f'n{i % 1000}' for i in range(n)],\n"
                    "                      'amount': np.arange(n) % 10 / 10})\n"
                    "means = frame.groupby('name')['amount'].mean()\n"
                    "ordered = frame.sort_values('name')\n"
                    "print(int(frame.memory_usage(deep=True).sum() >> 20), round(float(means.max()), 1))")
"""A call an analyst makes: a 1e6-row frame with a text column, grouped and sorted, dropped when the call ends.
It prints its frame's size (MB) and the largest group mean."""

LARGE_FRAME_AT_LEAST_MB = 20
"""The frame the call prints the size of is at least this large (about 60 MB: the call did build something large)."""

RETAINED_AT_MOST_MB = 25
"""What a worker may still hold privately after that call, beyond what it held after a light one. Measured: 6-8 MB
given back (13-14 MB private in all, against 6 after a light call), 43-73 MB when nothing is given back (Arrow's
mimalloc pool and glibc's heap keep the freed blocks)."""


def _private_dirty_mb(pid: int) -> float:
    """The pages only process ``pid`` has written (its own memory, not shared with its launcher), MB."""
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
        for line in rollup:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no Private_Dirty in /proc/{pid}/smaps_rollup")


def _fault_in(pages: int) -> mmap.mmap:
    """``pages`` fresh pages, each written once: as many faults whatever transparent huge pages are set to."""
    size = pages * mmap.PAGESIZE
    region = mmap.mmap(-1, size)
    region.madvise(mmap.MADV_NOHUGEPAGE)
    for offset in range(0, size, mmap.PAGESIZE):
        region[offset] = 1
    return region


def test_a_growth_watch_gives_back_only_once_the_process_grew_by_its_pages():
    watch = GrowthWatch()
    small = [str(i) for i in range(1000)]
    assert watch.after_request() is False and watch.given_back == 0, "a request that allocated little pays nothing"
    grown = _fault_in(2 * GIVE_BACK_AFTER_PAGES)
    assert watch.after_request() is True and watch.given_back == 1
    grown.close()
    del small
    assert watch.after_request() is False, "counted again from the last give-back"


@pytest.mark.parametrize("pages", [0, -1, True, 2.5, "2048", None])
def test_a_growth_watch_refuses_a_page_count_that_is_not_a_positive_int(pages):
    with pytest.raises(ValueError, match=r"pages must be a positive int, not "):
        GrowthWatch(pages)


@needs_confinement
def test_a_worker_gives_back_what_a_large_frame_left_and_frames_still_cross_both_ways(private_launcher,
                                                                                      kernel_with_data):
    """The worker inherits the warmed data stack and the Arrow pool the launcher kept; after the call that built a
    1e6-row frame, once its reply is out, it holds about what it held after a light call. The same worker then
    runs a second such call and a frame crosses in and out exactly."""
    backend = SandboxedInterpreter(timeout=120.0)
    try:
        assert backend.execute("print(6 * 7)", {}, []).stdout == "42\n"
        pid = backend.worker_pid
        light = _private_dirty_mb(pid)
        result = backend.execute(LARGE_FRAME_CODE, {}, [])
        assert result.error is None, result.error
        size_mb, top_mean = result.stdout.split()
        assert int(size_mb) >= LARGE_FRAME_AT_LEAST_MB and top_mean == "0.9", result.stdout
        assert backend.execute("pass", {}, []).error is None  # served after the give-back: the worker is past it
        assert backend.worker_pid == pid and backend.restarts == 0
        retained = _private_dirty_mb(pid) - light
        assert retained < RETAINED_AT_MOST_MB, f"{retained:.1f} MB kept after the call (light call: {light:.1f} MB)"

        again = backend.execute(LARGE_FRAME_CODE, {}, [])
        assert again.error is None and again.stdout == result.stdout, (again.error, again.stdout)
        import pandas as pd

        sales = pd.DataFrame({"region": ["north", "south", "north"], "amount": [10, 20, 30],
                              "note": ["a", None, "c"]})
        crossed = backend.execute("totals = sales.groupby('region', as_index=False)['amount'].sum()\n"
                                  "save('totals', totals)\nsave('back', sales)", {"sales": sales}, [])
        assert crossed.error is None, crossed.error
        saved = dict(crossed.saved)
        assert saved["totals"].to_dict("list") == {"region": ["north", "south"], "amount": [40, 20]}
        pd.testing.assert_frame_equal(saved["back"], sales)
        assert backend.worker_pid == pid
    finally:
        backend.close()


PLANTED = ("import sys, types\n"
           "fake = types.ModuleType('pyarrow')\n"
           "def default_memory_pool():\n"
           "    open('planted-pool-was-called', 'w').close()\n"
           "    raise SystemExit('the worker called model code after its reply')\n"
           "fake.default_memory_pool = default_memory_pool\n"
           "sys.modules['pyarrow'] = fake\n"
           "grown = b'x' * (64 << 20)\n"
           "print(len(grown) >> 20)")
"""Model code (pre-check off) that plants a ``pyarrow`` whose pool would run its code, then grows the worker by
64 MB so that the give-back after its reply runs."""


@needs_confinement
def test_a_pyarrow_planted_in_sys_modules_is_never_called_by_the_workers_give_back(inspectable, private_launcher,
                                                                                 kernel_with_data):
    worker = inspectable()
    pid = worker.worker_pid
    planted = worker.execute(PLANTED, {}, [])
    assert planted.error is None and planted.stdout == "64\n", (planted.error, planted.stdout)
    assert worker.execute("pass", {}, []).error is None  # served after the give-back
    checked = worker.execute("import os\nprint(os.path.exists('planted-pool-was-called'))", {}, [])
    assert checked.stdout == "False\n" and checked.error is None, (checked.error, checked.stdout)
    assert worker.worker_pid == pid and worker.restarts == 0, "the planted pool would have ended the worker"
