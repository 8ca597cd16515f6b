"""Spec: a kernel's temporary folders never outlive it: removed when it ends, and by the next process if it was killed.

The folders are :func:`harness_magic.core.confinement.owned_dirs.owned_tempdir`'s (DuckDB spills, the cache's
spills, the provider host's socket, MCP and Spark server homes, replays). A real kernel runs an ``%%agent`` cell
that makes several of them (scripted model through the provider host, a DuckDB query, spilled handles, model
code that tries to leave files behind); shut down, it leaves nothing; killed, its provider host removes its
socket folder and the next process's first folder sweeps the rest.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from harness_magic.core.confinement.owned_dirs import OWNED_KINDS, owned_tempdir, owner_pid, sweep_abandoned

GONE_WAIT_S = 20.0
"""How long a killed kernel is given to be gone, and its provider host to notice and remove its folder."""
SHUTDOWN_WAIT_S = 60.0
"""How long a kernel asked to shut down may take to end before jupyter_client signals it (its default, 5 s, is
short on a loaded machine: a signalled kernel runs no exit handler, and this test is not about speed)."""


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def make(base: Path, name: str) -> Path:
    path = base / name
    path.mkdir(mode=0o700)
    (path / "spill-1.arrow").write_bytes(b"x" * 10)
    return path


# -- naming ---------------------------------------------------------------------------------------


def test_an_owned_folder_is_private_and_named_after_its_kind_and_owner(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    path = Path(owned_tempdir("duckdb"))
    assert path.parent == tmp_path and path.name.startswith(f"harness-duckdb-{os.getpid()}-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert owner_pid(path.name) == os.getpid()
    labelled = Path(owned_tempdir("mcp", "crm"))
    assert labelled.name.startswith(f"harness-mcp-{os.getpid()}-crm-") and owner_pid(labelled.name) == os.getpid()


@pytest.mark.parametrize("kind", ["sandbox", "", "../duckdb", "duckdb-1", "DuckDB"])
def test_an_unknown_kind_is_refused_naming_the_kinds(kind):
    with pytest.raises(ValueError, match="is not one of") as error:
        owned_tempdir(kind)
    assert repr(kind) in str(error.value) and "duckdb" in str(error.value)


@pytest.mark.parametrize("label", ["../../etc", "a b", "x/y", "é", "x" * 65])
def test_a_label_that_could_leave_the_folder_name_is_refused(label):
    with pytest.raises(ValueError, match="must be 1-64 letters"):
        owned_tempdir("mcp", label)


@pytest.mark.parametrize("name", ["harness-sandbox-12-x", "harness-duckdb-0-x", "harness-duckdb-x-y",
                                  "harness-duckdb-12",
                                  "harness_magic_duckdb_abc", "tmp1234", "harness-duckdb--12-x"])
def test_names_that_are_not_owned_folders_have_no_owner(name):
    assert owner_pid(name) is None


def test_every_kind_names_a_folder_the_sweep_recognises():
    for kind in OWNED_KINDS:
        assert owner_pid(f"harness-{kind}-4242-abc") == 4242


# -- the sweep ------------------------------------------------------------------------------------


def test_the_sweep_removes_the_folders_of_gone_owners_only(tmp_path):
    gone = dead_pid()
    abandoned = [make(tmp_path, f"harness-{kind}-{gone}-abc{kind}") for kind in ("duckdb", "cache", "provider")]
    mine = make(tmp_path, f"harness-duckdb-{os.getpid()}-live")
    sandbox = make(tmp_path, f"harness-sandbox-{gone}-root")  # its launcher sweeps those, with its own rules
    stranger = make(tmp_path, f"tmp-{gone}")
    removed = sweep_abandoned(str(tmp_path))
    assert sorted(removed) == sorted(str(p) for p in abandoned)
    assert not any(p.exists() for p in abandoned)
    assert mine.exists() and sandbox.exists() and stranger.exists()


def test_the_sweep_can_be_limited_to_one_killed_owner(tmp_path):
    one, other = dead_pid(), dead_pid()
    first, second = make(tmp_path, f"harness-cache-{one}-a"), make(tmp_path, f"harness-cache-{other}-b")
    assert sweep_abandoned(str(tmp_path), owners={one}) == [str(first)]
    assert second.exists()


def test_a_link_named_like_an_abandoned_folder_is_not_followed(tmp_path):
    precious = make(tmp_path, "precious")
    link = tmp_path / f"harness-duckdb-{dead_pid()}-bait"
    link.symlink_to(precious, target_is_directory=True)
    planted_file = tmp_path / f"harness-cache-{dead_pid()}-file"
    planted_file.write_text("not a folder")
    assert sweep_abandoned(str(tmp_path)) == []
    assert (precious / "spill-1.arrow").exists() and link.is_symlink() and planted_file.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_folder_is_never_removed(tmp_path):
    theirs = make(tmp_path, f"harness-duckdb-{dead_pid()}-theirs")
    os.chown(theirs, 65534, 65534)
    assert sweep_abandoned(str(tmp_path)) == [] and theirs.exists()


def test_a_missing_base_sweeps_nothing(tmp_path):
    assert sweep_abandoned(str(tmp_path / "absent")) == []


def test_a_process_first_folder_sweeps_what_a_killed_one_left(tmp_path):
    left = make(tmp_path, f"harness-duckdb-{dead_pid()}-killed")
    code = "from harness_magic.core.confinement.owned_dirs import owned_tempdir; print(owned_tempdir('cache'))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(tmp_path)},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert not left.exists()
    assert [p.name for p in tmp_path.iterdir()] == [Path(out).name]


# -- a real kernel --------------------------------------------------------------------------------


def _script(server) -> None:
    """An ``%%agent`` run that makes the kernel's folders (the provider host's socket: every model call; a DuckDB
    engine's spill folder: a query), saves frames past a hot set of one, and whose model code tries to write
    files where they could outlive the session (its working directory, ``/tmp``, ``/dev/shm``, the parent)."""
    hostile = ("import pandas as pd\n"
               "save('first', pd.DataFrame({'a': range(5)}))\n"
               "save('second', pd.DataFrame({'b': range(6)}))\n"
               "for path in ('kept.txt', '/tmp/kept.txt', '/dev/shm/kept.txt', '../kept.txt'):\n"
               "    try:\n"
               "        open(path, 'w').write('kept')\n"
               "        print('made', path)\n"
               "    except Exception as exc:\n"
               "        print('refused', type(exc).__name__)\n")
    server.replies = [
        {"tool_calls": [{"id": "c1", "name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]},
        {"tool_calls": [{"id": "c2", "name": "duckdb__query",
                         "arguments": {"sql": "SELECT range AS n FROM range(3)", "name": "numbers"}}]},
        {"tool_calls": [{"id": "c3", "name": "python_interpreter", "arguments": {"code": hostile}}]},
        {"text": "done"},
    ]


def _run_cell(server, tmp_path: Path, monkeypatch, request) -> tuple[object, int, Path]:
    from kernel_helpers import Kernel, setup_cell

    temp = Path(tempfile.mkdtemp())  # short: the provider host's socket path must fit AF_UNIX's 108 bytes
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(temp))
    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(setup_cell({"run_dir": "runs", "model": "openai/test-model", "api_base": server.api_base,
                                       "connectors": [{"type": "duckdb", "files": {}}], "hot_count": 1}))
        assert setup.ok, (setup.errors, setup.stderr)
        _script(server)
        cell = kernel.run("%%agent\nmake some folders")
        assert cell.ok, cell.outputs
        pid = kernel.value("__import__('os').getpid()")
        kinds = {name.split("-")[1] for name in os.listdir(temp) if owner_pid(name) == pid}
        assert {"provider", "duckdb"} <= kinds, os.listdir(temp)
    except BaseException:
        kernel.close()
        raise
    return kernel, pid, temp


def _shm_roots(pid: int) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(f"harness-sandbox-{pid}-")] \
        if os.path.isdir("/dev/shm") else []


@pytest.mark.kernel
def test_a_kernel_shut_down_leaves_nothing_in_its_temporary_directory(server, tmp_path, monkeypatch, request):
    kernel, pid, temp = _run_cell(server, tmp_path, monkeypatch, request)
    kernel.kc.stop_channels()
    kernel.km.shutdown_wait_time = SHUTDOWN_WAIT_S
    kernel.km.shutdown_kernel(now=False)  # what JupyterLab's "Shut Down Kernel" and a hub's culler ask
    assert os.listdir(temp) == []
    assert _shm_roots(pid) == []
    assert not (tmp_path / "kept.txt").exists()


@pytest.mark.kernel
def test_a_killed_kernel_leaves_nothing_after_the_next_process_starts(server, tmp_path, monkeypatch, request):
    kernel, pid, temp = _run_cell(server, tmp_path, monkeypatch, request)
    kernel.close()  # SIGKILL to the kernel's process group: no clean-up of its own runs
    deadline = time.monotonic() + GONE_WAIT_S
    while os.path.exists(f"/proc/{pid}") or any(name.startswith(f"harness-provider-{pid}-")
                                                for name in os.listdir(temp)):
        assert time.monotonic() < deadline, f"the killed kernel or its host's folder stayed: {os.listdir(temp)}"
        time.sleep(0.1)
    code = "from harness_magic.core.confinement.owned_dirs import owned_tempdir; print(owned_tempdir('cache'))"
    made = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(temp)},
                          capture_output=True, text=True, check=True).stdout.strip()
    assert os.listdir(temp) == [Path(made).name]


def test_a_replay_without_a_run_dir_keeps_its_log_until_the_process_exits_then_removes_it(tmp_path):
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from harness_magic.core.agent.loop import Harness
        from harness_magic.core.control.replay import replay_run
        from harness_magic.core.providers.adapter import ProviderAdapter
        from harness_magic.core.providers.offline import ScriptedModel
        harness = Harness(ProviderAdapter("scripted/x", transport=ScriptedModel([{{"text": "hi"}}])), "sys", [],
                          run_dir={str(tmp_path / "runs")!r})
        harness.run_result("hello")
        replay = replay_run(harness.run_file)
        assert os.path.exists(replay.result.run_file) and replay.identical
        print(os.path.dirname(replay.result.run_file))
    """)
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(temp)},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.parent == temp and folder.name.startswith("harness-replay-")
    assert os.listdir(temp) == []
