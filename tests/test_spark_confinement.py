"""The local Spark Connect server as an attacker finds it (issue 22): a real confined server, attacked
through Spark SQL with Spark's own restricted mode switched off, so only the OS layers stand in the way;
its token and the kernel's secrets stay out of reach; it dies with its kernel however the kernel goes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
from spark_servers import quick_jvm

pytest.importorskip("pyspark")

from harness_magic.core.execution.connectors.spark import server as spark_server  # noqa: E402
from harness_magic.core.execution.connectors.spark.server import LocalSparkConnect, SparkStartError  # noqa: E402
from harness_magic.core.confinement import layers as confinement  # noqa: E402
from harness_magic.core.transcript.scrub import REDACTED, scrub  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning"),
              pytest.mark.skipif(confinement.landlock_abi() < 1, reason="Landlock is not available here")]

FAKE_KEY = "sk-proj-FAKEfakeFAKEfake0123456789abcdef"
"""A provider key in the kernel's environment: the server must never see it."""
GONE_WITHIN_S = 60.0
"""How long a test waits for a stray server to go (it takes ~1-4 s; a loaded 2-core CI machine is slow)."""
REPO = Path(__file__).resolve().parents[1]


def connect(server: LocalSparkConnect):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pyspark.sql.connect.session import SparkSession

        return SparkSession.builder.remote(server.url).create()


def error_of(spark, sql: str) -> str:
    """The error text of running ``sql`` (the test fails if it runs)."""
    with pytest.raises(Exception) as caught:
        spark.sql(sql).collect()
    return str(caught.value)


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


def wait_until(check, limit_s: float = GONE_WITHIN_S) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


@pytest.fixture(scope="module")
def views(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("views")
    pd.DataFrame({"id": range(100), "region": [["north", "south"][i % 2] for i in range(100)],
                  "amount": [float(i) for i in range(100)]}).to_parquet(folder / "sales.parquet")
    pd.DataFrame({"region": ["north", "south"], "manager": ["ana", "bo"]}).to_csv(folder / "regions.csv",
                                                                                 index=False)
    return folder


@pytest.fixture(scope="module")
def open_server(views, tmp_path_factory):
    """A confined server with Spark's restricted mode OFF (TRANSFORM and reflect reach the OS), a fake
    provider key in the kernel's environment, and the view folder as its only readable data."""
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = FAKE_KEY
    server = LocalSparkConnect("local[2]", quick_jvm({"spark.sql.restrictedMode.enabled": "false",
                                                      "spark.sql.shuffle.partitions": "2"}), read_paths=[str(views)])
    spark = connect(server)
    try:
        yield server, spark
    finally:
        spark.stop()
        server.stop()
        if old is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old


# -- execution ----------------------------------------------------------------------------------


def test_script_transform_runs_no_command(open_server):
    server, spark = open_server
    marker = Path(server.directory, "tmp", "pwned")  # a directory the JVM may write: only exec can fail
    error = error_of(spark, f"SELECT TRANSFORM(id) USING 'touch {marker}' AS (a STRING) FROM range(1)")
    assert "Cannot run program" in error
    assert not marker.exists()


def test_script_transform_cannot_print_the_environment(open_server):
    server, spark = open_server
    error = error_of(spark, "SELECT TRANSFORM(id) USING 'printenv' AS (a STRING) FROM range(1)")
    assert "Cannot run program" in error
    assert FAKE_KEY not in error and server._token not in error


def test_confinement_report_names_every_layer(open_server):
    server, _ = open_server
    layers = server.confinement
    assert set(layers) >= {"env", "fds", "process_group", "pdeathsig", "rlimits", "landlock", "seccomp"}
    assert layers["landlock"].startswith("ABI ")
    if confinement.probe_seccomp_library() is True:
        assert layers["seccomp"].endswith("rules")


# -- secrets ------------------------------------------------------------------------------------


def test_jvm_environment_and_command_line_hold_no_secret(open_server):
    server, _ = open_server
    environ = Path(f"/proc/{server.pid}/environ").read_bytes()
    cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
    for secret in (FAKE_KEY, server._token):
        assert secret.encode() not in environ
        assert secret.encode() not in cmdline
    assert b"OPENAI_API_KEY" not in environ


def test_server_reads_no_process_environment(open_server):
    server, spark = open_server
    for path in ("/proc/self/environ", f"/proc/{os.getpid()}/environ", f"/proc/{server.supervisor_pid}/environ",
                 f"/proc/{os.getpid()}/cmdline"):
        try:
            text = repr(spark.read.text(path).collect())
        except Exception as exc:  # noqa: BLE001 - refused is as good as empty
            text = str(exc)
        assert FAKE_KEY not in text and server._token not in text, path


def test_token_is_redacted_in_set_and_conf(open_server):
    server, spark = open_server
    shown = repr(spark.sql("SET spark.connect.authenticate.token").collect()) + repr(spark.sql("SET").collect())
    assert server._token not in shown
    try:
        value = spark.conf.get("spark.connect.authenticate.token")
    except Exception as exc:  # noqa: BLE001 - not found is fine too
        value = str(exc)
    assert server._token not in str(value)


def test_token_file_is_gone_and_logs_do_not_hold_it(open_server):
    server, spark = open_server
    spark.sql("SELECT 1").collect()
    assert not Path(server.directory, "server.properties").exists()
    for log in Path(server.directory, "logs").iterdir():
        assert server._token not in log.read_text(errors="replace")


def test_scrubber_hides_the_token(open_server):
    server, _ = open_server
    text = scrub(f"could not reach {server.url}")
    assert server._token not in text and REDACTED in text


# -- files --------------------------------------------------------------------------------------


def test_server_cannot_read_a_file_outside_its_views(open_server, tmp_path):
    _, spark = open_server
    planted = tmp_path / "id_rsa"
    planted.write_text("PLANTED-PRIVATE-KEY\n")
    for attempt in (lambda: spark.sql(f"SELECT * FROM text.`{planted}`").collect(),
                    lambda: spark.read.text(str(planted)).collect(),
                    lambda: spark.read.format("binaryFile").load(str(tmp_path)).collect()):
        try:
            text = repr(attempt())
        except Exception as exc:  # noqa: BLE001
            text = str(exc)
        assert "PLANTED-PRIVATE-KEY" not in text


def test_server_cannot_write_outside_its_directory(open_server, tmp_path):
    _, spark = open_server
    target = tmp_path / "out"
    with pytest.raises(Exception):
        spark.createDataFrame(pd.DataFrame({"a": ["x"]})).write.csv(str(target))
    assert not target.exists()


def test_views_joins_windows_and_tables_still_work(open_server, views):
    _, spark = open_server
    spark.read.parquet(str(views / "sales.parquet")).createOrReplaceTempView("sales")
    spark.read.option("header", "true").csv(str(views / "regions.csv")).createOrReplaceTempView("regions")
    rows = spark.sql("""
        SELECT r.manager, s.id, sum(s.amount) OVER (PARTITION BY s.region ORDER BY s.id) AS running
        FROM sales s JOIN regions r ON s.region = r.region WHERE s.id < 4 ORDER BY s.id""").collect()
    assert [(r.manager, r.id, r.running) for r in rows] == [("ana", 0, 0.0), ("bo", 1, 1.0), ("ana", 2, 2.0),
                                                             ("bo", 3, 4.0)]
    spark.sql("CREATE TABLE kept USING parquet AS SELECT * FROM sales WHERE id < 10")  # the private warehouse
    assert spark.sql("SELECT count(*) AS n FROM kept").collect()[0].n == 10


# -- start-up -------------------------------------------------------------------------------------


def test_refuses_to_start_when_a_required_layer_is_missing(monkeypatch):
    monkeypatch.setattr(spark_server, "REQUIRED_LAYERS", ("landlock", "no_such_layer"))
    before = set(Path(tempfile.gettempdir()).glob(f"harness-spark-{os.getpid()}-*"))
    with pytest.raises(SparkStartError, match="unconfined: no_such_layer"):
        LocalSparkConnect("local[1]")
    assert set(Path(tempfile.gettempdir()).glob(f"harness-spark-{os.getpid()}-*")) <= before


def test_restricted_mode_is_on_by_default_and_stop_removes_everything():
    server = LocalSparkConnect("local[1]", quick_jvm())  # the JVM's compiler options only: no Spark setting
    spark = connect(server)
    try:
        assert "restrictedMode" in error_of(spark, "SELECT TRANSFORM(id) USING 'cat' AS (a STRING) FROM range(1)")
        assert "restrictedMode" in error_of(spark, "SELECT reflect('java.lang.System', 'getProperty', "
                                                   "'spark.connect.authenticate.token')")
        assert "restrictedMode" in error_of(spark, "SELECT java_method('java.lang.System', 'getenv', 'PATH')")
    finally:
        spark.stop()
        pid, supervisor = server.pid, server.supervisor_pid
        server.stop()
    assert gone(pid) and gone(supervisor) and not os.path.lexists(server.directory) and not server.running


# -- lifetime -----------------------------------------------------------------------------------

KERNEL = textwrap.dedent("""
    import json, os, sys, time
    from harness_magic.core.execution.connectors.spark.server import LocalSparkConnect
    server = LocalSparkConnect("local[1]", QUICK_JVM_CONF)
    holder = os.fork()  # like any forked helper, it keeps the supervisor's stdin pipe open after the kernel dies
    if holder == 0:
        time.sleep(3600)
        os._exit(0)
    print(json.dumps({"pid": server.pid, "supervisor": server.supervisor_pid, "directory": server.directory,
                      "holder": holder}), flush=True)
    time.sleep(3600)
""").replace("QUICK_JVM_CONF", repr(quick_jvm()))  # the JVM's compiler options only: no Spark setting


def start_kernel(**popen) -> tuple[subprocess.Popen, dict]:
    """A real process that starts a server the way a kernel does, then idles."""
    proc = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, **popen)
    line = proc.stdout.readline()
    assert line, "the kernel process did not start a server"
    return proc, json.loads(line)


def assert_cleaned_up(info: dict) -> None:
    assert wait_until(lambda: gone(info["pid"])), f"the JVM {info['pid']} outlived its kernel"
    assert wait_until(lambda: not os.path.lexists(info["directory"])), "the private directory outlived its kernel"
    assert wait_until(lambda: gone(info["supervisor"]))


def test_kill_9_of_the_kernel_leaves_no_server_behind():
    proc, info = start_kernel()
    try:
        assert not gone(info["pid"]) and os.path.isdir(info["directory"])
        os.kill(proc.pid, signal.SIGKILL)  # the kernel alone: its forked helper lives on
        proc.wait()
        assert_cleaned_up(info)
    finally:
        proc.kill()
        kill_quietly(info["holder"])


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_signal_to_the_kernels_process_group_leaves_no_server_behind(sig):
    proc, info = start_kernel(start_new_session=True)  # the kernel leads a group, as under Jupyter
    try:
        os.killpg(proc.pid, sig)
        proc.wait()
        assert_cleaned_up(info)
    finally:
        proc.kill()
        kill_quietly(info["holder"])


# -- report -------------------------------------------------------------------------------------


def test_report_describes_the_running_server(open_server):
    server, _ = open_server
    state, layers = spark_server.spark_confinement_report()
    assert state.startswith("running (pid ") and layers["landlock"].startswith("ABI ")


def test_agent_sandbox_shows_the_spark_servers_layers():
    pytest.importorskip("IPython")
    driver = textwrap.dedent("""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "harness_magic")
        shell.run_line_magic("config", 'AgentMagics.connectors = [{"type": "spark", "master": "local[1]"}]')
        shell.run_line_magic("agent_sandbox", "")
    """)
    out = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120).stdout
    spark_part = out[out.index("local Spark server"):]
    assert "refuses to start without landlock" in spark_part
    assert any(line.split()[:2] == ["landlock", "on"] for line in spark_part.splitlines())


def test_secret_settings_are_registered_with_the_scrubber(monkeypatch):
    monkeypatch.setattr(spark_server, "REQUIRED_LAYERS", ("no_such_layer",))  # refused before any JVM starts
    with pytest.raises(SparkStartError):
        LocalSparkConnect("local[1]", {"spark.hadoop.fs.s3a.secret.key": "s3-SECRET-value-1234"})
    assert scrub("key s3-SECRET-value-1234 leaked") == f"key {REDACTED} leaked"
