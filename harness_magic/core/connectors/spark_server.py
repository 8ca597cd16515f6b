"""A private local Spark Connect server: started from the pip package, stopped with its owner.

:class:`LocalSparkConnect` runs ``$SPARK_HOME/sbin/start-connect-server.sh``
(shipped in the ``pyspark`` package) for a local master such as
``local[2]``. Contract:

* **Loopback and a token.** The server binds ``127.0.0.1`` on a free port and
  requires a random authentication token (passed through the environment, so
  it never appears in ``ps``); :attr:`url` carries it. The client names the
  host ``localhost`` because Spark Connect sends a token in plaintext only to
  that host name.
* **Private files.** Its pid file and logs live in a fresh 0700 temporary
  directory, never inside site-packages; the directory goes with the server.
* **Owned lifetime.** :meth:`stop` (also run when the object is collected or
  the interpreter exits) stops the JVM and removes the directory.

Nothing here imports pyspark's client: the connector (see
:mod:`.spark_connector`) connects to :attr:`url` like to any cluster, so a
local run takes the same client path as a remote one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import weakref
from pathlib import Path

__all__ = ["LocalSparkConnect", "SparkStartError", "START_TIMEOUT_S", "spark_home"]

START_TIMEOUT_S = 120.0
"""A JVM start on a loaded 2-core machine takes ~8-20 s; past this the start is reported as failed."""
STOP_TIMEOUT_S = 30.0
"""How long ``stop-connect-server.sh`` may take before the JVM is killed."""
RMTREE_TRIES = 10
"""Attempts to remove the server's directory (2 s in all) while a stopping JVM may still touch it."""
_IDENT = "harness-magic"
_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_LOCAL_MASTER = ("local", "local[")


class SparkStartError(RuntimeError):
    """The local Spark Connect server did not start (no Java, port taken, JVM exited)."""


def spark_home() -> Path:
    """The Spark distribution inside the installed ``pyspark`` package (or ``$SPARK_HOME``)."""
    configured = os.environ.get("SPARK_HOME")
    if configured:
        return Path(configured)
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkStartError("pyspark is not installed; install harness_magic[spark] (pyspark[connect])")
    return Path(spec.origin).parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(script: Path, env: dict[str, str], directory: str, pid_file: Path) -> None:
    """Stop the server (the daemon script, then SIGKILL if it lingers) and remove its directory."""
    pid = None
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        pass
    try:
        subprocess.run([str(script)], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=STOP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass
    if pid is not None:
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for _ in range(RMTREE_TRIES):  # a JVM that is still exiting may write its last log line meanwhile
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.lexists(directory):
            break
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


class LocalSparkConnect:
    """One Spark Connect server on this machine for ``master`` (see module doc)."""

    def __init__(self, master: str = "local[2]", conf: dict[str, str] | None = None, *,
                 timeout_s: float = START_TIMEOUT_S) -> None:
        if not isinstance(master, str) or not (master == "local" or master.startswith("local[")):
            raise ValueError(f"spark master {master!r} is not a local master; use 'local', 'local[N]' or "
                             "'local[*]' (reach a cluster through 'remote': 'sc://host:15002')")
        self.master = master
        self.port = _free_port()
        self._token = uuid.uuid4().hex
        self.directory = tempfile.mkdtemp(prefix="harness_magic_spark_")  # 0700: pid file, logs
        home = spark_home()
        env = {k: v for k, v in os.environ.items()
               if k not in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
        env.update({"SPARK_CONNECT_AUTHENTICATE_TOKEN": self._token, "SPARK_PID_DIR": self.directory,
                    "SPARK_LOG_DIR": os.path.join(self.directory, "logs"), "SPARK_IDENT_STRING": _IDENT,
                    "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1"})
        pid_file = Path(self.directory) / f"spark-{_IDENT}-{_SERVER_CLASS}-1.pid"  # spark-daemon.sh's name
        self._finalizer = weakref.finalize(self, _stop, home / "sbin" / "stop-connect-server.sh", env,
                                           self.directory, pid_file)
        settings = {"spark.connect.grpc.binding.address": "127.0.0.1",
                    "spark.connect.grpc.binding.port": str(self.port),
                    "spark.ui.enabled": "false", **(conf or {})}
        command = [str(home / "sbin" / "start-connect-server.sh"), "--master", master]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        try:
            result = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                    timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.stop()
            raise SparkStartError(f"start-connect-server.sh failed: {exc}") from None
        if result.returncode != 0:
            self.stop()
            last = (result.stderr or result.stdout or "").strip().splitlines()[-1:] or ["no output"]
            raise SparkStartError(f"start-connect-server.sh exited with {result.returncode}: {last[0]}")
        self._wait(pid_file, timeout_s)

    def _wait(self, pid_file: Path, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                pid = None
            if pid is not None:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.settimeout(0.5)
                    if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                        self.pid = pid
                        return
                if not _alive(pid):
                    log = self._log_tail()
                    self.stop()
                    raise SparkStartError(f"the Spark Connect server exited while starting (is Java 17+ "
                                          f"installed?): {log}")
            time.sleep(0.2)
        log = self._log_tail()
        self.stop()
        raise SparkStartError(f"the Spark Connect server did not listen within {timeout_s:g} s: {log}")

    def _log_tail(self) -> str:
        logs = sorted(Path(self.directory, "logs").glob("*.out"))
        if not logs:
            return "no log"
        lines = [line for line in logs[-1].read_text(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if "Exception" in line or "Error" in line]
        return (errors or lines or ["empty log"])[-1][:300]

    @property
    def url(self) -> str:
        """``sc://localhost:PORT/;token=...`` for ``SparkSession.builder.remote``."""
        return f"sc://localhost:{self.port}/;token={self._token}"

    @property
    def running(self) -> bool:
        return self._finalizer.alive

    def stop(self) -> None:
        """Stop the JVM and remove its private directory (idempotent)."""
        self._finalizer()
