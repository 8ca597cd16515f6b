"""Spec: the suite's temporary-file guard (tests/leftovers.py) fails a run whose pytest processes left a product
folder, removes what killed processes left through the product's sweep, lists the rest, and leaves nothing.

An inner pytest-xdist run (two workers) of three tests: one makes a product folder in its worker and never
removes it, one starts a child that makes one and is killed, one leaves a plain temporary folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

INNER_CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import leftovers


def pytest_configure(config):
    leftovers.register(config)
"""

INNER_TESTS = """
import os
import signal
import subprocess
import sys
import tempfile

from harness_magic.core.confinement.owned_dirs import owned_tempdir


def test_a_worker_keeps_a_folder_it_never_removes():
    kept = owned_tempdir("cache")
    print("kept", kept)


def test_a_killed_child_leaves_its_folder():
    code = ("import os, signal; from harness_magic.core.confinement.owned_dirs import owned_tempdir; "
            "owned_tempdir('duckdb'); os.kill(os.getpid(), signal.SIGKILL)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == -signal.SIGKILL


def test_test_code_leaves_a_plain_folder():
    tempfile.mkdtemp(prefix="left-by-a-test-")
"""


def test_the_guard_fails_on_a_worker_leftover_sweeps_a_killed_childs_and_lists_the_rest(tmp_path):
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER_TESTS))
    before = set(Path(tempfile.gettempdir()).glob("suite-tmp-*"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "load",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    out = done.stdout
    assert "3 passed" in out, out + done.stderr
    assert done.returncode == 1, out
    assert "FAILED: 1 product folder(s) outlived the pytest process that owned them" in out, out
    failed = [line for line in out.splitlines() if line.strip().startswith("/") and "harness-cache-" in line]
    assert len(failed) == 1 and "/gw" in failed[0], out
    assert "1 product folder(s) of ended processes" in out, out
    assert "1 other entries left by test code" in out and "left-by-a-test-" in out, out
    assert set(Path(tempfile.gettempdir()).glob("suite-tmp-*")) == before, "the run's folder was not removed"


def test_a_clean_run_says_nothing_and_passes(tmp_path):
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text("def test_nothing():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "temporary files left behind" not in done.stdout
