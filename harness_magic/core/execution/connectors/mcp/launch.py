"""Confining launcher of a local MCP server: applies the confinement layers to itself, then execs the server.

Run by the MCP SDK's stdio client as ``python -I launch.py PLAN`` (``PLAN``: JSON, no secrets: see
``connector._plan``), it keeps stdin/stdout (the MCP channel) and its stderr (the server's log file), and:

* environment: only the allowlisted basics (``layers.clean_environment``) plus the variables the configuration
  names (whose values the kernel passed in this process's environment), ``HOME``/``TMPDIR`` = the private
  directory;
* every other descriptor closed; ``PR_SET_PDEATHSIG`` = SIGKILL bound to the kernel (it kept across the
  ``execve``, so the server dies with the kernel, ``kill -9`` included); core dumps off;
* ``network: false``: no TCP by Landlock, no IPv4/IPv6/packet socket at all by seccomp and, as root, an empty
  network namespace; a list of ports: TCP only to those (Landlock) and no UDP or raw socket (seccomp); ``true``:
  any;
* as root, a private IPC namespace; ``no_new_privs``; Landlock: read the Python install, the command's own files and the
  configured ``read_paths``, write only the private directory, execute only the command's executable and the
  program loader; capabilities dropped (when root); seccomp: no fork, no ptrace, no namespaces, no signals to
  other processes (the server's own threads may run).

A layer the plan requires that does not hold ends the launcher with exit status :data:`REFUSED` and a line on
stderr (``mcp launcher: ...``), so an unconfined server never starts. Each layer's status is written to
``layers.json`` in the private directory before the ``execve``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

REFUSED = 126
"""Exit status when a required layer does not hold (nothing was executed)."""
LAYERS_FILE = "layers.json"
"""Where, in the private directory, the launcher records each layer's status."""
STDERR_PREFIX = "mcp launcher: "
"""How the launcher's own lines on stderr start (the rest there is the server's)."""


def program_loader() -> str | None:
    """The ELF program loader mapped into this process (``ld-linux-*.so``), which an ``execve`` of a dynamically
    linked program opens for execution too; None when none is mapped (a static interpreter)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith(("ld-linux", "ld-musl", "ld64")):
                    return os.path.realpath(path)
    except OSError:
        return None
    return None


def holds(value: Any) -> bool:
    """A layer's status says it is in place (not ``"unavailable: ..."`` / ``"not ..."``)."""
    return value is True or (isinstance(value, str) and not value.startswith(("unavailable", "not ")))


def _applied(apply: Any) -> Any:
    """``apply()``'s result (``True`` for None), or ``"unavailable: why"`` when the layer cannot be put in place."""
    try:
        result = apply()
    except OSError as exc:
        return f"unavailable: {exc}"
    return True if result is None else result


def confine(plan: dict[str, Any]) -> dict[str, Any]:
    """Apply every layer to this process (see the module docstring); returns each one's status."""
    from harness_magic.core.confinement import layers as conf

    try:  # loaded before Landlock: finding libseccomp runs ldconfig, which the confined process may not
        import pyseccomp  # noqa: F401
    except (ImportError, OSError, RuntimeError):
        pass  # apply_seccomp reports the layer as unavailable
    status: dict[str, Any] = {"env": True}
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.closerange(3, soft if soft != resource.RLIM_INFINITY else 65536)
    status["fds"] = True
    conf.apply_pdeathsig(plan["kernel_pid"])
    status["pdeathsig"] = True
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    status["rlimits"] = True
    network = plan["network"]
    root = os.geteuid() == 0
    namespaces = [*(["netns"] if network is False else []), "ipcns"]
    for name in namespaces:  # as root only: an unprivileged one needs a user namespace, where files it makes fail
        status[name] = _applied(getattr(conf, f"apply_{name}")) if root else (
            "unavailable: not root (it would need a user namespace; network: false is then Landlock's no TCP "
            "and seccomp's no IP socket)")
    conf.apply_no_new_privs()
    status["no_new_privs"] = True
    landlock = _applied(lambda: conf.apply_landlock(
        plan["read_paths"], [plan["directory"]], exec_paths=plan["exec_paths"],
        connect_ports=network if isinstance(network, list) else (), restrict_tcp=network is not True))
    status["landlock"] = landlock if not isinstance(landlock, int) else \
        f"ABI {landlock}" + ("" if landlock >= 4 else " (TCP ports not restricted: ABI < 4)")
    if root:
        status["drop_caps"] = _applied(conf.drop_capabilities)
    # Landlock rules TCP only: seccomp closes UDP and raw sockets too (all IP with network: false), root or not.
    inet = "any" if network is True else "none" if network is False else "tcp"
    seccomp = _applied(lambda: conf.apply_seccomp(os.getpid(), keep=conf.SERVER_SECCOMP_KEEP, inet=inet))
    status["seccomp"] = f"{seccomp} rules" if isinstance(seccomp, int) and seccomp is not True else seccomp
    return status


def main(argv: list[str]) -> int:
    plan = json.loads(argv[1])
    from harness_magic.core.confinement import layers as conf

    passed = {name: os.environ[name] for name in plan["env"] if name in os.environ}
    env = conf.clean_environment({**passed, "HOME": plan["directory"], "TMPDIR": plan["directory"]})
    os.chdir(plan["directory"])
    try:
        status = confine(plan)
    except OSError as exc:
        sys.stderr.write(f"{STDERR_PREFIX}a confinement layer failed: {exc}\n")
        return REFUSED
    missing = [name for name in plan["required"] if not holds(status.get(name))]
    with open(os.path.join(plan["directory"], LAYERS_FILE), "w") as handle:
        json.dump(status, handle)
    if missing:
        sys.stderr.write(STDERR_PREFIX + "the MCP server would run unconfined: " + "; ".join(
            f"{name} {status.get(name, 'not applied')}" for name in missing) + "\n")
        return REFUSED
    sys.stderr.flush()
    try:
        os.execve(plan["command"][0], plan["command"], env)
    except OSError as exc:
        sys.stderr.write(f"{STDERR_PREFIX}cannot execute {plan['command'][0]!r}: {exc}\n")
    return REFUSED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
