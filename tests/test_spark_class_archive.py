"""Spec: the local Spark server's class archive (``connectors/spark/class_archive.py``).

The first server started without an archive makes one when the kernel asks it to stop; later servers map it
(seen in the JVM's ``/proc/PID/maps``). A server whose kernel went away without asking makes none and leaves no
marker; a damaged archive is ignored by the JVM, removed, and the server works; a file that is not safely the
user's own is never handed to the JVM. Each test has its own cache folder (``XDG_CACHE_HOME``).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from spark_servers import quick_jvm  # noqa: E402

from harness_magic.core.execution.connectors.spark import class_archive  # noqa: E402
from harness_magic.core.execution.connectors.spark.class_archive import (ARCHIVE_MIN_BYTES, ArchivePlan,  # noqa: E402
                                                                          plan_archive, usable_archive)
from harness_magic.core.execution.connectors.spark.server import LocalSparkConnect  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

KEY = "0123456789abcdef01234567"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """This test's archive folder (``XDG_CACHE_HOME`` points into ``tmp_path``)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "harness_magic" / "spark-classes"


def answers(server: LocalSparkConnect) -> int:
    from pyspark.sql.connect.session import SparkSession

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = SparkSession.builder.remote(server.url).create()
        try:
            return session.sql("SELECT sum(id) AS s FROM range(1000)").collect()[0]["s"]
        finally:
            session.stop()


def mapped(server: LocalSparkConnect, path: str) -> bool:
    return path in Path(f"/proc/{server.pid}/maps").read_text()


def test_the_first_server_makes_the_archive_when_asked_to_stop_and_the_next_one_maps_it(cache):
    first = LocalSparkConnect("local[1]", quick_jvm())
    try:
        assert first.class_archive.making and first.class_archive.use is None
        assert Path(first.class_archive.marker).exists(), "a server starting now makes no second copy"
        assert plan_archive(Path(first.class_archive.keep).stem, "/nonexistent") == ArchivePlan()
        assert answers(first) == 499500
    finally:
        first.stop()
    kept = Path(first.class_archive.keep)
    info = os.lstat(kept)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o400 and info.st_uid == os.getuid()
    assert info.st_size >= ARCHIVE_MIN_BYTES and usable_archive(kept)
    assert sorted(p.name for p in cache.iterdir()) == [kept.name], "no marker, no partial file"
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700
    assert not os.path.lexists(first.directory)

    second = LocalSparkConnect("local[1]", quick_jvm())
    try:
        assert second.class_archive == ArchivePlan(use=str(kept))
        assert mapped(second, str(kept)), "the JVM maps the archive"
        assert answers(second) == 499500
    finally:
        second.stop()
    assert sorted(p.name for p in cache.iterdir()) == [kept.name]


def test_turned_off_a_server_neither_maps_nor_makes_an_archive(cache, monkeypatch):
    from harness_magic.core.execution.connectors.spark import server as server_module

    planned: list[str] = []

    def recorded(key: str, *rest) -> ArchivePlan:
        planned.append(key)
        return plan_archive(key, *rest)

    monkeypatch.setattr(server_module, "plan_archive", recorded)
    commands: list[list[str]] = []

    def no_supervisor(command, **_):  # the plan is made; the supervisor is not started (no JVM needed)
        commands.append(command)
        raise OSError("not started in this test")

    monkeypatch.setattr(server_module.subprocess, "Popen", no_supervisor)
    with pytest.raises(server_module.SparkStartError, match="not started in this test"):
        LocalSparkConnect("local[1]", quick_jvm(), class_archive=False)
    assert commands and planned == [] and not cache.exists()
    with pytest.raises(server_module.SparkStartError):
        LocalSparkConnect("local[1]", quick_jvm())
    assert len(planned) == 1, "on by default"
    assert list(cache.iterdir()) == [], "a server that never started releases the right to make the archive"


def test_a_server_whose_kernel_left_without_asking_makes_no_archive_and_leaves_no_marker(cache):
    server = LocalSparkConnect("local[1]", quick_jvm())
    assert server.class_archive.making
    supervisor = server._proc
    supervisor.stdin.close()  # end of input, as when the kernel dies: the JVM gets the usual short grace
    assert supervisor.wait(timeout=60) == 0
    server.stop()
    assert list(cache.iterdir()) == [], "nothing made, the marker removed"


def test_a_damaged_archive_is_ignored_by_the_jvm_removed_and_the_server_works(cache, monkeypatch):
    from harness_magic.core.execution.connectors.spark import server as server_module

    monkeypatch.setattr(server_module, "archive_key", lambda *_: KEY)  # this setup's archive is the planted file
    kept = _planted(cache)
    kept.chmod(0o600)
    kept.write_bytes(os.urandom(2 * ARCHIVE_MIN_BYTES))
    kept.chmod(0o400)
    assert usable_archive(kept)

    damaged = LocalSparkConnect("local[1]", quick_jvm())
    try:
        assert damaged.class_archive.use == str(kept)
        assert not mapped(damaged, str(kept))
        assert not kept.exists(), "an archive the JVM refused is removed: the next server makes a good one"
        assert answers(damaged) == 499500
    finally:
        damaged.stop()


def _planted(folder: Path, mode: int = 0o400, size: int = ARCHIVE_MIN_BYTES) -> Path:
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{KEY}.jsa"
    path.write_bytes(b"\0" * size)
    path.chmod(mode)
    return path


def test_only_a_regular_file_of_this_users_in_a_private_folder_is_handed_to_the_jvm(cache, tmp_path):
    good = _planted(cache)
    assert plan_archive(KEY, "/private/tmp") == ArchivePlan(use=str(good))

    good.chmod(0o620)  # writable by the group
    assert not usable_archive(good)
    planned = plan_archive(KEY, "/private/tmp")
    assert planned.use is None and planned.making and planned.made == "/private/tmp/classes.jsa"
    os.unlink(planned.marker)

    good.unlink()
    elsewhere = _planted(tmp_path / "elsewhere")
    os.symlink(elsewhere, cache / f"{KEY}.jsa")  # a link to an archive-looking file
    assert not usable_archive(cache / f"{KEY}.jsa")
    assert plan_archive(KEY, "/private/tmp").use is None
    os.unlink(cache / f"{KEY}.making")
    os.unlink(cache / f"{KEY}.jsa")

    _planted(cache, size=ARCHIVE_MIN_BYTES - 1)  # a JVM killed as it began writing
    assert not usable_archive(cache / f"{KEY}.jsa")
    os.unlink(cache / f"{KEY}.jsa")

    cache.chmod(0o777)  # a folder others may write: neither used nor made there
    _planted(cache)
    assert plan_archive(KEY, "/private/tmp") == ArchivePlan()
    assert not (cache / f"{KEY}.making").exists()


def test_a_marker_of_a_live_process_holds_and_a_dead_or_old_ones_is_taken_over(cache):
    first = plan_archive(KEY, "/private/tmp")
    assert first.making and Path(first.marker).read_text() == str(os.getpid())
    assert plan_archive(KEY, "/private/tmp") == ArchivePlan(), "this process is alive: its marker holds"

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    Path(first.marker).write_text(gone.stdout.strip())
    assert plan_archive(KEY, "/private/tmp").making, "a marker of a process that is gone is taken over"

    old = class_archive.MAKING_STALE_S + 60
    os.utime(first.marker, (os.path.getmtime(first.marker) - old,) * 2)
    assert plan_archive(KEY, "/private/tmp").making, "an old marker is taken over"

    Path(first.marker).write_text("not a pid")
    assert plan_archive(KEY, "/private/tmp").making


def test_older_archives_beyond_the_kept_number_are_removed_before_one_is_made(cache):
    cache.mkdir(parents=True, mode=0o700)
    for age in range(class_archive.ARCHIVES_KEPT + 2):
        path = cache / f"old{age}.jsa"
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    planned = plan_archive(KEY, "/private/tmp")
    assert planned.making
    kept = sorted(p.name for p in cache.glob("*.jsa"))
    assert kept == [f"old{age}.jsa" for age in range(class_archive.ARCHIVES_KEPT - 1)], "newest first, room for one"


def test_a_connector_entry_turns_the_archive_off_and_a_value_that_is_not_true_or_false_is_refused():
    from harness_magic.core.execution.connectors import connectors_from_config

    off = connectors_from_config([{"type": "spark", "master": "local[1]", "name": "lake", "class_archive": False}])
    assert off["lake"].engine.class_archive is False  # nothing started: the server starts on first use
    on = connectors_from_config([{"type": "spark", "master": "local[1]", "name": "lake"}])
    assert on["lake"].engine.class_archive is True
    for value in ("false", 0, None, [False]):
        with pytest.raises(ValueError, match=re.escape(f"class_archive must be true or false, got {value!r}")):
            connectors_from_config([{"type": "spark", "master": "local[1]", "class_archive": value}])
