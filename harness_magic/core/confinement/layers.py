"""OS confinement layers for the sandbox worker, each applied and probed on its own.

Every ``apply_*`` function runs inside the freshly forked worker (never in the
kernel process) and raises :class:`LayerError` when the layer cannot be put in
place. The worker applies them in a fixed order (see ``LAYER_ORDER``) because
later layers forbid the system calls earlier ones need: rlimits and the network
namespace before dropping root, dropping root before ``no_new_privs`` and
Landlock, seccomp last.

Layers:

``env``            allowlisted environment (no API keys, tokens, ``SSH_AUTH_SOCK``).
``fds``            stdin/stdout/stderr on ``/dev/null``, every other descriptor closed.
``process_group``  own session and process group, so the parent kills it whole.
``pdeathsig``      ``PR_SET_PDEATHSIG`` = SIGKILL: dies with the launcher.
``rlimits``        CPU seconds, address space, file size, open files, core dumps off.
``netns``          empty network namespace (``unshare``), opportunistic.
``ipcns``          a private IPC namespace (``CLONE_NEWIPC``): SysV objects and POSIX
                   message queues made inside die with the worker and see no others.
``drop_root``      when root: uid/gid 65534. Where the Python install sits under a
                   directory uid 65534 cannot enter (e.g. ``/root``), the worker first
                   gets a private mount namespace in which that directory is an empty
                   read-only tmpfs holding read-only bind mounts of just the install, so
                   the paths stay the same and uid 65534 can read them. Only if that
                   fails too is uid 0 kept with every capability dropped, and the layer
                   is reported as unavailable.
``landlock``       read only the Python install and the session inputs, write only scratch;
                   TCP bind/connect and signals/abstract sockets outside the domain denied
                   where the kernel ABI has them.
``seccomp``        no exec, no process fork (threads allowed), no ptrace, no sockets, no
                   signals to other processes, no raising limits, no namespaces/mounts,
                   no SysV IPC or POSIX message queues, no signal routing through
                   ``fcntl`` (``F_SETOWN``/``F_SETOWN_EX``/``F_SETSIG``, ``O_ASYNC``)
                   or ``ioctl`` (``FIOASYNC``, ``FIOSETOWN``, ``SIOCSPGRP``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import sys
from collections.abc import Iterable

__all__ = [
    "LayerError",
    "OS_LAYERS",
    "BASE_LAYERS",
    "ENV_ALLOWLIST",
    "UNPRIVILEGED_UID",
    "clean_environment",
    "apply_fds",
    "apply_process_group",
    "apply_pdeathsig",
    "apply_rlimits",
    "apply_netns",
    "apply_ipcns",
    "apply_drop_root",
    "apply_no_new_privs",
    "apply_landlock",
    "apply_seccomp",
    "SERVER_SECCOMP_KEEP",
    "drop_capabilities",
    "landlock_abi",
    "python_read_paths",
]

BASE_LAYERS = ("env", "fds", "process_group", "pdeathsig", "rlimits")
"""Always applied: cheap, and they cannot fail on any Linux."""

OS_LAYERS = ("netns", "ipcns", "drop_root", "landlock", "seccomp")
"""Applied when available; unless unconfined is opted into, landlock or seccomp must hold, and landlock or
drop_root (see ``backend.confinement_gap``)."""

UNPRIVILEGED_UID = 65534
"""``nobody``: owns no files, so a worker running as it reads only world-readable data."""

ENV_ALLOWLIST = ("LANG", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                 "MKL_NUM_THREADS", "ARROW_DEFAULT_MEMORY_POOL")
"""The only variables copied from the kernel's environment: none can hold a credential."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNS = 0x00020000
CLONE_THREAD = 0x00010000

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_SYS_CAPSET = 126
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_RULE_NET_PORT = 2


class LayerError(OSError):
    """A confinement layer could not be applied."""


def _errno_error(what: str) -> LayerError:
    code = ctypes.get_errno()
    return LayerError(code, f"{what}: {os.strerror(code)}")


def clean_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allowlisted environment for the launcher: nothing secret survives."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWLIST}
    env.setdefault("LANG", "C.UTF-8")
    # BLAS thread pools started before fork can deadlock the forked worker.
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update({"PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
                "PATH": "/nonexistent"})
    env.update(extra or {})
    return env


# -- base layers --------------------------------------------------------------------------


def apply_fds(keep: Iterable[int]) -> None:
    """Point 0/1/2 at /dev/null and close every other descriptor except ``keep``."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    kept: list[int | None] = [*sorted({fd for fd in keep if fd > 2}), None]
    low = 3
    for open_fd in kept:
        high = open_fd if open_fd is not None else 65536
        if high > low:
            os.closerange(low, high)
        low = (open_fd or 0) + 1


def apply_process_group() -> None:
    os.setsid()


def apply_pdeathsig(expected_parent: int) -> None:
    """SIGKILL when the launcher dies; exit now if it already has."""
    if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise _errno_error("prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != expected_parent:
        os._exit(70)


def apply_rlimits(*, cpu_seconds: int, address_space: int, file_size: int, open_files: int) -> None:
    limits = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: cpu_seconds,
        resource.RLIMIT_AS: address_space,
        resource.RLIMIT_FSIZE: file_size,
        resource.RLIMIT_NOFILE: open_files,
    }
    for which, value in limits.items():
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


# -- OS layers ----------------------------------------------------------------------------


def apply_netns() -> None:
    """An empty network namespace: only a downed loopback exists inside."""
    flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET
    if _libc.unshare(flags) != 0:
        raise _errno_error("unshare(CLONE_NEWNET)")


def apply_ipcns() -> None:
    """A private IPC namespace: no SysV object or message queue of another process is visible."""
    flags = CLONE_NEWIPC
    if os.geteuid() != 0 and not _in_own_user_namespace():
        flags |= CLONE_NEWUSER
    if _libc.unshare(flags) != 0:
        raise _errno_error("unshare(CLONE_NEWIPC)")


def _in_own_user_namespace() -> bool:
    """True after :func:`apply_netns` made a user namespace (we hold all capabilities in it)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"CapEff:"):
                    return int(line.split()[1], 16) != 0
    except (OSError, ValueError):
        pass
    return False


def python_read_paths() -> list[str]:
    """Directories the worker must read to keep importing: the Python install and site-packages."""
    import importlib.util

    spec = importlib.util.find_spec("harness_magic")  # found, not imported: no arrow up the layers
    if spec is None or spec.origin is None:  # this code runs from the package, so it is always found
        raise RuntimeError("harness_magic is not importable: cannot name its directory for the worker")
    package = spec.origin
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.abspath(package))}
    for entry in sys.path:
        if entry and os.path.isdir(entry) and any(
            os.path.abspath(entry).startswith(os.path.abspath(p)) for p in (sys.prefix, sys.base_prefix)
        ):
            candidates.add(entry)
    for extra in ("/usr/share/zoneinfo", "/etc/localtime", "/usr/share/fonts"):
        if os.path.exists(extra):
            candidates.add(extra)
    return sorted(os.path.realpath(p) for p in candidates)


def _readable_by(uid: int, paths: Iterable[str]) -> str | None:
    """The first path (or ancestor) ``uid`` could not traverse/read by mode bits, else None."""
    import stat

    for path in paths:
        current = os.path.realpath(path)
        chain = []
        while True:
            chain.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for item in chain:
            try:
                st = os.stat(item)
            except OSError:
                return item
            need = stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else stat.S_IROTH
            if st.st_uid == uid:
                continue
            if not st.st_mode & need:
                return item
    return None


_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda v: None if v is None else v.encode())
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        raise _errno_error(f"mount({target})")


def _blocked_ancestors(uid: int, paths: Iterable[str]) -> list[str]:
    """Directories above ``paths`` that ``uid`` cannot enter, outermost first."""
    blocked = set()
    for path in paths:
        item = _readable_by(uid, [path])
        if item is not None and item != os.path.realpath(path):  # a closed path itself cannot be helped
            blocked.add(item)
    outer = [b for b in blocked if not any(b != c and b.startswith(c.rstrip("/") + "/") for c in blocked)]
    return sorted(outer, key=len)


def _expose_read_paths(read_paths: list[str]) -> list[str]:
    """In a private mount namespace, replace each blocked ancestor by a tmpfs with bind mounts of the paths.

    Paths stay the same for the worker; nothing changes outside its namespace.
    Returns the directories that were replaced.
    """
    covers = _blocked_ancestors(UNPRIVILEGED_UID, read_paths)
    if not covers:
        return []
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise _errno_error("unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    for cover in covers:
        inside = sorted({os.path.realpath(p) for p in read_paths
                         if os.path.realpath(p).startswith(cover.rstrip("/") + "/")}, key=len)
        # Keep only the outermost paths: a bind of a directory carries its subtree.
        outer = [p for p in inside if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in inside)]
        handles = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in outer]
        try:
            _mount("tmpfs", cover, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "mode=755,size=64k")
            for path, fd in handles:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(path, mode=0o755, exist_ok=True)
                else:  # a file is bind-mounted onto an empty file
                    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o444))
                _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
                try:
                    _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
                except LayerError:
                    pass  # read-only is extra: uid 65534 cannot write root's files anyway
        finally:
            for _path, fd in handles:
                os.close(fd)
        _mount(None, cover, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
               "mode=755,size=64k")
    return covers


def apply_drop_root(read_paths: Iterable[str], chown_paths: Iterable[str] = ()) -> str:
    """Stop being root. Returns how (``"uid 65534"``, ``"uid 65534 (private mount view of ...)"``,
    ``"not root"``); raises :class:`LayerError` after dropping every capability if uid 0 had to be kept."""
    if os.geteuid() != 0:
        return "not root"
    read_paths = list(read_paths)
    how = f"uid {UNPRIVILEGED_UID}"
    for path in chown_paths:
        os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    blocked = _readable_by(UNPRIVILEGED_UID, read_paths)
    if blocked is not None:
        try:
            covers = _expose_read_paths(read_paths)
        except OSError as exc:
            covers, why = [], str(exc)
        else:
            why = f"{blocked} is not readable by uid {UNPRIVILEGED_UID}"
        blocked = _readable_by(UNPRIVILEGED_UID, read_paths)
        if blocked is None:
            how += (f" (the Python install is under {', '.join(covers)}, which uid {UNPRIVILEGED_UID} cannot "
                    f"enter: the worker sees it through a private mount namespace with read-only bind mounts)")
        else:
            _drop_capabilities()
            raise LayerError(errno.EACCES, f"uid 0 kept with every capability dropped: {why}")
    os.setgroups([])
    os.setresgid(UNPRIVILEGED_UID, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    os.setresuid(UNPRIVILEGED_UID, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    return how


def drop_capabilities() -> None:
    """Give up every capability, the bounding set included, so an ``execve`` as uid 0 regains none."""
    _drop_capabilities()


def _drop_capabilities() -> None:
    """Give up every capability, the bounding set included (uid 0 stays)."""
    for cap in range(64):
        if _libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:  # PR_CAPBSET_DROP
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if _libc.syscall(_SYS_CAPSET, header, data) != 0:
        raise _errno_error("capset")


def apply_no_new_privs() -> None:
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _errno_error("prctl(PR_SET_NO_NEW_PRIVS)")


# -- Landlock -----------------------------------------------------------------------------

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when absent or disabled."""
    value = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                          ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(value), 0)


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def apply_landlock(read_paths: Iterable[str], write_paths: Iterable[str], *, exec_paths: Iterable[str] = (),
                   bind_ports: Iterable[int] = (), connect_ports: Iterable[int] = (),
                   restrict_tcp: bool = True) -> int:
    """Restrict the filesystem to ``read_paths`` (read) and ``write_paths`` (read/write). Returns the ABI.

    ``exec_paths`` may also be executed (nothing else may). Where the ABI handles TCP (4+), only
    ``bind_ports`` may be bound and only ``connect_ports`` connected to; with none given, no TCP at all.
    ``restrict_tcp=False`` leaves TCP alone (a server whose configuration allows the network).
    """
    abi = landlock_abi()
    if abi < 1:
        raise LayerError(errno.EOPNOTSUPP, "Landlock is not supported or not enabled by this kernel")
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP if restrict_tcp else 0
        size = 16
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        size = 24
    ruleset = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        raise _errno_error("landlock_create_ruleset")
    read = _FS_READ_FILE | _FS_READ_DIR
    write = handled & ~(_FS_EXECUTE | _FS_MAKE_CHAR | _FS_MAKE_BLOCK | _FS_MAKE_SOCK | _FS_MAKE_SYM
                        | _FS_MAKE_FIFO | _FS_IOCTL_DEV)
    try:
        rules = [(p, read) for p in read_paths] + [(p, write) for p in write_paths]
        rules += [(p, read | _FS_EXECUTE) for p in exec_paths]
        rules.append((os.devnull, _FS_READ_FILE | _FS_WRITE_FILE))
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not os.path.isdir(path):
                    access &= _FILE_ONLY
                rule = _PathBeneathAttr(allowed_access=access & handled, parent_fd=fd)
                if _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset),
                                 ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule),
                                 ctypes.c_uint32(0)) != 0:
                    raise _errno_error(f"landlock_add_rule({path})")
            finally:
                os.close(fd)
        if abi >= 4 and restrict_tcp:
            ports = [(port, _NET_BIND_TCP) for port in bind_ports] + [(port, _NET_CONNECT_TCP)
                                                                     for port in connect_ports]
            for port, access in ports:
                net_rule = _NetPortAttr(allowed_access=access, port=int(port))
                if _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset),
                                 ctypes.c_int(_LANDLOCK_RULE_NET_PORT), ctypes.byref(net_rule),
                                 ctypes.c_uint32(0)) != 0:
                    raise _errno_error(f"landlock_add_rule(TCP port {port})")
        if _libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _errno_error("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


# -- seccomp ------------------------------------------------------------------------------

_DENY_ALWAYS = (
    "execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4",
    "setrlimit", "tkill", "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsmount", "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "setuid", "setgid", "setreuid", "setregid", "setresuid",
    "setresgid", "setgroups", "setfsuid", "setfsgid", "capset", "personality", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "open_by_handle_at", "name_to_handle_at", "quotactl",
    "mknod", "mknodat", "syslog", "iopl", "ioperm", "settimeofday", "clock_settime", "adjtimex",
    "sethostname", "setdomainname", "vhangup", "fanotify_init", "lookup_dcookie",
)
"""System calls the worker never needs; each fails with EPERM."""

_DENY_IPC = (
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl", "ipc",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
)
"""SysV IPC and POSIX message queues: channels that outlive the worker or reach other processes."""

_TIOCSTI = 0x5412
_FIOASYNC = 0x5452
_FIOSETOWN = 0x8901
_SIOCSPGRP = 0x8902
_F_SETFL = 4
_F_SETOWN = 8
_F_SETSIG = 10
_F_SETOWN_EX = 15
_O_ASYNC = 0o20000


SERVER_SECCOMP_KEEP = ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "execve")
"""Denied to the worker, kept for a server (the local Spark JVM): Landlock holds it to its own ports and to the few
files it may execute."""


CLONE_VFORK = 0x00004000


INET_POLICIES = ("any", "tcp", "none")
"""What :func:`apply_seccomp` lets a process that keeps ``socket`` open on IP: every socket, TCP only (no UDP or
raw sockets, which Landlock's port rules do not cover), or none (no IPv4, IPv6 or packet socket at all)."""
_AF_INET, _AF_INET6, _AF_PACKET = 2, 10, 17
_SOCK_TYPE_MASK, _SOCK_DGRAM, _SOCK_RAW = 0xF, 2, 3


def apply_seccomp(own_pid: int, *, keep: Iterable[str] = (), allow_spawn: bool = False, inet: str = "any") -> int:
    """Load the deny-list filter. Returns the number of rules. Requires libseccomp (Debian: libseccomp2).

    ``keep``: system calls of the deny list left allowed (see :data:`SERVER_SECCOMP_KEEP`); every other rule stays.
    ``allow_spawn``: a ``clone`` with ``CLONE_VFORK`` (``posix_spawn``, whose child execs at once) is allowed; a
    plain fork (and the ``fork``/``vfork`` calls) still is not. What may be executed is then Landlock's to decide.
    ``inet`` (one of :data:`INET_POLICIES`), for a process that keeps ``socket``: which IP sockets it may open.
    """
    if inet not in INET_POLICIES:
        raise ValueError(f"inet must be one of {', '.join(INET_POLICIES)}, got {inet!r}")
    keep = frozenset(keep)
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # pyseccomp raises when libseccomp.so.2 is missing
        raise LayerError(errno.ENOSYS, f"pyseccomp/libseccomp unavailable: {exc}") from exc
    eperm = sc.ERRNO(errno.EPERM)
    filt = sc.SyscallFilter(sc.ALLOW)
    rules = 0

    def add(action: int, name: str, *args: object) -> None:
        nonlocal rules
        try:
            filt.add_rule(action, name, *args)
            rules += 1
        except (ValueError, OSError):  # syscall unknown on this architecture
            pass

    for name in _DENY_ALWAYS + _DENY_IPC:
        if name not in keep:
            add(eperm, name)
    # Threads yes, processes no: clone without CLONE_THREAD is a fork.
    spawn = CLONE_THREAD | (CLONE_VFORK if allow_spawn else 0)
    add(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, spawn, 0))
    # clone3 passes flags in memory seccomp cannot read; ENOSYS makes glibc fall back to clone.
    add(sc.ERRNO(errno.ENOSYS), "clone3")
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        add(eperm, name, sc.Arg(0, sc.NE, own_pid))
    add(eperm, "prlimit64", sc.Arg(2, sc.NE, 0))  # reading limits is fine, setting is not
    add(eperm, "ioctl", sc.Arg(1, sc.EQ, _TIOCSTI))
    # Signal routing: an owner + F_SETSIG + O_ASYNC delivers any signal to any process
    # on I/O, which no kill() rule sees. Deny naming an owner and turning async on.
    for request in (_FIOASYNC, _FIOSETOWN, _SIOCSPGRP):
        add(eperm, "ioctl", sc.Arg(1, sc.EQ, request))
    for name in ("fcntl", "fcntl64"):
        for command in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX):
            add(eperm, name, sc.Arg(1, sc.EQ, command))
        add(eperm, name, sc.Arg(1, sc.EQ, _F_SETFL), sc.Arg(2, sc.MASKED_EQ, _O_ASYNC, _O_ASYNC))
    if inet == "none":
        for family in (_AF_INET, _AF_INET6, _AF_PACKET):
            add(eperm, "socket", sc.Arg(0, sc.EQ, family))
    elif inet == "tcp":  # the type's low bits; SOCK_NONBLOCK / SOCK_CLOEXEC ride above them
        for family in (_AF_INET, _AF_INET6):
            for kind in (_SOCK_DGRAM, _SOCK_RAW):
                add(eperm, "socket", sc.Arg(0, sc.EQ, family), sc.Arg(1, sc.MASKED_EQ, _SOCK_TYPE_MASK, kind))
        add(eperm, "socket", sc.Arg(0, sc.EQ, _AF_PACKET))
    filt.load()
    return rules


def probe_seccomp_library() -> bool | str:
    try:
        import pyseccomp as sc

        sc.SyscallFilter(sc.ALLOW)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure means the layer is unavailable
        return f"unavailable: {type(exc).__name__}: {exc} (install libseccomp2)"
