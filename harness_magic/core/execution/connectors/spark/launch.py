"""Supervisor of the local Spark Connect JVM: starts it confined, stops it when its kernel goes.

Run by :class:`~.server.LocalSparkConnect` as ``python -I launch.py`` in
a session of its own (so a signal to the kernel's process group does not reach it).
It imports only the standard library and the sandbox's ``confinement`` module (by
file path: no package ``__init__`` runs).

Protocol (JSON lines):

* stdin, first line: the plan (see ``server._plan``): the kernel's pid, the
  private directory, the ``java`` command, its environment, the Spark properties
  (the token among them), the paths and ports the JVM may use, the layers wanted.
  Later lines: ``stop``. End of input also means stop.
* stdout: ``{"started": PID, "layers": {...}}`` once the JVM has been exec'd
  (``layers``: each layer's status, ``true`` or ``"unavailable: why"``), or
  ``{"error": "..."}``; ``{"exited": CODE, "log": "..."}`` when the JVM ends on
  its own; ``{"stopped": true}`` last.

Lifetime: the supervisor watches the kernel through a pidfd. When the kernel
exits in any way (``kill -9`` included), when asked, or on SIGTERM, it stops the
JVM (SIGTERM, SIGKILL after :data:`STOP_GRACE_S`) and removes the private
directory. A JVM making the class archive (the plan's ``class_archive``) that the
kernel asked to stop gets :data:`ARCHIVE_DUMP_GRACE_S` to write it as it exits;
the archive is then kept (:func:`keep_archive`) before the directory goes. The
JVM gets ``PR_SET_PDEATHSIG`` = SIGKILL bound to this single-threaded supervisor,
so it dies with the supervisor too.

The token reaches the JVM only through a 0600 properties file in the private
directory, which is read at start-up and deleted by the kernel once the server
listens: it is never in the JVM's environment or command line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import select
import shutil
import signal
import stat
import sys
import tempfile
import time
from typing import Any

STOP_GRACE_S = 3.0
"""A JVM asked to stop may run its shutdown hooks this long before it is killed."""
ARCHIVE_DUMP_GRACE_S = 90.0
"""The same for a JVM writing the class archive as it exits (``class_archive.ARCHIVE_DUMP_GRACE_S``: this
script runs isolated and imports nothing of the package)."""
ARCHIVE_MIN_BYTES = 1 << 20
"""``class_archive.ARCHIVE_MIN_BYTES``: a smaller file is no archive (a JVM killed as it began writing)."""
ARCHIVE_COPY_CHUNK = 1 << 20
JVM_STOPPED_BY_SIGTERM = 128 + signal.SIGTERM
"""The exit status of a JVM that ran its shutdown (and wrote its archive) after SIGTERM."""
RMTREE_TRIES = 10
"""Attempts to remove the private directory (2 s in all) while a dying JVM may still touch it."""
OPEN_FILES = 65536
"""The JVM's descriptor limit (Netty, shuffle files); the soft limit is set to it and cannot be raised."""
LOG_TAIL_CHARS = 2000
"""How much of the JVM's log an early exit reports."""
CORE_DEPTH = 4
"""Directories from this file up to ``harness_magic/core`` (``core/execution/connectors/spark/launch.py``),
where ``confinement/layers.py`` is loaded by path."""


def _confinement() -> Any:
    """The sandbox's layer module, loaded by path so that no package ``__init__`` is imported.

    Loaded (with ``pyseccomp``) before the fork: once Landlock holds, the child cannot read site-packages.
    """
    if "_harness_confinement" in sys.modules:
        return sys.modules["_harness_confinement"]
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError):
        pass  # apply_seccomp reports the layer as unavailable
    core = os.path.abspath(__file__)
    for _ in range(CORE_DEPTH):
        core = os.path.dirname(core)
    path = os.path.join(core, "confinement", "layers.py")
    spec = importlib.util.spec_from_file_location("_harness_confinement", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]  # a spec for an existing .py file always exists
    spec.loader.exec_module(module)  # type: ignore[union-attr]  # a file spec always has a source loader
    sys.modules["_harness_confinement"] = module
    return module


def _emit(message: dict[str, Any]) -> None:
    try:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):  # the kernel is gone: nobody reads
        pass


def _escape_property(text: str, key: bool) -> str:
    """``text`` for a java.util.Properties file (backslash escapes; non-ASCII as \\uXXXX)."""
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[char])
        elif char in "=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(char))
        else:
            out.append(char)
    return "".join(out)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def write_properties(path: str, properties: dict[str, str]) -> None:
    """Create ``path`` (0600, must not exist) holding ``properties``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        for key, value in properties.items():
            handle.write(f"{_escape_property(key, True)}={_escape_property(value, False)}\n")


def holds(value: Any) -> bool:
    """A layer's status says it is in place (``True``, ``"ABI 7"``, ``"41 rules"``; not ``"unavailable: ..."``)."""
    return value is True or (isinstance(value, str) and not value.startswith(("unavailable", "not ")))


def _apply_layers(plan: dict[str, Any], supervisor: int, keep: int, log_fd: int) -> dict[str, Any]:
    """In the forked child: every layer in order; returns each one's status. Raises when a required one fails."""
    conf = _confinement()
    wanted = set(plan["layers"])
    status: dict[str, Any] = {"env": True}
    conf.apply_process_group()
    status["process_group"] = True
    conf.apply_fds([keep, log_fd])
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    status["fds"] = True
    conf.apply_pdeathsig(supervisor)
    status["pdeathsig"] = True
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    status["rlimits"] = True
    if "ipcns" in wanted:
        if os.geteuid() == 0:
            try:
                conf.apply_ipcns()
                status["ipcns"] = True
            except OSError as exc:
                status["ipcns"] = f"unavailable: {exc}"
        else:
            status["ipcns"] = "unavailable: not root (a user namespace would change the JVM's file access)"
    conf.apply_no_new_privs()
    if "landlock" in wanted:
        try:
            abi = conf.apply_landlock(plan["read_paths"], plan["write_paths"], exec_paths=plan["exec_paths"],
                                      bind_ports=plan["bind_ports"], connect_ports=plan["connect_ports"])
            status["landlock"] = f"ABI {abi}" + ("" if abi >= 4 else " (TCP ports not restricted: ABI < 4)")
        except OSError as exc:
            status["landlock"] = f"unavailable: {exc}"
    if "drop_caps" in wanted:
        if os.geteuid() != 0:
            status["drop_caps"] = "not root"
        else:
            try:
                conf.drop_capabilities()
                status["drop_caps"] = True
            except OSError as exc:
                status["drop_caps"] = f"unavailable: {exc}"
    if "seccomp" in wanted:
        try:
            rules = conf.apply_seccomp(os.getpid(), keep=conf.SERVER_SECCOMP_KEEP, allow_spawn=True)
            status["seccomp"] = f"{rules} rules"
        except OSError as exc:
            status["seccomp"] = f"unavailable: {exc}"
    missing = [name for name in plan["required"] if not holds(status.get(name))]
    if missing:
        raise RuntimeError("the Spark server would run unconfined: " + "; ".join(
            f"{name} {status.get(name, 'not applied')}" for name in missing))
    return status


def _start(plan: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Fork, confine and exec the JVM; returns its pid and the layers' status (RuntimeError on failure)."""
    directory = plan["directory"]
    log_fd = os.open(plan["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    supervisor = os.getpid()
    pid = os.fork()
    if pid == 0:  # the JVM-to-be: nothing here may return
        try:
            os.close(read_end)
            os.chdir(plan["cwd"] if os.path.isdir(plan["cwd"]) else directory)
            status = _apply_layers(plan, supervisor, write_end, log_fd)
            os.write(write_end, json.dumps({"layers": status}).encode() + b"\n")
            os.execve(plan["java"][0], plan["java"], plan["env"])
        except BaseException as exc:  # noqa: BLE001 - report to the supervisor and die
            try:
                os.write(write_end, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
            finally:
                os._exit(127)
    os.close(write_end)
    os.close(log_fd)
    data = b""
    while True:  # until exec closes the pipe (or the child dies)
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    messages = [json.loads(line) for line in data.decode(errors="replace").splitlines() if line.strip()]
    errors = [m["error"] for m in messages if "error" in m]
    if errors or not messages:
        _reap(pid, 0)
        raise RuntimeError(errors[0] if errors else "the JVM's child process died before starting java")
    return pid, messages[-1]["layers"]


def _reap(pid: int, grace_s: float) -> int | None:
    """Stop ``pid`` (its process group): SIGTERM, SIGKILL after ``grace_s``; returns its exit status."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        return None
    if grace_s > 0:
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                _signal_group(pid, signal.SIGKILL)  # anything it left in its group
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _signal_group(pid: int, sig: int) -> None:
    for target in (lambda: os.killpg(pid, sig), lambda: os.kill(pid, sig)):
        try:
            target()
        except OSError:
            pass


def keep_archive(made: str, keep: str) -> bool:
    """Move the class archive the JVM wrote at ``made`` (in its private directory) to ``keep`` (in the user's
    private archive folder): read-only, atomically (a private temporary file in that folder renamed over the
    name), only a regular file of at least :data:`ARCHIVE_MIN_BYTES`. Whether it was kept; never raises."""
    folder = os.path.dirname(keep)
    part = None
    try:
        info = os.lstat(made)
        if not stat.S_ISREG(info.st_mode) or info.st_size < ARCHIVE_MIN_BYTES:
            return False
        part = tempfile.mkstemp(dir=folder, prefix=".part-", suffix=".jsa")[1]
        try:
            os.rename(made, part)  # the same file system: no copy
        except OSError:
            with open(made, "rb") as source, open(part, "wb") as target:
                shutil.copyfileobj(source, target, ARCHIVE_COPY_CHUNK)
        os.chmod(part, 0o400)
        os.replace(part, keep)
        return True
    except OSError:
        if part is not None:
            try:
                os.unlink(part)
            except OSError:
                pass
        return False


def _drop_marker(plan: dict[str, Any]) -> None:
    """Remove the ``.making`` marker of a server that was to make the class archive (made, or not after all)."""
    archive = plan.get("class_archive")
    if archive:
        try:
            os.unlink(archive["marker"])
        except OSError:
            pass


def remove_directory(directory: str) -> None:
    for _ in range(RMTREE_TRIES):
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.lexists(directory):
            return
        time.sleep(0.2)


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - LOG_TAIL_CHARS))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def supervise(plan: dict[str, Any]) -> int:
    """Start the JVM and watch it and the kernel until one of them ends or a stop is asked."""
    directory = plan["directory"]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append("SIGTERM"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        kernel = os.pidfd_open(plan["kernel_pid"])
    except OSError:
        kernel = None
    if kernel is None or os.getppid() != plan["kernel_pid"]:  # the kernel is already gone
        _drop_marker(plan)
        remove_directory(directory)
        _emit({"error": "the kernel that asked for the Spark server has exited"})
        return 1
    try:
        _confinement()
        write_properties(plan["properties_file"], plan["properties"])
        pid, layers = _start(plan)
    except Exception as exc:  # noqa: BLE001 - reported to the kernel
        _emit({"error": str(exc), "log": _log_tail(plan["log"])})
        _drop_marker(plan)
        remove_directory(directory)
        return 1
    jvm = os.pidfd_open(pid)
    _emit({"started": pid, "layers": layers})
    poller = select.poll()
    for fd in (kernel, jvm, sys.stdin.fileno()):
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    code = None
    asked = False
    while not stopping:
        try:
            events = poller.poll(500)
        except InterruptedError:
            continue
        ready = {fd for fd, _ in events}
        if jvm in ready:
            code = _reap(pid, 0)
            _emit({"exited": code, "log": _log_tail(plan["log"])})
            break
        if kernel in ready:
            break
        if sys.stdin.fileno() in ready:
            line = sys.stdin.readline()
            asked = line.strip() == "stop"
            if not line or asked:
                break
    archive = plan.get("class_archive")
    if code is None:
        code = _reap(pid, ARCHIVE_DUMP_GRACE_S if archive and asked else STOP_GRACE_S)
        if archive and asked and code == JVM_STOPPED_BY_SIGTERM:
            keep_archive(archive["made"], archive["keep"])
    _drop_marker(plan)
    remove_directory(directory)
    _emit({"stopped": True})
    return 0


def main() -> int:
    line = sys.stdin.readline()
    if not line:
        return 1
    return supervise(json.loads(line))


if __name__ == "__main__":
    sys.exit(main())
