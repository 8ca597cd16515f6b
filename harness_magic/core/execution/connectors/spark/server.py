"""A private local Spark Connect server: confined like the sandbox worker, stopped with its kernel.

:class:`LocalSparkConnect` runs Spark Connect (from the pip ``pyspark`` package)
for a local master such as ``local[2]``. The JVM is started directly (no
``spark-class``/shell scripts) by a small supervisor process
(:mod:`.launch`) that confines it first. Contract:

* **Loopback and a secret token.** The server binds ``127.0.0.1`` on a free
  port and requires a random token; :attr:`url` carries it (host ``localhost``:
  Spark Connect sends a token in plaintext only to that name). The token is
  registered with the scrubber (:func:`~harness_magic.core.transcript.scrub.register_secret`),
  so no tool output, log or export shows it. It reaches the JVM through a 0600
  properties file in the private directory, deleted once the server listens:
  it is in no environment (the JVM's, ``/proc/PID/environ``) and no command line
  (``ps``). Spark Connect's ``spark.conf.get`` and ``SET`` show it redacted. (Spark copies every
  setting into the JVM's system properties: with restricted mode switched off, ``reflect`` could
  read it there.)
* **Confined.** Spark's own ``spark.sql.restrictedMode.enabled`` is on (a static
  setting sessions cannot change): ``TRANSFORM ... USING`` and ``reflect``/
  ``java_method`` are refused at analysis. Below that, the OS: the JVM gets a clean
  environment (Spark and Java variables only: no API keys, no inherited secrets),
  its own session, ``PR_SET_PDEATHSIG`` bound to the supervisor, no core dumps, and
  where the machine has them: Landlock (read only the Java runtime, the Spark jars,
  a few system files, its own ``/proc/PID`` and the configured ``read_paths``;
  write only its private directory's ``tmp``/``local``/``logs``/``warehouse`` and a
  configured warehouse; *execute only* ``java``, *its ELF loader, its*
  ``jspawnhelper`` *and* ``true``, which stands in for Hadoop's ``chmod`` after each
  ``mkdir``; TCP bind/connect only its own three ports), every capability dropped
  when root, a private IPC namespace, and seccomp (no plain fork, no ptrace, no
  mounts or namespaces...). So even with restricted mode off, a script transform
  fails (``/bin/bash`` may not be executed) instead of running. Without Landlock
  the server refuses to start unless ``unconfined=True`` (then
  :attr:`confinement` says what is missing).
* **Private files.** Logs, ``java.io.tmpdir``, ``spark.local.dir`` and the
  default warehouse live in a fresh 0700 directory, never in site-packages or
  the working directory.
* **Owned lifetime.** :meth:`stop` (also run when the object is collected or
  the interpreter exits) stops the JVM and removes the directory. If the kernel
  dies without running it (``kill -9``, a signal to its process group), the
  supervisor, in a session of its own, sees the kernel's pidfd close and does
  the same within about :data:`~.launch.STOP_GRACE_S` seconds.

Nothing here imports pyspark's client: the connector (see
:mod:`.connector`) connects to :attr:`url` like to any cluster, so a
local run takes the same client path as a remote one.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Iterable, NoReturn

from harness_magic.core.execution.connectors.spark.class_archive import (ARCHIVE_DUMP_GRACE_S, ArchivePlan,
                                                                       archive_key, drop_if_refused,
                                                                       plan_archive)
from harness_magic.core.confinement.owned_dirs import owned_tempdir

__all__ = ["LocalSparkConnect", "SparkStartError", "START_TIMEOUT_S", "SPARK_LAYERS", "spark_home",
           "probe_spark_confinement", "spark_confinement_report"]

START_TIMEOUT_S = 120.0
"""A JVM start on a loaded 2-core machine takes ~8-20 s; past this the start is reported as failed."""
STOP_TIMEOUT_S = 30.0
"""How long the supervisor may take to stop the JVM before it (and so, by pdeathsig, the JVM) is killed."""
DRIVER_MEMORY = "1g"
"""The JVM heap unless ``spark.driver.memory`` says otherwise (Spark's own default)."""
SPARK_LAYERS = ("ipcns", "landlock", "drop_caps", "seccomp")
"""OS layers tried for the JVM, in order; the base layers (env, fds, process_group, pdeathsig, rlimits) always hold."""
REQUIRED_LAYERS = ("landlock",)
"""Without these the server refuses to start unless ``unconfined``: Landlock is what keeps files and ``execve`` in."""
_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_LAUNCHER = Path(__file__).with_name("launch.py")
_JVM_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions", "--add-modules=jdk.incubator.vector",
    "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED", "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
    "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
    "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true", "-Dio.netty.allocator.type=pooled",
    "--sun-misc-unsafe-memory-access=allow", "--enable-native-access=ALL-UNNAMED",
    "-Dderby.connection.requireAuthentication=false",
    # Confinement: no /tmp/hsperfdata files, no attach socket, no raising the descriptor limit.
    "-XX:-UsePerfData", "-XX:+DisableAttachMechanism", "-XX:-MaxFDLimit",
)
"""What Spark's launcher (``spark-class``) passes to the driver JVM, plus three flags the confinement needs."""
_SYSTEM_READ = (
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf",
    "/etc/gai.conf", "/etc/localtime", "/etc/timezone", "/etc/ld.so.cache", "/etc/ld.so.conf",
    "/etc/ld.so.conf.d", "/usr/share/zoneinfo", "/dev/urandom", "/dev/random", "/dev/zero",
    "/proc/self", "/proc/meminfo", "/proc/cpuinfo", "/proc/stat", "/proc/filesystems", "/proc/sys",
    "/sys/fs/cgroup", "/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/kernel/mm/transparent_hugepage",
)
"""System files the JVM reads (user and host lookups, time zones, the loader, its own /proc entry, CPU and
memory limits). ``/proc/self`` is the JVM's own ``/proc/PID``: other processes' entries stay unreadable."""
_GLOB = set("*?[{")
_SECRET_SETTING = re.compile(r"secret|password|token|access[.]?key", re.IGNORECASE)
"""Spark's default ``spark.redaction.regex``: a setting so named holds a secret the scrubber must know."""
_WRITABLE = ("tmp", "local", "logs", "warehouse")
"""The JVM may write only these subdirectories of its private directory (not ``bin``, not the properties file)."""


class SparkStartError(RuntimeError):
    """The local Spark Connect server did not start (no Java, no confinement, port taken, JVM exited)."""


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


def java_binary() -> str:
    """The real path of ``$JAVA_HOME/bin/java`` or of ``java`` on ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    found = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not found or not os.access(found, os.X_OK):
        raise SparkStartError(f"no Java runtime found ({'JAVA_HOME=' + java_home if java_home else 'java on PATH'});"
                              " install Java 17+ (Debian: openjdk-17-jre-headless)")
    return os.path.realpath(found)


def elf_interpreter(path: str) -> str | None:
    """The ELF program interpreter (``PT_INTERP``) of ``path``, e.g. ``/lib64/ld-linux-x86-64.so.2``."""
    import struct

    try:
        with open(path, "rb") as handle:
            header = handle.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit only
                return None
            order = "<" if header[5] == 1 else ">"
            phoff, = struct.unpack_from(order + "Q", header, 32)
            phentsize, phnum = struct.unpack_from(order + "HH", header, 54)
            for index in range(phnum):
                handle.seek(phoff + index * phentsize)
                kind, _flags, offset, _vaddr, _paddr, size = struct.unpack(order + "IIQQQQ", handle.read(40))
                if kind == 3:  # PT_INTERP
                    handle.seek(offset)
                    return handle.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _symlink_targets(root: str) -> list[str]:
    """Real paths of the symlinks under ``root`` that point outside it (Debian's Java links its conf into /etc)."""
    targets = set()
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                if not target.startswith(root.rstrip("/") + "/") and os.path.exists(target):
                    targets.add(target)
    return sorted(targets)


def _library_dirs(interpreter: str | None) -> list[str]:
    """Directories of the shared libraries ``java`` and ``libjvm`` load (multiarch and plain lib dirs)."""
    import sysconfig

    arch = sysconfig.get_config_var("MULTIARCH") or ""
    found = []
    for candidate in (f"/lib/{arch}", f"/usr/lib/{arch}", "/lib64", "/usr/lib64"):
        if arch or not candidate.endswith("/"):
            found.append(candidate)
    if interpreter:
        found += [interpreter, os.path.dirname(os.path.realpath(interpreter))]
    return sorted({os.path.realpath(p) for p in found if os.path.exists(p)})


def view_read_path(path: str) -> str | None:
    """The local directory or file a view path needs read access to (a glob's fixed prefix); None if remote."""
    text = str(path)
    if text.startswith("file:"):
        text = text[len("file:"):]
        while text.startswith("//"):
            text = text[1:]
    elif "://" in text:
        return None
    parts = []
    for part in Path(os.path.abspath(os.path.expanduser(text))).parts:
        if _GLOB & set(part):
            break
        parts.append(part)
    return os.path.realpath(os.path.join(*parts)) if parts else "/"


def _local_dir(value: str) -> str | None:
    """A configured directory as a local path (``file:`` stripped), None for a remote URL."""
    return view_read_path(value)


def probe_spark_confinement() -> dict[str, Any]:
    """What this machine offers the local Spark server: each layer's availability (no JVM is started)."""
    from harness_magic.core.confinement import layers as confinement

    abi = confinement.landlock_abi()
    seccomp = confinement.probe_seccomp_library()
    root = os.geteuid() == 0
    return {
        "env": True, "fds": True, "process_group": True, "pdeathsig": True, "rlimits": True,
        "ipcns": True if root else "unavailable: not root",
        "landlock": (f"ABI {abi}" + ("" if abi >= 4 else " (TCP ports not restricted: ABI < 4)")) if abi >= 1
        else "unavailable: Landlock is not supported or not enabled by this kernel",
        "drop_caps": True if root else "not root",
        "seccomp": True if seccomp is True else seccomp,
    }


_live: "weakref.WeakSet[LocalSparkConnect]" = weakref.WeakSet()
"""Servers started in this process and not yet stopped (for :func:`spark_confinement_report`)."""


def spark_confinement_report() -> tuple[str, dict[str, Any]]:
    """(what it describes, layer -> status): the running local server's layers, else what one would get here."""
    running = [server for server in list(_live) if server.running]
    if running:
        server = running[-1]
        return f"running (pid {server.pid}{', unconfined opt-in' if server.unconfined else ''})", server.confinement
    required = ", ".join(REQUIRED_LAYERS)
    return f"not started; here it would get (it refuses to start without {required})", probe_spark_confinement()


def _stop(proc: subprocess.Popen, directory: str, pid: list[int], wait_s: float = STOP_TIMEOUT_S) -> None:
    """Ask the supervisor to stop the JVM; kill both if it has not within ``wait_s``; remove the directory."""
    try:
        if proc.stdin is not None:
            proc.stdin.write(b"stop\n")
            proc.stdin.close()
    except (OSError, ValueError):
        pass
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # the JVM follows through PR_SET_PDEATHSIG
        proc.wait()
    if pid:
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and _alive(pid[0]):
            time.sleep(0.05)
        if _alive(pid[0]):
            try:
                os.kill(pid[0], signal.SIGKILL)
            except OSError:
                pass
    if proc.stdout is not None:
        proc.stdout.close()
    for _ in range(10):
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.lexists(directory):
            break
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


class LocalSparkConnect:
    """One confined Spark Connect server on this machine for ``master`` (see module doc).

    ``conf``: Spark settings for the server (never on a command line). ``read_paths``:
    local files or directories (globs allowed) the server may read, e.g. the
    connector's file views. ``unconfined``: start even where a required layer
    (Landlock) is missing; :attr:`confinement` then says what is missing.
    """

    def __init__(self, master: str = "local[2]", conf: dict[str, str] | None = None, *,
                 read_paths: Iterable[str] = (), unconfined: bool = False,
                 timeout_s: float = START_TIMEOUT_S, class_archive: bool = True) -> None:
        if not isinstance(master, str) or not (master == "local" or master.startswith("local[")):
            raise ValueError(f"spark master {master!r} is not a local master; use 'local', 'local[N]' or "
                             "'local[*]' (reach a cluster through 'remote': 'sc://host:15002')")
        from harness_magic.core.transcript.scrub import register_secret

        self.master = master
        self.unconfined = bool(unconfined)
        self.class_archive = ArchivePlan()
        """What this server's JVM does with the class archive (:mod:`.class_archive`): maps it, makes it, or
        neither (``class_archive=False``, or no private cache folder)."""
        self._use_class_archive = bool(class_archive)
        self._token = secrets.token_hex(16)
        register_secret(self._token)
        for key, value in (conf or {}).items():  # e.g. spark.hadoop.fs.s3a.secret.key: Spark's redaction rule
            if _SECRET_SETTING.search(str(key)):
                register_secret(str(value))
        self.pid: int | None = None
        """The JVM's pid once it started."""
        self.confinement: dict[str, Any] = {}
        """Each layer the JVM got: ``True``, ``"ABI 7"``, ``"41 rules"`` or ``"unavailable: why"``."""
        self.directory = owned_tempdir("spark")  # 0700
        for sub in _WRITABLE:
            os.mkdir(os.path.join(self.directory, sub), 0o700)
        self._log = os.path.join(self.directory, "logs", "server.out")
        self._properties_file = os.path.join(self.directory, "server.properties")
        self._pid_box: list[int] = []
        try:
            plan = self._plan(dict(conf or {}), list(read_paths))
        except BaseException:
            self._release_archive_marker()
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        try:
            with open(os.path.join(self.directory, "logs", "supervisor.err"), "wb") as errors:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", str(_LAUNCHER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=errors, env={"LANG": "C.UTF-8", "PATH": "/nonexistent"}, cwd=self.directory,
                    start_new_session=True)  # not in the kernel's process group: it outlives a signal to it
        except OSError as exc:
            self._release_archive_marker()
            shutil.rmtree(self.directory, ignore_errors=True)
            raise SparkStartError(f"the Spark supervisor did not start: {exc}") from None
        wait_s = STOP_TIMEOUT_S + (ARCHIVE_DUMP_GRACE_S if self.class_archive.making else 0.0)
        self._finalizer = weakref.finalize(self, _stop, self._proc, self.directory, self._pid_box, wait_s)
        try:
            self._proc.stdin.write(json.dumps(plan).encode() + b"\n")  # type: ignore[union-attr]  # the supervisor is started with stdin piped
            self._proc.stdin.flush()  # type: ignore[union-attr]  # the supervisor is started with stdin piped
        except OSError as exc:
            self.stop()
            self._release_archive_marker()  # the supervisor never got the plan that names it
            raise SparkStartError(f"the Spark supervisor did not start: {exc}") from None
        self._wait(timeout_s)

    def _release_archive_marker(self) -> None:
        """Remove the class archive's ``.making`` marker this server took, when no supervisor will (it never got
        the plan): later servers may make the archive at once instead of after the marker goes stale."""
        if self.class_archive.marker is not None:
            try:
                os.unlink(self.class_archive.marker)
            except OSError:
                pass

    # -- start ------------------------------------------------------------------------------

    def _plan(self, conf: dict[str, str], read_paths: list[str]) -> dict[str, Any]:
        home = spark_home()
        java = java_binary()
        java_home = os.path.dirname(os.path.dirname(java))
        interpreter = elf_interpreter(java)
        self.port = int(conf.pop("spark.connect.grpc.binding.port", 0)) or _free_port()
        properties = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.port": str(_free_port()),
            "spark.blockManager.port": str(_free_port()),
            "spark.local.dir": os.path.join(self.directory, "local"),
            "spark.sql.warehouse.dir": os.path.join(self.directory, "warehouse"),
            "spark.sql.restrictedMode.enabled": "true",
            **{str(k): str(v) for k, v in conf.items()},
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.authenticate.token": self._token,
        }
        ports = sorted({self.port, int(properties["spark.driver.port"]), int(properties["spark.blockManager.port"])})
        write_paths = [os.path.join(self.directory, sub) for sub in _WRITABLE]
        bin_dir = os.path.join(self.directory, "bin")
        os.mkdir(bin_dir, 0o755)
        no_op = shutil.which("true")
        helpers = [os.path.realpath(no_op)] if no_op else []
        if helpers:  # Hadoop's chmod after each mkdir (no native library): the directory keeps its umask mode
            os.symlink(helpers[0], os.path.join(bin_dir, "chmod"))
        spawn_helper = os.path.join(java_home, "lib", "jspawnhelper")
        if os.path.exists(spawn_helper):
            helpers.append(spawn_helper)
        warehouse = _local_dir(properties["spark.sql.warehouse.dir"])
        if warehouse is not None and warehouse != os.path.join(self.directory, "warehouse"):
            os.makedirs(warehouse, exist_ok=True)
            write_paths.append(warehouse)
        views = [p for p in (view_read_path(path) for path in read_paths) if p is not None]
        jars = home / "jars"
        reads = ([self.directory, java_home] + _symlink_targets(java_home) + _library_dirs(interpreter) + [str(jars)]
                 + ([str(home / "conf")] if (home / "conf").is_dir() else [])
                 + [p for p in _SYSTEM_READ if os.path.exists(p)] + views)
        heap = properties.get("spark.driver.memory", DRIVER_MEMORY)
        extra = shlex.split(properties.get("spark.driver.extraJavaOptions", ""))
        first_jars = sorted(str(p) for p in jars.glob("slf4j-api-*.jar"))
        classpath = os.pathsep.join([str(home / "conf"), *first_jars, str(jars / "*")])
        options = [f"-Xmx{heap}", *_JVM_OPTIONS, f"-Djava.io.tmpdir={os.path.join(self.directory, 'tmp')}",
                   f"-Duser.home={self.directory}", *extra]
        if self._use_class_archive:
            key = archive_key(java, java_home, [*first_jars, *sorted(str(p) for p in jars.glob("*.jar"))],
                              [classpath, *options])
            self.class_archive = plan_archive(key, os.path.join(self.directory, "tmp"))
            if self.class_archive.use is not None:
                reads.append(self.class_archive.use)
        command = [java, "-cp", classpath, *options, *self.class_archive.jvm_options(),
                   "org.apache.spark.deploy.SparkSubmit", "--master", self.master,
                   "--properties-file", self._properties_file, "--class", _SERVER_CLASS,
                   "--name", "Spark Connect server", "spark-internal"]
        env = {"LANG": "C.UTF-8", "PATH": bin_dir, "HOME": self.directory,
               "TMPDIR": os.path.join(self.directory, "tmp"), "SPARK_HOME": str(home), "JAVA_HOME": java_home,
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost", "SPARK_SCALA_VERSION": "2.13"}
        if os.environ.get("TZ"):
            env["TZ"] = os.environ["TZ"]
        return {
            "kernel_pid": os.getpid(), "directory": self.directory, "cwd": os.getcwd(), "java": command,
            "env": env, "log": self._log, "properties_file": self._properties_file, "properties": properties,
            "read_paths": reads, "write_paths": write_paths,
            "exec_paths": [java] + ([os.path.realpath(interpreter)] if interpreter else []) + helpers,
            "bind_ports": ports, "connect_ports": ports, "layers": list(SPARK_LAYERS),
            "required": [] if self.unconfined else list(REQUIRED_LAYERS),
            "class_archive": ({"made": self.class_archive.made, "keep": self.class_archive.keep,
                               "marker": self.class_archive.marker} if self.class_archive.making else None),
        }

    def _message(self, timeout_s: float) -> dict[str, Any] | None:
        """The supervisor's next message, None if none came within ``timeout_s``."""
        stdout = self._proc.stdout
        assert stdout is not None  # the supervisor is started with stdout piped
        ready, _, _ = select.select([stdout], [], [], max(timeout_s, 0))
        if not ready:
            return None
        line = stdout.readline()
        if not line:
            try:
                said = _last_error(Path(self.directory, "logs", "supervisor.err").read_text(errors="replace"))
            except OSError:
                said = ""
            return {"error": "the Spark supervisor exited" + (f": {said}" if said else "")}
        try:
            return json.loads(line)
        except ValueError:
            return {"error": f"the Spark supervisor said {line[:200]!r}"}

    def _fail(self, why: str) -> NoReturn:
        self.stop()
        from harness_magic.core.transcript.scrub import scrub

        raise SparkStartError(scrub(why))

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        first = self._message(timeout_s)
        if first is None or "started" not in first:
            why = (first or {}).get("error", f"no answer within {timeout_s:g} s")
            log = _last_error((first or {}).get("log", ""))
            self._fail(f"the Spark Connect server did not start: {why}" + (f" ({log})" if log else ""))
        self.pid = int(first["started"])
        self._pid_box.append(self.pid)
        self.confinement = dict(first.get("layers", {}))
        _live.add(self)
        while time.monotonic() < deadline:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.5)
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    try:  # read at start-up: the token now lives only in the JVM's memory
                        os.unlink(self._properties_file)
                    except OSError:
                        pass
                    drop_if_refused(self.class_archive, self.pid)  # mapped long before it listens, if at all
                    return
            message = self._message(0.2)
            if message is not None:
                log = _last_error(message.get("log", "")) or self._log_tail()
                self._fail(f"the Spark Connect server exited while starting (is Java 17+ installed?): {log}")
        self._fail(f"the Spark Connect server did not listen within {timeout_s:g} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return _last_error(Path(self._log).read_text(errors="replace")) or "empty log"
        except OSError:
            return "no log"

    # -- public -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``sc://localhost:PORT/;token=...`` for ``SparkSession.builder.remote``."""
        return f"sc://localhost:{self.port}/;token={self._token}"

    @property
    def supervisor_pid(self) -> int:
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._finalizer.alive

    def stop(self) -> None:
        """Stop the JVM and remove its private directory (idempotent)."""
        self._finalizer()


def _last_error(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Exception" in line or "Error" in line]
    return (errors or lines or [""])[-1][:300]
