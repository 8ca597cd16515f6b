"""Spec: nothing a sandboxed session wrote outlives it: its session folder (inputs, scratch) is gone once it closes,
also after its worker was killed in the middle of a call, after its launcher was killed and replaced, and whatever
the model's code did to its scratch folder (many files, nested folders, links pointing out, a file held open).
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import pandas as pd
import pytest
from test_worker_revival import kill_and_wait, kill_launcher

from harness_magic.core.execution.sandbox import SandboxedInterpreter
from harness_magic.core.execution.sandbox.launcher_client import LauncherClient

FRIENDLY_OFF = {"ast_precheck": False, "audit_hooks": False}
"""The friendly refusals are off, so model code reaches the OS layers and its scratch folder directly."""


def sandbox() -> SandboxedInterpreter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SandboxedInterpreter(**FRIENDLY_OFF, allow_unconfined=True, timeout=10.0)


@pytest.fixture(scope="module", autouse=True)
def launcher_of_its_own():
    """These tests watch a launcher's root: they start on a launcher no other module's session uses (a session an
    earlier test left open on this process's launcher rightly keeps that root), the current one being retired."""
    LauncherClient.shared().retire("retired for tests/test_sandbox_leftovers.py: a launcher of its own")


@pytest.fixture
def interp():
    backend = sandbox()
    yield backend
    backend.close()


def fill_scratch(interp: SandboxedInterpreter, code_tail: str = "") -> None:
    """Model code that writes files and folders into its scratch folder (its working directory's writable place)."""
    code = ("import os\n"
            f"scratch = {interp.scratch_dir!r}\n"
            "for i in range(50):\n"
            "    os.makedirs(os.path.join(scratch, f'd{i % 5}', 'deep'), exist_ok=True)\n"
            "    open(os.path.join(scratch, f'd{i % 5}', 'deep', f'f{i}.txt'), 'w').write('x' * 100)\n"
            "print(len(os.listdir(scratch)))\n" + code_tail)
    result = interp.execute(code, {}, [])
    assert result.error is None and result.stdout.startswith("5"), result.error


def test_a_closed_session_leaves_no_session_folder_whatever_its_code_wrote_to_scratch(interp, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep")
    interp.execute("save('frame', frame)", {"frame": pd.DataFrame({"a": range(10)})}, ["frame"])
    fill_scratch(interp)
    session = Path(interp.session_dir)
    assert session.is_dir() and any(session.rglob("*.txt"))
    (session / "scratch" / "out").symlink_to(precious, target_is_directory=True)  # a link out, as if planted
    interp.close()
    assert not session.exists()
    assert (precious / "keep.txt").read_text() == "keep", "removing the session followed a link out of it"


def test_a_worker_killed_in_the_middle_of_a_call_leaves_nothing_once_the_session_closes(interp):
    fill_scratch(interp)
    pid = interp.worker_pid
    threading.Timer(0.5, kill_and_wait, (pid,)).start()
    result = interp.execute(f"import time, os\nopen(os.path.join({interp.scratch_dir!r}, 'held.txt'), 'w')\n"
                            "print('started', flush=True)\ntime.sleep(5)", {}, [])
    assert (result.error or "").startswith("SandboxError: the sandbox worker running this code died")
    session = Path(interp.session_dir)
    interp.close()
    assert not session.exists()


def test_a_launcher_killed_between_calls_leaves_no_folder_of_the_session_once_it_closes(interp):
    fill_scratch(interp)
    first_session, old = Path(interp.session_dir), interp._launcher
    kill_launcher(old, interp.worker_pid)
    assert interp.execute("6 * 7", {}, []).value == 42
    sessions = {first_session, Path(interp.session_dir)}
    interp.close()
    assert not [path for path in sessions if path.exists()], sessions
    assert not os.path.exists(old.root), "the killed launcher's root was kept after its last session closed"


def test_a_launcher_killed_while_no_session_uses_it_leaves_no_root_once_replaced():
    first = sandbox()
    old = first._launcher
    first.close()
    kill_launcher(old, None)
    second = sandbox()
    try:
        assert second._launcher is not old
        assert second.execute("6 * 7", {}, []).value == 42
        assert not os.path.exists(old.root), "a replaced launcher's root outlived it though no session used it"
    finally:
        second.close()


def test_a_session_on_a_replaced_launcher_keeps_its_folder_until_it_closes(interp):
    fill_scratch(interp)
    old, session = interp._launcher, Path(interp.session_dir)
    other = sandbox()  # a second session of the same kernel, on the same launcher
    try:
        kill_launcher(old, interp.worker_pid)
        assert interp.execute("6 * 7", {}, []).value == 42
        assert session.is_dir() and any(session.rglob("*.txt")), "the scratch was removed while its session lives"
        interp.close()
        assert not session.exists()
        assert os.path.exists(old.root), "the root was removed while another session's folder was in it"
    finally:
        other.close()
    assert not os.path.exists(old.root)
