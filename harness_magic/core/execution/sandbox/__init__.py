"""The sandboxed interpreter: model code runs in an OS-confined worker process.

The boundary is a separate process, forked from a clean, pre-warmed launcher
(never from the kernel) afresh for every ``%%agent`` cell and every subagent
run, confined by the layers in :mod:`.confinement` (environment allowlist,
closed descriptors, own process group, death with the parent, uid 65534,
Landlock, seccomp, network and IPC namespaces, rlimits) and watched by the
kernel (wall-clock timeout and memory watchdog in the loop that reads replies,
a memory cgroup where one can be created, output caps). Data crosses as Arrow IPC / ``.npy`` files mapped
read-only (:mod:`.transfer_kernel`); the kernel never unpickles or evaluates anything
the worker produced. The AST pre-check and audit hook in :mod:`.checks` only
make refusals friendly: they are not part of the boundary.
"""

from harness_magic.core.execution.sandbox.backend import (
    CONFINING_LAYERS,
    FILE_CONFINING_LAYERS,
    DEFAULT_TIMEOUT_S,
    SandboxedInterpreter,
    UnconfinedWarning,
    confinement_gap,
    probe_confinement,
)
from harness_magic.core.execution.sandbox.launcher_client import SandboxUnavailableError
from harness_magic.core.execution.sandbox.protocol import RemoteObject

__all__ = [
    "SandboxedInterpreter",
    "SandboxUnavailableError",
    "UnconfinedWarning",
    "probe_confinement",
    "RemoteObject",
    "CONFINING_LAYERS",
    "FILE_CONFINING_LAYERS",
    "confinement_gap",
    "DEFAULT_TIMEOUT_S",
]
